"""torch's OpInfo catalog, read the same way by every ``test_opinfo*.py`` file.

``torch.testing._internal.common_methods_invocations.op_db`` (it needs ``expecttest``) holds,
for each op, ``sample_inputs`` (calls torch accepts, in the argument forms its tests use)
and ``error_inputs`` (calls torch rejects). Each test file turns them into its own calls
(what an op's call needs differs) and lists where jaxpool deliberately does something else
as ``Difference`` rows, each checked to be a real difference.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Sequence

import collections.abc
import functools

import torch


class _Catalog(collections.abc.Mapping):
    """A mapping read from torch's catalog on first use: importing the catalog takes
    seconds, and every test process collects these files, most without running them."""

    def __init__(self, key: Callable[[Any], Any], names: Iterable[str]):
        self._key, self._names = key, set(names)

    @functools.cached_property
    def _entries(self) -> dict:
        from torch.testing._internal.common_methods_invocations import op_db
        return {self._key(info): info for info in op_db if short_name(info) in self._names}

    def __getitem__(self, key):
        return self._entries[key]

    def __iter__(self):
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def catalog(key: Callable[[Any], Any], names: Iterable[str]) -> collections.abc.Mapping:
    """{key(entry): entry} for the catalog's entries of the ops ``names`` (as in
    ``torch.nn.functional``; every variant of each), read when first used."""
    return _Catalog(key, names)


def short_name(info) -> str:
    """The entry's op name without its ``nn.functional.`` prefix."""
    return info.name.removeprefix("nn.functional.")


def drawn_samples(info, dtype: torch.dtype) -> list:
    """Every sample of ``info``, drawn with a fixed seed (the catalog draws from torch's
    global generator, which is left as it was)."""
    # CPU samples: no accelerator's generator to fork (where torchax is imported it is
    # torch's accelerator, and its device module's get_rng_state takes no device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return list(info.sample_inputs("cpu", dtype))


def drawn_error_inputs(info) -> list:
    """Every error input of ``info`` (an entry without them raises)."""
    return list(info.error_inputs("cpu"))


def as_numpy(value):
    """A tensor as a NumPy copy; anything else unchanged."""
    return value.detach().numpy().copy() if isinstance(value, torch.Tensor) else value


def run(fn: Callable, *args, **kwargs):
    """(result, None), or (None, the exception raised)."""
    try:
        return fn(*args, **kwargs), None
    except Exception as error:  # noqa: BLE001 - what was raised is the result here
        return None, error


def first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


@dataclasses.dataclass(frozen=True)
class Difference:
    """Where jaxpool deliberately differs from torch. ``torch_equivalent`` maps a call to the
    call torch accepts that gives jaxpool's result; None means jaxpool raises ``error``."""

    what: str
    reason: str
    applies: Callable[[Any], bool]
    torch_equivalent: Callable[[Any], Any] | None
    examples: tuple
    error: type = ValueError


def difference_of(call, differences: Sequence[Difference]) -> Difference | None:
    """The first row of ``differences`` that applies to ``call``, or None."""
    return next((d for d in differences if d.applies(call)), None)
