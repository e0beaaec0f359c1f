"""Weights across: torch parameters and buffers into Flax models and Equinox ports, and back.

    variables = parity.load_torch_weights(torch_model, variables)   # linen: new variables
    parity.load_torch_weights(torch_model, nnx_model)               # nnx: updated in place
    port, state = parity.load_torch_weights(torch_model, (port, state), x=batch)  # Equinox: new
    parity.to_torch_weights(variables_or_nnx_model, torch_model)    # back, in place

Each side is described once (``parity.description``: its modules, parameters and ties, and
for the Flax model, where ``model=`` and ``x=`` are given, the calls of one abstract run),
and the two descriptions are aligned once (``parity.pairing.align``); the load reads the
alignment's weight pairs. Layers pair by ``name_map``, then by names that agree (up to
separators, index style and a shared prefix), then the one layer that fits by kind and shape,
then, where the model and an example input are given (``model=``, ``x=``; for nnx, ``x=``
alone), torch's registration order against the order the model calls its modules, unless the
names say otherwise. A variables dict's own order is never trusted (``jax.jit(init)``,
``tree_map`` and train steps return its keys sorted). A layer left open raises a ValueError
that lists its candidates with the ``name_map`` entries that would settle it; a run of the
model that fails raises its error with what to pass (``flax_kwargs=``). Anything left over
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
raw ``nn.Parameter`` attributes        the leaves of the same names and shapes, as they are
a module of no known type with a 2-d   ``kernel`` (and ``bias``), as it is or transposed,
``weight`` (and ``bias``): GPT-2's     as the shapes say; a square weight as the layers
``Conv1D`` ([in, out])                 of the same types say, else refused
=====================================  ===================================================

Equinox keeps torch's layouts (``weight`` and ``bias`` of the same shapes) but for a
convolution's bias (``[out, 1, ..., 1]``), a transposed convolution's kernel
(``[out, in/g, *k]``, spatially flipped) and ``MultiheadAttention`` (torch's packed
``in_proj_weight`` is ``query_proj``, ``key_proj`` and ``value_proj`` one above the
other, ``out_proj`` is ``output_proj``); a BatchNorm's running statistics go into the
port's ``eqx.nn.State`` (``parity.equinox_tree``). A load returns a new module and state
(``eqx.tree_at``).

``parity.layout.register`` adds a rule for a type of one's own. A torch tensor registered
under several names (tied weights: T5's ``shared`` and ``encoder.embed_tokens``) is one
tensor: loaded once, under its first name; the others are reported (``WeightMap.ties``).
A target may hold shapes only (``jax.eval_shape``'s ShapeDtypeStruct leaves): recording the
call order needs no values, and the load returns arrays.

Biases map to ``bias`` unchanged. jaxpool's pooling layers have no weights. A
ConvTranspose with as many input as output channels fits both kernel layouts: for linen
variables the default (flipped) layout is assumed; an nnx model says which it uses.

The layer types and the rules are ``parity.layout``'s (their names are also here); this
module is the top of the loading side: the descriptions (``parity.description``) and the
alignment (``parity.pairing``) come from below it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from .convert import to_jax, to_numpy, to_torch
from .description import describe_flax, describe_torch, flax_layers, torch_layers
from .equinox_tree import fill_eqx, split_target
# The layer types and layout rules live in parity.layout; they keep their names here too.
from .layout import (EQUINOX, LAYOUT_RULES, FlaxLayer, LayoutRule, TorchLayer, get_value,
                     is_nnx_module, nnx_modules, set_value)
from .pairing import Alignment, align

__all__ = ["LAYOUT_RULES", "FlaxLayer", "LayoutRule", "TorchLayer", "fill", "flax_layers",
           "get_value", "is_nnx_module", "leaf_values", "load_torch_weights", "nnx_modules",
           "set_value",
           "to_torch_weights", "torch_layers"]


# --------------------------------------------------------------------------- moving values


def load_torch_weights(source, target, *, model=None, x=None,
                       name_map: Mapping[str, Any] | None = None,
                       flax_kwargs: Mapping[str, Any] | None = None, vmap: bool = True):
    """Put a torch model's parameters and buffers into a Flax model or an Equinox port.

    Args:
      source: a ``torch.nn.Module`` or its ``state_dict()``.
      target: linen ``variables`` (``{"params": ..., "batch_stats": ...}``, e.g. from
        ``model.init``), an ``nnx.Module``, or an Equinox port: an ``eqx.Module``, or
        ``(module, state)`` for one holding ``eqx.nn.BatchNorm`` layers.
      model, x: the linen model and an example input in its own layout (for nnx and
        Equinox, ``x`` alone; for Equinox, a batch): layers then pair in the order the model
        calls them. Without them, a layer pairs only where nothing else fits (see the module
        docstring).
      name_map: ``{torch module name: Flax module path}`` pairs that override the matching
        (paths as "a/b" or tuples).
      flax_kwargs: more keyword arguments for the model's call on ``x``.
      vmap: an Equinox port takes one example and is mapped over ``x``'s first axis
        (``jax.vmap``); False: it takes the batch.

    Returns:
      linen: new variables (same structure, values from torch, in the target's dtypes).
      nnx: ``target`` itself, updated in place.
      Equinox: a new module (``eqx.tree_at``), or a new ``(module, state)``; the given ones
      are left as they are.

    Raises:
      ValueError: listing every torch tensor left unmatched, every Flax leaf left unset and
        every shape that disagrees, or every pairing that only a guess could make.
    """
    # The Flax side first: a run that fails says so before anything else is read.
    flax_desc = describe_flax(target, model, x, flax_kwargs, vmap=vmap)
    return fill(align(describe_torch(source), flax_desc, name_map), target)


def fill(alignment: Alignment, target, only: set | None = None, dtype=None):
    """Copy the torch side of the alignment's weight pairs (``parity.pairing.align``) into
    ``target`` (see ``load_torch_weights``): the variables or nnx model it was made from, or
    one of the same structure (its leaves found by module path and name); ``only``: just
    these (Flax module path, leaf) pairs; ``dtype``: the values' dtype (by default the
    receiving leaf's)."""
    pairs = alignment.weights.pairs

    def wanted(pair, leaf):
        return only is None or (pair.flax.path, leaf) in only

    equinox = any(p.flax.side == EQUINOX for p in pairs) if pairs else True
    port = split_target(target) if equinox else None
    if port is not None:  # an Equinox port: a new module and state
        values = {(p.flax.path, f): _to_flax_array(p, t, dtype or p.flax.leaves[f][1].dtype)
                  for p in pairs for t, f in p.tensors() if wanted(p, f)}
        module, state = fill_eqx(*port, values)
        return (module, state) if isinstance(target, tuple) else module
    if not isinstance(target, Mapping):  # an nnx model
        modules = dict(nnx_modules(target))
        for pair in pairs:
            for t_name, f_name in pair.tensors():
                if wanted(pair, f_name):
                    var = getattr(modules[pair.flax.path], f_name)
                    set_value(var, _to_flax_array(pair, t_name, dtype or get_value(var).dtype))
        return target
    new = {p.flax.path: {f: _to_flax_array(p, t, dtype or p.flax.leaves[f][1].dtype)
                         for t, f in p.tensors() if wanted(p, f)} for p in pairs}
    return _rebuild(target, (), new)


def leaf_values(target) -> dict[tuple[str, str], Any]:
    """{(Flax module path, leaf name): array} of linen variables or an nnx model."""
    return {(f.path, name): (leaf[1] if isinstance(leaf, tuple) else get_value(leaf))
            for f in flax_layers(target) for name, leaf in f.leaves.items()}


def _to_flax_array(pair, tensor_name: str, dtype):
    a = to_numpy(pair.torch.tensor(tensor_name))
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
                     flax_kwargs: Mapping[str, Any] | None = None,
                     vmap: bool = True) -> torch.nn.Module:
    """Write Flax weights (linen ``variables``, an nnx model, or an Equinox port: its module,
    or ``(module, state)``) into a torch module, in place, with the inverse layout rules of
    ``load_torch_weights`` (and its pairing: ``model``, ``x``, ``name_map``, ``vmap``).
    Returns ``torch_module``."""
    if not isinstance(torch_module, torch.nn.Module):
        raise TypeError(f"torch_module must be a torch.nn.Module, got {type(torch_module).__name__}")
    flax_desc = describe_flax(source, model, x, flax_kwargs, vmap=vmap)
    alignment = align(describe_torch(torch_module), flax_desc, name_map)
    with torch.no_grad():
        for pair in alignment.weights.pairs:
            for t_name, f_name in pair.tensors():
                leaf = pair.flax.leaves[f_name]
                value = to_numpy(leaf[1] if isinstance(leaf, tuple) else get_value(leaf))
                tensor = pair.torch.tensor(t_name)  # a part is a view of its tensor's rows
                tensor.copy_(to_torch(pair.rule.convert(t_name, value, "torch")))
    return torch_module
