"""The arithmetic of ``roi_align``, in plain Python and NumPy: torchvision's argument checks,
the boxes' batch indices and, for the adaptive sampling grid, each box's sample count, as
torchvision's CPU kernel (``roi_align_kernel.cpp``) computes them, and the static decisions
of one call."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from jaxpool.core import checks, dtypes
from jaxpool.core.memo import memoized_plan



class _PooledOutput:
    """What the RoI plans share: the output's channels and shape, and the compute dtype,
    from the fields each plan declares."""
    channels: int
    rois: int
    pooled: tuple
    channels_last: bool
    dtype: str
    position_sensitive: bool

    @property
    def compute_dtype(self) -> str:
        """Half precision computes in float32 and rounds once."""
        return dtypes.compute_dtype(self.dtype)

    @property
    def out_channels(self) -> int:
        if self.position_sensitive:
            return self.channels // (self.pooled[0] * self.pooled[1])
        return self.channels

    @property
    def out_shape(self) -> tuple:
        if self.channels_last:
            return (self.rois,) + self.pooled + (self.out_channels,)
        return (self.rois, self.out_channels) + self.pooled


@dataclasses.dataclass(frozen=True)
class RoiAlignPlan(_PooledOutput):
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
    # ps_roi_align: output channel c of bin (i, j) reads input channel (c * PH + i) * PW + j
    position_sensitive: bool = False


def _pair(value, name: str, op: str = "roi_align", minimum: int = 0) -> tuple:
    accepted = ("a non-negative int or a pair of them (height, width)" if minimum == 0 else
                "a positive int or a pair of them (height, width)")
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{op}: {name} must be {accepted}, got {value!r}")
        pair = tuple(checks.as_int(f"{op}: {name}", v, value, accepted) for v in value)
    else:
        pair = (checks.as_int(f"{op}: {name}", value, value, accepted),) * 2
    if min(pair) < minimum:
        raise ValueError(f"{op}: {name} must be {accepted}, got {value!r}")
    return pair


def check_box_list(shapes: Sequence[tuple], dtypes: Sequence[str], op: str = "roi_align"
                   ) -> None:
    """torchvision's ``check_roi_boxes_shape`` for a list of per-image boxes ``[L_i, 4]``:
    non-empty, each 2-d with 4 columns, one floating dtype."""
    if not shapes:
        raise ValueError(f"{op}: boxes must be a [K, 5] array or a non-empty list of "
                         f"[L_i, 4] arrays (one per image), got an empty list")
    for i, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        if len(shape) != 2 or shape[1] != 4:
            raise ValueError(f"{op}: boxes[{i}] must have shape [L, 4] (x1, y1, x2, y2 "
                             f"of image {i}'s boxes), got shape {tuple(shape)}")
        if dtype != dtypes[0]:
            raise TypeError(f"{op}: the boxes of every image must have one dtype, got "
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


def _check_call(op: str, input_shape: Sequence[int], input_dtype: str,
                boxes_shape: Sequence[int], boxes_dtype: str, spatial_scale,
                channels_last) -> tuple:
    """The checks every RoI op shares: the input's and the boxes' shapes and dtypes, the
    scale and the layout. Returns ``(spatial_scale, channels_last, (batch, channels,
    height, width), rois)``."""
    if isinstance(spatial_scale, (bool, np.bool_)) or not isinstance(
            spatial_scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: spatial_scale must be a real number, got "
                        f"{spatial_scale!r}")
    spatial_scale = float(spatial_scale)
    channels_last = checks.check_bool(f"{op}: channels_last", channels_last)
    input_shape, boxes_shape = tuple(input_shape), tuple(boxes_shape)
    if len(input_shape) != 4:
        raise ValueError(f"{op}: input must be 4-D [N, C, H, W] (channels last: "
                         f"[N, H, W, C]), got shape {input_shape}")
    if len(boxes_shape) != 2 or boxes_shape[1] != 5:
        raise ValueError(f"{op}: boxes must have shape [K, 5] (batch index, x1, y1, x2, "
                         f"y2), or be a list of [L_i, 4] arrays, got shape {boxes_shape}")
    if not dtypes.is_floating(input_dtype):
        raise TypeError(f"{op}: input must have a floating dtype, got {input_dtype}")
    if boxes_dtype != input_dtype:
        raise TypeError(f"{op}: boxes must have input's dtype, got input {input_dtype} "
                        f"and boxes {boxes_dtype}")
    if channels_last:
        batch, height, width, channels = input_shape
    else:
        batch, channels, height, width = input_shape
    if height == 0 or width == 0:
        raise ValueError(f"{op}: input must have non-empty spatial dimensions, got "
                         f"shape {input_shape}")
    rois = boxes_shape[0]
    if batch == 0 and rois:
        raise ValueError(f"{op}: boxes name images of input, which has none (shape "
                         f"{input_shape}), but boxes holds {rois} boxes")
    return spatial_scale, channels_last, (batch, channels, height, width), rois


def _check_batch_indices(op: str, boxes, batch: int, input_shape: Sequence[int]) -> None:
    """Concrete ``[K, 5]`` boxes (None where traced): each batch index names an image."""
    if boxes is None or not len(boxes):
        return
    index = np.trunc(np.asarray(boxes)[:, 0].astype(np.float64))
    bad = ~((index >= 0) & (index < batch))
    if bad.any():
        k = int(np.argmax(bad))
        raise ValueError(f"{op}: boxes[:, 0] holds each box's batch index, in "
                         f"[0, {batch}) for input of shape {tuple(input_shape)}; box {k} "
                         f"has {float(np.asarray(boxes)[k, 0])!r}")


def _check_groups(op: str, channels: int, pooled: tuple, input_shape) -> None:
    """The position-sensitive ops' channels: one group of ``PH * PW`` per output channel."""
    if not (pooled[0] and pooled[1]) or channels % (pooled[0] * pooled[1]):
        raise ValueError(f"{op}: input's {channels} channels must be a multiple of "
                         f"output_size's {pooled[0]} x {pooled[1]} bins (output channel c "
                         f"of bin (i, j) reads channel (c * {pooled[0]} + i) * {pooled[1]} "
                         f"+ j), got input of shape {tuple(input_shape)}")


