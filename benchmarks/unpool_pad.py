"""The unpooling and padding cells: jaxpool.max_unpool2d and jaxpool.pad against torch, and
against jnp.pad (the pad modes it has: reflect, edge, wrap) and a scatter
(``jnp.zeros(...).at[indices].set(values)``, the obvious JAX port of max_unpool, whose
gradient is a gather and whose value is a scatter: not deterministic on GPU).

Run from the repository root:

    python -m benchmarks.unpool_pad                      # every cell, table to stdout
    python -m benchmarks.unpool_pad --markdown BENCHMARKS.md   # and into its section

Each side's output in each mode is first compared with torch's in float64; a side that
differs is `wrong` and not timed. Modes: `fwd`, `grad` (gradient of sum(y**2)), `gradgrad`
(gradient of that gradient's squared norm) under jax.jit, and `eager-fwd` / `eager-grad`
(repeat calls without jax.jit; jaxpool's eager max_unpool also checks that every index lies
in its window).

`floor` (forward modes only): a jitted program that reads the bytes the op must read (the
input, and max_unpool's indices) and writes an output-sized array, each byte once, with no
choice of source: a constant pad to the output's shape (for max_unpool, of the values where
the index is non-negative, spread by a strided pad). It is this machine's memory bandwidth
for the cell, timed beside the sides.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import numpy as np

from benchmarks.report import markers, splice
from benchmarks.runner import Device, check, jax_mode, measure_against_torch, torch_mode

JIT_MODES = ("fwd", "grad", "gradgrad")
EAGER_MODES = ("eager-fwd", "eager-grad")


@dataclasses.dataclass(frozen=True)
class Cell:
    name: str
    shape: tuple[int, ...]  # the input: pooled values for max_unpool
    op: str                 # "unpool" | "pad"
    mode: str = ""          # pad's mode
    width: int = 0          # pad's entry on every side of every spatial axis


CELLS = (
    Cell("SegNet max_unpool 2x2, 4x64x112x112 -> 224", (4, 64, 112, 112), "unpool"),
    Cell("max_unpool2d 2x2, 4x128x28x28", (4, 128, 28, 28), "unpool"),
    Cell("ReflectionPad2d(3), 8x64x128x128", (8, 64, 128, 128), "pad", "reflect", 3),
    Cell("ReplicationPad2d(3), 8x64x128x128", (8, 64, 128, 128), "pad", "replicate", 3),
    Cell("ReflectionPad2d(1), 4x256x64x64", (4, 256, 64, 64), "pad", "reflect", 1),
    Cell("ReplicationPad3d(2), 2x32x24^3", (2, 32, 24, 24, 24), "pad", "replicate", 2),
)
JNP_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _indices(cell: Cell) -> np.ndarray:
    import torch
    import torch.nn.functional as F

    b, c, h, w = cell.shape
    encoder = torch.from_numpy(np.random.default_rng(1).standard_normal(
        (b, c, 2 * h, 2 * w)).astype(np.float32))
    return F.max_pool2d(encoder, 2, return_indices=True)[1].numpy()


def _ops(cell: Cell, indices, device: Device | None = None):
    """(torch op, {side: jax op}); torch's indices on ``device`` (default the CPU)."""
    import jax
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F

    import jaxpool

    if cell.op == "unpool":
        it = torch.from_numpy(indices)
        ij = jnp.asarray(indices.astype(np.int32))
        if device is not None:
            it = it.to(device.torch_device)
            ij = jax.device_put(ij, device.jax_device)
        b, c, h, w = cell.shape

        def scatter(x, i):
            flat = jnp.zeros((b * c, 4 * h * w), x.dtype)
            rows = jnp.arange(b * c)[:, None]
            out = flat.at[rows, i.reshape(b * c, -1)].set(x.reshape(b * c, -1))
            return out.reshape(b, c, 2 * h, 2 * w)

        # The indices are an argument of the jitted program, as in a model (a constant
        # would let XLA fold the index comparisons away).
        return (lambda t: F.max_unpool2d(t, it, 2),
                {"jaxpool": (lambda x, i: jaxpool.max_unpool2d(x, i, 2), ij),
                 "jnp scatter": (scatter, ij)})
    spatial = len(cell.shape) - 2
    pads = (cell.width,) * (2 * spatial)
    widths = ((0, 0), (0, 0)) + ((cell.width, cell.width),) * spatial
    return (lambda t: F.pad(t, pads, cell.mode),
            {"jaxpool": (lambda x, _: jaxpool.pad(x, pads, cell.mode), None),
             "jnp.pad": (lambda x, _: jnp.pad(x, widths, mode=JNP_MODES[cell.mode]), None)})


