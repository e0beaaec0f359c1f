"""interpolate against torch: the per-axis taps and weights (plain Python, every mode, small
extents swept), the JAX strategies' values, NaN and inf, half precision, layouts and the
transforms' bits."""

from __future__ import annotations

import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxpool
from jaxpool.resampling import plan as resampling_plan
from jaxpool.resampling.plan import plan_interpolate
from default_share import default_cases, default_share

MODE_RANKS = [("nearest", 1), ("nearest", 2), ("nearest", 3), ("nearest-exact", 1),
              ("nearest-exact", 2), ("nearest-exact", 3), ("linear", 1), ("bilinear", 2),
              ("trilinear", 3), ("bicubic", 2), ("bilinear-aa", 2), ("bicubic-aa", 2)]
SCALES = (0.29, 0.5, 0.7, 0.999, 1.0, 1.1, 1.3, 1.7, 2.0, 2.1, 2.5, 3.0, 1 / 3)


def _kwargs(mode: str, align_corners):
    base, aa = mode.removesuffix("-aa"), mode.endswith("-aa")
    return {"mode": base, "align_corners": align_corners, "antialias": aa}


def plan_calls(extents=range(1, 6)):
    """Every (mode, rank, align_corners, n, size or scale) of the sweep."""
    for mode, ndim in MODE_RANKS:
        corners = [None] if mode.startswith("nearest") else [False, True]
        for align_corners, n in itertools.product(corners, extents):
            for k in range(1, 2 * max(extents) + 3):
                yield mode, ndim, align_corners, n, {"size": (k,) * ndim}
            for s, recompute in itertools.product(SCALES, (False, True)):
                if int(n * s) >= 1:
                    yield mode, ndim, align_corners, n, {"scale_factor": s,
                                                         "recompute_scale_factor": recompute}


ALL_PLAN_CALLS = list(plan_calls())


def evaluate(plan, x: np.ndarray) -> np.ndarray:
    """A plan applied with NumPy, in ``x``'s dtype: each output the sum of its products in
    tap order (the reference for the plans, not for the JAX code)."""
    for axis, axis_plan in reversed(list(zip(plan.spatial_axes, plan.axes))):
        moved = np.moveaxis(x, axis, -1)
        out = np.empty(moved.shape[:-1] + (axis_plan.out_size,), x.dtype)
        with np.errstate(invalid="ignore", over="ignore"):
            for i, (taps, weights) in enumerate(zip(axis_plan.taps, axis_plan.weights)):
                terms = [moved[..., j] if axis_plan.copies else moved[..., j] * x.dtype.type(w)
                         for j, w in zip(taps, weights)]
                total = terms[0]
                for term in terms[1:]:
                    total = total + term
                out[..., i] = total
        x = np.moveaxis(out, -1, axis)
    return x


