"""``roi_align`` in JAX, as torchvision's CPU kernel computes it (``roi_align_kernel.cpp``
and ``roi_align_common.h``; :mod:`jaxpool.roi.plan` plans it).

Each box's bins are a grid of sample points; each sample is bilinear in the 4 pixels
around it, and a bin is the mean of its samples. The pixels' indices come from the floor
of the sample coordinates (integers, no derivative); the weights are differentiable
functions of the boxes. The input is laid out as rows ``[N * H * W, C]``. The forward
reads each sample's four corners in its step of the sum (a gather each); the derivatives
are those of one :func:`jaxpool.core.gather.read` of every corner of every sample: one sort
of the indices serves every channel and every derivative order, so no derivative holds a
scatter.

The kernel's sums are kept in its order (per bin, the samples row by row, each sample
``w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4``), so the values are its bits.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxpool import strategy_table
from jaxpool.core.gather import read, read_pieces, sort_order
from jaxpool.core.rules import from_plus_zero, jvp_of_moving, rounded
from jaxpool.core.program import program
from jaxpool.roi.plan import (COORDINATE_LIMIT, LEVEL_EPS, MultiScalePlan, RoiAlignPlan,
                              RoiPoolPlan)


def _divide(a, b):
    """``a / b`` for a divisor that takes no derivative, ``b`` broadcast to ``a``'s shape
    behind an optimization barrier: XLA rewrites a division by a constant or a broadcast
    into a product by the reciprocal, which rounds differently from the kernel's
    division."""
    b = jnp.broadcast_to(jnp.asarray(b, a.dtype), a.shape)
    return a / jax.lax.optimization_barrier(jax.lax.stop_gradient(b))


def _samples(start, bin_size, bins, per_bin, count):
    """The sample coordinates ``[K, bins, per_bin]`` along one axis (``count``: each box's
    samples per bin, ``[K]``): ``start + p * bin + (i + .5) * bin / count``, in the
    kernel's order of operations."""
    dtype = start.dtype
    p = jnp.arange(bins, dtype=dtype)[None, :, None]
    i = jnp.arange(per_bin, dtype=dtype)[None, None, :] + jnp.asarray(0.5, dtype)
    bin_size = bin_size[:, None, None]
    return (start[:, None, None] + rounded(p * bin_size)) + \
        _divide(i * bin_size, count[:, None, None])


def _rows(a):
    """``[K, bins_h, rows]`` -> ``[rows, 1, K, bins_h, 1]``."""
    return jnp.transpose(a, (2, 0, 1))[:, None, :, :, None]


def _cols(a):
    """``[K, bins_w, cols]`` -> ``[1, cols, K, 1, bins_w]``."""
    return jnp.transpose(a, (2, 0, 1))[None, :, :, None, :]


def _axis(c, size):  # size: an int, or each box's as [K, 1, 1] (multi-scale)
    """``bilinear`` along one axis of ``size`` pixels (``pre_calc_for_bilinear_interpolate``):
    whether the coordinate is in range (``[-1, size]``; NaN is not), the low and high pixel,
    and their weights ``h`` and ``l``. The derivative is the branch's the kernel takes:
    zero where it sets the coordinate (at and below 0; on the last pixel and past it)."""
    dtype = c.dtype
    inside = (c >= -1) & (c <= size)
    c = jnp.where(c <= 0, jnp.zeros((), dtype), c)
    c = jnp.where(inside, c, jnp.zeros((), dtype))  # keeps the indices in range
    low = jax.lax.stop_gradient(jnp.floor(c))  # c >= 0: the int conversion's truncation
    last = low >= size - 1
    top = jnp.asarray(size - 1).astype(dtype)
    high = jnp.where(last, top, low + 1)
    low = jnp.where(last, top, low)
    c = jnp.where(last, low, c)
    l = c - low
    h = jnp.asarray(1, dtype) - l
    return inside, low.astype(jnp.int32), high.astype(jnp.int32), h, l