@memoized_plan
def plan_roi_align(input_shape: Sequence[int], input_dtype: str, boxes_shape: Sequence[int],
                   boxes_dtype: str, output_size, spatial_scale, sampling_ratio, aligned,
                   max_sampling_ratio, channels_last, boxes=None, *, op: str = "roi_align",
                   position_sensitive: bool = False) -> RoiAlignPlan:
    """torchvision's checks (``roi_align``, ``check_roi_boxes_shape`` and the CPU kernel's),
    raised as ValueError/TypeError naming the argument and value, and the static grid.
    ``position_sensitive``: ``ps_roi_align``'s (always aligned, channels in groups).

    ``boxes``: the ``[K, 5]`` boxes' values where they are concrete (None where traced):
    their batch indices are checked, and an adaptive grid is sized from them."""
    pooled = _pair(output_size, "output_size", op)
    spatial_scale, channels_last, dims, rois = _check_call(
        op, input_shape, input_dtype, boxes_shape, boxes_dtype, spatial_scale, channels_last)
    sampling_ratio = checks.as_int(f"{op}: sampling_ratio", sampling_ratio,
                                    sampling_ratio, "an int (<= 0: adaptive)")
    aligned = checks.check_bool(f"{op}: aligned", aligned)
    if max_sampling_ratio is not None:
        max_sampling_ratio = checks.as_int(f"{op}: max_sampling_ratio",
                                            max_sampling_ratio, max_sampling_ratio,
                                            "None or a positive int")
        if max_sampling_ratio < 1:
            raise ValueError(f"{op}: max_sampling_ratio must be None or a positive "
                             f"int, got {max_sampling_ratio}")
    batch, channels, height, width = dims
    if position_sensitive:
        _check_groups(op, channels, pooled, input_shape)
    _check_batch_indices(op, boxes, batch, input_shape)
    compute = dtypes.compute_dtype(input_dtype)
    if sampling_ratio > 0:
        grid = (sampling_ratio, sampling_ratio)
    elif boxes is not None:
        rows, cols = adaptive_counts(boxes, spatial_scale, pooled, aligned, compute)
        grid = (max(int(rows.max(initial=0)), 1), max(int(cols.max(initial=0)), 1))
        if max_sampling_ratio is not None and max(grid) > max_sampling_ratio:
            k = int(np.argmax(np.maximum(rows, cols)))
            raise ValueError(f"{op}: box {k} needs {int(rows[k])}x{int(cols[k])} "
                             f"samples per bin (sampling_ratio={sampling_ratio}: "
                             f"ceil(box extent / bins)), more than max_sampling_ratio="
                             f"{max_sampling_ratio}: raise the bound, or pass a fixed "
                             f"sampling_ratio")
    elif max_sampling_ratio is None:
        raise ValueError(f"{op}: sampling_ratio={sampling_ratio} (adaptive: "
                         f"ceil(box extent / bins) samples per bin) on traced boxes (under "
                         f"jit, vmap, or a derivative in the boxes) needs a static bound: "
                         f"pass max_sampling_ratio= (a box that needs more gives NaN), or "
                         f"a fixed sampling_ratio > 0")
    else:
        grid = (max_sampling_ratio, max_sampling_ratio)
    samples = rois * pooled[0] * pooled[1] * grid[0] * grid[1] * 4
    if batch * channels * height * width > dtypes.INT32_MAX or samples > dtypes.INT32_MAX:
        raise ValueError(f"{op}: input of shape {tuple(input_shape)} with {rois} boxes of "
                         f"{pooled[0]}x{pooled[1]} bins of {grid[0]}x{grid[1]} samples has "
                         f"more positions than int32 indexes")
    return RoiAlignPlan(batch, channels, height, width, rois, pooled, spatial_scale, aligned,
                        sampling_ratio <= 0, grid, channels_last, input_dtype,
                        position_sensitive)


