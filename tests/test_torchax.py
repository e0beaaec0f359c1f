"""jaxpool.torchax: torch's ops run through torchax with jaxpool's definitions, against
torch eager in float64 (values, indices, JAX derivatives of first and second order), the
jitted gradients free of scatter and gather, the covered ops against those torch reaches,
whole small models, and the import step for torchax 0.0.13 on a newer torch."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

if sys.version_info < (3, 11):  # torchax's releases need 3.11; from 3.11 on it is installed
    pytest.skip("torchax needs Python >= 3.11", allow_module_level=True)

import jaxpool.torchax as jt  # noqa: E402
from parity.convert import x64 as x64_mode  # noqa: E402
from tests import torchax_models  # noqa: E402
from tests.torchax_models import CASES, Call, first, nan_at  # noqa: E402
from default_share import default_share  # noqa: E402

torchax = jt.torchax
aten = torch.ops.aten


@pytest.fixture(scope="module")
def env():
    with x64_mode():
        environment = jt.install(torchax.default_env())
        yield environment
        jt.uninstall(environment)


def assert_close(actual, expected, exact):
    actual, expected = np.asarray(actual), expected.detach().numpy()
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    if exact:
        np.testing.assert_array_equal(actual, expected)
    else:
        np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-14)


def has_forbidden(text):
    return {k: v for k, v in torchax_models.hlo_counts(text).items() if v}


# Every third case by default (a spread over the pooling, resampling, unpooling, padding and
# shuffle lowerings; test_model runs them inside whole models), every case under -m slow.
@pytest.mark.parametrize("name", default_share(list(CASES), 3))
def test_op(env, name):
    fn, shape, exact = CASES[name]
    gen = torch.Generator().manual_seed(len(name))
    x = torch.randn(shape, dtype=torch.float64, generator=gen).requires_grad_()
    expected = fn(x)
    _, jfn = torchax.extract_jax(Call(fn), env)
    xj = jnp.asarray(x.detach().numpy())
    actual = jfn({}, (xj,))
    if isinstance(expected, tuple):  # indices exactly, int64 as torch's
        np.testing.assert_array_equal(np.asarray(actual[1]), expected[1].numpy())
        assert np.asarray(actual[1]).dtype == np.int64
    assert_close(first(actual), first(expected), exact)

    # torch's backward and double backward (the gradient's derivative in the cotangent)
    ct = torch.randn(first(expected).shape, dtype=torch.float64, generator=gen).requires_grad_()
    (grad,) = torch.autograd.grad(first(expected), x, ct, create_graph=True)
    w = torch.randn(shape, dtype=torch.float64, generator=gen)
    (double,) = torch.autograd.grad(grad, ct, w)

    # JAX's, through the torchax call, in one jitted program whose StableHLO is checked
    def derivatives(a, c, v):
        _, vjp = jax.vjp(lambda a: first(jfn({}, (a,))), a)
        return vjp(c)[0], jax.grad(lambda c: jnp.vdot(vjp(c)[0], v))(c)
    ctj, wj = jnp.asarray(ct.detach().numpy()), jnp.asarray(w.numpy())
    lowered = jax.jit(derivatives).lower(xj, ctj, wj)
    assert not has_forbidden(lowered.as_text()), name
    jgrad, jdouble = lowered.compile()(xj, ctj, wj)
    # sums of cotangents where windows overlap: to rounding, as torch's own are
    assert_close(jgrad, grad, False)
    assert_close(jdouble, double, False)


def test_nan_indices(env):
    # torch's pick in a window with a NaN is the NaN (the last one): values and indices
    x = nan_at(torch.randn(1, 2, 8, 8, dtype=torch.float64))
    expected = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    with env:
        actual = [a.to("cpu") for a in F.max_pool2d(x.to("jax"), 3, 2, 1, return_indices=True)]
    np.testing.assert_array_equal(actual[0].numpy(), expected[0].numpy())
    np.testing.assert_array_equal(actual[1].numpy(), expected[1].numpy())


def test_inconsistent_scales(env):
    x = torch.randn(1, 1, 4, 4, dtype=torch.float64)
    with env, pytest.raises(ValueError, match="output_size"):
        aten.upsample_bilinear2d.default(x.to("jax"), [5, 5], False, 3.0, 3.0)


# Each of these models' pooling calls is also another model's (SqueezeNet's GoogLeNet's,
# ResNet's and DenseNet's ResNet-D's, whose 2/2 average pool is DenseNet's with a ceil-mode
# overhang, global max's avgmax's): they run under -m slow.
REPEATS = ("SqueezeNet", "ResNet", "DenseNet", "timm global_pool=max")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in REPEATS else n
                                  for n in torchax_models.MODELS])
def test_model(env, name):
    row = torchax_models.compare(name, env)
    assert row["logits"] < 1e-13 and row["grads"] < 1e-12, row
    assert not any(row[k] for k in torchax_models.FORBIDDEN), row


# --- what install covers ------------------------------------------------------------------

FAMILY = ("pool", "upsample", "pad", "shuffle", "unpool")


def family_calls():
    """The family's torch functions over their argument forms, with and without grad."""
    for requires_grad in (False, True):
        for d, shape in ((1, (2, 3, 9)), (2, (2, 3, 9, 8)), (3, (2, 3, 6, 7, 5))):
            x = torch.randn(shape, dtype=torch.float64).requires_grad_(requires_grad)
            getattr(F, f"avg_pool{d}d")(x, 3, 2, ceil_mode=True)
            getattr(F, f"max_pool{d}d")(x, 3, 2, 1)
            y, i = getattr(F, f"max_pool{d}d")(x, 2, 2, return_indices=True)
            getattr(F, f"max_unpool{d}d")(y, i, 2, 2, output_size=x.shape[2:])
            getattr(F, f"adaptive_avg_pool{d}d")(x, 4)
            getattr(F, f"adaptive_avg_pool{d}d")(x, 1)
            getattr(F, f"adaptive_max_pool{d}d")(x, 4, return_indices=True)
            getattr(F, f"lp_pool{d}d")(x, 2.0, 2)
            for mode in ("nearest", "nearest-exact", "area", ("linear", "bilinear",
                                                              "trilinear")[d - 1]):
                F.interpolate(x, scale_factor=2, mode=mode)
                F.interpolate(x, size=5, mode=mode)
            for mode in ("reflect", "replicate", "circular", "constant"):
                F.pad(x, (1, 1) * d, mode=mode)
        x = torch.randn(1, 4, 6, 6, dtype=torch.float64)
        for mode in ("bilinear", "bicubic"):
            F.interpolate(x, size=4, mode=mode, antialias=True)
        F.interpolate(x, size=5, mode="bicubic")
        F.pixel_shuffle(x, 2)
        F.pixel_unshuffle(x, 2)


