"""``multi_scale_deformable_attention`` in JAX (:mod:`jaxpool.deformable.plan` plans it).

Every point of every head, query and level reads its 4 corners (bilinear) or its nearest
pixel from ``value`` laid out as rows ``[B * S * heads, head_dim]``, level ``l``'s pixel
``(y, x)`` of example ``b`` and head ``h`` at row ``(b * S + start_l + y * W_l + x) * heads
+ h``. A corner outside its level reads its level's first pixel and a select zeros it: the
reference's masked read (0 times the corner's weight, NaN and inf included), and a
select, not a product, so nothing of that pixel reaches the sum or a derivative. The
bilinear forward reads each point's corners in its step of the sum (a gather each); the
derivatives are those of one :func:`jaxpool.core.gather.read` of every corner, so one sort
of the positions serves every level, head, channel and derivative order, and no
derivative holds a scatter (on the GPU and TPU tables; the CPU table adds back with XLA's
scatter-add, deterministic there).

The sum is the reference's, written out: each point's corners
``((nw * v_nw + ne * v_ne) + sw * v_sw) + se * v_se`` (grid_sample's vectorized kernel's
order), then the points' ``attention weight * sample``, level by level and point by point,
from +0.0 as the reference's torch sum. Each product goes through
:func:`~jaxpool.core.rules.rounded`, so that no program fuses it into a multiply-add:
every transform gives the same bits.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxpool import strategy_table
from jaxpool.core.gather import read, sort_order
from jaxpool.core.rules import from_plus_zero, jvp_of_moving, rounded
from jaxpool.core.program import program
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


@program((0, 1), recompute=False)
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
    index = jnp.concatenate(indices, 1).reshape(-1)  # [n, points, taps]
    order = sort_order(index, rows)
    if plan.mode == "nearest":
        out = _sum_of_reads(plan, adding, table, order, None, None, weights)
    else:
        corner = jnp.concatenate(tap_weights, 1)  # [n, points, 4]
        inside = jnp.concatenate(tap_inside, 1)[..., None]  # [n, points, 4, 1]
        out = _sum_of_points(plan, adding, table, order, corner, inside, weights)
    # the reference's sum over the points (torch's sum) starts from +0.0
    return from_plus_zero(out).reshape(plan.out_shape).astype(dtype)


def _sample(corner, reads, inside):
    """A point's bilinear sample from its 4 corners' reads (each ``[..., dim]``;
    ``corner``, ``inside``: the 4 corners' on an axis before them): a corner outside
    reads 0."""
    zero = jnp.zeros((), reads[0].dtype)
    return functools.reduce(jnp.add, [rounded(corner[t] * jnp.where(inside[t], reads[t], zero))
                                      for t in range(4)])


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _sum_of_points(plan, adding, table, order, corner, inside, weights):
    """Bilinear's ``[n, dim]``: the points' weighted samples added in the reference's
    order, the corners read from ``table`` at ``order`` (``[n, points, 4]`` flattened;
    ``corner`` ``[n, points, 4]``, ``inside`` ``[n, points, 4, 1]``, ``weights`` ``[n,
    points]``): a scan over the points, each step reading its point's 4 corners with a
    gather each, fused into the sums (one read of every corner writes them all out
    first). The derivatives are those of :func:`_sum_of_reads`, the same values."""
    n, points = weights.shape
    index = jnp.transpose(order.index.reshape(n, points, 4), (1, 2, 0))  # [points, 4, n]
    corner = jnp.transpose(corner, (1, 2, 0))[..., None]  # [points, 4, n, 1]
    inside = jnp.transpose(inside, (1, 2, 0, 3))
    weights = weights.T[..., None]  # [points, n, 1]

    def step(total, point):
        index_p, corner_p, inside_p, weight_p = point
        reads = [jnp.take(table, index_p[t], axis=0, mode="clip") for t in range(4)]
        return total + rounded(weight_p * _sample(corner_p, reads, inside_p)), None

    # -0.0 + t is t, its sign too: the one-read program's sum, from its first term (the
    # caller's from_plus_zero then starts it from +0.0, as the reference's torch sum)
    start = jnp.full((n, table.shape[1]), -0.0, table.dtype)
    total, _ = jax.lax.scan(step, start, (index, corner, inside, weights))
    return total


def _sum_of_points_jvp(plan, adding, primals, tangents):
    # The tangent is that of one read, in the moving arguments alone; the values the
    # scan's where the tangent reads nothing of its own (only the value moves: a
    # derivative of it takes this rule again).
    out, tangent, moving = jvp_of_moving(
        functools.partial(_sum_of_reads, plan, adding), primals, tangents, (0, 2, 4))
    if moving == [0]:
        out = _sum_of_points(plan, adding, *primals)
    return out, tangent


_sum_of_points.defjvp(_sum_of_points_jvp, symbolic_zeros=True)


def _sum_of_reads(plan, adding, table, order, corner, inside, weights):
    """The points' weighted samples ``[n, dim]`` from one read of every tap (nearest:
    ``corner`` and ``inside`` None), each point's sample then its weighted term added in
    the reference's order."""
    n, points = weights.shape
    read_rows = read(table, order, adding=adding).reshape(n, points, plan.taps, -1)
    if plan.mode == "nearest":
        samples = read_rows[:, :, 0]
    else:
        samples = _sample(jnp.moveaxis(corner, 2, 0)[..., None],
                          [read_rows[:, :, t] for t in range(4)],
                          jnp.moveaxis(inside, 2, 0))
    terms = rounded(weights[..., None] * samples)  # [n, points, dim]
    return functools.reduce(jnp.add, [terms[:, p] for p in range(points)])


