"""max_unpool1d/2d/3d against torch: values bit for bit (every dtype, both layouts, NaN, inf
and -0.0 where torch puts them, the last of overlapping windows winning), output sizes,
indices that cannot be placed, derivatives (the transpose of the values; torch's backward
where no index repeats), no scatter or gather at any order, and transforms that never change
a value."""

from __future__ import annotations

import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from jax.test_util import check_grads

import jaxpool
from parity import to_jax, to_torch

POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
UNPOOL = {1: F.max_unpool1d, 2: F.max_unpool2d, 3: F.max_unpool3d}
OURS = {1: jaxpool.max_unpool1d, 2: jaxpool.max_unpool2d, 3: jaxpool.max_unpool3d}

# (spatial axes, input shape (channels-first), kernel_size, stride, padding, ceil_mode,
# output_size given): tiling (SegNet), gaps (stride > kernel), overlapping windows (the last
# wins), padding, ceil-mode edge windows, output_size beyond the default, 1d, 3d, unbatched.
CASES = [
    (2, (2, 3, 8, 10), 2, None, 0, False, False),
    (2, (2, 3, 9, 11), 3, 2, 1, False, True),
    (2, (1, 2, 7, 8), 3, 1, 1, False, True),
    (2, (2, 2, 9, 7), (3, 2), (2, 3), (1, 0), True, True),
    (2, (1, 2, 10, 9), 2, 3, 0, False, True),
    (1, (2, 4, 11), 3, 2, 1, True, True),
    (1, (3, 12), 4, 2, 2, False, False),
    (3, (1, 2, 5, 6, 7), 2, None, 0, False, True),
    (3, (2, 4, 5, 6), (2, 3, 3), (2, 1, 2), (0, 1, 1), False, True),
]
IDS = [f"{d}d-{s}-k{k}-s{st}-p{p}{'-ceil' if c else ''}" for d, s, k, st, p, c, _ in CASES]


def _case(case, rng, dtype=torch.float64):
    ndim, shape, kernel, stride, padding, ceil_mode, sized = case
    source = torch.from_numpy(rng.standard_normal(shape))
    _, indices = POOL[ndim](source, kernel, stride, padding, ceil_mode=ceil_mode,
                            return_indices=True)
    # Decoder features, not the pooled maxima: any values, with NaN, infinities and a -0.0.
    values = rng.standard_normal(indices.shape)
    flat = values.reshape(-1)
    spots = rng.choice(flat.size, size=min(4, flat.size), replace=False)
    flat[spots] = [np.nan, np.inf, -np.inf, -0.0][:len(spots)]
    values = torch.from_numpy(values).to(dtype)
    output_size = tuple(shape[-ndim:]) if sized else None
    return ndim, values, indices, dict(kernel_size=kernel, stride=stride, padding=padding,
                                       output_size=output_size)


def _bits(a):
    """An array's bytes, so that -0.0 differs from 0.0 and NaNs compare equal."""
    return np.ascontiguousarray(np.asarray(a)).view(np.uint8)


def _torch_unpool(ndim, values, indices, args):
    if values.dim() == ndim + 1:  # torch's unbatched max_unpool is unreliable (see README)
        return UNPOOL[ndim](values[None], indices[None], **args)[0]
    return UNPOOL[ndim](values, indices, **args)


# The default run takes a spread (every strategy, 1d/2d/3d, ceil mode, unbatched); -m slow all.
SPREAD = [pytest.param(case, id=name, marks=() if i in (0, 2, 3, 6, 8) else pytest.mark.slow)
          for i, (case, name) in enumerate(zip(CASES, IDS))]


