"""Where ``pad`` puts each element, per axis, in plain Python (no JAX).

Padding copies: every output element is an input element or the constant. The plan checks
the arguments as torch's ``F.pad`` does (raising before any computation) and gives each
padded axis its widths; :mod:`jaxpool.padding.kernel` turns it into slices, reversals,
concatenations and selects, so that no derivative holds a scatter or a gather.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from jaxpool.core import checks
from jaxpool.core.memo import hash_once, memoized_plan

PAD_MODES = ("constant", "reflect", "replicate", "circular")


@hash_once
@dataclass(frozen=True)
class PadPlan:
    """``pad``: per padded axis ``(axis, lo, hi)`` (negative: crop), the mode and the
    constant's value."""

    input_shape: tuple[int, ...]
    mode: str
    widths: tuple[tuple[int, int, int], ...]
    # An operand of the compiled program, not part of it: one program serves every value
    # (and a NaN value, unequal to itself, would otherwise never find its program again).
    value: float | int | bool = field(default=0, compare=False)

    @property
    def output_shape(self) -> tuple[int, ...]:
        shape = list(self.input_shape)
        for axis, lo, hi in self.widths:
            shape[axis] += lo + hi
        return tuple(shape)


@memoized_plan
def plan_pad(shape, pad, mode="constant", value=None, channels_last=False) -> PadPlan:
    """torch's ``F.pad`` rules. ``pad`` holds pairs ``(lo, hi)`` from the last axis
    backwards; with ``channels_last`` from the axis before the last (the channels)
    backwards."""
    channels_last = checks.check_channels_last(channels_last)
    if not isinstance(mode, str) or mode not in PAD_MODES:
        raise ValueError(f"pad: mode must be one of {', '.join(map(repr, PAD_MODES))}, "
                         f"got {mode!r}")
    entries = _pad_entries(pad)
    if len(entries) % 2:
        raise ValueError(f"pad: pad must hold pairs (lo, hi) per axis, last axis first: an "
                         f"even number of ints, got {pad!r} with {len(entries)}")
    shape = tuple(int(n) for n in shape)
    rank, pairs = len(shape), len(entries) // 2
    last = rank - 1 - (1 if channels_last else 0)   # the axis the first pair pads
    if mode == "constant":
        value = _pad_value(value)
        if pairs > last + 1:
            where = " before the channels (channels_last)" if channels_last else ""
            raise ValueError(f"pad: {pairs} pairs in pad={pad!r} for x of rank {rank} with "
                             f"{last + 1} axes{where} to pad")
    else:
        if value is not None and not (_is_number(value) and value == 0):
            raise ValueError(f"pad: mode {mode!r} takes no value (only mode 'constant' "
                             f"does), got value={value!r}")
        value = 0
        # [C, *spatial] or [N, C, *spatial]; channels-last moves C, it adds no axis
        if pairs not in (1, 2, 3) or rank not in (pairs + 1, pairs + 2):
            raise ValueError(
                f"pad: mode {mode!r} pads 1, 2 or 3 spatial axes (2, 4 or 6 entries in pad) "
                f"of x of rank spatial + 1 (unbatched) or spatial + 2 (batched), got "
                f"{len(entries)} entries for x of shape {shape}"
                + (" with channels_last" if channels_last else ""))
    widths = tuple((last - i, entries[2 * i], entries[2 * i + 1]) for i in range(pairs))
    if mode in ("reflect", "replicate"):
        batched = rank == pairs + 2
        kept = shape[1:] if batched else shape
        if any(n == 0 for n in kept):
            raise ValueError(f"pad: mode {mode!r} needs non-zero extents on every axis but "
                             f"the batch, got x of shape {shape}")
    for axis, lo, hi in widths:
        n = shape[axis]
        if mode == "reflect" and not (lo < n and hi < n):
            raise ValueError(f"pad: mode 'reflect' needs each pad smaller than its axis's "
                             f"extent, got ({lo}, {hi}) for axis {axis} of extent {n} "
                             f"(x of shape {shape})")
        cropped = n + min(lo, 0) + min(hi, 0)
        if mode == "constant" and cropped < 0:
            raise ValueError(f"pad: ({lo}, {hi}) for axis {axis} of extent {n} crops more "
                             f"than the axis holds (torch crops before it pads)")
        if mode == "circular":
            if not (lo <= n and hi <= n):
                raise ValueError(f"pad: mode 'circular' wraps at most once: each pad must be "
                                 f"at most its axis's extent, got ({lo}, {hi}) for axis "
                                 f"{axis} of extent {n}")
            if max(lo, 0) > cropped or max(hi, 0) > cropped:
                raise ValueError(f"pad: mode 'circular' wraps the cropped axis at most once: "
                                 f"({lo}, {hi}) for axis {axis} of extent {n} leaves "
                                 f"{cropped} elements, fewer than a pad")
        size = n + lo + hi
        if size < 0:
            raise ValueError(f"pad: ({lo}, {hi}) for axis {axis} of extent {n} leaves "
                             f"{size} elements")
    sizes = [shape[axis] + lo + hi for axis, lo, hi in widths]
    if mode in ("reflect", "replicate") and max(sizes) < 1:
        # torch: some padded axis must keep an element (the others may be emptied)
        raise ValueError(f"pad: {pad!r} in mode {mode!r} leaves no element on any padded "
                         f"axis of x of shape {shape}")
    return PadPlan(shape, mode, widths, value)


def _pad_entries(pad) -> tuple[int, ...]:
    accepted = "a tuple or list of ints (lo, hi) per axis, last axis first"
    if not isinstance(pad, (tuple, list)):
        raise TypeError(f"pad: pad must be {accepted}, got {pad!r}")
    return tuple(checks.as_int("pad", entry, pad, accepted) for entry in pad)


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.number, np.bool_)) and np.ndim(value) == 0


def _pad_value(value) -> float | int | bool:
    if value is None:
        return 0
    if not _is_number(value):
        raise TypeError(f"pad: value must be None or a real number (the constant to fill "
                        f"with), got {value!r}")
    return value.item() if isinstance(value, np.generic) else value
