"""Reading rows at positions the data gives, and the transpose: adding rows back.

``read(values, index)`` is a gather (reads only: deterministic). Its transpose,
``sorted_sum``, adds each read row back into the position it came from without XLA's
scatter-add (which a GPU runs with atomics, in no fixed order): the rows are put in the
order of a stable sort of their destinations, each run of equal destinations summed by a
segmented scan, and each destination's total read back at its run's end. The sort depends
only on the index, so it is computed once (:class:`Sorted`) and serves every channel and
every derivative order: the two are each other's transposes (two ``linear_primitive``),
so no derivative of any order holds a scatter.

Where a scatter-add is deterministic (XLA:CPU runs it in one thread, in the order of the
rows), ``adding="scatter"`` makes the transpose one, faster there (BENCHMARKS.md, "The
price of determinism"); the strategy table says where (:data:`ADDING`). The sort is then
never used, and XLA drops it.

``read_along`` is the same read along any axis of the values (``[C, M]`` read at axis 1:
every channel's row at once), and, where the index is a concatenation, in pieces: one
gather per run, each fused into its consumer. ``sorted_sum_along`` is its transpose.
``read_pieces`` reads in pieces too, its derivatives those of one read.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.extend.core
import jax.numpy as jnp
from jax import lax
from jax.interpreters import ad, batching

from jaxpool.core.rules import linear_primitive, zero_like

# How the transpose adds rows back: "sorted" (a sort, a segmented scan, a read; no scatter)
# or "scatter" (a scatter-add: only where it runs in a fixed order).
ADDING = ("sorted", "scatter")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Sorted:
    """The sort of an index ``[K]`` into ``size`` positions (all int32):

    - ``index``: ``[K]`` the positions read, each in ``[0, size)``;
    - ``perm``: ``[K]`` a stable argsort of ``index``;
    - ``dest``: ``[K]`` ``index[perm]`` (ascending);
    - ``ends``: ``[size]`` for each position, where in sorted order its last reader is
      (``-1`` where no row reads it).
    """
    index: jax.Array
    perm: jax.Array
    dest: jax.Array
    ends: jax.Array

    @property
    def size(self) -> int:
        return self.ends.shape[-1]

    def arrays(self) -> tuple:
        return (self.index, self.perm, self.dest, self.ends)


def sort_order(index: jax.Array, size: int) -> Sorted:
    """The :class:`Sorted` of ``index`` (int ``[K]``, values in ``[0, size)``)."""
    index = jnp.asarray(index, jnp.int32)
    if index.ndim != 1:
        raise ValueError(f"index must be 1-d, got shape {index.shape}")
    k = index.shape[0]
    perm = jnp.argsort(index, stable=True).astype(jnp.int32)
    dest = jnp.take(index, perm, mode="clip")
    # The binary search unrolled: gathers and selects only (method "sort" lowers to a
    # scatter, "scan" to a while loop).
    count = jnp.searchsorted(dest, jnp.arange(size, dtype=jnp.int32), side="right",
                             method="scan_unrolled").astype(jnp.int32)
    last = count - 1
    present = (last >= 0) & (jnp.take(dest, jnp.clip(last, 0, max(k - 1, 0)), mode="clip")
                             == jnp.arange(size, dtype=jnp.int32)) if k else \
        jnp.zeros((size,), bool)
    ends = jnp.where(present, last, -1).astype(jnp.int32)
    return Sorted(index, perm, dest, ends)


def _check_adding(adding):
    if adding not in ADDING:
        raise ValueError(f"adding must be one of {ADDING}, got {adding!r}")
    return adding


def read(values: jax.Array, index, order: Sorted | None = None, *,
         adding: str = "sorted") -> jax.Array:
    """``values[index]``: values ``[M, *rest]``, index int ``[K]`` (in ``[0, M)``) or a
    :class:`Sorted` -> ``[K, *rest]``. Linear in ``values``; its transpose is
    :func:`sorted_sum` with the same sort and ``adding``."""
    if isinstance(index, Sorted):
        order = index
    elif order is None:
        # Used only by the derivatives: a jitted program without them drops it.
        order = sort_order(index, values.shape[0])
    if order.size != values.shape[0]:
        raise ValueError(f"the sort is into {order.size} positions, values have "
                         f"{values.shape[0]}")
    return read_p.bind(values, *order.arrays(), adding=_check_adding(adding))


def sorted_sum(cotangent: jax.Array, order: Sorted, size: int, *,
               adding: str = "sorted") -> jax.Array:
    """The transpose of :func:`read`: ``[K, *rest] -> [size, *rest]``, row ``k`` added into
    position ``order.index[k]``, in a fixed order (``"sorted"``: no scatter; ``"scatter"``:
    XLA's scatter-add, in the rows' order where it runs in one thread); zero where none is
    read."""
    if size != order.size:
        raise ValueError(f"size must be the sort's {order.size}, got {size}")
    return sorted_sum_p.bind(cotangent, *order.arrays(), adding=_check_adding(adding))


def read_along(values: jax.Array, order: Sorted, *, axis: int = 0, pieces: int = 1,
               adding: str = "sorted") -> jax.Array:
    """:func:`read` along ``axis``: values ``[..., M, ...]`` (``M`` at ``axis``) read at
    ``order.index`` (``[K]``, in ``[0, M)``) -> ``[..., K, ...]``, every other axis read
    whole (``[C, M]`` at axis 1 -> ``[C, K]``: each channel's row read where the index
    says, one sort for all of them). Linear in ``values``; its transpose is
    :func:`sorted_sum_along` with the same sort, axis and ``adding``.

    ``pieces`` splits the index into that many equal runs, read by one gather each: where
    the index is a concatenation (a sampler's corners, say), each gather then reads one
    piece's own index and fuses into its consumer's loop, where one gather of the
    concatenation would make every element pick its piece (BENCHMARKS.md, "Sampling where
    the data says (CPU): grid_sample"). The values read are the same."""
    axis = _check_axis(axis, values.ndim)
    if order.size != values.shape[axis]:
        raise ValueError(f"the sort is into {order.size} positions, values have "
                         f"{values.shape[axis]} along axis {axis}")
    k = order.index.shape[0]
    if pieces < 1 or k % pieces:
        raise ValueError(f"pieces must divide the index's {k} entries, got {pieces}")
    return read_along_p.bind(values, *order.arrays(), axis=axis, pieces=int(pieces),
                             adding=_check_adding(adding))


def sorted_sum_along(cotangent: jax.Array, order: Sorted, size: int, *, axis: int = 0,
                     pieces: int = 1, adding: str = "sorted") -> jax.Array:
    """The transpose of :func:`read_along`: ``[..., K, ...] -> [..., size, ...]`` along
    ``axis``, entry ``k`` added into position ``order.index[k]`` as :func:`sorted_sum` adds
    rows (the same order of additions, so the same bits for every channel)."""
    axis = _check_axis(axis, cotangent.ndim)
    if size != order.size:
        raise ValueError(f"size must be the sort's {order.size}, got {size}")
    return sorted_sum_along_p.bind(cotangent, *order.arrays(), axis=axis, pieces=int(pieces),
                                   adding=_check_adding(adding))


def _check_axis(axis, ndim):
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for {ndim} dimensions")
    return axis % ndim


def read_pieces(values: jax.Array, order: Sorted, pieces: int, *,
                adding: str = "sorted") -> list[jax.Array]:
    """``read(values, order).reshape(pieces, -1, *rest)``, as a list: one gather per piece
    in the forward, each fused into its consumer. Its derivatives are those of that
    reshaped :func:`read`, the same program (so the same bits, where XLA:CPU's fused
    multiply-adds depend on the fusions) as before the read was split."""
    k = order.index.shape[0]
    if pieces < 1 or k % pieces:
        raise ValueError(f"pieces must divide the index's {k} entries, got {pieces}")
    if order.size != values.shape[0]:
        raise ValueError(f"the sort is into {order.size} positions, values have "
                         f"{values.shape[0]}")
    return read_pieces_p.bind(values, *order.arrays(), pieces=int(pieces),
                              adding=_check_adding(adding))


def _split(rows, pieces, axis=0):
    """``rows`` reshaped into ``pieces`` along ``axis``, each piece indexed out."""
    split = rows.reshape(rows.shape[:axis] + (pieces, -1) + rows.shape[axis + 1:])
    return [split[(slice(None),) * axis + (i,)] for i in range(pieces)]


# --- implementations ----------------------------------------------------------------------

def _read_impl(values, index, perm, dest, ends, adding="sorted"):
    return jnp.take(values, index, axis=0, mode="clip")


def _segment_sums(rows, starts):
    """Inclusive sums along axis 0 restarting where ``starts`` is true: a fixed tree of
    adds and selects (``lax.associative_scan``)."""
    def combine(a, b):
        a_start, a_sum = a
        b_start, b_sum = b
        flag = b_start.reshape(b_start.shape + (1,) * (b_sum.ndim - 1))
        return a_start | b_start, jnp.where(flag, b_sum, a_sum + b_sum)
    return lax.associative_scan(combine, (starts, rows))[1]


def _sum_impl(cotangent, index, perm, dest, ends, adding="sorted"):
    size = ends.shape[0]
    shape = (size,) + cotangent.shape[1:]
    if cotangent.shape[0] == 0 or size == 0:
        return jnp.zeros(shape, cotangent.dtype)
    if adding == "scatter":
        return jnp.zeros(shape, cotangent.dtype).at[index].add(
            cotangent, indices_are_sorted=False, unique_indices=False, mode="promise_in_bounds")
    rows = jnp.take(cotangent, perm, axis=0, mode="clip")
    starts = jnp.concatenate([jnp.ones((1,), bool), dest[1:] != dest[:-1]])
    sums = _segment_sums(rows, starts)
    totals = jnp.take(sums, jnp.maximum(ends, 0), axis=0, mode="clip")
    present = (ends >= 0).reshape((size,) + (1,) * (cotangent.ndim - 1))
    return jnp.where(present, totals, jnp.zeros((), cotangent.dtype))



def _read_along_impl(values, index, perm, dest, ends, axis=0, pieces=1, adding="sorted"):
    step = index.shape[0] // pieces
    parts = [jnp.take(values, lax.slice_in_dim(index, i * step, (i + 1) * step), axis=axis,
                      mode="clip") for i in range(pieces)]
    return parts[0] if pieces == 1 else jnp.concatenate(parts, axis)


def _segment_sums_along(rows, starts, axis):
    """:func:`_segment_sums` along ``axis``: the same tree of adds and selects for every
    other index. ``starts`` (1-d) is broadcast to ``rows``' shape, as
    ``lax.associative_scan`` scans every operand along the same axis (a select's operand:
    no memory once fused)."""
    flags = jnp.broadcast_to(starts.reshape((1,) * axis + starts.shape
                                            + (1,) * (rows.ndim - axis - 1)), rows.shape)

    def combine(a, b):
        a_start, a_sum = a
        b_start, b_sum = b
        return a_start | b_start, jnp.where(b_start, b_sum, a_sum + b_sum)
    return lax.associative_scan(combine, (flags, rows), axis=axis)[1]


def _sum_along_impl(cotangent, index, perm, dest, ends, axis=0, pieces=1, adding="sorted"):
    if axis == 0:
        return _sum_impl(cotangent, index, perm, dest, ends, adding)
    size = ends.shape[0]
    shape = cotangent.shape[:axis] + (size,) + cotangent.shape[axis + 1:]
    if cotangent.shape[axis] == 0 or size == 0:
        return jnp.zeros(shape, cotangent.dtype)
    if adding == "scatter":
        at = (slice(None),) * axis + (index,)
        return jnp.zeros(shape, cotangent.dtype).at[at].add(
            cotangent, indices_are_sorted=False, unique_indices=False, mode="promise_in_bounds")
    rows = jnp.take(cotangent, perm, axis=axis, mode="clip")
    starts = jnp.concatenate([jnp.ones((1,), bool), dest[1:] != dest[:-1]])
    sums = _segment_sums_along(rows, starts, axis)
    totals = jnp.take(sums, jnp.maximum(ends, 0), axis=axis, mode="clip")
    present = (ends >= 0).reshape((1,) * axis + (size,) + (1,) * (cotangent.ndim - axis - 1))
    return jnp.where(present, totals, jnp.zeros((), cotangent.dtype))


# --- batching: a batch folded into the positions (or, for an unbatched sort, the channels)

def _at_front(x, d, size):
    if d is None:
        return jnp.broadcast_to(x[None], (size,) + x.shape)
    return jnp.moveaxis(x, d, 0)


def _folded_order(aux, dims, size):
    """The batch of sorts ``[B, ...]`` as one sort of the batch's positions laid end to
    end: a block's destinations offset by ``b * M`` stay ascending and the blocks' stable
    sorts are the stable sort of the whole."""
    index, perm, dest, ends = (_at_front(a, d, size) for a, d in zip(aux, dims))
    k, m = index.shape[1], ends.shape[1]
    b = jnp.arange(size, dtype=jnp.int32)[:, None]
    return (index + b * m).reshape(-1), (perm + b * k).reshape(-1), \
        (dest + b * m).reshape(-1), jnp.where(ends >= 0, ends + b * k, -1).reshape(-1)


def _batch(prim, out_rows):
    def rule(args, dims, **params):
        x, aux = args[0], args[1:]
        xd, aux_dims = dims[0], dims[1:]
        if all(d is None for d in aux_dims):
            # One sort for the whole batch: the batch becomes channels.
            moved = jnp.moveaxis(x, xd, 1)
            flat = moved.reshape(moved.shape[:1] + (-1,))
            out = prim.bind(flat, *aux, **params)
            return out.reshape(out.shape[:1] + moved.shape[1:]), 1
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        folded = _folded_order(aux, aux_dims, size)
        x = _at_front(x, xd, size)
        out = prim.bind(x.reshape((-1,) + x.shape[2:]), *folded, **params)
        return out.reshape((size, out_rows(aux, aux_dims)) + x.shape[2:]), 0
    return rule


def _rows_read(aux, dims):
    index, d = aux[0], dims[0]
    return index.shape[0 if d is None else 1 - d]


def _rows_summed(aux, dims):
    ends, d = aux[3], dims[3]
    return ends.shape[0 if d is None else 1 - d]


read_p: jax.extend.core.Primitive = linear_primitive(
    "jaxpool_read", _read_impl,
    lambda ct, *aux, **params: [sorted_sum_p.bind(ct, *aux, **params)])
sorted_sum_p: jax.extend.core.Primitive = linear_primitive(
    "jaxpool_sorted_sum", _sum_impl,
    lambda ct, *aux, **params: [read_p.bind(ct, *aux, **params)])
batching.primitive_batchers[read_p] = _batch(read_p, _rows_read)
batching.primitive_batchers[sorted_sum_p] = _batch(sorted_sum_p, _rows_summed)


# --- along an axis: the same rules, the batch kept beside the axis read -------------------

def _batch_along(prim, out_rows):
    def rule(args, dims, *, axis, **params):
        x, aux = args[0], args[1:]
        xd, aux_dims = dims[0], dims[1:]
        if all(d is None for d in aux_dims):
            # One sort for the whole batch: the batch is one more axis read whole.
            out = prim.bind(jnp.moveaxis(x, xd, 0), *aux, axis=axis + 1, **params)
            return out, 0
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        folded = _folded_order(aux, aux_dims, size)
        # The batch just before the axis, folded into its positions.
        x = jnp.moveaxis(_at_front(x, xd, size), 0, axis)
        merged = x.reshape(x.shape[:axis] + (-1,) + x.shape[axis + 2:])
        out = prim.bind(merged, *folded, axis=axis, **params)
        return out.reshape(out.shape[:axis] + (size, out_rows(aux, aux_dims))
                           + out.shape[axis + 1:]), axis
    return rule


read_along_p: jax.extend.core.Primitive = linear_primitive(
    "jaxpool_read_along", _read_along_impl,
    lambda ct, *aux, **params: [sorted_sum_along_p.bind(ct, *aux, **params)])
sorted_sum_along_p: jax.extend.core.Primitive = linear_primitive(
    "jaxpool_sorted_sum_along", _sum_along_impl,
    lambda ct, *aux, **params: [read_along_p.bind(ct, *aux, **params)])
batching.primitive_batchers[read_along_p] = _batch_along(read_along_p, _rows_read)
batching.primitive_batchers[sorted_sum_along_p] = _batch_along(sorted_sum_along_p,
                                                               _rows_summed)


# --- in pieces: the forward one gather per piece, the derivatives those of one read --------

def _read_pieces_impl(values, index, perm, dest, ends, pieces=1, adding="sorted"):
    step = index.shape[0] // pieces
    return [jnp.take(values, lax.slice_in_dim(index, i * step, (i + 1) * step), axis=0,
                     mode="clip") for i in range(pieces)]


def _read_pieces_jvp(primals, tangents, *, pieces, adding):
    values, aux = primals[0], primals[1:]
    out = _split(read_p.bind(values, *aux, adding=adding), pieces)
    if type(tangents[0]) is ad.Zero:
        return out, [zero_like(o) for o in out]
    return out, _split(read_p.bind(ad.instantiate_zeros(tangents[0]), *aux, adding=adding),
                       pieces)


def _read_pieces_batch(args, dims, *, pieces, adding):
    out, d = _batch(read_p, _rows_read)(args, dims, adding=adding)
    return _split(out, pieces, axis=1 if d == 0 else 0), [d] * pieces


read_pieces_p: jax.extend.core.Primitive = linear_primitive(
    "jaxpool_read_pieces", _read_pieces_impl,
    lambda cts, *aux, pieces, adding: [sorted_sum_p.bind(jnp.concatenate(cts), *aux,
                                                         adding=adding)],
    multiple_results=True)
ad.primitive_jvps[read_pieces_p] = _read_pieces_jvp
batching.primitive_batchers[read_pieces_p] = _read_pieces_batch
