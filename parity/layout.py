"""The bottom of the model side: each framework's layers and the layout rules between them.

``TorchLayer`` is a torch module's own tensors (with the tensors it shares with an earlier
module: ``TorchLayer.ties``), ``FlaxLayer`` a Flax module's own leaves (linen variables or
an nnx model; ``parity.description`` reads both sides' layers), and a ``LayoutRule`` says
how one kind of torch layer's tensors become one Flax layer's leaves (the table is in
``parity.weights``; ``register`` adds a rule for a type of one's own; a module of no known
type holding a 2-d ``weight`` may pair with a Flax ``kernel`` as it is or transposed,
``inferred_rules``). ``flax_layout`` is the array layout rule: how an array of torch's
becomes the Flax side's (channels-first moved last). Nothing here reads a model, pairs
layers or runs one: ``parity.record_torch`` / ``parity.record_flax``, ``parity.description``
and ``parity.pairing`` build on it.

Equinox ports have rules of their own (``side="equinox"``): Equinox keeps torch's layouts
but for three things, a convolution's bias (``[out, 1, ..., 1]``), a transposed
convolution's kernel (a convolution's ``[out, in/g, *k]``, spatially flipped) and
``MultiheadAttention`` (torch's packed ``in_proj_weight`` is Equinox's ``query_proj``,
``key_proj`` and ``value_proj`` weights one above the other).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np
import torch

__all__ = ["EQUINOX", "INFERRED", "LAYOUT_RULES", "RAW", "raw_rule", "FlaxLayer", "LayoutRule",
           "TorchLayer", "flax_layout", "get_value", "inferred_rules", "is_eqx_module",
           "is_nnx_module", "nnx_modules", "register", "registered_rules", "set_value",
           "split_part", "unregister"]


# --------------------------------------------------------------------------- layout rules


def _same(a):
    return a


def _conv_to_flax(w):  # [out, in, *k] -> [*k, in, out]
    return w.transpose(tuple(range(2, w.ndim)) + (1, 0))


def _conv_to_torch(k):  # [*k, in, out] -> [out, in, *k]
    return k.transpose((k.ndim - 1, k.ndim - 2) + tuple(range(k.ndim - 2)))


def _conv_transpose_to_flax(w):  # [in, out, *k] -> [*k, in, out], flipped
    k = w.transpose(tuple(range(2, w.ndim)) + (0, 1))
    return np.flip(k, tuple(range(k.ndim - 2)))


def _conv_transpose_to_torch(k):
    k = np.flip(k, tuple(range(k.ndim - 2)))
    return k.transpose((k.ndim - 2, k.ndim - 1) + tuple(range(k.ndim - 2)))


EQUINOX = "equinox"


@dataclasses.dataclass(frozen=True)
class LayoutRule:
    """How one kind of torch layer's tensors become one Flax (or Equinox) layer's leaves.

    ``leaves``: torch tensor name -> leaf name, or a tuple of leaf names for a tensor that
    is those leaves stacked in equal parts along axis 0 (torch's packed attention
    projection); each part is then its own tensor, "name[k/n]" (``parts``)."""

    kind: str
    torch_types: tuple[type, ...]
    leaves: Mapping[str, str | tuple[str, ...]]
    to_flax: dict[str, Callable[[np.ndarray], np.ndarray]]  # by torch tensor name
    to_torch: dict[str, Callable[[np.ndarray], np.ndarray]]
    flax_types: tuple[str, ...] = ()  # Flax class names this rule is for
    weight_ndims: tuple[int, ...] = (1,)  # ranks torch's ``weight`` may have
    side: str | None = "flax"  # the layers it is for: "flax", "equinox", None (either)

    def flax_leaf(self, tensor_name: str) -> str | None:
        """The leaf a tensor (or a part of one, "name[k/n]") goes to."""
        name, k, n = split_part(tensor_name)
        leaf = self.leaves.get(name)
        if isinstance(leaf, tuple):
            return leaf[k] if n == len(leaf) else None
        return leaf if n == 1 else None

    def parts(self, tensor_names) -> list[tuple[str, str | None]]:
        """(torch tensor or part, leaf) for each of ``tensor_names``: a tensor stacked from
        several leaves gives one part per leaf ("in_proj_weight[0/3]"); a tensor the rule
        does not name gives (name, None)."""
        out: list[tuple[str, str | None]] = []
        for name in tensor_names:
            leaf = self.leaves.get(name)
            if isinstance(leaf, tuple):
                out += [(f"{name}[{k}/{len(leaf)}]", part) for k, part in enumerate(leaf)]
            else:
                out.append((name, leaf))
        return out

    def convert(self, tensor_name: str, array: np.ndarray, to: str) -> np.ndarray:
        fns = self.to_flax if to == "flax" else self.to_torch
        return np.ascontiguousarray(fns.get(split_part(tensor_name)[0], _same)(array))


_PART = re.compile(r"(.+)\[(\d+)/(\d+)\]")


def split_part(name: str) -> tuple[str, int, int]:
    """A tensor name or part: "in_proj_weight[1/3]" -> ("in_proj_weight", 1, 3), the second
    of three equal parts along axis 0; "weight" -> ("weight", 0, 1)."""
    m = _PART.fullmatch(name)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else (name, 0, 1)


def _part_rows(length: int, k: int, n: int) -> slice:
    size = length // n
    return slice(k * size, (k + 1) * size)


_NORM = {"weight": "scale", "bias": "bias"}
_CONVS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
_CONV_TRANSPOSES = (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)

LAYOUT_RULES: tuple[LayoutRule, ...] = (
    LayoutRule("linear", (torch.nn.Linear,), {"weight": "kernel", "bias": "bias"},
               {"weight": np.transpose}, {"weight": np.transpose}, ("Dense", "Linear"), (2,)),
    LayoutRule("conv", _CONVS, {"weight": "kernel", "bias": "bias"},
               {"weight": _conv_to_flax}, {"weight": _conv_to_torch}, ("Conv",), (3, 4, 5)),
    LayoutRule("conv_transpose", _CONV_TRANSPOSES, {"weight": "kernel", "bias": "bias"},
               {"weight": _conv_transpose_to_flax}, {"weight": _conv_transpose_to_torch},
               ("ConvTranspose",), (3, 4, 5)),
    # ConvTranspose(transpose_kernel=True) keeps torch's kernel unflipped: the conv layout.
    LayoutRule("conv_transpose_unflipped", _CONV_TRANSPOSES, {"weight": "kernel", "bias": "bias"},
               {"weight": _conv_to_flax}, {"weight": _conv_to_torch}, ("ConvTranspose",),
               (3, 4, 5)),
    LayoutRule("batch_norm", (torch.nn.modules.batchnorm._BatchNorm,),
               {**_NORM, "running_mean": "mean", "running_var": "var"}, {}, {}, ("BatchNorm",)),
    LayoutRule("layer_norm", (torch.nn.LayerNorm,), _NORM, {}, {}, ("LayerNorm",)),
    LayoutRule("group_norm", (torch.nn.GroupNorm,), _NORM, {}, {}, ("GroupNorm",)),
    LayoutRule("embedding", (torch.nn.Embedding,), {"weight": "embedding"}, {}, {}, ("Embed",),
               (2,)),
)



# --------------------------------------------------------------------------- Equinox


def _bias_to_eqx(ndim: int):  # [out] -> [out, 1, ..., 1]: Equinox's convolution bias
    return lambda b: b.reshape((-1,) + (1,) * ndim)


def _flatten(b):
    return b.reshape(-1)


def _conv_transpose_to_eqx(w, groups: int = 1):
    """torch [in, out/g, *k] -> Equinox [out, in/g, *k], spatially flipped: Equinox computes a
    transposed convolution as a convolution of the dilated input."""
    i, og, k = w.shape[0], w.shape[1], w.shape[2:]
    w = w.reshape((groups, i // groups, og) + k).swapaxes(1, 2).reshape(
        (groups * og, i // groups) + k)
    return np.flip(w, tuple(range(2, w.ndim)))


def _conv_transpose_to_torch_from_eqx(w, groups: int = 1):
    w = np.flip(w, tuple(range(2, w.ndim)))
    o, ig, k = w.shape[0], w.shape[1], w.shape[2:]
    return w.reshape((groups, o // groups, ig) + k).swapaxes(1, 2).reshape(
        (groups * ig, o // groups) + k)


_WEIGHT_BIAS = {"weight": "weight", "bias": "bias"}
_QKV = ("query_proj", "key_proj", "value_proj")

EQUINOX_RULES: tuple[LayoutRule, ...] = (
    LayoutRule("equinox linear", (torch.nn.Linear,), _WEIGHT_BIAS, {}, {}, ("Linear",), (2,),
               EQUINOX),
    *(LayoutRule("equinox conv", (conv,), _WEIGHT_BIAS, {"bias": _bias_to_eqx(nd)},
                 {"bias": _flatten}, ("Conv",), (nd + 2,), EQUINOX)
      for nd, conv in enumerate(_CONVS, 1)),
    *(LayoutRule("equinox conv_transpose", (conv,), _WEIGHT_BIAS,
                 {"weight": _conv_transpose_to_eqx, "bias": _bias_to_eqx(nd)},
                 {"weight": _conv_transpose_to_torch_from_eqx, "bias": _flatten},
                 ("ConvTranspose",), (nd + 2,), EQUINOX)
      for nd, conv in enumerate(_CONV_TRANSPOSES, 1)),
    LayoutRule("equinox batch_norm", (torch.nn.modules.batchnorm._BatchNorm,),
               {**_WEIGHT_BIAS, "running_mean": "running_mean", "running_var": "running_var"},
               {}, {}, ("BatchNorm",), (1,), EQUINOX),
    LayoutRule("equinox layer_norm", (torch.nn.LayerNorm,), _WEIGHT_BIAS, {}, {},
               ("LayerNorm",), (), EQUINOX),
    LayoutRule("equinox group_norm", (torch.nn.GroupNorm,), _WEIGHT_BIAS, {}, {},
               ("GroupNorm",), (1,), EQUINOX),
    LayoutRule("equinox rms_norm", (torch.nn.RMSNorm,), {"weight": "weight"}, {}, {},
               ("RMSNorm",), (), EQUINOX),
    LayoutRule("equinox embedding", (torch.nn.Embedding,), {"weight": "weight"}, {}, {},
               ("Embedding",), (2,), EQUINOX),
    # torch's packed projection is query, key and value one above the other; with kdim or
    # vdim it holds them apart; out_proj is a Linear that torch never calls as a module.
    LayoutRule("equinox multihead_attention", (torch.nn.MultiheadAttention,),
               {"in_proj_weight": tuple(f"{p}/weight" for p in _QKV),
                "in_proj_bias": tuple(f"{p}/bias" for p in _QKV),
                "q_proj_weight": "query_proj/weight", "k_proj_weight": "key_proj/weight",
                "v_proj_weight": "value_proj/weight",
                "out_proj.weight": "output_proj/weight", "out_proj.bias": "output_proj/bias"},
               {}, {}, ("MultiheadAttention",), (), EQUINOX),
)


_GROUPED: dict[tuple[int, int], LayoutRule] = {}


def _grouped(rule: LayoutRule, groups: int) -> LayoutRule:
    """An Equinox transposed convolution's rule for ``groups`` groups (the kernel's layout
    depends on them); one object per rule and count, so that layers of one type share it."""
    key = (id(rule), groups)
    if key not in _GROUPED:
        _GROUPED[key] = _grouped_rule(rule, groups)
    return _GROUPED[key]


def _grouped_rule(rule: LayoutRule, groups: int) -> LayoutRule:
    return dataclasses.replace(
        rule, to_flax={**rule.to_flax, "weight": functools.partial(_conv_transpose_to_eqx,
                                                                  groups=groups)},
        to_torch={**rule.to_torch, "weight": functools.partial(
            _conv_transpose_to_torch_from_eqx, groups=groups)})


def is_eqx_module(obj) -> bool:
    """Whether ``obj`` is an ``equinox.Module`` (False where Equinox is not installed)."""
    import sys

    eqx = sys.modules.get("equinox")  # a module of its type exists only once it is imported
    return eqx is not None and isinstance(obj, eqx.Module)


RAW = "raw"
INFERRED = "inferred"  # the prefix of an inferred rule's kind


def raw_rule(tensor_names) -> LayoutRule:
    """Raw parameters: each tensor is the Flax leaf of the same name, as it is (a module of
    no known type, such as ViT's embeddings with ``cls_token`` and ``position_embeddings``)."""
    return LayoutRule(RAW, (), {n: n for n in tensor_names}, {}, {}, (), (), None)


_KERNEL_LEAVES = {"weight": "kernel", "bias": "bias"}
_INFERRED_RULES = (
    LayoutRule(f"{INFERRED}: kernel as it is", (), _KERNEL_LEAVES, {}, {}, (), (2,)),
    LayoutRule(f"{INFERRED}: kernel transposed", (), _KERNEL_LEAVES, {"weight": np.transpose},
               {"weight": np.transpose}, (), (2,)),
    # an Equinox Linear's weight is [out, in], as torch's Linear holds it
    LayoutRule(f"{INFERRED}: weight as it is", (), _WEIGHT_BIAS, {}, {}, ("Linear",), (2,),
               EQUINOX),
    LayoutRule(f"{INFERRED}: weight transposed", (), _WEIGHT_BIAS, {"weight": np.transpose},
               {"weight": np.transpose}, ("Linear",), (2,), EQUINOX),
)


def inferred_rules(tensors: Mapping[str, Any]) -> list[LayoutRule]:
    """The rules a module of no known type may follow besides ``raw_rule``: a 2-d ``weight``
    (and a ``bias``) as a Flax ``kernel`` (and ``bias``), or an Equinox Linear's ``weight``,
    as it is or transposed (GPT-2's ``Conv1D`` holds a Linear's weight as [in, out]). The
    shapes pick one; where both fit (a square weight), ``parity.pairing`` decides from the
    layers of the same types that fit one only, or refuses."""
    w = tensors.get("weight")
    if w is None or len(tuple(w.shape)) != 2 or not set(tensors) <= set(_KERNEL_LEAVES):
        return []
    return list(_INFERRED_RULES)


_REGISTERED: list[LayoutRule] = []


def registered_rules() -> tuple[LayoutRule, ...]:
    """The rules added with ``register``, the latest first."""
    return tuple(_REGISTERED)


def register(torch_type: type, leaves: Mapping[str, str], *,
             to_flax: Mapping[str, Callable[[np.ndarray], np.ndarray]] | None = None,
             to_torch: Mapping[str, Callable[[np.ndarray], np.ndarray]] | None = None,
             flax_types: tuple[str, ...] = (), kind: str | None = None) -> LayoutRule:
    """Add a layout rule for the torch modules of ``torch_type`` (and its subclasses); it
    goes before the built-in rules and the inferred ones::

        parity.layout.register(Conv1D, {"weight": "kernel", "bias": "bias"},
                               to_flax={"weight": np.transpose},
                               to_torch={"weight": np.transpose})

    ``leaves``: torch tensor name -> Flax leaf name; ``to_flax`` / ``to_torch``: by torch
    tensor name, how an array becomes the other side's (as it is where not given; each
    needs the other); ``flax_types``: the Flax class names the rule is for (any where
    empty). Returns the rule."""
    if not (isinstance(torch_type, type) and issubclass(torch_type, torch.nn.Module)):
        raise TypeError(f"torch_type must be a torch.nn.Module subclass, got {torch_type!r}")
    if not isinstance(leaves, Mapping) or not leaves or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in leaves.items()):
        raise TypeError("leaves must be a non-empty {torch tensor name: Flax leaf name} "
                        f"mapping of strings, got {leaves!r}")
    to_flax, to_torch = dict(to_flax or {}), dict(to_torch or {})
    for name, fns in (("to_flax", to_flax), ("to_torch", to_torch)):
        stray = set(fns) - set(leaves)
        if stray:
            raise ValueError(f"{name}: {sorted(stray)} are not tensors of leaves "
                             f"({sorted(leaves)})")
        if not all(callable(f) for f in fns.values()):
            raise TypeError(f"{name}: every value must be callable, got {fns!r}")
    if set(to_flax) != set(to_torch):
        raise ValueError("to_flax and to_torch must convert the same tensors (one undoes the "
                         f"other), got {sorted(to_flax)} and {sorted(to_torch)}")
    rule = LayoutRule(kind or f"registered: {torch_type.__name__}", (torch_type,), dict(leaves),
                      to_flax, to_torch, tuple(flax_types), (), None)
    _REGISTERED.insert(0, rule)
    return rule


