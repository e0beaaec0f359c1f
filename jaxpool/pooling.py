"""The pooling functions: torch.nn.functional's semantics, computed per axis.

Layout: channels-first by default (``[B, C, *spatial]`` or unbatched ``[C, *spatial]``, as
torch); ``channels_last=True`` takes and returns ``[B, *spatial, C]`` (or ``[*spatial, C]``).

Every function checks its arguments in plain Python (:mod:`jaxpool.plan`), then runs one
compiled program per plan, input shape and dtype: called eagerly (and differentiated
eagerly) it is compiled once and reused; under an outer ``jax.jit`` it is a nested call
that XLA inlines, so the compiled program is the same.
"""

from __future__ import annotations

import functools
import math
from typing import Literal, Sequence, Union, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxpool import _axis, _checks, _halo, _select, halo_jit
from jaxpool.strategy_table import current_backend
from jaxpool.plan import (PoolPlan, _spatial_axes, check_norm_type, plan_adaptive,
                          plan_avg_pool, plan_global, plan_lp_pool, plan_max_pool)

Size = Union[int, Sequence[int]]
"""An int for every spatial axis, or one entry per axis (a 1-sequence is repeated)."""
AxisNames = Union[Sequence[Union[str, None]], None]
"""Inside ``jax.shard_map``: one mesh axis name per spatial axis, None where unsharded."""
OutputSize = Union[int, None, Sequence[Union[int, None]]]
"""An int for every spatial axis, or exactly one entry per axis; ``None`` keeps that
axis's extent."""


# --- the compiled programs: one per plan (static, hashable), shape and dtype ------------

def _compute_dtype(dtype):
    # Half precision accumulates in float32 and rounds once at the end, as torch on the CPU.
    return jnp.float32 if dtype in (jnp.float16, jnp.bfloat16) else dtype


@functools.partial(jax.jit, static_argnums=0)
def _mean(plan: PoolPlan, x: jax.Array) -> jax.Array:
    dtype = x.dtype
    y = _axis.window_sums(x.astype(_compute_dtype(dtype)), plan)
    return (y / _divisor(plan, y.ndim, y.dtype)).astype(dtype)


def _divisor(plan: PoolPlan, rank: int, dtype):
    if plan.divisor_override is not None:
        return jnp.asarray(plan.divisor_override, dtype)
    divisor = functools.reduce(np.multiply.outer,
                               [np.asarray(p.divisors, np.float64) for p in plan.axes])
    shape = [1] * rank
    for axis, axis_plan in zip(plan.spatial_axes, plan.axes):
        shape[axis] = axis_plan.out_size
    return jnp.asarray(divisor.reshape(shape), dtype)


@functools.partial(jax.jit, static_argnums=(0, 2))
def _max(plan: PoolPlan, x: jax.Array, return_indices: bool):
    values, indices = _select.window_max(x, plan, return_indices)
    return (values, indices) if return_indices else values


@functools.partial(jax.jit, static_argnums=(0, 2))
def _power_mean(plan: PoolPlan, x: jax.Array, norm_type: float) -> jax.Array:
    # torch: avg_pool(x**p) * prod(kernel), its sign times relu of its magnitude, ** (1/p).
    dtype = x.dtype
    y = x.astype(_compute_dtype(dtype))
    power = int(norm_type) if float(norm_type).is_integer() else norm_type
    mean = _mean(plan, y ** power)
    kernel = math.prod(p.stops[0] - p.starts[0] for p in plan.axes)
    total = jnp.sign(mean) * jax.nn.relu(jnp.abs(mean)) * kernel
    return (total ** (1.0 / norm_type)).astype(dtype)


@functools.partial(jax.jit, static_argnums=0)
def _global_mean(plan: PoolPlan, x: jax.Array) -> jax.Array:
    dtype = x.dtype
    total = x.astype(_compute_dtype(dtype)).sum(axis=plan.spatial_axes)
    return (total / (plan.axes[0].in_size * plan.axes[1].in_size)).astype(dtype)


def _static(op: str, x: ArrayLike):
    """The input as something with a static ``shape`` and ``dtype``, without converting it
    (a conversion could change the dtype before the checks see it)."""
    _checks.check_array(op, x)
    return x if hasattr(x, "shape") and hasattr(x, "dtype") else np.asarray(x)


def _avg_pool(op, ndim, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override, channels_last, axis_names=None) -> jax.Array:
    x = _static(op, x)
    plan = plan_avg_pool(op, _shape(op, x, ndim, channels_last, axis_names), x.dtype, ndim,
                         kernel_size, stride, padding, ceil_mode, count_include_pad,
                         divisor_override, channels_last, current_backend())
    if axis_names is None and halo_jit.active(x):
        return halo_jit.call(_avg_pool, (x,), plan.spatial_axes, before=(op, ndim), after=(
            kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
            channels_last))
    return _sharded(_mean, plan, _checks.as_jax(x), axis_names)


def _adaptive_avg_pool(op, ndim, x, output_size, channels_last, axis_names=None) -> jax.Array:
    x = _static(op, x)
    plan = plan_adaptive(op, _shape(op, x, ndim, channels_last, axis_names), x.dtype, ndim,
                         output_size, channels_last, current_backend())
    if axis_names is None and halo_jit.active(x):
        return halo_jit.call(_adaptive_avg_pool, (x,), plan.spatial_axes, before=(op, ndim),
                             after=(output_size, channels_last))
    return _sharded(_mean, plan, _checks.as_jax(x), axis_names)


