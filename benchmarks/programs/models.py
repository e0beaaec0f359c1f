"""Whole training steps: small real-shaped models with jaxpool's layers against the same
models with the layers a JAX user would otherwise write, and against torch.

Run from the repository root:

    python -m benchmarks.programs.models                          # every model, table to stdout
    python -m benchmarks.programs.models --torch-compile          # and torch.compile (slow to compile)
    python -m benchmarks.programs.models --markdown BENCHMARKS.md # and into its section
    python -m benchmarks.programs.models --device gpu             # on a GPU (torch on CUDA)

Each model (``benchmarks.programs.model_zoo``) is written three ways with the same architecture: Flax
with ``jaxpool.linen``'s layers, Flax with the peer's (``flax.linen.max_pool``/``avg_pool``,
``jnp.mean``, ``jax.image``, ``jnp.pad``, slicing or reshaping where nothing else exists),
and torch; the weights are Flax's initial ones, copied into torch by
``parity.to_torch_weights``. Before anything is timed, each side's loss and gradient norm at
those weights is compared with torch's: a side that differs is ``wrong`` and not timed.

A step is the loss, its gradient with respect to the parameters, and an Adam update (optax;
``torch.optim.Adam``), jitted as one program on the JAX sides; torch's runs eagerly, and
with ``--torch-compile`` also through ``torch.compile`` (where that compiles here). The
sides are timed in one process (``benchmarks.runner.measure``), the JAX sides interleaved
with each other, then torch's with each other (torch's idle OpenMP threads slow the next XLA
program on a loaded machine), on the CPU torch both on every core and on one thread: median
and half the interquartile range. Compile time: tracing, lowering and compiling the step (JAX), the
first call (torch.compile). Peak memory: JAX, the compiled program's own count
(``memory_analysis().peak_memory_in_bytes``: arguments, outputs and temporaries as XLA
assigned them); torch on the CPU, the parameters, optimizer state and batch plus the largest
total of what the step allocates (torch's profiler with ``profile_memory``); torch on a GPU,
``torch.cuda.max_memory_allocated``. Where jaxpool's step is over 1.0x its peer's, the step
is timed again with each layer kind swapped to the peer's, one at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import math
import os
import shlex
import sys
import time

import numpy as np

from benchmarks import machine
from benchmarks.programs.model_zoo import MODELS, PEER_CALLS, Layers, Spec, loss_fns
from benchmarks.report import markers, splice
from benchmarks.runner import Device, measure

SIDES = ("jaxpool", "peer", "torch", "torch.compile")
TITLES = {"jaxpool": "jaxpool", "peer": "JAX peer", "torch": "torch",
          "torch.compile": "torch.compile"}
LOSS_RTOL = 1e-4   # float32 losses summed in other orders
GRAD_RTOL = 1e-3   # the gradient norm, through a whole network
LEARNING_RATE = 1e-3


def _jax_batch(batch: dict, device: Device) -> dict:
    """The batch for the Flax models: float images channels-last, labels as they are."""
    import jax
    import jax.numpy as jnp

    out = {}
    for key, value in batch.items():
        if value.dtype.kind == "f" and value.ndim >= 4:
            value = np.moveaxis(value, 1, -1)
        out[key] = jax.device_put(jnp.asarray(value), device.jax_device)
    return out


def jax_step(spec: Spec, layers: Layers, tiny: bool):
    """step(params, opt_state, batch) -> (params, opt_state, loss, gradient norm), and the
    optimizer."""
    import jax
    import optax

    module = spec.flax_module(layers, tiny)
    jax_loss, _ = loss_fns(spec)
    tx = optax.adam(LEARNING_RATE)

    def apply(params, x):
        return module.apply({"params": params}, x)

    def step(params, opt_state, batch):
        value, grads = jax.value_and_grad(lambda p: jax_loss(apply, p, batch))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value, _norm(grads)

    return step, tx


def _norm(tree):
    import optax

    tree_norm = getattr(getattr(optax, "tree", None), "norm", None)  # optax >= 0.2.5
    return tree_norm(tree) if tree_norm else optax.global_norm(tree)


def initial_variables(module, x, seed: int = 0) -> dict:
    """The model's variables, drawn with NumPy: normal kernels scaled by 1/sqrt(fan-in),
    small normal biases. (Flax's own init compiles a program of its own, as long to
    compile as the step.)"""
    import jax

    rng = np.random.default_rng(seed)
    shapes = jax.eval_shape(module.init, jax.random.key(0), x)

    def draw(path, leaf):
        scale = 0.05 if path[-1].key == "bias" else 1 / math.sqrt(math.prod(leaf.shape[:-1]))
        return (scale * rng.standard_normal(leaf.shape)).astype(leaf.dtype)

    return jax.tree_util.tree_map_with_path(draw, shapes)


def _jax_peak_bytes(compiled) -> int | None:
    try:
        m = compiled.memory_analysis()
    except Exception:  # noqa: BLE001  not every backend reports it
        return None
    if m is None:
        return None
    peak = getattr(m, "peak_memory_in_bytes", 0)
    return int(peak or (m.argument_size_in_bytes + m.output_size_in_bytes
                        + m.temp_size_in_bytes - m.alias_size_in_bytes))


def _tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _torch_peak_bytes(step, model, opt, batch: dict, device: Device) -> int | None:
    """Bytes live at the peak of one torch step (see the module docstring)."""
    import torch

    if device.kind == "gpu":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        return int(torch.cuda.max_memory_allocated())
    from torch.profiler import ProfilerActivity, profile

    state = [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]
    held = _tensor_bytes([*model.parameters(), *state, *batch.values()])
    opt.zero_grad(set_to_none=True)  # the step's own zero_grad frees nothing then
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    peak = 0

    def walk(event):  # allocations made while profiling, their running total
        nonlocal peak
        fields = event.extra_fields
        if type(fields).__name__ == "_ExtraFields_Allocation":
            peak = max(peak, fields.total_allocated)
        for child in event.children:
            walk(child)

    try:
        for event in prof.profiler.kineto_results.experimental_event_tree():
            walk(event)
    except AttributeError:  # a torch without this profiler API
        return None
    return held + int(peak)


def _with_threads(thunk, threads: int):
    """``thunk`` run on ``threads`` torch CPU threads (a cheap call before each step)."""
    import torch

    def run():
        torch.set_num_threads(threads)
        return thunk()
    return run


def _median(sides: dict, name: str | None) -> float | None:
    e = sides.get(name, {}) if name else {}
    return e.get("median_ms") if e.get("status") == "ok" else None


def _fastest(sides: dict, name: str) -> str | None:
    """``name`` or ``name-1t`` (one torch thread), whichever was faster."""
    timed = [n for n in (name, f"{name}-1t") if _median(sides, n) is not None]
    return min(timed, key=lambda n: _median(sides, n)) if timed else None


def _close(a: float, b: float, rtol: float) -> bool:
    return math.isfinite(a) and abs(a - b) <= rtol * max(1.0, abs(b))


@contextlib.contextmanager
def _quiet_stderr():
    """Torch's profiler writes a line per start and stop to file descriptor 2."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def run_model(spec: Spec, device: Device, *, tiny: bool = False, reps: int = 15,
              min_sample_s: float = 0.02, torch_compile: bool = False,
              swaps: str = "misses", status=lambda s: None) -> dict:
    """Check and time one model's step on every side; one result dict."""
    import jax
    import torch

    import parity

    batch_np = spec.batch(tiny)
    batch = _jax_batch(batch_np, device)
    module = spec.flax_module(Layers("jaxpool"), tiny)
    variables = initial_variables(module, batch["x"])
    params = jax.device_put(variables["params"], device.jax_device)
    where = "cpu" if device.torch_missing else device.torch_device
    model = spec.torch_module(tiny)
    parity.to_torch_weights(variables, model, model=module,
                            x=np.asarray(jax.device_get(batch["x"])))
    model = model.to(where)
    tbatch = {k: torch.from_numpy(v).to(where) for k, v in batch_np.items()}
    _, torch_loss = loss_fns(spec)
    sync = device.sync_torch if where != "cpu" else (lambda: None)

    # torch at the initial weights: the reference loss and gradient norm
    reference = copy.deepcopy(model)
    value = torch_loss(reference, tbatch)
    value.backward()
    ref_loss = float(value.detach())
    ref_norm = float(torch.sqrt(sum(p.grad.double().square().sum()
                                    for p in reference.parameters())))
    del reference, value

    row = {"model": spec.name, "title": spec.title,
           "input": "x".join(map(str, spec.input_shape(tiny))),
           "params": int(sum(np.size(v) for v in jax.tree.leaves(params))),
           "peer_calls": [PEER_CALLS[k] for k in spec.kinds],
           "loss": ref_loss, "grad_norm": ref_norm, "sides": {}}
    sides, thunks = row["sides"], {}

    def jax_side(name, layers):
        status(f"{spec.name}: compiling {name}")
        step, tx = jax_step(spec, layers, tiny)
        opt_state = tx.init(params)
        t0 = time.perf_counter()
        compiled = jax.jit(step).lower(params, opt_state, batch).compile()
        entry = {"status": "ok", "compile_s": time.perf_counter() - t0,
                 "peak_bytes": _jax_peak_bytes(compiled)}
        _, _, loss, norm = compiled(params, opt_state, batch)
        entry.update(loss=float(loss), grad_norm=float(norm))
        return entry, (lambda: jax.block_until_ready(compiled(params, opt_state, batch)))

    for name in ("jaxpool", "peer"):
        try:
            sides[name], thunk = jax_side(name, Layers(name))
        except Exception as exc:  # noqa: BLE001  a side that fails is reported, not fatal
            sides[name] = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        thunks[name] = thunk

    def torch_side(name, net):
        opt = torch.optim.Adam(net.parameters(), lr=LEARNING_RATE)

        def step():
            opt.zero_grad(set_to_none=True)
            value = torch_loss(net, tbatch)
            value.backward()
            opt.step()
            sync()
            return value

        # the first step's loss and gradient are at the initial weights
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        value = torch_loss(net, tbatch)
        value.backward()
        sync()
        compile_s = time.perf_counter() - t0
        norm = float(torch.sqrt(sum(p.grad.double().square().sum() for p in net.parameters())))
        opt.step()
        entry = {"status": "ok", "loss": float(value.detach()), "grad_norm": norm,
                 "compile_s": compile_s if name == "torch.compile" else 0.0}
        return entry, step, opt

    torch_opts = {}
    for name in ("torch", "torch.compile") if torch_compile else ("torch",):
        if device.torch_missing:
            sides[name] = {"status": "missing", "error": device.torch_missing}
            continue
        status(f"{spec.name}: {'compiling' if name != 'torch' else 'first step of'} {name}")
        net = copy.deepcopy(model)
        try:
            if name == "torch.compile":
                import torch._dynamo

                torch._dynamo.reset()
                compiled_net = torch.compile(net)
                entry, thunk, opt = torch_side(name, compiled_net)
            else:
                entry, thunk, opt = torch_side(name, net)
        except Exception as exc:  # noqa: BLE001  torch.compile fails on some machines and graphs
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            sides[name] = {"status": "error", "error": f"{type(exc).__name__}: {first}"[:300]}
            continue
        sides[name] = entry
        torch_opts[name] = (net, opt, thunk)
        if device.kind == "gpu":
            thunks[name] = thunk
            continue
        # On a loaded machine torch's parallel kernels can stall: all cores and one thread
        thunks[name] = _with_threads(thunk, device.threads)
        if device.threads > 1:
            sides[f"{name}-1t"] = dict(entry, compile_s=0.0)
            thunks[f"{name}-1t"] = _with_threads(thunk, 1)

    for name, entry in sides.items():
        if entry["status"] != "ok" or name == "torch":
            continue
        problems = []
        if not _close(entry["loss"], ref_loss, LOSS_RTOL):
            problems.append(f"loss {entry['loss']:.7g}, torch {ref_loss:.7g}")
        if not _close(entry["grad_norm"], ref_norm, GRAD_RTOL):
            problems.append(f"gradient norm {entry['grad_norm']:.7g}, torch {ref_norm:.7g}")
        if problems:
            entry.update(status="wrong", error="; ".join(problems))
            thunks.pop(name, None)

    # The JAX sides interleaved with each other, then torch's with each other: torch's
    # OpenMP threads, idle between its calls, slow the next XLA program on a loaded machine.
    status(f"{spec.name}: timing")
    try:
        for group in (("jaxpool", "peer"), tuple(n for n in thunks if n.startswith("torch"))):
            timed = measure({n: thunks[n] for n in group if n in thunks}, reps, min_sample_s)
            for name, stats in timed.items():
                sides[name].update(stats)
    finally:
        torch.set_num_threads(device.threads)
    for name, (net, opt, thunk) in torch_opts.items():
        if sides[name]["status"] == "ok":
            with _quiet_stderr():
                sides[name]["peak_bytes"] = _torch_peak_bytes(thunk, net, opt, tbatch, device)

    jp = _median(sides, "jaxpool")
    for other, key in (("peer", "ratio_peer"), ("torch", "ratio_torch"),
                       ("torch.compile", "ratio_torch_compile")):
        best = _fastest(sides, other)
        row[key] = jp / _median(sides, best) if jp and best else None

    if swaps == "all" or (swaps == "misses" and (row["ratio_peer"] or 0) > 1.0):
        row["swaps"] = _swaps(spec, jax_side, thunks, reps, min_sample_s, status)
    return row


