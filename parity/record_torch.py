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
from typing import Callable

import numpy as np
import torch

from .convert import output_leaves, to_numpy, to_torch
from .calls import Call, Run

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


def run(model: torch.nn.Module, x: np.ndarray, loss_weights: Callable[[list], list], *,
        gradients: bool, shadow: Mapping[int, Call] | None = None) -> Run:
    """Run ``model`` on ``x`` and, with ``gradients``, backpropagate ``sum(w * output)``
    (``loss_weights(outputs)`` draws the ``w``). ``shadow``: by call start, the recorded
    call whose inputs (and output cotangents) a call takes instead of its own."""
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
        call.outputs = [(p[len("output"):], to_numpy(a)) for p, a in leaves]
        calls.append(call)
        if not gradients or not isinstance(out, torch.Tensor) or not out.is_floating_point():
            return None
        if sub is not None and sub.output_grads and sub.output_grads[0] is not None \
                and tuple(sub.output_grads[0].shape) == tuple(out.shape):
            out = _ReplaceCotangent.apply(out, to_torch(sub.output_grads[0]).to(out.dtype))
        p = torch.zeros_like(out, requires_grad=True)
        probes[call.start][1].append(p)
        return out + p

    handles = []
    for m in model.modules():
        handles.append(m.register_forward_pre_hook(pre_hook))
        handles.append(m.register_forward_hook(hook))
    error = None
    try:
        with torch.set_grad_enabled(gradients):
            y = model(to_torch(x))
            if gradients:
                ys = [a for _, a in output_leaves(y) if _float(a)]
                loss = sum((to_torch(w) * a).sum() for w, a in zip(loss_weights(ys), ys))
                loss.backward()
    except Exception as e:  # noqa: BLE001 - torch is the reference: this is the user's bug
        raise RuntimeError(f"the torch model raised {type(e).__name__}: {e}") from e
    finally:
        for h in handles:
            h.remove()
    for call in calls:
        ins, outs = probes.get(call.start, ([], []))
        call.input_grads = [None if p.grad is None else to_numpy(p.grad) for p in ins]
        call.output_grads = [None if p.grad is None else to_numpy(p.grad) for p in outs]
    grads = {n: to_numpy(p.grad) for n, p in model.named_parameters() if p.grad is not None}
    return Run(calls, grads, error)
