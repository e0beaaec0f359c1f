"""parity.compare_layers: small networks ported from torch to Flax, clean and with one planted
difference each; the report must name the layer where the difference was planted.

Every planted difference has its clean twin, which must pass: a check that cannot pass
proves nothing.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import jaxpool
import parity
from default_share import each_once


def randomise(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random parameters and running statistics (variances positive), so that no layer
    agrees by luck (a fresh BatchNorm is the identity in eval mode)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if t.is_floating_point():
                r = torch.randn(t.shape, generator=g, dtype=t.dtype)
                t.copy_(r.abs() + 0.5 if name.endswith("running_var") else 0.5 * r)
    return module


# --------------------------------------------------------------------------- a residual CNN


class TorchBlock(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)) + x)


class TorchResidualNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.relu = torch.nn.ReLU(inplace=True)
        self.pool = torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False)
        self.block = TorchBlock(8)
        self.head = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        x = self.pool(self.relu(self.bn(self.stem(x))))
        return self.fc(torch.flatten(self.head(self.block(x)), 1))


class Block(nn.Module):
    c: int
    bug: str = ""

    @nn.compact
    def __call__(self, x, train=False):
        y = nn.Conv(self.c, (3, 3), padding=1, use_bias=False)(x)
        y = nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5)(y)
        return nn.relu(y + (0.5 * x if self.bug == "add" else x))


class ResidualNet(nn.Module):
    """The port; ``bug`` plants one difference: "conv" (the stem's padding), "bn" (an
    epsilon), "pool" (count_include_pad), "add" (the residual connection)."""

    bug: str = ""

    @nn.compact
    def __call__(self, x, train=False):
        x = nn.Conv(8, (3, 3), padding=2 if self.bug == "conv" else 1)(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9,
                         epsilon=1e-3 if self.bug == "bn" else 1e-5)(x)
        x = jaxpool.linen.AvgPool2d(3, 2, 1, count_include_pad=self.bug == "pool")(nn.relu(x))
        x = Block(8, self.bug)(x, train)
        x = jaxpool.linen.AdaptiveAvgPool2d(1)(x)
        return nn.Dense(5)(x.reshape(x.shape[0], -1))


# torch module name where each difference is planted
PLANTED = {"conv": "stem", "bn": "bn", "pool": "pool", "add": "block"}


@pytest.fixture(scope="module")
def residual_net():
    return randomise(TorchResidualNet())


# Initial values drawn by XLA's own generator: on a threefry key, Flax's initialisers compile
# a program of seconds per shape on CPU (the loads replace the values, or they only have to
# differ from torch's).
KEY = jax.random.key(1, impl="unsafe_rbg")


def _image(dtype, shape=(2, 3, 8, 8)):
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


# Eval mode in float64 and train mode in float32 by default, the other two under -m slow.
@pytest.mark.parametrize("train,dtype", each_once([False, True], [np.float64, np.float32],
                                                  ids=["eval", "train"]))
def test_clean_port_agrees_layer_by_layer(residual_net, dtype, train):
    report = parity.compare_layers(residual_net, ResidualNet(), None, _image(dtype), train=train)
    assert report.ok, report.format()
    outputs = [(r.torch_name, r.flax_path) for r in report.rows if r.kind == "output"]
    assert outputs == [("stem", "Conv_0"), ("bn", "BatchNorm_0"), ("pool", "AvgPool2d_0"),
                       ("block.conv", "Block_0/Conv_0"), ("block.bn", "Block_0/BatchNorm_0"),
                       ("block", "Block_0"), ("head", "AdaptiveAvgPool2d_0"), ("fc", "Dense_0"),
                       ("", "")]
    grads = [(r.torch_name, r.flax_path) for r in report.rows if r.kind == "gradient"]
    # backpropagation's order, through the weight mapping (a conv kernel is permuted)
    assert grads[0] == ("fc.weight", "Dense_0/kernel") and grads[-1] == ("stem.bias", "Conv_0/bias")
    assert ("stem.weight", "Conv_0/kernel") in grads and len(grads) == 9
    at_inputs = [r.torch_name for r in report.rows if r.kind == "input gradient"]
    assert at_inputs == ["fc", "head", "block.bn", "block.conv", "block", "pool", "bn", "stem", ""]
    assert report.rows[-1].kind == "input gradient" and report.rows[-1].torch_name == ""
    weights = [r.torch_name for r in report.rows if r.kind == "weight"]
    assert weights[:2] == ["stem.weight", "stem.bias"] and len(weights) == 13
    assert report.rows[:len(weights)] == [r for r in report.rows if r.kind == "weight"]
    assert report.unpaired_torch == ["relu"] and report.unpaired_flax == []
    assert "not compared, no counterpart found (torch, 1): relu" in report.format()
    assert report.reference == ("torch" if dtype == np.float64 else "torch float64")
    assert report.dtype == np.dtype(dtype).name and report.train == train


# Each planted bug in one dtype by default (the dtypes in turn), both under -m slow. The
# epsilon ("bn") only under -m slow: test_assert_model_parity_names_the_first_divergence and
# test_shadow_mode_fails_only_the_wrong_layer[bn] name it as the first divergence by default.
@pytest.mark.parametrize("bug,dtype", [
    pytest.param(*p.values, marks=pytest.mark.slow, id=p.id) if p.values[0] == "bn" else p
    for p in each_once(list(PLANTED), [np.float64, np.float32], ids=list(PLANTED))])
def test_planted_difference_is_the_first_divergence(residual_net, dtype, bug):
    # Gradients where the planted shape runs through them; elsewhere the first divergence, an
    # output, comes before every gradient row (the assert_model_parity and shadow-mode tests
    # take a planted difference's gradients by default).
    report = parity.compare_layers(residual_net, ResidualNet(bug), None, _image(dtype),
                                   gradients=bug == "conv")
    first = report.first_divergence
    assert first is not None and first.kind == "output", report.format()
    assert first.torch_name == PLANTED[bug], report.format()
    i = report.rows.index(first)
    assert all(r.ok for r in report.rows[:i])
    if bug == "conv":
        assert "shape (2, 8, 8, 8) (torch) vs (2, 10, 10, 8) (Flax)" in first.note
    text = report.format()
    assert "<- first divergence" in text and f"first divergence: output of {PLANTED[bug]}" in text


def test_assert_model_parity_names_the_first_divergence(residual_net):
    x = _image(np.float64)
    report = parity.assert_model_parity(residual_net, ResidualNet(), None, x, gradients=False)
    assert report.ok and {r.kind for r in report.rows} == {"weight", "output"}
    with pytest.raises(parity.ParityError, match=r"first divergence: output of bn \(torch\) / "
                                                 r"BatchNorm_0 \(Flax\)"):
        parity.assert_model_parity(residual_net, ResidualNet("bn"), None, x)


def test_given_variables_and_report_serialisation(residual_net):
    x = _image(np.float32)
    init = ResidualNet().init(KEY, jnp.ones((1, 8, 8, 3)))
    variables = parity.load_torch_weights(residual_net, init, model=ResidualNet(),
                                          x=jnp.ones((1, 8, 8, 3)))
    report = parity.compare_layers(residual_net, ResidualNet(), variables, x)
    assert report.ok, report.format()
    d = report.to_dict()
    assert d["ok"] and d["first_divergence"] is None and len(d["rows"]) == len(report.rows)
    assert d["mode"] == "chained" and d["reference"] == "torch float64"
    out = [r for r in d["rows"] if r["kind"] == "output"]
    assert out[0]["torch_name"] == "stem" and out[0]["shape"] == [2, 8, 8, 8]
    assert out[0]["ref_err"] is not None and out[0]["ref_err"] > 0
    # variables not imported from torch: reported as weights, the first one first (the
    # weights' rows come before every other: no gradients needed)
    first = parity.compare_layers(residual_net, ResidualNet(), init, x,
                                  gradients=False).first_divergence
    assert (first.kind, first.torch_name, first.flax_path) == ("weight", "stem.weight",
                                                               "Conv_0/kernel")


def test_float64_torch_weights_in_float32_variables():
    """A float64 torch model loaded into float32-initialised variables: the leaves hold
    torch's values rounded; the float64 comparison says so and runs on torch's values,
    instead of blaming the first BatchNorm. A leaf that holds something else is a weight
    row's failure."""
    torch_net = randomise(TorchResidualNet().double())
    x = _image(np.float64)
    init = ResidualNet().init(KEY, jnp.ones((1, 8, 8, 3)))
    loaded = parity.load_torch_weights(torch_net, init, model=ResidualNet(),
                                       x=jnp.ones((1, 8, 8, 3)))
    assert loaded["batch_stats"]["BatchNorm_0"]["var"].dtype == jnp.float32
    report = parity.compare_layers(torch_net, ResidualNet(), loaded, x)
    assert report.ok, report.format()
    bn = next(r for r in report.rows if r.torch_name == "bn.running_var")
    assert bn.kind == "weight" and "rounded to it on loading" in bn.note
    assert "computes with torch's value" in report.format()
    wrong = jax.tree_util.tree_map(lambda a: a, loaded)
    wrong["batch_stats"]["Block_0"]["BatchNorm_0"]["var"] = \
        wrong["batch_stats"]["Block_0"]["BatchNorm_0"]["var"] * 1.001
    first = parity.compare_layers(torch_net, ResidualNet(), wrong, x,
                                  gradients=False).first_divergence  # a weight's row: first
    assert (first.kind, first.torch_name) == ("weight", "block.bn.running_var")


