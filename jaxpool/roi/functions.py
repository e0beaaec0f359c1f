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
from jaxpool.roi.plan import check_box_list, plan_roi_align

Boxes = Union[ArrayLike, Sequence[ArrayLike]]


def _prepare(spec: Spec, x: Any, boxes: Any, *, output_size: int | tuple[int, int],
             spatial_scale: float, sampling_ratio: int, aligned: bool,
             max_sampling_ratio: int | None, channels_last: bool,
             axis_names: AxisNames) -> Prepared:
    # Concrete boxes are read here: their batch indices checked, an adaptive grid sized
    # to the largest box's count. Traced ones (jit, vmap, a derivative in the boxes) are
    # not: the kernel flags what it cannot check with NaN.
    concrete = None if isinstance(boxes, jax.core.Tracer) else np.asarray(boxes)
    plan = plan_roi_align(x.shape, dtypes.name(x), boxes.shape, dtypes.name(boxes),
                          output_size, spatial_scale, sampling_ratio, aligned,
                          max_sampling_ratio, channels_last, concrete)
    # a sharded input is replicated by XLA's partitioner: the reads go anywhere
    return Prepared(lambda x, rois, names: kernel.roi_align(plan, x, rois), (),
                    partitions=False)


def _roi_format(boxes: Boxes):
    """A list of per-image ``[L_i, 4]`` boxes as ``[K, 5]`` (image index first), as
    torchvision's ``convert_boxes_to_roi_format``; a ``[K, 5]`` array unchanged."""
    if not isinstance(boxes, (list, tuple)):
        return boxes
    for b in boxes:
        checks.check_array("roi_align", b)
    arrays: list[Any] = [b if hasattr(b, "shape") and hasattr(b, "dtype") else np.asarray(b)
                         for b in boxes]
    check_box_list([tuple(b.shape) for b in arrays], [dtypes.name(b) for b in arrays])
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
                  aten=()))
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