def _adding() -> str:
    return strategy_table.lookup("grid sampling", "reads added back",
                                 strategy_table.current_backend())


def roi_align(plan: RoiAlignPlan, x: jax.Array, rois: jax.Array) -> jax.Array:
    """The plan's call on ``x`` and ``rois`` (``roi_align`` or, position-sensitive,
    ``ps_roi_align``), its derivatives adding back as the strategy table's grid-sampling
    row says for the backend traced for."""
    return _roi_align(plan, _adding(), x, rois)


def _channels_first_groups(x, plan, channels_last):
    """``x`` as ``[N, PH, PW, H, W, C_out]``: output channel ``c`` of bin ``(i, j)`` reads
    input channel ``(c * PH + i) * PW + j`` (torchvision's position-sensitive layout)."""
    (ph, pw), n = plan.pooled, plan.batch
    if channels_last:
        x = x.reshape(n, plan.height, plan.width, plan.out_channels, ph, pw)
        return jnp.transpose(x, (0, 4, 5, 1, 2, 3))
    x = x.reshape(n, plan.out_channels, ph, pw, plan.height, plan.width)
    return jnp.transpose(x, (0, 2, 3, 4, 5, 1))


def _layout(plan, x):
    """``x`` as the rows the reads take, ``[N * H * W, C]`` (position-sensitive:
    ``[N * PH * PW * H * W, C_out]``, each bin's channel group its own block of rows)."""
    if plan.position_sensitive:
        x = _channels_first_groups(x, plan, plan.channels_last)
    elif not plan.channels_last:
        x = jnp.moveaxis(x, 1, -1)
    return x.reshape(-1, plan.out_channels)


def _bin_base(plan, image):
    """Each bin's first row in :func:`_layout`'s rows, ``[K, PH, PW]``."""
    (ph, pw), area = plan.pooled, plan.height * plan.width
    if not plan.position_sensitive:
        return jnp.broadcast_to((image * area)[:, None, None], (image.shape[0], ph, pw))
    group = (image[:, None, None] * ph + jnp.arange(ph)[None, :, None]) * pw + \
        jnp.arange(pw)[None, None, :]
    return group * area


def _batch_index(rois, n):
    """The boxes' images (truncated, as the kernel's ``int``) and whether each names one
    (NaN: no)."""
    index = jax.lax.stop_gradient(jnp.trunc(rois[:, 0]))
    known = (index >= 0) & (index < n)
    return jnp.where(known, index, 0).astype(jnp.int32), known


@program((0, 1))
def _roi_align(plan: RoiAlignPlan, adding: str, x: jax.Array, rois: jax.Array) -> jax.Array:
    dtype, compute = x.dtype, jnp.dtype(plan.compute_dtype)
    if 0 in plan.out_shape:
        return jnp.zeros(plan.out_shape, dtype)
    x, rois = x.astype(compute), rois.astype(compute)
    image, known_image = _batch_index(rois, plan.batch)
    out = align_bins(plan, adding, _layout(plan, x), rois, _bin_base(plan, image),
                     plan.height, plan.width, jnp.asarray(plan.spatial_scale, compute))
    out = jnp.where(~known_image[:, None, None, None], jnp.asarray(jnp.nan, compute), out)
    if not plan.channels_last:
        out = jnp.moveaxis(out, -1, 1)
    return out.astype(dtype)