def _max_pool(op, ndim, x, kernel_size, stride, padding, dilation, ceil_mode,
              return_indices, channels_last, axis_names=None):
    x = _static(op, x)
    plan = plan_max_pool(op, _shape(op, x, ndim, channels_last, axis_names), x.dtype, ndim,
                         kernel_size, stride, padding, dilation, ceil_mode, channels_last)
    if axis_names is None and halo_jit.active(x):
        return halo_jit.call(_max_pool, (x,), plan.spatial_axes, before=(op, ndim), after=(
            kernel_size, stride, padding, dilation, ceil_mode, return_indices, channels_last),
            single=not return_indices)
    return _sharded_max(plan, _checks.as_jax(x),
                        _checks.check_bool("return_indices", return_indices), axis_names)


def _adaptive_max_pool(op, ndim, x, output_size, return_indices, channels_last,
                       axis_names=None):
    x = _static(op, x)
    plan = plan_adaptive(op, _shape(op, x, ndim, channels_last, axis_names), x.dtype, ndim,
                         output_size, channels_last)
    if axis_names is None and halo_jit.active(x):
        return halo_jit.call(_adaptive_max_pool, (x,), plan.spatial_axes, before=(op, ndim),
                             after=(output_size, return_indices, channels_last),
                             single=not return_indices)
    return _sharded_max(plan, _checks.as_jax(x),
                        _checks.check_bool("return_indices", return_indices), axis_names)


def _lp_pool(op, ndim, x, norm_type, kernel_size, stride, ceil_mode, channels_last,
             axis_names=None):
    x = _static(op, x)
    norm_type = check_norm_type(norm_type)
    shape = _shape(op, x, ndim, channels_last, axis_names)
    if axis_names is None and halo_jit.active(x):
        plan_lp_pool(op, shape, x.dtype, ndim, norm_type, kernel_size, stride, ceil_mode,
                     channels_last, current_backend())  # the checks, before the primitive
        return halo_jit.call(_lp_pool, (x,), _spatial_axes(len(shape), ndim, channels_last),
                             before=(op, ndim), after=(norm_type, kernel_size, stride,
                                                       ceil_mode, channels_last))
    if math.isinf(norm_type):
        # torch: max pooling of |x| (inf), or minus max pooling of -|x| (-inf).
        plan = plan_max_pool(op, shape, x.dtype, ndim, kernel_size, stride, 0, 1,
                             ceil_mode, channels_last)
        x = _checks.as_jax(x)
        # |x| with torch's derivative, sign(x): 0 at a zero (jnp.abs's is 1 there)
        magnitude = x * jnp.sign(x)
        return (_sharded_max(plan, magnitude, False, axis_names) if norm_type > 0
                else -_sharded_max(plan, -magnitude, False, axis_names))
    plan = plan_lp_pool(op, shape, x.dtype, ndim, norm_type, kernel_size, stride,
                        ceil_mode, channels_last, current_backend())
    return _sharded(lambda p, v: _power_mean(p, v, norm_type), plan, _checks.as_jax(x),
                    axis_names)


# --- spatially sharded inputs inside shard_map: the halo exchange (jaxpool._halo) ---------

def _shape(op, x, ndim, channels_last, axis_names):
    """``x``'s shape; with ``axis_names`` (per-device code), the unsharded array's."""
    return x.shape if axis_names is None else _halo.pool_shape(op, x.shape, ndim,
                                                              channels_last, axis_names)


def _sharded(fn, plan, x, axis_names):
    return fn(plan, x) if axis_names is None else _halo.pool(fn, plan, x, axis_names)


def _sharded_max(plan, x, return_indices, axis_names):
    if axis_names is None:
        return _max(plan, x, return_indices)
    return _halo.pool(lambda p, v: _max(p, v, return_indices), plan, x, axis_names,
                      indices=return_indices, reduce="max")


# --- the public functions ---------------------------------------------------------------

def avg_pool1d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None, *, channels_last: bool = False,
        axis_names: AxisNames = None
               ) -> jax.Array:
    """1d average pooling, as ``torch.nn.functional.avg_pool1d`` (which lacks ``divisor_override``).

    Args:
      x: ``[B, C, L]`` or ``[C, L]``;
        with ``channels_last``, ``[B, L, C]`` or ``[L, C]``.
      kernel_size, stride, padding: an int or one per spatial axis. ``stride`` None, 0 or
        empty means ``kernel_size``; ``padding`` (zeros) is at most ``kernel_size // 2``.
      ceil_mode: round each output extent up (no window starts in the right padding).
      count_include_pad: count the padded zeros in each window's divisor.
      divisor_override: divide every window's sum by this instead.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype; each spatial extent
      ``floor((n + 2*padding - kernel_size) / stride) + 1`` (ceil with ``ceil_mode``).
      float16/bfloat16 accumulate in float32 and round once.

    Example:
      >>> jaxpool.avg_pool1d(jnp.ones((8, 16, 100)), 2).shape
      (8, 16, 50)
    """
    return _avg_pool("avg_pool1d", 1, x, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override, channels_last, axis_names)

