"""How an Equinox port calls its modules: an abstract run (``trace``, shapes only) and a run
on values (``run``), as ``parity.record_flax`` does for linen and nnx, with the same
``Call`` records, probes and shadow-mode replacements.

The port takes one example, as Equinox models do, and is mapped over the batch
(``jax.vmap`` with the ``axis_name`` its BatchNorm layers use, "batch" by default); with
``vmap=False`` it takes the batch itself. Calls are seen through the modules'
``__call__``, replaced while the port runs (as for nnx). A module the port calls inside a
``jax.vmap`` of its own (``jax.vmap(self.linear)(tokens)``, the projections inside
``eqx.nn.MultiheadAttention``) computes on one slice at a time: ``jax.vmap`` is replaced
too while the port runs, so that each map hands its calls' arrays out through its own
outputs, mapped (one leading axis per map, outermost first: a Linear on the tokens of each
example records [batch, tokens, features], torch's layout), and takes the probes and
shadow values of the calls inside it through its inputs, sliced. Calls inside a loop
(``lax.scan``), a ``jax.jit`` of the port's own or a map made before the run (``from jax
import vmap`` at import time) cannot be recorded: the run raises, and says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from .calls import Call, Run
from .checks import short_exc
from .convert import is_array, output_leaves, to_numpy, x64
from .equinox_tree import _is_param, eqx_modules, is_state
from .record_flax import Shadow, _fits, _is_float, _replace_value, replace_cotangents

__all__ = ["Program", "program", "run", "trace"]


@dataclasses.dataclass
class Program:
    """An Equinox port as a function of its floating-point arrays: ``apply(params, x,
    recorder, state)`` runs it on the batch ``x`` with ``recorder`` around every module call
    and returns its output (without the state); ``names`` names a gradient's leaves
    ("blocks/0/attn/query_proj/weight")."""

    params: list
    apply: Callable[..., Any]
    names: Callable[[list], dict]
    rest: Any = None  # the eqx.nn.State, or None
    train: bool | None = None  # as ``program`` was given it

    def with_variables(self, target) -> "Program":
        """The same program on another (module, state) of the same structure."""
        import equinox as eqx

        model, state = target
        dynamic, _ = eqx.partition(_prepared(model, self.train), _is_param)
        return dataclasses.replace(self, params=jax.tree_util.tree_leaves(dynamic), rest=state)


def _prepared(model, train):
    import equinox as eqx

    return model if train is None else eqx.nn.inference_mode(model, value=not train)


def _key(k) -> str:
    for attr in ("name", "idx", "key"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)  # pragma: no cover - a key type jax adds later


def axis_name(model) -> Any:
    """The batch axis name the port's BatchNorm layers reduce over ("batch" if none)."""
    import equinox as eqx

    names = [m.axis_name for _, m, _ in eqx_modules(model) if isinstance(m, eqx.nn.BatchNorm)]
    return names[0] if names else "batch"


def program(model, state=None, kwargs: Mapping[str, Any] | None = None,
            train: bool | None = None, vmap: bool = True) -> Program:
    """The port (and its state) as a ``Program``. ``train``: BatchNorm on batch statistics
    and dropout on (``eqx.nn.inference_mode``; None: as the module is). ``kwargs``: more
    arguments of the port's call, arrays mapped over the batch with ``x``."""
    import equinox as eqx

    model = _prepared(model, train)
    dynamic, static = eqx.partition(model, _is_param)
    flat, treedef = jax.tree_util.tree_flatten_with_path(dynamic)
    names = ["/".join(_key(k) for k in path) for path, _ in flat]
    mapped = {k: v for k, v in (kwargs or {}).items() if is_array(v)}
    fixed = {k: v for k, v in (kwargs or {}).items() if not is_array(v)}
    name = axis_name(model)

    def apply(params, x, recorder, rest=None):
        m = eqx.combine(jax.tree_util.tree_unflatten(treedef, params), static)
        with recorder.active(m):
            def one(xi, **kw):
                return m(xi, rest, **kw, **fixed) if rest is not None else m(xi, **kw, **fixed)

            if vmap:
                out_axes = (0, None) if rest is not None else 0
                out = recorder.vmap(one, out_axes=out_axes, axis_name=name)(x, **mapped)
            else:
                out = one(x, **mapped)
        return out[0] if rest is not None else out

    return Program([a for _, a in flat], apply, lambda g: dict(zip(names, g)), state, train)


# --------------------------------------------------------------------------- the recorder


@dataclasses.dataclass
class _Frame:
    """One ``jax.vmap`` while it runs (the run itself is the outermost): its number, the
    probes and shadow values of the calls inside it (sliced as it slices), and the calls
    recorded inside it so far."""

    vid: int | None
    inject: dict
    records: list = dataclasses.field(default_factory=list)