def _floor(cell: Cell):
    """The cell's floor program (see the module docstring): (x, extra) -> output-sized."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    spatial = len(cell.shape) - 2
    if cell.op == "unpool":
        widths = [(0, 0, 0)] * 2 + [(0, 1, 1)] * spatial
        return jax.jit(lambda x, i: lax.pad(jnp.where(i >= 0, x, 0), jnp.zeros((), x.dtype),
                                            widths))
    widths = [(0, 0, 0)] * 2 + [(cell.width, cell.width, 0)] * spatial
    return jax.jit(lambda x, _: lax.pad(x, jnp.zeros((), x.dtype), widths))


def run_cell(cell: Cell, reps: int, min_sample_s: float, device: Device) -> list[dict]:
    import jax
    import jax.numpy as jnp
    import torch

    x64 = np.random.default_rng(0).standard_normal(cell.shape)
    x = jax.device_put(jnp.asarray(x64, jnp.float32), device.jax_device)
    t = torch.from_numpy(x64.astype(np.float32))
    indices = _indices(cell) if cell.op == "unpool" else None
    torch_op, sides = _ops(cell, indices, device)
    torch_op64, _ = _ops(cell, indices)
    rows = []
    for mode in JIT_MODES + EAGER_MODES:
        base = mode.removeprefix("eager-")
        ref = torch_mode(torch_op64, torch.from_numpy(x64), base)().detach().numpy()
        fns, notes = {}, {}
        for name, (op, extra) in sides.items():
            if mode.startswith("eager"):
                f = jax_mode(lambda a, op=op, extra=extra: op(a, extra), base)
                fn = lambda a, i, f=f: f(a)
            else:
                fn = jax.jit(lambda a, i, op=op: jax_mode(lambda b: op(b, i), base)(a))
            y = fn(x, extra)
            jax.block_until_ready(y)
            wrong = check(y, ref, "float32")
            if wrong:
                notes[name] = f"wrong ({wrong})"
                continue
            fns[name] = (lambda fn=fn, extra=extra: jax.block_until_ready(fn(x, extra)))
        if base == "fwd":
            floor = _floor(cell)
            fns["floor"] = (lambda floor=floor, extra=sides["jaxpool"][1]:
                            jax.block_until_ready(floor(x, extra)))
        timed = measure_against_torch(fns, torch_op, t, base, reps, min_sample_s, device)
        rows.append({"cell": cell.name, "mode": mode, **timed, "notes": notes})
    return rows


SIDES = ("jaxpool", "jnp.pad", "jnp scatter", "torch", "torch-1t", "floor")
PEERS = ("jnp.pad", "torch", "torch-1t")  # the scatter is a reference, not a correct peer


def markdown(rows: list[dict], meta: str) -> str:
    lines = [meta, "", "| cell | mode | " + " | ".join(SIDES)
             + " | jaxpool / fastest peer | jaxpool / floor |",
             "|---|---|" + "---|" * (len(SIDES) + 2)]
    for r in rows:
        ms = r["ms"]
        cells = []
        for side in SIDES:
            if side in ms:
                cells.append(f"{ms[side]:.3g} ±{r['spread'][side]:.2g}")
            else:
                cells.append("wrong" if side in r["notes"] else "")
        peers = [ms[s] for s in PEERS if s in ms]
        ratio = f"{ms['jaxpool'] / min(peers):.2f}x" if peers and "jaxpool" in ms else ""
        over = f"{ms['jaxpool'] / ms['floor']:.2f}x" if "floor" in ms and "jaxpool" in ms else ""
        lines.append(f"| {r['cell']} | {r['mode']} | " + " | ".join(cells)
                     + f" | {ratio} | {over} |")
    notes = sorted({f"{r['cell']}: {side} {why}" for r in rows
                    for side, why in r["notes"].items()})
    if notes:
        lines += ["", "Not timed (values not torch's):", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.unpool_pad",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--min-sample-s", type=float, default=0.01)
    parser.add_argument("--cells", default="", help="only cells whose name contains this")
    parser.add_argument("--markdown", help="splice the table into this file's section")
    parser.add_argument("--section", default="unpool-pad",
                        help="the markers' name for the table (default unpool-pad)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="where jax and torch run (gpu: torch on CUDA, no torch-1t)")
    args = parser.parse_args(argv)
    device = Device(args.device)
    rows = []
    for cell in CELLS:
        if args.cells and args.cells not in cell.name:
            continue
        start = time.perf_counter()
        rows += run_cell(cell, args.reps, args.min_sample_s, device)
        print(f"{cell.name}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    meta = (f"Median ms per call of {args.reps} interleaved samples (± half the interquartile "
            "range), float32, " + device.in_words())
    text = markdown(rows, meta)
    print(text)
    if args.markdown:
        begin, end = markers(args.section)
        splice(args.markdown, text, begin, end)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
