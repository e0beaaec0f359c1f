"""Resampling along one axis at a time: the JAX side of :mod:`jaxpool.resampling.plan`.

Every strategy computes torch's products ``weight * x[tap]`` (zero weights included) or
copies, so values, NaN and inf are torch's; each is built from slice, pad, reshape,
broadcast, concatenate, select, add, multiply and dot, whose transposes are again of that
kind: no derivative of any order, in either mode, holds a scatter or a gather.
"""

from __future__ import annotations

import functools

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad, batching, mlir

from jaxpool.core.program import program
from jaxpool.pooling.kernel import repeat
from jaxpool.core.nonfinite import matmul_in_place, matmul_keeping_nonfinite
from jaxpool.core.rules import from_plus_zero
from jaxpool.resampling.plan import AxisSampling, ResamplePlan, Windows


def resample(x: jax.Array, plan: ResamplePlan) -> jax.Array:
    """Resample every spatial axis of ``x`` (laid out as ``plan.input_shape``) in the
    plan's order (:func:`jaxpool.resampling.plan.resample_order`)."""
    for i in plan.order:
        x = resample_axis(x, plan.spatial_axes[i], plan.axes[i])
    return x


def resample_axis(x: jax.Array, axis: int, plan: AxisSampling) -> jax.Array:
    strategy = plan.strategy()
    if plan.linear_primitive():
        # A linear map whose transpose is the transposed plan's map, added into a zeroed
        # gradient as torch's backward adds (for copies, ``copy-sums``).
        return _linear_resample_p.bind(x, axis=axis, plan=plan)
    if strategy == "identity":
        return x
    if strategy == "nonfinite-to-nan":
        # torch's x*1 + x*0: x itself where finite (a zero's sign kept), NaN for inf.
        return x + x * jnp.zeros((), x.dtype)
    if strategy == "repeat":
        return repeat(x, axis, plan.out_size // plan.in_size)
    if strategy == "phases":
        return _phases(x, axis, plan)
    if strategy == "selections":
        return _with_tap_sums_tangent(x, axis, plan, _selections)
    if strategy == "window-sums":
        return _with_tap_sums_tangent(x, axis, plan, _tap_sums)
    return _with_tap_sums_tangent(x, axis, plan, _matmul_keeping_nonfinite)


def _padded(x: jax.Array, axis: int, windows: Windows) -> tuple[jax.Array, int]:
    """``x`` padded with zeros so that every window lies inside it, and where the first
    window starts in it."""
    before, after = windows.padding
    if before or after:
        config = [(0, 0, 0)] * x.ndim
        config[axis] = (before, after, 0)
        x = lax.pad(x, jnp.zeros((), x.dtype), config)
    return x, windows.start + before


def _cut_windows(x: jax.Array, axis: int, windows: Windows) -> jax.Array:
    """``x``'s ``axis`` cut into the windows' grid: ``[..., count, length, ...]``, window
    ``b`` the inputs ``start + b*stride`` on (zeros outside ``x``): a pad, a reshape and
    one slice per chunk of ``stride``."""
    x, first = _padded(x, axis, windows)
    rows = windows.count + windows.chunks - 1
    grid = lax.slice_in_dim(x, first, first + rows * windows.stride, axis=axis)
    grid = grid.reshape(x.shape[:axis] + (rows, windows.stride) + x.shape[axis + 1:])
    chunks = [lax.slice_in_dim(grid, c, c + windows.count, axis=axis)
              for c in range(windows.chunks)]
    cut = chunks[0] if len(chunks) == 1 else jnp.concatenate(chunks, axis=axis + 1)
    return lax.slice_in_dim(cut, 0, windows.length, axis=axis + 1)


def _window_positions(x: jax.Array, axis: int, windows: Windows) -> list[jax.Array]:
    """Position ``e`` of every window, ``[..., count, 1, ...]`` for each ``e < length``:
    one strided slice each."""
    x, first = _padded(x, axis, windows)
    span = (windows.count - 1) * windows.stride + 1
    return [jnp.expand_dims(lax.slice_in_dim(x, first + e, first + e + span, windows.stride,
                                             axis), axis + 1)
            for e in range(windows.length)]


def _pick(positions: list[jax.Array], axis: int, local: np.ndarray) -> jax.Array:
    """``[..., count, block, ...]``: output ``(b, o)`` copies ``positions[local[b, o]]``
    of window ``b``, by a tree of selects, the lowest bit of the position first (each
    level pairs the candidates: even and odd positions). Slices and selects only, which
    XLA fuses into one pass over the output."""
    trailing = (1,) * (positions[0].ndim - axis - 2)
    candidates, bit = positions, 0
    while len(candidates) > 1:
        odd_here = ((local >> bit) & 1).astype(bool)
        mask = odd_here.reshape(local.shape + trailing)
        paired = []
        for even, odd in zip(candidates[::2], candidates[1::2]):
            paired.append(even if not odd_here.any() else odd if odd_here.all()
                          else jnp.where(mask, odd, even))
        candidates = paired + candidates[len(paired) * 2:]
        bit += 1
    (picked,) = candidates
    shape = picked.shape[:axis + 1] + (local.shape[1],) + picked.shape[axis + 2:]
    return jnp.broadcast_to(picked, shape)


def _outputs(blocks: jax.Array, axis: int, out_size: int) -> jax.Array:
    """``[..., count, block, ...] -> [..., out_size, ...]`` (the padded outputs dropped)."""
    shape = blocks.shape[:axis] + (blocks.shape[axis] * blocks.shape[axis + 1],)
    flat = blocks.reshape(shape + blocks.shape[axis + 2:])
    return lax.slice_in_dim(flat, 0, out_size, axis=axis)


def _picks(x: jax.Array, axis: int, plan: AxisSampling) -> jax.Array:
    """Copies in any order: each output picked from its block's window. (Its derivative
    rule is ``_tap_sums``: the picks' own transpose, one strided pad per window position,
    compiled slower, more so the longer the windows: BENCHMARKS.md, "Compile time, and the
    windows that replaced one slice per run"; evidence ``_picks``.)"""
    windows = plan.windows()
    assert len(windows.local) == 1 and windows.local[0].min() >= 0  # one tap per output
    return _outputs(_pick(_window_positions(x, axis, windows), axis, windows.local[0]), axis,
                    plan.out_size)


def _selections(x: jax.Array, axis: int, plan: AxisSampling) -> jax.Array:
    """``sum_t w_t * x[tap_t]`` with each tap picked from its block's window and its
    weights a constant array: torch's products, two or four per output, for an arbitrary
    scale (a matrix product would spend ``in`` multiply-adds per output). An output with
    fewer taps (a transposed plan's) takes zero for the missing ones, by a select: no
    product with a zero weight that would turn an inf into NaN."""
    windows = plan.windows()
    positions = _window_positions(x, axis, windows)
    trailing = (1,) * (x.ndim - axis - 1)
    total = None
    for t, local in enumerate(windows.local):
        weights = np.zeros(local.shape)
        weights.reshape(-1)[:plan.out_size] = [w[t] if t < len(w) else 0.0
                                               for w in plan.weights]
        term = (_pick(positions, axis, np.maximum(local, 0))
                * jnp.asarray(weights.reshape(weights.shape + trailing), x.dtype))
        if local.min() < 0:
            present = jnp.asarray((local >= 0).reshape(local.shape + trailing))
            term = jnp.where(present, term, jnp.zeros((), x.dtype))
        total = term if total is None else total + term
    assert total is not None  # chosen only where every output taps something
    return _outputs(from_plus_zero(total) if plan.from_zero else total, axis, plan.out_size)


def _copy_sums(x: jax.Array, axis: int, plan: AxisSampling) -> jax.Array:
    """Each output the sum of its taps (``plan.sums``: none or more, weight 1), in tap
    order from ``+0``, as torch's backward of a copy adds each output's gradient into a
    zeroed one: the ``t``-th taps picked as ``_picks`` picks, zero where an output has
    fewer. Only the taps are read, so NaN and inf reach only the outputs that tap them."""
    windows = plan.windows()
    positions = _window_positions(x, axis, windows)
    trailing = (1,) * (x.ndim - axis - 1)
    total = None
    for local in windows.local:
        term = _pick(positions, axis, np.maximum(local, 0))
        if local.min() < 0:
            present = jnp.asarray((local >= 0).reshape(local.shape + trailing))
            term = jnp.where(present, term, jnp.zeros((), x.dtype))
        total = term if total is None else total + term
    if total is None:  # no output taps anything
        shape = x.shape[:axis] + (windows.count, windows.block) + x.shape[axis + 1:]
        total = jnp.zeros(shape, x.dtype)
    return _outputs(from_plus_zero(total), axis, plan.out_size)


def _no_taps(x: jax.Array, axis: int, size: int) -> jax.Array:
    """Zeros for ``size`` outputs along ``axis`` that tap nothing."""
    return jnp.zeros(x.shape[:axis] + (size,) + x.shape[axis + 1:], x.dtype)


def _weighted(x: jax.Array, axis: int, plan: AxisSampling, rows, weights) -> jax.Array:
    """``sum_t w_t * rows_t`` in tap order, or the one copied row, or (``plan.sums``) the
    rows' sum from ``+0``; from ``+0`` too where ``plan.from_zero`` (fused with the sum
    here: after the phases are interleaved it is a pass of its own)."""
    if plan.sums:
        return from_plus_zero(functools.reduce(jnp.add, rows))
    terms = [row if plan.copies else row * jnp.asarray(w, x.dtype)
             for row, w in zip(rows, weights)]
    total = functools.reduce(jnp.add, terms)
    return from_plus_zero(total) if plan.from_zero else total


def _written_out(x: jax.Array, axis: int, plan: AxisSampling, outputs: range,
                 row=None) -> list:
    """The outputs ``outputs``, a piece per run of equal taps (``plan.runs``), each tap a
    one-element row from ``row(j)`` (default: a slice of ``x``)."""
    if row is None:
        def row(j):
            return lax.slice_in_dim(x, j, j + 1, axis=axis)
    rows: dict[int, jax.Array] = {}

    def cached(j):
        if j not in rows:
            rows[j] = row(j)
        return rows[j]

    # A run of outputs with the same taps (the clamped ends of an upsampling) is one piece:
    # each tap's row times a vector of the run's weights (the same products, in the same
    # order). XLA:CPU does not fuse a concatenation of many one-row pieces, or of one piece
    # repeated, and wrote the whole axis out once more (DeepLab's x8: 4 outputs at each end).
    parts: list[jax.Array] = []
    for run in plan.runs(outputs):
        rows_of_run = [cached(j) for j in plan.taps[run.start]]
        if not rows_of_run:  # sums: inputs no output copies
            parts.append(_no_taps(x, axis, len(run)))
        elif len(run) == 1:
            parts.append(_weighted(x, axis, plan, rows_of_run, plan.weights[run.start]))
        elif plan.copies:
            shape = list(rows_of_run[0].shape)
            shape[axis] = len(run)
            parts.append(jnp.broadcast_to(rows_of_run[0], tuple(shape)))
        else:
            shape = [1] * x.ndim
            shape[axis] = len(run)
            weights = [np.array([plan.weights[o][t] for o in run]).reshape(shape)
                       for t in range(len(rows_of_run))]
            parts.append(_weighted(x, axis, plan, rows_of_run, weights))
    return parts


def _phases(x: jax.Array, axis: int, plan: AxisSampling) -> jax.Array:
    """One strided slice per distinct tap start of the periodic stretch, shared by the
    phases that read it, the phases interleaved (stacked after the axis and reshaped), and
    the edge outputs written out from rows of those slices where they hold the tap.

    Why shared: the transpose of a slice is an input-sized pad, and where the next axis's
    transpose reads the sum of such pads, XLA:CPU writes each one out. A slice per phase and
    tap, and a slice of ``x`` per edge tap, made bilinear x2 on 4x256x32x32 10 kernels (7
    input-sized pads); shared slices 8, and edge rows cut from them 6.

    ``phases.varying`` (``filter-phases``): each tap's weight a constant ``[count]`` vector
    of its outputs' own weights."""
    phases = plan.phases()
    assert phases is not None  # chosen only for a periodic axis
    count, step = phases.count, phases.step
    sliced: dict[int, jax.Array] = {}

    def tap(start: int) -> jax.Array:
        if start not in sliced:
            sliced[start] = lax.slice_in_dim(x, start, start + (count - 1) * step + 1, step,
                                             axis)
        return sliced[start]

    if phases.varying:
        shape = (count,) + (1,) * (x.ndim - axis - 1)
        outputs = np.arange(count) * phases.period + phases.first
        weights_of: list = [[np.array([plan.weights[i + p][t] for i in outputs]).reshape(shape)
                             for t in range(len(starts))]
                            for p, starts in enumerate(phases.starts)]
    else:
        weights_of = list(phases.weights)
    values = [_weighted(x, axis, plan, [tap(s) for s in starts], weights) if starts
              else _no_taps(x, axis, count)  # sums: inputs no output copies
              for starts, weights in zip(phases.starts, weights_of)]
    if phases.period == 1:
        interior = values[0]
    else:
        stacked = jnp.stack(values, axis=axis + 1)
        interior = stacked.reshape(x.shape[:axis] + (count * phases.period,) + x.shape[axis + 1:])

    def row(j: int) -> jax.Array:
        for start, taps in sliced.items():
            q, r = divmod(j - start, step)
            if r == 0 and 0 <= q < count:
                return lax.slice_in_dim(taps, q, q + 1, axis=axis)
        return lax.slice_in_dim(x, j, j + 1, axis=axis)

    parts = (_written_out(x, axis, plan, range(phases.first), row) + [interior]
             + _written_out(x, axis, plan, range(phases.stop, plan.out_size), row))
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=axis)


