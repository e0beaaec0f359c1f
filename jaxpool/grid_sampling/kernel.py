"""``grid_sample`` and ``affine_grid`` in JAX, as torch's CPU kernels compute them
(:mod:`jaxpool.grid_sampling.plan` plans them).

``grid_sample`` reads the input at positions the grid gives: for every output point the
corner (or tap) indices come from the floor or rounding of the source coordinates (integers,
no derivative); the weights are differentiable functions of the grid; the value is the sum
over corners of weight times the corner's masked read. All corners of all points are one
:func:`jaxpool.core.gather.read_pieces` of the input laid out as ``[N * spatial, C]``, so one
sort of the indices serves every channel and every derivative order, and no derivative holds
a scatter; the forward reads it as one gather per corner, each fused into the weighted sum.

4-D input follows the vectorized kernel (``aten/src/ATen/native/cpu/GridSamplerKernel.cpp``),
5-D input the scalar one (``grid_sampler_3d_cpu_impl`` in ``GridSampler.cpp`` with
``GridSampler.h``). They differ in their arithmetic and in where NaN and inf go; each is
reproduced.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxpool import strategy_table
from jaxpool.core.gather import read, read_pieces, sort_order
from jaxpool.core.rules import from_plus_zero, rounded
from jaxpool.core.program import program
from jaxpool.grid_sampling.plan import AffineGridPlan, GridSamplePlan

# --- coordinates ----------------------------------------------------------------------------
# One axis's source coordinate from the grid, as each kernel computes it, with torch's
# derivative: ``*_set_grad`` / ``apply_get_grad``'s multiplier, one-sided at the borders
# (0 at and beyond a clipped border), its own derivative zero.

def _with_multiplier(value_fn, multiplier_fn):
    @jax.custom_jvp
    def coordinate(g):
        return value_fn(g)

    @coordinate.defjvp
    def _jvp(primals, tangents):
        (g,), (t,) = primals, tangents
        return coordinate(g), jax.lax.stop_gradient(multiplier_fn(g)) * t

    return coordinate


def _vec_unnormalize(g, size, align):
    """The vectorized kernel: ``(g + 1) * scale`` (``- 0.5`` without align_corners)."""
    if align:
        return rounded((g + 1) * jnp.asarray((size - 1) / 2, g.dtype))
    return rounded((g + 1) * jnp.asarray(size / 2, g.dtype)) - jnp.asarray(0.5, g.dtype)


def _vec_scale(size, align):
    return (size - 1) / 2 if align else size / 2


def _vec_clip(x, size):
    # ``clamp_min(Vec(0), x)``: a NaN becomes 0.
    return jnp.where(jnp.isnan(x), jnp.zeros((), x.dtype),
                     jnp.clip(x, 0, jnp.asarray(size - 1, x.dtype)))


def _vec_reflect(x, size, align):
    """``reflect_coordinates`` (vectorized): the reflected value and its sign."""
    if align and size <= 1:
        return jnp.zeros_like(x), jnp.zeros_like(x)
    twice_span = jnp.asarray((size - 1) * 2 if align else size * 2, x.dtype)
    low = jnp.asarray(0.0 if align else -0.5, x.dtype)
    shifted = x - low if not align else x
    magnitude = jnp.abs(shifted)
    extra = magnitude - rounded(jnp.trunc(magnitude / twice_span) * twice_span)
    reflected = twice_span - extra
    one_more_flip = extra > reflected
    value = jnp.minimum(extra, reflected)
    value = value + low if not align else value
    sign = jnp.where(one_more_flip ^ (shifted < 0), -1.0, 1.0).astype(x.dtype)
    return value, sign


def _vec_source(size, padding, align):
    """``ComputeLocation::apply`` / ``apply_get_grad`` of the vectorized (4-D) kernel."""
    scale = _vec_scale(size, align)

    def value(g):
        x = _vec_unnormalize(g, size, align)
        if padding == "border":
            x = _vec_clip(x, size)
        elif padding == "reflection":
            x = _vec_clip(_vec_reflect(x, size, align)[0], size)
        return x

    def multiplier(g):
        x = _vec_unnormalize(g, size, align)
        mult = jnp.full_like(x, scale)
        if padding == "reflection":
            x, sign = _vec_reflect(x, size, align)
            mult = sign * mult
        if padding != "zeros":
            # ``clip_coordinates_get_grad``: the borders count as outside.
            inside = ~((x <= 0) | (x >= size - 1))
            mult = jnp.where(inside, mult, jnp.zeros((), x.dtype))
        return mult

    return _with_multiplier(value, multiplier)


def _scalar_unnormalize(g, size, align):
    """``grid_sampler_unnormalize`` (scalar kernel)."""
    if align:
        return rounded(((g + 1) / 2) * jnp.asarray(size - 1, g.dtype))
    # XLA makes the halving a product, which would contract with the sums that follow.
    return rounded((rounded((g + 1) * jnp.asarray(size, g.dtype)) - 1) / 2)


def _scalar_clip(x, size):
    # ``std::min(size - 1, std::max(x, 0))``: a NaN becomes size - 1.
    top = jnp.asarray(size - 1, x.dtype)
    return jnp.where(jnp.isnan(x), top, jnp.clip(x, 0, top))


def _scalar_reflect(x, size, align):
    """``reflect_coordinates_set_grad`` (scalar): the reflected value and its sign. The
    flip count goes through an ``int``: one at or over 2**31 (and NaN) counts as even, as
    x86's conversion gives INT_MIN there."""
    twice_low, twice_high = (0, 2 * (size - 1)) if align else (-1, 2 * size - 1)
    if twice_low == twice_high:
        return jnp.zeros_like(x), jnp.zeros_like(x)
    low = jnp.asarray(twice_low / 2, x.dtype)
    span = jnp.asarray((twice_high - twice_low) / 2, x.dtype)
    shifted = x - low
    negative = shifted < 0
    magnitude = jnp.abs(shifted)
    extra = jnp.fmod(magnitude, span)
    flips = jnp.floor(magnitude / span)
    odd = (flips < 2.0 ** 31) & (jnp.fmod(flips, 2) == 1)
    value = jnp.where(odd, span - extra + low, extra + low)
    sign = jnp.where(odd ^ negative, -1.0, 1.0).astype(x.dtype)
    return value, sign


