"""The suite of every jaxpool op, its report and the ``python -m parity`` command."""

import dataclasses
import itertools
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from rich.console import Console

import jaxpool
import parity
from parity.suite import cases as suite
from parity.suite import ops as suite_ops
from parity.suite import report as report_mod
from parity.suite import runner
from parity.suite.cli import build_parser, main, select_cases


def _case(op, dtype="float64", channels_last=False):
    shape, kw, *_ = suite._main(op)[0]
    return suite.Case(op, shape, tuple(kw.items()), dtype, channels_last)


def _crossed_grid():
    """The default grid before it took dtypes and layouts in turn (322 cases): every main
    argument set in every dtype and layout, the other sets in float64 channels-first, the
    values-only cases in float64, the bad-argument calls."""
    cases = []
    for op in suite.OPS:
        layouts = [layout == "last" for layout in suite._layouts(op, ["first", "last"])]
        for (shape, kw, *more), dtype, last in itertools.product(suite._main(op), suite.DTYPES,
                                                                 layouts):
            cases.append(suite.Case(op, shape, tuple(kw.items()), dtype, last,
                                    shapes=more[0] if more else ()))
        cases += [suite.Case(op, shape, tuple(kw.items()), shapes=more[0] if more else ())
                  for shape, kw, *more in suite._extra(op)]
        cases += suite._values_only_cases(op, ("float64",))
        cases.append(suite.error_cases(op))
    return cases


def _derivative_cases(cases):
    return [c for c in cases if isinstance(c, suite.Case) and not c.special]


def test_default_grid_holds_every_op_dtype_layout_and_order():
    cases = suite.quick_cases()
    keys = [c.key for c in cases]
    assert len(keys) == len(set(keys))
    pairs = {(d, lay) for d in suite.DTYPES for lay in ("first", "last")}
    for op in suite.OPS:
        mine = [c for c in _derivative_cases(cases) if c.op == op]
        assert {c.dtype for c in mine} == set(suite.DTYPES), op
        # both layouts, where the op takes them (its function's channels_last)
        layouts = set(suite._layouts(op, ["first", "last"]))
        assert {c.layout for c in mine} == layouts, op
        # to order 3 but in half precision (order 2), and to order 3 in both layouts
        assert all(c.orders == (2 if c.dtype in ("float16", "bfloat16") else 3)
                   for c in mine), op
        assert {c.layout for c in mine if c.orders == 3} == layouts, op
        assert any(isinstance(c, suite.ErrorCase) and c.op == op for c in cases)
        # every kind of op with more than one member sees every dtype in either layout
        kind = [c for c in _derivative_cases(cases) if suite.OPS[c.op].kind == suite.OPS[op].kind]
        if (len({c.op for c in kind}) > 1 or len(kind) >= len(pairs)) and len(layouts) == 2:
            assert {(c.dtype, c.layout) for c in kind} == pairs, op
    # far fewer programs than the crossed grid
    assert len([c for c in cases if isinstance(c, suite.Case)]) < len(
        [c for c in _crossed_grid() if isinstance(c, suite.Case)]) / 2


def _kinds(case):
    """What a case's arguments are like: each flag and mode, and of each number whether it
    is negative, 0, 1, more, or not an integer; and the input's rank."""
    def kind(v):
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, float) and not v.is_integer():
            return "not an integer"
        return "negative" if v < 0 else min(int(v), 2)

    def flat(value):  # (multi_scale_deformable_attention's spatial_shapes nest pairs)
        if isinstance(value, tuple):
            return [v for item in value for v in flat(item)]
        return [value]

    out = {("rank", len(case.shape))}
    for name, value in case.kwargs:
        for v in flat(value):
            out.add((name, kind(v)))
    return out


def test_default_grid_keeps_every_kind_of_argument_and_every_values_only_case():
    """Each op sees in the default grid every kind of argument the crossed grid gave it
    (each flag and mode; padding, dilation, strides and kernels of 1 and more; negative
    pads, non-integer scales, None sizes; batched and unbatched inputs), and the same
    values-only cases."""
    def kinds(cases, op):
        return set().union(*(_kinds(c) for c in _derivative_cases(cases) if c.op == op))

    crossed, default = _crossed_grid(), suite.quick_cases()
    for op in suite.OPS:
        missing = kinds(crossed, op) - kinds(default, op)
        assert not missing, (op, missing)
    special = {c.key for c in default if isinstance(c, suite.Case) and c.special}
    assert special == {c.key for c in crossed if isinstance(c, suite.Case) and c.special}


