"""The roi_align cells: a Mask R-CNN head's RoIAlign over four FPN levels (7x7 box head,
14x14 mask head), float32 on the CPU, beside torch and a JAX peer:

- jaxpool.roi_align;
- the JAX peer: bilinear reads with ``jnp`` indexing, as a plain JAX port of torchvision's
  algorithm writes it (its derivatives scatter-add);
- torch: torchvision does not import beside this torch, so torch's side is torchvision's
  algorithm written in torch ops (every sample's four corners gathered at once, as
  torchvision's own pure-torch ``_roi_align``), not its C++ kernel.

Each cell is a :class:`benchmarks.derivatives.Cell`, timed forward, as the gradient in the
feature maps (the boxes are constants, as Mask R-CNN's proposals) and as the second
derivative by ``python -m benchmarks.programs.patches_roi`` (with the unfold and fold
cells of :mod:`benchmarks.cells.patches`). The cells hold 64 channels per level (Mask
R-CNN's FPN has 256: each call of torch's side would take seconds), the mask head 256
boxes (the positive boxes of a training batch) and the box head 1000.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from benchmarks.derivatives import Cell

__all__ = ["DEFAULT_CELLS", "IMAGE", "STRIDES", "cells"]

# FPN levels P2-P5 of an 800 x 800 image: strides 4 to 32.
IMAGE = 800
STRIDES = (4, 8, 16, 32)


def _roi_cell(words, output, boxes, channels, ratio=2) -> Cell:
    """``MultiScaleRoIAlign``'s pooling: ``boxes`` (a multiple of 4) spread evenly over
    P2-P5 (``channels`` each) of one image, each level's boxes pooled from its own map
    (``output`` x ``output`` bins, ``sampling_ratio=ratio``, ``aligned=False``) and the
    results concatenated."""
    import jaxpool

    roi_align = jaxpool.roi_align
    maps = tuple(_normal((1, channels, IMAGE // s, IMAGE // s), 2 + i)
                 for i, s in enumerate(STRIDES))
    rois = _level_boxes(boxes)
    scales = tuple(1.0 / s for s in STRIDES)

    def ours(xs, cs):
        import jax.numpy as jnp

        return jnp.concatenate([roi_align(x, b, output, s, ratio, False)
                                for x, b, s in zip(xs, cs, scales)])

    def peer(xs, cs):
        import jax.numpy as jnp

        return jnp.concatenate([_jnp_roi_align(x, b, output, s, ratio)
                                for x, b, s in zip(xs, cs, scales)])

    def theirs(xs, cs):
        import torch

        return torch.cat([_torch_roi_align(x, b, output, s, ratio)
                          for x, b, s in zip(xs, cs, scales)])

    levels = ", ".join(f"{IMAGE // s}" for s in STRIDES)
    return Cell(f"{words}: {boxes} boxes over P2-P5 ({channels} ch, {levels}), "
                f"{output}x{output}", maps, rois, {"jaxpool": ours, "jnp gather": peer},
                theirs)


def _level_boxes(count: int) -> tuple:
    """``count // 4`` boxes ``[K, 5]`` (image 0) per level, in the image's pixels: each
    box's size (square root of its area) drawn log-uniformly in the range the FPN rule
    ``floor(4 + log2(size / 224))`` sends to that level (16-112 px to P2, ... 448-800 px to
    P5), aspect ratios 1:2 to 2:1, inside the image."""
    rng = np.random.default_rng(7)
    out = []
    for low, high in ((16, 112), (112, 224), (224, 448), (448, IMAGE)):
        k = count // 4
        size = np.exp(rng.uniform(np.log(low), np.log(high), k))
        aspect = np.exp(rng.uniform(np.log(0.5), np.log(2.0), k))
        w = np.minimum(size * np.sqrt(aspect), IMAGE)
        h = np.minimum(size / np.sqrt(aspect), IMAGE)
        x1, y1 = rng.uniform(0, IMAGE - w), rng.uniform(0, IMAGE - h)
        out.append(np.stack([np.zeros(k), x1, y1, x1 + w, y1 + h], 1))
    return tuple(out)


def _bilinear_axis(lib, c, size):
    """torchvision's bilinear weights along one axis of ``size`` pixels: whether the
    sample counts (in ``[-1, size]``), the low and high pixel, and their weights."""
    valid = (c >= -1) & (c <= size)
    c = lib.where(c < 0, 0 * c, c)
    low = lib.floor(c)
    last = low >= size - 1
    low = lib.where(last, size - 1 + 0 * low, low)
    high = lib.where(last, low, low + 1)
    c = lib.where(last, low, c)
    frac = c - low
    return valid, low, high, 1 - frac, frac


def _sample_coords(lib, start, extent, bins, ratio):
    """``[K, bins * ratio]`` sample coordinates: bin ``s // ratio``, sample ``s % ratio``."""
    s = lib.arange(bins * ratio)
    b, i = s // ratio, s % ratio
    size = extent / bins
    return start[:, None] + b[None, :] * size[:, None] + (i[None, :] + 0.5) * size[:, None] / ratio