def _check_plans(calls, dtype):
    rng = np.random.default_rng(0)
    failures = []
    for mode, ndim, align_corners, n, kwargs in calls:
        x = rng.standard_normal((1, 2) + (n,) * ndim).astype(dtype)
        kw = {**_kwargs(mode, align_corners), **kwargs}
        expected = F.interpolate(torch.from_numpy(x), **kw).numpy()
        _, plan = plan_interpolate("interpolate", x.shape, x.dtype, **kw)
        actual = evaluate(plan, x)
        if mode.startswith("nearest"):
            ok = np.array_equal(actual, expected)
        else:
            tol = 1e-12 if dtype == np.float64 else 1e-5
            ok = np.allclose(actual, expected, rtol=tol, atol=tol)
        if not ok:
            failures.append((mode, ndim, align_corners, n, kwargs))
    assert not failures, f"{len(failures)} of {len(calls)} plans differ: {failures[:10]}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_plans_match_torch_spread(dtype):
    """Taps and weights as torch computes them, on a spread of the sweep (each mode and
    rank, both dtypes: the nearest taps depend on the dtype in 1d and 3d)."""
    _check_plans(ALL_PLAN_CALLS[(0 if dtype == np.float32 else 3)::7], dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_plans_match_torch_all(dtype):
    _check_plans(ALL_PLAN_CALLS, dtype)


def test_nearest_rules_differ_where_torch_does():
    """torch's 1d/3d forward and its 2d forward (nearest_idx) pick different taps when the
    extent is unchanged or doubled by a scale factor that is not 1 or 2, and the 1d/3d
    taps depend on the dtype: the plans must too (the sweep above checks each against
    torch)."""
    kernel = resampling_plan.nearest_sampling(5, 5, 1.1, False, "float32", kernel_rule=True)
    idx = resampling_plan.nearest_sampling(5, 5, 1.1, False, "float32", kernel_rule=False)
    assert kernel.taps != idx.taps
    x = torch.arange(5.0).reshape(1, 1, 5)
    assert F.interpolate(x, scale_factor=1.1).flatten().tolist() == [t[0] for t in kernel.taps]


# --- the JAX side ------------------------------------------------------------------------------

# One case per strategy and mode: (input shape, kwargs, channels_last)
CASES = {
    "nearest x2 (repeat)": ((2, 3, 6, 5), {"scale_factor": 2}),
    "nearest 1d ragged (picks, copy-sums)": ((2, 3, 7), {"size": 16}),
    "nearest 3d scale 1.7 (phases, copies)": ((1, 2, 3, 4, 5), {"scale_factor": 1.7}),
    "nearest-exact 2d down": ((2, 3, 9, 10), {"size": (4, 3), "mode": "nearest-exact"}),
    "bilinear x2 (phases)": ((2, 3, 12, 11), {"scale_factor": 2, "mode": "bilinear"}),
    "bilinear x8 (phases)": ((1, 2, 6, 5), {"scale_factor": 8, "mode": "bilinear"}),
    "bilinear align_corners (matrix)": ((2, 3, 9, 10), {"scale_factor": 2, "mode": "bilinear",
                                                        "align_corners": True}),
    "bilinear align_corners large (selections)": ((1, 2, 12, 20), {
        "size": (25, 39), "mode": "bilinear", "align_corners": True}),
    "bicubic arbitrary scale (selections)": ((1, 2, 20, 16), {
        "scale_factor": 1.37, "mode": "bicubic"}),
    "bilinear same size (nonfinite-to-nan)": ((2, 3, 6, 7), {"size": (6, 9), "mode": "bilinear"}),
    "linear 1d down": ((2, 3, 30), {"size": 11, "mode": "linear"}),
    "trilinear": ((1, 2, 3, 4, 5), {"size": (5, 3, 8), "mode": "trilinear"}),
    "bicubic (matrix)": ((2, 3, 7, 8), {"size": (11, 5), "mode": "bicubic"}),
    "bicubic x2 (phases)": ((1, 2, 12, 12), {"scale_factor": 2, "mode": "bicubic"}),
    "bilinear antialias down": ((2, 3, 20, 17), {"size": (7, 6), "mode": "bilinear",
                                                 "antialias": True}),
    "bicubic antialias": ((2, 3, 15, 9), {"size": (4, 12), "mode": "bicubic",
                                          "antialias": True}),
    # the minor axis, computed swapped with the one before it
    "bilinear antialias large (filter-phases)": ((1, 2, 9, 256), {
        "size": (4, 112), "mode": "bilinear", "antialias": True}),
    "bilinear antialias /3 (filter-phases, zero weights)": ((2, 1, 288, 9), {
        "size": (96, 4), "mode": "bilinear", "antialias": True}),
    "bicubic antialias large (window-sums)": ((1, 2, 42, 9), {
        "size": (9, 4), "mode": "bicubic", "antialias": True}),
    "area": ((2, 3, 10, 7), {"size": (4, 3), "mode": "area"}),
}


def _torch(x: np.ndarray, kwargs, channels_last=False):
    t = torch.from_numpy(x)
    if channels_last:
        t = t.movedim(-1, 1)
        return F.interpolate(t, **kwargs).movedim(1, -1).numpy()
    return F.interpolate(t, **kwargs).numpy()


def _strategies(shape, kwargs) -> set:
    """The strategies of a call's axes, and of their transposes where the derivative is
    the transposed plan's map."""
    _, plan = plan_interpolate("", shape, np.float64, **kwargs)
    if plan is None:
        return set()
    return set(plan.strategies) | {axis.transposed().strategy() for axis in plan.axes
                                   if axis.strategy() in ("filter-phases", "picks")}


def test_every_strategy_has_a_case():
    strategies = set()
    for shape, kwargs in CASES.values():
        strategies |= _strategies(shape, kwargs)
    assert strategies == set(resampling_plan.SAMPLING_STRATEGIES) - {"identity"}, strategies


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_antialias_phases_keep_each_outputs_weights(mode, rng):
    """torch's antialias weights come from float32 centres, so they drift from period to
    period (at 512 -> 224 a weight of 0.0137 by 3e-4 of itself within 116 outputs). Each
    output keeps its own: one period's weights repeated missed torch's float32 values
    here by 2e-4."""
    shape, kwargs = (1, 2, 2048, 3), {"size": (896, 3), "mode": mode, "antialias": True}
    _, plan = plan_interpolate("", shape, np.float32, **kwargs)
    assert plan.strategies[0] == "filter-phases" and plan.axes[0].phases().varying
    x = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(np.asarray(jaxpool.interpolate(x, **kwargs)),
                               _torch(x, kwargs), rtol=0, atol=4e-6)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("name", list(CASES))
def test_values_match_torch(name, rng):
    shape, kwargs = CASES[name]
    # float64 here; float32 in the transforms test below, half precision further down
    for dtype in (np.float64,):
        x = rng.standard_normal(shape).astype(dtype)
        actual = np.asarray(jaxpool.interpolate(x, **kwargs))
        expected = _torch(x, kwargs)
        assert actual.dtype == expected.dtype
        if kwargs.get("mode", "nearest").startswith("nearest"):
            np.testing.assert_array_equal(actual, expected)
        else:
            tol = 1e-12 if dtype == np.float64 else 1e-5
            np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


def _nonfinite_input(shape, rng, dtype=np.float64):
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    where = rng.choice(flat.size, size=max(3, flat.size // 12), replace=False)
    flat[where] = rng.choice([np.inf, -np.inf, np.nan], size=where.size)
    return x


def _assert_same_nonfinite(actual, expected, tol):
    for test in (np.isnan, np.isposinf, np.isneginf):
        mismatch = test(actual) != test(expected)
        assert not mismatch.any(), f"{test.__name__}: {int(mismatch.sum())} elements differ"
    finite = np.isfinite(expected)
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=tol, atol=tol)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("name", list(CASES))
def test_nonfinite_where_torch_puts_them(name, rng):
    """NaN and inf in the input reach the outputs torch's do: the outputs that read them,
    with a zero weight too (``0 * inf`` is NaN in torch's kernels)."""
    shape, kwargs = CASES[name]
    x = _nonfinite_input(shape, rng)
    _assert_same_nonfinite(np.asarray(jaxpool.interpolate(x, **kwargs)), _torch(x, kwargs),
                           1e-12)


@pytest.mark.usefixtures("x64")
def test_an_inf_at_a_zero_weight_is_nan_as_in_torch():
    x = np.array([[[1.0, np.inf, 3.0, 4.0]]])
    for kwargs in ({"size": 4, "mode": "linear"}, {"size": 8, "mode": "linear"},
                   {"size": 7, "mode": "linear", "align_corners": True}):
        expected = _torch(x, kwargs)
        assert np.isnan(expected).any()
        _assert_same_nonfinite(np.asarray(jaxpool.interpolate(x, **kwargs)), expected, 0)


# (input extents, output extents, align_corners): one compiled program each. The default
# run takes every seventh (7 is prime to the 5, 5 and 2 values crossed: each value still
# appears, test_the_integer_index_spread_holds_every_value; in float64, three of its four
# calls without align_corners have an index that the fused multiply-add lands off an
# integer), -m slow all of it.
INTEGER_INDEX_GRID = list(itertools.product([(1, 1), (1, 3), (3, 1), (2, 2), (3, 5)],
                                            [(5, 7), (1, 4), (3, 3), (7, 10), (9, 6)],
                                            [False, True]))
INTEGER_INDEX_SPREAD = 7


def test_the_integer_index_spread_holds_every_value():
    for i in range(3):
        assert ({c[i] for c in default_cases(INTEGER_INDEX_GRID, INTEGER_INDEX_SPREAD)}
                == {c[i] for c in INTEGER_INDEX_GRID})


@pytest.mark.usefixtures("x64")
# bicubic in float64 on the spread by default (its source index is bilinear's, with more
# taps to land on), both modes in both dtypes on the whole grid under -m slow.
@pytest.mark.parametrize("mode,dtype,calls", [
    pytest.param("bicubic", np.float64, default_cases(INTEGER_INDEX_GRID, INTEGER_INDEX_SPREAD),
                 id="bicubic-float64-spread"),
    *[pytest.param(mode, dtype, INTEGER_INDEX_GRID, id=f"{mode}-{dtype.__name__}",
                   marks=pytest.mark.slow)
      for mode in ("bilinear", "bicubic") for dtype in (np.float32, np.float64)]])
def test_inf_at_an_integer_source_index_as_in_torch(mode, dtype, calls):
    """torch computes the source index ``scale * (i + 0.5) - 0.5`` as one fused
    multiply-add, so an index that is an integer in exact arithmetic can land a rounding step
    off it: the far tap then weighs a tiny fraction (inf stays inf), not ``0`` (NaN)."""
    bad = []
    values = (np.inf, -np.inf, np.nan)
    for in_hw, out_hw, align_corners in calls:
        # one batch element per value: one compiled program for the three
        x = np.broadcast_to(np.arange(np.prod(in_hw), dtype=dtype).reshape(in_hw),
                            (len(values), 1, *in_hw)).copy()
        for b, value in enumerate(values):
            x[b].reshape(-1)[x[b].size // 2] = value
        kwargs = {"size": out_hw, "mode": mode, "align_corners": align_corners}
        actual = np.asarray(jaxpool.interpolate(x, **kwargs))
        expected = _torch(x, kwargs)
        for b, value in enumerate(values):
            for test in (np.isnan, np.isposinf, np.isneginf):
                if (test(actual[b]) != test(expected[b])).any():
                    bad.append((in_hw, out_hw, value, align_corners, test.__name__))
    assert not bad, bad[:5]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_as_torch(dtype, rng):
    """Half precision computes in float32 and rounds once; torch rounds its weights and
    partial sums to half precision, so the interpolating modes agree to about one half
    ulp of the values; the nearest modes copy, bit for bit."""
    tdtype = getattr(torch, dtype)
    for name in ("nearest 1d ragged (picks, copy-sums)", "bicubic (matrix)"):
        shape, kwargs = CASES[name]
        t = torch.randn(shape).to(tdtype)
        x = jnp.asarray(t.float().numpy()).astype(dtype)
        actual = np.asarray(jaxpool.interpolate(x, **kwargs).astype(jnp.float32))
        expected = F.interpolate(t, **kwargs).float().numpy()
        if kwargs.get("mode", "nearest") == "nearest":
            np.testing.assert_array_equal(actual, expected)
        else:
            eps = 2.0 ** (-10 if dtype == "float16" else -7)
            np.testing.assert_allclose(actual, expected, rtol=4 * eps, atol=4 * eps)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("name", ["bilinear x2 (phases)",
                                  "nearest 3d scale 1.7 (phases, copies)"])
def test_channels_last_is_the_transposed_call(name, rng):
    shape, kwargs = CASES[name]
    x = rng.standard_normal(shape)
    moved = np.moveaxis(x, 1, -1)
    actual = np.asarray(jaxpool.interpolate(moved, **kwargs, channels_last=True))
    np.testing.assert_allclose(actual, np.moveaxis(_torch(x, kwargs), 1, -1), rtol=1e-12,
                               atol=1e-12)


# One case per strategy (each transform compiles a program of its own): the default run
# takes every other one in the transforms test and the others in the tangents test (a
# nearest case in each), -m slow every case in both (and every case of CASES in the first).
TRANSFORM_CASES = ["nearest 1d ragged (picks, copy-sums)",
                   "nearest 3d scale 1.7 (phases, copies)",
                   "bilinear align_corners (matrix)", "bicubic arbitrary scale (selections)",
                   "bilinear antialias large (filter-phases)",
                   "bicubic antialias large (window-sums)"]


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=() if name in TRANSFORM_CASES[1::2] else pytest.mark.slow)
    for name in CASES])
