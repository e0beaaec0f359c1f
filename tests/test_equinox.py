"""Equinox modules: every module of jaxpool.equinox against torch.nn's of the same name (one
example, a batch, under jax.vmap and eqx.filter_vmap; values, indices and input gradients),
the same bits as the function it wraps on every path, no scatter in the programs of
eqx.filter_grad at first and second order, static fields (no parameters, one trace per
configuration), pickling and eqx.tree_serialise_leaves, the error without Equinox, and where
eqx.nn's own pools differ from torch (the table of docs/equinox.rst)."""

import dataclasses
import inspect
import io
import pathlib
import pickle
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxpool
from jaxpool import _modules
from parity.convert import x64 as float64_mode

eqx = pytest.importorskip("equinox")
import jaxpool.equinox  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]

# (module, torch.nn's positional arguments, keywords, one example's shape [C, *spatial]).
# Every description of jaxpool._modules is here (test_every_description_is_tested).
MODULES = [
    ("AvgPool1d", (3, 2, 1), {}, (3, 9)),
    ("AvgPool2d", (3, 2, 1, True, False), {}, (3, 7, 8)),
    ("AvgPool3d", (2,), dict(divisor_override=3), (2, 4, 5, 4)),
    ("AdaptiveAvgPool1d", (4,), {}, (3, 15)),
    ("AdaptiveAvgPool2d", ((4, None),), {}, (3, 15, 7)),
    ("AdaptiveAvgPool3d", ((2, 3, 5),), {}, (2, 4, 7, 3)),
    ("MaxPool1d", (3, 2, 1, 2, False, True), {}, (3, 10)),
    ("MaxPool2d", (3, 2, 1, 1, True), {}, (3, 9, 8)),
    ("MaxPool3d", ((1, 3, 3), (1, 2, 2), (0, 1, 1)), dict(ceil_mode=True), (2, 3, 7, 6)),
    ("AdaptiveMaxPool1d", (4, True), {}, (3, 15)),
    ("AdaptiveMaxPool2d", ((4, 3),), {}, (3, 15, 7)),
    ("AdaptiveMaxPool3d", ((2, 3, 5), True), {}, (2, 4, 7, 3)),
    ("LPPool1d", (2, 3), {}, (3, 9)),
    ("LPPool2d", (1.5, (3, 2), 2, True), {}, (3, 9, 8)),
    ("LPPool3d", (3, 2), {}, (2, 4, 6, 4)),
    ("GlobalAvgPool", (), {}, (4, 7, 5)),
    ("GlobalMaxPool", (), {}, (4, 7, 5)),
    ("MaxUnpool1d", (2,), {}, (3, 8)),
    ("MaxUnpool2d", (3, 3, 1), {}, (3, 7, 7)),  # no index repeats: torch's backward
    ("MaxUnpool3d", (2,), {}, (2, 4, 4, 6)),
    ("ReflectionPad1d", ((2, 1),), {}, (3, 5)),
    ("ReflectionPad2d", ((1, 2, 3, 0),), {}, (3, 5, 4)),
    ("ReflectionPad3d", (1,), {}, (2, 3, 3, 4)),
    ("ReplicationPad1d", ((2, -1),), {}, (3, 5)),
    ("ReplicationPad2d", (2,), {}, (3, 5, 4)),
    ("ReplicationPad3d", ((1, 0, -1, 2, 0, 1),), {}, (2, 3, 4, 4)),
    ("CircularPad1d", (3,), {}, (3, 5)),
    ("CircularPad2d", ((2, -1, 1, 1),), {}, (3, 5, 4)),
    ("CircularPad3d", ((1, 0, 0, 2, 1, 1),), {}, (2, 3, 4, 4)),
    ("ZeroPad1d", ((-1, 2),), {}, (3, 5)),
    ("ZeroPad2d", ((1, -1, 2, 0),), {}, (3, 5, 4)),
    ("ZeroPad3d", (1,), {}, (2, 3, 3, 4)),
    ("ConstantPad1d", (2, 0.5), {}, (3, 5)),
    ("ConstantPad2d", ((1, 0, 1, 2), -1.5), {}, (3, 5, 4)),
    ("ConstantPad3d", (1, 2.0), {}, (2, 3, 3, 4)),
    ("Upsample", (None, 2, "bilinear"), {}, (3, 5, 4)),
    ("UpsamplingNearest2d", ((7, 9),), {}, (3, 5, 4)),
    ("UpsamplingBilinear2d", (None, 2), {}, (3, 5, 4)),
    ("PixelShuffle", (2,), {}, (12, 3, 4)),
    ("PixelUnshuffle", (2,), {}, (3, 6, 4)),
]
NAMES = [m[0] for m in MODULES]
# One module of each family, and each one that Equinox's side calls differently (a batch
# axis added around one example, indices, the unpooling call): the default run checks these
# against torch, for bits and for scatter, -m slow every module (their functions are checked
# on their own in test_values, test_derivatives and the others, and every module's fields
# against its description in test_fields_are_the_descriptions_static_and_channels_first).
FAMILIES = {"AvgPool2d", "AdaptiveAvgPool1d", "MaxPool2d", "AdaptiveMaxPool3d", "LPPool1d",
            "GlobalAvgPool", "MaxUnpool2d", "ReflectionPad2d", "ConstantPad1d", "Upsample",
            "UpsamplingBilinear2d", "PixelShuffle"}
