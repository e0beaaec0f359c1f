"""Layer by layer: does a Flax port compute what the torch model computes, in value and in
gradient, and if not, which layer is wrong?

    report = parity.compare_layers(torch_model, flax_model, variables, x)
    report = parity.compare_layers(torch_model, flax_model, variables, x, mode="shadow")
    report.ok, report.rows, report.first_divergence
    print(report.format())
    parity.assert_model_parity(torch_model, flax_model, variables, x)   # raises ParityError

Both models run on the same input (``x`` in torch's layout; channels-first is moved to
channels-last for the Flax side unless ``channels_last=False`` or ``to_flax=`` says
otherwise). Every module call is recorded on both sides (``parity.record_torch``,
``parity.record_flax``) and the calls are paired (``parity.pairing``: modules with
weights through the weight pairing, the rest by ``name_map``, kind and order, and a call
left alone on each side between the same pairs, with the same shapes, by its position: its
rows say so, ``LayerRow.by_position``). Rows, in the order a reader should meet them:

* ``weight``: every mapped Flax leaf against torch's tensor through the layout rule (exact:
  a leaf of lower precision must hold torch's value rounded to it; the run then computes
  with torch's value, and the row says so), so that a wrong weight is reported as a weight;
* ``output``: each paired call's output, in the order the layers return;
* ``gradient`` and ``input gradient``: the gradients of a scalar loss ``sum(w * output)``
  (random ``w``) with respect to every parameter and at every paired call's input (the
  cotangent the layer's backward returns; the model's own row is the input's gradient), in
  the order backpropagation computes them, last layer first.

``mode="chained"`` runs each side on its own: a row measures everything before it, and the
first failing row is where the two models start to differ. ``mode="shadow"`` feeds each
Flax layer the torch layer's recorded input, and backpropagates into it the torch layer's
recorded output cotangent: a row measures that layer's own error, and the first failing row
is the first layer that is wrong by itself (a layer whose backward alone is wrong fails at
its input gradient).

Tolerances (``reference``): float64 compares JAX with torch directly (``parity.tolerances``).
Lower precisions are judged against torch run in float64 on the same numbers (the weights
and input rounded to the dtype, then widened): a row passes when JAX's error against that
reference is within ``TORCH_ERR_FACTOR`` (3) times torch's own error against it, plus
``HALF_ROUNDINGS * (order + 1)`` roundings of the dtype, the rule ``parity.compare`` uses
for half precision (float32 rows also pass within the direct float32 tolerance); both errors
are in the row. A faithful float32 port can differ from torch's float32 run by far more than
a fixed tolerance (one near-tie in a max-pool window, decided by rounding, sends a gradient
elsewhere), but not by far more than torch's own float32 run differs from the exact answer.
``reference="direct"`` compares directly with the dtype's fixed tolerance.

Shadow mode checks layers, not the code between them: a function applied between two
modules (a ``jnp`` reshape, an add outside any block) is replaced along with the input of
the module after it; chained mode checks it.

The torch module is copied and cast to ``x``'s dtype, and the Flax variables are cast too:
both sides compute in ``x``'s precision, and neither model is changed (train-mode BatchNorm
updates running statistics; those updates are not compared: Flax averages the biased batch
variance, torch the unbiased one).
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Mapping
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import torch

from . import record_flax, record_torch
from .convert import TORCH_DTYPES, to_jax, to_numpy, x64
from .model_report import LayerRow, ModelReport
from .calls import Call
from .layout import flax_layout, get_value, is_nnx_module, nnx_modules, set_value
from .pairing import CallPair, WeightMap, format_alignment, match_weights, pair_calls
from .tolerances import HALF, Diff, is_float, tolerance
from .weights import fill

__all__ = ["LayerRow", "ModelReport", "assert_model_parity", "compare_layers"]

MODES = ("chained", "shadow")
REFERENCES = ("direct", "float64")


def compare_layers(torch_module: torch.nn.Module, flax_model, variables, x, *,
                   train: bool = False, channels_last: bool = True,
                   to_flax: Callable | None = None, name_map: Mapping[str, Any] | None = None,
                   gradients: bool = True, seed: int = 0, rtol: float | None = None,
                   atol: float | None = None, train_arg: str | None = "train",
                   flax_kwargs: Mapping[str, Any] | None = None, mode: str = "chained",
                   reference: str | None = None) -> ModelReport:
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
        moved last, and so for every array of rank >= 3 when the shapes say so).
      to_flax: how to turn ``x`` into the Flax model's input, instead of the above.
      name_map: ``{torch module name: Flax module path}``: pairs of modules (any module,
        with weights or without, such as residual blocks) that override the pairing.
      gradients: also compare the gradients of ``sum(w * output)`` with respect to every
        parameter and at every layer's input.
      seed: seed of the random weights ``w``.
      rtol, atol: override the dtype's tolerance (a direct comparison).
      train_arg: the name of the linen ``__call__`` argument that selects train mode.
      flax_kwargs: more keyword arguments for the Flax model's call.
      mode: "chained" (each side on its own outputs) or "shadow" (each Flax layer on the
        torch layer's recorded input and output cotangent).
      reference: "float64" (judge against torch in float64; the default below float64) or
        "direct" (the default for float64, and with ``rtol``/``atol``).

    Returns:
      A ``ModelReport``.

    Raises:
      TypeError, ValueError: for a bad argument, before anything runs.
    """
    if not isinstance(torch_module, torch.nn.Module):
        raise TypeError(f"torch_module must be a torch.nn.Module, got {type(torch_module).__name__}")
    x = to_numpy(x)
    if not is_float(x.dtype):
        raise TypeError(f"x must be a floating-point array, got dtype {x.dtype}")
    nnx_model = is_nnx_module(flax_model)
    if nnx_model and variables is not None:
        raise ValueError("variables must be None for an nnx model (it holds its own weights)")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if reference is None:
        direct = x.dtype == np.float64 or rtol is not None or atol is not None
        reference = "direct" if direct else "float64"
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {REFERENCES}, got {reference!r}")
    name_map = {k: "/".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)
                for k, v in (name_map or {}).items()}
    dtype = x.dtype
    with x64():
        x_flax = to_flax(x) if to_flax is not None else (
            np.moveaxis(x, 1, -1) if channels_last and x.ndim >= 3 else x)
        x_flax = to_jax(np.ascontiguousarray(to_numpy(x_flax)))
        kwargs = dict(flax_kwargs or {})
        if not nnx_model and train_arg and train_arg in _call_params(flax_model):
            kwargs[train_arg] = train
        if nnx_model:
            target = flax_model
        elif variables is None:
            init_kwargs = {**kwargs, **({train_arg: False} if train_arg in kwargs else {})}
            # only the structure: every leaf is torch's (or the pairing raises)
            shapes = jax.eval_shape(lambda key, x: flax_model.init(key, x, **init_kwargs),
                                    jax.random.key(0), x_flax.astype(dtype))
            variables = jax.tree_util.tree_map(lambda a: np.zeros(a.shape, a.dtype), shapes)
            target = _cast_linen(variables, dtype)
        else:
            target = variables
        run_target = _cast_nnx(target, dtype) if nnx_model else _cast_linen(target, dtype)
        prog = record_flax.program(flax_model if not nnx_model else run_target,
                                   None if nnx_model else run_target, kwargs, train)
        f_trace, _ = record_flax.trace(prog, x_flax)
        order = record_flax.order(f_trace)
        weight_name_map = _weight_name_map(name_map, torch_module)
        if not nnx_model and target is not variables:  # initialised here: torch's weights
            target = fill(match_weights(torch_module, target, weight_name_map, order), target)
        weights = match_weights(torch_module, target, weight_name_map, order)
        weight_rows, exact = _weight_rows(weights, dtype)
        run_weights = match_weights(torch_module, run_target, weight_name_map, order)
        run_target = fill(run_weights, run_target, only=exact)
        prog = record_flax.program(flax_model if not nnx_model else run_target,
                                   None if nnx_model else run_target, kwargs, train)

        t_model = copy.deepcopy(torch_module).to(TORCH_DTYPES[dtype]).train(train)
        rng = np.random.default_rng([seed, 0x1A7E5])
        drawn: list[np.ndarray] = []

        def torch_weights(ys):  # random weights of the loss, in torch's layout
            drawn[:] = [rng.standard_normal(tuple(y.shape)).astype(dtype) for y in ys]
            return drawn

        t_run = record_torch.run(t_model, x, torch_weights, gradients=gradients)
        _check_name_map(name_map, t_run.calls, f_trace)
        pairs, unpaired_torch, unpaired_flax = pair_calls(t_run.calls, f_trace, weights,
                                                          name_map, channels_last)
        ref_run = None
        if reference == "float64":
            # In shadow mode the reference takes torch's recorded inputs where the Flax side
            # does: at the paired calls (an unpaired torch ReLU computes in the reference
            # as in the Flax port, from what came before it).
            ref_model = copy.deepcopy(t_model).double()
            t_shadow = {p.torch.start: p.torch for p in pairs} if mode == "shadow" else None
            ref_run = record_torch.run(ref_model, x.astype(np.float64),
                                       lambda ys: [w.astype(np.float64) for w in drawn],
                                       gradients=gradients, shadow=t_shadow)

        ws = _flax_loss_weights(drawn, f_trace, channels_last)
        shadow = _shadow(pairs, channels_last) if mode == "shadow" else None
        f_run = record_flax.run(prog, x_flax, ws, f_trace, gradients=gradients, shadow=shadow)

    by_start = {c.start: c for c in f_run.calls}
    ref_calls = ({c.start: c for c in ref_run.calls} if ref_run is not None else {})
    judge = _Judge(dtype, channels_last, rtol, atol, reference == "float64")
    concrete = [(p, by_start[p.flax.start], ref_calls.get(p.torch.start)) for p in pairs
                if p.flax.start in by_start]
    rows = weight_rows + _output_rows(concrete, judge)
    if f_run.error:  # the port stopped: its last rows are where
        if "" in unpaired_torch:
            unpaired_torch.remove("")
        rows.append(LayerRow("output", "", "", (), math.nan, math.nan, math.nan, False,
                             f"the Flax model raised {f_run.error}"))
    elif gradients:
        rows += _gradient_rows(concrete, t_run, f_run, ref_run, weights, judge)
    return ModelReport(rows, np.dtype(dtype).name, train, unpaired_torch, unpaired_flax,
                       mode, "torch" if reference == "direct" else "torch float64",
                       format_alignment(weights, pairs, unpaired_torch, unpaired_flax))


