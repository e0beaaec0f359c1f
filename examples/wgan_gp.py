"""Train a WGAN-GP whose critic pools a ragged feature map with jaxpool.adaptive_avg_pool2d.

The data are 16x16 images of one Gaussian blob each, its centre drawn from a mixture of eight
modes on a ring. The critic's 7x7 feature map is pooled to 4x4 (windows of 2, 3, 3 and 2
rows, overlapping), and the gradient penalty differentiates the critic with respect to its
input and then, for the update, with respect to its parameters: a second derivative through
the pool. Everything runs under `jit`.

The script trains twice with the same seed and checks that the two runs' parameters are
bitwise identical. With --check-torch it rebuilds the critic in torch from the trained
weights and compares the gradient penalty and its gradient with respect to the critic's
parameters (via `parity`). It saves generated-vs-real samples and the loss curves as PNGs.

    python examples/wgan_gp.py                       # two runs, about two minutes on a CPU
    python examples/wgan_gp.py --check-torch
    python examples/wgan_gp.py --steps 50 --out runs/wgan
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from functools import partial
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm import tqdm

import jaxpool

SIZE = 16          # image side
MODES = 8          # blob centres on a ring
RADIUS = 4.5       # ring radius, pixels
JITTER = 0.35      # spread of a blob centre around its mode, pixels
SIGMA = 1.3        # blob width, pixels
LATENT = 16
GP_WEIGHT = 10.0
NORM_EPS = 1e-12   # keeps the gradient norm differentiable where the gradient is zero


def mode_centres() -> np.ndarray:
    """[MODES, 2] (x, y) pixel coordinates of the mixture's modes."""
    ang = 2 * np.pi * np.arange(MODES) / MODES
    return SIZE / 2 + RADIUS * np.stack([np.cos(ang), np.sin(ang)], axis=1)


@partial(jax.jit, static_argnums=1)
def sample_real(key, n: int) -> jax.Array:
    """[n, SIZE, SIZE, 1] images in [-1, 1]: one Gaussian blob each, centre from the mixture."""
    k_mode, k_jit = jax.random.split(key)
    mode = jax.random.randint(k_mode, (n,), 0, MODES)
    ang = 2 * jnp.pi * mode / MODES
    centre = SIZE / 2 + RADIUS * jnp.stack([jnp.cos(ang), jnp.sin(ang)], axis=1)
    centre = centre + JITTER * jax.random.normal(k_jit, (n, 2))
    grid = jnp.arange(SIZE) + 0.5
    d2 = ((grid[None, None, :] - centre[:, 0, None, None]) ** 2
          + (grid[None, :, None] - centre[:, 1, None, None]) ** 2)
    return (2 * jnp.exp(-d2 / (2 * SIGMA**2)) - 1)[..., None]


class Generator(nn.Module):
    """[B, LATENT] -> [B, SIZE, SIZE, 1] in (-1, 1)."""

    @nn.compact
    def __call__(self, z):
        h = nn.relu(nn.Dense(4 * 4 * 32)(z)).reshape(z.shape[0], 4, 4, 32)
        for features in (32, 16):
            h = jax.image.resize(h, (h.shape[0], 2 * h.shape[1], 2 * h.shape[2], h.shape[3]),
                                 "nearest")
            h = nn.relu(nn.Conv(features, (3, 3), padding=1)(h))
        return jnp.tanh(nn.Conv(1, (3, 3), padding=1)(h))


class Critic(nn.Module):
    """[B, 16, 16, 1] -> [B] scores. No normalisation layers, as WGAN-GP requires."""

    @nn.compact
    def __call__(self, x):
        h = nn.leaky_relu(nn.Conv(16, (4, 4), strides=2, padding=1)(x), 0.2)       # [B, 8, 8, 16]
        h = nn.leaky_relu(nn.Conv(32, (2, 2), padding="VALID")(h), 0.2)            # [B, 7, 7, 32]
        # 7 -> 4: windows rows 0-1, 1-3, 3-5, 5-6; ragged (2, 3, 3, 2) and overlapping.
        h = jaxpool.adaptive_avg_pool2d(h, 4, channels_last=True)                  # [B, 4, 4, 32]
        return nn.Dense(1)(h.reshape(h.shape[0], -1))[:, 0]


critic = Critic()
generator = Generator()


