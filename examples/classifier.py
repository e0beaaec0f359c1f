"""Train a small Flax (linen) convolutional classifier built with jaxpool layers.

First prints the catalog's example networks with `nn.tabulate` (output shapes and parameter
counts), then trains `ShapesNet` with optax on ten classes of shapes rendered in code (no
download) and prints its test accuracy.

    python examples/classifier.py                 # 300 steps, well under a minute on a CPU
    python examples/classifier.py --steps 50 --train-size 1000

Why linen: `nn.tabulate`, which prints the catalog, is linen's, and linen keeps parameters
in a plain pytree that the other examples hand straight to `optax`, `vmap(grad(...))` and
sharded `jit`. jaxpool.nnx has the same layers, under the same names, for nnx models.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import NUM_CLASSES, SHAPE_NAMES, ShapesNet, make_shapes, param_count  # noqa: E402

import jaxpool.linen as jpl  # noqa: E402


# The catalog's example networks. The catalog writes shapes as [B, C, H, W] (torch layout);
# Flax convolutions are channels-last, so the inputs here are [B, H, W, C] and jaxpool's
# linen modules take their default channels_last=True.
class NetA(nn.Module):
    """[B, 28, 28, 3] -> [B, 10]: conv, relu, adaptive pool to 1x1, linear."""

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(16, (3, 3), padding=1)(x))
        x = jpl.AdaptiveAvgPool2d(1)(x)
        return nn.Dense(10)(x.reshape(x.shape[0], -1))


class NetB(nn.Module):
    """[B, 15, 15, 8] -> [B, 5]: ragged adaptive pool 15 -> 4, linear."""

    @nn.compact
    def __call__(self, x):
        x = jpl.AdaptiveAvgPool2d(4)(x)
        return nn.Dense(5)(x.reshape(x.shape[0], -1))


class NetC(nn.Module):
    """[B, 16, 16, 3] -> [B, 8, 8, 8]: conv, relu, 2x2 average pool."""

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(8, (3, 3), padding=1)(x))
        return jpl.AvgPool2d(2)(x)


class NetD(nn.Module):
    """[B, 4, 4, 8] -> [B, 5]: 4x4 average pool, linear."""

    @nn.compact
    def __call__(self, x):
        x = jpl.AvgPool2d(4)(x)
        return nn.Dense(5)(x.reshape(x.shape[0], -1))


class NetE(nn.Module):
    """[B, 16, 16, 3] -> [B, 10]: conv, relu, global average pool, linear."""

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(16, (3, 3), padding=1)(x))
        return nn.Dense(10)(jpl.GlobalAvgPool()(x))


class NetF(nn.Module):
    """[B, 32, 32, 3] -> [B, 4]: strided conv, group norm, relu, global pool, linear."""

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(8, (4, 4), strides=2, padding=1)(x)
        x = nn.relu(nn.GroupNorm(num_groups=4, epsilon=1e-5)(x))
        return nn.Dense(4)(jpl.GlobalAvgPool()(x))


# name, module, input shape [B, H, W, C], output shape, parameter count (as the catalog gives them)
CATALOG = (
    ("A", NetA, (2, 28, 28, 3), (2, 10), 618),
    ("B", NetB, (2, 15, 15, 8), (2, 5), 645),
    ("C", NetC, (2, 16, 16, 3), (2, 8, 8, 8), 224),
    ("D", NetD, (2, 4, 4, 8), (2, 5), 45),
    ("E", NetE, (2, 16, 16, 3), (2, 10), 618),
    ("F", NetF, (2, 32, 32, 3), (2, 4), 444),
)


def tabulate(model: nn.Module, x) -> str:
    """`nn.tabulate`'s table of layers, output shapes and parameter counts."""
    # Colour codes only on a terminal, so that logs and captured output stay readable.
    console = {"width": 110, "force_terminal": sys.stdout.isatty()}
    return nn.tabulate(model, jax.random.key(0), compute_flops=False, console_kwargs=console)(x)


def print_catalog() -> bool:
    """Tabulate each catalog network; return whether all shapes and counts match."""
    ok = True
    for name, cls, in_shape, out_shape, count in CATALOG:
        model = cls()
        x = jnp.zeros(in_shape, jnp.float32)
        print(f"\nNetwork {name}: {cls.__doc__.splitlines()[0]}")
        print(tabulate(model, x))
        # Shapes only: nothing is computed (an eager init compiles every initializer op).
        params = jax.eval_shape(model.init, jax.random.key(0), x)
        got_shape = jax.eval_shape(model.apply, params, x).shape
        got_count = param_count(params)
        match = got_shape == out_shape and got_count == count
        ok &= match
        print(f"Network {name}: {list(in_shape)} -> {list(got_shape)}, {got_count} params "
              f"(catalog: {list(out_shape)}, {count}) {'ok' if match else 'MISMATCH'}")
    return ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    p.add_argument("--train-size", type=int, default=8000, help="generated training images")
    p.add_argument("--test-size", type=int, default=2000, help="generated test images")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-catalog", action="store_true", help="skip printing the catalog networks")
    p.add_argument("--out", type=Path, default=Path("out"),
                   help="folder for classifier_metrics.json (default: out/)")
    args = p.parse_args(argv)

    catalog_ok = True
    if not args.no_catalog:
        catalog_ok = print_catalog()

    x_train, y_train = make_shapes(args.train_size, seed=args.seed)
    x_test, y_test = make_shapes(args.test_size, seed=args.seed + 10_000)
    model = ShapesNet()
    # Jitted: Flax's init run eagerly compiles every op on its own (the same values).
    params = jax.jit(model.init)(jax.random.key(args.seed), x_train[:1])
    print(f"\nShapesNet on generated shapes ({', '.join(SHAPE_NAMES)}): "
          f"{param_count(params)} params, {args.train_size} train / {args.test_size} test images")
    print(tabulate(model, x_train[:1]))

    tx = optax.adam(args.lr)
    opt_state = tx.init(params)

    def loss_fn(params, x, y):
        logits = model.apply(params, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @jax.jit
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    @jax.jit
    def predict(params, x):
        return jnp.argmax(model.apply(params, x), axis=-1)

    def accuracy(params, x, y, chunk=1000):
        hits = sum(int((predict(params, x[i:i + chunk]) == y[i:i + chunk]).sum())
                   for i in range(0, len(x), chunk))
        return hits / len(x)

    rng = np.random.default_rng(args.seed)
    losses = []
    bar = tqdm(range(args.steps), desc="training", unit="step")
    for step in bar:
        idx = rng.integers(0, len(x_train), args.batch_size)
        params, opt_state, loss = train_step(params, opt_state, x_train[idx], y_train[idx])
        losses.append(float(loss))
        if step % 20 == 0 or step == args.steps - 1:
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
    bar.close()

    acc = accuracy(params, x_test, y_test)
    chance = 1 / NUM_CLASSES
    print(f"test accuracy after {args.steps} steps: {acc:.1%} (chance {chance:.0%})")

    args.out.mkdir(parents=True, exist_ok=True)
    metrics = {"steps": args.steps, "test_accuracy": acc, "final_loss": losses[-1] if losses else None,
               "first_loss": losses[0] if losses else None, "catalog_ok": bool(catalog_ok)}
    (args.out / "classifier_metrics.json").write_text(json.dumps(metrics, indent=2))
    return 0 if catalog_ok else 1


if __name__ == "__main__":
    sys.exit(main())
