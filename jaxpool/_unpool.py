"""Max unpooling as the transpose of the max-pool pick: the JAX side of
:func:`jaxpool.placement.plan_max_unpool`.

Each index names an element of its own window, so for every tap of the window (one offset
per spatial axis) a select keeps the values whose index names that tap, and the taps are
placed by an interleave (windows that do not overlap: a stack and a reshape) or by strided
pads (overlapping windows; a later window replaces an earlier one, as torch's CPU kernel
writes in input order). Selects, pads, reshapes and slices only: JAX's derivatives of any
order, in either mode, hold no scatter or gather.
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxpool.placement import UnpoolPlan
from jaxpool.windows import window_families


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


@functools.partial(jax.jit, static_argnums=0)
def max_unpool(plan: UnpoolPlan, x: jax.Array, indices: jax.Array) -> jax.Array:
    """torch's output: zeros, and each value at the element its index names."""
    masks = _tap_masks(plan, indices)
    zero = jnp.zeros((), x.dtype)
    if plan.strategy == "interleave":
        return _interleaved(plan, x, masks, zero)
    return _padded(plan, x, masks, zero)


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


@functools.partial(jax.jit, static_argnums=0)
def max_unpool_checked(plan: UnpoolPlan, x: jax.Array, indices: jax.Array
                       ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """:func:`max_unpool`, and how many indices name no tap of their own window, with the
    flat position of the first (for the error message). One program, so that an eager
    call compiles once; under an outer jit the counts are dropped and cost nothing."""
    masks = _tap_masks(plan, indices)
    missing = ~functools.reduce(jnp.logical_or, masks.values())
    return (max_unpool(plan, x, indices), jnp.sum(missing, dtype=jnp.int32),
            jnp.argmax(missing.reshape(-1)))
