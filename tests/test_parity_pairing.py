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
# Initial values drawn by XLA's own generator: on a threefry key, Flax's initialisers compile
# a program of a second or more per shape on CPU, for values every load here replaces.
KEY = jax.random.key(0, impl="unsafe_rbg")


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
    variables = GroupNormNet().init(KEY, jnp.asarray(x))
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
    model_side = {"layout", "calls", "record_torch", "record_flax", "description", "pairing",
                  "weights", "layers"}
    below = {"layout": set(), "calls": set(), "record_torch": {"calls"},
             "record_flax": {"calls", "layout"},
             "description": {"calls", "layout", "record_torch", "record_flax"},
             "pairing": {"calls", "layout", "description"},
             "weights": {"layout", "description", "pairing"}}
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


# --------------------------------------------------------------------------- the old traps


class TorchBA(torch.nn.Module):
    """Two same-shaped layers registered b, then a."""

    def __init__(self):
        super().__init__()
        self.b = torch.nn.Linear(8, 8).double()
        self.a = torch.nn.Linear(8, 8).double()

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


class AB(nn.Module):
    """The port: calls a, then b, and needs a mask."""

    @nn.compact
    def __call__(self, x, mask):
        return nn.Dense(8, name="b")(jnp.tanh(nn.Dense(8, name="a")(x)) * mask)


def _ab_case():
    from parity.convert import x64

    torch_net = TorchBA()
    x = np.random.default_rng(0).standard_normal((2, 8))
    with x64():
        init = jax.tree_util.tree_map(lambda a: np.zeros(a.shape, np.float64), AB().init(
            KEY, jnp.asarray(x), jnp.ones((2, 8))))
    return torch_net, x, init


def _ab_exact(variables, torch_net):
    for name in ("a", "b"):
        np.testing.assert_array_equal(variables["params"][name]["kernel"],
                                      getattr(torch_net, name).weight.detach().numpy().T)


def test_names_pair_layers_called_in_another_order_than_registered():
    torch_net, x, init = _ab_case()
    _ab_exact(parity.load_torch_weights(torch_net, init), torch_net)
    _ab_exact(parity.load_torch_weights(torch_net, init, model=AB(), x=x,
                                        flax_kwargs={"mask": np.ones((2, 8))}), torch_net)


def test_a_model_that_cannot_run_says_what_to_pass_and_following_it_works():
    """Without the mask the run that records the call order fails: the loader raises that
    error (never the variables' own order), naming flax_kwargs."""
    torch_net, x, init = _ab_case()
    with pytest.raises(ValueError, match=r"(?s)mask.*flax_kwargs="):
        parity.load_torch_weights(torch_net, init, model=AB(), x=x)
    _ab_exact(parity.load_torch_weights(torch_net, init, model=AB(), x=x,
                                        flax_kwargs={"mask": np.ones((2, 8))}), torch_net)


class TorchAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Module()
        self.query, self.key, self.value = (torch.nn.Linear(4, 4).double() for _ in range(3))

    def forward(self, x):
        w = torch.softmax(self.query(x) @ self.key(x).T, -1)
        return w @ self.value(x)


class Attention(nn.Module):
    """Same-shaped siblings, called value, key, query."""

    @nn.compact
    def __call__(self, x):
        v = nn.Dense(4, name="value")(x)
        k = nn.Dense(4, name="key")(x)
        return jax.nn.softmax(nn.Dense(4, name="query")(x) @ k.T, -1) @ v


def test_same_shaped_siblings_pair_by_name_and_compare():
    torch_net = TorchAttention()
    x = np.random.default_rng(1).standard_normal((3, 4))
    report = parity.compare_layers(torch_net, Attention(), None, x)
    assert report.ok, report.format()
    outputs = [(r.torch_name, r.flax_path) for r in report.rows if r.kind == "output"]
    assert ("query", "query") in outputs and ("key", "key") in outputs


class TorchInner(torch.nn.Module):
    """x and y under one module, out beside it: no prefix every name shares."""

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Module()
        self.inner.x, self.inner.y = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
        self.out = torch.nn.Linear(4, 2)

    def forward(self, v):
        return self.out(self.inner.y(self.inner.x(v)))


class Core(nn.Module):
    @nn.compact
    def __call__(self, v):
        return nn.Dense(4, name="x")(nn.Dense(4, name="y")(v))


class CoreNet(nn.Module):
    """Calls y before x, in a module named otherwise: order says inner.x is core/y, the
    names' last words say core/x."""

    @nn.compact
    def __call__(self, v):
        return nn.Dense(2, name="final")(Core(name="core")(v))


