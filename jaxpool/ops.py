"""The pooling functions: torch.nn.functional's semantics, computed per axis.

Layout: channels-first by default (``[B, C, *spatial]`` or unbatched ``[C, *spatial]``, as
torch); ``channels_last=True`` takes and returns ``[B, *spatial, C]`` (or ``[*spatial, C]``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxpool import _axis
from jaxpool.plan import PoolPlan, plan_adaptive, plan_avg_pool, plan_global


def _compute_dtype(dtype):
    # Half precision accumulates in float32 and rounds once at the end, as torch on the CPU.
    return jnp.float32 if dtype in (jnp.float16, jnp.bfloat16) else dtype


def _static(x):
    """The input as something with a static ``shape`` and ``dtype``, without converting it
    (a conversion could change the dtype before the checks see it)."""
    return x if hasattr(x, "shape") and hasattr(x, "dtype") else np.asarray(x)


def _run(plan: PoolPlan, x: jax.Array) -> jax.Array:
    dtype = x.dtype
    y = x.astype(_compute_dtype(dtype))
    # Outermost axis first: there slices and sums run over contiguous rows.
    y = _axis.window_sums(y, plan)
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


def _avg_pool(ndim: int, name: str):
    def avg_pool(x, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None, *, channels_last=False):
        x = _static(x)
        plan = plan_avg_pool(name, x.shape, x.dtype, ndim, kernel_size, stride, padding,
                             ceil_mode, count_include_pad, divisor_override, channels_last)
        return _run(plan, jnp.asarray(x))

    avg_pool.__name__ = avg_pool.__qualname__ = name
    return avg_pool


def _adaptive_avg_pool(ndim: int, name: str):
    def adaptive_avg_pool(x, output_size, *, channels_last=False):
        x = _static(x)
        plan = plan_adaptive(name, x.shape, x.dtype, ndim, output_size, channels_last)
        return _run(plan, jnp.asarray(x))

    adaptive_avg_pool.__name__ = adaptive_avg_pool.__qualname__ = name
    return adaptive_avg_pool


_AVG_DOC = """{d}d average pooling with torch.nn.functional.avg_pool{d}d's semantics.

    x: ``[B, C, {sp}]`` or ``[C, {sp}]``; with ``channels_last=True``, ``[B, {sp}, C]`` or
    ``[{sp}, C]``. Returns the same layout with each spatial extent
    ``floor((n + 2*padding - kernel_size) / stride) + 1`` (ceil with ``ceil_mode``, where the
    last window may not start inside the right padding).

    kernel_size, stride, padding: an int or {d} ints. ``stride`` None or 0 means
    ``kernel_size``. ``padding`` is at most ``kernel_size // 2``. ``count_include_pad``
    counts padded zeros in the divisor; ``divisor_override`` replaces the divisor.
    float16/bfloat16 accumulate in float32 and round once.
    """

_ADAPTIVE_DOC = """{d}d adaptive average pooling with torch.nn.functional.adaptive_avg_pool{d}d's
    semantics.

    x: ``[B, C, {sp}]`` or ``[C, {sp}]``; with ``channels_last=True``, ``[B, {sp}, C]`` or
    ``[{sp}, C]``. output_size: an int or {d} entries, each >= 1 or None (keep that extent).
    Output window ``i`` of an axis of extent n pooled to k covers
    ``[floor(i*n/k), ceil((i+1)*n/k))``: ragged and overlapping when k does not divide n,
    repeating elements when k > n.
    """

_SPATIAL = {1: "L", 2: "H, W", 3: "D, H, W"}

avg_pool1d = _avg_pool(1, "avg_pool1d")
avg_pool2d = _avg_pool(2, "avg_pool2d")
avg_pool3d = _avg_pool(3, "avg_pool3d")
adaptive_avg_pool1d = _adaptive_avg_pool(1, "adaptive_avg_pool1d")
adaptive_avg_pool2d = _adaptive_avg_pool(2, "adaptive_avg_pool2d")
adaptive_avg_pool3d = _adaptive_avg_pool(3, "adaptive_avg_pool3d")
for _d, _fn in ((1, avg_pool1d), (2, avg_pool2d), (3, avg_pool3d)):
    _fn.__doc__ = _AVG_DOC.format(d=_d, sp=_SPATIAL[_d])
for _d, _fn in ((1, adaptive_avg_pool1d), (2, adaptive_avg_pool2d), (3, adaptive_avg_pool3d)):
    _fn.__doc__ = _ADAPTIVE_DOC.format(d=_d, sp=_SPATIAL[_d])

avg_pool = avg_pool2d
adaptive_avg_pool = adaptive_avg_pool2d


def global_avg_pool(x, *, channels_last=False):
    """Mean over the spatial axes: ``[B, C, H, W] -> [B, C]`` (``[B, H, W, C] -> [B, C]``
    with ``channels_last=True``). Rank 4 only. Half precision accumulates in float32."""
    x = _static(x)
    plan = plan_global("global_avg_pool", x.shape, x.dtype, channels_last)
    x = jnp.asarray(x)
    dtype = x.dtype
    total = x.astype(_compute_dtype(dtype)).sum(axis=plan.spatial_axes)
    count = plan.axes[0].in_size * plan.axes[1].in_size
    return (total / count).astype(dtype)
