"""``torch.nn.functional.fractional_max_pool2d`` and ``fractional_max_pool3d``: max pooling
over windows that torch's per-(batch, channel) random samples place, torch-exact, with
derivatives of every order whose only gathers read and which hold no scatter
(:mod:`jaxpool.core.gather`).

The samples are data: given as ``samples`` (torch's ``_random_samples``) or drawn from a
``jax.random`` key. They are an ordinary argument, not one of the op's arrays (it may be
None, and it is never differentiated: the windows are integers). :mod:`jaxpool.fractional.plan`
checks and plans a call in plain Python, :mod:`jaxpool.fractional.kernel` computes it.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import jax
import numpy as np
from jax.typing import ArrayLike

from jaxpool import registry
from jaxpool.core import checks, dtypes
from jaxpool.core.types import AxisNames, Size
from jaxpool.fractional import kernel
from jaxpool.fractional.plan import check_sample_values, plan_fractional
from jaxpool.registry import Prepared, Spec

Ratio = Union[float, Sequence[float]]
"""A fraction for every spatial axis, or one per axis."""


def _check_key(name: str, key) -> None:
    dtype = getattr(key, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return
    if dtype is not None and np.dtype(dtype) == np.uint32 and tuple(key.shape) == (2,):
        return  # a raw key, jax.random.PRNGKey's
    raise TypeError(f"{name}: key must be a jax.random key (jax.random.key(seed) or "
                    f"jax.random.PRNGKey(seed)), got {key!r}")


def _prepare(spec: Spec, x: Any, *, kernel_size: Size, output_size: Size | None,
             output_ratio: Ratio | None, return_indices: bool, samples: Any, key: Any,
             channels_last: bool, axis_names: AxisNames) -> Prepared:
    if samples is not None:
        samples = registry.static(spec.name, samples)
    if key is not None:
        _check_key(spec.name, key)
    plan = plan_fractional(
        spec.name, x.shape, x.dtype, spec.rank, kernel_size, output_size, output_ratio,
        None if samples is None else samples.shape,
        None if samples is None else dtypes.name(samples), key is not None, channels_last)
    with_indices = checks.check_bool(f"{spec.name}: return_indices", return_indices)
    if samples is not None:
        try:
            concrete = np.asarray(samples)
        except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
            concrete = None  # traced: the kernel keeps its windows inside the input
        if concrete is not None:
            check_sample_values(plan, concrete)

    def compute(x, names):
        drawn = (checks.as_jax(samples) if samples is not None
                 else kernel.draw_samples(plan, key))
        values, indices = kernel.fractional_max_pool(plan, x, drawn)
        return (values, indices) if with_indices else values

    # a sharded input is replicated by XLA's partitioner: the windows go anywhere
    return Prepared(compute, (), single=not with_indices, partitions=False)


_DOC = """Max pooling over windows placed by random samples, as
    ``torch.nn.functional.fractional_max_pool{d}d`` (Graham's fractional max pooling).

    Each (batch, channel) plane has one sample ``u`` in ``[0, 1)`` per axis; along an axis
    of extent ``n`` pooled to ``out`` windows of ``k``, window ``i`` starts at
    ``int((i + u) * alpha) - int(u * alpha)`` with ``alpha = (n - k) / (out - 1)`` (the last
    at ``n - k``), computed in the input's dtype exactly as torch's CPU kernel does, so the
    windows, values and indices are torch's bit for bit for the same samples. In each
    window the maximum wins (the first of equal maxima, the last NaN where there is one).
    The derivative routes each window's cotangent to its maximum through a sorted,
    segmented sum (no scatter at any order, in either mode), so it repeats bit for bit on
    GPU and TPU; the samples get none.

    Args:
      input: {shape}; with ``channels_last``, {shape_last}. Floating point.
      kernel_size: the window, an int or {d} ints.
      output_size: the output's spatial extents, an int or {d} ints (``out + k - 1`` must
        be {fit} the input's extent, torch's check).
      output_ratio: instead of ``output_size``: each extent ``int(n * ratio)``, a number or
        {d} numbers. Exactly one of the two.
      return_indices: also return each maximum's flat index in its plane ({flat}), as
        torch's (int64 under ``jax_enable_x64``, else int32): for ``max_unpool{d}d``.
      samples: ``[N, C, {d}]`` in ``[0, 1)`` in the input's dtype (N = 1 for unbatched
        input), torch's ``_random_samples``: the last axis holds {order}. Concrete samples
        that start a window outside the input (where torch's kernel asserts; never samples
        in ``[0, 1)``, but for half precision's rounding) are an error; traced ones have
        such windows moved inside.
      key: instead of ``samples``: a ``jax.random`` key to draw them from (uniform in
        ``[0, 1)``). Exactly one of the two.
      channels_last: channels after the spatial axes, in ``input`` and the result.

    Returns:
      {out_shape} in ``input``'s dtype (and the indices, same shape, with
      ``return_indices``).

    Example:
      >>> x = jnp.arange(25.0).reshape(1, 1, 5, 5)
      >>> y = jaxpool.fractional_max_pool{d}d(x, 2, output_size=3,
      ...                                   samples=jnp.full((1, 1, {d}), 0.5))
      >>> y.shape
      {example_shape}
    """


def _doc(d: int) -> str:
    if d == 2:
        return _DOC.format(
            d=2, shape="``[N, C, H, W]`` or ``[C, H, W]``",
            shape_last="``[N, H, W, C]`` or ``[H, W, C]``", fit="at most",
            flat="``h * W + w``", order="``(u_W, u_H)``, width first, as torch's",
            out_shape="``[N, C, Ho, Wo]`` (unbatched ``[C, Ho, Wo]``; channels last "
                      "``[N, Ho, Wo, C]``)",
            example_shape="(1, 1, 3, 3)")
    return _DOC.format(
        d=3, shape="``[N, C, T, H, W]`` or ``[C, T, H, W]``",
        shape_last="``[N, T, H, W, C]`` or ``[T, H, W, C]``",
        fit="less than (strictly, as torch's 3-D check)",
        flat="``(t * H + h) * W + w``", order="``(u_T, u_H, u_W)``",
        out_shape="``[N, C, To, Ho, Wo]`` (unbatched ``[C, To, Ho, Wo]``; channels last "
                  "``[N, To, Ho, Wo, C]``)",
        example_shape="(1, 1, 3, 3, 3)").replace("jnp.arange(25.0).reshape(1, 1, 5, 5)",
                                                 "jnp.arange(125.0).reshape(1, 1, 5, 5, 5)")


@registry.op(Spec("fractional_max_pool2d", "fractional_max_pool", _prepare, ndim=2,
                  arrays=("input",), differentiable=("input",),
                  torch="torch.nn.functional.fractional_max_pool2d",
                  aten=("fractional_max_pool2d",),
                  opinfo=("nn.functional.fractional_max_pool2d",),
                  modules=("FractionalMaxPool2d",)))
def fractional_max_pool2d(input: ArrayLike, kernel_size: Size, output_size: Size | None = None,
                          output_ratio: Ratio | None = None, return_indices: bool = False,
                          samples: ArrayLike | None = None, *, key: ArrayLike | None = None,
                          channels_last: bool = False
                          ) -> jax.Array | tuple[jax.Array, jax.Array]:
    return registry.run("fractional_max_pool2d", locals())


@registry.op(Spec("fractional_max_pool3d", "fractional_max_pool", _prepare, ndim=3,
                  arrays=("input",), differentiable=("input",),
                  torch="torch.nn.functional.fractional_max_pool3d",
                  aten=("fractional_max_pool3d",),
                  opinfo=("nn.functional.fractional_max_pool3d",),
                  modules=("FractionalMaxPool3d",)))
def fractional_max_pool3d(input: ArrayLike, kernel_size: Size, output_size: Size | None = None,
                          output_ratio: Ratio | None = None, return_indices: bool = False,
                          samples: ArrayLike | None = None, *, key: ArrayLike | None = None,
                          channels_last: bool = False
                          ) -> jax.Array | tuple[jax.Array, jax.Array]:
    return registry.run("fractional_max_pool3d", locals())


fractional_max_pool2d.__doc__ = _doc(2)
fractional_max_pool3d.__doc__ = _doc(3)
