"""``fractional_max_pool2d/3d`` in JAX, as torch's CPU kernels compute them
(:mod:`jaxpool.fractional.plan` plans them).

The windows of each (batch, channel) plane start where its samples put them, so the reads
are at positions the data gives: every tap of every window is one
:func:`jaxpool.core.gather.read` of the input laid out as ``[N * C * spatial, 1]``. The pick
among a window's taps (torch's rule: the last NaN if any, else the first maximum; all
``-inf``: the first tap) is an integer, held constant; the value is the picked tap's read,
chosen by a chain of selects. So the derivatives route each window's cotangent to its
picked element through the read's transpose, the sorted segmented sum: no scatter at any
order, in either mode.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxpool.core.gather import read
from jaxpool.pooling.kernel_max import index_dtype
from jaxpool.fractional.plan import FractionalPlan

_MANTISSA = {"float16": (5, 10), "bfloat16": (8, 7)}


def _rounder(plan: FractionalPlan):
    """Rounds a float32 value to the input's half dtype (every step of torch's arithmetic
    is in that dtype); the identity for float32/float64. ``reduce_precision`` because XLA
    may drop a pair of converts (excess precision)."""
    bits = _MANTISSA.get(plan.dtype)
    if bits is None:
        return lambda v: v
    return lambda v: lax.reduce_precision(v, exponent_bits=bits[0], mantissa_bits=bits[1])


def window_starts(plan: FractionalPlan, samples: jax.Array, axis: int) -> jax.Array:
    """``[N, C, out]`` int32: torch's window starts along spatial ``axis`` from the samples
    ``[N, C, dims]`` (see :mod:`jaxpool.fractional.plan`)."""
    size, out, k = plan.in_spatial[axis], plan.out_spatial[axis], plan.kernel[axis]
    n, c = samples.shape[:2]
    last = jnp.full((n, c, 1), size - k, jnp.int32)
    if out <= 1:
        return last[..., :out]
    compute = jnp.dtype(plan.compute_dtype)
    rounded = _rounder(plan)
    u = samples[..., plan.sample_axes[axis]].astype(compute)[..., None]
    alpha = jnp.asarray(plan.alphas[axis], compute)
    i = rounded(jnp.arange(out - 1, dtype=jnp.int32).astype(compute))
    # float -> int conversion truncates toward zero, as C++'s static_cast<int>.
    high = rounded(rounded(i + u) * alpha).astype(jnp.int32)
    low = rounded(u * alpha).astype(jnp.int32)
    # Samples far outside [0, 1) or a half-precision step rounded up can start a window
    # outside the input, where torch's kernel asserts (concrete samples are checked before):
    # traced ones have it kept inside.
    starts = jnp.clip(high - low, 0, size - k)
    return jnp.concatenate([starts, last], axis=-1)


def _pick(taps: jax.Array) -> jax.Array:
    """Which tap (last axis) torch's scan keeps: ``val > max || isnan(val)`` from ``-inf``,
    so the last NaN if any, else the first maximum (the first tap if all are -inf)."""
    t = taps.shape[-1]
    nan = jnp.isnan(taps)
    last_nan = (t - 1) - jnp.argmax(nan[..., ::-1], axis=-1)
    top = jnp.max(jnp.where(nan, -jnp.inf, taps), axis=-1, keepdims=True)
    first_max = jnp.argmax(taps == top, axis=-1)
    return jnp.where(nan.any(axis=-1), last_nan, first_max).astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=0)
def fractional_max_pool(plan: FractionalPlan, x: jax.Array, samples: jax.Array):
    """``x`` as the plan's input layout, ``samples`` ``[N, C, dims]`` in ``x``'s dtype ->
    ``(values, indices)`` in the plan's output layout; indices are flat within each plane
    (``h * W + w``, ``(t * H + h) * W + w``), torch's ``return_indices``."""
    dims, n, c = plan.dims, plan.batch, plan.channels
    samples = lax.stop_gradient(samples)
    if not plan.batched:
        x = x[None]
    if plan.channels_last:
        x = jnp.moveaxis(x, -1, 1)
    out_sp, kernel, in_sp = plan.out_spatial, plan.kernel, plan.in_spatial
    plane = math.prod(in_sp)
    strides = [math.prod(in_sp[a + 1:]) for a in range(dims)]
    taps = math.prod(kernel)
    if n * c * math.prod(out_sp) == 0:
        values = jnp.zeros((n, c) + out_sp, x.dtype)
        flat = jnp.zeros((n, c) + out_sp, index_dtype())
    else:
        # The window's first element, flat in its plane: [N, C, *out].
        start = jnp.zeros((n, c) + (1,) * dims, jnp.int32)
        for a in range(dims):
            s = window_starts(plan, samples, a) * strides[a]
            start = start + s.reshape((n, c) + tuple(out_sp[a] if b == a else 1
                                                     for b in range(dims)))
        # Each tap's offset from the window's first element, row-major as torch scans.
        offsets = np.zeros((1,), np.int64)
        for a in range(dims):
            offsets = (offsets[:, None] + np.arange(kernel[a]) * strides[a]).reshape(-1)
        tap_offsets = jnp.asarray(offsets.astype(np.int32))
        planes = (jnp.arange(n * c, dtype=jnp.int32) * plane).reshape((n, c) + (1,) * dims)
        index = (planes + start)[..., None] + tap_offsets
        rows = read(x.reshape(n * c * plane, 1), index.reshape(-1))
        reads = rows.reshape((n, c) + out_sp + (taps,))
        pick = _pick(lax.stop_gradient(reads))
        values = reads[..., 0]
        for t in range(1, taps):
            values = jnp.where(pick == t, reads[..., t], values)
        flat = start.astype(index_dtype()) + _offset_of(pick, kernel, strides)
    if plan.channels_last:
        values, flat = jnp.moveaxis(values, 1, -1), jnp.moveaxis(flat, 1, -1)
    if not plan.batched:
        values, flat = values[0], flat[0]
    return values, flat


def _offset_of(pick: jax.Array, kernel: tuple, strides: list) -> jax.Array:
    """The picked tap's offset in its plane, by integer arithmetic (no gather)."""
    offset = jnp.zeros(pick.shape, index_dtype())
    rest = pick.astype(index_dtype())
    for a in reversed(range(len(kernel))):
        offset = offset + (rest % kernel[a]) * strides[a]
        rest = rest // kernel[a]
    return offset


def draw_samples(plan: FractionalPlan, key) -> jax.Array:
    """``[N, C, dims]`` samples in ``[0, 1)`` in the input's dtype, from a ``jax.random``
    key (typed or raw), as torch draws its ``_random_samples`` with ``torch.rand``."""
    return jax.random.uniform(key, plan.samples_shape, jnp.dtype(plan.dtype))