def align_bins(plan, adding: str, values, rois, base, height, width, scale):
    """The bins ``[K, PH, PW, C]`` of ``roi_align`` (``plan.position_sensitive``:
    ``ps_roi_align``'s) from ``values``' rows; ``base``: each bin's first row ``[K, PH,
    PW]``; ``height``, ``width``, ``scale``: the map's (ints and a scalar), or each box's
    (``[K]`` arrays: multi-scale, every level's rows in ``values``). A box past the static
    grid is NaN."""
    compute = values.dtype
    (bins_h, bins_w), (rows, cols), k = plan.pooled, plan.grid, plan.rois
    ps = plan.position_sensitive
    per_box = not isinstance(height, int)
    if per_box:
        height_k, width_k = height.astype(compute), width.astype(compute)
        h_axis, w_axis = height_k[:, None, None], width_k[:, None, None]
        row_width = width[None, None, :, None, None]
    else:
        h_axis, w_axis, row_width = height, width, width

    aligned = plan.aligned or ps
    offset = jnp.asarray(0.5 if aligned else 0.0, compute)
    start_w, start_h = rounded(rois[:, 1] * scale) - offset, rounded(rois[:, 2] * scale) - offset
    end_w, end_h = rounded(rois[:, 3] * scale) - offset, rounded(rois[:, 4] * scale) - offset
    roi_w, roi_h = end_w - start_w, end_h - start_h
    if not aligned:  # std::max(extent, 1): malformed boxes count as 1 x 1
        one = jnp.ones((), compute)
        roi_w = jnp.where(roi_w < 1, one, roi_w)
        roi_h = jnp.where(roi_h < 1, one, roi_h)
    bin_h, bin_w = _divide(roi_h, bins_h), _divide(roi_w, bins_w)

    if plan.adaptive:
        def per_bin(extent, bins):
            count = jax.lax.stop_gradient(jnp.ceil(_divide(extent, bins)))
            usable = jnp.isfinite(count) & (count > 0) & (count <= 2 ** 31 - 1)
            return jnp.where(usable, count, jnp.zeros((), compute)), count
        (rows_k, raw_h), (cols_k, raw_w) = per_bin(roi_h, bins_h), per_bin(roi_w, bins_w)
        if ps:
            # ps_roi_align divides by the int product of the two counts, unclamped: 0 for
            # an empty box (0 / 0: NaN), negative for an inverted one (x86 converts NaN and
            # out-of-range floats to INT_MIN; the product wraps)
            def as_int(c):
                fits = jnp.isfinite(c) & (c >= -2 ** 31) & (c <= 2 ** 31 - 1)
                return jnp.where(fits, c, -2 ** 31).astype(jnp.int32)
            count = (as_int(raw_h) * as_int(raw_w)).astype(compute)
        else:
            count = jnp.maximum(rows_k * cols_k, jnp.ones((), compute))
        over = (rows_k > rows) | (cols_k > cols)
        # the divisor of the unused samples too (their values are dropped, their
        # derivatives must not be NaN)
        div_h = jnp.maximum(rows_k, jnp.ones((), compute))
        div_w = jnp.maximum(cols_k, jnp.ones((), compute))
    else:
        div_h, div_w = jnp.full((k,), rows, compute), jnp.full((k,), cols, compute)
        count = jnp.full((k,), max(rows * cols, 1), compute)
        over = jnp.zeros((k,), bool)

    ys = _samples(start_h, bin_h, bins_h, rows, div_h)  # [K, bins_h, rows]
    xs = _samples(start_w, bin_w, bins_w, cols, div_w)  # [K, bins_w, cols]
    in_y, y_low, y_high, hy, ly = _axis(ys, h_axis)
    in_x, x_low, x_high, hx, lx = _axis(xs, w_axis)
    if plan.adaptive:
        in_y = in_y & (jnp.arange(rows)[None, None, :] < rows_k[:, None, None])
        in_x = in_x & (jnp.arange(cols)[None, None, :] < cols_k[:, None, None])

    # every sample's corners as [rows, cols, K, bins_h, bins_w]
    shape = (rows, cols, k, bins_h, bins_w)
    live = _rows(in_y) & _cols(in_x)
    base = base[None, None]
    # An empty sample reads its bin's first pixel with weight 0, as roi_align's kernel
    # does (so a NaN or inf there reaches the bin); ps_roi_align's returns 0 unread.
    empty = jnp.broadcast_to(base, shape)
    corners, weights = [], []
    for yi, wy in ((y_low, hy), (y_high, ly)):
        for xi, wx in ((x_low, hx), (x_high, lx)):
            corners.append(jnp.where(live, base + _rows(yi) * row_width + _cols(xi), empty))
            weights.append(jnp.where(live, _rows(wy) * _cols(wx), jnp.zeros((), compute)))
    flat = jnp.stack(corners, axis=2).reshape(-1)
    order = sort_order(flat, values.shape[0])
    kb = k * bins_h * bins_w
    w = jnp.stack(weights, axis=2).reshape(rows * cols, 4, kb, 1)
    if plan.adaptive:
        used = (jnp.arange(rows)[:, None, None] < rows_k[None, None, :]) & \
            (jnp.arange(cols)[None, :, None] < cols_k[None, None, :])  # [rows, cols, K]
        used = jnp.broadcast_to(used[..., None], (rows, cols, k, bins_h * bins_w))
    else:
        used = jnp.ones((rows, cols, k, bins_h * bins_w), bool)
    used = used.reshape(rows * cols, kb, 1)
    live = live.reshape(rows * cols, kb, 1)
    # the kernel's sums start from +0.0
    total = from_plus_zero(_sum_samples(plan, adding, values, order, w, live, used))
    c = values.shape[1]
    out = _divide(total.reshape(k, bins_h, bins_w, c), count[:, None, None, None])
    # A box past the static bound: NaN in all its outputs, never a silently different
    # value.
    return jnp.where(over[:, None, None, None], jnp.asarray(jnp.nan, compute), out)


