"""The pooling functions: torch.nn.functional's semantics, computed per axis.

Layout: channels-first by default (``[B, C, *spatial]`` or unbatched ``[C, *spatial]``, as
torch); ``channels_last=True`` takes and returns ``[B, *spatial, C]`` (or ``[*spatial, C]``).

Each rank is a function of its own; a 1d/2d/3d family shares a docstring template and a
``prepare`` that checks the arguments in plain Python (:mod:`jaxpool.pooling.plan`) and
returns the compiled program to run (:mod:`jaxpool.registry` runs every op the same way).
One compiled program runs per plan, input shape and dtype: called eagerly (and differentiated
eagerly) it is compiled once and reused; under an outer ``jax.jit`` it is a nested call
that XLA inlines, so the compiled program is the same.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Literal, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxpool.core.program import program
from jaxpool import registry
from jaxpool.core import checks, docs, dtypes
from jaxpool.core.types import F, AxisNames, OutputSize, Size  # noqa: F401 (the adapters')
from jaxpool.halo import kernel as halo
from jaxpool.pooling import kernel, kernel_max
from jaxpool.pooling.plan import (PoolPlan, check_norm_type, plan_adaptive, plan_avg_pool,
                                  plan_global, plan_lp_pool, plan_max_pool)
from jaxpool.registry import Prepared, Spec
from jaxpool.strategy_table import current_backend


# --- the compiled programs: one per plan (static, hashable), shape and dtype ------------

@program(0)
def _mean(plan: PoolPlan, x: jax.Array) -> jax.Array:
    dtype = x.dtype
    y = kernel.window_sums(x.astype(dtypes.compute_dtype(dtype)), plan)
    return (y / _divisor(plan, y.ndim, y.dtype)).astype(dtype)


def _divisor(plan: PoolPlan, rank: int, dtype):
    if plan.divisor_override is not None:
        return jnp.asarray(plan.divisor_override, dtype)
    divisor = functools.reduce(np.multiply.outer,
                               [np.asarray(p.divisors, np.float64) for p in plan.axes])
    shape = [1] * rank
    for axis, axis_plan in zip(plan.spatial_axes, plan.axes):
        shape[axis] = axis_plan.out_size
    return jnp.asarray(divisor.reshape(shape), dtype)


@program((0, 2))
def _max(plan: PoolPlan, x: jax.Array, return_indices: bool):
    values, indices = kernel_max.window_max(x, plan, return_indices)
    return (values, indices) if return_indices else values


@program((0, 2))
def _power_mean(plan: PoolPlan, x: jax.Array, norm_type: float) -> jax.Array:
    # torch: avg_pool(x**p) * prod(kernel), its sign times relu of its magnitude, ** (1/p).
    dtype = x.dtype
    y = x.astype(dtypes.compute_dtype(dtype))
    power = int(norm_type) if float(norm_type).is_integer() else norm_type
    mean = _mean(plan, y ** power)
    volume = math.prod(p.stops[0] - p.starts[0] for p in plan.axes)
    total = jnp.sign(mean) * jax.nn.relu(jnp.abs(mean)) * volume
    return (total ** (1.0 / norm_type)).astype(dtype)


@program(0)
def _global_mean(plan: PoolPlan, x: jax.Array) -> jax.Array:
    dtype = x.dtype
    total = x.astype(dtypes.compute_dtype(dtype)).sum(axis=plan.spatial_axes)
    return (total / (plan.axes[0].in_size * plan.axes[1].in_size)).astype(dtype)


# --- checks, plans and routes: each family's ``prepare`` (see jaxpool.registry) -----------

def _shape(spec: Spec, x, channels_last, axis_names) -> tuple[int, ...]:
    """``x``'s shape; with ``axis_names`` (per-device code), the unsharded array's."""
    return x.shape if axis_names is None else halo.pool_shape(
        spec.name, x.shape, spec.rank, channels_last, axis_names)


def _sharded(fn, plan, x, axis_names):
    return fn(plan, x) if axis_names is None else halo.pool(fn, plan, x, axis_names)


def _sharded_max(plan, x, return_indices, axis_names):
    if axis_names is None:
        return _max(plan, x, return_indices)
    return halo.pool(lambda p, v: _max(p, v, return_indices), plan, x, axis_names,
                      indices=return_indices, reduce="max")


def _prepare_avg(spec: Spec, x: Any, *, kernel_size: Size, stride: Size | None, padding: Size,
                 ceil_mode: bool, count_include_pad: bool, divisor_override: int | None,
                 channels_last: bool, axis_names: AxisNames) -> Prepared:
    plan = plan_avg_pool(spec.name, _shape(spec, x, channels_last, axis_names), x.dtype,
                         spec.rank, kernel_size, stride, padding, ceil_mode, count_include_pad,
                         divisor_override, channels_last, current_backend())
    return Prepared(lambda x, names: _sharded(_mean, plan, x, names), plan.spatial_axes)


def _prepare_adaptive_avg(spec: Spec, x: Any, *, output_size: OutputSize, channels_last: bool,
                          axis_names: AxisNames) -> Prepared:
    plan = plan_adaptive(spec.name, _shape(spec, x, channels_last, axis_names), x.dtype,
                         spec.rank, output_size, channels_last, current_backend())
    return Prepared(lambda x, names: _sharded(_mean, plan, x, names), plan.spatial_axes)


def _prepare_max(spec: Spec, x: Any, *, kernel_size: Size, stride: Size | None, padding: Size,
                 dilation: Size, ceil_mode: bool, return_indices: bool, channels_last: bool,
                 axis_names: AxisNames) -> Prepared:
    plan = plan_max_pool(spec.name, _shape(spec, x, channels_last, axis_names), x.dtype,
                         spec.rank, kernel_size, stride, padding, dilation, ceil_mode,
                         channels_last)
    with_indices = checks.check_bool("return_indices", return_indices)
    return Prepared(lambda x, names: _sharded_max(plan, x, with_indices, names),
                    plan.spatial_axes, single=not with_indices)


def _prepare_adaptive_max(spec: Spec, x: Any, *, output_size: OutputSize, return_indices: bool,
                          channels_last: bool, axis_names: AxisNames) -> Prepared:
    plan = plan_adaptive(spec.name, _shape(spec, x, channels_last, axis_names), x.dtype,
                         spec.rank, output_size, channels_last)
    with_indices = checks.check_bool("return_indices", return_indices)
    return Prepared(lambda x, names: _sharded_max(plan, x, with_indices, names),
                    plan.spatial_axes, single=not with_indices)


def _prepare_lp(spec: Spec, x: Any, *, norm_type: float, kernel_size: Size,
                stride: Size | None, ceil_mode: bool, channels_last: bool,
                axis_names: AxisNames) -> Prepared:
    norm_type = check_norm_type(norm_type)
    shape = _shape(spec, x, channels_last, axis_names)
    if math.isinf(norm_type):
        # torch: max pooling of |x| (inf), or minus max pooling of -|x| (-inf).
        plan = plan_max_pool(spec.name, shape, x.dtype, spec.rank, kernel_size, stride, 0, 1,
                             ceil_mode, channels_last)

        def extreme(x, names):
            # |x| with torch's derivative, sign(x): 0 at a zero (jnp.abs's is 1 there)
            magnitude = x * jnp.sign(x)
            return (_sharded_max(plan, magnitude, False, names) if norm_type > 0
                    else -_sharded_max(plan, -magnitude, False, names))
        return Prepared(extreme, plan.spatial_axes)
    plan = plan_lp_pool(spec.name, shape, x.dtype, spec.rank, norm_type, kernel_size, stride,
                        ceil_mode, channels_last, current_backend())
    return Prepared(lambda x, names: _sharded(
        lambda p, v: _power_mean(p, v, norm_type), plan, x, names), plan.spatial_axes)


def _prepare_global(reduce: str) -> Callable[..., Prepared]:
    def prepare(spec: Spec, x: Any, *, channels_last: bool, axis_names: AxisNames) -> Prepared:
        plan = plan_global(spec.name, _shape(spec, x, channels_last, axis_names), x.dtype,
                           channels_last)

        def compute(x, names):
            if reduce == "max":
                return _sharded_max(plan, x, False, names).reshape(plan.output_shape[0], -1)
            if names is not None:  # each device's mean over its block, then one psum
                return _sharded(_mean, plan, x, names).reshape(plan.output_shape[0], -1)
            return _global_mean(plan, x)
        return Prepared(compute, plan.spatial_axes)
    return prepare


# --- the families: one docstring template each, filled in per rank (core.docs) ---------

_AVG_DOC = """{d} average pooling, as ``torch.nn.functional.avg_pool{d}``{lacks}.

    Args:
      x: {x};
        with ``channels_last``, {x_last}.
      kernel_size, stride, padding: an int or one per spatial axis. ``stride`` None, 0 or
        empty means ``kernel_size``; ``padding`` (zeros) is at most ``kernel_size // 2``.
      ceil_mode: round each output extent up (no window starts in the right padding).
      count_include_pad: count the padded zeros in each window's divisor.
      divisor_override: divide every window's sum by this instead.
      channels_last: channels after the spatial axes.
      {axis_names}

    Returns:
      ``x``'s layout and dtype; each spatial extent
      ``floor((n + 2*padding - kernel_size) / stride) + 1`` (ceil with ``ceil_mode``).
      float16/bfloat16 accumulate in float32 and round once.

    Example:
      >>> jaxpool.avg_pool{d}(jnp.ones({shape}), 2).shape
      {halved}
    """

_ADAPTIVE_AVG_DOC = """{d} adaptive average pooling, as ``torch.nn.functional.adaptive_avg_pool{d}``.

    Args:
      x: {x};
        with ``channels_last``, {x_last}.
      output_size: an int or one per spatial axis, each >= 1 or None (keep that extent).
        Window ``i`` of an extent n pooled to k covers ``[floor(i*n/k), ceil((i+1)*n/k))``:
        ragged and overlapping when k does not divide n, repeating elements when k > n.
      channels_last: channels after the spatial axes.
      {axis_names}

    Returns:
      ``x``'s layout and dtype with the spatial extents ``output_size``. float16/bfloat16
      accumulate in float32 and round once.

    Example:
      >>> jaxpool.adaptive_avg_pool{d}(jnp.ones({shape}), 7).shape
      {to7}
    """

_MAX_DOC = """{d} max pooling, as ``torch.nn.functional.max_pool{d}``.

    Each window yields the element torch picks: its first maximal element in row-major
    order, or its last NaN. Padding is never picked. Every derivative sends a window's
    whole derivative to that element, and holds no scatter or gather.

    Args:
      x: {x};
        with ``channels_last``, {x_last}.
      kernel_size, stride, padding, dilation: an int or one per spatial axis. ``stride``
        None, 0 or empty means ``kernel_size``; ``padding`` is at most ``kernel_size // 2``;
        window taps are ``dilation`` apart.
      ceil_mode: round each output extent up (no window starts in the right padding).
      return_indices: also return each picked element's flat index in its input {plane}
        ({index}), torch's indices: int64 under ``jax_enable_x64``, else int32.
      channels_last: channels after the spatial axes.
      {axis_names}

    Returns:
      ``x``'s layout and dtype (values bit for bit torch's); each spatial extent
      ``floor((n + 2*padding - dilation*(kernel_size-1) - 1) / stride) + 1`` (ceil with
      ``ceil_mode``). With ``return_indices``, ``(values, indices)``.

    Example:
      >>> jaxpool.max_pool{d}(jnp.ones({shape}), 3, 2, 1).shape
      {halved}
    """

_ADAPTIVE_MAX_DOC = """{d} adaptive max pooling, as ``torch.nn.functional.adaptive_max_pool{d}``.

    Windows as :func:`adaptive_avg_pool{d}` (ragged ones too), picks as :func:`max_pool{d}`.

    Args:
      x: {x};
        with ``channels_last``, {x_last}.
      output_size: an int or one per spatial axis, each >= 1 or None (keep that extent).
      return_indices: also return torch's flat per-{plane} indices of the picked elements
        (int64 under ``jax_enable_x64``, else int32).
      channels_last: channels after the spatial axes.
      {axis_names}

    Returns:
      ``x``'s layout and dtype with the spatial extents ``output_size``; with
      ``return_indices``, ``(values, indices)``.

    Example:
      >>> jaxpool.adaptive_max_pool{d}(jnp.ones({shape}), 1).shape
      {to1}
    """

_LP_DOC = """{d} power-average pooling, as ``torch.nn.functional.lp_pool{d}``.

    torch's definition: ``(sign(s) * relu(|s|)) ** (1/p)`` where ``s`` is the window sum of
    ``x**p`` (the average times the kernel volume, so ceil-mode edge windows are scaled
    as torch scales them); ``p = inf`` is max pooling of ``|x|``, ``p = -inf`` minus max
    pooling of ``-|x|``. No padding.

    Args:
      x: {x};
        with ``channels_last``, {x_last}.
      norm_type: ``p``, any non-zero real number or +-inf.
      kernel_size, stride: an int or one per spatial axis (``stride`` None, 0 or empty
        means ``kernel_size``).
      ceil_mode: round each output extent up.
      channels_last: channels after the spatial axes.
      {axis_names}

    Returns:
      ``x``'s layout and dtype, shaped as :func:`avg_pool{d}` without padding.
      float16/bfloat16 compute in float32 and round once.

    Example:
      >>> jaxpool.lp_pool{d}(jnp.ones({shape}), 2, 2).shape
      {halved}
    """


def _pooled_to(ndim: int, k: int) -> str:
    """The docstring examples' input of rank ``ndim`` pooled to ``k`` per axis."""
    lead = docs.rank_fields(ndim)["shape"].strip("()").split(", ")[:2]
    return f"({', '.join(lead + [str(k)] * ndim)})"