@pytest.mark.parametrize("case", SPREAD)
def test_values_are_torchs_bit_for_bit(case, rng, x64):
    ndim, values, indices, args = _case(case, rng)
    expected = _torch_unpool(ndim, values, indices, args).numpy()
    got = np.asarray(OURS[ndim](values.numpy(), indices.numpy(), **args))
    assert got.shape == expected.shape
    np.testing.assert_array_equal(_bits(got), _bits(expected))
    # channels-last: the same elements, the same per-plane indices
    moved = np.asarray(OURS[ndim](np.moveaxis(values.numpy(), -ndim - 1, -1),
                                  np.moveaxis(indices.numpy(), -ndim - 1, -1), **args,
                                  channels_last=True))
    np.testing.assert_array_equal(_bits(np.moveaxis(moved, -1, -ndim - 1)), _bits(expected))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_every_dtype_is_copied_bit_for_bit(dtype, rng):
    ndim, values, indices, args = _case(CASES[1], rng, dtype)
    expected = UNPOOL[ndim](values, indices, **args)
    got = OURS[ndim](to_jax(values), jnp.asarray(indices.numpy().astype(np.int32)), **args)
    assert got.dtype == to_jax(expected).dtype
    np.testing.assert_array_equal(_bits(got), _bits(to_jax(expected)))


def test_the_last_of_overlapping_windows_wins_as_in_torch(rng, x64):
    """A plateau makes overlapping windows pick the same element: torch's CPU kernel writes
    in input order, so the last window's value stays there."""
    source = torch.zeros(2, 3, 7, 7)
    source[..., 2:5, 2:5] = 1.0
    _, indices = F.max_pool2d(source, 3, 1, 1, return_indices=True)
    assert indices.unique().numel() < indices.numel()  # repeats
    values = torch.from_numpy(rng.standard_normal(indices.shape))
    expected = F.max_unpool2d(values, indices, 3, 1, 1)
    got = jaxpool.max_unpool2d(values.numpy(), indices.numpy(), 3, 1, 1)
    np.testing.assert_array_equal(np.asarray(got), expected.numpy())


def test_matching_jaxpool_max_pool_and_module(rng):
    x = rng.standard_normal((2, 6, 6, 4)).astype(np.float32)
    pooled, indices = jaxpool.max_pool2d(x, 3, 2, 1, return_indices=True, channels_last=True)
    out = jaxpool.linen.MaxUnpool2d(3, 2, 1).apply({}, pooled, indices, output_size=(6, 6))
    expected = torch.nn.MaxUnpool2d(3, 2, 1)(
        torch.from_numpy(np.moveaxis(np.asarray(pooled), -1, 1)),
        torch.from_numpy(np.moveaxis(np.asarray(indices), -1, 1).astype(np.int64)),
        output_size=(6, 6))
    np.testing.assert_array_equal(np.moveaxis(np.asarray(out), -1, 1), expected.numpy())
    nnx_out = jaxpool.nnx.MaxUnpool2d(3, 2, 1)(pooled, indices, (6, 6))
    np.testing.assert_array_equal(np.asarray(nnx_out), np.asarray(out))


def _misplaced():
    """SegNet's 2x2 indices with one moved into the neighbouring window (torch would write
    it there; jaxpool cannot place it)."""
    source = torch.from_numpy(np.random.default_rng(3).standard_normal((1, 2, 4, 4)))
    values, indices = F.max_pool2d(source, 2, return_indices=True)
    moved = indices.clone()
    moved[0, 1, 0, 0] = 2  # window (0, 0) holds 0, 1, 4, 5
    return values, indices, moved


def test_eager_calls_reject_indices_outside_their_window():
    values, _, moved = _misplaced()
    with pytest.raises(ValueError, match=r"1 of 8 indices name no element of their own "
                                         r"window .*\(0, 1, 0, 0\), is 2"):
        jaxpool.max_unpool2d(values.numpy(), moved.numpy(), 2)
    with pytest.raises(ValueError, match="is 16"):  # outside the plane (torch raises too)
        jaxpool.max_unpool2d(values.numpy(), np.full((1, 2, 2, 2), 16), 2)


def test_under_jit_an_index_outside_its_window_is_dropped():
    values, indices, moved = _misplaced()
    got = jax.jit(lambda v, i: jaxpool.max_unpool2d(v, i, 2))(values.numpy(), moved.numpy())
    dropped = values.clone()
    dropped[0, 1, 0, 0] = 0.0
    expected = F.max_unpool2d(dropped, indices, 2)
    np.testing.assert_array_equal(np.asarray(got), expected.numpy().astype(np.float32))


