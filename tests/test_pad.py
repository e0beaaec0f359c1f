"""jaxpool.pad against torch.nn.functional.pad: which calls each mode accepts (every small
extent and pad, plain Python), values bit for bit (ranks 1-5, negative pads, channels_last,
dtypes, NaN/inf/-0.0), derivatives (torch's backward, double and triple backward), no scatter
or gather at any order, and transforms that never change a value."""

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
from jaxpool.padding.plan import plan_pad
from parity import to_jax

MODES = ("constant", "reflect", "replicate", "circular")


def _bits(a):
    """An array's bytes, so that -0.0 differs from 0.0 and NaNs compare equal."""
    return np.ascontiguousarray(np.asarray(a)).view(np.uint8)


def _torch_shape(shape, pad, mode):
    try:
        return tuple(F.pad(torch.zeros(shape), pad, mode).shape)
    except (RuntimeError, NotImplementedError, ValueError):
        return None


def _plan_shape(shape, pad, mode):
    try:
        return plan_pad(shape, pad, mode).output_shape
    except ValueError:
        return "raised"


# torch returns an empty tensor, uninitialised memory, or raises, depending on the memory
# overlap of its copies: jaxpool raises (README: differences)
def _circular_wraps_past_the_cropped_axis(shape, pad):
    for i in range(len(pad) // 2):
        n, lo, hi = shape[-1 - i], pad[2 * i], pad[2 * i + 1]
        cropped = n + min(lo, 0) + min(hi, 0)
        if max(lo, 0) > cropped or max(hi, 0) > cropped:
            return True
    return False


@pytest.mark.parametrize("mode", MODES)
def test_every_small_extent_and_pad_is_accepted_or_rejected_as_torch(mode):
    """Extents 0-5 (one and two padded axes, batched and not), pads -6..6: the same calls
    raise, the others have torch's shape. Plain Python: no computation."""
    checked = 0
    for shape in [(2, n) for n in range(6)] + [(1, 2, n) for n in (1, 3, 5)] + [(0, 2, 3)]:
        for pad in itertools.product(range(-6, 7), repeat=2):
            theirs, ours = _torch_shape(shape, pad, mode), _plan_shape(shape, pad, mode)
            if mode == "circular" and theirs is not None and \
                    _circular_wraps_past_the_cropped_axis(shape, pad):
                assert ours == "raised", (shape, pad)
                continue
            assert ours == (theirs if theirs is not None else "raised"), (shape, pad, mode)
            checked += 1
    for shape in [(1, 1, 1), (1, 2, 3), (2, 1, 3, 2)]:
        for pad in itertools.product(range(-3, 4), repeat=4):
            theirs, ours = _torch_shape(shape, pad, mode), _plan_shape(shape, pad, mode)
            if mode == "circular" and theirs is not None and \
                    _circular_wraps_past_the_cropped_axis(shape, pad):
                continue
            assert ours == (theirs if theirs is not None else "raised"), (shape, pad, mode)
            checked += 1
    assert checked > 1500


@pytest.mark.parametrize("pad,mode,shape", [
    ((1,), "constant", (2, 3)), ((1, 1, 1), "constant", (2, 3)),
    ((1, 1) * 3, "constant", (2, 3)), ((1, 1), "reflect", (3,)), ((1, 1), "reflect", (1, 2, 1, 3)),
    ((1, 1) * 2, "replicate", (3, 3)), ((1, 1) * 4, "circular", (1, 1, 1, 1, 1)),
    ((1, 1), "symmetric", (1, 2, 3)),
])
def test_torch_rejects_what_jaxpool_rejects(pad, mode, shape):
    with pytest.raises(ValueError, match="pad"):
        jaxpool.pad(np.zeros(shape), pad, mode)
    with pytest.raises((RuntimeError, NotImplementedError, ValueError)):
        F.pad(torch.zeros(shape), pad, mode)


def test_value_rules():
    x = np.ones((1, 2, 3), np.float32)
    with pytest.raises(ValueError, match="takes no value"):
        jaxpool.pad(x, (1, 1), "reflect", 2.0)
    assert jaxpool.pad(x, (1, 1), "reflect", 0.0).shape == (1, 2, 5)  # torch accepts 0
    with pytest.raises(TypeError, match="value"):
        jaxpool.pad(x, (1, 1), "constant", "a")
    with pytest.raises(TypeError, match="pad"):
        jaxpool.pad(x, (1.5, 1))
    with pytest.raises(TypeError, match="pad"):
        jaxpool.pad(x, 1)


# (shape, pad, mode, value, channels_last): every mode on 3-5 dimensional inputs, negative
# pads (crops; replicate's reaching into the copies), a NaN value, channels-last
VALUE_CASES = [
    ((2, 3, 5), (2, -1), "constant", 1.5, False),
    ((2, 3, 4, 5), (1, 2, -1, 0, 1, 1), "constant", float("nan"), False),
    ((2, 3, 4, 5), (3, 3, 3, 3), "reflect", None, False),
    ((2, 4, 5), (-1, 3), "reflect", None, False),
    ((1, 2, 3, 4, 5), (1, 2, 0, 1, 2, 1), "reflect", None, False),
    ((2, 3, 4, 5), (-4, 5, 1, 0), "replicate", None, False),
    ((3, 4, 5), (2, 2, 1, 3), "replicate", None, False),
    ((2, 3, 4, 5), (-1, 1, -2, 1), "circular", None, False),
    ((1, 2, 3, 4, 5), (2, 1, 3, 0, 1, 1), "circular", None, False),
    ((2, 3, 4, 5), (3, 3, 3, 3), "reflect", None, True),
    ((2, 3, 4, 5), (1, 2, -1, 1), "circular", None, True),
    ((2, 3, 4, 5), (1, 0, 2, -1), "constant", -2.0, True),
]


def _torch_pad(x, pad, mode, value, channels_last):
    xt = torch.from_numpy(x)
    if channels_last:
        xt = xt.movedim(-1, 1 if x.ndim > 2 else 0)
    out = F.pad(xt, pad, mode, value) if mode == "constant" else F.pad(xt, pad, mode)
    return (out.movedim(1 if x.ndim > 2 else 0, -1) if channels_last else out).numpy()


def _signed(shape, rng):
    x = rng.standard_normal(shape)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, 4, replace=False)] = [np.nan, np.inf, -np.inf, -0.0]
    return x