# --- roi_pool and ps_roi_pool: bins of whole pixels -----------------------------------------

COORDINATE_LIMIT = 2 ** 29
"""The largest scaled, rounded box coordinate (in pixels, either sign) the pixel-bin ops
compute with: every sum of two stays an int32 (torchvision's ``int`` arithmetic). A box
past it, or not finite, is NaN (traced) or a ValueError (concrete)."""


PIXELS_READ_APART = 64
"""The largest bin bound (rows times columns) whose pixels ``roi_pool`` and ``ps_roi_pool``
read one gather each: each gather fuses into its step of the max or the sum, where one
gather of every pixel writes them all out first and is read again (BENCHMARKS.md, "The
RoI ops' cells (2026-12-07)", cell ``roi-pool``). The forward program grows with the
pixels, so a larger bound takes the one gather and a loop."""


@dataclasses.dataclass(frozen=True)
class RoiPoolPlan(_PooledOutput):
    """One ``roi_pool`` (``position_sensitive``: ``ps_roi_pool``) call: ``rois`` boxes
    pooled into ``pooled`` bins of whole pixels from ``[batch, channels, height, width]``
    maps; ``bins`` (rows, columns) is the static bound on the pixels a bin spans (the
    largest of concrete boxes, ``max_bin_size``, or the map's extent)."""
    batch: int
    channels: int
    height: int
    width: int
    rois: int
    pooled: tuple
    spatial_scale: float
    bins: tuple
    position_sensitive: bool
    channels_last: bool
    dtype: str
    # each pixel of every bin read by a gather of its own, fused into the running max or
    # sum (else one gather of every bin's pixels, then a loop over them); see
    # PIXELS_READ_APART
    reads_apart: bool = True

    @property
    def limits(self) -> tuple:
        """The clamp of the bins' edges: ``roi_pool`` clamps to the map's extent,
        ``ps_roi_pool``'s forward to one pixel less (its backward clamps to the extent:
        jaxpool differentiates the forward)."""
        less = 1 if self.position_sensitive else 0
        return self.height - less, self.width - less


