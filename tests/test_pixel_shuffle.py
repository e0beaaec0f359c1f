"""pixel_shuffle and pixel_unshuffle against torch: values bit for bit in both layouts and
any number of leading axes, the inverse, errors, derivatives (no scatter or gather)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxpool
from test_derivatives import _stablehlo_ops

CASES = [  # (op, shape, factor)
    ("pixel_shuffle", (2, 18, 3, 4), 3),
    ("pixel_shuffle", (3, 2, 8, 1, 5), 2),
    ("pixel_shuffle", (4, 2, 2), 1),
    ("pixel_unshuffle", (2, 3, 6, 9), 3),
    ("pixel_unshuffle", (5, 2, 1, 4, 8), 4),
]


@pytest.mark.parametrize("op,shape,factor", CASES)
def test_values_are_torchs_bit_for_bit(op, shape, factor, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::3] = -0.0
    expected = getattr(F, op)(torch.from_numpy(x), factor).numpy()
    actual = np.asarray(getattr(jaxpool, op)(x, factor))
    assert actual.tobytes() == expected.tobytes() and actual.shape == expected.shape
    # channels last: the same permutation of [*, H, W, C]
    moved = np.moveaxis(x, -3, -1)
    last = np.asarray(getattr(jaxpool, op)(moved, factor, channels_last=True))
    np.testing.assert_array_equal(last, np.moveaxis(expected, -3, -1))


def test_integer_inputs_are_permuted_too():
    x = np.arange(2 * 8 * 3 * 3, dtype=np.int32).reshape(2, 8, 3, 3)
    np.testing.assert_array_equal(np.asarray(jaxpool.pixel_shuffle(x, 2)),
                                  F.pixel_shuffle(torch.from_numpy(x), 2).numpy())


def test_unshuffle_inverts_shuffle(rng):
    x = rng.standard_normal((2, 3, 12, 6)).astype(np.float32)
    y = jaxpool.pixel_shuffle(jaxpool.pixel_unshuffle(x, 3), 3)
    np.testing.assert_array_equal(np.asarray(y), x)


@pytest.mark.parametrize("call", [
    lambda x: jaxpool.pixel_shuffle(x, 0),
    lambda x: jaxpool.pixel_shuffle(x, 3),
    lambda x: jaxpool.pixel_shuffle(x[0, 0], 2),
    lambda x: jaxpool.pixel_unshuffle(x, 4),
    lambda x: jaxpool.pixel_unshuffle(x, -1),
    lambda x: jaxpool.pixel_shuffle(x, 2.0),
    lambda x: jaxpool.pixel_shuffle(x, 2, channels_last=1),
], ids=["factor 0", "channels not divisible", "rank 2", "extent not divisible",
        "negative", "float factor", "channels_last not a bool"])
def test_bad_arguments_raise_as_torch_does(call):
    x = np.zeros((2, 8, 6, 6), np.float32)
    with pytest.raises((ValueError, TypeError)):
        call(x)


def test_derivatives_are_the_inverse_permutation_without_scatter(rng):
    x = jnp.asarray(rng.standard_normal((2, 8, 3, 3)))
    f = lambda a: jaxpool.pixel_shuffle(a, 2)  # noqa: E731
    cotangent = jnp.asarray(rng.standard_normal((2, 2, 6, 6)))
    (grad,) = jax.vjp(f, x)[1](cotangent)
    np.testing.assert_array_equal(np.asarray(grad), np.asarray(jaxpool.pixel_unshuffle(cotangent, 2)))
    loss = lambda a: jnp.sum(jnp.sin(f(a)) ** 2)  # noqa: E731
    for fn in (jax.grad(loss), jax.grad(lambda a: jnp.sum(jax.grad(loss)(a) ** 2)),
               lambda a: jax.jvp(jax.grad(loss), (a,), (a,))[1]):
        ops = _stablehlo_ops(fn, x)
        assert not {op for op in ops if "scatter" in op or op == "gather"}, ops