SOME_MODULES = [m if m[0] in FAMILIES else pytest.param(*m, marks=pytest.mark.slow)
                for m in MODULES]
# torch has no global pooling modules: these are what a torch model writes instead.
TORCH_GLOBAL = {"GlobalAvgPool": torch.nn.AdaptiveAvgPool2d,
                "GlobalMaxPool": torch.nn.AdaptiveMaxPool2d}


def _descriptions():
    """Every description of jaxpool._modules: its public classes with fields, and those
    read from an op's spec where it lists them."""
    if hasattr(_modules, "DESCRIPTIONS"):
        return sorted(_modules.DESCRIPTIONS)
    return sorted(name for name, obj in vars(_modules).items()
                  if inspect.isclass(obj) and issubclass(obj, _modules.Pool)
                  and dataclasses.is_dataclass(obj) and not name.startswith("_"))


@pytest.mark.parametrize("framework", ["linen", "nnx", "equinox"])
def test_every_description_has_a_module_in_each_framework(framework):
    if framework != "equinox":
        pytest.importorskip("flax")
    module = pytest.importorskip(f"jaxpool.{framework}")
    missing = [name for name in _descriptions()
               if not (inspect.isclass(getattr(module, name, None))
                       and issubclass(getattr(module, name), _modules.DESCRIPTIONS[name]))]
    assert not missing, f"descriptions without a class in jaxpool.{framework}: {missing}"


def test_every_description_is_tested():
    # Not in this file's harness yet, which gives every module channels_last and one example
    # [C, *spatial]: Unfold and Fold have no layout argument (torch's channels-first only),
    # and ChannelShuffle's op takes a batch. Their functions are tested on their own. The
    # fractional max pools draw at random: tests/test_fractional_modules.py gives them and
    # torch.nn's the same samples. The RoI modules take boxes beside the maps:
    # tests/test_roi_ops.py calls them in every framework against their functions.
    missing = sorted(set(_descriptions()) - set(NAMES) - {
        "ChannelShuffle", "Unfold", "Fold", "FractionalMaxPool2d", "FractionalMaxPool3d",
        "RoIAlign", "RoIPool", "PSRoIAlign", "PSRoIPool", "MultiScaleRoIAlign"})
    assert not missing, f"add these to MODULES in {pathlib.Path(__file__).name}: {missing}"


