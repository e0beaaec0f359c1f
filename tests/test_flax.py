"""Flax modules: every module of jaxpool.linen and jaxpool.nnx against torch.nn's module of the
same name (values, indices, input gradients; both layouts; inside a jitted model), their
signatures against torch.nn's, their docstring examples, the error without Flax, and the
catalog's example networks with their shapes and parameter counts."""

import doctest
import inspect
import math
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import jaxpool
from jaxpool import _modules

# (module, torch.nn's positional arguments, keywords, channels-first input shape).
# MaxPool1d and MaxPool2d set only ceil_mode / only return_indices by position: torch.nn
# puts return_indices before ceil_mode, and a swapped order would fail.
MODULES = [
    ("AvgPool1d", (3, 2, 1), {}, (2, 4, 9)),
    ("AvgPool2d", (3, 2, 1, True, False), {}, (2, 4, 9, 8)),
    ("AvgPool3d", (2,), dict(divisor_override=3), (2, 3, 4, 6, 4)),
    ("AdaptiveAvgPool1d", (4,), {}, (2, 4, 15)),
    ("AdaptiveAvgPool2d", ((4, None),), {}, (2, 4, 15, 7)),
    ("AdaptiveAvgPool3d", ((2, 3, 5),), {}, (2, 3, 4, 7, 3)),
    ("GlobalAvgPool", (), {}, (2, 4, 7, 5)),
    ("MaxPool1d", (3, 2, 1, 2, False, True), {}, (2, 4, 10)),
    ("MaxPool2d", (3, 2, 1, 1, True), {}, (2, 4, 9, 8)),
    ("MaxPool3d", ((1, 3, 3), (1, 2, 2), (0, 1, 1)), dict(ceil_mode=True), (2, 3, 4, 7, 6)),
    ("AdaptiveMaxPool1d", (4, True), {}, (2, 4, 15)),
    ("AdaptiveMaxPool2d", ((4, None),), {}, (2, 4, 15, 7)),
    ("AdaptiveMaxPool3d", ((2, 3, 5), True), {}, (2, 3, 4, 7, 3)),
    ("LPPool1d", (2, 3), {}, (2, 4, 9)),
    ("LPPool2d", (1.5, (3, 2), 2, True), {}, (2, 4, 9, 8)),
    ("LPPool3d", (3, 2), {}, (2, 3, 4, 6, 4)),
    ("GlobalMaxPool", (), {}, (2, 4, 7, 5)),
    ("Upsample", (None, 2, "bilinear"), {}, (2, 3, 5, 4)),
    ("UpsamplingNearest2d", ((7, 9),), {}, (2, 3, 5, 4)),
    ("UpsamplingBilinear2d", (None, 2), {}, (2, 3, 5, 4)),
    ("PixelShuffle", (2,), {}, (2, 12, 3, 4)),
    ("PixelUnshuffle", (2,), {}, (2, 3, 6, 4)),
    ("ReflectionPad1d", ((2, 1),), {}, (2, 3, 5)),
    ("ReflectionPad2d", ((1, 2, 3, 0),), {}, (2, 3, 5, 4)),
    ("ReplicationPad3d", ((1, 0, -1, 2, 0, 1),), {}, (2, 3, 3, 4, 4)),
    ("CircularPad2d", ((2, -1, 1, 1),), {}, (2, 3, 5, 4)),
    ("ZeroPad2d", ((1, -1, 2, 0),), {}, (2, 3, 5, 4)),
    ("ConstantPad1d", (2, 0.5), {}, (2, 3, 5)),
]
NAMES = [m[0] for m in MODULES]
# torch has no global pooling modules: these are what a torch model writes instead.
TORCH_GLOBAL = {"GlobalAvgPool": torch.nn.AdaptiveAvgPool2d, "GlobalMaxPool":
                torch.nn.AdaptiveMaxPool2d}


def _torch_module(name, args, kwargs):
    if name in TORCH_GLOBAL:
        return torch.nn.Sequential(TORCH_GLOBAL[name](1), torch.nn.Flatten())
    return getattr(torch.nn, name)(*args, **kwargs)


def _values(out):
    return out[0] if isinstance(out, tuple) else out