class Recorder:
    """Records every module call of one run. ``inject``: by call number, (probes, shadow
    inputs, shadow output cotangents), each a list of arrays of the call's recorded shapes;
    ``maps_of``: by call number, the maps it runs inside (from the trace)."""

    def __init__(self, inject: Mapping[int, tuple] | None = None,
                 maps_of: Mapping[int, tuple] | None = None):
        self.count = 0
        self.maps = 0
        self.maps_of = dict(maps_of or {})
        self.stack = [_Frame(None, dict(inject or {}))]
        self._vmap = jax.vmap

    @property
    def calls(self) -> list[Call]:
        """The calls recorded so far, in the order they return."""
        return self.stack[0].records

    @contextlib.contextmanager
    def active(self, model):
        """The hook around every module call of ``model`` and the recording ``jax.vmap``,
        while active."""
        modules = eqx_modules(model)
        paths = {id(m): p for p, m, _ in modules}
        classes = {type(m) for _, m, _ in modules}
        saved = {cls: cls.__dict__.get("__call__") for cls in classes}

        def wrap(cls, call):
            def hooked_call(self_, *args, **kwargs):
                if type(self_) is cls and id(self_) in paths:
                    return self.hook(paths[id(self_)], cls.__name__,
                                     lambda *a, **k: call(self_, *a, **k), args, kwargs)
                return call(self_, *args, **kwargs)

            return hooked_call

        for cls in classes:
            cls.__call__ = wrap(cls, cls.__call__)
        original = jax.vmap
        jax.vmap = self.vmap
        try:
            yield
        finally:
            jax.vmap = original
            for cls, call in saved.items():
                if call is None:
                    delattr(cls, "__call__")
                else:
                    cls.__call__ = call

    def hook(self, path, type_name, call, args, kwargs):
        k = self.count
        self.count += 1
        frame = self.stack[-1]
        probes, inputs, grads = frame.inject.get(k, ((), (), ()))
        args = list(args)
        where = [i for i, a in enumerate(args) if _is_float(a)]
        own = [args[i] for i in where]
        for j, i in enumerate(where):
            a = args[i]
            if j < len(inputs) and _fits(a, inputs[j]):
                a = _replace_value(a, jnp.asarray(inputs[j], a.dtype))
            if j < len(probes) and probes[j] is not None:
                a = a + probes[j]
            args[i] = a
        maps = tuple(f.vid for f in self.stack[1:])
        record = Call(path, type_name, k, [args[i] for i in where], batch_maps=maps)
        record.own_inputs = own if len(inputs) else []
        out = call(*args, **kwargs)
        if len(grads):
            out = replace_cotangents(out, list(grads), skip=is_state)
        record.outputs = [(p[len("output"):], a) for p, a in output_leaves(_without_states(out))
                          if isinstance(a, jax.Array)]
        frame.records.append(record)
        return out

    def vmap(self, fun, in_axes=0, out_axes=0, axis_name=None, axis_size=None,
             spmd_axis_name=None):
        """``jax.vmap`` that hands the calls inside it out (mapped) and their probes and
        shadow values in (sliced)."""
        args_axes = tuple(in_axes) if isinstance(in_axes, list) else in_axes

        def mapped(*args, **kwargs):
            vid = self.maps
            self.maps += 1
            parent = self.stack[-1]
            inject = {k: v for k, v in parent.inject.items() if vid in self.maps_of.get(k, ())}
            inner: list[_Frame] = []

            def body(inject, args, kwargs):
                frame = _Frame(vid, inject)
                inner.append(frame)
                self.stack.append(frame)
                try:
                    y = fun(*args, **kwargs)
                finally:
                    self.stack.pop()
                return y, [(c.inputs, [a for _, a in c.outputs], c.own_inputs)
                           for c in frame.records]

            y, values = self._vmap(body, in_axes=(0, args_axes, 0), out_axes=(out_axes, 0),
                                   axis_name=axis_name, axis_size=axis_size,
                                   spmd_axis_name=spmd_axis_name)(inject, args, kwargs)
            for c, (ins, outs, own) in zip(inner[-1].records, values):
                c.inputs, c.own_inputs = list(ins), list(own)
                c.outputs = [(p, a) for (p, _), a in zip(c.outputs, outs)]
            parent.records.extend(inner[-1].records)
            return y

        return mapped


