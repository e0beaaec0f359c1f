"""A 3d U-Net trained on a volume split along its depth over 8 devices, exchanging only halos.

The volume ``[B, C, D, H, W]`` is sharded on D: each device holds ``D / 8`` slices. The
same network trains three ways:

- unsharded, on one device;
- under plain ``jit`` on the sharded volume, written as for one device: XLA's partitioner
  splits the convolutions (zero padding on D), and each jaxpool op is the partitioned
  primitive (:mod:`jaxpool.halo.jit`) that exchanges its own halo;
- as per-device code inside ``jax.shard_map``: the convolutions read one slice of each
  neighbour (``lax.ppermute``, zeros at the volume's ends), and the jaxpool ops take
  ``axis_names=("d", None, None)``.

The jaxpool ops: ``max_pool3d`` (2x2x2 windows stay inside a block: nothing to exchange),
``interpolate`` trilinear x2 (one slice of each neighbour) and ``pad`` replicate on H and W
(unsharded: nothing). The script prints the runs' losses, the largest per-device memory
XLA plans for one training step, and the collectives in each compiled step.

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
from jaxpool.halo.check import collectives  # noqa: E402

D_SHARDED = ("d", None, None)
WIDTHS = (4, 8, 16)


def _depth_halo(x):
    """Per device: one slice of each neighbour before and after the block along D (axis
    2); zeros at the volume's ends."""
    n = lax.axis_size("d")
    below = lax.ppermute(x[:, :, -1:], "d", [(i, i + 1) for i in range(n - 1)])
    above = lax.ppermute(x[:, :, :1], "d", [(i + 1, i) for i in range(n - 1)])
    return jnp.concatenate([below, x, above], axis=2)


def conv(x, w, axis_names):
    """3x3x3 convolution, then ReLU: zero padding on D (by the convolution, or per device
    from the halo), replicate padding on H and W by ``jaxpool.pad`` (unsharded axes)."""
    if axis_names is not None:
        x, depth = _depth_halo(x), (0, 0)
    else:
        depth = (1, 1)
    x = jaxpool.pad(x, (1, 1, 1, 1, 0, 0), mode="replicate",
                    axis_names=None if axis_names is None else (None, None, None))
    y = lax.conv_general_dilated(x, w, (1, 1, 1), (depth, (0, 0), (0, 0)),
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
    """The training step unsharded, under plain jit on the sharded volume, and per device."""
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
    whole = NamedSharding(mesh, P())
    plain = jax.jit(single, in_shardings=(whole, NamedSharding(mesh, volume),
                                          NamedSharding(mesh, P(None, "d"))),
                    out_shardings=(whole, whole))
    return jax.jit(single), plain, jax.jit(sharded)


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
    steps = dict(zip(("unsharded", "plain jit", "shard_map"), make_steps(mesh, args.lr)))
    x_sh = jax.device_put(x, NamedSharding(mesh, P(None, None, "d")))
    y_sh = jax.device_put(y, NamedSharding(mesh, P(None, "d")))
    inputs = {"unsharded": (x, y), "plain jit": (x_sh, y_sh), "shard_map": (x_sh, y_sh)}
    print(f"volume {list(x.shape)} on {n} {devices[0].platform} devices, sharded on D: each "
          f"holds {list(x_sh.addressable_shards[0].data.shape)}")

    compiled = {k: step.lower(params, *inputs[k]).compile() for k, step in steps.items()}
    report: dict = {"devices": n, "shape": list(x.shape)}
    for k, c in compiled.items():
        report[k] = {"collectives": collectives(c.as_text()), "bytes": _peak_bytes(c)}
    print("collectives in one training step: " + "; ".join(
        f"{k} {report[k]['collectives'] or 'none'}" for k in compiled)
        + " (halos of the convolutions, pooling and upsampling, and the sums of the loss and "
          "of the parameters' gradients)")
    if all(report[k]["bytes"] for k in compiled):
        base = report["unsharded"]["bytes"]
        print("memory XLA plans per device for one step: " + ", ".join(
            f"{k} {report[k]['bytes'] / 2**20:.2f} MiB" + (
                f" ({base / report[k]['bytes']:.1f}x less)" if k != "unsharded" else "")
            for k in compiled))

    state = {k: params for k in compiled}
    losses: dict = {k: [] for k in compiled}
    start = time.perf_counter()
    for _ in range(args.steps):
        for k, c in compiled.items():
            # the compiled steps above: calling the jitted functions would compile again
            state[k], loss = c(state[k], *inputs[k])
            losses[k].append(float(loss))
    elapsed = time.perf_counter() - start
    print(f"loss over {args.steps} steps: " + ", ".join(
        f"{k} {v[0]:.4f} -> {v[-1]:.4f}" for k, v in losses.items())
        + f" ({elapsed:.1f} s for all three)")
    for k in ("plain jit", "shard_map"):
        diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in
                   zip(jax.tree.leaves(state["unsharded"]), jax.tree.leaves(state[k])))
        report[k]["param_diff"] = diff
        print(f"max |parameter difference| from unsharded after {args.steps} steps, {k}: "
              f"{diff:.1e} (float32 sums in another order)")
    report["losses"] = losses
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sharded_volume_metrics.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
