"""An Equinox port as parity reads and writes it: its modules, each module's own
floating-point arrays, and the running statistics that ``eqx.nn.BatchNorm`` keeps in the
port's ``eqx.nn.State``. Writing returns a new module (``eqx.tree_at``) and a new state; the
user's are never changed.

A module's path joins its pytree keys with "/" (a field's name, a list's index, a dict's
key: "blocks/0/attn"), and a parameter goes by its module's path and its field
("blocks/0/attn/query_proj/weight"), as ``jax.tree_util`` spells the keys. Each place in the
tree is its own module, as Equinox treats it (an object held twice is two modules, whose
gradients are separate). ``eqx.nn.MultiheadAttention`` is one layer holding its four
projections' weights ("query_proj/weight", ..., "output_proj/bias"), as torch's
``nn.MultiheadAttention`` holds them; an ``eqx.nn.BatchNorm``'s layer holds its
``weight`` and ``bias`` and, from the state, ``running_mean`` and ``running_var``: the
statistics its inference mode normalises with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from .convert import x64
from .layout import EQUINOX, FlaxLayer, is_eqx_module

__all__ = ["cast", "eqx_layers", "eqx_modules", "fill_eqx", "is_state", "split_target"]

Step = tuple[str, Any]  # ("attr", field name) or ("item", index or key)

_ATTENTION_PARTS = ("query_proj", "key_proj", "value_proj", "output_proj")
_STATS = ("running_mean", "running_var")


def _eqx():
    import equinox

    return equinox


def is_state(obj) -> bool:
    """Whether ``obj`` is an ``eqx.nn.State``."""
    state_type = _state_type()
    return state_type is not None and isinstance(obj, state_type)


def _state_type():
    import sys

    eqx = sys.modules.get("equinox")
    return None if eqx is None else eqx.nn.State


def split_target(target) -> tuple[Any, Any] | None:
    """(module, state or None) for an Equinox port given as a module or as ``(module,
    state)``; None for anything else (linen variables, an nnx model)."""
    if is_eqx_module(target):
        return target, None
    if (isinstance(target, tuple) and len(target) == 2 and is_eqx_module(target[0])
            and (target[1] is None or is_state(target[1]))):
        return target[0], target[1]
    return None


def eqx_modules(model) -> list[tuple[str, Any, tuple[Step, ...]]]:
    """(path, module, steps from the root) for every module of an Equinox model, in field
    order; ``eqx.nn.StateIndex`` (a handle into the state, no layer) is left out."""
    eqx = _eqx()
    out: list[tuple[str, Any, tuple[Step, ...]]] = []

    def walk(obj, steps):
        if isinstance(obj, eqx.Module):
            if isinstance(obj, eqx.nn.StateIndex):
                return
            out.append((_path(steps), obj, steps))
            for f in dataclasses.fields(obj):
                if not f.metadata.get("static", False):
                    walk(getattr(obj, f.name, None), steps + (("attr", f.name),))
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(v, steps + (("item", i),))
        elif isinstance(obj, Mapping):
            for k, v in obj.items():
                walk(v, steps + (("item", k),))

    walk(model, ())
    return out


def _path(steps) -> str:
    return "/".join(str(key) for _, key in steps)


def _is_param(a) -> bool:
    """A floating-point array (or its shape, from ``eqx.filter_eval_shape``)."""
    if not isinstance(a, (jax.Array, np.ndarray, jax.ShapeDtypeStruct)):
        return False
    return bool(jax.numpy.issubdtype(a.dtype, jax.numpy.inexact))  # bfloat16 included


def _own_arrays(m) -> dict[str, Any]:
    return {f.name: v for f in dataclasses.fields(m) if not f.metadata.get("static", False)
            and _is_param(v := getattr(m, f.name, None))}


def eqx_layers(model, state=None) -> list[FlaxLayer]:
    """The layers of an Equinox port (``parity.layout.FlaxLayer``, ``side="equinox"``): each
    module's own floating-point fields as ("params", array), and a BatchNorm's running
    statistics as ("state", array), read from ``state``.

    Raises:
      ValueError: for a port holding BatchNorm layers without its state.
    """
    eqx = _eqx()
    modules = eqx_modules(model)
    norms = [p or "(model)" for p, m, _ in modules if isinstance(m, eqx.nn.BatchNorm)]
    if norms and state is None:
        raise ValueError(
            f"the Equinox port holds BatchNorm layers ({', '.join(norms)}), whose running "
            "statistics live in its eqx.nn.State: pass the port with its state, (model, "
            "state), as eqx.nn.make_with_state returns them")
    inside = {f"{p}/{part}".lstrip("/") for p, m, _ in modules
              if isinstance(m, eqx.nn.MultiheadAttention) for part in _ATTENTION_PARTS}
    layers = []
    for path, m, _ in modules:
        if path in inside:
            continue
        leaves = {k: ("params", v) for k, v in _own_arrays(m).items()}
        if isinstance(m, eqx.nn.MultiheadAttention):
            for part in _ATTENTION_PARTS:
                leaves.update({f"{part}/{k}": ("params", v)
                               for k, v in _own_arrays(getattr(m, part)).items()})
        if isinstance(m, eqx.nn.BatchNorm):
            mean, var = _running_stats(m, state)
            leaves.update(running_mean=("state", mean), running_var=("state", var))
        if leaves:
            layers.append(FlaxLayer(path, leaves, m, EQUINOX))
    return layers


def _norm_indices(m) -> dict[str, Any]:
    """A BatchNorm's handles into the state, by what they hold: "stats" (mean, var) and,
    by mode, "first_time" ("ema") or "counter" ("batch")."""
    mode = getattr(m, "mode", "ema")
    if mode == "batch":
        return {"mode": mode, "stats": m.batch_state_index, "counter": m.batch_counter}
    stats = getattr(m, "ema_state_index", None) or getattr(m, "state_index", None)
    first = getattr(m, "ema_first_time_index", None) or getattr(m, "first_time_index", None)
    return {"mode": mode, "stats": stats, "first_time": first}


def _running_stats(m, state) -> tuple[Any, Any]:
    """The mean and variance a BatchNorm normalises with in inference mode: in "batch" mode,
    the running averages divided by the debiasing factor its counter gives."""
    idx = _norm_indices(m)
    mean, var = state.get(idx["stats"])
    if idx["mode"] == "batch":
        counter = state.get(idx["counter"])
        if isinstance(counter, jax.ShapeDtypeStruct) or isinstance(mean, jax.ShapeDtypeStruct):
            return mean, var
        n = int(np.asarray(counter))
        if n:
            scale = 1 - m.momentum ** n
            mean, var = mean / scale, var / scale
    return mean, var


def _follow(tree, steps):
    for how, key in steps:
        tree = getattr(tree, key) if how == "attr" else tree[key]
    return tree


def fill_eqx(model, state, values: Mapping[tuple[str, str], Any]) -> tuple[Any, Any]:
    """A new module and state with ``values`` ({(module path, leaf name): array}, leaves as
    ``eqx_layers`` names them) in place. A BatchNorm's running statistics are written as its
    inference mode reads them: in "batch" mode with the counter at 0 (no debiasing), in
    "ema" mode with the first-time flag off (training goes on from them)."""
    eqx = _eqx()
    modules = {p: (m, steps) for p, m, steps in eqx_modules(model)}
    where, new = [], []
    stats: dict[str, dict[str, Any]] = {}
    for (path, leaf), value in values.items():
        m, steps = modules[path]
        if leaf in _STATS and isinstance(m, eqx.nn.BatchNorm):
            stats.setdefault(path, {})[leaf] = value
            continue
        where.append(steps + tuple(("attr", k) for k in leaf.split("/")))
        new.append(value)
    with x64():
        if where:
            model = eqx.tree_at(lambda tree: [_follow(tree, s) for s in where], model, new)
        if stats:
            state = jax.tree_util.tree_map(lambda a: a, state)  # a copy: set() spends its input
            for path, given in stats.items():
                state = _set_stats(modules[path][0], state, given)
    return model, state


def _set_stats(m, state, given: Mapping[str, Any]):
    import jax.numpy as jnp

    idx = _norm_indices(m)
    mean, var = _running_stats(m, state)
    old_mean, old_var = state.get(idx["stats"])
    mean = jnp.asarray(given.get("running_mean", mean), old_mean.dtype)
    var = jnp.asarray(given.get("running_var", var), old_var.dtype)
    state = state.set(idx["stats"], (mean, var))
    if idx["mode"] == "batch":
        state = state.set(idx["counter"], state.get(idx["counter"]) * 0)
    elif idx["first_time"] is not None:
        state = state.set(idx["first_time"], jnp.zeros_like(state.get(idx["first_time"])))
    return state


def cast(model, state, dtype):
    """The port and its state with every floating-point array cast to ``dtype``, and each
    integer scalar of the state (a BatchNorm's counter) weakly typed, as Equinox makes it: a
    strongly typed int64 counter (one read back from a file) would turn a float32
    BatchNorm's debiased statistics float64."""
    import jax.numpy as jnp

    def to(a):
        if isinstance(a, (jax.Array, np.ndarray)) and jnp.issubdtype(a.dtype, jnp.floating):
            return jnp.asarray(a).astype(dtype)
        return a

    def counter(a):
        a = to(a)
        if (isinstance(a, (jax.Array, np.ndarray)) and a.shape == ()
                and jnp.issubdtype(a.dtype, jnp.integer)):
            return jnp.asarray(int(a))
        return a

    with x64():
        model = jax.tree_util.tree_map(to, model)
        state = None if state is None else jax.tree_util.tree_map(counter, state)
    return model, state