def test_transforms_never_change_a_value(name, rng):
    """The same bits, zero signs included, plain, under jit, vmap, jvp and vjp."""
    shape, kwargs = CASES[name]
    x = rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::5] = -0.0
    x.reshape(-1)[1::7] = np.inf
    f = lambda a: jaxpool.interpolate(a, **kwargs)  # noqa: E731
    plain = np.asarray(f(x))
    _assert_same_nonfinite(plain, _torch(x, kwargs), 1e-5)  # float32 values are torch's
    ones = jnp.ones_like(x)
    results = {
        "jit": jax.jit(f)(x),
        "vmap": jax.vmap(lambda a: f(a[None])[0])(x),
        "jvp": jax.jvp(f, (x,), (ones,))[0],
        "vjp": jax.vjp(f, x)[0],
    }
    for how, value in results.items():
        value = np.asarray(value)
        assert value.tobytes() == plain.tobytes(), f"{how} changes bits"


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=() if name in TRANSFORM_CASES[::2] else pytest.mark.slow)
    for name in TRANSFORM_CASES])
def test_tangents_keep_zero_signs_and_nonfinite_as_torchs_forward_mode(name, rng):
    """A tangent's NaN and inf come out where torch's forward mode puts them, and a copying
    axis copies the tangent bit for bit, -0 included (a reduction from +0 made it +0)."""
    shape, kwargs = CASES[name]
    x = rng.standard_normal(shape).astype(np.float32)
    t = rng.standard_normal(shape).astype(np.float32)
    t.reshape(-1)[::3] = -0.0
    t.reshape(-1)[1::11] = np.inf
    t.reshape(-1)[2::13] = np.nan
    got = np.asarray(jax.jvp(lambda a: jaxpool.interpolate(a, **kwargs), (x,), (t,))[1])
    want = torch.func.jvp(lambda a: F.interpolate(a, **kwargs), (torch.from_numpy(x),),
                          (torch.from_numpy(t),))[1].numpy()
    if kwargs.get("mode", "nearest").startswith("nearest"):  # zero signs included
        assert got.tobytes() == want.tobytes()
    _assert_same_nonfinite(got, want, 1e-5)


