"""The patches cells: unfold and fold where models call them: VOLO's outlook attention (an
unfold of the values, a fold back to the map), TNT's pixel embedding and a ViT-style
16x16 patchify (unfolds), float32 on the CPU, beside torch and a JAX peer:

- unfold: ``jax.lax.conv_general_dilated_patches``; on NCHW input its features already
  come in torch's order (channel-major, then the kernel taps row-major), so the only step
  to torch's ``[N, C*kh*kw, L]`` is a reshape of the block axes, timed with it (free);
- fold: no JAX function; the transpose of that unfold (``jax.linear_transpose``).

Each cell is a :class:`benchmarks.derivatives.Cell`, timed forward, as the gradient and
as the second derivative by ``python -m benchmarks.programs.patches_roi`` (with the
roi_align cells of :mod:`benchmarks.cells.roi`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from benchmarks.derivatives import Cell

__all__ = ["DEFAULT_CELLS", "cells"]


def _unfold_cell(words, shape, kernel, padding, stride, dilation=1) -> Cell:
    """``unfold(x [N, C, H, W])`` with square (int) parameters."""
    import torch.nn.functional as F

    import jaxpool

    def peer(xs, cs):
        return _patches(xs[0], kernel, dilation, padding, stride)

    return Cell(
        f"{words} ({_shape(shape)}, k{kernel} p{padding} s{stride})",
        (_normal(shape, 0),), (),
        {"jaxpool": lambda xs, cs: jaxpool.unfold(xs[0], kernel, dilation, padding, stride),
         "conv_general_dilated_patches": peer},
        lambda xs, cs: F.unfold(xs[0], kernel, dilation, padding, stride))


def _fold_cell(words, image, kernel, padding, stride, dilation=1) -> Cell:
    """``fold`` back to ``image = (N, C, H, W)``: the columns ``unfold`` gives for it."""
    import torch.nn.functional as F

    import jaxpool

    n, c, h, w = image
    blocks = [(size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
              for size in (h, w)]
    shape = (n, c * kernel * kernel, blocks[0] * blocks[1])

    def peer(xs, cs):
        import jax

        unfold = jax.linear_transpose(
            lambda x: _patches(x, kernel, dilation, padding, stride),
            jax.ShapeDtypeStruct(image, xs[0].dtype))
        return unfold(xs[0])[0]

    return Cell(
        f"{words} ({_shape(shape)} -> {h}x{w}, k{kernel} p{padding} s{stride})",
        (_normal(shape, 1),), (),
        {"jaxpool": lambda xs, cs: jaxpool.fold(xs[0], (h, w), kernel, dilation, padding,
                                                stride),
         "linear_transpose(patches)": peer},
        lambda xs, cs: F.fold(xs[0], (h, w), kernel, dilation, padding, stride))


def _patches(x, kernel, dilation, padding, stride):
    """torch's unfold with ``lax.conv_general_dilated_patches``: NCHW in, its features
    ``[C, kh, kw]``-major as torch's; the block axes flattened into ``L``."""
    import jax

    y = jax.lax.conv_general_dilated_patches(
        x, (kernel, kernel), (stride, stride), [(padding, padding)] * 2,
        rhs_dilation=(dilation, dilation))
    return y.reshape(y.shape[0], y.shape[1], -1)


def _normal(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def _shape(shape):
    return "[" + ", ".join(str(s) for s in shape) + "]"


def cells(batch: int = 8) -> dict[str, Callable[[], Cell]]:
    """name -> a function building the cell (its inputs drawn on the call)."""
    return {
        # timm's VOLO-D1 outlooker: values [B, 192, 28, 28] (224 / 8), kernel 3, padding
        # 1 and stride 2 (VOLO's out_stride): 14 x 14 windows, folded back to 28 x 28.
        "volo-unfold": lambda: _unfold_cell("VOLO-D1 outlook values", (batch, 192, 28, 28),
                                            3, 1, 2),
        "volo-fold": lambda: _fold_cell("VOLO-D1 outlook fold", (batch, 192, 28, 28), 3, 1, 2),
        # the same at stride 1: a window at every pixel (784 of them), 4x the columns
        "volo-s1-unfold": lambda: _unfold_cell("outlook values, stride 1",
                                               (batch, 192, 28, 28), 3, 1, 1),
        "volo-s1-fold": lambda: _fold_cell("outlook fold, stride 1", (batch, 192, 28, 28),
                                           3, 1, 1),
        # timm's TNT-S pixel embedding: the stride-4 stem's [B, 24, 56, 56] cut into the
        # 14 x 14 patches' 4 x 4 pixels
        "tnt-unfold": lambda: _unfold_cell("TNT-S pixel embedding", (batch, 24, 56, 56),
                                           4, 0, 4),
        # a 224 image cut into 16 x 16 patches (a ViT patchify; TNT's outer patches in
        # its first form): 256 taps, minutes to compile (not in the default run)
        "patchify-16": lambda: _unfold_cell("16x16 patches of the image", (batch, 3, 224, 224),
                                            16, 0, 16),
    }


DEFAULT_CELLS = ("volo-unfold", "volo-fold", "volo-s1-unfold", "volo-s1-fold", "tnt-unfold")