def _without_states(out):
    """``out`` with each ``eqx.nn.State`` in it left out: a stateful layer's (output, state)
    is its output (the state is no output to compare)."""
    if is_state(out):
        return None
    if isinstance(out, tuple) and not hasattr(type(out), "_fields"):
        kept = [o for o in out if not is_state(o)]
        if len(kept) == 1 and len(out) == 2:
            return _without_states(kept[0])
        return tuple(_without_states(o) for o in out)
    if isinstance(out, list):
        return [_without_states(o) for o in out]
    return out


# --------------------------------------------------------------------------- runs

_UNRECORDABLE = ("; a module called inside lax.scan, a jax.jit of the port's own or a "
                 "jax.vmap made before the run cannot be recorded: call it in the port's "
                 "forward pass, or through jax.vmap called while the port runs")


def _error(e: Exception) -> str:
    text = short_exc(e)
    return text + _UNRECORDABLE if "Tracer" in text else text


def trace(prog: Program, x) -> tuple[list[Call], str | None]:
    """The port's module calls (shapes only, in the order they return) from an abstract
    run, and the error if it raised (the calls then stop there)."""
    calls: list[Call] = []

    def f(params, rest, x):
        recorder = Recorder()
        try:
            prog.apply(params, x, recorder, rest)
        finally:
            calls[:] = [_abstract(c) for c in recorder.calls]

    try:
        with x64():  # a state made under x64 holds 64-bit counters
            jax.eval_shape(f, prog.params, prog.rest, x)
    except Exception as e:  # noqa: BLE001 - a port that fails to run: its calls up to there
        return calls, _error(e)
    return calls, None


def _abstract(c: Call) -> Call:
    def sds(a):
        return jax.ShapeDtypeStruct(a.shape, a.dtype)

    return Call(c.path, c.type_name, c.start, [sds(a) for a in c.inputs],
                [(p, sds(a)) for p, a in c.outputs], batch_maps=c.batch_maps)


def run(prog: Program, x, loss_weights: list, calls: list[Call], *, gradients: bool,
        shadow: Mapping[int, Shadow] | None = None) -> Run:
    """Run the port compiled on ``x`` with a zero probe at every array argument of every
    call in ``calls`` (from ``trace``), and differentiate ``sum(w * output)`` (``w`` in
    ``loss_weights``) with respect to the parameters and the probes; ``shadow``: by call
    number, torch's inputs and output cotangents. A port that fails runs again eagerly,
    without gradients, so that the calls show every layer up to the failure."""
    by_start = sorted(calls, key=lambda c: c.start)
    maps_of = {c.start: c.batch_maps for c in calls}
    probes = [[np.zeros(a.shape, a.dtype) for a in c.inputs] for c in by_start]
    meta: list[Call] = []

    def inject(probes):
        out = {}
        for c, p in zip(by_start, probes):
            sub = (shadow or {}).get(c.start)
            out[c.start] = (p, [] if sub is None else [None if a is None else jnp.asarray(a)
                                                       for a in sub.inputs],
                            [] if sub is None else [None if g is None else jnp.asarray(g)
                                                    for g in sub.output_grads])
        return out

    def forward(params, x, probes):
        recorder = Recorder(inject(probes), maps_of)
        y = prog.apply(params, x, recorder, prog.rest)
        meta[:] = [Call(c.path, c.type_name, c.start, outputs=[(p, None) for p, _ in c.outputs])
                   for c in recorder.calls]
        ys = [a for _, a in output_leaves(y) if _is_float(a)]
        # a float even with no weights (a port whose trace failed): its own error shows
        loss = sum((jnp.sum(jnp.asarray(w) * a) for w, a in zip(loss_weights, ys)),
                   jnp.zeros((), jnp.float32))
        return loss, [(c.inputs, [a for _, a in c.outputs], c.own_inputs)
                      for c in recorder.calls]

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
        error = _error(e)
    recorder = Recorder(inject(probes), maps_of)
    try:
        prog.apply(prog.params, x, recorder, prog.rest)
    except Exception:  # noqa: BLE001 - the same failure, now with concrete calls
        pass
    done = recorder.calls
    return Run(_calls([Call(c.path, c.type_name, c.start, outputs=c.outputs) for c in done],
                      [(c.inputs, [a for _, a in c.outputs], c.own_inputs) for c in done],
                      None), {}, error)


def _calls(meta: list[Call], values, g_probes) -> list[Call]:
    out = []
    for c, (inputs, outputs, own) in zip(meta, values):
        grads = g_probes[c.start] if g_probes is not None and c.start < len(g_probes) else []
        out.append(Call(c.path, c.type_name, c.start, [to_numpy(a) for a in inputs],
                        [(p, to_numpy(a)) for (p, _), a in zip(c.outputs, outputs)],
                        [to_numpy(g) for g in grads], own_inputs=[to_numpy(a) for a in own]))
    return out
