"""Each example runs end to end in a tiny configuration and reports what it should (the
longest, wgan_gp.py, segment.py, sharded_volume.py, stn.py and per_example_grads.py, under
-m slow, where other default tests check what they show; every script's ``--help`` by
default).

The examples run as users run them: as scripts, each in a fresh process, writing their
outputs to a temporary folder. The process is forked from one that has imported the
packages they share (tests/fresh_process.py; importing jax, torch and flax anew took about
3 s per script); the one that needs eight host devices starts an interpreter of its own.
Their ``--help`` runs each script as ``__main__`` in this process, which has already
imported what they import.
"""

from __future__ import annotations

import json
import math
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from fresh_process import ScriptRunner

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SCRIPTS = ("classifier.py", "wgan_gp.py", "per_example_grads.py", "sharded.py", "segment.py",
           "sharded_volume.py", "stn.py",
           # Hugging Face's layer is its torch side (the "ports" extra)
           pytest.param("deformable_encoder.py", marks=pytest.mark.needs_recent("transformers")),
           pytest.param("torchax_train.py", marks=pytest.mark.needs_recent("torchax")))


def _env(env_extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["JAX_PLATFORMS"] = "cpu"
    env["MPLBACKEND"] = "Agg"
    env.update(env_extra or {})
    return env


@pytest.fixture(scope="module")
def runner():
    runner = ScriptRunner(_env())
    yield runner
    runner.close()


def run(runner, script: str, *args: str, out: Path) -> subprocess.CompletedProcess:
    """``script`` with ``args`` and ``--out out``, in a fresh process forked by ``runner``
    (its output files are left in ``out``)."""
    argv = [*args, "--out", str(out)]
    code = runner(str(EXAMPLES / script), *argv, folder=str(out))
    stdout, stderr = ((out / name).read_text() for name in ("stdout", "stderr"))
    assert code == 0, f"{script} {' '.join(argv)} failed:\n{stdout[-3000:]}\n{stderr[-3000:]}"
    return subprocess.CompletedProcess([script, *argv], code, stdout, stderr)


def run_alone(script: str, *args: str, out: Path, env_extra: dict | None = None):
    """``script`` in an interpreter of its own (for settings fixed when JAX starts)."""
    cmd = [sys.executable, str(EXAMPLES / script), *args, "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(env_extra), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, \
        f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def metrics(out: Path, name: str) -> dict:
    return json.loads((out / name).read_text())


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(script, monkeypatch, capsys):
    # sharded.py sets XLA_FLAGS when it starts; monkeypatch puts the variable back after.
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / script), "--help"])
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "usage:" in out and "--out" in out


def test_classifier(tmp_path, runner):
    proc = run(runner, "classifier.py", "--steps", "80", "--train-size", "512", "--test-size",
               "256", "--batch-size", "32", out=tmp_path)
    m = metrics(tmp_path, "classifier_metrics.json")
    assert m["catalog_ok"]
    for name, count in (("A", 618), ("B", 645), ("C", 224), ("D", 45), ("E", 618), ("F", 444)):
        assert f"Network {name}: " in proc.stdout and f", {count} params (catalog:" in proc.stdout
    assert "Total Parameters" in proc.stdout  # nn.tabulate's table
    assert "test accuracy after 80 steps" in proc.stdout
    assert m["test_accuracy"] > 0.2  # ten classes: chance is 0.1


