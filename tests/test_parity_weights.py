"""parity.load_torch_weights / to_torch_weights: every layout rule against torch, both Flax APIs.

Each rule is checked the only way that proves it: the torch layer and the Flax layer that
received its weights compute the same thing on a generated input (parity.compare, values
and first derivatives, float64).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import parity
from parity.convert import x64

# The initial values are drawn by XLA's own generator: on a threefry key, Flax's initialisers
# compile a program of seconds per shape on CPU, for values that every load replaces or that
# stand for any trained weights.
KEY = jax.random.key(0, impl="unsafe_rbg")
R = nnx.Rngs(KEY)

# name -> (torch layer, linen module, nnx module, input shape in torch's layout, layout)
# layout: "first" = channels-first in torch, channels-last in Flax; "same" = no move;
# "ints" = integer indices.
LAYERS = {
    "Linear": (lambda: torch.nn.Linear(5, 4), lambda: nn.Dense(4),
               lambda: nnx.Linear(5, 4, rngs=R), (3, 5), "same"),
    "Linear no bias": (lambda: torch.nn.Linear(5, 4, bias=False), lambda: nn.Dense(4, use_bias=False),
                       lambda: nnx.Linear(5, 4, use_bias=False, rngs=R), (3, 5), "same"),
    "Conv1d": (lambda: torch.nn.Conv1d(3, 4, 3, stride=2, padding=1),
               lambda: nn.Conv(4, (3,), strides=2, padding=[(1, 1)]),
               lambda: nnx.Conv(3, 4, (3,), strides=2, padding=[(1, 1)], rngs=R), (2, 3, 9), "first"),
    "Conv2d groups": (lambda: torch.nn.Conv2d(4, 6, (3, 2), padding=(1, 0), groups=2),
                      lambda: nn.Conv(6, (3, 2), padding=[(1, 1), (0, 0)], feature_group_count=2),
                      lambda: nnx.Conv(4, 6, (3, 2), padding=[(1, 1), (0, 0)], feature_group_count=2,
                                       rngs=R), (2, 4, 6, 5), "first"),
    "Conv3d": (lambda: torch.nn.Conv3d(2, 3, 2, bias=False),
               lambda: nn.Conv(3, (2, 2, 2), padding="VALID", use_bias=False),
               lambda: nnx.Conv(2, 3, (2, 2, 2), padding="VALID", use_bias=False, rngs=R),
               (1, 2, 4, 5, 3), "first"),
    # torch's padding p is Flax's k - 1 - p, output_padding goes on the high side.
    "ConvTranspose1d": (lambda: torch.nn.ConvTranspose1d(3, 5, 3, stride=2, padding=1, output_padding=1),
                        lambda: nn.ConvTranspose(5, (3,), strides=(2,), padding=[(1, 2)]),
                        lambda: nnx.ConvTranspose(3, 5, (3,), strides=(2,), padding=[(1, 2)], rngs=R),
                        (2, 3, 6), "first"),
    "ConvTranspose2d": (lambda: torch.nn.ConvTranspose2d(3, 5, (3, 2), stride=2),
                        lambda: nn.ConvTranspose(5, (3, 2), strides=(2, 2), padding=[(2, 2), (1, 1)]),
                        lambda: nnx.ConvTranspose(3, 5, (3, 2), strides=(2, 2),
                                                  padding=[(2, 2), (1, 1)], rngs=R),
                        (2, 3, 4, 5), "first"),
    "ConvTranspose2d transpose_kernel": (
        lambda: torch.nn.ConvTranspose2d(3, 5, 3, stride=2, padding=1),
        lambda: nn.ConvTranspose(5, (3, 3), strides=(2, 2), padding=[(1, 1), (1, 1)],
                                 transpose_kernel=True),
        lambda: nnx.ConvTranspose(3, 5, (3, 3), strides=(2, 2), padding=[(1, 1), (1, 1)],
                                  transpose_kernel=True, rngs=R), (1, 3, 4, 4), "first"),
    "ConvTranspose3d": (lambda: torch.nn.ConvTranspose3d(2, 3, 2, stride=2, bias=False),
                        lambda: nn.ConvTranspose(3, (2, 2, 2), strides=(2, 2, 2), padding="VALID",
                                                 use_bias=False),
                        lambda: nnx.ConvTranspose(2, 3, (2, 2, 2), strides=(2, 2, 2),
                                                  padding="VALID", use_bias=False, rngs=R),
                        (1, 2, 3, 2, 3), "first"),
    "BatchNorm1d": (lambda: torch.nn.BatchNorm1d(4),
                    lambda: nn.BatchNorm(use_running_average=True),
                    lambda: nnx.BatchNorm(4, use_running_average=True, rngs=R), (3, 4, 7), "first"),
    "BatchNorm2d": (lambda: torch.nn.BatchNorm2d(4),
                    lambda: nn.BatchNorm(use_running_average=True),
                    lambda: nnx.BatchNorm(4, use_running_average=True, rngs=R), (2, 4, 3, 5), "first"),
    "BatchNorm2d train": (lambda: torch.nn.BatchNorm2d(4),
                          lambda: nn.BatchNorm(use_running_average=False),
                          lambda: nnx.BatchNorm(4, use_running_average=False, rngs=R),
                          (2, 4, 3, 5), "first"),
    "BatchNorm3d": (lambda: torch.nn.BatchNorm3d(3),
                    lambda: nn.BatchNorm(use_running_average=True),
                    lambda: nnx.BatchNorm(3, use_running_average=True, rngs=R), (1, 3, 2, 3, 4), "first"),
    "LayerNorm": (lambda: torch.nn.LayerNorm(6), lambda: nn.LayerNorm(epsilon=1e-5),
                  lambda: nnx.LayerNorm(6, epsilon=1e-5, rngs=R), (2, 5, 6), "same"),
    "GroupNorm": (lambda: torch.nn.GroupNorm(2, 6), lambda: nn.GroupNorm(num_groups=2, epsilon=1e-5),
                  lambda: nnx.GroupNorm(6, num_groups=2, epsilon=1e-5, rngs=R), (2, 6, 4, 3), "first"),
    "Embedding": (lambda: torch.nn.Embedding(10, 4), lambda: nn.Embed(10, 4),
                  lambda: nnx.Embed(10, 4, dtype=jnp.float64, rngs=R), (3, 7), "ints"),
}


def randomise(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter and buffer random (variances positive), so no rule passes by luck."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if not t.is_floating_point():
                continue
            r = torch.randn(t.shape, generator=g, dtype=t.dtype)
            t.copy_(r.abs() + 0.5 if name.endswith("running_var") else r)
    return module


def _input(shape, layout, seed=1):
    rng = np.random.default_rng(seed)
    if layout == "ints":
        return rng.integers(0, 10, shape)
    return rng.standard_normal(shape)


def _layout_fns(layout):
    if layout == "first":
        return (lambda x: jnp.moveaxis(x, 1, -1)), (lambda y: jnp.moveaxis(y, -1, 1))
    return (lambda x: x), (lambda y: y)


def _linen_fn(module, variables, layout, train):
    to_flax, back = _layout_fns(layout)
    if train:
        return lambda x: back(module.apply(variables, to_flax(x), mutable=["batch_stats"])[0])
    return lambda x: back(module.apply(variables, to_flax(x)))


def _nnx_fn(model, layout):
    """A pure function of x: the model is merged afresh inside each trace, so that a
    train-mode BatchNorm may update its statistics."""
    to_flax, back = _layout_fns(layout)
    graphdef, state = nnx.split(model)
    return lambda x: back(nnx.merge(graphdef, jax.tree_util.tree_map(lambda a: a, state))(to_flax(x)))


def _float64_linen(module, x, layout):
    to_flax, _ = _layout_fns(layout)
    with x64():
        variables = module.init(KEY, to_flax(jnp.asarray(x)))
        return jax.tree_util.tree_map(
            lambda a: a.astype(jnp.float64) if jnp.issubdtype(a.dtype, jnp.floating) else a,
            variables)


def _float64_nnx(model):
    with x64():
        for _, m in parity.weights.nnx_modules(model):
            for v in vars(m).values():
                if isinstance(v, (nnx.Param, nnx.BatchStat)):
                    parity.weights.set_value(v, parity.weights.get_value(v).astype(jnp.float64))
    return model


def _torch_fn(layer):
    return lambda x: layer(x)


# Compiling each layer's programs costs seconds: the default run leaves out the layers whose
# rule another default case already takes (a plain conv in 1d and 3d beside grouped 2d, a
# plain transposed conv in 2d and 3d beside 1d and 2d's transpose_kernel, the bias-free and
# the other eval-mode norms); every layer under -m slow.
LAYOUT_SLOW = ("Linear no bias", "Conv1d", "Conv3d", "ConvTranspose2d", "ConvTranspose3d",
               "BatchNorm1d", "BatchNorm3d")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in LAYOUT_SLOW
                                  else n for n in LAYERS])
def test_layout_rule_linen_and_nnx_against_torch(name):
    make_torch, make_linen, make_nnx, shape, layout = LAYERS[name]
    train = name.endswith("train")
    layer = randomise(make_torch().double()).train(train)
    x = _input(shape, layout)
    variables = parity.load_torch_weights(layer, _float64_linen(make_linen(), x, layout))
    # values: the layout is in the weights (gradients through them: test_parity_layers.py)
    report = parity.compare(_linen_fn(make_linen(), variables, layout, train), _torch_fn(layer), x,
                            orders=0)
    assert report.ok, report
    model = parity.load_torch_weights(layer.state_dict() if "Transpose" not in name else layer,
                                      _float64_nnx(make_nnx()))
    report = parity.compare(_nnx_fn(model, layout), _torch_fn(layer), x, orders=0)
    assert report.ok, report


@pytest.mark.parametrize("name", ["Conv2d groups", "ConvTranspose1d", "ConvTranspose2d transpose_kernel",
                                  "BatchNorm2d", "Linear"])
def test_flax_weights_back_into_torch(name):
    """to_torch_weights: trained (here: random) Flax weights make the torch layer compute
    what the Flax layer computes."""
    make_torch, make_linen, make_nnx, shape, layout = LAYERS[name]
    x = _input(shape, layout)
    variables = _float64_linen(make_linen(), x, layout)
    with x64():  # non-trivial statistics, as after training
        variables = jax.tree_util.tree_map(lambda a: a + 0.25, variables)
    layer = parity.to_torch_weights(variables, make_torch().double().eval())
    assert parity.compare(_linen_fn(make_linen(), variables, layout, False), _torch_fn(layer), x,
                          orders=0).ok
    model = _float64_nnx(make_nnx())
    layer = parity.to_torch_weights(model, make_torch().double().eval())
    assert parity.compare(_nnx_fn(model, layout), _torch_fn(layer), x, orders=0).ok


@pytest.mark.parametrize("transpose_kernel", [False, True])
def test_nnx_says_which_conv_transpose_layout_it_uses(transpose_kernel):
    """As many input as output channels: both kernel layouts have the same shape, and the
    nnx module's transpose_kernel decides."""
    layer = randomise(torch.nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1).double())
    model = _float64_nnx(nnx.ConvTranspose(4, 4, (3, 3), strides=(2, 2), padding=[(1, 1), (1, 1)],
                                           transpose_kernel=transpose_kernel, rngs=R))
    model = parity.load_torch_weights(layer, model)
    x = _input((1, 4, 4, 4), "first")
    assert parity.compare(_nnx_fn(model, "first"), _torch_fn(layer), x, orders=0).ok


