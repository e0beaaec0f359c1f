"""How a Flax model calls its modules: an abstract run (``trace``: each call's input and
output shapes, in the order they return; what ``parity.description`` describes the model
by) and a run on values (``run``: each call's inputs, outputs and cotangents, what
``compare_layers`` compares).

Calls are seen through one hook for both APIs: linen's ``nn.intercept_methods`` (the
mechanism behind ``capture_intermediates``), and for nnx the modules' ``__call__``,
replaced for the duration of the run. A run can add a zero probe to each call's array
arguments (its gradient is the cotangent at the layer's input: what the layer's backward
returns), and, in shadow mode, give a call torch's recorded input in place of its own (the
gradient passes straight through to the value replaced) and torch's recorded output
cotangent in place of the one backpropagation brings, so that each layer is measured on
its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from .checks import short_exc
from .convert import output_leaves, to_numpy
from .calls import Call, Run, map_output_leaves
from .layout import get_value, is_nnx_module, nnx_modules, set_value

__all__ = ["Program", "Shadow", "order", "program", "run", "trace"]

Hook = Callable[[str, str, Callable, tuple, dict], Any]


@dataclasses.dataclass
class Program:
    """A Flax model as a function of its parameters: ``apply(params, x, hook)`` runs it with
    ``hook(path, type name, call, args, kwargs)`` around every module call; ``names`` names
    the leaves of a parameter gradient ("Conv_0/kernel")."""

    params: Any
    apply: Callable[..., Any]  # (params, x, hook, rest=None): rest, the other collections
    names: Callable[[Any], dict]
    rest: Any = None  # the other variables (linen: the collections besides params)

    def with_variables(self, variables) -> "Program":
        """The same program on other values of the same structure (linen variables, or an
        nnx model like the one it was made of)."""
        if is_nnx_module(variables):
            return dataclasses.replace(self, params=[get_value(v) for _, v in
                                                     _nnx_params(variables)],
                                       rest=[get_value(v) for _, v in _nnx_stats(variables)])
        return dataclasses.replace(self, params=variables["params"],
                                   rest={k: v for k, v in variables.items() if k != "params"})


def program(model, variables=None, kwargs: Mapping[str, Any] | None = None,
            train: bool | None = None) -> Program:
    """linen: ``model`` and its ``variables``; nnx: the model (``variables`` None).
    ``train``: BatchNorm on batch statistics (None: as the model is, any collection
    mutable)."""
    kwargs = dict(kwargs or {})
    if is_nnx_module(model):
        return _nnx_program(model, train, kwargs)
    import flax.linen as nn

    params = variables["params"]
    rest = {k: v for k, v in variables.items() if k != "params"}
    mutable: Any = True if train is None else (["batch_stats"] if train else False)

    def apply(params, x, hook, others=None):
        def interceptor(next_fun, args, kw, context):
            if context.method_name != "__call__":
                return next_fun(*args, **kw)
            return hook("/".join(context.module.path), type(context.module).__name__,
                        next_fun, args, kw)

        with nn.intercept_methods(interceptor):
            out = model.apply({**(rest if others is None else others), "params": params}, x,
                              mutable=mutable, **kwargs)
        return out[0] if mutable else out

    def names(g):
        flat, _ = jax.tree_util.tree_flatten_with_path(g)
        return {"/".join(str(k.key) for k in path): a for path, a in flat}

    return Program(params, apply, names, rest)


def _nnx_params(model) -> list[tuple[str, Any]]:
    """("module/path/leaf", nnx.Param) in attribute order."""
    from flax import nnx

    return [(f"{p}/{k}".lstrip("/"), v) for p, m in nnx_modules(model)
            for k, v in vars(m).items() if isinstance(v, nnx.Param)]


def _nnx_stats(model) -> list[tuple[str, Any]]:
    """("module/path/leaf", nnx.BatchStat) in attribute order."""
    from flax import nnx

    return [(f"{p}/{k}".lstrip("/"), v) for p, m in nnx_modules(model)
            for k, v in vars(m).items() if isinstance(v, nnx.BatchStat)]


def _fresh_merge(graphdef, state):
    """nnx.merge on a copy of the state's Variables, so that the model may update them
    (train-mode BatchNorm) inside a JAX transformation."""
    from flax import nnx

    return nnx.merge(graphdef, jax.tree_util.tree_map(lambda a: a, state))


def _nnx_program(model, train, kwargs):
    from flax import nnx

    model = nnx.clone(model)
    if train is not None:
        model.train() if train else model.eval()
    graphdef, state = nnx.split(model)
    param_names = [n for n, _ in _nnx_params(model)]

    def apply(values, x, hook, others=None):
        m = _fresh_merge(graphdef, state)
        for (_, var), value in zip(_nnx_params(m), values):
            set_value(var, value)
        for (_, var), value in zip(_nnx_stats(m), others or []):
            set_value(var, value)
        with _nnx_hook(m, hook):
            return m(x, **kwargs)

    return Program([get_value(v) for _, v in _nnx_params(model)], apply,
                   lambda g: dict(zip(param_names, g)),
                   [get_value(v) for _, v in _nnx_stats(model)])


@contextlib.contextmanager
def _nnx_hook(model, hook: Hook):
    """``hook`` around every nnx module's ``__call__`` while active."""
    paths = {id(m): p for p, m in nnx_modules(model)}
    classes = {type(m) for _, m in nnx_modules(model)}
    saved = {cls: cls.__dict__.get("__call__") for cls in classes}

    def wrap(cls, call):
        def hooked_call(self, *args, **kwargs):
            if type(self) is cls and id(self) in paths:  # once, by the class it was made of
                return hook(paths[id(self)], cls.__name__,
                            lambda *a, **k: call(self, *a, **k), args, kwargs)
            return call(self, *args, **kwargs)

        return hooked_call

    for cls in classes:
        cls.__call__ = wrap(cls, cls.__call__)
    try:
        yield
    finally:
        for cls, call in saved.items():
            if call is None:
                del cls.__call__
            else:
                cls.__call__ = call