def _spec(family: str, ndim: int, prepare: Callable[..., Prepared], module: str,
          aten: tuple[str, ...] | None = None, opinfo: bool = True) -> Spec:
    """The spec of rank ``ndim`` of a pooling family."""
    name = f"{family}{ndim}d"
    return Spec(name, family, prepare, ndim=ndim, halo="pool",
                torch=f"torch.nn.functional.{name}", aten=(name,) if aten is None else aten,
                opinfo=(f"nn.functional.{name}",) if opinfo else (), modules=(f"{module}{ndim}d",))


def _doc(template: str, ndim: int, **fields: str) -> Callable[[F], F]:
    """Sets a rank's docstring from its family's template."""
    return docs.filled(template, ndim, to1=_pooled_to(ndim, 1), to7=_pooled_to(ndim, 7),
                       **fields)


@registry.op(_spec("avg_pool", 1, _prepare_avg, "AvgPool"))
@_doc(_AVG_DOC, 1, lacks=" (which lacks ``divisor_override``)")
def avg_pool1d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None, *, channels_last: bool = False,
               axis_names: AxisNames = None) -> jax.Array:
    return registry.run("avg_pool1d", locals())


@registry.op(_spec("avg_pool", 2, _prepare_avg, "AvgPool"))
@_doc(_AVG_DOC, 2, lacks="")
def avg_pool2d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None, *, channels_last: bool = False,
               axis_names: AxisNames = None) -> jax.Array:
    return registry.run("avg_pool2d", locals())


