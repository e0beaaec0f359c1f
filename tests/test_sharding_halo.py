"""Spatially sharded inputs inside ``shard_map`` (``axis_names=``): values and gradients
equal the unsharded call's, and the compiled programs exchange only halos.

Eight host devices are fixed when JAX starts, so the sharded checks run in a subprocess
with XLA_FLAGS set (``python -m jaxpool.halo.check``'s cases, the bad-sharding errors, the
plain-jit wrapper and shard_map's default check of per-device axes, all in one process:
one module fixture for the default run, one for -m slow); the halo arithmetic is plain
Python and is tested here directly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jaxpool.halo import plan as halo_plan
from jaxpool.resampling.plan import axis_sampling
from jaxpool.pooling.windows import adaptive_plan, avg_pool_plan, max_pool_plan

ROOT = Path(__file__).resolve().parents[1]

# A few cases in the default run (compiling sharded programs costs seconds each on a
# shared CPU); every case, both layouts, under -m slow.
# Under plain jit by default: a one-sided halo and a reduction, and a small pad that falls
# back (every case, both layouts, and the before/after table under -m slow). The plain-jit
# route runs the same per-device code as shard_map, so those two cases are not run in
# shard_map as well by default.
JIT_DEFAULT = ("max_pool2d 3/2/1", "global_max_pool")
TABLE_DEFAULT: tuple[str, ...] = ()
DEFAULT = ("adaptive_avg_pool2d 32 -> 24 (ragged)", "interpolate bilinear x2", "pad reflect",
           "max_unpool1d 3/2/1, output 32")

SCRIPT = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, PartitionSpec as P
    import jaxpool
    from jaxpool.halo import check as halo_check

    config, out = json.loads(sys.argv[1]), sys.argv[2]
    labels, layouts = config["labels"], config["layouts"]
    cases = [c for c in halo_check.CASES if labels is None or c[0] in labels]
    rows = halo_check.run(cases, layouts=tuple(layouts))
    mesh = Mesh(np.array(jax.devices()), ("a",))
    errors = {}
    for name, fn, shape in [
        ("output does not divide", lambda v: jaxpool.avg_pool2d(v, 3, 2, axis_names=("a", None)),
         (1, 1, 32, 4)),
        ("halo wider than a block", lambda v: jaxpool.avg_pool1d(v, 11, 1, 5, axis_names=("a",)),
         (1, 1, 32)),
        ("not a mesh axis", lambda v: jaxpool.max_pool1d(v, 2, axis_names=("h",)), (1, 1, 32)),
        ("one name per axis", lambda v: jaxpool.interpolate(v, scale_factor=2, axis_names=("a",)),
         (1, 1, 32, 4)),
    ]:
        f = jax.shard_map(fn, mesh=mesh, in_specs=P(None, None, "a"), out_specs=P(None, None, "a"))
        try:
            jax.eval_shape(f, jnp.zeros(shape))
            errors[name] = None
        except (ValueError, TypeError) as err:
            errors[name] = f"{type(err).__name__}: {err}"
    # under plain jit: the same cases, then today's program against the primitive
    from jax.sharding import NamedSharding
    jit_labels = config["jit_labels"]
    jit_rows = halo_check.run_jit([c for c in halo_check.CASES
                                   if jit_labels is None or c[0] in jit_labels],
                                  layouts=tuple(layouts))
    table = halo_check.jit_table(config["table"]) if config["table"] != [] else []
    # an output extent that does not divide (38 rows over 8 devices): a gathered input
    rows_1d = NamedSharding(mesh, P(None, None, "a"))
    v = jax.random.normal(jax.random.key(2), (2, 3, 32))
    pad = jax.jit(lambda u: jaxpool.pad(u, (3, 3), "reflect"), in_shardings=rows_1d)
    with jaxpool.halo.jit.route("never"):
        pad_want = jax.jit(lambda u: jaxpool.pad(u, (3, 3), "reflect"))(v)
    fallback = {"collectives": halo_check.collectives(pad.lower(v).compile().as_text()),
                "equal": bool((pad(v) == pad_want).all())}
    # reverse over reverse under plain jit, against the unsharded call
    rows_sh = NamedSharding(mesh, P(None, None, "a"))
    x = jax.random.normal(jax.random.key(1), (2, 3, 32, 6))
    def second_of(pool):
        return jax.grad(lambda v: (jax.grad(lambda u: (jnp.sin(pool(u))).sum())(v) ** 2).sum())
    second = jax.jit(second_of(lambda u: jaxpool.max_pool2d(u, 3, 2, 1)),
                     in_shardings=rows_sh, out_shardings=rows_sh)
    with jaxpool.halo.jit.route("never"):
        ref = jax.jit(second_of(lambda u: jaxpool.max_pool2d(u, 3, 2, 1)))(x)
    jit_second = {"collectives": halo_check.collectives(second.lower(x).compile().as_text()),
                  "diff": halo_check._diff(second(x), ref)}
    json.dump({"devices": len(jax.devices()), "rows": rows, "errors": errors,
               "jit_rows": jit_rows, "table": table, "jit_second": jit_second,
               "fallback": fallback,
               "vma": vma_check(config["vma"])}, open(out, "w"))  # vma_check: VMA_SCRIPT's
""")


