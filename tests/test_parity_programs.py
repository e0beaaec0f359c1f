"""``parity.programs``: compiled programs and torch's results kept on disk, loaded instead of
recomputed, never stale."""

import sys

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch

import jaxpool
import parity
from parity import programs
from parity.checks import check_program_options
from parity.tolerances import is_float
from parity.suite import cases as suite
from parity.suite import runner
from parity.suite.ops import MAX_KINDS, unavailable

from default_share import default_share

pytestmark = pytest.mark.skipif(not programs.serialization_available(),
                                reason="this jax cannot serialize compiled programs")


class _Counting:
    """A JAX function that counts the times it is traced or called."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args):
        self.calls += 1
        return self.fn(*args)


def _pool(x):
    return jaxpool.max_pool2d(x, 3, 2, 1)


def _torch_pool(x):
    return torch.nn.functional.max_pool2d(x, 3, 2, 1)


def _compare(fn, x, key, **kw):
    return parity.compare(fn, _torch_pool, x, orders=2, program_key=key, **kw)


def _results(report):
    return [(r.name, r.abs_err, r.ok) for r in report.rows]


def test_a_stored_program_is_loaded_instead_of_traced(tmp_path, rng):
    x = rng.standard_normal((2, 3, 7, 6))
    fresh = _Counting(_pool)
    plain = _compare(fresh, x, None)
    with programs.program_store(tmp_path):
        first = _Counting(_pool)
        stored = _compare(first, x, "max_pool2d k3 s2 p1")
        second = _Counting(_pool)
        loaded = _compare(second, x, "max_pool2d k3 s2 p1")
    assert len(list(tmp_path.glob("*/*.xla"))) == 1
    assert plain.ok and stored.ok and loaded.ok
    assert _results(plain) == _results(stored) == _results(loaded)
    # Every check traces the function again; from the store nothing does.
    assert first.calls == fresh.calls > 5
    assert second.calls == 0
    assert len(list(tmp_path.glob("*/*.json"))) == 1  # the output's shapes and dtypes


def test_no_key_or_no_store_traces_every_time(tmp_path, rng):
    x = rng.standard_normal((1, 2, 5, 5))
    for key, store in ((None, tmp_path), ("k", None)):
        with programs.program_store(store):
            fns = [_Counting(_pool) for _ in range(2)]
            for fn in fns:
                _compare(fn, x, key)
        assert fns[0].calls == fns[1].calls > 5
    assert not any(tmp_path.glob("*/*.xla"))


def test_changed_sources_shapes_or_dtypes_miss_the_store(tmp_path, rng, monkeypatch):
    # Small values: every output's scale is 1, so only the arrays tell these calls apart.
    x = 0.1 * rng.standard_normal((1, 2, 5, 5))
    with programs.program_store(tmp_path):
        _compare(_pool, x, "k")
        for other in (x[..., :4], x.astype(np.float32)):
            fn = _Counting(_pool)
            assert _compare(fn, other, "k").ok
            assert fn.calls > 5
    assert len(list(tmp_path.glob("*/*.xla"))) == 3
    monkeypatch.setattr(programs, "fingerprint", lambda: "another version of jaxpool")
    with programs.program_store(tmp_path):
        fn = _Counting(_pool)
        _compare(fn, x, "k")
        assert fn.calls > 5
    # the programs of the old fingerprint are gone, the new one's kept
    assert len(list(tmp_path.glob("*/*.xla"))) == 1


def test_the_fingerprint_follows_the_source(tmp_path, monkeypatch):
    programs.fingerprint.cache_clear()
    before = programs.fingerprint()
    source = tmp_path / "parity"
    source.mkdir()
    (source / "__init__.py").write_text("")
    monkeypatch.setattr(programs, "_PACKAGES", ("parity",))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "parity")
    try:
        programs.fingerprint.cache_clear()
        empty = programs.fingerprint()
        (source / "__init__.py").write_text("x = 1\n")
        programs.fingerprint.cache_clear()
        edited = programs.fingerprint()
    finally:
        monkeypatch.undo()
        programs.fingerprint.cache_clear()
    assert len({before, empty, edited}) == 3
    assert programs.fingerprint() == before


def test_a_damaged_entry_is_a_miss(tmp_path, rng):
    x = rng.standard_normal((1, 2, 5, 5))
    with programs.program_store(tmp_path):
        _compare(_pool, x, "k")
        (entry,) = tmp_path.glob("*/*.xla")
        entry.write_bytes(b"not a program")
        fn = _Counting(_pool)
        assert _compare(fn, x, "k").ok
        assert fn.calls > 5


def test_a_wrong_stored_program_is_caught_not_trusted(tmp_path, rng):
    """The store is keyed on what the caller names; a program stored for another function
    under the same name would be run, and the comparison with torch then fails loudly."""
    x = rng.standard_normal((1, 2, 5, 5))
    with programs.program_store(tmp_path):
        _compare(lambda x: jnp.negative(_pool(x)), x, "k")
        assert not _compare(_pool, x, "k").ok


def test_the_suite_names_each_case_completely_and_runs_from_the_store(tmp_path):
    cases = suite.quick_cases(["adaptive_max_pool2d"], ["float32"])
    assert len({repr(c) for c in cases}) == len(cases)
    case = cases[0]
    with runner.compilation_cache(tmp_path):
        first = suite.run_case(case)
        second = suite.run_case(case)
    assert first.ok and second.ok
    assert [r.abs_err for r in first.report.rows] == [r.abs_err for r in second.report.rows]
    assert len(list((tmp_path / "programs").glob("*/*.xla"))) == 1
    assert len(list((tmp_path / "programs").glob("*/*.json"))) == 1


def test_torch_results_are_stored_and_follow_the_arrays_values(tmp_path, rng):
    """torch's side of a named comparison comes from the store the second time; the same
    name with other values (same shapes) computes it afresh."""
    # Small values: every output's scale is 1, so only the arrays' values tell x from y.
    x = 0.1 * rng.standard_normal((1, 2, 5, 5))
    y = np.ascontiguousarray(x[..., ::-1])
    torch_fn = _Counting(_torch_pool)

    def run(array):
        return parity.compare(_pool, torch_fn, array, orders=2, program_key="k")

    plain = parity.compare(_pool, _torch_pool, x, orders=2)
    with programs.program_store(tmp_path):
        first = run(x)
        computed = torch_fn.calls
        torch_fn.calls = 0
        second = run(x)
        forward_only = torch_fn.calls
        torch_fn.calls = 0
        other = run(y)
    assert len(list(tmp_path.glob("*/*.pickle"))) == 2
    assert plain.ok and first.ok and second.ok and other.ok
    assert _results(plain) == _results(first) == _results(second)
    assert forward_only == 1 < computed  # the forward (for shapes and scales), no derivative
    assert torch_fn.calls == computed
    assert _results(other) == _results(parity.compare(_pool, _torch_pool, y, orders=2))


def test_a_failure_on_torchs_side_is_stored_as_reported(tmp_path, rng):
    x = rng.standard_normal((1, 2, 5, 5))

    class NoDerivatives(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return _torch_pool(x)

    with programs.program_store(tmp_path):
        reports = [parity.compare(_pool, NoDerivatives.apply, x, orders=1, program_key="k")
                   for _ in range(2)]
    rows = [[(r.name, r.ok, r.note) for r in report.rows] for report in reports]
    assert rows[0] == rows[1]
    assert [ok for _, ok, _ in rows[1]] == [True, False, False]
    assert all("torch raised" in note for _, _, note in rows[1][1:])


_SUITE_CASES = [c for c in suite.quick_cases()
                if isinstance(c, suite.Case) and unavailable(c.op) is None]


@pytest.mark.parametrize("case", default_share(_SUITE_CASES, 41), ids=lambda c: c.key)
def test_the_suites_compile_options_keep_values_and_move_derivatives_by_ulps(case, monkeypatch):
    # The suite compiles its checks for compile time, not speed (CHECK_PROGRAM_OPTIONS):
    # against XLA's defaults, integers and max pooling's picked values are the same bits,
    # and every other result is within a few ulps of its scale, far inside every tolerance.
    compare_module = sys.modules["parity.compare"]
    original, got = compare_module.run_jax, {}

    def both_ways(table, make_side, args, jit, name=None, compiler_options=None):
        got["options"] = compiler_options
        got["suite"] = original(table, make_side, args, jit, None, compiler_options)
        got["default"] = original(table, make_side, args, jit, None, None)
        return got["suite"]

    monkeypatch.setattr(compare_module, "run_jax", both_ways)
    assert suite.run_case(case).ok
    assert got["options"] == check_program_options()
    for check, results in got["default"].items():
        for want, have in zip(results, got["suite"][check], strict=True):
            picked = check == "value" and suite.OPS[case.op].kind in MAX_KINDS
            if picked or not is_float(want.dtype):
                assert want.tobytes() == have.tobytes(), (check, want, have)
                continue
            eps = float(ml_dtypes.finfo(want.dtype).eps)
            want, have = want.astype(np.float64), have.astype(np.float64)
            finite = np.isfinite(want)
            assert np.array_equal(want[~finite], have[~finite], equal_nan=True), check
            scale = float(np.max(np.abs(want[finite]), initial=0.0))
            err = float(np.max(np.abs(want[finite] - have[finite]), initial=0.0))
            assert err <= 16 * eps * scale, (check, err, scale)


def test_an_option_this_jaxlib_does_not_know_is_left_out(monkeypatch):
    import parity.checks as checks_module

    known = checks_module.check_program_options()
    assert known.items() <= checks_module.CHECK_PROGRAM_OPTIONS.items()
    monkeypatch.setattr(checks_module, "CHECK_PROGRAM_OPTIONS",
                        {**checks_module.CHECK_PROGRAM_OPTIONS, "xla_no_such_option": True})
    assert checks_module.check_program_options() == known
