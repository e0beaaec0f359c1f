"""The arithmetic of ``unfold`` and ``fold`` (im2col and col2im), in plain Python: the
argument checks, the blocks that fix the output, as torch computes them, and the tap groups
the kernel copies or adds in one pass each."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from jaxpool.core import checks
from jaxpool.core.memo import hash_once, memoized_plan

# --- the plan: plain-Python arithmetic on static shapes ------------------------------------

@dataclass(frozen=True)
class TapGroup:
    """Taps ``first .. first + count - 1`` of one axis that read the same rows of the phase
    view: tap ``u`` of block ``i`` reads padded position ``i*s + u*d = (i + shift)*s +
    phase + (u - first)*d``, so the group is one slice, rows ``shift .. shift + b - 1``
    and phases ``phase, phase + d, ...``, of the padded axis cut into rows of ``s``."""

    shift: int
    first: int
    count: int
    phase: int


@dataclass(frozen=True)
class AxisPhases:
    """One axis cut into ``rows`` rows of ``stride`` phases: the image padded by ``low``
    before and ``high`` after (negative: cropped) to ``rows * stride``, and its taps in
    groups, one pass each (``TapGroup``), in the taps' order."""

    rows: int
    low: int
    high: int
    groups: tuple[TapGroup, ...]


def axis_phases(extent: int, kernel: int, dilation: int, padding: int, stride: int,
                blocks: int) -> AxisPhases:
    """The taps grouped by ``(u*d) // s``: consecutive taps, each group's phases distinct,
    so a pixel takes at most one entry from a group and the groups in order are the taps in
    order at each pixel (torch's order of summation). Windows that do not overlap
    (``(k - 1)*d < s``) make one group: the axis is then a reshape and a (strided) slice."""
    groups: list[TapGroup] = []
    for tap in range(kernel):
        shift, phase = divmod(tap * dilation, stride)
        if groups and groups[-1].shift == shift:
            last = groups[-1]
            groups[-1] = TapGroup(shift, last.first, last.count + 1, last.phase)
        else:
            groups.append(TapGroup(shift, tap, 1, phase))
    rows = blocks + groups[-1].shift
    return AxisPhases(rows, padding, rows * stride - extent - padding, tuple(groups))


STRATEGIES = ("blocks", "phases")


def choose_strategy(axes: tuple[AxisPhases, AxisPhases]) -> str:
    """The case the plan is: both strategies are the same passes, one per pair of tap
    groups (``axis_phases``), and neither reads :mod:`jaxpool.strategy_table` (no other
    strategy was measured on a GPU).

    - ``blocks``: no axis's windows overlap (``(k - 1)*d < s``: a ViT patchify, TNT's 4 x 4
      pixels): one group per axis, so unfold is a pad or crop, a reshape, a transpose (and
      a strided slice where the windows leave gaps), and fold its transpose. One slice per
      tap (the rule this replaced) made the 16 x 16 patchify's gradient 256 padded copies
      of the image, and its derivative programs grow with the taps (BENCHMARKS.md, "Patches
      and boxes", cells ``patchify-16`` and ``tnt-unfold``).
    - ``phases``: overlapping windows, at most ``ceil(((k - 1)*d + 1) / s)`` groups per axis
      (T2T's 7/4/2: 2 x 2 passes for 49 taps; VOLO's 3/2/1: 2 x 2 for 9), against one pass
      per tap before (cells ``t2t-unfold-7``, ``t2t-unfold-3``, ``volo-unfold``,
      ``volo-fold``). At stride 1 the groups are the taps; the slices of the cut axis still
      beat the strided ones there (cells ``volo-s1-unfold``, ``volo-s1-fold``).
    """
    return "blocks" if all(len(axis.groups) == 1 for axis in axes) else "phases"


@hash_once
@dataclass(frozen=True)
class FoldPlan:
    """The blocks of one unfold or fold: the image ``[N, C, H, W]`` and its columns
    ``[N, C*kh*kw, bh*bw]``; ``batched`` False drops ``N`` from both. ``phases`` cuts
    each padded axis into rows of ``stride`` and groups its taps (``axis_phases``);
    ``strategy`` names the case (``choose_strategy``)."""

    batched: bool
    batch: int
    channels: int
    image: tuple[int, int]
    kernel: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[int, int]
    stride: tuple[int, int]
    blocks: tuple[int, int]
    phases: tuple[AxisPhases, AxisPhases]
    strategy: str

    @property
    def taps(self) -> int:
        return self.kernel[0] * self.kernel[1]

    @property
    def image_shape(self) -> tuple[int, ...]:
        shape = (self.batch, self.channels) + self.image
        return shape if self.batched else shape[1:]

    @property
    def columns_shape(self) -> tuple[int, ...]:
        shape = (self.batch, self.channels * self.taps, math.prod(self.blocks))
        return shape if self.batched else shape[1:]


