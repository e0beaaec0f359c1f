"""Max and LP pooling against torch.nn.functional: values bit for bit, indices, VJPs, on
inputs full of ties (ReLU outputs, small integers) and non-finite numbers as well as
random normals."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxpool
from default_share import default_cases, default_share, each_once, option_values
from torch_reference import to_channels_first, to_channels_last

pytestmark = pytest.mark.usefixtures("x64")

MAX = {1: jaxpool.max_pool1d, 2: jaxpool.max_pool2d, 3: jaxpool.max_pool3d}
ADAPTIVE_MAX = {1: jaxpool.adaptive_max_pool1d, 2: jaxpool.adaptive_max_pool2d,
                3: jaxpool.adaptive_max_pool3d}
LP = {1: jaxpool.lp_pool1d, 2: jaxpool.lp_pool2d, 3: jaxpool.lp_pool3d}
TORCH_MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
TORCH_ADAPTIVE_MAX = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d,
                      3: F.adaptive_max_pool3d}
TORCH_LP = {1: F.lp_pool1d, 2: F.lp_pool2d, 3: F.lp_pool3d}


def _inputs(shape, rng):
    """Random normals, ReLU outputs (most windows tie at zero), small integers (ties
    everywhere), and normals sprinkled with NaN, +inf and -inf."""
    normal = rng.standard_normal(shape)
    special = normal.copy()
    spots = rng.random(shape)
    special[spots < 0.05] = np.nan
    special[(spots >= 0.05) & (spots < 0.1)] = np.inf
    special[(spots >= 0.1) & (spots < 0.2)] = -np.inf
    return {"normal": normal, "relu": np.maximum(normal - 0.5, 0),
            "integers": rng.integers(-2, 3, shape).astype(np.float64), "non-finite": special}


def _max_grid(ndim):
    """kernel, stride, padding, dilation and ceil_mode crossed (torch's padding rule kept)."""
    kernels = [1, 2, 3, (3, 2, 2)[:ndim] if ndim > 1 else 4]
    options = itertools.product(kernels, [None, 1, 2], [0, 1], [1, 2], [False, True])
    for kernel, stride, padding, dilation, ceil_mode in options:
        smallest = min(kernel) if isinstance(kernel, tuple) else kernel
        if padding > smallest // 2:
            continue
        yield dict(kernel_size=kernel, stride=stride, padding=padding, dilation=dilation,
                   ceil_mode=ceil_mode)


SHAPES = {1: (2, 3, 13), 2: (2, 3, 9, 10), 3: (1, 2, 7, 6, 8)}
MAX_GRID = [(d, args) for d in (1, 2, 3) for args in _max_grid(d)]
MAX_LONG = [(1, dict(kernel_size=20, stride=3, padding=10, ceil_mode=True)),  # long, padded
            (1, dict(kernel_size=17, stride=1, dilation=2, ceil_mode=True))]  # long, dilated
ADAPTIVE_CASES = [(1, (2, 3, 15), 4), (1, (3, 7), 9), (1, (2, 3, 12), 1),
                  (2, (2, 3, 15, 15), 4), (2, (2, 3, 7, 7), 1), (2, (2, 3, 5, 7), (3, None)),
                  (2, (1, 2, 3, 5), (7, 8)), (2, (2, 3, 56, 56), 7), (2, (0, 3, 5, 5), 2),
                  (2, (3, 10, 11), (3, 4)), (3, (1, 2, 6, 7, 8), (3, 4, 5)),
                  (3, (1, 2, 4, 4, 4), 1), (2, (2, 3, 40, 19), (2, 1)), (1, (1, 2, 100), 3),
                  (2, (1, 2, 1000, 3), (37, 3))]


def _values_indices_vjp(jax_fn):
    """``jax_fn``'s values, indices and VJP of a cotangent, as one compiled program (the
    eager VJP compiles the forward pass and its transpose apart)."""

    @jax.jit
    def program(x, cotangent):
        values, vjp, indices = jax.vjp(jax_fn, x, has_aux=True)
        return values, vjp(cotangent)[0], indices

    return program


def _check(program, torch_fn, x, ndim, channels_last, rng):
    """Values and indices exactly, and the VJP (torch's gradient goes to its indices).
    ``program`` is ``_values_indices_vjp`` of a function that returns ``(values,
    indices)``, as torch's ``return_indices=True``."""
    x_torch = torch.tensor(x, requires_grad=True)
    values, indices = torch_fn(x_torch)
    cotangent = rng.standard_normal(values.shape)
    (grad,) = torch.autograd.grad(values, x_torch, torch.tensor(cotangent))
    expected = [values.detach().numpy(), indices.numpy(), grad.numpy()]
    x_in = to_channels_last(x, ndim) if channels_last else x
    got_values, got_grad, got_indices = program(
        jnp.asarray(x_in), jnp.asarray(to_channels_last(cotangent, ndim) if channels_last
                                       else cotangent))
    got = [np.asarray(got_values), np.asarray(got_indices), np.asarray(got_grad)]
    if channels_last:
        got = [to_channels_first(a, ndim) for a in got]
    assert got[0].dtype == x.dtype and got[1].dtype == np.int64
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])
    # an element picked by overlapping windows sums their cotangents in another order
    np.testing.assert_allclose(got[2], expected[2], rtol=1e-14,
                               atol=1e-14 * np.abs(expected[2]).max(initial=0))