def test_under_jit_an_index_between_windows_is_dropped(x64):
    """Stride 3, kernel 2: element 2 of each row lies in no window, though within the span
    that the window's value is repeated over (the one-pass placement keeps real taps only)."""
    source = torch.from_numpy(np.random.default_rng(4).standard_normal((1, 2, 6, 6)))
    values, indices = F.max_pool2d(source, 2, 3, return_indices=True)
    moved = indices.clone()
    moved[0, 0, 0, 0] = 2
    got = jax.jit(lambda v, i: jaxpool.max_unpool2d(v, i, 2, 3, output_size=(6, 6)))(
        values.numpy(), moved.numpy())
    dropped = values.clone()
    dropped[0, 0, 0, 0] = 0.0
    expected = F.max_unpool2d(dropped, indices, 2, 3, output_size=(6, 6))
    np.testing.assert_array_equal(np.asarray(got), expected.numpy())


def test_output_size_forms_and_limits():
    x = torch.ones(1, 1, 2, 4)
    for size in [None, (4, 8), (5, 9), (3, 7), (1, 1, 5, 9), torch.Size([1, 1, 4, 8])]:
        expected = F.max_unpool2d(x, torch.zeros(1, 1, 2, 4, dtype=torch.long), 2,
                                  output_size=size).shape
        assert jaxpool.shapes.max_unpool2d(x.shape, 2, output_size=size) == tuple(expected)
    for bad in [(2, 8), (6, 8), (1, 4, 8), (4,)]:
        with pytest.raises(ValueError, match="output_size"):
            jaxpool.shapes.max_unpool2d(x.shape, 2, output_size=bad)
        with pytest.raises((ValueError, RuntimeError)):
            F.max_unpool2d(x, torch.zeros(1, 1, 2, 4, dtype=torch.long), 2, output_size=bad)


@pytest.mark.parametrize("call,error,words", [
    (lambda: jaxpool.max_unpool2d(np.ones((1, 1, 2, 2)), np.zeros((1, 1, 2, 3), int), 2),
     ValueError, ["indices", "(1, 1, 2, 3)"]),
    (lambda: jaxpool.max_unpool2d(np.ones((1, 1, 2, 2)), np.zeros((1, 1, 2, 2)), 2),
     TypeError, ["indices", "float64"]),
    (lambda: jaxpool.max_unpool2d(np.ones((1, 1, 2, 2), int), np.zeros((1, 1, 2, 2), int), 2),
     TypeError, ["int64"]),
    (lambda: jaxpool.max_unpool2d(np.ones((1, 2, 2)), np.zeros((1, 2, 2), int), 0),
     ValueError, ["kernel_size"]),
    (lambda: jaxpool.max_unpool2d(np.ones((1, 2, 2)), np.zeros((1, 2, 2), int), 2, padding=-1),
     ValueError, ["padding"]),
    (lambda: jaxpool.max_unpool1d(np.ones((1, 1, 2)), np.zeros((1, 1, 2), int), 1, padding=1),
     ValueError, ["output extents (0,)"]),
    (lambda: jaxpool.max_unpool3d(np.ones((1, 2, 2)), np.zeros((1, 2, 2), int), 2),
     ValueError, ["rank 4", "rank 5"]),
    (lambda: jaxpool.max_unpool2d(np.ones((1, 1, 2, 2)), np.zeros((1, 1, 2, 2), int), 2,
                                  output_size=5), TypeError, ["output_size", "5"]),
])
def test_bad_arguments(call, error, words):
    with pytest.raises(error) as raised:
        call()
    for word in words:
        assert word in str(raised.value)


# --- derivatives -------------------------------------------------------------------------

# one per placement strategy (and 1d/3d), unique indices (distinct inputs)
DERIVATIVE_CASES = {
    "interleave 2d": ((2, 2, 6, 6), 2, None, 0),
    "pads 2d (overlapping)": ((1, 2, 7, 6), 3, 2, 1),
    "interleave 1d gaps": ((2, 3, 9), 2, 3, 0),
    "pads 3d": ((1, 1, 3, 5, 4), (1, 3, 2), (1, 2, 2), (0, 1, 0)),
}


# one case per placement strategy by default; 1d and 3d too under -m slow
DERIVATIVE_SPREAD = [pytest.param(name, marks=() if "2d" in name else pytest.mark.slow)
                     for name in DERIVATIVE_CASES]