# --- program size ------------------------------------------------------------------------------

def _program_ops(fn, x) -> int:
    """The number of operations in ``fn``'s lowered program."""
    return len(re.findall(r"\bstablehlo\.[a-z_]+", jax.jit(fn).lower(x).as_text()))


# Arbitrary scales of copying and interpolating axes beside the integer scale's program:
# the Mask R-CNN mask resize (1.9355 on 51x124), a downscale, larger extents.
PROGRAM_SIZE_CASES = [((2, 1, 51, 124), 1.9355), ((2, 1, 51, 124), 1.37),
                      ((2, 1, 51, 124), 0.61), ((2, 1, 200, 300), 1.9355)]


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_program_size_does_not_grow_with_the_ratio_or_extents(mode):
    """The forward and gradient programs at an arbitrary scale are within a few times the
    x2 program's size, whatever the ratio and extents: nearest at 1.9355 lowered to one
    slice per output that broke its period (175 on 51x124, 500 on 200x300)."""
    def programs(shape, scale):
        f = lambda a: jaxpool.interpolate(a, scale_factor=scale, mode=mode,  # noqa: E731
                                          recompute_scale_factor=True)
        x = jnp.ones(shape, jnp.float32)
        return (_program_ops(f, x),
                _program_ops(jax.grad(lambda a: jnp.sum(f(a) ** 2)), x))

    base = programs((2, 1, 51, 124), 2.0)
    for shape, scale in PROGRAM_SIZE_CASES:
        sizes = programs(shape, scale)
        for what, size, simplest in zip(("forward", "gradient"), sizes, base):
            assert size <= 4 * simplest + 150, (
                f"{mode} {shape} x{scale}: {what} of {size} operations, x2's {simplest}")