def _add_sample(total, w_s, taps_s, used_s):
    """A sample added to its bins' totals as the kernel adds it: ``w1 * v1 + w2 * v2 +
    w3 * v3 + w4 * v4``, each product rounded."""
    terms = [rounded(w_s[i] * taps_s[i]) for i in range(4)]
    value = ((terms[0] + terms[1]) + terms[2]) + terms[3]
    return jnp.where(used_s, total + value, total)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _sum_samples(plan, adding, values, order, w, live, used):
    """Each bin's sum of its samples ``[K * PH * PW, C]`` in the kernel's order, the
    samples' corners read from the rows ``values`` at ``order`` (sample-major, then
    corner, then bin; ``w``: ``[S, 4, K * PH * PW, 1]``, ``live`` and ``used``: ``[S, K *
    PH * PW, 1]``). A scan over the samples, each step reading its sample's four corners,
    a gather each, fused into the sum that takes them: one gather of every corner would
    write them all out first and read them again. The derivatives are those of
    :func:`_sum_samples_by_scan`, the same values, whose one read of every corner adds
    back in one sorted sum."""
    samples, kb, c = w.shape[0], w.shape[2], values.shape[1]
    index = order.index.reshape(samples, 4, kb)
    zero = jnp.zeros((), values.dtype)

    def add_sample(total, sample):
        index_s, w_s, live_s, used_s = sample
        taps = [jnp.take(values, index_s[i], axis=0, mode="clip") for i in range(4)]
        if plan.position_sensitive:
            taps = [jnp.where(live_s, t, zero) for t in taps]
        return _add_sample(total, w_s, taps, used_s), None

    total, _ = jax.lax.scan(add_sample, jnp.zeros((kb, c), values.dtype),
                            (index, w, live, used))
    return total


def _sum_samples_jvp(plan, adding, primals, tangents):
    # The tangent is that of one read, in the moving arguments alone (the boxes' weights
    # are constant when only the maps move); the values the forward's program's (the
    # same bits) where the tangent reads nothing of its own (a derivative of it takes
    # this rule again).
    out, tangent, moving = jvp_of_moving(
        functools.partial(_sum_samples_by_scan, plan, adding), primals, tangents, (0, 2))
    if moving == [0]:  # the tangent reads nothing: the values from the faster program
        out = _sum_samples(plan, adding, *primals)
    return out, tangent