def test_wrong_layout_would_be_caught():
    """The rule tests can fail: a conv kernel loaded without its permutation disagrees."""
    make_torch, make_linen, _, shape, layout = LAYERS["Conv2d groups"]
    layer = randomise(make_torch().double())
    x = _input(shape, layout)
    variables = parity.load_torch_weights(layer, _float64_linen(make_linen(), x, layout))
    kernel = variables["params"]["kernel"]
    with x64():
        swapped = {"params": {**variables["params"], "kernel": kernel[::-1]}}
    report = parity.compare(_linen_fn(make_linen(), swapped, layout, False), _torch_fn(layer), x,
                            orders=0)
    assert not report.ok


# --------------------------------------------------------------------------- matching and errors


class TorchNet(torch.nn.Module):
    def __init__(self, hidden=6, extra=False):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, hidden)
        if extra:
            self.out = torch.nn.Linear(hidden, 2)

    def forward(self, x):
        y = self.fc(self.bn(self.conv(x)).mean((2, 3)))
        return self.out(y) if hasattr(self, "out") else y


class Net(nn.Module):
    hidden: int = 6
    extra: bool = False

    @nn.compact
    def __call__(self, x):
        x = nn.BatchNorm(use_running_average=True)(nn.Conv(4, (3, 3), padding="VALID")(x))
        y = nn.Dense(self.hidden)(x.mean((1, 2)))
        return nn.Dense(2)(y) if self.extra else y