def test_the_default_grid_s_stand_ins_keep_the_kinds_of_argument_they_stand_for():
    """A cheaper set in the default grid in place of a costly one (which --full runs)."""
    assert suite.CHEAPER
    for (op, i), (shape, kw) in suite.CHEAPER.items():
        original = (suite.MAIN[op] + suite.EXTRA[op])[i]
        new, old = (suite.Case(op, s, tuple(k.items())) for s, k in ((shape, kw), original))
        assert _kinds(old) <= _kinds(new), (op, _kinds(old) - _kinds(new))
        default = {c.label for c in suite.quick_cases([op]) if isinstance(c, suite.Case)}
        assert new.label in default and old.label not in default
        assert old.key in {c.key for c in suite.full_cases([op], ["float64"])}


def test_full_grid_holds_the_crossed_grid():
    crossed = {c.key for c in _crossed_grid()}
    assert len(crossed) >= 322
    full = {c.key for c in suite.full_cases()}
    assert crossed <= full and len(full) > 3000


def test_every_case_of_either_grid_is_a_valid_torch_call():
    """A case on which torch raises checks nothing but that both raise. (Not the cases of
    an op whose twin does not load here.)"""
    import torch

    unchecked = suite.unchecked()
    for case in _derivative_cases(suite.quick_cases() + suite.full_cases()):
        if case.op in unchecked:
            continue
        arrays = [torch.from_numpy(a.astype(np.float64) if a.dtype.kind != "i" else a)
                  for a in case.inputs()]
        try:
            case.functions()[1](*arrays)
        except Exception as e:  # noqa: BLE001 - any error is the finding
            pytest.fail(f"{case.key}: torch raises {e}")


def test_grid_filters():
    cases = suite.quick_cases(["adaptive_avg_pool2d"], ["float16"])
    assert {c.op for c in cases} == {"adaptive_avg_pool2d"}
    assert {c.dtype for c in cases} == {"float16", "-"}


def test_case_inputs_follow_layout_and_dtype_and_are_reproducible():
    first, last = _case("avg_pool2d"), _case("avg_pool2d", "bfloat16", channels_last=True)
    (x,), (y,) = first.inputs(), last.inputs()
    assert x.shape == (2, 3, 7, 9) and y.shape == (2, 7, 9, 3)
    assert y.dtype == suite.DTYPES["bfloat16"]
    assert np.array_equal(x, first.inputs()[0])  # seeded by the case
    assert not np.array_equal(x, _case("avg_pool2d", "float32").inputs()[0])


def test_every_family_and_interpolation_mode_is_in_the_grid():
    assert {"interpolate", "pad", "pixel_shuffle", "pixel_unshuffle", "max_unpool1d",
            "max_unpool2d", "max_unpool3d"} <= set(suite.OPS)
    cases = [c for c in suite.quick_cases(["interpolate", "pad"]) if isinstance(c, suite.Case)]
    kwargs = [dict(c.kwargs) for c in cases if c.orders >= 2]
    assert {kw["mode"] for kw in kwargs if "size" in kw or "scale_factor" in kw} == {
        "nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area"}
    assert {kw["mode"] for kw in kwargs if "pad" in kw} == {
        "constant", "reflect", "replicate", "circular"}
    assert {m for kw in kwargs if kw.get("antialias") for m in [kw["mode"]]} == {
        "bilinear", "bicubic"}


def test_max_unpool_indices_are_torch_max_pool_indices_in_either_layout():
    import torch

    for op in ("max_unpool1d", "max_unpool2d", "max_unpool3d"):
        first, last = _case(op), _case(op, "float32", channels_last=True)
        (x, indices), (y, indices_last) = first.inputs(), last.inputs()
        assert indices.dtype == np.int64 and indices.shape == x.shape
        assert np.moveaxis(indices_last, -1, 1).shape == indices.shape == y.shape[:1] + (
            y.shape[-1],) + y.shape[1:-1]
        # unpooling puts every value at a distinct place: no index repeats in a plane
        planes = indices.reshape(indices.shape[0] * indices.shape[1], -1)
        assert all(np.unique(p).size == p.size for p in planes), op
        out = getattr(torch.nn.functional, op)(torch.from_numpy(x), torch.from_numpy(indices),
                                               **dict(first.kwargs))
        assert np.count_nonzero(out.numpy()) == x.size