@registry.op(_spec("avg_pool", 3, _prepare_avg, "AvgPool"))
@_doc(_AVG_DOC, 3, lacks="")
def avg_pool3d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None, *, channels_last: bool = False,
               axis_names: AxisNames = None) -> jax.Array:
    return registry.run("avg_pool3d", locals())


@registry.op(_spec("adaptive_avg_pool", 1, _prepare_adaptive_avg, "AdaptiveAvgPool"))
@_doc(_ADAPTIVE_AVG_DOC, 1)
def adaptive_avg_pool1d(x: ArrayLike, output_size: OutputSize, *, channels_last: bool = False,
                        axis_names: AxisNames = None) -> jax.Array:
    return registry.run("adaptive_avg_pool1d", locals())


@registry.op(_spec("adaptive_avg_pool", 2, _prepare_adaptive_avg, "AdaptiveAvgPool",
                   aten=("_adaptive_avg_pool2d",)))
@_doc(_ADAPTIVE_AVG_DOC, 2)
def adaptive_avg_pool2d(x: ArrayLike, output_size: OutputSize, *, channels_last: bool = False,
                        axis_names: AxisNames = None) -> jax.Array:
    return registry.run("adaptive_avg_pool2d", locals())


@registry.op(_spec("adaptive_avg_pool", 3, _prepare_adaptive_avg, "AdaptiveAvgPool",
                   aten=("_adaptive_avg_pool3d",)))