@pytest.mark.parametrize("shape,pad,mode,value,channels_last", VALUE_CASES,
                         ids=[f"{c[2]}-{c[0]}-{c[1]}{'-cl' if c[4] else ''}" for c in VALUE_CASES])
def test_values_are_torchs_bit_for_bit(shape, pad, mode, value, channels_last, rng, x64):
    x = _signed(shape, rng)
    if channels_last:  # the same spatial pairs on the channels-last array
        x = np.moveaxis(x, 1, -1).copy()
    expected = _torch_pad(x, pad, mode, value, channels_last)
    got = jaxpool.pad(x, pad, mode, value, channels_last=channels_last)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(_bits(got), _bits(expected))


UNBATCHED = {"1d": ((3, 5), (2, 1)), "2d": ((3, 4, 5), (2, 0, 1, 1)),
             "3d": ((2, 3, 4, 5), (1, 1, 2, 0, 1, 2))}


# Each mode once by default, with the ranks in turn; every pair under -m slow.
@pytest.mark.parametrize("shape,pad,mode", [
    pytest.param(*UNBATCHED[rank], mode, id=f"{rank}-{mode}",
                 marks=() if j == i % len(UNBATCHED) else pytest.mark.slow)
    for i, mode in enumerate(MODES) for j, rank in enumerate(UNBATCHED)])
def test_unbatched_channels_last_pads_the_axes_before_the_channels(shape, pad, mode, rng,
                                                                  x64):
    """[*spatial, C] takes the pairs torch gives [C, *spatial] (every mode)."""
    x = _signed(shape, rng)
    expected = np.moveaxis(F.pad(torch.from_numpy(x), pad, mode).numpy(), 0, -1)
    got = jaxpool.pad(np.moveaxis(x, 0, -1).copy(), pad, mode, channels_last=True)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(_bits(got), _bits(expected))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int32, torch.bool],
                         ids=str)
