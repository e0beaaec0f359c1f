"""Derivatives of every order, both modes: correct (numerically and against torch), free of
scatter in the lowered program, and well behaved under jit and vmap."""

import functools
import re
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.test_util import check_jvp, check_vjp

import jaxpool
from default_share import default_share, each_once
from strategy_cases import (CASES, MAX_CASES, MAX_TORCH, TORCH,  # noqa: F401
                            test_every_strategy_has_a_case)

pytestmark = pytest.mark.usefixtures("x64")

# name -> (pool, input shape): every average strategy case and every max/LP case
POOLS = {**{name: case[:2] for name, case in CASES.items()}, **MAX_CASES}
REFERENCE = {**TORCH, **MAX_TORCH}


def _input(name, shape, rng):
    """Random normals for the average ops; for max and LP, distinct positive values
    spaced far beyond the finite differences' steps, so that no window's pick changes
    between the points they compare (a max is not differentiable at a tie)."""
    if name not in MAX_CASES:
        return rng.standard_normal(shape)
    size = int(np.prod(shape))
    return (0.5 + 2.0 * rng.permutation(size) / size).reshape(shape)


def _functional(pool, w):
    """A nonlinear scalar of the pooled output: pooling is linear, so its own higher
    derivatives are zero and would prove nothing."""
    return lambda x: jnp.sum(w * jnp.tanh(pool(x)) ** 2)


def check_grads_jitted(f, args, order, atol, rtol):
    """jax.test_util.check_grads(f, args, order, modes=("fwd", "rev")): the same checks
    (check_jvp and check_vjp of f, of its JVP and of its VJP, down to ``order``), with each
    function's JVP and VJP one jitted program. check_grads transforms them eagerly, which
    compiles their pieces one by one: 45 programs at order 3 instead of 15."""

    def check(g, g_jit, args, order, err_msg=""):
        jvp = lambda primals, tangents: jax.jvp(g, primals, tangents)  # noqa: E731
        jvp_jit = jax.jit(jvp)
        fwd_msg = f"JVP of {err_msg}" if err_msg else "JVP"
        check_jvp(g_jit, jvp_jit, args, atol=atol, rtol=rtol, err_msg=fwd_msg)
        if order > 1:
            check(jvp, jvp_jit, (args, args), order - 1, fwd_msg)
        vjp_jit = jax.jit(lambda args, cotangent: jax.vjp(g, *args)[1](cotangent))
        rev_msg = f"VJP of {err_msg}" if err_msg else "VJP"
        check_vjp(g_jit, lambda *a: (g_jit(*a), lambda c: vjp_jit(a, c)), args, atol=atol,
                  rtol=rtol, err_msg=rev_msg)
        if order > 1:
            def vjp_of_output(*a):  # check_grads' next function: the VJP of the output
                out, back = jax.vjp(g, *a)
                return back(out)
            check(vjp_of_output, lambda *a: vjp_jit(a, g_jit(*a)), args, order - 1, rev_msg)

    check(f, jax.jit(f), tuple(args), order)


def test_the_jitted_check_sees_a_wrong_third_derivative():
    """x**3 / 6 whose derivative x**2 / 2 has a wrong derivative of its own (x with a
    stopped gradient: its third derivative 0, not 1): orders 1 and 2 pass, order 3 fails."""

    @jax.custom_jvp
    def half_square(x):
        return x ** 2 / 2

    half_square.defjvp(lambda p, t: (half_square(p[0]), jax.lax.stop_gradient(p[0]) * t[0]))

    @jax.custom_jvp
    def cube(x):
        return x ** 3 / 6

    cube.defjvp(lambda p, t: (cube(p[0]), half_square(p[0]) * t[0]))
    x = np.array([0.7, -1.3, 2.1])
    check_grads_jitted(cube, (x,), order=2, atol=1e-4, rtol=1e-4)
    with pytest.raises(AssertionError):
        check_grads_jitted(cube, (x,), order=3, atol=1e-4, rtol=1e-4)


