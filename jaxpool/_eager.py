"""Eager gradients as two compiled programs.

Each public op runs one ``jax.jit``'d program per plan. Called eagerly, that program is
compiled once and reused. Differentiated eagerly (``jax.grad`` or ``jax.vjp`` without
``jit``), JAX linearizes the program at every call: it runs the primal with every
residual as an output (19 of them for ``max_pool2d(x, 3, 2, 1)``), then a transposed
program, with Python work that grows with the residuals and the program.

:func:`dispatch` wraps an op's program. Under one ``jax.grad`` / ``jax.vjp`` called
eagerly (the op's array arguments are that reverse-mode trace's tracers over concrete
arrays, and it is the innermost trace) the op is one primitive whose forward is the op's
own program and whose transpose is one cached program, the op's program differentiated
by ``jax.vjp`` under ``jax.jit`` (it recomputes the forward and transposes it): the same
operations and bits as the jitted gradient, two programs and little Python per call.
Anywhere else (under ``jit``, ``vmap``, ``jvp``, ``linearize``, a second ``grad``,
``checkpoint``, or with no transform at all) the op's program is called as it is, so no
program changes under any transform.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

try:  # JAX's reverse-mode trace; without it every call takes the op's program as it is
    from jax._src import core as _core
    from jax._src.interpreters import ad as _ad

    _LinearizeTracer = _ad.LinearizeTracer
    _trace_ctx = _core.trace_ctx
    _EvalTrace = _core.EvalTrace
    _ad.primitive_linearizations  # noqa: B018 (the hook this module needs)
except (ImportError, AttributeError):  # pragma: no cover - another JAX
    _LinearizeTracer = None

_Tracer = jax.core.Tracer
_enabled = [True]


@contextlib.contextmanager
def linearized_by_jax():
    """Within it, eager gradients linearize each op's program as JAX does by itself (for
    side-by-side measurements and tests)."""
    _enabled.append(False)
    try:
        yield
    finally:
        _enabled.pop()


def _top_level_vjp(arrays: Sequence[Any]) -> bool:
    """Whether the only transform that sees ``arrays`` is one eagerly called reverse-mode
    trace (``jax.grad``, ``jax.vjp``), the innermost one."""
    trace = None
    for a in arrays:
        if not isinstance(a, _Tracer):
            continue
        if type(a) is not _LinearizeTracer or isinstance(a.primal, _Tracer):
            return False
        if trace is None:
            trace = a._trace
            if (not trace.is_vjp or _trace_ctx.trace is not trace
                    or not isinstance(trace.parent_trace, _EvalTrace)):
                return False
        elif a._trace is not trace:
            return False
    return trace is not None


@dataclass(frozen=True, eq=False)
class _Call:
    """One call's static part: the op, and its static arguments by position."""

    op: "Dispatch"
    static: tuple[tuple[int, Any], ...]

    def run(self, arrays) -> Any:
        args = list(arrays)
        for position, value in self.static:
            args.insert(position, value)
        return self.op.program(*args)

    def __hash__(self):
        return hash((id(self.op), self.static))

    def __eq__(self, other):
        return (isinstance(other, _Call) and self.op is other.op
                and self.static == other.static)


def _floating(dtype) -> bool:
    return jnp.issubdtype(dtype, jnp.floating)


if _LinearizeTracer is not None:
    # The op's program as one primitive (bound only under the trace above), and its
    # linear part: a primitive whose transpose is the op's jax.vjp in one program.
    _op_p = _core.Primitive("jaxpool_program")
    _op_p.multiple_results = True
    _linear_p = _core.Primitive("jaxpool_program_linear")
    _linear_p.multiple_results = True

    @_op_p.def_impl
    def _op_impl(*arrays, call, tree):
        leaves, treedef = jax.tree_util.tree_flatten(call.run(arrays))
        tree.append(treedef)
        return leaves

    def _linearize(is_vjp, nonzeros, *arrays, call, tree):
        outs = _op_impl(*arrays, call=call, tree=tree)
        floating = tuple(_floating(o.dtype) for o in outs)
        avals = tuple(_core.ShapedArray(o.shape, o.dtype) for o, f in zip(outs, floating) if f)
        wrt = tuple(i for i, nz in enumerate(nonzeros) if nz)

        def linearized(residuals, *tangents):
            nonzero = [t for t in tangents if type(t) is not _ad.Zero]
            produced = iter(_linear_p.bind(*residuals, *nonzero, call=call, wrt=wrt,
                                           avals=avals))
            return [next(produced) if f else _ad.Zero(_core.typeof(o).to_tangent_aval())
                    for o, f in zip(outs, floating)]

        return outs, list(floating), list(arrays), linearized

    _ad.primitive_linearizations[_op_p] = _linearize
    _linear_p.def_abstract_eval(lambda *args, call, wrt, avals: list(avals))

    def _transpose(cotangents, *args, call, wrt, avals):
        arrays = args[:len(args) - len(wrt)]
        cotangents = tuple(_ad.instantiate_zeros(c) for c in cotangents)
        grads = _transposed(call, wrt, tuple(arrays), cotangents)
        return [None] * len(arrays) + list(grads)

    _ad.primitive_transposes[_linear_p] = _transpose


@functools.partial(jax.jit, static_argnums=(0, 1))
def _transposed(call: _Call, wrt: tuple[int, ...], arrays, cotangents):
    """The op's program differentiated by ``jax.vjp`` with respect to ``arrays[wrt]``, in
    one program (the jitted gradient's operations)."""

    def floating_outputs(*differentiated):
        args = list(arrays)
        for i, a in zip(wrt, differentiated):
            args[i] = a
        leaves = jax.tree_util.tree_leaves(call.run(args))
        return tuple(y for y in leaves if _floating(y.dtype))

    _, pullback = jax.vjp(floating_outputs, *(arrays[i] for i in wrt))
    return pullback(cotangents)


class Dispatch:
    """An op's jitted ``program``, called as it is, or as the primitive above under one
    eagerly called ``jax.grad``. ``static_argnums``: the program's static arguments."""

    def __init__(self, program: Callable, static_argnums: tuple[int, ...]):
        self.program = program
        self.static_argnums = static_argnums
        self.__doc__ = program.__doc__

    def __call__(self, *args):
        # static arguments are never tracers: with none among the rest, the program
        if not any(isinstance(a, _Tracer) for a in args) or not _enabled[-1]:
            return self.program(*args)
        static = self.static_argnums
        arrays = [a for i, a in enumerate(args) if i not in static]
        if (_LinearizeTracer is None or not _top_level_vjp(arrays)
                or not all(_floating(a.dtype) for a in arrays if isinstance(a, _Tracer))):
            return self.program(*args)
        tree: list = []
        leaves = _op_p.bind(*arrays, call=_Call(self, tuple((i, args[i]) for i in static)),
                            tree=tree)
        return jax.tree_util.tree_unflatten(tree[0], leaves)


def dispatch(program: Callable, static_argnums: int | Sequence[int] = ()) -> Dispatch:
    """``program`` (a ``jax.jit``'d function) called as it is, and under one eagerly
    called ``jax.grad`` as a forward and a transposed program (see the module's note)."""
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    return Dispatch(program, tuple(static_argnums))


def eager_programs(static_argnums: int | Sequence[int] = ()) -> Callable[[Callable], Dispatch]:
    """Decorator: ``jax.jit`` with ``static_argnums``, wrapped by :func:`dispatch`."""

    def wrap(fn: Callable) -> Dispatch:
        return dispatch(jax.jit(fn, static_argnums=static_argnums), static_argnums)

    return wrap
