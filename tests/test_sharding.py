"""Every jaxpool op, sharded on the batch or the channel axis, compiles without collectives;
data-parallel training matches one device.

Both are `examples/sharded.py`'s, run end to end in one subprocess: it needs eight host
devices, which XLA fixes when JAX starts, so it runs with XLA_FLAGS set (this process's JAX
is untouched). The default run compiles each op's forward and backward as one program
(``--joint``: a collective in either direction shows in it), each case in two of the four
(layout, sharded axis) pairs, alternating (``--spread``: every op meets both layouts and
both axes), without the training (``--no-train``); -m slow also runs the script's own
check (every pair, forward and backward compiled apart, as users run it) after its
training.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import jaxpool
from jaxpool import registry

ROOT = Path(__file__).resolve().parents[1]
DEVICES = 8

# Every function jaxpool exports (aliases resolve to the same function) whose windows are
# fixed by shapes and keep to their batch element and channel. Not here: the ops that read
# where the data says (their halo rule is "replicate": sharded inputs are gathered, and
# their batch- and channel-sharded programs are not yet checked for collectives), and
# channel_shuffle, whose every output channel group reads across the channel axis. An op
# that delegates to one of a replicated family (multi_scale_roi_align: roi_align's reads)
# is replicated too.
_REPLICATED = {s.family for s in registry.SPECS.values() if s.halo == "replicate"}
OPS = sorted({getattr(jaxpool, n).__name__ for n in jaxpool.__all__
              if n not in ("shapes", "linen", "nnx", "equinox")
              and registry.SPECS[getattr(jaxpool, n).__name__].halo != "replicate"
              and registry.SPECS[getattr(jaxpool, n).__name__].family not in _REPLICATED
              and n != "channel_shuffle"})


@pytest.fixture(scope="module", params=[
    "joint", pytest.param("per-direction", marks=pytest.mark.slow)])
def check(request, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("sharded")
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICES}"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # A short training (part 1; -m slow's run) in the same process as the collective check
    # (part 2).
    args = ["--steps", "3", "--batch-size", "16", "--out", str(out)]
    if request.param == "joint":
        args += ["--joint", "--spread", "--no-train"]
        # Only the compiled programs' text is read here, not their values: without LLVM's
        # optimisations (XLA's HLO passes, the partitioner among them, run as ever) the
        # text is the same, byte for byte, and the compiles take a third less CPU.
        env["XLA_FLAGS"] += " --xla_backend_optimization_level=0"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "sharded.py"), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    metrics_file = out / "sharded_metrics.json"
    assert metrics_file.exists(), f"sharded.py wrote no metrics:\n{proc.stdout}\n{proc.stderr}"
    return {"proc": proc, "mode": request.param, **json.loads(metrics_file.read_text())}


def found(row: dict, directions) -> dict:
    """The collectives of a row's compiled programs, by direction, where there are any."""
    return {d: row[d] for d in directions if row[d]}


def test_runs_on_eight_devices(check):
    assert check["devices"] == DEVICES


def test_every_op_layout_and_axis_is_covered(check):
    rows = check["collective_check"]["rows"]
    layouts, axes = ("channels_first", "channels_last"), ("batch", "channel")
    seen = {(r["op"], r["layout"], r["sharded"]) for r in rows}
    if check["mode"] == "joint":  # --spread: each op in both layouts and on both axes
        want = {(op, "layout", layout) for op in OPS for layout in layouts}
        want |= {(op, "axis", axis) for op in OPS for axis in axes}
        seen = ({(op, "layout", layout) for op, layout, _ in seen}
                | {(op, "axis", axis) for op, _, axis in seen})
        pairs = {(r["layout"], r["sharded"]) for r in rows}
        assert pairs == {(lay, ax) for lay in layouts for ax in axes}, pairs
    else:
        want = {(op, layout, axis) for op in OPS for layout in layouts for axis in axes}
    assert want <= seen, f"not checked: {sorted(want - seen)}"
    assert any("ragged" in r["case"] for r in rows if r["op"] == "adaptive_avg_pool2d")


def test_directions_are_the_modes(check):
    want = {"joint": ["forward+backward"], "per-direction": ["forward", "backward"]}
    assert check["collective_check"]["directions"] == want[check["mode"]]


@pytest.mark.parametrize("op", OPS)
def test_no_collectives(check, op):
    directions = check["collective_check"]["directions"]
    bad = [f"{r['case']} [{r['layout']}, {r['sharded']}-sharded]: {found(r, directions)}"
           for r in check["collective_check"]["rows"]
           if r["op"] == op and found(r, directions)]
    assert not bad, "collectives in compiled programs:\n" + "\n".join(bad)


def test_search_finds_collectives_where_they_are_needed(check):
    # If the search were broken, test_no_collectives would pass vacuously.
    controls = check["collective_check"]["controls"]
    assert controls and all(controls.values()), controls
    assert len(controls) == 1 + len(check["collective_check"]["directions"]), controls


def test_script_verdict_matches(check):
    directions = check["collective_check"]["directions"]
    clean = not any(found(r, directions) for r in check["collective_check"]["rows"])
    assert (check["proc"].returncode == 0) == clean, check["proc"].stderr[-2000:]


# Slow (the training runs with the script's own check): compiling the sharded and the
# single-device training steps costs about 11 s of CPU, and the splitting is XLA's
# partitioner's (the script says so). By default every op's batch-sharded program is
# checked free of collectives above, and tests/test_sharding_halo.py checks sharded values
# and gradients against the unsharded call's, along the spatial axes.
@pytest.mark.parametrize("check", [pytest.param("per-direction", marks=pytest.mark.slow)],
                         indirect=True)
def test_sharded_training(check):
    # Part 1 of the same run: sharded steps agree with the same steps on one device.
    m = check["train"]
    assert check["devices"] == 8 and "sharded as P('data',)" in check["proc"].stdout
    assert m["steps"] == 3
    assert m["first_step_param_diff"] < 1e-5 and m["max_loss_diff"] < 1e-4
