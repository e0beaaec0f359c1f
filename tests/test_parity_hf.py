"""parity on ports nobody here wrote: Hugging Face ``transformers`` 4.x ships a torch and a
Flax ResNet and ViT, written by different people. At small configs, random weights (norms
at trained-like scales and statistics), float64, no download:

* the documented load (``load_torch_weights(torch_model, variables, model=, x=)``) and the
  load by names alone equal Hugging Face's own converter
  (``convert_pytorch_state_dict_to_flax``) leaf for leaf;
* ``compare_layers`` passes the faithful port (chained and shadow);
* a planted kernel change (one kernel scaled by 1 + 1e-6) and a planted epsilon change
  (one norm's epsilon 1e-3) are each the first row named.

Each model is built once per module. The bottleneck ResNet and the rest of the modes are
under ``slow``.
"""

from __future__ import annotations

import copy
import importlib.util
import sys
import types
from pathlib import Path

import jax
import numpy as np
import pytest
import torch

import parity
from parity.convert import x64

transformers = pytest.importorskip("transformers")
flax_utils = pytest.importorskip("transformers.modeling_flax_pytorch_utils")
from flax.traverse_util import flatten_dict, unflatten_dict  # noqa: E402

transformers.logging.set_verbosity_error()


def trained_like(model: torch.nn.Module) -> torch.nn.Module:
    """Norm scales near 1, shifts, running statistics away from 0 and 1: a fresh norm is
    the identity, under which an epsilon or a swap could pass unseen."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.LayerNorm)):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
    return model.double().eval()


def _hf_resnet_basic_names(flat: dict) -> dict:
    """HF's converter names the basic ResNet block's layers as torch does ("layer/0",
    BatchNorm scale as "kernel"), where its own Flax module has "layer/layer_0" and "scale":
    the converter's output with its own model's names."""
    out = {}
    for key, value in flat.items():
        k = list(key)
        if "layers" in k and k[k.index("layers") + 2:k.index("layers") + 4][:1] == ["layer"]:
            i = k.index("layers") + 2
            if k[i + 1].isdigit():
                k[i + 1] = f"layer_{k[i + 1]}"
        if k[-2:] == ["normalization", "kernel"]:
            k[-1] = "scale"
        out[tuple(k)] = value
    return out


class Case:
    def __init__(self, name: str):
        self.name = name
        with x64():
            if name.startswith("resnet"):
                config = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16],
                                                   depths=[1, 2], num_channels=3,
                                                   layer_type=name.split("_")[1])
                self.torch = trained_like(transformers.ResNetModel(config))
                hf = transformers.FlaxResNetModel(config, dtype=jax.numpy.float64,
                                                  _do_init=False)
                self.x = np.random.default_rng(0).standard_normal((2, 3, 16, 16))
            else:
                config = transformers.ViTConfig(hidden_size=16, num_hidden_layers=2,
                                                num_attention_heads=2, intermediate_size=24,
                                                image_size=8, patch_size=4, num_channels=3)
                self.torch = trained_like(transformers.ViTModel(config))
                hf = transformers.FlaxViTModel(config, dtype=jax.numpy.float64, _do_init=False)
                self.x = np.random.default_rng(0).standard_normal((2, 3, 8, 8))
            self.module = hf.module  # the linen module: channels-last input
            # The variables' structure without running init (compiling it is slow).
            shapes = jax.eval_shape(hf.module.init, jax.random.key(0),
                                    np.zeros(np.moveaxis(self.x, 1, -1).shape))
            self.init = jax.tree_util.tree_map(lambda a: np.zeros(a.shape, np.float64),
                                               dict(shapes))
            # The converter reads the model's params for their names and shapes only.
            like = types.SimpleNamespace(params=self.init if len(self.init) > 1
                                         else self.init["params"],
                                         base_model_prefix=hf.base_model_prefix)
            ref = flax_utils.convert_pytorch_state_dict_to_flax(self.torch.state_dict(), like)
            ref = flatten_dict(ref if "params" in ref else {"params": ref})
            if name == "resnet_basic":
                ref = _hf_resnet_basic_names(ref)
            self.reference = {k: np.asarray(v, np.float64) for k, v in ref.items()}
            self.loaded = parity.load_torch_weights(self.torch, self.init, model=self.module,
                                                    x=np.moveaxis(self.x, 1, -1))


@pytest.fixture(scope="module", params=["resnet_basic", pytest.param(
    "resnet_bottleneck", marks=pytest.mark.slow), "vit"])
def case(request):
    return Case(request.param)


def _equal_to_reference(case: Case, variables) -> None:
    flat = {k: np.asarray(v) for k, v in flatten_dict(variables).items()}
    assert set(flat) == set(case.reference)
    differ = [k for k in flat if not np.array_equal(flat[k], case.reference[k])]
    assert not differ, differ


def test_the_documented_load_and_the_load_by_names_equal_hf_converter(case):
    _equal_to_reference(case, case.loaded)
    _equal_to_reference(case, parity.load_torch_weights(case.torch, case.init))
    back = parity.to_torch_weights(case.loaded, copy.deepcopy(case.torch))
    for name, t in back.state_dict().items():
        torch.testing.assert_close(t, case.torch.state_dict()[name], rtol=0, atol=0)


# The default run checks each claim on one model, without gradients; every model, mode and
# the gradients are under slow.
DEFAULT = {"faithful": ("vit", "chained", False), "kernel": ("vit", "chained"),
           "epsilon": ("resnet_basic", "shadow")}


def _slow_unless(request, what, *key):
    marks = request.config.getoption("-m", default="") or ""
    if DEFAULT[what] != key and not ("slow" in marks and "not slow" not in marks):
        pytest.skip("under slow")


@pytest.mark.parametrize("gradients", [False, True])
@pytest.mark.parametrize("mode", ["chained", "shadow"])
def test_the_faithful_port_passes(request, case, mode, gradients):
    _slow_unless(request, "faithful", case.name, mode, gradients)
    report = parity.compare_layers(case.torch, case.module, case.loaded, case.x, mode=mode,
                                   gradients=gradients)
    assert report.ok, report.format()


def _planted_kernel(case: Case) -> tuple[dict, str]:
    flat = dict(flatten_dict(case.loaded))
    key = sorted(k for k in flat if k[-1] == "kernel" and k[1] == "encoder")[1]
    flat[key] = np.asarray(flat[key]) * (1 + 1e-6)
    return unflatten_dict(flat), "/".join(key[1:])


@pytest.mark.parametrize("mode", ["chained", "shadow"])
def test_a_planted_kernel_change_is_named_first(request, case, mode):
    _slow_unless(request, "kernel", case.name, mode)
    variables, path = _planted_kernel(case)
    report = parity.compare_layers(case.torch, case.module, variables, case.x, mode=mode,
                                   gradients=False)
    first = report.first_divergence
    assert (first.kind, first.flax_path) == ("weight", path), report.format()


@pytest.mark.parametrize("mode", ["chained", "shadow"])
def test_a_planted_epsilon_change_is_named_first(request, case, mode):
    _slow_unless(request, "epsilon", case.name, mode)
    torch_model = copy.deepcopy(case.torch)
    norms = [(n, m) for n, m in torch_model.named_modules()
             if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.LayerNorm))]
    name, norm = norms[len(norms) // 2]
    norm.eps = 1e-3
    report = parity.compare_layers(torch_model, case.module, case.loaded, case.x, mode=mode,
                                   gradients=False)
    first = report.first_divergence
    assert (first.kind, first.torch_name) == ("output", name), report.format()


# --------------------------------------------------------------------------- jax-resnet


def _torch_basic_block():
    """examples/port_resnet.py's torchvision BasicBlock (torchvision is not a dependency)."""
    if "port_resnet" not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "examples" / "port_resnet.py"
        spec = importlib.util.spec_from_file_location("port_resnet", path)
        sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # linen looks it up
        spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules["port_resnet"].TorchBasicBlock


