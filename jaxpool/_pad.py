"""``pad`` in every mode from pads, slices, reversals and concatenations: the JAX side of
:func:`jaxpool.placement.plan_pad`. Their transposes are slices, pads and sums, so no
derivative of any order holds a scatter or a gather."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from jaxpool.placement import PadPlan


@functools.partial(jax.jit, static_argnums=0)
def pad(plan: PadPlan, x: jax.Array, value: jax.Array) -> jax.Array:
    """``value`` is an operand (a 0-d array of ``x``'s dtype), so one program serves every
    constant."""
    if plan.mode == "constant":
        widths = [(0, 0, 0)] * x.ndim
        for axis, lo, hi in plan.widths:
            widths[axis] = (lo, hi, 0)
        return lax.pad(x, value, widths)
    extend = {"reflect": _reflect, "replicate": _replicate, "circular": _circular}[plan.mode]
    for axis, lo, hi in plan.widths:
        x = extend(x, axis, lo, hi)
    return x


def _crop(x, axis: int, lo: int, hi: int):
    """Drop ``lo`` elements in front and ``hi`` at the end (both >= 0)."""
    if lo == 0 and hi == 0:
        return x
    return lax.slice_in_dim(x, lo, x.shape[axis] - hi, axis=axis)


def _join(parts, axis: int):
    parts = [p for p in parts if p is not None and p.shape[axis] > 0]
    return parts[0] if len(parts) == 1 else lax.concatenate(parts, axis)


def _reflect(x, axis: int, lo: int, hi: int):
    # torch's element o is x[reflect(o - lo)] (mirrored about the edges, the edge element
    # not repeated): mirror the positive pads, then crop the negative ones.
    n = x.shape[axis]
    left = (lax.rev(lax.slice_in_dim(x, 1, lo + 1, axis=axis), (axis,)) if lo > 0 else None)
    right = (lax.rev(lax.slice_in_dim(x, n - 1 - hi, n - 1, axis=axis), (axis,))
             if hi > 0 else None)
    return _crop(_join([left, x, right], axis), axis, max(-lo, 0), max(-hi, 0))


def _replicate(x, axis: int, lo: int, hi: int):
    # torch's element o is x[clamp(o - lo, 0, n - 1)]: a crop may reach into the copies.
    n = x.shape[axis]

    def copies(edge, count):
        if count <= 0:
            return None
        row = lax.slice_in_dim(x, edge, edge + 1, axis=axis)
        shape = list(x.shape)
        shape[axis] = count
        return jnp.broadcast_to(row, tuple(shape))

    return _crop(_join([copies(0, lo), x, copies(n - 1, hi)], axis), axis,
                 max(-lo, 0), max(-hi, 0))


def _circular(x, axis: int, lo: int, hi: int):
    # torch crops first, then wraps the cropped axis (the plan keeps each wrap within it).
    x = _crop(x, axis, max(-lo, 0), max(-hi, 0))
    n = x.shape[axis]
    left = lax.slice_in_dim(x, n - lo, n, axis=axis) if lo > 0 else None
    right = lax.slice_in_dim(x, 0, hi, axis=axis) if hi > 0 else None
    if n == 0:
        return x
    return _join([left, x, right], axis)
