"""Building blocks for primitives with derivative rules of their own.

:func:`linear_primitive` makes a primitive linear in its leading operands, whose tangent is
itself applied to the tangents and whose transpose is a given function (usually another such
primitive): every derivative of every order then stays within the primitives named, and
never falls back on what JAX would derive from their implementations. :func:`rounded` is an
identity, differentiated as one, that keeps a product from being fused into a multiply-add.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import jax
import jax.extend.core
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jax.interpreters import ad, batching, mlir


def shaped_like(t: jax.Array, shape: tuple[int, ...]):
    """An abstract array of ``shape`` with ``t``'s dtype and, inside ``shard_map``, its
    per-device (varying) mesh axes: a bare ``ShapeDtypeStruct`` carries none, and
    ``shard_map``'s default check then rejects the transposed map's output as the tangent
    of a per-device value. JAX without ``jax.typeof`` has no such axes to carry."""
    typeof = getattr(jax, "typeof", None)
    if typeof is None:
        return jax.ShapeDtypeStruct(shape, t.dtype)
    return typeof(t).update(shape=tuple(shape))


def linear_primitive(name: str, impl: Callable, transpose: Callable, *,
                     linear_operands: int = 1, multiple_results: bool = False,
                     batch: Optional[Callable] = None) -> jax.extend.core.Primitive:
    """A primitive ``p`` with ``p.bind(*linear, *aux, **params) == impl(*linear, *aux,
    **params)``, linear in its first ``linear_operands`` operands; the others (``aux``:
    integer index arrays and the like) carry no derivative and travel unchanged into the
    tangent and the transpose.

    - impl: ``jax.jit(impl)`` (params static); abstract evaluation: ``jax.eval_shape`` of
      it; lowering: ``mlir.lower_fun(impl)``.
    - JVP: ``p`` applied to the linear operands' tangents (zero where all are zero).
    - transpose: ``transpose(cotangent, *aux, **params)`` returns one cotangent per linear
      operand (or ``None`` for a zero); it must be built from primitives whose own
      derivatives are known (typically another ``linear_primitive``).
    - batching: ``batch(args, dims, **params) -> (out, out_dims)`` where given, else
      ``jax.vmap`` of ``impl`` (whose derivatives are then JAX's own of ``impl``).
    """
    p = jax.extend.core.Primitive(name)
    p.multiple_results = multiple_results

    @functools.lru_cache(maxsize=None)
    def compiled(params: tuple):
        return jax.jit(functools.partial(impl, **dict(params)))

    def _impl(*args, **params):
        return compiled(tuple(sorted(params.items())))(*args)

    def _abstract(*avals, **params):
        shapes = jax.eval_shape(functools.partial(impl, **params),
                                *[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals])
        leaves = shapes if multiple_results else [shapes]
        # ``update`` keeps the operand's sharding and, inside shard_map, its varying mesh
        # axes, which a fresh ShapedArray would drop.
        out = [avals[0].update(shape=s.shape, dtype=s.dtype, weak_type=False) for s in leaves]
        return out if multiple_results else out[0]

    def _jvp(primals, tangents, **params):
        out = p.bind(*primals, **params)
        linear = tangents[:linear_operands]
        if all(type(t) is ad.Zero for t in linear):
            zeros = ([zero_like(o) for o in out] if multiple_results else zero_like(out))
            return out, zeros
        linear = [ad.instantiate_zeros(t) for t in linear]
        return out, p.bind(*linear, *primals[linear_operands:], **params)

    def _transpose(cotangent, *args, **params):
        aux = args[linear_operands:]
        if any(ad.is_undefined_primal(a) for a in aux):
            raise ValueError(f"{name}: only the first {linear_operands} operands are linear")
        if multiple_results:
            if all(type(c) is ad.Zero for c in cotangent):
                return [None] * len(args)
            cotangent = [ad.instantiate_zeros(c) for c in cotangent]
        elif type(cotangent) is ad.Zero:
            return [None] * len(args)
        else:
            cotangent = ad.instantiate_zeros(cotangent)
        cts = list(transpose(cotangent, *aux, **params))
        cts = [c if ad.is_undefined_primal(a) else None
               for c, a in zip(cts, args[:linear_operands])]
        return cts + [None] * len(aux)

    def _vmapped(args, dims, **params):
        in_axes = tuple(d for d in dims)
        out = jax.vmap(lambda *a: impl(*a, **params), in_axes=in_axes)(*args)
        return out, ([0] * len(out) if multiple_results else 0)

    p.def_impl(_impl)
    p.def_abstract_eval(_abstract)
    mlir.register_lowering(p, mlir.lower_fun(lambda *a, **params: impl(*a, **params),
                                             multiple_results=multiple_results))
    ad.primitive_jvps[p] = _jvp
    ad.primitive_transposes[p] = _transpose
    batching.primitive_batchers[p] = batch if batch is not None else _vmapped
    return p


def zero_like(value) -> ad.Zero:
    """A symbolic zero tangent for ``value`` (``Zero.from_primal_value`` on newer JAX)."""
    from_primal = getattr(ad.Zero, "from_primal_value", None)
    if from_primal is not None:
        return from_primal(value)
    return ad.Zero(jax.core.get_aval(value).at_least_vspace())  # type: ignore[attr-defined]


def tangent_from_adjoint(adjoint: Callable[[jax.Array], jax.Array], tangent: jax.Array,
                         shape: tuple[int, ...]) -> jax.Array:
    """``tangent`` mapped by the transpose of ``adjoint``, a linear map from arrays of
    ``shape`` (the op's outputs) to arrays of ``tangent``'s shape (its inputs).

    A tangent rule written so is transposed back to ``adjoint`` itself by reverse mode: the
    gradient is computed as the adjoint is written (slices and sums of the cotangent, one
    input row at a time, say), not as JAX's transpose of the forward map's own tangent."""
    spread = jax.linear_transpose(adjoint, shaped_like(tangent, shape))
    return spread(tangent)[0]


@jax.custom_jvp
def rounded(x):
    """``x`` (a product), rounded here in every program. XLA:CPU contracts a product and
    the sum it feeds into one fused multiply-add where its fusions and LLVM allow, and that
    differs between programs (plain, jvp, vjp, vmap, either layout): every product that
    feeds a sum goes through a select, which the contraction does not look through (an
    ``optimization_barrier`` does not stop it: XLA removes it before fusing). The select
    stays in the fused loop: a compare and a select per element, no memory."""
    return jnp.where(jnp.isnan(x), jnp.asarray(jnp.nan, x.dtype), x)


@rounded.defjvp
def _rounded_jvp(primals, tangents):
    return rounded(primals[0]), tangents[0]


@jax.custom_jvp
def from_plus_zero(total):
    """``0.0 + total``: a sum that starts from +0.0, as a kernel's ``T sum = 0; sum +=
    ...`` does (-0.0 becomes +0.0, all else stays). A sum written from a zero array loses
    it where XLA unrolls a loop of one step and folds the literal ``0 + x`` into ``x``; a
    running sum from +0.0 is never -0.0, so mapping -0.0 to +0.0 afterwards is exact. The
    tangent passes through."""
    return jnp.where(total == 0, jnp.zeros((), total.dtype), total)


@from_plus_zero.defjvp
def _from_plus_zero_jvp(primals, tangents):
    return from_plus_zero(primals[0]), tangents[0]


def jvp_of_moving(fn: Callable[..., Any], primals: tuple, tangents: tuple,
                  argnums: tuple[int, ...]) -> tuple[Any, Any, list[int]]:
    """``jax.jvp`` of ``fn(*primals)`` in those of the arguments ``argnums`` whose tangents
    are not symbolic zeros (a ``custom_jvp`` rule's, defined with ``symbolic_zeros=True``),
    the others held constant: an instantiated zero tangent times an inf or NaN would put
    NaN where the derivative has none. ``(values, tangent, the moving argnums)``."""
    moving = [i for i in argnums if not isinstance(tangents[i], SymbolicZero)]

    def in_moving(*args):
        given = list(primals)
        for i, a in zip(moving, args):
            given[i] = a
        return fn(*given)

    out, tangent = jax.jvp(in_moving, tuple(primals[i] for i in moving),
                           tuple(tangents[i] for i in moving))
    return out, tangent, moving