class TorchResNet(torch.nn.Module):
    """torchvision's ResNet layout (the stem's 64 channels, then ``stages`` of basic
    blocks: (blocks, channels) each)."""

    def __init__(self, stages=((1, 8), (1, 16)), n_classes=5):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(64)
        self.relu = torch.nn.ReLU(inplace=True)
        self.maxpool = torch.nn.MaxPool2d(3, 2, 1)
        c = 64
        TorchBasicBlock = _torch_basic_block()
        for i, (blocks, width) in enumerate(stages):
            layer = []
            for b in range(blocks):
                layer.append(TorchBasicBlock(c, width, 2 if i > 0 and b == 0 else 1))
                c = width
            setattr(self, f"layer{i + 1}", torch.nn.Sequential(*layer))
        self.n_stages = len(stages)
        self.avgpool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(c, n_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(self.n_stages):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


@pytest.mark.parametrize("stages", [((1, 8), (1, 16)), pytest.param(
    ((2, 64), (2, 128), (2, 256), (2, 512)), marks=pytest.mark.slow, id="resnet18")])
def test_jax_resnet_loads_and_passes_and_names_a_planted_epsilon(stages):
    """jax-resnet's blocks end in a skip-connection module of their own, where torchvision's
    call ReLU: the port passes (neither is taken for the other), and an epsilon planted in
    torch's second block's bn1 is the first row named."""
    jax_resnet = pytest.importorskip("jax_resnet")
    port = jax_resnet.ResNet(jax_resnet.ResNetBlock, stage_sizes=[n for n, _ in stages],
                             n_classes=5, hidden_sizes=tuple(c for _, c in stages))
    torch_model = trained_like(TorchResNet(stages))
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32) if len(stages) > 2
                                                 else (2, 3, 16, 16))
    with x64():
        variables = parity.load_torch_weights(
            torch_model, jax.tree_util.tree_map(
                lambda a: np.zeros(a.shape, np.float64),
                dict(jax.eval_shape(port.init, jax.random.key(0), np.moveaxis(x, 1, -1)))),
            model=port, x=np.moveaxis(x, 1, -1))
    report = parity.compare_layers(torch_model, port, variables, x, gradients=False)
    assert report.ok, report.format()
    torch_model.layer2[0].bn1.eps = 1e-3
    report = parity.compare_layers(torch_model, port, variables, x, gradients=False)
    assert report.first_divergence.torch_name == "layer2.0.bn1", report.format()