# --------------------------------------------------------------------------- a wrong gradient only


def _dense(wrong: str):
    """x @ kernel + bias whose backward is wrong for ``wrong`` ("kernel" or "input"): its
    cotangent twice too large. The forward is right."""

    @jax.custom_vjp
    def dense(x, kernel, bias):
        return x @ kernel + bias

    def fwd(x, kernel, bias):
        return dense(x, kernel, bias), (x, kernel)

    def bwd(res, g):
        x, kernel = res
        g_x, g_kernel = g @ kernel.T, x.T @ g
        return (2 * g_x if wrong == "input" else g_x,
                2 * g_kernel if wrong == "kernel" else g_kernel, g.sum(0))

    dense.defvjp(fwd, bwd)
    return dense


class WrongGradDense(nn.Module):
    features: int
    wrong: str = "kernel"

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (x.shape[-1], self.features),
                            x.dtype)
        bias = self.param("bias", nn.initializers.zeros, (self.features,), x.dtype)
        return _dense(self.wrong)(x, kernel, bias)


class MLP(nn.Module):
    wrong_grad: str = ""

    @nn.compact
    def __call__(self, x):
        x = jnp.tanh(nn.Dense(6)(x))
        x = (WrongGradDense(5, self.wrong_grad) if self.wrong_grad else nn.Dense(5))(x)
        return nn.Dense(3)(jnp.tanh(x))


