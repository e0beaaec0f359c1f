"""Data-parallel training with jaxpool layers, and proof that the pools need no communication.

Part 1 trains `ShapesNet` under `jax.jit` with each batch sharded over a device mesh on the
batch axis (parameters replicated) and checks it against the same steps on one device. XLA's
partitioner (GSPMD) does the splitting: nothing here is specific to jaxpool.

Part 2 compiles the forward and the backward (VJP) of every jaxpool op on inputs sharded on
the batch axis and on the channel axis, in both layouts, and searches the compiled programs
for collectives (all-gather, all-reduce, collective-permute, all-to-all, reduce-scatter).
Pooling mixes values only within one (example, channel) plane, so there must be none. Two
control cases that do need communication show that the search finds collectives when they
are there. With --joint each forward and its backward are compiled as one program (half the
compiles; a collective in either direction still shows, in one column for both).

Without accelerators, XLA can present the CPU as several devices; the script asks for 8 if
XLA_FLAGS does not already set a count:

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python examples/sharded.py
    python examples/sharded.py --steps 20 --no-collective-check
"""

from __future__ import annotations

import os

# Must happen before JAX is imported: the host platform's device count is fixed at start-up.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=8").strip()

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from tqdm import tqdm  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import ShapesNet, make_shapes  # noqa: E402

import jaxpool  # noqa: E402

COLLECTIVE = re.compile(
    r"\b(all-gather|all-reduce|collective-permute|all-to-all|ragged-all-to-all|reduce-scatter|"
    r"collective-broadcast)(?:-start)?\(")


def collectives(compiled_text: str) -> list[str]:
    """Sorted names of the collective operations in a compiled HLO module's text."""
    return sorted(set(COLLECTIVE.findall(compiled_text)))


# ---------------------------------------------------------------------------- part 1


def train_sharded(mesh: Mesh, steps: int, batch: int, seed: int) -> dict:
    """Train with batch-sharded data and on one device; return how far the two runs differ."""
    model = ShapesNet()
    tx = optax.adam(3e-3)
    x_all, y_all = make_shapes(steps * batch, seed=seed)

    def loss_fn(params, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply(params, x), y).mean()

    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    data = NamedSharding(mesh, P("data"))      # [B, H, W, C]: split B over the mesh
    replicated = NamedSharding(mesh, P())
    # Jitted: Flax's init run eagerly compiles every op on its own (the same values).
    params0 = jax.jit(model.init)(jax.random.key(seed), x_all[:1])
    opt0 = tx.init(params0)

    sharded_step = jax.jit(step, in_shardings=(replicated, replicated, data, data),
                           out_shardings=(replicated, replicated, replicated))
    single_step = jax.jit(step)

    x0 = jax.device_put(x_all[:batch], data)
    text = sharded_step.lower(params0, opt0, x0, jax.device_put(y_all[:batch], data)).compile().as_text()
    print(f"input batch {list(x0.shape)} sharded as {x0.sharding.spec} over {mesh.devices.size} "
          f"devices; each holds {list(x0.addressable_shards[0].data.shape)}")
    print(f"collectives in the compiled training step: {', '.join(collectives(text)) or 'none'} "
          "(summing the replicas' parameter gradients)")

    def max_diff(a, b):
        return max(float(jnp.max(jnp.abs(jnp.asarray(u) - jnp.asarray(v))))
                   for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))

    p_sh, o_sh = jax.device_put(params0, replicated), jax.device_put(opt0, replicated)
    p_1, o_1 = params0, opt0
    losses_sh, losses_1 = [], []
    first_diff = None
    for i in tqdm(range(steps), desc="training (sharded and single-device)", unit="step"):
        x, y = x_all[i * batch:(i + 1) * batch], y_all[i * batch:(i + 1) * batch]
        p_sh, o_sh, l_sh = sharded_step(p_sh, o_sh, jax.device_put(x, data), jax.device_put(y, data))
        p_1, o_1, l_1 = single_step(p_1, o_1, x, y)
        losses_sh.append(float(l_sh))
        losses_1.append(float(l_1))
        if i == 0:
            first_diff = max_diff(p_sh, p_1)
    last_diff = max_diff(p_sh, p_1)
    print(f"loss {losses_sh[0]:.3f} -> {losses_sh[-1]:.3f} over {steps} steps "
          f"(single device: {losses_1[0]:.3f} -> {losses_1[-1]:.3f})")
    print(f"sharded vs single device, max |parameter difference|: {first_diff:.1e} after one step, "
          f"{last_diff:.1e} after {steps}")
    print("  (float32 sums in a different order; Adam's normalised steps let such differences grow)")
    return {"steps": steps, "first_loss": losses_sh[0], "last_loss": losses_sh[-1],
            "last_loss_single_device": losses_1[-1], "first_step_param_diff": first_diff,
            "max_loss_diff": max(abs(a - b) for a, b in zip(losses_sh, losses_1)),
            "last_param_diff": last_diff}