def _derivative_case(name, rng):
    shape, kernel, stride, padding = DERIVATIVE_CASES[name]
    ndim = len(shape) - 2
    source = torch.from_numpy(rng.permutation(int(np.prod(shape))).reshape(shape) * 1.0)
    pooled, indices = POOL[ndim](source, kernel, stride, padding, return_indices=True)
    args = dict(kernel_size=kernel, stride=stride, padding=padding,
                output_size=shape[-ndim:])
    x = jnp.asarray(rng.standard_normal(pooled.shape))
    return ndim, x, jnp.asarray(indices.numpy()), indices, args


def _stablehlo_ops(fn, x):
    text = jax.jit(fn).lower(x).as_text()
    return set(re.findall(r"\b(?:stablehlo|chlo|mhlo)\.([a-z_]+)", text))


def _functional(unpool, w):
    """A nonlinear scalar of the output: unpooling is linear, its own higher derivatives
    are zero and would prove nothing."""
    return lambda a: jnp.sum(w * jnp.tanh(unpool(a)) ** 2)


def _last_windows(indices: np.ndarray) -> np.ndarray:
    """Where each window's value stays: no later window (row-major) names its element."""
    planes = indices.reshape(int(np.prod(indices.shape[:2])), -1)
    last = np.zeros(planes.shape, bool)
    for plane, row in enumerate(planes):
        last[plane, list({int(j): q for q, j in enumerate(row)}.values())] = True
    return last.reshape(indices.shape)


@pytest.mark.parametrize("name", DERIVATIVE_SPREAD)
def test_no_scatter_or_gather_at_any_order(name, rng, x64):
    ndim, x, indices, _, args = _derivative_case(name, rng)
    unpool = lambda a: OURS[ndim](a, indices, **args)
    w = jnp.asarray(rng.standard_normal(jax.eval_shape(unpool, x).shape))
    f = _functional(unpool, w)
    v = jnp.ones_like(x)

    def per_example(a):
        one = lambda b, j, wj: jnp.sum(wj * jnp.tanh(OURS[ndim](b[None], j[None], **args)) ** 2)
        return jax.vmap(jax.grad(one))(a, indices, w)

    programs = {
        "forward": unpool,
        "vjp": lambda a: jax.vjp(unpool, a)[1](unpool(a))[0],
        "jvp": lambda a: jax.jvp(unpool, (a,), (v,))[1],
        "grad2": jax.grad(lambda a: jnp.sum(jax.grad(f)(a) ** 2)),
        "grad3": jax.grad(lambda a: jnp.sum(jax.grad(lambda b: jnp.sum(jax.grad(f)(b) ** 2))(a) ** 2)),
        "hvp": lambda a: jax.jvp(jax.grad(f), (a,), (v,))[1],
        "jacfwd": jax.jacfwd(unpool),
        "per-example grad": per_example,
    }
    for program, fn in programs.items():
        banned = {op for op in _stablehlo_ops(fn, x) if "scatter" in op or op == "gather"}
        assert not banned, f"{name}: {program} lowers to {banned}"


@pytest.mark.parametrize("name", DERIVATIVE_SPREAD)
def test_derivatives_are_the_transpose_of_the_values(name, rng, x64):
    """Reverse mode: torch's backward where the value stays, zero where a later window
    overwrote it (torch gives it the cotangent too); forward mode: the op itself."""
    ndim, x, indices, indices_t, args = _derivative_case(name, rng)
    unpool = lambda a: OURS[ndim](a, indices, **args)
    cotangent = rng.standard_normal(jax.eval_shape(unpool, x).shape)
    xt = torch.from_numpy(np.asarray(x)).requires_grad_()
    (theirs,) = torch.autograd.grad(
        (UNPOOL[ndim](xt, indices_t, **args) * torch.from_numpy(cotangent)).sum(), xt)
    (ours,) = jax.jit(lambda a, u: jax.vjp(unpool, a)[1](u))(x, jnp.asarray(cotangent))
    last = _last_windows(indices_t.numpy())
    np.testing.assert_array_equal(np.asarray(ours), np.where(last, theirs.numpy(), 0.0))
    tangent = jnp.asarray(rng.standard_normal(x.shape))
    jvp = jax.jit(lambda a, t: jax.jvp(unpool, (a,), (t,)))
    np.testing.assert_array_equal(_bits(jvp(x, tangent)[1]), _bits(jvp(tangent, x)[0]))
    np.testing.assert_allclose(float(jnp.vdot(jvp(tangent, x)[0], jnp.asarray(cotangent))),
                               float(jnp.vdot(tangent, ours)), rtol=1e-12)