@pytest.fixture(scope="module")
def torch_mlp():
    return randomise(torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(),
                                         torch.nn.Linear(6, 5), torch.nn.Tanh(),
                                         torch.nn.Linear(5, 3)).double())


def test_a_wrong_gradient_is_found_through_the_weight_mapping(torch_mlp):
    x = _image(np.float64, (5, 4))
    assert parity.compare_layers(torch_mlp, MLP(), None, x).ok
    report = parity.compare_layers(torch_mlp, MLP("kernel"), None, x)
    assert all(r.ok for r in report.rows if r.kind == "output"), report.format()
    first = report.first_divergence
    assert (first.kind, first.torch_name, first.flax_path) == ("gradient", "2.weight",
                                                               "WrongGradDense_0/kernel")
    assert {r.torch_name for r in report.rows if not r.ok} == {"2.weight"}


@pytest.mark.parametrize("mode", ["chained", "shadow"])
def test_a_wrong_backward_is_found_at_its_layer(torch_mlp, mode):
    """A layer whose backward alone is wrong (a custom_vjp rule): the gradient at its input
    is the first divergence; in shadow mode it is the only one."""
    x = _image(np.float64, (5, 4))
    report = parity.compare_layers(torch_mlp, MLP("input"), None, x, mode=mode)
    assert report.mode == mode and all(r.ok for r in report.rows if r.kind == "output")
    first = report.first_divergence
    assert (first.kind, first.torch_name, first.flax_path) == ("input gradient", "2",
                                                               "WrongGradDense_0"), report.format()
    failing = [(r.kind, r.torch_name) for r in report.rows if not r.ok]
    if mode == "shadow":
        assert failing == [("input gradient", "2")], report.format()
    else:  # everything backpropagation computes after it
        assert ("gradient", "0.weight") in failing and ("input gradient", "") in failing