def avg_pool2d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None, *, channels_last: bool = False,
        axis_names: AxisNames = None
               ) -> jax.Array:
    """2d average pooling, as ``torch.nn.functional.avg_pool2d``.

    Args:
      x: ``[B, C, H, W]`` or ``[C, H, W]``;
        with ``channels_last``, ``[B, H, W, C]`` or ``[H, W, C]``.
      kernel_size, stride, padding: an int or one per spatial axis. ``stride`` None, 0 or
        empty means ``kernel_size``; ``padding`` (zeros) is at most ``kernel_size // 2``.
      ceil_mode: round each output extent up (no window starts in the right padding).
      count_include_pad: count the padded zeros in each window's divisor.
      divisor_override: divide every window's sum by this instead.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype; each spatial extent
      ``floor((n + 2*padding - kernel_size) / stride) + 1`` (ceil with ``ceil_mode``).
      float16/bfloat16 accumulate in float32 and round once.

    Example:
      >>> jaxpool.avg_pool2d(jnp.ones((8, 16, 32, 32)), 2).shape
      (8, 16, 16, 16)
    """
    return _avg_pool("avg_pool2d", 2, x, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override, channels_last, axis_names)

def avg_pool3d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None, *, channels_last: bool = False,
        axis_names: AxisNames = None
               ) -> jax.Array:
    """3d average pooling, as ``torch.nn.functional.avg_pool3d``.

    Args:
      x: ``[B, C, D, H, W]`` or ``[C, D, H, W]``;
        with ``channels_last``, ``[B, D, H, W, C]`` or ``[D, H, W, C]``.
      kernel_size, stride, padding: an int or one per spatial axis. ``stride`` None, 0 or
        empty means ``kernel_size``; ``padding`` (zeros) is at most ``kernel_size // 2``.
      ceil_mode: round each output extent up (no window starts in the right padding).
      count_include_pad: count the padded zeros in each window's divisor.
      divisor_override: divide every window's sum by this instead.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype; each spatial extent
      ``floor((n + 2*padding - kernel_size) / stride) + 1`` (ceil with ``ceil_mode``).
      float16/bfloat16 accumulate in float32 and round once.

    Example:
      >>> jaxpool.avg_pool3d(jnp.ones((2, 16, 8, 32, 32)), 2).shape
      (2, 16, 4, 16, 16)
    """
    return _avg_pool("avg_pool3d", 3, x, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override, channels_last, axis_names)

def adaptive_avg_pool1d(x: ArrayLike, output_size: OutputSize, *, channels_last: bool = False,
        axis_names: AxisNames = None
                        ) -> jax.Array:
    """1d adaptive average pooling, as ``torch.nn.functional.adaptive_avg_pool1d``.

    Args:
      x: ``[B, C, L]`` or ``[C, L]``;
        with ``channels_last``, ``[B, L, C]`` or ``[L, C]``.
      output_size: an int or one per spatial axis, each >= 1 or None (keep that extent).
        Window ``i`` of an extent n pooled to k covers ``[floor(i*n/k), ceil((i+1)*n/k))``:
        ragged and overlapping when k does not divide n, repeating elements when k > n.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype with the spatial extents ``output_size``. float16/bfloat16
      accumulate in float32 and round once.

    Example:
      >>> jaxpool.adaptive_avg_pool1d(jnp.ones((8, 16, 100)), 7).shape
      (8, 16, 7)
    """
    return _adaptive_avg_pool("adaptive_avg_pool1d", 1, x, output_size, channels_last, axis_names)

def adaptive_avg_pool2d(x: ArrayLike, output_size: OutputSize, *, channels_last: bool = False,
        axis_names: AxisNames = None
                        ) -> jax.Array:
    """2d adaptive average pooling, as ``torch.nn.functional.adaptive_avg_pool2d``.

    Args:
      x: ``[B, C, H, W]`` or ``[C, H, W]``;
        with ``channels_last``, ``[B, H, W, C]`` or ``[H, W, C]``.
      output_size: an int or one per spatial axis, each >= 1 or None (keep that extent).
        Window ``i`` of an extent n pooled to k covers ``[floor(i*n/k), ceil((i+1)*n/k))``:
        ragged and overlapping when k does not divide n, repeating elements when k > n.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype with the spatial extents ``output_size``. float16/bfloat16
      accumulate in float32 and round once.

    Example:
      >>> jaxpool.adaptive_avg_pool2d(jnp.ones((8, 16, 32, 32)), 7).shape
      (8, 16, 7, 7)
    """
    return _adaptive_avg_pool("adaptive_avg_pool2d", 2, x, output_size, channels_last, axis_names)

def adaptive_avg_pool3d(x: ArrayLike, output_size: OutputSize, *, channels_last: bool = False,
        axis_names: AxisNames = None
                        ) -> jax.Array:
    """3d adaptive average pooling, as ``torch.nn.functional.adaptive_avg_pool3d``.

    Args:
      x: ``[B, C, D, H, W]`` or ``[C, D, H, W]``;
        with ``channels_last``, ``[B, D, H, W, C]`` or ``[D, H, W, C]``.
      output_size: an int or one per spatial axis, each >= 1 or None (keep that extent).
        Window ``i`` of an extent n pooled to k covers ``[floor(i*n/k), ceil((i+1)*n/k))``:
        ragged and overlapping when k does not divide n, repeating elements when k > n.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype with the spatial extents ``output_size``. float16/bfloat16
      accumulate in float32 and round once.

    Example:
      >>> jaxpool.adaptive_avg_pool3d(jnp.ones((2, 16, 8, 32, 32)), 7).shape
      (2, 16, 7, 7, 7)
    """
    return _adaptive_avg_pool("adaptive_avg_pool3d", 3, x, output_size, channels_last, axis_names)