# The default run takes a seventeenth of the crossed grid (every value of every option, in
# each dimension: test_the_default_max_share_holds_every_option_value; 7, 9, 11 and 17
# keep them all) and the long windows; -m slow the whole grid.
MAX_SHARE = 17


def test_the_default_max_share_holds_every_option_value():
    assert option_values(default_cases(MAX_GRID, MAX_SHARE)) == option_values(MAX_GRID)


@pytest.mark.parametrize("ndim,args", default_share(MAX_GRID, MAX_SHARE) + MAX_LONG,
                         ids=[f"{d}d-{a}" for d, a in MAX_GRID + MAX_LONG])
def test_max_pool_matches_torch(ndim, args, rng):
    channels_last = bool(rng.integers(2))
    pool = _values_indices_vjp(lambda a: MAX[ndim](a, **args, return_indices=True,
                                                   channels_last=channels_last))
    shape = SHAPES[ndim] if np.max(args["kernel_size"]) < 17 else (2, 3, 45)
    for x in _inputs(shape, rng).values():
        _check(pool, lambda t: TORCH_MAX[ndim](t, **args, return_indices=True), x, ndim,
               channels_last, rng)


# Each case in one layout by default (the layouts in turn), both under -m slow.
@pytest.mark.parametrize("ndim,shape,output_size,channels_last",
                         each_once(ADAPTIVE_CASES, [False, True],
                                   ids=[f"{s}->{o}" for _, s, o in ADAPTIVE_CASES]))
def test_adaptive_max_pool_matches_torch(ndim, shape, output_size, channels_last, rng):
    pool = _values_indices_vjp(lambda a: ADAPTIVE_MAX[ndim](a, output_size, True,
                                                            channels_last=channels_last))
    for x in _inputs(shape, rng).values():
        _check(pool, lambda t: TORCH_ADAPTIVE_MAX[ndim](t, output_size, True), x, ndim,
               channels_last, rng)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("kind", ["normal", "relu", "non-finite"])
def test_global_max_pool_matches_torch(kind, channels_last, rng):
    x = _inputs((2, 3, 7, 6), rng)[kind]
    x_torch = torch.tensor(x, requires_grad=True)
    expected = F.adaptive_max_pool2d(x_torch, 1).flatten(1)
    cotangent = rng.standard_normal(expected.shape)
    (grad,) = torch.autograd.grad(expected, x_torch, torch.tensor(cotangent))
    x_in = jnp.asarray(to_channels_last(x, 2) if channels_last else x)
    got, vjp = jax.vjp(lambda a: jaxpool.global_max_pool(a, channels_last=channels_last), x_in)
    got_grad = np.asarray(vjp(jnp.asarray(cotangent))[0])
    np.testing.assert_array_equal(np.asarray(got), expected.detach().numpy())
    np.testing.assert_array_equal(to_channels_first(got_grad, 2) if channels_last else got_grad,
                                  grad.numpy())