def _with_tap_sums_tangent(x: jax.Array, axis: int, plan: AxisSampling, values) -> jax.Array:
    """Values from ``values`` (``_matmul_keeping_nonfinite``, ``_selections`` or
    ``_tap_sums`` itself), derivatives from ``_tap_sums`` (the map is linear, so its
    derivative is itself whatever the input holds), which keeps a tangent's or cotangent's
    NaN and inf where torch does.
    The selections' own transpose, a sum of one pad per run, ran far slower than a
    product's on XLA:CPU (BENCHMARKS.md, cell
    ``U-Net bilinear x2 align_corners, 4x64x64x64``; evidence ``_with_tap_sums_tangent``)."""

    @jax.custom_jvp
    def resampled(x):
        return values(x, axis, plan)

    @resampled.defjvp
    def resampled_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return resampled(x), _tap_sums(t, axis, plan, stacked=True)

    return resampled(x)


def _tap_sums(t: jax.Array, axis: int, plan: AxisSampling, stacked: bool = False
              ) -> jax.Array:
    """``sum_t w_t * t[tap_t]`` along ``axis`` (a tangent rule), each output's products
    picked by a select with the constant tap support and summed: a NaN or inf reaches only
    the outputs that tap it, a zero weight included (``0 * inf``), and the transpose (a
    broadcast, a select, a product, a sum) sends a cotangent only to its output's taps, as
    torch's backward does; a product with the ``[out, in]`` matrix would spread it along
    the axis. An output that taps one element twice (clamped edges) takes one layer per
    repeat, since ``w1*inf + w2*inf`` is not ``(w1 + w2)*inf``. Each block of outputs
    reads its own window (``plan.windows()``), so the work is ``length`` per output rather
    than ``in``, and the program's size does not depend on the extents.

    ``stacked`` (the tangent rule): each window repeated for its block's outputs by
    stacking copies rather than by a broadcast, the same values; the transpose of a
    broadcast is a reduction, which XLA:CPU runs on a written-out spread of every window
    for every output, where the copies' transpose is one fused sum: a faster gradient
    (BENCHMARKS.md, cell ``bicubic 224 -> 299, 8x3``). As a forward the copies cost more
    (cell ``bilinear antialias 512 -> 224, 8x3``), so the values keep the broadcast."""
    windows = plan.windows()
    cut = _cut_windows(t, axis, windows)
    if stacked:
        spread = jnp.stack([cut] * windows.block, axis=axis + 1)
    else:
        spread = jnp.broadcast_to(jnp.expand_dims(cut, axis + 1),
                                  cut.shape[:axis + 1] + (windows.block,) + cut.shape[axis + 1:])
    trailing = (1,) * (t.ndim - axis - 1)
    terms = []
    for weights, support in windows.layers:
        w = jnp.asarray(weights.reshape(weights.shape + trailing), t.dtype)
        picked = jnp.asarray(support.reshape(support.shape + trailing))
        terms.append(jnp.where(picked, spread * w, jnp.zeros((), t.dtype)).sum(axis=axis + 2))
    return _outputs(functools.reduce(jnp.add, terms), axis, plan.out_size)