def _jnp_roi_align(x, rois, output, scale, ratio):
    """roi_align ([N, C, H, W], [K, 5]; aligned=False, a fixed sampling ratio) with
    ``jnp`` indexing: every sample's four corners gathered, weighted and averaged."""
    import jax.numpy as jnp

    _, _, height, width = x.shape
    image = rois[:, 0].astype(jnp.int32)
    x1, y1, x2, y2 = (rois[:, i] * scale for i in range(1, 5))
    roi_w, roi_h = jnp.maximum(x2 - x1, 1.0), jnp.maximum(y2 - y1, 1.0)
    ys = _sample_coords(jnp, y1, roi_h, output, ratio)
    xs = _sample_coords(jnp, x1, roi_w, output, ratio)
    vy, y_low, y_high, hy, ly = _bilinear_axis(jnp, ys, height)
    vx, x_low, x_high, hx, lx = _bilinear_axis(jnp, xs, width)
    maps = jnp.transpose(x, (0, 2, 3, 1))  # [N, H, W, C]: a corner reads C contiguous
    n = image[:, None, None]
    out = 0.0
    for yi, wy in ((y_low, hy), (y_high, ly)):
        for xi, wx in ((x_low, hx), (x_high, lx)):
            v = maps[n, yi.astype(jnp.int32)[:, :, None], xi.astype(jnp.int32)[:, None, :]]
            out = out + (wy[:, :, None] * wx[:, None, :])[..., None] * v
    out = jnp.where((vy[:, :, None] & vx[:, None, :])[..., None], out, 0.0)
    k, c = rois.shape[0], x.shape[1]
    out = out.reshape(k, output, ratio, output, ratio, c).mean(axis=(2, 4))
    return jnp.transpose(out, (0, 3, 1, 2))


def _torch_roi_align(x, rois, output, scale, ratio):
    """The same algorithm in torch ops (torchvision's, aligned=False)."""
    import torch

    _, _, height, width = x.shape
    image = rois[:, 0].long()
    x1, y1, x2, y2 = (rois[:, i] * scale for i in range(1, 5))
    roi_w, roi_h = torch.clamp(x2 - x1, min=1.0), torch.clamp(y2 - y1, min=1.0)
    ys = _sample_coords(torch, y1, roi_h, output, ratio)
    xs = _sample_coords(torch, x1, roi_w, output, ratio)
    vy, y_low, y_high, hy, ly = _bilinear_axis(torch, ys, height)
    vx, x_low, x_high, hx, lx = _bilinear_axis(torch, xs, width)
    maps = x.permute(0, 2, 3, 1)
    n = image[:, None, None]
    out = 0.0
    for yi, wy in ((y_low, hy), (y_high, ly)):
        for xi, wx in ((x_low, hx), (x_high, lx)):
            v = maps[n, yi.long()[:, :, None], xi.long()[:, None, :]]
            out = out + (wy[:, :, None] * wx[:, None, :])[..., None] * v
    out = torch.where((vy[:, :, None] & vx[:, None, :])[..., None], out, 0.0)
    k, c = rois.shape[0], x.shape[1]
    out = out.reshape(k, output, ratio, output, ratio, c).mean(dim=(2, 4))
    return out.permute(0, 3, 1, 2)


