"""parity.pairing on recorded calls made up here (no model runs): which calls pair by
position and which stay listed; the loader never pairs weights so; and the model side's
modules import one another bottom-up, without a circle."""

from __future__ import annotations

import ast
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import parity
from parity.calls import Call
from parity.pairing import WeightMap, pair_calls

PARITY = pathlib.Path(parity.__file__).parent


def call(path: str, type_name: str, start: int, shape_in: tuple, shape_out: tuple) -> Call:
    return Call(path, type_name, start, [np.empty(shape_in)], [("", np.empty(shape_out))])


def nhwc(shape: tuple) -> tuple:
    return shape[:1] + shape[2:] + shape[1:2]


def flax_calls(torch_calls: list[Call], names: dict[str, tuple[str, str]]) -> list[Call]:
    """The Flax side of ``torch_calls`` (same order, channels-last): names[torch name] =
    (Flax path, type); calls not in ``names`` are left out."""
    return [call(names[c.path][0], names[c.path][1], c.start, nhwc(c.inputs[0].shape),
                 nhwc(c.outputs[0][1].shape)) for c in torch_calls if c.path in names]


X, Y, P = (1, 3, 8, 8), (1, 4, 8, 8), (1, 4, 3, 3)
# A VGG-like torch model, in the order calls return: features (a Sequential) holds conv
# and an adaptive pool; the port is flat and has a fixed pool where torch has the adaptive.
TORCH = [call("features.0", "Conv2d", 2, X, Y), call("features.1", "AdaptiveAvgPool2d", 3, Y, P),
         call("features", "Sequential", 1, X, P), call("fc", "Linear", 4, P, (1, 5)),
         call("", "TorchNet", 0, X, (1, 5))]
NAMES = {"features.0": ("Conv_0", "Conv"), "features.1": ("AvgPool2d_0", "AvgPool2d"),
         "fc": ("Dense_0", "Dense"), "": ("", "Net")}
WEIGHTS = {"features.0": "Conv_0", "fc": "Dense_0"}  # as the weight pairing would fix them


def pairs_of(t_calls, f_calls, name_map=WEIGHTS):
    pairs, unpaired_torch, unpaired_flax = pair_calls(t_calls, f_calls, WeightMap([]), name_map)
    return ([(p.torch.path, p.flax.path, p.by_position) for p in pairs], unpaired_torch,
            unpaired_flax)


def test_the_one_call_left_on_each_side_pairs_by_position():
    pairs, unpaired_torch, unpaired_flax = pairs_of(TORCH, flax_calls(TORCH, NAMES))
    assert pairs == [("features.0", "Conv_0", False), ("features.1", "AvgPool2d_0", True),
                     ("fc", "Dense_0", False), ("", "", False)]
    # the Sequential holds compared calls: structure, not counted in the gap, still listed
    assert unpaired_torch == ["features"] and unpaired_flax == []


def test_other_shapes_or_an_order_that_differs_do_not_pair():
    f_calls = flax_calls(TORCH, NAMES)
    f_calls[1] = call("AvgPool2d_0", "AvgPool2d", 3, nhwc(Y), (1, 2, 2, 4))
    assert pairs_of(TORCH, f_calls)[1] == ["features.1", "features"]
    # the pairs on either side of the gap come in another order on the Flax side
    f_calls = flax_calls(TORCH, NAMES)
    f_calls[0], f_calls[2] = f_calls[2], f_calls[0]
    assert pairs_of(TORCH, f_calls)[1] == ["features.1", "features"]


def test_two_calls_on_one_side_do_not_pair():
    t_calls = TORCH[:2] + [call("features.2", "ReLU", 5, P, P)] + TORCH[2:]
    pairs, unpaired_torch, unpaired_flax = pairs_of(t_calls, flax_calls(TORCH, NAMES))
    assert not any(by_position for *_, by_position in pairs)
    assert unpaired_torch == ["features.1", "features.2", "features"]
    assert unpaired_flax == ["AvgPool2d_0"]
    out, _, _ = pair_calls(t_calls, flax_calls(TORCH, NAMES), WeightMap([]), WEIGHTS)
    fc = next(p for p in out if p.torch.path == "fc")
    assert fc.before == (("features.1", "features.2"), ("AvgPool2d_0",))


def test_a_call_with_a_fixed_counterpart_never_pairs_by_position():
    """features.1 given by name_map a Flax module that it does not find there: it stays
    unpaired, and so does the Flax call in its place."""
    pairs, unpaired_torch, unpaired_flax = pairs_of(
        TORCH, flax_calls(TORCH, NAMES), {**WEIGHTS, "features.1": "Elsewhere_0"})
    assert not any(by_position for *_, by_position in pairs)
    assert unpaired_torch == ["features.1", "features"] and unpaired_flax == ["AvgPool2d_0"]


class TorchNormNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = (torch.nn.Linear(4, 4), torch.nn.LayerNorm(4),
                                         torch.nn.Linear(4, 2))

    def forward(self, x):
        return self.fc2(self.norm(self.fc1(x)))


class GroupNormNet(nn.Module):
    """A GroupNorm where torch has a LayerNorm: the same leaves and shapes, another kind."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(nn.GroupNorm(num_groups=1)(nn.Dense(4)(x)))


def test_the_loader_never_pairs_weights_by_position():
    x = np.ones((2, 4), np.float32)
    variables = GroupNormNet().init(jax.random.key(0), jnp.asarray(x))
    with pytest.raises(ValueError, match=r"(?s)torch tensors left unmatched.*norm\.weight"):
        parity.load_torch_weights(TorchNormNet(), variables, model=GroupNormNet(), x=x)
    with pytest.raises(ValueError, match=r"Flax leaves left unset"):
        parity.compare_layers(TorchNormNet(), GroupNormNet(), None, x.astype(np.float64))


def _imports() -> dict[str, set[str]]:
    """parity's top-level modules -> the parity modules each imports (anywhere in it)."""
    modules = {p.stem for p in PARITY.glob("*.py")}
    graph = {}
    for name in modules:
        found = set()
        for node in ast.walk(ast.parse((PARITY / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                found |= ({node.module.split(".")[0]} if node.module
                          else {a.name for a in node.names})
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("parity."):
                found.add(node.module.split(".")[1])
        graph[name] = found & modules
    return graph


def test_the_model_side_imports_bottom_up_without_a_circle():
    graph = _imports()
    model_side = {"layout", "calls", "record_torch", "record_flax", "pairing", "weights",
                  "layers"}
    below = {"layout": set(), "calls": set(), "record_torch": {"calls"},
             "record_flax": {"calls", "layout"}, "pairing": {"calls", "layout"}}
    for name, allowed in below.items():
        assert graph[name] & model_side <= allowed, (name, graph[name])
    done: set[str] = set()

    def visit(name, path):
        assert name not in path, " -> ".join(path + [name])
        if name not in done:
            for dep in graph[name]:
                visit(dep, path + [name])
            done.add(name)

    for name in graph:
        visit(name, [])