def _scalar_source(size, padding, align):
    """``grid_sampler_compute_source_index[_set_grad]`` of the scalar (5-D) kernel."""
    scale = (size - 1) / 2 if align else size / 2

    def value(g):
        x = _scalar_unnormalize(g, size, align)
        if padding == "border":
            x = _scalar_clip(x, size)
        elif padding == "reflection":
            x = _scalar_clip(_scalar_reflect(x, size, align)[0], size)
        return x

    def multiplier(g):
        x = _scalar_unnormalize(g, size, align)
        mult = jnp.full_like(x, scale)
        if padding == "reflection":
            x, sign = _scalar_reflect(x, size, align)
            mult = sign * mult
        if padding != "zeros":
            inside = (x > 0) & (x < size - 1)
            mult = jnp.where(inside, mult, jnp.zeros((), x.dtype))
        return mult

    return _with_multiplier(value, multiplier)


# --- sampling -------------------------------------------------------------------------------

def _inside(c, size):
    """An integer-valued coordinate inside ``[0, size)`` (NaN: no)."""
    return (c >= 0) & (c <= size - 1)


def _taps(plan, coords):
    """The taps of every output point, nearest or bilinear: a list of (integer coordinate per
    axis, weight or None), the corners in torch's order of summation.

    ``coords``: the source coordinates per axis (D, H, W order), each ``[P]``."""
    dims = plan.dims
    if plan.mode == "nearest":
        return [([jax.lax.stop_gradient(jnp.round(c)) for c in coords], None)]
    per_axis = []
    for c in coords:
        low = jax.lax.stop_gradient(jnp.floor(c))
        high_w = c - low
        # 4-D: e = 1 - w; 5-D: (floor + 1) - x.
        low_w = 1 - high_w if dims == 2 else (low + 1) - c
        per_axis.append(((low, low_w), (low + 1, high_w)))
    taps = []
    for corner in np.ndindex(*(2,) * dims):  # D, H, W order: w before e, n before s
        picks = [per_axis[a][k] for a, k in enumerate(corner)]
        if dims == 2:  # nw = s * e: the y weight first
            weight = picks[0][1] * picks[1][1]
        else:  # tnw = (x) * (y) * (z)
            weight = picks[2][1] * picks[1][1] * picks[0][1]
        taps.append(([p[0] for p in picks], weight))
    return taps