def _drawn(shapes, seed=0):
    """Random arrays (NumPy's, variances positive) in the structure and dtypes of an init's
    ``jax.eval_shape``: no program to compile, where an init compiles one per shape."""
    rng = np.random.default_rng(seed)

    def draw(path, a):
        r = rng.standard_normal(a.shape)
        return jnp.asarray((np.abs(r) + 0.5 if path[-1].key == "var" else r).astype(a.dtype))

    return jax.tree_util.tree_map_with_path(draw, shapes)


def _net_variables(**kw):
    return _drawn(jax.eval_shape(Net(**kw).init, KEY, jnp.ones((1, 5, 5, 3))))


class WideNet(nn.Module):
    classes: int = 10

    @nn.compact
    def __call__(self, x):
        x = nn.BatchNorm(use_running_average=True)(nn.Conv(512, (3, 3), padding="VALID")(x))
        return nn.Dense(self.classes)(x.mean((1, 2)))


class TorchWideNet(torch.nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 512, 3)
        self.bn = torch.nn.BatchNorm2d(512)
        self.fc = torch.nn.Linear(512, classes)

    def forward(self, x):
        return self.fc(self.bn(self.conv(x)).mean((2, 3)))


def test_an_abstract_target_loads_and_names_a_wrong_head_size():
    """The structure jax.eval_shape returns (ShapeDtypeStruct leaves, batch_stats too) with
    model= and x=: the call order is recorded without values, the load returns arrays, and
    a head of another size is named with both shapes."""
    x = np.random.default_rng(0).standard_normal((2, 5, 5, 3)).astype(np.float32)
    torch_net = TorchWideNet(classes=10)
    shapes = jax.eval_shape(WideNet().init, jax.random.key(0), x)
    loaded = parity.load_torch_weights(torch_net, shapes, model=WideNet(), x=x)
    np.testing.assert_array_equal(loaded["params"]["Dense_0"]["kernel"],
                                  torch_net.fc.weight.detach().numpy().T)
    np.testing.assert_array_equal(loaded["batch_stats"]["BatchNorm_0"]["var"],
                                  torch_net.bn.running_var.numpy())
    with pytest.raises(ValueError) as info:
        parity.load_torch_weights(TorchWideNet(), shapes, model=WideNet(), x=x)
    msg = str(info.value)
    assert "fc.weight (1000, 512)" in msg and "params/Dense_0/kernel (512, 10)" in msg, msg
    assert ("fc (Linear) -> Dense_0: kernel (512, 1000) from torch's fc.weight (1000, 512) "
            "vs (512, 10) in Flax") in msg, msg
    with pytest.raises(ValueError, match="variables holds shapes only"):
        parity.compare_layers(torch_net, WideNet(), shapes, np.moveaxis(x, -1, 1))