@_doc(_ADAPTIVE_AVG_DOC, 3)
def adaptive_avg_pool3d(x: ArrayLike, output_size: OutputSize, *, channels_last: bool = False,
                        axis_names: AxisNames = None) -> jax.Array:
    return registry.run("adaptive_avg_pool3d", locals())


@overload
def max_pool1d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: Literal[False] = False,
               *, channels_last: bool = False, axis_names: AxisNames = None) -> jax.Array: ...


@overload
def max_pool1d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: Literal[True] = ..., *,
               channels_last: bool = False,
               axis_names: AxisNames = None) -> tuple[jax.Array, jax.Array]: ...


@overload
def max_pool1d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: bool = False, *,
               channels_last: bool = False,
               axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]: ...


@registry.op(_spec("max_pool", 1, _prepare_max, "MaxPool",
                   aten=("max_pool1d", "max_pool1d_with_indices")))
@_doc(_MAX_DOC, 1)
def max_pool1d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: bool = False, *,
               channels_last: bool = False,
               axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]:
    return registry.run("max_pool1d", locals())


@overload
def max_pool2d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: Literal[False] = False,
               *, channels_last: bool = False, axis_names: AxisNames = None) -> jax.Array: ...


@overload
def max_pool2d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: Literal[True] = ..., *,
               channels_last: bool = False,
               axis_names: AxisNames = None) -> tuple[jax.Array, jax.Array]: ...


