"""Check the halo exchange of every op on spatially sharded inputs, on this machine's devices.

For each case, inside ``jax.shard_map`` with ``axis_names`` (and with ``--plain-jit``, under
plain ``jit`` on a sharded input: the partitioned primitive, :mod:`jaxpool.halo.jit`): the
values and the derivatives against the unsharded call, the collectives in the compiled
programs, and whether a derivative's jaxpr holds a scatter or a gather. Needs at least 2
devices; on a CPU, ask XLA for 8 before JAX starts::

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m jaxpool.halo.check
    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m jaxpool.halo.check --plain-jit
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import jaxpool
from jaxpool.halo import jit as halo_jit

COLLECTIVE = re.compile(
    r"\b(all-gather|all-reduce|collective-permute|all-to-all|ragged-all-to-all|reduce-scatter|"
    r"collective-broadcast)(?:-start)?\(")


def collectives(compiled_text: str | None) -> dict[str, int]:
    """How many of each collective a compiled HLO module's text holds."""
    return dict(Counter(COLLECTIVE.findall(compiled_text or "")))


def _unpool(ndim, kernel, stride, padding=0, output_size=None):
    pool = {1: jaxpool.max_pool1d, 2: jaxpool.max_pool2d, 3: jaxpool.max_pool3d}[ndim]
    unpool = {1: jaxpool.max_unpool1d, 2: jaxpool.max_unpool2d, 3: jaxpool.max_unpool3d}[ndim]

    def fn(v, axis_names=None, channels_last=False):
        values, indices = pool(v, kernel, stride, padding, return_indices=True,
                               channels_last=channels_last, axis_names=axis_names)
        return unpool(values, indices, kernel, stride, padding, output_size,
                      channels_last=channels_last, axis_names=axis_names)
    return fn


def _with_indices(v, axis_names=None, channels_last=False):
    # values plus indices: both compared exactly, the gradient flows through the values
    values, indices = jaxpool.max_pool1d(v, 3, 2, 1, return_indices=True,
                                         channels_last=channels_last, axis_names=axis_names)
    return values + indices.astype(values.dtype)


def _op(f, *args, **kw):
    return lambda v, axis_names=None, channels_last=False: f(
        v, *args, **kw, channels_last=channels_last, axis_names=axis_names)


