"""FractionalMaxPool2d/3d in jaxpool.linen, jaxpool.nnx and jaxpool.equinox: against
torch.nn's modules given the same samples (values, indices, input gradients, inside each
framework's jit), the same bits as the function with the same samples or key, where each
framework's randomness comes from (linen's rng stream, nnx's Rngs, Equinox's key) and the
error without it, and their fields against torch.nn's."""

import dataclasses
import inspect
import pickle

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import jaxpool
import jaxpool.linen
import jaxpool.nnx
from jaxpool import _modules

eqx = pytest.importorskip("equinox")
import jaxpool.equinox  # noqa: E402

# (module, torch.nn's positional arguments, keywords, channels-first input shape): some axis
# pooled to 3 windows or more, where the samples move them.
CASES = {2: ("FractionalMaxPool2d", (2, (4, 3)), dict(return_indices=True), (2, 3, 7, 6)),
         3: ("FractionalMaxPool3d", ((1, 2, 2),), dict(output_ratio=(0.5, 0.7, 0.7)),
             (2, 2, 4, 6, 7))}
FRAMEWORKS = ("linen", "nnx", "equinox")


def _samples(rng, shape, dims, dtype=np.float64):
    return rng.random((shape[0], shape[1], dims)).astype(dtype)


def _outs(out):
    return list(out) if isinstance(out, tuple) else [out]


def _layout(a, channels_last):
    return np.moveaxis(np.asarray(a), 1, -1) if channels_last else np.asarray(a)


def _from_layout(a, channels_last):
    return np.moveaxis(np.asarray(a), -1, 1) if channels_last else np.asarray(a)


def _same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)


def _call(framework, module, x, samples=None, cotangent=None):
    """``(outputs, input gradient of sum(values * cotangent))`` of the module under the
    framework's own jit, the samples given per call."""
    if framework == "linen":
        def run(x, samples, cotangent):
            loss = lambda a: jnp.sum(_outs(module.apply({}, a, samples))[0] * cotangent)
            return module.apply({}, x, samples), jax.grad(loss)(x)

        return jax.jit(run)(x, samples, cotangent)
    if framework == "nnx":
        @nnx.jit
        def run_nnx(model, x, samples, cotangent):
            loss = lambda a: jnp.sum(_outs(model(a, samples))[0] * cotangent)
            return model(x, samples), jax.grad(loss)(x)

        return run_nnx(module, x, samples, cotangent)

    @eqx.filter_jit
    def run_eqx(model, x, samples, cotangent):
        loss = lambda a: jnp.sum(_outs(model(a, samples))[0] * cotangent)
        return model(x, samples), eqx.filter_grad(loss)(x)

    return run_eqx(module, x, samples, cotangent)


# Each framework in the layout it does not default to in one rank, its default in the other;
# the default run takes one rank of each (both ranks, both layouts), -m slow the others.
SLOW = pytest.mark.slow


@pytest.mark.parametrize("framework,dims", [
    ("linen", 2), ("nnx", 3), ("equinox", 2), pytest.param("linen", 3, marks=SLOW),
    pytest.param("nnx", 2, marks=SLOW), pytest.param("equinox", 3, marks=SLOW)])