# --- against torch -----------------------------------------------------------------------


def _inputs(name, args, shape, rng, batch=None):
    """The module's inputs, channels-first float64 NumPy (``batch`` examples, or one): ``x``,
    or for unpooling torch's max pool of ``x`` and its indices."""
    full = shape if batch is None else (batch, *shape)
    x = rng.standard_normal(full)
    if name.startswith("LP"):
        x = np.abs(x) + 0.1  # torch's LP pooling of a negative power sum is NaN
    if "Max" in name and not name.startswith("MaxUnpool"):
        x = np.maximum(x, 0)  # after a ReLU windows tie at zero: torch's pick and gradient
    if not name.startswith("MaxUnpool"):
        return (x,)
    pool = getattr(F, f"max_pool{name[-2:]}")
    values, indices = pool(torch.from_numpy(x), *args, return_indices=True)
    return values.numpy(), indices.numpy()


def _torch(name, args, kwargs, inputs, cotangent):
    """torch.nn's outputs on a batch (NumPy) and the gradient of ``sum(values * cotangent)``
    with respect to the first input."""
    if name in TORCH_GLOBAL:
        module = torch.nn.Sequential(TORCH_GLOBAL[name](1), torch.nn.Flatten())
    else:
        module = getattr(torch.nn, name)(*args, **kwargs)
    first = torch.from_numpy(inputs[0]).requires_grad_()
    out = module(first, *map(torch.from_numpy, inputs[1:]))
    outs = out if isinstance(out, tuple) else (out,)
    (grad,) = torch.autograd.grad((outs[0] * torch.from_numpy(cotangent)).sum(), first)
    return [o.detach().numpy() for o in outs], grad.numpy()


def _module(name, args, kwargs, **extra):
    return getattr(jaxpool.equinox, name)(*args, **kwargs, **extra)


def _outs(out):
    return list(out) if isinstance(out, tuple) else [out]


def _assert_torch(outs, expected):
    assert len(outs) == len(expected)
    np.testing.assert_allclose(np.asarray(outs[0]), expected[0], rtol=1e-12, atol=1e-12)
    for got, want in zip(outs[1:], expected[1:]):  # indices: exactly torch's
        np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("name,args,kwargs,shape", SOME_MODULES, ids=NAMES)
def test_module_equals_torch_on_one_example_and_under_vmap(name, args, kwargs, shape, rng, x64):
    """One example (values, indices and the input gradient, torch's for a batch of one) and
    a batch under eqx.filter_vmap, in one filter_jit program."""
    module = _module(name, args, kwargs)
    one = _inputs(name, args, shape, rng)
    batch = _inputs(name, args, shape, rng, batch=3)
    cotangent = rng.standard_normal(_outs(jax.eval_shape(module, *map(jnp.asarray, one)))[0]
                                    .shape)

    @eqx.filter_jit
    def run(model, one, batch):
        loss = lambda first, *rest: jnp.sum(_outs(model(first, *rest))[0] * cotangent)
        return model(*one), eqx.filter_grad(loss)(*one), eqx.filter_vmap(model)(*batch)

    out, grad, batch_out = run(module, tuple(map(jnp.asarray, one)),
                               tuple(map(jnp.asarray, batch)))
    expected, expected_grad = _torch(name, args, kwargs, tuple(a[None] for a in one),
                                     cotangent[None])
    _assert_torch(_outs(out), [e[0] for e in expected])
    np.testing.assert_allclose(np.asarray(grad), expected_grad[0], rtol=1e-12, atol=1e-12)
    expected, _ = _torch(name, args, kwargs, batch, np.zeros(_outs(batch_out)[0].shape))
    _assert_torch(_outs(batch_out), expected)


