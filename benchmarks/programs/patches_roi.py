"""The patches and boxes table: unfold, fold and roi_align where models call them
(``benchmarks.cells.patches``: VOLO's outlook attention, TNT's pixel embedding and a
ViT-style 16x16 patchify; ``benchmarks.cells.roi``: a Mask R-CNN head's RoIAlign over four
FPN levels, 7x7 box head, 14x14 mask head), float32 on the CPU. Each cell is timed
forward, as the gradient of ``sum(y**2)`` in the input (the feature maps for roi_align;
the boxes are constants, as Mask R-CNN's proposals), and as the second derivative (the
gradient of the squared input-gradient norm, an R1 penalty), jitted, beside torch's CPU
autograd in the same process and a JAX peer (``benchmarks.derivatives``).

Run from the repository root:

    python -m benchmarks.programs.patches_roi                   # markdown table, median ms per call
    python -m benchmarks.programs.patches_roi --cells volo-unfold,roi-box
    python -m benchmarks.programs.patches_roi --cells patchify-16 --batch 2   # minutes to compile

The roi_align cells hold 64 channels per level (``--channels``; Mask R-CNN's FPN has 256:
each call of torch's side would take seconds) and the mask head 256 boxes (``--mask-boxes``;
the positive boxes of a training batch), the box head 1000 (``--boxes``).

Every side's outputs are first compared with torch's (float32), and the JAX peers' with
jaxpool's; a wrong side raises.
"""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Callable

from benchmarks.cells import patches, roi
from benchmarks.derivatives import Cell, run, table
from benchmarks.machine import describe, versions

DEFAULT_CELLS = patches.DEFAULT_CELLS + roi.DEFAULT_CELLS


def cells(batch: int = 8, boxes: int = 1000, mask_boxes: int = 256,
          channels: int = 64) -> dict[str, Callable[[], Cell]]:
    """name -> a function building the cell: the patches cells, then the roi_align ones."""
    return {**patches.cells(batch), **roi.cells(boxes, mask_boxes, channels)}


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

    results = run(names, args.reps, args.min_sample_s, args.budget_s, built=built)
    print(f"{datetime.date.today().isoformat()}, {describe()}, {versions()}, "
          f"torch on {torch.get_num_threads()} threads.")
    print("Median ms per call ± half the interquartile range; ratio: jaxpool's median over "
          "the fastest other side's.\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