def test_every_leftover_is_listed():
    with pytest.raises(ValueError) as info:
        parity.load_torch_weights(TorchNet(extra=True), _net_variables(hidden=7))
    msg = str(info.value)
    # fc's shapes disagree, so fc and out are left over on the torch side; Dense_0 in Flax
    assert "torch tensors left unmatched (4):" in msg
    for t in ("fc.weight (6, 4)", "fc.bias (6,)", "out.weight (2, 6)", "out.bias (2,)"):
        assert t in msg, msg
    assert "Flax leaves left unset (2):" in msg
    assert "params/Dense_0/kernel (4, 7)" in msg and "params/Dense_0/bias (7,)" in msg
    assert "shapes that disagree (1):" in msg
    assert "fc (Linear) -> Dense_0: kernel (4, 6) from torch's fc.weight (6, 4) vs (4, 7)" in msg
    assert "name_map" in msg

    with pytest.raises(ValueError, match=r"Flax leaves left unset \(2\)"):
        parity.load_torch_weights(TorchNet(), _net_variables(extra=True))
    with pytest.raises(ValueError, match=r"torch tensors left unmatched"):
        parity.load_torch_weights(torch.nn.Sequential(torch.nn.PReLU()), {"params": {}})
    with pytest.raises(ValueError, match="no layout rule"):
        parity.load_torch_weights(torch.nn.Sequential(torch.nn.PReLU()), {"params": {}})