# Slow: two seeded training runs (each compiles its steps anew, as the determinism check
# asks) and the torch check cost about 25 s of CPU. By default a WGAN-GP critic's gradient
# penalty meets torch's in tests/test_bench_models.py, and this script's --help runs here.
@pytest.mark.slow
def test_wgan_gp(tmp_path, runner):
    proc = run(runner, "wgan_gp.py", "--steps", "3", "--n-critic", "1", "--batch-size", "8",
               "--check-torch", out=tmp_path)
    m = metrics(tmp_path, "wgan_gp_metrics.json")
    assert m["bitwise_identical"] and "bitwise identical" in proc.stdout
    assert m["torch_ok"] and m["torch_worst_abs_err"] < 1e-12
    assert "worst abs error" in proc.stdout
    for png in ("wgan_gp_samples.png", "wgan_gp_losses.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# Slow: compiling the vmapped, the per-example and the batch gradient of ShapesNet costs
# about 12 s of CPU. By default tests/test_derivatives.py checks vmap of grad over unbatched
# inputs against the batched call for the pools, and classifier.py runs ShapesNet here.
@pytest.mark.slow
def test_per_example_grads(tmp_path, runner):
    proc = run(runner, "per_example_grads.py", "--batch-size", "4", "--repeats", "2", out=tmp_path)
    m = metrics(tmp_path, "per_example_grads_metrics.json")
    assert m["agree"] and m["max_rel_err"] < 1e-5
    assert m["speedup"] > 0 and "speedup of vmap over the loop" in proc.stdout


# Slow: compiling its initialiser and its training step (a double backward through
# grid_sample) costs about 18 s of CPU. By default tests/test_grid_sample.py checks that
# grid_sample's derivatives of every order hold no scatter on the GPU's table, that the CPU's
# scatter-add is the sorted sum, and affine_grid + grid_sample's gradients against torch.
@pytest.mark.slow
def test_stn(tmp_path, runner):
    proc = run(runner, "stn.py", "--steps", "6", "--batch-size", "8", "--train-size", "64",
               "--test-size", "16", out=tmp_path)
    m = metrics(tmp_path, "stn_metrics.json")
    assert m["step_scatter_ops"] == [] and m["step_has_gather"]
    assert m["double_backward_bitwise_identical"] and "bitwise identical" in proc.stdout
    assert len(m["losses"]) == 6 and all(math.isfinite(v) for v in m["losses"])
    # without --check-torch (tests/test_replays.py checks the same warp against torch)
    assert m["torch_ok"] is None
    assert (tmp_path / "stn_views.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# Slow: its layer-by-layer parity check and its training step (a double backward through
# the deformable attention) compile for about 30 s of CPU. By default the same module meets
# torch in tests/test_deformable_modules.py, and this script's --help runs here.
@pytest.mark.slow
@pytest.mark.needs_recent("transformers")
def test_deformable_encoder(tmp_path, runner):
    proc = run(runner, "deformable_encoder.py", "--steps", "3", "--size", "3", "--d-model",
               "16", "--batch-size", "2", out=tmp_path)
    m = metrics(tmp_path, "deformable_encoder_metrics.json")
    assert m["parity_ok"] and m["parity_worst_output_abs_err"] < 1e-12
    assert m["step_scatter_ops"] == [] and m["step_has_gather"]
    assert m["bitwise_identical"] and "bitwise identical" in proc.stdout
    assert len(m["losses"]) == 3 and all(math.isfinite(v) for v in m["losses"])
    assert "self_attn.sampling_offsets (Linear) -> self_attn/sampling_offsets" in proc.stdout


# sharded.py runs end to end (training and collective check in one process) in
# tests/test_sharding.py.


# Slow: its training steps and its layer-by-layer parity check in both dtypes cost about
# 20 s of CPU; SegNet's pools and unpools against torch run by default in tests/test_torchax.py,
# this script's --help by default here.
@pytest.mark.slow
def test_segment(tmp_path, runner):
    proc = run(runner, "segment.py", "--steps", "3", "--size", "16", "--width", "4", out=tmp_path)
    m = metrics(tmp_path, "segment_metrics.json")
    assert m["parity_ok"] == {"float64": True, "float32": True}
    assert len(m["losses"]) == 3 and "test pixel accuracy" in proc.stdout
    assert "MaxUnpool2d_1" in proc.stdout and "ReflectionPad2d_4" in proc.stdout


@pytest.mark.needs_recent("torchax")
def test_torchax_train(tmp_path, runner):
    proc = run(runner, "torchax_train.py", "--steps", "2", "--batch-size", "4", "--width", "4",
               out=tmp_path)
    m = metrics(tmp_path, "torchax_train_metrics.json")
    assert m["ok"] and len(m["losses"]) == 2
    assert m["report"]["torchax + jaxpool"]["select_and_scatter"] == 0
    assert m["report"]["torchax alone"]["select_and_scatter"] > 0
    assert "jitted step" in proc.stdout


@pytest.mark.slow
def test_sharded_volume(tmp_path):
    # 8 host devices (the script asks for them); a short run: the sharded steps must match
    # the unsharded ones, and exchange only halos and the sums of the loss and gradients,
    # under plain jit as inside shard_map. Slow: compiling the U-Net's three training steps
    # costs about 20 s of CPU (the per-device
    # ops themselves are checked by tests/test_sharding_halo.py in the default run).
    run_alone("sharded_volume.py", "--steps", "2", "--side", "8", out=tmp_path,
        env_extra={"XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
    m = metrics(tmp_path, "sharded_volume_metrics.json")
    assert m["devices"] == 8
    assert not m["unsharded"]["collectives"]
    for run_ in ("plain jit", "shard_map"):
        assert m[run_]["param_diff"] < 1e-5
        assert max(abs(a - b) for a, b in zip(m["losses"]["unsharded"], m["losses"][run_])) < 1e-5
        assert set(m[run_]["collectives"]) == {"collective-permute", "all-reduce"}, m[run_]
        if m["unsharded"]["bytes"] and m[run_]["bytes"]:
            assert m[run_]["bytes"] < m["unsharded"]["bytes"]