def assert_model_parity(torch_module, flax_model, variables, x, **kwargs) -> ModelReport:
    """``compare_layers(...)`` that raises ``ParityError`` naming the first divergence."""
    return compare_layers(torch_module, flax_model, variables, x, **kwargs).raise_if_failed()


# --------------------------------------------------------------------------- pairing inputs


def _weight_name_map(name_map: Mapping[str, str], torch_module) -> dict[str, str]:
    """The name_map entries that name a torch module with weights of its own (the rest pair
    calls only)."""
    own = {prefix for full in torch_module.state_dict() for prefix in [full.rpartition(".")[0]]}
    return {k: v for k, v in name_map.items() if k in own}


def _check_name_map(name_map, t_calls: list[Call], f_calls: list[Call]) -> None:
    t_names = list(dict.fromkeys(c.path for c in t_calls))
    f_paths = list(dict.fromkeys(c.path for c in sorted(f_calls, key=lambda c: c.start)))
    for t, f in name_map.items():
        if t not in t_names:
            raise ValueError(f"name_map: torch module {t!r} is never called; torch calls "
                             + ", ".join(repr(n) for n in t_names))
        if f not in f_paths:
            raise ValueError(f"name_map: Flax module {f!r} is never called; Flax calls "
                             + ", ".join(repr(p) for p in f_paths))