@overload
def max_pool2d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: bool = False, *,
               channels_last: bool = False,
               axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]: ...


@registry.op(_spec("max_pool", 2, _prepare_max, "MaxPool",
                   aten=("max_pool2d", "max_pool2d_with_indices")))
@_doc(_MAX_DOC, 2)
def max_pool2d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: bool = False, *,
               channels_last: bool = False,
               axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]:
    return registry.run("max_pool2d", locals())


@overload
def max_pool3d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: Literal[False] = False,
               *, channels_last: bool = False, axis_names: AxisNames = None) -> jax.Array: ...


@overload
def max_pool3d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: Literal[True] = ..., *,
               channels_last: bool = False,
               axis_names: AxisNames = None) -> tuple[jax.Array, jax.Array]: ...


@overload
def max_pool3d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: bool = False, *,
               channels_last: bool = False,
               axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]: ...


@registry.op(_spec("max_pool", 3, _prepare_max, "MaxPool",
                   aten=("max_pool3d", "max_pool3d_with_indices")))
@_doc(_MAX_DOC, 3)
def max_pool3d(x: ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               dilation: Size = 1, ceil_mode: bool = False, return_indices: bool = False, *,
               channels_last: bool = False,
               axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]:
    return registry.run("max_pool3d", locals())


@overload
def adaptive_max_pool1d(x: ArrayLike, output_size: OutputSize,
                        return_indices: Literal[False] = False, *, channels_last: bool = False,
                        axis_names: AxisNames = None) -> jax.Array: ...


@overload
def adaptive_max_pool1d(x: ArrayLike, output_size: OutputSize, return_indices: Literal[True] = ...,
                        *, channels_last: bool = False,
                        axis_names: AxisNames = None) -> tuple[jax.Array, jax.Array]: ...


@overload
def adaptive_max_pool1d(x: ArrayLike, output_size: OutputSize, return_indices: bool = False, *,
                        channels_last: bool = False,
                        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]: ...


@registry.op(_spec("adaptive_max_pool", 1, _prepare_adaptive_max, "AdaptiveMaxPool"))
@_doc(_ADAPTIVE_MAX_DOC, 1)
def adaptive_max_pool1d(x: ArrayLike, output_size: OutputSize, return_indices: bool = False, *,
                        channels_last: bool = False,
                        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]:
    return registry.run("adaptive_max_pool1d", locals())


@overload
def adaptive_max_pool2d(x: ArrayLike, output_size: OutputSize,
                        return_indices: Literal[False] = False, *, channels_last: bool = False,
                        axis_names: AxisNames = None) -> jax.Array: ...


@overload
def adaptive_max_pool2d(x: ArrayLike, output_size: OutputSize, return_indices: Literal[True] = ...,
                        *, channels_last: bool = False,
                        axis_names: AxisNames = None) -> tuple[jax.Array, jax.Array]: ...


@overload
def adaptive_max_pool2d(x: ArrayLike, output_size: OutputSize, return_indices: bool = False, *,
                        channels_last: bool = False,
                        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]: ...


@registry.op(_spec("adaptive_max_pool", 2, _prepare_adaptive_max, "AdaptiveMaxPool"))
@_doc(_ADAPTIVE_MAX_DOC, 2)
def adaptive_max_pool2d(x: ArrayLike, output_size: OutputSize, return_indices: bool = False, *,
                        channels_last: bool = False,
                        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]:
    return registry.run("adaptive_max_pool2d", locals())


@overload
def adaptive_max_pool3d(x: ArrayLike, output_size: OutputSize,
                        return_indices: Literal[False] = False, *, channels_last: bool = False,
                        axis_names: AxisNames = None) -> jax.Array: ...


