"""Max unpooling as the transpose of the max-pool pick: the JAX side of
:func:`jaxpool.unpooling.plan.plan_max_unpool`.

Each index names an element of its own window. Windows that do not overlap (SegNet's 2x2)
are placed in one pass: every value and index repeated over its window's span (a broadcast
and a reshape), and each output element keeps its value where the index names it. Their
derivatives take the same placement tap by tap (a select per tap, then an interleave by a
stack and a reshape), whose transpose is slices, selects and sums: the repeat's transpose,
a sum over each window's span, made the gradient slower on XLA:CPU (BENCHMARKS.md,
evidence ``unpooling.kernel``). Overlapping windows place each
tap by a strided pad (a later window replaces an earlier one, as torch's CPU kernel writes
in input order). Broadcasts, selects, pads, reshapes and slices only: JAX's derivatives of
any order, in either mode, hold no scatter or gather.
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxpool.core.program import program
from jaxpool.unpooling.plan import UnpoolPlan
from jaxpool.pooling.windows import window_families


def _tap_targets(plan: UnpoolPlan, shape, dtype, taps: tuple[int, ...]):
    """For every window, the flat unpooled index of tap ``taps`` and whether it lies inside
    the unpooled extent (a tap of an edge window may fall in the padding)."""
    extents = [p.in_size for p in plan.axes]
    target, inside = None, None
    for i, (axis, axis_plan, tap) in enumerate(zip(plan.spatial_axes, plan.axes, taps)):
        # The max pool's windows are one family: window q starts at start + q*step.
        (family,) = window_families(axis_plan)
        offset = family.start + tap * family.dilation - axis_plan.pad_lo
        coord = lax.broadcasted_iota(dtype, shape, axis) * family.step + offset
        real = (coord >= 0) & (coord < axis_plan.in_size)
        term = coord * math.prod(extents[i + 1:])
        target = term if target is None else target + term
        inside = real if inside is None else inside & real
    return target, inside


def _tap_masks(plan: UnpoolPlan, indices: jax.Array) -> dict:
    """``{taps: mask}``: where each window's index names its tap ``taps``."""
    masks = {}
    for taps in itertools.product(*(range(k) for k in plan.kernel)):
        target, inside = _tap_targets(plan, indices.shape, indices.dtype, taps)
        masks[taps] = inside & (indices == target)
    return masks


