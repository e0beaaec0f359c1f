"""A module call as a run records it, on either side (``parity.record_torch``,
``parity.record_flax``), and a side's run: the calls of a model's description
(``parity.description``), what ``parity.pairing`` aligns and ``parity.layers`` compares.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np

__all__ = ["Call", "Run", "map_output_leaves"]


@dataclasses.dataclass
class Call:
    """One call of one module, as a run recorded it. ``inputs`` are its positional array
    arguments, ``outputs`` its output leaves ((leaf path, array); shapes and dtypes only in a
    trace); ``input_grads`` and ``output_grads`` (parallel to them, None where not
    differentiated) the loss's cotangents there. ``start`` numbers the calls in the order
    they begin; a run lists them in the order they return. ``own_inputs``: in shadow mode,
    the array arguments the port computed itself, before torch's took their place."""

    path: str  # torch module name, or Flax module path
    type_name: str
    start: int
    inputs: list = dataclasses.field(default_factory=list)
    outputs: list = dataclasses.field(default_factory=list)
    input_grads: list = dataclasses.field(default_factory=list)
    output_grads: list = dataclasses.field(default_factory=list)
    own_inputs: list = dataclasses.field(default_factory=list)
    # Equinox: the jax.vmap calls (numbered in the order they begin) it ran inside,
    # outermost first; its arrays have one leading axis per map, in that order
    batch_maps: tuple[int, ...] = ()


@dataclasses.dataclass
class Run:
    """One side's run: its module calls (in the order they return), the gradients of its
    parameters by name, and ``error`` if the model raised (the calls then stop there)."""

    calls: list[Call]
    grads: dict[str, np.ndarray]
    error: str | None = None


def map_output_leaves(y, fn: Callable[[int, Any], Any],
                      skip: Callable[[Any], bool] | None = None):
    """``y`` with each leaf replaced by ``fn(index, leaf)``, leaves numbered in the order
    ``parity.convert.output_leaves`` lists them (mappings in sorted key order, then tuples,
    lists and named tuples in order; None is no leaf), so that an index into a recorded
    call's outputs finds its leaf. Mappings (a dict, Hugging Face's ``ModelOutput``, a
    dataclass of arrays) are rebuilt as their own type. ``skip``: objects kept as they are
    and not counted (an Equinox ``State`` returned beside the output)."""
    count = [0]

    def walk(node):  # (the node rebuilt, or the node itself where no leaf in it changed)
        if node is None or (skip is not None and skip(node)):
            return node
        if isinstance(node, Mapping):
            keys = list(node)
            try:
                order = sorted(keys)
            except TypeError:  # keys of mixed types: the mapping's own order, as output_leaves
                order = keys
            new = {k: walk(node[k]) for k in order}
            if all(new[k] is node[k] for k in keys):
                return node
            return _rebuilt(node, {k: new[k] for k in keys})
        if isinstance(node, (tuple, list)):
            items = [walk(item) for item in node]
            if all(a is b for a, b in zip(items, node)):
                return node
            if hasattr(type(node), "_fields"):  # a named tuple
                return type(node)(*items)
            return type(node)(items)
        i = count[0]
        count[0] += 1
        return fn(i, node)

    return walk(y)


def _rebuilt(mapping, items: dict):
    """A mapping of ``mapping``'s type holding ``items``."""
    if dataclasses.is_dataclass(mapping) and not isinstance(mapping, type):
        # Hugging Face's ModelOutput, a flax.struct dataclass: fields by name
        return dataclasses.replace(mapping, **items)
    try:
        return type(mapping)(items)
    except TypeError:  # pragma: no cover - a mapping that cannot be built from a dict
        return mapping
