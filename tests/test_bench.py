"""The benchmark tool, run on tiny shapes: it checks before it times, and writes its reports."""

import json
import pathlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

# The benchmark lives beside the package, in the repository, not in the installed wheel.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from benchmarks import cli, report, runner, sides  # noqa: E402
from benchmarks.cells import pooling  # noqa: E402


# The timing loop collects garbage before it times: conftest's frozen_heap keeps the
# collections to each test's own objects.
pytestmark = pytest.mark.usefixtures("frozen_heap")


def test_cli_smoke_writes_table_chart_json_and_splices(tmp_path):
    doc = tmp_path / "BENCH.md"
    doc.write_text("# Prose kept\n\n<!-- benchmarks:begin -->\nold table\n<!-- benchmarks:end -->\n\nTail kept.\n")
    out = tmp_path / "out"
    code = cli.main([
        "--grid", "smoke", "--cells", r"^adaptive 2x3x15x15 -> 4$|excl-pad|global",
        "--modes", "fwd,grad", "--reps", "2", "--min-sample-ms", "0",
        "--out", str(out), "--markdown", str(doc), "--no-progress",
    ])
    assert code == 0
    data = json.loads((out / "results.json").read_text())
    rows = data["results"]
    assert [(r["cell"], r["mode"]) for r in rows] == [
        (c, m) for c in ("adaptive 2x3x15x15 -> 4", "avg 2x3x9x9 k3 s2 p1 excl-pad", "global 2x3x5x5")
        for m in ("fwd", "grad")
    ]
    for r in rows:
        assert r["sides"]["jaxpool"]["status"] == "ok", r
        assert len(r["sides"]["jaxpool"]["samples_ms"]) == 2
        assert r["sides"]["jaxpool"]["kernels"] >= 1
        assert r["sides"]["jaxpool"]["faults_per_call"] >= 0
        assert r["sides"]["torch"]["status"] == "ok"
        assert r["ratio_floor"] > 0
    ragged = rows[0]["sides"]
    if ragged["flax"]["status"] != "missing":
        assert ragged["flax"]["status"] == "unsupported"
    if ragged["equinox"]["status"] != "missing":
        # equinox picks other windows than torch on ragged sizes: never timed as if right
        assert ragged["equinox"]["status"] == "wrong"
        assert "median_ms" not in ragged["equinox"]
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = doc.read_text()
    assert text.startswith("# Prose kept\n") and text.endswith("Tail kept.\n")
    assert "old table" not in text and "| adaptive 2x3x15x15 -> 4 |" in text
    assert "](out/chart.png)" in text
    assert "python -m benchmarks --grid smoke" in text


def test_a_named_section_leaves_the_default_one_alone(tmp_path):
    doc = tmp_path / "B.md"
    doc.write_text("a\n<!-- benchmarks:begin -->\nold\n<!-- benchmarks:end -->\nb\n")
    report.splice(str(doc), "first\n", *report.markers("other"))
    report.splice(str(doc), "second\n", *report.markers("other"))
    text = doc.read_text()
    assert "\nold\n" in text and "first" not in text
    assert "<!-- benchmarks:other:begin -->\nsecond\n<!-- benchmarks:other:end -->" in text


def test_kernel_count_reads_the_entry_computation():
    import jax
    import jax.numpy as jnp

    x = jnp.ones((4, 8))
    one = jax.jit(lambda a: a * 2).lower(x).compile().as_text()
    two = jax.jit(lambda a: jnp.sin(a) @ a.T + 1).lower(x).compile().as_text()
    assert runner.kernel_count(one) == 1
    assert runner.kernel_count(two) >= 2


