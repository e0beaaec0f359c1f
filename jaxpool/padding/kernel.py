"""``pad`` in every mode from pads, slices, reversals, broadcasts, concatenations and
selects: the JAX side of :func:`jaxpool.padding.plan.plan_pad`. Their transposes are slices,
pads, selects and sums, so no derivative of any order holds a scatter or a gather.

The reflect, replicate and circular output is assembled in one expression of ``x`` (each
output block a slice of ``x``, joined axis by axis, the most major first), so that XLA
writes it in one pass instead of one input-sized copy per padded axis.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from jaxpool.core.program import program
from jaxpool.padding.plan import PadPlan


@program(0)
def pad(plan: PadPlan, x: jax.Array, value: ArrayLike) -> jax.Array:
    """``value`` is an operand (a 0-d array of ``x``'s dtype), so one program serves every
    constant."""
    if plan.mode == "constant":
        widths = [(0, 0, 0)] * x.ndim
        for axis, lo, hi in plan.widths:
            widths[axis] = (lo, hi, 0)
        return lax.pad(x, value, widths)
    return _assemble(x, sorted(plan.widths), plan.mode)


def _assemble(x, widths, mode: str):
    """``x`` padded along every ``(axis, lo, hi)`` of ``widths`` (ascending axes): the
    pieces along the first axis, each assembled along the rest, then joined."""
    if not widths:
        return x
    (axis, lo, hi), rest = widths[0], widths[1:]
    parts = [_assemble(p, rest, mode) for p in _PIECES[mode](x, axis, lo, hi)]
    return _join(parts, axis)


def _join(parts, axis: int):
    """The ``parts`` end to end along ``axis``. XLA:CPU leaves a concatenation along the
    minor (last) axis unfused once that axis holds 128 elements, which costs one more
    output-sized copy; there the parts are padded to the output and chosen by a select of
    their positions, which fuses into the one pass."""
    parts = [p for p in parts if p.shape[axis] > 0] or parts[:1]
    if len(parts) == 1:
        return parts[0]
    if axis != parts[0].ndim - 1:
        return lax.concatenate(parts, axis)
    size = sum(p.shape[axis] for p in parts)
    zero = jnp.zeros((), parts[0].dtype)
    out, start = None, 0
    for part in parts:
        widths = [(0, 0, 0)] * part.ndim
        widths[axis] = (start, size - start - part.shape[axis], 0)
        placed = lax.pad(part, zero, widths)
        if out is None:
            out = placed
        else:
            position = lax.broadcasted_iota(jnp.int32, placed.shape, axis)
            out = lax.select(position >= start, placed, out)
        start += part.shape[axis]
    return out


def _crop(parts, axis: int, lo: int, hi: int):
    """The pieces ``parts`` (end to end along ``axis``) less ``lo`` elements in front and
    ``hi`` at the end (both >= 0): a crop may reach past the first or last piece. At least
    one piece is kept (an empty one where the crop takes everything)."""
    kept, start = [], 0
    stop_all = sum(p.shape[axis] for p in parts) - hi
    for part in parts:
        n = part.shape[axis]
        a, b = max(lo - start, 0), min(stop_all - start, n)
        if b > a:
            kept.append(part if (a, b) == (0, n) else lax.slice_in_dim(part, a, b, axis=axis))
        start += n
    return kept or [lax.slice_in_dim(parts[0], 0, 0, axis=axis)]


def _reflect_pieces(x, axis: int, lo: int, hi: int):
    # torch's element o is x[reflect(o - lo)] (mirrored about the edges, the edge element
    # not repeated): mirror the positive pads, then crop the negative ones.
    n = x.shape[axis]
    parts = [x]
    if lo > 0:
        parts.insert(0, lax.rev(lax.slice_in_dim(x, 1, lo + 1, axis=axis), (axis,)))
    if hi > 0:
        parts.append(lax.rev(lax.slice_in_dim(x, n - 1 - hi, n - 1, axis=axis), (axis,)))
    return _crop(parts, axis, max(-lo, 0), max(-hi, 0))


def _replicate_pieces(x, axis: int, lo: int, hi: int):
    # torch's element o is x[clamp(o - lo, 0, n - 1)]: a crop may reach into the copies.
    n = x.shape[axis]

    def copies(edge, count):
        row = lax.slice_in_dim(x, edge, edge + 1, axis=axis)
        shape = list(x.shape)
        shape[axis] = count
        return jnp.broadcast_to(row, tuple(shape))

    parts = [x]
    if lo > 0:
        parts.insert(0, copies(0, lo))
    if hi > 0:
        parts.append(copies(n - 1, hi))
    return _crop(parts, axis, max(-lo, 0), max(-hi, 0))


def _circular_pieces(x, axis: int, lo: int, hi: int):
    # torch crops first, then wraps the cropped axis (the plan keeps each wrap within it).
    (x,) = _crop([x], axis, max(-lo, 0), max(-hi, 0))
    n = x.shape[axis]
    if n == 0:
        return [x]
    parts = [x]
    if lo > 0:
        parts.insert(0, lax.slice_in_dim(x, n - lo, n, axis=axis))
    if hi > 0:
        parts.append(lax.slice_in_dim(x, 0, hi, axis=axis))
    return parts


_PIECES = {"reflect": _reflect_pieces, "replicate": _replicate_pieces,
           "circular": _circular_pieces}