def test_bad_arguments():
    with pytest.raises(TypeError, match="torch.nn.Module or a state dict"):
        parity.load_torch_weights(np.zeros(3), _net_variables())
    with pytest.raises(TypeError, match="linen variables"):
        parity.load_torch_weights(TorchNet(), {"batch_stats": {}})
    with pytest.raises(ValueError, match="name_map: no torch module 'fc2'"):
        parity.load_torch_weights(TorchNet(), _net_variables(), name_map={"fc2": "Dense_0"})
    with pytest.raises(ValueError, match="name_map: no Flax module 'Dense_9'"):
        parity.load_torch_weights(TorchNet(), _net_variables(), name_map={"fc": "Dense_9"})
    with pytest.raises(ValueError, match="model and x go together"):
        parity.load_torch_weights(TorchNet(), _net_variables(), model=Net())


def test_layers_that_fit_one_counterpart_need_no_order():
    """A tree_map or jit returns dict keys sorted (Dense_10 before Dense_2); where every
    layer fits exactly one counterpart by shape, the order does not matter."""
    torch_net = torch.nn.Sequential(*[torch.nn.Linear(i + 1, i + 2) for i in range(12)])

    class Chain(nn.Module):
        @nn.compact
        def __call__(self, x):
            for i in range(12):
                x = nn.Dense(i + 2)(x)
            return x

    # in the structure jax.eval_shape gives, sorted as a jit returns it (an init of twelve
    # shapes compiles for seconds)
    variables = _drawn(jax.eval_shape(Chain().init, KEY, jnp.ones((1, 1))))
    assert list(variables["params"])[:3] == ["Dense_0", "Dense_1", "Dense_10"]
    loaded = parity.load_torch_weights(torch_net, variables)
    np.testing.assert_array_equal(loaded["params"]["Dense_10"]["bias"],
                                  torch_net[10].bias.detach().numpy())


# A net whose auto-names sort out of creation order: "BasicBlock_0" < "BatchNorm_0", so that
# variables with sorted keys list the blocks' BatchNorms before the stem's.


class TorchBasicBlock(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))) + x


class TorchBlockNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.block1 = TorchBasicBlock(4)
        self.block2 = TorchBasicBlock(4)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        x = self.block2(self.block1(torch.relu(self.bn(self.conv(x)))))
        return self.fc(x.mean((2, 3)))


class BasicBlock(nn.Module):
    @nn.compact
    def __call__(self, x):
        y = nn.Conv(x.shape[-1], (3, 3), padding=1, use_bias=False)(x)
        return nn.relu(nn.BatchNorm(use_running_average=True, epsilon=1e-5)(y)) + x


class BlockNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Conv(4, (3, 3), padding=1)(x)
        x = nn.relu(nn.BatchNorm(use_running_average=True, epsilon=1e-5)(x))
        x = BasicBlock()(x)
        x = BasicBlock()(x)
        return nn.Dense(3)(x.mean((1, 2)))


def _block_net_case():
    torch_net = randomise(TorchBlockNet().double()).eval()
    x = _input((2, 3, 6, 6), "first")
    x_flax = jnp.asarray(np.moveaxis(x, 1, -1))
    return torch_net, x, x_flax


