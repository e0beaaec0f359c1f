"""Checking and timing: every side of one cell, interleaved in one process.

The modes a cell is timed in, the checks against torch and the timing loop that every
cell set shares; :func:`run_case` runs one cell of the pooling grid
(:mod:`benchmarks.cells.pooling`) on every side of :mod:`benchmarks.sides`.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable

import numpy as np

try:
    import resource  # POSIX only
except ImportError:  # pragma: no cover
    resource = None

from .cells.pooling import Case
from .machine import cores
from .sides import CANDIDATES, JAX_SIDES, PEERS, TORCH_SIDES, Unsupported

__all__ = ["EAGER_MODES", "JIT_MODES", "MODES", "MODE_TITLES", "Device", "check", "first_calls",
           "forward_and_gradient_seconds", "jax_mode", "kernel_count", "make_input", "measure",
           "measure_against_torch", "run_case", "summarize", "torch_mode", "torch_to_numpy"]

JIT_MODES = ("fwd", "grad", "gradgrad")
# The same quantities without jax.jit: first call (tracing and compiling included) and
# repeat call.
EAGER_MODES = ("eager-fwd", "eager-grad")
MODES = JIT_MODES + EAGER_MODES
MODE_TITLES = {
    "fwd": "forward",
    "grad": "grad of sum(pool(x)**2)",
    "gradgrad": "grad of |grad|**2",
    "eager-fwd": "forward, no jit",
    "eager-grad": "grad of sum(pool(x)**2), no jit",
}

# Largest error allowed, relative to the largest reference value, before a side is "wrong".
TOLERANCE = {"float32": 1e-4, "float64": 1e-9, "bfloat16": 5e-2, "float16": 1e-2}


class Device:
    """Where both frameworks run: "cpu" or "gpu"."""

    def __init__(self, kind: str = "cpu", threads: int | None = None):
        import jax
        import torch

        if kind not in ("cpu", "gpu"):
            raise ValueError(f"device must be 'cpu' or 'gpu', got {kind!r}")
        self.kind = kind
        self.jax_device = jax.devices(kind)[0]
        self.torch_missing = None  # why torch cannot run on this device, if it cannot
        if kind == "gpu":
            self.torch_device = torch.device("cuda")
            if not torch.cuda.is_available():
                self.torch_missing = "this torch build has no CUDA device"
        else:
            self.torch_device = torch.device("cpu")
            torch.set_num_threads(threads or cores())
        self.threads = torch.get_num_threads()

    def torch_threads(self, side: str) -> int | None:
        """CPU threads for a torch side; None on the GPU."""
        if self.kind == "gpu":
            return None
        return 1 if side == "torch-1t" else self.threads

    def in_words(self) -> str:
        """Where a table's sides ran, for its first line."""
        import jax
        import torch

        from .machine import describe

        if self.kind == "gpu":
            return (f"{describe('gpu', self.jax_device)} (torch {torch.__version__} on CUDA, "
                    f"jax {jax.__version__}).")
        return (f"CPU ({cores()} cores, torch {torch.__version__} with {self.threads} "
                f"threads, jax {jax.__version__}).")

    def sync_torch(self):
        if self.kind == "gpu":
            import torch

            torch.cuda.synchronize()


def jax_mode(fn, mode: str):
    """`fn` itself, the gradient of sum(fn(x)**2), or the gradient of that gradient's squared norm."""
    import jax
    import jax.numpy as jnp

    if mode == "fwd":
        return fn
    grad = jax.grad(lambda x: jnp.sum(jnp.square(fn(x))))
    if mode == "grad":
        return grad
    return jax.grad(lambda x: jnp.sum(jnp.square(grad(x))))


def torch_mode(op, t, mode: str, sync=lambda: None, threads: int | None = None) -> Callable[[], object]:
    """A thunk computing the same quantity as `jax_mode` with torch autograd.

    With `threads`, each call first sets torch's CPU thread count (a cheap call), so
    that thunks with different counts can be interleaved.
    """
    import torch

    if threads is not None:
        inner = torch_mode(op, t, mode, sync)

        def run():
            torch.set_num_threads(threads)
            return inner()
        return run
    if mode == "fwd":
        def run():
            with torch.no_grad():
                y = op(t)
            sync()
            return y
        return run
    leaf = t.detach().requires_grad_(True)
    if mode == "grad":
        def run():
            y = op(leaf)
            (g,) = torch.autograd.grad(y.square().sum(), leaf)
            sync()
            return g
        return run

    def run():
        y = op(leaf)
        (g,) = torch.autograd.grad(y.square().sum(), leaf, create_graph=True)
        (gg,) = torch.autograd.grad(g.square().sum(), leaf)
        sync()
        return gg
    return run