def test_order_and_names_disagreeing_refuse_with_the_name_map_that_settles_it():
    torch_net = TorchInner()
    v = np.ones((1, 4), np.float32)
    init = CoreNet().init(KEY, jnp.asarray(v))
    with pytest.raises(ValueError) as info:
        parity.load_torch_weights(torch_net, init, model=CoreNet(), x=v)
    msg = str(info.value)
    assert "inner.x (Linear): core/y, core/x" in msg and 'name_map={"inner.x": "<path>"' in msg
    # the advice, followed
    loaded = parity.load_torch_weights(torch_net, init, model=CoreNet(), x=v,
                                       name_map={"inner.x": "core/x"})
    np.testing.assert_array_equal(loaded["params"]["core"]["x"]["kernel"],
                                  torch_net.inner.x.weight.detach().numpy().T)
    np.testing.assert_array_equal(loaded["params"]["core"]["y"]["kernel"],
                                  torch_net.inner.y.weight.detach().numpy().T)


class TorchIdentityBlock(torch.nn.Module):
    """A block with an identity shortcut module called first and an identity at its end."""

    def __init__(self, c_in, c_out):
        super().__init__()
        self.shortcut = torch.nn.Identity()
        self.conv = torch.nn.Conv2d(c_in, c_out, 1)
        self.act = torch.nn.Identity()

    def forward(self, x):
        s = self.shortcut(x)
        return self.act(self.conv(x)) + s.mean(1, keepdim=True)


class IdentityBlock(nn.Module):
    """The port: no shortcut module, the end's identity a module."""

    c: int

    @nn.compact
    def __call__(self, x):
        return Identity()(nn.Conv(self.c, (1, 1))(x)) + x.mean(-1, keepdims=True)


class Identity(nn.Module):
    @nn.compact
    def __call__(self, x):
        return x


class IdentityNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = IdentityBlock(4)(x)
        return IdentityBlock(8)(x)


def test_an_identity_on_one_side_only_shifts_nothing_after_it():
    """torch's shortcut of block 0 is left listed; each end identity pairs with its own
    (the k-th of a kind would take block 1's for block 0's shortcut)."""
    torch_net = torch.nn.Sequential(TorchIdentityBlock(3, 4), TorchIdentityBlock(4, 8)).double()
    x = np.random.default_rng(2).standard_normal((2, 3, 5, 5))
    report = parity.compare_layers(torch_net, IdentityNet(), None, x)
    assert report.ok, report.format()
    outputs = [(r.torch_name, r.flax_path) for r in report.rows if r.kind == "output"]
    assert ("0.act", "IdentityBlock_0/Identity_0") in outputs
    assert ("1.act", "IdentityBlock_1/Identity_0") in outputs
    assert set(report.unpaired_torch) == {"0.shortcut", "1.shortcut"}
    # the alignment, printable: what was paired, by which signal, what was left
    assert "0.conv (Conv2d) -> IdentityBlock_0/Conv_0 [conv, by only fit]" in report.alignment
    assert "0.act (Identity) -> IdentityBlock_0/Identity_0 (Identity) [aligned]" \
        in report.alignment
    assert "left unpaired, torch: 0.shortcut, 1.shortcut" in report.alignment


class TorchTokens(torch.nn.Module):
    """Raw parameters: a class token and position embeddings."""

    def __init__(self):
        super().__init__()
        self.cls_token = torch.nn.Parameter(torch.randn(1, 1, 4, dtype=torch.float64))
        self.pos = torch.nn.Parameter(torch.randn(1, 3, 4, dtype=torch.float64))
        self.proj = torch.nn.Linear(4, 4).double()

    def forward(self, x):
        return self.proj(torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos)


class Tokens(nn.Module):
    @nn.compact
    def __call__(self, x):
        cls = self.param("cls_token", nn.initializers.zeros, (1, 1, 4), jnp.float64)
        pos = self.param("pos", nn.initializers.zeros, (1, 3, 4), jnp.float64)
        x = jnp.concatenate([jnp.broadcast_to(cls, (x.shape[0], 1, 4)), x], 1) + pos
        return nn.Dense(4, name="proj", param_dtype=jnp.float64)(x)


def test_raw_parameters_load_save_back_and_compare():
    torch_net = TorchTokens()
    x = np.random.default_rng(3).standard_normal((2, 2, 4))
    report = parity.compare_layers(torch_net, Tokens(), None, x, channels_last=False)
    assert report.ok, report.format()
    grads = {r.torch_name for r in report.rows if r.kind == "gradient"}
    assert {"cls_token", "pos"} <= grads
    from parity.convert import x64

    with x64():
        init = Tokens().init(KEY, jnp.asarray(x))
    loaded = parity.load_torch_weights(torch_net, init)
    np.testing.assert_array_equal(loaded["params"]["pos"], torch_net.pos.detach().numpy())
    back = parity.to_torch_weights(loaded, TorchTokens())
    torch.testing.assert_close(back.cls_token, torch_net.cls_token, rtol=0, atol=0)
