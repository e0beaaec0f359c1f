"""``multi_scale_deformable_attention`` in JAX (:mod:`jaxpool.deformable.plan` plans it).

Every point of every head, query and level reads its 4 corners (bilinear) or its nearest
pixel from ``value`` laid out as rows ``[B * S * heads, head_dim]``, level ``l``'s pixel
``(y, x)`` of example ``b`` and head ``h`` at row ``(b * S + start_l + y * W_l + x) * heads
+ h``. A corner outside its level reads its level's first pixel and a select zeros it: the
reference's masked read (0 times the corner's weight, NaN and inf included), and a
select, not a product, so nothing of that pixel reaches the sum or a derivative. All the
reads are one :func:`jaxpool.core.gather.read`, so one sort of the positions serves every
level, head, channel and derivative order, and no derivative holds a scatter (on the GPU
and TPU tables; the CPU table adds back with XLA's scatter-add, deterministic there).

The sum is the reference's, written out: each point's corners
``((nw * v_nw + ne * v_ne) + sw * v_sw) + se * v_se`` (grid_sample's vectorized kernel's
order), then the points' ``attention weight * sample``, level by level and point by point.
Each product goes through :func:`~jaxpool.core.rules.rounded`, so that no program fuses it
into a multiply-add: every transform gives the same bits.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxpool import strategy_table
from jaxpool.core.gather import read, sort_order
from jaxpool.core.rules import rounded
from jaxpool.deformable.plan import DeformablePlan, DeformConvPlan


def source_coordinate(loc, size: int):
    """The pixel coordinate of a location in ``[0, 1]`` along an axis of ``size`` pixels,
    as the reference computes it: ``grid_sample``'s unnormalization of ``g = 2 * loc - 1``
    without align_corners, ``((g + 1) * (size / 2)) - 0.5``, every operation rounded (the
    vectorized CPU kernel's expression, as :func:`jaxpool.grid_sample` computes it). Its
    derivative in ``loc`` is ``size``."""
    # (``rounded`` keeps XLA from folding ``(2 * loc - 1) + 1`` into ``2 * loc``.)
    g = rounded(2 * loc - jnp.asarray(1, loc.dtype))
    return rounded((g + jnp.asarray(1, loc.dtype)) * jnp.asarray(size / 2, loc.dtype)) - \
        jnp.asarray(0.5, loc.dtype)


def nearest_index(loc, size: int):
    """RT-DETRv2's discrete sampling along an axis of ``size`` pixels:
    ``int64(loc * size + 0.5)`` clamped into ``[0, size - 1]``, as a float. The conversion
    truncates, which the clamp makes a floor; x86 converts NaN, infinities and values past
    int64 to INT64_MIN, which the clamp makes 0."""
    c = jnp.floor(rounded(loc * jnp.asarray(size, loc.dtype)) + jnp.asarray(0.5, loc.dtype))
    inside = c < jnp.asarray(2.0 ** 63, loc.dtype)  # NaN and +inf: no
    return jax.lax.stop_gradient(
        jnp.where(inside, jnp.clip(c, 0, size - 1), jnp.zeros((), loc.dtype)))


def _inside(c, size):
    """An integer-valued coordinate inside ``[0, size)`` (NaN: no)."""
    return (c >= 0) & (c <= size - 1)


def _bilinear_taps(x, y, width, height):
    """The corners of points at pixel coordinates ``x``, ``y``: a list of 4 (column, row,
    inside, weight) in grid_sample's order nw, ne, sw, se, with its weights
    (``nw = s * e``, ...)."""
    x0 = jax.lax.stop_gradient(jnp.floor(x))
    y0 = jax.lax.stop_gradient(jnp.floor(y))
    w = x - x0
    e = 1 - w
    n = y - y0
    s = 1 - n
    taps = []
    for dy, wy in ((0, s), (1, n)):
        for dx, wx in ((0, e), (1, w)):
            col, row = x0 + dx, y0 + dy
            taps.append((col, row, _inside(col, width) & _inside(row, height),
                         rounded(wy * wx)))
    return taps


def multi_scale_deformable_attention(plan: DeformablePlan, value: jax.Array,
                                     locations: jax.Array, weights: jax.Array) -> jax.Array:
    """The plan's call, its derivatives adding back as the strategy table's
    deformable-attention row says for the backend traced for."""
    adding = strategy_table.lookup("deformable attention", "reads added back",
                                   strategy_table.current_backend())
    return _attention(plan, adding, value, locations, weights)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _attention(plan: DeformablePlan, adding: str, value: jax.Array, locations: jax.Array,
               weights: jax.Array) -> jax.Array:
    dtype, compute = value.dtype, jnp.dtype(plan.compute_dtype)
    b, q, heads, dim = plan.batch, plan.queries, plan.heads, plan.head_dim
    n, points = b * q * heads, plan.total_points
    if n == 0 or dim == 0:
        return jnp.zeros(plan.out_shape, dtype)
    value, locations, weights = (a.astype(compute) for a in (value, locations, weights))
    rows = b * plan.tokens * heads
    table = value.reshape(rows, dim)
    locations = locations.reshape(n, points, 2)
    weights = weights.reshape(n, points)
    # Each (example, query, head)'s row at position 0 of the first level.
    i = jax.lax.iota(jnp.int32, n)
    base = ((i // (q * heads)) * (plan.tokens * heads) + i % heads)[:, None]

    indices, tap_weights, tap_inside = [], [], []
    first = 0
    for (height, width), start, count in zip(plan.levels, plan.starts, plan.points):
        loc = locations[:, first:first + count]
        first += count
        level = base + start * heads
        if plan.mode == "nearest":
            col = nearest_index(loc[..., 0], width)
            row = nearest_index(loc[..., 1], height)
            flat = (row * width + col).astype(jnp.int32)
            indices.append((level + flat * heads)[..., None])
            continue
        x = source_coordinate(loc[..., 0], width)
        y = source_coordinate(loc[..., 1], height)
        level_index, level_weights, level_inside = [], [], []
        for col, row, inside, weight in _bilinear_taps(x, y, width, height):
            flat = (jnp.where(inside, row, 0) * width + jnp.where(inside, col, 0))
            level_index.append(level + flat.astype(jnp.int32) * heads)
            level_weights.append(weight)
            level_inside.append(inside)
        indices.append(jnp.stack(level_index, -1))
        tap_weights.append(jnp.stack(level_weights, -1))
        tap_inside.append(jnp.stack(level_inside, -1))
    taps = plan.taps
    index = jnp.concatenate(indices, 1).reshape(-1)  # [n, points, taps]
    read_rows = read(table, sort_order(index, rows), adding=adding)
    read_rows = read_rows.reshape(n, points, taps, dim)
    if plan.mode == "bilinear":
        inside = jnp.concatenate(tap_inside, 1)[..., None]  # [n, points, 4, 1]
        read_rows = jnp.where(inside, read_rows, jnp.zeros((), compute))

    if plan.mode == "nearest":
        samples = read_rows[:, :, 0]
    else:
        corner = jnp.concatenate(tap_weights, 1)  # [n, points, 4]
        samples = functools.reduce(jnp.add, [rounded(corner[:, :, t, None] * read_rows[:, :, t])
                                             for t in range(taps)])
    terms = rounded(weights[..., None] * samples)  # [n, points, dim]
    out = functools.reduce(jnp.add, [terms[:, p] for p in range(points)])
    return out.reshape(plan.out_shape).astype(dtype)


# --- deform_conv2d --------------------------------------------------------------------------

def _conv_axis(c, size: int):
    """One axis of torchvision's ``bilinear_interpolate`` at coordinate ``c``: its low
    pixel (no derivative), the weights of the low and high pixel (``1 - l``, ``l``), and
    whether each of the two is on the map."""
    low = jax.lax.stop_gradient(jnp.floor(c))
    l = c - low
    h = jnp.asarray(1, c.dtype) - l
    return low, (h, l), (low >= 0, low + 1 <= size - 1)


def deform_conv2d(plan: DeformConvPlan, input: jax.Array, offset: jax.Array,
                  weight: jax.Array, bias: jax.Array | None,
                  mask: jax.Array | None) -> jax.Array:
    """The plan's call, its derivatives adding back as the strategy table's grid-sampling
    row says for the backend traced for (the same bilinear reads, added back the same
    way)."""
    adding = strategy_table.lookup("grid sampling", "reads added back",
                                   strategy_table.current_backend())
    return _deform_conv2d(plan, adding, input, offset, weight, bias, mask)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _deform_conv2d(plan: DeformConvPlan, adding: str, input: jax.Array, offset: jax.Array,
                   weight: jax.Array, bias: jax.Array | None,
                   mask: jax.Array | None) -> jax.Array:
    dtype, compute = input.dtype, jnp.dtype(plan.compute_dtype)
    if 0 in plan.out_shape:
        return jnp.zeros(plan.out_shape, dtype)
    b, c, height, width = plan.batch, plan.channels, plan.height, plan.width
    groups, (kh, kw), (oh, ow) = plan.offset_groups, plan.kernel, plan.out
    taps, per_group = plan.taps, c // groups
    input, offset, weight = (a.astype(compute) for a in (input, offset, weight))
    # rows [B * G * H * W, C / G]: offset group g of example b reads block b * G + g
    table = jnp.transpose(input.reshape(b, groups, per_group, height, width),
                          (0, 1, 3, 4, 2)).reshape(-1, per_group)
    # offset channel (g, tap, axis): [B, G, taps, 2, out_h, out_w], (dy, dx) per tap
    offset = offset.reshape(b, groups, taps, 2, oh, ow)
    # The taps' positions before the offsets, in ints as the kernel computes them:
    # (out_y * stride - pad) + i * dilation, [taps, out_h, 1] and [taps, 1, out_w].
    (sh, sw), (ph, pw), (dh, dw) = plan.stride, plan.padding, plan.dilation
    i, j = np.divmod(np.arange(taps), kw)
    base_y = (np.arange(oh)[None, :] * sh - ph + i[:, None] * dh)[:, :, None]
    base_x = (np.arange(ow)[None, :] * sw - pw + j[:, None] * dw)[:, None, :]
    y = jnp.asarray(base_y, compute) + offset[:, :, :, 0]
    x = jnp.asarray(base_x, compute) + offset[:, :, :, 1]
    # bilinear_interpolate's early exit: 0 outside (-1, size) on either axis (NaN: inside).
    # The coordinates of a tap that exits are set to 0, so that no derivative reaches them
    # (an infinite one would give NaN weights, and NaN times a zero cotangent).
    inside = ~((y <= -1) | (y >= height) | (x <= -1) | (x >= width))
    zero = jnp.zeros((), compute)
    y, x = jnp.where(inside, y, zero), jnp.where(inside, x, zero)
    y0, wy, (top, bottom) = _conv_axis(y, height)
    x0, wx, (left, right) = _conv_axis(x, width)
    block = (jax.lax.iota(jnp.int32, b * groups).reshape(b, groups, 1, 1, 1) *
             (height * width))
    index, live, corner = [], [], []
    for dy, hy, ry in ((0, wy[0], top), (1, wy[1], bottom)):
        for dx, hx, rx in ((0, wx[0], left), (1, wx[1], right)):
            ok = inside & ry & rx
            # a corner off the map reads its block's first pixel, which a select zeros
            row = jnp.where(ok, y0 + dy, 0).astype(jnp.int32)
            col = jnp.where(ok, x0 + dx, 0).astype(jnp.int32)
            index.append(block + row * width + col)
            live.append(ok)
            corner.append(rounded(hy * hx))  # w1 = hh * hw, w2 = hh * lw, ...
    flat = jnp.stack(index, -1).reshape(-1)  # [B, G, taps, out_h, out_w, 4]
    values = read(table, sort_order(flat, b * groups * height * width), adding=adding)
    values = values.reshape(b, groups, taps, oh, ow, 4, per_group)
    terms = [rounded(corner[t][..., None] * jnp.where(live[t][..., None], values[..., t, :],
                                                      zero)) for t in range(4)]
    # w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4, left to right
    sample = functools.reduce(jnp.add, terms)
    sample = jnp.where(inside[..., None], sample, zero)
    if mask is not None:
        sample = rounded(mask.astype(compute).reshape(b, groups, taps, oh, ow)[..., None] *
                         sample)
    # the columns [B, C, taps, P]: channel g * C/G + c, as im2col lays them out
    columns = jnp.transpose(sample, (0, 1, 5, 2, 3, 4)).reshape(b, c * taps, oh * ow)
    wg = plan.weight_groups
    columns = columns.reshape(b, wg, (c // wg) * taps, oh * ow)
    kernel = weight.reshape(wg, plan.out_channels // wg, (c // wg) * taps)
    # one matmul, the weight groups its batch: [groups, out / groups, B, P]
    out = jax.lax.dot_general(kernel, columns, (((2,), (2,)), ((0,), (1,))),
                              precision=jax.lax.Precision.HIGHEST)
    out = jnp.transpose(out, (2, 0, 1, 3)).reshape(plan.out_shape)
    if bias is not None:
        out = out + bias.astype(compute)[None, :, None, None]
    return out.astype(dtype)
