"""A NaN or inf reaches exactly the outputs whose windows hold it, as in torch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxpool

from default_share import default_share
from strategy_cases import CASES, MAX_CASES, MAX_TORCH, TORCH


def _same_pattern(got, expected):
    for pick in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(pick(got), pick(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("values", [(np.nan,), (np.inf,), (-np.inf,), (np.inf, -np.inf),
                                    (np.nan, np.inf, -np.inf, np.inf)])
# Every other case by default (a spread over the strategies; each case compiles its
# programs once for every pattern of values), every case under -m slow.
@pytest.mark.parametrize("name", default_share(list(CASES), 2))
def test_non_finite_values_stay_in_their_windows(name, values, rng):
    pool, shape, _ = CASES[name]
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    spots = rng.choice(flat.size, size=len(values), replace=False)
    flat[spots] = values
    expected = TORCH[name](torch.tensor(x)).numpy()
    _same_pattern(np.asarray(jax.jit(pool)(jnp.asarray(x))), expected)
    # vmap turns the finite/non-finite branch into a select: still exact.
    _same_pattern(np.asarray(jax.vmap(pool)(jnp.asarray(x[:, None]))[:, 0]), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_non_finite_in_windows_too_long_for_the_coded_count(dtype, rng, x64):
    """Windows of 3001 elements: the matrix path counts infinities in two planes."""
    x = rng.standard_normal((1, 2, 6001)).astype(dtype)
    x[0, 0, [10, 3000]] = [np.inf, -np.inf]
    x[0, 1, 5000] = np.nan
    expected = torch.nn.functional.adaptive_avg_pool1d(torch.tensor(x), 2).numpy()
    _same_pattern(np.asarray(jax.jit(lambda a: jaxpool.adaptive_avg_pool1d(a, 2))(x)), expected)


def test_the_pattern_check_can_fail():
    """A matrix product without the non-finite branch smears one inf over its row."""
    x = np.zeros((1, 1, 1, 5), np.float32)
    x[..., 0] = np.inf
    matrix = np.array([[1, 1, 0, 0, 0], [0, 0, 1, 1, 1]], np.float32)
    smeared = (jnp.asarray(x) @ jnp.asarray(matrix.T))
    expected = torch.nn.functional.adaptive_avg_pool2d(torch.tensor(x), (1, 2)).numpy()
    with pytest.raises(AssertionError):
        _same_pattern(np.asarray(smeared), expected)


# --- derivatives: a NaN or inf in a tangent or cotangent stays where torch puts it ------

# every strategy's case (avg, max, LP), as the case's layout takes it; global max pooling
# differentiates as torch's adaptive_max_pool2d(x, 1) (amax's backward spreads a NaN)
DERIVATIVE_CASES = {**{name: case[:2] for name, case in CASES.items()}, **MAX_CASES}
DERIVATIVE_TORCH = {**TORCH, **MAX_TORCH,
                    "global max": lambda t: F.adaptive_max_pool2d(t, 1).flatten(1)}


def _with_non_finite(a, values, rng):
    a = a.copy()
    flat = a.reshape(-1)
    flat[rng.choice(flat.size, size=len(values), replace=False)] = values
    return a


def _non_finite_directions(reference, x, values, rng):
    """A cotangent and a tangent with ``values`` planted in them, as JAX arrays by mode
    ("reverse", "forward"), and torch's answers for them: ``reference``'s backward of the
    cotangent and its forward-mode derivative along the tangent, at ``x``."""
    x_torch = torch.tensor(x, requires_grad=True)
    y = reference(x_torch)
    cotangent = _with_non_finite(rng.standard_normal(y.shape), values, rng)
    tangent = _with_non_finite(rng.standard_normal(x.shape), values, rng)
    expected = {
        "reverse": torch.autograd.grad(y, x_torch, torch.tensor(cotangent))[0].numpy(),
        "forward": torch.func.jvp(reference, (torch.tensor(x),),
                                  (torch.tensor(tangent),))[1].numpy()}
    return expected, {"reverse": jnp.asarray(cotangent), "forward": jnp.asarray(tangent)}


def _same_mask(got, expected, what):
    got = np.asarray(got)
    for pick in (np.isnan, np.isposinf, np.isneginf):
        bad = np.flatnonzero(pick(got) != pick(expected))
        assert bad.size == 0, (f"{what}: {pick.__name__} differs from torch at {bad.size} of "
                               f"{got.size} entries (torch {int(pick(expected).sum())}, "
                               f"jaxpool {int(pick(got).sum())})")
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-10, atol=1e-12,
                               err_msg=what)


# the ways of reaching each map that the default run checks (-m slow: all of them)
DEFAULT_WAYS = {"jvp", "vjp"}


def _derivative_maps(pool, x):
    """Every way of reaching the op's two linear maps, forward (tangent -> output tangent)
    and reverse (cotangent -> input cotangent), at first and second order: the rule
    itself, through linearize, and each map's own derivative and transpose."""
    _, vjp = jax.vjp(pool, x)
    _, linear = jax.linearize(pool, x)
    zero_out = jnp.zeros(jax.eval_shape(pool, x).shape, x.dtype)

    def jvp(t):
        return jax.jvp(pool, (x,), (t,))[1]

    def backward(c):
        return vjp(c)[0]

    return {
        "forward": {
            "jvp": jvp,
            "linearize": linear,
            "jvp of jvp": lambda t: jax.jvp(jvp, (jnp.zeros_like(x),), (t,))[1],
            "transpose of vjp": lambda t: jax.linear_transpose(backward, zero_out)(t)[0],
            "vjp of vjp": lambda t: jax.vjp(backward, zero_out)[1](t)[0],
        },
        "reverse": {
            "vjp": backward,
            "transpose of linearize": lambda c: jax.linear_transpose(linear, x)(c)[0],
            "jvp of vjp": lambda c: jax.jvp(backward, (zero_out,), (c,))[1],
            "vjp of jvp": lambda c: jax.vjp(jvp, jnp.zeros_like(x))[1](c)[0],
            "grad": lambda c: jax.grad(lambda a: jnp.sum(pool(a) * c))(x),
        },
    }


