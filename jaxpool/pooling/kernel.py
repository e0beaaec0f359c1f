"""Window sums along one axis: the JAX side of :mod:`jaxpool.pooling.windows`.

Each strategy is exact (a window sums only its own elements, so a NaN or inf reaches only
the windows that hold it) and is built from pad, slice, reshape, broadcast, reduce-sum,
reduce-window sums, select and dot. Their transposes are again of that kind, so derivatives
of any order, in either mode, contain no scatter.

Every derivative rule is exact in the same sense: a tangent rule is a linear map that adds
only a window's own elements (slices, pads, reductions, ``reduce_window`` sums, selects
with a constant mask), never a product with the 0/1 window matrix, whose zeros would turn a
NaN or inf of the tangent or cotangent into NaN across the whole axis (``0 * inf``). Its
transpose and its own derivatives are maps of the same kind, so a NaN or inf in a
derivative, of any order and in either mode, reaches what torch's does.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxpool.core.nonfinite import matmul_keeping_nonfinite, matmul_moved
from jaxpool.core.rules import tangent_from_adjoint
from jaxpool.pooling.plan import PoolPlan
from jaxpool.pooling.windows import AxisPlan, window_families


def window_sums(x: jax.Array, plan: PoolPlan) -> jax.Array:
    """Sum the windows of every spatial axis of ``x`` (laid out as ``plan.input_shape``)."""
    steps = list(zip(plan.spatial_axes, plan.axes, plan.strategies, plan.tangents))
    # One rule for the whole op when every axis's tangent is a product, rows or blocks:
    # reverse mode then ends on the innermost axis. Strided-slice tangents are better last, as
    # when each axis has its own rule (BENCHMARKS.md, cell `avg 32x256x14x14 k2`).
    if all(t in ("identity", "matrix", "rows", "reduce_window", "blocks")
           for t in plan.tangents):
        return _with_custom_tangents(x, steps)
    for step in steps:
        axis, axis_plan, strategy, tangent = step
        x = (_exact(x, axis, axis_plan, strategy) if tangent in ("values", "identity")
             else _with_custom_tangents(x, [step]))
    return x


def _with_custom_tangents(x: jax.Array, steps) -> jax.Array:
    """Values axis by axis from the exact strategies, outermost first; derivatives from
    each axis's tangent rule, innermost first, so that reverse mode ends on the innermost
    axis and writes the input-sized cotangent in its own layout (the other order ends in a
    transposed copy of it). Every rule transposes into pads, slices, reductions,
    broadcasts and ``reduce_window`` sums, so no derivative of any order holds a scatter."""
    linear_maps = []
    for axis, axis_plan, _, tangent in steps:
        if tangent == "matrix":
            linear_maps.append(functools.partial(_selected_sums, axis=axis,
                                                 matrix=window_matrix(axis_plan)))
        elif tangent == "reduce_window":
            linear_maps.append(functools.partial(_reduce_window_sums, axis=axis, plan=axis_plan))
        elif tangent == "rows":
            linear_maps.append(functools.partial(_rows_tangent, axis=axis, plan=axis_plan))
        elif tangent == "taps":
            linear_maps.append(functools.partial(_padded_taps, axis=axis, plan=axis_plan))
        elif tangent == "blocks":
            linear_maps.append(functools.partial(_blocks, axis=axis, plan=axis_plan))

    @jax.custom_jvp
    def pool(x):
        for axis, axis_plan, strategy, _ in steps:
            x = _exact(x, axis, axis_plan, strategy)
        return x

    @pool.defjvp
    def pool_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        for linear_map in reversed(linear_maps):
            t = linear_map(t)
        return pool(x), t

    return pool(x)


def _exact(x: jax.Array, axis: int, plan: AxisPlan, strategy: str) -> jax.Array:
    """The values of one axis's window sums (exact: a NaN or inf reaches only the windows
    that hold it). Differentiable by JAX itself except ``matrix``, whose values are not the
    plain product (see :func:`jaxpool.core.nonfinite.matmul_keeping_nonfinite`) and which is always wrapped."""
    if strategy == "identity":
        return x
    if strategy == "repeat":
        return repeat(x, axis, plan.out_size // plan.in_size)
    if strategy == "matrix":
        matrix = window_matrix(plan)
        return matmul_keeping_nonfinite(x, axis, matrix, matmul_moved, positive=matrix)
    return {"sums": _sums, "blocks": _blocks, "taps": _taps, "families": _families,
            "reduce_window": _reduce_window_sums}[strategy](x, axis, plan)


def _sums(x: jax.Array, axis: int, plan: AxisPlan) -> jax.Array:
    """Each window's sum written out from single-element slices (exact: a NaN or inf reaches
    only the windows that hold it). Padding holds zeros, so it is skipped, not built."""
    return _sum_rows(x, axis, [plan.real_rows(i) for i in range(plan.out_size)])


def _families(x: jax.Array, axis: int, plan: AxisPlan) -> jax.Array:
    """Windows that repeat with a period (torch's adaptive windows of ``n -> k`` repeat every
    ``k / gcd(n, k)`` outputs): each family of equal windows summed from one strided slice
    of the input per tap, and the families interleaved by a stack and a reshape. A program
    that does not grow with the extent, whose derivatives JAX writes as the slices'
    transposes (pads with interior padding), reshapes and sums."""
    sums = []
    for family in window_families(plan):
        total = None
        for tap in range(family.taps):
            start = family.coordinates(tap, plan.pad_lo)[0]
            row = lax.slice_in_dim(x, start, start + (family.count - 1) * family.step + 1,
                                   family.step, axis)
            total = row if total is None else total + row
        sums.append(total)
    interleaved = jnp.stack(sums, axis=axis + 1)
    return interleaved.reshape(x.shape[:axis] + (plan.out_size,) + x.shape[axis + 1:])


def _sum_rows(x: jax.Array, axis: int, groups) -> jax.Array:
    """Row ``i`` of the result (along ``axis``) is the sum of the rows ``groups[i]`` of ``x``."""
    rows = {}

    def row(r):
        if r not in rows:
            rows[r] = lax.slice_in_dim(x, r, r + 1, axis=axis)
        return rows[r]

    shape = x.shape[:axis] + (1,) + x.shape[axis + 1:]
    out = [functools.reduce(jnp.add, [row(r) for r in g]) if g else jnp.zeros(shape, x.dtype)
           for g in groups]
    return jnp.concatenate(out, axis=axis)


def _rows_tangent(t: jax.Array, axis: int, plan: AxisPlan) -> jax.Array:
    """The window sums of ``t`` along ``axis``, written as the transpose of their own
    transpose, "each input row is the sum of the windows that hold it": reverse mode
    transposes it back, and so computes the gradient as slices and sums of the cotangent,
    one input row at a time."""
    pooled = t.shape[:axis] + (plan.out_size,) + t.shape[axis + 1:]
    holding = plan.windows_of_rows()
    return tangent_from_adjoint(lambda c: _sum_rows(c, axis, holding), t, pooled)


def _reduce_window_sums(t: jax.Array, axis: int, plan: AxisPlan) -> jax.Array:
    """Equal windows at a fixed stride summed by one ``reduce_window`` (a tangent rule: it
    adds only each window's own elements, and its transpose, a pad and another
    ``reduce_window``, does too). Padding and a ceil-mode overhang hold zeros."""
    length, stride = plan.lengths[0], plan.stride
    hi = (plan.out_size - 1) * stride + length - plan.pad_lo - plan.in_size
    if hi < 0:  # the last window ends before the axis does
        t = lax.slice_in_dim(t, 0, plan.in_size + hi, axis=axis)
    window = [1] * t.ndim
    window[axis] = length
    strides = [1] * t.ndim
    strides[axis] = stride
    padding = [(0, 0)] * t.ndim
    padding[axis] = (plan.pad_lo, max(hi, 0))
    # A NumPy zero: JAX then sees a sum (reduce_window_sum), which it transposes.
    return lax.reduce_window(t, np.zeros((), t.dtype), lax.add, window, strides, padding)


def _selected_sums(t: jax.Array, axis: int, matrix: np.ndarray) -> jax.Array:
    """Window sums along ``axis`` of any windows, ``matrix`` their 0/1 ``[out, in]`` window
    matrix (a tangent rule): each window's elements picked by a select with the constant
    matrix and summed, so a NaN or inf reaches only the windows that hold it, where a
    product with the matrix would spread it (``0 * inf``). Costs the product's work
    without its vectorized kernel, in a program whose size does not grow with the windows:
    used only for the ``matrix`` strategy's axes, whose windows are too many for ``rows``."""
    k, n = matrix.shape
    picked = jnp.asarray(matrix.astype(bool).reshape((k, n) + (1,) * (t.ndim - axis - 1)))
    spread = jnp.broadcast_to(jnp.expand_dims(t, axis), t.shape[:axis] + (k,) + t.shape[axis:])
    return jnp.where(picked, spread, jnp.zeros((), t.dtype)).sum(axis=axis + 1)