def test_a_wrong_side_is_marked_and_not_timed(monkeypatch):
    import jax.numpy as jnp

    real = sides.JAX_SIDES["jaxpool"]

    def off_by_a_bit(case):
        fn, notes = real(case)
        return (lambda x: fn(x) * jnp.asarray(1.001, x.dtype)), notes

    monkeypatch.setitem(sides.JAX_SIDES, "flax", off_by_a_bit)
    case = pooling.adaptive((2, 3, 10, 10), 3)
    out = runner.run_case(case, {"jaxpool": None, "torch": None, "flax": None}, runner.Device(),
                          modes=("fwd", "gradgrad"), reps=2, min_sample_s=0)
    for r in out:
        assert r["sides"]["jaxpool"]["status"] == "ok"
        assert r["sides"]["flax"]["status"] == "wrong"
        assert "median_ms" not in r["sides"]["flax"]
        assert r["best_peer"] == "torch"


def test_check_tolerance():
    ref = np.linspace(-1, 1, 24).reshape(2, 3, 2, 2)
    assert runner.check(ref.astype(np.float32), ref, "float32") is None
    assert runner.check(ref + 1e-3, ref, "float32") is not None
    assert runner.check(ref + 1e-3, ref, "bfloat16") is None
    nan = ref.copy()
    nan[0, 0, 0, 0] = np.nan
    assert "non-finite" in runner.check(nan, ref, "float32")
    assert "shape" in runner.check(ref[:1], ref, "float32")


def test_measure_interleaves_and_rotates():
    calls = []
    fns = {name: (lambda n=name: calls.append(n)) for name in "abc"}
    stats = runner.measure(fns, reps=3, min_sample_s=0)
    assert calls[3:] == list("abc" "bca" "cab")  # after one calibration call each
    assert all(len(s["samples_ms"]) == 3 for s in stats.values())


def test_measure_gives_a_slow_side_fewer_samples():
    import time

    fns = {"fast": lambda: None, "slow": lambda: time.sleep(0.02)}
    stats = runner.measure(fns, reps=6, min_sample_s=0, budget_s=0.05)
    assert len(stats["fast"]["samples_ms"]) == 6
    assert len(stats["slow"]["samples_ms"]) == 3


def test_cell_shapes_follow_torch():
    for case in {c for cells in pooling.GRIDS.values() for c in cells}:
        x = torch.zeros(case.shape, dtype=torch.float64, device="meta")  # shapes only
        assert tuple(case.torch_op()(x).shape) == case.output_shape, case.label


@pytest.mark.parametrize("argv", [["--modes", "fwd,back"], ["--sides", "jaxpool,mxnet"], ["--reps", "0"], ["--min-sample-ms", "-1"]])
def test_bad_arguments_exit(argv):
    with pytest.raises(SystemExit):
        cli.parse_args(argv)


def test_the_short_grid_is_the_default_and_the_full_one_is_asked_for():
    default, full = cli.parse_args([]), cli.parse_args(["--full"])
    assert (default.grid, full.grid) == ("short", "full")
    assert len(pooling.GRIDS["short"]) < len(pooling.GRIDS["full"])
    assert default.reps < full.reps
    assert "reduce_window" not in default.sides  # a candidate is timed only when asked for


# One case in the default run; the other window kinds repeat it under -m slow (the GPU
# table's reduce_window strategy, jaxpool's own, is checked against torch by
# tests/test_strategy_table.py).
@pytest.mark.parametrize("case", [
    pooling.avg((2, 3, 9, 9), 3, 2, 1, ceil_mode=True),
    pytest.param(pooling.avg((2, 3, 9, 9), 3, 2, 1, count_include_pad=False),
                 marks=pytest.mark.slow),
    pytest.param(pooling.adaptive((2, 3, 12, 12), (3, 4), channels_last=True),
                 marks=pytest.mark.slow),
    pytest.param(pooling.global_((2, 3, 5, 5), channels_last=True), marks=pytest.mark.slow),
], ids=lambda c: c.label)
def test_the_reduce_window_candidate_is_torch_exact_on_equal_windows(case):
    out = runner.run_case(case, {"reduce_window": None, "torch": None}, runner.Device(),
                          modes=("fwd", "gradgrad"), reps=1, min_sample_s=0)
    for r in out:
        assert r["sides"]["reduce_window"]["status"] == "ok", r["sides"]["reduce_window"]
        assert r["best_peer"] == "torch"  # a candidate is not a peer


