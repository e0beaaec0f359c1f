"""An op's compiled program, and the static arrays it computes in place of capturing them.

Differentiated outside ``jax.jit`` (an eager ``jax.grad``, ``jax.vjp`` or
``jax.linearize``), JAX splits a compiled program into a forward program and a derivative
program, and every array that passes between them is one more output and argument, each
a cost in Python on every call: the values the derivative needs (residuals: masks,
positions, pieces of the input) and the program's captured constants (numpy arrays made
while tracing). So an op's program is written with :func:`program`, whose derivative
recomputes from the program's inputs what it needs, but for what would cost a pass of its
own, and a static array is made by :func:`static_array` from an iota where it can be.
Under an outer ``jax.jit`` the program is the same: XLA merges the recomputation with the
forward, and folds the iota (BENCHMARKS.md, "Eager calls").
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxpool.core.types import F

# Runs of a boolean array computed from an iota, up to this many (each run is two compares
# and two logical ops; past a few, the captured constant is the smaller program).
_MAX_RUNS = 4


# What a derivative keeps of its program's forward: what would cost a pass of its own to
# recompute (a sort: the sorted sums' permutation; a loop; a contraction). Everything else
# (masks, positions, reads, slices, elementwise work) it recomputes from the inputs.
_KEPT = frozenset({"sort", "while", "scan", "dot_general", "conv_general_dilated"})


def _keeps(primitive, *_, **__) -> bool:
    return primitive.name in _KEPT


def program(static_argnums: int | tuple[int, ...] = 0, *,
            recompute: bool = True) -> Callable[[F], F]:
    """``jax.jit`` with ``static_argnums``, whose derivatives recompute from the program's
    inputs what they need but its sorts, loops and contractions (``jax.checkpoint``,
    without the barrier that keeps XLA from merging the recomputation with the forward).
    ``recompute=False``: a plain ``jax.jit``, for a program whose derivative in the
    positions would read the input at them again, which costs more than passing the reads
    (grid_sample's and the deformable ops': BENCHMARKS.md, "Eager calls")."""
    def wrap(fn: F) -> F:
        if not recompute:
            return cast(F, jax.jit(fn, static_argnums=static_argnums))
        kept = jax.checkpoint(fn, static_argnums=static_argnums, prevent_cse=False,
                              policy=_keeps)
        return cast(F, functools.wraps(fn)(jax.jit(kept, static_argnums=static_argnums)))
    return wrap


def static_array(values: np.ndarray, shape: Sequence[int], axis: int) -> jax.Array:
    """The 1-D ``values`` laid along ``axis`` of an array of ``shape`` (which is 1 on every
    other axis), in ``values``' dtype, computed from an iota where the values are a few
    runs of True (booleans) or an arithmetic progression (integers); else captured."""
    values = np.asarray(values)
    shape = tuple(shape)
    if len(values) == 0 or np.all(values == values[0]):
        return jnp.full(shape, values[0] if len(values) else 0, values.dtype)
    if values.dtype == bool:
        changes = np.flatnonzero(np.diff(values.astype(np.int8))) + 1
        bounds = np.concatenate([[0], changes, [len(values)]])
        runs = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if values[a]]
        if len(runs) <= _MAX_RUNS:
            position = lax.broadcasted_iota(jnp.int32, shape, axis)
            inside = [(position >= start) & (position < stop) for start, stop in runs]
            return functools.reduce(jnp.logical_or, inside)
    elif np.issubdtype(values.dtype, np.integer):
        steps = np.diff(values)
        if np.all(steps == steps[0]):
            position = lax.broadcasted_iota(values.dtype, shape, axis)
            first, step = values.dtype.type(values[0]), values.dtype.type(steps[0])
            return position * step + first
    return jnp.asarray(values.reshape(shape))