_sum_samples.defjvp(_sum_samples_jvp, symbolic_zeros=True)


def _sum_samples_by_scan(plan, adding, values, order, w, live, used):
    """:func:`_sum_samples` from one gather of every corner (of the pixels as rows) and a
    scan over the samples: the program its derivatives take."""
    samples, kb, c = w.shape[0], w.shape[2], values.shape[1]
    taps = read(values, order, adding=adding).reshape(samples, 4, kb, c)
    # The kernel's backward skips empty samples: no derivative reaches their reads.
    # ps_roi_align's reads none there: 0 (a NaN in the pixel must not reach the bin, nor,
    # times its zero weight, the boxes' derivative).
    empty_taps = jnp.zeros((), taps.dtype) if plan.position_sensitive else \
        jax.lax.stop_gradient(taps)
    taps = jnp.where(live[:, None], taps, empty_taps)

    # The kernel sums a bin's samples one after another, row by row: a scan over the
    # samples keeps that order (and one program for every grid size).
    def add_sample(total, sample):
        return _add_sample(total, *sample), None

    total, _ = jax.lax.scan(add_sample, jnp.zeros((kb, c), values.dtype), (w, taps, used))
    return total


# --- roi_pool and ps_roi_pool ---------------------------------------------------------------

FLT_MAX = 3.4028234663852886e38
"""A non-empty bin's start in ``roi_pool``'s kernel, ``-FLT_MAX`` in every dtype: an
element wins only if it is greater (NaN and ``-inf`` never do)."""


def _round_half_away(x):
    """C's ``round``: half away from zero (``jnp.round`` rounds half to even)."""
    whole = jnp.trunc(x)
    return jnp.where(jnp.abs(x - whole) >= 0.5, whole + jnp.sign(x), whole)


def roi_pool(plan: RoiPoolPlan, x: jax.Array, rois: jax.Array) -> jax.Array:
    """The plan's ``roi_pool`` (position-sensitive: ``ps_roi_pool``) on ``x`` and
    ``rois``."""
    return _roi_pool(plan, _adding(), x, rois, False)


def roi_pool_argmax(plan: RoiPoolPlan, x: jax.Array, rois: jax.Array) -> jax.Array:
    """torchvision's second output of ``roi_pool``: each output's winning pixel, ``h * W +
    w`` in its image and channel, -1 where none wins (int32, the output's shape)."""
    return _roi_pool(plan, _adding(), x, rois, True)


def _fold(step, carry, columns, per_pixel):
    """``carry = step(carry, column, per_pixel[p])`` over the bins' pixels ``p`` in the
    kernel's order (``per_pixel``: arrays with the pixels on axis 0): unrolled over a list
    of columns (each its own gather), a scan over an array of them."""
    if isinstance(columns, list):
        for p, column in enumerate(columns):
            carry = step(carry, column, jax.tree.map(lambda a, p=p: a[p], per_pixel))
        return carry
    carry, _ = jax.lax.scan(lambda c, xs: (step(c, *xs), None), carry, (columns, per_pixel))
    return carry


def _first_greatest(columns, inside, pixel):
    """The max of each bin as the kernel takes it: the first pixel greater than all before
    it, from ``-FLT_MAX`` (NaN never is). ``(value, its pixel)``; none: ``(-FLT_MAX,
    -1)``."""
    def keep_greater(best, column, at):
        value, where = best
        inside_p, pixel_p = at
        greater = inside_p & (column > value)
        return jnp.where(greater, column, value), jnp.where(greater, pixel_p, where)

    shape, dtype = columns[0].shape, columns[0].dtype
    start = (jnp.full(shape, -FLT_MAX, dtype), jnp.full(shape, -1, pixel.dtype))
    return _fold(keep_greater, start, columns, (inside, pixel[..., None]))


