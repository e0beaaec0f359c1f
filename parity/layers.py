"""Layer by layer: does a Flax port compute what the torch model computes, in value and in
gradient, and if not, where does it start to go wrong?

    report = parity.compare_layers(torch_model, flax_model, variables, x)
    report.ok, report.rows, report.first_divergence
    print(report.format())
    parity.assert_model_parity(torch_model, flax_model, variables, x)   # raises ParityError

Both models run on the same input (``x`` in torch's layout; channels-first is moved to
channels-last for the Flax side unless ``channels_last=False`` or ``to_flax=`` says
otherwise). Every submodule's output is recorded (torch forward hooks; linen
``nn.intercept_methods``, the mechanism behind ``capture_intermediates``; for nnx, the
modules' ``__call__`` for the duration of the run) and the two sides are paired:

* modules with weights through the weight mapping of ``parity.weights`` (order and shape);
* the rest (pooling, activations as modules, blocks) by kind and order: the k-th call of a
  torch ``MaxPool2d`` with the k-th of a Flax ``MaxPool2d``, the k-th ``BasicBlock`` with the
  k-th ``BasicBlock``; kinds compare class names without their ``1d``/``2d``/``3d`` suffix
  and without a ``Torch``/``Flax``/``Linen``/``Nnx``/``Jax`` prefix or suffix (so that
  ``TorchBasicBlock`` pairs with ``BasicBlock``), with ``Dense`` standing for ``Linear`` and
  ``Embed`` for ``Embedding``;
* the two models themselves;
* or as ``name_map={torch module name: Flax module path}`` says.

Each pair's output is compared with the dtype's tolerance (``parity.tolerances``), in the
Flax layout. Then the gradients of a scalar loss, ``sum(w * output)`` with random weights
``w``, with respect to every parameter (mapped to the Flax layout by the layout rules) and
to the input. Rows come in execution order: the forward outputs, then the gradients in the
order backpropagation computes them (last layer first), so the first failing row is where
the two models start to differ.

The torch module is copied and cast to ``x``'s dtype, and the Flax variables are cast too:
both sides compute in ``x``'s precision, and neither model is changed (train-mode BatchNorm
updates running statistics; those updates are not compared: Flax averages the biased batch
variance, torch the unbiased one).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import inspect
import math
import re
from collections.abc import Mapping
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .checks import short_exc
from .convert import TORCH_DTYPES, output_leaves, to_jax, to_numpy, to_torch, x64
from .results import ParityError, fmt
from .tolerances import Diff, is_float, tolerance
from .weights import (WeightMap, fill, get_value, is_nnx_module, match_weights, nnx_modules,
                      set_value)

__all__ = ["LayerRow", "ModelReport", "assert_model_parity", "compare_layers"]


@dataclasses.dataclass
class LayerRow:
    """One paired output (``kind="output"``) or one gradient (``kind="gradient"``)."""

    kind: str
    torch_name: str
    flax_path: str
    shape: tuple[int, ...]  # torch's shape
    abs_err: float
    rel_err: float
    tol: float
    ok: bool
    note: str = ""
    detail: str = ""

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["shape"] = list(self.shape)
        for k in ("abs_err", "rel_err", "tol"):
            if not math.isfinite(d[k]):
                d[k] = str(d[k])
        return d


@dataclasses.dataclass
class ModelReport:
    """Outcome of ``compare_layers``: rows in execution order, the first that fails, and the
    modules of each side that have no counterpart (not compared)."""

    rows: list[LayerRow]
    dtype: str
    train: bool
    unpaired_torch: list[str] = dataclasses.field(default_factory=list)
    unpaired_flax: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    def __bool__(self) -> bool:
        return self.ok

    @property
    def first_divergence(self) -> LayerRow | None:
        return next((r for r in self.rows if not r.ok), None)

    def to_dict(self) -> dict:
        first = self.first_divergence
        return {"ok": self.ok, "dtype": self.dtype, "train": self.train,
                "first_divergence": None if first is None else first.to_dict(),
                "rows": [r.to_dict() for r in self.rows],
                "unpaired_torch": self.unpaired_torch, "unpaired_flax": self.unpaired_flax}

    def table(self, gradients: bool = True):
        """A rich Table; the first divergence is marked."""
        from rich import box
        from rich.table import Table
        from rich.text import Text

        first = self.first_divergence
        mode = "train" if self.train else "eval"
        table = Table(title=f"parity: torch vs Flax, layer by layer ({self.dtype}, {mode} mode)",
                      title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for name, justify in (("", "left"), ("torch", "left"), ("flax", "left"),
                              ("shape", "left"), ("max abs err", "right"),
                              ("max rel err", "right"), ("tolerance", "right"),
                              ("result", "left")):
            table.add_column(name, justify=justify, no_wrap=True)
        kind = None
        for r in self.rows:
            if r.kind == "gradient" and not gradients and r is not first and r.ok:
                continue
            if kind is not None and r.kind != kind:
                table.add_section()
            kind = r.kind
            result = (Text("ok", style="green") if r.ok else
                      Text("FAIL <- first divergence" if r is first else "FAIL",
                           style="bold red"))
            table.add_row("out" if r.kind == "output" else "grad", r.torch_name or "(model)",
                          r.flax_path or "(model)", "x".join(map(str, r.shape)) or "scalar",
                          fmt(r.abs_err), fmt(r.rel_err), fmt(r.tol), result,
                          style="bold" if r is first else None)
        return table

    def __rich__(self):
        return self.table()

    def summary(self) -> str:
        n_out = sum(r.kind == "output" for r in self.rows)
        n_grad = len(self.rows) - n_out
        first = self.first_divergence
        if first is None:
            worst = {k: _worst_share(r for r in self.rows if r.kind == k)
                     for k in ("output", "gradient")}
            return (f"PASS: {n_out} layer outputs and {n_grad} gradients agree with torch "
                    f"({self.dtype}, {'train' if self.train else 'eval'} mode; worst error / "
                    f"tolerance {worst['output']:.1e} and {worst['gradient']:.1e})")
        n_fail = sum(not r.ok for r in self.rows)
        return (f"FAIL: {n_fail} of {len(self.rows)} rows disagree; first divergence: "
                f"{first.kind} of {first.torch_name or '(model)'} (torch) / "
                f"{first.flax_path or '(model)'} (Flax)")

    def format(self, gradients: bool = True, width: int = 200) -> str:
        """The table as plain text (as wide as it needs, up to ``width``), then what the first
        divergence is and a summary line. ``gradients=False`` leaves out the gradient rows
        that pass."""
        from rich.console import Console

        console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
        console.print(self.table(gradients))
        hidden = [r for r in self.rows if r.kind == "gradient" and r.ok]
        if not gradients and hidden:
            console.print(f"{len(hidden)} gradient rows pass and are not shown (worst error / "
                          f"tolerance {_worst_share(hidden):.1e})", markup=False, highlight=False)
        first = self.first_divergence
        notes = [] if first is None else [first.note, first.detail]
        notes += [r.note for r in self.rows if r.torch_name == "" and r.note and r is not first]
        for note in filter(None, notes):
            console.print(("first divergence: " if note in (first.note, first.detail) else "")
                          + note, markup=False, highlight=False)
        console.print(self.summary(), markup=False, highlight=False)
        return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"

    def __str__(self) -> str:
        return self.format()

    def raise_if_failed(self) -> "ModelReport":
        if not self.ok:
            raise ParityError(self.summary() + "\n" + self.format(gradients=False))
        return self


def _worst_share(rows) -> float:
    """The largest abs_err / tolerance: how close the closest row came to failing."""
    return max((r.abs_err / r.tol if r.tol > 0 else 0.0 for r in rows), default=0.0)


# --------------------------------------------------------------------------- layouts


def _kind(type_name: str) -> str:
    """What a module is, in words both sides use: Conv2d and Conv are both "Conv", and
    TorchBasicBlock and BasicBlock both "BasicBlock" (so that both can live in one file)."""
    name = re.sub(r"^(Torch|Flax|Linen|Nnx|Jax)(?=[A-Z])|(?<=[a-z0-9])(Torch|Flax|Linen|Nnx|Jax)$",
                  "", type_name)
    name = re.sub(r"[123]d$", "", name)
    return {"Dense": "Linear", "Embed": "Embedding"}.get(name, name)


def _in_flax_layout(t: np.ndarray, flax_shape: tuple, channels_last: bool) -> np.ndarray | None:
    """A torch-side array moved to the Flax side's layout, or None if no move fits."""
    if channels_last and t.ndim >= 3:
        moved = np.moveaxis(t, 1, -1)
        if moved.shape == tuple(flax_shape):
            return moved
    return t if t.shape == tuple(flax_shape) else None


