"""``fractional_max_pool2d/3d`` in JAX, as torch's CPU kernels compute them
(:mod:`jaxpool.fractional.plan` plans them).

The windows of each (batch, channel) plane start where its samples put them, so the reads
are at positions the data gives: one :func:`jaxpool.core.gather.read` of rows per axis
(``_window_taps``). The pick among a window's taps (torch's rule: the last NaN if any,
else the first maximum; all ``-inf``: the first tap) is an integer, held constant; the
value is the picked tap's read, chosen by a chain of selects. The tangent is the input's
tangent read at each window's picked element (``_pooled``), so the derivatives route each
window's cotangent to that element through the read's transpose, the sorted segmented sum
(or, on the CPU table, a scatter-add in the windows' order): no scatter at any order, in
either mode, on the GPU and TPU tables.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxpool import strategy_table
from jaxpool.core.gather import read, sort_order
from jaxpool.core.program import program
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


def _pick(taps: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(value, tap)`` of each window (taps on the last axis) as torch's scan keeps them:
    ``val > max || isnan(val)`` from ``-inf``, so the last NaN if any, else the first
    maximum (the first tap if all are -inf). The value is the kept tap's own entry, so its
    derivative is that tap's alone. One select per tap, fused: an ``argmax`` over the taps
    is a variadic reduce, the slower program on XLA:CPU (BENCHMARKS.md, "Fractional max
    pooling")."""
    value = taps[..., 0]
    tap = jnp.zeros(value.shape, jnp.int32)
    for t in range(1, taps.shape[-1]):
        entry = taps[..., t]
        kept = lax.stop_gradient(value)
        take = (entry > kept) | jnp.isnan(entry)
        value = jnp.where(take, entry, value)
        tap = jnp.where(take, t, tap)
    return value, tap


def fractional_max_pool(plan: FractionalPlan, x: jax.Array, samples: jax.Array):
    """``x`` as the plan's input layout, ``samples`` ``[N, C, dims]`` in ``x``'s dtype ->
    ``(values, indices)`` in the plan's output layout; indices are flat within each plane
    (``h * W + w``, ``(t * H + h) * W + w``), torch's ``return_indices``. The derivatives
    add back as the strategy table's fractional row says for the backend traced for."""
    adding = strategy_table.lookup("fractional max pooling", "reads added back",
                                   strategy_table.current_backend())
    return _fractional_max_pool(plan, adding, x, samples)


@program((0, 1))
def _fractional_max_pool(plan: FractionalPlan, adding: str, x: jax.Array, samples: jax.Array):
    dims, n, c = plan.dims, plan.batch, plan.channels
    samples = lax.stop_gradient(samples)
    if not plan.batched:
        x = x[None]
    if plan.channels_last:
        x = jnp.moveaxis(x, -1, 1)
    out_sp = plan.out_spatial
    if n * c * math.prod(out_sp) == 0:
        values = jnp.zeros((n, c) + out_sp, x.dtype)
        flat = jnp.zeros((n, c) + out_sp, index_dtype())
    else:
        starts = [window_starts(plan, samples, a) for a in range(dims)]
        values = _pooled(plan, adding, x, starts)
        flat = _picked_in_plane(plan, adding, lax.stop_gradient(x), starts)
    if plan.channels_last:
        values, flat = jnp.moveaxis(values, 1, -1), jnp.moveaxis(flat, 1, -1)
    if not plan.batched:
        values, flat = values[0], flat[0]
    return values, flat


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _pooled(plan: FractionalPlan, adding: str, x: jax.Array, starts: list) -> jax.Array:
    """Each window's kept value ``[N, C, *out]``. Its tangent is the input's tangent read
    at each window's kept element (one read of ``N * C * out`` entries, whose transpose
    adds each window's cotangent into its element, in the windows' order, as torch's
    backward): differentiating the selects that pick it would write every tap's
    cotangent out and add them back through both reads of rows."""
    return _pick(_window_taps(plan, adding, x, starts))[0]


@_pooled.defjvp
def _pooled_jvp(plan, adding, primals, tangents):
    x, starts = primals
    n, c = x.shape[:2]
    plane = math.prod(plan.in_spatial)
    flat = _picked_in_plane(plan, adding, lax.stop_gradient(x), starts)
    at = flat + (jnp.arange(n * c, dtype=flat.dtype) * plane).reshape(
        (n, c) + (1,) * plan.dims)
    read_at = sort_order(at.reshape(-1).astype(jnp.int32), n * c * plane)
    tangent = read(tangents[0].reshape(-1, 1), read_at, adding=adding)
    return _pooled(plan, adding, x, starts), tangent.reshape(at.shape)


def _picked_in_plane(plan: FractionalPlan, adding: str, x: jax.Array,
                     starts: list) -> jax.Array:
    """Each window's kept element, flat in its plane (``h * W + w``, ...): ``[N, C,
    *out]``."""
    n, c = x.shape[:2]
    dims, out_sp = plan.dims, plan.out_spatial
    strides = [math.prod(plan.in_spatial[a + 1:]) for a in range(dims)]
    pick = _pick(_window_taps(plan, adding, x, starts))[1]
    # The window's first element, flat in its plane: [N, C, *out].
    start = jnp.zeros((n, c) + (1,) * dims, index_dtype())
    for a in range(dims):
        s = starts[a].astype(index_dtype()) * strides[a]
        start = start + s.reshape((n, c) + tuple(out_sp[a] if b == a else 1
                                                 for b in range(dims)))
    return start + _offset_of(pick, plan.kernel, strides)


def _window_taps(plan: FractionalPlan, adding: str, x: jax.Array, starts: list) -> jax.Array:
    """``x`` ``[N, C, *in]`` -> ``[N, C, *out, taps]``: every window's elements, taps
    row-major as torch scans them.

    A plane's windows start where its own samples put them, but the starts along one axis
    do not depend on the other axes: the windows are read one axis at a time, as rows. Each
    pass reads, for every (plane, window, tap) of one axis, the whole row of the other
    axes, then moves that axis's (window, tap) last, so the next axis leads. A read per
    element instead (one gather of ``N * C * out * taps`` scalars, whose transpose sorts
    as many) is the slower program (BENCHMARKS.md, "Fractional max pooling", cells
    `fractional2d` and `fractional3d`)."""
    n, c = x.shape[:2]
    planes = jnp.arange(n * c, dtype=jnp.int32).reshape(n, c, 1, 1)
    y = x
    for a, (size, k) in enumerate(zip(plan.in_spatial, plan.kernel)):
        rest = y.shape[3:]
        rows = (planes * size + starts[a][..., None]
                + jnp.arange(k, dtype=jnp.int32)).reshape(-1)
        y = read(y.reshape((n * c * size, -1)), rows, adding=adding)
        y = jnp.moveaxis(y.reshape((n, c, plan.out_spatial[a], k) + rest), (2, 3), (-2, -1))
    # [N, C, out_0, k_0, out_1, k_1, ...] -> [N, C, *out, k_0 * k_1 * ...]
    dims = plan.dims
    y = y.transpose((0, 1) + tuple(2 + 2 * a for a in range(dims))
                    + tuple(3 + 2 * a for a in range(dims)))
    return y.reshape((n, c) + plan.out_spatial + (math.prod(plan.kernel),))


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
