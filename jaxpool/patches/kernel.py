"""``unfold`` and ``fold`` in JAX: static strided slices and interior pads only, so that no
derivative of any order holds a scatter or gather (:mod:`jaxpool.patches.plan` plans them)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from jaxpool.patches.plan import FoldPlan


# --- the programs: one per plan and dtype ----------------------------------------------------

def _sliced_taps(plan: FoldPlan, image: jax.Array) -> jax.Array:
    """``[N, C, H, W] -> [N, C*kh*kw, L]``: one strided slice of the zero-padded image per tap,
    stacked after the channels (so features are channel-major), blocks flattened."""
    (ph, pw), (sh, sw), (bh, bw) = plan.padding, plan.stride, plan.blocks
    zero = jnp.zeros((), image.dtype)
    padded = lax.pad(image, zero, [(0, 0, 0), (0, 0, 0), (ph, ph, 0), (pw, pw, 0)])
    n, c = image.shape[:2]
    taps = [lax.slice(padded, (0, 0, top, left),
                      (n, c, top + (bh - 1) * sh + 1, left + (bw - 1) * sw + 1), (1, 1, sh, sw))
            for top, left in plan.tap_offsets()]
    return jnp.stack(taps, axis=2).reshape(n, c * plan.taps, bh * bw)


def _summed_taps(plan: FoldPlan, columns: jax.Array) -> jax.Array:
    """``[N, C*kh*kw, L] -> [N, C, H, W]``: each tap's ``[N, C, bh, bw]`` columns spread to
    their image positions by an interior-padded ``lax.pad`` and added in torch's order, taps
    row-major, onto zeros (so a lone ``-0`` comes out ``+0``, as from torch's ``0 + -0``).
    The taps come out of one ``lax.split``, whose transpose is a concatenation."""
    n = columns.shape[0]
    (bh, bw), c = plan.blocks, plan.channels
    by_tap = columns.reshape(n, c, plan.taps, bh, bw)
    pieces = lax.split(by_tap, (1,) * plan.taps, axis=2)
    zero = jnp.zeros((), columns.dtype)
    # the barrier keeps XLA from dropping the addition of zeros that turns -0 into +0
    total = lax.optimization_barrier(jnp.zeros((n, c) + plan.image, columns.dtype))
    for piece, offset in zip(pieces, plan.tap_offsets()):
        placement = [(0, 0, 0), (0, 0, 0)] + plan.tap_placement(offset)
        total = total + lax.pad(piece.reshape(n, c, bh, bw), zero, placement)
    return total


def _batched(function, plan: FoldPlan, x: jax.Array) -> jax.Array:
    if plan.batched:
        return function(plan, x)
    return function(plan, x[None])[0]


@functools.partial(jax.jit, static_argnums=0)
def unfold(plan: FoldPlan, image: jax.Array) -> jax.Array:
    """Values copied by the slices; derivatives from the transpose of ``_summed_taps``, so
    that reverse mode (``fold`` of the cotangent) adds the taps in torch's order too."""

    @jax.custom_jvp
    def unfold(image):
        return _batched(_sliced_taps, plan, image)

    @unfold.defjvp
    def unfold_jvp(primals, tangents):
        (image,), (tangent,) = primals, tangents
        # the tangent's own shape: under vmap the rule sees one example
        columns = jax.eval_shape(functools.partial(_batched, _sliced_taps, plan), tangent)
        spread = jax.linear_transpose(functools.partial(_batched, _summed_taps, plan), columns)
        return unfold(image), spread(tangent)[0]

    return unfold(image)


@functools.partial(jax.jit, static_argnums=0)
def fold(plan: FoldPlan, columns: jax.Array) -> jax.Array:
    # JAX's own derivatives: the tangent is the same sum of pads, and the transposes of the
    # pads and the split are strided slices and a concatenation (unfold's copies).
    return _batched(_summed_taps, plan, columns)