@overload
def max_pool1d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: Literal[False] = False,
               *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array: ...
@overload
def max_pool1d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: Literal[True] = ...,
               *, channels_last: bool = False,
        axis_names: AxisNames = None) -> tuple[jax.Array, jax.Array]: ...
@overload
def max_pool1d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: bool = False,
               *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]: ...
def max_pool1d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: bool = False,
               *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]:
    """1d max pooling, as ``torch.nn.functional.max_pool1d``.

    Each window yields the element torch picks: its first maximal element in row-major
    order, or its last NaN. Padding is never picked. Every derivative sends a window's
    whole derivative to that element, and holds no scatter or gather.

    Args:
      x: ``[B, C, L]`` or ``[C, L]``;
        with ``channels_last``, ``[B, L, C]`` or ``[L, C]``.
      kernel_size, stride, padding, dilation: an int or one per spatial axis. ``stride``
        None, 0 or empty means ``kernel_size``; ``padding`` is at most ``kernel_size // 2``;
        window taps are ``dilation`` apart.
      ceil_mode: round each output extent up (no window starts in the right padding).
      return_indices: also return each picked element's flat index in its input plane
        (``l``), torch's indices: int64 under ``jax_enable_x64``, else int32.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype (values bit for bit torch's); each spatial extent
      ``floor((n + 2*padding - dilation*(kernel_size-1) - 1) / stride) + 1`` (ceil with
      ``ceil_mode``). With ``return_indices``, ``(values, indices)``.

    Example:
      >>> jaxpool.max_pool1d(jnp.ones((8, 16, 100)), 3, 2, 1).shape
      (8, 16, 50)
    """
    return _max_pool("max_pool1d", 1, x, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices, channels_last, axis_names)

@overload
def max_pool2d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: Literal[False] = False,
               *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array: ...
@overload
def max_pool2d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: Literal[True] = ...,
               *, channels_last: bool = False,
        axis_names: AxisNames = None) -> tuple[jax.Array, jax.Array]: ...
@overload
def max_pool2d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: bool = False,
               *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]: ...
def max_pool2d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: bool = False,
               *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]:
    """2d max pooling, as ``torch.nn.functional.max_pool2d``.

    Each window yields the element torch picks: its first maximal element in row-major
    order, or its last NaN. Padding is never picked. Every derivative sends a window's
    whole derivative to that element, and holds no scatter or gather.

    Args:
      x: ``[B, C, H, W]`` or ``[C, H, W]``;
        with ``channels_last``, ``[B, H, W, C]`` or ``[H, W, C]``.
      kernel_size, stride, padding, dilation: an int or one per spatial axis. ``stride``
        None, 0 or empty means ``kernel_size``; ``padding`` is at most ``kernel_size // 2``;
        window taps are ``dilation`` apart.
      ceil_mode: round each output extent up (no window starts in the right padding).
      return_indices: also return each picked element's flat index in its input plane
        (``h*W + w``), torch's indices: int64 under ``jax_enable_x64``, else int32.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype (values bit for bit torch's); each spatial extent
      ``floor((n + 2*padding - dilation*(kernel_size-1) - 1) / stride) + 1`` (ceil with
      ``ceil_mode``). With ``return_indices``, ``(values, indices)``.

    Example:
      >>> jaxpool.max_pool2d(jnp.ones((8, 16, 32, 32)), 3, 2, 1).shape
      (8, 16, 16, 16)
    """
    return _max_pool("max_pool2d", 2, x, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices, channels_last, axis_names)

@overload
def max_pool3d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: Literal[False] = False,
               *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array: ...
@overload
def max_pool3d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: Literal[True] = ...,
               *, channels_last: bool = False,
        axis_names: AxisNames = None) -> tuple[jax.Array, jax.Array]: ...
@overload
def max_pool3d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: bool = False,
               *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]: ...
def max_pool3d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: bool = False,
               *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]:
    """3d max pooling, as ``torch.nn.functional.max_pool3d``.

    Each window yields the element torch picks: its first maximal element in row-major
    order, or its last NaN. Padding is never picked. Every derivative sends a window's
    whole derivative to that element, and holds no scatter or gather.

    Args:
      x: ``[B, C, D, H, W]`` or ``[C, D, H, W]``;
        with ``channels_last``, ``[B, D, H, W, C]`` or ``[D, H, W, C]``.
      kernel_size, stride, padding, dilation: an int or one per spatial axis. ``stride``
        None, 0 or empty means ``kernel_size``; ``padding`` is at most ``kernel_size // 2``;
        window taps are ``dilation`` apart.
      ceil_mode: round each output extent up (no window starts in the right padding).
      return_indices: also return each picked element's flat index in its input plane
        (``d*H*W + h*W + w``), torch's indices: int64 under ``jax_enable_x64``, else int32.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype (values bit for bit torch's); each spatial extent
      ``floor((n + 2*padding - dilation*(kernel_size-1) - 1) / stride) + 1`` (ceil with
      ``ceil_mode``). With ``return_indices``, ``(values, indices)``.

    Example:
      >>> jaxpool.max_pool3d(jnp.ones((2, 16, 8, 32, 32)), 3, 2, 1).shape
      (2, 16, 4, 16, 16)
    """
    return _max_pool("max_pool3d", 3, x, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices, channels_last, axis_names)

