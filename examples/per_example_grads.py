"""Per-example gradients with `vmap(grad(loss))` through jaxpool layers.

The loss is written for one unbatched example ([28, 28, 3] image, integer label): jaxpool's
pools accept unbatched inputs, so `jax.vmap` adds the batch axis and `jax.grad` of the
single-example loss becomes a batch of per-example gradients in one compiled program. The
script checks the result against a Python loop over examples (one `grad` call each) and
against the ordinary batch gradient, then times vmap against the loop.

    python examples/per_example_grads.py
    python examples/per_example_grads.py --batch-size 256 --repeats 50
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import ShapesNet, interleaved_timings, make_shapes, summarize  # noqa: E402

model = ShapesNet()


def loss(params, x, y):
    """Cross-entropy of one example: x [28, 28, 3], y int scalar."""
    return optax.softmax_cross_entropy_with_integer_labels(model.apply(params, x), y)


per_example_grads = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))
single_grad = jax.jit(jax.grad(loss))
batch_grad = jax.jit(jax.grad(lambda p, x, y: jax.vmap(loss, (None, 0, 0))(p, x, y).mean()))


def loop_grads(params, xs, ys):
    """The per-example gradients one example at a time, stacked like vmap's."""
    grads = [single_grad(params, x, y) for x, y in zip(xs, ys)]
    return jax.tree_util.tree_map(lambda *g: jnp.stack(g), *grads)


def max_errors(a, b) -> tuple[float, float]:
    """(max abs difference, that relative to max |b|) over all leaves of two pytrees."""
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    err = max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(la, lb))
    scale = max(float(jnp.max(jnp.abs(y))) for y in lb)
    return err, err / scale


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeats", type=int, default=20, help="timed calls of each method")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("out"),
                   help="folder for per_example_grads_metrics.json (default: out/)")
    args = p.parse_args(argv)
    if args.batch_size < 1 or args.repeats < 1:
        p.error("--batch-size and --repeats must be >= 1")

    xs, ys = make_shapes(args.batch_size, seed=args.seed)
    xs, ys = jnp.asarray(xs), jnp.asarray(ys)
    # Jitted: Flax's init run eagerly compiles every op on its own (the same values).
    params = jax.jit(model.init)(jax.random.key(args.seed), xs[0])
    print(f"ShapesNet, {args.batch_size} unbatched examples of shape {list(xs.shape[1:])}")

    vmapped = jax.block_until_ready(per_example_grads(params, xs, ys))
    looped = jax.block_until_ready(loop_grads(params, xs, ys))
    print("per-example gradient shapes:")
    for path, g in jax.tree_util.tree_leaves_with_path(vmapped):
        print(f"  {'/'.join(str(k.key) for k in path[1:]):<16} {list(g.shape)}")

    err, rel = max_errors(vmapped, looped)
    mean_err, mean_rel = max_errors(jax.tree_util.tree_map(lambda g: g.mean(0), vmapped),
                                    batch_grad(params, xs, ys))
    # Both sides are float32 sums of the same terms in possibly different orders.
    ok = rel < 1e-5 and mean_rel < 1e-5
    print(f"vmap vs loop:        max abs diff {err:.2e} (relative {rel:.1e})")
    print(f"mean vs batch grad:  max abs diff {mean_err:.2e} (relative {mean_rel:.1e})")
    print("agree" if ok else "DISAGREE")

    norms = jnp.sqrt(sum(jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1)
                         for g in jax.tree_util.tree_leaves(vmapped)))
    print(f"per-example gradient norms: min {float(norms.min()):.3f}, "
          f"median {float(jnp.median(norms)):.3f}, max {float(norms.max()):.3f}")

    fns = {"vmap": lambda: per_example_grads(params, xs, ys),
           "loop": lambda: loop_grads(params, xs, ys)}
    times = {name: [] for name in fns}
    for _ in tqdm(range(args.repeats), desc="timing", unit="round"):
        for name, ts in interleaved_timings(fns, 1).items():
            times[name] += ts
    speedup = statistics.median(times["loop"]) / statistics.median(times["vmap"])
    print(f"vmap(grad): {summarize(times['vmap'])}")
    print(f"loop:       {summarize(times['loop'])}")
    print(f"speedup of vmap over the loop: {speedup:.1f}x (median of {args.repeats} interleaved calls, "
          f"batch of {args.batch_size})")

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "per_example_grads_metrics.json").write_text(json.dumps(
        {"batch_size": args.batch_size, "max_abs_err": err, "max_rel_err": rel,
         "mean_vs_batch_rel_err": mean_rel, "agree": ok, "speedup": speedup}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