# --------------------------------------------------------------------------- the hook


@dataclasses.dataclass
class Shadow:
    """What shadow mode gives a call (by its ``start``): torch's inputs (Flax layout, one
    per array argument, None to keep the call's own) and output cotangents (one per
    output leaf, None to keep backpropagation's)."""

    inputs: list
    output_grads: list


def _is_float(a) -> bool:
    return hasattr(a, "dtype") and hasattr(a, "shape") and jnp.issubdtype(a.dtype, jnp.floating)


@jax.custom_vjp
def _replace_value(a, value):
    return value


def _replace_value_fwd(a, value):
    return value, None


def _replace_value_bwd(_, g):
    return g, jnp.zeros_like(g)  # straight through to the value replaced


_replace_value.defvjp(_replace_value_fwd, _replace_value_bwd)


@jax.custom_vjp
def _replace_cotangent(y, cotangent):
    return y


def _replace_cotangent_fwd(y, cotangent):
    return y, cotangent


def _replace_cotangent_bwd(cotangent, _):
    return cotangent, jnp.zeros_like(cotangent)


_replace_cotangent.defvjp(_replace_cotangent_fwd, _replace_cotangent_bwd)


def _fits(a, value) -> bool:
    return value is not None and tuple(np.shape(value)) == tuple(a.shape)


def replace_cotangents(out, grads: list, skip=None):
    """``out`` with the cotangent of each output leaf replaced by ``grads`` (by the leaf's
    index in ``output_leaves``' order: through tuples, dicts and ModelOutputs alike; None
    keeps backpropagation's)."""
    def replace(j, y):
        if _is_float(y) and j < len(grads) and _fits(y, g := grads[j]):
            return _replace_cotangent(y, jnp.asarray(g, y.dtype))
        return y

    return map_output_leaves(out, replace, skip)


def _hook(calls: list[Call], probes: list | None, shadow: Mapping[int, Shadow] | None,
          abstract: bool) -> Hook:
    """Appends a Call per module call as it returns (``abstract``: shapes only)."""
    counter = [0]

    def hook(path, type_name, call, args, kwargs):
        k = counter[0]
        counter[0] += 1
        if path == "" and k > 0:  # a module applied unbound inside the model (a tied head)
            path = f"({type_name}, applied unbound)"
        sub = (shadow or {}).get(k)
        args = list(args)
        where = [i for i, a in enumerate(args) if _is_float(a)]
        own = [args[i] for i in where]  # what the port computed, before shadow replaces it
        for j, i in enumerate(where):
            a = args[i]
            if sub is not None and j < len(sub.inputs) and _fits(a, sub.inputs[j]):
                a = _replace_value(a, jnp.asarray(sub.inputs[j], a.dtype))
            if probes is not None and k < len(probes) and j < len(probes[k]):
                a = a + probes[k][j]
            args[i] = a
        record = Call(path, type_name, k, [args[i] for i in where])
        record.own_inputs = own if sub is not None else []
        out = call(*args, **kwargs)
        if sub is not None and sub.output_grads:
            out = replace_cotangents(out, sub.output_grads)
        record.outputs = out
        if abstract:  # as a run's calls hold them: (leaf path, array), here shapes only
            record.inputs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in record.inputs]
            record.outputs = [(p, jax.ShapeDtypeStruct(a.shape, a.dtype))
                              for p, a in _leaves(out)]
        calls.append(record)
        return out

    return hook