def bin_edges(rois: np.ndarray, spatial_scale: float, pooled: tuple, limits: tuple,
              position_sensitive: bool, compute_dtype: str) -> tuple:
    """Each box's bins' ``(start, end)`` rows ``[K, PH]`` and columns ``[K, PW]``, as
    torchvision's kernels compute them (``round`` of the scaled corners, half away from
    zero; ``floor`` and ``ceil`` of the bins; clamped to ``[0, limit]``), and whether each
    box is usable (finite, inside :data:`COORDINATE_LIMIT`)."""
    dtype = np.dtype(compute_dtype)
    rois = np.asarray(rois).astype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = rois[:, 1:5] * dtype.type(spatial_scale)
        whole = np.trunc(scaled)
        corners = np.where(np.abs(scaled - whole) >= 0.5, whole + np.sign(scaled), whole)
        usable = (np.isfinite(corners) & (np.abs(corners) <= COORDINATE_LIMIT)).all(axis=1)
    corners = np.where(usable[:, None], corners, 0).astype(np.int64)
    plus = 0 if position_sensitive else 1
    edges = []
    for lo, hi, bins, limit in ((1, 3, pooled[0], limits[0]), (0, 2, pooled[1], limits[1])):
        extent = np.maximum(corners[:, hi] - corners[:, lo] + plus, 1)
        size = extent.astype(dtype) / dtype.type(bins)
        p = np.arange(bins, dtype=dtype)
        start = np.floor(p[None] * size[:, None]).astype(np.int64)
        end = np.ceil((p[None] + 1) * size[:, None]).astype(np.int64)
        start = np.clip(start + corners[:, lo, None], 0, limit)
        end = np.clip(end + corners[:, lo, None], 0, limit)
        edges.append((start, end))
    return edges[0], edges[1], usable


@memoized_plan
def plan_roi_pool(input_shape: Sequence[int], input_dtype: str, boxes_shape: Sequence[int],
                  boxes_dtype: str, output_size, spatial_scale, max_bin_size, channels_last,
                  boxes=None, *, op: str = "roi_pool", position_sensitive: bool = False
                  ) -> RoiPoolPlan:
    """torchvision's checks of ``roi_pool`` (``ps_roi_pool``) and the bins' static bound:
    the concrete ``boxes``' largest bin, checked against ``max_bin_size``; for traced boxes
    ``max_bin_size``, or the map's extent (every bin fits)."""
    pooled = _pair(output_size, "output_size", op)
    spatial_scale, channels_last, dims, rois = _check_call(
        op, input_shape, input_dtype, boxes_shape, boxes_dtype, spatial_scale, channels_last)
    if max_bin_size is not None:
        max_bin_size = checks.as_int(f"{op}: max_bin_size", max_bin_size, max_bin_size,
                                     "None or a positive int")
        if max_bin_size < 1:
            raise ValueError(f"{op}: max_bin_size must be None or a positive int, got "
                             f"{max_bin_size}")
    batch, channels, height, width = dims
    if position_sensitive:
        _check_groups(op, channels, pooled, input_shape)
    _check_batch_indices(op, boxes, batch, input_shape)
    less = 1 if position_sensitive else 0
    limits = (height - less, width - less)
    bins = (max(limits[0], 1), max(limits[1], 1))
    if boxes is not None and rois:
        (hs, he), (ws, we), usable = bin_edges(boxes, spatial_scale, pooled, limits,
                                               position_sensitive,
                                               dtypes.compute_dtype(input_dtype))
        if not usable.all():
            k = int(np.argmin(usable))
            raise ValueError(f"{op}: box {k} has coordinates {np.asarray(boxes)[k, 1:]!r}, "
                             f"which times spatial_scale={spatial_scale} are not finite "
                             f"or pass {COORDINATE_LIMIT} pixels")
        rows, cols = (he - hs).max(axis=1), (we - ws).max(axis=1)
        bins = (max(int(rows.max(initial=0)), 1), max(int(cols.max(initial=0)), 1))
        if max_bin_size is not None and max(bins) > max_bin_size:
            k = int(np.argmax(np.maximum(rows, cols)))
            raise ValueError(f"{op}: box {k} has bins of up to {int(rows[k])}x{int(cols[k])} "
                             f"pixels, more than max_bin_size={max_bin_size}: raise the "
                             f"bound")
    elif max_bin_size is not None:
        bins = (min(bins[0], max_bin_size), min(bins[1], max_bin_size))
    taps = rois * pooled[0] * pooled[1] * bins[0] * bins[1]
    if batch * channels * height * width > dtypes.INT32_MAX or taps > dtypes.INT32_MAX:
        raise ValueError(f"{op}: input of shape {tuple(input_shape)} with {rois} boxes of "
                         f"{pooled[0]}x{pooled[1]} bins of up to {bins[0]}x{bins[1]} pixels "
                         f"has more positions than int32 indexes")
    return RoiPoolPlan(batch, channels, height, width, rois, pooled, spatial_scale, bins,
                       position_sensitive, channels_last, input_dtype,
                       reads_apart=bins[0] * bins[1] <= PIXELS_READ_APART)