def unregister(rule: LayoutRule) -> None:
    """Remove a rule ``register`` returned."""
    if not any(r is rule for r in _REGISTERED):
        raise ValueError(f"unregister: {rule.kind!r} is not a registered rule")
    _REGISTERED[:] = [r for r in _REGISTERED if r is not rule]


# --------------------------------------------------------------------------- both sides' layers


@dataclasses.dataclass
class TorchLayer:
    """One torch module's own tensors (from ``state_dict``), ``name`` as in named_modules."""

    name: str
    module: torch.nn.Module | None  # None when only a state dict was given
    tensors: dict[str, torch.Tensor]
    # tensor name -> the full name of the same tensor in an earlier module (tied weights)
    ties: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def type_name(self) -> str:
        return type(self.module).__name__ if self.module is not None else "?"

    def rules(self) -> list[LayoutRule]:
        """The layout rules this layer may follow: its type's, or, for a module of no known
        type (one holding ``nn.Parameter`` attributes of its own: a class token, position
        embeddings, a layer scale), ``raw_rule``: the same names and shapes."""
        if self.module is None:
            return (list(LAYOUT_RULES + EQUINOX_RULES) + [raw_rule(self.tensors)]
                    + inferred_rules(self.tensors))
        groups = getattr(self.module, "groups", 1)
        known = [_grouped(r, groups) if r.kind == "equinox conv_transpose" and groups != 1
                 else r for r in registered_rules() + LAYOUT_RULES + EQUINOX_RULES
                 if isinstance(self.module, r.torch_types)]
        return known or [raw_rule(self.tensors)] + inferred_rules(self.tensors)

    def tensor(self, part: str) -> torch.Tensor:
        """A tensor by name, or a part of one ("in_proj_weight[0/3]": a view of its rows)."""
        name, k, n = split_part(part)
        t = self.tensors[name]
        return t if n == 1 else t[_part_rows(t.shape[0], k, n)]

    def tensor_shape(self, part: str) -> tuple[int, ...]:
        name, k, n = split_part(part)
        shape = tuple(self.tensors[name].shape)
        return shape if n == 1 else (shape[0] // n,) + shape[1:]

    def grad(self, grads: Mapping[str, Any], part: str):
        """A tensor's (or a part's) gradient from ``grads`` (by full name), or None."""
        name, k, n = split_part(part)
        g = grads.get(self.full_name(name))
        return g if g is None or n == 1 else g[_part_rows(g.shape[0], k, n)]

    @property
    def tied(self) -> bool:
        """Whether every tensor of this layer is an earlier module's (a tied weight)."""
        return bool(self.tensors) and set(self.ties) == set(self.tensors)

    def full_name(self, tensor: str) -> str:
        """The tensor's name in the state dict; a part's with its rows
        ("attn.in_proj_weight[0:16]")."""
        name, k, n = split_part(tensor)
        full = f"{self.name}.{name}" if self.name else name
        if n == 1:
            return full
        rows = _part_rows(self.tensors[name].shape[0], k, n)
        return f"{full}[{rows.start}:{rows.stop}]"


@dataclasses.dataclass
class FlaxLayer:
    """One Flax module's own leaves: name -> (collection, array) for linen, name ->
    ``nnx.Variable`` for nnx. ``path`` is the module path ("layer1_0/conv1")."""

    path: str
    leaves: dict[str, Any]
    module: Any = None  # the nnx or Equinox module (it says which layout a ConvTranspose uses)
    side: str = "flax"  # "equinox" for an Equinox port's layer (its leaves as linen's: tuples)

    def shape(self, leaf: str) -> tuple:
        v = self.leaves[leaf]
        return tuple((v[1] if isinstance(v, tuple) else get_value(v)).shape)

    def describe(self, leaf: str) -> str:
        v = self.leaves[leaf]
        where = f"{v[0]}/{self.path}" if isinstance(v, tuple) else self.path
        return f"{where}/{leaf}".replace("//", "/")


def _nnx():
    try:
        from flax import nnx
    except ImportError:  # pragma: no cover - flax is optional
        return None
    return nnx


def get_value(var):
    """An nnx Variable's array (``get_value`` in newer Flax, ``.value`` before)."""
    return var.get_value() if hasattr(var, "get_value") else var.value


def set_value(var, value) -> None:
    if hasattr(var, "set_value"):
        var.set_value(value)
    else:  # pragma: no cover - older Flax
        var.value = value


def is_nnx_module(obj) -> bool:
    nnx = _nnx()
    return nnx is not None and isinstance(obj, nnx.Module)


def nnx_modules(model) -> list[tuple[str, Any]]:
    """(path, module) for every module of an nnx model, in attribute order (each once)."""
    nnx = _nnx()
    out, seen = [], set()

    def walk(obj, path):
        if isinstance(obj, nnx.Module):
            if id(obj) in seen:
                return
            seen.add(id(obj))
            out.append(("/".join(path), obj))
            items = [(k, v) for k, v in vars(obj).items() if not k.startswith("_")]
        elif isinstance(obj, (list, tuple)):
            items = list(enumerate(obj))
        elif isinstance(obj, Mapping):
            items = list(obj.items())
        else:
            return
        for k, v in items:
            walk(v, path + (str(k),))

    walk(model, ())
    return out


# --------------------------------------------------------------------------- array layout


def flax_layout(torch_shape: tuple, flax_shape: tuple, channels_last: bool) -> str | None:
    """How an array of ``torch_shape`` becomes one of ``flax_shape`` on the Flax side:
    "moved" (axis 1 moved last: ``channels_last`` and rank >= 3), "same" (as it is), or None
    where neither gives ``flax_shape``."""
    torch_shape, flax_shape = tuple(torch_shape), tuple(flax_shape)
    if channels_last and len(torch_shape) >= 3:
        if torch_shape[:1] + torch_shape[2:] + torch_shape[1:2] == flax_shape:
            return "moved"
    return "same" if torch_shape == flax_shape else None
