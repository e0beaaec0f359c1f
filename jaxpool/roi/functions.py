"""torchvision's ``roi_align`` (Mask R-CNN's pooling of boxes): reading at positions the
boxes give, with derivatives of every order in the input and the boxes whose only gathers
read and which hold no scatter (:mod:`jaxpool.core.gather`).

:mod:`jaxpool.roi.plan` checks and plans a call in plain Python, :mod:`jaxpool.roi.kernel`
computes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxpool import registry
from jaxpool.core import checks, dtypes
from jaxpool.core.types import AxisNames
from jaxpool.roi import kernel
from jaxpool.registry import Prepared, Spec
from jaxpool.roi.plan import (check_box_list, plan_multi_scale_roi_align, plan_roi_align,
                              plan_roi_pool)

Boxes = Union[ArrayLike, Sequence[ArrayLike]]


def _prepare(spec: Spec, x: Any, boxes: Any, *, output_size: int | tuple[int, int],
             spatial_scale: float, sampling_ratio: int, aligned: bool,
             max_sampling_ratio: int | None, channels_last: bool,
             axis_names: AxisNames) -> Prepared:
    # Concrete boxes are read here: their batch indices checked, an adaptive grid sized
    # to the largest box's count. Traced ones (jit, vmap, a derivative in the boxes) are
    # not: the kernel flags what it cannot check with NaN.
    plan = plan_roi_align(x.shape, dtypes.name(x), boxes.shape, dtypes.name(boxes),
                          output_size, spatial_scale, sampling_ratio, aligned,
                          max_sampling_ratio, channels_last, _concrete(boxes))
    # a sharded input is replicated by XLA's partitioner: the reads go anywhere
    return Prepared(lambda x, rois, names: kernel.roi_align(plan, x, rois), (),
                    partitions=False)


def _concrete(boxes: Any) -> np.ndarray | None:
    """The boxes' values where they are concrete (an eager call), else None."""
    return None if isinstance(boxes, jax.core.Tracer) else np.asarray(boxes)


def _roi_format(boxes: Boxes, op: str = "roi_align"):
    """A list of per-image ``[L_i, 4]`` boxes as ``[K, 5]`` (image index first), as
    torchvision's ``convert_boxes_to_roi_format``; a ``[K, 5]`` array unchanged."""
    if not isinstance(boxes, (list, tuple)):
        return boxes
    for b in boxes:
        checks.check_array(op, b)
    arrays: list[Any] = [b if hasattr(b, "shape") and hasattr(b, "dtype") else np.asarray(b)
                         for b in boxes]
    check_box_list([tuple(b.shape) for b in arrays], [dtypes.name(b) for b in arrays], op)
    on_host = all(isinstance(b, np.ndarray) for b in arrays)
    lib: Any = np if on_host else jnp
    ids = [lib.full((b.shape[0], 1), i, b.dtype) for i, b in enumerate(arrays)]
    return lib.concatenate([lib.concatenate(ids), lib.concatenate(arrays)], axis=1)


@registry.op(Spec("roi_align", "roi_align", _prepare, arrays=("input", "boxes"),
                  differentiable=("input", "boxes"),
                  # torchvision.ops.roi_align: torchvision is an optional package, which
                  # jaxpool does not import (a twin must resolve wherever torch does)
                  torch=None,
                  # torchvision::roi_align is torchvision's operator, not ATen's
                  aten=(), modules=("RoIAlign",)))
