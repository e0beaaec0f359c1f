"""A 3d U-Net trained on a volume split along its depth over 8 devices, exchanging only halos.

The volume ``[B, C, D, H, W]`` is sharded on D: each device holds ``D / 8`` slices. The
network is per-device code inside ``jax.shard_map``: its convolutions read one slice of
each neighbour (replicate padding at the volume's ends, exchanged with ``lax.ppermute``
inside), and the jaxpool ops take ``axis_names=("d", None, None)`` and exchange their own
halos: ``max_pool3d`` (2x2x2 windows stay inside a block: nothing), ``interpolate``
trilinear x2 (one slice of each neighbour) and ``pad`` replicate on H and W (unsharded:
nothing). The same network runs unsharded on one device; the script prints both runs'
losses, the largest per-device memory XLA plans for one training step, and the
collectives in each compiled step.

Without accelerators, XLA presents the CPU as 8 devices (set before JAX starts)::

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python examples/sharded_volume.py
"""

from __future__ import annotations

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=8").strip()

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jaxpool  # noqa: E402
from jaxpool.halo_check import collectives  # noqa: E402

D_SHARDED = ("d", None, None)
WIDTHS = (4, 8, 16)


def _depth_halo(x, axis_names):
    """One slice of each neighbour before and after the block along D (axis 2); at the
    volume's ends the edge slice itself (replicate padding)."""
    if axis_names is None:
        return jnp.concatenate([x[:, :, :1], x, x[:, :, -1:]], axis=2)
    n = lax.axis_size("d")
    me = lax.axis_index("d")
    below = lax.ppermute(x[:, :, -1:], "d", [(i, i + 1) for i in range(n - 1)])
    above = lax.ppermute(x[:, :, :1], "d", [(i + 1, i) for i in range(n - 1)])
    below = jnp.where(me == 0, x[:, :, :1], below)
    above = jnp.where(me == n - 1, x[:, :, -1:], above)
    return jnp.concatenate([below, x, above], axis=2)


def conv(x, w, axis_names):
    """3x3x3 convolution with replicate padding, then ReLU: D from the halo, H and W by
    ``jaxpool.pad`` (unsharded axes, so ``axis_names`` None for them)."""
    x = jaxpool.pad(_depth_halo(x, axis_names), (1, 1, 1, 1, 0, 0), mode="replicate")
    y = lax.conv_general_dilated(x, w, (1, 1, 1), "VALID",
                                 dimension_numbers=("NCDHW", "OIDHW", "NCDHW"))
    return jax.nn.relu(y)


def unet(params, x, axis_names=None):
    """Two levels down (max_pool3d 2), two up (trilinear x2), skip connections."""
    skips = []
    for w in params["down"]:
        x = conv(x, w, axis_names)
        skips.append(x)
        x = jaxpool.max_pool3d(x, 2, axis_names=axis_names)
    x = conv(x, params["bottom"], axis_names)
    for w, skip in zip(params["up"], reversed(skips)):
        x = jaxpool.interpolate(x, scale_factor=2, mode="trilinear", axis_names=axis_names)
        x = conv(jnp.concatenate([x, skip], axis=1), w, axis_names)
    return jnp.einsum("bcdhw,c->bdhw", x, params["head"])


def init(key, channels=1):
    keys = iter(jax.random.split(key, 16))

    def w(c_out, c_in):
        return jax.random.normal(next(keys), (c_out, c_in, 3, 3, 3)) * (2 / (27 * c_in)) ** 0.5

    down, c = [], channels
    for width in WIDTHS[:-1]:
        down.append(w(width, c))
        c = width
    bottom = w(WIDTHS[-1], c)
    up, c = [], WIDTHS[-1]
    for width in reversed(WIDTHS[:-1]):
        up.append(w(width, c + width))
        c = width
    return {"down": down, "bottom": bottom, "up": up,
            "head": jax.random.normal(next(keys), (c,)) * 0.1}


def make_volume(key, depth, side):
    """A volume of blurred blobs; the target marks where it is above its mean."""
    noise = jax.random.normal(key, (1, 1, depth, side, side))
    smooth = jaxpool.avg_pool3d(noise, 5, 1, 2)
    return smooth, (smooth[:, 0] > smooth.mean()).astype(jnp.float32)


