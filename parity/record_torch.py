"""How a torch model calls its modules: each call's inputs, outputs and cotangents, through
forward pre-hooks and forward hooks.

As on the Flax side (``parity.record_flax``), each call's tensor arguments get a zero probe
(its gradient is the cotangent at the layer's input) and so does each output (its gradient
is the cotangent the layer receives: what shadow mode feeds the Flax layer). In shadow mode
(here only for the float64 reference of a low-precision comparison) a call computes from
the recorded inputs it is given, and receives the recorded output cotangents.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import numpy as np
import torch

from .convert import map_arrays, output_leaves, to_numpy, to_torch
from .calls import Call, Run, map_output_leaves

__all__ = ["run"]


class _ReplaceValue(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, value):
        return value.clone()

    @staticmethod
    def backward(ctx, g):
        return g, None  # straight through to the value replaced


class _ReplaceCotangent(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, cotangent):
        ctx.save_for_backward(cotangent)
        return y.clone()

    @staticmethod
    def backward(ctx, g):
        (cotangent,) = ctx.saved_tensors
        return cotangent, None


def _float(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point()


def _leaf_value(a) -> np.ndarray:
    """An output leaf as an array: a tensor's or a number's values; anything else (a key-value
    cache object) as an empty object array, recorded but never compared."""
    if isinstance(a, (torch.Tensor, np.ndarray, np.generic, int, float, bool)):
        return to_numpy(a)
    return np.array(None, dtype=object)


def run(model: torch.nn.Module, x: np.ndarray, loss_weights: Callable[[list], list], *,
        gradients: bool, shadow: Mapping[int, Call] | None = None,
        kwargs: Mapping[str, Any] | None = None) -> Run:
    """Run ``model`` on ``x`` (and ``kwargs``: arrays become tensors, as they are) and, with
    ``gradients``, backpropagate ``sum(w * output)`` (``loss_weights(leaves)`` draws the
    ``w``: one per floating-point output leaf, given as (leaf path, tensor)). ``shadow``: by call start, the recorded call
    whose inputs (and output cotangents) a call takes instead of its own. Each call's
    ``output_grads`` is parallel to its output leaves (None where not differentiated)."""
    calls: list[Call] = []
    starts: dict[int, Call] = {}  # by id of the module's current call frame
    probes: dict[int, tuple[list, list]] = {}
    stack: list[Call] = []
    names = {id(m): n for n, m in model.named_modules()}
    counter = [0]

    def pre_hook(module, args):
        k = counter[0]
        counter[0] += 1
        call = Call(names[id(module)], type(module).__name__, k)
        stack.append(call)
        sub = (shadow or {}).get(k)
        args = list(args)
        where = [i for i, a in enumerate(args) if _float(a)]
        ins = []
        for j, i in enumerate(where):
            a = args[i]
            if sub is not None and j < len(sub.inputs) and sub.inputs[j] is not None \
                    and tuple(sub.inputs[j].shape) == tuple(a.shape):
                a = _ReplaceValue.apply(a, to_torch(sub.inputs[j]).to(a.dtype))
            call.inputs.append(to_numpy(a))  # copied at once: an in-place op changes it later
            if gradients:
                p = torch.zeros_like(a, requires_grad=True)
                ins.append(p)
                a = a + p
            args[i] = a
        probes[k] = (ins, [])
        starts[k] = call
        return tuple(args)

    def hook(module, args, out):
        call = stack.pop()
        sub = (shadow or {}).get(call.start)
        leaves = output_leaves(out)
        call.outputs = [(p[len("output"):], _leaf_value(a)) for p, a in leaves]
        calls.append(call)
        if not gradients:
            return None
        # a probe per floating-point tensor among the output leaves (through tuples, named
        # tuples, dicts and ModelOutputs), in their order; None for the other leaves
        outs = [None] * len(leaves)
        probes[call.start] = (probes[call.start][0], outs)
        given = list(sub.output_grads) if sub is not None else []

        def probe(j, t):
            if j >= len(leaves) or leaves[j][1] is not t or not _float(t):
                return t
            g = given[j] if j < len(given) else None
            if g is not None and tuple(g.shape) == tuple(t.shape):
                t = _ReplaceCotangent.apply(t, to_torch(g).to(t.dtype))
            p = torch.zeros_like(t, requires_grad=True)
            outs[j] = p
            return t + p

        return map_output_leaves(out, probe)

    handles = []
    for m in model.modules():
        handles.append(m.register_forward_pre_hook(pre_hook))
        handles.append(m.register_forward_hook(hook))
    error = None
    try:
        with torch.set_grad_enabled(gradients):
            y = model(to_torch(x), **map_arrays(to_torch, dict(kwargs or {})))
            if gradients:
                leaves = [(p[len("output"):], a) for p, a in output_leaves(y) if _float(a)]
                loss = sum((to_torch(w) * a).sum()
                           for w, (_, a) in zip(loss_weights(leaves), leaves))
                loss.backward()
    except Exception as e:  # noqa: BLE001 - torch is the reference: this is the user's bug
        raise RuntimeError(f"the torch model raised {type(e).__name__}: {e}") from e
    finally:
        for h in handles:
            h.remove()
    for call in calls:
        ins, outs = probes.get(call.start, ([], []))
        call.input_grads = [None if p.grad is None else to_numpy(p.grad) for p in ins]
        call.output_grads = [None if p is None or p.grad is None else to_numpy(p.grad)
                             for p in outs]
    grads = {n: to_numpy(p.grad) for n, p in model.named_parameters() if p.grad is not None}
    return Run(calls, grads, error)
