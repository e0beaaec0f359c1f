"""Every jaxpool op, sharded on the batch or the channel axis, compiles without collectives.

The check is `examples/sharded.py`'s: it needs eight host devices, which XLA fixes when JAX
starts, so it runs in a subprocess with XLA_FLAGS set (this process's JAX is untouched).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import jaxpool

ROOT = Path(__file__).resolve().parents[1]
DEVICES = 8

# Every pooling function jaxpool exports (aliases resolve to the same function).
OPS = sorted({getattr(jaxpool, n).__name__ for n in jaxpool.__all__
              if n not in ("shapes", "linen", "nnx")})


@pytest.fixture(scope="module")
def check(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("sharded")
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICES}"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "sharded.py"), "--no-train", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    metrics_file = out / "sharded_metrics.json"
    assert metrics_file.exists(), f"sharded.py wrote no metrics:\n{proc.stdout}\n{proc.stderr}"
    return {"proc": proc, **json.loads(metrics_file.read_text())}


def test_runs_on_eight_devices(check):
    assert check["devices"] == DEVICES


def test_every_op_layout_and_axis_is_covered(check):
    rows = check["collective_check"]["rows"]
    seen = {(r["op"], r["layout"], r["sharded"]) for r in rows}
    want = {(op, layout, axis) for op in OPS
            for layout in ("channels_first", "channels_last") for axis in ("batch", "channel")}
    assert want <= seen, f"not checked: {sorted(want - seen)}"
    assert any("ragged" in r["case"] for r in rows if r["op"] == "adaptive_avg_pool2d")


@pytest.mark.parametrize("op", OPS)
def test_no_collectives(check, op):
    bad = [f"{r['case']} [{r['layout']}, {r['sharded']}-sharded]: "
           f"forward {r['forward'] or '-'}, backward {r['backward'] or '-'}"
           for r in check["collective_check"]["rows"]
           if r["op"] == op and (r["forward"] or r["backward"])]
    assert not bad, "collectives in compiled programs:\n" + "\n".join(bad)


def test_search_finds_collectives_where_they_are_needed(check):
    # If the search were broken, test_no_collectives would pass vacuously.
    controls = check["collective_check"]["controls"]
    assert controls and all(controls.values()), controls


def test_script_verdict_matches(check):
    clean = all(not r["forward"] and not r["backward"] for r in check["collective_check"]["rows"])
    assert (check["proc"].returncode == 0) == clean, check["proc"].stderr[-2000:]