# Order-3 finite differences compile large programs (3-10 s a case): the default run
# checks two (whole-axis max, blocks), `-m slow` every case (strided slices and
# window-matrix products among them). The exact derivative tests below run by default on
# a spread of the cases (every seventh: no scatter, vmap and torch's Hessian-vector
# products, which compiles the scatter check's lowered program), on every case under -m slow.
GRADS_DEFAULT = ("blocks channels-last", "global max")


@pytest.mark.parametrize("name", [n if n in GRADS_DEFAULT else pytest.param(n, marks=pytest.mark.slow)
                                  for n in POOLS])
def test_check_grads_to_order_3(name, rng):
    pool, shape = POOLS[name]
    x = _input(name, shape, rng)
    w = jnp.asarray(rng.standard_normal(jax.eval_shape(pool, jnp.asarray(x)).shape))
    # third-order finite differences in float64 carry ~1e-5 relative error of their own
    check_grads_jitted(_functional(pool, w), (x,), order=3, atol=1e-4, rtol=1e-4)


def _derivative_programs(pool, x, w, v=None):
    """Every derivative program of ``pool`` the scatter check lowers (``hvp`` along ``v``,
    ones by default)."""
    f = _functional(pool, w)
    v = jnp.ones_like(x) if v is None else v
    return {
        "forward": pool,
        "vjp": lambda x: jax.vjp(pool, x)[1](pool(x))[0],
        "jvp": lambda x: jax.jvp(pool, (x,), (v,))[1],
        "grad": jax.grad(f),
        "grad2": jax.grad(lambda x: jnp.sum(jax.grad(f)(x) ** 2)),
        "grad3": jax.grad(lambda x: jnp.sum(jax.grad(lambda y: jnp.sum(jax.grad(f)(y) ** 2))(x) ** 2)),
        "jacfwd": jax.jacfwd(pool),
        "hessian": jax.hessian(f),
        "hvp": lambda x: jax.jvp(jax.grad(f), (x,), (v,))[1],
        "per-example grad": lambda x: jax.vmap(jax.grad(lambda xi: f(xi[None])))(x),
    }


def _lowered_ops(lowered) -> set[str]:
    return set(re.findall(r"\b(?:stablehlo|chlo|mhlo)\.([a-z_]+)", lowered.as_text()))


def _stablehlo_ops(fn, x) -> set[str]:
    return _lowered_ops(jax.jit(fn).lower(x))


