"""Window maxima along one axis: the JAX side of :func:`jaxpool.pooling.windows.window_families`.

torch's max pooling walks each window in row-major order and keeps an element when it is
greater than the maximum so far or is NaN: the first maximal element wins (the last NaN,
if any). The walk is separable: the winner of each row along the innermost axis, then the
winner among those along the next axis out, and so on, is the element torch picks. Along
one axis the walk runs over strided slices, one per tap of a window family, and keeps its
winner with ``where``. So JAX's own derivative of the walk is the linear map that picks
each window's winner: selects, strided slices and pads, whose transposes are selects, pads
and slices. No derivative of any order holds a scatter or a gather, and each window's whole
derivative reaches the element that torch's indices name.
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxpool.resampling import kernel as resampling_kernel
from jaxpool.core.program import static_array
from jaxpool.core.rules import tangent_from_adjoint
from jaxpool.pooling.kernel import fit_axis, pad_axis
from jaxpool.pooling.plan import PoolPlan
from jaxpool.resampling.plan import AxisSampling
from jaxpool.pooling.windows import (AxisPlan, WindowFamily, choose_max_strategy, choose_max_tangent,
                             codes_at_once, first_taps, holds_no_element, is_identity,
                             sliding_plan, window_families)


def index_dtype():
    """torch's int64 where JAX has it (``jax_enable_x64``), else int32."""
    return jax.dtypes.canonicalize_dtype(np.int64)


def window_max(x: jax.Array, plan: PoolPlan, with_indices: bool
               ) -> tuple[jax.Array, jax.Array | None]:
    """Each window's maximum (torch's pick), and with ``with_indices`` its flat index in the
    input's spatial plane (torch's ``return_indices``); ``x`` is laid out as
    ``plan.input_shape``."""
    if any(holds_no_element(p) for p in plan.axes):
        return _no_element(x, plan, with_indices)
    innermost_pooled = (plan.spatial_axes[-1] == x.ndim - 1
                        and not is_identity(plan.axes[-1]))
    rules = choose_max_tangent(plan.axes, innermost_pooled)
    if "picks" not in rules:
        return _max_by_axes(x, plan, rules, with_indices)
    # innermost first, as the walk
    steps = [(axis, axis_plan, window_families(axis_plan)[0])
             for axis, axis_plan, rule in reversed(list(zip(plan.spatial_axes, plan.axes, rules)))
             if rule == "picks"]
    values = _max_with_pick_tangents(x, steps, codes_at_once(plan.axes))
    if not with_indices:
        return values, None
    walk = tuple("identity" if r == "identity" else "values" for r in rules)
    return values, _max_by_axes(lax.stop_gradient(x), plan, walk, True)[1]


def _no_element(x, plan: PoolPlan, with_indices: bool):
    """Windows that hold no element (:func:`jaxpool.pooling.windows.holds_no_element`): torch's
    -inf, and as index the flat position of each window's first taps at or after the
    input's start (:func:`jaxpool.pooling.windows.first_taps`), which lies beyond the input. The
    values do not depend on ``x``, so every derivative is zero (torch's own backward sends
    the gradient to that index, into the next plane or out of its tensor)."""
    shape = plan.output_shape
    values = jnp.full(shape, -jnp.inf, x.dtype)
    if not with_indices:
        return values, None
    index, plane_stride = np.zeros((1,) * len(shape), np.int64), 1
    for axis, axis_plan in reversed(list(zip(plan.spatial_axes, plan.axes))):
        index = index + np.asarray(first_taps(axis_plan)).reshape(
            [-1 if a == axis else 1 for a in range(len(shape))]) * plane_stride
        plane_stride *= axis_plan.in_size
    return values, jnp.broadcast_to(jnp.asarray(index, index_dtype()), shape)


def _max_by_axes(x, plan: PoolPlan, rules: tuple[str, ...], with_indices: bool):
    """The walk axis by axis, each axis differentiated by its own rule."""
    extents = [p.in_size for p in plan.axes]
    index = None
    # Innermost axis first: torch's row-major walk picks within a row before across rows.
    for i in reversed(range(len(plan.axes))):
        axis, axis_plan = plan.spatial_axes[i], plan.axes[i]
        plane_stride = math.prod(extents[i + 1:])
        if rules[i] == "identity":
            if with_indices:
                offset = _along(np.arange(axis_plan.in_size) * plane_stride, axis, x.ndim)
                index = jnp.broadcast_to(offset if index is None else index + offset, x.shape)
            continue
        x, index = _max_along(x, index, axis, axis_plan, rules[i], plane_stride, with_indices)
    if with_indices:
        index = jnp.broadcast_to(jnp.asarray(0 if index is None else index, index_dtype()),
                                 x.shape)
    return x, index