@pytest.mark.parametrize("values,every_way", [
    ((np.nan, np.inf, -np.inf, np.inf), False),
    pytest.param((np.nan, np.inf, -np.inf, np.inf), True, marks=pytest.mark.slow),
    pytest.param((np.inf, np.inf), True, marks=pytest.mark.slow),
    pytest.param((-np.inf,), True, marks=pytest.mark.slow)],
    ids=["mixed", "mixed-every-way", "two +inf", "-inf"])
# Every third case by default (a spread over the strategies), every case under -m slow.
@pytest.mark.parametrize("name", default_share(list(DERIVATIVE_CASES), 3))
def test_non_finite_derivatives_stay_where_torch_puts_them(name, values, every_way, rng, x64):
    """A cotangent's NaN or inf reaches only the inputs of the windows that hold it, a
    tangent's only the outputs whose windows hold it, as torch's backward and
    torch.func.jvp: at first and second order, in every strategy, masks exactly."""
    pool, shape = DERIVATIVE_CASES[name]
    x = rng.standard_normal(shape)
    if name.startswith("lp"):
        x = np.abs(x) + 0.1
    expected, inputs = _non_finite_directions(DERIVATIVE_TORCH[name], x, values, rng)

    # one compiled program for all of them: compile time dominates on the CPU
    @jax.jit
    def everything(x, inputs):
        maps = _derivative_maps(pool, x)
        return {mode: {way: f(inputs[mode]) for way, f in maps[mode].items()
                       if every_way or way in DEFAULT_WAYS} for mode in maps}

    got = everything(jnp.asarray(x), inputs)
    for mode, ways in got.items():
        for way, value in ways.items():
            _same_mask(value, expected[mode], f"{name}, {way}")
    if not every_way:
        return
    # no transform of its own: the op's own compiled programs, called eagerly
    _same_mask(jax.vjp(pool, jnp.asarray(x))[1](inputs["reverse"])[0], expected["reverse"],
               f"{name}, eager vjp")
    _same_mask(jax.jvp(pool, (jnp.asarray(x),), (inputs["forward"],))[1], expected["forward"],
               f"{name}, eager jvp")


@pytest.mark.parametrize("op", [
    "adaptive_avg_pool2d 56 -> 7",
    pytest.param("adaptive_avg_pool2d 50 -> 9", marks=pytest.mark.slow),
    pytest.param("avg_pool2d 2", marks=pytest.mark.slow),
    pytest.param("avg_pool2d 3, 2, 1", marks=pytest.mark.slow),
    pytest.param("lp_pool2d 2, 3, 2", marks=pytest.mark.slow),
    pytest.param("lp_pool2d 3, 2, ceil signed", marks=pytest.mark.slow)])
def test_non_finite_cotangents_of_the_common_ops(op, rng, x64):
    """The ops of real models, at their sizes: the NaN and inf entries of the gradient are
    torch's, under vmap too."""
    shape, jax_fn, torch_fn = {
        "adaptive_avg_pool2d 56 -> 7": ((2, 4, 56, 56), lambda a: jaxpool.adaptive_avg_pool2d(a, 7),
                                        lambda t: F.adaptive_avg_pool2d(t, 7)),
        "adaptive_avg_pool2d 50 -> 9": ((1, 4, 50, 50), lambda a: jaxpool.adaptive_avg_pool2d(a, 9),
                                        lambda t: F.adaptive_avg_pool2d(t, 9)),
        "avg_pool2d 2": ((2, 4, 20, 20), lambda a: jaxpool.avg_pool2d(a, 2),
                         lambda t: F.avg_pool2d(t, 2)),
        "avg_pool2d 3, 2, 1": ((2, 4, 20, 20), lambda a: jaxpool.avg_pool2d(a, 3, 2, 1),
                               lambda t: F.avg_pool2d(t, 3, 2, 1)),
        "lp_pool2d 2, 3, 2": ((2, 4, 20, 20), lambda a: jaxpool.lp_pool2d(a, 2, 3, 2),
                              lambda t: F.lp_pool2d(t, 2, 3, 2)),
        "lp_pool2d 3, 2, ceil signed": ((2, 4, 21, 21),
                                        lambda a: jaxpool.lp_pool2d(a, 3, 2, ceil_mode=True),
                                        lambda t: F.lp_pool2d(t, 3, 2, ceil_mode=True)),
    }[op]
    x = rng.standard_normal(shape)
    x_torch = torch.tensor(x, requires_grad=True)
    y = torch_fn(x_torch)
    cotangent = _with_non_finite(rng.standard_normal(y.shape), (np.nan, np.inf, -np.inf), rng)
    expected = torch.autograd.grad(y, x_torch, torch.tensor(cotangent))[0].numpy()
    _, vjp = jax.vjp(jax_fn, jnp.asarray(x))
    _same_mask(vjp(jnp.asarray(cotangent))[0], expected, op)
    per_example = jax.vmap(lambda a, c: jax.vjp(jax_fn, a[None])[1](c[None])[0][0])
    _same_mask(per_example(jnp.asarray(x), jnp.asarray(cotangent)), expected, f"{op}, vmap")
