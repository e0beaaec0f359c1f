"""Weights across: torch parameters and buffers into Flax models, and back.

    variables = parity.load_torch_weights(torch_model, variables)   # linen: new variables
    parity.load_torch_weights(torch_model, nnx_model)               # nnx: updated in place
    parity.to_torch_weights(variables_or_nnx_model, torch_model)    # back, in place

Layers are paired by ``parity.pairing``: torch's in registration order (the order of
``state_dict``), Flax's in the order the model calls its modules, when the model and an
example input are given (``model=``, ``x=``; for nnx, ``x=`` alone). A variables dict's own
order is never trusted (``jax.jit(init)``, ``tree_map`` and train steps return its keys
sorted): without the model, only pairs that nothing else can make are made (equal names, or
the one layer of the other side that fits by kind and shape), and a ValueError lists the
layers left open with the ``name_map`` entries that would settle them.
``name_map={torch module name: Flax module path}`` pairs layers by hand. Anything left over
raises one ``ValueError`` listing every torch tensor left unmatched, every Flax leaf left
unset and every shape that disagrees. Values are cast to the receiving side's dtype, as
``torch.nn.Module.load_state_dict`` does (``compare_layers`` reports a weight rounded so,
and runs on torch's own value).

Layout rules (torch -> Flax):

=====================================  ===================================================
torch                                  Flax
=====================================  ===================================================
Linear ``weight [out, in]``            Dense ``kernel [in, out]`` (transposed)
Conv1d/2d/3d ``weight [out, in/g, *k]``  Conv ``kernel [*k, in/g, out]``
ConvTranspose1d/2d/3d ``weight         ConvTranspose ``kernel [*k, in, out]``, spatially
[in, out, *k]``                        flipped (``transpose_kernel=False``, Flax's default;
                                       with ``transpose_kernel=True`` the kernel is
                                       ``[*k, out, in]``, unflipped)
BatchNorm1d/2d/3d ``weight, bias,      BatchNorm ``scale, bias`` (params), ``mean, var``
running_mean, running_var``            (batch_stats); ``num_batches_tracked`` has no
                                       counterpart and is skipped
LayerNorm, GroupNorm ``weight, bias``  ``scale, bias``
Embedding ``weight [n, d]``            Embed ``embedding [n, d]``
=====================================  ===================================================

Biases map to ``bias`` unchanged. jaxpool's pooling layers have no weights. A
ConvTranspose with as many input as output channels fits both kernel layouts: for linen
variables the default (flipped) layout is assumed; an nnx model says which it uses.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np
import torch

from .convert import to_jax, to_numpy, to_torch

__all__ = ["LAYOUT_RULES", "FlaxLayer", "LayoutRule", "TorchLayer", "fill", "flax_layers",
           "load_torch_weights", "to_torch_weights", "torch_layers"]


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

# Buffers that exist on one side only.
_SKIPPED_TORCH = ("num_batches_tracked",)


# --------------------------------------------------------------------------- both sides' layers


@dataclasses.dataclass
class TorchLayer:
    """One torch module's own tensors (from ``state_dict``), ``name`` as in named_modules."""

    name: str
    module: torch.nn.Module | None  # None when only a state dict was given
    tensors: dict[str, torch.Tensor]

    @property
    def type_name(self) -> str:
        return type(self.module).__name__ if self.module is not None else "?"

    def rules(self) -> list[LayoutRule]:
        if self.module is None:
            return list(LAYOUT_RULES)
        return [r for r in LAYOUT_RULES if isinstance(self.module, r.torch_types)]

    def full_name(self, tensor: str) -> str:
        return f"{self.name}.{tensor}" if self.name else tensor


def torch_layers(source) -> list[TorchLayer]:
    """The layers of a torch module or state dict, in registration order."""
    if isinstance(source, torch.nn.Module):
        modules, state = dict(source.named_modules()), source.state_dict(keep_vars=True)
    elif isinstance(source, Mapping):
        modules, state = {}, source
    else:
        raise TypeError("the torch side must be a torch.nn.Module or a state dict, got "
                        f"{type(source).__name__}")
    layers: dict[str, TorchLayer] = {}
    for full, tensor in state.items():
        prefix, _, name = full.rpartition(".")
        if name in _SKIPPED_TORCH:
            continue
        if prefix not in layers:
            layers[prefix] = TorchLayer(prefix, modules.get(prefix), {})
        layers[prefix].tensors[name] = tensor
    return list(layers.values())


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


def flax_layers(target, order: list[str] | None = None) -> list[FlaxLayer]:
    """The layers of linen ``variables`` or an nnx model, in module order: ``order`` (module
    paths, e.g. in the order a run calls them) where given; else, for linen, the order of
    the variables (creation order as ``init`` returns it; keys that come sorted, as after a
    ``tree_map`` or ``jit``, in natural order: ``Conv_2`` before ``Conv_10``); for nnx,
    attribute order."""
    layers = _flax_layers(target)
    if order is not None:
        rank = {p: i for i, p in enumerate(order)}
        layers.sort(key=lambda f: rank.get(f.path, len(rank)))
    return layers


def _flax_layers(target) -> list[FlaxLayer]:
    if is_nnx_module(target):
        nnx = _nnx()
        layers = []
        for path, m in nnx_modules(target):
            leaves = {k: v for k, v in vars(m).items()
                      if isinstance(v, (nnx.Param, nnx.BatchStat))}
            if leaves:
                layers.append(FlaxLayer(path, leaves, m))
        return layers
    if not isinstance(target, Mapping) or "params" not in target:
        raise TypeError("the Flax side must be linen variables (a dict with 'params') or an "
                        f"nnx.Module, got {type(target).__name__}")
    layers: dict[str, FlaxLayer] = {}
    for collection, tree in target.items():
        if collection == "intermediates":
            continue
        for path, array in _flat(tree, ()):
            module = "/".join(path[:-1])
            layers.setdefault(module, FlaxLayer(module, {}))
            layers[module].leaves[path[-1]] = (collection, array)
    return list(layers.values())