# --- deform_conv2d --------------------------------------------------------------------------
#
# The layout, chosen by measurement (BENCHMARKS.md, "Deformable convolution (CPU)";
# benchmarks/cells/deform_conv.py):
#
# - The input is read as rows ``[B * H * W * G + 1, C / G]``: channels last, so that each
#   corner is one contiguous row, and a last row of zeros that every corner off the map
#   reads. That row stands in for torchvision's "read only where on the map": ``w * 0`` is
#   0 for the finite weights a corner has, and no derivative reaches the input through it
#   (it is not the input's). A tap that exits reads it at all four corners (its coordinates
#   zeroed, its weights finite), so its sample is 0 without a select.
# - The per-tap quantities (corner rows and weights) are computed in the offsets' own
#   layout ``[B, G, taps, P]``, where the arithmetic is contiguous, and the weights written
#   out once (:func:`_written_out`): fused into the read, XLA would compute them again for
#   every channel.
# - The samples come out ``[B * P, taps, C]``, channels last as the rows were read, and the
#   one ``dot_general`` contracts (taps, channels) with the weight as it is; XLA transposes
#   the weight (``O * C * taps``) rather than the columns (``B * P * C * taps``).
# - The derivatives of the corners' sum are contractions (:func:`_bilinear`); the forward
#   program has the one ``dot_general`` with the weight, as torchvision's im2col.


@jax.custom_jvp
def _written_out(x):
    """``x`` (the corner weights, stacked), written out once rather than computed again
    inside the read for every channel: behind the barrier XLA:CPU does not fold the
    consumer's slices of the stack into its producers, and keeps the stack a fusion of its
    own. The tangent passes through untouched, so that no derivative pads around it."""
    return jax.lax.optimization_barrier(x)


@_written_out.defjvp
def _written_out_jvp(primals, tangents):
    return _written_out(primals[0]), tangents[0]


@jax.custom_jvp
def _bilinear(corner: jax.Array, values: jax.Array) -> jax.Array:
    """``w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4`` (torchvision's sum, left to right, each
    product rounded) of ``corner`` ``[..., 4]`` and ``values`` ``[..., 4, C]``."""
    return functools.reduce(jnp.add, [rounded(corner[..., t, None] * values[..., t, :])
                                      for t in range(4)])


@_bilinear.defjvp
def _bilinear_jvp(primals, tangents):
    # The tangent as two contractions over the 4 corners, batched over the rest. Their
    # transposes are contractions too: the weights' cotangent reads the values where they
    # lie, where the derivative of the sum above copies each corner's values out and
    # reduces them one by one (slower at every order on XLA:CPU).
    (w, v), (dw, dv) = primals, tangents
    lead = tuple(range(w.ndim - 1))
    dims = (((w.ndim - 1,), (w.ndim - 1,)), (lead, lead))
    highest = jax.lax.Precision.HIGHEST
    return _bilinear(w, v), (jax.lax.dot_general(dw, v, dims, precision=highest) +
                             jax.lax.dot_general(w, dv, dims, precision=highest))


def deform_conv2d(plan: DeformConvPlan, input: jax.Array, offset: jax.Array,
                  weight: jax.Array, bias: jax.Array | None,
                  mask: jax.Array | None) -> jax.Array:
    """The plan's call, its derivatives adding back as the strategy table's grid-sampling
    row says for the backend traced for (the same bilinear reads, added back the same
    way)."""
    adding = strategy_table.lookup("grid sampling", "reads added back",
                                   strategy_table.current_backend())
    return _deform_conv2d(plan, adding, input, offset, weight, bias, mask)