def roi_align(input: ArrayLike, boxes: Boxes, output_size: int | tuple[int, int],
              spatial_scale: float = 1.0, sampling_ratio: int = -1, aligned: bool = False,
              max_sampling_ratio: int | None = None, *,
              channels_last: bool = False) -> jax.Array:
    """Pool each box of ``input`` into ``output_size`` bins, as ``torchvision.ops.roi_align``
    (Mask R-CNN's RoIAlign).

    A box ``(x1, y1, x2, y2)``, scaled by ``spatial_scale`` (and shifted by half a pixel
    with ``aligned``), is cut into ``output_size`` bins; a bin is the mean of a grid of
    bilinear samples: ``sampling_ratio`` x ``sampling_ratio`` of them, or with
    ``sampling_ratio <= 0`` (adaptive) ``ceil(box height / bins)`` x ``ceil(box width /
    bins)``, each box its own. The arithmetic is torchvision's CPU kernel's, in its order
    (float32 and float64: its bits), with its rules: a sample outside ``[-1, size]`` (or
    NaN) counts as zero, reading the image's first pixel with weight 0 as the kernel does;
    coordinates are clamped to 0 and to the last pixel; without ``aligned`` a box is at
    least 1 x 1 pixel; an empty adaptive grid gives 0.

    Derivatives of every order, reverse and forward mode, in ``input`` and ``boxes``, read
    with gathers and add back with a sorted, segmented sum: no scatter. The input's is
    torchvision's backward (an empty sample adds nothing). torchvision's C++ operator gives
    the boxes no gradient; jaxpool gives the derivative of the kernel's arithmetic: that of
    the branch the kernel takes, zero where it clamps a coordinate or the box extent, the
    sample counts and batch index constant. That is torchvision's pure-torch
    ``_roi_align``'s box gradient wherever its values are the operator's (boxes inside the
    image and at least a pixel wide); past the border, or on empty boxes, ``_roi_align``
    computes other values than the operator, and jaxpool follows the operator.
    Wrap ``boxes`` in ``jax.lax.stop_gradient`` for the C++ operator's.

    Adaptive sampling depends on the boxes' values. Concrete boxes (an eager call) are
    read and the grid sized to their largest count (``max_sampling_ratio``, if given, must
    hold it: ValueError otherwise). Traced boxes (under ``jit``, ``vmap``, or a derivative
    in the boxes) need ``max_sampling_ratio``, the static bound (ValueError without it); a
    box that needs more samples per bin than the bound gets NaN in all its outputs (and no
    derivative), never a different value. Unused samples are skipped exactly: the bound
    changes no bit. A traced box whose batch index names no image is NaN too (concrete
    ones: ValueError).

    Args:
      input: ``[N, C, H, W]`` (``channels_last``: ``[N, H, W, C]``), floating point.
      boxes: ``[K, 5]`` rows ``(batch index, x1, y1, x2, y2)``, or a list of ``[L_i, 4]``
        arrays, image ``i``'s boxes; ``input``'s dtype.
      output_size: bins ``(height, width)``, or one int for both.
      spatial_scale: box coordinates to the input's pixels (1/16: a stride-16 map).
      sampling_ratio: samples per bin along each axis; ``<= 0``: adaptive.
      aligned: shift the boxes by -0.5 pixel (Detectron2's); without it, malformed boxes
        count as 1 x 1.
      max_sampling_ratio: the adaptive grid's static bound per axis (used with
        ``sampling_ratio <= 0`` only).
      channels_last: channels last in ``input`` and the result.

    Returns:
      ``[K, C, *output_size]`` (channels last: ``[K, *output_size, C]``) in ``input``'s
      dtype; float16/bfloat16 compute in float32 and round once (torchvision's half kernel
      rounds every operation).

    Example:
      >>> x = jnp.arange(16.0).reshape(1, 1, 4, 4)
      >>> boxes = jnp.asarray([[0.0, 0.0, 0.0, 2.0, 2.0]])
      >>> jaxpool.roi_align(x, boxes, 1, sampling_ratio=2, aligned=True)[0, 0, 0, 0]
      Array(2.5, dtype=float32)
    """
    boxes = _roi_format(boxes)
    return registry.run("roi_align", locals())


def _prepare_ps_align(spec: Spec, x: Any, boxes: Any, *, output_size: int | tuple[int, int],
                      spatial_scale: float, sampling_ratio: int,
                      max_sampling_ratio: int | None, channels_last: bool,
                      axis_names: AxisNames) -> Prepared:
    plan = plan_roi_align(x.shape, dtypes.name(x), boxes.shape, dtypes.name(boxes),
                          output_size, spatial_scale, sampling_ratio, True,
                          max_sampling_ratio, channels_last, _concrete(boxes),
                          op="ps_roi_align", position_sensitive=True)
    return Prepared(lambda x, rois, names: kernel.roi_align(plan, x, rois), (),
                    partitions=False)


@registry.op(Spec("ps_roi_align", "ps_roi_align", _prepare_ps_align,
                  arrays=("input", "boxes"), differentiable=("input", "boxes"), torch=None,
                  aten=(), modules=("PSRoIAlign",)))
