"""parity.description and parity.pairing.align: each side described once, in one form for
torch and Flax; one alignment per load and per compare_layers, read by everything after it
and printed by format_alignment; the Flax target going one way through parity's files."""

from __future__ import annotations

import dataclasses
import functools
import os
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import parity
from parity import description, layers, pairing, weights
from parity.calls import Call
from parity.convert import x64
from parity.description import (
    ModelDescription,
    ModuleDescription,
    describe_flax,
    describe_torch,
)
from parity.pairing import Alignment, align, format_alignment


class TorchBlock(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(c)
        self.shortcut = torch.nn.Identity()

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))) + self.shortcut(x)


class TorchResNet(torch.nn.Module):
    """A small ResNet: a stem, two residual blocks, a pool and a head."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.block1, self.block2 = TorchBlock(4), TorchBlock(4)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        x = self.block2(self.block1(torch.relu(self.bn(self.conv(x)))))
        return self.fc(self.pool(x).flatten(1))


class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        y = nn.Conv(x.shape[-1], (3, 3), padding=1, use_bias=False)(x)
        return nn.relu(nn.BatchNorm(use_running_average=True, epsilon=1e-5)(y)) + x


class ResNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.BatchNorm(use_running_average=True, epsilon=1e-5)(
            nn.Conv(4, (3, 3), padding=1)(x)))
        x = Block()(x)
        x = Block()(x)
        return nn.Dense(3)(x.mean((1, 2)))


@functools.cache
def _initialised(x_flax_shape):
    """The port's variables, in float64: initialised once for the module (the init compiles
    for seconds), on a key of XLA's own generator (a threefry key's program compiles for
    seconds more)."""
    with x64():
        variables = jax.jit(ResNet().init)(jax.random.key(0, impl="unsafe_rbg"),
                                           jnp.ones(x_flax_shape))
        return jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), variables)


def _case():
    torch.manual_seed(0)
    torch_net = TorchResNet().double().eval()
    with torch.no_grad():  # running statistics of torch's own drawing, not the defaults
        for m in torch_net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_()
                m.running_var.uniform_(0.5, 2.0)
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 5))
    x_flax = np.moveaxis(x, 1, -1)
    variables = jax.tree_util.tree_map(np.copy, _initialised(x_flax.shape))  # each its own
    return torch_net, x, x_flax, variables


def _shape_of(a) -> tuple:
    return tuple(a.shape)


def test_both_sides_give_one_form():
    torch_net, x, x_flax, variables = _case()
    t_desc = describe_torch(torch_net, torch.from_numpy(x))
    f_desc = describe_flax(variables, ResNet(), x_flax)
    for desc, side in ((t_desc, "torch"), (f_desc, "flax")):
        assert isinstance(desc, ModelDescription) and desc.side == side
        assert all(isinstance(m, ModuleDescription) for m in desc.modules)
        assert all(isinstance(c, Call) for c in desc.calls)
        # every called module is a module of the description, and the order is the calls'
        assert {c.path for c in desc.calls} <= {m.name for m in desc.modules}
        assert desc.order == list(dict.fromkeys(
            c.path for c in sorted(desc.calls, key=lambda c: c.start)))
    # torch's parameters and buffers as torch holds them (num_batches_tracked aside)
    state = {k: tuple(v.shape) for k, v in torch_net.state_dict().items()
             if not k.endswith("num_batches_tracked")}
    assert {f"{m.name}.{k}".lstrip("."): s for m in t_desc.modules
            for k, s in m.params.items()} == state
    assert [m.type_name for m in t_desc.modules][:3] == ["TorchResNet", "Conv2d", "BatchNorm2d"]
    # Flax's leaves as the variables hold them, modules in the order the model calls them
    leaves = {"/".join(str(k.key) for k in path[1:]): tuple(a.shape)
              for path, a in jax.tree_util.tree_flatten_with_path(dict(variables))[0]}
    assert {f"{m.name}/{k}".lstrip("/"): s for m in f_desc.modules
            for k, s in m.params.items()} == leaves
    with_weights = [m.name for m in f_desc.modules if m.params]
    assert with_weights == ["Conv_0", "BatchNorm_0", "Block_0/Conv_0", "Block_0/BatchNorm_0",
                            "Block_1/Conv_0", "Block_1/BatchNorm_0", "Dense_0"]
    # the calls' shapes: torch's outputs as torch's own hooks see them, Flax's channels-last
    seen: dict[str, tuple] = {}

    def record(name):
        def hook(module, args, y):
            seen.setdefault(name, tuple(y.shape))
        return hook

    hooks = [m.register_forward_hook(record(n)) for n, m in torch_net.named_modules()]
    torch_net(torch.from_numpy(x))
    for h in hooks:
        h.remove()
    assert {c.path: _shape_of(c.outputs[0][1]) for c in t_desc.calls} == seen
    f_out = {c.path: _shape_of(c.outputs[0][1]) for c in f_desc.calls}
    assert f_out["Conv_0"] == (2, 5, 5, 4) and f_out[""] == (2, 3)
    # without an input, no run: the modules alone
    assert describe_torch(torch_net).calls is None and describe_flax(variables).calls is None


def test_an_nnx_model_and_a_state_dict_give_the_same_form():
    model = nnx.Sequential(nnx.Linear(4, 3, rngs=nnx.Rngs(0)), nnx.LayerNorm(3, rngs=nnx.Rngs(0)))
    f_desc = describe_flax(model, x=np.ones((2, 4), np.float32))
    assert [(m.name, m.type_name) for m in f_desc.modules] == [
        ("", "Sequential"), ("layers/0", "Linear"), ("layers/1", "LayerNorm")]
    assert f_desc.modules[1].params == {"kernel": (4, 3), "bias": (3,)}
    torch_net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    t_desc = describe_torch(torch_net.state_dict())
    assert [(m.name, m.type_name, m.params) for m in t_desc.modules] == [
        ("0", None, {"weight": (3, 4), "bias": (3,)}), ("1", None, {"weight": (3,), "bias": (3,)})]
    assert [dataclasses.fields(d) for d in (f_desc, t_desc)] == [dataclasses.fields(t_desc)] * 2


def test_tied_tensors_are_described_as_shared():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(5, 4)
            self.head = torch.nn.Linear(4, 5, bias=False)
            self.head.weight = self.embed.weight

    t_desc = describe_torch(Tied())
    head = next(m for m in t_desc.modules if m.name == "head")
    assert head.shared == {"weight": "embed.weight"} and head.params == {"weight": (5, 4)}
    assert "weight 5x4 (= embed.weight)" in t_desc.format()


def _count(monkeypatch, module, name):
    """Count the calls of ``module.name`` (and keep what each returned)."""
    seen: list = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(module, name, counted)
    return seen


def test_compare_layers_aligns_once_and_prints_that_alignment(monkeypatch):
    torch_net, x, _, _ = _case()
    alignments = _count(monkeypatch, layers, "align")
    matched = _count(monkeypatch, pairing, "_match_weights")
    monkeypatch.setattr(pairing, "match_weights", None)  # never called on this path
    traces = _count(monkeypatch, description.record_flax, "trace")
    torch_runs = _count(monkeypatch, description.record_torch, "run")
    described_runs = _count(monkeypatch, description, "_trace")
    report = parity.compare_layers(torch_net, ResNet(), None, x)
    assert report.ok, report.format()
    assert len(alignments) == 1 and len(matched) == 1
    # each side ran once (float64: no reference run), and those runs are what is described
    assert len(traces) == 1 and len(torch_runs) == 1 and described_runs == []
    alignment = alignments[0]
    assert isinstance(alignment, Alignment)
    assert report.alignment == format_alignment(alignment) == alignment.format()
    text = report.alignment
    for p in alignment.weights.pairs:
        assert f"{p.torch.name} ({p.torch.type_name}) -> {p.flax.path}" in text
    for p in alignment.calls:
        assert (f"{p.torch.path or '(model)'} ({p.torch.type_name}) -> "
                f"{p.flax.path or '(model)'} ({p.flax.type_name}) [{p.signal}]") in text
    # what is left, with why: the shortcuts the port has no module for
    assert report.unpaired_torch == list(alignment.unpaired_torch)
    assert {"block1.shortcut", "block2.shortcut"} <= set(alignment.unpaired_torch)
    assert ("  block1.shortcut: no Flax call of its kind or name with fitting shapes in its "
            "place") in text
    # the rows read the alignment: every weight pair's tensors, every call pair's output
    assert {r.torch_name for r in report.rows if r.kind == "weight"} == {
        p.torch.full_name(t) for p in alignment.weights.pairs for t, _ in p.tensors()}
    assert {r.torch_name for r in report.rows if r.kind == "output"} == {
        p.torch.path for p in alignment.calls}


def test_the_loader_and_the_saver_align_once(monkeypatch):
    torch_net, x, x_flax, variables = _case()
    alignments = _count(monkeypatch, weights, "align")
    loaded = parity.load_torch_weights(torch_net, variables, model=ResNet(), x=x_flax)
    assert len(alignments) == 1 and alignments[0].calls is None  # torch did not run
    assert "calls: not aligned" in format_alignment(alignments[0])
    back = parity.to_torch_weights(loaded, TorchResNet().double().eval(), model=ResNet(),
                                   x=x_flax)
    assert len(alignments) == 2
    xt = torch.from_numpy(x)
    torch.testing.assert_close(back(xt), torch_net(xt), rtol=0, atol=0)
    # and the loaded port computes what torch computes
    with x64():
        y = ResNet().apply(loaded, jnp.asarray(x_flax))
    np.testing.assert_allclose(np.asarray(y), torch_net(xt).detach().numpy(), rtol=1e-12,
                               atol=1e-12)


def test_align_on_descriptions_equals_match_weights():
    torch_net, _, x_flax, variables = _case()
    by_align = align(describe_torch(torch_net), describe_flax(variables, ResNet(), x_flax))
    order = describe_flax(variables, ResNet(), x_flax).order
    assert by_align.weights.format() == pairing.match_weights(torch_net, variables,
                                                              order=order).format()


def _entered_files(fn, target) -> list[str]:
    """The parity files ``target`` enters during ``fn()``: a call of a function that holds it
    from a function of another file (returning to a caller enters nothing)."""
    root = os.path.dirname(parity.__file__)
    entered: list[str] = []

    def profile(frame, event, arg):
        if event != "call" or not frame.f_code.co_filename.startswith(root):
            return
        if any(v is target for v in frame.f_locals.values()):
            here, caller = frame.f_code.co_filename, frame.f_back
            if caller is None or caller.f_code.co_filename != here:
                entered.append(os.path.relpath(here, root))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return entered


def test_the_target_enters_each_file_once():
    torch_net, _, x_flax, variables = _case()
    files = _entered_files(lambda: parity.load_torch_weights(torch_net, variables,
                                                             model=ResNet(), x=x_flax),
                           variables)
    assert files[0] == "weights.py"
    assert len(files) == len(set(files)), files
    assert "pairing.py" not in files  # the alignment reads descriptions, never the model


def test_bad_arguments_to_the_descriptions():
    with pytest.raises(TypeError, match="torch.nn.Module or a state dict"):
        describe_torch(np.zeros(3))
    with pytest.raises(TypeError, match="a state dict does not run"):
        describe_torch(torch.nn.Linear(2, 2).state_dict(), np.ones((1, 2)))
    with pytest.raises(TypeError, match="linen variables"):
        describe_flax({"batch_stats": {}})
    with pytest.raises(ValueError, match="model and x go together"):
        describe_flax({"params": {}}, model=ResNet())
