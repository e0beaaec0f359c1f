"""From an op's arguments and its input's static shape to per-axis plans, in plain Python.

Checks every argument (raising before any computation) and builds one
:class:`~jaxpool.pooling.windows.AxisPlan` per spatial axis. :mod:`jaxpool.shapes` reads output
shapes from these plans; :mod:`jaxpool.pooling.functions` computes them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from jaxpool import strategy_table
from jaxpool.core import checks, dtypes
from jaxpool.core.memo import hash_once, memoized_plan
from jaxpool.pooling.windows import (AxisPlan, adaptive_plan, avg_pool_out_size, avg_pool_plan,
                             max_pool_plan)


@hash_once
@dataclass(frozen=True)
class PoolPlan:
    """A whole op: input layout, one plan per spatial axis, and the divisor rule.

    ``elementwise_cotangent``: the pooled sums feed an elementwise chain inside the op
    (LP pooling's power and root), which reverse mode runs on the cotangent before the
    pooling's own transpose (see :func:`~jaxpool.pooling.windows.choose_tangent`). ``backend``:
    whose strategies the op takes (:mod:`jaxpool.strategy_table`)."""

    input_shape: tuple[int, ...]
    spatial_axes: tuple[int, ...]
    axes: tuple[AxisPlan, ...]
    divisor_override: int | None = None
    elementwise_cotangent: bool = False
    backend: str = "cpu"

    @property
    def output_shape(self) -> tuple[int, ...]:
        return output_shape(self.input_shape, self.spatial_axes, self.axes)

    @property
    def strategies(self) -> tuple[str, ...]:
        """Each spatial axis's values strategy (see :func:`~jaxpool.pooling.windows.choose_strategy`)."""
        return tuple(p.strategy(*where, backend=self.backend)
                     for p, where in zip(self.axes, self._placement()))

    @property
    def tangents(self) -> tuple[str, ...]:
        """Each spatial axis's derivative rule (see :func:`~jaxpool.pooling.windows.choose_tangent`)."""
        return tuple(p.tangent(*where, elementwise_cotangent=self.elementwise_cotangent,
                               backend=self.backend)
                     for p, where in zip(self.axes, self._placement()))

    def _placement(self) -> list[tuple[bool, int]]:
        """Per spatial axis: whether it is innermost, and the elements after it with later
        spatial axes at their pooled extent."""
        out = self.output_shape
        last = len(out) - 1
        return [(axis == last, math.prod(out[axis + 1:])) for axis in self.spatial_axes]


def output_shape(input_shape: tuple[int, ...], spatial_axes: tuple[int, ...], axes) -> tuple[int, ...]:
    """``input_shape`` with each spatial axis at its per-axis plan's ``out_size``."""
    shape = list(input_shape)
    for axis, plan in zip(spatial_axes, axes):
        shape[axis] = plan.out_size
    return tuple(shape)


def spatial_axes(rank: int, ndim: int, channels_last: bool) -> tuple[int, ...]:
    first = rank - ndim - (1 if channels_last else 0)
    return tuple(range(first, first + ndim))


@memoized_plan
def plan_avg_pool(op: str, shape, dtype, ndim: int, kernel_size, stride=None, padding=0,
                  ceil_mode=False, count_include_pad=True, divisor_override=None,
                  channels_last=False, backend="cpu") -> PoolPlan:
    """torch's avg_pool windows, summed by ``backend``'s strategies."""
    channels_last = checks.check_channels_last(channels_last)
    backend = strategy_table.check_backend(backend)
    kernel = checks.int_tuple("kernel_size", kernel_size, ndim, minimum=1)
    strides = default_stride(stride, kernel, ndim)
    pads = checks.int_tuple("padding", padding, ndim, minimum=0)
    ceil_mode = checks.check_bool("ceil_mode", ceil_mode)
    count_include_pad = checks.check_bool("count_include_pad", count_include_pad)
    if divisor_override is not None:
        divisor_override = checks.as_int("divisor_override", divisor_override,
                                          divisor_override, "None or a non-zero int")
        if divisor_override == 0 or abs(divisor_override) > dtypes.INT32_MAX:
            raise ValueError(f"divisor_override must be None or a non-zero int within "
                             f"+-{dtypes.INT32_MAX}, got {divisor_override!r}")
    _check_padding(kernel, pads, kernel_size, padding)
    _, spatial, _ = checks.check_input(op, shape, dtype, ndim, channels_last)
    for n, k, s, p in zip(spatial, kernel, strides, pads):
        if n + 2 * p < k or avg_pool_out_size(n, k, s, p, ceil_mode) < 1:
            raise ValueError(f"kernel_size={kernel_size!r} is larger than the padded input: "
                             f"spatial extents {spatial} with padding={padding!r}; use a "
                             f"kernel no larger than each extent plus twice its padding")
    axes = tuple(avg_pool_plan(n, k, s, p, ceil_mode, count_include_pad)
                 for n, k, s, p in zip(spatial, kernel, strides, pads))
    return PoolPlan(tuple(shape), spatial_axes(len(shape), ndim, channels_last), axes,
                    divisor_override, backend=backend)


@memoized_plan
def plan_adaptive(op: str, shape, dtype, ndim: int, output_size,
                  channels_last=False, backend="cpu") -> PoolPlan:
    """torch's adaptive windows (for average and max pooling), summed by ``backend``'s
    strategies."""
    channels_last = checks.check_channels_last(channels_last)
    backend = strategy_table.check_backend(backend)
    # torch repeats no 1-tuple here: adaptive_avg_pool2d(x, (3,)) raises.
    sizes = checks.int_tuple("output_size", output_size, ndim, minimum=1, allow_none=True,
                              repeat_single=False)
    _, spatial, _ = checks.check_input(op, shape, dtype, ndim, channels_last)
    sizes = tuple(n if k is None else k for n, k in zip(spatial, sizes))
    axes = tuple(adaptive_plan(n, k) for n, k in zip(spatial, sizes))
    return PoolPlan(tuple(shape), spatial_axes(len(shape), ndim, channels_last), axes,
                    backend=backend)


@memoized_plan
def plan_global(op: str, shape, dtype, channels_last=False) -> PoolPlan:
    """Global average pooling of a rank-4 input: one window per channel."""
    channels_last = checks.check_channels_last(channels_last)
    _, spatial, _ = checks.check_input(op, shape, dtype, 2, channels_last,
                                        batched_only=True)
    axes = tuple(adaptive_plan(n, 1) for n in spatial)
    return PoolPlan(tuple(shape), spatial_axes(len(shape), 2, channels_last), axes)


@memoized_plan
def plan_max_pool(op: str, shape, dtype, ndim: int, kernel_size, stride=None, padding=0,
                  dilation=1, ceil_mode=False, channels_last=False) -> PoolPlan:
    """torch's max_pool windows: ``dilation`` apart, padding never selected."""
    channels_last = checks.check_channels_last(channels_last)
    kernel = checks.int_tuple("kernel_size", kernel_size, ndim, minimum=1)
    strides = default_stride(stride, kernel, ndim)
    pads = checks.int_tuple("padding", padding, ndim, minimum=0)
    dilations = checks.int_tuple("dilation", dilation, ndim, minimum=1)
    ceil_mode = checks.check_bool("ceil_mode", ceil_mode)
    _check_padding(kernel, pads, kernel_size, padding)
    _, spatial, _ = checks.check_input(op, shape, dtype, ndim, channels_last)
    for n, k, s, p, d in zip(spatial, kernel, strides, pads, dilations):
        if avg_pool_out_size(n, k, s, p, ceil_mode, d) < 1:
            raise ValueError(f"kernel_size={kernel_size!r} with dilation={dilation!r} spans "
                             f"more than the padded input: spatial extents {spatial} with "
                             f"padding={padding!r}; each axis needs "
                             f"dilation*(kernel_size-1) + 1 <= extent + 2*padding")
    axes = tuple(max_pool_plan(n, k, s, p, d, ceil_mode)
                 for n, k, s, p, d in zip(spatial, kernel, strides, pads, dilations))
    return PoolPlan(tuple(shape), spatial_axes(len(shape), ndim, channels_last), axes)


@memoized_plan
def plan_lp_pool(op: str, shape, dtype, ndim: int, norm_type, kernel_size, stride=None,
                 ceil_mode=False, channels_last=False, backend="cpu") -> PoolPlan:
    """torch's lp_pool windows: average pooling's, with no padding."""
    check_norm_type(norm_type)
    plan = plan_avg_pool(op, shape, dtype, ndim, kernel_size, stride, 0, ceil_mode, True,
                         None, channels_last, backend)
    return dataclasses.replace(plan, elementwise_cotangent=True)


def check_norm_type(norm_type) -> float:
    """``lp_pool``'s ``p``: any non-zero real, ``inf`` and ``-inf`` included (max pooling of
    ``|x|``, and its negative of ``-|x|``, as torch)."""
    if isinstance(norm_type, (bool, np.bool_)) or not isinstance(norm_type, (int, float,
                                                                             np.number)):
        raise TypeError(f"norm_type must be a non-zero real number (inf allowed), "
                        f"got {norm_type!r}")
    if norm_type == 0 or math.isnan(norm_type):
        raise ValueError(f"norm_type must be a non-zero real number (inf allowed), "
                         f"got {norm_type!r}: the result is the 1/norm_type power")
    return float(norm_type)


def default_stride(stride, kernel: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    """``stride`` None, 0 or empty means ``kernel_size``."""
    if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0):
        stride = 0
    strides = checks.int_tuple("stride", stride, ndim, minimum=0)
    return tuple(s if s else k for s, k in zip(strides, kernel))


def _check_padding(kernel, pads, kernel_size, padding) -> None:
    # torch's rule for every pooling op, dilated or not: half the kernel, not of its span.
    for k, p in zip(kernel, pads):
        if p > k // 2:
            raise ValueError(f"padding must be at most half the kernel (kernel_size // 2) on "
                             f"each axis, got padding={padding!r} with "
                             f"kernel_size={kernel_size!r}")