def _torch_reference(module, x, rng):
    """torch's output (values, or values and indices), a random cotangent for the values
    and the input gradient of ``sum(values * cotangent)``: float64 NumPy, channels-first."""
    xt = torch.from_numpy(x).requires_grad_()
    out = module(xt)
    cotangent = rng.standard_normal(_values(out).shape)
    (grad,) = torch.autograd.grad((_values(out) * torch.from_numpy(cotangent)).sum(), xt)
    outs = out if isinstance(out, tuple) else (out,)
    return [o.detach().numpy() for o in outs], cotangent, grad.numpy()


def _jitted_model(api, module):
    """``x, cotangent -> (output, input gradient of sum(values * cotangent))``: the pooling
    module inside a Sequential model under the framework's jit."""
    if api == "linen":
        model = nn.Sequential([module])

        @jax.jit
        def run(x, cotangent):
            loss = lambda a: jnp.sum(_values(model.apply({}, a)) * cotangent)
            return model.apply({}, x), jax.grad(loss)(x)

        return run

    @nnx.jit
    def run_nnx(model, x, cotangent):
        loss = lambda a: jnp.sum(_values(model(a)) * cotangent)
        return model(x), jax.grad(loss)(x)

    return lambda x, cotangent: run_nnx(nnx.Sequential(module), x, cotangent)


def _to_layout(a, channels_last):
    """A channels-first array in the module's layout (``[B, C]`` outputs stay)."""
    return np.moveaxis(a, 1, -1) if channels_last and a.ndim > 2 else a


def _to_torch_layout(a, channels_last):
    """The module's output as a channels-first NumPy array."""
    return np.moveaxis(np.asarray(a), -1, 1) if channels_last and a.ndim > 2 else np.asarray(a)


# Both APIs' modules wrap the same functions: the default run takes one module of each
# family and each one whose arguments torch.nn orders differently (MaxPool1d, MaxPool2d)
# or that returns indices, once each, in linen channels-last and nnx channels-first by
# turns, so that both APIs and both layouts run; -m slow takes every module in all four
# (API, layout) pairs. (Every module's fields are torch.nn's arguments in torch's order:
# test_fields_are_torch_nn_arguments_in_its_order_then_channels_last.)
FAMILIES = ["AvgPool2d", "AdaptiveAvgPool1d", "GlobalAvgPool", "MaxPool1d", "MaxPool2d",
            "AdaptiveMaxPool3d", "LPPool2d", "Upsample", "UpsamplingBilinear2d",
            "PixelShuffle", "ReflectionPad2d", "ConstantPad1d"]
API_LAYOUTS = [("linen", True), ("nnx", False), ("linen", False), ("nnx", True)]
MODULE_PARAMS = [pytest.param(api, channels_last, *module,
                              marks=() if module[0] in FAMILIES
                              and j == FAMILIES.index(module[0]) % 2 else (pytest.mark.slow,),
                              id=f"{api}-{'last' if channels_last else 'first'}-{module[0]}")
                 for module in MODULES
                 for j, (api, channels_last) in enumerate(API_LAYOUTS)]


