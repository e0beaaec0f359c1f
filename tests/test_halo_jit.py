"""The partitioned primitive (jaxpool.halo.jit) on one device, forced on with
``route("always")``: each op's values and derivatives are the bits of the op's own program
(``route("never")``), plain, eagerly and under jit, jvp, grad, vmap and a Hessian-vector
product (reverse over reverse: to rounding), with no scatter or gather in any derivative. On several devices the primitive's
partitioning is checked in test_sharding_halo's subprocess.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpool
from jaxpool import halo_jit

OPS = {
    "avg_pool2d 3/2/1": lambda v: jaxpool.avg_pool2d(v, 3, 2, 1),
    "avg_pool1d ceil": lambda v: jaxpool.avg_pool1d(v[..., 0], 3, 2, 1, ceil_mode=True),
    "max_pool2d 3/2/1": lambda v: jaxpool.max_pool2d(v, 3, 2, 1),
    "max_pool2d values + indices": lambda v: (lambda a: a[0] + a[1].astype(v.dtype))(
        jaxpool.max_pool2d(v, 3, 2, 1, return_indices=True)),
    "max_pool3d": lambda v: jaxpool.max_pool3d(v[None], 2, 1),
    "lp_pool2d p2": lambda v: jaxpool.lp_pool2d(v, 2, 2),
    "lp_pool2d p=inf": lambda v: jaxpool.lp_pool2d(v, float("inf"), 2),
    "adaptive_avg_pool2d ragged": lambda v: jaxpool.adaptive_avg_pool2d(v, (3, 4)),
    "adaptive_max_pool2d": lambda v: jaxpool.adaptive_max_pool2d(v, (3, 4)),
    "global_avg_pool": jaxpool.global_avg_pool,
    "global_max_pool": jaxpool.global_max_pool,
    "interpolate bilinear x2": lambda v: jaxpool.interpolate(v, scale_factor=2,
                                                             mode="bilinear"),
    "interpolate bicubic align_corners": lambda v: jaxpool.interpolate(
        v, size=(5, 9), mode="bicubic", align_corners=True),
    "interpolate nearest": lambda v: jaxpool.interpolate(v, size=(11, 4)),
    "interpolate area": lambda v: jaxpool.interpolate(v, size=(4, 3), mode="area"),
    "pad reflect": lambda v: jaxpool.pad(v, (1, 2, 2, 1), "reflect"),
    "pad constant channels last": lambda v: jaxpool.pad(v, (1, 1, 0, 2), value=0.5,
                                                        channels_last=True),
    "pixel_unshuffle": lambda v: jaxpool.pixel_unshuffle(v, 2),
    "pixel_shuffle": lambda v: jaxpool.pixel_shuffle(jnp.tile(v, (1, 4, 1, 1)), 2),
    "max_unpool2d": lambda v: jaxpool.max_unpool2d(
        *jaxpool.max_pool2d(v, 2, 2, return_indices=True), 2),
}


def _programs(f):
    def loss(v):
        return (jnp.sin(f(v)) ** 2).sum()
    return {
        "jit": jax.jit(f),
        "eager": f,
        "grad": jax.jit(jax.grad(loss)),
        "jvp": jax.jit(lambda v: jax.jvp(f, (v,), (jnp.cos(v),))[1]),
        "vmap grad": jax.jit(jax.vmap(jax.grad(loss))),
        "hvp": jax.jit(lambda v: jax.jvp(jax.grad(loss), (v,), (jnp.cos(v),))[1]),
        "reverse over reverse": jax.jit(jax.grad(lambda v: (jax.grad(loss)(v) ** 2).sum())),
    }


# By default one op, with several results, one of them integer indices (the primitive's
# rules are the same for every op); every op under -m slow.
DEFAULT = ("max_pool2d values + indices",)


@pytest.mark.parametrize("name", [n if n in DEFAULT else pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(OPS)])
def test_the_primitive_gives_the_ops_own_bits(name):
    f = OPS[name]
    # ties and zeros, as after a ReLU, beside distinct values
    x = jax.nn.relu(jnp.round(jax.random.normal(jax.random.key(1), (2, 3, 8, 6)) * 2))
    x = x.at[1].set(jax.random.normal(jax.random.key(2), (3, 8, 6)))
    batched = {"vmap grad": x[:, None]}
    got, want = {}, {}
    for mode, out in (("never", want), ("always", got)):
        with halo_jit.route(mode):
            for key, program in _programs(lambda v: f(v)).items():
                out[key] = np.asarray(program(batched.get(key, x)))
            if mode == "always":
                text = str(jax.make_jaxpr(_programs(lambda v: f(v))["hvp"])(x))
                assert "jaxpool_halo" in text
                assert not re.search(r"\b(gather|scatter|scatter-add)\b", text)
    # Reverse over reverse transposes the transposed per-device code, whose sums may run in
    # another order than JAX's second transpose of the op: equal to rounding.
    rounding = {"reverse over reverse"}
    differ = [key for key in want if got[key].dtype != want[key].dtype
              or got[key].shape != want[key].shape
              or not (np.array_equal(got[key].view(np.uint8), want[key].view(np.uint8))
                      or key in rounding and np.allclose(got[key], want[key], rtol=1e-6,
                                                         atol=1e-7, equal_nan=True))]
    assert not differ, {k: float(np.max(np.abs(got[k] - want[k]))) for k in differ}


def test_checks_run_before_the_primitive():
    with halo_jit.route("always"):
        with pytest.raises(ValueError, match="kernel_size"):
            jaxpool.avg_pool2d(jnp.ones((1, 1, 4, 4)), 0)
        with pytest.raises(ValueError, match="pad"):
            jaxpool.pad(jnp.ones((1, 1, 4)), (5, 5), "reflect")
    with pytest.raises(ValueError, match="'sometimes'"):
        with halo_jit.route("sometimes"):  # type: ignore[arg-type]
            pass


def test_route_is_read_when_traced():
    x = jnp.ones((1, 1, 4, 4))
    with halo_jit.route("always"):
        assert "jaxpool_halo" in str(jax.make_jaxpr(lambda v: jaxpool.max_pool2d(v, 2))(x))
    with halo_jit.route("never"):
        assert "jaxpool_halo" not in str(jax.make_jaxpr(lambda v: jaxpool.max_pool2d(v, 2))(x))
    # one device, "auto": the op's own program, no primitive
    if jax.device_count() == 1:
        assert "jaxpool_halo" not in str(jax.make_jaxpr(lambda v: jaxpool.max_pool2d(v, 2))(x))