def _matmul_keeping_nonfinite(x: jax.Array, axis: int, plan: AxisSampling) -> jax.Array:
    """``x`` times the plan's ``[out, in]`` matrix, NaN and inf where torch's sum of products
    puts them (every tap's product computed, a zero weight's too)."""
    return matmul_keeping_nonfinite(x, axis, plan.matrix(), matmul_in_place,
                                    positive=plan.support(lambda w: w > 0),
                                    zeros=plan.support(lambda w: w == 0),
                                    negative=plan.support(lambda w: w < 0))


# --- a linear map whose transpose is the transposed plan's resampling --------------------

def _values(x: jax.Array, axis: int, plan: AxisSampling) -> jax.Array:
    """``plan``'s values by its strategy's forward (no derivative rule): of the plans
    ``_linear_resample_p`` takes (``AxisSampling.linear_primitive``) and their
    transposes."""
    strategy = plan.strategy()
    if strategy == "identity":
        return x
    if strategy == "picks":
        return _picks(x, axis, plan)
    if strategy == "copy-sums":
        return _copy_sums(x, axis, plan)
    if strategy in ("phases", "filter-phases"):
        phases = plan.phases()
        assert phases is not None  # chosen only for a periodic axis
        if axis == x.ndim - 1 and phases.period > 1 and strategy == "filter-phases":
            # Along the minor axis XLA:CPU interleaves the phases element by element: the
            # axis swapped with the one before it, computed there and swapped back, which is
            # faster (BENCHMARKS.md, cell `bilinear antialias 512 -> 224, 8x3`); a period of
            # 1 has nothing to interleave, and swapping it only costs (cell
            # `bilinear antialias 336 -> 112, 8x3`). Copies, their sums and interpolation's
            # phases are sliced where they lie (swapped, `bilinear x2, 4x256x32x32`'s
            # forward ran 1.8x slower).
            swapped = _phases(jnp.swapaxes(x, axis - 1, axis), axis - 1, plan)
            return jnp.swapaxes(swapped, axis - 1, axis)
        return _phases(x, axis, plan)
    if strategy == "selections":
        return _selections(x, axis, plan)
    if strategy == "matrix":
        return _matmul_keeping_nonfinite(x, axis, plan)
    return _tap_sums(x, axis, plan)