def test_dtypes_are_copied_bit_for_bit(dtype, rng):
    x = torch.from_numpy(rng.standard_normal((2, 3, 4)) * 3).to(dtype)
    for mode, value in [("constant", 2.7), ("reflect", None), ("replicate", None),
                        ("circular", None)]:
        args = (value,) if value is not None else ()
        try:
            expected = F.pad(x, (2, 1), mode, *args)
        except NotImplementedError:  # torch has no bool reflect/replicate; jaxpool copies
            continue
        got = jaxpool.pad(to_jax(x), (2, 1), mode, value)
        assert got.dtype == to_jax(expected).dtype
        np.testing.assert_array_equal(_bits(got), _bits(to_jax(expected)), err_msg=mode)


def test_modules_pad_the_spatial_axes_as_torch_nn(rng):
    x = rng.standard_normal((2, 5, 6, 3)).astype(np.float32)  # channels-last
    xt = torch.from_numpy(np.moveaxis(x, -1, 1).copy())
    for name, args in [("ReflectionPad2d", (3,)), ("ReplicationPad2d", ((1, 2, 0, 3),)),
                       ("CircularPad2d", ((2, -1, 1, 1),)), ("ZeroPad2d", ((1, 0, 2, -1),)),
                       ("ConstantPad2d", (1, -0.5))]:
        expected = np.moveaxis(getattr(torch.nn, name)(*args)(xt).numpy(), 1, -1)
        for api in (jaxpool.linen, jaxpool.nnx):
            module = getattr(api, name)(*args)
            out = module.apply({}, x) if api is jaxpool.linen else module(x)
            np.testing.assert_array_equal(_bits(out), _bits(expected), err_msg=name)


# --- derivatives ---------------------------------------------------------------------------

DERIVATIVE_CASES = {
    "constant": ((1, 2, 4, 5), (2, -1, 1, 2), "constant"),
    "reflect": ((1, 2, 4, 5), (3, 2, 1, 3), "reflect"),
    "replicate": ((1, 2, 4, 5), (-2, 3, 2, 1), "replicate"),
    "circular": ((1, 2, 4, 5), (2, -1, 3, 1), "circular"),
}


def _stablehlo_ops(fn, x):
    text = jax.jit(fn).lower(x).as_text()
    return set(re.findall(r"\b(?:stablehlo|chlo|mhlo)\.([a-z_]+)", text))


@pytest.mark.parametrize("name", list(DERIVATIVE_CASES))
def test_derivatives_match_torch_without_scatter_or_gather(name, rng, x64):
    shape, pad, mode = DERIVATIVE_CASES[name]
    x = jnp.asarray(rng.standard_normal(shape))
    padded = lambda a: jaxpool.pad(a, pad, mode)
    w = rng.standard_normal(jax.eval_shape(padded, x).shape)
    v = rng.standard_normal(shape)
    f = lambda a: jnp.sum(jnp.asarray(w) * jnp.tanh(padded(a)) ** 2)
    g1 = jax.grad(f)
    g2 = lambda a: jax.grad(lambda b: jnp.vdot(g1(b), jnp.asarray(v)))(a)
    g3 = lambda a: jax.grad(lambda b: jnp.vdot(g2(b), jnp.asarray(v)))(a)
    programs = {
        "forward": padded, "grad": g1, "grad2": g2, "grad3": g3,
        "jvp": lambda a: jax.jvp(padded, (a,), (jnp.ones_like(a),))[1],
        "hvp": lambda a: jax.jvp(g1, (a,), (jnp.asarray(v),))[1],
        "jacfwd": jax.jacfwd(padded),
    }
    for program, fn in programs.items():
        banned = {op for op in _stablehlo_ops(fn, x) if "scatter" in op or op == "gather"}
        assert not banned, f"{name}: {program} lowers to {banned}"
    xt = torch.from_numpy(np.asarray(x)).requires_grad_()
    ft = lambda a: (torch.from_numpy(w) * torch.tanh(F.pad(a, pad, mode)) ** 2).sum()
    vt = torch.from_numpy(v)
    (t1,) = torch.autograd.grad(ft(xt), xt, create_graph=True)
    (t2,) = torch.autograd.grad((t1 * vt).sum(), xt, create_graph=True)
    (t3,) = torch.autograd.grad((t2 * vt).sum(), xt)
    for ours, theirs in [(g1, t1), (g2, t2), (g3, t3)]:
        np.testing.assert_allclose(np.asarray(jax.jit(ours)(x)), theirs.detach().numpy(),
                                   rtol=1e-11, atol=1e-12)
    hvp = jax.jit(programs["hvp"])(x)
    np.testing.assert_allclose(np.asarray(hvp), t2.detach().numpy(), rtol=1e-11, atol=1e-12)


