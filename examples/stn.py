"""Train a spatial transformer network whose warp is jaxpool.affine_grid + jaxpool.grid_sample.

The data are 32x32 images of digits drawn from a 5x7 bitmap font, each rotated by up to 45
degrees, scaled and moved about the canvas, on a noisy background. A localisation net
predicts an affine map `theta` [N, 2, 3] (initialised to the identity), `affine_grid` and
`grid_sample` warp the image to a 20x20 view, and a small classifier reads the view. The loss
adds an R1-style penalty: the squared gradient of the classifier's true-class logit with
respect to the input image. That gradient passes through the sampler, so the training step
differentiates grid_sample twice (in the image and in the grid), under `jit`.

The script shows that the loss falls, that the training step as traced for a GPU holds no
scatter (grid_sample reads with gathers; jaxpool adds their transposes back with sorted sums;
on the CPU it takes XLA's scatter-add, which XLA:CPU runs in one fixed order), and
that the training step, double backward included, gives the same bits when run twice. With
--check-torch it compares the warp and its derivatives with torch's F.affine_grid and
F.grid_sample on the trained network's thetas, in float64 (via `parity`).

    python examples/stn.py                        # about a minute on a laptop CPU
    python examples/stn.py --check-torch
    python examples/stn.py --steps 20 --batch-size 16 --train-size 256 --test-size 64
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm import tqdm

import jaxpool

SIZE = 32         # input side
VIEW = 20         # side of the warped view the classifier reads
NUM_CLASSES = 10
R1_WEIGHT = 0.1

# A 5x7 bitmap font: per digit, seven rows of five cells, top to bottom.
FONT = {
    0: (".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."),
    1: ("..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."),
    2: (".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"),
    3: ("#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."),
    4: ("...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."),
    5: ("#####", "#....", "####.", "....#", "....#", "#...#", ".###."),
    6: ("..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."),
    7: ("#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."),
    8: (".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."),
    9: (".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."),
}


def glyphs() -> np.ndarray:
    """[10, 7, 5] float64 bitmaps of the digits."""
    return np.array([[[c == "#" for c in row] for row in FONT[d]] for d in range(NUM_CLASSES)],
                    dtype=np.float64)


def make_digits(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` distorted digits: images [n, SIZE, SIZE, 1] float32 (channels-last), labels [n].

    Each digit is rotated by up to 45 degrees, scaled by 0.8-1.25 (a font cell of about 2 px)
    and its centre moved up to 6 px from the canvas's; the bitmap is read bilinearly.
    Deterministic in `seed`; nothing is downloaded."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_CLASSES, n).astype(np.int32)
    angle = rng.uniform(-np.pi / 4, np.pi / 4, n)
    cell = 2.0 * rng.uniform(0.8, 1.25, n)
    centre = SIZE / 2 + rng.uniform(-6, 6, (n, 2))
    pix = np.arange(SIZE) + 0.5
    dx = pix[None, None, :] - centre[:, 0, None, None]
    dy = pix[None, :, None] - centre[:, 1, None, None]
    cos, sin = np.cos(angle)[:, None, None], np.sin(angle)[:, None, None]
    # The inverse rotation takes a canvas pixel to the glyph's frame; cell units from there.
    u = (cos * dx + sin * dy) / cell[:, None, None] + 2.5   # glyph column, 0..5
    v = (-sin * dx + cos * dy) / cell[:, None, None] + 3.5  # glyph row, 0..7
    # Bilinear read of the bitmap padded by one zero cell all round, at cell centres.
    padded = np.pad(glyphs(), ((0, 0), (1, 1), (1, 1)))[labels]          # [n, 9, 7]
    cu, cv = np.clip(u + 0.5, 0, 6), np.clip(v + 0.5, 0, 8)
    u0, v0 = np.minimum(np.floor(cu), 5).astype(int), np.minimum(np.floor(cv), 7).astype(int)
    fu, fv = cu - u0, cv - v0
    idx = np.arange(n)[:, None, None]

    def at(r, c):
        return padded[idx, r, c]

    ink = ((1 - fv) * ((1 - fu) * at(v0, u0) + fu * at(v0, u0 + 1))
           + fv * ((1 - fu) * at(v0 + 1, u0) + fu * at(v0 + 1, u0 + 1)))
    img = ink + rng.normal(0.0, 0.1, ink.shape)
    return img[..., None].astype(np.float32), labels


def identity_bias(key, shape, dtype=jnp.float32):
    del key
    return jnp.broadcast_to(jnp.asarray([1.0, 0.0, 0.0, 0.0, 1.0, 0.0], dtype), shape)


class Localiser(nn.Module):
    """[N, SIZE, SIZE, 1] -> theta [N, 2, 3], the identity until trained."""

    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Conv(8, (5, 5), strides=2, padding=2)(x))        # [N, 16, 16, 8]
        h = nn.relu(nn.Conv(16, (3, 3), strides=2, padding=1)(h))       # [N, 8, 8, 16]
        h = jaxpool.adaptive_avg_pool2d(h, 4, channels_last=True)        # [N, 4, 4, 16]
        h = nn.relu(nn.Dense(32)(h.reshape(h.shape[0], -1)))
        theta = nn.Dense(6, kernel_init=nn.initializers.zeros, bias_init=identity_bias)(h)
        return theta.reshape(-1, 2, 3)


class Classifier(nn.Module):
    """[N, VIEW, VIEW, 1] -> [N, 10] logits."""

    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Conv(16, (3, 3), padding=1)(x))
        h = jaxpool.avg_pool2d(h, 2, channels_last=True)                 # [N, 10, 10, 16]
        h = nn.relu(nn.Conv(32, (3, 3), padding=1)(h))
        h = jaxpool.avg_pool2d(h, 2, channels_last=True)                 # [N, 5, 5, 32]
        return nn.Dense(NUM_CLASSES)(h.reshape(h.shape[0], -1))


def warp(x, theta):
    """The spatial transformer's resampling: x [N, H, W, C] -> [N, VIEW, VIEW, C]."""
    grid = jaxpool.affine_grid(theta, (x.shape[0], x.shape[-1], VIEW, VIEW), align_corners=False)
    return jaxpool.grid_sample(x, grid, "bilinear", "zeros", align_corners=False,
                               channels_last=True)