def gradient_penalty(d_params, x_hat) -> jax.Array:
    """mean over the batch of (|d critic / d x|_2 - 1)^2 at the points x_hat [B, 16, 16, 1]."""
    # Examples do not interact in the critic, so the gradient of the sum is the per-example
    # input gradient.
    g = jax.grad(lambda x: critic.apply(d_params, x).sum())(x_hat)
    norm = jnp.sqrt(jnp.sum(g**2, axis=(1, 2, 3)) + NORM_EPS)
    return jnp.mean((norm - 1.0) ** 2)


def critic_loss(d_params, real, fake, eps):
    x_hat = eps * real + (1 - eps) * fake
    w_dist = critic.apply(d_params, real).mean() - critic.apply(d_params, fake).mean()
    gp = gradient_penalty(d_params, x_hat)
    return -w_dist + GP_WEIGHT * gp, (w_dist, gp)


def make_train(batch: int, n_critic: int, lr: float):
    """Returns (init, step): init(seed) -> state; step(state) -> (state, metrics), jitted,
    one generator update after n_critic critic updates."""
    # The WGAN-GP paper's Adam betas; a higher rate than its 1e-4 to train in a minute.
    d_tx = optax.adam(lr, b1=0.0, b2=0.9)
    g_tx = optax.adam(lr, b1=0.0, b2=0.9)

    # Jitted, because Flax's init run eagerly compiles every op on its own.
    @jax.jit
    def init_from_key(key):
        k_g, k_d, key = jax.random.split(key, 3)
        g_params = generator.init(k_g, jnp.zeros((1, LATENT)))
        d_params = critic.init(k_d, jnp.zeros((1, SIZE, SIZE, 1)))
        return (g_params, d_params, g_tx.init(g_params), d_tx.init(d_params), key)

    def init(seed: int):
        return init_from_key(jax.random.key(seed))

    def critic_step(carry, key):
        g_params, d_params, d_opt = carry
        k_real, k_z, k_eps = jax.random.split(key, 3)
        real = sample_real(k_real, batch)
        fake = generator.apply(g_params, jax.random.normal(k_z, (batch, LATENT)))
        eps = jax.random.uniform(k_eps, (batch, 1, 1, 1))
        (_, (w_dist, gp)), grads = jax.value_and_grad(critic_loss, has_aux=True)(
            d_params, real, fake, eps)
        updates, d_opt = d_tx.update(grads, d_opt, d_params)
        return (g_params, optax.apply_updates(d_params, updates), d_opt), (w_dist, gp)

    def gen_loss(g_params, d_params, z):
        return -critic.apply(d_params, generator.apply(g_params, z)).mean()

    @jax.jit
    def step(state):
        g_params, d_params, g_opt, d_opt, key = state
        key, k_critic, k_z = jax.random.split(key, 3)
        # Unrolled: XLA:CPU runs convolutions inside a while loop far slower than outside.
        (_, d_params, d_opt), (w_dist, gp) = jax.lax.scan(
            critic_step, (g_params, d_params, d_opt), jax.random.split(k_critic, n_critic),
            unroll=True)
        g_loss, grads = jax.value_and_grad(gen_loss)(
            g_params, d_params, jax.random.normal(k_z, (batch, LATENT)))
        updates, g_opt = g_tx.update(grads, g_opt, g_params)
        g_params = optax.apply_updates(g_params, updates)
        metrics = jnp.stack([w_dist[-1], gp[-1], g_loss])
        return (g_params, d_params, g_opt, d_opt, key), metrics

    return init, step


METRICS = ("w_dist", "gp", "g_loss")


def train(args, desc: str):
    """One training run; returns (g_params, d_params, history dict of numpy arrays)."""
    init, step = make_train(args.batch_size, args.n_critic, args.lr)
    state = init(args.seed)
    history = []
    bar = tqdm(range(args.steps), desc=desc, unit="step")
    for i in bar:
        state, metrics = step(state)
        history.append(metrics)
        if i % 50 == 0 or i == args.steps - 1:
            w_dist, gp, _ = np.asarray(metrics)
            bar.set_postfix(w_dist=f"{w_dist:.3f}", gp=f"{gp:.3f}")
    hist = np.asarray(jnp.stack(history))
    return state[0], state[1], dict(zip(METRICS, hist.T))


def fingerprint(tree) -> tuple[int, int, str]:
    """(arrays, values, sha256 of all bytes) of a parameter tree."""
    leaves = [np.asarray(a) for a in jax.tree_util.tree_leaves(tree)]
    h = hashlib.sha256()
    for a in leaves:
        h.update(a.tobytes())
    return len(leaves), sum(a.size for a in leaves), h.hexdigest()


