"""Halo-only programs under plain ``jit``: a jaxpool op wrapped so that XLA's partitioner
runs the per-device op (``axis_names=``, :mod:`jaxpool._halo`) on a spatially sharded
input instead of splitting the op's slices and selects itself.

``partitioned(jaxpool.avg_pool2d, 3, 2, 1)`` is ``lambda x: jaxpool.avg_pool2d(x, 3, 2, 1)``
as a ``jax.experimental.custom_partitioning`` call: given the input's sharding, the
partitioner calls the per-device op with the mesh axes of the sharded spatial axes, and
the output is sharded like the input. ``custom_partitioning`` is not differentiable, so
the wrapper is a ``custom_vjp`` whose backward pass is the same construction applied to
the per-device VJP: reverse-mode derivatives of any order exchange only halos too.
Forward mode (``jvp``) is not available through the wrapper (a ``custom_vjp``); the op
itself, unwrapped, keeps it. Where the per-device op cannot hold (an output extent that
does not divide over the devices, a halo wider than a block), the partitioner is asked for
an input replicated along that axis: the values stay right, the program gathers.

One batched array in (``[B, C, *spatial]`` or channels last), one out: ``return_indices``
and ``max_unpool`` are per-device code only. Give the output's sharding (``out_shardings``
or a constraint): Shardy's rule gives the output's spatial dimensions factors of their own.
"""

from __future__ import annotations

import jax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def partitioned(op, *args, channels_last: bool = False, **kwargs):
    """``x -> op(x, *args, **kwargs, channels_last=channels_last)`` for batched inputs
    ``[B, C, *spatial]`` (or channels last), partitioned per device along sharded spatial
    axes. For ``jaxpool.pad`` the names go to the padded axes."""
    def body(x, axis_names=None):
        return op(x, *args, **kwargs, channels_last=channels_last, axis_names=axis_names)

    def spatial(rank):
        if op.__name__ == "pad":
            pairs = len(args[0] if args else kwargs["pad"]) // 2
            last = rank - 1 - (1 if channels_last else 0)
            return sorted(last - i for i in range(pairs))
        return list(range(1, rank - 1)) if channels_last else list(range(2, rank))

    return _differentiable(body, 1, spatial)


def _names(sharding, rank: int, axes) -> tuple:
    spec = list(sharding.spec) + [None] * (rank - len(sharding.spec))
    names = []
    for axis in axes:
        entry = spec[axis]
        if isinstance(entry, tuple):
            entry = entry[0] if len(entry) == 1 else entry
        names.append(entry)
    return tuple(names)


def _partitioned_call(body, nargs: int, spatial):
    """``body(*arrays)`` as one custom_partitioning call; every operand is laid out like the
    first (the primal input), the result like the first too where its rank matches."""

    @custom_partitioning
    def call(*arrays):
        # A nested jit keeps the body's constants out of the traced function.
        return jax.jit(lambda *a: body(*a, axis_names=None))(*arrays)

    def partition(mesh, arg_shapes, result_shape):
        first = arg_shapes[0]
        rank = len(first.shape)
        axes = spatial(rank)
        sharding = first.sharding if isinstance(first.sharding, NamedSharding) else \
            NamedSharding(mesh, P())
        names = _names(sharding, rank, axes)
        multi = [n for n in names if n is not None and not isinstance(n, str)]
        if multi:  # an axis split over several mesh axes: keep it whole
            spec = list(sharding.spec) + [None] * (rank - len(sharding.spec))
            for axis, name in zip(axes, names):
                if name in multi:
                    spec[axis] = None
            sharding = NamedSharding(mesh, P(*spec))
            names = tuple(None if n in multi else n for n in names)
        shapes = [a.shape for a in arg_shapes]
        try:  # does the per-device op hold on this sharding?
            _check(body, shapes, sharding, mesh, names, nargs)
        except ValueError:
            sharding = NamedSharding(mesh, P(*[None if i in axes else e for i, e in enumerate(
                list(sharding.spec) + [None] * (rank - len(sharding.spec)))]))
            names = (None,) * len(axes)
        out_rank = len(result_shape.shape)
        out_spec = (list(sharding.spec) + [None] * (rank - len(sharding.spec)))[:out_rank] \
            if out_rank == rank else [None] * out_rank
        out_sharding = NamedSharding(mesh, P(*out_spec))
        in_shardings = tuple(sharding if len(a.shape) == rank else NamedSharding(mesh, P())
                             for a in arg_shapes)
        use = names if any(n is not None for n in names) else None

        def lower(*arrays):
            return body(*arrays, axis_names=use)

        return mesh, lower, out_sharding, in_shardings

    def infer(mesh, arg_shapes, result_shape):
        first = arg_shapes[0]
        return first.sharding

    call.def_partition(infer_sharding_from_operands=infer, partition=partition,
                       sharding_rule=_rule)
    return call


def _rule(mesh, operand_types, result_types) -> str:
    """Shardy's rule: a factor per dimension, the first operand's shared by operands of its
    rank; the output's spatial extents change, so its factors are its own (the partition
    callback sets the shardings)."""
    letters = iter(_LETTERS)
    first = [next(letters) for _ in operand_types[0].shape]
    operands = [" ".join(first if len(t.shape) == len(first) else
                         [next(letters) for _ in t.shape]) for t in operand_types]
    results = [" ".join(next(letters) for _ in t.shape) for t in result_types]
    return ", ".join(operands) + " -> " + ", ".join(results)


def _check(body, shapes, sharding, mesh, names, nargs):
    """Raise the per-device op's ValueError if it cannot hold on this sharding."""
    from jax import ShapeDtypeStruct
    if all(n is None for n in names):
        return
    spec = sharding.spec
    # ``out_specs=P()`` claims one output for all devices, which the per-device result is
    # not: only the shapes matter here (the op's own ValueError), so the check is off.
    f = jax.shard_map(lambda *a: body(*a, axis_names=names), mesh=mesh,
                      in_specs=tuple(spec if len(s) == len(shapes[0]) else P() for s in shapes),
                      out_specs=P(), check_vma=False)
    jax.eval_shape(f, *[ShapeDtypeStruct(s, "float32") for s in shapes])


def _differentiable(body, nargs: int, spatial):
    call = _partitioned_call(body, nargs, spatial)

    @jax.custom_vjp
    def f(*arrays):
        return call(*arrays)

    def f_fwd(*arrays):
        # f itself, not the bare call: a higher derivative differentiates this output too
        return f(*arrays), arrays

    def f_bwd(arrays, cotangent):
        def vjp_body(*a, axis_names=None):
            primals, ct = a[:-1], a[-1]
            _, pullback = jax.vjp(lambda *p: body(*p, axis_names=axis_names), *primals)
            return pullback(ct)
        grads = _differentiable_multi(vjp_body, len(arrays) + 1, spatial)(*arrays, cotangent)
        return tuple(grads)

    f.defvjp(f_fwd, f_bwd)
    return f


def _differentiable_multi(body, nargs, spatial):
    """As :func:`_differentiable` for a body returning a tuple (a VJP's cotangents)."""
    return lambda *arrays: tuple(_differentiable(
        lambda *a, axis_names=None, i=i: body(*a, axis_names=axis_names)[i], nargs, spatial)(
            *arrays) for i in range(nargs - 1))
