"""Exploration: which scatter-free window sum is fastest, per grid cell and mode.

Average pooling is separable: sum the windows along H, then along W (or W first),
then divide by the window sizes. This script times candidate ways to take the
per-axis window sums, side by side and interleaved, on the adaptive and avg_pool
cells of the jaxpool benchmark grid, with jaxpool itself, torch and the one-read
floor as references:

  reshape        pad/crop, reshape the axis to [out, k], sum (stride == kernel only)
  taps           sum over t < k of the strided slices x[t::s] (uniform windows)
  matmul         contract the axis with a 0/1 [out, n] window matrix (HIGHEST precision)
  repeat         adaptive windows: x repeated `out` times along the axis, so that
                 x[floor(i*n/out) + t] == rep[i*n + t*out]; each tap is one strided
                 slice of rep, the taps past a window's end masked with where
  reduce_window  lax.reduce_window over both axes at once (uniform windows)

Each candidate is tried H-first and W-first, in the cell's own layout and
transposed to the other one (NCHW <-> NHWC) and back. Every candidate's values
are checked against torch (float64) and its jaxpr for scatter before it is timed;
candidates far slower than the fastest on a first call are dropped from the
interleaved timing (reported as pruned).

    python benchmarks/strategies.py --cells '15x15' --out strategies-results
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

try:
    from jaxpool.bench import grid, runner, sides
except ImportError:  # run from a checkout without installing it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from jaxpool.bench import grid, runner, sides

METHODS = ("reshape", "taps", "matmul", "repeat")


@dataclasses.dataclass(frozen=True)
class Axis:
    """The windows along one axis of extent n: window i sums x[starts[i]:ends[i]]."""

    n: int
    out: int
    starts: np.ndarray
    ends: np.ndarray
    divisor: np.ndarray  # this axis's factor of each window's divisor
    uniform: tuple[int, int, int] | None  # (kernel, stride, left pad): window i = [i*s - p, i*s - p + k)
    adaptive: bool


def adaptive_axis(n: int, out: int) -> Axis:
    i = np.arange(out)
    starts, ends = (i * n) // out, -((-(i + 1) * n) // out)
    uniform = (n // out, n // out, 0) if n % out == 0 else None
    return Axis(n, out, starts, ends, ends - starts, uniform, True)


def avg_axis(n: int, k: int, s: int, p: int, ceil_mode: bool, count_include_pad: bool) -> Axis:
    out = grid.avg_out(n, k, s, p, ceil_mode)
    i = np.arange(out)
    lo = i * s - p
    hi = np.minimum(lo + k, n + p)  # torch's divisor counts padding, not the ceil overhang
    starts, ends = np.maximum(lo, 0), np.minimum(hi, n)
    divisor = hi - lo if count_include_pad else ends - starts
    return Axis(n, out, starts, ends, divisor, (k, s, p), False)


def axes_of(case: grid.Case) -> tuple[Axis, Axis]:
    _, _, h, w = case.shape
    if case.op == "adaptive":
        oh, ow = case.output_size
        return adaptive_axis(h, oh), adaptive_axis(w, ow)
    k, s, p = case.kernel_size, case.stride_, case.padding
    return tuple(avg_axis(n, k, s, p, case.ceil_mode, case.count_include_pad) for n in (h, w))


def applicable(method: str, a: Axis) -> bool:
    if method == "reshape":
        return a.uniform is not None and a.uniform[0] == a.uniform[1]
    if method == "taps":
        return a.uniform is not None
    if method == "repeat":
        return a.adaptive
    return True


def _pad_axis(x, axis: int, lo: int, hi: int):
    # lax.pad crops where a pad is negative; its transpose is a slice, never a scatter.
    cfg = [(0, 0, 0)] * x.ndim
    cfg[axis] = (lo, hi, 0)
    return lax.pad(x, jnp.zeros((), x.dtype), cfg)


def sum_reshape(x, axis: int, a: Axis):
    k, _, p = a.uniform
    x = _pad_axis(x, axis, p, a.out * k - a.n - p)
    x = x.reshape(x.shape[:axis] + (a.out, k) + x.shape[axis + 1:])
    return x.sum(axis + 1)


def sum_taps(x, axis: int, a: Axis):
    k, s, p = a.uniform
    span = (a.out - 1) * s + 1
    x = _pad_axis(x, axis, p, (a.out - 1) * s + k - a.n - p)
    total = lax.slice_in_dim(x, 0, span, s, axis)
    for t in range(1, k):
        total = total + lax.slice_in_dim(x, t, t + span, s, axis)
    return total


def window_matrix(a: Axis, dtype) -> np.ndarray:
    m = np.zeros((a.out, a.n), dtype)
    for i, (lo, hi) in enumerate(zip(a.starts, a.ends)):
        m[i, lo:hi] = 1
    return m


def sum_matmul(x, axis: int, a: Axis):
    m = jnp.asarray(window_matrix(a, x.dtype))
    y = lax.dot_general(x, m, (((axis,), (1,)), ((), ())), precision=lax.Precision.HIGHEST)
    return jnp.moveaxis(y, -1, axis)


def sum_repeat(x, axis: int, a: Axis):
    n, k = a.n, a.out
    lengths = a.ends - a.starts
    lmin, lmax = int(lengths.min()), int(lengths.max())
    shape = x.shape
    rep = jnp.broadcast_to(jnp.expand_dims(x, axis + 1), shape[:axis + 1] + (k,) + shape[axis + 1:])
    rep = rep.reshape(shape[:axis] + (n * k,) + shape[axis + 1:])  # rep[j] == x[j // k]
    span = (k - 1) * n + 1
    rep = _pad_axis(rep, axis, 0, max(0, (lmax - 1) * k + span - n * k))
    total = None
    bshape = [1] * x.ndim
    bshape[axis] = k
    for t in range(lmax):
        tap = lax.slice_in_dim(rep, t * k, t * k + span, n, axis)
        if t >= lmin:
            keep = jnp.asarray((t < lengths).reshape(bshape))
            tap = jnp.where(keep, tap, jnp.zeros((), tap.dtype))
        total = tap if total is None else total + tap
    return total


SUMS = {"reshape": sum_reshape, "taps": sum_taps, "matmul": sum_matmul, "repeat": sum_repeat}


def sum_reduce_window(x, axes: tuple[int, int], ah: Axis, aw: Axis):
    dims, strides, pads = [1] * x.ndim, [1] * x.ndim, [(0, 0)] * x.ndim
    for ax, a in zip(axes, (ah, aw)):
        k, s, p = a.uniform
        dims[ax], strides[ax] = k, s
        pads[ax] = (p, max(0, (a.out - 1) * s + k - a.n - p))
    return lax.reduce_window(x, np.zeros((), x.dtype), lax.add, dims, strides, pads)


def candidate(case: grid.Case, methods: tuple[str, str], order: str, transposed: bool):
    """A pooling function of the cell's input built from the given per-axis methods.

    methods = (for H, for W) or ("reduce_window", "reduce_window"); order "HW" sums
    along H first.
    """
    ah, aw = axes_of(case)
    out_dtype = jnp.dtype(case.dtype)
    cl = case.channels_last != transposed  # the layout the sums work in
    hax, wax = (1, 2) if cl else (2, 3)
    div = (ah.divisor[:, None] * aw.divisor[None, :]).astype(np.float32)
    div = div[..., None] if cl else div

    def f(x):
        x = x.astype(jnp.float32)
        if transposed:
            x = jnp.transpose(x, (0, 3, 1, 2) if case.channels_last else (0, 2, 3, 1))
        if methods[0] == "reduce_window":
            y = sum_reduce_window(x, (hax, wax), ah, aw)
        else:
            steps = [(hax, ah, methods[0]), (wax, aw, methods[1])]
            for ax, a, m in (steps if order == "HW" else steps[::-1]):
                x = SUMS[m](x, ax, a)
            y = x
        y = y / jnp.asarray(div)
        if transposed:
            y = jnp.transpose(y, (0, 2, 3, 1) if case.channels_last else (0, 3, 1, 2))
        return y.astype(out_dtype)

    return f


def candidates(case: grid.Case, mixed: bool):
    ah, aw = axes_of(case)
    out = {}
    for m in METHODS:
        if applicable(m, ah) and applicable(m, aw):
            for order, tr in itertools.product(("HW", "WH"), (False, True)):
                out[f"{m} {order}{' T' if tr else ''}"] = candidate(case, (m, m), order, tr)
    if ah.uniform and aw.uniform:
        for tr in (False, True):
            out[f"reduce_window{' T' if tr else ''}"] = candidate(
                case, ("reduce_window",) * 2, "HW", tr)
    if mixed:
        for mh, mw in itertools.permutations(METHODS, 2):
            if applicable(mh, ah) and applicable(mw, aw):
                out[f"{mh}+{mw} HW"] = candidate(case, (mh, mw), "HW", False)
    return out


def has_scatter(fn, x) -> bool:
    text = str(jax.make_jaxpr(runner.jax_mode(fn, "gradgrad"))(x))
    return "scatter" in text


def explore(case: grid.Case, modes, reps: int, min_sample_s: float, prune: float, mixed: bool,
            device: runner.Device, log=print) -> list[dict]:
    import torch

    x32 = runner.make_input(case, 0)
    xj = jax.device_put(jnp.asarray(runner._layout(case, x32), dtype=case.dtype), device.jax_device)
    xt = torch.from_numpy(x32).to(device.torch_device, runner._torch_dtype(case.dtype))
    if case.channels_last:
        xt = xt.contiguous(memory_format=torch.channels_last)
    x64 = torch.from_numpy(x32.astype(np.float64))
    op = case.torch_op()
    fns = candidates(case, mixed)
    refs = {}
    if sides.missing_reason("jaxpool") is None:
        refs["jaxpool"] = sides.jaxpool_side(case)[0]
    refs["floor"] = sides.floor_side(case)[0]
    scatter = {name: has_scatter(fn, xj) for name, fn in fns.items()}
    rows = []
    for mode in modes:
        ref = runner._torch_numpy(case, runner.torch_mode(op, x64, mode)())
        thunks, info = {}, {}
        for name, fn in {**fns, **refs}.items():
            t0 = time.perf_counter()
            compiled = jax.jit(runner.jax_mode(fn, mode)).lower(xj).compile()
            compile_s = time.perf_counter() - t0
            thunk = (lambda c=compiled: c(xj).block_until_ready())
            y = np.asarray(thunk()).astype(np.float64)
            problem = None if name == "floor" else runner.check(y, ref, case.dtype)
            t0 = time.perf_counter()
            thunk()
            info[name] = {"compile_s": compile_s, "first_ms": (time.perf_counter() - t0) * 1e3,
                          "scatter": scatter.get(name, False), "error": problem}
            if problem:
                log(f"  {case.label} {mode} {name}: WRONG {problem}")
            else:
                thunks[name] = thunk
        for side in ("torch", "torch-1t"):
            thunks[side] = runner.torch_mode(op, xt, mode, device.sync_torch, device.torch_threads(side))
            thunks[side]()
            info[side] = {"compile_s": 0.0, "first_ms": None, "scatter": False, "error": None}
        fastest = min(v["first_ms"] for k, v in info.items() if k in fns and k in thunks)
        for name in list(thunks):
            if name in fns and info[name]["first_ms"] > prune * fastest:
                info[name]["pruned"] = True
                del thunks[name]
        timed = runner.measure(thunks, reps, min_sample_s)
        for name, stats in timed.items():
            info[name].update({k: stats[k] for k in ("median_ms", "q25_ms", "q75_ms")})
        rows.append({"cell": case.label, "mode": mode, "candidates": info})
        best = sorted((v["median_ms"], k) for k, v in info.items() if k in fns and "median_ms" in v)
        log(f"{case.label:38s} {mode:8s} " + "  ".join(f"{k} {m:.2f}" for m, k in best[:3])
            + "".join(f" | {k} {info[k]['median_ms']:.2f}" for k in ("jaxpool", "torch", "torch-1t", "floor")
                      if "median_ms" in info.get(k, {})))
    return rows


REFERENCES = ("jaxpool", "torch", "torch-1t", "floor")


def _best(cands: dict, prefix: str) -> str:
    """The fastest timed candidate whose name starts with `prefix`, else the fastest pruned one."""
    timed = sorted((v["median_ms"], k) for k, v in cands.items()
                   if k.startswith(prefix) and "median_ms" in v and k not in REFERENCES)
    if timed:
        return f"{timed[0][1]} {timed[0][0]:.2f}"
    pruned = sorted((v["first_ms"], k) for k, v in cands.items() if k.startswith(prefix) and v.get("pruned"))
    return f"{pruned[0][1]} pruned (first call {pruned[0][0]:.1f})" if pruned else "-"


def summary(rows: list[dict]) -> str:
    """Markdown: per cell and mode, the two fastest candidates, the best of two families, references."""
    lines = ["| cell | mode | fastest | 2nd | best matmul | best repeat | jaxpool | torch | torch-1t | floor |",
             "|---|---|---|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        c = r["candidates"]
        timed = sorted((v["median_ms"], k) for k, v in c.items() if "median_ms" in v and k not in REFERENCES)
        top = [f"{k} {m:.2f}" for m, k in timed[:2]] + ["-", "-"]
        refs = [f"{c[k]['median_ms']:.2f}" if "median_ms" in c.get(k, {}) else "-" for k in REFERENCES]
        lines.append(f"| {r['cell']} | {r['mode']} | {top[0]} | {top[1]} | {_best(c, 'matmul ')} | "
                     f"{_best(c, 'repeat ')} | " + " | ".join(refs) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", default=None, metavar="REGEX", help="cells whose label matches")
    p.add_argument("--modes", default="fwd,grad,gradgrad")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--min-sample-ms", type=float, default=10.0)
    p.add_argument("--prune", type=float, default=4.0,
                   help="drop candidates whose first call is this many times the fastest's")
    p.add_argument("--mixed", action="store_true", help="also try a different method per axis")
    p.add_argument("--out", default=None, metavar="DIR", help="write strategies.md and .json here")
    args = p.parse_args(argv)
    modes = tuple(m for m in args.modes.split(",") if m)
    cases = [c for c in grid.select(grid.FULL, args.cells) if c.op in ("adaptive", "avg")]
    if not cases:
        print("no adaptive or avg cell matches", file=sys.stderr)
        return 2
    device = runner.Device("cpu")
    rows = []
    for case in cases:
        rows += explore(case, modes, args.reps, args.min_sample_ms / 1e3, args.prune, args.mixed, device)
    text = summary(rows)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "strategies.md"), "w") as f:
            f.write(text)
        with open(os.path.join(args.out, "strategies.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