# ``filter-phases``' map as a primitive: its tangent is the map itself, its transpose the
# transposed plan's map (each input's sum over the outputs that tap it, by the strategy
# chosen for that plan: for antialias 512 -> 224, phases of 16 inputs), whose transpose is
# this one again. What JAX derives from the slices, a strided pad per slice, made the
# gradient much slower than the window sums as the rule; against those, this keeps the
# gradient's time and cuts the second derivative's, where the rule's own tangent was the
# window sums written out (BENCHMARKS.md, cell `bilinear antialias 512 -> 224, 8x3`).
_linear_resample_p = jax.extend.core.Primitive("jaxpool_linear_resample")


def _linear_resample_shape(x, *, axis: int, plan: AxisSampling):
    # ``update`` keeps the input's dtype, sharding and, inside ``shard_map``, its per-device
    # (varying) mesh axes, which a fresh ``ShapedArray`` would drop.
    return x.update(shape=x.shape[:axis] + (plan.out_size,) + x.shape[axis + 1:])


def _linear_resample_transpose(cotangent, x, *, axis: int, plan: AxisSampling):
    return [_linear_resample_p.bind(cotangent, axis=axis, plan=plan.transposed())]


def _linear_resample_batch(args, dims, *, axis: int, plan: AxisSampling):
    (x,), (d,) = args, dims
    return _linear_resample_p.bind(jnp.moveaxis(x, d, 0), axis=axis + 1, plan=plan), 0