def check(y, ref: np.ndarray, dtype: str) -> str | None:
    """None if `y` matches torch's float64 `ref` to the dtype's tolerance, else what is wrong."""
    y = np.asarray(y).astype(np.float64)
    if y.shape != ref.shape:
        return f"shape {y.shape}, torch {ref.shape}"
    bad = ~np.isfinite(y)
    if bad.any():
        return f"{int(bad.sum())} non-finite values"
    err = float(np.max(np.abs(y - ref), initial=0.0))
    scale = float(np.max(np.abs(ref), initial=0.0)) or 1.0
    if err > TOLERANCE[dtype] * scale:
        return f"max error {err:.2g} on values up to {scale:.2g}"
    return None


def measure(fns: dict[str, Callable[[], object]], reps: int, min_sample_s: float,
            tick: Callable[[], None] | None = None, budget_s: float | None = None) -> dict[str, dict]:
    """Seconds per call of each thunk: `reps` samples each, taken round-robin.

    Each sample repeats the call enough times to last `min_sample_s`; the order of
    the thunks rotates every repetition so that no side always runs first or last.
    A thunk whose samples would take more than `budget_s` in all gets fewer samples
    (at least 3), so that one pathological side does not hold up the run.
    """
    inner, wanted = {}, {}
    for name, f in fns.items():
        t0 = time.perf_counter()
        f()
        one = time.perf_counter() - t0
        inner[name] = max(1, min(10_000, math.ceil(min_sample_s / max(one, 1e-7))))
        wanted[name] = reps
        if budget_s is not None:
            wanted[name] = max(min(3, reps), min(reps, int(budget_s / max(one * inner[name], 1e-9))))
    samples = {name: [] for name in fns}
    faults = {name: [] for name in fns}
    names = list(fns)
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(reps):
            k = r % len(names) if names else 0
            for name in names[k:] + names[:k]:
                if len(samples[name]) >= wanted[name]:
                    continue
                f, n = fns[name], inner[name]
                f0 = _minor_faults()
                t0 = time.perf_counter()
                for _ in range(n):
                    f()
                samples[name].append((time.perf_counter() - t0) / n)
                faults[name].append((_minor_faults() - f0) / n)
            if tick:
                tick()
    finally:
        if was_enabled:
            gc.enable()
    return {name: summarize(s, inner[name], faults[name]) for name, s in samples.items()}


def measure_against_torch(fns: dict[str, Callable[[], object]], torch_op, t, mode: str,
                          reps: int, min_sample_s: float,
                          device: Device | None = None) -> dict[str, dict]:
    """``measure`` of ``fns`` beside torch's ``torch_op`` on ``t`` in ``mode``, on all its
    threads (``torch``) and on one (``torch-1t``), or on the GPU (``torch`` alone, on a copy
    of ``t`` there, where ``device`` is one): {"ms": medians, "spread": half the
    interquartile ranges}, milliseconds per call, one entry per side."""
    import torch

    if device is not None and device.kind == "gpu":
        fns = dict(fns, torch=torch_mode(torch_op, t.to(device.torch_device), mode,
                                         device.sync_torch))
    else:
        fns = dict(fns, torch=torch_mode(torch_op, t, mode),
                   **{"torch-1t": torch_mode(torch_op, t, mode, threads=1)})
    threads = torch.get_num_threads()
    try:
        timed = measure(fns, reps, min_sample_s)
    finally:
        torch.set_num_threads(threads)
    return {"ms": {k: v["median_ms"] for k, v in timed.items()},
            "spread": {k: (v["q75_ms"] - v["q25_ms"]) / 2 for k, v in timed.items()}}


