"""Halo-only programs under plain ``jit``: every jaxpool op, called on more than one device,
is one primitive whose lowering asks XLA's partitioner for the per-device op.

Given the input's sharding, the partitioner calls the op's per-device code (``axis_names=``,
:mod:`jaxpool.halo.kernel`) with the mesh axis of each sharded spatial axis, on each device's
block: one halo exchange per neighbour instead of the collectives XLA's own split of the
op's slices and selects would move. On one device, or inside ``shard_map``, the primitive
lowers to the op's own program.

Derivatives keep both modes at every order. The op's primitive differentiates (jvp) into a
second primitive for its tangent map, linear in the tangents; a linear primitive transposes
into the primitive of its transpose (whose transpose is the first again); a batched one
into the primitive of the per-device code under ``vmap``. Each lowers through the same
partitioner callback to the per-device code's own derivative, which exchanges halos only
(``ppermute`` transposes to a ``ppermute``) and holds no scatter or gather.

Where the per-device op cannot hold (an output extent that does not divide over the
devices, a halo wider than a block, an axis split over several mesh axes), the partitioner
is asked for inputs replicated along the spatial axes: the values stay right, the program
gathers.

``route("never")`` turns the primitive off (each op traces its own program, as on one
device); ``route("always")`` turns it on on one device too (tests of the primitive's
rules); the default, ``"auto"``, uses it wherever JAX sees more than one device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import threading
from typing import Any, Callable, Iterator, Literal

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad, batching, mlir
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

RouteMode = Literal["auto", "always", "never"]


# --- when an op takes the primitive -------------------------------------------------------

class _State(threading.local):
    mode: str = "auto"
    per_device: int = 0  # > 0 while an op's per-device code is traced: no primitive there


_STATE = _State()


@contextlib.contextmanager
def route(mode: RouteMode) -> Iterator[None]:
    """Within the block, ops called outside ``shard_map`` take the partitioned primitive
    ``"always"``, ``"never"``, or (``"auto"``, the default) where JAX has several
    devices. Read when an op is traced."""
    if mode not in ("auto", "always", "never"):
        raise ValueError(f"route: mode must be 'auto', 'always' or 'never', got {mode!r}")
    before, _STATE.mode = _STATE.mode, mode
    try:
        yield
    finally:
        _STATE.mode = before


@contextlib.contextmanager
def _per_device() -> Iterator[None]:
    _STATE.per_device += 1
    try:
        yield
    finally:
        _STATE.per_device -= 1


def active(x: Any) -> bool:
    """Whether an op called on ``x`` (without ``axis_names``) takes the primitive."""
    mode = _STATE.mode
    if mode == "never" or _STATE.per_device or not hasattr(jax, "shard_map"):
        return False
    if mode == "auto" and jax.device_count() == 1:  # the usual eager call: nothing to read
        return False
    aval = getattr(x, "aval", None)
    if getattr(aval, "vma", None):  # a per-device value inside shard_map
        return False
    mesh = getattr(getattr(aval, "sharding", None), "mesh", None)
    types = getattr(mesh, "axis_types", ())
    if any(str(t) != str(jax.sharding.AxisType.Auto) for t in types):
        return False  # explicit sharding types its outputs itself: today's program
    return True


# --- what a primitive computes: the op, its tangent map, transposes, batches ---------------

def _frozen(value):
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, np.ndarray):
        return tuple(_frozen(v) for v in value.tolist())
    return value


@dataclasses.dataclass(frozen=True)
class Op:
    """A public op's call, every argument by keyword: ``fn(**dict(zip(arrays, values)),
    **dict(kwargs), axis_names=names)``; ``spatial`` are the first array's axes that
    ``axis_names`` name, in order."""
    fn: Callable
    arrays: tuple[str, ...]  # the names of the array arguments, in the primitive's order
    kwargs: tuple[tuple[str, Any], ...]  # every other argument, by name, sorted
    spatial: tuple[int, ...]
    single: bool  # the op returns one array, not a tuple
    linear_from = None  # nonlinear in every array (a max picks, a power bends)

    def local(self, names) -> Callable:
        def run(*values):
            out = self.fn(**dict(zip(self.arrays, values)), **dict(self.kwargs),
                          axis_names=names)
            return (out,) if self.single else tuple(out)
        return run


@dataclasses.dataclass(frozen=True)
class Tangent:
    """``parent``'s tangent map: ``(*primals, *tangents of diff_args) -> tangents of
    diff_outs``, linear in the tangents."""
    parent: Any
    diff_args: tuple[int, ...]
    diff_outs: tuple[int, ...]
    nargs: int

    @property
    def linear_from(self) -> int:
        return self.nargs

    @property
    def spatial(self) -> tuple[int, ...]:
        return self.parent.spatial

    def local(self, names) -> Callable:
        parent = self.parent.local(names)

        def run(*args):
            primals, given = args[:self.nargs], iter(args[self.nargs:])
            tangents = [next(given) if i in self.diff_args else _zero_tangent(p)
                        for i, p in enumerate(primals)]
            _, out = jax.jvp(parent, tuple(primals), tuple(tangents))
            return tuple(out[i] for i in self.diff_outs)
        return run


@dataclasses.dataclass(frozen=True)
class Transpose:
    """A tangent map's transpose: ``(*primals, *cotangents of its outputs) -> cotangents
    of its tangents``, linear in the cotangents."""
    parent: Tangent

    @property
    def linear_from(self) -> int:
        return self.parent.linear_from

    @property
    def spatial(self) -> tuple[int, ...]:
        return self.parent.spatial

    def local(self, names) -> Callable:
        parent, k = self.parent.local(names), self.parent.linear_from

        def run(*args):
            fixed, cotangents = args[:k], args[k:]
            zeros = [jnp.zeros_like(fixed[i]) for i in self.parent.diff_args]
            _, pullback = jax.vjp(lambda *lin: parent(*fixed, *lin), *zeros)
            return tuple(pullback(tuple(cotangents)))
        return run


@dataclasses.dataclass(frozen=True)
class Batched:
    """``parent`` under ``vmap``, every array and result batched along a new axis 0."""
    parent: Any

    @property
    def linear_from(self):
        return self.parent.linear_from

    @property
    def spatial(self) -> tuple[int, ...]:
        return tuple(d + 1 for d in self.parent.spatial)

    def local(self, names) -> Callable:
        return jax.vmap(self.parent.local(names))


def _zero_tangent(primal):
    if jnp.issubdtype(primal.dtype, jnp.inexact):
        return jnp.zeros_like(primal)
    return np.zeros(primal.shape, jax.dtypes.float0)


def _transpose_of(node) -> Any:
    """The transpose of a linear node: transposing twice gives the node back, and
    transposing commutes with ``vmap``, so every transpose is of a tangent map."""
    if isinstance(node, Transpose):
        return node.parent
    if isinstance(node, Batched):
        return Batched(_transpose_of(node.parent))
    return Transpose(node)


def _traced_local(node, names) -> Callable:
    run = node.local(names)

    def per_device(*arrays):
        with _per_device():
            return run(*arrays)
    return per_device


# --- the primitive ----------------------------------------------------------------------

halo_p = jax.extend.core.Primitive("jaxpool_halo")
halo_p.multiple_results = True


def call(fn: Callable, arrays: dict[str, Any], spatial, kwargs: dict[str, Any], *,
         single: bool = True):
    """``fn(**arrays, **kwargs)`` as the partitioned primitive: the arrays are its operands,
    every other argument a static parameter, each passed by its name."""
    op = Op(fn, tuple(arrays), tuple(sorted((k, _frozen(v)) for k, v in kwargs.items())),
            tuple(spatial), single)
    out = _bind(*(jnp.asarray(a) for a in arrays.values()), node=op)
    return out[0] if single else tuple(out)


def _bind(*args, node) -> list:
    # With several devices the params carry a custom_partitioning call (a trivial one), for
    # jit to find: it then lowers with the devices, which the lowering's own
    # custom_partitioning call needs.
    marker = _marker() if jax.device_count() > 1 else None
    return halo_p.bind(*args, node=node, partitioned=marker)


@functools.lru_cache(maxsize=1)
def _marker():
    from jax.experimental.custom_partitioning import custom_partitioning
    same = custom_partitioning(lambda v: v)
    same.def_partition(partition=lambda mesh, args, result: (
        mesh, lambda v: v, args[0].sharding, (args[0].sharding,)),
        infer_sharding_from_operands=lambda mesh, args, result: args[0].sharding,
        sharding_rule="i -> i")
    return jax.make_jaxpr(same)(jax.ShapeDtypeStruct((1,), jnp.float32))


@functools.lru_cache(maxsize=4096)
def _result_types(node, types) -> tuple:
    """``(shape, dtype, weak_type)`` of each result: the op's by tracing it; a derived
    node's from its parent's (tracing a derivative costs as much as building it)."""
    if isinstance(node, Tangent):
        parent = _result_types(node.parent, types[:node.nargs])
        return tuple(parent[j] for j in node.diff_outs)
    if isinstance(node, Transpose):
        return tuple((types[i][0], types[i][1], False) for i in node.parent.diff_args)
    if isinstance(node, Batched):
        size = types[0][0][0]
        inner = _result_types(node.parent, tuple((s[1:], d) for s, d in types))
        return tuple(((size, *s), d, w) for s, d, w in inner)
    structs = [jax.ShapeDtypeStruct(s, d) for s, d in types]
    return tuple((tuple(o.shape), o.dtype, bool(getattr(o, "weak_type", False)))
                 for o in jax.eval_shape(_traced_local(node, None), *structs))


def _abstract_eval(*avals, node, partitioned):
    types = tuple((a.shape, a.dtype) for a in avals)
    out = [jax.core.ShapedArray(s, d, weak_type=w) for s, d, w in _result_types(node, types)]
    vma = frozenset().union(*(getattr(a, "vma", frozenset()) for a in avals))
    return [o.update(vma=vma) for o in out] if vma else out


@functools.lru_cache(maxsize=1024)
def _compiled(node):
    return jax.jit(lambda *a: _bind(*a, node=node))


def _impl(*args, node, partitioned):
    return _compiled(node)(*args)


def _jvp(primals, tangents, *, node, partitioned):
    outs = _bind(*primals, node=node)
    diff_args = tuple(i for i, t in enumerate(tangents) if type(t) is not ad.Zero)
    diff_outs = tuple(j for j, o in enumerate(outs) if jnp.issubdtype(o.dtype, jnp.inexact))
    zeros = [ad.Zero(jax.core.ShapedArray(o.shape, o.dtype if j in diff_outs else
                                          jax.dtypes.float0)) for j, o in enumerate(outs)]
    if not diff_args or not diff_outs:
        return outs, zeros
    k = node.linear_from
    if k is not None and diff_args[0] >= k and len(diff_outs) == len(outs):
        # linear in the differentiated arrays: the tangent map is the primitive itself
        lin = [ad.instantiate_zeros(t) for t in tangents[k:]]
        return outs, _bind(*primals[:k], *lin, node=node)
    tangent = Tangent(node, diff_args, diff_outs, len(primals))
    result = _bind(*primals, *(tangents[i] for i in diff_args), node=tangent)
    out_tangents = list(zeros)
    for j, t in zip(diff_outs, result):
        out_tangents[j] = t
    return outs, out_tangents


def _transpose(cotangents, *args, node, partitioned):
    k = node.linear_from
    if k is None or any(ad.is_undefined_primal(a) for a in args[:k]):
        raise NotImplementedError(f"jaxpool_halo: {node} is not linear in these arguments")
    linear = args[k:]
    cts = [ad.instantiate_zeros(c) for c in cotangents]
    result = _bind(*args[:k], *cts, node=_transpose_of(node))
    return [None] * k + [r if ad.is_undefined_primal(a) else None
                         for a, r in zip(linear, result)]


def _batch(args, dims, *, node, partitioned):
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    moved = [jnp.moveaxis(a, d, 0) if d is not None else
             jnp.broadcast_to(a, (size, *a.shape)) for a, d in zip(args, dims)]
    out = _bind(*moved, node=Batched(node))
    return out, [0] * len(out)


def _lower(ctx, *args, node, partitioned):
    # Inside shard_map the arrays are already per device, and one device has nothing to
    # partition: the op's own program.
    context = ctx.module_context.axis_context
    if getattr(context, "manual_axes", None) or getattr(context, "num_devices", 1) < 2 \
            or partitioned is None:
        fn = _traced_local(node, None)
    else:
        fn = _partitioned(node, tuple((tuple(a.shape), a.dtype) for a in ctx.avals_in))
    return mlir.lower_fun(fn, multiple_results=True)(ctx, *args)


halo_p.def_impl(_impl)
halo_p.def_abstract_eval(_abstract_eval)
mlir.register_lowering(halo_p, _lower)
ad.primitive_jvps[halo_p] = _jvp
ad.primitive_transposes[halo_p] = _transpose
batching.primitive_batchers[halo_p] = _batch


# --- the partitioner's callbacks ----------------------------------------------------------

@functools.lru_cache(maxsize=1024)
def _partitioned(node, types):
    from jax.experimental.custom_partitioning import custom_partitioning
    results = _result_types(node, types)

    @custom_partitioning
    def partitioned(*arrays):
        # Traced only for the results' types: on several devices the partition callback
        # gives the program (one device and shard_map lower the op itself, in _lower).
        return tuple(jnp.zeros(shape, dtype) for shape, dtype, _ in results)

    def partition(mesh, arg_shapes, result_shape):
        names, in_specs, out_specs = _layout(node, mesh, arg_shapes, result_shape)
        return (mesh, _traced_local(node, names),
                tuple(NamedSharding(mesh, s) for s in out_specs),
                tuple(NamedSharding(mesh, s) for s in in_specs))

    def infer(mesh, arg_shapes, result_shape):
        _, _, out_specs = _layout(node, mesh, arg_shapes, result_shape)
        return tuple(NamedSharding(mesh, s) for s in out_specs)

    partitioned.def_partition(infer_sharding_from_operands=infer, partition=partition,
                              sharding_rule=_rule_for(node))
    return partitioned


_LAYOUTS: dict = {}  # the partitioner asks both callbacks the same question


def _layout(node, mesh, arg_shapes, result_shapes):
    key = (node, mesh, tuple((tuple(a.shape), a.dtype, a.sharding) for a in arg_shapes),
           tuple((tuple(o.shape), o.dtype) for o in result_shapes))
    if key not in _LAYOUTS:
        if len(_LAYOUTS) > 4096:
            _LAYOUTS.clear()
        _LAYOUTS[key] = _choose_layout(node, mesh, arg_shapes, tuple(result_shapes))
    return _LAYOUTS[key]


def _choose_layout(node, mesh, arg_shapes, result_shapes):
    """The mesh axis of each spatial axis (or None) and every array's PartitionSpec: the
    first array's sharding, where the per-device op holds on it; else replicated along the
    spatial axes (then along every axis)."""
    first = arg_shapes[0]
    rank = len(first.shape)
    spec = _full_spec(first.sharding, rank)
    sizes = _mesh_sizes(mesh)
    names = []
    for axis in node.spatial:
        entry = spec[axis]
        if isinstance(entry, tuple):
            entry = entry[0] if len(entry) == 1 else None  # split over several: keep whole
        spec[axis] = entry
        names.append(entry)
    outs = tuple(result_shapes)
    attempts = [(tuple(names), spec)] if any(n is not None for n in names) else []
    whole = [None if i in node.spatial else e for i, e in enumerate(spec)]
    attempts += [((None,) * len(names), whole), ((None,) * len(names), [None] * rank)]
    for try_names, try_spec in attempts:
        in_specs = tuple(_spec_for(a.shape, try_spec, node.spatial, sizes) for a in arg_shapes)
        out_specs = tuple(_spec_for(o.shape, try_spec, node.spatial, sizes) for o in outs)
        if _holds(node, mesh, try_names, in_specs, out_specs, arg_shapes, outs):
            return (try_names if any(n is not None for n in try_names) else None,
                    in_specs, out_specs)
    raise AssertionError("jaxpool_halo: no layout holds, not even a replicated one")


def _mesh_sizes(mesh) -> dict:
    """Each mesh axis's device count, by name."""
    return dict(zip(mesh.axis_names, mesh.devices.shape)) if hasattr(mesh, "devices") \
        else dict(mesh.shape)