def ps_roi_align(input: ArrayLike, boxes: Boxes, output_size: int | tuple[int, int],
                 spatial_scale: float = 1.0, sampling_ratio: int = -1,
                 max_sampling_ratio: int | None = None, *,
                 channels_last: bool = False) -> jax.Array:
    """Position-sensitive RoIAlign (R-FCN's), as ``torchvision.ops.ps_roi_align``.

    :func:`roi_align`'s boxes, bins and samples, always aligned (the boxes shifted by -0.5
    pixel, no 1 x 1 minimum), but bin ``(i, j)`` of output channel ``c`` reads input channel
    ``(c * PH + i) * PW + j`` alone: ``C`` input channels give ``C / (PH * PW)`` outputs.
    torchvision's ``ps_roi_align`` kernel, where it differs from ``roi_align``'s: a sample
    outside ``[-1, size]`` (or NaN) is 0, unread (a NaN in the first pixel does not reach
    the bin); the mean divides by the product of the adaptive counts unclamped, so an empty
    box's bins with adaptive sampling are ``0 / 0``, NaN, as torchvision's.

    Derivatives of every order in ``input`` and ``boxes``, as :func:`roi_align`'s: read with
    gathers, added back with sorted sums, no scatter (torchvision's CUDA backward adds with
    atomics and raises under ``torch.use_deterministic_algorithms``; it has no box gradient
    and no second order). The adaptive grid's static bound, ``max_sampling_ratio``, and the
    NaN of a box past it or naming no image are :func:`roi_align`'s.

    Args:
      input: ``[N, C, H, W]`` (``channels_last``: ``[N, H, W, C]``), ``C`` a multiple of
        ``PH * PW``, floating point.
      boxes, spatial_scale, sampling_ratio, max_sampling_ratio, channels_last: as
        :func:`roi_align`.
      output_size: bins ``(PH, PW)``, or one int for both; at least 1.

    Returns:
      ``[K, C / (PH * PW), PH, PW]`` (channels last: ``[K, PH, PW, C / (PH * PW)]``).

    Example:
      >>> x = jnp.arange(64.0).reshape(1, 4, 4, 4)  # channel (i, j) = 16 * (2 * i + j) + ...
      >>> boxes = jnp.asarray([[0.0, 0.5, 0.5, 4.5, 4.5]])
      >>> jaxpool.ps_roi_align(x, boxes, 2, sampling_ratio=1)[0, 0]
      Array([[ 5., 23.],
             [45., 63.]], dtype=float32)
    """
    boxes = _roi_format(boxes, "ps_roi_align")
    return registry.run("ps_roi_align", locals())


def _prepare_pool(position_sensitive: bool):
    op = "ps_roi_pool" if position_sensitive else "roi_pool"

    def prepare(spec: Spec, x: Any, boxes: Any, *, output_size: int | tuple[int, int],
                spatial_scale: float, max_bin_size: int | None, channels_last: bool,
                axis_names: AxisNames) -> Prepared:
        plan = plan_roi_pool(x.shape, dtypes.name(x), boxes.shape, dtypes.name(boxes),
                             output_size, spatial_scale, max_bin_size, channels_last,
                             _concrete(boxes), op=op, position_sensitive=position_sensitive)
        return Prepared(lambda x, rois, names: kernel.roi_pool(plan, x, rois), (),
                        partitions=False)
    return prepare


@registry.op(Spec("roi_pool", "roi_pool", _prepare_pool(False), arrays=("input", "boxes"),
                  differentiable=("input",), torch=None, aten=(), modules=("RoIPool",)))
def roi_pool(input: ArrayLike, boxes: Boxes, output_size: int | tuple[int, int],
             spatial_scale: float = 1.0, max_bin_size: int | None = None, *,
             channels_last: bool = False) -> jax.Array:
    """Max over each bin of whole pixels of each box, as ``torchvision.ops.roi_pool``
    (Fast R-CNN's RoIPool).

    torchvision's kernel's arithmetic: the box's corners times ``spatial_scale`` rounded
    (half away from zero), its extent ``max(x2 - x1 + 1, 1)`` pixels, bin ``p`` the rows
    ``floor(p * extent / PH)`` to ``ceil((p + 1) * extent / PH)`` past the box's start,
    clamped to the map; an empty bin is 0. The max is the kernel's scan: rows then
    columns, each pixel replacing the best so far only if greater, from ``-FLT_MAX``. So
    ties go to the first pixel in that order, and NaN never wins: a bin of NaN (and
    values at or below ``-FLT_MAX``) only is ``-FLT_MAX``, as torchvision's (unlike
    ``max_pool2d``, where NaN propagates).

    Derivatives of every order in ``input``: the cotangent goes to the winning pixel alone
    (none for a bin without one), added back with a sorted sum, no scatter (torchvision's
    CUDA backward adds with atomics and raises under ``torch.use_deterministic_algorithms``;
    it has no second order). The boxes take none: the output is constant in them between
    roundings.

    The bins' static bound: concrete boxes (an eager call) size it to their largest bin
    (``max_bin_size``, if given, must hold it: ValueError otherwise). For traced boxes
    (under ``jit`` or ``vmap``) it is ``max_bin_size``, or without one the map's extent,
    which holds every bin (and reads ``H * W`` pixels a bin: give the bound where the boxes
    are small). A traced box with a bin past the bound, a batch index naming no image, or
    a corner that is not finite or past ``2 ** 29`` pixels gets NaN in all its outputs,
    never a different value; concrete ones raise ValueError.

    Args:
      input: ``[N, C, H, W]`` (``channels_last``: ``[N, H, W, C]``), floating point.
      boxes, spatial_scale, channels_last: as :func:`roi_align`.
      output_size: bins ``(height, width)``, or one int for both.
      max_bin_size: the static bound on the pixels a bin spans along each axis.

    Returns:
      ``[K, C, *output_size]`` (channels last: ``[K, *output_size, C]``) in ``input``'s
      dtype.

    Example:
      >>> x = jnp.arange(16.0).reshape(1, 1, 4, 4)
      >>> boxes = jnp.asarray([[0.0, 0.0, 0.0, 3.0, 3.0]])
      >>> jaxpool.roi_pool(x, boxes, 2)[0, 0]
      Array([[ 5.,  7.],
             [13., 15.]], dtype=float32)
    """
    boxes = _roi_format(boxes, "roi_pool")
    return registry.run("roi_pool", locals())