def bitwise_equal(a, b) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(
        x.dtype == y.dtype and x.shape == y.shape and np.asarray(x).tobytes() == np.asarray(y).tobytes()
        for x, y in zip(la, lb))


def centroids(images: np.ndarray) -> np.ndarray:
    """[n, 2] intensity-weighted (x, y) centres of [n, SIZE, SIZE, 1] images."""
    w = np.clip((images[..., 0] + 1) / 2, 0, None)
    w = w / np.maximum(w.sum(axis=(1, 2), keepdims=True), 1e-9)
    grid = np.arange(SIZE) + 0.5
    return np.stack([(w * grid[None, None, :]).sum((1, 2)), (w * grid[None, :, None]).sum((1, 2))], 1)


def mode_report(images: np.ndarray, tol: float = 1.5) -> tuple[int, float]:
    """(modes hit, fraction of images whose centre lies within tol pixels of a mode)."""
    c = centroids(images)
    d = np.linalg.norm(c[:, None, :] - mode_centres()[None], axis=-1)
    near = d.min(axis=1) <= tol
    return len(np.unique(d.argmin(axis=1)[near])), float(near.mean())


def save_samples(path: Path, real: np.ndarray, fake: np.ndarray) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def tile(imgs, rows=6, cols=6):
        imgs = imgs[: rows * cols, ..., 0].reshape(rows, cols, SIZE, SIZE)
        pad = np.pad(imgs, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-1)
        return pad.transpose(0, 2, 1, 3).reshape(rows * (SIZE + 2), cols * (SIZE + 2))

    fig, axes = plt.subplots(1, 3, figsize=(12, 4.2))
    for ax, imgs, title in ((axes[0], real, "real"), (axes[1], fake, "generated")):
        ax.imshow(tile(imgs), cmap="magma", vmin=-1, vmax=1)
        ax.set_title(f"{title} samples")
        ax.axis("off")
    ax = axes[2]
    cr, cf = centroids(real), centroids(fake)
    ax.scatter(cr[:, 0], cr[:, 1], s=6, alpha=0.4, label="real")
    ax.scatter(cf[:, 0], cf[:, 1], s=6, alpha=0.4, label="generated")
    m = mode_centres()
    ax.scatter(m[:, 0], m[:, 1], marker="x", c="k", s=40, label="modes")
    ax.set_xlim(0, SIZE)
    ax.set_ylim(SIZE, 0)
    ax.set_aspect("equal")
    ax.set_title("blob centres")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def save_losses(path: Path, hist: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    for ax, key, title in zip(axes, ("w_dist", "gp", "g_loss"),
                              ("critic's Wasserstein estimate", "gradient penalty (unweighted)",
                               "generator loss")):
        ax.plot(hist[key], lw=0.6)
        ax.set_title(title)
        ax.set_xlabel("generator step")
    axes[1].set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --- torch cross-check ----------------------------------------------------------------------

def torch_gradient_penalty(names: list[str], leaves, x_hat):
    """The critic and its gradient penalty in torch, from Flax-layout parameters.

    names: '/'-joined paths of the Flax parameters, in the order of `leaves` (torch tensors).
    x_hat: [B, 16, 16, 1] torch tensor, channels-last like the Flax critic.
    """
    import torch
    import torch.nn.functional as F

    p = dict(zip(names, leaves))

    def conv(h, name, stride, padding):
        w = p[f"params/{name}/kernel"].permute(3, 2, 0, 1)  # HWIO -> OIHW
        return F.conv2d(h, w, p[f"params/{name}/bias"], stride=stride, padding=padding)

    def critic_t(x):
        h = x.permute(0, 3, 1, 2)
        h = F.leaky_relu(conv(h, "Conv_0", 2, 1), 0.2)
        h = F.leaky_relu(conv(h, "Conv_1", 1, 0), 0.2)
        h = F.adaptive_avg_pool2d(h, 4)
        h = h.permute(0, 2, 3, 1).reshape(h.shape[0], -1)  # flatten in Flax's (H, W, C) order
        return (h @ p["params/Dense_0/kernel"] + p["params/Dense_0/bias"])[:, 0]

    # The penalty needs an input gradient even when the caller evaluates it under no_grad.
    with torch.enable_grad():
        x = x_hat.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(critic_t(x).sum(), x, create_graph=True)
        norm = torch.sqrt((g**2).sum(dim=(1, 2, 3)) + NORM_EPS)
        return ((norm - 1.0) ** 2).mean()


def check_torch(d_params, x_hat: np.ndarray, seed: int) -> tuple[float, bool]:
    """Compare the gradient penalty and its parameter gradient with torch.

    Returns (worst absolute error over all checks, whether all were within tolerance)."""
    import parity

    flat, treedef = jax.tree_util.tree_flatten_with_path(d_params)
    names = ["/".join(str(getattr(k, "key", k)) for k in path) for path, _ in flat]
    # float64 so that the comparison measures the implementations, not float32 rounding.
    leaves = [np.asarray(v, dtype=np.float64) for _, v in flat]
    x64 = np.asarray(x_hat, dtype=np.float64)

    def jax_gp(*args):
        *ps, x = args
        return gradient_penalty(jax.tree_util.tree_unflatten(treedef, list(ps)), x)

    def torch_gp(*args):
        *ps, x = args
        return torch_gradient_penalty(names, ps, x)

    # Order 0 compares the penalty itself; order 1 its gradient with respect to the critic's
    # parameters (the gradient the critic's update uses), as a VJP and as a JVP.
    report = parity.compare(jax_gp, torch_gp, *leaves, x64, orders=1, seed=seed,
                            argnums=list(range(len(leaves))), label="gradient penalty")
    print(report)
    worst = max(r.abs_err for r in report.rows)
    print(f"torch check: gradient penalty and its gradient w.r.t. the critic's {len(leaves)} "
          f"parameter arrays, float64: worst abs error {worst:.2e} "
          f"({'ok' if report.ok else 'FAILED'})")
    return worst, report.ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=800, help="generator steps per run (default 800)")
    p.add_argument("--n-critic", type=int, default=5, help="critic steps per generator step")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=5e-4, help="Adam learning rate, both networks")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check-torch", action="store_true",
                   help="compare the gradient penalty and its gradient with torch (needs torch)")
    p.add_argument("--out", type=Path, default=Path("out"),
                   help="folder for the PNGs and wgan_gp_metrics.json (default: out/)")
    args = p.parse_args(argv)
    if args.steps < 1 or args.n_critic < 1:
        p.error("--steps and --n-critic must be >= 1")

    g1, d1, hist = train(args, "run 1")
    # Drop compiled code so that the second run is compiled afresh, not just replayed.
    jax.clear_caches()
    g2, d2, _ = train(args, "run 2")
    same = bitwise_equal((g1, d1), (g2, d2))
    n_arrays, n_values, digest = fingerprint((g1, d1))
    _, _, digest2 = fingerprint((g2, d2))
    print(f"determinism: 2 runs x {args.steps} steps, seed {args.seed}: {n_arrays} parameter "
          f"arrays ({n_values} values) {'bitwise identical' if same else 'DIFFER'}")
    print(f"  run 1 sha256 {digest[:16]}\n  run 2 sha256 {digest2[:16]}")

    key = jax.random.key(args.seed + 1)
    k_real, k_z, k_eps = jax.random.split(key, 3)
    real = np.asarray(sample_real(k_real, 1000))
    fake = np.asarray(jax.jit(generator.apply)(g1, jax.random.normal(k_z, (1000, LATENT))))
    modes, near = mode_report(fake)
    _, near_real = mode_report(real)
    print(f"generated samples: {modes}/{MODES} modes hit, {near:.0%} of blobs within 1.5 px of "
          f"a mode (real data: {near_real:.0%})")

    args.out.mkdir(parents=True, exist_ok=True)
    save_samples(args.out / "wgan_gp_samples.png", real, fake)
    save_losses(args.out / "wgan_gp_losses.png", hist)
    print(f"saved {args.out / 'wgan_gp_samples.png'} and {args.out / 'wgan_gp_losses.png'}")

    worst, torch_ok = None, None
    if args.check_torch:
        eps = np.asarray(jax.random.uniform(k_eps, (8, 1, 1, 1)))
        x_hat = eps * real[:8] + (1 - eps) * fake[:8]
        worst, torch_ok = check_torch(d1, x_hat, args.seed)

    metrics = {"steps": args.steps, "seed": args.seed, "bitwise_identical": same,
               "sha256": digest, "modes_hit": modes, "near_mode_fraction": near,
               "final_w_dist": float(hist["w_dist"][-1]), "torch_worst_abs_err": worst,
               "torch_ok": torch_ok}
    (args.out / "wgan_gp_metrics.json").write_text(json.dumps(metrics, indent=2))
    return 0 if same and torch_ok is not False else 1


if __name__ == "__main__":
    sys.exit(main())