def _swaps(spec: Spec, jax_side, thunks: dict, reps: int, min_sample_s: float,
           status) -> dict:
    """Median ms of jaxpool's step with each of the model's layer kinds taken from the
    peer, one at a time, timed beside jaxpool's and the peer's own steps."""
    if "jaxpool" not in thunks or "peer" not in thunks:
        return {}
    timed = {"jaxpool": thunks["jaxpool"], "peer": thunks["peer"]}
    for kind in spec.kinds:
        try:
            _, timed[kind] = jax_side(f"jaxpool with the peer's {kind}",
                                      Layers("jaxpool", (kind,)))
        except Exception as exc:  # noqa: BLE001
            print(f"{spec.name}: swapping {kind} failed: {exc}", file=sys.stderr)
    status(f"{spec.name}: timing the swaps")
    return {name: stats["median_ms"]
            for name, stats in measure(timed, reps, min_sample_s).items()}


# ---- report ---------------------------------------------------------------------------

def _ms(sides: dict, name: str) -> str:
    """The side's median ± half its IQR; a torch side's faster thread count."""
    best = _fastest(sides, name) or name
    entry = sides.get(best)
    if not entry:
        return ""
    if entry.get("status") != "ok" or "median_ms" not in entry:
        return {"wrong": "wrong", "error": "fails", "missing": "-"}.get(entry.get("status"), "")
    half = (entry["q75_ms"] - entry["q25_ms"]) / 2
    return f"{entry['median_ms']:.3g} ±{half:.2g}" + (" (1t)" if best.endswith("-1t") else "")


