"""GPU checks for jaxpool: one command, under 8 minutes on one GPU.

    python -m benchmarks.programs.gpu_check --out gpu-results [--quick | --full] [--markdown BENCHMARKS.md]

1. Determinism. Twice, each time in a fresh process with
   ``XLA_FLAGS=--xla_gpu_deterministic_ops=true`` (set before JAX is imported): a
   WGAN-GP-style double backward through ``jaxpool.adaptive_avg_pool2d`` (ragged windows:
   64x256x15x15 -> 4 and 16x64x50x50 -> 9), and a double backward through a ReLU followed
   by ``jaxpool.max_pool2d(3, 2, 1)`` (the ResNet stem, 64x64x112x112: after the ReLU
   most windows tie at zero), and a SegNet-style decoder's double backward through
   ``jaxpool.max_unpool2d(2)``, ``jaxpool.pad(..., "reflect")`` (ReflectionPad2d(3)) and
   ``jaxpool.interpolate(..., mode="bilinear")`` (x2, align_corners=False), the three ops
   whose backward torch refuses under ``use_deterministic_algorithms(True)``. The two
   runs must be bitwise equal, and close to torch's float64 values on the CPU.
2. ``flax.linen.max_pool``'s gradient (``select_and_scatter``) under the same flag, in its
   own process: whether XLA runs it, and if so whether two runs agree.
3. torch CUDA on the same computations: whether two plain runs agree bit for bit, and
   which backward passes ``torch.use_deterministic_algorithms(True)`` refuses.
4. A torch CNN run on JAX through torchax (``examples/torchax_train.py``'s GoogLeNet-layout
   network, float32): its WGAN-GP-style double backward under the same flag, in fresh
   processes, with ``jaxpool.torchax.install()`` (twice: bitwise equal?) and with
   torchax's own lowerings (whether XLA compiles them, and if so whether two runs agree).
   Skipped where torchax is not installed.
5. The benchmark on the GPU (jitted modes) with jaxpool, the ``reduce_window`` candidate
   (average pooling as ``lax.reduce_window``), torch CUDA, flax, keras, equinox and the
   floor, and per cell and mode which of jaxpool's own strategy and ``reduce_window`` is
   faster: the short grid (``--full``: every cell, which takes longer than 8 minutes). It
   starts no new cell once the script's time budget (``--budget-s``) is spent.
6. Spatially sharded inputs on every device of the machine (``python -m
   jaxpool.halo.check``, then with ``--plain-jit``): per-device ops (``axis_names=``) and
   the ops under plain ``jit`` on a sharded input (the partitioned primitive) against the
   unsharded call, and the collectives in each compiled program (halos only). Skipped on one device;
   ``--halo-only`` runs just this section, on CPUs too (with
   ``XLA_FLAGS=--xla_force_host_platform_device_count=8``).

Every section runs on its own: an error is printed and the next section runs. Without a
GPU every section says so and is skipped, unless ``--allow-cpu`` (a dry run on the CPU,
which says nothing about GPUs). ``--quick`` takes smaller shapes and the benchmark's tiny
smoke grid: a check that the script runs, in a minute or two.

What is printed also goes to ``OUT/gpu-report.md`` (with the date and the hardware) after
each section; ``--markdown FILE`` puts it between the GPU markers of FILE. A report made
elsewhere goes in later, without a GPU:
``python -m benchmarks.programs.gpu_check --record OUT/gpu-report.md --markdown BENCHMARKS.md``.

Exit status: 0 all ran and agreed; 1 a determinism check failed; 2 no GPU; 3 a section
raised.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import os
import re
import shlex
import subprocess
import sys
import time
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BEGIN, END = "<!-- gpu_check:begin -->", "<!-- gpu_check:end -->"
FLAG = "--xla_gpu_deterministic_ops=true"
CHILD_TIMEOUT_S = 240


# -- The computations ------------------------------------------------------------------

def wgan_cases(quick: bool):
    """(name, input shape, output size) of the adaptive-average WGAN-GP runs."""
    if quick:
        return (("avg 16x64x15x15 -> 4", (16, 64, 15, 15), 4),)
    return (("avg 64x256x15x15 -> 4", (64, 256, 15, 15), 4),
            ("avg 16x64x50x50 -> 9", (16, 64, 50, 50), 9))


def stem_shape(quick: bool) -> tuple[int, int, int, int]:
    return (8, 64, 56, 56) if quick else (64, 64, 112, 112)


def stem_name(quick: bool) -> str:
    return f"relu + max 3x3 s2 p1 on {'x'.join(map(str, stem_shape(quick)))}"


def wgan_arrays(shape, k, seed=0) -> dict[str, np.ndarray]:
    """Real and fake batches, interpolation weights and a linear critic head (float32)."""
    b, c, _, _ = shape
    rng = np.random.default_rng(seed)
    return {
        "real": rng.standard_normal(shape, dtype=np.float32),
        "fake": rng.standard_normal(shape, dtype=np.float32),
        "eps": rng.uniform(size=(b, 1, 1, 1)).astype(np.float32),
        "w": (rng.standard_normal(c * k * k) * 4.0).astype(np.float32),
        "b": np.zeros((), np.float32),
    }


def stem_arrays(shape, seed=0) -> dict[str, np.ndarray]:
    """An input and the weights of a critic head over the stem's pooled output (float32)."""
    b, c, h, w = shape
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal(shape, dtype=np.float32),
            "v": rng.standard_normal((b, c, (h + 1) // 2, (w + 1) // 2), dtype=np.float32)}


def jax_wgan(arrays: dict, k: int):
    """The critic loss with gradient penalty, and its gradient w.r.t. w, b, real, fake."""
    import jax
    import jax.numpy as jnp

    import jaxpool

    def critic(params, x):
        h = jnp.tanh(jaxpool.adaptive_avg_pool2d(x, k)).reshape(x.shape[0], -1)
        return h @ params["w"] + params["b"]

    def loss(params, real, fake, eps):
        xhat = eps * real + (1 - eps) * fake
        g = jax.grad(lambda x: critic(params, x).sum())(xhat)
        norm = jnp.sqrt(jnp.sum(g * g, axis=(1, 2, 3)) + 1e-12)
        gp = jnp.mean((norm - 1.0) ** 2)
        return jnp.mean(critic(params, fake)) - jnp.mean(critic(params, real)) + 10.0 * gp

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
    args = ({"w": arrays["w"], "b": arrays["b"]}, arrays["real"], arrays["fake"], arrays["eps"])
    compiled = step.lower(*args).compile()
    value, (gp, greal, gfake) = compiled(*args)
    out = {"loss": value, "w": gp["w"], "b": gp["b"], "real": greal, "fake": gfake}
    return {n: np.asarray(v) for n, v in out.items()}, compiled.as_text()


def torch_wgan(arrays: dict, k: int, device: str, dtype):
    """The same quantities with torch autograd."""
    import torch
    import torch.nn.functional as F

    t = {n: torch.tensor(a, device=device, dtype=dtype, requires_grad=n != "eps")
         for n, a in arrays.items()}

    def critic(x):
        return torch.tanh(F.adaptive_avg_pool2d(x, k)).flatten(1) @ t["w"] + t["b"]

    xhat = t["eps"] * t["real"] + (1 - t["eps"]) * t["fake"]
    (g,) = torch.autograd.grad(critic(xhat).sum(), xhat, create_graph=True)
    norm = torch.sqrt((g * g).sum((1, 2, 3)) + 1e-12)
    gp = ((norm - 1.0) ** 2).mean()
    loss = critic(t["fake"]).mean() - critic(t["real"]).mean() + 10.0 * gp
    grads = torch.autograd.grad(loss, [t["w"], t["b"], t["real"], t["fake"]])
    out = {"loss": loss, **dict(zip(("w", "b", "real", "fake"), grads))}
    return {n: v.detach().cpu().double().numpy() for n, v in out.items()}


def jax_stem(arrays: dict):
    """|grad|**2 of a critic over ReLU -> max_pool2d(3, 2, 1) -> tanh, and its gradient."""
    import jax
    import jax.numpy as jnp

    import jaxpool

    def critic(x, v):
        return jnp.sum(jnp.tanh(jaxpool.max_pool2d(jax.nn.relu(x), 3, 2, 1)) * v)

    def penalty(x, v):
        g = jax.grad(critic)(x, v)
        return jnp.sum(g * g)

    step = jax.jit(jax.value_and_grad(penalty, argnums=(0, 1)))
    compiled = step.lower(arrays["x"], arrays["v"]).compile()
    value, (dx, dv) = compiled(arrays["x"], arrays["v"])
    return {"penalty": np.asarray(value), "x": np.asarray(dx), "v": np.asarray(dv)}, compiled.as_text()


def torch_stem(arrays: dict, device: str, dtype):
    """The same quantities with torch autograd (double backward)."""
    import torch
    import torch.nn.functional as F

    x, v = (torch.tensor(arrays[n], device=device, dtype=dtype, requires_grad=True)
            for n in ("x", "v"))
    critic = (torch.tanh(F.max_pool2d(F.relu(x), 3, 2, 1)) * v).sum()
    (g,) = torch.autograd.grad(critic, x, create_graph=True)
    penalty = (g * g).sum()
    dx, dv = torch.autograd.grad(penalty, [x, v])
    return {n: t.detach().cpu().double().numpy() for n, t in
            (("penalty", penalty), ("x", dx), ("v", dv))}


def decoder_shape(quick: bool) -> tuple[int, int, int, int]:
    """The pooled map the decoder unpools."""
    return (4, 16, 28, 28) if quick else (16, 64, 56, 56)


def decoder_name(quick: bool) -> str:
    return (f"max_unpool2d(2) + reflect pad 3 + bilinear x2 on "
            f"{'x'.join(map(str, decoder_shape(quick)))}")


def decoder_arrays(shape, seed=0) -> dict[str, np.ndarray]:
    """Decoder features, the indices of a 2x2 max pool of an encoder map, and a critic
    head over the upsampled output (float32; int64 indices)."""
    import torch
    import torch.nn.functional as F

    b, c, h, w = shape
    rng = np.random.default_rng(seed)
    encoder = torch.from_numpy(rng.standard_normal((b, c, 2 * h, 2 * w), dtype=np.float32))
    _, indices = F.max_pool2d(encoder, 2, return_indices=True)
    return {"x": rng.standard_normal(shape, dtype=np.float32), "indices": indices.numpy(),
            "v": rng.standard_normal((b, c, 4 * h + 12, 4 * w + 12), dtype=np.float32)}


def jax_decoder(arrays: dict):
    """|grad|**2 of a critic over unpool -> reflect pad -> bilinear -> tanh, and its
    gradient (a double backward through all three)."""
    import jax
    import jax.numpy as jnp

    import jaxpool

    indices = jnp.asarray(arrays["indices"].astype(np.int32))

    def critic(x, v):
        y = jaxpool.max_unpool2d(x, indices, 2)
        y = jaxpool.pad(y, (3, 3, 3, 3), "reflect")
        y = jaxpool.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
        return jnp.sum(jnp.tanh(y) * v)

    def penalty(x, v):
        g = jax.grad(critic)(x, v)
        return jnp.sum(g * g)

    step = jax.jit(jax.value_and_grad(penalty, argnums=(0, 1)))
    compiled = step.lower(arrays["x"], arrays["v"]).compile()
    value, (dx, dv) = compiled(arrays["x"], arrays["v"])
    return {"penalty": np.asarray(value), "x": np.asarray(dx), "v": np.asarray(dv)}, compiled.as_text()


def torch_decoder(arrays: dict, device: str, dtype):
    """The same quantities with torch autograd (double backward)."""
    import torch
    import torch.nn.functional as F

    x, v = (torch.tensor(arrays[n], device=device, dtype=dtype, requires_grad=True)
            for n in ("x", "v"))
    indices = torch.tensor(arrays["indices"], device=device)
    y = F.max_unpool2d(x, indices, 2)
    y = F.interpolate(F.pad(y, (3, 3, 3, 3), "reflect"), scale_factor=2, mode="bilinear",
                      align_corners=False)
    critic = (torch.tanh(y) * v).sum()
    (g,) = torch.autograd.grad(critic, x, create_graph=True)
    penalty = (g * g).sum()
    dx, dv = torch.autograd.grad(penalty, [x, v])
    return {n: t.detach().cpu().double().numpy() for n, t in
            (("penalty", penalty), ("x", dx), ("v", dv))}


def worrying_ops(hlo: str) -> str:
    """The ops of a compiled program that a deterministic GPU run cannot take for granted."""
    found = re.findall(r"\b(select-and-scatter|scatter|gather)\(", hlo)
    return ", ".join(f"{found.count(op)} {op}" for op in sorted(set(found))) or "none"


# -- What runs in a fresh process --------------------------------------------------------

def child_determinism(path: str, quick: bool) -> int:
    """Every determinism computation once; their results to `path` (an .npz)."""
    import jax

    print(f"child: JAX devices {jax.devices()}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    out, failed = {}, False
    runs = [(name, lambda s=shape, k=k: jax_wgan(wgan_arrays(s, k), k))
            for name, shape, k in wgan_cases(quick)]
    runs.append((stem_name(quick), lambda: jax_stem(stem_arrays(stem_shape(quick)))))
    runs.append((decoder_name(quick),
                 lambda: jax_decoder(decoder_arrays(decoder_shape(quick)))))
    for name, run in runs:
        try:
            t0 = time.perf_counter()
            values, hlo = run()
        except Exception as exc:  # noqa: BLE001  report and go on to the next computation
            print(f"child: {name}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
            failed = True
            continue
        digest = hashlib.sha256(b"".join(values[n].tobytes() for n in sorted(values))).hexdigest()
        print(f"child: {name}: sha256 {digest[:16]}, {time.perf_counter() - t0:.1f} s, "
              f"scatter/gather in the compiled program: {worrying_ops(hlo)}")
        out.update({f"{name}|{n}": v for n, v in values.items()})
    np.savez(path, **out)
    return 1 if failed else 0


def child_flax_max(quick: bool) -> int:
    """flax.linen.max_pool's gradient under the environment's XLA_FLAGS, twice."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    b, c, h, w = stem_shape(quick)
    x = np.random.default_rng(0).standard_normal((b, h, w, c), dtype=np.float32)
    x = np.maximum(x, 0)  # after a ReLU: windows that tie at zero
    grad = jax.jit(jax.grad(lambda a: jnp.sum(
        jnp.tanh(nn.max_pool(a, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))) ** 2)))
    try:
        compiled = grad.lower(x).compile()
        print(f"child: compiled; scatter/gather in the program: {worrying_ops(compiled.as_text())}")
        first, second = np.asarray(compiled(x)), np.asarray(compiled(x))
    except Exception as exc:  # noqa: BLE001  the point is to show what happens
        print(f"child: flax.linen.max_pool's gradient fails: {type(exc).__name__}: "
              f"{' '.join(str(exc).split())[:400]}")
        return 0
    same = first.tobytes() == second.tobytes()
    print(f"child: flax.linen.max_pool's gradient ran; two runs {'bitwise equal' if same else 'DIFFER'}")
    return 0


def torchax_penalty(with_jaxpool: bool, quick: bool, runs: int = 1):
    """The torchax network's penalty gradient, its compiled program called ``runs`` times:
    (a list of the values by name, one per run; the compiled program's text)."""
    import importlib.util

    import jax
    import jax.numpy as jnp
    import torch

    import jaxpool.torchax as jt

    spec = importlib.util.spec_from_file_location(
        "torchax_train", os.path.join(ROOT, "examples", "torchax_train.py"))
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    torch.manual_seed(0)
    model = example.TinyGoogLeNet(8 if quick else 32)
    env = jt.torchax.default_env()
    (jt.install if with_jaxpool else jt.uninstall)(env)
    params, fn = jt.torchax.extract_jax(model, env)
    batch = 8 if quick else 64
    x = np.maximum(np.random.default_rng(0).standard_normal((batch, 3, 28, 28),
                                                           dtype=np.float32), 0)

    def penalty(params, x):
        # WGAN-GP: the input gradient's norm per example, then its gradient in the weights
        g = jax.grad(lambda a: jnp.sum(fn(params, (a,))))(x)
        return jnp.mean((jnp.sqrt(jnp.sum(g * g, axis=(1, 2, 3)) + 1e-12) - 1.0) ** 2)

    compiled = jax.jit(jax.grad(penalty)).lower(params, jnp.asarray(x)).compile()
    values = [{k: np.asarray(v) for k, v in compiled(params, jnp.asarray(x)).items()}
              for _ in range(runs)]
    return values, compiled.as_text()


def child_torchax(path: str, with_jaxpool: bool, quick: bool) -> int:
    """The torchax penalty gradient, twice in this process; the first to `path`."""
    try:
        import jaxpool.torchax  # noqa: F401
    except ImportError as exc:
        print(f"child: torchax is not installed here ({exc}): skipped")
        return 0
    label = "with jaxpool" if with_jaxpool else "torchax alone"
    try:
        (first, second), hlo = torchax_penalty(with_jaxpool, quick, runs=2)
    except Exception as exc:  # noqa: BLE001  the point is to show what happens
        print(f"child: {label}: fails: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}")
        return 0
    same = all(first[k].tobytes() == second[k].tobytes() for k in first)
    print(f"child: {label}: scatter/gather in the compiled program: {worrying_ops(hlo)}; "
          f"two runs in one process {'bitwise equal' if same else 'DIFFER'}")
    np.savez(path, **first)
    return 0


# -- The sections, run by the parent -----------------------------------------------------

class Report:
    """Prints lines and keeps them, to write as a markdown report."""

    def __init__(self, out: str | None):
        self.out, self.lines, self.tables, self.header = out, [], [], []

    def say(self, text: str = ""):
        print(text, flush=True)
        self.lines.append(text)

    def markdown(self) -> str:
        body = "\n".join(self.header) + "\n\n```\n" + "\n".join(self.lines) + "\n```\n"
        return body + "".join("\n" + t for t in self.tables)

    def write(self):
        if self.out:
            os.makedirs(self.out, exist_ok=True)
            with open(os.path.join(self.out, "gpu-report.md"), "w") as f:
                f.write(self.markdown())


def child(r: Report, args: list[str], flags: str | None) -> tuple[int | None, list[str]]:
    """Run this script with `args` in a fresh process (with XLA_FLAGS `flags` added);
    return its exit status (None if it timed out) and its output lines."""
    env = dict(os.environ)
    if flags:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flags).strip()
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "benchmarks.programs.gpu_check", *args]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=CHILD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        r.say(f"    stopped after {CHILD_TIMEOUT_S} s")
        return None, []
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    for line in lines:
        if line.startswith("child: "):
            r.say("    " + line[7:])
    if proc.returncode != 0:
        r.say(f"    exit status {proc.returncode}; the last lines:")
        for line in lines[-8:]:
            r.say("      " + line[:300])
    return proc.returncode, lines


def determinism(r: Report, tmp: str, quick: bool) -> bool:
    results = []
    for run in (1, 2):
        path = os.path.join(tmp, f"determinism-{run}.npz")
        r.say(f"run {run}:")
        code, _ = child(r, ["--child", "determinism", path] + ["--quick"] * quick, FLAG)
        if code is None or not os.path.exists(path):
            r.say("determinism: FAILED (a run did not finish)")
            return False
        results.append(dict(np.load(path)))
    ok = True
    names = sorted({key.split("|")[0] for key in results[0]} | {key.split("|")[0] for key in results[1]})
    for name in names:
        keys = [k for k in results[0] if k.startswith(name + "|")]
        same = bool(keys) and all(k in results[1] and results[0][k].tobytes() == results[1][k].tobytes()
                                  for k in keys)
        r.say(f"{name}: the two runs are {'bitwise EQUAL' if same else 'DIFFERENT'}")
        ok &= same
    ok &= len(names) == len(wgan_cases(quick)) + 2
    ok &= against_torch(r, results[0], quick)
    r.say("determinism: " + ("PASSED" if ok else "FAILED"))
    return ok


def against_torch(r: Report, got: dict, quick: bool) -> bool:
    """The first run's values against torch's, in float64 on the CPU."""
    try:
        import torch
    except ImportError:
        r.say("torch is not installed: no comparison with torch's values")
        return True
    refs = {name: torch_wgan(wgan_arrays(shape, k), k, "cpu", torch.float64)
            for name, shape, k in wgan_cases(quick)}
    refs[stem_name(quick)] = torch_stem(stem_arrays(stem_shape(quick)), "cpu", torch.float64)
    refs[decoder_name(quick)] = torch_decoder(decoder_arrays(decoder_shape(quick)), "cpu",
                                              torch.float64)
    ok = True
    for name, ref in refs.items():
        errs = {n: float(np.max(np.abs(got[f"{name}|{n}"] - ref[n])) / (np.max(np.abs(ref[n])) or 1.0))
                for n in ref if f"{name}|{n}" in got}
        if not errs:
            continue
        worst = max(errs, key=errs.get)
        close = errs[worst] < 1e-3
        r.say(f"{name}: against torch float64 on the CPU, largest relative error "
              f"{errs[worst]:.2g} (d/d{worst}) {'ok' if close else 'TOO LARGE'}")
        ok &= close
    return ok


def torchax_models(r: Report, tmp: str, quick: bool) -> bool | None:
    """jaxpool through torchax in two fresh processes (bitwise equal?), torchax alone once."""
    paths = []
    for run in (1, 2):
        path = os.path.join(tmp, f"torchax-{run}.npz")
        r.say(f"with jaxpool, process {run}:")
        child(r, ["--child", "torchax", path, "jaxpool"] + ["--quick"] * quick, FLAG)
        paths.append(path)
    r.say("torchax alone:")
    child(r, ["--child", "torchax", os.path.join(tmp, "torchax-alone.npz"), "alone"]
          + ["--quick"] * quick, FLAG)
    if not all(os.path.exists(p) for p in paths):
        return None
    a, b = (dict(np.load(p)) for p in paths)
    same = a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a)
    r.say(f"with jaxpool, the two processes are {'bitwise EQUAL' if same else 'DIFFERENT'}")
    return same


def flax_max(r: Report, quick: bool) -> None:
    child(r, ["--child", "flax-max"] + ["--quick"] * quick, FLAG)


def torch_cuda(r: Report, quick: bool) -> None:
    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        r.say("this torch build has no CUDA device: skipped")
        return
    name, shape, k = wgan_cases(quick)[0]
    arrays = wgan_arrays(shape, k)
    a, b = (torch_wgan(arrays, k, "cuda", torch.float32) for _ in range(2))
    same = all(a[n].tobytes() == b[n].tobytes() for n in a)
    r.say(f"WGAN-GP {name}, two plain runs: {'bitwise equal' if same else 'DIFFERENT bits'}")
    stem = stem_arrays(stem_shape(quick))
    a, b = (torch_stem(stem, "cuda", torch.float32) for _ in range(2))
    same = all(a[n].tobytes() == b[n].tobytes() for n in a)
    r.say(f"relu + max_pool2d(3, 2, 1) double backward, two plain runs: "
          f"{'bitwise equal' if same else 'DIFFERENT bits'}")
    decoder = decoder_arrays(decoder_shape(quick))
    a, b = (torch_decoder(decoder, "cuda", torch.float32) for _ in range(2))
    same = all(a[n].tobytes() == b[n].tobytes() for n in a)
    r.say(f"{decoder_name(quick)} double backward, two plain runs: "
          f"{'bitwise equal' if same else 'DIFFERENT bits'}")
    x = torch.tensor(stem["x"], device="cuda", requires_grad=True)
    features = torch.tensor(decoder["x"], device="cuda", requires_grad=True)
    indices = torch.tensor(decoder["indices"], device="cuda")
    backward = {
        "adaptive_avg_pool2d(4)": lambda: F.adaptive_avg_pool2d(x, 4),
        "adaptive_max_pool2d(4)": lambda: F.adaptive_max_pool2d(x, 4),
        "max_pool2d(3, 2, 1)": lambda: F.max_pool2d(x, 3, 2, 1),
        "max_unpool2d(2)": lambda: F.max_unpool2d(features, indices, 2),
        "pad(3, 'reflect') (ReflectionPad2d)": lambda: F.pad(x, (3, 3, 3, 3), "reflect"),
        "interpolate(x2, 'bilinear')": lambda: F.interpolate(
            x, scale_factor=2, mode="bilinear", align_corners=False),
    }
    torch.use_deterministic_algorithms(True)
    try:
        for label, pool in backward.items():
            try:
                pool().square().sum().backward()
                torch.cuda.synchronize()
                r.say(f"use_deterministic_algorithms(True), {label} backward: runs")
            except RuntimeError as exc:
                r.say(f"use_deterministic_algorithms(True), {label} backward: RuntimeError: "
                      f"{str(exc).splitlines()[0][:200]}")
    finally:
        torch.use_deterministic_algorithms(False)


def bench(r: Report, out: str, device: str, grid: str, time_limit_s: float,
          extra: list[str]) -> None:
    from benchmarks import cli

    folder = os.path.join(out, "bench")
    argv = ["--device", device, "--modes", "fwd,grad,gradgrad",
            "--sides", "jaxpool,reduce_window,torch,flax,keras,equinox,floor",
            "--reps", "7", "--side-budget-s", "2", "--time-limit-s", f"{time_limit_s:.0f}",
            "--grid", grid, "--out", folder, "--no-progress"] + extra
    r.say("$ python -m benchmarks " + shlex.join(argv))
    code = cli.main(argv)
    r.say(f"benchmark exit status {code}")
    table = os.path.join(folder, "results.md")
    if code == 0 and os.path.exists(table):
        with open(table) as f:
            # The chart stays in the output folder; the table is what the record keeps.
            r.tables.append("".join(line for line in f if not line.startswith("![")))


def halo_exchange(r: Report, quick: bool) -> bool | None:
    """``python -m jaxpool.halo.check`` on every device of this machine, in a fresh process,
    inside shard_map and then under plain jit (``--plain-jit``): values and derivatives
    against the unsharded call, and the collectives in each compiled program (halos only).
    Skipped on one device."""
    import jax

    n = len(jax.devices())
    if n < 2:
        r.say(f"    {n} device: the halo check needs at least 2 (on a CPU, "
              "XLA_FLAGS=--xla_force_host_platform_device_count=8 shows it)")
        return None
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    ok = True
    for route in ([], ["--plain-jit"]):
        cmd = [sys.executable, "-m", "jaxpool.halo.check", *route] + (
            ["--quick"] if quick else [])
        r.say(f"    {' '.join(cmd[1:])}")
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=CHILD_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            r.say(f"    stopped after {CHILD_TIMEOUT_S} s")
            return None
        for line in proc.stdout.strip().splitlines():
            r.say("    " + line)
        if proc.returncode not in (0, 1):
            for line in proc.stderr.strip().splitlines()[-8:]:
                r.say("      " + line[:300])
        ok &= proc.returncode == 0
    return ok


def section(r: Report, title: str, run) -> tuple[bool, object]:
    """Run one section: (whether it raised, its result). An error is printed, and the
    script goes on to the next section."""
    r.say(f"== {title}")
    t0 = time.perf_counter()
    raised, result = False, None
    try:
        result = run()
    except Exception:  # noqa: BLE001  one section's failure must not stop the others
        raised = True
        for line in traceback.format_exc().strip().splitlines()[-6:]:
            r.say("    " + line[:300])
    r.say(f"   ({time.perf_counter() - t0:.0f} s)")
    r.write()
    return raised, result


def environment(r: Report, allow_cpu: bool) -> str | None:
    """Header lines; the device the sections run on, or None to skip them."""
    import jax

    from benchmarks import machine

    gpus, why = [], ""
    try:
        gpus = jax.devices("gpu")
    except RuntimeError as exc:
        why = str(exc).splitlines()[0]
    r.header = [
        f"GPU run of {datetime.date.today().isoformat()} on "
        f"{machine.describe('gpu', gpus[0] if gpus else None)}; {machine.versions()}.",
        "",
        f"Command: `python -m benchmarks.programs.gpu_check {shlex.join(sys.argv[1:])}`",
    ]
    r.say(f"jax {jax.__version__}, devices: {', '.join(map(str, jax.devices()))}")
    with contextlib.suppress(ImportError):
        import torch

        r.say(f"torch {torch.__version__}, CUDA device: "
              f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}")
    if gpus:
        return "gpu"
    if allow_cpu:
        r.say(f"JAX sees no GPU ({why}); --allow-cpu: every section runs on the CPU, which "
              "says nothing about GPUs.")
        return "cpu"
    r.say(f"JAX sees no GPU ({why}): every section below needs one and is skipped "
          "(--allow-cpu runs them on the CPU).")
    return None


def splice(markdown_file: str, text: str):
    from benchmarks.report import splice as put

    put(markdown_file, text, BEGIN, END)


def main(argv=None) -> int:
    started = time.perf_counter()
    p = argparse.ArgumentParser(prog="python -m benchmarks.programs.gpu_check",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="gpu-results", metavar="DIR")
    p.add_argument("--quick", action="store_true",
                   help="smaller shapes and the benchmark's smoke grid: does the script run?")
    p.add_argument("--full", action="store_true", help="the benchmark's full grid")
    p.add_argument("--budget-s", type=float, default=390.0, metavar="S",
                   help="the benchmark starts no new cell once the script has run this long "
                   "(default 390, which keeps the whole under 8 minutes)")
    p.add_argument("--bench-args", default="", help="more arguments for the benchmark, quoted")
    p.add_argument("--skip-bench", action="store_true")
    p.add_argument("--markdown", default=None, metavar="FILE",
                   help="put the report between the GPU markers of FILE")
    p.add_argument("--record", default=None, metavar="REPORT",
                   help="only put this saved gpu-report.md into --markdown (no GPU needed)")
    p.add_argument("--allow-cpu", action="store_true",
                   help="without a GPU, run every section on the CPU (a dry run of this script)")
    p.add_argument("--halo-only", action="store_true",
                   help="only the halo-exchange check (section 6); runs on CPUs too")
    p.add_argument("--child", choices=("determinism", "flax-max", "torchax"),
                   help=argparse.SUPPRESS)
    p.add_argument("child_args", nargs="*", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child == "determinism":
        return child_determinism(args.child_args[0], args.quick)
    if args.child == "flax-max":
        return child_flax_max(args.quick)
    if args.child == "torchax":
        return child_torchax(args.child_args[0], args.child_args[1] == "jaxpool", args.quick)
    if args.record:
        if not args.markdown:
            p.error("--record needs --markdown")
        with open(args.record) as f:
            splice(args.markdown, f.read())
        print(f"put {args.record} into {args.markdown}")
        return 0

    # The child processes need GPU memory of their own while this one holds some.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    r = Report(args.out)
    device = environment(r, args.allow_cpu)
    r.write()
    if device is None:
        return 2
    if args.halo_only:
        raised, ok = section(r, "6. spatially sharded inputs: halo exchange only",
                             lambda: halo_exchange(r, args.quick))
        r.write()
        return 1 if ok is False else 3 if raised else 0
    tmp = os.path.join(args.out, "tmp")
    os.makedirs(tmp, exist_ok=True)
    raised, deterministic = section(r, f"1. jaxpool double backward, twice, XLA_FLAGS={FLAG}",
                                    lambda: determinism(r, tmp, args.quick))
    for title, run in (
            (f"2. flax.linen.max_pool's gradient under XLA_FLAGS={FLAG}",
             lambda: flax_max(r, args.quick)),
            ("3. torch CUDA on the same computations", lambda: torch_cuda(r, args.quick))):
        raised |= section(r, title, run)[0]
    raised_torchax, torchax_same = section(
        r, f"4. a torch CNN through torchax, double backward, XLA_FLAGS={FLAG}",
        lambda: torchax_models(r, tmp, args.quick))
    raised |= raised_torchax
    if not args.skip_bench:
        grid = "smoke" if args.quick else "full" if args.full else "short"
        limit = max(60.0, args.budget_s - (time.perf_counter() - started))
        raised |= section(r, f"5. the benchmark on the {device}, with the reduce_window "
                          f"candidate (new cells for {limit:.0f} s)",
                          lambda: bench(r, args.out, device, grid, limit,
                                        shlex.split(args.bench_args)))[0]
    raised_halo, halo_ok = section(r, "6. spatially sharded inputs: halo exchange only",
                                   lambda: halo_exchange(r, args.quick))
    raised |= raised_halo
    for name in os.listdir(tmp):
        os.remove(os.path.join(tmp, name))
    os.rmdir(tmp)
    r.say(f"gpu_check: {time.perf_counter() - started:.0f} s in all")
    r.write()
    if args.markdown:
        splice(args.markdown, r.markdown())
    print(f"wrote {os.path.join(args.out, 'gpu-report.md')}")
    if deterministic is False or torchax_same is False or halo_ok is False:
        return 1
    return 3 if raised else 0


if __name__ == "__main__":
    raise SystemExit(main())
