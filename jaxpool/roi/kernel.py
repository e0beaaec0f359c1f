"""``roi_align`` in JAX, as torchvision's CPU kernel computes it (``roi_align_kernel.cpp``
and ``roi_align_common.h``; :mod:`jaxpool.roi.plan` plans it).

Each box's bins are a grid of sample points; each sample is bilinear in the 4 pixels
around it, and a bin is the mean of its samples. The pixels' indices come from the floor
of the sample coordinates (integers, no derivative); the weights are differentiable
functions of the boxes. Every corner of every sample is one :func:`jaxpool.core.gather.read` of
the input laid out as ``[N * H * W, C]``: one sort of the indices serves every channel and
every derivative order, so no derivative holds a scatter.

The kernel's sums are kept in its order (per bin, the samples row by row, each sample
``w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4``), so the values are its bits.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxpool import strategy_table
from jaxpool.core.gather import read, sort_order
from jaxpool.core.rules import rounded
from jaxpool.roi.plan import RoiAlignPlan


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


def _axis(c, size):
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
    top = jnp.asarray(size - 1, dtype)
    high = jnp.where(last, top, low + 1)
    low = jnp.where(last, top, low)
    c = jnp.where(last, low, c)
    l = c - low
    h = jnp.asarray(1, dtype) - l
    return inside, low.astype(jnp.int32), high.astype(jnp.int32), h, l


def roi_align(plan: RoiAlignPlan, x: jax.Array, rois: jax.Array) -> jax.Array:
    """The plan's call on ``x`` and ``rois``, its derivatives adding back as the strategy
    table's grid-sampling row says for the backend traced for."""
    adding = strategy_table.lookup("grid sampling", "reads added back",
                                   strategy_table.current_backend())
    return _roi_align(plan, adding, x, rois)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _roi_align(plan: RoiAlignPlan, adding: str, x: jax.Array, rois: jax.Array) -> jax.Array:
    dtype, compute = x.dtype, jnp.dtype(plan.compute_dtype)
    if 0 in plan.out_shape:
        return jnp.zeros(plan.out_shape, dtype)
    x, rois = x.astype(compute), rois.astype(compute)
    n, c, height, width = plan.batch, plan.channels, plan.height, plan.width
    (bins_h, bins_w), (rows, cols) = plan.pooled, plan.grid
    if not plan.channels_last:
        x = jnp.moveaxis(x, 1, -1)
    values = x.reshape(n * height * width, c)

    index = jax.lax.stop_gradient(jnp.trunc(rois[:, 0]))
    known_image = (index >= 0) & (index < n)  # NaN: no
    image = jnp.where(known_image, index, 0).astype(jnp.int32)
    scale = jnp.asarray(plan.spatial_scale, compute)
    offset = jnp.asarray(0.5 if plan.aligned else 0.0, compute)
    start_w, start_h = rounded(rois[:, 1] * scale) - offset, rounded(rois[:, 2] * scale) - offset
    end_w, end_h = rounded(rois[:, 3] * scale) - offset, rounded(rois[:, 4] * scale) - offset
    roi_w, roi_h = end_w - start_w, end_h - start_h
    if not plan.aligned:  # std::max(extent, 1): malformed boxes count as 1 x 1
        one = jnp.ones((), compute)
        roi_w = jnp.where(roi_w < 1, one, roi_w)
        roi_h = jnp.where(roi_h < 1, one, roi_h)
    bin_h, bin_w = _divide(roi_h, bins_h), _divide(roi_w, bins_w)

    k = plan.rois
    if plan.adaptive:
        def per_bin(extent, bins):
            count = jax.lax.stop_gradient(jnp.ceil(_divide(extent, bins)))
            usable = jnp.isfinite(count) & (count > 0) & (count <= 2 ** 31 - 1)
            return jnp.where(usable, count, jnp.zeros((), compute))
        rows_k, cols_k = per_bin(roi_h, bins_h), per_bin(roi_w, bins_w)
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
    in_y, y_low, y_high, hy, ly = _axis(ys, height)
    in_x, x_low, x_high, hx, lx = _axis(xs, width)
    if plan.adaptive:
        in_y = in_y & (jnp.arange(rows)[None, None, :] < rows_k[:, None, None])
        in_x = in_x & (jnp.arange(cols)[None, None, :] < cols_k[:, None, None])

    # every sample's corners as [rows, cols, K, bins_h, bins_w]
    shape = (rows, cols, k, bins_h, bins_w)
    live = _rows(in_y) & _cols(in_x)
    base = (image * (height * width))[None, None, :, None, None]
    # An empty sample reads its image's first pixel with weight 0, as the kernel's (so
    # a NaN or inf there reaches the bin).
    empty = jnp.broadcast_to(base, shape)
    corners, weights = [], []
    for yi, wy in ((y_low, hy), (y_high, ly)):
        for xi, wx in ((x_low, hx), (x_high, lx)):
            corners.append(jnp.where(live, base + _rows(yi) * width + _cols(xi), empty))
            weights.append(jnp.where(live, _rows(wy) * _cols(wx), jnp.zeros((), compute)))
    flat = jnp.stack(corners, axis=2).reshape(-1)
    taps = read(values, sort_order(flat, n * height * width), adding=adding)
    taps = taps.reshape(rows, cols, 4, k * bins_h * bins_w, c)
    # The kernel's backward skips empty samples: no derivative reaches their reads.
    live_taps = live.reshape(rows, cols, 1, -1, 1)
    taps = jnp.where(live_taps, taps, jax.lax.stop_gradient(taps))

    # The kernel sums a bin's samples one after another, row by row: a scan over the
    # samples keeps that order (and one program for every grid size).
    kb = k * bins_h * bins_w
    w = jnp.stack(weights, axis=2).reshape(rows * cols, 4, kb, 1)
    if plan.adaptive:
        used = (jnp.arange(rows)[:, None, None] < rows_k[None, None, :]) & \
            (jnp.arange(cols)[None, :, None] < cols_k[None, None, :])  # [rows, cols, K]
        used = jnp.broadcast_to(used[..., None], (rows, cols, k, bins_h * bins_w))
    else:
        used = jnp.ones((rows, cols, k, bins_h * bins_w), bool)
    used = used.reshape(rows * cols, kb, 1)

    def add_sample(total, sample):
        w_s, taps_s, used_s = sample
        terms = rounded(w_s * taps_s)
        value = ((terms[0] + terms[1]) + terms[2]) + terms[3]
        return jnp.where(used_s, total + value, total), None

    total, _ = jax.lax.scan(add_sample, jnp.zeros((kb, c), compute),
                            (w, taps.reshape(rows * cols, 4, kb, c), used))
    out = _divide(total.reshape(k, bins_h, bins_w, c), count[:, None, None, None])
    # A box past the static bound, or naming no image (traced boxes only: concrete ones
    # are checked): NaN in all its outputs, never a silently different value.
    flagged = (over | ~known_image)[:, None, None, None]
    out = jnp.where(flagged, jnp.asarray(jnp.nan, compute), out)
    if not plan.channels_last:
        out = jnp.moveaxis(out, -1, 1)
    return out.astype(dtype)
