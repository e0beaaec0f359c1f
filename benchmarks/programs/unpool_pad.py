"""The unpooling and padding table: jaxpool.max_unpool2d against torch and a scatter (the
cells of ``benchmarks.cells.unpooling``), and jaxpool.pad against torch and jnp.pad (those
of ``benchmarks.cells.padding``), in one table.

Run from the repository root:

    python -m benchmarks.programs.unpool_pad                      # every cell, table to stdout
    python -m benchmarks.programs.unpool_pad --markdown BENCHMARKS.md   # and into its section

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
import sys
import time

import numpy as np

from benchmarks.cells import padding, unpooling
from benchmarks.report import markers, splice
from benchmarks.runner import (
    EAGER_MODES,
    JIT_MODES,
    Device,
    check,
    jax_mode,
    measure_against_torch,
    torch_mode,
)

FAMILIES = (unpooling, padding)  # the table's cells, in this order


def run_cell(family, cell, reps: int, min_sample_s: float, device: Device) -> list[dict]:
    """One row per mode for ``cell`` of ``family`` (a cell module above)."""
    import jax
    import jax.numpy as jnp
    import torch

    x64 = np.random.default_rng(0).standard_normal(cell.shape)
    x = jax.device_put(jnp.asarray(x64, jnp.float32), device.jax_device)
    t = torch.from_numpy(x64.astype(np.float32))
    extra = family.extra(cell)
    torch_op, sides = family.sides(cell, extra, device)
    torch_op64, _ = family.sides(cell, extra)
    rows = []
    for mode in JIT_MODES + EAGER_MODES:
        base = mode.removeprefix("eager-")
        ref = torch_mode(torch_op64, torch.from_numpy(x64), base)().detach().numpy()
        fns, notes = {}, {}
        for name, (op, arg) in sides.items():
            if mode.startswith("eager"):
                f = jax_mode(lambda a, op=op, arg=arg: op(a, arg), base)
                fn = lambda a, i, f=f: f(a)
            else:
                fn = jax.jit(lambda a, i, op=op: jax_mode(lambda b: op(b, i), base)(a))
            y = fn(x, arg)
            jax.block_until_ready(y)
            wrong = check(y, ref, "float32")
            if wrong:
                notes[name] = f"wrong ({wrong})"
                continue
            fns[name] = (lambda fn=fn, arg=arg: jax.block_until_ready(fn(x, arg)))
        if base == "fwd":
            floor = family.floor(cell)
            fns["floor"] = (lambda floor=floor, arg=sides["jaxpool"][1]:
                            jax.block_until_ready(floor(x, arg)))
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
    parser = argparse.ArgumentParser(prog="python -m benchmarks.programs.unpool_pad",
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
    for family in FAMILIES:
        for cell in family.CELLS:
            if args.cells and args.cells not in cell.name:
                continue
            start = time.perf_counter()
            rows += run_cell(family, cell, args.reps, args.min_sample_s, device)
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