@pytest.mark.parametrize("bug", ["bn", pytest.param("add", marks=pytest.mark.slow)])
def test_shadow_mode_fails_only_the_wrong_layer(residual_net, bug):
    """Each Flax layer on torch's recorded input: the layers after the planted difference
    agree again; chained mode fails them all."""
    x = _image(np.float64)
    chained = parity.compare_layers(residual_net, ResidualNet(bug), None, x, gradients=False)
    shadow = parity.compare_layers(residual_net, ResidualNet(bug), None, x, mode="shadow")
    assert shadow.first_divergence.torch_name == PLANTED[bug], shadow.format()
    assert shadow.first_divergence.kind == "output"
    failing = {r.torch_name for r in shadow.rows if not r.ok and r.kind == "output"}
    assert failing == {PLANTED[bug]}, shadow.format()
    assert {r.torch_name for r in chained.rows if not r.ok} >= {PLANTED[bug], "fc", ""}
    bad_grads = {r.torch_name.partition(".")[0] for r in shadow.rows
                 if not r.ok and r.kind.endswith("gradient")}
    assert bad_grads <= {PLANTED[bug]}, shadow.format()
    assert "shadow" in shadow.format() and shadow.to_dict()["mode"] == "shadow"


# --------------------------------------------------------------------------- pairing by name_map


class Residual(Block):
    """The same block under another name: it no longer pairs with torch's by kind."""


class RenamedResidualNet(nn.Module):
    bug: str = ""

    @nn.compact
    def __call__(self, x, train=False):
        x = nn.Conv(8, (3, 3), padding=1)(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5)(x)
        x = jaxpool.linen.AvgPool2d(3, 2, 1, count_include_pad=False)(nn.relu(x))
        x = Residual(8, self.bug)(x, train)
        x = jaxpool.linen.AdaptiveAvgPool2d(1)(x)
        return nn.Dense(5)(x.reshape(x.shape[0], -1))


def test_name_map_pairs_a_residual_block(residual_net):
    """The add of a residual block lives only in the block's output: a block that pairs by
    nothing is listed as not compared, and name_map pairs it (a module without weights of
    its own)."""
    x = _image(np.float64)
    report = parity.compare_layers(residual_net, RenamedResidualNet("add"), None, x,
                                   gradients=False)
    assert report.unpaired_torch == ["relu", "block"] and report.unpaired_flax == ["Residual_0"]
    assert "not compared, no counterpart found (Flax, 1): Residual_0" in report.format()
    assert report.first_divergence.torch_name == "head"  # the block was never compared
    report = parity.compare_layers(residual_net, RenamedResidualNet("add"), None, x,
                                   name_map={"block": "Residual_0"}, gradients=False)
    assert report.first_divergence.torch_name == "block", report.format()
    assert report.unpaired_flax == [] and "block" not in report.unpaired_torch
    assert parity.compare_layers(residual_net, RenamedResidualNet(), None, x,
                                 name_map={"block": ("Residual_0",)}).ok
    with pytest.raises(ValueError, match="name_map: Flax module 'Residual_9' is never called"):
        parity.compare_layers(residual_net, RenamedResidualNet(), None, x,
                              name_map={"block": "Residual_9"})


# --------------------------------------------------------------------------- another kind


class TorchPoolNet(torch.nn.Module):
    """Ends conv2 -> bn2 -> relu -> AdaptiveAvgPool2d(3) -> flatten -> fc; ``relu_module``:
    the relu is a module (a second call without a Flax counterpart next to the pool)."""

    def __init__(self, relu_module: bool = False):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(4)
        self.pool1 = torch.nn.AvgPool2d(2, 2)
        self.conv2 = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(4)
        self.relu = torch.nn.ReLU() if relu_module else None
        self.pool2 = torch.nn.AdaptiveAvgPool2d(3)
        self.fc = torch.nn.Linear(36, 5)

    def forward(self, x):
        x = self.pool1(torch.relu(self.bn1(self.conv1(x))))
        x = self.bn2(self.conv2(x))
        x = self.relu(x) if self.relu is not None else torch.relu(x)
        return self.fc(torch.flatten(self.pool2(x), 1))


