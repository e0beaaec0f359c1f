"""The patches cells: unfold and fold where models call them: VOLO's outlook attention (an
unfold of the values, a fold back to the map), T2T-ViT's soft splits, TNT's pixel
embedding and a ViT-style 16x16 patchify (unfolds), float32 on the CPU, beside torch and a
JAX peer:

- unfold: ``jax.lax.conv_general_dilated_patches``; on NCHW input its features already
  come in torch's order (channel-major, then the kernel taps row-major), so the only step
  to torch's ``[N, C*kh*kw, L]`` is a reshape of the block axes, timed with it (free);
- fold: no JAX function; the transpose of that unfold (``jax.linear_transpose``).

Each cell is a :class:`benchmarks.derivatives.Cell`, timed forward, as the gradient and
as the second derivative by ``python -m benchmarks.programs.patches_roi`` (with the
roi_align cells of :mod:`benchmarks.cells.roi`), which can also time the unfold and fold of
an earlier revision beside them (:func:`load_revision`), and the compile time of each
quantity to the third derivative by ``python -m benchmarks.cells.compile_times --patches``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np

from benchmarks.derivatives import Cell

__all__ = ["DEFAULT_CELLS", "Revision", "cells", "load_revision"]


@dataclasses.dataclass(frozen=True)
class Revision:
    """jaxpool's unfold and fold at an earlier git revision: its ``patches/plan.py`` and
    ``patches/kernel.py``, called as ``kernel.unfold(plan.plan_unfold(...), x)``."""

    label: str
    plan: ModuleType
    kernel: ModuleType

    def unfold(self, x, kernel, dilation, padding, stride):
        return self.kernel.unfold(self.plan.plan_unfold(x.shape, x.dtype, kernel, dilation,
                                                        padding, stride), x)

    def fold(self, x, size, kernel, dilation, padding, stride):
        return self.kernel.fold(self.plan.plan_fold(x.shape, x.dtype, size, kernel, dilation,
                                                    padding, stride), x)


def load_revision(rev: str) -> Revision:
    """The patches plan and kernel of git revision ``rev`` of this repository, imported as
    a package of their own (``jaxpool.core`` stays the working tree's)."""
    root = Path(__file__).resolve().parents[2]
    name = "patches_at_" + "".join(c if c.isalnum() else "_" for c in rev)
    folder = Path(tempfile.mkdtemp(prefix="jaxpool-patches-")) / name
    folder.mkdir()
    for module in ("__init__", "plan", "kernel"):
        text = subprocess.run(["git", "show", f"{rev}:jaxpool/patches/{module}.py"], cwd=root,
                              check=True, capture_output=True, text=True).stdout
        (folder / f"{module}.py").write_text(text.replace("jaxpool.patches.", f"{name}."))
    spec = importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[name])
    plan = importlib.import_module(f"{name}.plan")
    return Revision(f"jaxpool {rev}", plan, importlib.import_module(f"{name}.kernel"))


def _unfold_cell(words, shape, kernel, padding, stride, dilation=1, before=None,
                 peers=True) -> Cell:
    """``unfold(x [N, C, H, W])`` with square (int) parameters."""
    import torch.nn.functional as F

    import jaxpool

    def peer(xs, cs):
        return _patches(xs[0], kernel, dilation, padding, stride)

    sides = {"jaxpool": lambda xs, cs: jaxpool.unfold(xs[0], kernel, dilation, padding, stride)}
    if peers:
        sides["conv_general_dilated_patches"] = peer
    if before is not None:
        sides[before.label] = lambda xs, cs: before.unfold(xs[0], kernel, dilation, padding,
                                                           stride)
    return Cell(
        f"{words} ({_shape(shape)}, k{kernel} p{padding} s{stride})",
        (_normal(shape, 0),), (), sides,
        lambda xs, cs: F.unfold(xs[0], kernel, dilation, padding, stride))


def _fold_cell(words, image, kernel, padding, stride, dilation=1, before=None,
               peers=True) -> Cell:
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

    sides = {"jaxpool": lambda xs, cs: jaxpool.fold(xs[0], (h, w), kernel, dilation, padding,
                                                    stride)}
    if peers:
        sides["linear_transpose(patches)"] = peer
    if before is not None:
        sides[before.label] = lambda xs, cs: before.fold(xs[0], (h, w), kernel, dilation,
                                                         padding, stride)
    return Cell(
        f"{words} ({_shape(shape)} -> {h}x{w}, k{kernel} p{padding} s{stride})",
        (_normal(shape, 1),), (), sides,
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


def cells(batch: int = 8, before: Revision | None = None,
          peers: bool = True) -> dict[str, Callable[[], Cell]]:
    """name -> a function building the cell (its inputs drawn on the call); ``before`` adds
    an earlier revision's side, ``peers=False`` leaves the JAX peers out."""
    more = dict(before=before, peers=peers)
    return {
        # timm's VOLO-D1 outlooker: values [B, 192, 28, 28] (224 / 8), kernel 3, padding
        # 1 and stride 2 (VOLO's out_stride): 14 x 14 windows, folded back to 28 x 28.
        "volo-unfold": lambda: _unfold_cell("VOLO-D1 outlook values", (batch, 192, 28, 28),
                                            3, 1, 2, **more),
        "volo-fold": lambda: _fold_cell("VOLO-D1 outlook fold", (batch, 192, 28, 28), 3, 1, 2,
                                        **more),
        # the same at stride 1: a window at every pixel (784 of them), 4x the columns
        "volo-s1-unfold": lambda: _unfold_cell("outlook values, stride 1",
                                               (batch, 192, 28, 28), 3, 1, 1, **more),
        "volo-s1-fold": lambda: _fold_cell("outlook fold, stride 1", (batch, 192, 28, 28),
                                           3, 1, 1, **more),
        # T2T-ViT's soft splits (timm's T2T_module, token_dim 64): the image by 7 x 7
        # windows at stride 4, padding 2 (56 x 56 windows of 147 features), then the tokens
        # re-split by 3 x 3 windows at stride 2, padding 1
        "t2t-unfold-7": lambda: _unfold_cell("T2T-ViT soft split 1", (batch, 3, 224, 224),
                                             7, 2, 4, **more),
        "t2t-unfold-3": lambda: _unfold_cell("T2T-ViT soft split 2", (batch, 64, 56, 56),
                                             3, 1, 2, **more),
        # timm's TNT-S pixel embedding: the stride-4 stem's [B, 24, 56, 56] cut into the
        # 14 x 14 patches' 4 x 4 pixels
        "tnt-unfold": lambda: _unfold_cell("TNT-S pixel embedding", (batch, 24, 56, 56),
                                           4, 0, 4, **more),
        # a 224 image cut into 16 x 16 patches (a ViT patchify; TNT's outer patches in
        # its first form). Not in the default run: the JAX peer's derivatives are
        # transposed convolutions with a one-hot 768-filter kernel, seconds a call.
        "patchify-16": lambda: _unfold_cell("16x16 patches of the image", (batch, 3, 224, 224),
                                            16, 0, 16, **more),
        # and the patches back to the image (MAE's unpatchify): the patchify's VJP alone,
        # which a gradient of sum(y**2) hides (XLA cancels the fold of the unfold)
        "unpatchify-16": lambda: _fold_cell("16x16 patches back to the image",
                                            (batch, 3, 224, 224), 16, 0, 16, **more),
    }


DEFAULT_CELLS = ("volo-unfold", "volo-fold", "volo-s1-unfold", "volo-s1-fold", "t2t-unfold-7",
                 "t2t-unfold-3", "tnt-unfold")
