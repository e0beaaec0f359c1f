"""unfold, fold and roi_align where models call them: VOLO's outlook attention (an unfold
of the values, a fold back to the map), TNT's pixel embedding and a ViT-style 16x16
patchify (unfolds), and a Mask R-CNN head's RoIAlign over four FPN levels (7x7 box head,
14x14 mask head), float32 on the CPU. Each cell is timed forward, as the gradient of
``sum(y**2)`` in the input (the feature maps for roi_align; the boxes are constants, as
Mask R-CNN's proposals), and as the second derivative (the gradient of the squared
input-gradient norm, an R1 penalty), jitted, beside torch's CPU autograd in the same
process and a JAX peer:

- unfold: ``jax.lax.conv_general_dilated_patches``; on NCHW input its features already
  come in torch's order (channel-major, then the kernel taps row-major), so the only step
  to torch's ``[N, C*kh*kw, L]`` is a reshape of the block axes, timed with it (free);
- fold: no JAX function; the transpose of that unfold (``jax.linear_transpose``);
- roi_align: bilinear reads with ``jnp`` indexing, as a plain JAX port of torchvision's
  algorithm writes it (its derivatives scatter-add). torchvision does not import beside
  this torch, so torch's side is torchvision's algorithm written in torch ops (every
  sample's four corners gathered at once, as torchvision's own pure-torch ``_roi_align``),
  not its C++ kernel.

Run from the repository root:

    python -m benchmarks.patches                   # markdown table, median ms per call
    python -m benchmarks.patches --cells volo-unfold,roi-box
    python -m benchmarks.patches --cells patchify-16 --batch 2   # minutes to compile

The roi_align cells hold 64 channels per level (``--channels``; Mask R-CNN's FPN has 256:
each call of torch's side would take seconds) and the mask head 256 boxes (``--mask-boxes``;
the positive boxes of a training batch), the box head 1000 (``--boxes``).

Every side's outputs are first compared with torch's (float32), and the JAX peers' with
jaxpool's; a wrong side raises.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
from collections.abc import Callable

import numpy as np

from benchmarks.machine import describe, versions
from benchmarks.runner import check, measure

MODES = ("fwd", "grad", "second")

# FPN levels P2-P5 of an 800 x 800 image: strides 4 to 32.
IMAGE = 800
STRIDES = (4, 8, 16, 32)


@dataclasses.dataclass(frozen=True)
class Cell:
    """A benchmark cell: what it is in words, the differentiated inputs' values, the
    constant ones', and each side's function ``f(inputs, constants)`` (tuples of arrays)
    of JAX arrays (``jax``) and of torch tensors (``torch``)."""

    words: str
    inputs: tuple
    constants: tuple
    jax: dict
    torch: Callable


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


def _shape(shape):
    return "[" + ", ".join(str(s) for s in shape) + "]"


def cells(batch: int = 8, boxes: int = 1000, mask_boxes: int = 256,
          channels: int = 64) -> dict[str, Callable[[], Cell]]:
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
        "roi-box": lambda: _roi_cell("box head", 7, boxes, channels),
        "roi-mask": lambda: _roi_cell("mask head", 14, mask_boxes, channels),
    }


DEFAULT_CELLS = ("volo-unfold", "volo-fold", "volo-s1-unfold", "volo-s1-fold", "tnt-unfold",
                 "roi-box", "roi-mask")


def _jax_modes(f):
    """The three quantities of ``f(inputs, constants)`` of JAX arrays, in the inputs."""
    import jax
    import jax.numpy as jnp

    def grad(xs, cs):
        return jax.grad(lambda xs: jnp.sum(jnp.square(f(xs, cs))))(xs)

    def second(xs, cs):
        return jax.grad(lambda xs: sum(jnp.sum(jnp.square(g)) for g in grad(xs, cs)))(xs)

    return {"fwd": f, "grad": grad, "second": second}


def _torch_modes(f, xs, cs):
    """Thunks computing the same three quantities with torch autograd (a list each)."""
    import torch

    def fwd():
        with torch.no_grad():
            return [f(xs, cs)]

    def grad(create_graph=False):
        leaves = tuple(x.detach().requires_grad_(True) for x in xs)
        y = f(leaves, cs)
        return leaves, torch.autograd.grad(y.square().sum(), leaves, create_graph=create_graph)

    def second():
        leaves, gs = grad(create_graph=True)
        return list(torch.autograd.grad(sum(g.square().sum() for g in gs), leaves))

    return {"fwd": fwd, "grad": lambda: list(grad()[1]), "second": second}


def run(names, reps: int, min_sample_s: float, budget_s: float | None = None,
        built: dict[str, Callable[[], Cell]] | None = None, modes=MODES) -> list[dict]:
    """Check, then time every side of the cells ``names`` (of ``built``, default
    :func:`cells`) in ``modes``: one dict per cell and quantity, ``{"cell", "quantity",
    "words", "sides": {side: measure's stats}}``."""
    import jax
    import jax.numpy as jnp
    import torch

    built = built or cells()
    out = []
    for name in names:
        cell = built[name]()
        xs = tuple(jnp.asarray(a, jnp.float32) for a in cell.inputs)
        cs = tuple(jnp.asarray(a, jnp.float32) for a in cell.constants)
        xt = tuple(torch.tensor(a, dtype=torch.float32) for a in cell.inputs)
        ct = tuple(torch.tensor(a, dtype=torch.float32) for a in cell.constants)
        torch_side = _torch_modes(cell.torch, xt, ct)
        for quantity in modes:
            want = [w.detach().numpy().astype(np.float64) for w in torch_side[quantity]()]
            fns, first = {}, None
            for side, f in cell.jax.items():
                fn = jax.jit(_jax_modes(f)[quantity])
                got = [np.asarray(g) for g in jax.tree_util.tree_leaves(fn(xs, cs))]
                wrong = [check(a, b, "float32") for a, b in zip(got, want)]
                if first is not None:  # a peer against jaxpool's values too
                    wrong += [check(a, b.astype(np.float64), "float32")
                              for a, b in zip(got, first)]
                if len(got) != len(want) or any(wrong):
                    raise AssertionError(f"{side} {name} {quantity}: {wrong}")
                first = got if first is None else first
                fns[side] = lambda fn=fn, xs=xs, cs=cs: jax.block_until_ready(fn(xs, cs))
                del got
            del want, first
            fns["torch"] = torch_side[quantity]
            out.append({"cell": name, "quantity": quantity, "words": cell.words,
                        "sides": measure(fns, reps, min_sample_s, budget_s=budget_s)})
    return out


def _ms(stats) -> str:
    m = stats["median_ms"]
    spread = (stats["q75_ms"] - stats["q25_ms"]) / 2
    digits = 3 if m < 1 else 2 if m < 10 else 1 if m < 100 else 0
    return f"{m:.{digits}f} ±{spread:.{digits}f}"


def table(results: list[dict]) -> str:
    """The markdown table: one row per cell and quantity, a column per side."""
    lines = [("| cell | quantity | jaxpool ms | JAX peer | JAX peer ms | torch ms | "
              "jaxpool / fastest peer |"), "|---|---|---:|---|---:|---:|---:|"]
    previous = None
    for r in results:
        sides = r["sides"]
        peer = next(s for s in sides if s not in ("jaxpool", "torch"))
        fastest = min(sides[s]["median_ms"] for s in sides if s != "jaxpool")
        new = r["cell"] != previous  # a cell's words and peer on its first row only
        previous = r["cell"]
        lines.append(f"| {r['words'] if new else ''} | {r['quantity']} | "
                     f"{_ms(sides['jaxpool'])} | {peer if new else ''} | "
                     f"{_ms(sides[peer])} | {_ms(sides['torch'])} | "
                     f"{sides['jaxpool']['median_ms'] / fastest:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.patches",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default=",".join(DEFAULT_CELLS),
                        help=f"comma-separated cells of {', '.join(cells())} "
                             "(default %(default)s)")
    parser.add_argument("--batch", type=int, default=8, help="unfold/fold cells' batch")
    parser.add_argument("--boxes", type=int, default=1000,
                        help="the box head's boxes, a multiple of 4 (default %(default)s)")
    parser.add_argument("--mask-boxes", type=int, default=256,
                        help="the mask head's boxes, a multiple of 4 (default %(default)s)")
    parser.add_argument("--channels", type=int, default=64,
                        help="roi_align cells' channels per level (default %(default)s)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--min-sample-s", type=float, default=0.05)
    parser.add_argument("--budget-s", type=float, default=30.0,
                        help="a side's samples take at most this long, at least 3 of them "
                             "(default %(default)s)")
    args = parser.parse_args(argv)
    for flag in ("boxes", "mask_boxes"):
        value = getattr(args, flag)
        if value <= 0 or value % 4:
            parser.error(f"--{flag.replace('_', '-')} must be a positive multiple of 4, "
                         f"got {value}")
    for flag in ("batch", "channels", "reps"):
        if getattr(args, flag) <= 0:
            parser.error(f"--{flag} must be positive, got {getattr(args, flag)}")
    built = cells(args.batch, args.boxes, args.mask_boxes, args.channels)
    names = [n for n in args.cells.split(",") if n]
    unknown = [n for n in names if n not in built]
    if unknown:
        parser.error(f"unknown cells {unknown}; known: {', '.join(built)}")
    import torch

    results = run(names, args.reps, args.min_sample_s, args.budget_s, built)
    print(f"{datetime.date.today().isoformat()}, {describe()}, {versions()}, "
          f"torch on {torch.get_num_threads()} threads.")
    print("Median ms per call ± half the interquartile range; ratio: jaxpool's median over "
          "the fastest other side's.\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