def _columns(plan: RoiPoolPlan, adding: str, values, pixel_order, inside):
    """The bins' pixels read in ``pixel_order`` (pixel-major): a list of ``[K, PH, PW, C]``
    columns, one gather each (``plan.reads_apart``), else one array ``[P, K, PH, PW, C]``."""
    shape = inside.shape[1:4] + values.shape[1:]
    if plan.reads_apart:
        return [t.reshape(shape) for t in read_pieces(values, pixel_order, inside.shape[0],
                                                       adding=adding)]
    return read(values, pixel_order, adding=adding).reshape(inside.shape[:1] + shape)


def _sum_pixels(columns, inside):
    """Each bin's pixels added one after another, row by row, as the kernel adds them."""
    def add_pixel(total, column, inside_p):
        return jnp.where(inside_p, total + column, total)

    return _fold(add_pixel, jnp.zeros(columns[0].shape, columns[0].dtype), columns, inside)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _pool_bins(plan: RoiPoolPlan, adding: str, values, pixel_order, bin_order, inside, pixel):
    """Each bin's sum or max (``[K, PH, PW, C]``) of the rows ``values`` that
    ``pixel_order`` reads (pixel-major; ``inside`` ``[P, K, PH, PW, 1]``, ``pixel``
    ``[P, K, PH, PW]``), each pixel folded in as it is read. Its derivatives are those of
    :func:`_pool_bins_by_bin` (``bin_order``: the same reads, bin-major), the same
    values: there a chain of selects through the pixels would reach every pixel's
    derivative (a program XLA:CPU fuses into one loop per pixel), and the rows add back
    bin by bin, as torch's backward adds them."""
    columns = _columns(plan, adding, values, pixel_order, inside)
    if plan.position_sensitive:
        return _sum_pixels(columns, inside)
    return _first_greatest(columns, inside, pixel)[0]


@_pool_bins.defjvp
def _pool_bins_jvp(plan, adding, primals, tangents):
    # The same values (their bits), from the program whose derivatives are the old ones.
    values, _, bin_order, inside, _ = primals
    return jax.jvp(lambda v: _pool_bins_by_bin(plan, adding, v, bin_order, inside), (values,),
                   (tangents[0],))


def _pool_bins_by_bin(plan: RoiPoolPlan, adding: str, values, bin_order, inside):
    """:func:`_pool_bins` from one gather of every bin's pixels, bin-major: the program
    its derivatives take (each pixel's derivative a select, added back bin by bin)."""
    taps = inside.shape[0]
    columns = read(values, bin_order, adding=adding)
    columns = columns.reshape(inside.shape[1:4] + (taps,) + values.shape[1:])
    if plan.position_sensitive:
        return _sum_pixels(jnp.moveaxis(columns, 3, 0), inside)
    inside = jnp.moveaxis(inside, 0, 3)  # [K, PH, PW, P, 1]
    floor = jnp.asarray(-FLT_MAX, columns.dtype)
    candidate = inside & (columns > floor)
    best = jnp.max(jnp.where(candidate, columns, floor), axis=3, keepdims=True)
    winner = jnp.argmax(candidate & (columns == best), axis=3)
    return jnp.where(jnp.any(candidate, axis=3), _pick(columns, winner), floor)


@jax.custom_jvp
def _pick(taps, winner):
    """``taps[..., winner, :]`` along axis -2 (``winner``: ``[..., C]``): the value, its
    bits; the derivative goes to the winner alone, as a select (no gather to transpose)."""
    return jnp.take_along_axis(taps, winner[..., None, :], axis=-2)[..., 0, :]


@_pick.defjvp
def _pick_jvp(primals, tangents):
    taps, winner = primals
    chosen = jnp.arange(taps.shape[-2])[:, None] == winner[..., None, :]
    tangent = jnp.sum(jnp.where(chosen, tangents[0], jnp.zeros((), taps.dtype)), axis=-2)
    return _pick(taps, winner), tangent