def pad_axis(x: jax.Array, axis: int, lo: int, hi: int, value: float = 0) -> jax.Array:
    """``lo`` elements of ``value`` before ``x`` along ``axis``, ``hi`` after it."""
    if lo == 0 and hi == 0:
        return x
    widths = [(0, 0, 0)] * x.ndim
    widths[axis] = (lo, hi, 0)
    return lax.pad(x, jnp.asarray(value, x.dtype), widths)


def fit_axis(x: jax.Array, axis: int, lo: int, size: int, value: float = 0) -> jax.Array:
    """Pad ``lo`` elements of ``value`` in front, then pad or trim the end so the axis has
    extent ``size``."""
    hi = size - lo - x.shape[axis]
    x = pad_axis(x, axis, lo, max(hi, 0), value)
    if hi < 0:
        x = lax.slice_in_dim(x, 0, size, axis=axis)
    return x


def _blocks(x: jax.Array, axis: int, plan: AxisPlan) -> jax.Array:
    length, k = plan.lengths[0], plan.out_size
    x = fit_axis(x, axis, plan.pad_lo, k * length)
    x = x.reshape(x.shape[:axis] + (k, length) + x.shape[axis + 1:])
    return x.sum(axis=axis + 1)


def repeat(x: jax.Array, axis: int, factor: int) -> jax.Array:
    """Each element repeated ``factor`` times along ``axis`` (upsampling by replication)."""
    expanded = jnp.expand_dims(x, axis + 1)
    shape = x.shape[:axis + 1] + (factor,) + x.shape[axis + 1:]
    out = jnp.broadcast_to(expanded, shape)
    return out.reshape(x.shape[:axis] + (x.shape[axis] * factor,) + x.shape[axis + 1:])


