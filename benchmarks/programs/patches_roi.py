"""The patches and boxes table: unfold, fold and roi_align where models call them
(``benchmarks.cells.patches``: VOLO's outlook attention, TNT's pixel embedding and a
ViT-style 16x16 patchify; ``benchmarks.cells.roi``: a Mask R-CNN head's RoIAlign over four
FPN levels, 7x7 box head, 14x14 mask head, ``MultiScaleRoIAlign`` against per-level
roi_align, R-FCN's position-sensitive ps_roi_align and ps_roi_pool, Fast R-CNN's
roi_pool), float32 on the CPU. Each cell is timed
forward, as the gradient of ``sum(y**2)`` in the input (the feature maps for roi_align;
the boxes are constants, as Mask R-CNN's proposals), and as the second derivative (the
gradient of the squared input-gradient norm, an R1 penalty), jitted, beside torch's CPU
autograd in the same process and a JAX peer (``benchmarks.derivatives``).

Run from the repository root:

    python -m benchmarks.programs.patches_roi                   # markdown table, median ms per call
    python -m benchmarks.programs.patches_roi --cells volo-unfold,roi-box
    python -m benchmarks.programs.patches_roi --cells roi-fpn,rfcn-ps-align,rfcn-ps-pool,roi-pool
    python -m benchmarks.programs.patches_roi --cells patchify-16 --batch 2  # peer: seconds a call
    python -m benchmarks.programs.patches_roi --before HEAD --no-peers  # HEAD's unfold/fold too

The roi_align cells hold 64 channels per level (``--channels``; Mask R-CNN's FPN has 256:
each call of torch's side would take seconds) and the mask head 256 boxes (``--mask-boxes``;
the positive boxes of a training batch), the box head 1000 (``--boxes``).

``--before REV`` adds the unfold and fold of git revision ``REV`` (its ``jaxpool/patches``
plan and kernel, beside the working tree's ``core``) as a side of the patches cells, and the
table compares the two (``--no-peers`` leaves the JAX peers out).

Every side's outputs are first compared with torch's (float32), and the JAX peers' with
jaxpool's; a wrong side raises.
"""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Callable

from benchmarks.cells import patches, roi
from benchmarks.derivatives import MODES, Cell, _ms, run, sides_table, table
from benchmarks.machine import describe, versions

DEFAULT_CELLS = patches.DEFAULT_CELLS + roi.DEFAULT_CELLS


def cells(batch: int = 8, boxes: int = 1000, mask_boxes: int = 256, channels: int = 64,
          before: patches.Revision | None = None,
          peers: bool = True) -> dict[str, Callable[[], Cell]]:
    """name -> a function building the cell: the patches cells, then the roi_align ones."""
    return {**patches.cells(batch, before, peers), **roi.cells(boxes, mask_boxes, channels)}


def before_table(results: list[dict], label: str) -> str:
    """The markdown table of jaxpool beside an earlier revision (``label``) and torch."""
    lines = [f"| cell | quantity | {label} ms | jaxpool ms | torch ms | before / after | "
             "jaxpool / torch |", "|---|---|---:|---:|---:|---:|---:|"]
    previous = None
    for r in results:
        sides = r["sides"]
        ours, torch_ms = sides["jaxpool"]["median_ms"], sides["torch"]["median_ms"]
        old = sides.get(label)
        words = r["words"] if r["cell"] != previous else ""
        previous = r["cell"]
        gain = f"{old['median_ms'] / ours:.1f}x" if old else "-"
        lines.append(f"| {words} | {r['quantity']} | {_ms(old) if old else '-'} | "
                     f"{_ms(sides['jaxpool'])} | {_ms(sides['torch'])} | {gain} | "
                     f"{ours / torch_ms:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.programs.patches_roi",
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
    parser.add_argument("--before", metavar="REV",
                        help="time the unfold and fold of this git revision beside")
    parser.add_argument("--no-peers", action="store_true",
                        help="leave the JAX peers out (the table then needs --before)")
    parser.add_argument("--quantities", default=",".join(MODES),
                        help="which quantities to time (default %(default)s)")
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
    if args.no_peers and not args.before:
        parser.error("--no-peers needs --before")
    before = patches.load_revision(args.before) if args.before else None
    built = cells(args.batch, args.boxes, args.mask_boxes, args.channels, before,
                  not args.no_peers)
    names = [n for n in args.cells.split(",") if n]
    unknown = [n for n in names if n not in built]
    if unknown:
        parser.error(f"unknown cells {unknown}; known: {', '.join(built)}")
    import torch

    modes = tuple(q for q in args.quantities.split(",") if q)
    if not modes or set(modes) - set(MODES):
        parser.error(f"--quantities: a comma-separated subset of {', '.join(MODES)}")
    results = run(names, args.reps, args.min_sample_s, args.budget_s, built=built, modes=modes)
    print(f"{datetime.date.today().isoformat()}, {describe()}, {versions()}, "
          f"torch on {torch.get_num_threads()} threads.")
    if before is not None:
        print("Median ms per call ± half the interquartile range; before / after: the "
              f"{args.before} side's median over jaxpool's.\n")
        print(before_table(results, before.label))
        return 0
    print("Median ms per call ± half the interquartile range; ratio: jaxpool's median over "
          "the fastest other side's (each jaxpool... side's over the fastest non-jaxpool "
          "side's).\n")
    print(tables(results))
    return 0


def tables(results: list[dict]) -> str:
    """One markdown table per run of cells with the same sides: :func:`table` where the
    sides are jaxpool, one JAX peer and torch, else :func:`sides_table` (the FPN cell's
    second jaxpool side, per-level ``roi_align``)."""
    groups: list[list[dict]] = []
    for r in results:
        if groups and list(groups[-1][0]["sides"]) == list(r["sides"]):
            groups[-1].append(r)
        else:
            groups.append([r])
    return "\n\n".join(table(g) if len(g[0]["sides"]) == 3 else sides_table(g)
                        for g in groups)


if __name__ == "__main__":
    raise SystemExit(main())