class STN(nn.Module):
    """[N, SIZE, SIZE, 1] -> (logits [N, 10], theta [N, 2, 3], view [N, VIEW, VIEW, 1])."""

    @nn.compact
    def __call__(self, x):
        theta = Localiser()(x)
        view = warp(x, theta)
        return Classifier()(view), theta, view


model = STN()


def r1_penalty(params, x, onehot):
    """Mean over the batch of |d (true-class logit) / d image|^2."""
    # Examples do not interact, so the gradient of the sum is each example's own.
    g = jax.grad(lambda x: jnp.sum(model.apply(params, x)[0] * onehot))(x)
    return jnp.mean(jnp.sum(g**2, axis=(1, 2, 3)))


def loss_fn(params, x, labels):
    # One-hot rather than integer labels: picking by index would be a gather whose
    # gradient is a scatter.
    onehot = jax.nn.one_hot(labels, NUM_CLASSES, dtype=x.dtype)
    logits = model.apply(params, x)[0]
    ce = optax.softmax_cross_entropy(logits, onehot).mean()
    r1 = r1_penalty(params, x, onehot)
    return ce + R1_WEIGHT * r1, (ce, r1)


def make_step(lr: float):
    tx = optax.adam(lr)

    @jax.jit
    def init(key):
        params = model.init(key, jnp.zeros((1, SIZE, SIZE, 1)))
        return params, tx.init(params)

    @jax.jit
    def step(params, opt, x, labels):
        (loss, (ce, r1)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, labels)
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt, jnp.stack([loss, ce, r1])

    return init, step