def _leaf_arrays(y) -> list[tuple[str, np.ndarray]]:
    return [(p[len("output"):], to_numpy(a)) for p, a in output_leaves(y)]


# --------------------------------------------------------------------------- the two sides


@dataclasses.dataclass
class _Run:
    """One side's run: per module call (path, type name, [(leaf path, array)]) in order,
    and gradients (parameters by name, and the input); ``error`` if the model raised (the
    records then stop where it did)."""

    records: list[tuple[str, str, list]]
    grads: dict[str, np.ndarray]
    input_grad: np.ndarray | None
    error: str | None = None


def _run_torch(model: torch.nn.Module, x: np.ndarray, weights_fn: Callable, gradients: bool):
    records = []

    def hook(name):
        # Copied at once: an in-place ReLU would change the tensor later.
        return lambda mod, inp, out: records.append((name, type(mod).__name__,
                                                     _leaf_arrays(out)))

    handles = [m.register_forward_hook(hook(name)) for name, m in model.named_modules()]
    try:
        xt = to_torch(x).requires_grad_(gradients)
        with torch.set_grad_enabled(gradients):
            y = model(xt)
            if gradients:
                ys = [a for _, a in output_leaves(y) if a.is_floating_point()]
                loss = sum((to_torch(w) * a).sum() for w, a in zip(weights_fn(ys), ys))
                loss.backward()
    finally:
        for h in handles:
            h.remove()
    grads = {n: to_numpy(p.grad) for n, p in model.named_parameters() if p.grad is not None}
    return _Run(records, grads, to_numpy(xt.grad) if gradients else None)


