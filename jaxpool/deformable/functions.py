"""Multi-scale deformable attention (Deformable DETR's ``MSDeformAttn`` core, RT-DETR's):
every head of every query reads a few points of each level of a feature pyramid and sums
them, weighted; and deformable convolution (torchvision's ``deform_conv2d``, DCN v1 and
v2), whose window taps read where the offsets move them. Values are the pure-PyTorch reference's (Hugging Face's
``multi_scale_deformable_attention``, mmcv's ``multi_scale_deformable_attn_pytorch``,
RT-DETRv2's ``deformable_attention_core_func_v2``); derivatives of every order, in the
value, the locations and the weights, in both modes, read with gathers and add back with a
sorted, segmented sum (:mod:`jaxpool.core.gather`): no scatter.

:mod:`jaxpool.deformable.plan` checks and plans a call in plain Python,
:mod:`jaxpool.deformable.kernel` computes it.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import jax
from jax.typing import ArrayLike

from jaxpool import registry
from jaxpool.core import dtypes
from jaxpool.core.types import AxisNames
from jaxpool.deformable import kernel
from jaxpool.deformable.plan import plan_deform_conv2d, plan_multi_scale_deformable_attention
from jaxpool.registry import Prepared, Spec

SpatialShapes = Union[Sequence[Sequence[int]], ArrayLike]
"""The levels' ``(H, W)``, static: a sequence of pairs, or a concrete ``[L, 2]`` integer
array (Hugging Face's ``spatial_shapes_list`` or ``spatial_shapes``)."""


def _prepare(spec: Spec, value: Any, sampling_locations: Any, attention_weights: Any, *,
             spatial_shapes: SpatialShapes, mode: str,
             points_per_level: Sequence[int] | None, axis_names: AxisNames) -> Prepared:
    plan = plan_multi_scale_deformable_attention(
        value.shape, dtypes.name(value), spatial_shapes, sampling_locations.shape,
        dtypes.name(sampling_locations), attention_weights.shape,
        dtypes.name(attention_weights), mode, points_per_level)
    # a sharded value is replicated by XLA's partitioner: the reads go anywhere
    return Prepared(lambda v, loc, w, names: kernel.multi_scale_deformable_attention(
        plan, v, loc, w), (), partitions=False)


@registry.op(Spec("multi_scale_deformable_attention", "multi_scale_deformable_attention",
                  _prepare, arrays=("value", "sampling_locations", "attention_weights"),
                  differentiable=("value", "sampling_locations", "attention_weights"),
                  halo="replicate",
                  # no torch.nn.functional op: the twin is the pure-PyTorch reference the
                  # models fall back on (Hugging Face's, RT-DETRv2's), written out in
                  # parity.deformable
                  torch="parity.deformable.torch_twin",
                  # MultiScaleDeformableAttention's CUDA kernels are custom extensions
                  # (Deformable DETR's, mmcv's), not ATen operators
                  aten=()))
def multi_scale_deformable_attention(value: ArrayLike, spatial_shapes: SpatialShapes,
                                     sampling_locations: ArrayLike,
                                     attention_weights: ArrayLike, *, mode: str = "bilinear",
                                     points_per_level: Sequence[int] | None = None
                                     ) -> jax.Array:
    """Multi-scale deformable attention's core: each head of each query sums the value read
    at its sampling points, weighted, over every level of the pyramid.

    ``value`` holds every level's ``H_l x W_l`` positions row-major, the levels end to end.
    A location ``(x, y)`` in ``[0, 1]`` (x along W) reads, in ``mode``:

    - ``"bilinear"`` (Deformable DETR, mmcv, Hugging Face; RT-DETRv2's ``default``): the 4
      pixels around it, zero outside the level, as
      ``F.grid_sample(v_l, 2 * loc - 1, "bilinear", "zeros", align_corners=False)``: the
      pixel coordinate is ``((2 * loc - 1) + 1) * (size / 2) - 0.5``, each operation
      rounded (see the sampling docs for the CUDA kernel's and torch's CPU kernel's
      rounding at a pixel centre or an edge).
    - ``"nearest"``: RT-DETRv2's ``discrete`` method, pixel ``int(loc * size + 0.5)``
      clamped into the level along each axis (RT-DETRv2 clamps x by H too, which only
      differs on levels that are not square); no derivative in the locations.

    The result is the reference's to rounding (float64: 1e-12), NaN and inf where it puts
    them; derivatives of every order in all three arrays, in both modes, add back without
    a scatter on the GPU and TPU tables.

    Args:
      value: ``[B, S, heads, head_dim]``, ``S = sum(H_l * W_l)``. Floating point.
      spatial_shapes: the levels' ``(H_l, W_l)``, static (a sequence of pairs, or a
        concrete ``[L, 2]`` integer array).
      sampling_locations: ``[B, Q, heads, L, P, 2]``, ``(x, y)`` in ``[0, 1]``; with
        ``points_per_level``, ``[B, Q, heads, sum(points_per_level), 2]``, level 0's
        points first. ``value``'s dtype.
      attention_weights: ``[B, Q, heads, L, P]`` (with ``points_per_level``,
        ``[B, Q, heads, sum(points_per_level)]``), ``value``'s dtype.
      mode: ``"bilinear"`` or ``"nearest"``.
      points_per_level: ``P_l`` for each level (RT-DETRv2's ``num_points_list``), or None:
        ``P`` points on every level, from the locations' shape.

    Returns:
      ``[B, Q, heads * head_dim]`` in ``value``'s dtype (head-major, as the reference);
      float16/bfloat16 compute in float32 and round once.

    Example:
      >>> value = jnp.arange(2 * 3 * 1 * 2.0).reshape(1, 6, 1, 2)   # one 2x3 level
      >>> loc = jnp.full((1, 1, 1, 1, 1, 2), 0.5)                    # its centre
      >>> weights = jnp.ones((1, 1, 1, 1, 1))
      >>> jaxpool.multi_scale_deformable_attention(value, [(2, 3)], loc, weights)
      Array([[[5., 6.]]], dtype=float32)
    """
    return registry.run("multi_scale_deformable_attention", locals())


IntPair = Union[int, Sequence[int]]


def _prepare_conv(spec: Spec, input: Any, offset: Any, weight: Any, bias: Any, mask: Any, *,
                  stride: IntPair, padding: IntPair, dilation: IntPair,
                  axis_names: AxisNames) -> Prepared:
    def shape(a):
        return None if a is None else a.shape

    def dtype(a):
        return None if a is None else dtypes.name(a)

    plan = plan_deform_conv2d(input.shape, dtypes.name(input), offset.shape,
                              dtypes.name(offset), weight.shape, dtypes.name(weight),
                              shape(bias), dtype(bias), shape(mask), dtype(mask), stride,
                              padding, dilation)
    # a sharded input is replicated by XLA's partitioner: the reads go anywhere
    return Prepared(lambda x, o, w, b, m, names: kernel.deform_conv2d(plan, x, o, w, b, m),
                    (), partitions=False)


@registry.op(Spec("deform_conv2d", "deform_conv2d", _prepare_conv,
                  arrays=("input", "offset", "weight", "bias", "mask"),
                  differentiable=("input", "offset", "weight", "bias", "mask"),
                  optional=("bias", "mask"), halo="replicate",
                  # torchvision.ops.deform_conv2d: torchvision is an optional package, which
                  # jaxpool does not import; the twin is its CPU kernel's arithmetic written
                  # in torch, in parity.deform_conv
                  torch="parity.deform_conv.torch_twin",
                  # torchvision::deform_conv2d is torchvision's operator, not ATen's
                  aten=()))
def deform_conv2d(input: ArrayLike, offset: ArrayLike, weight: ArrayLike,
                  bias: ArrayLike | None = None, stride: IntPair = 1, padding: IntPair = 0,
                  dilation: IntPair = 1, mask: ArrayLike | None = None) -> jax.Array:
    """Deformable convolution, as ``torchvision.ops.deform_conv2d``: DCN v1 (Deformable
    ConvNets), and v2 with ``mask`` (modulated).

    Each tap ``(i, j)`` of the ``kh x kw`` window at output position ``(oy, ox)`` reads the
    input at ``y = (oy * stride - padding) + i * dilation + dy``, ``x = ... + dx``, the
    offsets ``(dy, dx)`` its own (per offset group, tap and output position), bilinearly
    as torchvision's CPU kernel: 0 where ``y <= -1``, ``y >= H``, ``x <= -1`` or
    ``x >= W``; else the 4 pixels around, a pixel off the map counting as 0, summed
    ``w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4``; with ``mask``, times the tap's mask. The
    samples (the columns of torchvision's im2col) are contracted with the weight in one
    matmul, the weight groups its batch, and ``bias`` added.

    Derivatives of every order, reverse and forward mode, in all five arrays; the reads
    are gathers and their transposes sorted, segmented sums: no scatter on the GPU and TPU
    tables. torchvision's operator has a first derivative only, and its CUDA backward adds
    with atomics (no determinism alert). Where the bilinear rule has a kink (a coordinate
    exactly on -1 or the map's size, or on a pixel), jaxpool's derivative is that of the
    branch the kernel takes; torchvision's hand-written backward takes the other side at
    ``y = -1`` (and ``x = -1``) for the offsets, where the kernel's value is 0.

    Args:
      input: ``[B, C, H, W]``, floating point.
      offset: ``[B, 2 * offset_groups * kh * kw, out_h, out_w]``, ``(dy, dx)`` for each
        offset group's taps in turn; ``offset_groups`` must divide ``C``.
      weight: ``[out_channels, C / groups, kh, kw]``; ``groups = C // weight.shape[1]``
        must divide ``out_channels``.
      bias: ``[out_channels]``, or None.
      stride, padding, dilation: an int, or a pair (height, width).
      mask: ``[B, offset_groups * kh * kw, out_h, out_w]``, or None (DCN v1).
      Every array in ``input``'s dtype.

    Returns:
      ``[B, out_channels, out_h, out_w]``, ``out = (H + 2 * padding - (dilation * (kh - 1)
      + 1)) // stride + 1``, in ``input``'s dtype; float16/bfloat16 compute in float32 and
      round once.

    Example:
      >>> x = jnp.arange(16.0).reshape(1, 1, 4, 4)
      >>> weight = jnp.ones((1, 1, 1, 1))
      >>> offset = jnp.full((1, 2, 4, 4), 0.5)   # every tap half a pixel down and right
      >>> jaxpool.deform_conv2d(x, offset, weight)[0, 0, 0]
      Array([2.5, 3.5, 4.5, 2.5], dtype=float32)
    """
    return registry.run("deform_conv2d", locals())
