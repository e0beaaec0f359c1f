"""Every picture of the docs comes from code: each generator runs on tiny data and writes a
PNG."""

import importlib.util
import json
import math
import os
import pathlib
import sys

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")  # no display: draw into files only
pytest.importorskip("matplotlib")
torch = pytest.importorskip("torch")

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The benchmark tool and the docs' generator live beside the package, not in the wheel.
sys.path.insert(0, str(ROOT))
from benchmarks import cli as bench_cli  # noqa: E402
from benchmarks import report as bench_report  # noqa: E402

from parity.results import Report, Row  # noqa: E402
from parity.suite import cli as parity_cli  # noqa: E402
from parity.suite import cases as suite  # noqa: E402
from parity.suite import picture  # noqa: E402
from parity.suite import report as parity_report  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def _is_png(path) -> bool:
    data = pathlib.Path(path).read_bytes()
    return data[:8] == PNG and len(data) > 1000


def _side(ms=None, status="ok"):
    return {"status": status, "median_ms": ms} if ms is not None else {"status": status}


def _bench_rows():
    """Result rows in the shape the runner writes: two cells, jitted and eager modes, one
    without a correct peer."""
    rows = []
    for cell, jp, torch_ms in (("avg 2x3x9x9 k3", 1.0, 2.0), ("global 2x3x5x5", 3.0, 1.5)):
        for mode in ("fwd", "grad", "gradgrad", "eager-fwd"):
            sides = {"jaxpool": _side(jp), "torch": _side(torch_ms),
                     "flax": _side(status="unsupported"), "floor": _side(0.1)}
            eager = mode.startswith("eager")
            rows.append({"cell": cell, "mode": mode, "sides": sides, "best_peer": "torch",
                         "ratio_peer": None if eager else jp / torch_ms})
    rows.append({"cell": "max 2x3x8x8 k2", "mode": "fwd", "best_peer": None, "ratio_peer": None,
                 "sides": {"jaxpool": _side(1.0), "torch": _side(status="wrong")}})
    return rows


def test_benchmark_chart_is_drawn_again_from_a_results_json(tmp_path):
    rows = _bench_rows()
    assert bench_report.peer_ratio(rows[0]) == (0.5, "torch")
    assert bench_report.peer_ratio(rows[3]) == (0.5, "torch")  # eager: from the medians
    assert bench_report.peer_ratio(rows[-1]) == (None, None)
    results = tmp_path / "run" / "results.json"
    results.parent.mkdir()
    bench_report.write_json(rows, {"date": "2026-01-01", "machine": "a test"}, str(results))
    png = tmp_path / "chart.png"
    assert bench_cli.main(["chart", str(results), str(png)]) == 0
    assert _is_png(png)
    assert bench_cli.main(["chart", str(results)]) == 0  # beside the results by default
    assert _is_png(results.parent / "chart.png")


def _docs_pictures():
    spec = importlib.util.spec_from_file_location("docs_pictures", ROOT / "docs" / "pictures.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_resampling_pictures_show_jaxpool_on_torch_and_jax_image_off_it(tmp_path, monkeypatch):
    pictures = _docs_pictures()
    drawn, draw = {}, pictures.resampling_picture

    def recorded(x, c, path, scale=4):  # main's own pictures' differences, not drawn again
        drawn[c.name] = (x.shape, draw(x, c, path, scale))
        return drawn[c.name][1]

    monkeypatch.setattr(pictures, "resampling_picture", recorded)
    assert pictures.main(["--out", str(tmp_path), "--size", "16", "--scale", "2"]) == 0
    for c in pictures.COMPARISONS:
        assert _is_png(tmp_path / f"resampling_{c.name}.png")
    x = pictures.load_image(12)
    assert x.shape == (1, 3, 12, 12) and x.dtype.name == "float32" and 0 <= x.min() < x.max() <= 1
    assert set(drawn) == {c.name for c in pictures.COMPARISONS}
    for name, (shape, worst) in drawn.items():
        assert shape == (1, 3, 16, 16)
        # the point of the picture: torch's values, and jax.image.resize's other ones
        assert worst["jaxpool"] <= 1e-6 and worst["jax.image"] > 1e-3, (name, worst)


def _parity_results():
    """Made-up results of three ops in the shape the suite returns: an exact check
    (tolerance 0), one comparing nothing (nan), bad-argument calls, and one failure."""
    def case(op):
        return next(c for c in suite.quick_cases([op]) if isinstance(c, suite.Case))

    rows = {
        "avg_pool2d": [Row("value", 0, 1e-17, 1e-16, 1e-14, True),
                       Row("vjp", 1, 3e-15, 3e-14, 1e-13, True),
                       Row("vjp", 2, 2e-13, 2e-12, 1e-13, False)],
        "max_pool2d": [Row("value indices", 0, 0.0, 0.0, 0.0, True),
                       Row("value", 0, math.nan, math.nan, math.nan, True, "both nan"),
                       Row("jvp", 1, 1e-20, 1e-19, 1e-14, True)],
        "pixel_shuffle": [Row("value", 0, 0.0, 0.0, 1e-14, True)],
    }
    out = [suite.CaseResult(case(op), Report(r), 0.1) for op, r in rows.items()]
    out.append(suite.CaseResult(suite.error_cases("avg_pool2d"),
                                Report([Row("raises (k=0)", 0, math.nan, math.nan, math.nan,
                                            True)]), 0.1))
    return out


def test_parity_picture_is_drawn_from_the_json_parity_writes(tmp_path):
    doc = json.loads(parity_report.to_json(_parity_results(), 1.0))
    ops, orders, worst = picture.error_ratios(doc)
    assert ops == ["avg_pool2d", "max_pool2d", "pixel_shuffle"] and orders == [0, 1, 2]
    assert worst[("avg_pool2d", 2)] == (pytest.approx(2.0), False)
    assert worst[("max_pool2d", 0)] == (0.0, True)  # exact and equal; the nan row left out
    assert ("pixel_shuffle", 1) not in worst
    results = tmp_path / "r.json"
    results.write_text(json.dumps(doc))
    png = tmp_path / "errors.png"
    assert parity_cli.main(["picture", str(results), str(png)]) == 0
    assert _is_png(png)


def test_parity_markdown_writes_and_shows_its_picture(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(parity_cli.runner, "run_cases",
                        lambda cases, jobs, cache, done: _parity_results())
    md = tmp_path / "report.md"
    argv = ["--op", "avg_pool2d", "--no-progress", "--jobs", "1", "--no-cache"]
    assert parity_cli.main(argv + ["--markdown", str(md)]) == 1  # the made-up failure
    assert _is_png(tmp_path / "report.png")
    assert "](report.png)" in md.read_text()
    (tmp_path / "img").mkdir()
    assert parity_cli.main(argv + ["--markdown", str(md), "--picture",
                                   str(tmp_path / "img" / "e.png")]) == 1
    assert _is_png(tmp_path / "img" / "e.png") and "](img/e.png)" in md.read_text()

    # without matplotlib: the report without its picture, and --picture refused up front
    monkeypatch.setattr(picture, "available", lambda: False)
    assert parity_cli.main(argv + ["--markdown", str(md)]) == 1
    assert "![" not in md.read_text() and "pip install matplotlib" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        parity_cli.main(argv + ["--picture", str(tmp_path / "x.png")])
    assert info.value.code == 2 and not (tmp_path / "x.png").exists()