# --- derivatives -------------------------------------------------------------------------------

from test_derivatives import _derivative_programs, _stablehlo_ops  # noqa: E402

# One small case per strategy: (input shape, kwargs)
DERIVATIVE_CASES = {
    "repeat": ((1, 2, 3, 4), {"scale_factor": 2}),
    "phases copies": ((1, 2, 5), {"size": 12}),
    "picks": ((1, 2, 3, 2, 3), {"scale_factor": 1.7}),
    # (W: 20 -> 40, phases; H small enough for the matrix)
    "phases": ((1, 2, 3, 20), {"scale_factor": 2, "mode": "bilinear"}),
    "matrix": ((1, 2, 5, 6), {"size": (7, 4), "mode": "bicubic", "align_corners": True}),
    "nonfinite-to-nan": ((1, 2, 4, 5), {"size": (4, 9), "mode": "bilinear"}),
    "selections": ((1, 1, 20, 2), {"size": (27, 2), "mode": "bicubic"}),
    "antialias": ((1, 2, 9, 7), {"size": (4, 3), "mode": "bilinear", "antialias": True}),
    # 7 outputs per 16 inputs (512 -> 224), the transpose 16 phases of the transposed plan
    "filter-phases": ((1, 1, 256, 3), {"size": (112, 2), "mode": "bicubic",
                                       "antialias": True}),
    "window-sums": ((1, 1, 42, 3), {"size": (9, 2), "mode": "bicubic", "antialias": True}),
    # its transpose (41 -> 30) has no period: selections, each input's missing taps masked
    "selections transposed by selections": ((1, 2, 2, 30), {"size": (2, 41),
                                                           "mode": "bicubic"}),
    # antialias with no short period and up to 8 taps: selections, 4 or 5 taps per output
    "antialias selections": ((1, 2, 2, 61), {"size": (3, 29), "mode": "bilinear",
                                             "antialias": True}),
}


def test_every_strategy_has_a_derivative_case():
    strategies = set()
    for shape, kwargs in DERIVATIVE_CASES.values():
        strategies |= _strategies(shape, kwargs)
    assert strategies == set(resampling_plan.SAMPLING_STRATEGIES) - {"identity"}, strategies


def _resize(kwargs):
    return lambda x: jaxpool.interpolate(x, **kwargs)


