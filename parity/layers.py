"""Layer by layer: does a Flax port compute what the torch model computes, in value and in
gradient, and if not, which layer is wrong?

    report = parity.compare_layers(torch_model, flax_model, variables, x)
    report = parity.compare_layers(torch_model, flax_model, variables, x, mode="shadow")
    report.ok, report.rows, report.first_divergence
    print(report.format())
    parity.assert_model_parity(torch_model, flax_model, variables, x)   # raises ParityError

Both models run on the same input (``x`` in torch's layout; channels-first is moved to
channels-last for the Flax side unless ``channels_last=False`` or ``to_flax=`` says
otherwise; an Equinox port keeps torch's layout and is mapped over the batch,
``parity.record_equinox``). Each side runs once to describe it (``parity.description``: the
Flax model abstractly, shapes only; the torch model in the run compared) and the two
descriptions are
aligned once (``parity.pairing.align``: modules with weights through the weight pairing,
the rest by ``name_map``, kind and order, and a call left alone on each side between the
same pairs, with the same shapes, by its position: its rows say so,
``LayerRow.by_position``); everything compared is read off that alignment
(``report.alignment`` prints it). Rows, in the order a reader should meet them:

* ``weight``: every mapped Flax leaf against torch's tensor through the layout rule (exact:
  a leaf of lower precision must hold torch's value rounded to it; the run then computes
  with torch's value, and the row says so), so that a wrong weight is reported as a weight;
* ``input`` (shadow mode): each paired call's input as the port computed it;
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
its input gradient). Every floating-point leaf of what a layer returns (through tuples,
dicts and Hugging Face's ``ModelOutput``) takes torch's cotangent.

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

Shadow mode checks the code between layers too (a ``jnp`` reshape, an add outside any block,
an attention block's arithmetic between its projections): at each paired call, the input
the port computed itself (from torch's values one layer before) against torch's, an
``input`` row, before torch's input takes its place.

Integer inputs (token ids, an attention mask) reach both sides as they are; the precision
is ``dtype=`` or the torch model's. Calls that return more on one side (an attention
block's (output, weights), BEiT's embeddings with their (height, width)) are compared on
the output leaves both sides say are the same (``parity.pairing.match_outputs``: the same
names or places, and the main output; never two that only a shape would pair); the rest
are listed in ``ModelReport.one_sided``, with why: a row fails on numbers, never on form
or pairing.

The torch module is copied and cast to the comparison's dtype, and the Flax variables are
cast too: both sides compute in that precision, and neither model is changed (train-mode BatchNorm
updates running statistics; those updates are not compared: Flax averages the biased batch
variance, torch the unbiased one).
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import torch

from . import equinox_tree, record_equinox, record_flax, record_torch
from .convert import TORCH_DTYPES, map_arrays, numpy_dtype, to_jax, to_numpy, x64
from .model_report import LayerRow, ModelReport
from .calls import Call
from .description import describe_flax, describe_torch
from .equinox_tree import is_state
from .layout import flax_layout, get_value, is_eqx_module, is_nnx_module, nnx_modules, set_value
from .pairing import (CallPair, WeightMap, align, corresponding_outputs, format_alignment,
                      match_outputs)
from .tolerances import HALF, Diff, is_float, tolerance
from .weights import fill, leaf_values

__all__ = ["LayerRow", "ModelReport", "assert_model_parity", "compare_layers"]

MODES = ("chained", "shadow")
REFERENCES = ("direct", "float64")


def compare_layers(torch_module: torch.nn.Module, flax_model, variables, x, *,
                   train: bool = False, channels_last: bool | None = None,
                   to_flax: Callable | None = None, name_map: Mapping[str, Any] | None = None,
                   gradients: bool = True, seed: int = 0, rtol: float | None = None,
                   atol: float | None = None, train_arg: str | None = "train",
                   flax_kwargs: Mapping[str, Any] | None = None, mode: str = "chained",
                   reference: str | None = None, torch_kwargs: Mapping[str, Any] | None = None,
                   dtype=None, vmap: bool = True) -> ModelReport:
    """Run a torch model and its Flax port on the same input and compare them layer by layer.

    Args:
      torch_module: the torch model (not modified: a copy runs).
      flax_model: a linen Module, an nnx Module (then ``variables`` is None), or an Equinox
        port (an ``eqx.Module``; ``variables`` is its ``eqx.nn.State``, or None for a port
        without one).
      variables: linen variables, or None to initialise the linen model and import the torch
        weights (``load_torch_weights``); for nnx, None (the model holds its weights; they
        are compared as they are; load them with ``load_torch_weights`` first); for an
        Equinox port, its state or None (the module holds its weights, compared as they
        are).
      x: the input, in torch's layout (a NumPy/JAX array or torch tensor): floating-point
        (its dtype is the precision of the comparison, unless ``dtype`` says another), or
        integer or boolean (token ids), passed to both sides as it is.
      train: train-mode BatchNorm (batch statistics) on both sides: ``torch_module.train()``,
        ``train_arg=True`` to the linen model's ``__call__`` (when it takes that argument;
        the batch_stats collection is mutable), ``model.train()`` for nnx,
        ``eqx.nn.inference_mode(port, value=not train)`` for Equinox.
      channels_last: the Flax side takes and returns channels-last arrays (the input's axis 1
        moved last, and so for every array of rank >= 3 when the shapes say so); by
        default True for Flax and False for Equinox, which keeps torch's layout.
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
      torch_kwargs: more keyword arguments for the torch model's call (an attention mask:
        arrays become tensors, floating-point ones in the comparison's dtype).
      dtype: the precision of the comparison (both models and a floating ``x`` are cast to
        it); by default a floating ``x``'s dtype, else the torch model's.
      vmap: an Equinox port takes one example and is mapped over ``x``'s first axis
        (``jax.vmap``, with the axis name its BatchNorm layers use); False: it takes the
        batch.

    Returns:
      A ``ModelReport``.

    Raises:
      TypeError, ValueError: for a bad argument, before anything runs.
    """
    if not isinstance(torch_module, torch.nn.Module):
        raise TypeError(f"torch_module must be a torch.nn.Module, got {type(torch_module).__name__}")
    x = to_numpy(x)
    dtype = _run_dtype(x, dtype, torch_module)
    if is_float(x.dtype):
        x = x.astype(dtype)
    eqx_port = is_eqx_module(flax_model)
    nnx_model = not eqx_port and is_nnx_module(flax_model)
    if nnx_model and variables is not None:
        raise ValueError("variables must be None for an nnx model (it holds its own weights)")
    if eqx_port and not (variables is None or is_state(variables)):
        raise TypeError("variables: for an Equinox port, its eqx.nn.State or None, got "
                        f"{type(variables).__name__}")
    if channels_last is None:
        channels_last = not eqx_port
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if reference is None:
        direct = dtype == np.float64 or rtol is not None or atol is not None
        reference = "direct" if direct else "float64"
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {REFERENCES}, got {reference!r}")
    if eqx_port and any(isinstance(a, jax.ShapeDtypeStruct)
                        for a in jax.tree_util.tree_leaves(flax_model)):
        raise ValueError("the Equinox port holds shapes only (ShapeDtypeStruct leaves, as "
                         "eqx.filter_eval_shape returns them): load torch's weights into it "
                         "first, parity.load_torch_weights(torch_module, port, x=...)")
    if not eqx_port and variables is not None and any(
            isinstance(a, jax.ShapeDtypeStruct) for a in jax.tree_util.tree_leaves(variables)):
        raise ValueError("variables holds shapes only (ShapeDtypeStruct leaves, as "
                         "jax.eval_shape returns them): load torch's weights into it first, "
                         "variables = parity.load_torch_weights(torch_module, variables, "
                         "model=..., x=...), or pass variables=None")
    if torch_kwargs is not None and not isinstance(torch_kwargs, Mapping):
        raise TypeError(f"torch_kwargs must be a mapping, got {type(torch_kwargs).__name__}")
    with x64():
        x_flax = to_flax(x) if to_flax is not None else (
            np.moveaxis(x, 1, -1) if channels_last and x.ndim >= 3 else x)
        x_flax = to_jax(np.ascontiguousarray(to_numpy(x_flax)))
        kwargs = dict(flax_kwargs or {})
        if not (nnx_model or eqx_port) and train_arg and train_arg in _call_params(flax_model):
            kwargs[train_arg] = train
        initialised = not (nnx_model or eqx_port) and variables is None
        if eqx_port:
            target = (flax_model, variables)
        elif nnx_model:
            target = flax_model
        elif initialised:
            init_kwargs = {**kwargs, **({train_arg: False} if train_arg in kwargs else {})}
            # only the structure: every leaf is torch's (or the pairing raises)
            shapes = jax.eval_shape(lambda key, x: flax_model.init(key, x, **init_kwargs),
                                    jax.random.key(0), x_flax)
            target = _cast_linen(jax.tree_util.tree_map(
                lambda a: np.zeros(a.shape, a.dtype), shapes), dtype)
        else:
            target = variables
        recorder: Any
        prog: Any
        if eqx_port:
            run_target = equinox_tree.cast(flax_model, variables, dtype)
            describe_flax(target)  # its layers read before it runs: a missing state says so
            recorder = record_equinox
            prog = record_equinox.program(run_target[0], run_target[1], kwargs, train, vmap)
        else:
            run_target = _cast_nnx(target, dtype) if nnx_model else _cast_linen(target, dtype)
            recorder = record_flax
            prog = record_flax.program(flax_model if not nnx_model else run_target,
                                       None if nnx_model else run_target, kwargs, train)
        # Each side runs once for its description (Flax: abstractly, shapes only; torch:
        # the run compared, with gradients), and the two are aligned once: everything
        # below reads that alignment.
        f_trace, _ = recorder.trace(prog, x_flax)
        flax_desc = describe_flax(target, calls=f_trace)

        t_model = copy.deepcopy(torch_module).to(TORCH_DTYPES[dtype]).train(train)
        t_kwargs = _cast_floats(dict(torch_kwargs or {}), dtype)
        rng = np.random.default_rng([seed, 0x1A7E5])
        drawn: list[np.ndarray] = []
        f_root = [[(p, a) for p, a in c.outputs if jnp.issubdtype(a.dtype, jnp.floating)]
                  for c in f_trace if c.path == ""]

        def torch_weights(leaves):  # random weights of the loss, in torch's layout
            drawn[:] = [rng.standard_normal(tuple(y.shape)).astype(dtype) for _, y in leaves]
            # an output whose layout the shapes cannot tell weighs the same read both ways
            drawn[:] = [_Layouts(channels_last).weight(w, w.shape) for w in drawn]
            if f_root:  # what the Flax model does not return weighs nothing on either side
                kept = _corresponding_floats(leaves, f_root[-1], channels_last)
                drawn[:] = [w if i in kept else np.zeros_like(w) for i, w in enumerate(drawn)]
            return drawn

        t_run = record_torch.run(t_model, x, torch_weights, gradients=gradients,
                                 kwargs=t_kwargs)
        # the torch model's own modules and tensors (the run's copy is cast), its run's calls
        alignment = align(describe_torch(torch_module, calls=t_run.calls), flax_desc,
                          name_map, channels_last=channels_last)
        weights, pairs = alignment.weights, alignment.calls or []
        unpaired_torch = list(alignment.unpaired_torch)
        unpaired_flax = list(alignment.unpaired_flax)
        if initialised:  # torch's weights, in the structure init gave
            target = fill(alignment, target)
        weight_rows, exact = _weight_rows(weights, target, dtype)
        run_target = fill(alignment, run_target, only=exact, dtype=dtype)
        prog = prog.with_variables(run_target)  # the same program, on torch's exact values
        ref_run = None
        if reference == "float64":
            # In shadow mode the reference takes torch's recorded inputs where the Flax side
            # does: at the paired calls (an unpaired torch ReLU computes in the reference
            # as in the Flax port, from what came before it).
            ref_model = copy.deepcopy(t_model).double()
            t_shadow = {p.torch.start: p.torch for p in pairs} if mode == "shadow" else None
            ref_run = record_torch.run(ref_model, _cast_floats(x, np.float64),
                                       lambda leaves: [w.astype(np.float64) for w in drawn],
                                       gradients=gradients, shadow=t_shadow,
                                       kwargs=_cast_floats(t_kwargs, np.float64))

        layouts = _Layouts(channels_last, pairs)
        ws = _flax_loss_weights(drawn, t_run, f_trace, _Layouts(channels_last, pairs))
        shadow = _shadow(pairs, layouts) if mode == "shadow" else None
        f_run = recorder.run(prog, x_flax, ws, f_trace, gradients=gradients, shadow=shadow)

    by_start = {c.start: c for c in f_run.calls}
    ref_calls = ({c.start: c for c in ref_run.calls} if ref_run is not None else {})
    judge = _Judge(dtype, layouts, rtol, atol, reference == "float64")
    concrete = [(p, by_start[p.flax.start], ref_calls.get(p.torch.start)) for p in pairs
                if p.flax.start in by_start]
    output_rows, one_sided = _output_rows(concrete, judge, channels_last)
    rows = weight_rows + output_rows
    if f_run.error:  # the port stopped: its last rows are where
        if "" in unpaired_torch:
            unpaired_torch.remove("")
        rows.append(LayerRow("output", "", "", (), math.nan, math.nan, math.nan, False,
                             f"the {'Equinox port' if eqx_port else 'Flax model'} raised "
                             f"{f_run.error}"))
    elif gradients:
        rows += _gradient_rows(concrete, t_run, f_run, ref_run, weights, judge)
    return ModelReport(rows, np.dtype(dtype).name, train, unpaired_torch, unpaired_flax,
                       mode, "torch" if reference == "direct" else "torch float64",
                       format_alignment(alignment), one_sided,
                       "Equinox" if eqx_port else "Flax", list(dict.fromkeys(judge.untold)))


def _run_dtype(x: np.ndarray, dtype, torch_module) -> np.dtype:
    """The precision of the comparison: ``dtype``, else a floating ``x``'s, else the torch
    model's (its first floating-point parameter or buffer): integer inputs (token ids, an
    attention mask) carry none."""
    if not (is_float(x.dtype) or np.issubdtype(x.dtype, np.integer) or x.dtype == np.bool_):
        raise TypeError(f"x must be a floating-point, integer or boolean array, got dtype "
                        f"{x.dtype}")
    if dtype is not None:
        try:
            d = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"dtype must be a floating-point dtype, got {dtype!r}") from None
        if not is_float(d) or d not in TORCH_DTYPES:
            raise TypeError(f"dtype must be a floating-point dtype, got {dtype!r}")
        return d
    if is_float(x.dtype):
        return x.dtype
    floats = [t.dtype for t in [*torch_module.parameters(), *torch_module.buffers()]
              if t.is_floating_point()]
    if not floats:
        raise TypeError(f"x is {x.dtype} and the torch model holds no floating-point tensor "
                        "to take the precision from: pass dtype=")
    return numpy_dtype(floats[0])


def _cast_floats(tree, dtype):
    """``tree`` with its floating-point arrays cast to ``dtype`` (integers as they are)."""
    def cast(a):
        a = to_numpy(a)
        return a.astype(dtype) if is_float(a.dtype) else a

    return map_arrays(cast, tree)


def _corresponding_floats(t_leaves: list, f_leaves: list, channels_last) -> set[int]:
    """The indices of ``t_leaves`` ((leaf path, floating-point array)) that have a Flax
    counterpart among ``f_leaves`` ((leaf path, array))."""
    t = [(p, jax.ShapeDtypeStruct(tuple(a.shape), np.float64)) for p, a in t_leaves]
    return {i for i, _ in corresponding_outputs(t, list(f_leaves), channels_last)[0]}


def assert_model_parity(torch_module, flax_model, variables, x, **kwargs) -> ModelReport:
    """``compare_layers(...)`` that raises ``ParityError`` naming the first divergence."""
    return compare_layers(torch_module, flax_model, variables, x, **kwargs).raise_if_failed()


# --------------------------------------------------------------------------- layouts


def _in_flax_layout(t: np.ndarray, flax_shape: tuple, channels_last: bool) -> np.ndarray | None:
    """A torch-side array moved to the Flax side's layout, or None if no move fits."""
    how = flax_layout(t.shape, flax_shape, channels_last)
    return None if how is None else np.moveaxis(t, 1, -1) if how == "moved" else t