def _loss(ys, ws):
    return sum(jnp.sum(jnp.asarray(w) * y) for w, y in zip(ws, ys))


def _float_leaves(y) -> list:
    return [a for _, a in output_leaves(y) if jnp.issubdtype(a.dtype, jnp.floating)]


def _run_linen(model, variables, x, ws, train, kwargs, gradients):
    import flax.linen as nn

    records: list = []
    params = variables["params"]
    rest = {k: v for k, v in variables.items() if k != "params"}

    def forward(params, x):
        records.clear()

        def interceptor(next_fun, args, kw, context):
            out = next_fun(*args, **kw)
            if context.method_name == "__call__":
                records.append(("/".join(context.module.path), type(context.module).__name__,
                                out))
            return out

        with nn.intercept_methods(interceptor):
            if train:
                y, _ = model.apply({**rest, "params": params}, x, mutable=["batch_stats"],
                                   **kwargs)
            else:
                y = model.apply({**rest, "params": params}, x, **kwargs)
        return _loss(_float_leaves(y), ws), [out for _, _, out in records]

    def grad_names(g_params):
        flat, _ = jax.tree_util.tree_flatten_with_path(g_params)
        return {"/".join(str(k.key) for k in path): a for path, a in flat}

    return _differentiate(forward, params, x, records, gradients, grad_names)


