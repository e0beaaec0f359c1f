"""The arguments of ``multi_scale_deformable_attention`` and ``deform_conv2d``, in plain
Python: the checks, raised before any computation with the argument's name and value, and
the static layout of one call (attention: levels, points per level, where each level's rows
start in ``value``; convolution: groups, window and output extents)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

from jaxpool.core import checks, dtypes
from jaxpool.core.memo import memoized_plan

OP = "multi_scale_deformable_attention"

MODES = ("bilinear", "nearest")
"""``bilinear``: ``grid_sample(bilinear, zeros, align_corners=False)`` of ``2 * loc - 1``
(Deformable DETR's, mmcv's, Hugging Face's); ``nearest``: RT-DETRv2's discrete sampling,
``int(loc * size + 0.5)`` clamped into the level."""


@dataclasses.dataclass(frozen=True)
class DeformablePlan:
    """One call: ``queries`` queries of ``batch`` examples, each of ``heads`` heads reading
    ``points[l]`` points of level ``l`` (``levels[l]`` = (H, W), the levels' rows laid end
    to end in ``value``) and summing them, weighted, into ``head_dim`` channels.
    ``flat_points``: the locations come as ``[B, Q, heads, sum(points), 2]`` (a count per
    level given), else ``[B, Q, heads, L, P, 2]``."""
    batch: int
    queries: int
    heads: int
    head_dim: int
    levels: tuple
    points: tuple
    flat_points: bool
    mode: str
    dtype: str

    @property
    def tokens(self) -> int:
        """S: the rows of every level, ``sum(H * W)``."""
        return sum(h * w for h, w in self.levels)

    @property
    def starts(self) -> tuple:
        """Where each level's rows start among the S."""
        out, start = [], 0
        for h, w in self.levels:
            out.append(start)
            start += h * w
        return tuple(out)

    @property
    def total_points(self) -> int:
        return sum(self.points)

    @property
    def taps(self) -> int:
        """Rows read per point: the 4 corners (bilinear) or the nearest one."""
        return 4 if self.mode == "bilinear" else 1

    @property
    def compute_dtype(self) -> str:
        """Half precision computes in float32 and rounds once."""
        return dtypes.compute_dtype(self.dtype)

    @property
    def out_shape(self) -> tuple:
        return (self.batch, self.queries, self.heads * self.head_dim)


def _levels(spatial_shapes) -> tuple:
    accepted = "a static sequence of (H, W) pairs of positive ints, one per level"
    name = f"{OP}: spatial_shapes"
    if hasattr(spatial_shapes, "shape") and len(spatial_shapes.shape) != 2:
        raise ValueError(f"{name} must be {accepted}, got an array of shape "
                         f"{tuple(spatial_shapes.shape)}")
    try:
        entries = list(spatial_shapes)
    except TypeError:
        raise TypeError(f"{name} must be {accepted}, got {spatial_shapes!r}") from None
    if not entries:
        raise ValueError(f"{name} must be {accepted}, got no level: {spatial_shapes!r}")
    levels: list[tuple[int, int]] = []
    for entry in entries:
        try:
            pair = list(entry)
        except TypeError:
            raise TypeError(f"{name} must be {accepted}, got {spatial_shapes!r} (entry "
                            f"{entry!r} is no pair)") from None
        if len(pair) != 2:
            raise ValueError(f"{name} must be {accepted}, got {spatial_shapes!r} (entry "
                             f"{entry!r} has {len(pair)} sizes)")
        h, w = (checks.as_int(name, v, spatial_shapes, accepted) for v in pair)
        if h < 1 or w < 1:
            raise ValueError(f"{name} must be {accepted}, got {spatial_shapes!r} (level "
                             f"{len(levels)} is {h} x {w})")
        levels.append((h, w))
    return tuple(levels)


def _points(points_per_level, levels: int) -> tuple:
    accepted = f"None or a sequence of {levels} positive ints (one per level)"
    name = f"{OP}: points_per_level"
    if not isinstance(points_per_level, (tuple, list)):
        raise TypeError(f"{name} must be {accepted}, got {points_per_level!r}")
    points = tuple(checks.as_int(name, p, points_per_level, accepted)
                   for p in points_per_level)
    if len(points) != levels:
        raise ValueError(f"{name} must be {accepted} (spatial_shapes names {levels}), got "
                         f"{points_per_level!r}")
    if min(points) < 1:
        raise ValueError(f"{name} must be {accepted}, got {points_per_level!r}")
    return points


@memoized_plan
def plan_multi_scale_deformable_attention(
        value_shape: Sequence[int], value_dtype: str, spatial_shapes,
        locations_shape: Sequence[int], locations_dtype: str,
        weights_shape: Sequence[int], weights_dtype: str, mode: str,
        points_per_level) -> DeformablePlan:
    """The checks of a call (every shape, dtype and argument; ValueError or TypeError
    naming the argument and its value) and its plan."""
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"{OP}: mode must be 'bilinear' (grid_sample's bilinear reading, "
                         f"Deformable DETR's) or 'nearest' (RT-DETRv2's discrete sampling), "
                         f"got {mode!r}")
    named = (("value", value_dtype), ("sampling_locations", locations_dtype),
             ("attention_weights", weights_dtype))
    for name, dtype in named:
        if not dtypes.is_floating(dtype):
            raise TypeError(f"{OP}: {name} must have a floating dtype "
                            f"({', '.join(dtypes.FLOATING)}), got {dtype}")
    if len({dtype for _, dtype in named}) != 1:
        raise TypeError(f"{OP}: value, sampling_locations and attention_weights must have "
                        f"one dtype, got {value_dtype}, {locations_dtype} and "
                        f"{weights_dtype}")
    levels = _levels(spatial_shapes)
    value_shape, locations_shape = tuple(value_shape), tuple(locations_shape)
    weights_shape = tuple(weights_shape)
    flat = points_per_level is not None
    if len(value_shape) != 4:
        raise ValueError(f"{OP}: value must be [B, S, heads, head_dim], got shape "
                         f"{value_shape}")
    loc_layout = "[B, Q, heads, sum(points_per_level), 2]" if flat else \
        "[B, Q, heads, L, P, 2]"
    weights_layout = "[B, Q, heads, sum(points_per_level)]" if flat else \
        "[B, Q, heads, L, P]"
    if len(locations_shape) != (5 if flat else 6):
        raise ValueError(f"{OP}: sampling_locations must be {loc_layout}, got shape "
                         f"{locations_shape}")
    if locations_shape[-1] != 2:
        raise ValueError(f"{OP}: sampling_locations' last axis must hold (x, y), size 2, "
                         f"got shape {locations_shape}")
    if len(weights_shape) != (4 if flat else 5):
        raise ValueError(f"{OP}: attention_weights must be {weights_layout}, got shape "
                         f"{weights_shape}")
    batch, tokens, heads, head_dim = value_shape
    areas = sum(h * w for h, w in levels)
    if areas != tokens:
        raise ValueError(f"{OP}: spatial_shapes {levels} cover {areas} positions (sum of "
                         f"H * W), but value of shape {value_shape} has S = {tokens}")
    if flat:
        points = _points(points_per_level, len(levels))
        if locations_shape[3] != sum(points):
            raise ValueError(f"{OP}: sampling_locations must be {loc_layout}: "
                             f"points_per_level {points} sum to {sum(points)}, got shape "
                             f"{locations_shape}")
    else:
        if locations_shape[3] != len(levels):
            raise ValueError(f"{OP}: sampling_locations must be {loc_layout} with L = "
                             f"{len(levels)} levels (spatial_shapes {levels}), got shape "
                             f"{locations_shape}")
        points = (locations_shape[4],) * len(levels)
    for axis, what in ((0, "B"), (1, "Q"), (2, "heads"), (3, "L" if not flat else
                                                         "sum(points_per_level)"),
                       (4, "P")):
        if axis >= len(weights_shape):
            break
        if weights_shape[axis] != locations_shape[axis]:
            raise ValueError(f"{OP}: attention_weights must be {weights_layout} as "
                             f"sampling_locations {locations_shape}: {what} differs, got "
                             f"shape {weights_shape}")
    if locations_shape[2] != heads:
        raise ValueError(f"{OP}: value of shape {value_shape} has {heads} heads, "
                         f"sampling_locations of shape {locations_shape} has "
                         f"{locations_shape[2]}")
    if locations_shape[0] != batch:
        raise ValueError(f"{OP}: value of shape {value_shape} has batch {batch}, "
                         f"sampling_locations of shape {locations_shape} has "
                         f"{locations_shape[0]}")
    queries = locations_shape[1]
    taps = 4 if mode == "bilinear" else 1
    if batch * tokens * heads + 1 > dtypes.INT32_MAX or \
            batch * queries * heads * sum(points) * taps > dtypes.INT32_MAX:
        raise ValueError(f"{OP}: value of shape {value_shape} read at sampling_locations of "
                         f"shape {locations_shape} has more positions than int32 indexes")
    return DeformablePlan(batch, queries, heads, head_dim, levels, points, flat, mode,
                          value_dtype)