# ---------------------------------------------------------------------------- part 2

# (label, function, channels-first input shape, keyword arguments). Batch and channels are 16
# so that both split evenly over 8 devices.
CASES = (
    ("avg_pool1d k3 s2 p1", jaxpool.avg_pool1d, (16, 16, 20), dict(kernel_size=3, stride=2, padding=1)),
    ("avg_pool2d k3 s2 p1 ceil, no pad count", jaxpool.avg_pool2d, (16, 16, 12, 12),
     dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    ("avg_pool3d k2", jaxpool.avg_pool3d, (16, 16, 6, 6, 6), dict(kernel_size=2)),
    ("adaptive_avg_pool1d 10->4 (ragged)", jaxpool.adaptive_avg_pool1d, (16, 16, 10), dict(output_size=4)),
    ("adaptive_avg_pool2d 7->4 (ragged)", jaxpool.adaptive_avg_pool2d, (16, 16, 7, 7), dict(output_size=4)),
    ("adaptive_avg_pool2d 8->4 (even)", jaxpool.adaptive_avg_pool2d, (16, 16, 8, 8), dict(output_size=4)),
    ("adaptive_avg_pool2d 3->5 (upsample)", jaxpool.adaptive_avg_pool2d, (16, 16, 3, 3), dict(output_size=5)),
    ("adaptive_avg_pool3d 5,6,7->3,4,7", jaxpool.adaptive_avg_pool3d, (16, 16, 5, 6, 7),
     dict(output_size=(3, 4, None))),
    ("global_avg_pool", jaxpool.global_avg_pool, (16, 16, 7, 7), {}),
    ("max_pool1d k3 s2 p1", jaxpool.max_pool1d, (16, 16, 20), dict(kernel_size=3, stride=2, padding=1)),
    ("max_pool2d k3 s2 p1 (ResNet stem)", jaxpool.max_pool2d, (16, 16, 12, 12),
     dict(kernel_size=3, stride=2, padding=1)),
    ("max_pool3d k2 dilated ceil", jaxpool.max_pool3d, (16, 16, 7, 7, 7),
     dict(kernel_size=2, stride=2, dilation=2, ceil_mode=True)),
    ("adaptive_max_pool1d 10->4 (ragged)", jaxpool.adaptive_max_pool1d, (16, 16, 10), dict(output_size=4)),
    ("adaptive_max_pool2d 7->4 (ragged)", jaxpool.adaptive_max_pool2d, (16, 16, 7, 7), dict(output_size=4)),
    ("adaptive_max_pool3d 5,6,40->3,1,2 (long windows)", jaxpool.adaptive_max_pool3d,
     (16, 16, 5, 6, 40), dict(output_size=(3, 1, 2))),
    ("global_max_pool", jaxpool.global_max_pool, (16, 16, 7, 7), {}),
    ("lp_pool1d p2 k3 s2", jaxpool.lp_pool1d, (16, 16, 20), dict(norm_type=2, kernel_size=3, stride=2)),
    ("lp_pool2d p3 k2", jaxpool.lp_pool2d, (16, 16, 12, 12), dict(norm_type=3, kernel_size=2)),
    ("lp_pool3d p1.5 k2 ceil", jaxpool.lp_pool3d, (16, 16, 5, 5, 5),
     dict(norm_type=1.5, kernel_size=2, ceil_mode=True)),
    ("interpolate bilinear x2", jaxpool.interpolate, (16, 16, 6, 6),
     dict(scale_factor=2, mode="bilinear")),
    ("interpolate bicubic 5 -> 7, align_corners", jaxpool.interpolate, (16, 16, 5, 5),
     dict(size=7, mode="bicubic", align_corners=True)),
    ("interpolate trilinear 4,5,6 -> 3,7,6", jaxpool.interpolate, (16, 16, 4, 5, 6),
     dict(size=(3, 7, 6), mode="trilinear")),
    ("interpolate nearest 1d x3", jaxpool.interpolate, (16, 16, 7), dict(scale_factor=3)),
    ("interpolate bilinear antialias 12 -> 5", jaxpool.interpolate, (16, 16, 12, 12),
     dict(size=5, mode="bilinear", antialias=True)),
    ("interpolate area 7 -> 3", jaxpool.interpolate, (16, 16, 7, 7), dict(size=3, mode="area")),
    ("upsample_nearest x2", jaxpool.upsample_nearest, (16, 16, 5, 5), dict(scale_factor=2)),
    ("upsample_bilinear 5 -> 8", jaxpool.upsample_bilinear, (16, 16, 5, 5), dict(size=8)),
    # Each output channel of a shuffle reads r*r consecutive input channels: 64 = 8 shards of
    # 8 channels keeps every group on one device.
    ("pixel_shuffle r2", jaxpool.pixel_shuffle, (16, 64, 4, 4), dict(upscale_factor=2)),
    ("pixel_unshuffle r2", jaxpool.pixel_unshuffle, (16, 16, 6, 6), dict(downscale_factor=2)),
    ("pad reflect (1, 2, 3, 0)", jaxpool.pad, (16, 16, 6, 6), dict(pad=(1, 2, 3, 0), mode="reflect")),
    ("pad replicate 3d", jaxpool.pad, (16, 16, 3, 4, 5), dict(pad=(1, 1, 2, 0, 0, 3), mode="replicate")),
    ("pad circular 1d", jaxpool.pad, (16, 16, 6), dict(pad=(2, 3), mode="circular")),
    ("pad constant, negative crops", jaxpool.pad, (16, 16, 6, 6), dict(pad=(-1, 2, 1, -2), value=1.5)),
)


def _unpool(ndim: int, kernel: int, stride: int):
    """max_pool with indices, then max_unpool: SegNet's encoder-decoder pair."""
    pool = {1: jaxpool.max_pool1d, 2: jaxpool.max_pool2d, 3: jaxpool.max_pool3d}[ndim]
    unpool = {1: jaxpool.max_unpool1d, 2: jaxpool.max_unpool2d, 3: jaxpool.max_unpool3d}[ndim]

    def fn(x, channels_last=False):
        values, indices = pool(x, kernel, stride, return_indices=True, channels_last=channels_last)
        return unpool(values, indices, kernel, stride, channels_last=channels_last)

    fn.__name__ = unpool.__name__
    return fn


CASES += (
    ("max_unpool1d k3 s2 (overlapping)", _unpool(1, 3, 2), (16, 16, 11), {}),
    ("max_unpool2d k2 (SegNet)", _unpool(2, 2, 2), (16, 16, 8, 8), {}),
    ("max_unpool3d k2", _unpool(3, 2, 2), (16, 16, 4, 4, 4), {}),
)


def _spec(ndim: int, axis: int) -> P:
    return P(*[("data" if i == axis else None) for i in range(ndim)])


def _channel_axis(ndim: int, channels_last: bool) -> int:
    return ndim - 1 if channels_last else 1


def compile_pair(mesh, fn, x, in_axis: int, out_axis_of, joint: bool = False):
    """Compiled texts of fn's forward and VJP with x sharded on in_axis, outputs sharded to match:
    two programs, or with ``joint`` one program returning both (one text)."""
    x_sh = NamedSharding(mesh, _spec(x.ndim, in_axis))
    y = jax.eval_shape(fn, x)
    y_sh = NamedSharding(mesh, _spec(y.ndim, out_axis_of(y.ndim)))
    ct = jax.ShapeDtypeStruct(y.shape, y.dtype)  # shapes only: compiling needs no values

    def bwd(x, ct):
        return jax.vjp(fn, x)[1](ct)[0]

    if joint:
        both = jax.jit(lambda x, ct: (fn(x), bwd(x, ct)), in_shardings=(x_sh, y_sh),
                       out_shardings=(y_sh, x_sh))
        return (both.lower(x, ct).compile().as_text(),)
    fwd = jax.jit(fn, in_shardings=x_sh, out_shardings=y_sh)
    bwd = jax.jit(bwd, in_shardings=(x_sh, y_sh), out_shardings=x_sh)
    return (fwd.lower(x).compile().as_text(), bwd.lower(x, ct).compile().as_text())


# The programs' names in the result: per direction, or one program holding both.
DIRECTIONS = {False: ("forward", "backward"), True: ("forward+backward",)}


# (channels_last, sharded axis): every pair, or with ``spread`` two that differ in both,
# alternating from case to case.
PAIRS = ((False, "batch"), (True, "channel"), (False, "channel"), (True, "batch"))


def collective_check(mesh, joint: bool = False, spread: bool = False) -> dict:
    """Collectives in every (op, layout, sharded axis, direction), plus the controls; with
    ``joint``, forward and backward are compiled as one program (half the compiles: a
    collective in either shows, without saying which direction needs it); with ``spread``,
    each case in two of the four (layout, sharded axis) pairs that differ in both, the other
    two for the next case (half the programs: every op meets both layouts and both axes)."""
    directions = DIRECTIONS[joint]
    rows = []
    jobs = [(c, cl, ax) for i, c in enumerate(CASES)
            for cl, ax in (PAIRS[2 * (i % 2):2 * (i % 2) + 2] if spread else PAIRS)]
    for (label, op, shape, kw), channels_last, axis_name in tqdm(
            jobs, desc=f"compiling sharded {' and '.join(directions)}", unit="case"):
        if channels_last:
            shape = (shape[0], *shape[2:], shape[1])
        x = jax.ShapeDtypeStruct(shape, jnp.float32)
        fn = (lambda op, kw, cl: lambda v: op(v, **kw, channels_last=cl))(op, kw, channels_last)
        if axis_name == "batch":
            in_axis, out_axis_of = 0, (lambda n: 0)
        else:
            in_axis = _channel_axis(x.ndim, channels_last)
            out_axis_of = (lambda cl: lambda n: _channel_axis(n, cl))(channels_last)
            if op in (jaxpool.global_avg_pool, jaxpool.global_max_pool):  # [B, C] either way
                out_axis_of = lambda n: 1  # noqa: E731
        texts = compile_pair(mesh, fn, x, in_axis, out_axis_of, joint)
        rows.append({"op": op.__name__, "case": label,
                     "layout": "channels_last" if channels_last else "channels_first",
                     "sharded": axis_name,
                     **{d: collectives(t) for d, t in zip(directions, texts)}})

    # Controls: ops that do need communication, so the search must find it.
    x = jax.ShapeDtypeStruct((16, 16, 16, 16), jnp.float32)
    sum_fwd = compile_pair(mesh, lambda v: v.sum(axis=0), x, 0, lambda n: 0)[0]
    spatial = compile_pair(
        mesh, lambda v: jaxpool.avg_pool2d(v, 3, stride=1, padding=1), x, 2, lambda n: 2, joint)
    controls = {"sum over the sharded batch axis": collectives(sum_fwd)}
    if joint:
        controls["avg_pool2d k3 s1 p1, sharded on height (windows cross shards), forward and "
                 "backward in one program"] = collectives(spatial[0])
    else:
        controls["avg_pool2d k3 s1 p1, sharded on height (windows cross shards), forward"] = \
            collectives(spatial[0])
        controls["same, backward"] = collectives(spatial[1])
    return {"devices": int(mesh.devices.size), "directions": list(directions), "rows": rows,
            "controls": controls}


def print_check(result: dict) -> bool:
    from rich.console import Console
    from rich.table import Table

    directions = result["directions"]
    table = Table(title=f"collectives in compiled programs, inputs sharded over {result['devices']} devices")
    for col in ("op", "layout", "sharded axis", *directions):
        table.add_column(col)
    clean = True
    for r in result["rows"]:
        clean &= not any(r[d] for d in directions)
        table.add_row(r["case"], r["layout"].replace("_", "-"), r["sharded"],
                      *(", ".join(r[d]) or "none" for d in directions))
    console = Console(width=120)
    console.print(table)
    n = len(directions) * len(result["rows"])
    found = all(result["controls"].values())
    print(f"{n} compiled programs, {'no collective in any' if clean else 'COLLECTIVES FOUND'}")
    for name, found_here in result["controls"].items():
        print(f"control, {name}: {', '.join(found_here) or 'NONE (the search is broken)'}")
    return clean and found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    p.add_argument("--batch-size", type=int, default=64, help="global batch, split over the mesh")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-train", action="store_true", help="skip part 1 (training)")
    p.add_argument("--no-collective-check", action="store_true", help="skip part 2")
    p.add_argument("--joint", action="store_true",
                   help="part 2: compile each forward and its backward as one program (half "
                        "the compiles; the table then has one column for both)")
    p.add_argument("--spread", action="store_true",
                   help="part 2: each case in two of the four (layout, sharded axis) pairs, "
                        "alternating, so that every op still meets both layouts and both axes "
                        "(half the programs)")
    p.add_argument("--out", type=Path, default=Path("out"),
                   help="folder for sharded_metrics.json (default: out/)")
    args = p.parse_args(argv)

    devices = jax.devices()
    mesh = Mesh(np.array(devices), ("data",))
    print(f"{len(devices)} {devices[0].platform} devices, mesh axis 'data'")
    if len(devices) == 1:
        print("only one device: sharding is trivial here (set XLA_FLAGS as shown in --help)")
    if args.batch_size % len(devices):
        p.error(f"--batch-size {args.batch_size} must be a multiple of the device count {len(devices)}")

    metrics: dict = {"devices": len(devices)}
    ok = True
    if not args.no_train:
        metrics["train"] = train_sharded(mesh, args.steps, args.batch_size, args.seed)
    if not args.no_collective_check:
        result = collective_check(mesh, args.joint, args.spread)
        ok = print_check(result)
        metrics["collective_check"] = result
        metrics["collective_check_ok"] = ok

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sharded_metrics.json").write_text(json.dumps(metrics, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
