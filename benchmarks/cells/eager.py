"""The eager cells: jaxpool's ops called and differentiated without ``jax.jit``, against the
same under ``jax.jit`` and against torch's eager autograd, side by side in one process.

Run from the repository root:

    python -m benchmarks.cells.eager                      # table to stdout
    python -m benchmarks.cells.eager --markdown BENCHMARKS.md   # and into its section

Small cells, as eager code (notebooks, torch-style loops, torch models through torchax)
sees them. Modes, each timed as interleaved samples:

- ``fwd``: the op (``jaxpool`` called eagerly, ``jit`` its ``jax.jit``; torch under
  ``no_grad``);
- ``grad``: the gradient of ``sum(op(x)**2)`` (``jax.grad`` eagerly, and jitted; torch's
  ``autograd.grad``); ``jax floor`` is the same eager ``jax.grad`` with the op left out
  (``sum(x**2)``): what JAX's eager autodiff costs around any op;
- ``vjp``: the op alone, its vector-jacobian product with a given cotangent (``jax.vjp``
  and its pullback; torch's ``autograd.grad(y, x, ct)``).

``jax peer`` is the call a JAX user writes for the same op without jaxpool (``jnp.pad``,
``jax.image.resize``, ``lax.reduce_window`` as flax's pooling calls it, a gather or a
scatter port), called and differentiated eagerly as jaxpool is: the issue's eager target
is jaxpool's eager gradient at or below it. A peer marked ``wrong`` computes other values
than torch (``map_coordinates``' border): timed for its cost, never counted as a correct
peer. The jitted side takes the cell's other arrays (indices, grid, boxes) as arguments,
as the eager call does.

Every call waits for its result. ``--gap-us N`` does N microseconds of Python work before
each call, on every side, and leaves it out of the times: eager code runs Python between
its calls, and XLA:CPU's worker threads stop spinning and sleep a few microseconds after a
program ends, so a call made after that pays their wake-up, which back-to-back calls (the
default, 0) do not.

"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import numpy as np

from benchmarks.report import markers, splice
from benchmarks.runner import Device, measure, summarize

MODES = ("fwd", "grad", "vjp")
SIDES = ("jaxpool", "jit", "jax peer", "jax floor", "torch", "torch-1t")


@dataclasses.dataclass(frozen=True)
class Cell:
    name: str
    shape: tuple[int, ...]
    jax_op: str    # an expression of ``x`` (and ``indices``) with ``jaxpool`` in scope
    torch_op: str  # the same with ``F`` (torch.nn.functional) in scope
    peer: str = ""  # the same without jaxpool: ``jnp``, ``lax``, ``jax`` and ``peers`` in scope
    peer_is_torchs: bool = True  # False: the peer's values are not torch's (timed, marked)


_SAME = ((0, 0), (0, 0))  # no padding of the batch and channel axes


CELLS = (
    Cell("max_pool2d(x, 3, 2, 1), 2x16x28x28", (2, 16, 28, 28),
         "jaxpool.max_pool2d(x, 3, 2, 1)", "F.max_pool2d(x, 3, 2, 1)",
         "lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), "
         "_SAME + ((1, 1),) * 2)"),
    Cell("avg_pool2d(x, 2), 2x16x28x28", (2, 16, 28, 28),
         "jaxpool.avg_pool2d(x, 2)", "F.avg_pool2d(x, 2)",
         "lax.reduce_window(x, 0.0, lax.add, (1, 1, 2, 2), (1, 1, 2, 2), 'VALID') / 4"),
    Cell("bilinear x2, 2x16x28x28", (2, 16, 28, 28),
         "jaxpool.interpolate(x, scale_factor=2, mode='bilinear')",
         "F.interpolate(x, scale_factor=2, mode='bilinear')",
         "jax.image.resize(x, (2, 16, 56, 56), 'bilinear')"),
    Cell("reflect pad 3, 2x16x28x28", (2, 16, 28, 28),
         "jaxpool.pad(x, (3, 3, 3, 3), 'reflect')", "F.pad(x, (3, 3, 3, 3), mode='reflect')",
         "jnp.pad(x, _SAME + ((3, 3),) * 2, 'reflect')"),
    Cell("nearest 40 -> 57, 2x16x40x40", (2, 16, 40, 40),
         "jaxpool.interpolate(x, size=57)", "F.interpolate(x, size=57)",
         "peers.nearest(x, 57)"),
    Cell("max_unpool2d 2x2, 2x16x14x14 -> 28", (2, 16, 14, 14),
         "jaxpool.max_unpool2d(x, indices, 2)", "F.max_unpool2d(x, indices, 2)",
         "peers.max_unpool(x, indices, 28)"),
    Cell("adaptive_avg_pool2d 15 -> 4, 2x64x15x15", (2, 64, 15, 15),
         "jaxpool.adaptive_avg_pool2d(x, 4)", "F.adaptive_avg_pool2d(x, 4)",
         "peers.adaptive_avg(x, 4)"),
    Cell("max_pool3d(x, 3, 2, 1), 2x8x12x12x12", (2, 8, 12, 12, 12),
         "jaxpool.max_pool3d(x, 3, 2, 1)", "F.max_pool3d(x, 3, 2, 1)",
         "lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3, 3, 3), (1, 1, 2, 2, 2), "
         "_SAME + ((1, 1),) * 3)"),
    Cell("unfold(x, 3, padding=1), 2x16x28x28", (2, 16, 28, 28),
         "jaxpool.unfold(x, 3, padding=1)", "F.unfold(x, 3, padding=1)",
         "lax.conv_general_dilated_patches(x, (3, 3), (1, 1), ((1, 1), (1, 1)))"
         ".reshape(2, 144, 784)"),
    Cell("grid_sample bilinear, 2x16x28x28 at 2x20x20", (2, 16, 28, 28),
         "jaxpool.grid_sample(x, grid, align_corners=False)",
         "F.grid_sample(x, grid, align_corners=False)",
         "peers.map_coordinates(x, grid)", peer_is_torchs=False),
    Cell("roi_align 7x7, 2x16x28x28, 8 boxes", (2, 16, 28, 28),
         "jaxpool.roi_align(x, boxes, 7, 0.5, 2)", "torchvision_roi_align(x, boxes, 7, 0.5, 2)",
         "peers.roi_align(x, boxes, 7, 0.5, 2)"),
)


class _Peers:
    """The JAX peers that take more than one expression: what a JAX user writes for the op
    without jaxpool."""

    @staticmethod
    def nearest(x, size: int):
        """torch's ``nearest``: output ``i`` reads input ``floor(i * in / out)``, a gather
        per axis."""
        import jax.numpy as jnp
        rows = np.floor(np.arange(size) * (x.shape[-2] / size)).astype(np.int32)
        cols = np.floor(np.arange(size) * (x.shape[-1] / size)).astype(np.int32)
        return jnp.take(jnp.take(x, rows, axis=-2), cols, axis=-1)

    @staticmethod
    def max_unpool(x, indices, size: int):
        """Each value written at its flat index of the ``size x size`` plane: a scatter."""
        import jax.numpy as jnp
        n, c = x.shape[:2]
        flat = indices.reshape(n, c, -1)
        out = jnp.zeros((n, c, size * size), x.dtype)
        rows, chans = np.arange(n)[:, None, None], np.arange(c)[None, :, None]
        return out.at[rows, chans, flat].set(x.reshape(n, c, -1)).reshape(n, c, size, size)

    @staticmethod
    def adaptive_avg(x, size: int):
        """torch's bins (``floor(i * n / out)`` to ``ceil((i + 1) * n / out)``) as an
        averaging matrix per axis, contracted with the input."""
        import jax.numpy as jnp

        def bins(n):
            m = np.zeros((size, n), np.float32)
            for i in range(size):
                lo, hi = (i * n) // size, -((-(i + 1) * n) // size)
                m[i, lo:hi] = 1.0 / (hi - lo)
            return m
        return jnp.einsum("nchw,ih,jw->ncij", x, bins(x.shape[-2]), bins(x.shape[-1]))

    @staticmethod
    def map_coordinates(x, grid):
        from benchmarks.cells.grid_sampling import _map_coordinates
        return _map_coordinates(x.shape, "bilinear", False)(x, grid)

    @staticmethod
    def roi_align(x, boxes, output, scale, ratio):
        from benchmarks.cells.roi import _jnp_roi_align
        return _jnp_roi_align(x, boxes, output, scale, ratio)


def _extras(cell: Cell, x64: np.ndarray) -> dict:
    """The arrays a cell's expressions read besides ``x`` (numpy, by name)."""
    extras = {}
    n, c, h, w = x64.shape[:4]
    rng = np.random.default_rng(1)
    if "indices" in cell.jax_op:
        # each value's index: a random element of its own 2x2 window, as a max pool's
        rows = 2 * np.arange(h)[:, None] + rng.integers(0, 2, (n, c, h, w))
        cols = 2 * np.arange(w)[None, :] + rng.integers(0, 2, (n, c, h, w))
        extras["indices"] = rows * (2 * w) + cols
    if "grid" in cell.jax_op:
        extras["grid"] = rng.uniform(-1.1, 1.1, (n, 20, 20, 2)).astype(np.float32)
    if "boxes" in cell.jax_op:
        x1, y1 = rng.uniform(0, 2 * w * 0.6, 8), rng.uniform(0, 2 * h * 0.6, 8)
        extras["boxes"] = np.stack([rng.integers(0, n, 8), x1, y1,
                                    x1 + rng.uniform(4, 2 * w * 0.4, 8),
                                    y1 + rng.uniform(4, 2 * h * 0.4, 8)], 1).astype(np.float32)
    return extras