def _max_along(x, index, axis: int, plan: AxisPlan, rule: str, plane_stride: int,
               with_indices: bool):
    if rule == "whole axis":
        return _max_of_axis(x, index, axis, plan, plane_stride, with_indices)
    if rule == "sliding":
        return _max_sliding(x, index, axis, plan, plane_stride, with_indices)
    families = window_families(plan)
    walked = all(choose_max_strategy(plan, f) == "walk" for f in families)
    if rule not in ("winners", "rows") and not walked:
        return _max_of_families(x, index, axis, plan, families, plane_stride, with_indices)
    values = (_max_with_walk_tangents(x, axis, plan, families) if rule not in ("winners", "rows")
              else _max_with_winner_tangents(x, axis, plan, families, rule))
    if not with_indices:
        return values, None
    return values, _max_of_families(x, index, axis, plan, families, plane_stride, True)[1]


def _max_sliding(x, index, axis: int, plan: AxisPlan, plane_stride: int, with_indices: bool):
    """Windows of many families (:func:`jaxpool.pooling.windows.is_sliding`): for each window length,
    the winner of the window of that length at every start (torch's walk over exactly that
    window), then each output of that length copies the one at its start. The copies are
    :mod:`jaxpool.resampling.kernel`'s picks: a program that does not grow with the output, whose
    derivative sends each output's tangent back to its window's start, and the walk's to
    the window's winner, as torch's backward does."""
    values = indices = None
    lengths = np.asarray(plan.lengths)
    for length in sorted(set(plan.lengths)):
        slide = sliding_plan(plan, length)
        family = window_families(slide)
        v, i = _max_with_winner_tangents(x, axis, slide, family, "winners"), None
        if with_indices:
            i = _max_of_families(lax.stop_gradient(x), index, axis, slide, family,
                                 plane_stride, True)[1]
        # outputs of another length read any valid start; the select below drops them
        starts = np.minimum(plan.starts, slide.out_size - 1)
        copies = AxisSampling(slide.out_size, plan.out_size,
                              tuple((int(s),) for s in starts),
                              ((1.0,),) * plan.out_size, copies=True)
        v = resampling_kernel.resample_axis(v, axis, copies)
        if with_indices:
            i = resampling_kernel.resample_axis(lax.stop_gradient(i), axis, copies)
        if values is None:
            values, indices = v, i
            continue
        this = _along(lengths == length, axis, x.ndim)
        values = lax.select(jnp.broadcast_to(this, v.shape), v, values)
        if with_indices:
            indices = jnp.where(this, i, indices)
    return values, indices


def _max_of_families(x, index, axis: int, plan: AxisPlan, families, plane_stride: int,
                     with_indices: bool):
    tables = None  # built on first use: only long windows need the padded input
    results = []
    for family in families:
        if choose_max_strategy(plan, family) == "walk":
            results.append(_walk(x, index, axis, plan, family, plane_stride, with_indices))
            continue
        if tables is None:
            tables = _DoublingTables(x, index, axis, plan, families, plane_stride,
                                     with_indices)
        results.append(tables.windows(family))
    values = _interleave([v for v, _ in results], axis)
    if not with_indices:
        return values, None
    return values, jnp.broadcast_to(_interleave([i for _, i in results], axis), values.shape)


def _max_with_pick_tangents(x, steps, at_once: bool):
    """Values from the walk, axis by axis (``steps``: (axis, plan, family), innermost
    first); derivatives from each window's winner over all those axes, coded as a small
    integer and held constant (found over all the axes at once with ``at_once``, else one
    axis at a time). The tangent is written as the transpose of "each input
    element sums the cotangents of the windows that picked it" (:func:`_spread_picks`), so
    that reverse mode, which transposes it back, writes the gradient in one pass over the
    input from shifted slices of the pooled cotangent: one compare and select per window
    and tap, where the walk's own transpose writes a padded copy per tap and axis."""

    pick_codes = _pick_codes_at_once if at_once else _pick_codes_by_axis

    @jax.custom_jvp
    def pool(x):
        for axis, plan, family in steps:
            x = _walk(x, None, axis, plan, family, 1, False)[0]
        return x

    @pool.defjvp
    def pool_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        values, code = pick_codes(lax.stop_gradient(x), steps)
        # ``pool(x)``: the plain call's values, and this rule again at higher orders.
        return pool(x), tangent_from_adjoint(lambda c: _spread_picks(c, code, steps), t,
                                             values.shape)

    return pool(x)