@pytest.mark.parametrize("name", ["interleave 2d"])
def test_second_and_third_derivatives_match_torch(name, rng, x64):
    """No index repeats here, so torch's double and triple backward are the reference."""
    ndim, x, indices, indices_t, args = _derivative_case(name, rng)
    unpool = lambda a: OURS[ndim](a, indices, **args)
    w = rng.standard_normal(jax.eval_shape(unpool, x).shape)
    v = rng.standard_normal(x.shape)
    f = _functional(unpool, jnp.asarray(w))
    g2 = lambda a: jax.grad(lambda b: jnp.vdot(jax.grad(f)(b), jnp.asarray(v)))(a)
    g3 = lambda a: jax.grad(lambda b: jnp.vdot(g2(b), jnp.asarray(v)))(a)
    hvp = jax.jit(lambda a: jax.jvp(jax.grad(f), (a,), (jnp.asarray(v),))[1])(x)
    xt = torch.from_numpy(np.asarray(x)).requires_grad_()
    ft = lambda a: (torch.from_numpy(w) * torch.tanh(UNPOOL[ndim](a, indices_t, **args)) ** 2).sum()
    vt = torch.from_numpy(v)
    (g,) = torch.autograd.grad(ft(xt), xt, create_graph=True)
    (h,) = torch.autograd.grad((g * vt).sum(), xt, create_graph=True)
    (t3,) = torch.autograd.grad((h * vt).sum(), xt)
    np.testing.assert_allclose(np.asarray(hvp), h.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(jax.jit(g2)(x)), h.detach().numpy(), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(np.asarray(jax.jit(g3)(x)), t3.numpy(), rtol=1e-11, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DERIVATIVE_CASES))
def test_check_grads_to_order_3(name, rng, x64):
    ndim, x, indices, _, args = _derivative_case(name, rng)
    unpool = lambda a: OURS[ndim](a, indices, **args)
    f = _functional(unpool, jnp.asarray(rng.standard_normal(jax.eval_shape(unpool, x).shape)))
    check_grads(jax.jit(f), (x,), order=3, modes=("fwd", "rev"), atol=1e-4, rtol=1e-4)


def test_repeated_indices_differentiate_as_the_transpose_of_the_values(rng, x64):
    """A plateau: many windows name one element; only the last keeps its value, and only it
    gets the gradient."""
    source = torch.zeros(1, 2, 6, 6)
    source[..., 1:4, 1:4] = 1.0
    _, indices = F.max_pool2d(source, 3, 1, 1, return_indices=True)
    x = rng.standard_normal(indices.shape)
    cotangent = rng.standard_normal((1, 2, 6, 6))
    xt = torch.from_numpy(x).requires_grad_()
    (theirs,) = torch.autograd.grad(
        (F.max_unpool2d(xt, indices, 3, 1, 1) * torch.from_numpy(cotangent)).sum(), xt)
    (ours,) = jax.vjp(lambda a: jaxpool.max_unpool2d(a, indices.numpy(), 3, 1, 1),
                      jnp.asarray(x))[1](jnp.asarray(cotangent))  # eager: checked, placed
    last = _last_windows(indices.numpy())
    assert not last.all()
    np.testing.assert_array_equal(np.asarray(ours), np.where(last, theirs.numpy(), 0.0))