def _ops(cell: Cell, x64: np.ndarray):
    """jaxpool's op (of the input and, by default the cell's, other arrays), torch's and
    the JAX peer's (None without one), both of the input alone, and the other arrays."""
    import jax
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F
    from jax import lax

    import jaxpool
    from benchmarks.cells.roi import _torch_roi_align

    extras = _extras(cell, x64)
    jax_extras = {k: jnp.asarray(v) for k, v in extras.items()}
    jax_scope = {"jaxpool": jaxpool, "jax": jax, "jnp": jnp, "lax": lax, "peers": _Peers,
                 "_SAME": _SAME, **jax_extras}
    torch_scope = {"F": F, "torchvision_roi_align": _torch_roi_align,
                   **{k: torch.from_numpy(v) for k, v in extras.items()}}
    # compiled once: an eval of the text would cost each eager call its parsing
    jax_code = compile(cell.jax_op, cell.name, "eval")
    torch_code = compile(cell.torch_op, cell.name, "eval")
    peer_code = compile(cell.peer, cell.name, "eval") if cell.peer else None
    # jaxpool's op takes the other arrays too, so that its jitted side gets them as
    # arguments, as the eager call does (closed over, XLA would fold a grid's coordinates)
    return (lambda x, e=jax_extras: eval(jax_code, dict(jax_scope, x=x, **e)),
            lambda x: eval(torch_code, dict(torch_scope, x=x)),
            peer_code and (lambda x: eval(peer_code, dict(jax_scope, x=x))), jax_extras)