def _code_weights(steps):
    """{axis: weight} of a winner's code ``sum(tap_a * weight_a)`` (the innermost axis,
    first in ``steps``, weighing 1) and the smallest integer type that holds it."""
    weights, weight = {}, 1
    for axis, _, family in steps:
        weights[axis] = weight
        weight *= family.taps
    return weights, next(d for d in (jnp.int8, jnp.int16, jnp.int32) if weight <= np.iinfo(d).max)


def _tap_padding(plan: AxisPlan, families) -> tuple[int, int]:
    """Elements before and after the axis that hold every tap of the families' windows."""
    coords = np.concatenate([_tap_coordinates(plan, f)[0].ravel() for f in families])
    return max(0, -int(coords.min())), max(0, int(coords.max()) + 1 - plan.in_size)


def _tap_coordinates(plan: AxisPlan, family: WindowFamily):
    """The input coordinate of each tap of each window, ``[taps, count]``, and whether it
    lies in the input (not the padding)."""
    coords = np.array([family.coordinates(j, plan.pad_lo) for j in range(family.taps)])
    return coords, (coords >= 0) & (coords < plan.in_size)


def _pick_codes_at_once(x, steps):
    """Each window's maximum and its winner's code, ``sum(tap_a * weight_a)`` over the
    axes (the innermost weighing 1), in the smallest integer type that holds it: every
    combination of taps in torch's order (outer axes first), one strided slice of a padded
    copy of ``x`` each, compared and selected in one pass. Walking the axes one at a time
    instead wrote each axis's maxima and codes out, and took longer (BENCHMARKS.md, cell
    ``max3d 4x16x56x56x64 k3 s2 p1 NDHWC``; evidence ``_pick_codes_at_once``)."""
    weights, dtype = _code_weights(steps)
    widths = [(0, 0, 0)] * x.ndim
    geometry = []  # (axis, family, coordinates in the padded copy [taps, count], real, first)
    for axis, plan, family in sorted(steps, key=lambda step: step[0]):
        coords, real = _tap_coordinates(plan, family)
        lo, hi = _tap_padding(plan, (family,))
        widths[axis] = (lo, hi, 0)
        geometry.append((axis, family, coords + lo, real, real.argmax(axis=0)))
    padded = lax.pad(x, jnp.asarray(-jnp.inf, x.dtype), widths)
    best = code = None
    for combo in itertools.product(*(range(g[1].taps) for g in geometry)):
        if not all(real[j].any() for (_, _, _, real, _), j in zip(geometry, combo)):
            continue  # a tap in the padding of every window
        tap, first = padded, None
        for (axis, family, coords, _, first_real), j in zip(geometry, combo):
            tap = _strided(tap, axis, int(coords[j, 0]), family.count, family.step)
            if not (first_real == j).all():
                mask = _along(first_real == j, axis, x.ndim)
                first = mask if first is None else first & mask
        candidate = jnp.asarray(sum(j * weights[g[0]] for g, j in zip(geometry, combo)), dtype)
        if best is None:
            best, code = tap, jnp.broadcast_to(candidate, tap.shape)
            continue
        # A window keeps its first real tap whatever it is (as torch starts its walk
        # there); the padding (-inf) never replaces anything.
        keep = _replaces(tap, best)
        if first is not None:
            keep = keep | first
        best = lax.select(keep, tap, best)
        code = lax.select(keep, jnp.broadcast_to(candidate, code.shape), code)
    return best, code