def _cubic_coefficients(t):
    """``get_cubic_coefficients`` of the vectorized kernel (A = -0.75), its order of
    operations."""
    a = jnp.asarray(-0.75, t.dtype)
    one, two = jnp.asarray(1, t.dtype), jnp.asarray(2, t.dtype)

    def outer(x):
        return rounded((rounded((rounded(a * x) - 5 * a) * x) + 8 * a) * x) - 4 * a

    def inner(x):
        return rounded((rounded((a + 2) * x) - (a + 3)) * x * x) + one

    return [outer(t + one), inner(t), inner(one - t), outer(two - t)]


def _bounded(plan, c, size):
    """``compute_coordinates`` of a bicubic tap: the padding applied to the tap itself."""
    if plan.padding_mode == "border":
        return _vec_clip(c, size)
    if plan.padding_mode == "reflection":
        return _vec_clip(_vec_reflect(c, size, plan.align_corners)[0], size)
    return c


def grid_sample(plan: GridSamplePlan, x: jax.Array, grid: jax.Array) -> jax.Array:
    """The plan's call on ``x`` and ``grid``, its derivatives adding back as the strategy
    table says for the backend traced for (a static argument: one program per strategy)."""
    adding = strategy_table.lookup("grid sampling", "reads added back",
                                   strategy_table.current_backend())
    return _grid_sample(plan, adding, x, grid)


@program((0, 1), recompute=False)
def _grid_sample(plan: GridSamplePlan, adding: str, x: jax.Array, grid: jax.Array
                 ) -> jax.Array:
    dtype, compute = x.dtype, jnp.dtype(plan.compute_dtype)
    x, grid = x.astype(compute), grid.astype(compute)
    dims, sizes = plan.dims, plan.in_spatial
    n, c = plan.batch, plan.channels
    if not plan.channels_last:
        x = jnp.moveaxis(x, 1, -1)
    values = x.reshape(n * int(np.prod(sizes)), c)
    points = int(np.prod(plan.out_spatial))
    g = grid.reshape(n * points, dims)
    source = _vec_source if dims == 2 else _scalar_source
    # grid[..., 0] is x (the last axis): the axes in D, H, W order read it backwards.
    # Bicubic pads each tap, not the coordinate (its derivative: the scale alone).
    padding = "zeros" if plan.mode == "bicubic" else plan.padding_mode
    coords = [source(size, padding, plan.align_corners)(g[:, dims - 1 - a])
              for a, size in enumerate(sizes)]
    base = jnp.repeat(jnp.arange(n, dtype=jnp.int32) * int(np.prod(sizes)), points)
    if plan.mode == "bicubic":
        out = _bicubic(plan, adding, values, base, coords)
    else:
        out = _corners(plan, adding, values, base, coords)
    out = out.reshape((n,) + plan.out_spatial + (c,))
    if not plan.channels_last:
        out = jnp.moveaxis(out, -1, 1)
    return out.astype(dtype)


def _corners(plan, adding, values, base, coords):
    """Nearest and bilinear: ``[N * P, C]``, the taps read as one gather each, each fused
    into the weighted sum."""
    sizes, compute = plan.in_spatial, values.dtype
    taps = _taps(plan, coords)
    strides = [int(np.prod(sizes[a + 1:])) for a in range(plan.dims)]
    indices, masks = [], []
    for tap, _ in taps:
        mask = functools.reduce(jnp.logical_and,
                                [_inside(t, size) for t, size in zip(tap, sizes)])
        flat = base
        for t, stride in zip(tap, strides):
            flat = flat + jnp.where(mask, t, 0).astype(jnp.int32) * stride
        indices.append(flat)
        masks.append(mask[:, None])
    order = sort_order(jnp.concatenate(indices), values.shape[0])
    rows = read_pieces(values, order, len(taps), adding=adding)
    zero = jnp.zeros((), compute)
    reads = [jnp.where(m, r, zero) for r, m in zip(rows, masks)]
    if plan.mode == "nearest":
        return reads[0]
    if plan.dims == 2:
        # The vectorized kernel multiplies the zeros it read outside (0 * NaN is NaN).
        return functools.reduce(jnp.add, [rounded(v * w[:, None])
                                          for v, (_, w) in zip(reads, taps)])
    # The scalar kernel starts from 0 and skips the corners outside.
    out = zero
    for m, v, (_, w) in zip(masks, reads, taps):
        out = out + jnp.where(m, rounded(v * w[:, None]), zero)
    return from_plus_zero(out)