def _sides(cell: Cell, mode: str, device: Device) -> tuple[dict, dict]:
    """Thunks per side, and each side's result (to check them against one another)."""
    import jax
    import jax.numpy as jnp
    import torch

    rng = np.random.default_rng(0)
    x64 = rng.standard_normal(cell.shape)
    jax_op, torch_op, peer, extras = _ops(cell, x64)
    x = jax.device_put(jnp.asarray(x64, jnp.float32), device.jax_device)
    t = torch.from_numpy(x64.astype(np.float32)).to(device.torch_device)
    ready = jax.block_until_ready
    if mode == "fwd":
        jitted = jax.jit(jax_op)
        f = lambda: ready(jax_op(x))  # noqa: E731
        jaxes = {"jaxpool": f, "jit": lambda: ready(jitted(x, extras))}
        if peer:
            jaxes["jax peer"] = lambda: ready(peer(x))

        def torch_side():
            with torch.no_grad():
                y = torch_op(t)
            device.sync_torch()
            return y
    elif mode == "grad":
        grad = jax.grad(lambda a, e=extras: jnp.sum(jnp.square(jax_op(a, e))))
        floor = jax.grad(lambda a: jnp.sum(jnp.square(a)))
        jitted = jax.jit(grad)
        jaxes = {"jaxpool": lambda: ready(grad(x)), "jit": lambda: ready(jitted(x, extras)),
                 "jax floor": lambda: ready(floor(x))}
        if peer:
            peer_grad = jax.grad(lambda a: jnp.sum(jnp.square(peer(a))))
            jaxes["jax peer"] = lambda: ready(peer_grad(x))
        leaf = t.detach().requires_grad_(True)

        def torch_side():
            (g,) = torch.autograd.grad(torch_op(leaf).square().sum(), leaf)
            device.sync_torch()
            return g
    else:
        y = jax_op(x)
        ct64 = rng.standard_normal(y.shape)
        ct = jax.device_put(jnp.asarray(ct64, jnp.float32), device.jax_device)
        vjp = lambda a, c, e=extras: jax.vjp(lambda b: jax_op(b, e), a)[1](c)[0]  # noqa: E731
        jitted = jax.jit(vjp)
        jaxes = {"jaxpool": lambda: ready(vjp(x, ct)),
                 "jit": lambda: ready(jitted(x, ct, extras))}
        if peer:
            jaxes["jax peer"] = lambda: ready(jax.vjp(peer, x)[1](ct)[0])
        leaf = t.detach().requires_grad_(True)
        tct = torch.from_numpy(ct64.astype(np.float32)).to(device.torch_device)

        def torch_side():
            (g,) = torch.autograd.grad(torch_op(leaf), leaf, tct)
            device.sync_torch()
            return g
    results = {name: np.asarray(f()) for name, f in jaxes.items() if name != "jax floor"}
    results["torch"] = torch_side().detach().cpu().numpy()
    fns = dict(jaxes, torch=torch_side)
    if device.kind == "cpu":
        def one_thread():
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                return torch_side()
            finally:
                torch.set_num_threads(threads)
        fns["torch-1t"] = one_thread
    return fns, results