@pytest.mark.parametrize("api,channels_last,name,args,kwargs,shape", MODULE_PARAMS)
def test_module_equals_torch_module_in_a_jitted_model(api, channels_last, name, args, kwargs,
                                                      shape, rng, x64):
    x = rng.standard_normal(shape)
    if name.startswith("LP"):
        x = np.abs(x) + 0.1  # torch's LP pooling of a negative power sum is NaN
    if "Max" in name:
        x = np.maximum(x, 0)  # after a ReLU windows tie at zero: torch's pick and gradient
    expected_outs, cotangent, expected_grad = _torch_reference(
        _torch_module(name, args, kwargs), x, rng)
    cls = getattr(getattr(jaxpool, api), name)
    # The modules default to channels-last: say channels_last only to turn it off.
    module = cls(*args, **kwargs) if channels_last else cls(*args, **kwargs, channels_last=False)
    out, grad = _jitted_model(api, module)(jnp.asarray(_to_layout(x, channels_last)),
                                           jnp.asarray(_to_layout(cotangent, channels_last)))
    outs = out if isinstance(out, tuple) else (out,)
    assert len(outs) == len(expected_outs)
    np.testing.assert_allclose(_to_torch_layout(outs[0], channels_last), expected_outs[0],
                               rtol=1e-12, atol=1e-12)
    if len(outs) == 2:  # indices: exactly torch's
        np.testing.assert_array_equal(_to_torch_layout(outs[1], channels_last), expected_outs[1])
    np.testing.assert_allclose(_to_torch_layout(grad, channels_last), expected_grad,
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("api", ["linen", "nnx"])
@pytest.mark.parametrize("name", NAMES)
def test_fields_are_torch_nn_arguments_in_its_order_then_channels_last(api, name):
    """Positional construction works as torch.nn's; type checkers see typed fields."""
    cls = getattr(getattr(jaxpool, api), name)
    theirs = ([] if name in TORCH_GLOBAL
              else [(p.name, p.default)
                    for p in inspect.signature(getattr(torch.nn, name)).parameters.values()])
    ours = list(inspect.signature(cls.__init__).parameters.values())[1:]  # past self
    fields = [(p.name, p.default) for p in ours]
    fields = fields[:fields.index(("channels_last", True)) + 1]
    # AvgPool1d adds divisor_override, which torch has only in 2d and 3d.
    extra = [("divisor_override", None)] if name == "AvgPool1d" else []
    assert fields == theirs + extra + [("channels_last", True)]
    # Past the fields only linen's own (parent, name).
    assert [p.name for p in ours[len(fields):]] in ([], ["parent", "name"])
    assert all(p.annotation is not p.empty for p in ours)
    assert cls.function is getattr(_modules, name).function
    assert ">>>" in cls.__doc__ and cls.__doc__ == getattr(_modules, name).__doc__


# The modules whose op has no layout harness above: channel shuffle, and unfold and fold,
# which are channels-first only, as torch's (no channels_last field). (module, torch.nn's
# arguments, keywords, channels-first input shape)
OTHER_MODULES = [
    ("ChannelShuffle", (3,), {}, (2, 6, 3, 4)),
    ("Unfold", ((3, 2),), dict(dilation=(1, 2), padding=1, stride=(2, 1)), (2, 3, 7, 9)),
    ("Fold", ((5, 6), 2), {}, (2, 12, 20)),
]


@pytest.mark.parametrize("api", ["linen", "nnx"])
@pytest.mark.parametrize("name,args,kwargs,shape", OTHER_MODULES,
                         ids=[m[0] for m in OTHER_MODULES])
def test_other_modules_are_torch_nns_in_fields_and_values(api, name, args, kwargs, shape, rng):
    cls = getattr(getattr(jaxpool, api), name)
    theirs = [(p.name, p.default)
              for p in inspect.signature(getattr(torch.nn, name)).parameters.values()]
    ours = [(p.name, p.default)
            for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
            if p.name not in ("parent", "name")]
    layout = [("channels_last", True)] if name == "ChannelShuffle" else []
    assert ours == theirs + layout
    assert issubclass(cls, _modules.DESCRIPTIONS[name]) and cls.__doc__ == \
        _modules.DESCRIPTIONS[name].__doc__
    x = rng.standard_normal(shape).astype(np.float32)
    expected = getattr(torch.nn, name)(*args, **kwargs)(torch.from_numpy(x)).numpy()
    if layout:
        module = cls(*args, **kwargs)  # channels-last by default
        got = _to_torch_layout(_apply(api, module, jnp.asarray(_to_layout(x, True))), True)
    else:
        got = np.asarray(_apply(api, cls(*args, **kwargs), jnp.asarray(x)))
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def _apply(api, module, x):
    return module.apply({}, x) if api == "linen" else module(x)


# tests/test_docs.py runs each of these examples in the default run (with
# NORMALIZE_WHITESPACE); this repeats them as written, whitespace and all.
@pytest.mark.slow
def test_docstring_examples_run():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(_modules, globs={"jax": jax, "jaxpool": jaxpool, "jnp": jnp}):
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


@pytest.fixture(scope="module")
def without_flax() -> list[str]:
    """What importing each API says in an interpreter without Flax: one interpreter for
    both, each import in turn (a failed import leaves no module behind for the next)."""
    # None in sys.modules makes ``import flax`` fail as if it were not installed.
    code = ("import sys; sys.modules['flax'] = None\n"
            "import jaxpool\n"
            "for api in ('linen', 'nnx'):\n"
            "    for load in (lambda: __import__(f'jaxpool.{api}'),\n"
            "                 lambda: getattr(jaxpool, api)):\n"
            "        try:\n"
            "            load()\n"
            "        except ImportError as error:\n"
            "            print(error)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    return result.stdout.splitlines()


@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_without_flax_the_import_says_how_to_install_it(api, without_flax):
    message = f'jaxpool.{api} needs Flax, an optional dependency: pip install "jaxpool[flax]"'
    lines = {"linen": without_flax[:2], "nnx": without_flax[2:]}[api]
    assert lines == [message, message], without_flax


BAD_ARGUMENTS = [("AvgPool2d", (3, 2, 2), jaxpool.avg_pool2d),
                 ("AdaptiveAvgPool2d", (0,), jaxpool.adaptive_avg_pool2d),
                 ("GlobalAvgPool", (), jaxpool.global_avg_pool),
                 ("MaxPool2d", (3, 2, 2), jaxpool.max_pool2d),
                 ("AdaptiveMaxPool2d", ((2, 0),), jaxpool.adaptive_max_pool2d),
                 ("LPPool2d", (2, 9), jaxpool.lp_pool2d),
                 ("GlobalMaxPool", (), jaxpool.global_max_pool)]


@pytest.mark.parametrize("api", ["linen", "nnx"])
@pytest.mark.parametrize("name,args,function", BAD_ARGUMENTS, ids=[b[0] for b in BAD_ARGUMENTS])
def test_bad_arguments_get_the_functions_own_error(api, name, args, function):
    # Global pooling takes rank 4 only; the others reject their arguments on this input.
    x = jnp.zeros((2, 6, 6, 3) if args else (2, 6, 3))
    with pytest.raises((ValueError, TypeError)) as expected:
        function(x, *args, channels_last=True)
    module = getattr(getattr(jaxpool, api), name)(*args)
    with pytest.raises(expected.type) as got:
        module.apply({}, x) if api == "linen" else module(x)
    assert str(got.value) == str(expected.value)


def _size(variables):
    return sum(math.prod(a.shape) for a in jax.tree.leaves(variables))


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
    # Shapes only (the values are checked against torch above): an eager init takes seconds.
    variables = jax.eval_shape(model.init, jax.random.key(0), x)
    assert _size(variables) == params
    assert jax.eval_shape(model.apply, variables, x).shape == (2, *out_shape)
    table = model.tabulate(jax.random.key(0), x, console_kwargs={"width": 240})
    assert "Pool" in table


def test_linen_stem_is_parameter_free_and_tabulates_its_pools():
    model = nn.Sequential([nn.Conv(8, (3, 3)), nn.relu, jaxpool.linen.MaxPool2d(3, 2, 1),
                           jaxpool.linen.GlobalMaxPool(), nn.Dense(4)])
    x = jnp.zeros((2, 16, 16, 3), jnp.float32)
    variables = jax.eval_shape(model.init, jax.random.key(0), x)
    assert _size(variables) == 3 * 3 * 3 * 8 + 8 + 8 * 4 + 4
    table = model.tabulate(jax.random.key(0), x, console_kwargs={"width": 240})
    assert "MaxPool2d" in table and "GlobalMaxPool" in table
    assert _size(jax.eval_shape(jaxpool.linen.MaxPool2d(3).init, jax.random.key(0), x)) == 0


def test_nnx_sequential_under_jit_and_grad(rng):
    pools = [jaxpool.nnx.MaxPool2d(3, 1, 1), jaxpool.nnx.AdaptiveAvgPool2d(4),
             jaxpool.nnx.LPPool2d(2, 1)]
    assert all(jax.tree.leaves(nnx.state(pool)) == [] for pool in pools)
    model = nnx.Sequential(nnx.Conv(3, 16, (3, 3), padding=1, rngs=nnx.Rngs(0)), nnx.relu,
                           *pools, jaxpool.nnx.GlobalAvgPool(),
                           nnx.Linear(16, 10, rngs=nnx.Rngs(0)))
    x = jnp.asarray(rng.standard_normal((2, 15, 15, 3)), jnp.float32)

    @nnx.jit
    def output_and_grad(m, a):
        return m(a), nnx.grad(lambda m: jnp.sum(m(a) ** 2))(m)

    output, grads = output_and_grad(model, x)
    assert output.shape == (2, 10)
    assert all(np.all(np.isfinite(g)) and np.any(g != 0) for g in jax.tree.leaves(grads))