def lowered_ops(lowered) -> set[str]:
    """The StableHLO (and CHLO/MHLO) op names in a lowered program."""
    return set(re.findall(r"\b(?:stablehlo|chlo|mhlo)\.([a-z_]+)", lowered.as_text()))


def sha(tree) -> str:
    h = hashlib.sha256()
    for a in jax.tree_util.tree_leaves(tree):
        h.update(np.asarray(a).tobytes())
    return h.hexdigest()


@jax.jit
def evaluate(params, x, labels):
    """(accuracy, theta, views) on a test set; one program for every evaluation."""
    logits, theta, views = model.apply(params, x)
    return jnp.mean(jnp.argmax(logits, axis=-1) == labels), theta, views


def save_views(path: Path, x: np.ndarray, views: np.ndarray, labels: np.ndarray) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = min(8, len(x))
    fig, axes = plt.subplots(2, k, figsize=(1.5 * k, 3.3), squeeze=False)
    for i in range(k):
        axes[0, i].imshow(x[i, ..., 0], cmap="gray", vmin=0, vmax=1)
        axes[0, i].set_title(str(labels[i]))
        axes[1, i].imshow(views[i, ..., 0], cmap="gray", vmin=0, vmax=1)
        for ax in axes[:, i]:
            ax.axis("off")
    axes[0, 0].text(-4, SIZE / 2, "input", rotation=90, va="center", ha="right")
    axes[1, 0].text(-3, VIEW / 2, "warped", rotation=90, va="center", ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --- torch cross-check ----------------------------------------------------------------------

def check_torch(x: np.ndarray, theta: np.ndarray, seed: int) -> tuple[float, bool]:
    """The warp (affine_grid, then grid_sample) against torch's on the same float64 inputs:
    values, and derivatives in the image and theta up to the second order.

    Returns (worst absolute error, whether every check was within tolerance)."""
    import torch.nn.functional as F

    import parity

    x_nchw = np.ascontiguousarray(np.asarray(x, np.float64).transpose(0, 3, 1, 2))
    size = (x_nchw.shape[0], x_nchw.shape[1], VIEW, VIEW)

    def jax_warp(x, theta):
        grid = jaxpool.affine_grid(theta, size, align_corners=False)
        return jaxpool.grid_sample(x, grid, "bilinear", "zeros", align_corners=False)

    def torch_warp(x, theta):
        grid = F.affine_grid(theta, size, align_corners=False)
        return F.grid_sample(x, grid, "bilinear", "zeros", align_corners=False)

    report = parity.compare(jax_warp, torch_warp, x_nchw, np.asarray(theta, np.float64),
                            orders=2, seed=seed, label="affine_grid + grid_sample")
    print(report)
    worst = max(r.abs_err for r in report.rows)
    print(f"torch check: the warp, its gradients in the image and theta and their second "
          f"derivatives, float64: worst abs error {worst:.2e} "
          f"({'ok' if report.ok else 'FAILED'})")
    return worst, report.ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=600, help="training steps (default 600)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--train-size", type=int, default=8192, help="generated training images")
    p.add_argument("--test-size", type=int, default=1024, help="generated test images")
    p.add_argument("--lr", type=float, default=2e-3, help="Adam learning rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check-torch", action="store_true",
                   help="compare the warp and its derivatives with torch's (needs torch)")
    p.add_argument("--out", type=Path, default=Path("out"),
                   help="folder for stn_views.png and stn_metrics.json (default: out/)")
    args = p.parse_args(argv)
    if min(args.steps, args.batch_size, args.train_size, args.test_size) < 1:
        p.error("--steps, --batch-size, --train-size and --test-size must be >= 1")

    x_train, y_train = make_digits(args.train_size, args.seed)
    x_test, y_test = make_digits(args.test_size, args.seed + 1)
    init, step = make_step(args.lr)
    params, opt = init(jax.random.key(args.seed))
    batch = min(args.batch_size, args.train_size)
    order = np.random.default_rng(args.seed).permutation

    # The compiled training step: a second derivative through grid_sample.
    traced = step
    step = traced.lower(params, opt, x_train[:batch], y_train[:batch]).compile()
    # The same step as a GPU or TPU traces it (jaxpool's table for those backends) holds no
    # scatter. (On the CPU, jaxpool adds grid_sample's reads back with XLA's scatter-add,
    # which XLA:CPU runs in one thread, in a fixed order: deterministic, and faster there.)
    jax.clear_caches()  # the table is read when a program is traced
    with jaxpool.strategy_table.use_backend("gpu"):
        ops = lowered_ops(traced.lower(params, opt, x_train[:batch], y_train[:batch]))
    scatters = sorted(op for op in ops if "scatter" in op)
    print(f"training step (value_and_grad of cross-entropy + R1 penalty, Adam update) as "
          f"traced for a GPU: scatter ops: {', '.join(scatters) or 'none'}; gather ops: "
          f"{'yes' if 'gather' in ops else 'none'} (grid_sample's reads)")

    acc_before = float(evaluate(params, x_test, y_test)[0])
    t0 = time.perf_counter()
    history, perm, at = [], order(args.train_size), 0
    bar = tqdm(range(args.steps), desc="train", unit="step")
    for i in bar:
        if at + batch > args.train_size:
            perm, at = order(args.train_size), 0
        idx = perm[at:at + batch]
        at += batch
        params, opt, m = step(params, opt, x_train[idx], y_train[idx])
        history.append(m)
        if i % 25 == 0 or i == args.steps - 1:
            loss, ce, r1 = np.asarray(m)
            bar.set_postfix(loss=f"{loss:.3f}", ce=f"{ce:.3f}", r1=f"{r1:.3f}")
    hist = np.asarray(jnp.stack(history))
    train_s = time.perf_counter() - t0
    acc_after, theta, views = evaluate(params, x_test, y_test)
    acc_after = float(acc_after)
    k = max(1, min(20, args.steps // 4))
    loss_first, loss_last = float(hist[:k, 0].mean()), float(hist[-k:, 0].mean())
    print(f"loss (cross-entropy + {R1_WEIGHT} x R1), mean of the first and last {k} steps: "
          f"{loss_first:.3f} -> {loss_last:.3f}; test accuracy {acc_before:.1%} -> "
          f"{acc_after:.1%} (chance 10%) ({train_s:.0f} s)")

    # The training step (its gradient differentiates grid_sample twice) run twice more on
    # the same parameters and batch: the same bits both times.
    xb, yb = x_train[:batch], y_train[:batch]
    first, second = (step(params, opt, xb, yb) for _ in range(2))
    same = sha(first) == sha(second)
    print(f"training step with its double backward, run twice on the same batch: "
          f"{'bitwise identical' if same else 'DIFFER'} (sha256 of the new parameters, "
          f"optimiser state and losses: {sha(first)[:16]}, {sha(second)[:16]})")

    args.out.mkdir(parents=True, exist_ok=True)
    save_views(args.out / "stn_views.png", x_test[:8], np.asarray(views[:8]), y_test[:8])
    print(f"saved {args.out / 'stn_views.png'}")

    worst, torch_ok = None, None
    if args.check_torch:
        worst, torch_ok = check_torch(x_test[:2], np.asarray(theta[:2]), args.seed)

    metrics = {"steps": args.steps, "seed": args.seed, "losses": hist[:, 0].tolist(),
               "loss_first": loss_first, "loss_last": loss_last,
               "loss_fell": bool(loss_last < loss_first),
               "test_accuracy_before": acc_before, "test_accuracy": acc_after,
               "step_scatter_ops": scatters, "step_has_gather": "gather" in ops,
               "double_backward_bitwise_identical": same, "step_sha256": sha(first),
               "torch_worst_abs_err": worst, "torch_ok": torch_ok}
    (args.out / "stn_metrics.json").write_text(json.dumps(metrics, indent=2))
    ok = same and not scatters and torch_ok is not False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