def _pick_codes_by_axis(x, steps):
    """``_pick_codes_at_once``'s results from the walk, one axis at a time."""
    weights, dtype = _code_weights(steps)
    code = None
    for axis, plan, family in steps:
        x, code = _walk(x, code, axis, plan, family, weights[axis], True, taps=dtype)
        # Values and codes behind one barrier per axis: XLA:CPU then walks less of the
        # axis again inside the gradient's fusions, and the gradient is faster in both
        # layouts (BENCHMARKS.md, evidence `_pick_codes_by_axis`).
        x, code = lax.optimization_barrier((x, jnp.broadcast_to(code, x.shape)))
    return x, code


def _spread_picks(c, code, steps):
    """The transpose of the max's tangent: input element ``p`` sums ``c`` over the windows
    whose winner is ``p``. Along an axis, offset ``u = b*step + r`` from its family's
    start (``r < step``) lies in windows ``b - m`` for ``m < ceil(span / step)``, at their
    tap ``r + m*step``. So each phase ``r`` of the input (one per axis) is a sum over the
    taps that land on it of ``c`` where the code names that tap, from ``c`` and the codes
    shifted ``m`` windows, and the phases are interleaved: ``prod(taps)`` compares and
    selects of the pooled size, where a broadcast of every term to the input's size made
    the second derivative's transposed form reduce over each phase axis."""
    weights, _ = _code_weights(steps)
    geometry = []
    for axis, plan, family in sorted(steps, key=lambda step: step[0]):
        span = family.span
        shifts = -(-span // family.step)
        # the (m, tap) that land on phase r
        reach = [[(m, (r + m * family.step) // family.dilation) for m in range(shifts)
                  if r + m * family.step < span and (r + m * family.step) % family.dilation == 0]
                 for r in range(family.step)]
        geometry.append((axis, plan, family, shifts, family.count + shifts - 1, reach))
    # Padded once: slices of the padded arrays fuse into the pass that writes the
    # gradient, where a pad per term made XLA:CPU test bounds for every element of every
    # term (BENCHMARKS.md, "Max-pooling derivatives", tried: a pad per term).
    for axis, _, family, shifts, _, _ in geometry:
        c = _shift(c, axis, shifts - 1, family.count + 2 * (shifts - 1), 0)
        code = _shift(code, axis, shifts - 1, family.count + 2 * (shifts - 1), -1)
    zero = jnp.zeros((), c.dtype)

    def phase(rs):
        total = None
        for combo in itertools.product(*(g[5][r] for g, r in zip(geometry, rs))):
            c_m, code_m, expected = c, code, 0
            for (axis, _, _, shifts, blocks, _), (m, tap) in zip(geometry, combo):
                lo = shifts - 1 - m
                c_m = lax.slice_in_dim(c_m, lo, lo + blocks, axis=axis)
                code_m = lax.slice_in_dim(code_m, lo, lo + blocks, axis=axis)
                expected += tap * weights[axis]
            term = jnp.where(code_m == jnp.asarray(expected, code.dtype), c_m, zero)
            total = term if total is None else total + term
        if total is None:   # a stride longer than the window: no window reaches the phase
            shape = list(c.shape)
            for axis, _, _, _, blocks, _ in geometry:
                shape[axis] = blocks
            total = jnp.zeros(shape, c.dtype)
        return total

    def interleave(level, rs):
        if level == len(geometry):
            return phase(rs)
        axis, step = geometry[level][0], geometry[level][2].step
        parts = [interleave(level + 1, rs + (r,)) for r in range(step)]
        if step == 1:
            return parts[0]
        shape = parts[0].shape
        return jnp.stack(parts, axis=axis + 1).reshape(
            shape[:axis] + (shape[axis] * step,) + shape[axis + 1:])

    total = interleave(0, ())
    for axis, plan, family, *_ in geometry:
        total = _shift(total, axis, family.start - plan.pad_lo, plan.in_size, 0)
    return total


def _max_with_walk_tangents(x, axis: int, plan: AxisPlan, families):
    """Values from the walk over one copy of ``x`` padded with -inf; derivatives that
    repeat the walk's decisions (found on the held input, as the values) on the tangent
    padded once with zeros, so that its transposes slice one padded cotangent rather than
    pad a copy of it per tap: the same picks as JAX's derivative of the walk itself, bit
    for bit. Against that derivative the gradient is as fast and the second derivative
    much faster (its fusions recomputed the comparisons for each per-tap pad of the
    cotangent); slicing one padded copy rather than padding each tap (:func:`_tap`) is
    faster in every mode, as XLA:CPU tests bounds in every fused element of a pad
    (BENCHMARKS.md, cell ``max 32x192x28x28 k3 s1 p1``; "Max-pooling derivatives")."""
    lo, hi = _tap_padding(plan, families)

    def walk(x, tangent=None):
        padded = pad_axis(x, axis, lo, hi, -jnp.inf)
        tangent = None if tangent is None else pad_axis(tangent, axis, lo, hi)
        return [_walk(padded, None, axis, plan, f, 1, False, padding=lo, tangent=tangent)
                for f in families]

    @jax.custom_jvp
    def pool(x):
        return _interleave([values for values, _ in walk(x)], axis)

    @pool.defjvp
    def pool_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        # ``pool(x)``: the plain call's values, and this rule again at higher orders.
        picked = walk(lax.stop_gradient(x), t)
        return pool(x), _interleave([tangent for _, tangent in picked], axis)

    return pool(x)


def _max_with_winner_tangents(x, axis: int, plan: AxisPlan, families, rule: str):
    """Values from the walk; derivatives from each window's winning tap, held constant.
    The tangent is written as the transpose of "each input element sums the cotangents of
    the windows whose winning tap it is" (:func:`_sum_picks`), so that reverse mode, which
    transposes it back, builds the gradient from a few shifted copies of the (pooled)
    cotangent compared tap by tap: ``floor((span - 1) / stride) + 1`` input-sized terms,
    where the walk's own transpose writes a padded input-sized copy per tap."""

    @jax.custom_jvp
    def pool(x):
        return _max_of_families(x, None, axis, plan, families, 1, False)[0]

    @pool.defjvp
    def pool_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        values, taps = _winning_taps(lax.stop_gradient(x), axis, plan, families)
        # Written out once: fused into its consumers, the walk would run again for every
        # input element of every term.
        taps = lax.optimization_barrier(taps)
        adjoint = ((lambda c: _sum_picks_rows(c, taps, axis, plan)) if rule == "rows"
                   else (lambda c: _sum_picks(c, taps, axis, plan, families)))
        # ``pool(x)``: the plain call's values, and this rule again at higher orders.
        return pool(x), tangent_from_adjoint(adjoint, t, values.shape)

    return pool(x)


def _winning_taps(x, axis: int, plan: AxisPlan, families):
    """Each window's maximum and its winning tap (0 for the window's first element), as
    int8: the walk's choices, kept small because reverse mode holds them as residuals."""
    results = [_walk(x, None, axis, plan, family, 1, True, taps=jnp.int8) for family in families]
    values = _interleave([v for v, _ in results], axis)
    taps = _interleave([jnp.broadcast_to(w, v.shape) for v, w in results], axis)
    return values, taps


def _sum_picks(c, taps, axis: int, plan: AxisPlan, families):
    """The transpose of the max's tangent: input element ``p`` sums ``c`` over the windows
    whose winning tap is ``p``. Window ``q`` of a family starts at ``start + q*step``;
    offset ``u = b*step + r`` from the family's start (``r < step``) lies in windows
    ``b - m`` for ``m < ceil(span / step)``, at their tap ``r + m*step``: each ``m`` is a
    compare and a select per input element, from ``c`` and ``taps`` shifted ``m`` windows
    and broadcast along a new axis of ``r``."""
    total = None
    for family in families:
        c_f = _strided(c, axis, family.first, family.count, family.period)
        taps_f = _strided(taps, axis, family.first, family.count, family.period)
        span = family.span
        offset = family.start - plan.pad_lo      # input coordinate of offset u = 0
        if family.step == 0:
            # every window of the family is the one element at ``offset``
            part = jnp.sum(c_f, axis, keepdims=True)
        else:
            step = family.step if family.count > 1 else span
            shifts = -(-span // step)
            blocks = family.count + shifts - 1
            c_f, taps_f = jnp.expand_dims(c_f, axis + 1), jnp.expand_dims(taps_f, axis + 1)
            part = None
            for m in range(shifts):
                tap = np.arange(step) + m * step
                tap = np.where((tap % family.dilation == 0) & (tap < span),
                               tap // family.dilation, -2)
                expected = jnp.asarray(tap.reshape((step,) + (1,) * (c.ndim - axis - 1)),
                                       taps.dtype)
                picked = _shift(taps_f, axis, m, blocks, -1) == expected
                term = jnp.where(picked, _shift(c_f, axis, m, blocks, 0),
                                 jnp.zeros((), c.dtype))
                part = term if part is None else part + term
            part = part.reshape(c.shape[:axis] + (blocks * step,) + c.shape[axis + 1:])
        part = _shift(part, axis, offset, plan.in_size, 0)
        total = part if total is None else total + part
    return total


def _sum_picks_rows(c, taps, axis: int, plan: AxisPlan):
    """As :func:`_sum_picks`, one input row (along ``axis``) at a time: row ``p`` sums the
    cotangents of the windows that hold it where their winning tap is ``p``. The windows'
    rows come from one ``split``, whose transpose is a concatenation (slices would
    transpose to a padded copy per row and window in the second derivative)."""
    rows = []
    zero = jnp.zeros((), c.dtype)
    c_rows = lax.split(c, [1] * c.shape[axis], axis)
    t_rows = lax.split(taps, [1] * c.shape[axis], axis)
    for p, holders in enumerate(plan.windows_of_rows()):
        row = None
        for i in holders:
            tap = (p + plan.pad_lo - plan.starts[i]) // plan.dilation
            c_i, t_i = c_rows[i], t_rows[i]
            term = jnp.where(t_i == jnp.asarray(tap, taps.dtype), c_i, zero)
            row = term if row is None else row + term
        if row is None:
            row = jnp.zeros(c.shape[:axis] + (1,) + c.shape[axis + 1:], c.dtype)
        rows.append(row)
    return jnp.concatenate(rows, axis=axis)


def _shift(x, axis: int, lo: int, size: int, fill):
    """``x`` moved ``lo`` places along ``axis`` (cropped where ``lo`` is negative), padded
    with ``fill`` or cropped at the end to extent ``size``."""
    hi = size - lo - x.shape[axis]
    if lo == 0 and hi == 0:
        return x
    widths = [(0, 0, 0)] * x.ndim
    widths[axis] = (lo, hi, 0)
    return lax.pad(x, jnp.asarray(fill, x.dtype), widths)


def _max_of_axis(x, index, axis: int, plan: AxisPlan, plane_stride: int, with_indices: bool):
    """One window over the whole axis (global and adaptive -> 1 pooling). Values from the
    walk; derivatives from the winner's position, held constant, as a one-hot sum: one
    broadcast and select in reverse mode, where the walk's own transpose writes a padded
    copy per tap: a faster gradient and second derivative, the same forward (BENCHMARKS.md,
    cell ``adaptive max 32x512x7x7 -> 1``; evidence ``_max_of_axis``)."""

    @jax.custom_jvp
    def pool(x):
        return _winner(x, axis, plan, False)[0]

    @pool.defjvp
    def pool_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        # The values are the plain call's, bits and all (a sum starts from +0.0, so a
        # one-hot sum would turn a picked -0.0 into +0.0); calling ``pool`` again keeps
        # this rule for higher orders.
        return pool(x), _at_position(t, _position(x, axis, plan), axis)

    values = pool(x)
    if not with_indices:
        return values, None
    picked = lax.broadcasted_iota(jnp.int32, x.shape, axis) == _position(x, axis, plan)
    position = lax.broadcasted_iota(index_dtype(), x.shape, axis)
    offset = position * plane_stride + (0 if index is None else index)
    offset = jnp.sum(jnp.where(picked, offset, 0), axis, keepdims=True)
    return values, jnp.broadcast_to(offset, values.shape)


@functools.partial(jax.checkpoint, static_argnums=2)
def _at_position(t, position, axis: int):
    """``t`` at ``position`` along ``axis``: the tangent of a whole-axis max. Recomputed
    from ``position`` when differentiated, so that reverse mode keeps the small positions,
    not an input-sized mask, which made the eager gradient's first program large and slow
    to compile (BENCHMARKS.md, evidence ``_at_position``)."""
    picked = lax.broadcasted_iota(position.dtype, t.shape, axis) == position
    return jnp.sum(jnp.where(picked, t, jnp.zeros((), t.dtype)), axis, keepdims=True)


def _position(x, axis: int, plan: AxisPlan):
    """Where along ``axis`` each plane's winner lies (int32, extent 1 along ``axis``): the
    first element equal to the maximum (-0.0 equals 0.0, and torch keeps the first of
    equal elements), or the last NaN. Found by reductions, which XLA writes out once,
    where elements follow the axis (the walk's positions, fused into each input
    element's select, made XLA walk the whole axis again for every element: BENCHMARKS.md,
    cell ``adaptive max 32x512x7x7 -> 1 NHWC``)."""
    x = lax.stop_gradient(x)
    if math.prod(x.shape[axis + 1:]) == 1:
        # Along the minor axis XLA:CPU reduces slowly, and the fused walk is quicker
        # (BENCHMARKS.md, cell `adaptive max 32x512x7x7 -> 1`).
        return _winner(x, axis, plan, True)[1].astype(jnp.int32)
    position = lax.broadcasted_iota(jnp.int32, x.shape, axis)
    # (a NaN maximum matches nothing here; the last NaN is picked then)
    first = jnp.min(jnp.where(x == jnp.max(x, axis, keepdims=True), position, plan.in_size),
                    axis, keepdims=True)
    last_nan = jnp.max(jnp.where(jnp.isnan(x), position, -1), axis, keepdims=True)
    return jnp.where(last_nan >= 0, last_nan, first)


def _winner(x, axis: int, plan: AxisPlan, with_position: bool):
    """The whole axis's winner, and its position along the axis, by walk or doubling."""
    family = window_families(plan)[0]
    if choose_max_strategy(plan, family) == "walk":
        return _walk(x, None, axis, plan, family, 1, with_position)
    return _DoublingTables(x, None, axis, plan, (family,), 1, with_position).windows(family)


def _walk(x, index, axis: int, plan: AxisPlan, family: WindowFamily, plane_stride: int,
          with_indices: bool, taps=None, padding: int | None = None, tangent=None):
    """torch's walk over the windows of one family: one strided slice per tap. With
    ``with_indices``, each window's winner as a flat index (``index`` holds the inner axes'
    picks), or with ``taps`` (an integer dtype) as its tap number times ``plane_stride``
    plus the inner axes' code held in ``index``. With ``padding``, ``x`` is a copy padded
    with -inf that holds every tap, ``padding`` elements in front; with ``tangent`` too (a
    tangent padded as ``x``, with zeros), in place of the winner the tangent's element at
    each window's winner."""
    ndim = x.ndim
    coords, real = _tap_coordinates(plan, family)
    first_real = real.argmax(axis=0)                        # every window holds one
    best = winner = None
    for j in range(family.taps):
        if not real[j].any():
            continue
        if padding is None:
            tap = _tap(x, axis, coords[j], real[j], family.step, -jnp.inf)
        else:
            tap = _strided(x, axis, int(coords[j][0]) + padding, len(coords[j]), family.step)
        candidate = None
        if taps is not None:
            candidate = jnp.asarray(j * plane_stride, taps)
            if index is not None:
                candidate = _tap(index, axis, coords[j], real[j], family.step, 0) + candidate
        elif with_indices:
            candidate = _along(coords[j] * plane_stride, axis, ndim)
            if index is not None:
                candidate = _tap(index, axis, coords[j], real[j], family.step, 0) + candidate
        elif tangent is not None:
            candidate = _strided(tangent, axis, int(coords[j][0]) + padding, len(coords[j]),
                                 family.step)
        first = first_real == j
        if best is None and first.all():
            best, winner = tap, candidate
            continue
        if best is None:
            # A window holds -inf until its first real tap, which it keeps whatever it is
            # (as torch starts its walk there); padding (-inf) never replaces anything.
            best, winner = jnp.full_like(tap, -jnp.inf), candidate
        keep = _replaces(tap, best)
        if first.any():
            keep = keep | _along(first, axis, ndim)
        best = lax.select(keep, tap, best)
        if with_indices or tangent is not None:
            winner = jnp.where(keep, candidate, winner)
    return best, winner


def _tap(x, axis: int, coords: np.ndarray, real: np.ndarray, step: int, fill):
    """Element ``coords[q]`` of ``x`` along ``axis`` for every window ``q``: one strided
    slice of the windows whose tap is real, padded with ``fill`` for the rest. Padding each
    tap, not the input, lets XLA fuse it into the walk instead of writing a padded copy of
    the input (ResNet stem channels-last forward: three passes over memory -> two)."""
    first, last = int(real.argmax()), len(real) - 1 - int(real[::-1].argmax())
    tap = _strided(x, axis, int(coords[first]), last - first + 1, step)
    return pad_axis(tap, axis, first, len(real) - 1 - last, fill)


def _strided(x, axis: int, start: int, count: int, step: int):
    """Elements ``start, start + step, ...`` (``count`` of them) along ``axis``. A step of
    0 (adaptive windows from an axis of one element, which all start at it) broadcasts the
    one element."""
    if step == 0 or count == 1:
        one = lax.slice_in_dim(x, start, start + 1, axis=axis)
        return jnp.broadcast_to(one, one.shape[:axis] + (count,) + one.shape[axis + 1:])
    return lax.slice_in_dim(x, start, start + (count - 1) * step + 1, step, axis)


def _replaces(right, left):
    """torch's rule: a later element replaces the winner so far when it is greater or NaN.
    Applied to the winners of two adjacent spans it picks the winner of their union, so
    spans may be combined in any grouping, left before right."""
    return (right > left) | jnp.isnan(right)


class _DoublingTables:
    """Level ``k`` holds, at each position ``p`` of the padded axis, the winner of the
    ``2**k`` taps ``p, p + dilation, ...`` (and its index): level ``k`` combines two
    shifted slices of level ``k - 1``. Built once per axis, as deep as a family needs."""

    def __init__(self, x, index, axis: int, plan: AxisPlan, families, plane_stride: int,
                 with_indices: bool):
        self.axis, self.dilation = axis, plan.dilation
        # Right of the input, ceil-mode windows may overhang: -inf there is never picked.
        extent = max(f.start + (f.count - 1) * f.step + f.span for f in families)
        self.values = [fit_axis(x, axis, plan.pad_lo, extent, -jnp.inf)]
        padded_index = None
        if with_indices:
            coords = np.arange(extent) - plan.pad_lo
            padded_index = _along(coords * plane_stride, axis, x.ndim)
            if index is not None:
                padded_index = fit_axis(index, axis, plan.pad_lo, extent, 0) + padded_index
        self.indices = [padded_index]

    def _level(self, k: int):
        while len(self.values) <= k:
            shift = (1 << (len(self.values) - 1)) * self.dilation
            values, index = self.values[-1], self.indices[-1]
            size = values.shape[self.axis] - shift
            left = lax.slice_in_dim(values, 0, size, axis=self.axis)
            right = lax.slice_in_dim(values, shift, shift + size, axis=self.axis)
            keep = _replaces(right, left)
            self.values.append(lax.select(keep, right, left))
            if index is not None:
                index = jnp.where(keep, lax.slice_in_dim(index, shift, shift + size,
                                                         axis=self.axis),
                                  lax.slice_in_dim(index, 0, size, axis=self.axis))
            self.indices.append(index)
        return self.values[k], self.indices[k]

    def windows(self, family: WindowFamily):
        """Each window of ``family`` as the spans of 2**k taps that tile it, largest first."""
        best = winner = None
        offset = 0
        for k in reversed(range(family.taps.bit_length())):
            if not family.taps >> k & 1:
                continue
            values, index = self._level(k)
            start = family.start + offset * self.dilation
            span = _strided(values, self.axis, start, family.count, family.step)
            span_index = (None if index is None
                          else _strided(index, self.axis, start, family.count, family.step))
            if best is None:
                best, winner = span, span_index
            else:
                keep = _replaces(span, best)
                best = lax.select(keep, span, best)
                if winner is not None:
                    winner = jnp.where(keep, span_index, winner)
            offset += 1 << k
        return best, winner


def _interleave(parts: list, axis: int):
    """Window ``q*period + r`` is window ``q`` of family ``r``."""
    if len(parts) == 1:
        return parts[0]
    shape = jnp.broadcast_shapes(*(p.shape for p in parts))
    stacked = jnp.stack([jnp.broadcast_to(p, shape) for p in parts], axis=axis + 1)
    return stacked.reshape(shape[:axis] + (shape[axis] * len(parts),) + shape[axis + 1:])


def _along(values: np.ndarray, axis: int, ndim: int) -> jax.Array:
    """A static per-window array, shaped to broadcast along ``axis`` of an ``ndim`` array."""
    shape = [1] * ndim
    shape[axis] = len(values)
    dtype = bool if values.dtype == bool else index_dtype()
    return static_array(np.asarray(values, dtype), shape, axis)