def _ambiguous(shape: tuple, channels_last: bool) -> bool:
    """Whether an array of ``shape`` reads the same with its axis 1 moved last and as it is
    ([2, 8, 8]: a token model whose length is its width, or a cube of an image)."""
    shape = tuple(shape)
    return (channels_last and len(shape) >= 3 and len(set(shape[1:])) == 1)


class _Layouts:
    """How each torch array becomes the Flax side's (``parity.layout.flax_layout``). Where
    both readings give the Flax array's shape, the one the call's other arrays show, else
    the one every other array of the model shows; where nothing tells (none shows, or they
    disagree), the array is not compared, and the report says so and how to settle it."""

    def __init__(self, channels_last: bool, pairs: Sequence[CallPair] = ()):
        self.channels_last = channels_last
        self.by_call: dict[int, str | None] = {}  # torch call start -> "moved", "same", None
        seen: set[str] = set()
        for p in pairs:
            shown = self._shown(p)
            seen |= shown
            self.by_call[p.torch.start] = next(iter(shown)) if len(shown) == 1 else (
                None if shown else "")
        model = next(iter(seen)) if len(seen) == 1 else None
        self.by_call = {k: (model if v == "" else v) for k, v in self.by_call.items()}
        self.model = model

    def _shown(self, p: CallPair) -> set[str]:
        """The readings the call's arrays that are not ambiguous show."""
        t, f = p.torch, p.flax
        arrays = [(a, b) for a, b in zip(t.inputs, f.inputs)]
        arrays += [(t.outputs[i][1], f.outputs[j][1])
                   for i, j in corresponding_outputs(t.outputs, f.outputs, self.channels_last)[0]]
        out = set()
        for a, b in arrays:
            shape = tuple(np.shape(a))
            if len(shape) >= 3 and not _ambiguous(shape, self.channels_last):
                how = flax_layout(shape, tuple(np.shape(b)), self.channels_last)
                if how is not None:
                    out.add(how)
        return out

    def reading(self, t_shape: tuple, flax_shape: tuple, start: int | None) -> str | None:
        """"moved", "same", None (no reading fits) or "unknown" (both fit, nothing tells)."""
        how = flax_layout(t_shape, flax_shape, self.channels_last)
        if how is None or not _ambiguous(t_shape, self.channels_last):
            return how
        decided = self.by_call.get(start, self.model) if start is not None else self.model
        return decided or "unknown"

    def move(self, t: np.ndarray, flax_shape: tuple, start: int | None = None):
        """``t`` in the Flax array's layout; None where no reading fits or none can be told."""
        how = self.reading(t.shape, flax_shape, start)
        return np.moveaxis(t, 1, -1) if how == "moved" else t if how == "same" else None

    def weight(self, w: np.ndarray, flax_shape: tuple, start: int | None = None):
        """A loss weight in the Flax array's layout; where the reading cannot be told, one
        that reads the same both ways (averaged over the moves), so that either side's
        gradient is the other's."""
        if self.reading(w.shape, flax_shape, start) != "unknown":
            return self.move(w, flax_shape, start)
        rank = w.ndim
        turns = [w]
        for _ in range(rank - 2):
            turns.append(np.moveaxis(turns[-1], 1, -1))
        return np.mean(turns, axis=0).astype(w.dtype)