@program((0, 1, 4))
def _roi_pool(plan: RoiPoolPlan, adding: str, x: jax.Array, rois: jax.Array,
              argmax: bool) -> jax.Array:
    dtype, compute = x.dtype, jnp.dtype(plan.compute_dtype)
    if 0 in plan.out_shape:
        return jnp.zeros(plan.out_shape, dtype)
    x = x.astype(compute)
    # the rounding makes the output piecewise constant in the boxes: no derivative there
    rois = jax.lax.stop_gradient(rois.astype(compute))
    (ph, pw), (bh, bw), k = plan.pooled, plan.bins, plan.rois
    image, known_image = _batch_index(rois, plan.batch)
    scaled = rois[:, 1:5] * jnp.asarray(plan.spatial_scale, compute)
    corners = _round_half_away(scaled)
    usable = jnp.all(jnp.isfinite(corners) & (jnp.abs(corners) <= COORDINATE_LIMIT), axis=1)
    corners = jnp.where(usable[:, None], corners, 0).astype(jnp.int32)
    plus = 0 if plan.position_sensitive else 1

    def edges(lo, hi, bins, limit):
        extent = jnp.maximum(corners[:, hi] - corners[:, lo] + plus, 1)
        size = _divide(extent.astype(compute), bins)
        p = jnp.arange(bins, dtype=compute)[None]
        start = jnp.floor(rounded(p * size[:, None])).astype(jnp.int32)
        end = jnp.ceil(rounded((p + 1) * size[:, None])).astype(jnp.int32)
        start = jnp.clip(start + corners[:, lo, None], 0, limit)
        end = jnp.clip(end + corners[:, lo, None], 0, limit)
        return start, end  # [K, bins]

    limit_h, limit_w = plan.limits
    h_start, h_end = edges(1, 3, ph, limit_h)
    w_start, w_end = edges(0, 2, pw, limit_w)
    over = jnp.any(h_end - h_start > bh, axis=1) | jnp.any(w_end - w_start > bw, axis=1)
    rows = h_start[:, :, None] + jnp.arange(bh)  # [K, PH, bh]
    cols = w_start[:, :, None] + jnp.arange(bw)  # [K, PW, bw]
    in_rows, in_cols = rows < h_end[:, :, None], cols < w_end[:, :, None]
    # [K, PH, PW, bh, bw], each bin's pixels row by row (the kernel's scan order)
    inside = in_rows[:, :, None, :, None] & in_cols[:, None, :, None, :]
    pixel = jnp.where(in_rows, rows, 0)[:, :, None, :, None] * plan.width + \
        jnp.where(in_cols, cols, 0)[:, None, :, None, :]
    # Pixel-major: the bins' p-th pixels are one run of rows, so that each pixel of every
    # bin can be read on its own and folded into the running max or sum.
    taps = bh * bw
    base = _bin_base(plan, image)[None]
    inside = jnp.moveaxis(inside.reshape(k, ph, pw, taps), 3, 0)[..., None]
    pixel = jnp.moveaxis(jnp.broadcast_to(pixel, inside.shape[1:4] + (bh, bw))
                         .reshape(k, ph, pw, taps), 3, 0)
    flat = jnp.where(inside[..., 0], base + pixel, base)
    values = _layout(plan, x)
    # The derivatives read the bins' pixels bin by bin, in the kernel's order, so that
    # they add back in the order torch's backward does.
    orders = (sort_order(flat.reshape(-1), values.shape[0]),
              sort_order(jnp.moveaxis(flat, 0, 3).reshape(-1), values.shape[0]))
    empty = ((h_end <= h_start)[:, :, None] | (w_end <= w_start)[:, None, :])[..., None]
    if argmax:
        columns = _columns(plan, adding, jax.lax.stop_gradient(values), orders[0], inside)
        index = _first_greatest(columns, inside, pixel)[1].astype(jnp.int32)
        return index if plan.channels_last else jnp.moveaxis(index, -1, 1)
    pooled = _pool_bins(plan, adding, values, *orders, inside, pixel)
    if plan.position_sensitive:
        pooled = from_plus_zero(pooled)  # the kernel's sum starts from +0.0
        area = ((h_end - h_start)[:, :, None] * (w_end - w_start)[:, None, :])[..., None]
        pooled = _divide(pooled, jnp.maximum(area, 1).astype(compute))
    out = jnp.where(empty, jnp.zeros((), compute), pooled)
    # a box past the static bound, naming no image (traced boxes), or with coordinates
    # the kernel's ints cannot hold: NaN in all its outputs
    flagged = (over | ~known_image | ~usable)[:, None, None, None]
    out = jnp.where(flagged, jnp.asarray(jnp.nan, compute), out)
    if not plan.channels_last:
        out = jnp.moveaxis(out, -1, 1)
    return out.astype(dtype)


