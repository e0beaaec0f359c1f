"""The arithmetic of ``roi_align``, in plain Python and NumPy: torchvision's argument checks,
the boxes' batch indices and, for the adaptive sampling grid, each box's sample count, as
torchvision's CPU kernel (``roi_align_kernel.cpp``) computes them, and the static decisions
of one call."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from jaxpool.core import checks, dtypes



@dataclasses.dataclass(frozen=True)
class RoiAlignPlan:
    """One ``roi_align`` call: ``rois`` boxes pooled into ``pooled`` (height, width) bins
    from ``[batch, channels, height, width]`` maps, each bin the mean of a ``grid``
    (rows, columns) of bilinear samples. ``adaptive``: the grid is each box's own
    (``ceil(box extent / bins)``), ``grid`` its static bound (the largest count of concrete
    boxes, or ``max_sampling_ratio``); else every box takes ``grid`` =
    ``(sampling_ratio, sampling_ratio)``."""
    batch: int
    channels: int
    height: int
    width: int
    rois: int
    pooled: tuple
    spatial_scale: float
    aligned: bool
    adaptive: bool
    grid: tuple
    channels_last: bool
    dtype: str

    @property
    def compute_dtype(self) -> str:
        """Half precision computes in float32 and rounds once."""
        return dtypes.compute_dtype(self.dtype)

    @property
    def out_shape(self) -> tuple:
        if self.channels_last:
            return (self.rois,) + self.pooled + (self.channels,)
        return (self.rois, self.channels) + self.pooled


def _pair(value, name: str) -> tuple:
    accepted = "a non-negative int or a pair of them (height, width)"
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"roi_align: {name} must be {accepted}, got {value!r}")
        pair = tuple(checks.as_int(f"roi_align: {name}", v, value, accepted) for v in value)
    else:
        pair = (checks.as_int(f"roi_align: {name}", value, value, accepted),) * 2
    if min(pair) < 0:
        raise ValueError(f"roi_align: {name} must be {accepted}, got {value!r}")
    return pair


def check_box_list(shapes: Sequence[tuple], dtypes: Sequence[str]) -> None:
    """torchvision's ``check_roi_boxes_shape`` for a list of per-image boxes ``[L_i, 4]``:
    non-empty, each 2-d with 4 columns, one floating dtype."""
    if not shapes:
        raise ValueError("roi_align: boxes must be a [K, 5] array or a non-empty list of "
                         "[L_i, 4] arrays (one per image), got an empty list")
    for i, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        if len(shape) != 2 or shape[1] != 4:
            raise ValueError(f"roi_align: boxes[{i}] must have shape [L, 4] (x1, y1, x2, y2 "
                             f"of image {i}'s boxes), got shape {tuple(shape)}")
        if dtype != dtypes[0]:
            raise TypeError(f"roi_align: the boxes of every image must have one dtype, got "
                            f"boxes[0] {dtypes[0]} and boxes[{i}] {dtype}")


def adaptive_counts(rois: np.ndarray, spatial_scale: float, pooled: tuple, aligned: bool,
                    compute_dtype: str) -> tuple:
    """Each box's sample rows and columns per bin, ``ceil(extent / bins)``, in the
    kernel's arithmetic and dtype (``rois``: ``[K, 5]``). A count that is not a positive
    int32 (an empty or inverted aligned box, a NaN or infinite box) is 0: the kernel's
    loop runs no sample there (x86 converts NaN and out-of-range floats to INT_MIN)."""
    dtype = np.dtype(compute_dtype)
    rois = np.asarray(rois).astype(dtype)
    scale, offset = dtype.type(spatial_scale), dtype.type(0.5 if aligned else 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        start_w, start_h = rois[:, 1] * scale - offset, rois[:, 2] * scale - offset
        end_w, end_h = rois[:, 3] * scale - offset, rois[:, 4] * scale - offset
        width, height = end_w - start_w, end_h - start_h
        if not aligned:
            width = np.where(width < 1, dtype.type(1), width)
            height = np.where(height < 1, dtype.type(1), height)
        counts = []
        for extent, bins in ((height, pooled[0]), (width, pooled[1])):
            n = np.ceil(extent / dtype.type(bins))
            usable = np.isfinite(n) & (n > 0) & (n <= dtypes.INT32_MAX)
            counts.append(np.where(usable, n, 0).astype(np.int64))
    return counts[0], counts[1]


def plan_roi_align(input_shape: Sequence[int], input_dtype: str, boxes_shape: Sequence[int],
                   boxes_dtype: str, output_size, spatial_scale, sampling_ratio, aligned,
                   max_sampling_ratio, channels_last, boxes=None) -> RoiAlignPlan:
    """torchvision's checks (``roi_align``, ``check_roi_boxes_shape`` and the CPU kernel's),
    raised as ValueError/TypeError naming the argument and value, and the static grid.

    ``boxes``: the ``[K, 5]`` boxes' values where they are concrete (None where traced):
    their batch indices are checked, and an adaptive grid is sized from them."""
    pooled = _pair(output_size, "output_size")
    if isinstance(spatial_scale, (bool, np.bool_)) or not isinstance(
            spatial_scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"roi_align: spatial_scale must be a real number, got "
                        f"{spatial_scale!r}")
    spatial_scale = float(spatial_scale)
    sampling_ratio = checks.as_int("roi_align: sampling_ratio", sampling_ratio,
                                    sampling_ratio, "an int (<= 0: adaptive)")
    aligned = checks.check_bool("roi_align: aligned", aligned)
    channels_last = checks.check_bool("roi_align: channels_last", channels_last)
    if max_sampling_ratio is not None:
        max_sampling_ratio = checks.as_int("roi_align: max_sampling_ratio",
                                            max_sampling_ratio, max_sampling_ratio,
                                            "None or a positive int")
        if max_sampling_ratio < 1:
            raise ValueError(f"roi_align: max_sampling_ratio must be None or a positive "
                             f"int, got {max_sampling_ratio}")
    input_shape, boxes_shape = tuple(input_shape), tuple(boxes_shape)
    if len(input_shape) != 4:
        raise ValueError(f"roi_align: input must be 4-D [N, C, H, W] (channels last: "
                         f"[N, H, W, C]), got shape {input_shape}")
    if len(boxes_shape) != 2 or boxes_shape[1] != 5:
        raise ValueError(f"roi_align: boxes must have shape [K, 5] (batch index, x1, y1, x2, "
                         f"y2), or be a list of [L_i, 4] arrays, got shape {boxes_shape}")
    if not dtypes.is_floating(input_dtype):
        raise TypeError(f"roi_align: input must have a floating dtype, got {input_dtype}")
    if boxes_dtype != input_dtype:
        raise TypeError(f"roi_align: boxes must have input's dtype, got input {input_dtype} "
                        f"and boxes {boxes_dtype}")
    if channels_last:
        batch, height, width, channels = input_shape
    else:
        batch, channels, height, width = input_shape
    if height == 0 or width == 0:
        raise ValueError(f"roi_align: input must have non-empty spatial dimensions, got "
                         f"shape {input_shape}")
    rois = boxes_shape[0]
    if batch == 0 and rois:
        raise ValueError(f"roi_align: boxes name images of input, which has none (shape "
                         f"{input_shape}), but boxes holds {rois} boxes")
    compute = dtypes.compute_dtype(input_dtype)
    if boxes is not None and rois:
        index = np.trunc(np.asarray(boxes)[:, 0].astype(np.float64))
        bad = ~((index >= 0) & (index < batch))
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(f"roi_align: boxes[:, 0] holds each box's batch index, in "
                             f"[0, {batch}) for input of shape {input_shape}; box {k} has "
                             f"{float(np.asarray(boxes)[k, 0])!r}")
    if sampling_ratio > 0:
        grid = (sampling_ratio, sampling_ratio)
    elif boxes is not None:
        rows, cols = adaptive_counts(boxes, spatial_scale, pooled, aligned, compute)
        grid = (max(int(rows.max(initial=0)), 1), max(int(cols.max(initial=0)), 1))
        if max_sampling_ratio is not None and max(grid) > max_sampling_ratio:
            k = int(np.argmax(np.maximum(rows, cols)))
            raise ValueError(f"roi_align: box {k} needs {int(rows[k])}x{int(cols[k])} "
                             f"samples per bin (sampling_ratio={sampling_ratio}: "
                             f"ceil(box extent / bins)), more than max_sampling_ratio="
                             f"{max_sampling_ratio}: raise the bound, or pass a fixed "
                             f"sampling_ratio")
    elif max_sampling_ratio is None:
        raise ValueError(f"roi_align: sampling_ratio={sampling_ratio} (adaptive: "
                         f"ceil(box extent / bins) samples per bin) on traced boxes (under "
                         f"jit, vmap, or a derivative in the boxes) needs a static bound: "
                         f"pass max_sampling_ratio= (a box that needs more gives NaN), or "
                         f"a fixed sampling_ratio > 0")
    else:
        grid = (max_sampling_ratio, max_sampling_ratio)
    samples = rois * pooled[0] * pooled[1] * grid[0] * grid[1] * 4
    if batch * height * width > dtypes.INT32_MAX or samples > dtypes.INT32_MAX:
        raise ValueError(f"roi_align: input of shape {input_shape} with {rois} boxes of "
                         f"{pooled[0]}x{pooled[1]} bins of {grid[0]}x{grid[1]} samples has "
                         f"more positions than int32 indexes")
    return RoiAlignPlan(batch, channels, height, width, rois, pooled, spatial_scale, aligned,
                        sampling_ratio <= 0, grid, channels_last, input_dtype)