# --- multi-scale roi_align (torchvision's MultiScaleRoIAlign) -------------------------------

@dataclasses.dataclass(frozen=True)
class MultiScalePlan:
    """One ``multi_scale_roi_align`` call: ``align`` holds the bins, the grid and the layout
    (its extent and scale are level 0's; each box takes its level's), ``levels`` each
    level's ``(height, width)``, ``scales`` each one's scale (inferred as torchvision
    infers them), and the level mapper's ``k_min``, ``k_max``, ``canonical_scale`` and
    ``canonical_level`` (one level: every box on it, as torchvision skips the mapper)."""
    align: RoiAlignPlan
    levels: tuple
    scales: tuple
    k_min: int
    k_max: int
    canonical_scale: float
    canonical_level: float

    @property
    def out_shape(self) -> tuple:
        return self.align.out_shape


LEVEL_EPS = 1e-6
"""torchvision's ``LevelMapper`` eps."""


def infer_scale(size: tuple, original: tuple) -> float:
    """torchvision's ``_infer_scale``: ``2 ** round(log2(size / original))`` of the height
    (float32, as its ``torch.tensor`` of a Python float; the width's is not used)."""
    approx = np.float32(float(size[0]) / float(original[0]))
    with np.errstate(divide="ignore"):
        return float(2.0 ** float(np.round(np.log2(approx))))


def box_levels(rois: np.ndarray, k_min: int, k_max: int, canonical_scale: float,
               canonical_level: float, dtype: str) -> np.ndarray:
    """torchvision's ``LevelMapper`` on ``[K, 5]`` boxes, in their dtype: ``floor(level0 +
    log2(sqrt(area) / scale0) + eps)`` clamped to ``[k_min, k_max]``, minus ``k_min``; -1
    where that is NaN (an inverted box: torchvision's int conversion gives no level, and
    the box's row stays 0)."""
    t = np.dtype(dtype).type
    rois = np.asarray(rois).astype(t)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        area = (rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2])
        level = np.floor(t(canonical_level) + np.log2(np.sqrt(area) / t(canonical_scale))
                         + t(LEVEL_EPS))
        level = np.clip(level, k_min, k_max)
    return np.where(np.isnan(level), -1, np.nan_to_num(level) - k_min).astype(np.int64)


