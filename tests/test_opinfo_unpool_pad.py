"""torch's own test inputs (``opinfo_catalog``) for max_unpool1d/2d/3d (and their ``grad``
variants) and for ``pad`` in every mode, run through jaxpool (see test_opinfo.py for the
pooling ops).

Every sample must give torch's values bit for bit (both ops copy); every error input must
raise a ValueError or TypeError. ``EXPECTED_DIFFERENCES`` lists where jaxpool deliberately
does something else, with the reason; each row is checked to be a real difference.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxpool
from opinfo_catalog import (Difference, as_numpy, catalog, difference_of, drawn_error_inputs,
                            drawn_samples, run, short_name)

pytestmark = pytest.mark.usefixtures("x64")

# (name, variant) -> OpInfo
OPINFO = catalog(lambda info: (short_name(info), info.variant_test_name),
                 ("max_unpool1d", "max_unpool2d", "max_unpool3d", "pad"))
# Written out so that collecting the tests does not read the catalog (test_the_catalog_has_
# every_variant checks them against it).
VARIANTS = sorted([(f"max_unpool{d}d", v) for d in (1, 2, 3) for v in ("", "grad")]
                  + [("pad", m) for m in ("circular", "constant", "reflect", "replicate",
                                          "replicate_negative")])
WITH_ERROR_INPUTS = [k for k in VARIANTS if k[0] != "pad" and k[1] == ""]
# Each max_unpool sample compiles a program of its own: the default run takes every
# SPREAD-th (a prime, so the selection still spans the shapes and arguments the catalog
# varies), every pad sample but every other constant one (the selection still holds every
# input shape, pad and value of the constant samples:
# test_the_pad_spread_holds_every_shape_and_argument), and every sample under -m slow.
SPREAD = {"": 61, "grad": 17, "constant": 2}


@dataclasses.dataclass(frozen=True, repr=False)
class Call:
    op: str
    x: np.ndarray
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    label: str = ""

    def __repr__(self) -> str:
        return f"{self.label or self.op}: x{self.x.shape}, args={self.args!r}, kwargs={self.kwargs!r}"


def _arrays(values, convert):
    return tuple(convert(v) if isinstance(v, (np.ndarray, torch.Tensor)) else v for v in values)


def _torch(call: Call):
    args = _arrays(call.args, lambda v: torch.from_numpy(np.asarray(v)))
    return run(getattr(F, call.op), torch.from_numpy(call.x), *args, **call.kwargs)


def _jaxpool(call: Call):
    return run(getattr(jaxpool, call.op), call.x, *_arrays(call.args, np.asarray),
               **call.kwargs)


# --- the expected differences ---------------------------------------------------------------

def _unpool_window_applies(call: Call) -> bool:
    return call.label.startswith("index outside its window")


def _zero_stride_applies(call: Call) -> bool:
    stride = call.kwargs.get("stride")
    return call.op.startswith("max_unpool") and stride is not None and 0 in np.atleast_1d(stride)


def _zero_stride_as_kernel(call: Call) -> Call:
    return dataclasses.replace(call, kwargs={**call.kwargs, "stride": call.kwargs["kernel_size"]})


def _circular_past_the_crop_applies(call: Call) -> bool:
    if call.op != "pad" or (call.args[1:2] or (call.kwargs.get("mode"),))[0] != "circular":
        return False
    pad = call.args[0]
    for i in range(len(pad) // 2):
        n, lo, hi = call.x.shape[-1 - i], pad[2 * i], pad[2 * i + 1]
        cropped = n + min(lo, 0) + min(hi, 0)
        if max(lo, 0) > cropped or max(hi, 0) > cropped:
            return True
    return False


_X = np.arange(16.0).reshape(1, 2, 2, 4)
_POOLED, _INDICES = (t.numpy() for t in F.max_pool2d(torch.from_numpy(_X), 2, return_indices=True))
_MOVED = _INDICES.copy()
_MOVED[0, 1, 0, 0] = 0  # window (0, 0) of a 2x4 plane holds 0, 1, 4, 5: 0 is in it...
_MOVED[0, 1, 0, 1] = 0  # ...window (0, 1) holds 2, 3, 6, 7: 0 is not

EXPECTED_DIFFERENCES = (
    Difference(
        "max_unpool: an index outside its own window raises a ValueError (eagerly; under jit "
        "its value is dropped); torch writes it anywhere in the plane",
        "unpooling is computed as the transpose of the max-pool pick, without a scatter: "
        "each value can only reach the taps of its own window, which is where the indices of "
        "the matching max_pool always lie",
        _unpool_window_applies, None,
        (Call("max_unpool2d", _POOLED, (_MOVED, 2), label="index outside its window"),)),
    Difference(
        "max_unpool: stride 0 means kernel_size (torch computes its default size with a "
        "stride of 0 and then rejects the indices)",
        "the library's convention for every pooling op: stride None or 0 is the default",
        _zero_stride_applies, _zero_stride_as_kernel,
        (Call("max_unpool2d", _POOLED, (_INDICES,), {"kernel_size": 2, "stride": 0}),)),
    Difference(
        "pad circular: a wrap longer than the cropped axis raises a ValueError; torch returns "
        "an empty tensor, uninitialised memory, or raises, depending on how its in-place "
        "copies overlap",
        "the values torch returns there are not defined",
        _circular_past_the_crop_applies, None,
        (Call("pad", np.arange(2.0).reshape(1, 1, 2), ((-2, 1), "circular")),
         Call("pad", np.arange(1.0).reshape(1, 1, 1), ((-2, 1), "circular")))),
)


def _difference(call: Call) -> Difference | None:
    return difference_of(call, EXPECTED_DIFFERENCES)


def _mismatch(call: Call) -> str | None:
    """Why jaxpool does not do what torch does (or what the table says instead), or None."""
    difference = _difference(call)
    actual, error = _jaxpool(call)
    if difference is not None and difference.torch_equivalent is None:
        if isinstance(error, difference.error):
            return None
        return f"{'returned' if error is None else repr(error)}; expected {difference.error}"
    reference = call if difference is None else difference.torch_equivalent(call)
    expected, torch_error = _torch(reference)
    if torch_error is not None:
        if isinstance(error, (ValueError, TypeError)):
            return None
        return f"{'returned' if error is None else repr(error)}; torch raised {torch_error!r}"
    if error is not None:
        return f"raised {error!r}"
    mine, theirs = np.asarray(actual), expected.numpy()
    if mine.shape != theirs.shape or mine.dtype != theirs.dtype:
        return f"{mine.shape} {mine.dtype}, torch {theirs.shape} {theirs.dtype}"
    if not np.array_equal(np.ascontiguousarray(mine).view(np.uint8),
                          np.ascontiguousarray(theirs).view(np.uint8)):
        return f"{int((mine != theirs).sum())} of {mine.size} elements differ (bit for bit)"
    return None


def _check_all(calls) -> None:
    failures = [f"{call}\n    {why}" for call in calls if (why := _mismatch(call)) is not None]
    assert not failures, f"{len(failures)} of {len(calls)} calls differ from torch:\n" + \
        "\n".join(failures[:15])


@functools.lru_cache(maxsize=None)
def samples(key) -> tuple[Call, ...]:
    op, variant = key
    return tuple(Call(op, as_numpy(s.input), tuple(map(as_numpy, s.args)), dict(s.kwargs),
                      f"{op}[{variant}] sample {i}")
                 for i, s in enumerate(drawn_samples(OPINFO[key], torch.float64)))


def error_inputs(key) -> tuple[Call, ...]:
    op, _ = key
    if OPINFO[key].error_inputs_func is None:
        return ()
    return tuple(Call(op, as_numpy(e.sample_input.input),
                      tuple(map(as_numpy, e.sample_input.args)), dict(e.sample_input.kwargs),
                      f"{op} error input {i} (torch: {e.error_regex!r})")
                 for i, e in enumerate(drawn_error_inputs(OPINFO[key])))


def test_the_catalog_has_every_variant():
    assert sorted(OPINFO) == VARIANTS
    assert [k for k in VARIANTS if OPINFO[k].error_inputs_func] == WITH_ERROR_INPUTS


def _spread(key) -> tuple[Call, ...]:
    return samples(key)[::SPREAD.get(key[1], 1)]


@pytest.mark.parametrize("key", [k for k in VARIANTS if k[0] == "pad"],
                         ids=lambda k: f"{k[0]}[{k[1]}]")
def test_the_pad_spread_holds_every_shape_and_argument(key):
    def features(call: Call) -> set:
        return {("input shape", call.x.shape)} | {
            (f"argument {i}", repr(a)) for i, a in enumerate(call.args)} | {
            (k, repr(v)) for k, v in call.kwargs.items()}

    every = set().union(*map(features, samples(key)))
    assert every <= set().union(*map(features, _spread(key)))


@pytest.mark.parametrize("key", VARIANTS, ids=lambda k: f"{k[0]}[{k[1]}]")
def test_samples_spread(key):
    _check_all(_spread(key))


@pytest.mark.slow
@pytest.mark.parametrize("key", VARIANTS, ids=lambda k: f"{k[0]}[{k[1]}]")
def test_samples_all(key):
    _check_all(samples(key))


@pytest.mark.parametrize("key", WITH_ERROR_INPUTS,
                         ids=lambda k: f"{k[0]}[{k[1]}]")
def test_error_inputs(key):
    _check_all(error_inputs(key))


@pytest.mark.parametrize("difference", EXPECTED_DIFFERENCES, ids=lambda d: d.what[:40])
def test_expected_differences_are_real(difference):
    """On each example exactly one side raises, and jaxpool does what the table says."""
    for call in difference.examples:
        assert _difference(call) is difference, call
        _, torch_error = _torch(call)
        _, jaxpool_error = _jaxpool(call)
        assert (torch_error is None) != (jaxpool_error is None), (
            f"{call}: not a difference (torch: {torch_error!r}, jaxpool: {jaxpool_error!r})")
        assert _mismatch(call) is None, (call, _mismatch(call))