def _in_flax_layout(t: np.ndarray, flax_shape: tuple, channels_last: bool) -> np.ndarray | None:
    """A torch-side array moved to the Flax side's layout, or None if no move fits."""
    how = flax_layout(t.shape, flax_shape, channels_last)
    return None if how is None else np.moveaxis(t, 1, -1) if how == "moved" else t


def _shadow(pairs: list[CallPair], channels_last) -> dict[int, record_flax.Shadow]:
    """What each paired Flax call takes from its torch call in shadow mode."""
    out = {}
    for p in pairs:
        t, f = p.torch, p.flax
        inputs = [_in_flax_layout(a, s.shape, channels_last) for a, s in zip(t.inputs, f.inputs)]
        grads = [None if g is None else _in_flax_layout(g, s.shape, channels_last)
                 for g, (_, s) in zip(t.output_grads, f.outputs)]
        out[f.start] = record_flax.Shadow(inputs, grads)
    return out


def _flax_loss_weights(drawn, f_trace: list[Call], channels_last) -> list:
    """The loss's random weights in the Flax output's layout (zeros where the shapes do not
    fit: the output row says why; none if the port does not run)."""
    root = [c for c in f_trace if c.path == ""]
    if not root:
        return []
    shapes = [tuple(a.shape) for _, a in root[-1].outputs if jnp.issubdtype(a.dtype, jnp.floating)]
    ws = [_in_flax_layout(w, s, channels_last) for w, s in zip(drawn, shapes)]
    if len(ws) != len(shapes) or any(w is None for w in ws):
        ws = [np.zeros(s, w.dtype) for s, w in zip(shapes, drawn)]
    return ws