# --- deform_conv2d --------------------------------------------------------------------------

CONV = "deform_conv2d"


@dataclasses.dataclass(frozen=True)
class DeformConvPlan:
    """One ``deform_conv2d`` call: ``[batch, channels, height, width]`` maps read at every
    output position ``out`` (height, width) and tap of a ``kernel`` (height, width) window,
    moved by the offsets, in ``offset_groups`` groups of channels, then contracted with a
    ``[out_channels, channels / weight_groups, *kernel]`` weight in ``weight_groups`` groups.
    ``stride``, ``padding`` and ``dilation`` are (height, width) pairs; ``bias`` and
    ``mask`` say whether the call has them."""
    batch: int
    channels: int
    height: int
    width: int
    out_channels: int
    kernel: tuple
    stride: tuple
    padding: tuple
    dilation: tuple
    offset_groups: int
    weight_groups: int
    out: tuple
    bias: bool
    mask: bool
    dtype: str

    @property
    def taps(self) -> int:
        """The window's taps, ``kh * kw``."""
        return self.kernel[0] * self.kernel[1]

    @property
    def compute_dtype(self) -> str:
        """Half precision computes in float32 and rounds once."""
        return dtypes.compute_dtype(self.dtype)

    @property
    def out_shape(self) -> tuple:
        return (self.batch, self.out_channels) + self.out


