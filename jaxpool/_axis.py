"""Window sums along one axis: the JAX side of :mod:`jaxpool.windows`.

Each strategy is exact (a window sums only its own elements, so a NaN or inf reaches only
the windows that hold it) and is built from pad, slice, reshape, broadcast, reduce-sum,
select and dot. Their transposes are again of that kind, so derivatives of any order, in
either mode, contain no scatter.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxpool.windows import AxisPlan


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
    return _matrix(x, axis, plan)


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


def _matrix(x: jax.Array, axis: int, plan: AxisPlan) -> jax.Array:
    """Any windows (ragged, overlapping, long), as a product with the 0/1 window matrix.

    A product alone would turn one inf into NaN across its whole row (``0 * inf``), so the
    values take the product only when every input is finite and otherwise count the NaN,
    +inf and -inf in each window with the same matrix and put them back where torch has
    them. Both branches are products, so the program size does not grow with the output
    size. The tangent is the plain product, whose transpose is again a product, so
    derivatives of any order stay scatter-free (``lax.cond`` never gets differentiated).
    """
    return _matrix_sum(plan, axis)(x)


def _matrix_sum(plan: AxisPlan, axis: int):
    @jax.custom_jvp
    def matrix_sum(x):
        return lax.cond(jnp.all(jnp.isfinite(x)),
                        functools.partial(_window_matmul, axis=axis, plan=plan),
                        functools.partial(_window_matmul_nonfinite, axis=axis, plan=plan), x)

    @matrix_sum.defjvp
    def matrix_sum_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return matrix_sum(x), _window_matmul(t, axis, plan)

    return matrix_sum


def _window_matmul_nonfinite(x: jax.Array, axis: int, plan: AxisPlan) -> jax.Array:
    """Window sums with torch's handling of NaN and inf: NaN if a window holds a NaN or
    both infinities, else the sign of the infinity it holds, else the finite sum."""
    finite = jnp.isfinite(x)
    total = _window_matmul(jnp.where(finite, x, jnp.zeros((), x.dtype)), axis, plan)
    def count(hit):
        return _window_matmul(hit.astype(x.dtype), axis, plan) > 0
    has_nan, has_pos, has_neg = count(jnp.isnan(x)), count(x == jnp.inf), count(x == -jnp.inf)
    inf = jnp.asarray(jnp.inf, x.dtype)
    total = jnp.where(has_pos, inf, jnp.where(has_neg, -inf, total))
    return jnp.where(has_nan | (has_pos & has_neg), jnp.asarray(jnp.nan, x.dtype), total)


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
