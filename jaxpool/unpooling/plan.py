"""Where ``max_unpool`` puts each element, per axis, in plain Python (no JAX).

Unpooling copies: every output element is an input element or a zero. The plan checks the
arguments (raising before any computation) and says, per spatial axis, where the elements
go; :mod:`jaxpool.unpooling.kernel` turns it into broadcasts, selects, strided pads and
interleaves, so that no derivative holds a scatter or a gather.

Unpooling is the transpose of the max-pool pick: the indices of
``max_pool(..., return_indices=True)`` lie inside their own window, so each window's value
goes to one of its taps, and along each axis the windows are the matching max pool's
(an :class:`~jaxpool.pooling.windows.AxisPlan` whose input is the unpooled extent).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jaxpool.core import checks
from jaxpool.core.memo import hash_once, memoized_plan
from jaxpool.pooling.plan import default_stride, spatial_axes
from jaxpool.pooling.windows import AxisPlan

# How an unpooling is placed (see choose_unpool_strategy).
UNPOOL_STRATEGIES = ("interleave", "pads")


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
    channels_last = checks.check_channels_last(channels_last)
    kernel = checks.int_tuple("kernel_size", kernel_size, ndim, minimum=1)
    strides = default_stride(stride, kernel, ndim)
    pads = checks.int_tuple("padding", padding, ndim, minimum=0)
    _, spatial, _ = checks.check_input(op, shape, dtype, ndim, channels_last)
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
    sizes = tuple(checks.as_int("output_size", e, output_size, accepted) for e in entries)
    for d, (size, n, s) in enumerate(zip(sizes, default, strides)):
        if not n - s < size < n + s:
            raise ValueError(f"{op}: invalid output_size {output_size!r}: spatial axis {d} must "
                             f"be strictly between {n - s} and {n + s} (the default "
                             f"(in - 1)*stride - 2*padding + kernel_size is {n})")
    return sizes