def roi_pool_argmax(input: ArrayLike, boxes: Boxes, output_size: int | tuple[int, int],
                    spatial_scale: float = 1.0) -> jax.Array:
    """torchvision's ``roi_pool`` operator's second output (for ``jaxpool.torchax``): each
    output's winning pixel ``h * W + w``, -1 where none wins; int32, no derivative."""
    boxes = _roi_format(boxes, "roi_pool")
    x, rois = registry.static("roi_pool", input), registry.static("roi_pool", boxes)
    plan = plan_roi_pool(x.shape, dtypes.name(x), rois.shape, dtypes.name(rois), output_size,
                         spatial_scale, None, False, _concrete(rois))
    return kernel.roi_pool_argmax(plan, checks.as_jax(x), checks.as_jax(rois))


@registry.op(Spec("ps_roi_pool", "ps_roi_pool", _prepare_pool(True),
                  arrays=("input", "boxes"), differentiable=("input",), torch=None, aten=(),
                  modules=("PSRoIPool",)))
def ps_roi_pool(input: ArrayLike, boxes: Boxes, output_size: int | tuple[int, int],
                spatial_scale: float = 1.0, max_bin_size: int | None = None, *,
                channels_last: bool = False) -> jax.Array:
    """Position-sensitive RoIPool (R-FCN's), as ``torchvision.ops.ps_roi_pool``.

    The mean over each bin of whole pixels, bin ``(i, j)`` of output channel ``c`` reading
    input channel ``(c * PH + i) * PW + j``: :func:`roi_pool`'s bins with torchvision's
    ``ps_roi_pool`` kernel's differences (a box's extent is ``max(x2 - x1, 1)``, without
    the +1; the bins' edges are clamped to one pixel less than the map's extent, so the last
    row and column are never read); the pixels summed row by row, divided by their count;
    an empty bin is 0.

    Derivatives of every order in ``input``, the forward's: torchvision's backward clamps
    the edges to the map's extent, not one less, so where a bin reaches the last row or
    column its gradient spreads over pixels its forward never read, with another divisor.
    jaxpool differentiates the forward it computes. Sorted sums, no scatter (torchvision's
    CUDA backward adds with atomics, without an alert). The boxes, the static bound and the
    NaN rules are :func:`roi_pool`'s (the bound without ``max_bin_size``: the map's extent
    less one).

    Args:
      input: ``[N, C, H, W]`` (``channels_last``: ``[N, H, W, C]``), ``C`` a multiple of
        ``PH * PW``, floating point.
      boxes, spatial_scale, max_bin_size, channels_last: as :func:`roi_pool`.
      output_size: bins ``(PH, PW)``, or one int for both; at least 1.

    Returns:
      ``[K, C / (PH * PW), PH, PW]`` (channels last: ``[K, PH, PW, C / (PH * PW)]``).

    Example:
      >>> x = jnp.ones((1, 8, 6, 6))
      >>> jaxpool.ps_roi_pool(x, jnp.asarray([[0.0, 0.0, 0.0, 4.0, 4.0]]), 2).shape
      (1, 2, 2, 2)
    """
    boxes = _roi_format(boxes, "ps_roi_pool")
    return registry.run("ps_roi_pool", locals())


