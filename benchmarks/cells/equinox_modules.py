"""The Equinox module cells: jaxpool.equinox's modules against eqx.nn's on the cells where
eqx.nn gives torch's values (MaxPool2d(3, 2, 1), the ResNet stem, and AvgPool2d(2) without
ceil mode), each module vmapped over an 8x64x56x56 float32 batch (Equinox's channels-first
layout): forward and gradient under jax.jit, and the forward called eagerly.

Run from the repository root:

    python -m benchmarks.cells.equinox_modules    # median ms per call, ratio to eqx.nn

Each side's output (and gradient) is first compared with torch's in float64; a wrong side
raises.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.runner import check, jax_mode, measure, torch_mode

SHAPE = (8, 64, 56, 56)  # [B, C, H, W]
MODES = ("fwd", "grad", "fwd eager")


def _cells():
    """(label, jaxpool.equinox's module, eqx.nn's, torch's function), on one example each."""
    import equinox as eqx
    import torch.nn.functional as F

    import jaxpool.equinox

    return [("MaxPool2d(3, 2, 1)", jaxpool.equinox.MaxPool2d(3, 2, 1),
             eqx.nn.MaxPool2d(3, 2, 1), lambda t: F.max_pool2d(t, 3, 2, 1)),
            ("AvgPool2d(2)", jaxpool.equinox.AvgPool2d(2), eqx.nn.AvgPool2d(2, 2),
             lambda t: F.avg_pool2d(t, 2))]


def run(reps: int, min_sample_s: float, shape: tuple[int, ...] = SHAPE) -> list[str]:
    import jax
    import jax.numpy as jnp
    import torch

    x64 = np.random.default_rng(0).standard_normal(shape)
    x = jnp.asarray(x64, jnp.float32)
    lines = []
    for label, ours, theirs, torch_op in _cells():
        for mode in MODES:
            differentiate = mode.split()[0]
            fns = {}
            for side, module in (("jaxpool.equinox", ours), ("eqx.nn", theirs)):
                fn = jax_mode(jax.vmap(module), differentiate)
                fn = fn if mode.endswith("eager") else jax.jit(fn)
                wrong = check(np.asarray(fn(x)),
                              torch_mode(torch_op, torch.from_numpy(x64), differentiate)()
                              .detach().numpy(), "float32")
                if wrong:
                    raise AssertionError(f"{side} {label} {mode}: {wrong}")
                fns[side] = lambda fn=fn: jax.block_until_ready(fn(x))
            timed = measure(fns, reps, min_sample_s)
            ours_t, theirs_t = timed["jaxpool.equinox"], timed["eqx.nn"]
            spread = {k: (v["q75_ms"] - v["q25_ms"]) / 2 for k, v in timed.items()}
            lines.append(f"| {label} | {mode} | "
                         f"{ours_t['median_ms']:.2f} ±{spread['jaxpool.equinox']:.2f} | "
                         f"{theirs_t['median_ms']:.2f} ±{spread['eqx.nn']:.2f} | "
                         f"{ours_t['median_ms'] / theirs_t['median_ms']:.2f} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cells.equinox_modules",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--min-sample-s", type=float, default=0.05)
    parser.add_argument("--shape", default="x".join(map(str, SHAPE)),
                        help="the batch, BxCxHxW (default %(default)s)")
    args = parser.parse_args(argv)
    shape = tuple(int(n) for n in args.shape.split("x"))
    print("| cell | mode | jaxpool.equinox ms | eqx.nn ms | ratio |\n|---|---|---:|---:|---:|")
    print("\n".join(run(args.reps, args.min_sample_s, shape)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
