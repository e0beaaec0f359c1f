"""Values and VJPs of every op against torch.nn.functional, on generated inputs."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxpool
from default_share import default_cases, default_share, each_once, option_values
from torch_reference import (ADAPTIVE, AVG, TORCH_ADAPTIVE, to_channels_first,
                             to_channels_last, torch_avg_pool, torch_global)

pytestmark = pytest.mark.usefixtures("x64")

# (input shape, output_size): divisible, ragged with few and many windows, integer and ragged
# upsampling, 1x1, identity, non-square, None entries, unbatched, empty batch, mixed axes.
ADAPTIVE_CASES = {
    2: [((2, 3, 8, 8), 4), ((2, 3, 16, 12), (4, 3)), ((2, 3, 15, 15), 4),
        ((2, 3, 5, 7), (3, 2)), ((1, 2, 50, 50), 9), ((1, 1, 40, 41), (13, 17)),
        ((2, 3, 4, 4), 8), ((2, 3, 3, 5), (6, 10)), ((2, 3, 7, 7), 9), ((1, 2, 2, 3), (5, 4)),
        ((2, 3, 9, 9), 1), ((2, 3, 6, 6), 6), ((2, 3, 6, 10), (4, 3)), ((2, 3, 5, 7), (None, 2)),
        ((2, 3, 5, 7), (3, None)), ((3, 5, 7), (3, 2)), ((0, 3, 5, 7), (3, 2)),
        ((2, 3, 8, 15), (4, 4)), ((1, 2, 1, 1), 3), ((1, 2, 33, 33), (5, 3))],
    1: [((2, 3, 15), 4), ((3, 10), 5), ((2, 3, 7), 9), ((2, 3, 4), 8), ((2, 3, 12), 1),
        ((0, 3, 9), 4), ((2, 3, 9), (9,))],
    3: [((2, 2, 6, 7, 8), (3, 4, 5)), ((2, 4, 5, 6), (2, None, 3)), ((1, 2, 3, 4, 5), (6, 8, 5)),
        ((1, 2, 8, 8, 8), 2)],
}

AVG_CASES = {
    1: [((2, 3, 11), dict(kernel_size=3)), ((2, 3, 11), dict(kernel_size=3, stride=2, padding=1)),
        ((3, 11), dict(kernel_size=4, stride=3, ceil_mode=True)),
        ((2, 3, 12), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                          count_include_pad=False)),
        ((2, 3, 12), dict(kernel_size=2, divisor_override=3)), ((0, 2, 9), dict(kernel_size=2))],
    3: [((2, 2, 6, 7, 8), dict(kernel_size=2)),
        ((2, 2, 6, 7, 8), dict(kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1),
                               ceil_mode=True, count_include_pad=False)),
        ((2, 5, 6, 7), dict(kernel_size=3, stride=2, padding=1, divisor_override=7))],
}


def _avg_grid_2d():
    """Every avg_pool option, crossed, on a ragged and an even map."""
    options = itertools.product([1, 2, 3, (3, 2)], [None, 0, 1, 2, (2, 3)], [0, 1, (1, 0)],
                                [False, True], [True, False], [None, 5])
    for kernel, stride, padding, ceil_mode, count_pad, divisor in options:
        kernel_pair = kernel if isinstance(kernel, tuple) else (kernel, kernel)
        pad_pair = padding if isinstance(padding, tuple) else (padding, padding)
        if any(p > k // 2 for p, k in zip(pad_pair, kernel_pair)):
            continue
        yield dict(kernel_size=kernel, stride=stride, padding=padding, ceil_mode=ceil_mode,
                   count_include_pad=count_pad, divisor_override=divisor)


AVG_GRID_2D = [((2, 3, 9, 10), args) for args in _avg_grid_2d()]
AVG_CASES[2] = [((3, 8, 8), dict(kernel_size=2)), ((0, 3, 8, 8), dict(kernel_size=3, padding=1)),
                ((2, 3, 4, 4), dict(kernel_size=4)),
                ((2, 3, 16, 16), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True))]
# Both layouts of each case; the default run takes a fifty-third of the crossed grid (every
# value of every option, in both layouts: test_the_default_avg_share_holds_every_option_value;
# 53 keeps them all) and each of the others in one layout (the
# layouts in turn); -m slow the whole grid and both layouts of the others.
AVG_SHARE = 53
_AVG_OTHERS = [(d, s, a) for d, cases in AVG_CASES.items() for s, a in cases]
_AVG_GRID = [(2, s, a, cl) for s, a in AVG_GRID_2D for cl in (False, True)]
AVG_PARAMS = each_once(_AVG_OTHERS, [False, True]) + default_share(_AVG_GRID, AVG_SHARE)
AVG_IDS = ([f"{s}-{a}-{'last' if cl else 'first'}" for _, s, a in _AVG_OTHERS
            for cl in (False, True)]
           + [f"{s}-{a}-{'last' if cl else 'first'}" for _, s, a, cl in _AVG_GRID])


def _torch_stride(args):
    # jaxpool reads stride 0 as kernel_size, torch raises on it: give torch the same meaning.
    args = dict(args)
    if args.get("stride") == 0:
        args["stride"] = None
    return args


def _compare(jax_fn, torch_fn, x, rng, channels_last=False, ndim=2, rtol=1e-12, atol=1e-12):
    """Values and the VJP with a random cotangent, jaxpool against torch."""
    x_torch = torch.tensor(to_channels_first(x, ndim) if channels_last else x,
                           requires_grad=True)
    expected = torch_fn(x_torch)
    cotangent = rng.standard_normal(expected.shape)
    (expected_grad,) = torch.autograd.grad(expected, x_torch, torch.tensor(cotangent))
    expected, expected_grad = expected.detach().numpy(), expected_grad.numpy()
    if channels_last:
        expected, cotangent = to_channels_last(expected, ndim), to_channels_last(cotangent, ndim)
        expected_grad = to_channels_last(expected_grad, ndim)
    got, vjp = jax.vjp(jax_fn, jnp.asarray(x))
    (got_grad,) = vjp(jnp.asarray(cotangent))
    assert got.shape == expected.shape and got.dtype == x.dtype
    np.testing.assert_allclose(np.asarray(got), expected, rtol=rtol, atol=atol)
    np.testing.assert_allclose(np.asarray(got_grad), expected_grad, rtol=rtol, atol=atol)


# 2d cases whose kind another 2d case holds (divisible, ragged, upsampling, None): only
# under -m slow.
ADAPTIVE_REPEATS = [((2, 3, 16, 12), (4, 3)), ((1, 2, 50, 50), 9), ((2, 3, 3, 5), (6, 10)),
                    ((1, 2, 2, 3), (5, 4)), ((2, 3, 6, 10), (4, 3)), ((2, 3, 5, 7), (3, None)),
                    ((1, 2, 33, 33), (5, 3))]


def _adaptive_params():
    params = each_once([(d, s, o) for d, cases in ADAPTIVE_CASES.items() for s, o in cases],
                       [False, True])
    return [pytest.param(*p.values, marks=pytest.mark.slow) if p.values[1:3] in ADAPTIVE_REPEATS
            else p for p in params]


# Each case in one layout by default (the layouts in turn), both under -m slow.
@pytest.mark.parametrize("ndim,shape,output_size,channels_last", _adaptive_params())
def test_adaptive_matches_torch(ndim, shape, output_size, channels_last, rng):
    x = rng.standard_normal(shape)
    if channels_last:
        x = to_channels_last(x, ndim)
    _compare(lambda a: ADAPTIVE[ndim](a, output_size, channels_last=channels_last),
             lambda t: TORCH_ADAPTIVE[ndim](t, output_size), x, rng, channels_last, ndim)


def test_the_default_avg_share_holds_every_option_value():
    def by_layout(cases):
        return option_values((cl, args) for _, _, args, cl in cases)

    assert by_layout(default_cases(_AVG_GRID, AVG_SHARE)) == by_layout(_AVG_GRID)


@pytest.mark.parametrize("ndim,shape,args,channels_last", AVG_PARAMS, ids=AVG_IDS)
def test_avg_pool_matches_torch(ndim, shape, args, channels_last, rng):
    x = rng.standard_normal(shape)
    if channels_last:
        x = to_channels_last(x, ndim)
    _compare(lambda a: AVG[ndim](a, **args, channels_last=channels_last),
             lambda t: torch_avg_pool(t, ndim, **_torch_stride(args)), x, rng,
             channels_last, ndim)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("shape", [(2, 3, 7, 7), (1, 4, 1, 9), (0, 3, 5, 5)])
def test_global_matches_torch(shape, channels_last, rng):
    x = rng.standard_normal(shape)
    if channels_last:
        x = to_channels_last(x, 2)
    x_torch = torch.tensor(to_channels_first(x, 2) if channels_last else x, requires_grad=True)
    expected = torch_global(x_torch)
    cotangent = rng.standard_normal(expected.shape)
    (expected_grad,) = torch.autograd.grad(expected, x_torch, torch.tensor(cotangent))
    expected_grad = expected_grad.numpy()
    if channels_last:
        expected_grad = to_channels_last(expected_grad, 2)
    got, vjp = jax.vjp(lambda a: jaxpool.global_avg_pool(a, channels_last=channels_last),
                       jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(got), expected.detach().numpy(), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(np.asarray(vjp(jnp.asarray(cotangent))[0]), expected_grad,
                               rtol=1e-12, atol=1e-12)


HALF_CASES = [
    ("adaptive 15->4", lambda x, cl: jaxpool.adaptive_avg_pool2d(x, 4, channels_last=cl),
     lambda t: torch.nn.functional.adaptive_avg_pool2d(t, 4), (2, 8, 15, 15)),
    ("adaptive 7->9", lambda x, cl: jaxpool.adaptive_avg_pool2d(x, 9, channels_last=cl),
     lambda t: torch.nn.functional.adaptive_avg_pool2d(t, 9), (2, 8, 7, 7)),
    ("adaptive 32->4", lambda x, cl: jaxpool.adaptive_avg_pool2d(x, 4, channels_last=cl),
     lambda t: torch.nn.functional.adaptive_avg_pool2d(t, 4), (2, 8, 32, 32)),
    ("avg k3 s2 p1", lambda x, cl: jaxpool.avg_pool2d(x, 3, 2, 1, channels_last=cl),
     lambda t: torch.nn.functional.avg_pool2d(t, 3, 2, 1), (2, 8, 15, 15)),
    ("global", lambda x, cl: jaxpool.global_avg_pool(x, channels_last=cl),
     lambda t: t.mean(dim=(2, 3)), (2, 8, 15, 15)),
]


HALF_DTYPES = ["float16", "bfloat16", "float32"]
_HALF_GRID = [(*case, channels_last, dtype) for case in HALF_CASES
              for channels_last in (False, True) for dtype in HALF_DTYPES]
# The default run takes every seventh (7 is prime to the 5 cases, 2 layouts and 3 dtypes:
# each still appears, test_the_default_dtype_share_holds_every_case_layout_and_dtype);
# -m slow all of them.
HALF_SHARE = 7


def test_the_default_dtype_share_holds_every_case_layout_and_dtype():
    taken = default_cases(_HALF_GRID, HALF_SHARE)
    for i in (0, 4, 5):
        assert {c[i] for c in taken} == {c[i] for c in _HALF_GRID}


@pytest.mark.parametrize("name,jax_fn,torch_fn,shape,channels_last,dtype",
                         default_share(_HALF_GRID, HALF_SHARE),
                         ids=[f"{c[0]}-{c[4]}-{c[5]}" for c in _HALF_GRID])
def test_dtypes_match_torch(name, jax_fn, torch_fn, shape, dtype, channels_last, rng):
    """float32 and the halves: the input dtype is kept, and the value is the float64 result
    rounded once to that dtype (torch's CPU kernels accumulate halves in float32), so it
    equals torch's up to one rounding of the output."""
    x64 = rng.standard_normal(shape) * 4
    x = np.asarray(jnp.asarray(x64, dtype))               # the numbers both sides see
    x_torch = torch.tensor(x.astype(np.float64)).to(getattr(torch, dtype))
    expected = torch_fn(x_torch).to(torch.float64).numpy()
    reference = torch_fn(torch.tensor(x.astype(np.float64))).numpy()
    x_in = to_channels_last(x, 2) if channels_last else x
    got = jax_fn(jnp.asarray(x_in), channels_last)
    assert got.dtype == jnp.dtype(dtype)
    got = np.asarray(got.astype(jnp.float64))
    if channels_last and got.ndim == 4:
        got = to_channels_first(got, 2)
    eps = float(jnp.finfo(dtype).eps)
    # one rounding of the output: half an ulp of |reference|, plus float32 accumulation.
    tolerance = eps * np.abs(reference) + 1e-6 * np.abs(reference).max()
    assert np.all(np.abs(got - reference) <= tolerance)
    assert np.all(np.abs(got - expected) <= 2 * tolerance + 1e-7)


def test_none_output_size_keeps_the_extent_in_1d(rng):
    """torch's 1d op does not take None; jaxpool's does, and it means the input extent."""
    x = rng.standard_normal((2, 3, 9))
    np.testing.assert_array_equal(np.asarray(jaxpool.adaptive_avg_pool1d(x, (None,))),
                                  np.asarray(jaxpool.adaptive_avg_pool1d(x, 9)))
