"""The compile-time cells: compile time of the pooling, unpooling, padding and
pixel-shuffle ops. Does it grow with the extents, the ratio or the output size? And of
unfold and fold on the patches cells, to the third derivative.

Run from the repository root:

    python -m benchmarks.cells.compile_times                          # the table to stdout
    python -m benchmarks.cells.compile_times --markdown BENCHMARKS.md # and into its section
    python -m benchmarks.cells.compile_times --patches --markdown BENCHMARKS.md  # unfold, fold
    python -m benchmarks.cells.compile_times --data-positions --markdown BENCHMARKS.md

Each op's forward and the gradient of ``sum(y**2)`` are traced, lowered and compiled on a
``[2, 1, *spatial]`` float32 input, once in its simplest case (a small map, a divisible
ratio) and once in each harder case (large or odd extents, ragged adaptive windows, large
up- and downsampling ratios, wide pads); the table shows the simplest case's seconds, the
worst case's and their ratio. ``python -m benchmarks.cells.resampling --compile-only`` is
the same table for ``interpolate``.

``--patches`` times the cells of :mod:`benchmarks.cells.patches` (B = 8, float32) instead:
the forward, the gradient of ``sum(y**2)``, the second derivative (the gradient of the
squared gradient norm) and the third (the gradient of the second's squared norm), each
traced, lowered and compiled alone after ``jax.clear_caches()``; ``--before REV`` adds the
unfold and fold of git revision ``REV`` beside them. ``--data-positions`` times the same
four quantities of the ops that read where the data says, each at a real model's shapes
(``--ops`` picks them by name).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Callable

from benchmarks.report import markers, splice
from benchmarks.runner import forward_and_gradient_seconds


@dataclasses.dataclass(frozen=True)
class OpCases:
    name: str
    call: Callable  # (x, case) -> y, case being one entry of `simplest` or `harder`
    simplest: tuple  # (spatial extents, argument)
    harder: tuple[tuple, ...]


def _unpool(x, k):
    import jaxpool

    values, indices = jaxpool.max_pool2d(x, k, return_indices=True)
    return jaxpool.max_unpool2d(values, indices, k, output_size=x.shape[-2:])


def _cases() -> tuple[OpCases, ...]:
    import jaxpool

    return (
        OpCases("avg_pool2d", lambda x, a: jaxpool.avg_pool2d(x, *a),
                ((8, 8), (2,)),
                (((224, 224), (2,)), ((111, 111), (3, 2, 1, True)), ((224, 224), (7, 3)),
                 ((333, 500), (5, 1, 2)))),
        OpCases("max_pool2d", lambda x, a: jaxpool.max_pool2d(x, *a),
                ((8, 8), (2,)),
                (((224, 224), (2,)), ((111, 111), (3, 2, 1, 1, True)), ((224, 224), (7, 3)),
                 ((333, 500), (5, 1, 2)))),
        OpCases("lp_pool2d", lambda x, a: jaxpool.lp_pool2d(x, 2, *a),
                ((8, 8), (2,)),
                (((224, 224), (2,)), ((111, 111), (3, 2, True)), ((333, 500), (5, 1)))),
        OpCases("adaptive_avg_pool2d", lambda x, a: jaxpool.adaptive_avg_pool2d(x, a),
                ((14, 14), 7),
                (((15, 15), 4), ((50, 50), 9), ((224, 224), 7), ((7, 7), 9), ((33, 47), (5, 3)),
                 ((300, 300), 97), ((7, 7), 31), ((512, 512), 1))),
        OpCases("adaptive_max_pool2d", lambda x, a: jaxpool.adaptive_max_pool2d(x, a),
                ((14, 14), 7),
                (((15, 15), 4), ((50, 50), 9), ((224, 224), 7), ((7, 7), 9), ((33, 47), (5, 3)),
                 ((300, 300), 97), ((7, 7), 31), ((512, 512), 1))),
        OpCases("max_unpool2d", _unpool, ((8, 8), 2),
                (((224, 224), 2), ((111, 111), 3), ((333, 500), 2))),
        OpCases("pad reflect", lambda x, w: jaxpool.pad(x, (w,) * 4, "reflect"),
                ((8, 8), 1), (((128, 128), 3), ((333, 500), 7), ((64, 64), 63))),
        OpCases("pad replicate", lambda x, w: jaxpool.pad(x, (w,) * 4, "replicate"),
                ((8, 8), 1), (((128, 128), 3), ((333, 500), 7), ((64, 64), 200))),
        OpCases("pad circular", lambda x, w: jaxpool.pad(x, (w,) * 4, "circular"),
                ((8, 8), 1), (((128, 128), 3), ((333, 500), 7), ((64, 64), 64))),
        OpCases("pixel_shuffle", lambda x, r: jaxpool.pixel_shuffle(
            x.reshape(x.shape[0], r * r, x.shape[2] // r, -1), r),
                ((8, 8), 2), (((96, 96), 3), ((256, 256), 4), ((512, 512), 8))),
    )


def compile_seconds(op: OpCases, case: tuple) -> tuple[float, float]:
    extents, argument = case
    return forward_and_gradient_seconds(lambda a: op.call(a, argument), extents)


def _label(case: tuple) -> str:
    extents, argument = case
    return f"{argument} on {'x'.join(map(str, extents))}"


def table(ops: tuple[OpCases, ...]) -> str:
    import jax
    import jax.numpy as jnp

    jax.jit(lambda a: a + 1).lower(jnp.ones(2)).compile()  # the first compile's start-up
    lines = ["Seconds to trace, lower and compile on [2, 1, H, W] float32 (one run each): the "
             "simplest case, and the worst of the harder ones (the argument and the extents).",
             "", "| op | fwd simplest | fwd worst | worst case | fwd worst / simplest | "
             "grad simplest | grad worst | worst case | grad worst / simplest |",
             "|---|" + "---|" * 8]
    for op in ops:
        simplest = compile_seconds(op, op.simplest)
        harder = {case: compile_seconds(op, case) for case in op.harder}
        cells = []
        for program in (0, 1):
            case, worst = max(harder.items(), key=lambda kv: kv[1][program])
            cells += [f"{simplest[program]:.2f}", f"{worst[program]:.2f}", _label(case),
                      f"{worst[program] / simplest[program]:.1f}x"]
        lines.append(f"| {op.name} ({_label(op.simplest)}) | " + " | ".join(cells) + " |")
        print(lines[-1], file=sys.stderr)
    return "\n".join(lines) + "\n"


PATCH_QUANTITIES = ("fwd", "grad", "second", "third")


def patches_seconds(f, inputs: tuple, quantities=PATCH_QUANTITIES) -> dict[str, float]:
    """Seconds to trace, lower and compile each of ``quantities`` (of ``PATCH_QUANTITIES``)
    of a cell's side ``f(inputs, constants)`` (``inputs``: anything with a ``shape``, taken
    as float32), each after ``jax.clear_caches()``."""
    import time

    import jax
    import jax.numpy as jnp

    from benchmarks.derivatives import jax_modes

    modes = jax_modes(f)
    second = modes["second"]
    modes["third"] = lambda xs, cs: jax.grad(
        lambda xs: sum(jnp.sum(jnp.square(g)) for g in second(xs, cs)))(xs)
    xs = tuple(jax.ShapeDtypeStruct(a.shape, jnp.float32) for a in inputs)
    seconds = {}
    for quantity in quantities:
        jax.clear_caches()
        start = time.perf_counter()
        jax.jit(modes[quantity]).lower(xs, ()).compile()
        seconds[quantity] = time.perf_counter() - start
    return seconds


def patches_table(names, batch: int = 8, before: str | None = None,
                  quantities=PATCH_QUANTITIES) -> str:
    """Compile seconds of the patches cells ``names``: jaxpool's, and revision ``before``'s
    where given."""
    import jax
    import jax.numpy as jnp

    from benchmarks.cells import patches

    revision = patches.load_revision(before) if before else None
    built = patches.cells(batch, revision, peers=False)
    jax.jit(lambda a: a + 1).lower(jnp.ones(2)).compile()  # the first compile's start-up
    lines = [f"Seconds to trace, lower and compile each quantity alone (B = {batch}, "
             "float32, one run each).", "",
             "| cell | side | " + " | ".join(quantities) + " |",
             "|---|---|" + "---:|" * len(quantities)]
    for name in names:
        cell = built[name]()
        for side, f in cell.jax.items():
            seconds = patches_seconds(f, cell.inputs, quantities)
            lines.append(f"| {cell.words if side == 'jaxpool' else ''} | {side} | "
                         + " | ".join(f"{seconds[q]:.2f}" for q in quantities) + " |")
            print(lines[-1], file=sys.stderr)
    return "\n".join(lines) + "\n"


def _data_position_cells() -> dict[str, tuple]:
    """The ops that read where the data says, each at a real model's shapes: name -> (words,
    ``f(inputs, ())``, the differentiated inputs' shapes). Positions, boxes and samples are
    constants of ``f`` (numpy), as a model's proposals are; the grids and locations are
    differentiated, as a spatial transformer's and an attention's are."""
    import jaxpool
    import numpy as np

    rng = np.random.default_rng(0)
    boxes = np.concatenate([np.zeros((256, 1)), np.sort(rng.uniform(0, 100, (256, 4)), 1)], 1)
    boxes = boxes[:, [0, 1, 3, 2, 4]].astype(np.float32)  # x1 < x2, y1 < y2
    samples2 = rng.random((8, 64, 2), np.float32)
    samples3 = rng.random((2, 16, 3), np.float32)
    levels = ((80, 80), (40, 40), (20, 20))
    tokens = sum(h * w for h, w in levels)
    cells = {
        "grid_sample-bilinear": (
            "grid_sample bilinear zeros ([8, 64, 56, 56], grid [8, 56, 56, 2])",
            lambda xs, cs: jaxpool.grid_sample(xs[0], xs[1], "bilinear", "zeros", False),
            ((8, 64, 56, 56), (8, 56, 56, 2))),
        "grid_sample-bicubic": (
            "grid_sample bicubic reflection ([8, 3, 64, 64], grid [8, 64, 64, 2])",
            lambda xs, cs: jaxpool.grid_sample(xs[0], xs[1], "bicubic", "reflection", True),
            ((8, 3, 64, 64), (8, 64, 64, 2))),
        "grid_sample-3d": (
            "grid_sample 3-D bilinear border ([2, 8, 32, 64, 64], grid [2, 32, 64, 64, 3])",
            lambda xs, cs: jaxpool.grid_sample(xs[0], xs[1], "bilinear", "border", True),
            ((2, 8, 32, 64, 64), (2, 32, 64, 64, 3))),
        "roi_align": (
            "roi_align 7x7, ratio 2, 256 boxes ([1, 64, 100, 100])",
            lambda xs, cs: jaxpool.roi_align(xs[0], boxes, 7, 0.25, 2, True),
            ((1, 64, 100, 100),)),
        "fractional_max_pool2d": (
            "fractional_max_pool2d k3 ratio 0.5 ([8, 64, 56, 56])",
            lambda xs, cs: jaxpool.fractional_max_pool2d(xs[0], 3, output_ratio=0.5,
                                                         samples=samples2),
            ((8, 64, 56, 56),)),
        "fractional_max_pool3d": (
            "fractional_max_pool3d k2 ratio 0.5 ([2, 16, 16, 32, 32])",
            lambda xs, cs: jaxpool.fractional_max_pool3d(xs[0], 2, output_ratio=0.5,
                                                         samples=samples3),
            ((2, 16, 16, 32, 32),)),
        "multi_scale_deformable_attention": (
            "multi_scale_deformable_attention, RT-DETR's decoder (3 levels, 300 queries, "
            "8 heads x 32, 4 points)",
            lambda xs, cs: jaxpool.multi_scale_deformable_attention(xs[0], levels, xs[1],
                                                                    xs[2]),
            ((2, tokens, 8, 32), (2, 300, 8, 3, 4, 2), (2, 300, 8, 3, 4))),
    }
    if hasattr(jaxpool, "deform_conv2d"):
        cells["deform_conv2d"] = (
            "deform_conv2d 3x3, 256 -> 256 channels, with mask ([2, 256, 14, 14])",
            lambda xs, cs: jaxpool.deform_conv2d(xs[0], xs[1], xs[2], None, 1, 1, 1, xs[3]),
            ((2, 256, 14, 14), (2, 18, 14, 14), (256, 256, 3, 3), (2, 9, 14, 14)))
    return cells


def data_positions_table(names, quantities=PATCH_QUANTITIES) -> str:
    """Compile seconds of the ops that read where the data says, to the third derivative."""
    import jax
    import jax.numpy as jnp

    built = _data_position_cells()
    jax.jit(lambda a: a + 1).lower(jnp.ones(2)).compile()  # the first compile's start-up
    lines = ["Seconds to trace, lower and compile each quantity alone (float32, one run "
             "each).", "", "| op at | " + " | ".join(quantities) + " |",
             "|---|" + "---:|" * len(quantities)]
    for name in names:
        words, f, shapes = built[name]
        inputs = tuple(jax.ShapeDtypeStruct(shape, jnp.float32) for shape in shapes)
        seconds = patches_seconds(f, inputs, quantities)
        lines.append(f"| {words} | " + " | ".join(f"{seconds[q]:.2f}" for q in quantities)
                     + " |")
        print(lines[-1], file=sys.stderr)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cells.compile_times",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default="", help="only ops whose name contains this")
    parser.add_argument("--markdown", help="splice the table into this file's section")
    parser.add_argument("--patches", action="store_true",
                        help="the patches cells' unfold and fold, to the third derivative")
    parser.add_argument("--data-positions", action="store_true",
                        help="the ops that read where the data says (grid_sample, roi_align, "
                             "fractional pooling, deformable attention and convolution), to "
                             "the third derivative")
    parser.add_argument("--cells", default="volo-unfold,volo-fold,volo-s1-unfold,volo-s1-fold,"
                        "t2t-unfold-7,t2t-unfold-3,tnt-unfold,patchify-16,unpatchify-16",
                        help="with --patches: the cells (default %(default)s)")
    parser.add_argument("--before", metavar="REV",
                        help="with --patches: the unfold and fold of this git revision too")
    parser.add_argument("--quantities", default=",".join(PATCH_QUANTITIES),
                        help="with --patches: which of them (default %(default)s)")
    args = parser.parse_args(argv)
    if args.data_positions:
        quantities = tuple(q for q in args.quantities.split(",") if q)
        if not quantities or set(quantities) - set(PATCH_QUANTITIES):
            parser.error(f"--quantities: a comma-separated subset of {PATCH_QUANTITIES}")
        names = [n for n in _data_position_cells() if args.ops in n]
        text = data_positions_table(names, quantities)
        section = "data-positions-compile-times"
    elif args.patches:
        quantities = tuple(q for q in args.quantities.split(",") if q)
        if not quantities or set(quantities) - set(PATCH_QUANTITIES):
            parser.error(f"--quantities: a comma-separated subset of {PATCH_QUANTITIES}")
        text = patches_table([n for n in args.cells.split(",") if n], before=args.before,
                             quantities=quantities)
        section = "patches-compile-times"
    else:
        text = table(tuple(op for op in _cases() if args.ops in op.name))
        section = "compile-times"
    print(text)
    if args.markdown:
        splice(args.markdown, text, *markers(section))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