# adaptive_avg_pool3d under -m slow: its cases cost what the other two together do, and the
# planted-bug test below runs an adaptive op's case by default.
@pytest.mark.parametrize("op", ["avg_pool1d", pytest.param("adaptive_avg_pool3d",
                                                           marks=pytest.mark.slow),
                                "global_avg_pool"])
def test_suite_cases_pass(op):
    for case in (_case(op, "float32", channels_last=True), _case(op, "bfloat16"),
                 suite.error_cases(op)):
        res = suite.run_case(case)
        assert res.ok, res.report


def test_avg_pool1d_divisor_override_goes_through_avg_pool2d():
    case = suite.Case("avg_pool1d", (2, 3, 10), (("kernel_size", 3), ("stride", 2),
                                                  ("divisor_override", 2)), orders=1)
    assert suite.run_case(case).ok


def _broken_adaptive_avg_pool1d(x, output_size, *, channels_last=False):
    # Plain pooling with kernel ceil(n/k): right only where k divides n.
    n = x.shape[-2 if channels_last else -1]
    k = -(-n // output_size)
    return jaxpool.avg_pool1d(x, k, max(1, (n - k) // max(output_size - 1, 1)),
                              channels_last=channels_last)


_global_avg_pool = jaxpool.global_avg_pool


@jax.custom_vjp
def _wrong_vjp_global(x):
    return _global_avg_pool(x)


_wrong_vjp_global.defvjp(
    lambda x: (_global_avg_pool(x), x.shape),
    lambda shape, g: (2.0 * jax.numpy.broadcast_to(g[..., None, None], shape) / (shape[-1] * shape[-2]),),
)


def test_suite_catches_planted_jaxpool_bugs(monkeypatch):
    case = suite.Case("adaptive_avg_pool1d", (2, 3, 11), (("output_size", 4),), orders=1)
    assert suite.run_case(case).ok
    monkeypatch.setattr(jaxpool, "adaptive_avg_pool1d", _broken_adaptive_avg_pool1d)
    res = suite.run_case(case)
    assert not res.ok and res.report.first_failing_order == 0

    case = _case("global_avg_pool")
    monkeypatch.setattr(jaxpool, "global_avg_pool",
                        lambda x, channels_last=False: _wrong_vjp_global(x))
    res = suite.run_case(case)
    assert not res.ok and res.report.first_failing_order == 1


def test_max_inputs_have_no_ties_unless_the_case_is_about_ties():
    """Derivatives of a max agree only away from ties; values and indices are checked on
    inputs full of them."""
    for dtype in suite.DTYPES:
        for op in ("max_pool3d", "adaptive_max_pool1d", "global_max_pool"):
            (x,) = _case(op, dtype).inputs()
            assert np.unique(x).size == x.size, (op, dtype)
    ties = [c for c in suite.quick_cases(["max_pool2d", "adaptive_max_pool3d"])
            if isinstance(c, suite.Case) and "ties" in c.special]
    assert len(ties) == 4 and all(c.orders == 0 for c in ties)
    assert {c.layout for c in ties} == {"first", "last"}
    for c in ties:
        (x,) = c.inputs()
        assert np.unique(x).size < x.size / 2, c.key
    # an odd LP norm: positive inputs for the derivatives, signed ones for the values only
    assert (_case("lp_pool2d").inputs()[0] > 0).all()
    signed = [c for c in suite.quick_cases(["lp_pool1d"], ["float64"])
              if isinstance(c, suite.Case) and c.special == "negative sums"]
    assert signed and (signed[0].inputs()[0] < 0).any() and signed[0].orders == 0


def _max_pool2d_last_of_ties(x, *args, channels_last=False, **kwargs):
    """Picks the last of equal elements where torch picks the first: pools the input
    flipped in H and W (the same windows, for symmetric arguments) and maps the indices
    back. Channels-first."""
    h, w = x.shape[-2:]
    values, indices = _max_pool2d(x[..., ::-1, ::-1], *args, **kwargs)
    rows, cols = indices // w, indices % w
    flipped = (h - 1 - rows) * w + (w - 1 - cols)
    return values[..., ::-1, ::-1], flipped[..., ::-1, ::-1]


def _max_pool2d_indices_off_by_one(x, *args, **kwargs):
    values, indices = _max_pool2d(x, *args, **kwargs)
    return values, indices.at[..., 0].add(1)


_max_pool2d = jaxpool.max_pool2d


def test_suite_catches_planted_max_pool_bugs(monkeypatch):
    relu_ties = next(c for c in suite.quick_cases(["max_pool2d"], ["float64"])
                     if isinstance(c, suite.Case) and c.special == "relu ties")
    # the same symmetric windows, channels-first, on distinct and on integer inputs
    distinct = dataclasses.replace(relu_ties, special="", orders=1)
    integer_ties = dataclasses.replace(relu_ties, special="integer ties")
    for case in (distinct, relu_ties, integer_ties):
        assert suite.run_case(case).ok, case.key

    monkeypatch.setattr(jaxpool, "max_pool2d", _max_pool2d_last_of_ties)
    assert suite.run_case(distinct).ok  # no ties: the same element wins
    for case in (relu_ties, integer_ties):
        res = suite.run_case(case)
        assert [r.name for r in res.report.failures] == ["value output[1]"]  # the indices

    monkeypatch.setattr(jaxpool, "max_pool2d", _max_pool2d_indices_off_by_one)
    res = suite.run_case(distinct)
    assert [r.name for r in res.report.failures] == ["value output[1]"]
    assert res.report.failures[0].tol == 0.0


def test_report_formats():
    results = [suite.run_case(_case("global_avg_pool")),
               suite.run_case(suite.error_cases("global_avg_pool"))]
    console = Console(record=True, width=200)
    report_mod.render_table(results, console, seconds=1.0)
    text = console.export_text()
    assert "global_avg_pool" in text and "order 3" in text and text.rstrip().endswith("in 1 s")
    assert "PASS: 2 cases" in text

    doc = json.loads(report_mod.to_json(results, 1.0))
    assert doc["summary"]["ok"] is True and doc["summary"]["cases"] == 2
    assert doc["cases"][0]["rows"][0]["name"] == "value"
    assert doc["environment"]["jaxpool"] == jaxpool.__version__

    assert [o["op"] for o in doc["ops"]] == ["global_avg_pool"]
    assert doc["ops"][0]["error_calls"] == len(suite.error_cases("global_avg_pool").calls)

    md = report_mod.to_markdown(results, 1.0)
    assert "| op | case | dtype | layout | order 0 | order 1 | order 2 | order 3 | result |" in md
    assert "| op | cases | checks | order 0 | order 1 | order 2 | order 3 | errors | result |" in md
    assert "**PASS" in md


def _made_up_results(failing_key=None):
    """A result for every case of the default grid, without running any: checks of every
    order with made-up errors; the case ``failing_key`` fails its second derivative."""
    from parity.results import Report, Row

    out = []
    for case in suite.quick_cases():
        if isinstance(case, suite.ErrorCase):
            rows = [Row(f"raises ({label})", 0, 0.0, 0.0, 0.0, True) for label, *_ in case.calls]
        else:
            rows = [Row(name, order, 1e-16 * (order + 1), 1e-15 * (order + 1), 1e-12,
                        not (case.key == failing_key and order == 2))
                    for order in range(case.orders + 1) for name in ("vjp", "jvp")]
        out.append(suite.CaseResult(case, Report(rows, label=case.key), 0.1))
    return out


def test_the_default_output_is_a_row_per_op_on_one_screen():
    console = Console(record=True, width=120)
    report_mod.render_summary(_made_up_results(), console, seconds=42.0)
    lines = console.export_text().rstrip().splitlines()
    assert len(lines) <= 12 + len(suite.OPS), "\n".join(lines)
    firsts = [line.split()[0] for line in lines if line.split()]
    assert all(firsts.count(op) == 1 for op in suite.OPS)
    header = next(line for line in lines if line.lstrip().startswith("op"))
    assert header.split() == ["op", "cases", "checks", "order", "0", "order", "1", "order", "2",
                              "order", "3", "errors", "result"]
    pool3d = next(line.split() for line in lines if line.split()[:1] == ["max_pool3d"])
    n = len([c for c in suite.quick_cases(["max_pool3d"]) if isinstance(c, suite.Case)])
    assert pool3d[1] == str(n) and pool3d[-1] == "pass" and pool3d[-3] == "4.0e-15"
    assert lines[-1].startswith("PASS: ") and lines[-1].endswith("in 42 s")

    failing = next(c for c in suite.quick_cases(["lp_pool2d"]) if c.dtype == "bfloat16")
    console = Console(record=True, width=120)
    report_mod.render_summary(_made_up_results(failing.key), console)
    text = console.export_text()
    rows = {}
    for line in text.splitlines():  # the table's row, not the failure's heading below it
        if line.split():
            rows.setdefault(line.split()[0], line.split())
    assert rows["lp_pool2d"][-1] == "FAIL" and rows["lp_pool1d"][-1] == "pass"
    assert failing.key in text and text.rstrip().splitlines()[-1].startswith("FAIL: 1 of")


def test_cli_detail_prints_a_row_per_case(capsys):
    argv = ["--op", "pixel_shuffle", "--orders", "1", "--no-progress", "--jobs", "1",
            "--no-cache"]
    assert main(argv + ["--detail"]) == 0
    detail = capsys.readouterr().out
    assert main(argv) == 0
    short = capsys.readouterr().out
    labels = {c.label for c in suite.quick_cases(["pixel_shuffle"])}
    assert len(labels) == 3 and all(label in detail for label in labels)
    assert not any(label in short for label in labels) and "pixel_shuffle" in short


def test_cli_writes_json_and_markdown(tmp_path, capsys):
    js, md = tmp_path / "r.json", tmp_path / "r.md"
    # to order 1: the files are the point, not the derivatives
    code = main(["--op", "global_avg_pool", "--dtype", "float64", "--layout", "first",
                 "--orders", "1", "--no-progress", "--jobs", "1", "--no-cache", "--json",
                 str(js), "--markdown", str(md)])
    assert code == 0
    assert json.loads(js.read_text())["summary"]["ok"] is True
    assert md.read_text().startswith("# parity")
    assert "PASS" in capsys.readouterr().out


def test_cli_exit_status_is_1_on_failure(monkeypatch, capsys):
    monkeypatch.setattr(jaxpool, "global_avg_pool",
                        lambda x, channels_last=False: _wrong_vjp_global(x))
    code = main(["--op", "global_avg_pool", "--dtype", "float64", "--layout", "first",
                 "--orders", "1", "--no-progress", "--jobs", "1", "--no-cache"])
    out = capsys.readouterr().out
    assert code == 1 and "FAIL" in out and "vjp" in out


def _twin_fails_to_load(monkeypatch, error):
    """roi_align's twin as if loading torchvision raised ``error``."""
    def load():
        raise error

    monkeypatch.setitem(suite_ops._OPTIONAL_TWINS, "roi_align", ("torchvision", load))
    monkeypatch.setattr(suite_ops, "_loaded", {})


@pytest.mark.parametrize("error,why", [
    (ModuleNotFoundError("No module named 'torchvision'", name="torchvision"),
     "torchvision is not installed"),
    (RuntimeError("operator torchvision::nms does not exist"),
     "torchvision's compiled ops do not load (RuntimeError: operator torchvision::nms does "
     "not exist)"),
], ids=["not installed", "ops do not load"])
def test_an_op_whose_twin_does_not_load_is_named_with_why(monkeypatch, tmp_path, capsys,
                                                          error, why):
    """roi_align without torchvision: a row and a line that say it is not checked and why,
    in the table, --detail, --json, --markdown and --list; the exit status stays 0."""
    _twin_fails_to_load(monkeypatch, error)
    settle = "to check it, install the torchvision release built for torch"
    js, md = tmp_path / "r.json", tmp_path / "r.md"
    argv = ["--op", "global_avg_pool,roi_align", "--dtype", "float64", "--layout", "first",
            "--orders", "1", "--no-progress", "--jobs", "1", "--no-cache"]
    assert main(argv + ["--json", str(js), "--markdown", str(md)]) == 0
    out = capsys.readouterr().out
    row = next(line.split() for line in out.splitlines() if line.split()[:1] == ["roi_align"])
    assert row[1:3] == ["-", "-"] and row[-2:] == ["not", "checked"]
    text = " ".join(out.split())  # (rich wraps long lines)
    assert f"roi_align not checked: {why}; {settle}" in text
    assert "PASS: 4 cases" in text and "not checked: roi_align" in text

    doc = json.loads(js.read_text())
    assert doc["summary"]["ok"] is True and doc["summary"]["unchecked"] == ["roi_align"]
    (entry,) = doc["unchecked"]
    assert entry["op"] == "roi_align" and entry["checked"] is False
    assert entry["reason"].startswith(why) and settle in entry["reason"]
    assert {c["op"] for c in doc["cases"]} == {"global_avg_pool"}
    report = md.read_text()
    assert "| roi_align | - | - |" in report and f"roi_align not checked: {why}" in report

    assert main(argv + ["--detail"]) == 0
    assert f"roi_align not checked: {why}" in " ".join(capsys.readouterr().out.split())
    assert main(["--list", "--op", "roi_align"]) == 0
    assert capsys.readouterr().out.startswith(f"roi_align not checked: {why}")


def test_every_twin_in_torch_loads():
    # (the twins in optional packages, torchvision's RoI ops, may be absent: the report
    # says so, tested above)
    from parity.suite import ops

    assert suite.unchecked([op for op in suite.OPS if op not in ops._OPTIONAL_TWINS]) == {}


def test_cli_rejects_bad_arguments(capsys):
    for argv in (["--op", "no_such_op"], ["--dtype", "float8"], ["--quick", "--full"],
                 ["--orders", "-1"], ["--jobs", "0"], ["--no-cache", "--cache-dir", "x"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
    main(["--list", "--op", "avg_pool3d"])
    listed = capsys.readouterr().out.splitlines()
    assert listed and all(line.startswith("avg_pool3d") for line in listed)


def test_cli_orders_sets_every_derivative_case_s_order():
    parser = build_parser()
    for n in (1, 3):
        cases = select_cases(parser.parse_args(["--orders", str(n)]), parser)
        derivative = _derivative_cases(cases)
        assert {c.dtype for c in derivative} == set(suite.DTYPES)
        assert all(c.orders == n for c in derivative)
        assert all(c.orders == 0 for c in cases if isinstance(c, suite.Case) and c.special)


def test_python_dash_m_parity_runs_in_workers_through_the_user_cache(tmp_path, monkeypatch):
    cache = tmp_path / "jaxpool" / "parity"
    assert runner.default_cache_dir() != cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert runner.default_cache_dir() == cache
    help_text = build_parser().format_help()
    assert str(cache) in help_text.replace("\n", "").replace(" ", "")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    # to order 1: the workers and the cache are the point, not the derivatives
    proc = subprocess.run(
        [sys.executable, "-m", "parity", "--op", "global_avg_pool", "--dtype", "float16",
         "--layout", "last", "--orders", "1", "--no-progress", "--jobs", "2", "--json",
         str(tmp_path / "r.json")],
        capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "global_avg_pool" in proc.stdout and "PASS" in proc.stdout
    assert any(cache.iterdir())  # the compiled programs, for the next run
    # both cases came back from the workers, in order
    doc = json.loads((tmp_path / "r.json").read_text())
    assert [c["case"] for c in doc["cases"]] == [
        c.label for c in suite.quick_cases(["global_avg_pool"], ["float16"], ["last"])]
    assert len(doc["cases"]) == 4  # every argument set, and the bad arguments


def test_compilation_cache_is_used_and_then_restored(tmp_path):
    before = jax.config.jax_compilation_cache_dir
    with runner.compilation_cache(tmp_path):
        assert jax.config.jax_compilation_cache_dir == str(tmp_path)
        jax.jit(lambda x: x * 3.0 + 1.0)(np.arange(5.0)).block_until_ready()
    assert any(tmp_path.iterdir())
    assert jax.config.jax_compilation_cache_dir == before


@pytest.mark.slow
def test_quick_suite_passes():
    assert main(["--no-progress", "--no-cache"]) == 0


def test_generic_compare_is_exported():
    assert {"compare", "assert_parity", "compare_errors", "to_torch", "to_jax"} <= set(parity.__all__)