def _same_bits_case(name, args, kwargs, shape, rng, channels_last):
    """float32: the module on a batch, under jax.vmap, under filter_jit and on one example
    gives the bits of the function it wraps (the description's call, which passes each
    field to the function by name; around one example the batch axis the module adds)."""
    inputs = tuple(np.asarray(a, np.float32) if a.dtype.kind == "f" else a
                   for a in _inputs(name, args, shape, rng, batch=2))
    if channels_last:
        inputs = tuple(np.moveaxis(a, 1, -1) for a in inputs)
    batch = tuple(map(jnp.asarray, inputs))
    one = tuple(a[0] for a in batch)
    described = _modules.DESCRIPTIONS[name](*args, **kwargs, channels_last=channels_last)
    module = _module(name, args, kwargs, channels_last=channels_last)
    adds_batch = module._spatial_axes(one[0].ndim) == one[0].ndim - 1
    expected = {
        "batch": _outs(described(*batch)),
        "one example": ([o[0] for o in _outs(described(*(a[None] for a in one)))]
                        if adds_batch else _outs(described(*one)))}
    paths = {"batch": [module(*batch), jax.vmap(module)(*batch),
                       eqx.filter_jit(module)(*batch)],
             "one example": [module(*one)]}
    for kind, outs in paths.items():
        for out in outs:
            for got, want in zip(_outs(out), expected[kind], strict=True):
                np.testing.assert_array_equal(np.asarray(got), np.asarray(want),
                                              err_msg=f"{name} {kind} {channels_last=}")