def _bicubic(plan, adding, values, base, coords):
    """Bicubic (4-D): ``[N * P, C]``. The 4 x 4 taps are stacked on two leading axes
    ``[4 (y), 4 (x), P]``, so that each step below is one operation for all 16 of them (a
    program, and each derivative's, a sixteenth of the size it has tap by tap), with the
    same arithmetic per element as the kernel's, in its order."""
    (height, width), compute = plan.in_spatial, values.dtype
    y, x = coords
    fy, fx = (jax.lax.stop_gradient(jnp.floor(c)) for c in (y, x))
    steps = jnp.arange(-1, 3, dtype=compute)[:, None]
    # each axis's 4 taps, padded as ``compute_coordinates`` pads a tap: [4, P]
    ty, tx = _bounded(plan, fy + steps, height), _bounded(plan, fx + steps, width)
    mask = _inside(ty, height)[:, None] & _inside(tx, width)[None, :]  # [4, 4, P]
    flat = (base + jnp.where(mask, ty[:, None], 0).astype(jnp.int32) * width
            + jnp.where(mask, tx[None, :], 0).astype(jnp.int32))
    order = sort_order(flat.reshape(-1), values.shape[0])
    reads = read(values, order, adding=adding).reshape((4, 4, -1) + values.shape[1:])
    reads = jnp.where(mask[..., None], reads, jnp.zeros((), compute))
    cy = jnp.stack(_cubic_coefficients(y - fy))[:, :, None]  # [4, P, 1]
    cx = jnp.stack(_cubic_coefficients(x - fx))[None, :, :, None]  # [1, 4, P, 1]
    # interp_x[i] = sum_j cx[j] * v[i, j]; out = sum_i cy[i] * interp_x[i], left to right
    terms = rounded(cx * reads)
    lines = ((terms[:, 0] + terms[:, 1]) + terms[:, 2]) + terms[:, 3]
    terms = rounded(cy * lines)
    return ((terms[0] + terms[1]) + terms[2]) + terms[3]


def _linspace_from_neg_one(steps: int, align: bool, dtype) -> jax.Array:
    """torch's ``linspace_from_neg_one``: ``linspace(-1, 1, steps)`` as torch's CPU kernel
    computes it (the first half from -1 up, the second from 1 down), scaled by
    ``(steps - 1) / steps`` without align_corners."""
    if steps <= 1:
        return jnp.zeros((steps,), dtype)
    step = jnp.asarray(2.0, dtype) / jnp.asarray(steps - 1, dtype)
    i = jnp.arange(steps)
    half = steps // 2
    up = jnp.asarray(-1.0, dtype) + step * i.astype(dtype)
    down = jnp.asarray(1.0, dtype) - step * (steps - 1 - i).astype(dtype)
    line = jnp.where(i < half, up, down)
    if not align:
        line = line * jnp.asarray(steps - 1, dtype) / jnp.asarray(steps, dtype)
    return line


@program(0)
def affine_grid(plan: AffineGridPlan, theta: jax.Array) -> jax.Array:
    dtype, compute = theta.dtype, jnp.dtype(plan.compute_dtype)
    theta = theta.astype(compute)
    spatial = plan.spatial
    dims = len(spatial)
    # base[..., k]: x (the last axis), y[, z], then 1.
    lines = [_linspace_from_neg_one(s, plan.align_corners, compute) for s in spatial]
    shape = tuple(spatial)
    coords = []
    for k in range(dims):
        axis = dims - 1 - k
        line = lines[axis]
        expand = [1] * dims
        expand[axis] = line.shape[0]
        coords.append(jnp.broadcast_to(line.reshape(expand), shape))
    coords.append(jnp.ones(shape, compute))
    base = jnp.stack(coords, axis=-1).reshape(1, -1, dims + 1)
    out = jnp.einsum("npk,nik->npi", jnp.broadcast_to(base, (plan.batch,) + base.shape[1:]),
                     theta, precision=jax.lax.Precision.HIGHEST)
    return out.reshape((plan.batch,) + shape + (dims,)).astype(dtype)
