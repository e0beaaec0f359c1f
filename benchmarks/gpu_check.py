"""GPU checks for jaxpool, in one command on a machine with an NVIDIA GPU.

1. Runs a WGAN-GP-style double backward through ``jaxpool.adaptive_avg_pool2d``
   (ragged windows: 64x256x15x15 -> 4 and 16x64x50x50 -> 9) twice, each in a fresh
   process with ``XLA_FLAGS=--xla_gpu_exclude_nondeterministic_ops=true``, and checks
   that the two runs are bitwise equal (and close to torch's float64 CPU values).
2. Shows torch raising on the same computation under
   ``torch.use_deterministic_algorithms(True)``, and whether two plain torch CUDA runs
   agree bit for bit.
3. Runs the benchmark (``python -m benchmarks --device gpu``) with jaxpool, torch
   CUDA, keras, flax, the floor and the ``reduce_window`` candidate.

Everything printed is also written to ``OUT/gpu-report.md`` (with the date and the
hardware) as each step ends; ``--markdown BENCHMARKS.md`` puts that report between the
GPU markers of the file. A report made elsewhere can be put in later, without a GPU:
``python -m benchmarks.gpu_check --record OUT/gpu-report.md --markdown BENCHMARKS.md``.

Exit status: 0 all good; 1 the determinism check failed; 2 no GPU; 3 only the
benchmark failed.

    python -m benchmarks.gpu_check --out gpu-results [--quick] [--markdown BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import platform
import shlex
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- gpu_check:begin -->", "<!-- gpu_check:end -->"
CASES = (((64, 256, 15, 15), 4), ((16, 64, 50, 50), 9))
FLAG = "--xla_gpu_exclude_nondeterministic_ops=true"


def case_name(shape, k) -> str:
    return f"{'x'.join(map(str, shape))} -> {k}"


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


def jax_wgan(arrays: dict, k: int):
    """The critic loss with gradient penalty and its gradient w.r.t. w, b, real, fake."""
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


def child(index: int, path: str, allow_cpu: bool = False) -> int:
    """One determinism run, meant for a fresh process with XLA_FLAGS set."""
    import jax

    if jax.devices()[0].platform != "gpu" and not allow_cpu:
        print(f"child: JAX's default device is {jax.devices()[0]}, not a GPU")
        return 2
    shape, k = CASES[index]
    out, hlo = jax_wgan(wgan_arrays(shape, k), k)
    np.savez(path, **out)
    digest = hashlib.sha256(b"".join(out[n].tobytes() for n in sorted(out))).hexdigest()[:16]
    print(f"child: {case_name(shape, k)} loss {float(out['loss']):.6g} sha256 {digest} "
          f"scatter ops in HLO: {hlo.count('scatter(')}")
    return 0


class Report:
    """Prints lines and keeps them, to write as a markdown report."""

    def __init__(self, out: str | None):
        self.out, self.lines, self.tables = out, [], []
        self.header = []

    def say(self, text: str = ""):
        print(text, flush=True)
        self.lines.append(text)

    def markdown(self) -> str:
        body = "\n".join(self.header) + "\n\n```\n" + "\n".join(self.lines) + "\n```\n"
        for t in self.tables:
            body += "\n" + t
        return body

    def write(self):
        if self.out:
            os.makedirs(self.out, exist_ok=True)
            with open(os.path.join(self.out, "gpu-report.md"), "w") as f:
                f.write(self.markdown())


def environment(r: Report, allow_cpu: bool = False) -> bool:
    """Header lines; False if JAX sees no GPU (unless `allow_cpu`)."""
    import jax

    try:
        gpus = jax.devices("gpu")
    except RuntimeError as exc:
        gpus, why = [], str(exc).splitlines()[0]
    else:
        why = ""
    try:
        import torch

        tname = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
        tver = torch.__version__
    except ImportError:
        tname, tver = "not installed", "-"
    from benchmarks import machine

    r.header = [
        (f"GPU run of {datetime.date.today().isoformat()} on "
         f"{machine.describe('gpu', gpus[0] if gpus else None)}; {machine.versions()}."),
        "",
        f"Command: `python benchmarks/gpu_check.py {shlex.join(sys.argv[1:])}`",
    ]
    if not gpus and allow_cpu:
        r.say(f"JAX sees no GPU ({why}): --allow-cpu, so every step runs on the CPU; "
              "this says nothing about GPUs.")
        return True
    if not gpus:
        r.say(f"JAX sees no GPU ({why}): nothing to check.")
        return False
    r.say(f"JAX devices: {', '.join(str(d) for d in gpus)}")
    return True


def determinism(r: Report, tmp: str, allow_cpu: bool = False) -> bool:
    r.say(f"== 1. jaxpool WGAN-GP double backward, twice, XLA_FLAGS={FLAG}")
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + FLAG).strip()
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    ok = True
    for i, (shape, k) in enumerate(CASES):
        runs = []
        for run in (1, 2):
            path = os.path.join(tmp, f"det-{i}-{run}.npz")
            cmd = [sys.executable, "-m", "benchmarks.gpu_check", "--child", str(i), path]
            proc = subprocess.run(cmd + (["--allow-cpu"] if allow_cpu else []), cwd=ROOT,
                                  env=env, capture_output=True, text=True, check=False)
            text = (proc.stdout + proc.stderr).strip().splitlines()
            if proc.returncode != 0:
                r.say(f"{case_name(shape, k)} run {run}: FAILED (exit {proc.returncode})")
                for line in text[-15:]:
                    r.say("    " + line)
                ok = False
                break
            r.say(f"{case_name(shape, k)} run {run}: " + next((l[7:] for l in text if l.startswith("child: ")), ""))
            runs.append(dict(np.load(path)))
        if len(runs) < 2:
            continue
        same = all(runs[0][n].tobytes() == runs[1][n].tobytes() for n in runs[0])
        r.say(f"{case_name(shape, k)}: the two runs are {'bitwise EQUAL' if same else 'DIFFERENT'}")
        ok &= same
        try:
            import torch

            ref = torch_wgan(wgan_arrays(shape, k), k, "cpu", torch.float64)
            errs = {n: float(np.max(np.abs(runs[0][n] - ref[n])) / (np.max(np.abs(ref[n])) or 1.0))
                    for n in ref}
            worst = max(errs, key=errs.get)
            close = errs[worst] < 1e-3
            r.say(f"{case_name(shape, k)}: against torch float64 on the CPU, largest relative error "
                  f"{errs[worst]:.2g} (d/d{worst}) {'ok' if close else 'TOO LARGE'}")
            ok &= close
        except ImportError:
            r.say("torch not installed: no comparison with torch values")
    r.say("determinism check: " + ("PASSED" if ok else "FAILED"))
    return ok


def torch_demo(r: Report):
    r.say("== 2. torch on the same computation")
    try:
        import torch
    except ImportError:
        r.say("torch not installed: skipped")
        return
    if not torch.cuda.is_available():
        r.say("this torch build has no CUDA device: skipped")
        return
    shape, k = CASES[0]
    arrays = wgan_arrays(shape, k)
    a = torch_wgan(arrays, k, "cuda", torch.float32)
    b = torch_wgan(arrays, k, "cuda", torch.float32)
    same = all(a[n].tobytes() == b[n].tobytes() for n in a)
    r.say(f"torch CUDA, {case_name(shape, k)}, two plain runs: {'bitwise equal' if same else 'DIFFERENT bits'}")
    torch.use_deterministic_algorithms(True)
    try:
        torch_wgan(arrays, k, "cuda", torch.float32)
        r.say("torch.use_deterministic_algorithms(True): no error raised")
    except RuntimeError as exc:
        r.say(f"torch.use_deterministic_algorithms(True): RuntimeError: {str(exc).splitlines()[0]}")
    finally:
        torch.use_deterministic_algorithms(False)


def bench(r: Report, out: str, quick: bool, extra: list[str], device: str = "gpu") -> bool:
    from benchmarks import cli

    folder = os.path.join(out, "bench")
    argv = ["--device", device, "--sides", "jaxpool,torch,flax,keras,floor,reduce_window",
            "--out", folder, "--no-progress"] + ([] if quick else ["--full"]) + extra
    r.say("== 3. python -m benchmarks " + shlex.join(argv))
    t0 = time.perf_counter()
    code = cli.main(argv)
    r.say(f"benchmark exit {code} after {time.perf_counter() - t0:.0f} s")
    table = os.path.join(folder, "results.md")
    if code == 0 and os.path.exists(table):
        with open(table) as f:
            # The chart stays in the output folder; the table is what the record keeps.
            r.tables.append("".join(l for l in f if not l.startswith("![")))
    return code == 0


def splice(markdown_file: str, text: str):
    from benchmarks.report import splice as put

    put(markdown_file, text, BEGIN, END)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="gpu-results", metavar="DIR")
    p.add_argument("--quick", action="store_true", help="the benchmark's quick grid")
    p.add_argument("--bench-args", default="", help="more arguments for the benchmark, quoted")
    p.add_argument("--skip-bench", action="store_true")
    p.add_argument("--markdown", default=None, metavar="FILE",
                   help="put the report between the GPU markers of FILE")
    p.add_argument("--record", default=None, metavar="REPORT",
                   help="only put this saved gpu-report.md into --markdown (no GPU needed)")
    p.add_argument("--allow-cpu", action="store_true",
                   help="without a GPU, run every step on the CPU (a dry run of this script)")
    p.add_argument("--child", nargs=2, metavar=("CASE", "NPZ"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(int(args.child[0]), args.child[1], args.allow_cpu)
    if args.record:
        if not args.markdown:
            p.error("--record needs --markdown")
        with open(args.record) as f:
            splice(args.markdown, f.read())
        print(f"put {args.record} into {args.markdown}")
        return 0

    r = Report(args.out)
    if not environment(r, args.allow_cpu):
        r.write()
        return 2
    r.write()
    tmp = os.path.join(args.out, "tmp")
    os.makedirs(tmp, exist_ok=True)
    ok = determinism(r, tmp, args.allow_cpu)
    r.write()
    torch_demo(r)
    r.write()
    bench_ok = True
    if not args.skip_bench:
        import jax

        device = "gpu" if any(d.platform == "gpu" for d in jax.devices()) else "cpu"
        bench_ok = bench(r, args.out, args.quick, shlex.split(args.bench_args), device)
    r.write()
    for name in os.listdir(tmp):
        os.remove(os.path.join(tmp, name))
    os.rmdir(tmp)
    if args.markdown:
        splice(args.markdown, r.markdown())
    print(f"wrote {os.path.join(args.out, 'gpu-report.md')}")
    return 0 if ok and bench_ok else (1 if not ok else 3)


if __name__ == "__main__":
    raise SystemExit(main())