# --------------------------------------------------------------------------- runs


def trace(prog: Program, x) -> tuple[list[Call], str | None]:
    """The model's module calls (shapes only, in the order they return) from an abstract
    run, and the error if it raised (the calls then stop there)."""
    calls: list[Call] = []
    try:
        # the other collections go in as arguments too: an abstract target's
        # (ShapeDtypeStruct leaves, from jax.eval_shape) need no values
        jax.eval_shape(lambda p, r, x: prog.apply(p, x, _hook(calls, None, None, True), r),
                       prog.params, prog.rest, x)
    except Exception as e:  # noqa: BLE001 - a port that fails to run: its calls up to there
        return calls, short_exc(e)
    return calls, None


def order(calls: list[Call]) -> list[str]:
    """Module paths in the order ``calls`` first begin them."""
    return list(dict.fromkeys(c.path for c in sorted(calls, key=lambda c: c.start)))


def _leaves(y) -> list[tuple[str, Any]]:
    return [(p[len("output"):], a) for p, a in output_leaves(y)]


def _leaf_arrays(y) -> list[tuple[str, np.ndarray]]:
    return [(p, to_numpy(a)) for p, a in _leaves(y)]


def run(prog: Program, x, loss_weights: list, calls: list[Call], *, gradients: bool,
        shadow: Mapping[int, Shadow] | None = None) -> Run:
    """Run the model compiled on ``x`` with a zero probe at every array argument of every
    call in ``calls`` (from ``trace``), and differentiate ``sum(w * output)`` (``w`` in
    ``loss_weights``) with respect to the parameters and the probes.

    A port that fails to run runs again eagerly, without gradients, so that the calls show
    every layer up to the failure."""
    by_start = sorted(calls, key=lambda c: c.start)
    probes = [[np.zeros(a.shape, a.dtype) for a in c.inputs] for c in by_start]
    meta: list[Call] = []

    def forward(params, x, probes):
        recorded: list[Call] = []
        y = prog.apply(params, x, _hook(recorded, probes, shadow, False), prog.rest)
        meta[:] = [Call(c.path, c.type_name, c.start) for c in recorded]
        ys = [a for _, a in output_leaves(y) if _is_float(a)]
        # a float even with no weights (a port whose trace failed): its own error shows
        loss = sum((jnp.sum(jnp.asarray(w) * a) for w, a in zip(loss_weights, ys)),
                   jnp.zeros((), jnp.float32))
        return loss, [(c.inputs, c.outputs, c.own_inputs) for c in recorded]

    try:
        if gradients:
            (_, aux), (g_params, g_probes) = jax.jit(
                jax.value_and_grad(forward, argnums=(0, 2), has_aux=True))(prog.params, x, probes)
            grads = {k: np.asarray(a) for k, a in prog.names(g_params).items()}
        else:
            _, aux = jax.jit(forward)(prog.params, x, probes)
            g_probes, grads = None, {}
        return Run(_calls(meta, aux, g_probes), grads)
    except Exception as e:  # noqa: BLE001 - reported as a row
        error = short_exc(e)
    recorded: list[Call] = []
    try:
        prog.apply(prog.params, x, _hook(recorded, None, shadow, False), prog.rest)
    except Exception:  # noqa: BLE001 - the same failure, now with concrete calls
        pass
    return Run(_calls(recorded, [(c.inputs, c.outputs, c.own_inputs) for c in recorded],
                      None), {}, error)


def _calls(meta: list[Call], values, g_probes) -> list[Call]:
    out = []
    for c, (inputs, outputs, own) in zip(meta, values):
        grads = g_probes[c.start] if g_probes is not None and c.start < len(g_probes) else []
        out.append(Call(c.path, c.type_name, c.start, [to_numpy(a) for a in inputs],
                        _leaf_arrays(outputs), [to_numpy(g) for g in grads],
                        own_inputs=[to_numpy(a) for a in own]))
    return out
