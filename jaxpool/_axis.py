"""Window sums along one axis: the JAX side of :mod:`jaxpool.windows`.

Each strategy is exact (a window sums only its own elements, so a NaN or inf reaches only
the windows that hold it) and is built from pad, slice, reshape, broadcast, reduce-sum,
select and dot. Their transposes are again of that kind, so derivatives of any order, in
either mode, contain no scatter.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxpool.windows import AxisPlan, gcd_period


def window_sum(x: jax.Array, axis: int, plan: AxisPlan) -> jax.Array:
    """Sum the windows of ``plan`` along ``axis``: extent ``plan.in_size`` -> ``plan.out_size``."""
    strategy = plan.strategy
    if strategy == "identity":
        return x
    if strategy == "blocks":
        return _blocks(x, axis, plan)
    if strategy == "repeat":
        return _repeat(x, axis, plan.out_size // plan.in_size)
    if strategy == "taps":
        return _taps(x, axis, plan)
    return _ragged(x, axis, plan)


def _pad_axis(x: jax.Array, axis: int, lo: int, hi: int) -> jax.Array:
    if lo == 0 and hi == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (lo, hi)
    return jnp.pad(x, widths)


def _fit_axis(x: jax.Array, axis: int, lo: int, size: int) -> jax.Array:
    """Pad ``lo`` zeros in front, then pad or trim the end so the axis has extent ``size``."""
    hi = size - lo - x.shape[axis]
    x = _pad_axis(x, axis, lo, max(hi, 0))
    if hi < 0:
        x = lax.slice_in_dim(x, 0, size, axis=axis)
    return x


def _blocks(x: jax.Array, axis: int, plan: AxisPlan) -> jax.Array:
    length, k = plan.lengths[0], plan.out_size
    x = _fit_axis(x, axis, plan.pad_lo, k * length)
    x = x.reshape(x.shape[:axis] + (k, length) + x.shape[axis + 1:])
    return x.sum(axis=axis + 1)


def _repeat(x: jax.Array, axis: int, factor: int) -> jax.Array:
    """Each element repeated ``factor`` times along ``axis`` (upsampling by replication)."""
    expanded = jnp.expand_dims(x, axis + 1)
    shape = x.shape[:axis + 1] + (factor,) + x.shape[axis + 1:]
    out = jnp.broadcast_to(expanded, shape)
    return out.reshape(x.shape[:axis] + (x.shape[axis] * factor,) + x.shape[axis + 1:])


def _taps(x: jax.Array, axis: int, plan: AxisPlan) -> jax.Array:
    """Equal windows at a fixed stride: one strided slice per offset inside the window."""
    length, stride, k = plan.lengths[0], plan.stride, plan.out_size
    span = (k - 1) * stride + length
    x = _fit_axis(x, axis, plan.pad_lo, span)
    total = None
    for offset in range(length):
        tap = lax.slice_in_dim(x, offset, offset + (k - 1) * stride + 1, stride, axis)
        total = tap if total is None else total + tap
    return total


def _ragged(x: jax.Array, axis: int, plan: AxisPlan) -> jax.Array:
    """Adaptive windows of unequal length.

    Values: window ``i`` starts at ``floor(i*n/k)``. With the input repeated ``k'`` times
    (``n/k = n'/k'`` in lowest terms), element ``floor(i*n'/k') + t`` sits at
    ``i*n' + t*k'``, so offset ``t`` of every window is one strided slice, whatever ``k``
    is: the program size does not grow with the output size, and each window sums only its
    own elements, so non-finite values stay in the windows that hold them.

    Derivatives: the tangent is the same linear map written as a product with the 0/1
    window matrix, whose transpose is again a product (a strided-slice formulation would
    transpose into sums over the repeated input, k' times the work).
    """
    return _ragged_sum(plan, axis)(x)


def _ragged_sum(plan: AxisPlan, axis: int):
    @jax.custom_jvp
    def ragged_sum(x):
        return _ragged_taps(x, axis, plan)

    @ragged_sum.defjvp
    def ragged_sum_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return ragged_sum(x), _window_matmul(t, axis, plan)

    return ragged_sum


def _ragged_taps(x: jax.Array, axis: int, plan: AxisPlan) -> jax.Array:
    n, k = plan.in_size, plan.out_size
    n_step, factor = gcd_period(n, k)
    lengths = np.asarray(plan.lengths)
    longest, shortest = int(lengths.max()), int(lengths.min())
    # Zeros after the input let the longest offset of the last window read in bounds.
    rep = _repeat(_pad_axis(x, axis, 0, longest), axis, factor)
    mask_shape = [1] * x.ndim
    mask_shape[axis] = k
    total = None
    for offset in range(longest):
        start = offset * factor
        tap = lax.slice_in_dim(rep, start, start + (k - 1) * n_step + 1, n_step, axis)
        if offset >= shortest:
            inside = (lengths > offset).reshape(mask_shape)
            tap = jnp.where(inside, tap, jnp.zeros((), tap.dtype))
        total = tap if total is None else total + tap
    return total


def window_matrix(plan: AxisPlan) -> np.ndarray:
    """The 0/1 ``[out_size, in_size]`` matrix whose rows select each window (pad excluded)."""
    cols = np.arange(plan.in_size) + plan.pad_lo
    starts = np.asarray(plan.starts)[:, None]
    stops = np.asarray(plan.stops)[:, None]
    return ((cols >= starts) & (cols < stops)).astype(np.float64)


def _window_matmul(x: jax.Array, axis: int, plan: AxisPlan) -> jax.Array:
    matrix = jnp.asarray(window_matrix(plan), dtype=x.dtype)
    out = lax.dot_general(x, matrix, (((axis,), (1,)), ((), ())),
                          precision=lax.Precision.HIGHEST)
    return jnp.moveaxis(out, -1, axis)