def _prepare_multi_scale(spec: Spec, features: Any, boxes: Any, *,
                         output_size: int | tuple[int, int], sampling_ratio: int,
                         image_shapes: Sequence[tuple[int, int]], canonical_scale: float,
                         canonical_level: float, max_sampling_ratio: int | None,
                         channels_last: bool, axis_names: AxisNames) -> Prepared:
    plan = plan_multi_scale_roi_align(
        [f.shape for f in features], [dtypes.name(f) for f in features], boxes.shape,
        dtypes.name(boxes), output_size, sampling_ratio, image_shapes, canonical_scale,
        canonical_level, max_sampling_ratio, channels_last, _concrete(boxes))
    return Prepared(lambda features, rois, names: kernel.multi_scale_roi_align(
        plan, features, rois), (), partitions=False)


# halo "delegate": each level is roi_align's arithmetic, which roi_align's cases check
@registry.op(Spec("multi_scale_roi_align", "roi_align", _prepare_multi_scale,
                  arrays=("features", "boxes"), differentiable=("features", "boxes"),
                  halo="delegate", torch=None, aten=(), modules=("MultiScaleRoIAlign",)))
def multi_scale_roi_align(features: Sequence[ArrayLike], boxes: Boxes,
                          output_size: int | tuple[int, int], sampling_ratio: int,
                          image_shapes: Sequence[tuple[int, int]],
                          canonical_scale: float = 224, canonical_level: float = 4,
                          max_sampling_ratio: int | None = None, *,
                          channels_last: bool = False,
                          axis_names: AxisNames = None) -> jax.Array:
    """Each box pooled from its FPN level, as ``torchvision.ops.MultiScaleRoIAlign`` pools
    (Faster and Mask R-CNN's box and mask heads).

    torchvision's setup and level mapper: each map's scale is ``2 ** round(log2(H_l /
    H))`` (``H`` the largest of ``image_shapes``' heights); the mapper's ``k_min`` and
    ``k_max`` are ``-log2`` of the first and last scales; box ``k`` goes to level
    ``clamp(floor(canonical_level + log2(sqrt(area) / canonical_scale) + 1e-6), k_min,
    k_max) - k_min`` (in the boxes' dtype; an inverted box, whose area's root is NaN, to
    none: its row is 0, as torchvision leaves it), and is pooled by :func:`roi_align`
    (``aligned=False``) on that level's map with its scale. With one map every box is
    pooled from it, the mapper skipped, as torchvision does.

    One call, one program: every level's rows are read by one gather, each box at its
    level's offsets, so the result is in the boxes' order with static shapes under
    ``jit``; derivatives as :func:`roi_align`'s, in every map and the boxes (the level
    constant). The mapper's ``log2`` is XLA's: a box within a few ulps of a level's edge
    may land on the other level than torch's. Adaptive sampling (``sampling_ratio <= 0``)
    sizes its grid from concrete boxes on their levels, or takes ``max_sampling_ratio`` for
    traced ones, as :func:`roi_align`.

    Args:
      features: the maps, finest first (``MultiScaleRoIAlign``'s ``featmap_names`` picked,
        in order), each ``[N, C, H_l, W_l]`` (``channels_last``: ``[N, H_l, W_l, C]``), one
        dtype.
      boxes: ``[K, 5]`` rows ``(batch index, x1, y1, x2, y2)``, or a list of each image's
        ``[L_i, 4]``, in the images' pixels.
      output_size: bins ``(height, width)``, or one int for both.
      sampling_ratio: as :func:`roi_align`.
      image_shapes: each image's ``(height, width)`` before the backbone.
      canonical_scale, canonical_level: the mapper's (FPN's 224 and 4).
      max_sampling_ratio, channels_last: as :func:`roi_align`.
      axis_names: unused (the maps are read whole).

    Returns:
      ``[K, C, *output_size]`` (channels last: ``[K, *output_size, C]``).

    Example:
      >>> maps = [jnp.ones((1, 8, 2 ** s, 2 ** s)) for s in (6, 5, 4, 3)]
      >>> boxes = [jnp.asarray([[0.0, 0.0, 100.0, 100.0], [10.0, 10.0, 250.0, 200.0]])]
      >>> jaxpool.multi_scale_roi_align(maps, boxes, 7, 2, [(256, 256)]).shape
      (2, 8, 7, 7)
    """
    if isinstance(features, (str, bytes)) or not isinstance(features, Sequence):
        raise TypeError(f"multi_scale_roi_align: features must be a list of feature maps "
                        f"(finest first), got {type(features).__name__}")
    features = tuple(features)
    boxes = _roi_format(boxes, "multi_scale_roi_align")
    return registry.run("multi_scale_roi_align", locals())