def loss_fn(params, x, y, axis_names=None):
    logits = unet(params, x, axis_names)
    per_voxel = jnp.logaddexp(0, logits) - y * logits       # sigmoid cross-entropy
    # per device: its slices' share of the mean (summed over the devices by the caller)
    return per_voxel.sum() / (y.size * (lax.axis_size("d") if axis_names is not None else 1))


def make_steps(mesh, lr):
    def update(params, grads):
        return jax.tree.map(lambda p, g: p - lr * g, params, grads)

    def single(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return update(params, grads), loss

    def per_device(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, D_SHARDED)
        # each device's loss and gradient cover its slices: summed over the devices
        grads = jax.tree.map(lambda g: lax.psum(g, "d"), grads)
        return update(params, grads), lax.psum(loss, "d")

    volume = P(None, None, "d")
    sharded = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), volume, P(None, "d")),
                            out_specs=(P(), P()), check_vma=False)
    return jax.jit(single), jax.jit(sharded)


def _peak_bytes(compiled) -> int | None:
    try:
        m = compiled.memory_analysis()
        return int(m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes)
    except Exception:  # not every backend reports it
        return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--depth", type=int, default=32, help="D, split over the devices")
    p.add_argument("--side", type=int, default=16, help="H and W")
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--out", type=Path, default=Path("out"))
    args = p.parse_args(argv)

    devices = jax.devices()
    n = len(devices)
    if args.depth % (4 * n):
        p.error(f"--depth {args.depth} must be a multiple of 4 x {n} devices (two poolings)")
    mesh = Mesh(np.array(devices), ("d",))
    x, y = make_volume(jax.random.key(0), args.depth, args.side)
    params = init(jax.random.key(1))
    single, sharded = make_steps(mesh, args.lr)
    x_sh = jax.device_put(x, NamedSharding(mesh, P(None, None, "d")))
    y_sh = jax.device_put(y, NamedSharding(mesh, P(None, "d")))
    print(f"volume {list(x.shape)} on {n} {devices[0].platform} devices, sharded on D: each "
          f"holds {list(x_sh.addressable_shards[0].data.shape)}")

    c_single = single.lower(params, x, y).compile()
    c_sharded = sharded.lower(params, x_sh, y_sh).compile()
    report = {"devices": n, "shape": list(x.shape),
              "collectives_single": collectives(c_single.as_text()),
              "collectives_sharded": collectives(c_sharded.as_text()),
              "bytes_single": _peak_bytes(c_single), "bytes_sharded": _peak_bytes(c_sharded)}
    print(f"collectives in one training step: unsharded {report['collectives_single'] or 'none'}; "
          f"sharded {report['collectives_sharded']} (halos of the convolutions, pooling and "
          f"upsampling, and the sums of the loss and of the parameters' gradients)")
    if report["bytes_single"] and report["bytes_sharded"]:
        print(f"memory XLA plans per device for one step: unsharded "
              f"{report['bytes_single'] / 2**20:.2f} MiB, sharded "
              f"{report['bytes_sharded'] / 2**20:.2f} MiB "
              f"({report['bytes_single'] / report['bytes_sharded']:.1f}x less)")

    p_single, p_sharded = params, params
    losses_single, losses_sharded = [], []
    start = time.perf_counter()
    for _ in range(args.steps):
        # the compiled steps above: calling the jitted functions would compile them again
        p_single, l_single = c_single(p_single, x, y)
        p_sharded, l_sharded = c_sharded(p_sharded, x_sh, y_sh)
        losses_single.append(float(l_single))
        losses_sharded.append(float(l_sharded))
    diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in
               zip(jax.tree.leaves(p_single), jax.tree.leaves(p_sharded)))
    print(f"loss over {args.steps} steps: unsharded {losses_single[0]:.4f} -> "
          f"{losses_single[-1]:.4f}, sharded {losses_sharded[0]:.4f} -> {losses_sharded[-1]:.4f}"
          f" ({time.perf_counter() - start:.1f} s for both)")
    print(f"max |parameter difference| after {args.steps} steps: {diff:.1e} (float32 sums in "
          f"another order)")
    report.update(losses_single=losses_single, losses_sharded=losses_sharded, param_diff=diff)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sharded_volume_metrics.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