def test_indices_are_int32_without_x64():
    enable_x64 = getattr(jax, "enable_x64", None)
    if enable_x64 is None:  # older jax keeps it in jax.experimental
        from jax.experimental import enable_x64
    with enable_x64(False):
        _, indices = jaxpool.max_pool2d(jnp.ones((1, 1, 4, 4)), 2, return_indices=True)
    assert indices.dtype == jnp.int32


BIT_EXACT_OPS = ["max 3x3 s2 p1", "max ceil dilated", "adaptive 15->4"]
BIT_EXACT_DTYPES = ["float16", "bfloat16", "float32"]


# Each op in one dtype by default (the dtypes in turn: one compiled program per op and
# dtype), on every kind of input; every pair under -m slow.
@pytest.mark.parametrize("op,kind,dtype", [
    pytest.param(op, kind, dtype, marks=() if j == i % len(BIT_EXACT_DTYPES) else pytest.mark.slow,
                 id=f"{op}-{kind}-{dtype}")
    for i, op in enumerate(BIT_EXACT_OPS) for kind in ("normal", "relu", "non-finite")
    for j, dtype in enumerate(BIT_EXACT_DTYPES)])
def test_max_is_bit_exact_in_every_dtype(op, kind, dtype, rng):
    """Max pooling picks an element: nothing to round, so every dtype matches torch bit for
    bit (the sign of a zero included)."""
    jax_fn, torch_fn = {
        "max 3x3 s2 p1": (lambda a: jaxpool.max_pool2d(a, 3, 2, 1, return_indices=True),
                          lambda t: F.max_pool2d(t, 3, 2, 1, return_indices=True)),
        "max ceil dilated": (lambda a: jaxpool.max_pool2d(a, 3, 2, 1, 2, True, True),
                             lambda t: F.max_pool2d(t, 3, 2, 1, 2, True, True)),
        "adaptive 15->4": (lambda a: jaxpool.adaptive_max_pool2d(a, 4, True),
                           lambda t: F.adaptive_max_pool2d(t, 4, True)),
    }[op]
    x = _inputs((2, 4, 15, 15), rng)[kind]
    x[0, 0, 0, :4] = [-0.0, 0.0, -0.0, 0.0]
    x = np.asarray(jnp.asarray(x, dtype))
    values, indices = torch_fn(torch.tensor(x.astype(np.float64)).to(getattr(torch, dtype)))
    got_values, got_indices = jax_fn(jnp.asarray(x))
    assert got_values.dtype == jnp.dtype(dtype)
    bits = {2: np.uint16, 4: np.uint32}[got_values.dtype.itemsize]
    expected = np.asarray(jnp.asarray(values.to(torch.float64).numpy(), dtype))
    np.testing.assert_array_equal(np.asarray(got_values).view(bits), expected.view(bits))
    np.testing.assert_array_equal(np.asarray(got_indices), indices.numpy())


LP_CASES = [(d, p, args) for d in (1, 2, 3) for p in (1, 2, 3, 1.5, float("inf"), -float("inf"))
            for args in (dict(kernel_size=2), dict(kernel_size=3, stride=2, ceil_mode=True))]


# The default run takes every seventh: each dimension, power and window option still appears
# (test_the_default_lp_share_holds_every_option_value); -m slow the whole grid.
LP_SHARE = 7


def test_the_default_lp_share_holds_every_option_value():
    taken = default_cases(LP_CASES, LP_SHARE)
    for i in range(3):
        assert {repr(c[i]) for c in taken} == {repr(c[i]) for c in LP_CASES}


@pytest.mark.parametrize("ndim,norm_type,args", default_share(LP_CASES, LP_SHARE),
                         ids=[f"{d}d-p{p}-{a}" for d, p, a in LP_CASES])