def _shadow(pairs: list[CallPair], layouts: _Layouts) -> dict[int, record_flax.Shadow]:
    """What each paired Flax call takes from its torch call in shadow mode: the inputs (all
    of them where both sides take as many, else the main one) and the cotangents of the
    outputs that correspond (``parity.pairing.corresponding_outputs``); an array whose
    layout cannot be told keeps the port's own."""
    out = {}
    cl = layouts.channels_last
    for p in pairs:
        t, f = p.torch, p.flax
        n = len(t.inputs) if len(t.inputs) == len(f.inputs) else min(1, len(f.inputs))
        inputs = [layouts.move(a, s.shape, t.start) for a, s in zip(t.inputs[:n], f.inputs[:n])]
        grads: list = [None] * len(f.outputs)
        for i, j in corresponding_outputs(t.outputs, f.outputs, cl)[0]:
            g = t.output_grads[i] if i < len(t.output_grads) else None
            if g is not None:
                grads[j] = layouts.move(g, f.outputs[j][1].shape, t.start)
        out[f.start] = record_flax.Shadow(inputs, grads)
    return out


def _flax_loss_weights(drawn, t_run, f_trace: list[Call], layouts: _Layouts) -> list:
    """The loss's random weights in the Flax output's layout, for the Flax model's
    floating-point outputs that have a torch counterpart (zeros for the rest; none if the
    port does not run)."""
    root = [c for c in f_trace if c.path == ""]
    if not root:
        return []
    f = [(p, jax.ShapeDtypeStruct(tuple(a.shape), np.float64)) for p, a in root[-1].outputs
         if jnp.issubdtype(a.dtype, jnp.floating)]
    t_root = [c for c in t_run.calls if c.path == ""]
    t = ([(p, a) for p, a in t_root[-1].outputs if is_float(np.asarray(a).dtype)]
         if t_root else [])
    ws = [np.zeros(a.shape, drawn[0].dtype if drawn else np.float64) for _, a in f]
    start = t_root[-1].start if t_root else None
    for i, j in corresponding_outputs(t, f, layouts.channels_last)[0]:
        if i < len(drawn):
            w = layouts.weight(drawn[i], f[j][1].shape, start)
            if w is not None:
                ws[j] = w
    return ws