def _run(tmp_path, labels, layouts, vma, table, jit_labels) -> dict:
    """One subprocess on 8 host devices: the halo cases named in ``labels`` (None: all) in
    ``layouts`` inside shard_map, those also in ``jit_labels`` under plain jit, the error
    checks, the plain-jit before/after rows named in ``table``, and shard_map's default
    check of the ops named in ``vma`` (an empty list: all)."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    out = tmp_path / "halo.json"
    config = {"labels": labels, "layouts": layouts, "vma": vma, "table": table,
              "jit_labels": jit_labels}
    proc = subprocess.run([sys.executable, "-c", VMA_SCRIPT + SCRIPT, json.dumps(config), str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=2700)
    assert out.exists(), f"the sharded check wrote nothing:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def default_check(tmp_path_factory) -> dict:
    return _run(tmp_path_factory.mktemp("halo"), list(DEFAULT), [False], list(VMA_DEFAULT),
                list(TABLE_DEFAULT), list(JIT_DEFAULT))


@pytest.fixture(scope="module")
def full_check(tmp_path_factory) -> dict:
    """Every case in both layouts, every op under shard_map's default check (-m slow)."""
    return _run(tmp_path_factory.mktemp("halo_full"), None, [False, True], [], None, None)


def _check_rows(rows):
    from jaxpool.halo.check import problems
    return [p for r in rows for p in problems(r)]


def test_sharded_values_derivatives_and_collectives(default_check):
    assert default_check["devices"] == 8
    rows = default_check["rows"]
    assert {r["case"] for r in rows} == set(DEFAULT)
    assert not _check_rows(rows), "\n".join(_check_rows(rows))
    # The search must find the exchanges that are there: one halo each way (bilinear x2
    # reads a row of each neighbour; test_plain_jit_exchanges_only_halos: a one-sided
    # halo and a reduction).
    by_case = {r["case"]: r for r in rows}
    assert by_case["interpolate bilinear x2"]["forward"] == {"collective-permute": 2}
    assert "second" in by_case["interpolate bilinear x2"]


def test_bad_sharding_raises_naming_the_argument(default_check):
    errors = default_check["errors"]
    assert "does not divide" in errors["output does not divide"]
    assert "axis_names" in errors["output does not divide"]
    assert "neighbour" in errors["halo wider than a block"]
    assert "'h' is not a mesh axis" in errors["not a mesh axis"]
    assert "2 entries" in errors["one name per axis"]


@pytest.mark.slow
def test_every_case_both_layouts(full_check):
    from jaxpool.halo.check import CASES
    result = full_check
    for rows in (result["rows"], result["jit_rows"]):
        assert len(rows) == 2 * len(CASES)
        assert not _check_rows(rows), "\n".join(_check_rows(rows))


# --- the halo arithmetic, plain Python --------------------------------------------------

def test_pool_halo_reads_one_row_of_the_previous_block():
    plan = avg_pool_plan(64, 3, 2, 1, False, True)
    h = halo_plan.pool_halo("h", plan, 8)
    assert (h.left, h.right, h.block, h.out_block) == (1, 0, 8, 4)
    # the first device's window 0 starts in the padding: its kept rows start at its block
    assert h.kept(0) == (1, 9) and h.kept(3) == (0, 9)
    first, inner = halo_plan.local_pool_axis(plan, h, 0), halo_plan.local_pool_axis(plan, h, 3)
    assert first.pad_lo == 1 and inner.pad_lo == 0
    assert inner.starts == (0, 2, 4, 6) and inner.divisors == (3,) * 4