@program(0)
def max_unpool(plan: UnpoolPlan, x: jax.Array, indices: jax.Array) -> jax.Array:
    """torch's output: zeros, and each value at the element its index names."""
    if plan.strategy == "interleave":
        return _repeated(plan, x, indices)
    return _padded(plan, x, _tap_masks(plan, indices), jnp.zeros((), x.dtype))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _repeated(plan: UnpoolPlan, x: jax.Array, indices: jax.Array) -> jax.Array:
    """Windows that do not overlap, in one pass: output element ``p`` lies in window
    ``(p + pad_lo) // stride`` at tap ``(p + pad_lo) % stride`` (per axis), so it holds that
    window's value where the window's index is ``p`` and the tap is a real one."""
    values = _spread(plan, x, jnp.zeros((), x.dtype))
    named = _spread(plan, indices, jnp.zeros((), indices.dtype))
    shape = values.shape
    extents = [p.in_size for p in plan.axes]
    keep = None
    target = None
    for i, (axis, axis_plan, k, s) in enumerate(zip(plan.spatial_axes, plan.axes,
                                                     plan.kernel, plan.stride)):
        position = lax.broadcasted_iota(indices.dtype, shape, axis)
        at = position + axis_plan.pad_lo
        real = (at % s < k) & (at // s < axis_plan.out_size)
        term = position * math.prod(extents[i + 1:])
        target = term if target is None else target + term
        keep = real if keep is None else keep & real
    assert keep is not None and target is not None  # a plan has a spatial axis
    return lax.select(keep & (named == target), values,
                      jnp.broadcast_to(jnp.zeros((), x.dtype), shape))


@_repeated.defjvp
def _repeated_jvp(plan: UnpoolPlan, primals, tangents):
    # The tangent is the same linear placement of the tangent values (bit for bit: both
    # copy), written tap by tap so that its transpose is slices and selects, not a sum
    # over each window's span.
    x, indices = primals
    return (_repeated(plan, x, indices),
            _interleaved(plan, tangents[0], _tap_masks(plan, indices),
                         jnp.zeros((), x.dtype)))


def _spread(plan: UnpoolPlan, a: jax.Array, fill: jax.Array) -> jax.Array:
    """``a`` (pooled) with each element repeated ``stride`` times along each spatial axis,
    cropped by the left padding and fitted (``fill``) to the unpooled extents."""
    strides = dict(zip(plan.spatial_axes, plan.stride))
    expanded: list[int] = []
    dims: list[int] = []
    for axis, n in enumerate(a.shape):
        dims.append(len(expanded))
        expanded += [n, strides[axis]] if axis in strides else [n]
    repeated = lax.broadcast_in_dim(a, tuple(expanded), tuple(dims)).reshape(
        tuple(n * strides.get(axis, 1) for axis, n in enumerate(a.shape)))
    widths = [(0, 0, 0)] * a.ndim
    for axis, axis_plan in zip(plan.spatial_axes, plan.axes):
        lo = -axis_plan.pad_lo
        widths[axis] = (lo, axis_plan.in_size - (repeated.shape[axis] + lo), 0)
    return lax.pad(repeated, fill, widths)


def _interleaved(plan: UnpoolPlan, x, masks, zero):
    """Windows that do not overlap: tap ``t`` of window ``q`` is element ``q*stride + t``
    of the interleaved taps (``t >= kernel``: zeros), then crop the left padding and fit
    the output extent."""
    strides, kernel = plan.stride, plan.kernel

    def image(taps):
        if any(t >= k for t, k in zip(taps, kernel)):
            return jnp.zeros_like(x)
        return lax.select(masks[taps], x, jnp.broadcast_to(zero, x.shape))

    def interleave(prefix: tuple[int, ...]) -> jax.Array:
        depth = len(prefix)
        if depth == len(strides):
            return image(prefix)
        axis = plan.spatial_axes[depth]
        parts = [interleave(prefix + (t,)) for t in range(strides[depth])]
        if len(parts) == 1:
            return parts[0]
        stacked = jnp.stack(parts, axis=axis + 1)
        shape = parts[0].shape
        return stacked.reshape(shape[:axis] + (shape[axis] * len(parts),) + shape[axis + 1:])

    y = interleave(())
    widths = [(0, 0, 0)] * y.ndim
    for axis, axis_plan in zip(plan.spatial_axes, plan.axes):
        lo = -axis_plan.pad_lo
        widths[axis] = (lo, axis_plan.in_size - (y.shape[axis] + lo), 0)
    return lax.pad(y, zero, widths)


def _padded(plan: UnpoolPlan, x, masks, zero):
    """Overlapping windows: each tap's values spread by a strided pad; taps in descending
    order, so that at an element named by several windows the last window (row-major)
    is written last, as torch's CPU kernel does."""
    out = None
    for taps in sorted(masks, reverse=True):
        widths = [(0, 0, 0)] * x.ndim
        for axis, axis_plan, t, s in zip(plan.spatial_axes, plan.axes, taps, plan.stride):
            lo = t - axis_plan.pad_lo
            last = (axis_plan.out_size - 1) * s + lo
            widths[axis] = (lo, axis_plan.in_size - 1 - last, s - 1)
        mask = masks[taps]
        placed = lax.pad(lax.select(mask, x, jnp.broadcast_to(zero, x.shape)), zero, widths)
        if out is None:
            out = placed
            continue
        where = lax.pad(mask, False, widths)
        out = lax.select(where, placed, out)
    return out


def max_unpool_checked(plan: UnpoolPlan, x: jax.Array, indices: jax.Array
                       ) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """:func:`max_unpool`, how many indices name no tap of their own window, and the flat
    position of the first (for the error message; None where there is none, or where the
    count is traced). The op and the count are one program (an eager call compiles once
    and pays one reduction of the indices, a fraction of the op); the first is looked for
    only when the count says an error is coming. Under an outer jit the count is dropped
    and costs nothing."""
    out, count = _placed_and_unplaced(plan, x, indices)
    if isinstance(count, jax.core.Tracer) or not int(count):
        return out, count, None
    return out, count, _first_unplaced(plan, indices)


def _unplaced(plan: UnpoolPlan, indices: jax.Array) -> jax.Array:
    return ~functools.reduce(jnp.logical_or, _tap_masks(plan, indices).values())


@program(0)
def _placed_and_unplaced(plan: UnpoolPlan, x: jax.Array, indices: jax.Array):
    return max_unpool(plan, x, indices), jnp.sum(_unplaced(plan, indices), dtype=jnp.int32)


@program(0)
def _first_unplaced(plan: UnpoolPlan, indices: jax.Array) -> jax.Array:
    return jnp.argmax(_unplaced(plan, indices).reshape(-1))