# The default layout, channels-first; -m slow adds channels-last.
@pytest.mark.parametrize("channels_last", [False, pytest.param(True, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name,args,kwargs,shape", SOME_MODULES, ids=NAMES)
def test_same_bits_as_the_function_on_every_path(name, args, kwargs, shape, channels_last, rng):
    _same_bits_case(name, args, kwargs, shape, rng, channels_last)


# --- Equinox's machinery -----------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES + ["ChannelShuffle", "Unfold", "Fold"])
def test_fields_are_the_descriptions_static_and_channels_first(name):
    cls, description = getattr(jaxpool.equinox, name), _modules.DESCRIPTIONS[name]
    ours, theirs = dataclasses.fields(cls), dataclasses.fields(description)
    assert [(f.name, f.type) for f in ours] == [(f.name, f.type) for f in theirs]
    assert all(f.metadata.get("static") for f in ours)
    assert [f.default for f in ours] == [False if f.name == "channels_last" else f.default
                                         for f in theirs]
    assert cls.function is description.function
    # The description's docstring without its linen/nnx examples, Equinox's layout added.
    summary = inspect.cleandoc(description.__doc__).split("\n\n")[0]
    assert cls.__doc__.startswith(summary) and ">>>" not in cls.__doc__
    assert "channels_last`` defaults to False" in cls.__doc__


# Beside the harness above: a batch for ChannelShuffle, whose op takes one; one example for
# Unfold and Fold, whose ops take it as torch's (neither has channels_last).
@pytest.mark.parametrize("name,args,shape", [("ChannelShuffle", (3,), (2, 6, 3, 4)),
                                             ("Unfold", ((3, 2),), (3, 7, 9)),
                                             ("Fold", ((5, 6), 2), (12, 20))])
def test_other_modules_call_their_function(name, args, shape, rng):
    x = jnp.asarray(rng.standard_normal(shape), jnp.float32)
    module = getattr(jaxpool.equinox, name)(*args)
    assert jax.tree.leaves(module) == []
    expected = _modules.DESCRIPTIONS[name].function(x, *args)
    np.testing.assert_array_equal(np.asarray(module(x)), np.asarray(expected))
    np.testing.assert_array_equal(np.asarray(eqx.filter_jit(module)(x)), np.asarray(expected))


def test_no_parameters_one_trace_per_configuration_and_the_key_is_taken(rng):
    x = jnp.asarray(rng.standard_normal((2, 3, 9, 8)), jnp.float32)
    traces = []

    @eqx.filter_jit
    def run(model, a):
        traces.append(model)
        return jax.vmap(model)(a)

    # A list is hashed as part of the program's key as a tuple is.
    pools = [jaxpool.equinox.AdaptiveAvgPool2d((2, 3)), jaxpool.equinox.MaxPool2d([3, 3], [2, 1])]
    for pool in pools:
        assert jax.tree.leaves(pool) == [] and eqx.filter(pool, eqx.is_array) == pool
        first = run(pool, x)
        np.testing.assert_array_equal(run(dataclasses.replace(pool), x), first)  # an equal copy
        np.testing.assert_array_equal(pool(x[0], key=jax.random.PRNGKey(0)), first[0])
    assert len(traces) == len(pools)
    # In a model, what filter_grad differentiates is the convolution's.
    model = eqx.nn.Sequential([eqx.nn.Conv2d(3, 4, 3, key=jax.random.PRNGKey(0)),
                               jaxpool.equinox.MaxPool2d(2), jaxpool.equinox.GlobalAvgPool()])
    params = jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))
    assert [a.shape for a in params] == [(4, 3, 3, 3), (4, 1, 1)]


def test_upsample_asks_for_the_axes_where_the_rank_cannot_tell():
    x = jnp.ones((3, 5, 4))
    assert jaxpool.equinox.Upsample(scale_factor=(2, 2))(x).shape == (3, 10, 8)
    assert jaxpool.equinox.Upsample(scale_factor=2, mode="bicubic")(x).shape == (3, 10, 8)
    assert jaxpool.equinox.Upsample(scale_factor=2)(jnp.ones((3, 5))).shape == (3, 10)
    assert jaxpool.equinox.Upsample(size=4)(jnp.ones((1, 2, 3, 3, 3))).shape == (1, 2, 4, 4, 4)
    with pytest.raises(ValueError, match=r"Upsample\(mode='nearest'\).*scale_factor=2 "
                                         r"cannot tell.*rank 3"):
        jaxpool.equinox.Upsample(scale_factor=2)(x)


BAD_ARGUMENTS = [("AvgPool2d", (3, 2, 2), jaxpool.avg_pool2d),
                 ("AdaptiveMaxPool2d", ((2, 0),), jaxpool.adaptive_max_pool2d),
                 ("LPPool2d", (2, 9), jaxpool.lp_pool2d),
                 ("MaxPool1d", (0,), jaxpool.max_pool1d)]


@pytest.mark.parametrize("name,args,function", BAD_ARGUMENTS, ids=[b[0] for b in BAD_ARGUMENTS])
def test_bad_arguments_get_the_functions_own_error(name, args, function):
    x = jnp.zeros((3, 6, 6) if name.endswith("2d") else (3, 6))
    with pytest.raises((ValueError, TypeError)) as expected:
        function(x, *args)
    with pytest.raises(expected.type) as got:
        getattr(jaxpool.equinox, name)(*args)(x)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("name,args,kwargs,shape", MODULES, ids=NAMES)
def test_pickle_and_tree_serialise_leaves_round_trips(name, args, kwargs, shape):
    """The module's configuration survives both (a model's outputs: the test below)."""
    module = _module(name, args, kwargs)
    loaded = pickle.loads(pickle.dumps(module))
    assert type(loaded) is type(module) and loaded == module
    assert dataclasses.asdict(loaded) == dataclasses.asdict(module)
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, module)
    buffer.seek(0)
    assert eqx.tree_deserialise_leaves(buffer, module) == module