def _full_spec(sharding, rank: int) -> list:
    spec = list(sharding.spec) if isinstance(sharding, NamedSharding) else []
    return spec + [None] * (rank - len(spec))


def _spec_for(shape, spec, spatial, sizes) -> P:
    """An array's spec from the first array's: the same axes where its rank is the first's,
    the spatial axes dropped where it lacks them (a global pool's ``[B, C]``); an axis
    keeps its mesh axis only where its extent divides over it."""
    if len(shape) == len(spec):
        entries = list(spec)
    elif len(shape) == len(spec) - len(spatial):
        entries = [e for i, e in enumerate(spec) if i not in spatial]
    else:
        return P()
    return P(*[e if e is None or (n % _size(e, sizes) == 0 and n >= _size(e, sizes)) else None
               for e, n in zip(entries, shape)])


def _size(entry, sizes) -> int:
    return int(np.prod([sizes[e] for e in (entry if isinstance(entry, tuple) else (entry,))]))


def _holds(node, mesh, names, in_specs, out_specs, arg_shapes, outs) -> bool:
    """Whether the per-device op, on these specs, runs and gives each device its block of
    every result (its own ValueError where a halo or an output does not fit)."""
    sizes = _mesh_sizes(mesh)

    def local(shape, spec):
        entries = list(spec) + [None] * (len(shape) - len(spec))
        return tuple(n if e is None else n // _size(e, sizes) for n, e in zip(shape, entries))

    try:
        if all(n is None for n in names):  # no exchange: the op on each block's shape
            types = tuple((local(a.shape, p), a.dtype) for a, p in zip(arg_shapes, in_specs))
            got = [s for s, _, _ in _result_types(node, types)]
        else:
            f = jax.shard_map(_traced_local(node, names), mesh=mesh, in_specs=in_specs,
                              out_specs=out_specs, check_vma=False)
            structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arg_shapes]
            got = [local(g.shape, p) for g, p in zip(jax.eval_shape(f, *structs), out_specs)]
    except Exception:  # noqa: BLE001 (the op's ValueError, or shard_map's on the specs)
        return False
    return all(tuple(g) == local(o.shape, p) for g, o, p in zip(got, outs, out_specs))