def _differentiate(forward, params, x, records, gradients, grad_names) -> _Run:
    """Run ``forward(params, x) -> (loss, module outputs)`` compiled, with the gradients of
    the loss when asked (``grad_names`` names the parameters' gradients). ``forward``
    appends (path, type, output) to ``records`` as modules return.

    A port that fails to run (a wrong padding breaks a residual add) runs again eagerly,
    without gradients, so that the records show every layer up to the failure.
    """
    try:
        if gradients:
            fn = jax.jit(jax.value_and_grad(forward, argnums=(0, 1), has_aux=True))
            (_, outs), (g_params, g_x) = fn(params, x)
            grads = {k: np.asarray(a) for k, a in grad_names(g_params).items()}
            g_x = np.asarray(g_x)
        else:
            _, outs = jax.jit(forward)(params, x)
            grads, g_x = {}, None
        return _Run([(p, t, _leaf_arrays(o)) for (p, t, _), o in zip(records, outs)], grads, g_x)
    except Exception as e:  # noqa: BLE001 - reported as a row
        error = short_exc(e)
    try:
        forward(params, x)
    except Exception:  # noqa: BLE001 - the same failure, now with concrete records
        pass
    return _Run([(p, t, _leaf_arrays(o)) for p, t, o in records], {}, None, error)


@contextlib.contextmanager
def _recording_nnx_calls(model, records: list):
    """Record every nnx module's ``__call__`` output, with its path, while active."""
    paths = {id(m): p for p, m in nnx_modules(model)}
    classes = {type(m) for _, m in nnx_modules(model)}
    saved = {cls: cls.__dict__.get("__call__") for cls in classes}

    def wrap(cls, call):
        def recording_call(self, *args, **kwargs):
            out = call(self, *args, **kwargs)
            if type(self) is cls and id(self) in paths:  # once, by the class it was made of
                records.append((paths[id(self)], cls.__name__, out))
            return out

        return recording_call

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


def _nnx_params(model) -> list[tuple[str, Any]]:
    """("module/path/leaf", nnx.Param) in attribute order."""
    from flax import nnx

    return [(f"{p}/{k}".lstrip("/"), v) for p, m in nnx_modules(model)
            for k, v in vars(m).items() if isinstance(v, nnx.Param)]


def _run_nnx(model, x, ws, train, gradients):
    from flax import nnx

    model = nnx.clone(model)
    model.train() if train else model.eval()
    graphdef, state = nnx.split(model)
    records: list = []
    param_names = [n for n, _ in _nnx_params(model)]

    def forward(param_values, x):
        m = _fresh_merge(graphdef, state)
        for (_, var), value in zip(_nnx_params(m), param_values):
            set_value(var, value)
        records.clear()
        with _recording_nnx_calls(m, records):
            y = m(x)
        return _loss(_float_leaves(y), ws), [out for _, _, out in records]

    values = [get_value(var) for _, var in _nnx_params(model)]
    return _differentiate(forward, values, x, records, gradients,
                          lambda g_params: dict(zip(param_names, g_params)))


# --------------------------------------------------------------------------- pairing


def _pair_records(t_run: _Run, f_run: _Run, weights: WeightMap,
                  name_map: Mapping[str, str]) -> tuple[list, list[str], list[str]]:
    """[(torch record, Flax record)] in torch's order, and the unpaired of each side."""
    fixed = {p.torch.name: p.flax.path for p in weights.pairs}
    fixed.update(name_map)
    fixed[""] = ""  # the models themselves
    fixed_flax = set(fixed.values())
    # per key, the Flax records not yet paired; a module called k times has k records
    f_queues: dict[tuple, list] = {}
    for rec in f_run.records:
        path, type_name, _ = rec
        k = ("fixed", path) if path in fixed_flax else ("kind", _kind(type_name))
        f_queues.setdefault(k, []).append(rec)
    pairs, unpaired_torch = [], []
    for rec in t_run.records:
        name, type_name, _ = rec
        k = ("fixed", fixed[name]) if name in fixed else ("kind", _kind(type_name))
        queue = f_queues.get(k)
        if queue:
            pairs.append((rec, queue.pop(0)))
        else:
            unpaired_torch.append(name)
    unpaired_flax = [rec[0] for q in f_queues.values() for rec in q]
    return pairs, unpaired_torch, unpaired_flax


