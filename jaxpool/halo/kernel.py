"""Per-device ops on spatially sharded inputs inside ``shard_map``: the JAX side of
:mod:`jaxpool.halo.plan`.

Each sharded axis exchanges its halo with one ``lax.ppermute`` per neighbour (the last
``left`` rows to the next device, the first ``right`` rows to the previous one), whose
transpose is again a ``ppermute``: every derivative exchanges only halos too, and holds
no scatter or gather. Then each device runs the unsharded op on the rows of its exchanged
block that exist, with its own plan (:mod:`jaxpool.halo.plan`); devices with different plans
(the first and last, whose windows reach the padding, or ragged windows) take their own
branch of one ``lax.switch`` on the device's index. Axes pooled whole (global pooling,
adaptive to 1) reduce each block, then across devices: one ``psum``, or for a maximum the
pick of the device that holds torch's element.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

import jax
import jax.extend.core
import jax.numpy as jnp
from jax import lax
from jax.interpreters import ad, batching, mlir

from jaxpool.halo import plan as halo_plan


# --- arguments ---------------------------------------------------------------------------

def check_axis_names(op: str, axis_names, count: int, what: str = "spatial axis"
                     ) -> tuple[tuple, tuple[int, ...]]:
    """``axis_names``: one mesh axis name (or None) per ``what``, outermost first, each bound
    by an enclosing ``shard_map``. Returns the names and each one's device count (1 for
    None)."""
    if isinstance(axis_names, str) or not isinstance(axis_names, (tuple, list)):
        raise TypeError(f"{op}: axis_names must be a tuple with one mesh axis name (or None) "
                        f"per {what}, outermost first, got {axis_names!r}")
    names = tuple(axis_names)
    if len(names) != count:
        raise ValueError(f"{op}: axis_names must have {count} entries (one per {what}, "
                         f"outermost first, None for an unsharded one), got {axis_names!r}")
    given = [n for n in names if n is not None]
    if len(set(given)) != len(given):
        raise ValueError(f"{op}: axis_names names a mesh axis twice: {axis_names!r}")
    sizes = []
    for name in names:
        if name is None:
            sizes.append(1)
            continue
        try:
            sizes.append(int(lax.axis_size(name)))
        except (NameError, KeyError, ValueError) as err:
            raise ValueError(f"{op}: axis_names entry {name!r} is not a mesh axis of an "
                             f"enclosing shard_map (axis_names is for per-device code "
                             f"inside jax.shard_map; under plain jit, shard the input "
                             f"instead): {err}") from None
    return names, tuple(sizes)


def global_shape(shape, axes, sizes) -> tuple[int, ...]:
    """The unsharded array's shape: each sharded axis's extent times its device count."""
    out = list(shape)
    for axis, size in zip(axes, sizes):
        out[axis] *= size
    return tuple(out)


# --- exchange and per-device branches ----------------------------------------------------

def exchange(x: jax.Array, axis: int, name, halo: halo_plan.AxisHalo) -> jax.Array:
    """``x``'s block with ``halo.left`` rows of the previous device before it and
    ``halo.right`` rows of the next after it (zeros where there is none)."""
    shards, block = halo.shards, halo.block
    parts = []
    if halo.left:
        perm = [(i, i + 1) for i in range(shards - 1)] + ([(shards - 1, 0)] if halo.circular else [])
        parts.append(lax.ppermute(lax.slice_in_dim(x, block - halo.left, block, axis=axis),
                                  name, perm))
    parts.append(x)
    if halo.right:
        perm = [(i + 1, i) for i in range(shards - 1)] + ([(0, shards - 1)] if halo.circular else [])
        parts.append(lax.ppermute(lax.slice_in_dim(x, 0, halo.right, axis=axis), name, perm))
    return lax.concatenate(parts, axis) if len(parts) > 1 else x


def _lookup(index: jax.Array, table) -> jax.Array:
    """``table[index]`` for a small static table, by selects (no gather)."""
    out = jnp.asarray(table[0], jnp.int32)
    for i, value in enumerate(table[1:], 1):
        if value != table[0]:
            out = jnp.where(index == i, jnp.asarray(value, jnp.int32), out)
    return out


def by_device(operands, sharded, make_branch):
    """Run ``make_branch(shards)(*operands)`` on every device, ``shards`` the device's index
    along each sharded axis of ``sharded`` (``[(name, key_of_shard, count)]``), with one
    branch per distinct combination of keys."""
    groups = []
    for name, key, count in sharded:
        keys = [key(s) for s in range(count)]
        distinct = list(dict.fromkeys(keys))
        groups.append((name, [keys.index(k) for k in distinct],
                       [distinct.index(k) for k in keys]))
    combos = list(itertools.product(*(reps for _, reps, _ in groups)))
    branches = [make_branch(combo) for combo in combos]
    if len(branches) == 1:
        return branches[0](*operands)
    index, stride = jnp.zeros((), jnp.int32), 1
    for name, reps, ids in reversed(groups):
        index = index + _lookup(lax.axis_index(name), ids) * stride
        stride *= len(reps)
    return lax.switch(index, branches, *operands)


def _keep(x: jax.Array, axis: int, lo_hi) -> jax.Array:
    lo, hi = lo_hi
    return x if (lo, hi) == (0, x.shape[axis]) else lax.slice_in_dim(x, lo, hi, axis=axis)


# --- pooling ------------------------------------------------------------------------------

def pool(fn, plan, x: jax.Array, names, *, indices: bool = False, reduce: str = "sum"):
    """``fn(plan, x)`` (a pooling program) on a device's block of an array sharded along
    the spatial axes named in ``names``; ``plan`` is the unsharded array's. ``indices``:
    ``fn`` returns ``(values, flat indices)``, made global here. ``reduce``: how axes
    pooled whole combine across devices (``"sum"`` or ``"max"``)."""
    names = tuple(names)
    sharded, whole, halos = [], [], {}
    local_axes = list(plan.axes)
    for i, (axis, axis_plan, name) in enumerate(zip(plan.spatial_axes, plan.axes, names)):
        if name is None:
            continue
        shards = lax.axis_size(name)
        if halo_plan.reduces_whole_axis(axis_plan) and shards > 1:
            if axis_plan.in_size % shards:
                halo_plan.plan_axis_halo(name, [(0, 0)] * shards, axis_plan.in_size, shards)
            local_axes[i] = halo_plan.whole_axis_block(axis_plan, shards)
            whole.append(name)
            continue
        halo = halo_plan.pool_halo(name, axis_plan, shards)
        halos[i] = halo
        x = exchange(x, axis, name, halo)
        sharded.append(i)
    if whole and indices:
        raise ValueError("axis_names: return_indices with an axis pooled whole across "
                         "devices (global or adaptive-to-1 pooling of a sharded axis) is not "
                         "supported; pool it without indices")

    def key(i):
        return lambda s: (halos[i].kept(s), halo_plan.local_pool_axis(plan.axes[i], halos[i], s))

    def make_branch(combo):
        axes = list(local_axes)
        kept = {}
        for i, s in zip(sharded, combo):
            kept[i] = (halos[i].kept(s), halos[i].origin(s))
            axes[i] = halo_plan.local_pool_axis(plan.axes[i], halos[i], s)

        def branch(block):
            for i, ((lo, hi), _) in kept.items():
                block = _keep(block, plan.spatial_axes[i], (lo, hi))
            local = dataclasses.replace(plan, input_shape=tuple(block.shape), axes=tuple(axes))
            out = fn(local, block)
            if not indices:
                return out
            values, index = out
            # devices of one branch share their plan, not their place along the axis
            origins = [_origin(names[i], halos[i]) if i in kept else 0
                       for i in range(len(axes))]
            return values, _global_index(index, [p.in_size for p in axes],
                                         [p.in_size for p in plan.axes], origins)
        return branch

    out = by_device((x,), [(names[i], key(i), halos[i].shards) for i in sharded], make_branch)
    for name in whole:
        out = sum_across(out, name) if reduce == "sum" else _max_across(out, name)
    return out


def _origin(name, halo: halo_plan.AxisHalo) -> jax.Array:
    """The input row (global) of this device's first kept row (see AxisHalo.origin), from
    the device's index: ``s*block - left``, or 0 on the first device (whose halo rows do
    not exist)."""
    start = lax.axis_index(name) * halo.block - halo.left
    return start if halo.circular else jnp.maximum(start, 0)


def _global_index(index: jax.Array, local: list[int], full: list[int], origins: list) -> jax.Array:
    """Flat indices over the local extents as flat indices over the unsharded ones."""
    coords, rest = [], index
    for extent in reversed(local):
        coords.append(rest % extent)
        rest = rest // extent
    out = jnp.zeros((), index.dtype)
    for coord, extent, origin in zip(reversed(coords), full, origins):
        out = out * extent + (coord + origin)
    return out.astype(index.dtype)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _max_across(v: jax.Array, name) -> jax.Array:
    return _max_across_values(v, name)[0]


def _max_across_values(v, name):
    """torch's pick across devices of each device's pick: the last NaN (in device order,
    which is row-major order along the axis), else the first maximum; and whether this
    device holds it. Two all-reduces of the pooled values' size: the largest non-NaN
    value, then the winner (a NaN's device coded below every other)."""
    shards = lax.axis_size(name)
    me = lax.axis_index(name)
    nan = jnp.isnan(v)
    top = lax.pmax(jnp.where(nan, -jnp.inf, v), name)
    winner = lax.pmin(jnp.where(nan, -1 - me, jnp.where(v == top, me, shards)), name)
    mine = (me == winner) | (-1 - me == winner)
    value = jnp.where(winner < 0, jnp.asarray(jnp.nan, v.dtype), top)
    return value, mine


@_max_across.defjvp
def _max_across_jvp(name, primals, tangents):
    # The winner's tangent: a select and one psum, linear, transposing into a select.
    # The primal through the function itself and the pick from a constant: a derivative
    # of this rule (second order) differentiates the pick's value, never pmax or pmin.
    (v,), (t,) = primals, tangents
    _, mine = _max_across_values(lax.stop_gradient(v), name)
    return _max_across(v, name), sum_across(jnp.where(mine, t, jnp.zeros((), t.dtype)), name)


# --- the sum across devices of a replicated result, and its transpose ---------------------
# Inside shard_map, which tracks the mesh axes each value varies along, ``lax.psum`` of a
# varying value transposes into a copy. The partitioned primitive's per-device code
# (jaxpool.halo.jit) runs untracked, where psum transposes into another psum and would
# count a replicated cotangent once per device; there the sum is a primitive of its own
# that transposes into a copy, whose transpose is the sum again.

sum_across_p = jax.extend.core.Primitive("jaxpool_sum_across")
copy_across_p = jax.extend.core.Primitive("jaxpool_copy_across")


def sum_across(v: jax.Array, name) -> jax.Array:
    """The sum over the devices along mesh axis ``name`` (``lax.psum``), replicated."""
    if name in _varying(v):
        return lax.psum(v, name)
    return sum_across_p.bind(v, name=name)


def _varying(v) -> frozenset:
    """The mesh axes shard_map's check knows ``v`` to vary along (none where untracked)."""
    typeof = getattr(jax, "typeof", None)
    if typeof is None:
        return frozenset()
    aval = typeof(v)
    axis_type = getattr(aval, "manual_axis_type", None)
    return frozenset(getattr(axis_type, "varying", None) or getattr(aval, "vma", None) or ())


for _p in (sum_across_p, copy_across_p):
    _p.def_abstract_eval(lambda v, *, name: v)
    batching.primitive_batchers[_p] = (
        lambda args, dims, *, name, _p=_p: (_p.bind(args[0], name=name), dims[0]))
sum_across_p.def_impl(lambda v, *, name: lax.psum(v, name))
copy_across_p.def_impl(lambda v, *, name: v)
mlir.register_lowering(sum_across_p, mlir.lower_fun(
    lambda v, *, name: lax.psum(v, name), multiple_results=False))
mlir.register_lowering(copy_across_p, lambda ctx, v, *, name: [v])
ad.deflinear2(sum_across_p, lambda ct, v, *, name: [copy_across_p.bind(
    ad.instantiate_zeros(ct), name=name)])
ad.deflinear2(copy_across_p, lambda ct, v, *, name: [sum_across_p.bind(
    ad.instantiate_zeros(ct), name=name)])


# --- resampling ---------------------------------------------------------------------------

def resample(run, plan, x: jax.Array, names):
    """``run(plan, x)`` (a resampling program) on a device's block; ``plan`` the unsharded
    array's :class:`~jaxpool.resampling.plan.ResamplePlan`."""
    names = tuple(names)
    sharded, halos = [], {}
    for i, (axis, axis_plan, name) in enumerate(zip(plan.spatial_axes, plan.axes, names)):
        if name is None:
            continue
        halos[i] = halo_plan.sampling_halo(name, axis_plan, lax.axis_size(name))
        x = exchange(x, axis, name, halos[i])
        sharded.append(i)

    def key(i):
        return lambda s: (halos[i].kept(s), halo_plan.local_sampling(plan.axes[i], halos[i], s))

    def make_branch(combo):
        axes = list(plan.axes)
        kept = {}
        for i, s in zip(sharded, combo):
            kept[i] = halos[i].kept(s)
            axes[i] = halo_plan.local_sampling(plan.axes[i], halos[i], s)

        def branch(block):
            for i, lo_hi in kept.items():
                block = _keep(block, plan.spatial_axes[i], lo_hi)
            return run(dataclasses.replace(plan, input_shape=tuple(block.shape),
                                           axes=tuple(axes)), block)
        return branch

    return by_device((x,), [(names[i], key(i), halos[i].shards) for i in sharded], make_branch)


# --- pad ----------------------------------------------------------------------------------

def pad(pad_fn, plan, x: jax.Array, value: jax.Array, names):
    """``pad_fn(plan, x, value)`` on a device's block; ``plan`` the unsharded array's
    :class:`~jaxpool.padding.plan.PadPlan`, ``names`` one per padded axis (outermost first)."""
    widths = sorted(plan.widths)
    circular = plan.mode == "circular"
    sharded, halos, rows, rest = [], {}, {}, []
    for (axis, lo, hi), name in zip(widths, names):
        if name is None:
            rest.append((axis, lo, hi))
            continue
        n = plan.input_shape[axis]
        if circular and (lo < 0 or hi < 0):
            raise ValueError(f"pad: axis_names: mode 'circular' cannot crop (negative pad "
                             f"({lo}, {hi})) an axis sharded over {name!r}")
        rows[axis] = halo_plan.pad_rows(plan.mode, n, lo, hi)
        halos[axis] = halo_plan.pad_halo(name, rows[axis], n, lax.axis_size(name), circular)
        x = exchange(x, axis, name, halos[axis])
        sharded.append((axis, name))
    by_axis = dict(sharded)

    def key(axis):
        return lambda s: (halos[axis].kept(s), halo_plan.local_pad_rows(rows[axis], halos[axis], s))

    def make_branch(combo):
        local = {axis: (halos[axis].kept(s), halo_plan.local_pad_rows(rows[axis], halos[axis], s))
                 for (axis, _), s in zip(sharded, combo)}

        def branch(block, value):
            for axis, (lo_hi, axis_rows) in local.items():
                block = _copy_rows(_keep(block, axis, lo_hi), axis, axis_rows, value)
            if not rest:
                return block
            return pad_fn(dataclasses.replace(plan, input_shape=tuple(block.shape),
                                              widths=tuple(rest)), block, value)
        return branch

    return by_device((x, value), [(by_axis[a], key(a), halos[a].shards) for a, _ in sharded],
                     make_branch)


def _copy_rows(x: jax.Array, axis: int, rows, value: jax.Array) -> jax.Array:
    """Rows ``rows`` of ``x`` along ``axis`` (None: ``value``), as slices, reversals and
    broadcasts of the constant, joined."""
    parts = []
    for first, step, count in halo_plan.runs(rows):
        if first is None:
            shape = list(x.shape)
            shape[axis] = count
            parts.append(jnp.broadcast_to(value.astype(x.dtype), tuple(shape)))
        elif step == 1:
            parts.append(lax.slice_in_dim(x, first, first + count, axis=axis))
        else:
            parts.append(lax.rev(lax.slice_in_dim(x, first - count + 1, first + 1, axis=axis),
                                 (axis,)))
    return parts[0] if len(parts) == 1 else lax.concatenate(parts, axis)


# --- max_unpool ---------------------------------------------------------------------------

def unpool(unpool_fn, plan, x: jax.Array, indices: jax.Array, names):
    """``unpool_fn(plan, x, indices)`` on a device's block of pooled values and their
    (global) indices; ``plan`` the unsharded :class:`~jaxpool.unpooling.plan.UnpoolPlan`."""
    names = tuple(names)
    sharded, halos = [], {}
    for i, (axis, axis_plan, name) in enumerate(zip(plan.spatial_axes, plan.axes, names)):
        if name is None:
            continue
        halos[i] = halo_plan.unpool_halo(name, axis_plan, lax.axis_size(name))
        sharded.append(i)
    # Values and indices travel together (one exchange each way) when their widths match.
    same_width = x.dtype.itemsize == indices.dtype.itemsize
    if same_width and sharded:
        both = jnp.stack([x, lax.bitcast_convert_type(indices, x.dtype)], axis=-1)
        for i in sharded:
            both = exchange(both, plan.spatial_axes[i], names[i], halos[i])
        x, indices = both[..., 0], lax.bitcast_convert_type(both[..., 1], indices.dtype)
    else:
        for i in sharded:
            x = exchange(x, plan.spatial_axes[i], names[i], halos[i])
            indices = exchange(indices, plan.spatial_axes[i], names[i], halos[i])

    def key(i):
        return lambda s: (halos[i].kept(s), halo_plan.local_unpool_axis(plan.axes[i], halos[i], s))

    full = [p.in_size for p in plan.axes]

    def make_branch(combo):
        axes = list(plan.axes)
        kept: dict = {}
        first: list = [0] * len(axes)
        for i, s in zip(sharded, combo):
            kept[i] = halos[i].kept(s)
            axes[i] = halo_plan.local_unpool_axis(plan.axes[i], halos[i], s)
            first[i] = lax.axis_index(names[i]) * halos[i].out_block  # this device's rows
        local_extents = [p.in_size for p in axes]

        def branch(block, index):
            for i, lo_hi in kept.items():
                block = _keep(block, plan.spatial_axes[i], lo_hi)
                index = _keep(index, plan.spatial_axes[i], lo_hi)
            local = dataclasses.replace(plan, input_shape=tuple(block.shape), axes=tuple(axes))
            return unpool_fn(local, block, _local_index(index, full, local_extents, first))
        return branch

    return by_device((x, indices), [(names[i], key(i), halos[i].shards) for i in sharded],
                     make_branch)


def _local_index(index: jax.Array, full: list[int], local: list[int], first: list
                 ) -> jax.Array:
    """Flat indices over the unsharded extents as flat indices over a device's own block
    (``-1``, placed nowhere, for one outside it)."""
    coords, rest = [], index
    for extent in reversed(full):
        coords.append(rest % extent)
        rest = rest // extent
    out = jnp.zeros((), index.dtype)
    inside = jnp.ones((), bool)
    for coord, extent, lo in zip(reversed(coords), local, first):
        coord = coord - lo
        inside = inside & (coord >= 0) & (coord < extent)
        out = out * extent + coord
    return jnp.where(inside, out, jnp.asarray(-1, index.dtype)).astype(index.dtype)


# --- pixel shuffle ------------------------------------------------------------------------

def check_shuffle(op: str, shape, channels_last: bool, axis_names, factor: int,
                  inverse: bool) -> None:
    """Pixel (un)shuffle moves values only within a device's block (the channel axis is
    not sharded): nothing to exchange. Unshuffling needs each block's extent to divide by
    the factor."""
    if axis_names is None:
        return
    first = len(shape) - 2 - (1 if channels_last else 0)
    names, _ = check_axis_names(op, axis_names, 2)
    for axis, name in zip((first, first + 1), names):
        if inverse and name is not None and shape[axis] % factor:
            raise ValueError(f"{op}: axis_names: each device's block along the axis sharded "
                             f"over {name!r} holds {shape[axis]} rows, not a multiple of "
                             f"downscale_factor={factor}")


def pool_shape(op: str, shape, ndim: int, channels_last: bool, axis_names) -> tuple[int, ...]:
    """The unsharded shape of a pooling input whose spatial axes are sharded as
    ``axis_names`` says (checked here)."""
    rank = len(shape)
    if rank < ndim + 1:
        return tuple(shape)  # the plan's own check names the rank
    first = rank - ndim - (1 if channels_last else 0)
    _, sizes = check_axis_names(op, axis_names, ndim)
    return global_shape(shape, range(first, first + ndim), sizes)


def resample_shape(op: str, shape, channels_last: bool, axis_names) -> tuple[int, ...]:
    """The unsharded shape of an ``interpolate`` input ``[B, C, *spatial]`` (or channels
    last) sharded as ``axis_names`` says."""
    if axis_names is None or len(shape) not in (3, 4, 5):
        return tuple(shape)
    first = 1 if channels_last else 2
    _, sizes = check_axis_names(op, axis_names, len(shape) - 2)
    return global_shape(shape, range(first, len(shape) - 2 + first), sizes)


def pad_shape(shape, pad, channels_last: bool, axis_names) -> tuple[int, ...]:
    """The unsharded shape of a ``pad`` input whose padded axes (outermost first) are
    sharded as ``axis_names`` says (``pad``'s own checks come after, on this shape)."""
    if axis_names is None:
        return tuple(shape)
    try:
        pairs = len(pad) // 2
    except TypeError:
        return tuple(shape)  # plan_pad names the bad argument
    last = len(shape) - 1 - (1 if channels_last else 0)
    axes = sorted(last - i for i in range(pairs))
    if not pairs or axes[0] < 0:
        return tuple(shape)
    _, sizes = check_axis_names("pad", axis_names, pairs, "padded axis")
    return global_shape(shape, axes, sizes)
