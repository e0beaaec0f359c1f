"""``python -m benchmarks.programs.models`` on its tiny grid: each side's loss is checked
against torch's before anything is timed, a side that differs is not timed, and the table
says so."""

import json
import pathlib
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("flax")
pytest.importorskip("optax")

# The benchmark lives beside the package, in the repository, not in the installed wheel.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from benchmarks.programs import model_zoo, models  # noqa: E402


# The timing loop collects garbage before it times: conftest's frozen_heap keeps the
# collections to each test's own objects.
pytestmark = pytest.mark.usefixtures("frozen_heap")


def _run(tmp_path, names, *extra):
    doc = tmp_path / "BENCH.md"
    doc.write_text("# Kept\n\n<!-- benchmarks:models:begin -->\nold\n"
                   "<!-- benchmarks:models:end -->\n\nTail.\n")
    out = tmp_path / "models.json"
    code = models.main(["--tiny", "--models", ",".join(names), "--reps", "2",
                        "--markdown", str(doc), "--json", str(out), *extra])
    return code, doc.read_text(), json.loads(out.read_text())["results"]


def _table(text):
    """The first table's rows, split into cells."""
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    header = rows[0].strip("|").split("|")
    body = []
    for line in rows[1:]:
        if line.count("|") != rows[0].count("|"):
            break
        body.append([c.strip() for c in line.strip("|").split("|")])
    return [c.strip() for c in header], body


def test_a_wrong_peer_is_marked_and_the_right_ones_agree_with_torch(tmp_path, monkeypatch):
    right = model_zoo.Layers.pixel_shuffle

    def channels_in_the_wrong_order(self, x, r):
        if not self._peer("pixel_shuffle"):
            return right(self, x, r)
        b, h, w, c = x.shape  # the sub-pixel rows and columns swapped: (c, j, i)
        return (x.reshape(b, h, w, c // (r * r), r, r).transpose(0, 1, 5, 2, 4, 3)
                .reshape(b, h * r, w * r, c // (r * r)))

    monkeypatch.setattr(model_zoo.Layers, "pixel_shuffle", channels_in_the_wrong_order)
    code, text, rows = _run(tmp_path, ["espcn", "wgan-gp"], "--swaps", "all")
    assert code == 0
    assert text.startswith("# Kept\n") and text.endswith("Tail.\n") and "\nold\n" not in text
    assert "python -m benchmarks.programs.models --tiny" in text

    header, body = _table(text)
    assert header[:6] == ["model", "input", "jaxpool", "JAX peer", "torch", "jaxpool / JAX peer"]
    assert [cells[1] for cells in body] == ["2x1x8x8", "4x1x16x16"]
    espcn, wgan = rows
    assert espcn["sides"]["peer"]["status"] == "wrong"
    assert "median_ms" not in espcn["sides"]["peer"] and espcn["ratio_peer"] is None
    assert body[0][3] == "wrong" and "ESPCN upscaler (pixel shuffle x3), JAX peer: wrong" in text
    for row in rows:
        jp = row["sides"]["jaxpool"]
        assert jp["status"] == "ok" and len(jp["samples_ms"]) == 2
        assert abs(jp["loss"] - row["loss"]) <= 1e-4 * max(1, abs(row["loss"]))
        assert jp["compile_s"] > 0 and jp["peak_bytes"] > 0
        assert row["sides"]["torch"]["status"] == "ok" and row["ratio_torch"] > 0
    # the peer is exact here: its loss and gradient norm are torch's
    assert wgan["sides"]["peer"]["status"] == "ok" and wgan["ratio_peer"] > 0
    assert abs(wgan["sides"]["peer"]["loss"] - wgan["loss"]) <= 1e-4 * max(1, abs(wgan["loss"]))
    assert set(wgan["swaps"]) == {"jaxpool", "peer", "adaptive_avg"}
    assert "with the peer's adaptive_avg" in text


@pytest.mark.slow
def test_the_whole_tiny_grid_agrees_with_torch(tmp_path):
    code, text, rows = _run(tmp_path, list(model_zoo.MODELS), "--swaps", "none")
    assert code == 0
    assert [r["model"] for r in rows] == list(model_zoo.MODELS)
    _, body = _table(text)
    assert len(body) == len(model_zoo.MODELS)
    for row in rows:
        for side in ("jaxpool", "peer"):
            entry = row["sides"][side]
            assert entry["status"] == "ok", (row["model"], side, entry)
            assert abs(entry["loss"] - row["loss"]) <= 1e-4 * max(1, abs(row["loss"]))
            assert abs(entry["grad_norm"] - row["grad_norm"]) <= 1e-3 * max(1, row["grad_norm"])


@pytest.mark.parametrize("argv", [["--models", "resnet,vgg"], ["--models", ""],
                                  ["--reps", "0"], ["--min-sample-ms", "-1"]])
def test_bad_arguments_exit(argv):
    with pytest.raises(SystemExit):
        models.parse_args(argv)


def test_the_gpu_run_has_its_own_section_and_the_models_keep_their_order():
    assert models.parse_args(["--device", "gpu"]).section == "models-gpu"
    args = models.parse_args(["--models", "wgan-gp,resnet"])
    assert args.models == ["resnet", "wgan-gp"] and args.section == "models"