def _row(kind, t_name, f_path, t, j, dtype, order, channels_last, rtol, atol) -> LayerRow:
    moved = _in_flax_layout(t, j.shape, channels_last)
    if moved is None:
        return LayerRow(kind, t_name, f_path, tuple(t.shape), math.inf, math.inf, 0.0, False,
                        f"shape {tuple(t.shape)} (torch) vs {tuple(j.shape)} (Flax)")
    exact = not is_float(t.dtype)  # indices must be equal
    diff = Diff(j, moved, "flax" + (f"/{f_path}" if f_path else ""))
    tol = 0.0 if exact else tolerance(dtype, order, diff.scale, rtol=rtol, atol=atol)
    ok = bool(diff.worst <= tol)
    return LayerRow(kind, t_name, f_path, tuple(t.shape), diff.worst, diff.rel, tol, ok,
                    detail="" if ok else diff.detail(tol))


# --------------------------------------------------------------------------- the entry points


def compare_layers(torch_module: torch.nn.Module, flax_model, variables, x, *,
                   train: bool = False, channels_last: bool = True,
                   to_flax: Callable | None = None, name_map: Mapping[str, Any] | None = None,
                   gradients: bool = True, seed: int = 0, rtol: float | None = None,
                   atol: float | None = None, train_arg: str | None = "train",
                   flax_kwargs: Mapping[str, Any] | None = None) -> ModelReport:
    """Run a torch model and its Flax port on the same input and compare them layer by layer.

    Args:
      torch_module: the torch model (not modified: a copy runs).
      flax_model: a linen Module, or an nnx Module (then ``variables`` is None).
      variables: linen variables, or None to initialise the linen model and import the torch
        weights (``load_torch_weights``); for nnx, None (the model holds its weights; they
        are compared as they are; load them with ``load_torch_weights`` first).
      x: the input, in torch's layout (a NumPy/JAX array or torch tensor); its dtype is the
        precision of the comparison.
      train: train-mode BatchNorm (batch statistics) on both sides: ``torch_module.train()``,
        ``train_arg=True`` to the linen model's ``__call__`` (when it takes that argument;
        the batch_stats collection is mutable), ``model.train()`` for nnx.
      channels_last: the Flax side takes and returns channels-last arrays (the input's axis 1
        moved last, and so for every output of rank >= 3 when the shapes say so).
      to_flax: how to turn ``x`` into the Flax model's input, instead of the above.
      name_map: ``{torch module name: Flax module path}`` pairs that override the pairing
        of weights and of outputs.
      gradients: also compare the gradients of ``sum(w * output)`` with respect to every
        parameter and to the input.
      seed: seed of the random weights ``w``.
      rtol, atol: override the dtype's tolerance.
      train_arg: the name of the linen ``__call__`` argument that selects train mode.
      flax_kwargs: more keyword arguments for the Flax model's call.

    Returns:
      A ``ModelReport``.
    """
    if not isinstance(torch_module, torch.nn.Module):
        raise TypeError(f"torch_module must be a torch.nn.Module, got {type(torch_module).__name__}")
    x = to_numpy(x)
    if not is_float(x.dtype):
        raise TypeError(f"x must be a floating-point array, got dtype {x.dtype}")
    nnx_model = is_nnx_module(flax_model)
    if nnx_model and variables is not None:
        raise ValueError("variables must be None for an nnx model (it holds its own weights)")
    name_map = {k: "/".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)
                for k, v in (name_map or {}).items()}
    dtype = x.dtype
    with x64():
        t_model = copy.deepcopy(torch_module).to(TORCH_DTYPES[dtype]).train(train)
        x_flax = to_flax(x) if to_flax is not None else (
            np.moveaxis(x, 1, -1) if channels_last and x.ndim >= 3 else x)
        x_flax = to_jax(np.ascontiguousarray(to_numpy(x_flax)))
        kwargs = dict(flax_kwargs or {})
        if not nnx_model and train_arg and train_arg in _call_params(flax_model):
            kwargs[train_arg] = train
        if nnx_model:
            target, order = _cast_nnx(flax_model, dtype), None
        else:
            from_torch = variables is None
            if from_torch:
                init_kwargs = {**kwargs, **({train_arg: False} if train_arg in kwargs else {})}
                variables = flax_model.init(jax.random.key(0), x_flax, **init_kwargs)
            order = _linen_call_order(flax_model, variables, x_flax, kwargs)
            target = _cast_linen(variables, dtype)
        weights = match_weights(t_model, target, name_map, order)
        if not nnx_model and from_torch:
            target = fill(weights, target)
            weights = match_weights(t_model, target, name_map, order)  # leaves of the new tree

        rng = np.random.default_rng([seed, 0x1A7E5])
        drawn: list[np.ndarray] = []

        def torch_weights(ys):  # random weights of the loss, in torch's layout
            drawn[:] = [rng.standard_normal(tuple(y.shape)).astype(dtype) for y in ys]
            return drawn

        t_run = _run_torch(t_model, x, torch_weights, gradients)
        ws = _flax_loss_weights(drawn, flax_model, target, x_flax, train, kwargs, channels_last)
        if nnx_model:
            f_run = _run_nnx(target, x_flax, ws, train, gradients)
        else:
            f_run = _run_linen(flax_model, target, x_flax, ws, train, kwargs, gradients)

    pairs, unpaired_torch, unpaired_flax = _pair_records(t_run, f_run, weights, name_map)
    rows = _output_rows(pairs, dtype, channels_last, rtol, atol)
    if f_run.error:  # the port stopped: its last rows are where
        unpaired_torch.remove("")
        rows.append(LayerRow("output", "", "", (), math.nan, math.nan, math.nan, False,
                             f"the Flax model raised {f_run.error}"))
    elif gradients:
        rows += _gradient_rows(t_run, f_run, weights, dtype, channels_last, rtol, atol)
    return ModelReport(rows, np.dtype(dtype).name, train, unpaired_torch, unpaired_flax)


