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


def cells(boxes: int = 1000, mask_boxes: int = 256,
          channels: int = 64) -> dict[str, Callable[[], Cell]]:
    """name -> a function building the cell (its inputs drawn on the call)."""
    return {
        "roi-box": lambda: _roi_cell("box head", 7, boxes, channels),
        "roi-mask": lambda: _roi_cell("mask head", 14, mask_boxes, channels),
    }


DEFAULT_CELLS = ("roi-box", "roi-mask")