class PoolNet(nn.Module):
    """The port, with ``jaxpool.linen.AvgPool2d(2, 2)`` where torch has AdaptiveAvgPool2d(3):
    the same output shape on a 6x6 or 7x7 map, the same windows only on 6x6."""

    @nn.compact
    def __call__(self, x, train=False):
        def conv_bn(x):
            x = nn.Conv(4, (3, 3), padding=1)(x)
            return nn.BatchNorm(use_running_average=not train, epsilon=1e-5)(x)

        x = jaxpool.linen.AvgPool2d(2, 2)(nn.relu(conv_bn(x)))
        x = jaxpool.linen.AvgPool2d(2, 2)(nn.relu(conv_bn(x)))
        return nn.Dense(5)(x.transpose(0, 3, 1, 2).reshape(x.shape[0], -1))  # torch's flatten


# Shadow mode under -m slow: a pair by position is a pair like any other there, and the
# default run takes shadow mode in the shadow and wrong-backward tests.
@pytest.mark.parametrize("mode", ["chained", pytest.param("shadow", marks=pytest.mark.slow)])
def test_a_layer_ported_as_another_kind_is_compared_in_its_place(mode):
    """The one call left over on each side between the same pairs, with the same shapes, is
    compared by its position, and the row says so (both kinds)."""
    torch_net = randomise(TorchPoolNet())
    # without gradients: the rows read here are the outputs (the twin below takes the
    # gradients of a pair by position)
    report = parity.compare_layers(torch_net, PoolNet(), None, _image(np.float64, (2, 3, 14, 14)),
                                   mode=mode, gradients=False)
    first = report.first_divergence
    assert (first.kind, first.torch_name, first.flax_path) == ("output", "pool2", "AvgPool2d_1"), \
        report.format()
    assert first.by_position == ("AdaptiveAvgPool2d", "AvgPool2d")
    assert report.to_dict()["first_divergence"]["by_position"] == {"torch": "AdaptiveAvgPool2d",
                                                                   "flax": "AvgPool2d"}
    assert report.unpaired_torch == [] and report.unpaired_flax == []
    text = report.format()
    assert "first divergence: output of pool2 (torch AdaptiveAvgPool2d) / AvgPool2d_1 (Flax " \
           "AvgPool2d), paired by position" in text
    assert " pool2 *" in text and " AvgPool2d_1 *" in text
    assert "* paired by position" in text
    assert "pool2 (AdaptiveAvgPool2d) / AvgPool2d_1 (AvgPool2d)" in text


def test_a_layer_paired_by_position_passes_where_it_agrees():
    """The clean twin: on a 6x6 map the two pools take the same windows."""
    twin = parity.compare_layers(randomise(TorchPoolNet()), PoolNet(), None,
                                 _image(np.float64, (2, 3, 12, 12)))
    assert twin.ok, twin.format()
    marked = [(r.kind, r.torch_name) for r in twin.rows if r.by_position]
    assert marked == [("output", "pool2"), ("input gradient", "pool2")]
    assert all(r.by_position is None for r in twin.rows if r.torch_name != "pool2")


class Activation(nn.Module):
    """torch's ``torch.relu`` written as a module."""

    @nn.compact
    def __call__(self, x):
        return nn.relu(x)


class TorchActivationNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.relu1 = torch.nn.ReLU()
        self.bn1 = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.bn1(self.relu1(self.conv1(x)))).mean((2, 3)))


class ActivationNet(nn.Module):
    """relu1 written as a function, the function after bn1 written as a module."""

    @nn.compact
    def __call__(self, x, train=False):
        x = nn.relu(nn.Conv(4, (3, 3), padding=1)(x))
        x = Activation()(nn.BatchNorm(use_running_average=not train, epsilon=1e-5)(x))
        return nn.Dense(5)(x.mean((1, 2)))


def test_a_module_written_as_a_function_is_listed_not_paired():
    """relu1 has nothing between conv1 and bn1 on the Flax side, and Activation_0 nothing
    between bn1 and fc on torch's: both are listed, neither is paired, though their shapes
    agree."""
    report = parity.compare_layers(randomise(TorchActivationNet()), ActivationNet(), None,
                                   _image(np.float64))
    assert report.ok, report.format()
    assert report.unpaired_torch == ["relu1"] and report.unpaired_flax == ["Activation_0"]
    assert all(r.by_position is None for r in report.rows)
    assert "not compared, no counterpart found (torch, 1): relu1" in report.format()