@memoized_plan
def plan_multi_scale_roi_align(feature_shapes: Sequence[tuple], feature_dtypes: Sequence[str],
                               boxes_shape: Sequence[int], boxes_dtype: str, output_size,
                               sampling_ratio, image_shapes, canonical_scale, canonical_level,
                               max_sampling_ratio, channels_last, boxes=None
                               ) -> MultiScalePlan:
    """torchvision's ``MultiScaleRoIAlign``'s checks and setup (``_setup_scales``): the
    levels' scales from the maps' and the images' extents, the mapper's levels, and the
    grid, as :func:`plan_roi_align` on each level."""
    op = "multi_scale_roi_align"
    if not feature_shapes:
        raise ValueError(f"{op}: features must be a non-empty sequence of [N, C, H, W] maps "
                         f"(finest first), got none")
    shapes = [tuple(s) for s in feature_shapes]
    for i, (shape, dtype) in enumerate(zip(shapes, feature_dtypes)):
        if len(shape) != 4:
            raise ValueError(f"{op}: features[{i}] must be 4-D [N, C, H, W] (channels last: "
                             f"[N, H, W, C]), got shape {shape}")
        if dtype != feature_dtypes[0]:
            raise TypeError(f"{op}: every feature map must have one dtype, got "
                            f"features[0] {feature_dtypes[0]} and features[{i}] {dtype}")
        c_axis = 3 if channels_last else 1
        if (shape[0], shape[c_axis]) != (shapes[0][0], shapes[0][c_axis]):
            raise ValueError(f"{op}: every feature map must have the batch and channels of "
                             f"features[0] {shapes[0]}, got features[{i}] {shape}")
    if isinstance(image_shapes, (str, bytes)) or not isinstance(image_shapes, Sequence) \
            or not image_shapes:
        raise ValueError(f"{op}: image_shapes must be a non-empty list of each image's "
                         f"(height, width) before the backbone, got {image_shapes!r}")
    sizes = [_pair(s, f"image_shapes[{i}]", op, 1) for i, s in enumerate(image_shapes)]
    for name, value in (("canonical_scale", canonical_scale),
                        ("canonical_level", canonical_level)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(
                value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{op}: {name} must be a real number, got {value!r}")
    original = (max(s[0] for s in sizes), max(s[1] for s in sizes))
    spatial = [(s[1], s[2]) if channels_last else (s[2], s[3]) for s in shapes]
    scales = tuple(infer_scale(s, original) for s in spatial)
    k_min = int(-np.log2(np.float32(scales[0])))
    k_max = int(-np.log2(np.float32(scales[-1])))
    plans = [plan_roi_align(shape, feature_dtypes[0], boxes_shape, boxes_dtype, output_size,
                            scale, sampling_ratio, False, max_sampling_ratio, channels_last,
                            None if boxes is None or (isinstance(sampling_ratio, int)
                                                      and sampling_ratio > 0) else boxes[:0],
                            op=op)
             for shape, scale in zip(shapes, scales)]
    align = plans[0]
    if boxes is not None:
        _check_batch_indices(op, boxes, shapes[0][0], shapes[0])
    if align.adaptive and boxes is not None:
        # each box's grid on its own level
        compute = dtypes.compute_dtype(feature_dtypes[0])
        level = (box_levels(boxes, k_min, k_max, canonical_scale, canonical_level,
                            compute) if len(shapes) > 1 else np.zeros(len(boxes), np.int64))
        rows = np.zeros(len(boxes), np.int64)
        cols = np.zeros(len(boxes), np.int64)
        for i, scale in enumerate(scales):
            r, c = adaptive_counts(boxes, scale, align.pooled, False, compute)
            rows, cols = np.where(level == i, r, rows), np.where(level == i, c, cols)
        grid = (max(int(rows.max(initial=0)), 1), max(int(cols.max(initial=0)), 1))
        if max_sampling_ratio is not None and max(grid) > max_sampling_ratio:
            k = int(np.argmax(np.maximum(rows, cols)))
            raise ValueError(f"{op}: box {k} needs {int(rows[k])}x{int(cols[k])} samples "
                             f"per bin on its level, more than max_sampling_ratio="
                             f"{max_sampling_ratio}: raise the bound, or pass a fixed "
                             f"sampling_ratio")
        align = dataclasses.replace(align, grid=grid)
    return MultiScalePlan(align, tuple(spatial), scales, k_min, k_max, float(canonical_scale),
                          float(canonical_level))