def _minor_faults() -> int:
    """Minor page faults of this process so far: each is a fresh page the OS maps in,
    which is what a newly allocated output buffer costs on its first write."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource else 0


def kernel_count(hlo_text: str) -> int:
    """Instructions of a compiled XLA program's entry computation that do work (fusions,
    dots, copies...): on XLA:CPU each is one kernel launch, which dominates tiny cells."""
    entry = hlo_text[hlo_text.index("\nENTRY"):] if "\nENTRY" in hlo_text else ""
    free = ("parameter(", "constant(", "bitcast(", "tuple(", "get-tuple-element(")
    return sum(1 for line in entry.splitlines()[1:]
               if " = " in line and not any(op in line for op in free))


def summarize(samples, inner: int = 1, faults=None) -> dict:
    ms = np.asarray(samples) * 1e3
    q25, med, q75 = np.percentile(ms, [25, 50, 75])
    out = {
        "median_ms": float(med), "q25_ms": float(q25), "q75_ms": float(q75),
        "min_ms": float(ms.min()), "max_ms": float(ms.max()),
        "samples_ms": [float(v) for v in ms], "inner": inner,
    }
    if faults:
        out["faults_per_call"] = float(np.median(faults))
    return out


def forward_and_gradient_seconds(forward: Callable, extents: tuple) -> tuple[float, float]:
    """Seconds to trace, lower and compile ``forward`` and the gradient of sum(y**2) on a
    ``[2, 1, *extents]`` float32 input."""
    import jax
    import jax.numpy as jnp

    x = jax.ShapeDtypeStruct((2, 1) + tuple(extents), jnp.float32)
    seconds = []
    for fn in (forward, jax.grad(lambda a: jnp.sum(forward(a) ** 2))):
        start = time.perf_counter()
        jax.jit(fn).lower(x).compile()
        seconds.append(time.perf_counter() - start)
    return seconds[0], seconds[1]


def torch_to_numpy(case: Case, y) -> np.ndarray:
    """A torch result (channels-first) as float64 NumPy in the cell's memory layout."""
    import torch

    return case.to_memory(y.detach().to("cpu", torch.float64).numpy())


def make_input(case: Case, seed: int) -> np.ndarray:
    """Channels-first float32 values as `case.values` says, representable in the cell's dtype."""
    import torch

    x = np.random.default_rng(seed).standard_normal(case.shape, dtype=np.float32)
    if case.values == "ties":
        x = np.round(np.maximum(x, 0) * 4) / 4
    if case.dtype not in ("float32", "float64"):
        x = torch.from_numpy(x).to(getattr(torch, case.dtype)).to(torch.float32).numpy()
    return x


def run_case(case: Case, sides: dict[str, str | None], device: Device, *, modes=MODES,
             reps: int = 15, min_sample_s: float = 0.01, seed: int = 0,
             budget_s: float | None = None, first_reps: int = 3,
             status: Callable[[str], None] = lambda s: None,
             tick: Callable[[], None] = lambda: None) -> list[dict]:
    """Check and time every side of `case` in each mode; one result dict per mode.

    `sides` maps a side's name to None (run it) or the reason it cannot run. In the
    eager modes each side's first call is also timed, `first_reps` times (after clearing
    JAX's caches), and jaxpool's first call under `jax.jit` beside it.
    """
    import jax
    import jax.numpy as jnp
    import torch

    x32 = make_input(case, seed)
    xj = jax.device_put(jnp.asarray(case.to_memory(x32), dtype=case.dtype), device.jax_device)
    where = "cpu" if device.torch_missing else device.torch_device
    xt = torch.from_numpy(x32).to(where, getattr(torch, case.dtype))
    if case.channels_last:
        xt = xt.contiguous(memory_format=torch.channels_last)
    x64 = torch.from_numpy(x32.astype(np.float64))
    op = case.torch_op()
    built = _build_sides(case, sides)

    results = []
    for mode in modes:
        eager = mode in EAGER_MODES
        base = mode.removeprefix("eager-")  # the quantity an eager mode computes
        status(f"{case.label} | {mode} | reference")
        ref = torch_to_numpy(case, torch_mode(op, x64, base)())
        entries, thunks = {}, {}
        for name, (state, info, fn) in built.items():
            if eager and name in CANDIDATES:
                continue  # a candidate is a strategy for jaxpool's compiled programs
            entry = {"status": state}
            entries[name] = entry
            if state != "ok":
                entry["note" if state == "unsupported" else "error"] = info
                continue
            if info:
                entry["notes"] = list(info)
            status(f"{case.label} | {mode} | {'first calls of' if eager else 'compiling'} {name}")
            try:
                if name in TORCH_SIDES:
                    thunk = torch_mode(op, xt, base, device.sync_torch, device.torch_threads(name))
                    entry["compile_s"] = 0.0
                elif eager:
                    thunk = (lambda f=jax_mode(fn, base): f(xj).block_until_ready())
                else:
                    t0 = time.perf_counter()
                    compiled = jax.jit(jax_mode(fn, mode)).lower(xj).compile()
                    entry["compile_s"] = time.perf_counter() - t0
                    entry["kernels"] = kernel_count(compiled.as_text())
                    thunk = (lambda c=compiled: c(xj).block_until_ready())
                if eager:
                    ms, compiles, y = first_calls(thunk, name not in TORCH_SIDES, first_reps,
                                                  budget_s)
                    entry.update(first_ms=float(np.median(ms)), first_samples_ms=ms,
                                 first_compiles=compiles)
                    if name == "jaxpool":
                        ms, _, _ = first_calls(
                            lambda: jax.jit(jax_mode(fn, base))(xj).block_until_ready(),
                            True, first_reps, budget_s)
                        entry.update(jit_first_ms=float(np.median(ms)), jit_first_samples_ms=ms)
                else:
                    y = thunk()
                y = torch_to_numpy(case, y) if name in TORCH_SIDES else np.asarray(y, np.float64)
            except Exception as exc:  # noqa: BLE001  a failing peer is reported, not fatal
                entry.update(status="error", error=f"{type(exc).__name__}: {str(exc)[:300]}")
                continue
            problem = None if name == "floor" else check(y, ref, case.dtype)
            if problem:
                entry.update(status="wrong", error=problem)
            else:
                thunks[name] = thunk
        del ref
        if eager:  # each side's caches were cleared by the later sides' first calls
            for thunk in thunks.values():
                thunk()
        status(f"{case.label} | {mode} | timing")
        timed = measure(thunks, reps, min_sample_s, tick=tick, budget_s=budget_s)
        for name, stats in timed.items():
            entries[name].update(stats)
        results.append(_result(case, mode, entries, device))
        del thunks, timed
        gc.collect()
    return results


