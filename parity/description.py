"""One description per model, of the same form for torch and for Flax: what
``parity.pairing.align`` aligns, and all that the loader, the saver and ``compare_layers``
know of a model.

    torch_desc = describe_torch(torch_model)                  # modules; calls with x=
    flax_desc = describe_flax(variables, model=port, x=x)     # or an nnx model: x alone
    print(flax_desc.format())

A ``ModelDescription`` lists the model's ``modules`` (``ModuleDescription``: name, class,
parameters {leaf: shape}, the tensors it shares with an earlier module, and its weights as a
``parity.layout`` layer) in the side's module order (torch: registration order; Flax: the
order a run first calls them, where the model ran, else the variables' order), and, where
the model ran, its ``calls`` (``parity.calls.Call``, in the order they return: the module,
the input and output shapes, ``start`` numbering them in the order they begin). Each side
runs at most once here: torch on ``x`` (or the calls of a run already made, ``calls=``),
Flax abstractly (shapes only, ``jax.eval_shape``) on ``x``.

An Equinox port is described as a Flax model is (``describe_flax`` on its module, or
``(module, state)``; its layers from ``parity.equinox_tree``, its calls from
``parity.record_equinox``). torch's ``nn.MultiheadAttention`` is one layer with its
``out_proj``'s tensors (torch never calls that Linear as a module).

Reading each side's layers (``torch_layers``, ``flax_layers``) lives here too; the layer
types and layout rules below it are ``parity.layout``'s, the runs ``parity.record_torch``'s
and ``parity.record_flax``'s.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import torch

from . import record_equinox, record_flax, record_torch
from .calls import Call
from .convert import to_jax
from .equinox_tree import eqx_layers, split_target
from .layout import FlaxLayer, TorchLayer, is_nnx_module, nnx_modules

__all__ = ["ModelDescription", "ModuleDescription", "describe_flax", "describe_torch",
           "flax_layers", "torch_layers"]


@dataclasses.dataclass
class ModuleDescription:
    """One module of a model: ``name`` (torch module name, Flax module path), its class
    (``type_name``; None where the side does not say: a linen module known by its variables
    alone), its own parameters and buffers ``{leaf: shape}``, ``shared``: {leaf: the full
    name of the same tensor in an earlier module} (tied weights), and ``layer``: its weights
    (None for a module without any of its own)."""

    name: str
    type_name: str | None
    params: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    shared: dict[str, str] = dataclasses.field(default_factory=dict)
    layer: TorchLayer | FlaxLayer | None = None


@dataclasses.dataclass
class ModelDescription:
    """A model as one side sees it (``side``: "torch" or "flax"): its ``modules`` in the
    side's module order, its ``calls`` in the order they return (None where it did not
    run), and ``order``: module names in the order a run first calls them (None where
    unknown)."""

    side: str
    modules: list[ModuleDescription]
    calls: list[Call] | None = None
    order: list[str] | None = None

    def layers(self) -> list[Any]:
        """The modules' weights, in module order: ``TorchLayer`` on the torch side,
        ``FlaxLayer`` on the Flax side."""
        return [m.layer for m in self.modules if m.layer is not None]

    def format(self) -> str:
        """The description as text: a line a module (with its parameters' shapes and the
        tensors it shares), then a line a call."""
        lines = [f"{self.side} modules:"]
        for m in self.modules:
            params = ", ".join(f"{k} {'x'.join(map(str, s)) or 'scalar'}"
                               + (f" (= {m.shared[k]})" if k in m.shared else "")
                               for k, s in m.params.items())
            lines.append(f"  {m.name or '(model)'} ({m.type_name or '?'})"
                         + (f": {params}" if params else ""))
        if self.calls is None:
            lines.append(f"{self.side} calls: not recorded (the model did not run)")
            return "\n".join(lines)
        lines.append(f"{self.side} calls (in the order they return):")
        for c in self.calls:
            ins = ", ".join(_shape(a) for a in c.inputs) or "-"
            outs = ", ".join(_shape(a) for _, a in c.outputs) or "-"
            lines.append(f"  #{c.start} {c.path or '(model)'} ({c.type_name}): {ins} -> {outs}")
        return "\n".join(lines)


def _shape(a) -> str:
    shape = tuple(np.shape(a)) if not hasattr(a, "shape") else tuple(a.shape)
    return "x".join(map(str, shape)) or "scalar"


# --------------------------------------------------------------------------- torch


def describe_torch(model, x=None, kwargs: Mapping[str, Any] | None = None, *,
                   calls: list[Call] | None = None) -> ModelDescription:
    """A torch model (``torch.nn.Module``, or its ``state_dict()``: the modules with weights
    alone) described: its modules in registration order; with ``x`` (torch's layout; and
    ``kwargs``, more arguments of its call) its calls, from one run without gradients, or
    ``calls``, those a run already recorded (``parity.record_torch.run``)."""
    layers = torch_layers(model)
    by_name = {t.name: t for t in layers}
    # every name a shared module goes by (named_modules would say it once)
    named = (dict(model.named_modules(remove_duplicate=False))
             if isinstance(model, torch.nn.Module) else {})
    names = list(named) + [t.name for t in layers if t.name not in named]
    modules = []
    for name in names:
        t = by_name.get(name)
        type_name = type(named[name]).__name__ if name in named else None
        modules.append(ModuleDescription(
            name, type_name,
            {} if t is None else {k: tuple(v.shape) for k, v in t.tensors.items()},
            {} if t is None else dict(t.ties), t))
    if calls is None and x is not None:
        if not isinstance(model, torch.nn.Module):
            raise TypeError("x: a state dict does not run; pass the torch.nn.Module")
        calls = record_torch.run(model, x, lambda leaves: [], gradients=False,
                                 kwargs=kwargs).calls
    return ModelDescription("torch", modules, calls, None if calls is None else _order(calls))


def torch_layers(source) -> list[TorchLayer]:
    """The layers of a torch module or state dict, in registration order."""
    if isinstance(source, torch.nn.Module):
        # every name a shared module goes by (named_modules would say it once)
        modules = dict(source.named_modules(remove_duplicate=False))
        state = source.state_dict(keep_vars=True)
    elif isinstance(source, Mapping):
        modules, state = {}, source
    else:
        raise TypeError("the torch side must be a torch.nn.Module or a state dict, got "
                        f"{type(source).__name__}")
    layers: dict[str, TorchLayer] = {}
    first: dict[tuple, str] = {}  # storage key -> the first full name it goes by
    for full, tensor in state.items():
        prefix, _, name = full.rpartition(".")
        if name in _SKIPPED_TORCH:
            continue
        if prefix not in layers:
            layers[prefix] = TorchLayer(prefix, modules.get(prefix), {})
        layers[prefix].tensors[name] = tensor
        key = _storage_key(tensor)
        if key is not None:
            if key in first:
                layers[prefix].ties[name] = first[key]
            else:
                first[key] = full
    # nn.MultiheadAttention reads its out_proj's weights itself (the Linear is never
    # called): one layer, as the ports' attention layers hold all four projections
    for name, t in list(layers.items()):
        inner = layers.get(f"{name}.out_proj" if name else "out_proj")
        if isinstance(t.module, torch.nn.MultiheadAttention) and inner is not None:
            t.tensors.update({f"out_proj.{k}": v for k, v in inner.tensors.items()})
            t.ties.update({f"out_proj.{k}": v for k, v in inner.ties.items()})
            del layers[inner.name]
    return list(layers.values())


# Buffers that exist on one side only.
_SKIPPED_TORCH = ("num_batches_tracked",)


def _storage_key(t) -> tuple | None:
    """What makes two tensors one (the same memory, viewed the same way), or None for a
    tensor without memory of its own to compare (a meta tensor, an empty one)."""
    if not isinstance(t, torch.Tensor) or t.device.type == "meta" or t.numel() == 0:
        return None
    try:
        ptr = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # pragma: no cover - a tensor subclass
        return None
    return (t.device.type, ptr, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


# --------------------------------------------------------------------------- Flax


def describe_flax(target, model=None, x=None, flax_kwargs: Mapping[str, Any] | None = None, *,
                  calls: list[Call] | None = None, order: list[str] | None = None,
                  vmap: bool = True) -> ModelDescription:
    """A Flax model described: ``target``, linen variables (with ``model``, the linen
    Module), an nnx model (``model`` None) or an Equinox port (an ``eqx.Module``, or
    ``(module, state)`` where it holds BatchNorm layers; ``model`` None). With ``x`` (the
    model's own layout; and ``flax_kwargs``, more arguments of its call) its calls, from
    one abstract run (shapes only: a target of ``jax.eval_shape``'s ShapeDtypeStruct
    leaves will do), or ``calls``, those a trace already recorded
    (``parity.record_flax.trace``, ``parity.record_equinox.trace``); ``order``: module
    paths in the order the model calls them, where known without calls. ``vmap``: an
    Equinox port takes one example and is mapped over ``x``'s first axis (False: it takes
    the batch).

    Raises:
      ValueError: for ``model`` without ``x`` (or the reverse), and when the run fails: its
        error, with what to pass.
    """
    port = split_target(target)
    if port is not None:  # an Equinox port, (module, state) or the module alone
        if model is not None and model is not port[0]:
            raise ValueError("model: for an Equinox port, pass x alone (the target is the "
                             "model)")
        read = eqx_layers(*port)  # first: a port holding BatchNorm without its state says so
        if calls is None and x is not None:
            calls = _trace(port, None, x, flax_kwargs, vmap)
        return _described(read, calls, order)
    linen = isinstance(target, Mapping)  # read first: an nnx check costs an import
    # The leaves first, the run last: the target goes to the run and is not read again.
    layers = _linen_or_nnx_layers(target) if linen or is_nnx_module(target) else None
    if not linen and layers is not None:
        if model is not None and model is not target:
            raise ValueError("model: for an nnx target, pass x alone (the target is the model)")
        if calls is None and x is not None:
            calls = _trace(target, None, x, flax_kwargs)
    else:
        if (model is None) != (x is None):
            raise ValueError("model and x go together: the linen model and an example input "
                             f"(got model={type(model).__name__}, x={type(x).__name__})")
        if calls is None and model is not None:
            calls = _trace(model, target, x, flax_kwargs)
    if layers is None:  # neither linen variables nor an nnx model: the reader says so
        layers = _linen_or_nnx_layers(target)
    return _described(layers, calls, order)


def _described(layers: list[FlaxLayer], calls: list[Call] | None,
               order: list[str] | None) -> ModelDescription:
    if calls is not None:
        order = _order(calls)
    called: dict[str, str] = {}  # module path -> class, as the run names it
    for c in sorted(calls or [], key=lambda c: c.start):
        called.setdefault(c.path, c.type_name)
    modules = [ModuleDescription(f.path, type(f.module).__name__ if f.module is not None
                                 else called.get(f.path),
                                 {k: f.shape(k) for k in f.leaves}, {}, f) for f in layers]
    with_weights = {f.path for f in layers}
    modules += [ModuleDescription(p, t) for p, t in called.items() if p not in with_weights]
    if order is not None:  # the order of the run; modules it never called after them
        rank = {p: i for i, p in enumerate(order)}
        modules.sort(key=lambda m: rank.get(m.name, len(rank)))
    return ModelDescription("flax", modules, calls, order)


def _order(calls: list[Call]) -> list[str]:
    """Module paths in the order ``calls`` first begin them."""
    return list(dict.fromkeys(c.path for c in sorted(calls, key=lambda c: c.start)))


def _trace(model, variables, x, kwargs, vmap: bool = True) -> list[Call]:
    """The Flax model's calls from one abstract run (``model``: a linen or nnx model, or an
    Equinox port as (module, state)); its error, with what to pass, if it fails."""
    port = split_target(model) if isinstance(model, tuple) else None
    if port is not None:
        # in inference mode: the order is the same, and dropout needs no key
        calls, error = record_equinox.trace(
            record_equinox.program(*port, kwargs, train=False, vmap=vmap), to_jax(x))
        if error is None:
            return calls
        given = ", ".join(sorted(kwargs or {})) or "none"
        how = ("maps it over x's first axis (jax.vmap): the port takes one example; "
               "pass vmap=False for a port that takes the batch" if vmap else
               "passes x to the port as it is (vmap=False)")
        raise ValueError(
            f"running the Equinox port on x (shape {tuple(np.shape(x))}) to record the order "
            f"it calls its modules raised {error}. parity {how}. Pass the call's other "
            f"arguments as flax_kwargs={{...}} (given: {given}), or leave out x= to pair by "
            "names and shapes alone")
    calls, error = record_flax.trace(record_flax.program(model, variables, kwargs), to_jax(x))
    if error is None:
        return calls
    # The variables' own order is no substitute (jit and tree_map sort them): say why.
    given = ", ".join(sorted(kwargs or {})) or "none"
    if any(isinstance(a, jax.ShapeDtypeStruct) for a in jax.tree_util.tree_leaves(variables)):
        raise ValueError(
            f"running the Flax model on x (shape {tuple(np.shape(x))}) to record the order "
            f"it calls its modules raised {error}. The target holds shapes only "
            "(ShapeDtypeStruct leaves, from jax.eval_shape), which is enough for a model "
            "that does not read its variables' values while it runs; for one that does, "
            "pass arrays (jax.tree_util.tree_map(lambda a: np.zeros(a.shape, a.dtype), "
            "shapes)), or check flax_kwargs (given: " + given + ") and x's layout and "
            "dtype")
    raise ValueError(
        f"running the Flax model on x (shape {tuple(np.shape(x))}, dtype "
        f"{np.asarray(x).dtype if not hasattr(x, 'dtype') else x.dtype}) to record the "
        f"order it calls its modules raised {error}. Pass the call's other arguments as "
        f"flax_kwargs={{...}} (given: {given}) and x in the layout and dtype the model "
        "takes; or leave out model= and x= to pair by names and shapes alone")


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
    port = split_target(target)
    return eqx_layers(*port) if port is not None else _linen_or_nnx_layers(target)


def _linen_or_nnx_layers(target) -> list[FlaxLayer]:
    if not isinstance(target, Mapping) and is_nnx_module(target):
        from flax import nnx

        held = [(path, m, {k: v for k, v in vars(m).items()
                           if isinstance(v, (nnx.Param, nnx.BatchStat))})
                for path, m in nnx_modules(target)]
        return [FlaxLayer(path, leaves, m) for path, m, leaves in held if leaves]
    if not isinstance(target, Mapping) or "params" not in target:
        raise TypeError("the Flax side must be linen variables (a dict with 'params'), an "
                        "nnx.Module or an Equinox port (an eqx.Module, or (module, state)), "
                        f"got {type(target).__name__}")
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