# (label, op name, function, channels-first shape, mesh axis per spatial axis, whole: the
# sharded axes are pooled whole (one reduction, output replicated along them)).
# Sharded extents are 32 or 16 over 8 (or 4 and 2) devices: blocks of 4 or 8 rows.
A, B = "a", "b"
CASES = [
    ("avg_pool2d 3/2/1", "avg_pool2d", _op(jaxpool.avg_pool2d, 3, 2, 1), (2, 3, 32, 6), (A, None)),
    ("avg_pool2d 3/2/1 no-pad-count", "avg_pool2d",
     _op(jaxpool.avg_pool2d, 3, 2, 1, count_include_pad=False), (2, 3, 32, 7), (A, None)),
    ("avg_pool1d 2", "avg_pool1d", _op(jaxpool.avg_pool1d, 2), (2, 3, 32), (A,)),
    ("avg_pool3d 3/1/1 on D", "avg_pool3d", _op(jaxpool.avg_pool3d, 3, 1, 1), (1, 2, 16, 5, 5), (A, None, None)),
    ("max_pool2d 3/2/1", "max_pool2d", _op(jaxpool.max_pool2d, 3, 2, 1), (2, 3, 32, 6), (A, None)),
    ("max_pool2d 3/2/1 on H and W", "max_pool2d", _op(jaxpool.max_pool2d, 3, 2, 1), (2, 3, 16, 8), (A, B)),
    ("max_pool3d 2 dilated", "max_pool3d", _op(jaxpool.max_pool3d, 2, 2, 1, 2), (1, 2, 32, 6, 5), (A, None, None)),
    ("max_pool1d 3/2/1 values + indices", "max_pool1d", _with_indices, (2, 3, 32), (A,)),
    # ceil mode: the last device's last window runs past the input and is clipped there
    ("avg_pool2d 3/2 ceil no-pad-count", "avg_pool2d",
     _op(jaxpool.avg_pool2d, 3, 2, 0, ceil_mode=True, count_include_pad=False), (2, 3, 32, 6), (A, None)),
    ("max_pool3d 3/2 ceil on D", "max_pool3d", _op(jaxpool.max_pool3d, 3, 2, 0, ceil_mode=True),
     (1, 2, 16, 5, 5), (A, None, None)),
    ("lp_pool1d p2 3/2 ceil", "lp_pool1d", _op(jaxpool.lp_pool1d, 2, 3, 2, ceil_mode=True), (2, 3, 32), (A,)),
    ("adaptive_avg_pool2d 32 -> 8", "adaptive_avg_pool2d", _op(jaxpool.adaptive_avg_pool2d, (8, 3)), (2, 3, 32, 6), (A, None)),
    ("adaptive_avg_pool2d 32 -> 24 (ragged)", "adaptive_avg_pool2d",
     _op(jaxpool.adaptive_avg_pool2d, (24, 3)), (2, 3, 32, 6), (A, None)),
    ("adaptive_max_pool2d 32 -> 24 (ragged)", "adaptive_max_pool2d",
     _op(jaxpool.adaptive_max_pool2d, (24, 3)), (2, 3, 32, 6), (A, None)),
    ("adaptive_max_pool3d 16 -> 8", "adaptive_max_pool3d", _op(jaxpool.adaptive_max_pool3d, (8, 5, 2)), (1, 2, 16, 5, 4), (A, None, None)),
    ("adaptive_avg_pool1d 32 -> 1", "adaptive_avg_pool1d", _op(jaxpool.adaptive_avg_pool1d, 1), (2, 3, 32), (A,), True),
    ("global_avg_pool", "global_avg_pool", _op(jaxpool.global_avg_pool), (2, 3, 32, 6), (A, None), True),
    ("global_max_pool", "global_max_pool", _op(jaxpool.global_max_pool), (2, 3, 32, 6), (A, None), True),
    ("lp_pool2d p2 2", "lp_pool2d", _op(jaxpool.lp_pool2d, 2, 2), (2, 3, 32, 6), (A, None)),
    ("lp_pool1d p3 4", "lp_pool1d", _op(jaxpool.lp_pool1d, 3, 4), (2, 3, 32), (A,)),
    ("interpolate nearest x2", "interpolate", _op(jaxpool.interpolate, scale_factor=2), (2, 3, 16, 5), (A, None)),
    ("interpolate nearest-exact 32 -> 16", "interpolate",
     _op(jaxpool.interpolate, size=(16, 5), mode="nearest-exact"), (2, 3, 32, 5), (A, None)),
    ("interpolate linear x2", "interpolate", _op(jaxpool.interpolate, scale_factor=2, mode="linear"), (2, 3, 32), (A,)),
    ("interpolate bilinear x2", "interpolate",
     _op(jaxpool.interpolate, scale_factor=2, mode="bilinear"), (2, 3, 32, 6), (A, None)),
    ("interpolate bilinear align_corners 32 -> 64", "interpolate",
     _op(jaxpool.interpolate, size=(64, 6), mode="bilinear", align_corners=True), (2, 3, 32, 6), (A, None)),
    ("interpolate bicubic x2 on H and W", "interpolate",
     _op(jaxpool.interpolate, scale_factor=2, mode="bicubic"), (1, 2, 16, 8), (A, B)),
    ("interpolate bilinear antialias 32 -> 16", "interpolate",
     _op(jaxpool.interpolate, size=(16, 6), mode="bilinear", antialias=True), (2, 3, 32, 6), (A, None)),
    ("interpolate trilinear x2 on D", "interpolate",
     _op(jaxpool.interpolate, scale_factor=2, mode="trilinear"), (1, 2, 16, 4, 4), (A, None, None)),
    ("interpolate area 32 -> 8", "interpolate", _op(jaxpool.interpolate, size=(8, 3), mode="area"), (2, 3, 32, 6), (A, None)),
    ("pad reflect", "pad", _op(jaxpool.pad, (1, 1, 4, 4), "reflect"), (2, 3, 32, 6), (A, None)),
    ("pad replicate 3d on D", "pad", _op(jaxpool.pad, (1, 1, 1, 1, 4, 4), "replicate"), (1, 2, 16, 4, 4), (A, None, None)),
    ("pad circular", "pad", _op(jaxpool.pad, (1, 2, 4, 4), "circular"), (2, 3, 32, 6), (A, None)),
    ("pad constant, crop", "pad", _op(jaxpool.pad, (1, -1, -4, -4), value=1.5), (2, 3, 32, 6), (A, None)),
    ("max_unpool2d 2 (SegNet)", "max_unpool2d", _unpool(2, 2, 2), (2, 3, 32, 6), (A, None)),
    ("max_unpool1d 3/2/1, output 32", "max_unpool1d", _unpool(1, 3, 2, 1, (32,)), (2, 3, 32), (A,)),
    ("pixel_shuffle 2", "pixel_shuffle", _op(jaxpool.pixel_shuffle, 2), (2, 8, 16, 6), (A, None)),
    ("pixel_unshuffle 2", "pixel_unshuffle", _op(jaxpool.pixel_unshuffle, 2), (2, 3, 32, 6), (A, None)),
]