def _taps(x: jax.Array, axis: int, plan: AxisPlan) -> jax.Array:
    """Equal windows at a fixed stride: one strided slice per offset inside the window.

    The windows that hold an element at every offset (all but a few at the edges) are
    summed from one strided slice per offset of the unpadded input; the edge windows,
    which reach into the padding, are summed element by element and concatenated on.
    Padding each offset's slice instead (``_padded_taps``) made XLA write each padded
    slice out, a slower forward (BENCHMARKS.md, cell ``avg 16x64x56x56 k3 s2 p1 ceil``); its
    derivatives, though, are the faster ones, so ``taps`` takes its tangent from
    ``_padded_taps``.
    """
    spans = _tap_spans(plan)
    lo = max(first for _, first, _ in spans)
    hi = min(last for _, _, last in spans)
    if hi < lo:
        return _sums(x, axis, plan)
    interior = None
    for offset, _, _ in spans:
        start = lo * plan.stride + offset - plan.pad_lo
        tap = lax.slice_in_dim(x, start, start + (hi - lo) * plan.stride + 1, plan.stride, axis)
        interior = tap if interior is None else interior + tap
    parts = [interior]
    if lo > 0:
        parts.insert(0, _sum_rows(x, axis, [plan.real_rows(i) for i in range(lo)]))
    if hi < plan.out_size - 1:
        parts.append(_sum_rows(x, axis, [plan.real_rows(i) for i in range(hi + 1, plan.out_size)]))
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=axis)


def _tap_spans(plan: AxisPlan) -> list[tuple[int, int, int]]:
    """Per offset inside the window: ``(offset, first, last)``, the windows whose element at
    that offset lies in the input. Window i reads element ``i*stride + offset - pad_lo``."""
    stride, k, n = plan.stride, plan.out_size, plan.in_size
    return [(offset,
             max(0, -(-(plan.pad_lo - offset) // stride)),
             min(k - 1, (n - 1 + plan.pad_lo - offset) // stride))
            for offset in range(plan.lengths[0])]


def _padded_taps(x: jax.Array, axis: int, plan: AxisPlan) -> jax.Array:
    """The same sums as ``_taps``, as one strided slice per offset of the unpadded input,
    each padded with the windows whose element at that offset lies in the padding. As a
    tangent rule it differentiates well (strided slices and pads transpose into each
    other); as values XLA writes each padded slice out."""
    total = None
    for offset, first, last in _tap_spans(plan):
        if last < first:
            continue
        start = first * plan.stride + offset - plan.pad_lo
        tap = lax.slice_in_dim(x, start, start + (last - first) * plan.stride + 1, plan.stride,
                               axis)
        tap = pad_axis(tap, axis, first, plan.out_size - 1 - last)
        total = tap if total is None else total + tap
    return total


def window_matrix(plan: AxisPlan) -> np.ndarray:
    """The 0/1 ``[out_size, in_size]`` matrix whose rows select each window (pad excluded)."""
    cols = np.arange(plan.in_size) + plan.pad_lo
    starts = np.asarray(plan.starts)[:, None]
    stops = np.asarray(plan.stops)[:, None]
    return ((cols >= starts) & (cols < stops)).astype(np.float64)