@overload
def adaptive_max_pool3d(x: ArrayLike, output_size: OutputSize, return_indices: Literal[True] = ...,
                        *, channels_last: bool = False,
                        axis_names: AxisNames = None) -> tuple[jax.Array, jax.Array]: ...


@overload
def adaptive_max_pool3d(x: ArrayLike, output_size: OutputSize, return_indices: bool = False, *,
                        channels_last: bool = False,
                        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]: ...


@registry.op(_spec("adaptive_max_pool", 3, _prepare_adaptive_max, "AdaptiveMaxPool"))
@_doc(_ADAPTIVE_MAX_DOC, 3)
def adaptive_max_pool3d(x: ArrayLike, output_size: OutputSize, return_indices: bool = False, *,
                        channels_last: bool = False,
                        axis_names: AxisNames = None) -> jax.Array | tuple[jax.Array, jax.Array]:
    return registry.run("adaptive_max_pool3d", locals())


# torch lowers lp_pool to avg_pool of x**p: no ATen op of its own, and no OpInfo entry.


@registry.op(_spec("lp_pool", 1, _prepare_lp, "LPPool", aten=(), opinfo=False))
@_doc(_LP_DOC, 1)
def lp_pool1d(x: ArrayLike, norm_type: float, kernel_size: Size, stride: Size | None = None,
              ceil_mode: bool = False, *, channels_last: bool = False,
              axis_names: AxisNames = None) -> jax.Array:
    return registry.run("lp_pool1d", locals())


@registry.op(_spec("lp_pool", 2, _prepare_lp, "LPPool", aten=(), opinfo=False))
@_doc(_LP_DOC, 2)
def lp_pool2d(x: ArrayLike, norm_type: float, kernel_size: Size, stride: Size | None = None,
              ceil_mode: bool = False, *, channels_last: bool = False,
              axis_names: AxisNames = None) -> jax.Array:
    return registry.run("lp_pool2d", locals())


@registry.op(_spec("lp_pool", 3, _prepare_lp, "LPPool", aten=(), opinfo=False))
@_doc(_LP_DOC, 3)
def lp_pool3d(x: ArrayLike, norm_type: float, kernel_size: Size, stride: Size | None = None,
              ceil_mode: bool = False, *, channels_last: bool = False,
              axis_names: AxisNames = None) -> jax.Array:
    return registry.run("lp_pool3d", locals())


@registry.op(Spec("global_avg_pool", "global_avg_pool", _prepare_global("mean"), ndim=2,
                  halo="pool", modules=("GlobalAvgPool",)))
def global_avg_pool(x: ArrayLike, *, channels_last: bool = False,
                    axis_names: AxisNames = None) -> jax.Array:
    """Mean over the spatial axes of a rank-4 input: ``x.mean((2, 3))`` in torch.

    Args:
      x: ``[B, C, H, W]``; with ``channels_last``, ``[B, H, W, C]``.
      channels_last: channels after the spatial axes.
      axis_names: as :func:`avg_pool2d`'s.

    Returns:
      ``[B, C]`` in ``x``'s dtype. float16/bfloat16 accumulate in float32 and round once.

    Example:
      >>> jaxpool.global_avg_pool(jnp.ones((8, 512, 7, 7))).shape
      (8, 512)
    """
    return registry.run("global_avg_pool", locals())


@registry.op(Spec("global_max_pool", "global_max_pool", _prepare_global("max"), ndim=2,
                  halo="pool", modules=("GlobalMaxPool",)))
def global_max_pool(x: ArrayLike, *, channels_last: bool = False,
                    axis_names: AxisNames = None) -> jax.Array:
    """Maximum over the spatial axes of a rank-4 input: ``torch.amax(x, (2, 3))``'s values,
    with torch's pick (``adaptive_max_pool2d(x, 1)``) for derivatives.

    Args:
      x: ``[B, C, H, W]``; with ``channels_last``, ``[B, H, W, C]``.
      channels_last: channels after the spatial axes.
      axis_names: as :func:`max_pool2d`'s.

    Returns:
      ``[B, C]`` in ``x``'s dtype.

    Example:
      >>> jaxpool.global_max_pool(jnp.ones((8, 512, 7, 7))).shape
      (8, 512)
    """
    return registry.run("global_max_pool", locals())


avg_pool = avg_pool2d
adaptive_avg_pool = adaptive_avg_pool2d
max_pool = max_pool2d
adaptive_max_pool = adaptive_max_pool2d
lp_pool = lp_pool2d
