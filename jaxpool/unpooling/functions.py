"""Max unpooling, as ``torch.nn.functional.max_unpool1d/2d/3d``: the transpose of the max
pool's pick (:mod:`jaxpool.unpooling.plan` plans it, :mod:`jaxpool.unpooling.kernel` computes it)."""

from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np
from jax.typing import ArrayLike

from jaxpool import registry
from jaxpool.core import docs
from jaxpool.core.types import AxisNames, Size
from jaxpool.halo import kernel as halo
from jaxpool.unpooling import kernel
from jaxpool.unpooling.plan import UnpoolPlan, plan_max_unpool
from jaxpool.registry import Prepared, Spec


def _prepare(spec: Spec, values: Any, indices: Any, *, kernel_size: Size, stride: Size | None,
             padding: Size, output_size: Sequence[int] | None, channels_last: bool,
             axis_names: AxisNames) -> Prepared:
    shape = values.shape if axis_names is None else halo.pool_shape(
        spec.name, values.shape, spec.rank, channels_last, axis_names)
    plan = plan_max_unpool(spec.name, shape, values.dtype, spec.rank, kernel_size, stride,
                           padding, output_size, channels_last,
                           shape if indices.shape == values.shape else indices.shape,
                           indices.dtype)
    traced = isinstance(indices, jax.core.Tracer)

    def compute(x, indices, names):
        if names is not None:  # per-device values and indices (unchecked, as under jit)
            return halo.unpool(kernel.max_unpool, plan, x, indices, names)
        if traced:
            # Traced indices (jit, vmap) cannot be checked: one outside its window is dropped.
            return kernel.max_unpool(plan, x, indices)
        out, count, first = kernel.max_unpool_checked(plan, x, indices)
        if first is not None:  # found only when the count is concrete and non-zero
            _reject_unplaced(spec.name, plan, indices, int(count), int(first))
        return out
    # concrete indices are checked eagerly, by the op's own program
    return Prepared(compute, plan.spatial_axes, partitions=traced)


def _reject_unplaced(op: str, plan: UnpoolPlan, indices: jax.Array, count: int,
                     first: int) -> None:
    """Concrete indices that name no element of their own window: rejected, not dropped."""
    where = tuple(int(w) for w in np.unravel_index(first, indices.shape))
    value = int(np.asarray(indices).reshape(-1)[first])
    extents = "x".join(str(p.in_size) for p in plan.axes)
    raise ValueError(
        f"{op}: {count} of {indices.size} indices name no element of their own window "
        f"(the first, at {where}, is {value}; the unpooled planes are {extents}). "
        f"max_unpool places each value inside the window of the max pool that made its "
        f"index (same kernel_size, stride and padding): pass the indices of that max_pool "
        f"call, or the same pooling arguments")


_DOC = """{d} max unpooling, as ``torch.nn.functional.max_unpool{d}``{user}: the partial
    inverse of :func:`max_pool{d}`.

    The output is zero except where an index points: there it holds that window's value.
    Each index must name an element of its own window (what ``max_pool{d}(...,
    return_indices=True)`` with the same arguments gives, jaxpool's or torch's); torch
    accepts any element of the {plane}. Called eagerly, indices outside their window raise
    a ValueError; under ``jit`` or ``vmap`` (traced indices) they cannot be checked and are
    dropped: their values are not written. Where overlapping windows (``stride <
    kernel_size``) name the same element, the last window (in row-major order) wins, as in
    torch's CPU kernel. Derivatives are the transpose of these values (a dropped or
    overwritten value gets no gradient; torch's backward gives every repeat the cotangent),
    hold no scatter or gather, and every value is copied bit for bit.

    Args:
      x: {x};
        with ``channels_last``, {x_last}.
      indices: integer array of ``x``'s shape: each value's flat index {index} in its
        output {plane}.
      kernel_size, stride, padding: the max pool's (an int or one per spatial axis);
        ``stride`` None or 0 means ``kernel_size``.
      output_size: the output's spatial extents {extents}, or a whole shape; each
        strictly within one stride of the default.
      channels_last: channels after the spatial axes.
      {axis_names}

    Returns:
      ``x``'s layout and dtype; each spatial extent becomes
      ``(n - 1)*stride - 2*padding + kernel_size``, or ``output_size``.

    Example:
{example}
    """

_EXAMPLES = {
    1: """\
      >>> x = jnp.arange(8.0).reshape(1, 1, 8)
      >>> values, indices = jaxpool.max_pool1d(x, 2, return_indices=True)
      >>> jaxpool.max_unpool1d(values, indices, 2)
      Array([[[0., 1., 0., 3., 0., 5., 0., 7.]]], dtype=float32)""",
    2: """\
      >>> x = jnp.arange(16.0).reshape(1, 1, 4, 4)
      >>> values, indices = jaxpool.max_pool2d(x, 2, return_indices=True)
      >>> jaxpool.max_unpool2d(values, indices, 2)[0, 0]
      Array([[ 0.,  0.,  0.,  0.],
             [ 0.,  5.,  0.,  7.],
             [ 0.,  0.,  0.,  0.],
             [ 0., 13.,  0., 15.]], dtype=float32)""",
    3: """\
      >>> x = jnp.ones((2, 8, 4, 4, 4))
      >>> values, indices = jaxpool.max_pool3d(x, 2, return_indices=True)
      >>> jaxpool.max_unpool3d(values, indices, 2).shape
      (2, 8, 4, 4, 4)""",
}


def _spec(ndim: int, aten: tuple[str, ...]) -> Spec:
    name = f"max_unpool{ndim}d"
    return Spec(name, "max_unpool", _prepare, ndim=ndim, arrays=("x", "indices"),
                differentiable=("x",), halo="unpool", torch=f"torch.nn.functional.{name}",
                aten=aten, opinfo=(f"nn.functional.{name}",), modules=(f"MaxUnpool{ndim}d",))


@registry.op(_spec(1, aten=()))
@docs.filled(_DOC, 1, example=_EXAMPLES[1], user="", extents="``(L,)``")
def max_unpool1d(x: ArrayLike, indices: ArrayLike, kernel_size: Size, stride: Size | None = None,
                 padding: Size = 0, output_size: Sequence[int] | None = None, *,
                 channels_last: bool = False, axis_names: AxisNames = None) -> jax.Array:
    return registry.run("max_unpool1d", locals())


@registry.op(_spec(2, aten=("max_unpool2d",)))
@docs.filled(_DOC, 2, example=_EXAMPLES[2], user=" (SegNet's decoder)", extents="``(H, W)``")
def max_unpool2d(x: ArrayLike, indices: ArrayLike, kernel_size: Size, stride: Size | None = None,
                 padding: Size = 0, output_size: Sequence[int] | None = None, *,
                 channels_last: bool = False, axis_names: AxisNames = None) -> jax.Array:
    return registry.run("max_unpool2d", locals())


@registry.op(_spec(3, aten=("max_unpool3d",)))
@docs.filled(_DOC, 3, example=_EXAMPLES[3], user="", extents="``(D, H, W)``")
def max_unpool3d(x: ArrayLike, indices: ArrayLike, kernel_size: Size, stride: Size | None = None,
                 padding: Size = 0, output_size: Sequence[int] | None = None, *,
                 channels_last: bool = False, axis_names: AxisNames = None) -> jax.Array:
    return registry.run("max_unpool3d", locals())