def test_lp_pool_matches_torch(ndim, norm_type, args, rng):
    """torch's definition to rounding, values and VJP, on positive inputs and, for even
    and infinite powers (whose window sums stay real), on signed ones."""
    shape = SHAPES[ndim]
    x = np.abs(rng.standard_normal(shape)) + 0.1
    if norm_type % 2 == 0 or np.isinf(norm_type):
        x = x * np.sign(rng.standard_normal(shape))
    x_torch = torch.tensor(x, requires_grad=True)
    expected = TORCH_LP[ndim](x_torch, norm_type, **args)
    cotangent = rng.standard_normal(expected.shape)
    (grad,) = torch.autograd.grad(expected, x_torch, torch.tensor(cotangent))
    program = _values_indices_vjp(lambda a: (LP[ndim](a, norm_type, **args), ()))
    got, got_grad, _ = program(jnp.asarray(x), jnp.asarray(cotangent))
    np.testing.assert_allclose(np.asarray(got), expected.detach().numpy(), rtol=1e-12,
                               atol=1e-14, equal_nan=True)
    np.testing.assert_allclose(np.asarray(got_grad), grad.numpy(),
                               rtol=1e-10, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_lp_pool_half_precision_rounds_once(dtype, rng):
    x = np.asarray(jnp.asarray(np.abs(rng.standard_normal((2, 4, 15, 15))) + 0.1, dtype))
    reference = F.lp_pool2d(torch.tensor(x.astype(np.float64)), 2, 3, 2).numpy()
    got = jaxpool.lp_pool2d(jnp.asarray(x), 2, 3, 2)
    assert got.dtype == jnp.dtype(dtype)
    eps = float(jnp.finfo(dtype).eps)
    assert np.all(np.abs(np.asarray(got.astype(jnp.float64)) - reference)
                  <= eps * np.abs(reference) + 1e-6 * np.abs(reference).max())


@pytest.mark.parametrize("norm_type,error", [(0, ValueError), (float("nan"), ValueError),
                                             (True, TypeError), ("2", TypeError)])
def test_lp_pool_rejects_a_bad_norm_type(norm_type, error):
    with pytest.raises(error, match="norm_type"):
        jaxpool.lp_pool2d(jnp.ones((1, 1, 4, 4)), norm_type, 2)


def _bits(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _under_every_transform(fn, x):
    """``fn(x)`` computed plainly and under jit, jvp, vjp, grad (the value of
    value_and_grad), linearize and vmap (over a new leading axis)."""
    t = jnp.ones_like(x)
    return {
        "plain": fn(x),
        "jit": jax.jit(fn)(x),
        "jvp": jax.jvp(fn, (x,), (t,))[0],
        "vjp": jax.vjp(fn, x)[0],
        "grad": jax.grad(lambda a: (fn(a).sum(), fn(a)), has_aux=True)(x)[1],
        "linearize": jax.linearize(fn, x)[0],
        "vmap": jax.vmap(fn)(x[None])[0],
        "jvp of vjp": jax.jvp(lambda a: jax.vjp(fn, a)[0], (x,), (t,))[0],
    }


# Windows covering a whole axis (global, adaptive -> 1, a kernel as long as the axis), in
# every max strategy (walk, doubling spans), beside windows that do not.
SIGN_CASES = {
    "adaptive 2x3 -> 1": (lambda a: jaxpool.adaptive_max_pool2d(a, 1),
                          lambda t: F.adaptive_max_pool2d(t, 1), (1, 2, 2, 3)),
    "global": (lambda a: jaxpool.global_max_pool(a), lambda t: t.amax((2, 3)), (1, 3, 2, 3)),
    "adaptive 1d -> 1": (lambda a: jaxpool.adaptive_max_pool1d(a, 1),
                         lambda t: F.adaptive_max_pool1d(t, 1), (2, 3, 5)),
    "kernel (2, 3) on 2x3": (lambda a: jaxpool.max_pool2d(a, (2, 3)),
                             lambda t: F.max_pool2d(t, (2, 3)), (1, 3, 2, 3)),
    "adaptive 40 -> 1 (doubling)": (lambda a: jaxpool.adaptive_max_pool1d(a, 1),
                                    lambda t: F.adaptive_max_pool1d(t, 1), (2, 3, 40)),
    "adaptive (40, 19) -> (2, 1)": (lambda a: jaxpool.adaptive_max_pool2d(a, (2, 1)),
                                    lambda t: F.adaptive_max_pool2d(t, (2, 1)), (1, 2, 40, 19)),
    "3x3 s2 p1": (lambda a: jaxpool.max_pool2d(a, 3, 2, 1),
                  lambda t: F.max_pool2d(t, 3, 2, 1), (1, 2, 5, 6)),
    "adaptive 3d -> 1, channels-last": (
        lambda a: jaxpool.adaptive_max_pool3d(a, 1, channels_last=True),
        lambda t: F.adaptive_max_pool3d(t.permute(0, 4, 1, 2, 3), 1).permute(0, 2, 3, 4, 1),
        (1, 2, 3, 2, 3)),
}


# By default one case of each kind: a whole axis walked, a whole axis by doubling spans, and
# windows that do not cover their axis; every case under -m slow.
SIGN_DEFAULT = ("adaptive 2x3 -> 1", "adaptive 40 -> 1 (doubling)", "3x3 s2 p1")


@pytest.mark.parametrize("name", [n if n in SIGN_DEFAULT
                                  else pytest.param(n, marks=pytest.mark.slow)
                                  for n in SIGN_CASES])
def test_a_transform_never_changes_a_zeros_sign(name, rng):
    """Inputs of signed zeros (and a few negatives): every window's pick is a zero whose
    sign is torch's, plainly and under every transform."""
    fn, torch_fn, shape = SIGN_CASES[name]
    x = np.where(rng.random(shape) < 0.5, -0.0, 0.0)
    x[rng.random(shape) < 0.2] = -0.5
    x[0, 0] = x[..., 0] = -0.0   # channel 0 in either layout: its picks are -0.0
    expected = torch_fn(torch.tensor(x)).numpy()
    assert np.signbit(expected).any() and (expected == 0).all()
    for transform, got in _under_every_transform(fn, jnp.asarray(x)).items():
        np.testing.assert_array_equal(_bits(got), _bits(expected), err_msg=transform)


# The default run takes every fourth (the diagonal: each rank and output size once), -m slow
# all of them.
@pytest.mark.parametrize("ndim,output_size",
                         default_share(list(itertools.product([1, 2, 3], [2, 3, 5])), 4))
def test_adaptive_max_of_an_axis_of_one_element(ndim, output_size, rng):
    """Every window of an axis of extent 1 holds its one element: values, indices and the
    gradient as torch's, along each axis in turn, in both layouts."""
    for axis in range(ndim):
        shape = [1, 2] + [4] * ndim
        shape[2 + axis] = 1
        sizes = [None] * ndim
        sizes[axis] = output_size
        x = _inputs(tuple(shape), rng)["integers"]
        channels_last = bool(axis % 2)
        _check(_values_indices_vjp(lambda a: ADAPTIVE_MAX[ndim](a, tuple(sizes), True,
                                                                channels_last=channels_last)),
               lambda t: TORCH_ADAPTIVE_MAX[ndim](t, tuple(sizes), True), x, ndim,
               channels_last, rng)


# One case per way max pooling differentiates (windows.choose_max_tangent): each window's
# winner over every axis (padded, ceil-mode overhang, stride 1 channels-last, and found
# over three axes at once), the walk's own derivative (stride 1 channels-first, doubling
# spans), the winning taps of ragged adaptive families (axis by axis, or row by row on
# outer axes), whole-axis windows.
NONFINITE_CASES = {
    "picks 3x3 s2 p1": (lambda a, cl: jaxpool.max_pool2d(a, 3, 2, 1, channels_last=cl),
                          lambda t: F.max_pool2d(t, 3, 2, 1), (2, 3, 9, 8)),
    "picks ceil 4/3/2": (lambda a, cl: jaxpool.max_pool2d(a, 4, 3, 2, ceil_mode=True,
                                                            channels_last=cl),
                           lambda t: F.max_pool2d(t, 4, 3, 2, ceil_mode=True), (2, 3, 10, 9)),
    "picks 3d 3/2/1, winners over the three axes at once": (
        lambda a, cl: jaxpool.max_pool3d(a, 3, 2, 1, channels_last=cl),
        lambda t: F.max_pool3d(t, 3, 2, 1), (1, 2, 5, 6, 7)),
    "winners or rows ragged 7 -> 3, 10 -> 4": (
        lambda a, cl: jaxpool.adaptive_max_pool2d(a, (3, 4), channels_last=cl),
        lambda t: F.adaptive_max_pool2d(t, (3, 4)), (2, 3, 7, 10)),
    "rows ragged 10 -> 4": (lambda a, cl: jaxpool.adaptive_max_pool2d(a, (4, 3),
                                                                         channels_last=cl),
                               lambda t: F.adaptive_max_pool2d(t, (4, 3)), (2, 3, 10, 7)),
    "walk or picks 3x3 s1 p1": (lambda a, cl: jaxpool.max_pool2d(a, 3, 1, 1, channels_last=cl),
                         lambda t: F.max_pool2d(t, 3, 1, 1), (2, 3, 6, 7)),
    "doubling": (lambda a, cl: jaxpool.adaptive_max_pool2d(a, (2, 1), channels_last=cl),
                        lambda t: F.adaptive_max_pool2d(t, (2, 1)), (1, 2, 40, 19)),
    "whole axis": (lambda a, cl: jaxpool.adaptive_max_pool2d(a, 1, channels_last=cl),
                   lambda t: F.adaptive_max_pool2d(t, 1), (2, 3, 5, 7)),
}


@pytest.mark.parametrize("name,channels_last", each_once(list(NONFINITE_CASES), [False, True]))
def test_non_finite_derivatives_reach_only_the_picks(name, channels_last, rng):
    """On tied inputs, a NaN or inf in the cotangent reaches only the element its window
    picked (torch's backward), and one in the tangent only the windows that picked it
    (torch.func.jvp): masks exactly, finite values to rounding."""
    fn, torch_fn, shape = NONFINITE_CASES[name]
    x = _inputs(shape, rng)["integers"]
    out_shape = torch_fn(torch.tensor(x)).shape
    cotangent, tangent = rng.standard_normal(out_shape), rng.standard_normal(shape)
    for a, values in ((cotangent, (np.nan, np.inf, -np.inf)), (tangent, (np.nan, np.inf))):
        a.reshape(-1)[rng.choice(a.size, size=len(values), replace=False)] = values
    x_torch = torch.tensor(x, requires_grad=True)
    (grad,) = torch.autograd.grad(torch_fn(x_torch), x_torch, torch.tensor(cotangent))
    _, expected_tangent = torch.func.jvp(torch_fn, (torch.tensor(x),), (torch.tensor(tangent),))
    ndim = len(shape) - 2
    layout = (lambda a: to_channels_last(a, ndim)) if channels_last else (lambda a: a)
    back = (lambda a: to_channels_first(np.asarray(a), ndim)) if channels_last else np.asarray
    f = lambda a: fn(a, channels_last)  # noqa: E731

    @jax.jit  # one compiled program for both modes
    def derivatives(a, c, t):
        return jax.vjp(f, a)[1](c)[0], jax.jvp(f, (a,), (t,))[1]

    got_grad, got_tangent = map(back, derivatives(jnp.asarray(layout(x)),
                                                  jnp.asarray(layout(cotangent)),
                                                  jnp.asarray(layout(tangent))))
    for got, expected in ((got_grad, grad.numpy()), (got_tangent, expected_tangent.numpy())):
        for pick in (np.isnan, np.isposinf, np.isneginf):
            np.testing.assert_array_equal(pick(got), pick(expected))
        finite = np.isfinite(expected)
        np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-13, atol=1e-13)
