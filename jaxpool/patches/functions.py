"""``torch.nn.functional.unfold`` and ``fold`` (im2col and col2im) over two spatial axes.

``unfold``: ``[N, C, H, W] -> [N, C*kh*kw, L]``, column ``l`` holding block ``l`` (row-major
over the ``bh x bw`` blocks), its features channel-major, then the kernel taps row-major
(as ``lax.conv_general_dilated_patches`` gives them on ``NCHW`` input). ``fold`` is its
adjoint: each column's entries are added back at their taps, overlaps summed.

The windows are fixed by the shapes, so both are written with pads, reshapes, transposes
and slices only: each padded axis is cut into rows of ``stride`` (one reshape), and the taps
that read the same rows make one slice (``plan.axis_phases``). Windows that do not overlap
(a ViT patchify) are then one reshape and one transpose; overlapping ones one pass per pair
of tap groups (``plan.choose_strategy``). Each op is the other's transpose, so every
derivative, of any order and in either mode, is one of the two, with no scatter or gather.

Only the two-dimensional form exists, as in torch: ``unfold`` takes rank 4 (or unbatched
rank 3), ``fold`` rank 3 (or unbatched rank 2).
"""

from __future__ import annotations

from typing import Any

import jax
from jax.typing import ArrayLike

from jaxpool import registry
from jaxpool.patches import kernel
from jaxpool.core.types import AxisNames, Size
from jaxpool.patches.plan import plan_fold, plan_unfold
from jaxpool.registry import Prepared, Spec


def _prepare_unfold(spec: Spec, x: Any, *, kernel_size: Size, dilation: Size, padding: Size,
                    stride: Size, axis_names: AxisNames) -> Prepared:
    plan = plan_unfold(x.shape, x.dtype, kernel_size, dilation, padding, stride)
    return Prepared(lambda x, names: kernel.unfold(plan, x), (), partitions=False)


def _prepare_fold(spec: Spec, x: Any, *, output_size: Size, kernel_size: Size, dilation: Size,
                  padding: Size, stride: Size, axis_names: AxisNames) -> Prepared:
    plan = plan_fold(x.shape, x.dtype, output_size, kernel_size, dilation, padding, stride)
    return Prepared(lambda x, names: kernel.fold(plan, x), (), partitions=False)


@registry.op(Spec("unfold", "unfold", _prepare_unfold, arrays=("input",),
                  differentiable=("input",), torch="torch.nn.functional.unfold",
                  aten=("im2col",), opinfo=("nn.functional.unfold",), modules=("Unfold",)))
def unfold(input: ArrayLike, kernel_size: Size, dilation: Size = 1, padding: Size = 0,
           stride: Size = 1) -> jax.Array:
    """Sliding blocks of an image as columns, as ``torch.nn.functional.unfold`` (im2col).

    ``[N, C, H, W] -> [N, C*kh*kw, L]`` (unbatched ``[C, H, W] -> [C*kh*kw, L]``) with
    ``L = bh*bw`` blocks, ``b = (n + 2*p - d*(k - 1) - 1) // s + 1`` per axis. Column
    ``l = i*bw + j`` holds the block at ``(i*sh - ph, j*sw - pw)``, feature
    ``c*kh*kw + u*kw + v`` its element ``(c, u*dh, v*dw)``; zero padding reads ``+0``.

    Args:
      input: ``[N, C, H, W]`` or ``[C, H, W]`` floating point; ``N`` may be 0.
      kernel_size, dilation, stride: positive ints, or pairs (height, width).
      padding: zeros added on both sides of each spatial axis: a non-negative int or pair.

    Returns:
      ``[N, C*kh*kw, L]`` (or ``[C*kh*kw, L]``) in ``input``'s dtype, every value copied.

    Example:
      >>> jaxpool.unfold(jnp.ones((8, 3, 32, 32)), 3, padding=1, stride=2).shape
      (8, 27, 256)
    """
    return registry.run("unfold", locals())


@registry.op(Spec("fold", "unfold", _prepare_fold, arrays=("input",),
                  differentiable=("input",), torch="torch.nn.functional.fold",
                  aten=("col2im",), modules=("Fold",)))
def fold(input: ArrayLike, output_size: Size, kernel_size: Size, dilation: Size = 1,
         padding: Size = 0, stride: Size = 1) -> jax.Array:
    """Columns summed back into an image, as ``torch.nn.functional.fold`` (col2im): the
    adjoint of :func:`unfold`.

    ``[N, C*kh*kw, L] -> [N, C, H, W]`` (unbatched ``[C*kh*kw, L] -> [C, H, W]``) with
    ``(H, W) = output_size``; ``L`` must be the number of blocks :func:`unfold` gives for
    that size. Each pixel adds the entries that read it in torch's order (kernel taps
    row-major, from zero, in ``input``'s dtype: half precision rounds after every
    addition, as torch on the CPU); entries that land in the padding are dropped.

    Args:
      input: ``[N, C*kh*kw, L]`` or ``[C*kh*kw, L]`` floating point; ``N`` may be 0.
      output_size: the image's ``(H, W)``: a positive int or pair.
      kernel_size, dilation, stride: positive ints, or pairs (height, width).
      padding: the non-negative int or pair :func:`unfold` padded with.

    Returns:
      ``[N, C, H, W]`` (or ``[C, H, W]``) in ``input``'s dtype.

    Example:
      >>> columns = jaxpool.unfold(jnp.ones((1, 1, 4, 4)), 2)        # 9 overlapping blocks
      >>> jaxpool.fold(columns, (4, 4), 2)[0, 0]                   # how many read each pixel
      Array([[1., 2., 2., 1.],
             [2., 4., 4., 2.],
             [2., 4., 4., 2.],
             [1., 2., 2., 1.]], dtype=float32)
    """
    return registry.run("fold", locals())
