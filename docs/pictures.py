"""The resampling pictures of the docs: one real photograph resized by torch, jaxpool and
``jax.image.resize``, with each JAX result's difference from torch's.

Run from the repository root (writes ``docs/img/resampling_bicubic.png`` and
``docs/img/resampling_align_corners.png``)::

    python docs/pictures.py [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os

import numpy as np

__all__ = ["COMPARISONS", "Comparison", "load_image", "main", "resampling_picture"]

HERE = os.path.dirname(os.path.abspath(__file__))
# Differences at or below this show as the colour scale's floor; float32's rounding is
# about 6e-8 of a value near 1.
DIFF_FLOOR = 1e-8


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One resize: torch's and jaxpool's call, and the closest ``jax.image.resize`` can do."""

    name: str  # the PNG's name: resampling_<name>.png
    title: str
    mode: str  # torch's and jaxpool's
    align_corners: bool | None
    jax_method: str  # jax.image.resize's
    jax_note: str  # what jax.image.resize does instead


COMPARISONS = (
    Comparison("bicubic", "bicubic x4", "bicubic", None, "cubic",
               "A = -0.5; torch's A = -0.75"),
    Comparison("align_corners", "bilinear x4, align_corners=True", "bilinear", True, "linear",
               "half-pixel centres, no align_corners"),
)


def load_image(size: int = 64) -> np.ndarray:
    """Grace Hopper's portrait (shipped with matplotlib), her face cropped square and
    averaged down to ``size`` x ``size``: float32 RGB in [0, 1], shape [1, 3, size, size]."""
    import matplotlib.cbook
    from PIL import Image

    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
        photo = Image.open(f).convert("RGB")
    # The face and the collar: the part of the portrait with both smooth skin and edges.
    face = photo.crop((96, 40, 416, 360)).resize((size, size), Image.Resampling.BOX)
    return (np.asarray(face, np.float32) / 255).transpose(2, 0, 1)[None]


def resize_three(x: np.ndarray, c: Comparison, scale: int) -> dict[str, np.ndarray]:
    """``x`` resized by torch, jaxpool and jax.image.resize, each [H, W, 3] float32."""
    import jax
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F

    import jaxpool

    size = (x.shape[2] * scale, x.shape[3] * scale)
    want = F.interpolate(torch.from_numpy(x), size=size, mode=c.mode,
                         align_corners=c.align_corners).numpy()
    got = np.asarray(jaxpool.interpolate(jnp.asarray(x), size=size, mode=c.mode,
                                         align_corners=c.align_corners))
    other = np.asarray(jax.image.resize(jnp.asarray(x), (*x.shape[:2], *size), c.jax_method))
    return {k: v[0].transpose(1, 2, 0) for k, v in
            (("torch", want), ("jaxpool", got), ("jax.image", other))}


def resampling_picture(x: np.ndarray, c: Comparison, path: str, scale: int = 4) -> dict[str, float]:
    """Plot the input, the three results and the two difference maps into PNG ``path``;
    return the largest difference of jaxpool and of jax.image.resize from torch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    out = resize_three(x, c, scale)
    diffs = {k: np.abs(out[k] - out["torch"]).max(axis=-1) for k in ("jaxpool", "jax.image")}
    worst = {k: float(d.max()) for k, d in diffs.items()}
    fig, axes = plt.subplots(2, 3, figsize=(7.5, 5.8), layout="constrained")
    show = dict(interpolation="nearest")
    titles = {"torch": "torch F.interpolate", "jaxpool": "jaxpool.interpolate",
              "jax.image": f"jax.image.resize {c.jax_method!r}\n({c.jax_note})"}
    for ax, k in zip(axes[0], titles):
        ax.imshow(np.clip(out[k], 0, 1), **show)  # bicubic overshoots [0, 1]
        ax.set_title(titles[k], fontsize=9)
    axes[1, 0].imshow(x[0].transpose(1, 2, 0), **show)
    axes[1, 0].set_title(f"input {x.shape[2]}x{x.shape[3]}", fontsize=9)
    # One logarithmic scale for both maps: float32 rounding (1e-7) and another kernel
    # (1e-2) both show, and which is which is plain.
    norm = LogNorm(DIFF_FLOOR, 1.0)
    cmap = plt.get_cmap("magma").with_extremes(under="black")
    for ax, k in zip(axes[1, 1:], ("jaxpool", "jax.image")):
        im = ax.imshow(np.maximum(diffs[k], DIFF_FLOOR / 2), norm=norm, cmap=cmap, **show)
        most = "0 (bit for bit)" if worst[k] == 0 else f"{worst[k]:.1e}"
        ax.set_title(f"|{k} - torch|\nmax {most}", fontsize=9)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    bar = fig.colorbar(im, ax=axes[1, 1:], shrink=0.85, extend="min")
    bar.set_label("largest difference over RGB, log", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    h, w = x.shape[2] * scale, x.shape[3] * scale
    fig.suptitle(f"{c.title}, float32, {x.shape[2]}x{x.shape[3]} -> {h}x{w}", fontsize=10)
    _save(fig, path)
    plt.close(fig)
    return worst


def _save(fig, path: str, dpi: int = 100) -> None:
    """Save as a 256-colour PNG: a quarter of the full-colour file's size, for no
    difference a reader can see at this scale."""
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    buf.seek(0)
    image = Image.open(buf).convert("RGB")
    image.quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE).save(
        path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python docs/pictures.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(HERE, "img"), metavar="DIR",
                   help="folder for the PNGs (default: docs/img beside this file)")
    p.add_argument("--size", type=int, default=64, help="the input's side in pixels (default 64)")
    p.add_argument("--scale", type=int, default=4, help="the upsampling factor (default 4)")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    x = load_image(args.size)
    for c in COMPARISONS:
        path = os.path.join(args.out, f"resampling_{c.name}.png")
        worst = resampling_picture(x, c, path, args.scale)
        print(f"wrote {path}: max |jaxpool - torch| {worst['jaxpool']:.1e}, "
              f"max |jax.image - torch| {worst['jax.image']:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