@pytest.mark.parametrize("reorder", ["jit", pytest.param("tree_map", marks=pytest.mark.slow)])
def test_sorted_variables_are_never_paired_by_their_order(reorder):
    torch_net, x, x_flax = _block_net_case()
    with x64():
        if reorder == "jit":
            variables = jax.jit(BlockNet().init)(KEY, x_flax)
        else:
            variables = jax.tree_util.tree_map(lambda a: a, BlockNet().init(KEY, x_flax))
        variables = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), variables)
    assert list(variables["batch_stats"]) == ["BasicBlock_0", "BasicBlock_1", "BatchNorm_0"]
    with pytest.raises(ValueError) as info:
        parity.load_torch_weights(torch_net, variables)
    msg = str(info.value)
    assert "cannot be paired without guessing" in msg
    assert "  bn (BatchNorm2d): BasicBlock_0/BatchNorm_0, BasicBlock_1/BatchNorm_0, BatchNorm_0" \
        in msg
    assert "model=..., x=..." in msg and 'name_map={"bn": "<path>", "block1.conv": "<path>"' in msg
    with pytest.raises(ValueError, match="cannot be paired without guessing"):
        parity.to_torch_weights(variables, TorchBlockNet().double())

    def agrees(v):
        return parity.compare(lambda x: BlockNet().apply(v, jnp.moveaxis(x, 1, -1)), torch_net,
                              x, orders=0).ok

    by_calls = parity.load_torch_weights(torch_net, variables, model=BlockNet(), x=x_flax)
    assert agrees(by_calls)
    by_hand = parity.load_torch_weights(torch_net, variables, name_map={
        "bn": "BatchNorm_0", "block1.conv": "BasicBlock_0/Conv_0",
        "block1.bn": "BasicBlock_0/BatchNorm_0", "block2.conv": "BasicBlock_1/Conv_0",
        "block2.bn": "BasicBlock_1/BatchNorm_0"})
    assert agrees(by_hand)
    # and back: Flax weights into a fresh torch net, paired by the calls
    back = parity.to_torch_weights(by_calls, TorchBlockNet().double().eval(), model=BlockNet(),
                                   x=x_flax)
    xt = torch.from_numpy(x)
    torch.testing.assert_close(back(xt), torch_net(xt), rtol=0, atol=0)


def test_loaded_variables_keep_structure_and_dtype_and_skip_num_batches_tracked():
    torch_net = randomise(TorchNet())
    variables = _net_variables()
    loaded = parity.load_torch_weights(torch_net.state_dict(), variables)
    assert jax.tree_util.tree_structure(loaded) == jax.tree_util.tree_structure(variables)
    assert all(a.dtype == jnp.float32 for a in jax.tree_util.tree_leaves(loaded))
    np.testing.assert_array_equal(loaded["batch_stats"]["BatchNorm_0"]["var"],
                                  torch_net.bn.running_var.numpy())
    np.testing.assert_array_equal(loaded["params"]["Dense_0"]["kernel"],
                                  torch_net.fc.weight.detach().numpy().T)


class TorchTwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.a(x) - 2 * self.b(x)


class TwoHeads(nn.Module):
    """Creates b's layer before a's: same shapes, so order alone pairs them wrongly."""

    @nn.compact
    def __call__(self, x):
        b = nn.Dense(4, name="b", param_dtype=jnp.float64)(x)
        return nn.Dense(4, name="a", param_dtype=jnp.float64)(x) - 2 * b


def test_equal_names_pair_and_name_map_overrides():
    torch_net = randomise(TorchTwoHeads().double())
    x = np.random.default_rng(3).standard_normal((2, 4))
    with x64():  # straight from init: the variables in creation order, b first
        init = TwoHeads().init(KEY, jnp.asarray(x))
    assert list(init["params"]) == ["b", "a"]
    by_name = parity.load_torch_weights(torch_net, init)  # "a" is "a", whatever the order
    assert parity.compare(lambda x: TwoHeads().apply(by_name, x), torch_net, x, orders=1).ok
    swapped = parity.load_torch_weights(torch_net, init, name_map={"a": "b", "b": ("a",)})
    assert not parity.compare(lambda x: TwoHeads().apply(swapped, x), torch_net, x, orders=0).ok