def _cpu_times(fns: dict, reps: int, inner: int = 20) -> dict:
    """CPU seconds of this process per call (all its threads), interleaved as ``measure``:
    on a machine shared with other work, what the call itself costs."""
    samples: dict = {name: [] for name in fns}
    names = list(fns)
    for f in fns.values():
        f()
    for r in range(reps):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.process_time()
            for _ in range(inner):
                fns[name]()
            samples[name].append((time.process_time() - t0) / inner)
    return {name: summarize(s, inner) for name, s in samples.items()}


def _after_python_work(f, gap_s: float):
    """``f`` called after ``gap_s`` seconds of Python work (a busy loop, as eager code's
    own Python between calls; a sleep would hand the core to XLA's workers)."""
    clock = time.perf_counter

    def call():
        start = clock()
        while clock() - start < gap_s:
            pass
        return f()
    return call


def run_cell(cell: Cell, reps: int, min_sample_s: float, device: Device,
             clock: str = "wall", gap_us: float = 0.0) -> list[dict]:
    rows = []
    for mode in MODES:
        fns, results = _sides(cell, mode, device)
        if gap_us:
            fns = {name: _after_python_work(f, gap_us * 1e-6) for name, f in fns.items()}
        want = results["torch"]
        for name, got in results.items():
            if name == "jax peer" and not cell.peer_is_torchs:
                continue
            scale = float(np.max(np.abs(want))) or 1.0
            if got.shape != want.shape or np.max(np.abs(got - want)) > 1e-4 * scale:
                raise AssertionError(f"{cell.name} {mode}: {name} differs from torch")
        # eager and jitted: the same programs, the same bits
        if results["jaxpool"].tobytes() != results["jit"].tobytes():
            raise AssertionError(f"{cell.name} {mode}: jaxpool is not the jitted bits")
        # JAX's sides interleaved among themselves and torch's among themselves: after its
        # calls torch's OpenMP threads spin (about 8 ms of CPU), which on two cores lands on
        # whichever side runs next.
        timed = {}
        for group in ([n for n in fns if not n.startswith("torch")],
                      [n for n in fns if n.startswith("torch")]):
            sub = {n: fns[n] for n in group}
            timed.update(measure(sub, reps, min_sample_s) if clock == "wall"
                         else _cpu_times(sub, reps))
        rows.append({"cell": cell.name + ("" if cell.peer_is_torchs else " (peer wrong)"),
                     "mode": mode,
                     "ms": {k: v["median_ms"] - gap_us * 1e-3 for k, v in timed.items()},
                     "spread": {k: (v["q75_ms"] - v["q25_ms"]) / 2 for k, v in timed.items()}})
    return rows