def test_the_reduce_window_candidate_skips_ragged_windows():
    out = runner.run_case(pooling.adaptive((2, 3, 15, 15), 4), {"reduce_window": None},
                          runner.Device(), modes=("fwd",), reps=1, min_sample_s=0)
    assert out[0]["sides"]["reduce_window"]["status"] == "unsupported"


@pytest.mark.slow  # the eager modes' timing machinery; benchmarks.cells.eager's own cells
def test_eager_modes_time_first_and_repeat_calls_against_jit_and_torch(tmp_path):
    case = pooling.avg((2, 3, 9, 9), 3, 2, 1, ceil_mode=True)
    out = runner.run_case(case, {"jaxpool": None, "torch": None, "torch-1t": None, "floor": None,
                                 "reduce_window": None},
                          runner.Device(), modes=("eager-fwd", "eager-grad"), reps=2,
                          min_sample_s=0, first_reps=2)
    for r in out:
        jp, t = r["sides"]["jaxpool"], r["sides"]["torch"]
        assert jp["status"] == "ok" and t["status"] == "ok", r
        assert len(jp["first_samples_ms"]) == 2 and len(jp["jit_first_samples_ms"]) == 2
        assert len(t["first_samples_ms"]) == 1  # torch has no caches to clear
        assert jp["first_compiles"] >= 1  # a first call after clearing the caches compiles
        assert r["ratio_jit"] == jp["first_ms"] / jp["jit_first_ms"]
        assert r["best_torch"] in ("torch", "torch-1t") and r["ratio_torch"] > 0
        assert r["ratio_peer"] is None  # eager calls have their own targets
        assert "reduce_window" not in r["sides"]
    text = report.markdown(out, {"date": "d", "machine": "m", "versions": "v", "command": "c",
                                 "elapsed_s": 1.0, "reps": 2}, None)
    assert "| jaxpool jit first | first / jit first | repeat / torch |" in text
    assert text.count("| eager-") == 2


@pytest.mark.slow  # benchmarks.cells.eager's machinery on one cell (its compiles take seconds)
def test_eager_benchmark_times_every_side_after_python_work():
    from benchmarks.cells import eager

    cell = eager.CELLS[1]  # avg_pool2d(x, 2)
    rows = eager.run_cell(cell, reps=2, min_sample_s=0, device=runner.Device(), gap_us=500)
    assert [r["mode"] for r in rows] == list(eager.MODES)
    for r in rows:
        want = {"jaxpool", "jit", "torch", "torch-1t"} | ({"jax floor"} if r["mode"] == "grad"
                                                          else set())
        assert set(r["ms"]) == want
        # the 0.5 ms of Python work left out once: what is left is the call
        assert all(0 < ms < 0.5 or r["mode"] != "fwd" for ms in r["ms"].values()), r
    text = eager.table(rows, runner.Device(), gap_us=500)
    assert "each after 500 us of Python work (left out)" in text
    assert text.count(cell.name) == 3


def test_first_calls_clear_jax_caches_between_calls():
    import jax
    import jax.numpy as jnp

    x = jnp.ones((3, 5))
    f = jax.jit(lambda a: jnp.sin(a) * 3)
    f(x)
    ms, compiles, y = runner.first_calls(lambda: f(x).block_until_ready(), True, 3)
    assert len(ms) == 3 and compiles == 1
    ms, compiles, _ = runner.first_calls(lambda: f(x).block_until_ready(), False, 3)
    assert len(ms) == 1 and compiles == 0  # not cleared: already compiled
    np.testing.assert_allclose(y, np.sin(1.0) * 3, rtol=1e-6)


