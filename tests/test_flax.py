"""Flax modules: same values as the functions, parameter-free, usable in Sequential, jit and
tabulate; and the catalog's example networks with their shapes and parameter counts."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jaxpool

MODULES = [
    ("AvgPool1d", dict(kernel_size=3, stride=2, padding=1), jaxpool.avg_pool1d, (2, 9, 4)),
    ("AvgPool2d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                       count_include_pad=False), jaxpool.avg_pool2d, (2, 9, 8, 4)),
    ("AvgPool3d", dict(kernel_size=2, divisor_override=3), jaxpool.avg_pool3d, (2, 4, 6, 4, 3)),
    ("AdaptiveAvgPool1d", dict(output_size=4), jaxpool.adaptive_avg_pool1d, (2, 15, 4)),
    ("AdaptiveAvgPool2d", dict(output_size=(4, None)), jaxpool.adaptive_avg_pool2d, (2, 15, 7, 4)),
    ("AdaptiveAvgPool3d", dict(output_size=(2, 3, 5)), jaxpool.adaptive_avg_pool3d,
     (2, 4, 7, 3, 3)),
    ("GlobalAvgPool", dict(), jaxpool.global_avg_pool, (2, 7, 5, 4)),
]


@pytest.mark.parametrize("api", ["linen", "nnx"])
@pytest.mark.parametrize("name,kwargs,fn,shape", MODULES, ids=[m[0] for m in MODULES])
def test_module_equals_function_channels_last_by_default(api, name, kwargs, fn, shape, rng):
    x = jnp.asarray(rng.standard_normal(shape), jnp.float32)
    expected = fn(x, **kwargs, channels_last=True)
    cls = getattr(getattr(jaxpool, api), name)
    if api == "linen":
        module = cls(**kwargs)
        variables = module.init(jax.random.key(0), x)
        assert jax.tree.leaves(variables) == []
        got = jax.jit(module.apply)(variables, x)
    else:
        module = cls(**kwargs)
        assert jax.tree.leaves(nnx.state(module)) == []
        got = nnx.jit(lambda m, a: m(a))(module, x)
    # jit may fuse the float32 sums in another order than the eager call: not bitwise.
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-6, atol=1e-6)
    first = cls(**kwargs, channels_last=False)
    moved = jnp.moveaxis(x, -1, 1)
    got_first = (first.apply({}, moved) if api == "linen" else first(moved))
    np.testing.assert_allclose(np.asarray(got_first), np.asarray(fn(moved, **kwargs)),
                               rtol=1e-6, atol=1e-6)


class _Flatten(nn.Module):
    def __call__(self, x):
        return x.reshape(x.shape[0], -1)


def _catalog_networks():
    """The catalog's examples; shapes given there as [B, C, H, W], here channels-last."""
    conv = lambda c, k=3, s=1, p=1: nn.Conv(c, (k, k), strides=s, padding=p)
    return {
        "adaptive 1 head": (nn.Sequential([conv(16), nn.relu, jaxpool.linen.AdaptiveAvgPool2d(1),
                                            _Flatten(), nn.Dense(10)]), (28, 28, 3), (10,), 618),
        "adaptive 4 head": (nn.Sequential([jaxpool.linen.AdaptiveAvgPool2d(4), _Flatten(),
                                            nn.Dense(5)]), (15, 15, 8), (5,), 645),
        "adaptive inferred": (jaxpool.linen.AdaptiveAvgPool2d(3), (9, 9, 6), (3, 3, 6), 0),
        "adaptive pair": (jaxpool.linen.AdaptiveAvgPool2d((2, 3)), (8, 8, 4), (2, 3, 4), 0),
        "avg 2": (nn.Sequential([conv(8), nn.relu, jaxpool.linen.AvgPool2d(2)]), (16, 16, 3),
                  (8, 8, 8), 224),
        "avg global": (nn.Sequential([jaxpool.linen.AvgPool2d(4), _Flatten(), nn.Dense(5)]),
                       (4, 4, 8), (5,), 45),
        "avg overlapping": (jaxpool.linen.AvgPool2d(3, stride=2, padding=1,
                                                     count_include_pad=False),
                            (15, 15, 3), (8, 8, 3), 0),
        "global head": (nn.Sequential([conv(16), nn.relu, jaxpool.linen.GlobalAvgPool(),
                                        nn.Dense(10)]), (16, 16, 3), (10,), 618),
        "global 7x7": (jaxpool.linen.GlobalAvgPool(), (7, 7, 32), (32,), 0),
        "global group norm": (nn.Sequential([conv(8, k=4, s=2), nn.GroupNorm(num_groups=4),
                                              nn.relu, jaxpool.linen.GlobalAvgPool(),
                                              nn.Dense(4)]), (32, 32, 3), (4,), 444),
    }


@pytest.mark.parametrize("name", list(_catalog_networks()))
def test_catalog_networks_have_the_published_shapes_and_parameter_counts(name):
    model, in_shape, out_shape, params = _catalog_networks()[name]
    x = jnp.zeros((2, *in_shape), jnp.float32)
    variables = model.init(jax.random.key(0), x)
    assert sum(a.size for a in jax.tree.leaves(variables)) == params
    assert model.apply(variables, x).shape == (2, *out_shape)
    table = model.tabulate(jax.random.key(0), x, console_kwargs={"width": 240})
    assert "Pool" in table


def test_nnx_sequential_under_jit_and_grad(rng):
    model = nnx.Sequential(nnx.Conv(3, 16, (3, 3), padding=1, rngs=nnx.Rngs(0)), nnx.relu,
                           jaxpool.nnx.AdaptiveAvgPool2d(4), jaxpool.nnx.GlobalAvgPool(),
                           nnx.Linear(16, 10, rngs=nnx.Rngs(0)))
    x = jnp.asarray(rng.standard_normal((2, 15, 15, 3)), jnp.float32)

    @nnx.jit
    def loss_grad(m, a):
        return nnx.grad(lambda m: jnp.sum(m(a) ** 2))(m)

    grads = loss_grad(model, x)
    assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
    assert model(x).shape == (2, 10)
