"""examples/port_resnet.py end to end: a torch ResNet-18 ported to Flax agrees layer by layer,
and a difference planted in one layer of the port is named as the first divergence.

The clean check runs as users run it, as a script in a subprocess; the others call the
script's main in this process (no second start-up). Small inputs throughout.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "port_resnet.py"


def run(*args: str, expect: int = 0) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == expect, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_port_agrees_in_float64_and_float32(tmp_path):
    proc = run("--batch", "1", "--size", "32", "--out", str(tmp_path))
    assert "PASS: 52 layer outputs and 63 gradients agree with torch (float64" in proc.stdout
    assert "PASS: 52 layer outputs and 63 gradients agree with torch (float32" in proc.stdout
    reports = json.loads((tmp_path / "port_resnet.json").read_text())
    for dtype in ("float64", "float32"):
        rows = reports[dtype]["rows"]
        assert reports[dtype]["ok"] and rows[0]["torch_name"] == "conv1"
        assert {r["torch_name"] for r in rows} >= {"maxpool", "avgpool", "fc", "fc.weight",
                                                   "conv1.weight", "input"}


def _main():
    spec = importlib.util.spec_from_file_location("port_resnet", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses (linen modules) look their module up
    spec.loader.exec_module(module)
    return module.main


def test_planted_bug_is_the_first_divergence(capsys):
    code = _main()(["--batch", "1", "--size", "32", "--plant-bug", "layer2.0.bn2",
                    "--dtype", "float32"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "FAIL <- first divergence" in out
    assert "first divergence: float32 layer2.0.bn2 (found)" in out


def test_layer_names(capsys):
    main = _main()
    assert main(["--list-layers"]) == 0
    names = capsys.readouterr().out.split()
    assert names[:3] == ["conv1", "bn1", "maxpool"] and "layer4.1.bn2" in names
    with pytest.raises(SystemExit):
        main(["--plant-bug", "layer9"])
    assert "no layer 'layer9'" in capsys.readouterr().err