@program((0, 1), recompute=False)
def _deform_conv2d(plan: DeformConvPlan, adding: str, input: jax.Array, offset: jax.Array,
                   weight: jax.Array, bias: jax.Array | None,
                   mask: jax.Array | None) -> jax.Array:
    dtype, compute = input.dtype, jnp.dtype(plan.compute_dtype)
    if 0 in plan.out_shape:
        return jnp.zeros(plan.out_shape, dtype)
    b, c, height, width = plan.batch, plan.channels, plan.height, plan.width
    groups, (kh, kw), (oh, ow) = plan.offset_groups, plan.kernel, plan.out
    taps, per_group, p = plan.taps, c // groups, oh * ow
    input, offset, weight = (a.astype(compute) for a in (input, offset, weight))
    # rows [B * H * W * G, C / G]: pixel (y, x) of example b, offset group g at row
    # ((b * H + y) * W + x) * G + g; then the zero row, ``rows``
    rows = b * height * width * groups
    table = jnp.transpose(input.reshape(b, groups, per_group, height * width),
                          (0, 3, 1, 2)).reshape(rows, per_group)
    table = jnp.concatenate([table, jnp.zeros((1, per_group), compute)])
    # offset channel (g, tap, axis): [B, G, taps, 2, P], (dy, dx) per tap
    offset = offset.reshape(b, groups, taps, 2, p)
    # The taps' positions before the offsets, in ints as the kernel computes them:
    # (out_y * stride - pad) + i * dilation, [taps, P].
    (sh, sw), (ph, pw), (dh, dw) = plan.stride, plan.padding, plan.dilation
    i, j = np.divmod(np.arange(taps), kw)
    oy, ox = np.divmod(np.arange(p), ow)
    y = jnp.asarray(oy[None, :] * sh - ph + i[:, None] * dh, compute) + offset[:, :, :, 0]
    x = jnp.asarray(ox[None, :] * sw - pw + j[:, None] * dw, compute) + offset[:, :, :, 1]
    # bilinear_interpolate's early exit: 0 outside (-1, size) on either axis (NaN: inside).
    # The coordinates of a tap that exits are set to 0, so that no derivative reaches them
    # (an infinite one would give NaN weights, and NaN times a zero cotangent).
    inside = ~((y <= -1) | (y >= height) | (x <= -1) | (x >= width))
    zero = jnp.zeros((), compute)
    y, x = jnp.where(inside, y, zero), jnp.where(inside, x, zero)
    y0 = jax.lax.stop_gradient(jnp.floor(y))
    x0 = jax.lax.stop_gradient(jnp.floor(x))
    ly, lx = y - y0, x - x0
    one = jnp.asarray(1, compute)
    hy, hx = one - ly, one - lx
    # each corner on the map (a NaN coordinate: none), else the zero row
    top, bottom = inside & (y0 >= 0), inside & (y0 + 1 <= height - 1)
    left, right = x0 >= 0, x0 + 1 <= width - 1
    block = (jax.lax.iota(jnp.int32, b).reshape(b, 1, 1, 1) * (height * width * groups) +
             jax.lax.iota(jnp.int32, groups).reshape(groups, 1, 1))
    origin = block + (jnp.where(inside, y0, 0).astype(jnp.int32) * width +
                      jnp.where(inside, x0, 0).astype(jnp.int32)) * groups
    indices, corners = [], []
    for dy, wy, ry in ((0, hy, top), (1, ly, bottom)):
        for dx, wx, rx in ((0, hx, left), (1, lx, right)):
            indices.append(jnp.where(ry & rx, origin + (dy * width + dx) * groups, rows))
            corners.append(rounded(wy * wx))  # w1 = hh * hw, w2 = hh * lw, ...
    # [B, G, taps, P, 4] -> [B, P, taps, G, 4]: the order the columns take
    index = jnp.transpose(jnp.stack(indices, -1), (0, 3, 2, 1, 4))
    corner = jnp.transpose(_written_out(jnp.stack(corners, -1)), (0, 3, 2, 1, 4))
    values = read(table, sort_order(index.reshape(-1), rows + 1), adding=adding)
    values = values.reshape(b, p, taps, groups, 4, per_group)
    # torchvision's bilinear sum, then times the mask
    sample = _bilinear(corner, values)
    if mask is not None:
        m = jnp.transpose(mask.astype(compute).reshape(b, groups, taps, p), (0, 3, 2, 1))
        sample = rounded(m[..., None] * sample)
    # the columns [B * P, taps, C] (channel g * C/G + c), contracted over (taps, channels)
    # with the weight [groups, out / groups, C / groups, taps] in one matmul, the weight
    # groups its batch: [groups, B * P, out / groups]
    wg = plan.weight_groups
    columns = sample.reshape(b * p, taps, wg, c // wg)
    kernel = weight.reshape(wg, plan.out_channels // wg, c // wg, taps)
    out = jax.lax.dot_general(columns, kernel, (((1, 3), (3, 2)), ((2,), (0,))),
                              precision=jax.lax.Precision.HIGHEST)
    out = jnp.transpose(out.reshape(wg, b, p, plan.out_channels // wg), (1, 0, 3, 2))
    out = out.reshape(plan.out_shape)
    if bias is not None:
        out = out + bias.astype(compute)[None, :, None, None]
    return out.astype(dtype)
