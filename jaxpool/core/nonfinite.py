"""A linear map along one axis as a matrix product, with NaN and inf where torch's sum of
products puts them: the one place both the window sums (:mod:`jaxpool.pooling.kernel`) and the
resampling weights (:mod:`jaxpool.resampling.kernel`) take it from, with the two layouts of
the product they use.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

Product = Callable[[jax.Array, int, np.ndarray], jax.Array]
"""``product(x, axis, matrix)``: ``matrix`` ``[out, in]`` applied along ``axis`` (each
caller keeps its own layout of the contraction: the bits of a finite sum depend on it)."""


def matmul_moved(x: jax.Array, axis: int, matrix: np.ndarray) -> jax.Array:
    """``matrix`` ``[out, in]`` applied along ``axis``: the contraction, then its output axis
    moved back into place (the window sums' layout)."""
    # HIGHEST: on GPU and TPU the default would round float32 operands to tf32/bfloat16.
    out = lax.dot_general(x, jnp.asarray(matrix, dtype=x.dtype), (((axis,), (1,)), ((), ())),
                          precision=lax.Precision.HIGHEST)
    return jnp.moveaxis(out, -1, axis)


def matmul_in_place(x: jax.Array, axis: int, matrix: np.ndarray) -> jax.Array:
    """``matrix`` ``[out, in]`` applied along ``axis``, the other axes kept in place: an
    einsum lets XLA lay the product out, which is faster on an outer axis than
    :func:`matmul_moved` (BENCHMARKS.md, interpolate's matrix rows; the resampling
    weights' layout)."""
    letters = "abcdefghijklmnopqrstuvwxyz"[:x.ndim]
    out = letters[:axis] + "Z" + letters[axis + 1:]
    # HIGHEST: on GPU and TPU the default would round float32 operands to tf32/bfloat16.
    return jnp.einsum(f"{letters},Z{letters[axis]}->{out}", x,
                      jnp.asarray(matrix, dtype=x.dtype), precision=lax.Precision.HIGHEST)


def matmul_keeping_nonfinite(x: jax.Array, axis: int, matrix: np.ndarray, product: Product,
                             positive: np.ndarray, zeros: np.ndarray | None = None,
                             negative: np.ndarray | None = None) -> jax.Array:
    """``x`` times ``matrix`` along ``axis``, with NaN and inf where torch's sum of products
    puts them: NaN where an output reads a NaN, multiplies an infinity by a zero weight, or
    sums infinities of both signs (a negative weight flips one's sign); else the infinity
    it sums; else the product of the finite entries. ``positive``, ``zeros``, ``negative``:
    0/1 ``[out, in]``, the taps each output multiplies by a positive weight, by an explicit
    0 (as torch does) and by a negative weight.

    A product of the raw input would spread one inf over its whole row (``0 * inf``), so the
    non-finite entries are zeroed, and coded (+inf 1, -inf ``base``, NaN ``base**2``) in a
    plane read through the weights' signs (positive weights 1, zero weights ``base**3``) and,
    for weights with negative entries, a second pattern: each output reads off the counts it
    needs. No data-dependent branch: a global "all finite?" test would cost a collective on
    sharded inputs.
    """
    finite = jnp.isfinite(x)
    zero = jnp.zeros((), x.dtype)
    total = product(jnp.where(finite, x, zero), axis, matrix)
    has_zeros = zeros is not None and bool(zeros.any())
    has_negative = negative is not None and bool(negative.any())
    # more than the most taps an output reads through any one pattern
    base = float(max(p.sum(axis=1).max() for p in (positive, zeros, negative)
                     if p is not None) + 1)
    b2, b3 = base * base, base ** 3
    coded_x = jnp.where(finite, zero, jnp.where(jnp.isnan(x), jnp.asarray(b2, x.dtype),
                                                jnp.where(x > 0, jnp.ones((), x.dtype),
                                                          jnp.asarray(base, x.dtype))))
    # every count comes out of one product while its largest coded sum stays exact
    exact = base ** (4 if has_zeros else 3) < 2.0 ** jnp.finfo(x.dtype).nmant

    def counts(pattern):
        """(n_pos, n_neg, n_nan) read through ``pattern``; +0.5 before each floor: XLA
        divides by a constant as a product with its reciprocal (49/49 can come out just
        below 1)."""
        if not exact:  # one product per count, each of 0/1 codes
            return tuple(product(jnp.where(finite, zero, code).astype(x.dtype), axis, pattern)
                         for code in (x > 0, x < 0, jnp.isnan(x)))
        coded = product(coded_x, axis, pattern)
        n_nan = jnp.floor((coded + 0.5) / b2)
        rest = coded - b2 * n_nan
        n_neg = jnp.floor((rest + 0.5) / base)
        return rest - base * n_neg, n_neg, n_nan

    if exact and zeros is not None and has_zeros:
        coded = product(coded_x, axis, positive + b3 * zeros)
        hit_zero = jnp.floor((coded + 0.5) / b3)
        rest = coded - b3 * hit_zero
        p_nan = jnp.floor((rest + 0.5) / b2)
        rest = rest - b2 * p_nan
        p_neg = jnp.floor((rest + 0.5) / base)
        p_pos = rest - base * p_neg
        invalid = (hit_zero > 0.5) | (p_nan > 0.5)
    else:
        p_pos, p_neg, p_nan = counts(positive)
        invalid = p_nan > 0.5
        if zeros is not None and has_zeros:
            z_pos, z_neg, z_nan = counts(zeros)
            invalid = invalid | ((z_pos + z_neg + z_nan) > 0.5)
    if negative is not None and has_negative:
        n_pos, n_neg, n_nan = counts(negative)
        plus, minus = p_pos + n_neg > 0.5, p_neg + n_pos > 0.5
        invalid = invalid | (n_nan > 0.5)
    else:
        plus, minus = p_pos > 0.5, p_neg > 0.5
    invalid = invalid | (plus & minus)
    total = jnp.where(plus, jnp.asarray(jnp.inf, x.dtype),
                      jnp.where(minus, jnp.asarray(-jnp.inf, x.dtype), total))
    return jnp.where(invalid, jnp.asarray(jnp.nan, x.dtype), total)