def test_max_cells_hold_ties_that_catch_a_gradient_sent_to_another_element(monkeypatch):
    import jaxpool

    def last_of_ties(case):
        # The same windows read right to left: the same values, but within a row the
        # gradient goes to the last of equal maxima instead of torch's first.
        return (lambda x: jaxpool.max_pool2d(x[..., ::-1], 3, 2, 1)[..., ::-1]), None

    monkeypatch.setitem(sides.JAX_SIDES, "flax", last_of_ties)
    case = pooling.max_((2, 3, 9, 9), 3, 2, 1)
    out = runner.run_case(case, {"jaxpool": None, "torch": None, "flax": None}, runner.Device(),
                          modes=("fwd", "grad"), reps=1, min_sample_s=0)
    assert [r["sides"]["jaxpool"]["status"] for r in out] == ["ok", "ok"]
    assert [r["sides"]["flax"]["status"] for r in out] == ["ok", "wrong"]


def test_every_side_runs_or_says_why_on_the_max_cells():
    for case in pooling.SMOKE:
        if not case.is_max:
            continue
        out = runner.run_case(case, {s: sides.missing_reason(s) for s in sides.SIDE_NAMES},
                              runner.Device(), modes=("fwd",), reps=1, min_sample_s=0)
        got = out[0]["sides"]
        assert got["jaxpool"]["status"] == "ok", (case.label, got["jaxpool"])
        assert got["torch"]["status"] == "ok"
        assert got["reduce_window"]["status"] == "unsupported"  # an average-pooling candidate
        for name, e in got.items():
            assert e["status"] in ("ok", "wrong", "unsupported", "missing"), (case.label, name, e)


def test_gpu_check_without_a_gpu_says_so_and_skips_its_sections(tmp_path, monkeypatch):
    import jax

    from benchmarks.programs import gpu_check

    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("a GPU is present")
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    assert gpu_check.main(["--quick", "--out", str(tmp_path)]) == 2
    assert "every section below needs one and is skipped" in (tmp_path / "gpu-report.md").read_text()


def test_gpu_check_stem_double_backward_is_torchs_and_scatter_free():
    from benchmarks.programs import gpu_check

    arrays = gpu_check.stem_arrays((2, 3, 9, 9))
    got, hlo = gpu_check.jax_stem(arrays)
    ref = gpu_check.torch_stem(arrays, "cpu", torch.float64)
    assert set(got) == set(ref)
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-5, err_msg=name)
    assert gpu_check.worrying_ops(hlo) == "none"
    assert gpu_check.worrying_ops("%s = f32[2] scatter(%a), %g = f32[1] gather(%b)") == "1 gather, 1 scatter"


# Slow: compiling the penalty's double backward through torchax costs about 6 s of CPU. By
# default tests/test_examples.py runs the same network's gradient through torchax and
# jaxpool without scatter, and tests/test_torchax_deformable.py higher derivatives through
# torchax without scatter.
@pytest.mark.slow
def test_gpu_check_torchax_penalty_through_jaxpool_is_scatter_free():
    pytest.importorskip("jaxpool.torchax")  # before torchax: see jaxpool.torchax
    from benchmarks.programs import gpu_check

    (grads,), hlo = gpu_check.torchax_penalty(True, quick=True)
    assert grads and all(np.all(np.isfinite(g)) for g in grads.values())
    assert gpu_check.worrying_ops(hlo) == "none"


def test_the_parity_floor_times_each_case_and_its_negation():
    from benchmarks.programs import parity_floor

    lines = parity_floor.run(every=2, ops={"pixel_shuffle"})
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[2:]}
    assert set(rows) == {"pixel_shuffle", "all"}
    cases, case_cpu, floor_cpu = (float(v) for v in rows["all"].split(" | ")[1:4])
    assert cases == 2 and case_cpu > 0 and floor_cpu > 0


def test_the_parity_floor_negates_float_inputs_only():
    from benchmarks.programs import parity_floor

    x, indices = np.ones(3, np.float32), np.arange(3)
    (negated,) = parity_floor._negate(x, indices)
    np.testing.assert_array_equal(negated, -x)
    (negated,) = parity_floor._negate(torch.ones(2, dtype=torch.bfloat16), torch.arange(2))
    assert negated.dtype == torch.bfloat16 and (negated == -1).all()
    with pytest.raises(SystemExit):
        parity_floor.main(["--every", "0"])