def _conv_pair(value, name: str, least: int) -> tuple:
    """torch's ``_pair``: an int for both axes, or a pair (height, width), each at least
    ``least``."""
    accepted = f"an int >= {least} or a pair of them (height, width)"
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{CONV}: {name} must be {accepted}, got {value!r}")
        pair = tuple(checks.as_int(f"{CONV}: {name}", v, value, accepted) for v in value)
    else:
        pair = (checks.as_int(f"{CONV}: {name}", value, value, accepted),) * 2
    if min(pair) < least:
        raise ValueError(f"{CONV}: {name} must be {accepted}, got {value!r}")
    return pair


@memoized_plan
def plan_deform_conv2d(input_shape: Sequence[int], input_dtype: str,
                       offset_shape: Sequence[int], offset_dtype: str,
                       weight_shape: Sequence[int], weight_dtype: str,
                       bias_shape: Sequence[int] | None, bias_dtype: str | None,
                       mask_shape: Sequence[int] | None, mask_dtype: str | None,
                       stride, padding, dilation) -> DeformConvPlan:
    """torchvision's checks (``deform_conv2d`` and its CPU kernel's ``TORCH_CHECK``\\ s),
    raised as ValueError or TypeError naming the argument and its value, and the plan.
    A ``None`` shape is an array the call does not give (no bias, no mask)."""
    stride = _conv_pair(stride, "stride", 1)
    padding = _conv_pair(padding, "padding", 0)
    dilation = _conv_pair(dilation, "dilation", 1)
    named = [("input", input_dtype), ("offset", offset_dtype), ("weight", weight_dtype)]
    named += [(n, d) for n, d in (("bias", bias_dtype), ("mask", mask_dtype)) if d is not None]
    for name, dtype in named:
        if not dtypes.is_floating(dtype):
            raise TypeError(f"{CONV}: {name} must have a floating dtype "
                            f"({', '.join(dtypes.FLOATING)}), got {dtype}")
    if len({dtype for _, dtype in named}) != 1:
        raise TypeError(f"{CONV}: {', '.join(n for n, _ in named)} must have one dtype, got "
                        f"{', '.join(f'{n} {d}' for n, d in named)}")
    input_shape, offset_shape = tuple(input_shape), tuple(offset_shape)
    weight_shape = tuple(weight_shape)
    for name, shape, layout in (
            ("input", input_shape, "[B, C, H, W]"),
            ("offset", offset_shape, "[B, 2 * offset_groups * kh * kw, out_h, out_w]"),
            ("weight", weight_shape, "[out_channels, C / groups, kh, kw]"),
            ("mask", mask_shape, "[B, offset_groups * kh * kw, out_h, out_w]")):
        if shape is not None and len(shape) != 4:
            raise ValueError(f"{CONV}: {name} must be 4-D {layout}, got shape {tuple(shape)}")
    batch, channels, height, width = input_shape
    out_channels, per_group, kh, kw = weight_shape
    if kh < 1 or kw < 1:
        raise ValueError(f"{CONV}: weight must have a kernel of at least 1 x 1, got shape "
                         f"{weight_shape}")
    if per_group < 1 or channels % per_group:
        raise ValueError(f"{CONV}: weight of shape {weight_shape} takes {per_group} channels "
                         f"per group, which must divide input's {channels} (input of shape "
                         f"{input_shape})")
    weight_groups = channels // per_group
    if out_channels % weight_groups:
        raise ValueError(f"{CONV}: weight of shape {weight_shape} has {out_channels} output "
                         f"channels, which its {weight_groups} groups (input's {channels} "
                         f"channels / {per_group}) must divide")
    taps = kh * kw
    offset_groups = offset_shape[1] // (2 * taps)
    if offset_groups == 0 or offset_shape[1] != offset_groups * 2 * taps:
        raise ValueError(f"{CONV}: offset must have 2 * offset_groups * kh * kw channels, a "
                         f"positive multiple of {2 * taps} for the {kh} x {kw} kernel, got "
                         f"shape {offset_shape}")
    if channels % offset_groups:
        raise ValueError(f"{CONV}: offset of shape {offset_shape} has {offset_groups} groups, "
                         f"which must divide input's {channels} channels (input of shape "
                         f"{input_shape})")
    out = tuple((size + 2 * p - (d * (k - 1) + 1)) // s + 1 for size, p, d, k, s in zip(
        (height, width), padding, dilation, (kh, kw), stride))
    if min(out) < 1:
        raise ValueError(f"{CONV}: the output would be {out[0]} x {out[1]}: input of shape "
                         f"{input_shape} is smaller than the {kh} x {kw} kernel's reach "
                         f"(dilation {dilation}) after padding {padding}")
    expected = (batch, 2 * offset_groups * taps) + out
    if offset_shape != expected:
        raise ValueError(f"{CONV}: offset must have shape {expected} ([B, 2 * offset_groups "
                         f"* kh * kw, out_h, out_w]), got {offset_shape}")
    if mask_shape is not None:
        expected = (batch, offset_groups * taps) + out
        if tuple(mask_shape) != expected:
            raise ValueError(f"{CONV}: mask must have shape {expected} ([B, offset_groups * "
                             f"kh * kw, out_h, out_w], offset_groups = {offset_groups}), got "
                             f"{tuple(mask_shape)}")
    if bias_shape is not None and tuple(bias_shape) != (out_channels,):
        raise ValueError(f"{CONV}: bias must have shape ({out_channels},) (weight's output "
                         f"channels), got {tuple(bias_shape)}")
    if batch * offset_groups * height * width > dtypes.INT32_MAX or \
            batch * offset_groups * taps * out[0] * out[1] * 4 > dtypes.INT32_MAX:
        raise ValueError(f"{CONV}: input of shape {input_shape} read at offset of shape "
                         f"{offset_shape} has more positions than int32 indexes")
    return DeformConvPlan(batch, channels, height, width, out_channels, (kh, kw), stride,
                          padding, dilation, offset_groups, weight_groups, out,
                          bias_shape is not None, mask_shape is not None, input_dtype)
