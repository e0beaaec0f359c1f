"""Where ``max_unpool`` and ``pad`` put each element, per axis, in plain Python (no JAX).

Both ops copy: every output element is an input element or a fill. The plans here check the
arguments (raising before any computation) and say, per spatial axis, where the elements go;
:mod:`jaxpool._unpool` and :mod:`jaxpool._pad` turn a plan into broadcasts, selects, strided
pads, interleaves, slices, reversals and concatenations, so that no derivative holds a
scatter or a gather.

Unpooling is the transpose of the max-pool pick: the indices of
``max_pool(..., return_indices=True)`` lie inside their own window, so each window's value
goes to one of its taps, and along each axis the windows are the matching max pool's
(an :class:`~jaxpool.windows.AxisPlan` whose input is the unpooled extent).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from jaxpool import _checks
from jaxpool._memo import hash_once, memoized_plan
from jaxpool.plan import default_stride, spatial_axes
from jaxpool.windows import AxisPlan

# How an unpooling is placed (see choose_unpool_strategy).
UNPOOL_STRATEGIES = ("interleave", "pads")
PAD_MODES = ("constant", "reflect", "replicate", "circular")


def unpool_axis_plan(pooled: int, unpooled: int, kernel: int, stride: int,
                     padding: int) -> AxisPlan:
    """The matching max pool's windows along one axis: window ``q`` of the ``pooled``
    values covers ``[q*stride - padding, q*stride - padding + kernel)`` of the ``unpooled``
    extent (clipped to it); ``divisors`` counts each window's real taps."""
    starts = tuple(q * stride for q in range(pooled))
    stops = tuple(a + kernel for a in starts)
    real = tuple(sum(0 <= a + t - padding < unpooled for t in range(kernel)) for a in starts)
    return AxisPlan(unpooled, pooled, padding, starts, stops, real)


@hash_once
@dataclass(frozen=True)
class UnpoolPlan:
    """A whole unpooling: the pooled input's shape and layout, and per spatial axis the
    matching max pool's windows (``in_size`` the unpooled extent, ``out_size`` the pooled
    one)."""

    input_shape: tuple[int, ...]
    spatial_axes: tuple[int, ...]
    axes: tuple[AxisPlan, ...]

    @property
    def output_shape(self) -> tuple[int, ...]:
        shape = list(self.input_shape)
        for axis, plan in zip(self.spatial_axes, self.axes):
            shape[axis] = plan.in_size
        return tuple(shape)

    @property
    def kernel(self) -> tuple[int, ...]:
        return tuple(p.stops[0] - p.starts[0] for p in self.axes)

    @property
    def stride(self) -> tuple[int, ...]:
        return tuple(p.starts[1] - p.starts[0] if p.out_size > 1 else p.stops[0] - p.starts[0]
                     for p in self.axes)

    @property
    def strategy(self) -> str:
        return choose_unpool_strategy(self)


def choose_unpool_strategy(plan: UnpoolPlan) -> str:
    """How the values reach their taps (the one place this is chosen):

    - ``interleave``: windows do not overlap on any axis (``stride >= kernel``, SegNet's
      2x2): in one pass, each output element takes its window's value (repeated over the
      window's span) where the window's index names it; the derivatives interleave each
      tap's values (where the index names that tap, else zero) along each axis by a stack
      and a reshape, then crop to the output;
    - ``pads``: overlapping windows: each tap's values are spread to their positions by a
      strided pad, and a later window's value replaces an earlier one's (torch's CPU kernel
      writes in input order, so the last window naming an element wins).
    """
    overlap = any(s < k for s, k in zip(plan.stride, plan.kernel))
    return "pads" if overlap else "interleave"