# --- multi-scale roi_align ------------------------------------------------------------------

def multi_scale_roi_align(plan: MultiScalePlan, features: tuple, rois: jax.Array) -> jax.Array:
    """The plan's call: each box pooled from its level's map, every level's rows read at
    once."""
    return _multi_scale(plan, _adding(), tuple(features), rois)


def levels(plan: MultiScalePlan, rois: jax.Array) -> jax.Array:
    """torchvision's ``LevelMapper`` (:func:`jaxpool.roi.plan.box_levels`) in the boxes'
    dtype; -1 where it gives no level. One level: every box on it."""
    if len(plan.levels) == 1:
        return jnp.zeros(rois.shape[:1], jnp.int32)
    dtype = rois.dtype
    area = (rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2])
    s = _divide(jnp.sqrt(area), plan.canonical_scale)
    level = jnp.floor((jnp.asarray(plan.canonical_level, dtype) + jnp.log2(s))
                      + jnp.asarray(LEVEL_EPS, dtype))
    level = jnp.clip(level, plan.k_min, plan.k_max)
    return jnp.where(jnp.isnan(level), -1,
                     jnp.nan_to_num(level) - plan.k_min).astype(jnp.int32)


@program((0, 1))
def _multi_scale(plan: MultiScalePlan, adding: str, features: tuple,
                 rois: jax.Array) -> jax.Array:
    align = plan.align
    dtype, compute = features[0].dtype, jnp.dtype(align.compute_dtype)
    if 0 in align.out_shape:
        return jnp.zeros(align.out_shape, dtype)
    rois = rois.astype(compute)
    # the levels' rows one after another: [sum of N * H_l * W_l, C]
    values = jnp.concatenate([
        (f if align.channels_last else jnp.moveaxis(f, 1, -1)).astype(compute)
        .reshape(-1, align.channels) for f in features])
    n = align.batch
    sizes = [n * h * w for h, w in plan.levels]
    level = jax.lax.stop_gradient(levels(plan, rois))
    lookup = jnp.where(level < 0, 0, level)
    height = jnp.asarray([h for h, _ in plan.levels], jnp.int32)[lookup]
    width = jnp.asarray([w for _, w in plan.levels], jnp.int32)[lookup]
    scale = jnp.asarray(plan.scales, compute)[lookup]
    first = jnp.asarray([sum(sizes[:i]) for i in range(len(sizes))], jnp.int32)[lookup]
    image, known_image = _batch_index(rois, n)
    base = first + image * height * width
    base = jnp.broadcast_to(base[:, None, None], (align.rois,) + align.pooled)
    out = align_bins(align, adding, values, rois, base, height, width, scale)
    out = jnp.where(~known_image[:, None, None, None], jnp.asarray(jnp.nan, compute), out)
    # no level (an inverted box): torchvision leaves the row at 0
    out = jnp.where((level < 0)[:, None, None, None], jnp.zeros((), compute), out)
    if not align.channels_last:
        out = jnp.moveaxis(out, -1, 1)
    return out.astype(dtype)