def _ratio(value: float | None) -> str:
    return f"{value:.2f}x" if value else ""


def markdown(rows: list[dict], meta: dict) -> str:
    sides = [s for s in SIDES if any(s in r["sides"] for r in rows)]
    lines = [
        f"Run of {meta['date']} on {meta['machine']}; {meta['versions']}. "
        f"Command: `{meta['command']}` ({meta['elapsed_s'] / 60:.1f} min; load average "
        f"{meta['load'][0]:.1f} at the start, {meta['load'][1]:.1f} at the end).",
        "",
        f"Milliseconds per training step (loss, gradient, Adam update; jitted on the JAX "
        f"sides): median of {meta['reps']} samples ± half the interquartile range, the "
        "JAX sides interleaved, then torch's; float32, " + meta["where"]
        + (" A torch cell shows the faster of all cores and one thread (1t: on a loaded "
           "machine torch's parallel kernels can stall)." if meta["device"] == "cpu" else "")
        + " Compile: seconds to trace, lower and compile the step (torch.compile: its "
        "first step). Peak: MB live at the step's peak (JAX: the "
        "compiled program's memory_analysis; torch: parameters, optimizer state and batch "
        "plus the profiler's peak of the step's allocations"
        + (", CUDA's max_memory_allocated on a GPU" if meta["device"] == "gpu" else "")
        + ").",
        "",
        "| model | input | " + " | ".join(TITLES[s] for s in sides)
        + " | jaxpool / JAX peer | jaxpool / torch | compile s: " + ", ".join(
            TITLES[s] for s in sides if s != "torch")
        + " | peak MB: " + ", ".join(TITLES[s] for s in sides) + " |",
        "|---|---|" + "---|" * (len(sides) + 4),
    ]
    for r in rows:
        s = r["sides"]
        compiles = ", ".join(f"{s[n]['compile_s']:.1f}" if s.get(n, {}).get("compile_s")
                             else "-" for n in sides if n != "torch")
        peaks = ", ".join(f"{s[n]['peak_bytes'] / 1e6:.1f}" if s.get(n, {}).get("peak_bytes")
                          else "-" for n in sides)
        lines.append(f"| {r['title']} | {r['input']} | "
                     + " | ".join(_ms(s, n) for n in sides)
                     + f" | {_ratio(r['ratio_peer'])} | {_ratio(r['ratio_torch'])} | "
                     f"{compiles} | {peaks} |")
    met = [r for r in rows if r["ratio_peer"] is not None and r["ratio_peer"] <= 1.0]
    timed = [r for r in rows if r["ratio_peer"] is not None]
    lines += ["", f"Target (jaxpool's step at most 1.0x its JAX peer's): {len(met)} of "
              f"{len(timed)} models."]

    lines += ["", "Checked before timing, at the initial weights: each side's loss and "
              "gradient norm against torch's (relative difference; `wrong` above 1e-4 on the "
              "loss or 1e-3 on the norm).", "",
              "| model | parameters | torch loss | " + " | ".join(
                  f"{TITLES[n]} loss, grad norm" for n in sides if n != "torch") + " |",
              "|---|---|---|" + "---|" * (len(sides) - 1)]
    for r in rows:
        cells = []
        for n in sides:
            if n == "torch":
                continue
            e = r["sides"].get(n, {})
            if "loss" in e:
                dl = abs(e["loss"] - r["loss"]) / max(1.0, abs(r["loss"]))
                dg = abs(e["grad_norm"] - r["grad_norm"]) / max(1.0, abs(r["grad_norm"]))
                cells.append(f"{dl:.0e}, {dg:.0e}")
            else:
                cells.append(e.get("status", ""))
        lines.append(f"| {r['title']} | {r['params']:,} | {r['loss']:.4f} | "
                     + " | ".join(cells) + " |")

    swapped = [r for r in rows if r.get("swaps")]
    if swapped:
        lines += ["", "Steps with one layer kind swapped to the peer's (median ms, timed "
                  "beside jaxpool's and the peer's own steps again):", ""]
        for r in swapped:
            sw = r["swaps"]
            parts = [f"with the peer's {k}: {v:.3g} ({v / sw['jaxpool']:.2f}x)"
                     for k, v in sw.items() if k not in ("jaxpool", "peer")]
            lines.append(f"- {r['title']}: jaxpool {sw['jaxpool']:.3g}, peer {sw['peer']:.3g}; "
                         + "; ".join(parts))
    failures = [(r, n, e) for r in rows for n, e in r["sides"].items()
                if e.get("status") in ("wrong", "error") and n in TITLES]
    if failures:
        lines += ["", "Not timed:", ""]
        lines += [f"- {r['title']}, {TITLES[n]}: {e['status']} ({e['error']})"
                  for r, n, e in failures]
    lines += ["", "The JAX peer's layers: " + "; ".join(
        f"{r['title']}: {', '.join(dict.fromkeys(r['peer_calls']))}" for r in rows) + "."]
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.programs.models",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma-separated subset of {','.join(MODELS)}")
    p.add_argument("--reps", type=int, default=None,
                   help="interleaved samples per side (default 15, --tiny 3)")
    p.add_argument("--min-sample-ms", type=float, default=None,
                   help="each sample repeats the step to last this long (default 20, --tiny 0)")
    p.add_argument("--tiny", action="store_true",
                   help="tiny shapes and widths: a check that everything runs (the tests)")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                   help="where jax and torch run (gpu: torch on CUDA)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: the cores this process may use)")
    p.add_argument("--torch-compile", action="store_true",
                   help="also time torch.compile's step (minutes of compiling)")
    p.add_argument("--swaps", choices=("misses", "all", "none"), default="misses",
                   help="time jaxpool's step with each layer kind swapped to the peer's: on "
                   "the models over 1.0x the peer (default), on all, or on none")
    p.add_argument("--markdown", default=None, metavar="FILE",
                   help="put the tables between this file's models markers (appended if it "
                   "has none), e.g. BENCHMARKS.md")
    p.add_argument("--section", default=None,
                   help="the markers' name (default models, or models-gpu with --device gpu)")
    p.add_argument("--json", default=None, metavar="FILE", help="write every sample here")
    args = p.parse_args(argv)
    names = [s.strip() for s in args.models.split(",") if s.strip()]
    bad = [n for n in names if n not in MODELS]
    if bad or not names:
        p.error(f"--models takes a comma-separated subset of {','.join(MODELS)}, "
                f"got {args.models!r}")
    args.models = [n for n in MODELS if n in names]
    if args.reps is None:
        args.reps = 3 if args.tiny else 15
    if args.min_sample_ms is None:
        args.min_sample_ms = 0.0 if args.tiny else 20.0
    if args.reps < 1:
        p.error(f"--reps must be >= 1, got {args.reps}")
    if args.min_sample_ms < 0:
        p.error(f"--min-sample-ms must be >= 0, got {args.min_sample_ms}")
    if args.section is None:
        args.section = "models-gpu" if args.device == "gpu" else "models"
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    started, load = time.perf_counter(), os.getloadavg()[0]
    try:
        device = Device(args.device, args.threads)
    except RuntimeError as exc:
        print(f"no {args.device} device: {exc}", file=sys.stderr)
        return 2
    import jax
    import jax.numpy as jnp

    jax.jit(lambda a: a + 1).lower(jnp.ones(2)).compile()  # the first compile's start-up
    rows = []
    for name in args.models:
        t0 = time.perf_counter()
        rows.append(run_model(MODELS[name], device, tiny=args.tiny, reps=args.reps,
                              min_sample_s=args.min_sample_ms / 1e3,
                              torch_compile=args.torch_compile, swaps=args.swaps,
                              status=lambda s: print(s, file=sys.stderr, flush=True)))
        print(f"{name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    meta = {
        "date": datetime.date.today().isoformat(),
        "machine": machine.describe(args.device, device.jax_device),
        "device": args.device,
        "where": device.in_words(),
        "versions": machine.versions(("torch", "flax", "optax")),
        "command": shlex.join(["python", "-m", "benchmarks.programs.models", *argv]),
        "reps": args.reps,
        "min_sample_ms": args.min_sample_ms,
        "elapsed_s": time.perf_counter() - started,
        "load": [load, os.getloadavg()[0]],
    }
    text = markdown(rows, meta)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": rows}, f, indent=1)
    if args.markdown:
        splice(args.markdown, text, *markers(args.section))
    wrong = [r for r in rows if r["sides"].get("jaxpool", {}).get("status") != "ok"]
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