@memoized_plan
def plan_max_unpool(op: str, shape, dtype, ndim: int, kernel_size, stride=None, padding=0,
                    output_size=None, channels_last=False, indices_shape=None,
                    indices_dtype=None) -> UnpoolPlan:
    """torch's ``max_unpool`` arguments and shape rules; ``indices_shape`` /
    ``indices_dtype`` are checked when given (the functions give them, the shape rules
    cannot)."""
    channels_last = _checks.check_channels_last(channels_last)
    kernel = _checks.int_tuple("kernel_size", kernel_size, ndim, minimum=1)
    strides = default_stride(stride, kernel, ndim)
    pads = _checks.int_tuple("padding", padding, ndim, minimum=0)
    _, spatial, _ = _checks.check_input(op, shape, dtype, ndim, channels_last)
    if indices_shape is not None and tuple(indices_shape) != tuple(shape):
        raise ValueError(f"{op}: indices must have x's shape {tuple(shape)} (the values and "
                         f"indices of one max_pool call), got shape {tuple(indices_shape)}")
    if indices_dtype is not None and not np.issubdtype(np.dtype(indices_dtype), np.integer):
        raise TypeError(f"{op}: indices must be an integer array (max_pool's return_indices), "
                        f"got dtype {np.dtype(indices_dtype).name}")
    default = tuple((n - 1) * s - 2 * p + k
                    for n, k, s, p in zip(spatial, kernel, strides, pads))
    sizes = default if output_size is None else _unpool_output_size(
        op, output_size, ndim, default, strides)
    if any(size < 1 for size in sizes):
        raise ValueError(f"{op}: the output extents {sizes} must be >= 1 (input extents "
                         f"{spatial}, kernel_size={kernel_size!r}, stride={stride!r}, "
                         f"padding={padding!r}, output_size={output_size!r})")
    axes = tuple(unpool_axis_plan(n, size, k, s, p)
                 for n, size, k, s, p in zip(spatial, sizes, kernel, strides, pads))
    return UnpoolPlan(tuple(shape), spatial_axes(len(shape), ndim, channels_last), axes)


def _unpool_output_size(op: str, output_size, ndim: int, default: tuple[int, ...],
                        strides: tuple[int, ...]) -> tuple[int, ...]:
    # torch: a sequence of ndim entries, or of ndim + 2 (a whole shape, x.shape of the
    # pooled input) whose last ndim are taken; each strictly within one stride of the
    # default.
    accepted = f"None or a sequence of {ndim} or {ndim + 2} ints (such as the pooled input's shape)"
    if not isinstance(output_size, (tuple, list)):
        if len(getattr(output_size, "shape", ())) != 1:
            raise TypeError(f"{op}: output_size must be {accepted}, got {output_size!r}")
        output_size = list(output_size)
    entries = list(output_size)
    if len(entries) == ndim + 2:
        entries = entries[2:]
    if len(entries) != ndim:
        raise ValueError(f"{op}: output_size must be {accepted}, got {output_size!r} with "
                         f"{len(output_size)} entries")
    sizes = tuple(_checks.as_int("output_size", e, output_size, accepted) for e in entries)
    for d, (size, n, s) in enumerate(zip(sizes, default, strides)):
        if not n - s < size < n + s:
            raise ValueError(f"{op}: invalid output_size {output_size!r}: spatial axis {d} must "
                             f"be strictly between {n - s} and {n + s} (the default "
                             f"(in - 1)*stride - 2*padding + kernel_size is {n})")
    return sizes


# --- pad ----------------------------------------------------------------------------------

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
    op = "pad"
    channels_last = _checks.check_channels_last(channels_last)
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
    return tuple(_checks.as_int("pad", entry, pad, accepted) for entry in pad)


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.number, np.bool_)) and np.ndim(value) == 0


def _pad_value(value) -> float | int | bool:
    if value is None:
        return 0
    if not _is_number(value):
        raise TypeError(f"pad: value must be None or a real number (the constant to fill "
                        f"with), got {value!r}")
    return value.item() if isinstance(value, np.generic) else value