def test_ragged_adaptive_windows_repeat_per_device():
    plan = adaptive_plan(64, 24)
    h = halo_plan.pool_halo("h", plan, 8)
    assert (h.left, h.right) == (0, 0)
    assert len({halo_plan.local_pool_axis(plan, h, s) for s in range(8)}) == 1
    with pytest.raises(ValueError, match="output extent 7 .* 'h' does not divide"):
        halo_plan.pool_halo("h", adaptive_plan(64, 7), 8)


def test_max_pool_halo_and_too_wide():
    h = halo_plan.pool_halo("w", max_pool_plan(32, 3, 1, 1, 1, False), 8)
    assert (h.left, h.right) == (1, 1)
    with pytest.raises(ValueError, match="more than the 4 rows"):
        halo_plan.pool_halo("w", avg_pool_plan(32, 11, 1, 5, False, True), 8)


def test_bilinear_halo_each_way():
    plan = axis_sampling("bilinear", 32, 64, False, 2.0, "float32", False, 2)
    h = halo_plan.sampling_halo("h", plan, 8)
    assert (h.left, h.right) == (1, 1)
    local = halo_plan.local_sampling(plan, h, 3)
    assert local.in_size == 6 and local.out_size == 8
    assert min(min(t) for t in local.taps) >= 0 and max(max(t) for t in local.taps) < 6


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular", "constant"])
def test_pad_rows_match_numpy(mode):
    import numpy as np
    n, lo, hi = 8, 3, 2
    rows = halo_plan.pad_rows(mode, n, lo, hi)
    x = np.arange(n)
    numpy_mode = {"replicate": "edge", "circular": "wrap"}.get(mode, mode)
    want = (np.pad(x, (lo, hi), constant_values=-1) if mode == "constant"
            else np.pad(x, (lo, hi), mode=numpy_mode))
    got = [-1 if r is None else x[r % n] for r in rows]
    assert got == list(want)


def test_runs_cover_rows():
    rows = (3, 2, 1, 0, 1, 2, None, None, 5)
    out = []
    for first, step, count in halo_plan.runs(rows):
        out += [None] * count if first is None else [first + step * i for i in range(count)]
    assert tuple(out) == rows


def test_plain_jit_exchanges_only_halos(default_check):
    """The same cases under plain jit on a sharded input (the partitioned primitive):
    forward, JVP, gradient and forward-over-reverse within the bound, against the
    unsharded call."""
    rows = default_check["jit_rows"]
    assert {r["case"] for r in rows} == set(JIT_DEFAULT)
    assert not _check_rows(rows), "\n".join(_check_rows(rows))
    by_case = {r["case"]: r for r in rows}
    assert by_case["max_pool2d 3/2/1"]["forward"] == {"collective-permute": 1}
    assert "second" in by_case["max_pool2d 3/2/1"]
    assert set(by_case["global_max_pool"]["forward"]) == {"all-reduce"}
    assert set(by_case["global_max_pool"]["gradient"]) == {"all-reduce"}


def test_plain_jit_falls_back_to_a_gathered_input(default_check):
    # 38 rows do not divide over 8 devices: a gathered input, the right values
    fallback = default_check["fallback"]
    assert "all-gather" in fallback["collectives"] and fallback["equal"], fallback
    second = default_check["jit_second"]
    assert set(second["collectives"]) == {"collective-permute"}
    assert second["collectives"]["collective-permute"] <= 8 and second["diff"] < 1e-5


@pytest.mark.slow
def test_plain_jit_before_and_after(full_check):
    rows = {r["case"]: r for r in full_check["table"]}
    after = rows["max_pool2d(x, 3, 2, 1)"]["after"]
    assert after["forward"] == {"collective-permute": 1}, after
    assert set(after["gradient"]) == {"collective-permute"}, after
    assert after["gradient"]["collective-permute"] <= 4, after
    assert after["value_diff"] == 0 and after["grad_diff"] < 1e-5, after
    # today's program, for contrast: more than the halo
    before = rows["max_pool2d(x, 3, 2, 1)"]["before"]
    assert sum(before["gradient"].values()) > sum(after["gradient"].values()), before
    # 70 rows do not divide over 8 devices: a gathered input, the right values
    fallback = rows["pad(x, 3, mode='reflect')"]["after"]
    assert "all-gather" in fallback["forward"] and fallback["value_diff"] == 0
    for row in rows.values():  # where the extents divide: halos only
        if row["case"] not in ("pad(x, 3, mode='reflect')",
                               "interpolate bilinear align_corners 64 -> 127"):
            for counts in (row["after"]["forward"], row["after"]["gradient"]):
                assert set(counts) <= {"collective-permute"}, row