def test_ops_cover_what_torch_reaches():
    aten_seen, functions_seen = set(), set()

    class Dispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            aten_seen.add(func)
            return func(*args, **(kwargs or {}))

    class Function(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            functions_seen.add(func)
            return func(*args, **(kwargs or {}))

    with Function(), Dispatch():
        family_calls()
    covered = {op.torch_op for op in jt.OPS}
    family = {op for op in aten_seen if any(word in op.__name__ for word in FAMILY)}
    assert len(family) >= 30 and family <= covered, family - covered
    # every functional overload of a covered ATen op, so a new one does not slip by
    # and each one's packet, which a call of the packet is looked up by
    for op in covered:
        if isinstance(op, torch._ops.OpOverload):
            packet = op.overloadpacket
            assert packet in covered, packet
            for name in packet.overloads():
                if "out" not in name:
                    assert getattr(packet, name) in covered, (packet, name)
    # the torch functions torchax catches before ATen, among those the family calls
    caught = {f for f in functions_seen - {torch.randn}  # the inputs'
              if f in torchax.ops.ops_registry.all_torch_functions}
    assert caught and caught <= covered, caught - covered


def test_uninstall_restores():
    env = torchax.tensor.Environment()
    before = {op.torch_op: env._ops.get(op.torch_op) for op in jt.OPS}
    x = torch.randn(1, 1, 4, 4)
    assert jt.install(env) is env and jt.installed(env)
    with env:
        assert F.adaptive_max_pool2d(x.to("jax"), 2).shape == (1, 1, 2, 2)
    jt.uninstall(env)
    assert not jt.installed(env)
    assert {op.torch_op: env._ops.get(op.torch_op) for op in jt.OPS} == before
    with env, pytest.raises(torchax.tensor.OperatorNotFound):  # torchax has none
        F.adaptive_max_pool2d(x.to("jax"), 2)
    with pytest.raises(TypeError, match="env"):
        jt.install(object())


# --- importing torchax ----------------------------------------------------------------------


def test_import_step_limited_to_versions_that_need_it():
    missing = jt.missing_overloads("0.0.13")
    assert all(name not in getattr(aten, packet).overloads() for packet, name in missing)
    if "dim_Dimname" not in aten.prod.overloads():  # torch >= 2.13
        assert ("prod", "dim_Dimname") in missing
    assert jt.missing_overloads("0.0.14") == [] and jt.missing_overloads("0.1.0") == []
    # the placeholders live only during the import
    for packet, name in missing:
        assert name not in getattr(aten, packet).__dict__
    with jt.placeholders([("prod", "no_such_overload")]):
        assert "removed" in repr(aten.prod.no_such_overload)
    assert not hasattr(aten.prod, "no_such_overload")