def _build_sides(case: Case, sides: dict[str, str | None]) -> dict[str, tuple]:
    """Per side: (state, notes or reason, function of the input or None)."""
    built = {}
    for name, why in sides.items():
        if why is not None:
            built[name] = ("missing", why, None)
        elif name in TORCH_SIDES:
            built[name] = ("ok", None, None)
        else:
            try:
                fn, notes = JAX_SIDES[name](case)
                built[name] = ("ok", notes, fn)
            except Unsupported as exc:
                built[name] = ("unsupported", str(exc), None)
            except Exception as exc:  # noqa: BLE001  a peer's constructor may reject the cell in any way
                built[name] = ("error", f"{type(exc).__name__}: {exc}", None)
    return built


class _Compiles:
    """The XLA programs this process has compiled, counted from JAX's monitoring events."""

    total = 0
    listening = False

    @classmethod
    def so_far(cls) -> int:
        if not cls.listening:
            import jax

            jax.monitoring.register_event_duration_secs_listener(cls._listen)
            cls.listening = True
        return cls.total

    @classmethod
    def _listen(cls, event: str, duration: float, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            cls.total += 1


def first_calls(thunk, fresh: bool, reps: int, budget_s: float | None = None):
    """Time the first call of `thunk`: (milliseconds of each, XLA programs the first one
    compiled, the last result).

    `fresh`: JAX's caches are cleared before each call, so that each one traces and
    compiles again (as in a new process, less its start-up), `reps` times; otherwise
    (torch, which has no such caches) only the one first call is a first call. Stops early
    once the calls took `budget_s` seconds in all.
    """
    import jax

    samples, compiles, y = [], None, None
    for _ in range(reps if fresh else 1):
        if fresh:
            jax.clear_caches()
        before = _Compiles.so_far()
        t0 = time.perf_counter()
        y = thunk()
        samples.append((time.perf_counter() - t0) * 1e3)
        compiles = _Compiles.so_far() - before if compiles is None else compiles
        if budget_s is not None and sum(samples) > budget_s * 1e3:
            break
    return samples, compiles, y


def _result(case: Case, mode: str, entries: dict, device: Device) -> dict:
    def med(name):
        e = entries.get(name)
        return e.get("median_ms") if e and e["status"] == "ok" else None

    peers = {n: med(n) for n in PEERS if med(n) is not None}
    best = min(peers, key=peers.get) if peers else None
    jp, fl = med("jaxpool"), med("floor")
    row = {
        "cell": case.label, "op": case.op, "mode": mode, "dtype": case.dtype,
        "channels_last": case.channels_last, "shape": list(case.shape),
        "bytes": case.nbytes, "device": device.kind, "sides": entries,
        "best_peer": best,
        "ratio_peer": jp / peers[best] if jp is not None and best else None,
        "ratio_floor": jp / fl if jp is not None and fl else None,
    }
    if mode in EAGER_MODES:
        torches = {n: peers[n] for n in TORCH_SIDES if n in peers}
        mine = entries.get("jaxpool", {})
        row.update(
            ratio_peer=None,  # eager calls have their own targets
            best_torch=min(torches, key=torches.get) if torches else None,
            ratio_torch=jp / min(torches.values()) if jp is not None and torches else None,
            ratio_jit=(mine["first_ms"] / mine["jit_first_ms"]
                       if mine.get("status") == "ok" and mine.get("jit_first_ms") else None),
        )
    return row
