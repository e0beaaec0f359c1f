"""``unfold`` and ``fold`` in JAX: pads, reshapes, transposes, slices and sums only
(:mod:`jaxpool.patches.plan` plans them), so that no derivative of any order holds a scatter
or gather.

Each op is a linear primitive whose transpose is the other (``core.rules.linear_primitive``):
every derivative, of any order and in either mode, is one of the two kernels below applied
to a tangent or a cotangent, never JAX's transpose of their insides. So unfold's gradient is
``fold`` of the cotangent, adding in torch's order, and a tangent's bits are the op's own.
"""

from __future__ import annotations

import jax
import jax.extend.core
import jax.numpy as jnp
from jax import lax

from jaxpool.core.program import program
from jaxpool.core.rules import linear_primitive
from jaxpool.patches.plan import FoldPlan


# --- phases: the padded image cut into rows of `stride` phases, one pass per tap group ------

def _pad(x: jax.Array, config: list[tuple[int, int, int]]) -> jax.Array:
    """``lax.pad`` with zeros (negative ends crop), left out where it changes nothing."""
    if not any(any(c) for c in config):
        return x
    return lax.pad(x, jnp.zeros((), x.dtype), config)


def _slice(x: jax.Array, start, limit, strides=None) -> jax.Array:
    if (tuple(start) == (0,) * x.ndim and tuple(limit) == x.shape
            and (strides is None or set(strides) == {1})):
        return x  # every phase of every row: the windows tile the axis
    return lax.slice(x, start, limit, strides)


def _phase_view(plan: FoldPlan, image: jax.Array) -> jax.Array:
    """``[*lead, C, H, W] -> [*lead, C, Mh, sh, Mw, sw]``: one pad (or crop) and a reshape."""
    lead = image.shape[:-3]
    (rows_h, rows_w) = [axis.rows for axis in plan.phases]
    padded = _pad(image, [(0, 0, 0)] * (image.ndim - 2) + [(a.low, a.high, 0)
                                                           for a in plan.phases])
    return padded.reshape(lead + (plan.channels, rows_h, plan.stride[0], rows_w, plan.stride[1]))


def _unfold_phases(plan: FoldPlan, image: jax.Array) -> jax.Array:
    """``[*lead, C, H, W] -> [*lead, C*kh*kw, L]``: each tap group a slice of the phase view
    moved to ``[.., C, taps_h, taps_w, bh, bw]``, the groups joined in the taps' order."""
    view = _phase_view(plan, image)
    lead = image.shape[:-3]
    n = len(lead)
    (bh, bw), (dh, dw) = plan.blocks, plan.dilation
    order = tuple(range(n + 1)) + (n + 2, n + 4, n + 1, n + 3)
    rows = []
    for gh in plan.phases[0].groups:
        row = []
        for gw in plan.phases[1].groups:
            start = (0,) * (n + 1) + (gh.shift, gh.phase, gw.shift, gw.phase)
            limit = lead + (plan.channels, gh.shift + bh, gh.phase + (gh.count - 1) * dh + 1,
                            gw.shift + bw, gw.phase + (gw.count - 1) * dw + 1)
            piece = _slice(view, start, limit, (1,) * (n + 2) + (dh, 1, dw))
            row.append(jnp.transpose(piece, order))
        rows.append(row[0] if len(row) == 1 else lax.concatenate(row, n + 2))
    taps = rows[0] if len(rows) == 1 else lax.concatenate(rows, n + 1)
    return taps.reshape(lead + (plan.channels * plan.taps, bh * bw))


def _fold_phases(plan: FoldPlan, columns: jax.Array) -> jax.Array:
    """``[*lead, C*kh*kw, L] -> [*lead, C, H, W]``: each tap group's entries put at their
    phase-view positions by one pad, the groups added in the taps' order onto zero (a pixel
    takes at most one entry per group, so this is torch's order), then the view reshaped
    back and its padding cropped."""
    lead = columns.shape[:-2]
    n = len(lead)
    (bh, bw), (kh, kw), (dh, dw), (sh, sw) = plan.blocks, plan.kernel, plan.dilation, plan.stride
    axes = plan.phases
    by_tap = columns.reshape(lead + (plan.channels, kh, kw, bh, bw))
    order = tuple(range(n + 1)) + (n + 3, n + 1, n + 4, n + 2)
    zero = jnp.zeros((), columns.dtype)
    # torch adds onto zeros (0 + -0 is +0); the barrier keeps XLA from dropping the addition
    total = lax.optimization_barrier(zero)
    for gh in axes[0].groups:
        for gw in axes[1].groups:
            start = (0,) * (n + 1) + (gh.first, gw.first, 0, 0)
            limit = lead + (plan.channels, gh.first + gh.count, gw.first + gw.count, bh, bw)
            piece = jnp.transpose(_slice(by_tap, start, limit), order)
            config = [(0, 0, 0)] * (n + 1)
            for g, axis, s, d, b in ((gh, axes[0], sh, dh, bh), (gw, axes[1], sw, dw, bw)):
                used = g.phase + (g.count - 1) * d + 1
                config += [(g.shift, axis.rows - g.shift - b, 0), (g.phase, s - used, d - 1)]
            total = total + _pad(piece, config)
    image = total.reshape(lead + (plan.channels, axes[0].rows * sh, axes[1].rows * sw))
    return _pad(image, [(0, 0, 0)] * (n + 1) + [(-a.low, -a.high, 0) for a in axes])


# --- the pair of primitives: each the other's transpose ----------------------------------
# Both strategies (``blocks``, ``phases``) are the passes above: ``blocks`` has one tap group
# per axis.

def _unfold_mapped(args, dims, *, plan):
    # the kernels take any leading axes: the mapped one joins them
    return unfold_p.bind(jnp.moveaxis(args[0], dims[0], 0), plan=plan), 0


def _fold_mapped(args, dims, *, plan):
    return fold_p.bind(jnp.moveaxis(args[0], dims[0], 0), plan=plan), 0


unfold_p: jax.extend.core.Primitive = linear_primitive(
    "jaxpool_unfold", lambda image, *, plan: _unfold_phases(plan, image),
    lambda cotangent, *, plan: [fold_p.bind(cotangent, plan=plan)], batch=_unfold_mapped)
fold_p: jax.extend.core.Primitive = linear_primitive(
    "jaxpool_fold", lambda columns, *, plan: _fold_phases(plan, columns),
    lambda cotangent, *, plan: [unfold_p.bind(cotangent, plan=plan)], batch=_fold_mapped)


@program(0)
def unfold(plan: FoldPlan, image: jax.Array) -> jax.Array:
    """``[N, C, H, W]`` (or ``[C, H, W]``) ``-> [N, C*kh*kw, L]``: values copied."""
    return unfold_p.bind(image, plan=plan)


@program(0)
def fold(plan: FoldPlan, columns: jax.Array) -> jax.Array:
    """``[N, C*kh*kw, L]`` (or ``[C*kh*kw, L]``) ``-> [N, C, H, W]``: overlaps added in
    torch's order."""
    return fold_p.bind(columns, plan=plan)