def test_a_transform_never_changes_a_value(rng):
    x = jnp.asarray(_signed((2, 3, 4, 5), rng).astype(np.float32))
    padded = lambda a: jaxpool.pad(a, (3, 2, -1, 3), "reflect")
    plain = _bits(padded(x))
    outs = {
        "jit": jax.jit(padded)(x),
        "jvp": jax.jvp(padded, (x,), (jnp.ones_like(x),))[0],
        "vjp": jax.vjp(padded, x)[0],
        "linearize": jax.linearize(padded, x)[0],
        "vmap": jax.vmap(padded)(x),
    }
    for name, out in outs.items():
        np.testing.assert_array_equal(_bits(out), plain, err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DERIVATIVE_CASES))
def test_check_grads_to_order_3(name, rng, x64):
    shape, pad, mode = DERIVATIVE_CASES[name]
    x = jnp.asarray(rng.standard_normal(shape))
    w = jnp.asarray(rng.standard_normal(jaxpool.shapes.pad(shape, pad, mode)))
    f = lambda a: jnp.sum(w * jnp.tanh(jaxpool.pad(a, pad, mode)) ** 2)
    check_grads(jax.jit(f), (x,), order=3, modes=("fwd", "rev"), atol=1e-4, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_every_small_extent_and_pad_gives_torchs_values(mode, x64):
    rng = np.random.default_rng(0)
    for n in range(1, 6):
        x = rng.standard_normal((1, 2, n))
        for pad in itertools.product(range(-5, 6), repeat=2):
            if _torch_shape(x.shape, pad, mode) is None or (
                    mode == "circular" and _circular_wraps_past_the_cropped_axis(x.shape, pad)):
                continue
            expected = F.pad(torch.from_numpy(x), pad, mode).numpy()
            np.testing.assert_array_equal(np.asarray(jaxpool.pad(x, pad, mode)), expected,
                                          err_msg=str((n, pad)))


def test_shape_rule_is_the_ops():
    for shape, pad, mode, cl in [((8, 64, 128, 128), (3, 3, 3, 3), "reflect", False),
                                 ((2, 9, 9, 4), (1, -2, 0, 3), "constant", True),
                                 ((3, 5), (2, 2), "circular", False)]:
        assert jaxpool.shapes.pad(shape, pad, mode, channels_last=cl) == jax.eval_shape(
            lambda a: jaxpool.pad(a, pad, mode, channels_last=cl),
            jax.ShapeDtypeStruct(shape, jnp.float32)).shape
    with pytest.raises(ValueError, match="reflect"):
        jaxpool.shapes.pad((1, 2, 3), (3, 0), "reflect")


@pytest.mark.parametrize("mode", MODES)
def test_non_finite_cotangents_and_tangents_go_where_torchs_do(mode, rng, x64):
    x = rng.standard_normal((1, 2, 4, 5))
    pad = (3, 2, -1, 3) if mode != "circular" else (2, -1, 3, 1)
    cotangent = rng.standard_normal(jaxpool.shapes.pad(x.shape, pad, mode))
    flat = cotangent.reshape(-1)
    flat[rng.choice(flat.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    xt = torch.from_numpy(x).requires_grad_()
    (theirs,) = torch.autograd.grad(F.pad(xt, pad, mode), xt, torch.from_numpy(cotangent))
    (ours,) = jax.jit(lambda a, u: jax.vjp(lambda b: jaxpool.pad(b, pad, mode), a)[1](u))(
        x, cotangent)
    for pick in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(pick(np.asarray(ours)), pick(theirs.numpy()))
    tangent = x.copy()
    tangent[0, 1, 2, 3] = np.nan
    _, t_out = jax.jvp(lambda b: jaxpool.pad(b, pad, mode), (x,), (tangent,))
    np.testing.assert_array_equal(np.isnan(np.asarray(t_out)),
                                  np.isnan(F.pad(torch.from_numpy(tangent), pad, mode).numpy()))