@overload
def adaptive_max_pool1d(x: ArrayLike, output_size: OutputSize, return_indices: Literal[False] = False,
                        *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array: ...
@overload
def adaptive_max_pool1d(x: ArrayLike, output_size: OutputSize, return_indices: Literal[True] = ...,
                        *, channels_last: bool = False,
        axis_names: AxisNames = None) -> tuple[jax.Array, jax.Array]: ...
@overload
def adaptive_max_pool1d(x: ArrayLike, output_size: OutputSize, return_indices: bool = False,
                        *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]: ...
def adaptive_max_pool1d(x: ArrayLike, output_size: OutputSize, return_indices: bool = False,
                        *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]:
    """1d adaptive max pooling, as ``torch.nn.functional.adaptive_max_pool1d``.

    Windows as :func:`adaptive_avg_pool1d` (ragged ones too), picks as :func:`max_pool1d`.

    Args:
      x: ``[B, C, L]`` or ``[C, L]``;
        with ``channels_last``, ``[B, L, C]`` or ``[L, C]``.
      output_size: an int or one per spatial axis, each >= 1 or None (keep that extent).
      return_indices: also return torch's flat per-plane indices of the picked elements
        (int64 under ``jax_enable_x64``, else int32).
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype with the spatial extents ``output_size``; with
      ``return_indices``, ``(values, indices)``.

    Example:
      >>> jaxpool.adaptive_max_pool1d(jnp.ones((8, 16, 100)), 1).shape
      (8, 16, 1)
    """
    return _adaptive_max_pool("adaptive_max_pool1d", 1, x, output_size, return_indices,
                              channels_last, axis_names)

@overload
def adaptive_max_pool2d(x: ArrayLike, output_size: OutputSize, return_indices: Literal[False] = False,
                        *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array: ...
@overload
def adaptive_max_pool2d(x: ArrayLike, output_size: OutputSize, return_indices: Literal[True] = ...,
                        *, channels_last: bool = False,
        axis_names: AxisNames = None) -> tuple[jax.Array, jax.Array]: ...
@overload
def adaptive_max_pool2d(x: ArrayLike, output_size: OutputSize, return_indices: bool = False,
                        *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]: ...
def adaptive_max_pool2d(x: ArrayLike, output_size: OutputSize, return_indices: bool = False,
                        *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]:
    """2d adaptive max pooling, as ``torch.nn.functional.adaptive_max_pool2d``.

    Windows as :func:`adaptive_avg_pool2d` (ragged ones too), picks as :func:`max_pool2d`.

    Args:
      x: ``[B, C, H, W]`` or ``[C, H, W]``;
        with ``channels_last``, ``[B, H, W, C]`` or ``[H, W, C]``.
      output_size: an int or one per spatial axis, each >= 1 or None (keep that extent).
      return_indices: also return torch's flat per-plane indices of the picked elements
        (int64 under ``jax_enable_x64``, else int32).
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype with the spatial extents ``output_size``; with
      ``return_indices``, ``(values, indices)``.

    Example:
      >>> jaxpool.adaptive_max_pool2d(jnp.ones((8, 16, 32, 32)), 1).shape
      (8, 16, 1, 1)
    """
    return _adaptive_max_pool("adaptive_max_pool2d", 2, x, output_size, return_indices,
                              channels_last, axis_names)

@overload
def adaptive_max_pool3d(x: ArrayLike, output_size: OutputSize, return_indices: Literal[False] = False,
                        *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array: ...
@overload
def adaptive_max_pool3d(x: ArrayLike, output_size: OutputSize, return_indices: Literal[True] = ...,
                        *, channels_last: bool = False,
        axis_names: AxisNames = None) -> tuple[jax.Array, jax.Array]: ...
@overload
def adaptive_max_pool3d(x: ArrayLike, output_size: OutputSize, return_indices: bool = False,
                        *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]: ...
def adaptive_max_pool3d(x: ArrayLike, output_size: OutputSize, return_indices: bool = False,
                        *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]:
    """3d adaptive max pooling, as ``torch.nn.functional.adaptive_max_pool3d``.

    Windows as :func:`adaptive_avg_pool3d` (ragged ones too), picks as :func:`max_pool3d`.

    Args:
      x: ``[B, C, D, H, W]`` or ``[C, D, H, W]``;
        with ``channels_last``, ``[B, D, H, W, C]`` or ``[D, H, W, C]``.
      output_size: an int or one per spatial axis, each >= 1 or None (keep that extent).
      return_indices: also return torch's flat per-plane indices of the picked elements
        (int64 under ``jax_enable_x64``, else int32).
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype with the spatial extents ``output_size``; with
      ``return_indices``, ``(values, indices)``.

    Example:
      >>> jaxpool.adaptive_max_pool3d(jnp.ones((2, 16, 8, 32, 32)), 1).shape
      (2, 16, 1, 1, 1)
    """
    return _adaptive_max_pool("adaptive_max_pool3d", 3, x, output_size, return_indices,
                              channels_last, axis_names)

def lp_pool1d(x: ArrayLike, norm_type: float, kernel_size: Size, stride: Size | None = None,
              ceil_mode: bool = False, *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array:
    """1d power-average pooling, as ``torch.nn.functional.lp_pool1d``.

    torch's definition: ``(sign(s) * relu(|s|)) ** (1/p)`` where ``s`` is the window sum of
    ``x**p`` (the average times the kernel volume, so ceil-mode edge windows are scaled
    as torch scales them); ``p = inf`` is max pooling of ``|x|``, ``p = -inf`` minus max
    pooling of ``-|x|``. No padding.

    Args:
      x: ``[B, C, L]`` or ``[C, L]``;
        with ``channels_last``, ``[B, L, C]`` or ``[L, C]``.
      norm_type: ``p``, any non-zero real number or +-inf.
      kernel_size, stride: an int or one per spatial axis (``stride`` None, 0 or empty
        means ``kernel_size``).
      ceil_mode: round each output extent up.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype, shaped as :func:`avg_pool1d` without padding.
      float16/bfloat16 compute in float32 and round once.

    Example:
      >>> jaxpool.lp_pool1d(jnp.ones((8, 16, 100)), 2, 2).shape
      (8, 16, 50)
    """
    return _lp_pool("lp_pool1d", 1, x, norm_type, kernel_size, stride, ceil_mode,
                    channels_last, axis_names)

def lp_pool2d(x: ArrayLike, norm_type: float, kernel_size: Size, stride: Size | None = None,
              ceil_mode: bool = False, *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array:
    """2d power-average pooling, as ``torch.nn.functional.lp_pool2d``.

    torch's definition: ``(sign(s) * relu(|s|)) ** (1/p)`` where ``s`` is the window sum of
    ``x**p`` (the average times the kernel volume, so ceil-mode edge windows are scaled
    as torch scales them); ``p = inf`` is max pooling of ``|x|``, ``p = -inf`` minus max
    pooling of ``-|x|``. No padding.

    Args:
      x: ``[B, C, H, W]`` or ``[C, H, W]``;
        with ``channels_last``, ``[B, H, W, C]`` or ``[H, W, C]``.
      norm_type: ``p``, any non-zero real number or +-inf.
      kernel_size, stride: an int or one per spatial axis (``stride`` None, 0 or empty
        means ``kernel_size``).
      ceil_mode: round each output extent up.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype, shaped as :func:`avg_pool2d` without padding.
      float16/bfloat16 compute in float32 and round once.

    Example:
      >>> jaxpool.lp_pool2d(jnp.ones((8, 16, 32, 32)), 2, 2).shape
      (8, 16, 16, 16)
    """
    return _lp_pool("lp_pool2d", 2, x, norm_type, kernel_size, stride, ceil_mode,
                    channels_last, axis_names)

def lp_pool3d(x: ArrayLike, norm_type: float, kernel_size: Size, stride: Size | None = None,
              ceil_mode: bool = False, *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array:
    """3d power-average pooling, as ``torch.nn.functional.lp_pool3d``.

    torch's definition: ``(sign(s) * relu(|s|)) ** (1/p)`` where ``s`` is the window sum of
    ``x**p`` (the average times the kernel volume, so ceil-mode edge windows are scaled
    as torch scales them); ``p = inf`` is max pooling of ``|x|``, ``p = -inf`` minus max
    pooling of ``-|x|``. No padding.

    Args:
      x: ``[B, C, D, H, W]`` or ``[C, D, H, W]``;
        with ``channels_last``, ``[B, D, H, W, C]`` or ``[D, H, W, C]``.
      norm_type: ``p``, any non-zero real number or +-inf.
      kernel_size, stride: an int or one per spatial axis (``stride`` None, 0 or empty
        means ``kernel_size``).
      ceil_mode: round each output extent up.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype, shaped as :func:`avg_pool3d` without padding.
      float16/bfloat16 compute in float32 and round once.

    Example:
      >>> jaxpool.lp_pool3d(jnp.ones((2, 16, 8, 32, 32)), 2, 2).shape
      (2, 16, 4, 16, 16)
    """
    return _lp_pool("lp_pool3d", 3, x, norm_type, kernel_size, stride, ceil_mode,
                    channels_last, axis_names)


def global_avg_pool(x: ArrayLike, *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array:
    """Mean over the spatial axes of a rank-4 input: ``x.mean((2, 3))`` in torch.

    Args:
      x: ``[B, C, H, W]``; with ``channels_last``, ``[B, H, W, C]``.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``[B, C]`` in ``x``'s dtype. float16/bfloat16 accumulate in float32 and round once.

    Example:
      >>> jaxpool.global_avg_pool(jnp.ones((8, 512, 7, 7))).shape
      (8, 512)
    """
    array = _static("global_avg_pool", x)
    plan = plan_global("global_avg_pool", _shape("global_avg_pool", array, 2, channels_last,
                                                 axis_names), array.dtype, channels_last)
    if axis_names is None and halo_jit.active(array):
        return halo_jit.call(global_avg_pool, (array,), plan.spatial_axes,
                             channels_last=channels_last)
    if axis_names is not None:  # each device's mean over its block, then one psum
        return _sharded(_mean, plan, _checks.as_jax(array), axis_names).reshape(
            plan.output_shape[0], -1)
    return _global_mean(plan, _checks.as_jax(array))


def global_max_pool(x: ArrayLike, *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array:
    """Maximum over the spatial axes of a rank-4 input: ``torch.amax(x, (2, 3))``'s values,
    with torch's pick (``adaptive_max_pool2d(x, 1)``) for derivatives.

    Args:
      x: ``[B, C, H, W]``; with ``channels_last``, ``[B, H, W, C]``.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``[B, C]`` in ``x``'s dtype.

    Example:
      >>> jaxpool.global_max_pool(jnp.ones((8, 512, 7, 7))).shape
      (8, 512)
    """
    array = _static("global_max_pool", x)
    plan = plan_global("global_max_pool", _shape("global_max_pool", array, 2, channels_last,
                                                 axis_names), array.dtype, channels_last)
    if axis_names is None and halo_jit.active(array):
        return halo_jit.call(global_max_pool, (array,), plan.spatial_axes,
                             channels_last=channels_last)
    return _sharded_max(plan, _checks.as_jax(array), False, axis_names).reshape(
        plan.output_shape[0], -1)


avg_pool = avg_pool2d
adaptive_avg_pool = adaptive_avg_pool2d
max_pool = max_pool2d
adaptive_max_pool = adaptive_max_pool2d
lp_pool = lp_pool2d


# --- max unpooling: the transpose of the max-pool pick ------------------------------------

from jaxpool import _unpool  # noqa: E402 (the unpooling family, after the pooling ops)
from jaxpool.placement import UnpoolPlan, plan_max_unpool  # noqa: E402


def _max_unpool(op: str, ndim: int, x: ArrayLike, indices: ArrayLike, kernel_size: Size,
                stride: Size | None, padding: Size, output_size: Sequence[int] | None,
                channels_last: bool, axis_names=None) -> jax.Array:
    values, index_array = _static(op, x), _static(op, indices)
    shape = _shape(op, values, ndim, channels_last, axis_names)
    plan = plan_max_unpool(op, shape, values.dtype, ndim, kernel_size, stride, padding,
                           output_size, channels_last,
                           shape if index_array.shape == values.shape else index_array.shape,
                           index_array.dtype)
    index_array = _checks.as_jax(index_array)
    if axis_names is None and isinstance(index_array, jax.core.Tracer) and \
            halo_jit.active(values):
        # (concrete indices are checked eagerly below, by today's program)
        return halo_jit.call(_max_unpool, (values, index_array), plan.spatial_axes,
                             before=(op, ndim), after=(kernel_size, stride, padding,
                                                       output_size, channels_last))
    if axis_names is not None:  # per-device values and indices (unchecked, as under jit)
        return _halo.unpool(_unpool.max_unpool, plan, _checks.as_jax(values), index_array,
                            axis_names)
    if isinstance(index_array, jax.core.Tracer):
        # Traced indices (jit, vmap) cannot be checked: one outside its window is dropped.
        return _unpool.max_unpool(plan, _checks.as_jax(values), index_array)
    out, count, first = _unpool.max_unpool_checked(plan, _checks.as_jax(values), index_array)
    if first is not None:  # found only when the count is concrete and non-zero
        _reject_unplaced(op, plan, index_array, int(count), int(first))
    return out


def _reject_unplaced(op: str, plan: UnpoolPlan, indices: jax.Array, count: int,
                     first: int) -> None:
    """Concrete indices that name no element of their own window: rejected, not dropped."""
    where = tuple(int(w) for w in np.unravel_index(first, indices.shape))
    value = int(np.asarray(indices).reshape(-1)[first])
    extents = "x".join(str(p.in_size) for p in plan.axes)
    raise ValueError(
        f"{op}: {count} of {indices.size} indices name no element of their own window "
        f"(the first, at {where}, is {value}; the unpooled planes are {extents}). "
        f"max_unpool places each value inside the window of the max pool that made its "
        f"index (same kernel_size, stride and padding): pass the indices of that max_pool "
        f"call, or the same pooling arguments")


def max_unpool1d(x: ArrayLike, indices: ArrayLike, kernel_size: Size,
                 stride: Size | None = None, padding: Size = 0,
                 output_size: Sequence[int] | None = None, *, channels_last: bool = False,
        axis_names: AxisNames = None
                 ) -> jax.Array:
    """1d max unpooling, as ``torch.nn.functional.max_unpool1d``: the partial inverse of
    :func:`max_pool1d`.

    The output is zero except where an index points: there it holds that window's value.
    Each index must name an element of its own window (what ``max_pool1d(...,
    return_indices=True)`` with the same arguments gives, jaxpool's or torch's); torch
    accepts any element of the plane. Called eagerly, indices outside their window raise a
    ValueError; under ``jit`` or ``vmap`` (traced indices) they cannot be checked and are
    dropped: their values are not written. Where overlapping windows (``stride <
    kernel_size``) name the same element, the last window (in row-major order) wins, as in
    torch's CPU kernel. Derivatives are the transpose of these values (a dropped or
    overwritten value gets no gradient; torch's backward gives every repeat the cotangent),
    hold no scatter or gather, and every value is copied bit for bit.

    Args:
      x: ``[B, C, L]`` or ``[C, L]``; with ``channels_last``, ``[B, L, C]`` or ``[L, C]``.
      indices: integer array of ``x``'s shape: each value's flat index in its output row.
      kernel_size, stride, padding: the max pool's (an int or a 1-tuple); ``stride`` None
        or 0 means ``kernel_size``.
      output_size: the output's extent, as ``(L,)`` or a whole shape ``(B, C, L)``;
        strictly within one stride of the default.
      channels_last: channels after the spatial axis.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype; L becomes ``(L - 1)*stride - 2*padding + kernel_size``, or
      ``output_size``.

    Example:
      >>> x = jnp.arange(8.0).reshape(1, 1, 8)
      >>> values, indices = jaxpool.max_pool1d(x, 2, return_indices=True)
      >>> jaxpool.max_unpool1d(values, indices, 2)
      Array([[[0., 1., 0., 3., 0., 5., 0., 7.]]], dtype=float32)
    """
    return _max_unpool("max_unpool1d", 1, x, indices, kernel_size, stride, padding,
                       output_size, channels_last, axis_names)


def max_unpool2d(x: ArrayLike, indices: ArrayLike, kernel_size: Size,
                 stride: Size | None = None, padding: Size = 0,
                 output_size: Sequence[int] | None = None, *, channels_last: bool = False,
        axis_names: AxisNames = None
                 ) -> jax.Array:
    """2d max unpooling, as ``torch.nn.functional.max_unpool2d`` (SegNet's decoder): the
    partial inverse of :func:`max_pool2d`.

    The output is zero except where an index points: there it holds that window's value.
    Each index must name an element of its own window (what ``max_pool2d(...,
    return_indices=True)`` with the same arguments gives, jaxpool's or torch's); torch
    accepts any element of the plane. Called eagerly, indices outside their window raise a
    ValueError; under ``jit`` or ``vmap`` (traced indices) they cannot be checked and are
    dropped: their values are not written. Where overlapping windows (``stride <
    kernel_size``) name the same element, the last window (in row-major order) wins, as in
    torch's CPU kernel. Derivatives are the transpose of these values (a dropped or
    overwritten value gets no gradient; torch's backward gives every repeat the cotangent),
    hold no scatter or gather, and every value is copied bit for bit.

    Args:
      x: ``[B, C, H, W]`` or ``[C, H, W]``; with ``channels_last``, ``[B, H, W, C]`` or
        ``[H, W, C]``.
      indices: integer array of ``x``'s shape: each value's flat index ``h*W + w`` in its
        output plane.
      kernel_size, stride, padding: the max pool's (an int or one per spatial axis);
        ``stride`` None or 0 means ``kernel_size``.
      output_size: the output's spatial extents ``(H, W)``, or a whole shape
        ``(B, C, H, W)``; each strictly within one stride of the default.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype; each spatial extent becomes
      ``(n - 1)*stride - 2*padding + kernel_size``, or ``output_size``.

    Example:
      >>> x = jnp.arange(16.0).reshape(1, 1, 4, 4)
      >>> values, indices = jaxpool.max_pool2d(x, 2, return_indices=True)
      >>> jaxpool.max_unpool2d(values, indices, 2)[0, 0]
      Array([[ 0.,  0.,  0.,  0.],
             [ 0.,  5.,  0.,  7.],
             [ 0.,  0.,  0.,  0.],
             [ 0., 13.,  0., 15.]], dtype=float32)
    """
    return _max_unpool("max_unpool2d", 2, x, indices, kernel_size, stride, padding,
                       output_size, channels_last, axis_names)


def max_unpool3d(x: ArrayLike, indices: ArrayLike, kernel_size: Size,
                 stride: Size | None = None, padding: Size = 0,
                 output_size: Sequence[int] | None = None, *, channels_last: bool = False,
        axis_names: AxisNames = None
                 ) -> jax.Array:
    """3d max unpooling, as ``torch.nn.functional.max_unpool3d``: the partial inverse of
    :func:`max_pool3d`.

    The output is zero except where an index points: there it holds that window's value.
    Each index must name an element of its own window (what ``max_pool3d(...,
    return_indices=True)`` with the same arguments gives, jaxpool's or torch's); torch
    accepts any element of the volume. Called eagerly, indices outside their window raise
    a ValueError; under ``jit`` or ``vmap`` (traced indices) they cannot be checked and are
    dropped: their values are not written. Where overlapping windows (``stride <
    kernel_size``) name the same element, the last window (in row-major order) wins, as in
    torch's CPU kernel. Derivatives are the transpose of these values (a dropped or
    overwritten value gets no gradient; torch's backward gives every repeat the cotangent),
    hold no scatter or gather, and every value is copied bit for bit.

    Args:
      x: ``[B, C, D, H, W]`` or ``[C, D, H, W]``; with ``channels_last``,
        ``[B, D, H, W, C]`` or ``[D, H, W, C]``.
      indices: integer array of ``x``'s shape: each value's flat index
        ``(d*H + h)*W + w`` in its output volume.
      kernel_size, stride, padding: the max pool's (an int or one per spatial axis);
        ``stride`` None or 0 means ``kernel_size``.
      output_size: the output's spatial extents ``(D, H, W)``, or a whole shape; each
        strictly within one stride of the default.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo_jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype; each spatial extent becomes
      ``(n - 1)*stride - 2*padding + kernel_size``, or ``output_size``.

    Example:
      >>> x = jnp.ones((2, 8, 4, 4, 4))
      >>> values, indices = jaxpool.max_pool3d(x, 2, return_indices=True)
      >>> jaxpool.max_unpool3d(values, indices, 2).shape
      (2, 8, 4, 4, 4)
    """
    return _max_unpool("max_unpool3d", 3, x, indices, kernel_size, stride, padding,
                       output_size, channels_last, axis_names)
