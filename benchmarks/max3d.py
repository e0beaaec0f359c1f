"""The 3d max-pooling cell: jaxpool.max_pool3d(x, 3, 2, 1) on 4x64x16x56x56 (video, ReLU
inputs full of ties) against torch on one thread, gradient and second derivative under
jax.jit, both layouts (torch's channels-last is ``channels_last_3d``).

Run from the repository root:

    python -m benchmarks.max3d              # median ms per call, ratio to torch-1t

Each side's output is first compared with torch's in float64; a wrong side raises.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.runner import check, jax_mode, measure, torch_mode

SHAPE = (4, 64, 16, 56, 56)  # channels-first


def run(reps: int, min_sample_s: float) -> list[str]:
    import jax
    import jax.numpy as jnp
    import torch

    import jaxpool

    x64 = np.maximum(np.random.default_rng(0).standard_normal(SHAPE), 0)

    def torch_op(a):
        return torch.nn.functional.max_pool3d(a, 3, 2, 1)

    lines = []
    for channels_last in (False, True):
        x = jnp.asarray(np.moveaxis(x64, 1, -1) if channels_last else x64, jnp.float32)
        t = torch.from_numpy(x64.astype(np.float32))
        if channels_last:
            t = t.contiguous(memory_format=torch.channels_last_3d)
        for mode in ("grad", "gradgrad"):
            fn = jax.jit(jax_mode(lambda a: jaxpool.max_pool3d(a, 3, 2, 1,
                                                               channels_last=channels_last),
                                  mode))
            y = np.asarray(fn(x))
            wrong = check(np.moveaxis(y, -1, 1) if channels_last else y,
                          torch_mode(torch_op, torch.from_numpy(x64), mode)().numpy(),
                          "float32")
            if wrong:
                raise AssertionError(f"jaxpool {mode}: {wrong}")
            timed = measure({"jaxpool": lambda: jax.block_until_ready(fn(x)),
                             "torch-1t": torch_mode(torch_op, t, mode, threads=1)},
                            reps, min_sample_s)
            j, r = timed["jaxpool"], timed["torch-1t"]
            spread = {k: (v["q75_ms"] - v["q25_ms"]) / 2 for k, v in timed.items()}
            lines.append(f"| {'NDHWC' if channels_last else 'NCDHW'} | {mode} | "
                         f"{j['median_ms']:.1f} ±{spread['jaxpool']:.1f} | "
                         f"{r['median_ms']:.1f} ±{spread['torch-1t']:.1f} | "
                         f"{j['median_ms'] / r['median_ms']:.2f} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.max3d",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--min-sample-s", type=float, default=0.05)
    args = parser.parse_args(argv)
    print("| layout | mode | jaxpool ms | torch-1t ms | ratio |\n|---|---|---:|---:|---:|")
    print("\n".join(run(args.reps, args.min_sample_s)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