# --------------------------------------------------------------------------- rows


class _Judge:
    """One row's verdict: JAX against torch, or, with a float64 reference, JAX's error and
    torch's own error against it."""

    def __init__(self, dtype, channels_last, rtol, atol, against_float64: bool):
        self.dtype, self.channels_last = dtype, channels_last
        self.rtol, self.atol, self.against_float64 = rtol, atol, against_float64

    def row(self, kind, t_name, f_path, t, j, order, ref=None, layout=True) -> LayerRow:
        cl = self.channels_last and layout
        moved = _in_flax_layout(t, j.shape, cl)
        if moved is None:
            return LayerRow(kind, t_name, f_path, tuple(t.shape), math.inf, math.inf, 0.0,
                            False, f"shape {tuple(t.shape)} (torch) vs {tuple(j.shape)} (Flax)")
        label = "flax" + (f"/{f_path}" if f_path else "")
        if not is_float(t.dtype):  # indices must be equal
            diff = Diff(j, moved, label)
            return LayerRow(kind, t_name, f_path, tuple(t.shape), diff.worst, diff.rel, 0.0,
                            diff.worst == 0, detail="" if diff.worst == 0 else diff.detail(0))
        if self.against_float64 and ref is not None:
            want = _in_flax_layout(ref, j.shape, cl)
            diff, own = Diff(j, want, label), Diff(moved, want, "torch")
            tol = tolerance(self.dtype, order, diff.scale, ref_err=own.worst)
            if np.dtype(self.dtype) not in HALF:  # what the direct comparison allows too
                tol = max(tol, tolerance(self.dtype, order, diff.scale))
            ok = bool(diff.worst <= tol)
            return LayerRow(kind, t_name, f_path, tuple(t.shape), diff.worst, diff.rel, tol,
                            ok, detail="" if ok else diff.detail(tol), ref_err=own.worst)
        diff = Diff(j, moved, label)
        tol = tolerance(self.dtype, order, diff.scale, rtol=self.rtol, atol=self.atol)
        ok = bool(diff.worst <= tol)
        return LayerRow(kind, t_name, f_path, tuple(t.shape), diff.worst, diff.rel, tol, ok,
                        detail="" if ok else diff.detail(tol))


def _weight_rows(weights: WeightMap, dtype) -> tuple[list[LayerRow], set]:
    """A row per mapped leaf: the Flax leaf against torch's tensor rounded to the leaf's
    dtype (exact). Returns the rows and the (path, leaf) pairs that hold torch's value: the
    run computes with torch's own value there."""
    rows, exact = [], set()
    for pair in weights.pairs:
        for t_name, f_name in pair.tensors():
            leaf = pair.flax.leaves[f_name]
            have = to_numpy(leaf[1] if isinstance(leaf, tuple) else get_value(leaf))
            full = to_numpy(pair.torch.tensors[t_name])
            want = pair.rule.convert(t_name, full, "flax").astype(have.dtype)
            path = f"{pair.flax.path}/{f_name}".lstrip("/")
            name = pair.torch.full_name(t_name)
            diff = Diff(have, want, "flax/" + path)
            ok = diff.worst == 0
            note = ""
            if ok and _coarser(have.dtype, full.dtype, dtype):
                note = (f"{path} is {have.dtype.name}: torch's {full.dtype.name} {name} rounded "
                        f"to it on loading; the {np.dtype(dtype).name} run computes with "
                        "torch's value")
            if ok:
                exact.add((pair.flax.path, f_name))
            rows.append(LayerRow("weight", name, path, tuple(full.shape), diff.worst, diff.rel,
                                 0.0, ok, note, "" if ok else diff.detail(0.0)))
    return rows, exact