def test_a_transform_never_changes_a_value(rng):
    """The same bits, -0.0, NaN and inf included, plain and under jit, jvp, vjp, grad,
    linearize and vmap."""
    ndim, values, indices, args = _case(CASES[5], rng, torch.float32)  # overlapping: pads
    x, i = jnp.asarray(values.numpy()), jnp.asarray(indices.numpy().astype(np.int32))
    unpool = lambda a: OURS[ndim](a, i, **args)
    plain = _bits(unpool(x))
    outs = {
        "jit": jax.jit(unpool)(x),
        "jvp": jax.jvp(unpool, (x,), (jnp.ones_like(x),))[0],
        "vjp": jax.vjp(unpool, x)[0],
        "linearize": jax.linearize(unpool, x)[0],
        "vmap": jax.vmap(lambda a, j: OURS[ndim](a[None], j[None], **args)[0])(x, i),
        "vmap indices": jax.vmap(lambda a, j: OURS[ndim](a, j, **args), in_axes=(0, 0))(
            x[:, None], i[:, None])[:, 0],
    }
    for name, out in outs.items():
        np.testing.assert_array_equal(_bits(out), plain, err_msg=name)
    grad = lambda a: jax.grad(lambda b: jnp.sum(unpool(b) * jnp.arange(1.0, 1.0 + unpool(b).size).reshape(unpool(b).shape)))(a)
    finite = jnp.where(jnp.isfinite(x), x, 1.0)
    np.testing.assert_array_equal(_bits(jax.jit(grad)(finite)), _bits(grad(finite)))


@pytest.mark.slow
@pytest.mark.parametrize("ndim", [1, 2])
def test_small_extents_exhaustively(ndim, x64):
    """Every extent 1-5, kernel 1-3, stride 1-3, padding 0-kernel//2, both ceil modes."""
    rng = np.random.default_rng(0)
    for n, k, s, ceil in itertools.product(range(1, 6), range(1, 4), range(1, 4), (False, True)):
        for p in range(k // 2 + 1):
            shape = (1, 2) + (n,) * ndim
            try:
                _, indices = POOL[ndim](torch.from_numpy(rng.standard_normal(shape)), k, s, p,
                                        ceil_mode=ceil, return_indices=True)
            except RuntimeError:
                continue
            values = torch.from_numpy(rng.standard_normal(indices.shape))
            args = dict(kernel_size=k, stride=s, padding=p, output_size=shape[-ndim:])
            try:
                expected = UNPOOL[ndim](values, indices, **args).numpy()
            except (RuntimeError, ValueError):
                with pytest.raises(ValueError):
                    OURS[ndim](values.numpy(), indices.numpy(), **args)
                continue
            got = np.asarray(OURS[ndim](values.numpy(), indices.numpy(), **args))
            np.testing.assert_array_equal(got, expected, err_msg=str((n, k, s, p, ceil)))


@pytest.mark.parametrize("api", ["linen", "nnx"])
@pytest.mark.parametrize("d", [1, 2, 3])
def test_module_fields_are_torch_nn_arguments_then_channels_last(api, d):
    import inspect

    cls = getattr(getattr(jaxpool, api), f"MaxUnpool{d}d")
    theirs = [(p.name, p.default) for p in
              inspect.signature(getattr(torch.nn, f"MaxUnpool{d}d")).parameters.values()]
    ours = [(p.name, p.default) for p in
            list(inspect.signature(cls.__init__).parameters.values())[1:]]
    assert ours[:len(theirs) + 1] == theirs + [("channels_last", True)]
    assert ">>>" in cls.__doc__


def test_non_finite_cotangents_go_where_torchs_do(rng, x64):
    """Reverse mode reads the cotangent at each value's index (the last window's, where
    windows repeat one; here none do), as torch's backward does."""
    ndim, x, indices, indices_t, args = _derivative_case("interleave 2d", rng)
    out_shape = (2, 2, 6, 6)
    cotangent = rng.standard_normal(out_shape)
    flat = cotangent.reshape(-1)
    flat[rng.choice(flat.size, 6, replace=False)] = [np.nan, np.inf, -np.inf] * 2
    xt = torch.from_numpy(np.asarray(x)).requires_grad_()
    (theirs,) = torch.autograd.grad(UNPOOL[ndim](xt, indices_t, **args), xt,
                                    torch.from_numpy(cotangent))
    (ours,) = jax.jit(lambda a, u: jax.vjp(lambda b: OURS[ndim](b, indices, **args), a)[1](u))(
        x, cotangent)
    np.testing.assert_array_equal(_bits(ours), _bits(theirs.numpy()))