def test_module_equals_torch_nn_given_the_same_samples(framework, dims, rng, x64):
    name, args, kwargs, shape = CASES[dims]
    channels_last = (framework == "equinox") == (dims == 2)
    x = np.maximum(rng.standard_normal(shape), 0)  # after a ReLU windows tie at zero
    samples = _samples(rng, shape, dims)
    # torch.nn's module passes its _random_samples to F.fractional_max_pool{2,3}d
    torch_module = getattr(torch.nn, name)(*args, **kwargs,
                                           _random_samples=torch.from_numpy(samples))
    xt = torch.from_numpy(x).requires_grad_()
    expected = _outs(torch_module(xt))
    cotangent = rng.standard_normal(tuple(expected[0].shape))
    (expected_grad,) = torch.autograd.grad((expected[0] * torch.from_numpy(cotangent)).sum(), xt)

    module = getattr(getattr(jaxpool, framework), name)(*args, **kwargs,
                                                        channels_last=channels_last)
    outs, grad = _call(framework, module, jnp.asarray(_layout(x, channels_last)),
                       jnp.asarray(samples), jnp.asarray(_layout(cotangent, channels_last)))
    outs = _outs(outs)
    assert len(outs) == len(expected)
    for got, want in zip(outs, expected):  # values and indices: torch's bits
        _same_bits(_from_layout(got, channels_last), want.detach().numpy())
    # (overlapping windows add their cotangents in another order than torch's)
    np.testing.assert_allclose(_from_layout(grad, channels_last), expected_grad.numpy(),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dims", [2, 3])
def test_module_gives_the_functions_bits_for_its_samples_and_keys(dims, rng):
    name, args, kwargs, shape = CASES[dims]
    function = getattr(jaxpool, f"fractional_max_pool{dims}d")
    x = jnp.asarray(rng.standard_normal(shape), jnp.float32)
    samples = jnp.asarray(_samples(rng, shape, dims, np.float32))
    given = dict(kwargs, channels_last=False)
    want = _outs(function(x, *args, samples=samples, **given))
    key = jax.random.key(7)
    want_key = _outs(function(x, *args, key=key, **given))
    linen = getattr(jaxpool.linen, name)(*args, **given)
    nnx_module = getattr(jaxpool.nnx, name)(*args, **given, rngs=nnx.Rngs(fractional=7))
    eqx_module = getattr(jaxpool.equinox, name)(*args, **kwargs)
    for got in (linen.apply({}, x, samples), nnx_module(x, samples), eqx_module(x, samples)):
        for g, w in zip(_outs(got), want, strict=True):
            _same_bits(g, w)
    # drawn: nnx's key is the first of its stream's, Equinox's the call's
    first_key = nnx.Rngs(fractional=7).fractional()
    for got, w_outs in ((nnx_module(x), _outs(function(x, *args, key=first_key, **given))),
                        (eqx_module(x, key=key), want_key)):
        for g, w in zip(_outs(got), w_outs, strict=True):
            _same_bits(g, w)


def test_the_same_key_gives_the_same_bits_and_each_draw_its_own(rng):
    name, args, kwargs, shape = CASES[2]
    x = jnp.asarray(rng.standard_normal(shape), jnp.float32)
    linen = getattr(jaxpool.linen, name)(*args, **kwargs, channels_last=False)
    apply = jax.jit(lambda x, key: linen.apply({}, x, rngs={"fractional": key}))
    a, b, c = (_outs(apply(x, jax.random.key(k)))[1] for k in (0, 0, 1))
    _same_bits(a, b)
    assert not np.array_equal(a, c)
    # nnx: equal streams draw equal samples; a stream draws new ones on each call, also
    # under nnx.jit, which carries the stream's count out
    pools = [getattr(jaxpool.nnx, name)(*args, **kwargs, channels_last=False,
                                        rngs=nnx.Rngs(fractional=3)) for _ in range(2)]
    jitted = nnx.jit(lambda pool, x: pool(x))
    first, again = _outs(pools[0](x))[1], _outs(jitted(pools[1], x))[1]
    _same_bits(first, again)
    second = _outs(jitted(pools[1], x))[1]
    assert not np.array_equal(first, second)
    _same_bits(_outs(pools[0](x))[1], second)
    # Equinox: the call's key
    pool = getattr(jaxpool.equinox, name)(*args, **kwargs)
    a, b, c = (_outs(pool(x, key=jax.random.key(k)))[1] for k in (0, 0, 1))
    _same_bits(a, b)
    assert not np.array_equal(a, c)


def test_linen_draws_from_its_stream_and_without_it_says_so(rng):
    x = jnp.asarray(rng.standard_normal((2, 7, 6, 3)), jnp.float32)
    pool = jaxpool.linen.FractionalMaxPool2d(2, (4, 3))
    with pytest.raises(ValueError, match=r"FractionalMaxPool2d draws its samples from the rng "
                                         r"stream 'fractional'.*rngs=\{'fractional': key\}"):
        pool.apply({}, x)
    with pytest.raises(ValueError, match="'dropout'"):
        jaxpool.linen.FractionalMaxPool2d(2, (4, 3), rng_collection="dropout").apply(
            {}, x, rngs={"fractional": jax.random.key(0)})
    key = jax.random.key(0)
    dropout = jaxpool.linen.FractionalMaxPool2d(2, (4, 3), rng_collection="dropout")
    _same_bits(dropout.apply({}, x, rngs={"dropout": key}),
               pool.apply({}, x, rngs={"fractional": key}))
    # init(key, x) draws from "params", as flax's Dropout does; a model holds no parameters
    model = nn.Sequential([nn.Dense(3), pool])
    variables = model.init(key, x)
    assert [a.shape for a in jax.tree.leaves(variables)] == [(3,), (3, 3)]
    assert model.apply(variables, x, rngs={"fractional": key}).shape == (2, 4, 3, 3)


def test_nnx_without_rngs_says_how_to_give_them_and_takes_them_per_call(rng):
    x = jnp.asarray(rng.standard_normal((2, 7, 6, 3)), jnp.float32)
    pool = jaxpool.nnx.FractionalMaxPool2d(2, (4, 3))
    with pytest.raises(ValueError, match=r"rngs=nnx.Rngs\(fractional=seed\)"):
        pool(x)
    with pytest.raises(TypeError, match="rngs must be"):
        jaxpool.nnx.FractionalMaxPool2d(2, (4, 3), rngs=0)
    key = jax.random.key(5)
    want = jaxpool.fractional_max_pool2d(x, 2, (4, 3), key=key, channels_last=True)
    _same_bits(pool(x, rngs=key), want)
    _same_bits(pool(x, rngs=nnx.Rngs(fractional=5)),
               jaxpool.fractional_max_pool2d(x, 2, (4, 3), channels_last=True,
                                             key=nnx.Rngs(fractional=5).fractional()))
    # an Rngs without the stream gives its default one, as nnx.Dropout's
    _same_bits(jaxpool.nnx.FractionalMaxPool2d(2, (4, 3), rngs=nnx.Rngs(5))(x),
               jaxpool.fractional_max_pool2d(x, 2, (4, 3), channels_last=True,
                                             key=nnx.Rngs(5).default()))


def test_equinox_takes_a_key_per_call_and_maps_over_examples(rng):
    x = jnp.asarray(rng.standard_normal((3, 2, 7, 6)), jnp.float32)
    pool = jaxpool.equinox.FractionalMaxPool2d(2, (4, 3), return_indices=True)
    assert jax.tree.leaves(pool) == []
    with pytest.raises(ValueError, match="samples=.*key="):
        pool(x[0])
    keys = jax.random.split(jax.random.key(1), 3)
    values, indices = eqx.filter_vmap(lambda a, k: pool(a, key=k))(x, keys)
    for i in (0, 2):  # one example [C, H, W]: its samples [1, C, 2]
        v, j = pool(x[i], key=keys[i])
        _same_bits(values[i], v)
        _same_bits(indices[i], j)
    samples = jnp.asarray(_samples(rng, (3, 2), 2, np.float32))
    mapped = jax.vmap(pool)(x, samples[:, None])
    for got, want in zip(mapped, pool(x, samples), strict=True):
        _same_bits(got, want)
    loaded = pickle.loads(pickle.dumps(pool))
    assert loaded == pool and type(loaded) is type(pool)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("dims", [2, 3])
def test_fields_are_torch_nn_arguments_in_its_order_then_the_layout(framework, dims):
    name = f"FractionalMaxPool{dims}d"
    cls = getattr(getattr(jaxpool, framework), name)
    description = _modules.DESCRIPTIONS[name]
    assert issubclass(cls, description) and cls.function is description.function
    # torch.nn's _random_samples is the call's samples
    theirs = [(p.name, p.default) for p in inspect.signature(getattr(torch.nn, name)).parameters
              .values() if p.name != "_random_samples"]
    layout = framework != "equinox"  # Equinox's modules default to channels-first
    ours = list(inspect.signature(cls.__init__).parameters.values())[1:]
    fields = [(p.name, p.default) for p in ours]
    assert fields[:len(theirs) + 1] == theirs + [("channels_last", layout)]
    rest = {"linen": ["rng_collection", "parent", "name"], "nnx": ["rng_collection", "rngs"],
            "equinox": []}[framework]
    assert [p.name for p in ours[len(theirs) + 1:]] == rest
    if framework != "equinox":
        assert dict(fields)["rng_collection"] == "fractional"
        assert cls.__doc__ == description.__doc__ and '"fractional"' in cls.__doc__
    else:
        assert all(f.metadata.get("static") for f in dataclasses.fields(cls))