# --- shard_map's default check of per-device (varying) mesh axes ------------------------

VMA_SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, PartitionSpec as P
    import jaxpool

    def wide(v):  # 512 -> 224 with antialias: the linear resampling primitive
        return jnp.tile(v, (1, 1, 1, 43))[..., :512]

    ops = {
        "max_pool2d 3/2/1": lambda v: jaxpool.max_pool2d(v, 3, 2, 1),
        "max_pool2d 3/1/1 dilated": lambda v: jaxpool.max_pool2d(v, 3, 1, 1, dilation=2),
        "avg_pool2d 3/2/1": lambda v: jaxpool.avg_pool2d(v, 3, 2, 1),
        "lp_pool2d 2": lambda v: jaxpool.lp_pool2d(v, 2.0, 2),
        "adaptive_max_pool2d 32 -> 24": lambda v: jaxpool.adaptive_max_pool2d(v, (24, 5)),
        "adaptive_avg_pool2d 32 -> 3": lambda v: jaxpool.adaptive_avg_pool2d(v, (3, 5)),
        "nearest x2": lambda v: jaxpool.interpolate(v, scale_factor=2, mode="nearest"),
        "bilinear x2": lambda v: jaxpool.interpolate(v, scale_factor=2, mode="bilinear"),
        "bicubic": lambda v: jaxpool.interpolate(v, size=(45, 7), mode="bicubic"),
        "antialias 512 -> 224": lambda v: jaxpool.interpolate(wide(v), size=(14, 224),
                                                              mode="bilinear", antialias=True),
        "pad reflect": lambda v: jaxpool.pad(v, (2, 1, 3, 1), mode="reflect"),
        "max_unpool2d": lambda v: jaxpool.max_unpool2d(
            *jaxpool.max_pool2d(v, 2, return_indices=True), 2),
    }

    def vma_check(names):
        mesh = Mesh(np.array(jax.devices()), ("d",))
        x = jax.random.normal(jax.random.key(0), (1, 2, 256, 12))
        t = jnp.cos(x)
        blocks = lambda a: jnp.moveaxis(a.reshape(1, 2, 8, 32, 12), 2, 0)  # noqa: E731
        result = {}
        for name in names or ops:
            fn = ops[name]

            def all_three(v, u):
                loss = lambda w: (jnp.sin(fn(w))).sum()  # noqa: E731
                return fn(v), jax.grad(loss)(v), jax.jvp(fn, (v,), (u,))[1]
            spec = P(None, None, "d")
            # Both jitted, as users call them (the same rules at tracing; eagerly, each
            # primitive compiled on its own took twice the time).
            try:  # check_vma: the default
                got = jax.jit(jax.shard_map(all_three, mesh=mesh, in_specs=(spec, spec),
                                            out_specs=(spec, spec, spec)))(x, t)
            except Exception as err:  # noqa: BLE001 - the error is the finding
                result[name] = f"{type(err).__name__}: {str(err)[:300]}"
                continue
            # each device's block on its own
            want = jax.jit(jax.vmap(all_three))(blocks(x), blocks(t))
            want = [jnp.concatenate(list(w), axis=2) for w in want]
            result[name] = [float(jnp.max(jnp.abs(g - w))) for g, w in zip(got, want)]
        return result
""")


# The default run: the rules the halo cases above do not reach (adaptive max pooling's
# one-hot tangent, the window sums' row tangent, the linear resampling primitive), 3-5 s
# each to compile; every op under -m slow.
VMA_DEFAULT = ("adaptive_max_pool2d 32 -> 24", "adaptive_avg_pool2d 32 -> 3",
               "antialias 512 -> 224")


def _vma_check(result):
    failed = {k: v for k, v in result.items() if isinstance(v, str)}
    assert not failed, failed
    for name, (value, grad, tangent) in result.items():
        assert value == 0 and grad < 1e-5 and tangent < 1e-5, (name, value, grad, tangent)
    return result


def test_derivatives_pass_shard_maps_default_check(default_check):
    """Values, gradients and tangents inside ``shard_map`` with ``check_vma=True`` (its
    default), equal to each device's block computed on its own: each derivative rule's new
    arrays carry their inputs' per-device mesh axes."""
    assert set(_vma_check(default_check["vma"])) == set(VMA_DEFAULT)


@pytest.mark.slow
def test_every_op_passes_shard_maps_default_check(full_check):
    assert len(_vma_check(full_check["vma"])) == 12
