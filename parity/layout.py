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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np
import torch

__all__ = ["INFERRED", "LAYOUT_RULES", "RAW", "raw_rule", "FlaxLayer", "LayoutRule", "TorchLayer",
           "flax_layout", "get_value", "inferred_rules", "is_nnx_module", "nnx_modules",
           "register", "registered_rules", "set_value", "unregister"]


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


@dataclasses.dataclass(frozen=True)
class LayoutRule:
    """How one kind of torch layer's tensors become one Flax layer's leaves."""

    kind: str
    torch_types: tuple[type, ...]
    leaves: dict[str, str]  # torch tensor name -> Flax leaf name
    to_flax: dict[str, Callable[[np.ndarray], np.ndarray]]  # by torch tensor name
    to_torch: dict[str, Callable[[np.ndarray], np.ndarray]]
    flax_types: tuple[str, ...] = ()  # Flax class names this rule is for
    weight_ndims: tuple[int, ...] = (1,)  # ranks torch's ``weight`` may have

    def flax_leaf(self, tensor_name: str) -> str | None:
        return self.leaves.get(tensor_name)

    def convert(self, tensor_name: str, array: np.ndarray, to: str) -> np.ndarray:
        fns = self.to_flax if to == "flax" else self.to_torch
        return np.ascontiguousarray(fns.get(tensor_name, _same)(array))


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

RAW = "raw"
INFERRED = "inferred"  # the prefix of an inferred rule's kind


def raw_rule(tensor_names) -> LayoutRule:
    """Raw parameters: each tensor is the Flax leaf of the same name, as it is (a module of
    no known type, such as ViT's embeddings with ``cls_token`` and ``position_embeddings``)."""
    return LayoutRule(RAW, (), {n: n for n in tensor_names}, {}, {}, (), ())


_KERNEL_LEAVES = {"weight": "kernel", "bias": "bias"}
_INFERRED_RULES = (
    LayoutRule(f"{INFERRED}: kernel as it is", (), _KERNEL_LEAVES, {}, {}, (), (2,)),
    LayoutRule(f"{INFERRED}: kernel transposed", (), _KERNEL_LEAVES, {"weight": np.transpose},
               {"weight": np.transpose}, (), (2,)),
)


def inferred_rules(tensors: Mapping[str, Any]) -> list[LayoutRule]:
    """The rules a module of no known type may follow besides ``raw_rule``: a 2-d ``weight``
    (and a ``bias``) as a Flax ``kernel`` (and ``bias``), as it is or transposed (GPT-2's
    ``Conv1D`` holds a Linear's weight as [in, out]). The shapes pick one; where both fit
    (a square weight), ``parity.pairing`` decides from the layers of the same types that
    fit one only, or refuses."""
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
                      to_flax, to_torch, tuple(flax_types), ())
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
            return list(LAYOUT_RULES) + [raw_rule(self.tensors)] + inferred_rules(self.tensors)
        known = [r for r in registered_rules() + LAYOUT_RULES
                 if isinstance(self.module, r.torch_types)]
        return known or [raw_rule(self.tensors)] + inferred_rules(self.tensors)

    @property
    def tied(self) -> bool:
        """Whether every tensor of this layer is an earlier module's (a tied weight)."""
        return bool(self.tensors) and set(self.ties) == set(self.tensors)

    def full_name(self, tensor: str) -> str:
        return f"{self.name}.{tensor}" if self.name else tensor


@dataclasses.dataclass
class FlaxLayer:
    """One Flax module's own leaves: name -> (collection, array) for linen, name ->
    ``nnx.Variable`` for nnx. ``path`` is the module path ("layer1_0/conv1")."""

    path: str
    leaves: dict[str, Any]
    module: Any = None  # the nnx module (it says which layout a ConvTranspose uses)

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