def _check_grads(name, rng, order):
    from jax.test_util import check_grads
    shape, kwargs = DERIVATIVE_CASES[name]
    f = _resize(kwargs)
    x = jnp.asarray(rng.standard_normal(shape))
    w = jnp.asarray(rng.standard_normal(jax.eval_shape(f, x).shape))
    # a nonlinear scalar of the output: the map is linear, its own higher derivatives zero
    check_grads(jax.jit(lambda a: jnp.sum(w * jnp.tanh(f(a)) ** 2)), (x,), order=order,
                modes=("fwd", "rev"), atol=1e-4, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("name", list(DERIVATIVE_CASES))
def test_check_grads_to_order_3(name, rng):
    """Order 3 in both modes against finite differences (20-50 s a case on a shared CPU,
    so under -m slow); the default run checks the first derivatives exactly against torch
    (below), the second against torch's hessian-vector products, and lowers third
    derivatives in the scatter check (each strategy in one of the two by default)."""
    _check_grads(name, rng, 3)


# The default run lowers every other strategy's programs, and checks the others' derivatives
# against torch below (the no-scatter check lowers ten programs a case, with third
# derivatives); -m slow every strategy in both tests.
SCATTER_SHARE = default_share(list(DERIVATIVE_CASES), 2)
TORCH_DERIVATIVE_SHARE = default_share(list(DERIVATIVE_CASES)[1:] + list(DERIVATIVE_CASES)[:1], 2)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("name", SCATTER_SHARE)
def test_no_scatter_at_any_order(name, rng):
    """Every strategy's derivative programs (both modes, orders 1 to 3, jacobian, hessian,
    per-example gradients) lower without a scatter or gather."""
    shape, kwargs = DERIVATIVE_CASES[name]
    f = _resize(kwargs)
    x = jnp.asarray(rng.standard_normal(shape))
    w = jnp.asarray(rng.standard_normal(jax.eval_shape(f, x).shape))
    for program, fn in _derivative_programs(f, x, w).items():
        banned = {op for op in _stablehlo_ops(fn, x) if "scatter" in op or op == "gather"}
        assert not banned, f"{name}: {program} lowers to {banned}"


def _torch_forward_matrix(shape, kwargs) -> np.ndarray:
    """torch's forward map as a matrix [out, in], from its forward-mode derivative (which
    applies the forward kernel to the tangent)."""
    from torch.func import jacfwd
    x = torch.zeros(shape, dtype=torch.float64)
    jac = jacfwd(lambda t: F.interpolate(t, **kwargs))(x)
    out = jac.shape[:len(shape)]
    return jac.reshape(int(np.prod(out)), int(np.prod(shape))).numpy()


# Where torch's backward is not the transpose of its forward; jaxpool's derivative is the
# transpose of its forward (which is torch's forward). (input shape, kwargs, reason) With
# NaN or inf the antialias and bicubic rows hold at a scale of 1 too (0 * inf at the zero
# weights): the rows of test_interpolate_nonfinite.DIFFERENCES.
BACKWARD_DIFFERENCES = {
    "nearest 1d": ((1, 1, 5), {"scale_factor": 1.1},
                   "torch's 1d/3d nearest backward uses nearest_idx (an unchanged extent "
                   "copies), its forward floor(i / 1.1)"),
    "nearest 3d": ((1, 1, 2, 3, 5), {"scale_factor": (1.0, 2.1, 1.1)},
                   "torch's 3d nearest backward uses nearest_idx (a doubled extent halves "
                   "the index, an unchanged one copies), its forward floor(i / scale)"),
    "antialias unchanged extent": ((1, 1, 5, 6), {"scale_factor": (1.1, 0.5),
                                                  "mode": "bilinear", "antialias": True},
                                   "torch's antialias forward copies an axis whose extent "
                                   "does not change, its backward applies the filter"),
    "bicubic unchanged size": ((1, 1, 5, 6), {"scale_factor": 1.1, "mode": "bicubic"},
                               "torch's bicubic backward copies when the whole output has "
                               "the input's size (with one axis changed it is the transpose "
                               "of the forward), its forward applies the cubic taps"),
}


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("name", TORCH_DERIVATIVE_SHARE + list(BACKWARD_DIFFERENCES))
def test_derivatives_match_torchs_forward(name, rng):
    """Reverse mode is the transpose of torch's forward map, forward mode the map itself,
    the hessian-vector product of a nonlinear loss torch's; torch's own backward agrees
    except in BACKWARD_DIFFERENCES. One compiled program per case."""
    cases = {**DERIVATIVE_CASES, **{k: v[:2] for k, v in BACKWARD_DIFFERENCES.items()}}
    shape, kwargs = cases[name]
    f = _resize(kwargs)
    x, v = rng.standard_normal(shape), rng.standard_normal(shape)
    out_shape = jax.eval_shape(f, jnp.asarray(x)).shape
    cotangent, w = rng.standard_normal(out_shape), rng.standard_normal(out_shape)

    @jax.jit
    def derivatives(x, v, cotangent, w):
        loss = lambda a: jnp.sum(w * jnp.tanh(f(a)) ** 2)  # noqa: E731
        grad = jax.vjp(f, x)[1](cotangent)[0]
        tangent = jax.jvp(f, (x,), (v,))[1]
        hvp = jax.jvp(jax.grad(loss), (x,), (v,))[1]
        return grad, tangent, hvp

    grad, tangent, hvp = (np.asarray(a) for a in derivatives(x, v, cotangent, w))
    forward = _torch_forward_matrix(shape, kwargs)
    np.testing.assert_allclose(grad.reshape(-1), forward.T @ cotangent.reshape(-1),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tangent.reshape(-1), forward @ v.reshape(-1), rtol=1e-12,
                               atol=1e-12)
    xt = torch.from_numpy(x).requires_grad_()
    (torch_grad,) = torch.autograd.grad(
        (F.interpolate(xt, **kwargs) * torch.from_numpy(cotangent)).sum(), xt)
    same = np.allclose(torch_grad.numpy(), grad, rtol=1e-12, atol=1e-12)
    assert same == (name not in BACKWARD_DIFFERENCES), name
    if same:
        wt = torch.from_numpy(w)
        _, expected = torch.autograd.functional.hvp(
            lambda t: (wt * torch.tanh(F.interpolate(t, **kwargs)) ** 2).sum(),
            torch.from_numpy(x), torch.from_numpy(v))
        np.testing.assert_allclose(hvp, expected.numpy(), rtol=1e-10, atol=1e-12)


# --- non-finite tangents and cotangents ---------------------------------------------------------

from test_nonfinite import _derivative_maps, _non_finite_directions, _same_mask  # noqa: E402

# every mode's derivative rule (each strategy's case, and the modes of CASES under -m slow);
# torch's backward is the transpose of its forward in all of them (not BACKWARD_DIFFERENCES).
# By default the strategies of the no-scatter check's share (the others' derivatives are
# checked against torch's in test_derivatives_match_torchs_forward), and the modes below.
NONFINITE_CASES = {**{f"{name} (derivative case)": case
                      for name, case in DERIVATIVE_CASES.items()},
                   **{name: case for name, case in CASES.items() if name != "area"}}
DEFAULT_NONFINITE = {f"{name} (derivative case)"
                     for name in default_cases(list(DERIVATIVE_CASES), 2)} | {
    "phases (derivative case)", "antialias selections (derivative case)", "trilinear", "bilinear antialias down", "linear 1d down",
    "bilinear antialias /3 (filter-phases, zero weights)",
    "bilinear antialias large (filter-phases)"}


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("name", [
    pytest.param(name, marks=() if name in DEFAULT_NONFINITE else pytest.mark.slow)
    for name in NONFINITE_CASES])
def test_non_finite_derivatives_stay_where_torch_puts_them(name, rng):
    """A cotangent's NaN or inf reaches only the taps of its output (a zero weight too:
    ``0 * inf`` is NaN), as torch's backward; a tangent's only the outputs that tap it, as
    torch.func.jvp: at first and second order, in every way of reaching each map, masks
    exactly. (A product with the [out, in] matrix spreads them along the axis.)"""
    shape, kwargs = NONFINITE_CASES[name]
    f = _resize(kwargs)
    reference = lambda t: F.interpolate(t, **kwargs)  # noqa: E731
    x = rng.standard_normal(shape)
    expected, inputs = _non_finite_directions(reference, x, (np.nan, np.inf, -np.inf, np.inf),
                                              rng)

    @jax.jit  # one compiled program for every way
    def everything(x, inputs):
        maps = _derivative_maps(f, x)
        return {mode: {way: g(inputs[mode]) for way, g in maps[mode].items()}
                for mode in maps}

    for mode, ways in everything(jnp.asarray(x), inputs).items():
        for way, value in ways.items():
            _same_mask(value, expected[mode], f"{name}, {way}")


def _exact_sums(shape, rng):
    """Values whose sums of a few are exact (so any order of addition gives torch's bits),
    with ``-0``, ``+0``, NaN and both infinities among them."""
    pool = np.array([-0.0, 0.0, -0.0, 1.5, -2.25, 0.5, np.nan, np.inf, -np.inf])
    return rng.choice(pool, size=shape)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("largest", [
    5, pytest.param(9, marks=pytest.mark.slow)])
def test_copies_derivatives_are_torchs_bits_on_every_small_extent(mode, largest, rng):
    """The nearest modes copy: torch's backward adds each output's cotangent into a zeroed
    gradient (so ``+0`` where every added value is ``-0``, NaN and inf only where an output
    that copies the element brings them), its forward-mode tangent is a copy (``-0`` kept).
    Every extent pair up to ``largest``, bit for bit, zero signs and NaN included."""
    for n, k in itertools.product(range(1, largest + 1), repeat=2):
        kwargs = {"size": k, "mode": mode}
        x = rng.standard_normal((1, 2, n))
        cotangent, tangent = _exact_sums((1, 2, k), rng), _exact_sums((1, 2, n), rng)
        f = _resize(kwargs)
        value, vjp = jax.vjp(f, jnp.asarray(x))
        grad = np.asarray(vjp(jnp.asarray(cotangent))[0])
        jvp = np.asarray(jax.jvp(f, (jnp.asarray(x),), (jnp.asarray(tangent),))[1])
        xt = torch.from_numpy(x).requires_grad_()
        (expected,) = torch.autograd.grad(F.interpolate(xt, **kwargs), xt,
                                          torch.from_numpy(cotangent))
        copied = F.interpolate(torch.from_numpy(tangent), **kwargs).numpy()
        for name, actual, wanted in (("vjp", grad, expected.numpy()), ("jvp", jvp, copied)):
            same = (np.array_equal(actual, wanted, equal_nan=True)
                    and np.array_equal(np.signbit(actual), np.signbit(wanted)))
            assert same, f"{mode} {n} -> {k} {name}: {actual} != {wanted}"


# One axis each, the other small: every weighted route whose reverse mode is the
# transposed plan's map (``AxisSampling.linear_primitive``).
TRANSPOSED_MAP_CASES = {
    "phases": ((1, 2, 3, 20), {"scale_factor": 2, "mode": "bilinear"}),
    "selections": ((1, 2, 3, 40), {"size": (3, 80), "mode": "bilinear", "align_corners": True}),
    "antialias selections": ((1, 2, 2, 53), {"size": (3, 31), "mode": "bicubic",
                                             "antialias": True}),
    "bicubic phases": ((1, 2, 20, 2), {"scale_factor": 2, "mode": "bicubic"}),
    # no period: the transpose picks each input's 3-6 taps, the missing ones masked
    "selections, transposed by selections": ((1, 2, 2, 30), {"size": (2, 41),
                                                            "mode": "bicubic"}),
    "bilinear selections, transposed by selections": ((1, 2, 30, 3), {"size": (41, 3),
                                                                     "mode": "bilinear"}),
    "filter-phases": ((1, 2, 2, 300), {"size": (2, 120), "mode": "bilinear",
                                       "antialias": True}),
}


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("name", list(TRANSPOSED_MAP_CASES))
def test_transposed_maps_add_into_plus_zero_as_torchs_backward(name, rng):
    """Where the reverse mode is the transposed plan's map, each input's sum of weighted
    cotangents is added into ``+0``, as torch's backward adds into a zeroed gradient (a
    cotangent of ``-0`` and ``+0`` gives torch's ``+0``), and the rest is torch's to
    rounding."""
    shape, kwargs = TRANSPOSED_MAP_CASES[name]
    _, plan = plan_interpolate("", shape, np.float64, **kwargs)
    assert any(axis.linear_primitive() and not axis.copies for axis in plan.axes)
    f = _resize(kwargs)
    x = rng.standard_normal(shape)
    value, vjp = jax.vjp(f, jnp.asarray(x))
    zeros = np.where(rng.random(value.shape) < 0.5, -0.0, 0.0)
    cotangent = np.where(rng.random(value.shape) < 0.5, zeros, rng.standard_normal(value.shape))
    xt = torch.from_numpy(x).requires_grad_()
    for g in (zeros, -np.zeros(value.shape), cotangent):
        (expected,) = torch.autograd.grad(F.interpolate(xt, **kwargs), xt, torch.from_numpy(g))
        actual = np.asarray(vjp(jnp.asarray(g))[0])
        np.testing.assert_allclose(actual, expected.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(np.signbit(actual), np.signbit(expected.numpy()))


@pytest.mark.usefixtures("x64")
def test_two_upsampling_picks_go_outer_axis_first_with_torchs_derivatives(rng):
    """Two axes upsampled by picks are resampled outer axis first (``resample_order``):
    the same copies, derivatives that add in another order, still torch's to rounding."""
    shape, kwargs = (2, 3, 5, 7), {"size": (17, 16), "mode": "nearest"}
    _, plan = plan_interpolate("", shape, np.float64, **kwargs)
    assert plan.strategies == ("picks", "picks") and plan.order == (0, 1)
    x, v = rng.standard_normal(shape), rng.standard_normal(shape)
    f = _resize(kwargs)
    cotangent = rng.standard_normal((2, 3, 17, 16))
    value, vjp = jax.vjp(f, jnp.asarray(x))
    tangent = jax.jvp(f, (jnp.asarray(x),), (jnp.asarray(v),))[1]
    xt = torch.from_numpy(x).requires_grad_()
    (expected,) = torch.autograd.grad(F.interpolate(xt, **kwargs), xt,
                                      torch.from_numpy(cotangent))
    np.testing.assert_array_equal(np.asarray(value), _torch(x, kwargs))
    np.testing.assert_array_equal(np.asarray(tangent), _torch(v, kwargs))
    np.testing.assert_allclose(np.asarray(vjp(jnp.asarray(cotangent))[0]), expected.numpy(),
                               rtol=1e-12, atol=1e-12)