def _flax_loss_weights(drawn, flax_model, target, x, train, kwargs, channels_last):
    """The loss's random weights in the Flax output's layout (zeros where the shapes do not
    fit: the output row says why; none if the port does not run)."""
    try:
        out = (_eval_shape_nnx(target, x, train) if is_nnx_module(target) else
               _eval_shape_linen(flax_model, target, x, train, kwargs))
    except Exception:  # noqa: BLE001 - the run will fail the same way and say where
        return []
    shapes = [tuple(a.shape) for a in out]
    ws = [_in_flax_layout(w, s, channels_last) for w, s in zip(drawn, shapes)]
    if len(ws) != len(shapes) or any(w is None for w in ws):
        ws = [np.zeros(s, w.dtype) for s, w in zip(shapes, drawn)]
    return ws


def _output_rows(pairs, dtype, channels_last, rtol, atol) -> list[LayerRow]:
    rows = []
    for (t_name, _, t_leaves), (f_path, _, f_leaves) in pairs:
        if len(t_leaves) != len(f_leaves):
            rows.append(LayerRow("output", t_name, f_path, (), math.inf, math.inf, 0.0, False,
                                 f"{len(t_leaves)} outputs (torch) vs {len(f_leaves)} (Flax)"))
            continue
        for (leaf, t), (_, j) in zip(t_leaves, f_leaves):
            rows.append(_row("output", t_name + leaf, f_path + leaf, t, j, dtype, 0,
                             channels_last, rtol, atol))
    return rows