# --------------------------------------------------------------------------- rows


class _Judge:
    """One row's verdict: JAX against torch, or, with a float64 reference, JAX's error and
    torch's own error against it."""

    def __init__(self, dtype, layouts: _Layouts, rtol, atol, against_float64: bool):
        self.dtype, self.layouts = dtype, layouts
        self.channels_last = layouts.channels_last
        self.rtol, self.atol, self.against_float64 = rtol, atol, against_float64
        self.untold: list[str] = []  # rows not compared: their layout cannot be told

    def row(self, kind, t_name, f_path, t, j, order, ref=None, layout=True,
            start: int | None = None) -> LayerRow | None:
        """The row, or None where the array's layout cannot be told (listed in ``untold``)."""
        cl = self.channels_last and layout
        if cl and self.layouts.reading(t.shape, j.shape, start) == "unknown":
            self.untold.append(f"{kind} of {t_name or '(model)'} / {f_path or '(model)'} "
                               f"({'x'.join(map(str, t.shape))})")
            return None
        moved = (self.layouts.move(t, j.shape, start) if cl
                 else _in_flax_layout(t, j.shape, False))
        if moved is None and kind == "output":
            # one side broadcasts where the other repeats (torch's position ids [1, L]
            # against the port's [batch, L]): a difference of form; the values are compared
            common = _broadcast_shape(t.shape, j.shape)
            if common is not None:
                row = self.row(kind, t_name, f_path, np.broadcast_to(t, common),
                               np.broadcast_to(j, common), order,
                               None if ref is None else np.broadcast_to(ref, common), layout,
                               start)
                if row is None:
                    return None
                row.shape = tuple(t.shape)
                row.note = (f"torch's {tuple(t.shape)} and Flax's {tuple(j.shape)} compared "
                            f"broadcast to {common}")
                return row
        if moved is None:
            return LayerRow(kind, t_name, f_path, tuple(t.shape), math.inf, math.inf, 0.0,
                            False, f"shape {tuple(t.shape)} (torch) vs {tuple(j.shape)} (Flax)")
        label = "flax" + (f"/{f_path}" if f_path else "")
        if not is_float(t.dtype):  # indices must be equal
            diff = Diff(j, moved, label)
            return LayerRow(kind, t_name, f_path, tuple(t.shape), diff.worst, diff.rel, 0.0,
                            diff.worst == 0, detail="" if diff.worst == 0 else diff.detail(0))
        if self.against_float64 and ref is not None:
            want = (self.layouts.move(ref, j.shape, start) if cl
                    else _in_flax_layout(ref, j.shape, False))
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