def test_a_gap_of_two_calls_is_listed_and_named_at_the_first_divergence():
    """torch's relu module and adaptive pool against the port's AvgPool2d alone: which is
    which is a guess, so none is paired; the first divergence (fc) says they ran right
    before it."""
    report = parity.compare_layers(randomise(TorchPoolNet(relu_module=True)), PoolNet(), None,
                                   _image(np.float64, (2, 3, 14, 14)), gradients=False)
    assert "first divergence: output of fc (torch) / Dense_0 (Flax); right before it, not " \
           "compared: relu, pool2 (torch); AvgPool2d_1 (Flax)" in report.format(), report.format()
    assert report.to_dict()["first_divergence"]["unpaired_before"] == {
        "torch": ["relu", "pool2"], "flax": ["AvgPool2d_1"]}
    assert report.unpaired_torch == ["relu", "pool2"] and report.unpaired_flax == ["AvgPool2d_1"]
    assert all(r.by_position is None for r in report.rows)


# --------------------------------------------------------------------------- an nnx port


class TorchSequenceNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(3, 6, 3, padding=1)
        self.norm = torch.nn.GroupNorm(2, 6)
        self.pool = torch.nn.MaxPool1d(2)
        self.ln = torch.nn.LayerNorm(6)
        self.fc = torch.nn.Linear(6, 4)

    def forward(self, x):
        x = self.pool(torch.relu(self.norm(self.conv(x))))
        return self.fc(self.ln(x.transpose(1, 2)).mean(1))


class SequenceNet(nnx.Module):
    """Channels-last throughout; ``bug="norm"`` groups the GroupNorm wrongly."""

    def __init__(self, bug: str = ""):
        r = nnx.Rngs(KEY)
        self.conv = nnx.Conv(3, 6, (3,), padding=[(1, 1)], rngs=r)
        self.norm = nnx.GroupNorm(6, num_groups=3 if bug == "norm" else 2, epsilon=1e-5, rngs=r)
        self.pool = jaxpool.nnx.MaxPool1d(2)
        self.ln = nnx.LayerNorm(6, epsilon=1e-5, rngs=r)
        self.fc = nnx.Linear(6, 4, rngs=r)

    def __call__(self, x):
        x = self.pool(jax.nn.relu(self.norm(self.conv(x))))
        return self.fc(self.ln(x).mean(1))


# float32 under -m slow: the linen ports above take it against torch in float64 by default
@pytest.mark.parametrize("dtype", [np.float64, pytest.param(np.float32, marks=pytest.mark.slow)])
def test_nnx_port(dtype):
    torch_net = randomise(TorchSequenceNet())
    x = _image(dtype, (2, 3, 10))  # length 10 and 5 after pooling: no channel count
    model = parity.load_torch_weights(torch_net, SequenceNet())
    report = parity.compare_layers(torch_net, model, None, x)
    assert report.ok, report.format()
    assert [r.torch_name for r in report.rows if r.kind == "output"] == [
        "conv", "norm", "pool", "ln", "fc", ""]
    report = parity.compare_layers(torch_net, parity.load_torch_weights(torch_net, SequenceNet("norm")),
                                   None, x, gradients=False)  # an output's row names it
    assert report.first_divergence.torch_name == "norm", report.format()


def test_bad_arguments(residual_net):
    x = _image(np.float64)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        parity.compare_layers(ResidualNet(), ResidualNet(), None, x)
    with pytest.raises(TypeError, match="x must be a floating-point, integer or boolean array, "
                                        "got dtype complex128"):
        parity.compare_layers(residual_net, ResidualNet(), None, x.astype(np.complex128))
    with pytest.raises(TypeError, match="dtype must be a floating-point dtype, got 'int32'"):
        parity.compare_layers(residual_net, ResidualNet(), None, x, dtype="int32")
    with pytest.raises(TypeError, match="torch_kwargs must be a mapping, got list"):
        parity.compare_layers(residual_net, ResidualNet(), None, x, torch_kwargs=[1])
    with pytest.raises(ValueError, match="variables must be None for an nnx model"):
        parity.compare_layers(TorchSequenceNet(), SequenceNet(), {"params": {}}, x)