def test_a_model_round_trips_through_tree_serialise_leaves(rng):
    key1, key2 = jax.random.split(jax.random.PRNGKey(0))
    model = eqx.nn.Sequential([eqx.nn.Conv2d(3, 4, 3, padding=1, key=key1),
                               jaxpool.equinox.MaxPool2d(3, 2, 1),
                               jaxpool.equinox.AvgPool2d(2, ceil_mode=True),
                               jaxpool.equinox.GlobalAvgPool(), eqx.nn.Linear(4, 2, key=key2)])
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, model)
    buffer.seek(0)
    like = eqx.nn.Sequential([eqx.nn.Conv2d(3, 4, 3, padding=1, key=key2),
                              jaxpool.equinox.MaxPool2d(3, 2, 1),
                              jaxpool.equinox.AvgPool2d(2, ceil_mode=True),
                              jaxpool.equinox.GlobalAvgPool(), eqx.nn.Linear(4, 2, key=key1)])
    loaded = eqx.tree_deserialise_leaves(buffer, like)
    x = jnp.asarray(rng.standard_normal((3, 9, 9)), jnp.float32)
    np.testing.assert_array_equal(loaded(x), model(x))
    assert not np.array_equal(like(x), model(x))  # the parameters did come from the file


def test_without_equinox_the_import_says_how_to_install_it():
    # None in sys.modules makes ``import equinox`` fail as if it were not installed.
    code = ("import sys; sys.modules['equinox'] = None\n"
            "try:\n"
            "    import jaxpool.equinox\n"
            "except ImportError as error:\n"
            "    print(error)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=ROOT)
    assert result.stdout.splitlines() == [
        'jaxpool.equinox needs Equinox, an optional dependency: pip install "jaxpool[equinox]"']


# --- no scatter in the derivatives -------------------------------------------------------


def _lowered_ops(lowered) -> set[str]:
    return set(re.findall(r"\b(?:stablehlo|chlo|mhlo)\.([a-z_]+)", lowered.as_text()))


def _banned(ops):
    return {op for op in ops if "scatter" in op or op == "gather"}


def _grad_programs(module, inputs, rng):
    """eqx.filter_grad of a nonlinear loss at first and second order (a Hessian-vector
    product), with respect to the first input."""
    first, rest = inputs[0], inputs[1:]
    w = jnp.asarray(rng.standard_normal(_outs(jax.eval_shape(module, *inputs))[0].shape))
    v = jnp.asarray(rng.standard_normal(first.shape))

    def loss(a):
        return jnp.sum(w * jnp.tanh(_outs(module(a, *rest))[0]) ** 2)

    grad = eqx.filter_grad(loss)
    hvp = eqx.filter_grad(lambda a: jnp.sum(grad(a) * v))
    return {"grad": jax.jit(lambda a: grad(a)).lower(first),
            "hvp": jax.jit(lambda a: hvp(a)).lower(first)}


@pytest.mark.parametrize("name,args,kwargs,shape", SOME_MODULES, ids=NAMES)
def test_no_scatter_in_filter_grad_at_first_and_second_order(name, args, kwargs, shape, rng):
    module = _module(name, args, kwargs)
    inputs = tuple(jnp.asarray(a) for a in _inputs(name, args, shape, rng))
    for program, lowered in _grad_programs(module, inputs, rng).items():
        assert not _banned(_lowered_ops(lowered)), f"{name}: {program}"


# --- where eqx.nn's own pools differ from torch ------------------------------------------

# (eqx.nn's layer, torch's layer with the same arguments): the table of docs/equinox.rst.
EQX_NN = [
    ("MaxPool2d(3, 2, 1)", "MaxPool2d(3, 2, 1)"),
    ("AvgPool2d(2, 2)", "AvgPool2d(2)"),
    ("AvgPool2d(3, 2, 1)", "AvgPool2d(3, 2, 1)"),
    ("AvgPool2d(3, 2, 1, use_ceil=True)", "AvgPool2d(3, 2, 1, ceil_mode=True)"),
    ("AdaptiveAvgPool2d((7, 5))", "AdaptiveAvgPool2d((7, 5))"),
    ("AdaptiveAvgPool2d((2, 3))", "AdaptiveAvgPool2d((2, 3))"),
    ("AdaptiveAvgPool2d((4, 4))", "AdaptiveAvgPool2d((4, 4))"),
    ("AdaptiveMaxPool2d((4, 4))", "AdaptiveMaxPool2d((4, 4))"),
]
EQX_NN_SHAPE = (3, 7, 10)


def _values_cell(difference: float, picks: bool) -> str:
    # A sum is at best "to rounding": whether eqx.nn's window sums round as torch's do
    # depends on how XLA vectorises them for the machine's CPU.
    if difference == 0 and picks:
        return "torch's, bit for bit"
    if difference <= 1e-12:
        return "torch's, to rounding"
    return f"differ by up to {difference:.2g}"


def _measure(layer, torch_layer, x):
    """The values and gradient-program cells of a layer against torch's on ``x`` (one
    float64 example)."""
    with float64_mode():
        expected = torch_layer(torch.from_numpy(x)[None])[0].numpy()
        got = np.asarray(layer(jnp.asarray(x)))
        values = (_values_cell(float(np.max(np.abs(got - expected))),
                               picks="Max" in type(layer).__name__)
                  if got.shape == expected.shape
                  else f"shape {got.shape}, torch's {expected.shape}")
        ops = _lowered_ops(jax.jit(jax.grad(lambda a: jnp.sum(layer(a) ** 2))).lower(
            jnp.asarray(x)))
    return values, ", ".join(f"``{op}``" for op in sorted(_banned(ops))) or "no scatter"


def eqx_nn_rows() -> list[tuple[str, ...]]:
    """Each eqx.nn layer of EQX_NN against torch's on one float64 example of EQX_NN_SHAPE
    drawn from seed 0."""
    x = np.random.default_rng(0).standard_normal(EQX_NN_SHAPE)
    return [(f"``{ours}``", f"``{theirs}``",
             *_measure(eval(f"eqx.nn.{ours}"), eval(f"torch.nn.{theirs}"), x))  # noqa: S307
            for ours, theirs in EQX_NN]


def rst_table(rows, header=("eqx.nn", "torch.nn", "values", "gradient program")) -> str:
    """An RST simple table, indented for a ``.. table::`` directive."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    rule = "  ".join("=" * w for w in widths)
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
    return "\n".join("   " + text for text in [rule, line(header), rule, *map(line, rows), rule])


def test_docs_table_of_eqx_nn_is_what_this_equinox_computes():
    table = rst_table(eqx_nn_rows())
    assert table in (ROOT / "docs" / "equinox.rst").read_text(), (
        f"docs/equinox.rst's table is not what equinox {eqx.__version__} computes; "
        f"measured:\n{table}")
    # The prose beside it: eqx.nn's strides default to 1, torch's to the kernel size.
    for layer in (eqx.nn.MaxPool2d, eqx.nn.AvgPool2d):
        assert inspect.signature(layer).parameters["stride"].default == 1


def test_the_eqx_nn_measure_can_tell_a_difference(rng):
    x = rng.standard_normal(EQX_NN_SHAPE)
    torch_layer = torch.nn.MaxPool2d(3, 2, 1)
    pool = jaxpool.equinox.MaxPool2d(3, 2, 1)
    assert _measure(pool, torch_layer, x) == ("torch's, bit for bit", "no scatter")
    assert _measure(lambda a: pool(a) * (1 + 1e-15), torch_layer, x)[0] == (
        "torch's, to rounding")
    assert _measure(lambda a: pool(a) + 0.25, torch_layer, x)[0] == "differ by up to 0.25"
    assert _measure(eqx.nn.MaxPool2d(3, 1, 1), torch_layer, x)[0] == (
        "shape (3, 7, 10), torch's (3, 4, 5)")
    rows = jnp.array([6, 5, 4, 3, 2, 1, 0])  # a gather: its gradient is a scatter
    assert "scatter" in _measure(lambda a: pool(a[:, rows]), torch_layer, x)[1]