def _weight_rows(weights: WeightMap, target, dtype) -> tuple[list[LayerRow], set]:
    """A row per mapped leaf: the Flax leaf (of ``target``) against torch's tensor rounded to
    the leaf's dtype (exact). Returns the rows and the (path, leaf) pairs that hold torch's
    value: the run computes with torch's own value there."""
    rows, exact = [], set()
    values = leaf_values(target)
    for pair in weights.pairs:
        for t_name, f_name in pair.tensors():
            have = to_numpy(values[(pair.flax.path, f_name)])
            full = to_numpy(pair.torch.tensor(t_name))
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


def _marked(rows: list[LayerRow | None], pair: CallPair, gap) -> list[LayerRow]:
    """``rows`` of one pair of calls (None: not compared), marked with how the calls were
    paired and ``gap``: the modules left unpaired that ran right before them (forward for
    outputs, backward for gradients)."""
    kept = [r for r in rows if r is not None]
    for r in kept:
        if pair.by_position:
            r.by_position = (pair.torch.type_name, pair.flax.type_name)
        r.unpaired_before = gap
    return kept


def _output_rows(concrete, judge: _Judge, channels_last) -> tuple[list[LayerRow], list[str]]:
    """A row per output leaf the two calls share (``corresponding_outputs``), and a line per
    leaf only one side returns (not compared: a difference of form is no failure)."""
    rows, one_sided = [], []
    for pair, f, ref in concrete:
        t = pair.torch
        refs = ref.outputs if ref is not None and len(ref.outputs) == len(t.outputs) else None
        match = match_outputs(t.outputs, f.outputs, channels_last)
        shared, t_only, f_only = match.pairs, match.torch_only, match.flax_only
        t_main, f_main = _first_float(t.outputs), _first_float(f.outputs)
        if not shared and t_main is not None and f_main is not None:
            # nothing fits where both return arrays: a wrong shape, a numeric failure
            shared = [(t_main, f_main)]
            t_only, f_only = [i for i in t_only if i != t_main], [j for j in f_only if j != f_main]
        n = len(t.inputs) if len(t.inputs) == len(f.inputs) else min(1, len(f.inputs))
        own = [(k, a, b) for k, (a, b) in enumerate(zip(t.inputs[:n], f.own_inputs[:n]))
               if _in_flax_layout(a, b.shape, channels_last) is not None]
        # shadow mode: the port's own input, from torch's values one step before
        rows += _marked([judge.row("input", t.path + (f"[{k}]" if n > 1 else ""),
                                   f.path + (f"[{k}]" if n > 1 else ""), a, b, 0,
                                   start=t.start)
                         for k, a, b in own], pair, pair.before)
        rows += _marked([judge.row("output", t.path + t.outputs[i][0], f.path + f.outputs[j][0],
                                   t.outputs[i][1], f.outputs[j][1], 0,
                                   None if refs is None else refs[i][1], start=t.start)
                         for i, j in shared], pair, pair.before)
        for side, call, only in (("torch", t, t_only), ("Flax", f, f_only)):
            for k in only:
                leaf, a = call.outputs[k]
                dtype = np.asarray(a).dtype
                what = match.why.get((side.lower(), k)) or (
                    "a floating-point array the other side does not return"
                    if is_float(dtype) else "not an array" if dtype == object
                    else "not a floating-point array")
                shape = "" if dtype == object else f", {_shape_text(a)}"
                one_sided.append(f"{call.path or '(model)'}{leaf} ({side}{shape}): {what}")
    return rows, list(dict.fromkeys(one_sided))