def _fold_plan(batched, batch, channels, image, kernel, dilations, pads, strides,
               blocks) -> FoldPlan:
    height, width = (axis_phases(*args) for args in zip(image, kernel, dilations, pads,
                                                         strides, blocks))
    axes = (height, width)
    return FoldPlan(batched, batch, channels, image, kernel, dilations, pads, strides, blocks,
                    axes, choose_strategy(axes))


def _blocks(extent: int, kernel: int, dilation: int, padding: int, stride: int) -> int:
    """torch's count of sliding blocks along one axis (floor division, as its ``div_rtn``)."""
    return (extent + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _window_arguments(kernel_size, dilation, padding, stride):
    # torch reads each as a pair and repeats only a bare int, never a 1-tuple.
    pair = functools.partial(checks.int_tuple, ndim=2, repeat_single=False)
    return (pair("kernel_size", kernel_size, minimum=1), pair("dilation", dilation, minimum=1),
            pair("padding", padding, minimum=0), pair("stride", stride, minimum=1))


def _arguments_text(kernel, dilation, padding, stride) -> str:
    return f"kernel_size={kernel}, dilation={dilation}, padding={padding}, stride={stride}"


@memoized_plan
def plan_unfold(shape, dtype, kernel_size, dilation=1, padding=0, stride=1) -> FoldPlan:
    """Check ``unfold``'s arguments against an input of ``shape`` and ``dtype``."""
    kernel, dilations, pads, strides = _window_arguments(kernel_size, dilation, padding, stride)
    shape = tuple(shape)
    if len(shape) not in (3, 4) or 0 in shape[-3:]:
        raise ValueError(f"unfold expects input of rank 3 [C, H, W] or rank 4 [N, C, H, W] "
                         f"with non-zero C, H and W (only N may be 0), got shape {shape}")
    checks.check_dtype("unfold", dtype)
    batched = len(shape) == 4
    channels, height, width = shape[-3:]
    blocks = tuple(_blocks(*args) for args in zip((height, width), kernel, dilations, pads,
                                                   strides))
    if min(blocks) < 1:
        raise ValueError(f"unfold: input of spatial size {(height, width)} with "
                         f"{_arguments_text(kernel, dilations, pads, strides)} has "
                         f"{blocks} sliding blocks; each axis needs at least one: the dilated "
                         f"kernel must fit in the padded input")
    return _fold_plan(batched, shape[0] if batched else 1, channels, (height, width), kernel,
                      dilations, pads, strides, blocks)


@memoized_plan
def plan_fold(shape, dtype, output_size, kernel_size, dilation=1, padding=0,
              stride=1) -> FoldPlan:
    """Check ``fold``'s arguments against an input of ``shape`` and ``dtype``."""
    kernel, dilations, pads, strides = _window_arguments(kernel_size, dilation, padding, stride)
    image = checks.int_tuple("output_size", output_size, 2, minimum=1, repeat_single=False)
    shape = tuple(shape)
    if len(shape) not in (2, 3) or 0 in shape[-2:]:
        raise ValueError(f"fold expects input of rank 2 [C*kh*kw, L] or rank 3 "
                         f"[N, C*kh*kw, L] with non-zero C*kh*kw and L (only N may be 0), "
                         f"got shape {shape}")
    checks.check_dtype("fold", dtype)
    batched = len(shape) == 3
    features, length = shape[-2:]
    taps = kernel[0] * kernel[1]
    if features % taps:
        raise ValueError(f"fold: input's dimension {len(shape) - 2} ({features}) must be "
                         f"divisible by the product of kernel_size={kernel} ({taps}), got "
                         f"input of shape {shape}")
    blocks = tuple(_blocks(*args) for args in zip(image, kernel, dilations, pads, strides))
    if min(blocks) < 1 or blocks[0] * blocks[1] != length:
        raise ValueError(f"fold: output_size={output_size!r} with "
                         f"{_arguments_text(kernel, dilations, pads, strides)} gives "
                         f"{blocks[0]} * {blocks[1]} sliding blocks, which must be positive "
                         f"and equal input's last dimension L={length} (input of shape "
                         f"{shape})")
    return _fold_plan(batched, shape[0] if batched else 1, features // taps, image, kernel,
                      dilations, pads, strides, blocks)