def _map(x: jax.Array, axis: int, plan: AxisSampling) -> jax.Array:
    values = _values(x, axis, plan)
    if plan.from_zero and plan.strategy() not in ("phases", "filter-phases", "selections"):
        values = from_plus_zero(values)  # those add from +0 within their sums
    return values


_map_jit = jax.jit(_map, static_argnums=(1, 2))
_linear_resample_p.def_impl(lambda x, *, axis, plan: _map_jit(x, axis, plan))
_linear_resample_p.def_abstract_eval(_linear_resample_shape)
mlir.register_lowering(_linear_resample_p, mlir.lower_fun(
    lambda x, *, axis, plan: _map(x, axis, plan), multiple_results=False))
ad.deflinear2(_linear_resample_p, _linear_resample_transpose)
batching.primitive_batchers[_linear_resample_p] = _linear_resample_batch


# --- pixel shuffle -----------------------------------------------------------------------

def pixel_shuffle(x: jax.Array, factor: int, channels_last: bool) -> jax.Array:
    """``[*, C*r*r, H, W] -> [*, C, H*r, W*r]`` (channels last: ``[*, H, W, C*r*r] ->
    [*, H*r, W*r, C]``), torch's order: channel ``c*r*r + i*r + j`` goes to ``(c, h*r + i,
    w*r + j)``. A reshape and a transpose: every value copied."""
    r = factor
    lead = x.shape[:-3]
    if channels_last:
        h, w, c = x.shape[-3:]
        y = x.reshape(lead + (h, w, c // (r * r), r, r))
        k = len(lead)
        y = jnp.transpose(y, tuple(range(k)) + (k, k + 3, k + 1, k + 4, k + 2))
        return y.reshape(lead + (h * r, w * r, c // (r * r)))
    c, h, w = x.shape[-3:]
    y = x.reshape(lead + (c // (r * r), r, r, h, w))
    k = len(lead)
    y = jnp.transpose(y, tuple(range(k)) + (k, k + 3, k + 1, k + 4, k + 2))
    return y.reshape(lead + (c // (r * r), h * r, w * r))


def pixel_unshuffle(x: jax.Array, factor: int, channels_last: bool) -> jax.Array:
    """The inverse of :func:`pixel_shuffle`: ``[*, C, H*r, W*r] -> [*, C*r*r, H, W]``."""
    r = factor
    lead = x.shape[:-3]
    k = len(lead)
    if channels_last:
        hr, wr, c = x.shape[-3:]
        y = x.reshape(lead + (hr // r, r, wr // r, r, c))
        y = jnp.transpose(y, tuple(range(k)) + (k, k + 2, k + 4, k + 1, k + 3))
        return y.reshape(lead + (hr // r, wr // r, c * r * r))
    c, hr, wr = x.shape[-3:]
    y = x.reshape(lead + (c, hr // r, r, wr // r, r))
    y = jnp.transpose(y, tuple(range(k)) + (k, k + 2, k + 4, k + 1, k + 3))
    return y.reshape(lead + (c * r * r, hr // r, wr // r))


@program(0)
def run(plan: ResamplePlan, x: jax.Array) -> jax.Array:
    """One compiled program per plan, shape and dtype. Half precision computes in float32
    and rounds once (the nearest modes copy, in the input's dtype)."""
    dtype = x.dtype
    if all(p.copies for p in plan.axes):
        return resample(x, plan)
    compute = jnp.float32 if dtype in (jnp.float16, jnp.bfloat16) else dtype
    return resample(x.astype(compute), plan).astype(dtype)


@program((1, 2))
def channel_shuffle(x: jax.Array, groups: int, axis: int) -> jax.Array:
    """Channel ``g*(C/groups) + k`` goes to ``k*groups + g`` along ``axis``: a reshape and
    a transpose, every value copied."""
    c = x.shape[axis]
    split = x.reshape(x.shape[:axis] + (groups, c // groups) + x.shape[axis + 1:])
    return jnp.swapaxes(split, axis, axis + 1).reshape(x.shape)