def _natural(key: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", key)]


def _flat(tree, path):
    if isinstance(tree, Mapping):
        keys = [str(k) for k in tree]
        if keys == sorted(keys):  # the creation order is lost: natural order is the next best
            keys.sort(key=_natural)
        by_name = {str(k): v for k, v in tree.items()}
        for k in keys:
            yield from _flat(by_name[k], path + (k,))
    else:
        yield path, tree


# --------------------------------------------------------------------------- moving values


def load_torch_weights(source, target, *, model=None, x=None,
                       name_map: Mapping[str, Any] | None = None,
                       flax_kwargs: Mapping[str, Any] | None = None):
    """Put a torch model's parameters and buffers into a Flax model.

    Args:
      source: a ``torch.nn.Module`` or its ``state_dict()``.
      target: linen ``variables`` (``{"params": ..., "batch_stats": ...}``, e.g. from
        ``model.init``) or an ``nnx.Module``.
      model, x: the linen model and an example input in its own layout (for nnx, ``x``
        alone): layers then pair in the order the model calls them. Without them, a layer
        pairs only where nothing else fits (see the module docstring).
      name_map: ``{torch module name: Flax module path}`` pairs that override the matching
        (paths as "a/b" or tuples).
      flax_kwargs: more keyword arguments for the model's call on ``x``.

    Returns:
      linen: new variables (same structure, values from torch, in the target's dtypes).
      nnx: ``target`` itself, updated in place.

    Raises:
      ValueError: listing every torch tensor left unmatched, every Flax leaf left unset and
        every shape that disagrees, or every pairing that only a guess could make.
    """
    from .pairing import match_weights

    return fill(match_weights(source, target, name_map, _order(target, model, x, flax_kwargs)),
                target)


def _order(target, model, x, kwargs) -> list[str] | None:
    """The order the Flax model calls its modules, where a model and an input say it."""
    from .record_flax import call_order

    if is_nnx_module(target):
        if model is not None and model is not target:
            raise ValueError("model: for an nnx target, pass x alone (the target is the model)")
        return None if x is None else call_order(target, None, to_jax(x), kwargs)
    if (model is None) != (x is None):
        raise ValueError("model and x go together: the linen model and an example input "
                         f"(got model={type(model).__name__}, x={type(x).__name__})")
    return None if model is None else call_order(model, target, to_jax(x), kwargs)


def fill(weights, target, only: set | None = None):
    """Copy the torch side of ``weights`` (a ``parity.pairing.WeightMap``) into ``target``
    (see ``load_torch_weights``); ``only``: just these (Flax module path, leaf) pairs."""
    def wanted(pair, leaf):
        return only is None or (pair.flax.path, leaf) in only

    if is_nnx_module(target):
        for pair in weights.pairs:
            for t_name, f_name in pair.tensors():
                if wanted(pair, f_name):
                    var = pair.flax.leaves[f_name]
                    set_value(var, _to_flax_array(pair, t_name, get_value(var).dtype))
        return target
    new = {p.flax.path: {f: _to_flax_array(p, t, p.flax.leaves[f][1].dtype)
                         for t, f in p.tensors() if wanted(p, f)} for p in weights.pairs}
    return _rebuild(target, (), new)


def _to_flax_array(pair, tensor_name: str, dtype):
    a = to_numpy(pair.torch.tensors[tensor_name])
    return to_jax(pair.rule.convert(tensor_name, a, "flax").astype(dtype))


def _rebuild(tree, path, new):
    """``tree`` (a linen variables dict) with the leaves in ``new`` (module path -> leaf ->
    array) replaced; FrozenDicts stay frozen."""
    if not isinstance(tree, Mapping):
        values = new.get("/".join(path[1:-1]), {})
        return values.get(path[-1], tree)
    out = {k: _rebuild(v, path + (str(k),), new) for k, v in tree.items()}
    if type(tree) is not dict:
        try:
            return type(tree)(out)
        except TypeError:  # pragma: no cover - a mapping that cannot be built from a dict
            return out
    return out


def to_torch_weights(source, torch_module: torch.nn.Module, *, model=None, x=None,
                     name_map: Mapping[str, Any] | None = None,
                     flax_kwargs: Mapping[str, Any] | None = None) -> torch.nn.Module:
    """Write Flax weights (linen ``variables`` or an nnx model) into a torch module, in place,
    with the inverse layout rules of ``load_torch_weights`` (and its pairing: ``model``,
    ``x``, ``name_map``). Returns ``torch_module``."""
    from .pairing import match_weights

    if not isinstance(torch_module, torch.nn.Module):
        raise TypeError(f"torch_module must be a torch.nn.Module, got {type(torch_module).__name__}")
    weights = match_weights(torch_module, source, name_map,
                            _order(source, model, x, flax_kwargs))
    with torch.no_grad():
        for pair in weights.pairs:
            for t_name, f_name in pair.tensors():
                leaf = pair.flax.leaves[f_name]
                value = to_numpy(leaf[1] if isinstance(leaf, tuple) else get_value(leaf))
                tensor = pair.torch.tensors[t_name]
                tensor.copy_(to_torch(pair.rule.convert(t_name, value, "torch")))
    return torch_module
