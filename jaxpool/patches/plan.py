"""The arithmetic of ``unfold`` and ``fold`` (im2col and col2im), in plain Python: the
argument checks and the blocks that fix the output, as torch computes them."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from jaxpool.core import checks
from jaxpool.core.memo import hash_once, memoized_plan

# --- the plan: plain-Python arithmetic on static shapes ------------------------------------

@hash_once
@dataclass(frozen=True)
class FoldPlan:
    """The blocks of one unfold or fold: the image ``[N, C, H, W]`` and its columns
    ``[N, C*kh*kw, bh*bw]``; ``batched`` False drops ``N`` from both."""

    batched: bool
    batch: int
    channels: int
    image: tuple[int, int]
    kernel: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[int, int]
    stride: tuple[int, int]
    blocks: tuple[int, ...]

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

    def tap_offsets(self) -> list[tuple[int, int]]:
        """Each tap's first row and column in the padded image, taps row-major."""
        (kh, kw), (dh, dw) = self.kernel, self.dilation
        return [(i * dh, j * dw) for i in range(kh) for j in range(kw)]

    def tap_placement(self, offset: tuple[int, int]) -> list[tuple[int, int, int]]:
        """``lax.pad``'s (low, high, interior) per spatial axis that puts a tap's
        ``[bh, bw]`` values at their image positions: negative ends crop the rows and
        columns that fall in the padding."""
        config = []
        for start, n, p, s, b in zip(offset, self.image, self.padding, self.stride, self.blocks):
            low = start - p
            high = n - (low + (b - 1) * s + 1)
            config.append((low, high, s - 1))
        return config


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
    return FoldPlan(batched, shape[0] if batched else 1, channels, (height, width), kernel,
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
    return FoldPlan(batched, shape[0] if batched else 1, features // taps, image, kernel,
                    dilations, pads, strides, blocks)