# A few cases, one per kind of exchange: a one-sided halo, none (ragged windows), a
# reduction, a halo each way, padding, values and indices together.
QUICK = ("max_pool2d 3/2/1", "adaptive_avg_pool2d 32 -> 24 (ragged)", "global_max_pool",
         "interpolate bilinear x2", "pad reflect", "max_unpool1d 3/2/1, output 32")


def _layout(shape, names, channels_last):
    """The input shape and PartitionSpec in a layout; ``names`` per spatial axis."""
    spatial = len(names)
    lead = len(shape) - spatial
    if channels_last:
        shape = (shape[0], *shape[lead:], shape[1]) if lead == 2 else (*shape[lead:], shape[0])
        spec = P(*([None] * (lead - 1)), *names, None)
    else:
        spec = P(*([None] * lead), *names)
    return shape, spec


def _mesh(names) -> Mesh:
    devices = np.array(jax.devices())
    used = [n for n in names if n is not None]
    if len(used) == 1:
        return Mesh(devices.reshape(len(devices)), (used[0],)) if used[0] == A else \
            Mesh(devices.reshape(1, len(devices)), (A, B))
    half = max(1, len(devices) // 2)
    return Mesh(devices.reshape(half, len(devices) // half), (A, B))


def _has_gather(jaxpr) -> list[str]:
    text = str(jaxpr)
    return sorted({p for p in ("gather", "scatter", "scatter-add", "scatter_add")
                   if re.search(rf"\b{p}\b", text)})


def _diff(a, b) -> float:
    """Largest |a - b| where they differ (equal infinities and two NaNs do not); inf where
    only one is NaN."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if (np.isnan(a) != np.isnan(b)).any():
        return float("inf")
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    with np.errstate(invalid="ignore"):
        return float(np.max(np.where(same, 0.0, np.abs(a - b)), initial=0.0))


def _nonfinite(x: jax.Array) -> jax.Array:
    """``x`` with NaN, inf and -inf planted along the first spatial axis's blocks, where
    devices meet (rows 0, 3, 4, 7, 8 ...) and inside them."""
    flat = np.asarray(x).copy().reshape(-1)
    for i, value in zip(range(0, flat.size, max(1, flat.size // 23)),
                        [np.nan, np.inf, -np.inf] * 8):
        flat[i] = value
    return jnp.asarray(flat.reshape(x.shape))


def check_case(label, fn, shape, names, channels_last, whole=False, second=False) -> dict:
    x_shape, spec = _layout(shape, names, channels_last)
    mesh = _mesh(names)
    x = jax.random.normal(jax.random.key(0), x_shape, jnp.float32)
    ref = lambda v: fn(v, None, channels_last)  # noqa: E731
    out_spec = P() if whole else spec
    if not whole:
        y_shape = jax.eval_shape(ref, x).shape
        if len(y_shape) != len(x_shape):
            out_spec = P(*([None] * len(y_shape)))
    sharded = jax.shard_map(lambda v: fn(v, names, channels_last), mesh=mesh, in_specs=spec,
                            out_specs=out_spec)

    def loss(f):
        def value(v):
            y = f(v)
            return (y * jnp.cos(y)).sum()
        return value

    fwd = jax.jit(sharded)
    grad = jax.jit(jax.grad(loss(sharded)))
    y, y_ref = fwd(x), ref(x)
    g, g_ref = grad(x), jax.grad(loss(ref))(x)
    row = {
        "case": label, "layout": "channels_last" if channels_last else "channels_first",
        "sharded_axes": sum(n is not None for n in names), "whole": whole,
        "forward": collectives(fwd.lower(x).compile().as_text()),
        "gradient": collectives(grad.lower(x).compile().as_text()),
        "value_diff": _diff(y, y_ref),
        "value_scale": float(np.nanmax(np.abs(np.asarray(y_ref)))),
        "values_equal": bool(np.array_equal(np.asarray(y), np.asarray(y_ref), equal_nan=True)),
        "grad_diff": _diff(g, g_ref),
        "grad_scale": float(np.nanmax(np.abs(np.asarray(g_ref)))),
        "gather_in_gradient": _has_gather(jax.make_jaxpr(jax.grad(loss(sharded)))(x)),
    }
    if second:
        t = jnp.ones_like(x)
        hvp = jax.jit(lambda v: jax.jvp(jax.grad(loss(sharded)), (v,), (t,))[1])
        row["second"] = collectives(hvp.lower(x).compile().as_text())
        row["gather_in_second"] = _has_gather(jax.make_jaxpr(hvp)(x))
    return row


def check_jit_case(label, fn, shape, names, channels_last, whole=False) -> dict:
    """Under plain ``jit``, the input sharded as the case says: the forward, its JVP, the
    gradient and a Hessian-vector product (forward over reverse) against the unsharded
    call's (``route("never")``), and their collectives."""
    x_shape, spec = _layout(shape, names, channels_last)
    sharding = jax.sharding.NamedSharding(_mesh(names), spec)
    x = jax.random.normal(jax.random.key(0), x_shape, jnp.float32)

    def programs():
        f = lambda v: fn(v, None, channels_last)  # noqa: E731 (a new function: a new trace)

        def loss(v):
            y = f(v)
            return (y * jnp.cos(y)).sum()
        return {"forward": f,
                "jvp": lambda v: jax.jvp(f, (v,), (jnp.sin(v),))[1],
                "gradient": jax.grad(loss),
                "second": lambda v: jax.jvp(jax.grad(loss), (v,), (jnp.sin(v),))[1]}

    x_bad = _nonfinite(x)
    with halo_jit.route("never"):
        reference = {k: jax.jit(p) for k, p in programs().items()}
        want = {k: p(x) for k, p in reference.items()}
        want_bad = {k: p(x_bad) for k, p in reference.items()}
    routed = programs()
    row: dict[str, Any] = {
        "case": label, "layout": "channels_last" if channels_last else "channels_first",
        "sharded_axes": sum(n is not None for n in names), "whole": whole,
        "ops": str(jax.make_jaxpr(routed["forward"])(x)).count("jaxpool_halo["),
        "values_equal": True, "gather_in_gradient": [], "gather_in_second": []}
    for key, program in routed.items():
        compiled = jax.jit(program, in_shardings=sharding)
        got = compiled(x)
        row[key] = collectives(compiled.lower(x).compile().as_text())
        row[f"{key}_diff"] = _diff(got, want[key])
        row[f"{key}_scale"] = float(np.nanmax(np.abs(np.asarray(want[key]))))
        if key == "forward":
            row["values_equal"] = bool(np.array_equal(np.asarray(got), np.asarray(want[key]),
                                                      equal_nan=True))
        if key in ("gradient", "second"):
            row[f"gather_in_{key}"] = _has_gather(jax.make_jaxpr(program)(x))
        # NaN and inf where the unsharded call puts them (the same compiled programs)
        bad = _diff(compiled(x_bad), want_bad[key])
        row["nonfinite_diff"] = max(row.get("nonfinite_diff", 0.0), bad)
    row["value_diff"], row["value_scale"] = row["forward_diff"], row["forward_scale"]
    row["grad_diff"], row["grad_scale"] = row["gradient_diff"], row["gradient_scale"]
    return row


def run_jit(cases=CASES, layouts=(False, True)) -> list[dict]:
    rows = []
    for case in cases:
        label, op, fn, shape, names = case[:5]
        for channels_last in layouts:
            row = check_jit_case(label, fn, shape, names, channels_last,
                                 len(case) > 5 and case[5])
            row["op"] = op
            rows.append(row)
    return rows


def run(cases=CASES, layouts=(False, True), second_for=("max_pool2d 3/2/1",
                                                        "interpolate bilinear x2",
                                                        "pad reflect")) -> list[dict]:
    rows = []
    for case in cases:
        label, op, fn, shape, names = case[:5]
        whole = len(case) > 5 and case[5]
        for channels_last in layouts:
            row = check_case(label, fn, shape, names, channels_last, whole,
                             second=label in second_for and not channels_last)
            row["op"] = op
            rows.append(row)
    return rows


# Under plain jit: the input [8, 8, 64, 64] (or [2, 4, 64, 16, 16]) sharded on its first
# spatial axis, the output sharded the same way where its extent divides.
JIT_CASES: list[tuple[str, Any, tuple, dict[str, Any]]] = [
    ("avg_pool2d(x, 3, 2, 1)", jaxpool.avg_pool2d, (3, 2, 1), {}),
    ("max_pool2d(x, 3, 2, 1)", jaxpool.max_pool2d, (3, 2, 1), {}),
    ("adaptive_avg_pool2d 64 -> 16", jaxpool.adaptive_avg_pool2d, (16,), {}),
    ("adaptive_avg_pool2d 64 -> 24", jaxpool.adaptive_avg_pool2d, (24,), {}),
    ("interpolate bilinear x2", jaxpool.interpolate, (), dict(scale_factor=2, mode="bilinear")),
    ("interpolate bilinear align_corners 64 -> 127", jaxpool.interpolate, (),
     dict(size=127, mode="bilinear", align_corners=True)),
    ("pad(x, 3, mode='reflect')", jaxpool.pad, ((3, 3, 3, 3), "reflect"), {}),
    ("pad(x, 4, mode='reflect')", jaxpool.pad, ((4, 4, 4, 4), "reflect"), {}),
    ("avg_pool3d(x, 3, 2, 1) on D", jaxpool.avg_pool3d, (3, 2, 1), {}),
    ("pad replicate 3d (4 each side) on D", jaxpool.pad, ((4,) * 6, "replicate"), {}),
    ("lp_pool2d(x, 2, 2)", jaxpool.lp_pool2d, (2, 2), {}),
]


def jit_table(labels=None) -> list[dict]:
    """Collectives under plain jit, before (today's program: ``route("never")``) and after
    (the partitioned primitive), forward and gradient (of the cases named in ``labels``,
    or all)."""
    mesh = Mesh(np.array(jax.devices()), (A,))
    rows = []
    for label, op, args, kw in JIT_CASES:
        if labels is not None and label not in labels:
            continue
        shape = (2, 4, 64, 16, 16) if "3d" in label or "on D" in label else (8, 8, 64, 64)
        x = jax.random.normal(jax.random.key(0), shape)
        spec = P(None, None, A)
        sh = jax.sharding.NamedSharding(mesh, spec)
        row: dict[str, Any] = {"case": label}
        values = {}
        modes: tuple[tuple[str, halo_jit.RouteMode], ...] = (("before", "never"),
                                                             ("after", "auto"))
        for name, mode in modes:
            with halo_jit.route(mode):  # (read when traced: new functions each time)
                def f(v, op=op, args=args, kw=kw):
                    return op(v, *args, **kw)

                def loss(v, f=f):
                    out = f(v)
                    return (out * jnp.cos(out)).sum()
                fwd = jax.jit(f, in_shardings=sh)
                grad = jax.jit(jax.grad(loss), in_shardings=sh, out_shardings=sh)
                row[name] = {"forward": collectives(fwd.lower(x).compile().as_text()),
                             "gradient": collectives(grad.lower(x).compile().as_text())}
                values[name] = (fwd(x), grad(x))
        row["after"]["value_diff"] = _diff(values["after"][0], values["before"][0])
        row["after"]["grad_diff"] = _diff(values["after"][1], values["before"][1])
        rows.append(row)
    return rows


def _fmt(counts: dict) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"


def within_bound(row) -> bool:
    """Per op and sharded axis at most 2 collective-permutes forward, 4 in a derivative
    (the JVP, the gradient) and 8 in a second derivative, nothing else; axes pooled whole:
    all-reduces only (2 forward, 3 in a derivative, 4 in a second)."""
    n = row["sharded_axes"] * row.get("ops", 1)
    if row["whole"]:
        allowed = {"all-reduce"}
        limits = {"forward": 2 * n, "jvp": 3 * n, "gradient": 3 * n, "second": 4 * n}
    else:
        allowed = {"collective-permute"}
        limits = {"forward": 2 * n, "jvp": 4 * n, "gradient": 4 * n, "second": 8 * n}
    for key, limit in limits.items():
        found = row.get(key)
        if found is None:
            continue
        if set(found) - allowed or sum(found.values()) > limit:
            return False
    return True


COPIES = ("max", "nearest", "pad", "unpool", "shuffle")  # cases whose values are copies


def problems(row) -> list[str]:
    """What is wrong with a row: collectives past the bound, a gather or scatter in a
    derivative, values of a copying op that are not the unsharded call's bits, or values
    and derivatives off by more than 1e-5 of their scale."""
    where = f"{row['case']} [{row['layout']}]"
    bad = []
    if any(w in row["case"] for w in COPIES) and not row["values_equal"]:
        bad.append(f"{where}: values differ by {row['value_diff']:.2e}")
    scale = max([1.0] + [row.get(f"{k}_scale", 0.0) for k in ("value", "grad", "jvp", "second")])
    if row.get("nonfinite_diff", 0.0) > 1e-5 * scale:
        bad.append(f"{where}: with NaN and inf, differs by {row['nonfinite_diff']:.2e}")
    for key in ("value", "grad", "jvp", "second"):
        diff, scale = row.get(f"{key}_diff"), row.get(f"{key}_scale", 1.0)
        if diff is not None and diff > 1e-5 * max(1.0, scale):
            bad.append(f"{where}: {key} differs by {diff:.2e}")
    if not within_bound(row):
        bad.append(f"{where}: forward {row['forward']}, jvp {row.get('jvp')}, gradient "
                   f"{row['gradient']}, second {row.get('second')}")
    if row["gather_in_gradient"] or row.get("gather_in_second"):
        bad.append(f"{where}: {row['gather_in_gradient'] or row['gather_in_second']} in a "
                   f"derivative")
    return bad


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--quick", action="store_true",
                   help="a few cases (QUICK), channels-first only")
    p.add_argument("--plain-jit", action="store_true",
                   help="plain jit on a sharded input instead of shard_map")
    p.add_argument("--jit-table", action="store_true",
                   help="plain jit: today's program against the partitioned primitive")
    args = p.parse_args(argv)
    n = len(jax.devices())
    if n < 2 or n % 2:
        print(f"{n} device(s): the halo check needs an even number of at least 2")
        return 0
    if args.jit_table:
        rows = jit_table()
        print("| op (sharded axis 64 long, 8 devices) | forward before | gradient before "
              "| forward after | gradient after |")
        print("|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['case']} | {_fmt(r['before']['forward'])} | "
                  f"{_fmt(r['before']['gradient'])} | {_fmt(r['after']['forward'])} | "
                  f"{_fmt(r['after']['gradient'])} |", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0
    cases = [c for c in CASES if c[0] in QUICK] if args.quick else CASES
    layouts = (False,) if args.quick else (False, True)
    rows = run_jit(cases, layouts) if args.plain_jit else run(cases, layouts)
    ok = True
    for r in rows:
        good = not problems(r)
        ok &= good
        print(f"{'ok ' if good else 'BAD'} {r['case']:45s} {r['layout']:15s} "
              f"forward {_fmt(r['forward'])}; gradient {_fmt(r['gradient'])}"
              + (f"; jvp {_fmt(r['jvp'])}" if "jvp" in r else "")
              + (f"; second {_fmt(r['second'])}" if "second" in r else "")
              + f" |dy| {r['value_diff']:.1e} |dg| {r['grad_diff']:.1e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"devices": n, "platform": jax.devices()[0].platform, "rows": rows}, f,
                      indent=1)
    print(f"{len(rows)} cases on {n} {jax.devices()[0].platform} devices: "
          f"{'all within the bound' if ok else 'SOME OUTSIDE THE BOUND'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