def _coarser(leaf_dtype, torch_dtype, run_dtype) -> bool:
    """Whether a leaf holds less of torch's value than the run would use."""
    if not (is_float(leaf_dtype) and is_float(torch_dtype)):
        return False
    bits = {d: np.finfo(d).bits for d in (leaf_dtype, torch_dtype, run_dtype)}
    return bits[leaf_dtype] < min(bits[torch_dtype], bits[run_dtype])


def _marked(rows: list[LayerRow], pair: CallPair, gap) -> list[LayerRow]:
    """``rows`` of one pair of calls, marked with how the calls were paired and ``gap``: the
    modules left unpaired that ran right before them (forward for outputs, backward for
    gradients)."""
    for r in rows:
        if pair.by_position:
            r.by_position = (pair.torch.type_name, pair.flax.type_name)
        r.unpaired_before = gap
    return rows


def _output_rows(concrete, judge: _Judge) -> list[LayerRow]:
    rows = []
    for pair, f, ref in concrete:
        t = pair.torch
        if len(t.outputs) != len(f.outputs):
            rows += _marked([LayerRow("output", t.path, f.path, (), math.inf, math.inf, 0.0,
                                      False, f"{len(t.outputs)} outputs (torch) vs "
                                      f"{len(f.outputs)} (Flax)")], pair, pair.before)
            continue
        refs = ref.outputs if ref is not None else [None] * len(t.outputs)
        rows += _marked([judge.row("output", t.path + leaf, f.path + leaf, a, b, 0,
                                   None if r is None else r[1])
                         for (leaf, a), (_, b), r in zip(t.outputs, f.outputs, refs)],
                        pair, pair.before)
    return rows


def _gradient_rows(concrete, t_run, f_run, ref_run, weights: WeightMap,
                   judge: _Judge) -> list[LayerRow]:
    """In the order backpropagation computes them: from the last call to begin to the
    first, each call's parameters (at the module's first call, when its gradient is whole)
    and then the gradient at its input."""
    first_start: dict[str, int] = {}
    for pair, _, _ in concrete:
        t = pair.torch
        first_start[t.path] = min(first_start.get(t.path, t.start), t.start)
    by_torch = {p.torch.name: p for p in weights.pairs}
    rows, done = [], set()
    for pair, f, ref in sorted(concrete, key=lambda c: -c[0].torch.start):
        t, weight_pair = pair.torch, by_torch.get(pair.torch.path)
        at_call = []
        if weight_pair is not None and t.start == first_start[t.path]:
            at_call += _parameter_rows(weight_pair, t_run, f_run, ref_run, judge)
            done.add(t.path)
        refs = ref.input_grads if ref is not None else [None] * len(t.input_grads)
        for i, (a, b, r) in enumerate(zip(t.input_grads, f.input_grads, refs)):
            if a is None:
                continue  # nothing reached this input in torch
            suffix = f"[{i}]" if len(t.input_grads) > 1 else ""
            at_call.append(judge.row("input gradient", t.path + suffix, f.path + suffix, a, b,
                                     1, r))
        rows += _marked(at_call, pair, pair.after)
    for weight_pair in reversed(weights.pairs):
        if weight_pair.torch.name not in done:
            rows += _parameter_rows(weight_pair, t_run, f_run, ref_run, judge)
    return rows


def _parameter_rows(pair, t_run, f_run, ref_run, judge: _Judge) -> list[LayerRow]:
    rows = []
    for t_name, f_name in pair.tensors():
        full = pair.torch.full_name(t_name)
        if full not in t_run.grads:
            continue  # a buffer
        f_path = f"{pair.flax.path}/{f_name}".lstrip("/")
        t = pair.rule.convert(t_name, t_run.grads[full], "flax")
        ref = (pair.rule.convert(t_name, ref_run.grads[full], "flax")
               if ref_run is not None and full in ref_run.grads else None)
        j = f_run.grads.get(f_path)
        if j is None:
            rows.append(LayerRow("gradient", full, f_path, tuple(t_run.grads[full].shape),
                                 math.inf, math.inf, 0.0, False, "no gradient on the Flax side"))
            continue
        rows.append(judge.row("gradient", full, f_path, t, j, 1, ref, layout=False))
        rows[-1].shape = tuple(t_run.grads[full].shape)
    return rows


# --------------------------------------------------------------------------- casts


def _call_params(model) -> set[str]:
    try:
        return set(inspect.signature(type(model).__call__).parameters)
    except (TypeError, ValueError):  # pragma: no cover - no signature to read
        return set()


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