def test_unpool_pad_table_checks_and_times_every_side_on_tiny_cells():
    import dataclasses

    from benchmarks.cells import padding, unpooling
    from benchmarks.programs import unpool_pad

    rows = []
    for family, cell in ((unpooling, unpooling.CELLS[1]), (padding, padding.CELLS[0])):
        tiny = dataclasses.replace(cell, shape=(1, 2) + (4,) * (len(cell.shape) - 2))
        rows += unpool_pad.run_cell(family, tiny, reps=1, min_sample_s=0,
                                    device=runner.Device())
    assert [r["mode"] for r in rows] == list(runner.MODES) * 2
    for r in rows:
        assert not r["notes"], r
        peer = "jnp scatter" if r["cell"] == unpooling.CELLS[1].name else "jnp.pad"
        floor = {"floor"} if r["mode"].endswith("fwd") else set()  # the forward modes'
        assert set(r["ms"]) == {"jaxpool", peer, "torch", "torch-1t"} | floor, r
    text = unpool_pad.markdown(rows, "meta")
    assert text.count(f"| {unpooling.CELLS[1].name} |") == len(runner.MODES)


def _tiny_patch_cells():
    from benchmarks.programs import patches_roi

    return patches_roi.cells(batch=1, boxes=4, mask_boxes=4, channels=2)


# (the default run times one cell: each cell compiles three sides to the second derivative)
@pytest.mark.parametrize("names", [
    ["tnt-unfold"],
    pytest.param(["tnt-unfold", "volo-fold", "roi-box"], marks=pytest.mark.slow)])
def test_patches_benchmark_checks_and_times_every_side_on_tiny_cells(names):
    from benchmarks import derivatives

    out = derivatives.run(names, reps=2, min_sample_s=0, built=_tiny_patch_cells())
    assert [(r["cell"], r["quantity"]) for r in out] == [
        (c, q) for c in names for q in derivatives.MODES]
    peers = {"tnt-unfold": "conv_general_dilated_patches",
             "volo-fold": "linear_transpose(patches)", "roi-box": "jnp gather"}
    for r in out:
        assert set(r["sides"]) == {"jaxpool", "torch", peers[r["cell"]]}, r["cell"]
        assert all(len(s["samples_ms"]) == 2 for s in r["sides"].values())
    text = derivatives.table(out)
    assert text.count("\n") == len(out) + 1
    assert "| TNT-S pixel embedding ([1, 24, 56, 56], k4 p0 s4) | fwd |" in text
    if "roi-box" in names:
        assert "| box head: 4 boxes over P2-P5 (2 ch, 200, 100, 50, 25), 7x7 | fwd |" in text


@pytest.mark.parametrize("name,side,constants_too", [
    ("tnt-unfold", "conv_general_dilated_patches", False),
    ("roi-box", "jnp gather", True),  # boxes read 2 px (half a P2 pixel) off
])
def test_patches_benchmark_raises_on_a_wrong_side(name, side, constants_too):
    import dataclasses

    from benchmarks import derivatives

    cell = _tiny_patch_cells()[name]()
    right = cell.jax[side]

    def wrong(xs, cs):
        if constants_too:
            return right(xs, tuple(c.at[:, 1:].add(2.0) for c in cs))
        return right(xs, cs) * 1.001

    off = dataclasses.replace(cell, jax=dict(cell.jax, **{side: wrong}))
    with pytest.raises(AssertionError, match=f"{side} {name} fwd"):
        derivatives.run([name], reps=1, min_sample_s=0, built={name: lambda: off})


def test_patches_benchmark_bad_arguments_exit():
    from benchmarks.programs import patches_roi

    for argv in (["--cells", "volo,nope"], ["--boxes", "10"], ["--batch", "0"]):
        with pytest.raises(SystemExit):
            patches_roi.main(argv)