@functools.cache
def _case(name):
    """A case's inputs (float64 NumPy: x, the functional's weights w and a direction v) and
    its derivative programs, shared by the tests below: the scatter check lowers them, the
    Hessian-vector product test compiles its lowered ``hvp``."""
    pool, shape = POOLS[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = _input(name, shape, rng)
    w = rng.standard_normal(jax.eval_shape(pool, jnp.asarray(x)).shape)
    v = rng.standard_normal(shape)
    programs = _derivative_programs(pool, jnp.asarray(x), jnp.asarray(w), jnp.asarray(v))
    return x, w, v, programs


@functools.cache
def _lowered(name, program):
    x, _, _, programs = _case(name)
    return jax.jit(programs[program]).lower(jnp.asarray(x))


# Every seventh case by default (a spread over the strategies: sums, taps, families, a
# dilated ceil-mode max family, a long max window; the max picks' own rule is checked
# below), every case under -m slow.
@pytest.mark.parametrize("name", default_share(list(POOLS), 7))
def test_no_scatter_at_any_order(name):
    for program in _case(name)[3]:
        ops = _lowered_ops(_lowered(name, program))
        banned = {op for op in ops if "scatter" in op or op == "gather"}
        assert not banned, f"{name}: {program} lowers to {banned}"


def test_the_scatter_check_can_fail():
    """A gather-based pool: its gradient is a scatter, and the check above must see it."""
    idx = jnp.array([0, 2, 3])
    ops = _stablehlo_ops(jax.grad(lambda x: jnp.sum(jnp.take(x, idx, axis=-1) ** 2)),
                         jnp.ones((2, 5)))
    assert any("scatter" in op for op in ops)




@pytest.mark.parametrize("name", default_share(list(REFERENCE), 7))
def test_hessian_vector_product_matches_torch(name):
    """The scatter check's lowered ``hvp`` program, compiled."""
    x, w, v, _ = _case(name)
    hvp = _lowered(name, "hvp").compile()(jnp.asarray(x))
    wt = torch.tensor(w)
    _, expected = torch.autograd.functional.hvp(
        lambda t: (wt * torch.tanh(REFERENCE[name](t)) ** 2).sum(), torch.tensor(x),
        torch.tensor(v))
    np.testing.assert_allclose(np.asarray(hvp), expected.numpy(), rtol=1e-10, atol=1e-12)


# Every seventh case by default (vmap's rules are JAX's own for the ops every strategy is
# built from; tests/test_sweeps.py runs vmap on every op at small extents), all under -m slow.
@pytest.mark.parametrize("name", default_share(list(POOLS), 7))
def test_vmap_over_unbatched_inputs_equals_the_batched_call(name):
    """One program for the vmapped values and gradients, another for the batched
    gradients (in one program the two could be merged into one computation), against the
    batched call itself."""
    pool, _ = POOLS[name]
    if name in ("global", "global max", "max 1d unbatched"):
        pytest.skip("global pooling takes rank 4 only; the 1d case is unbatched already")
    x = jnp.asarray(_case(name)[0])
    loss = lambda a: jnp.sum(jnp.sin(pool(a)))  # noqa: E731
    values, grads = jax.jit(lambda a: (jax.vmap(pool)(a), jax.vmap(jax.grad(loss))(a)))(x)
    np.testing.assert_array_equal(np.asarray(values), np.asarray(pool(x)))
    np.testing.assert_allclose(np.asarray(grads), np.asarray(jax.jit(jax.grad(loss))(x)),
                               rtol=1e-13, atol=1e-14)


def test_no_retracing_for_repeated_shapes(rng):
    traces = []

    @jax.jit
    def step(x):
        traces.append(None)
        return jax.grad(lambda a: jnp.sum(jaxpool.adaptive_avg_pool2d(a, 4) ** 2))(x)

    for _ in range(3):
        step(jnp.asarray(rng.standard_normal((2, 3, 15, 15)))).block_until_ready()
    assert len(traces) == 1


def _program_size(fn, x) -> int:
    text = jax.jit(fn).lower(x).as_text()
    return sum(1 for line in text.splitlines()
               if re.search(r"= (?:stablehlo|chlo)\.", line) and "constant" not in line)


def test_program_size_does_not_grow_with_the_output_size():
    """Compile time follows program size: 1000x1000 pooled to grids of 37, 334 or 997
    windows per axis lowers, forward plus gradient, to the same number of operations (and
    1000 -> 333, whose short windows are regular, to no more)."""
    x = jax.ShapeDtypeStruct((1, 1, 1000, 1000), jnp.float32)

    def fwd_and_grad(k):
        return jax.value_and_grad(lambda a: jnp.sum(jaxpool.adaptive_avg_pool2d(a, k) ** 2))

    sizes = {k: _program_size(fwd_and_grad(k), x) for k in (37, 334, 997, 333)}
    assert sizes[37] == sizes[334] == sizes[997] >= sizes[333], sizes


def test_avg_program_size_does_not_grow_with_a_tiling_window():
    """Adaptive average pooling to a few windows that tile the axis (a global head on a
    large map: 64, 512 or 2048 -> 2 per axis) lowers, forward plus gradient, to the same
    number of operations whatever the window's length."""

    def size(n):
        x = jax.ShapeDtypeStruct((1, 1, n, n), jnp.float32)
        return _program_size(jax.value_and_grad(
            lambda a: jnp.sum(jaxpool.adaptive_avg_pool2d(a, 2) ** 2)), x)

    sizes = {n: size(n) for n in (64, 512, 2048)}
    assert sizes[64] == sizes[512] == sizes[2048], sizes


def test_max_program_size_grows_with_the_window_logarithm():
    """Long max-pooling windows reduce by doubling spans: global max pooling of 1024x1024,
    forward plus gradient, lowers to less than twice the operations of 64x64 (a walk, one
    slice per tap, would take 16 times as many)."""

    def size(n):
        x = jax.ShapeDtypeStruct((1, 1, n, n), jnp.float32)
        return _program_size(jax.value_and_grad(
            lambda a: jnp.sum(jaxpool.global_max_pool(a) ** 2)), x)

    assert size(1024) < 2 * size(64), (size(64), size(1024))


def test_every_max_tangent_rule_has_a_case():
    """The max cases above reach every rule of windows.choose_max_tangent."""
    from jaxpool.pooling.plan import plan_adaptive, plan_max_pool
    from jaxpool.pooling.windows import choose_max_tangent, is_identity

    plans = {
        "max family padded": plan_max_pool("", (2, 3, 11, 10), None, 2, 3, 2, 1),
        "max family dilated ceil": plan_max_pool("", (2, 3, 12, 11), None, 2, (3, 2), 2, 1,
                                                 (2, 3), True),
        "max families ragged": plan_adaptive("", (2, 3, 10, 7), None, 2, (4, 3)),
        "max families up + identity": plan_adaptive("", (2, 3, 3, 5), None, 2, (7, None)),
        "max doubling": plan_adaptive("", (2, 3, 40, 19), None, 2, (2, 1)),
        "lp inf": plan_max_pool("", (2, 3, 13), None, 1, 3),
        "max sliding": plan_adaptive("", (2, 3, 50, 7), None, 2, (19, 3)),
    }
    assert set(plans) <= set(MAX_CASES)
    # a ragged innermost axis (channels-first), as in test_max_values' non-finite cases
    plans["ragged innermost"] = plan_adaptive("", (2, 3, 7, 10), None, 2, (3, 4))
    # channels-first: the innermost array axis is the last spatial one
    rules = {rule for plan in plans.values()
             for rule in choose_max_tangent(plan.axes, not is_identity(plan.axes[-1]))}
    assert rules == {"picks", "rows", "winners", "values", "whole axis", "identity",
                     "sliding"}, rules


MAX = {1: jaxpool.max_pool1d, 2: jaxpool.max_pool2d, 3: jaxpool.max_pool3d}
TORCH_MAX = {1: torch.nn.functional.max_pool1d, 2: torch.nn.functional.max_pool2d,
             3: torch.nn.functional.max_pool3d}
# Max pooling differentiated from each window's winner over every axis at once
# (windows.choose_max_tangent's ``picks``): strides shorter than, equal to and longer than
# the window, dilation, ceil mode, 1d to 3d; name -> (ndim, arguments, shape, layouts
# that take the rule).
PICKS_CASES = {
    "3x3 s2 p1": (2, dict(kernel_size=3, stride=2, padding=1), (2, 3, 11, 10), (False, True)),
    "3x3 s1 p1": (2, dict(kernel_size=3, stride=1, padding=1), (2, 3, 7, 6), (True,)),
    "2x2": (2, dict(kernel_size=2), (2, 3, 9, 8), (True,)),
    "stride beyond the window": (2, dict(kernel_size=2, stride=3), (2, 3, 11, 10), (True,)),
    "dilated ceil": (2, dict(kernel_size=(3, 2), stride=2, padding=1, dilation=(2, 3),
                             ceil_mode=True), (2, 3, 12, 11), (False, True)),
    "3d 3/2/1": (3, dict(kernel_size=3, stride=2, padding=1), (1, 2, 5, 6, 7), (False, True)),
    "3d dilated ceil": (3, dict(kernel_size=3, stride=2, padding=1, dilation=(1, 2, 1),
                                ceil_mode=True), (1, 2, 6, 9, 7), (False, True)),
    "1d long ceil": (1, dict(kernel_size=20, stride=3, padding=10, ceil_mode=True),
                     (2, 3, 45), (False, True)),
}
# Ragged adaptive max pooling (several window families per axis): ``rows`` on the outer
# axes, ``winners`` on a channels-first innermost one; name -> (output size, shape).
RAGGED_CASES = {"15 -> 4": (4, (2, 3, 15, 15)), "14 -> (3, 5)": ((3, 5), (2, 3, 14, 13)),
                "5 -> 7 (upsampling)": ((7, 4), (2, 3, 5, 9))}


@pytest.mark.parametrize("name,channels_last", each_once(list(RAGGED_CASES), [False, True]))
def test_ragged_max_derivatives_match_torch_to_second_order(name, channels_last, rng):
    """As above, for adaptive max pooling of ragged axes."""
    from torch_reference import to_channels_first, to_channels_last

    out, shape = RAGGED_CASES[name]
    pool = lambda a: jaxpool.adaptive_max_pool2d(a, out, channels_last=channels_last)  # noqa: E731
    x = np.round(np.maximum(rng.standard_normal(shape), 0) * 4) / 4
    x_torch = torch.tensor(x, requires_grad=True)
    y = torch.nn.functional.adaptive_max_pool2d(x_torch, out)
    w = rng.standard_normal(y.shape)
    (g,) = torch.autograd.grad((torch.tensor(w) * y ** 2).sum(), x_torch, create_graph=True)
    (gg,) = torch.autograd.grad((g ** 2).sum(), x_torch)
    layout = (lambda a: jnp.asarray(to_channels_last(a, 2))) if channels_last else jnp.asarray
    back = (lambda a: to_channels_first(np.asarray(a), 2)) if channels_last else np.asarray
    loss = lambda a: jnp.sum(layout(w) * pool(a) ** 2)  # noqa: E731
    # one compiled program (compile time dominates)
    got_y, got_g, got_gg = jax.jit(lambda a: (pool(a), jax.grad(loss)(a), jax.grad(
        lambda b: jnp.sum(jax.grad(loss)(b) ** 2))(a)))(layout(x))
    np.testing.assert_array_equal(back(got_y), y.detach().numpy())
    for got, expected in ((got_g, g), (got_gg, gg)):
        expected = expected.detach().numpy()
        np.testing.assert_allclose(back(got), expected, rtol=1e-13,
                                   atol=1e-13 * np.abs(expected).max(initial=1))


def _picks_case(name, channels_last):
    from jaxpool.pooling.plan import plan_max_pool
    from jaxpool.pooling.windows import choose_max_tangent, is_identity

    ndim, args, shape, layouts = PICKS_CASES[name]
    if channels_last:
        shape = (shape[0],) + shape[2:] + (shape[1],)
    plan = plan_max_pool("", shape, None, ndim, args["kernel_size"], args.get("stride"),
                         args.get("padding", 0), args.get("dilation", 1),
                         args.get("ceil_mode", False), channels_last)
    rules = choose_max_tangent(plan.axes, not channels_last and not is_identity(plan.axes[-1]))
    assert ("picks" in rules) == (channels_last in layouts), rules
    return ndim, args, shape, lambda a: MAX[ndim](a, **args, channels_last=channels_last)


def test_the_picks_cases_find_winners_both_ways():
    """windows.codes_at_once: over all the axes at once, and one axis at a time."""
    from jaxpool.pooling.plan import plan_max_pool
    from jaxpool.pooling.windows import codes_at_once

    ways = {}
    for name, (ndim, args, shape, _) in PICKS_CASES.items():
        plan = plan_max_pool("", shape, None, ndim, args["kernel_size"], args.get("stride"),
                             args.get("padding", 0), args.get("dilation", 1),
                             args.get("ceil_mode", False))
        ways[name] = codes_at_once(plan.axes)
    assert set(ways.values()) == {True, False}, ways


# Each case in one layout by default (the layouts in turn), both under -m slow; the cases
# whose options another default case holds only under -m slow: "3x3 s2 p1" and "3x3 s1 p1"
# (padded, stride short of the window: as "3d 3/2/1" in 2d), "3d dilated ceil" (dilation
# and ceil mode: as "dilated ceil" in 3d).
SECOND_ORDER_SLOW = ("3x3 s2 p1", "3x3 s1 p1", "3d dilated ceil")


def _second_order_cases():
    params = each_once(list(PICKS_CASES), [False, True])
    return [pytest.param(*p.values, marks=pytest.mark.slow, id=p.id)
            if p.values[0] in SECOND_ORDER_SLOW else p for p in params]


@pytest.mark.parametrize("name,channels_last", _second_order_cases())
def test_max_derivatives_match_torch_to_second_order(name, channels_last, rng):
    """On tied inputs (ReLU outputs in quarters): values exactly, the gradient, its
    gradient and the forward-mode tangent as torch's (each window's derivative reaches its
    first maximal element)."""
    from torch_reference import to_channels_first, to_channels_last

    ndim, args, _, pool = _picks_case(name, channels_last)
    shape = PICKS_CASES[name][2]
    x = np.round(np.maximum(rng.standard_normal(shape), 0) * 4) / 4
    v = rng.standard_normal(shape)
    x_torch = torch.tensor(x, requires_grad=True)
    y = TORCH_MAX[ndim](x_torch, **args)
    w = rng.standard_normal(y.shape)
    (g,) = torch.autograd.grad((torch.tensor(w) * y ** 2).sum(), x_torch, create_graph=True)
    (gg,) = torch.autograd.grad((g ** 2).sum(), x_torch)
    _, tangent = torch.func.jvp(lambda t: TORCH_MAX[ndim](t, **args), (torch.tensor(x),),
                                (torch.tensor(v),))
    layout = (lambda a: jnp.asarray(to_channels_last(a, ndim))) if channels_last else jnp.asarray
    back = (lambda a: to_channels_first(np.asarray(a), ndim)) if channels_last else np.asarray
    loss = lambda a: jnp.sum(layout(w) * pool(a) ** 2)  # noqa: E731

    @jax.jit  # one compiled program (compile time dominates)
    def everything(a, t):
        return (pool(a), jax.grad(loss)(a), jax.grad(lambda b: jnp.sum(jax.grad(loss)(b) ** 2))(a),
                jax.jvp(pool, (a,), (t,))[1])

    got_y, got_g, got_gg, got_tangent = everything(layout(x), layout(v))
    np.testing.assert_array_equal(back(got_y), y.detach().numpy())
    np.testing.assert_array_equal(back(got_tangent), tangent.numpy())
    for got, expected in ((got_g, g), (got_gg, gg)):
        expected = expected.detach().numpy()
        np.testing.assert_allclose(back(got), expected, rtol=1e-13,
                                   atol=1e-13 * np.abs(expected).max(initial=1))


# The default run takes one case of each way the winners' codes are found
# (test_the_picks_cases_find_winners_both_ways): one axis at a time ("3x3 s2 p1") and
# over the three axes at once ("3d 3/2/1"); -m slow every case.
PICKS_SCATTER_DEFAULT = ("3x3 s2 p1", "3d 3/2/1")


@pytest.mark.parametrize("name", [n if n in PICKS_SCATTER_DEFAULT
                                  else pytest.param(n, marks=pytest.mark.slow)
                                  for n in PICKS_CASES])
def test_max_picks_hold_no_scatter_or_gather_at_any_order(name, rng):
    """Channels-last, where every case takes the rule: both modes, orders 1 to 3."""
    ndim, _, shape, pool = _picks_case(name, True)
    x = jnp.asarray(rng.random(shape))
    w = jnp.asarray(rng.standard_normal(jax.eval_shape(pool, x).shape))
    for program, fn in _derivative_programs(pool, x, w).items():
        ops = _stablehlo_ops(fn, x)
        banned = {op for op in ops if "scatter" in op or op == "gather"}
        assert not banned, f"{name}: {program} lowers to {banned}"
