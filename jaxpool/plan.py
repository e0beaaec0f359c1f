"""From an op's arguments and its input's static shape to per-axis plans, in plain Python.

Checks every argument (raising before any computation) and builds one
:class:`~jaxpool.windows.AxisPlan` per spatial axis. :mod:`jaxpool.shapes` reads output
shapes from these plans; :mod:`jaxpool.ops` computes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from jaxpool import _checks
from jaxpool.windows import AxisPlan, adaptive_plan, avg_pool_out_size, avg_pool_plan


@dataclass(frozen=True)
class PoolPlan:
    """A whole op: input layout, one plan per spatial axis, and the divisor rule."""

    input_shape: tuple[int, ...]
    spatial_axes: tuple[int, ...]
    axes: tuple[AxisPlan, ...]
    divisor_override: int | None = None

    @property
    def output_shape(self) -> tuple[int, ...]:
        shape = list(self.input_shape)
        for axis, plan in zip(self.spatial_axes, self.axes):
            shape[axis] = plan.out_size
        return tuple(shape)

    @property
    def strategies(self) -> tuple[str, ...]:
        """Each spatial axis's values strategy (see :func:`~jaxpool.windows.choose_strategy`)."""
        return tuple(p.strategy(*where) for p, where in zip(self.axes, self._placement()))

    @property
    def tangents(self) -> tuple[str, ...]:
        """Each spatial axis's derivative rule (see :func:`~jaxpool.windows.choose_tangent`)."""
        return tuple(p.tangent(*where) for p, where in zip(self.axes, self._placement()))

    def _placement(self) -> list[tuple[bool, int]]:
        """Per spatial axis: whether it is innermost, and the elements after it with later
        spatial axes at their pooled extent."""
        out = self.output_shape
        last = len(out) - 1
        return [(axis == last, math.prod(out[axis + 1:])) for axis in self.spatial_axes]


def _spatial_axes(rank: int, ndim: int, channels_last: bool) -> tuple[int, ...]:
    first = rank - ndim - (1 if channels_last else 0)
    return tuple(range(first, first + ndim))


def plan_avg_pool(op: str, shape, dtype, ndim: int, kernel_size, stride=None, padding=0,
                  ceil_mode=False, count_include_pad=True, divisor_override=None,
                  channels_last=False) -> PoolPlan:
    channels_last = _checks.check_channels_last(channels_last)
    kernel = _checks.int_tuple("kernel_size", kernel_size, ndim, minimum=1)
    if stride is None:
        stride = 0
    strides = _checks.int_tuple("stride", stride, ndim, minimum=0)
    strides = tuple(s if s else k for s, k in zip(strides, kernel))
    pads = _checks.int_tuple("padding", padding, ndim, minimum=0)
    ceil_mode = _checks.check_bool("ceil_mode", ceil_mode)
    count_include_pad = _checks.check_bool("count_include_pad", count_include_pad)
    if divisor_override is not None:
        if not _checks.is_int(divisor_override):
            raise TypeError(f"divisor_override must be None or a non-zero int, "
                            f"got {divisor_override!r}")
        if divisor_override == 0 or abs(divisor_override) > _checks.INT_MAX:
            raise ValueError(f"divisor_override must be None or a non-zero int within "
                             f"+-{_checks.INT_MAX}, got {divisor_override!r}")
        divisor_override = int(divisor_override)
    for k, p in zip(kernel, pads):
        if p > k // 2:
            raise ValueError(f"padding must be at most half the kernel (kernel_size // 2) on "
                             f"each axis, got padding={padding!r} with "
                             f"kernel_size={kernel_size!r}")
    _, spatial, _ = _checks.check_input(op, shape, dtype, ndim, channels_last)
    for n, k, s, p in zip(spatial, kernel, strides, pads):
        if n + 2 * p < k or avg_pool_out_size(n, k, s, p, ceil_mode) < 1:
            raise ValueError(f"kernel_size={kernel_size!r} is larger than the padded input: "
                             f"spatial extents {spatial} with padding={padding!r}; use a "
                             f"kernel no larger than each extent plus twice its padding")
    axes = tuple(avg_pool_plan(n, k, s, p, ceil_mode, count_include_pad)
                 for n, k, s, p in zip(spatial, kernel, strides, pads))
    return PoolPlan(tuple(shape), _spatial_axes(len(shape), ndim, channels_last), axes,
                    divisor_override)


def plan_adaptive(op: str, shape, dtype, ndim: int, output_size,
                  channels_last=False) -> PoolPlan:
    channels_last = _checks.check_channels_last(channels_last)
    sizes = _checks.int_tuple("output_size", output_size, ndim, minimum=1, allow_none=True)
    _, spatial, _ = _checks.check_input(op, shape, dtype, ndim, channels_last)
    sizes = tuple(n if k is None else k for n, k in zip(spatial, sizes))
    axes = tuple(adaptive_plan(n, k) for n, k in zip(spatial, sizes))
    return PoolPlan(tuple(shape), _spatial_axes(len(shape), ndim, channels_last), axes)


def plan_global(op: str, shape, dtype, channels_last=False) -> PoolPlan:
    """Global average pooling of a rank-4 input: one window per channel."""
    channels_last = _checks.check_channels_last(channels_last)
    _, spatial, _ = _checks.check_input(op, shape, dtype, 2, channels_last,
                                        batched_only=True)
    axes = tuple(adaptive_plan(n, 1) for n in spatial)
    return PoolPlan(tuple(shape), _spatial_axes(len(shape), 2, channels_last), axes)