def _normal(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


# --- FPN pooling: multi_scale_roi_align against per-level roi_align ----------------------

def _fpn_cell(boxes, channels, output=7, ratio=2) -> Cell:
    """``MultiScaleRoIAlign`` as torchvision calls it: the boxes of :func:`_level_boxes`
    (image 0, in its pixels) sent to their FPN level by the level mapper. Sides:
    ``jaxpool.multi_scale_roi_align`` (one call); ``jaxpool per-level``:
    ``jaxpool.roi_align`` per level on the boxes split on the host (the split a user makes
    outside ``jit``: levels are data-dependent); the ``jnp`` gather peer on the same split;
    torch: torchvision's ``MultiScaleRoIAlign.forward`` in torch ops (the mapper, then each
    level's boxes pooled and written back in place)."""
    import jaxpool
    from jaxpool.roi.plan import box_levels

    maps = tuple(_normal((1, channels, IMAGE // s, IMAGE // s), 2 + i)
                 for i, s in enumerate(STRIDES))
    split = _level_boxes(boxes)
    rois = np.concatenate(split)
    # the boxes are drawn level by level: the mapper must send each to its own level
    levels = box_levels(rois, 2, 5, 224, 4, "float32")
    assert (levels == np.repeat(np.arange(4), boxes // 4)).all(), "a box off its level"
    scales = tuple(1.0 / s for s in STRIDES)

    def ours(xs, cs):
        return jaxpool.multi_scale_roi_align(xs, cs[0], output, ratio, [(IMAGE, IMAGE)])

    def per_level(xs, cs):
        import jax.numpy as jnp

        return jnp.concatenate([jaxpool.roi_align(x, b, output, s, ratio, False)
                                for x, b, s in zip(xs, cs[1:], scales)])

    def peer(xs, cs):
        import jax.numpy as jnp

        return jnp.concatenate([_jnp_roi_align(x, b, output, s, ratio)
                                for x, b, s in zip(xs, cs[1:], scales)])

    def theirs(xs, cs):
        return _torch_multi_scale(xs, cs[0], output, ratio, scales)

    levels_words = ", ".join(f"{IMAGE // s}" for s in STRIDES)
    return Cell(f"FPN MultiScaleRoIAlign: {boxes} boxes over P2-P5 ({channels} ch, "
                f"{levels_words}), {output}x{output}", maps, (rois,) + split,
                {"jaxpool": ours, "jaxpool per-level": per_level, "jnp gather": peer},
                theirs)


def _torch_multi_scale(maps, rois, output, ratio, scales):
    """torchvision's ``MultiScaleRoIAlign`` (``_multiscale_roi_align``): ``LevelMapper``
    (``floor(4 + log2(sqrt(area) / 224) + 1e-6)`` clamped to P2-P5), then each level's
    boxes pooled and put in their rows."""
    import torch

    area = (rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2])
    level = torch.floor(4 + torch.log2(torch.sqrt(area) / 224) + 1e-6)
    level = (torch.clamp(level, min=2, max=5) - 2).long()
    out = maps[0].new_zeros((rois.shape[0], maps[0].shape[1], output, output))
    for i, (x, s) in enumerate(zip(maps, scales)):
        idx = torch.where(level == i)[0]
        out = out.index_put((idx,), _torch_roi_align(x, rois[idx], output, s, ratio))
    return out


# --- R-FCN: position-sensitive pooling ----------------------------------------------------

# R-FCN on ResNet-101's conv5 (stride 16) of a 600 x 800 image: a 38 x 50 map.
RFCN_IMAGE = (600, 800)
RFCN_STRIDE = 16


def _proposals(count, image, low, high, seed):
    """``count`` boxes ``[K, 5]`` (image 0) in ``image``'s pixels: sizes log-uniform in
    ``[low, high]``, aspect 1:2 to 2:1, inside the image (the RPN's proposals)."""
    rng = np.random.default_rng(seed)
    h_img, w_img = image
    size = np.exp(rng.uniform(np.log(low), np.log(high), count))
    aspect = np.exp(rng.uniform(np.log(0.5), np.log(2.0), count))
    w = np.minimum(size * np.sqrt(aspect), w_img - 1)
    h = np.minimum(size / np.sqrt(aspect), h_img - 1)
    x1, y1 = rng.uniform(0, w_img - 1 - w), rng.uniform(0, h_img - 1 - h)
    return np.stack([np.zeros(count), x1, y1, x1 + w, y1 + h], 1)


def _rfcn_cell(op, classes, boxes, output=7, ratio=2) -> Cell:
    """R-FCN's position-sensitive score maps: ``output**2 * (classes + 1)`` channels on the
    38 x 50 map, ``boxes`` proposals (32-512 px), ``ps_roi_align`` (``sampling_ratio``
    ``ratio``) or ``ps_roi_pool``. The pools' bin bound (``max_bin_size``, which traced
    boxes need) is the proposals' largest bin, taken on the host, for jaxpool and the
    peer alike."""
    import jaxpool
    from jaxpool.roi.plan import bin_edges

    h, w = (-(-e // RFCN_STRIDE) for e in RFCN_IMAGE)
    channels = output * output * (classes + 1)
    x = _normal((1, channels, h, w), 11)
    rois = _proposals(boxes, RFCN_IMAGE, 32, 512, 12)
    scale = 1.0 / RFCN_STRIDE
    if op == "ps_roi_align":
        def ours(xs, cs):
            return jaxpool.ps_roi_align(xs[0], cs[0], output, scale, ratio)

        def peer(xs, cs):
            return _jnp_ps_roi_align(xs[0], cs[0], output, scale, ratio)

        def theirs(xs, cs):
            return _torch_ps_roi_align(xs[0], cs[0], output, scale, ratio)
        how = f"ps_roi_align {output}x{output}, ratio {ratio}"
    else:
        (hs, he), (ws, we), _ = bin_edges(rois, scale, (output,) * 2, (h - 1, w - 1), True,
                                          "float32")
        bound = (int((he - hs).max()), int((we - ws).max()))

        def ours(xs, cs):
            return jaxpool.ps_roi_pool(xs[0], cs[0], output, scale, max(bound))

        def peer(xs, cs):
            return _pool(_jnp_lib(), xs[0], cs[0], output, scale, bound, True)

        def theirs(xs, cs):
            import torch
            return _pool(torch, xs[0], cs[0], output, scale, bound, True)
        how = f"ps_roi_pool {output}x{output}"
    return Cell(f"R-FCN {how}: {boxes} boxes, {classes} classes ([1, {channels}, {h}, {w}])",
                (x,), (rois,), {"jaxpool": ours, "jnp gather": peer}, theirs)


def _groups_layout(lib, x, output):
    """``[N, C, H, W]`` -> ``[N, PH, PW, H, W, C_out]``: bin ``(i, j)``'s channel group
    (output channel ``c`` of bin ``(i, j)`` is channel ``(c * PH + i) * PW + j``)."""
    n, c, h, w = x.shape
    x = x.reshape(n, c // (output * output), output, output, h, w)
    return lib.permute(x, (0, 2, 3, 4, 5, 1)) if lib.__name__ == "torch" else         lib.transpose(x, (0, 2, 3, 4, 5, 1))


def _ps_align(lib, x, rois, output, scale, ratio):
    """ps_roi_align (aligned, a fixed ratio): each sample's four corners read from its
    bin's channel group; a sample outside ``[-1, size]`` is 0."""
    _, _, height, width = x.shape
    idx = (lambda a: a.long()) if lib.__name__ == "torch" else (lambda a: a.astype("int32"))
    x1, y1, x2, y2 = (rois[:, i] * scale - 0.5 for i in range(1, 5))
    ys = _sample_coords(lib, y1, y2 - y1, output, ratio)  # [K, output * ratio]
    xs = _sample_coords(lib, x1, x2 - x1, output, ratio)
    vy, y_low, y_high, hy, ly = _bilinear_axis(lib, ys, height)
    vx, x_low, x_high, hx, lx = _bilinear_axis(lib, xs, width)
    maps = _groups_layout(lib, x, output)
    s = lib.arange(output * ratio) // ratio
    n = idx(rois[:, 0])[:, None, None]
    bi, bj = s[None, :, None], s[None, None, :]
    out = 0.0
    for yi, wy in ((y_low, hy), (y_high, ly)):
        for xi, wx in ((x_low, hx), (x_high, lx)):
            v = maps[n, bi, bj, idx(yi)[:, :, None], idx(xi)[:, None, :]]
            out = out + (wy[:, :, None] * wx[:, None, :])[..., None] * v
    out = lib.where((vy[:, :, None] & vx[:, None, :])[..., None], out, 0.0)
    k, c = rois.shape[0], out.shape[-1]
    out = out.reshape(k, output, ratio, output, ratio, c)
    out = out.mean(axis=(2, 4)) if lib.__name__ != "torch" else out.mean(dim=(2, 4))
    return lib.permute(out, (0, 3, 1, 2)) if lib.__name__ == "torch" else         lib.transpose(out, (0, 3, 1, 2))


def _jnp_ps_roi_align(x, rois, output, scale, ratio):
    return _ps_align(_jnp_lib(), x, rois, output, scale, ratio)


def _torch_ps_roi_align(x, rois, output, scale, ratio):
    import torch
    return _ps_align(torch, x, rois, output, scale, ratio)


def _jnp_lib():
    import jax.numpy as jnp
    return jnp


# --- roi_pool and ps_roi_pool: bins of whole pixels --------------------------------------

FLT_MAX = float(np.finfo(np.float32).max)


def _pool(lib, x, rois, output, scale, bound, position_sensitive):
    """roi_pool (the max; ``position_sensitive``: ps_roi_pool, the mean of the bin's
    channel group) as torchvision's kernels bin: corners times the scale rounded half away
    from zero, the extent ``max(x2 - x1 + 1, 1)`` (ps: without the +1), bin edges
    ``floor``/``ceil`` clamped to the map (ps: to one pixel less), each bin's pixels read
    as a ``bound`` (rows, columns) window masked to the bin; an empty bin is 0."""
    torch_side = lib.__name__ == "torch"
    as_int = (lambda a: a.long()) if torch_side else (lambda a: a.astype("int32"))
    _, _, height, width = x.shape
    scaled = rois[:, 1:5] * scale
    whole = lib.trunc(scaled)
    corners = as_int(lib.where(lib.abs(scaled - whole) >= 0.5, whole + lib.sign(scaled),
                               whole))
    plus, less = (0, 1) if position_sensitive else (1, 0)

    def edges(lo, hi, limit, size_bound, pixels):
        extent = lib.maximum(corners[:, hi] - corners[:, lo] + plus, 1 + 0 * corners[:, lo])
        if torch_side:
            size = extent.to(x.dtype) / output
        else:  # XLA turns a division by a constant into a product by its reciprocal,
            # which rounds differently (7 * (3 / 7) > 3): the bins' edges would move
            import jax
            size = extent.astype(x.dtype) / jax.lax.optimization_barrier(
                lib.full(extent.shape, output, x.dtype))
        p = lib.arange(output)[None] if torch_side else lib.arange(output, dtype=x.dtype)[None]
        start = as_int(lib.floor(p * size[:, None])) + corners[:, lo, None]
        end = as_int(lib.ceil((p + 1) * size[:, None])) + corners[:, lo, None]
        start, end = lib.clip(start, 0, limit), lib.clip(end, 0, limit)
        at = start[:, :, None] + lib.arange(size_bound)  # [K, bins, bound]
        return lib.clip(at, 0, pixels - 1), at < end[:, :, None], end <= start

    rows, in_rows, empty_h = edges(1, 3, height - less, bound[0], height)
    cols, in_cols, empty_w = edges(0, 2, width - less, bound[1], width)
    n = as_int(rois[:, 0])[:, None, None, None, None]
    r, c = rows[:, :, None, :, None], cols[:, None, :, None, :]
    inside = (in_rows[:, :, None, :, None] & in_cols[:, None, :, None, :])[..., None]
    if position_sensitive:
        i = lib.arange(output)[None, :, None, None, None]
        j = lib.arange(output)[None, None, :, None, None]
        v = _groups_layout(lib, x, output)[n, i, j, r, c]  # [K, PH, PW, bh, bw, C_out]
        total = lib.where(inside, v, 0.0).sum((3, 4))
        area = (inside.sum((3, 4)))
        area = area.to(x.dtype) if torch_side else area.astype(x.dtype)
        out = total / lib.maximum(area, 1 + 0 * area)
    else:
        maps = lib.permute(x, (0, 2, 3, 1)) if torch_side else lib.transpose(x, (0, 2, 3, 1))
        v = maps[n, r, c]  # [K, PH, PW, bh, bw, C]
        v = lib.where(inside, v, -FLT_MAX)
        out = v.amax((3, 4)) if torch_side else v.max((3, 4))
    empty = (empty_h[:, :, None] | empty_w[:, None, :])[..., None]
    out = lib.where(empty, 0.0, out)
    return lib.permute(out, (0, 3, 1, 2)) if torch_side else lib.transpose(out, (0, 3, 1, 2))


def _roi_pool_cell(boxes, channels=512, output=7) -> Cell:
    """Fast R-CNN's RoIPool: VGG16's conv5_3 (stride 16) of a 600 x 800 image, 512
    channels, ``boxes`` proposals of 32-256 px (a training batch's RoIs), 7x7 bins; the bin
    bound (``max_bin_size``) the proposals' largest bin, taken on the host."""
    import jaxpool
    from jaxpool.roi.plan import bin_edges

    h, w = (-(-e // RFCN_STRIDE) for e in RFCN_IMAGE)
    x = _normal((1, channels, h, w), 21)
    rois = _proposals(boxes, RFCN_IMAGE, 32, 256, 22)
    scale = 1.0 / RFCN_STRIDE
    (hs, he), (ws, we), _ = bin_edges(rois, scale, (output,) * 2, (h, w), False, "float32")
    bound = (int((he - hs).max()), int((we - ws).max()))

    def ours(xs, cs):
        return jaxpool.roi_pool(xs[0], cs[0], output, scale, max(bound))

    def peer(xs, cs):
        return _pool(_jnp_lib(), xs[0], cs[0], output, scale, bound, False)

    def theirs(xs, cs):
        import torch
        return _pool(torch, xs[0], cs[0], output, scale, bound, False)

    return Cell(f"Fast R-CNN roi_pool {output}x{output}: {boxes} boxes ([1, {channels}, {h}, "
                f"{w}])", (x,), (rois,), {"jaxpool": ours, "jnp gather": peer}, theirs)


def cells(boxes: int = 1000, mask_boxes: int = 256, channels: int = 64,
          rfcn_boxes: int = 300, pool_boxes: int = 128) -> dict[str, Callable[[], Cell]]:
    """name -> a function building the cell (its inputs drawn on the call)."""
    return {
        "roi-box": lambda: _roi_cell("box head", 7, boxes, channels),
        "roi-mask": lambda: _roi_cell("mask head", 14, mask_boxes, channels),
        "roi-fpn": lambda: _fpn_cell(boxes, channels),
        "rfcn-ps-align": lambda: _rfcn_cell("ps_roi_align", 20, rfcn_boxes),
        "rfcn-ps-pool": lambda: _rfcn_cell("ps_roi_pool", 20, rfcn_boxes),
        "roi-pool": lambda: _roi_pool_cell(pool_boxes),
    }


DEFAULT_CELLS = ("roi-box", "roi-mask", "roi-fpn", "rfcn-ps-align", "rfcn-ps-pool",
                 "roi-pool")