def _gradient_rows(t_run, f_run, weights, dtype, channels_last, rtol, atol) -> list[LayerRow]:
    """Every parameter's gradient through the weight mapping, in the order backpropagation
    reaches them, then the input's."""
    rows = []
    for pair in reversed(weights.pairs):
        for t_name, f_name in pair.tensors():
            full = pair.torch.full_name(t_name)
            if full not in t_run.grads:
                continue  # a buffer
            t = pair.rule.convert(t_name, t_run.grads[full], "flax")
            f_path = f"{pair.flax.path}/{f_name}".lstrip("/")
            rows.append(_row("gradient", full, f_path, t, f_run.grads[f_path], dtype, 1,
                             False, rtol, atol))
            rows[-1].shape = tuple(t_run.grads[full].shape)
    rows.append(_row("gradient", "input", "input", t_run.input_grad, f_run.input_grad,
                     dtype, 1, channels_last, rtol, atol))
    return rows


def assert_model_parity(torch_module, flax_model, variables, x, **kwargs) -> ModelReport:
    """``compare_layers(...)`` that raises ``ParityError`` naming the first divergence."""
    return compare_layers(torch_module, flax_model, variables, x, **kwargs).raise_if_failed()


def _call_params(model) -> set[str]:
    try:
        return set(inspect.signature(type(model).__call__).parameters)
    except (TypeError, ValueError):  # pragma: no cover - no signature to read
        return set()


def _linen_call_order(model, variables, x, kwargs) -> list[str]:
    """Module paths in the order the model first calls them (an abstract run): the order
    of its layers, whatever order its variables dict is in."""
    import flax.linen as nn

    order: list[str] = []

    def interceptor(next_fun, args, kw, context):
        path = "/".join(context.module.path)
        if context.method_name == "__call__" and path not in order:
            order.append(path)
        return next_fun(*args, **kw)

    with nn.intercept_methods(interceptor):
        try:
            jax.eval_shape(lambda v, x: model.apply(v, x, **kwargs, mutable=True), variables, x)
        except Exception:  # noqa: BLE001 - a port that fails to run: the order up to there
            pass
    return order


def _fresh_merge(graphdef, state):
    """nnx.merge on a copy of the state's Variables, so that the model may update them
    (train-mode BatchNorm) inside a JAX transformation."""
    from flax import nnx

    return nnx.merge(graphdef, jax.tree_util.tree_map(lambda a: a, state))


def _cast(a, dtype):
    a = jnp.asarray(a)
    return a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a


def _cast_linen(variables, dtype):
    return jax.tree_util.tree_map(lambda a: _cast(a, dtype), dict(variables))


def _cast_nnx(model, dtype):
    from flax import nnx

    model = nnx.clone(model)
    for _, m in nnx_modules(model):
        for v in vars(m).values():
            if isinstance(v, (nnx.Param, nnx.BatchStat)):
                set_value(v, _cast(get_value(v), dtype))
    return model


def _eval_shape_linen(model, variables, x, train, kwargs):
    mutable = {"mutable": ["batch_stats"]} if train else {}
    out = jax.eval_shape(lambda v, x: model.apply(v, x, **kwargs, **mutable), variables, x)
    return _float_leaves(out[0] if train else out)


def _eval_shape_nnx(model, x, train):
    from flax import nnx

    model = nnx.clone(model)
    model.train() if train else model.eval()
    graphdef, state = nnx.split(model)
    return _float_leaves(jax.eval_shape(lambda s, x: _fresh_merge(graphdef, s)(x), state, x))