def _broadcast_shape(a: tuple, b: tuple) -> tuple | None:
    """The shape one of ``a``, ``b`` broadcasts to the other's (same rank), or None."""
    if len(a) != len(b):
        return None
    try:
        common = tuple(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        return None
    return common if common in (tuple(a), tuple(b)) else None


def _first_float(outputs) -> int | None:
    return next((i for i, (_, a) in enumerate(outputs) if is_float(np.asarray(a).dtype)), None)


def _shape_text(a) -> str:
    shape = tuple(np.shape(a))
    return "x".join(map(str, shape)) if shape else "scalar"


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
    # a tied tensor that the port holds twice: torch's gradient is the sum of both uses
    copies: dict[str, list] = {}
    for p in weights.pairs:
        for t_name, f_name in p.tensors():
            if t_name in p.torch.ties:
                copies.setdefault(p.torch.ties[t_name], []).append((p, t_name, f_name))
    rows, done = [], set()
    for pair, f, ref in sorted(concrete, key=lambda c: -c[0].torch.start):
        t, weight_pair = pair.torch, by_torch.get(pair.torch.path)
        at_call: list[LayerRow | None] = []
        if weight_pair is not None and t.start == first_start[t.path]:
            at_call += _parameter_rows(weight_pair, t_run, f_run, ref_run, judge, copies)
            done.add(t.path)
        refs = ref.input_grads if ref is not None else [None] * len(t.input_grads)
        for i, (a, b, r) in enumerate(zip(t.input_grads, f.input_grads, refs)):
            if a is None:
                continue  # nothing reached this input in torch
            suffix = f"[{i}]" if len(t.input_grads) > 1 else ""
            at_call.append(judge.row("input gradient", t.path + suffix, f.path + suffix, a, b,
                                     1, r, start=t.start))
        rows += _marked(at_call, pair, pair.after)
    for weight_pair in reversed(weights.pairs):
        if weight_pair.torch.name not in done:
            rows += _parameter_rows(weight_pair, t_run, f_run, ref_run, judge, copies)
    return rows


def _parameter_rows(pair, t_run, f_run, ref_run, judge: _Judge,
                    copies: Mapping[str, list]) -> list[LayerRow]:
    """A row per parameter of ``pair``; a tied tensor's (``copies``: full name -> the other
    pairs that load it) compares torch's gradient with the sum of the Flax leaves' that
    hold it."""
    rows = []
    for t_name, f_name in pair.tensors():
        full = pair.torch.full_name(t_name)
        grad = pair.torch.grad(t_run.grads, t_name)
        if grad is None:
            continue  # a buffer, or a tied name (compared under the first)
        f_path = f"{pair.flax.path}/{f_name}".lstrip("/")
        t = pair.rule.convert(t_name, grad, "flax")
        ref_grad = None if ref_run is None else pair.torch.grad(ref_run.grads, t_name)
        ref = None if ref_grad is None else pair.rule.convert(t_name, ref_grad, "flax")
        j = f_run.grads.get(f_path)
        if j is None:
            rows.append(LayerRow("gradient", full, f_path, tuple(grad.shape),
                                 math.inf, math.inf, 0.0, False, "no gradient on the Flax side"))
            continue
        also = [(p, n, f"{p.flax.path}/{f}".lstrip("/")) for p, n, f in copies.get(full, [])]
        for p, n, path in also:  # each copy's gradient, through torch's layout into this one's
            if path in f_run.grads:
                j = j + pair.rule.convert(t_name, p.rule.convert(n, f_run.grads[path], "torch"),
                                          "flax")
        row = judge.row("gradient", full, " + ".join([f_path] + [a for *_, a in also]),
                        t, j, 1, ref, layout=False)
        if row is not None:  # a parameter's gradient is in the weight's layout: always told
            row.shape = tuple(grad.shape)
            rows.append(row)
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
