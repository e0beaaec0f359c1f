"""The resampling cells: jaxpool.interpolate and pixel_shuffle against torch, and against
jax.image.resize / scale_and_translate where their values are torch's for the cell; and
the compile-time table of interpolate's modes.

Run from the repository root:

    python -m benchmarks.cells.resampling                      # every cell, table to stdout
    python -m benchmarks.cells.resampling --markdown BENCHMARKS.md   # and into its section
    python -m benchmarks.cells.resampling --compile-only       # the compile-time table alone

Each side's output in each mode is first compared with torch's in float64 (as the pooling
grid does); a side that differs is `wrong` and not timed. Modes: `fwd`, `grad` (gradient of
sum(y**2)), `gradgrad` (gradient of that gradient's squared norm) under jax.jit, and
`eager-fwd` / `eager-grad` (repeat calls without jax.jit). `floor` (forward only): a jitted
negation of (input + output) / 2 float32 elements, which reads and writes the bytes the
forward must, once each: this machine's memory bandwidth for the cell. Candidate strategies: jaxpool
with every axis forced to the matrix product (`jaxpool-matrix`) or to strided slices per
phase (`jaxpool-phases`), on the cells where that changes an axis's strategy (elsewhere the
side would run the default's own program).

The compile-time table: each mode's forward and gradient programs traced, lowered and
compiled at a scale of 2 (its simplest program) and at arbitrary scales and extents (Mask
R-CNN's mask resize 1.9355 on 51x124 among them); the worst of them over the x2 one.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import sys
import time

import numpy as np

from benchmarks.report import markers, splice
from benchmarks.runner import (
    EAGER_MODES,
    JIT_MODES,
    Device,
    check,
    forward_and_gradient_seconds,
    jax_mode,
    measure_against_torch,
    torch_mode,
)


@dataclasses.dataclass(frozen=True)
class Cell:
    name: str
    shape: tuple[int, ...]
    kwargs: dict = dataclasses.field(default_factory=dict)
    shuffle: int = 0  # pixel_shuffle's factor (0: interpolate)


CELLS = (
    Cell("FPN nearest x2, 2x256x50x76", (2, 256, 50, 76), {"scale_factor": 2}),
    Cell("DeepLab bilinear x8, 2x21x64x64", (2, 21, 64, 64),
         {"scale_factor": 8, "mode": "bilinear", "align_corners": False}),
    Cell("U-Net bilinear x2 align_corners, 4x64x64x64", (4, 64, 64, 64),
         {"scale_factor": 2, "mode": "bilinear", "align_corners": True}),
    Cell("bicubic 224 -> 299, 8x3", (8, 3, 224, 224), {"size": (299, 299), "mode": "bicubic"}),
    Cell("bilinear antialias 512 -> 224, 8x3", (8, 3, 512, 512),
         {"size": (224, 224), "mode": "bilinear", "antialias": True}),
    Cell("PixelShuffle(3), 8x576x32x32", (8, 576, 32, 32), shuffle=3),
    # decoder, detection and 3d shapes
    Cell("bilinear x2, 4x256x32x32", (4, 256, 32, 32), {"scale_factor": 2, "mode": "bilinear"}),
    Cell("bilinear 24 -> 192, 4x21", (4, 21, 24, 24), {"size": (192, 192), "mode": "bilinear"}),
    Cell("trilinear x2, 2x32x16^3", (2, 32, 16, 16, 16), {"scale_factor": 2, "mode": "trilinear"}),
    Cell("bilinear antialias 336 -> 112, 8x3", (8, 3, 336, 336),
         {"size": (112, 112), "mode": "bilinear", "antialias": True}),
    # torchvision's Resize(224) on a 375x500 image (antialias by default on tensors): a
    # ratio with no short period
    Cell("bilinear antialias 375x500 -> 224x298, 8x3", (8, 3, 375, 500),
         {"size": (224, 298), "mode": "bilinear", "antialias": True}),
    Cell("bicubic 14 -> 21 (position embedding), 1x768", (1, 768, 14, 14),
         {"size": (21, 21), "mode": "bicubic"}),
    Cell("nearest 1.9355 (Mask R-CNN mask), 2x1x51x124", (2, 1, 51, 124),
         {"scale_factor": 1.9355, "mode": "nearest", "recompute_scale_factor": True}),
)


@contextlib.contextmanager
def forced(strategy: str | None):
    """Every non-copying axis takes ``strategy`` while a program is traced."""
    import jax

    from jaxpool.resampling import plan as resampling_plan

    if strategy is None:
        yield
        return
    original = resampling_plan.choose_sampling_strategy

    def choose(plan, backend="cpu"):
        chosen = original(plan, backend)
        if chosen in ("phases", "selections", "window-sums", "matrix") and not plan.copies:
            if strategy == "phases" and plan.phases() is None:
                return chosen
            return strategy
        return chosen

    # the per-plan programs are cached by plan: traced again under the forced choice, and
    # not left for the next side
    jax.clear_caches()
    resampling_plan.choose_sampling_strategy = choose
    try:
        yield
    finally:
        resampling_plan.choose_sampling_strategy = original
        jax.clear_caches()


def _jax_image(cell: Cell):
    """jax.image's call for the cell, or None where it has no call with torch's values
    (bicubic: A = -0.5, torch's -0.75; pixel shuffle: none)."""
    import jax
    import jax.numpy as jnp

    if cell.shuffle:
        return None
    kw = cell.kwargs
    mode = kw.get("mode", "nearest")
    lead, spatial = cell.shape[:2], cell.shape[2:]
    out = _out_extents(cell)
    axes = tuple(range(2, len(cell.shape)))
    if mode == "nearest":
        return lambda x: jax.image.resize(x, lead + out, "nearest")
    if mode in ("bilinear", "trilinear") and not kw.get("align_corners"):
        return lambda x: jax.image.resize(x, lead + out, "linear",
                                          antialias=kw.get("antialias", False))
    if mode in ("bilinear", "trilinear"):  # align_corners: in = out * (n-1)/(out-1)
        s = [(k - 1) / (n - 1) for n, k in zip(spatial, out)]
        scale = jnp.array(s, jnp.float32)
        translation = jnp.array([0.5 - 0.5 * v for v in s], jnp.float32)
        return lambda x: jax.image.scale_and_translate(x, lead + out, axes, scale,
                                                       translation, "linear", antialias=False)
    return None


def _out_extents(cell: Cell) -> tuple[int, ...]:
    from jaxpool.resampling.plan import plan_interpolate

    if cell.shuffle:
        b, c, h, w = cell.shape
        return (h * cell.shuffle, w * cell.shuffle)
    sizes, _ = plan_interpolate("", cell.shape, np.float32, **cell.kwargs)
    return tuple(sizes)


def _floor(cell: Cell, device: Device):
    """The cell's floor: a jitted negation of a float32 array of (input + output) / 2
    elements, which reads and writes the bytes the forward must read and write, once each,
    with no choice of source (this machine's memory bandwidth for the cell)."""
    import jax
    import jax.numpy as jnp

    inputs = math.prod(cell.shape)
    outputs = math.prod(cell.shape[:2]) * math.prod(_out_extents(cell))
    if cell.shuffle:
        outputs //= cell.shuffle ** 2
    a = jax.device_put(jnp.zeros(((inputs + outputs) // 2,), jnp.float32), device.jax_device)
    fn = jax.jit(jnp.negative).lower(a).compile()
    return lambda: jax.block_until_ready(fn(a))


def _torch_op(cell: Cell):
    import torch.nn.functional as F

    if cell.shuffle:
        return lambda t: F.pixel_shuffle(t, cell.shuffle)
    return lambda t: F.interpolate(t, **cell.kwargs)


def _jaxpool_op(cell: Cell):
    import jaxpool

    if cell.shuffle:
        return lambda x: jaxpool.pixel_shuffle(x, cell.shuffle)
    return lambda x: jaxpool.interpolate(x, **cell.kwargs)


def _sides(cell: Cell) -> dict:
    from jaxpool.resampling.plan import plan_interpolate

    sides = {"jaxpool": (_jaxpool_op(cell), None)}
    if not cell.shuffle:
        _, plan = plan_interpolate("", cell.shape, np.float32, **cell.kwargs)
        kinds = set(plan.strategies)
        if (kinds & {"phases", "selections", "window-sums", "matrix"}
                and not all(p.copies for p in plan.axes)):
            default = plan.strategies
            for strategy in ("matrix", "phases"):
                # a forced side that would take the default's strategy on every axis runs
                # the default's program: timing it again only adds noise
                with forced(strategy):
                    if plan.strategies != default:
                        sides[f"jaxpool-{strategy}"] = (_jaxpool_op(cell), strategy)
    image = _jax_image(cell)
    if image is not None:
        sides["jax.image"] = (image, None)
    return sides


def run_cell(cell: Cell, reps: int, min_sample_s: float, device: Device) -> list[dict]:
    import jax
    import jax.numpy as jnp
    import torch

    rng = np.random.default_rng(0)
    x64 = rng.standard_normal(cell.shape)
    x = jax.device_put(jnp.asarray(x64, jnp.float32), device.jax_device)
    t = torch.from_numpy(x64.astype(np.float32))
    rows = []
    for mode in JIT_MODES + EAGER_MODES:
        base = mode.removeprefix("eager-")
        ref = torch_mode(_torch_op(cell), torch.from_numpy(x64), base)()
        ref = ref.detach().numpy()
        fns, notes = {}, {}
        for name, (op, strategy) in _sides(cell).items():
            if mode.startswith("eager") and name != "jaxpool":
                continue
            f = jax_mode(op, base)
            with forced(strategy):
                # compiled ahead, so that no cache hands another side's program back
                fn = f if mode.startswith("eager") else jax.jit(f).lower(x).compile()
                y = fn(x)
                jax.block_until_ready(y)
            wrong = check(y, ref, "float32")
            if wrong:
                notes[name] = f"wrong ({wrong})"
                continue
            fns[name] = (lambda fn=fn: jax.block_until_ready(fn(x)))
        if mode == "fwd":
            fns["floor"] = _floor(cell, device)
        timed = measure_against_torch(fns, _torch_op(cell), t, base, reps, min_sample_s,
                                      device)
        rows.append({"cell": cell.name, "mode": mode, **timed, "notes": notes})
    return rows


SIDES = ("jaxpool", "jaxpool-matrix", "jaxpool-phases", "jax.image", "torch", "torch-1t",
         "floor")


def markdown(rows: list[dict], meta: str) -> str:
    lines = [meta, "", "| cell | mode | " + " | ".join(SIDES) + " | jaxpool / fastest peer"
             " | jaxpool / floor |", "|---|---|" + "---|" * (len(SIDES) + 2)]
    for r in rows:
        ms = r["ms"]
        cells = []
        for side in SIDES:
            if side in ms:
                cells.append(f"{ms[side]:.3g} ±{r['spread'][side]:.2g}")
            elif side in r["notes"]:
                cells.append("wrong")
            else:
                cells.append("")
        peers = [ms[s] for s in ("jax.image", "torch", "torch-1t") if s in ms]
        ratio = f"{ms['jaxpool'] / min(peers):.2f}x" if peers else ""
        over = f"{ms['jaxpool'] / ms['floor']:.1f}x" if "floor" in ms else ""
        lines.append(f"| {r['cell']} | {r['mode']} | " + " | ".join(cells)
                     + f" | {ratio} | {over} |")
    notes = sorted({f"{r['cell']}: {side} {why}" for r in rows
                    for side, why in r["notes"].items()})
    if notes:
        lines += ["", "Not timed (values not torch's):", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


# mode -> interpolate's arguments; each compiled at x2 and at every (extents, scale) below,
# with recompute_scale_factor=True (the scale then comes from the extents, as a detection
# pipeline's per-image resize)
COMPILE_MODES = {
    "nearest": {"mode": "nearest"},
    "nearest-exact": {"mode": "nearest-exact"},
    "bilinear": {"mode": "bilinear"},
    "bilinear align_corners": {"mode": "bilinear", "align_corners": True},
    "bicubic": {"mode": "bicubic"},
    "bilinear antialias": {"mode": "bilinear", "antialias": True},
    "bicubic antialias": {"mode": "bicubic", "antialias": True},
    "area": {"mode": "area"},
}
COMPILE_SIMPLEST = ((51, 124), 2.0)
COMPILE_CASES = (((51, 124), 1.9355), ((51, 124), 1.37), ((51, 124), 0.61),
                 ((200, 300), 1.9355), ((200, 300), 0.437), ((64, 64), 2.9),
                 ((333, 500), 1.523))


def compile_seconds(kwargs: dict, extents: tuple[int, int], scale: float) -> tuple[float, float]:
    """Seconds to trace, lower and compile the forward and the gradient of sum(y**2) on
    [2, 1, *extents] float32."""
    import jaxpool

    return forward_and_gradient_seconds(
        lambda a: jaxpool.interpolate(a, scale_factor=scale, recompute_scale_factor=True,
                                      **kwargs), extents)


def compile_table() -> str:
    compile_seconds(COMPILE_MODES["bilinear"], (8, 8), 2.0)  # the first compile's start-up
    lines = ["Seconds to trace, lower and compile on [2, 1, H, W] float32 (one run each; "
             "recompute_scale_factor=True), at x2 on 51x124 and the worst of "
             + ", ".join(f"{s} on {h}x{w}" for (h, w), s in COMPILE_CASES) + ".", "",
             "| mode | fwd x2 | fwd worst | worst case | fwd worst / x2 | grad x2 | "
             "grad worst | worst case | grad worst / x2 |", "|---|" + "---|" * 8]
    for name, kwargs in COMPILE_MODES.items():
        simplest = compile_seconds(kwargs, *COMPILE_SIMPLEST)
        cases = {case: compile_seconds(kwargs, *case) for case in COMPILE_CASES}
        cells = []
        for program in (0, 1):
            (extents, scale), worst = max(cases.items(), key=lambda kv: kv[1][program])
            cells += [f"{simplest[program]:.2f}", f"{worst[program]:.2f}",
                      f"{scale} on {extents[0]}x{extents[1]}",
                      f"{worst[program] / simplest[program]:.1f}x"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        print(lines[-1], file=sys.stderr)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cells.resampling")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--min-sample-s", type=float, default=0.01)
    parser.add_argument("--cells", default="",
                        help="only cells whose name contains this (then no compile-time "
                             "table unless --compile-only)")
    parser.add_argument("--markdown", help="splice the tables into this file's sections")
    parser.add_argument("--section", default="resampling",
                        help="the markers' name for the timing table (default resampling)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="where jax and torch run (gpu: torch on CUDA, no torch-1t)")
    parser.add_argument("--no-compile-table", action="store_true",
                        help="every cell's timings, without the compile-time table")
    parser.add_argument("--compile-only", action="store_true",
                        help="only the compile-time table")
    args = parser.parse_args(argv)
    device = Device(args.device)
    if args.compile_only or not (args.cells or args.no_compile_table):
        compiles = compile_table()
        print(compiles)
        if args.markdown:
            splice(args.markdown, compiles, *markers("resampling-compile"))
    if args.compile_only:
        return 0

    rows = []
    for cell in CELLS:
        if args.cells and args.cells not in cell.name:
            continue
        start = time.perf_counter()
        rows += run_cell(cell, args.reps, args.min_sample_s, device)
        print(f"{cell.name}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    meta = f"Median ms per call of {args.reps} interleaved samples, float32, " + device.in_words()
    text = markdown(rows, meta)
    print(text)
    if args.markdown:
        begin, end = markers(args.section)
        splice(args.markdown, text, begin, end)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