def _rule_for(node) -> Callable:
    """Shardy's rule: each axis of an array shares a factor with the first array's axis it
    matches (the same axis where the ranks agree; a global pool's ``[B, C]`` lacks the
    spatial ones). Where the extents differ (a pool's output, an upsampling's), the axes
    share their greatest common divisor as the major factor of each, so that a sharding
    of the input's axis carries over to the output's as blocks of its rows."""
    from jax.experimental.custom_partitioning import (ArrayMapping, CompoundFactor,
                                                      SdyShardingRule)

    def rule(mesh, operand_types, result_types):
        devices = [n for n in _mesh_sizes(mesh).values() if n > 1]
        first = tuple(operand_types[0].shape)
        names = (f"f{i}" for i in range(1 << 16))
        arrays = [tuple(t.shape) for t in (*operand_types, *result_types)]
        kept = [i for i in range(len(first)) if i not in node.spatial]
        where: list[list[int | None]] = [
            list(range(len(first))) if len(a) == len(first) else
            list(kept) if len(a) == len(first) - len(node.spatial) else [None] * len(a)
            for a in arrays]
        dims: list[list] = [[None] * len(a) for a in arrays]
        sizes: dict[str, int] = {}
        for axis in range(len(first)):
            members = [(k, w.index(axis)) for k, w in enumerate(where) if axis in w]
            extents = [arrays[k][j] for k, j in members]
            shared = next(names)
            # an axis reduced whole (extent 1) shares nothing: the others share their gcd
            g = math.gcd(*(n for n in extents if n > 1)) if any(n > 1 for n in extents) else 1
            if any(g % n for n in devices) and len(set(extents)) > 1:
                g = 1  # a block of rows per device on every array, or nothing shared
            for (k, j), n in zip(members, extents):
                if n == 1 and g > 1:
                    dims[k][j] = next(names)
                elif n == g:
                    dims[k][j] = shared
                elif g == 1:
                    dims[k][j] = next(names)
                else:
                    inner = next(names)
                    sizes[inner] = n // g
                    dims[k][j] = CompoundFactor(shared, inner)
            if g > 1 and g not in extents:
                sizes[shared] = g
        for k, a in enumerate(arrays):
            dims[k] = [d if d is not None else next(names) for d in dims[k]]
        mappings = [ArrayMapping(*d) for d in dims]
        return SdyShardingRule(tuple(mappings[:len(operand_types)]),
                               tuple(mappings[len(operand_types):]),
                               **sizes)  # type: ignore[arg-type]  # factor sizes
    return rule