def _fmt(ms: float) -> str:
    return f"{ms:.3g}"


def table(rows: list[dict], device: Device, clock: str = "wall", gap_us: float = 0.0) -> str:
    what = "ms per call" if clock == "wall" else "CPU ms of the process per call"
    after = f", each after {gap_us:g} us of Python work (left out)" if gap_us else ""
    lines = [f"Median {what} of interleaved samples (± half the interquartile range){after}, "
             f"float32, {device.in_words()}",
             "",
             "| cell | mode | " + " | ".join(SIDES)
             + " | jaxpool / torch | jaxpool / jax peer | jaxpool / jit |",
             "|---|---|" + "---:|" * (len(SIDES) + 3)]
    for r in rows:
        ms, spread = r["ms"], r["spread"]
        cells = [f"{_fmt(ms[s])} ±{_fmt(spread[s])}" if s in ms else "" for s in SIDES]
        torch_best = min(ms[s] for s in ("torch", "torch-1t") if s in ms)
        peer = f"{ms['jaxpool'] / ms['jax peer']:.2f}x" if "jax peer" in ms else ""
        lines.append(f"| {r['cell']} | {r['mode']} | " + " | ".join(cells)
                     + f" | {ms['jaxpool'] / torch_best:.2f}x | {peer}"
                     + f" | {ms['jaxpool'] / ms['jit']:.2f}x |")
    lines.append("")
    lines.append("`jaxpool / torch`: over the faster of torch's two thread counts. `(peer "
                 "wrong)`: the JAX peer's values are not torch's (timed for its cost).")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cells.eager",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--reps", type=int, default=15, help="samples per side (default 15)")
    parser.add_argument("--min-sample-s", type=float, default=0.02,
                        help="each sample repeats the call until it lasts this long")
    parser.add_argument("--cells", default="", help="comma-separated cell numbers (from 0)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall time, or this process's CPU time (a shared machine)")
    parser.add_argument("--gap-us", type=float, default=0.0,
                        help="microseconds of Python work before each call, on every side, "
                             "left out of the times (default 0: back to back)")
    parser.add_argument("--markdown", help="also splice the table into this file")
    parser.add_argument("--section", default="eager", help="the markdown section's name")
    args = parser.parse_args(argv)
    device = Device(args.device)
    cells = CELLS if not args.cells else [CELLS[int(i)] for i in args.cells.split(",")]
    start = time.perf_counter()
    rows = []
    for cell in cells:
        rows += run_cell(cell, args.reps, args.min_sample_s, device, args.clock, args.gap_us)
        print(f"  {cell.name}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    text = table(rows, device, args.clock, args.gap_us)
    print(text)
    if args.markdown:
        splice(args.markdown, text, *markers(args.section))
    return 0


if __name__ == "__main__":
    sys.exit(main())
