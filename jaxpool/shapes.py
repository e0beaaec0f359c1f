"""Shape rules of every op, in plain Python: no tracing, no arrays.

Forward: each function takes an input shape and the op's arguments (the same names and
defaults as the op) and returns the output shape, raising the op's own errors. Backward, as
the catalog defines it: ``output_size`` and the channel count can be read from an output
shape, the input's spatial extents cannot (every input extent maps to the requested output).

Example:
  >>> jaxpool.shapes.max_pool2d((8, 64, 112, 112), 3, 2, 1)
  (8, 64, 56, 56)
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

from jaxpool.core import checks
from jaxpool.pooling.functions import OutputSize, Size
from jaxpool.pooling.plan import (PoolPlan, plan_adaptive, plan_avg_pool, plan_global, plan_lp_pool,
                          plan_max_pool)
from jaxpool.padding.plan import plan_pad
from jaxpool.unpooling.plan import plan_max_unpool

Shape = Sequence[int]
"""A shape: a tuple, list or ``torch.Size`` of ints, such as ``x.shape`` (not ``x``)."""


def _input(op: str, shape: Shape, name: str = "input_shape") -> tuple[int, ...]:
    return checks.check_shape(f"jaxpool.shapes.{op}", shape, name)


def avg_pool1d(input_shape: Shape, kernel_size: Size, stride: Size | None = None,
               padding: Size = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None, *, channels_last: bool = False
               ) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.avg_pool1d`.

    Args:
      input_shape: ``[B, C, L]`` or ``[C, L]`` (``[B, L, C]`` or ``[L, C]`` with
        ``channels_last``).
      kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, channels_last:
        as :func:`jaxpool.avg_pool1d`.

    Returns:
      The output shape, same layout: L becomes
      ``floor((L + 2*padding - kernel_size) / stride) + 1`` (ceil with ``ceil_mode``).
    """
    return plan_avg_pool("avg_pool1d", _input("avg_pool1d", input_shape), None, 1, kernel_size,
                         stride, padding, ceil_mode, count_include_pad, divisor_override,
                         channels_last).output_shape


def avg_pool2d(input_shape: Shape, kernel_size: Size, stride: Size | None = None,
               padding: Size = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None, *, channels_last: bool = False
               ) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.avg_pool2d`.

    Args:
      input_shape: ``[B, C, H, W]`` or ``[C, H, W]`` (``[B, H, W, C]`` or ``[H, W, C]`` with
        ``channels_last``).
      kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, channels_last:
        as :func:`jaxpool.avg_pool2d`.

    Returns:
      The output shape, same layout: each of H, W becomes
      ``floor((n + 2*padding - kernel_size) / stride) + 1`` (ceil with ``ceil_mode``).
    """
    return plan_avg_pool("avg_pool2d", _input("avg_pool2d", input_shape), None, 2, kernel_size,
                         stride, padding, ceil_mode, count_include_pad, divisor_override,
                         channels_last).output_shape


def avg_pool3d(input_shape: Shape, kernel_size: Size, stride: Size | None = None,
               padding: Size = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None, *, channels_last: bool = False
               ) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.avg_pool3d`.

    Args:
      input_shape: ``[B, C, D, H, W]`` or ``[C, D, H, W]`` (channels last with
        ``channels_last``).
      kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, channels_last:
        as :func:`jaxpool.avg_pool3d`.

    Returns:
      The output shape, same layout: each of D, H, W becomes
      ``floor((n + 2*padding - kernel_size) / stride) + 1`` (ceil with ``ceil_mode``).
    """
    return plan_avg_pool("avg_pool3d", _input("avg_pool3d", input_shape), None, 3, kernel_size,
                         stride, padding, ceil_mode, count_include_pad, divisor_override,
                         channels_last).output_shape


def adaptive_avg_pool1d(input_shape: Shape, output_size: OutputSize, *,
                        channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.adaptive_avg_pool1d`.

    Args:
      input_shape: ``[B, C, L]`` or ``[C, L]`` (``[B, L, C]`` or ``[L, C]`` with
        ``channels_last``).
      output_size, channels_last: as :func:`jaxpool.adaptive_avg_pool1d`.

    Returns:
      The output shape, same layout, with L replaced by ``output_size``.
    """
    return _adaptive("adaptive_avg_pool1d", 1, input_shape, output_size, channels_last)


def adaptive_avg_pool2d(input_shape: Shape, output_size: OutputSize, *,
                        channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.adaptive_avg_pool2d`.

    Args:
      input_shape: ``[B, C, H, W]`` or ``[C, H, W]`` (``[B, H, W, C]`` or ``[H, W, C]`` with
        ``channels_last``).
      output_size, channels_last: as :func:`jaxpool.adaptive_avg_pool2d`.

    Returns:
      The output shape, same layout, with H, W replaced by ``output_size`` (a None entry
      keeps that extent).
    """
    return _adaptive("adaptive_avg_pool2d", 2, input_shape, output_size, channels_last)


def adaptive_avg_pool3d(input_shape: Shape, output_size: OutputSize, *,
                        channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.adaptive_avg_pool3d`.

    Args:
      input_shape: ``[B, C, D, H, W]`` or ``[C, D, H, W]`` (channels last with
        ``channels_last``).
      output_size, channels_last: as :func:`jaxpool.adaptive_avg_pool3d`.

    Returns:
      The output shape, same layout, with D, H, W replaced by ``output_size`` (a None entry
      keeps that extent).
    """
    return _adaptive("adaptive_avg_pool3d", 3, input_shape, output_size, channels_last)


def max_pool1d(input_shape: Shape, kernel_size: Size, stride: Size | None = None,
               padding: Size = 0, dilation: Size = 1, ceil_mode: bool = False, *,
               channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.max_pool1d` (its indices have the same shape).

    Args:
      input_shape: ``[B, C, L]`` or ``[C, L]`` (``[B, L, C]`` or ``[L, C]`` with
        ``channels_last``).
      kernel_size, stride, padding, dilation, ceil_mode, channels_last: as
        :func:`jaxpool.max_pool1d`.

    Returns:
      The output shape, same layout: L becomes
      ``floor((L + 2*padding - dilation*(kernel_size-1) - 1) / stride) + 1`` (ceil with
      ``ceil_mode``).
    """
    return plan_max_pool("max_pool1d", _input("max_pool1d", input_shape), None, 1, kernel_size,
                         stride, padding, dilation, ceil_mode, channels_last).output_shape


def max_pool2d(input_shape: Shape, kernel_size: Size, stride: Size | None = None,
               padding: Size = 0, dilation: Size = 1, ceil_mode: bool = False, *,
               channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.max_pool2d` (its indices have the same shape).

    Args:
      input_shape: ``[B, C, H, W]`` or ``[C, H, W]`` (``[B, H, W, C]`` or ``[H, W, C]`` with
        ``channels_last``).
      kernel_size, stride, padding, dilation, ceil_mode, channels_last: as
        :func:`jaxpool.max_pool2d`.

    Returns:
      The output shape, same layout: each of H, W becomes
      ``floor((n + 2*padding - dilation*(kernel_size-1) - 1) / stride) + 1`` (ceil with
      ``ceil_mode``).
    """
    return plan_max_pool("max_pool2d", _input("max_pool2d", input_shape), None, 2, kernel_size,
                         stride, padding, dilation, ceil_mode, channels_last).output_shape


def max_pool3d(input_shape: Shape, kernel_size: Size, stride: Size | None = None,
               padding: Size = 0, dilation: Size = 1, ceil_mode: bool = False, *,
               channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.max_pool3d` (its indices have the same shape).

    Args:
      input_shape: ``[B, C, D, H, W]`` or ``[C, D, H, W]`` (channels last with
        ``channels_last``).
      kernel_size, stride, padding, dilation, ceil_mode, channels_last: as
        :func:`jaxpool.max_pool3d`.

    Returns:
      The output shape, same layout: each of D, H, W becomes
      ``floor((n + 2*padding - dilation*(kernel_size-1) - 1) / stride) + 1`` (ceil with
      ``ceil_mode``).
    """
    return plan_max_pool("max_pool3d", _input("max_pool3d", input_shape), None, 3, kernel_size,
                         stride, padding, dilation, ceil_mode, channels_last).output_shape


def adaptive_max_pool1d(input_shape: Shape, output_size: OutputSize, *,
                        channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.adaptive_max_pool1d` (its indices have the same shape).

    Args:
      input_shape: ``[B, C, L]`` or ``[C, L]`` (``[B, L, C]`` or ``[L, C]`` with
        ``channels_last``).
      output_size, channels_last: as :func:`jaxpool.adaptive_max_pool1d`.

    Returns:
      The output shape, same layout, with L replaced by ``output_size``.
    """
    return _adaptive("adaptive_max_pool1d", 1, input_shape, output_size, channels_last)


def adaptive_max_pool2d(input_shape: Shape, output_size: OutputSize, *,
                        channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.adaptive_max_pool2d` (its indices have the same shape).

    Args:
      input_shape: ``[B, C, H, W]`` or ``[C, H, W]`` (``[B, H, W, C]`` or ``[H, W, C]`` with
        ``channels_last``).
      output_size, channels_last: as :func:`jaxpool.adaptive_max_pool2d`.

    Returns:
      The output shape, same layout, with H, W replaced by ``output_size`` (a None entry
      keeps that extent).
    """
    return _adaptive("adaptive_max_pool2d", 2, input_shape, output_size, channels_last)


def adaptive_max_pool3d(input_shape: Shape, output_size: OutputSize, *,
                        channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.adaptive_max_pool3d` (its indices have the same shape).

    Args:
      input_shape: ``[B, C, D, H, W]`` or ``[C, D, H, W]`` (channels last with
        ``channels_last``).
      output_size, channels_last: as :func:`jaxpool.adaptive_max_pool3d`.

    Returns:
      The output shape, same layout, with D, H, W replaced by ``output_size`` (a None entry
      keeps that extent).
    """
    return _adaptive("adaptive_max_pool3d", 3, input_shape, output_size, channels_last)


def lp_pool1d(input_shape: Shape, norm_type: float, kernel_size: Size,
              stride: Size | None = None, ceil_mode: bool = False, *,
              channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.lp_pool1d`.

    Args:
      input_shape: ``[B, C, L]`` or ``[C, L]`` (``[B, L, C]`` or ``[L, C]`` with
        ``channels_last``).
      norm_type, kernel_size, stride, ceil_mode, channels_last: as :func:`jaxpool.lp_pool1d`.

    Returns:
      The output shape, same layout: that of :func:`avg_pool1d` with no padding.
    """
    return plan_lp_pool("lp_pool1d", _input("lp_pool1d", input_shape), None, 1, norm_type,
                        kernel_size, stride, ceil_mode, channels_last).output_shape


def lp_pool2d(input_shape: Shape, norm_type: float, kernel_size: Size,
              stride: Size | None = None, ceil_mode: bool = False, *,
              channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.lp_pool2d`.

    Args:
      input_shape: ``[B, C, H, W]`` or ``[C, H, W]`` (``[B, H, W, C]`` or ``[H, W, C]`` with
        ``channels_last``).
      norm_type, kernel_size, stride, ceil_mode, channels_last: as :func:`jaxpool.lp_pool2d`.

    Returns:
      The output shape, same layout: that of :func:`avg_pool2d` with no padding.
    """
    return plan_lp_pool("lp_pool2d", _input("lp_pool2d", input_shape), None, 2, norm_type,
                        kernel_size, stride, ceil_mode, channels_last).output_shape


def lp_pool3d(input_shape: Shape, norm_type: float, kernel_size: Size,
              stride: Size | None = None, ceil_mode: bool = False, *,
              channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.lp_pool3d`.

    Args:
      input_shape: ``[B, C, D, H, W]`` or ``[C, D, H, W]`` (channels last with
        ``channels_last``).
      norm_type, kernel_size, stride, ceil_mode, channels_last: as :func:`jaxpool.lp_pool3d`.

    Returns:
      The output shape, same layout: that of :func:`avg_pool3d` with no padding.
    """
    return plan_lp_pool("lp_pool3d", _input("lp_pool3d", input_shape), None, 3, norm_type,
                        kernel_size, stride, ceil_mode, channels_last).output_shape


def global_avg_pool(input_shape: Shape, *, channels_last: bool = False) -> tuple[int, int]:
    """Output shape of :func:`jaxpool.global_avg_pool`.

    Args:
      input_shape: ``[B, C, H, W]`` (``[B, H, W, C]`` with ``channels_last``).
      channels_last: as :func:`jaxpool.global_avg_pool`.

    Returns:
      ``(B, C)``.
    """
    return _global("global_avg_pool", input_shape, channels_last)


def global_max_pool(input_shape: Shape, *, channels_last: bool = False) -> tuple[int, int]:
    """Output shape of :func:`jaxpool.global_max_pool`.

    Args:
      input_shape: ``[B, C, H, W]`` (``[B, H, W, C]`` with ``channels_last``).
      channels_last: as :func:`jaxpool.global_max_pool`.

    Returns:
      ``(B, C)``.
    """
    return _global("global_max_pool", input_shape, channels_last)


avg_pool = avg_pool2d
adaptive_avg_pool = adaptive_avg_pool2d
max_pool = max_pool2d
adaptive_max_pool = adaptive_max_pool2d
lp_pool = lp_pool2d


def _adaptive(op: str, ndim: int, input_shape: Shape, output_size: OutputSize,
              channels_last: bool) -> tuple[int, ...]:
    # The average and max ops share their windows, so their shapes too.
    return plan_adaptive(op, _input(op, input_shape), None, ndim, output_size,
                         channels_last).output_shape


def _global(op: str, input_shape: Shape, channels_last: bool) -> tuple[int, int]:
    plan: PoolPlan = plan_global(op, _input(op, input_shape), None, channels_last)
    batch, channels = (n for axis, n in enumerate(plan.input_shape)
                       if axis not in plan.spatial_axes)
    return batch, channels


# --- backward inference ------------------------------------------------------------------

def _split(op: str, shape: Shape, ndim: int, channels_last: bool
           ) -> tuple[bool, tuple[int, ...], int]:
    shape = _input(op, shape, "shape" if op == "channels" else "output_shape")
    batched, spatial, channel_axis = checks.check_input(
        op, shape, None, ndim, checks.check_channels_last(channels_last))
    return batched, spatial, shape[channel_axis]


def adaptive_output_size(output_shape: Shape, *, ndim: int = 2, channels_last: bool = False
                         ) -> tuple[int, ...]:
    """The ``output_size`` that produced ``output_shape`` (an adaptive op's output).

    Args:
      output_shape: the adaptive op's output shape, in the layout ``channels_last`` names.
      ndim: the number of spatial axes (1, 2 or 3).
      channels_last: whether channels follow the spatial axes.

    Returns:
      The spatial extents of ``output_shape``.
    """
    _, spatial, _ = _split("adaptive_output_size", output_shape, ndim, channels_last)
    return spatial


def channels(shape: Shape, *, ndim: int = 2, channels_last: bool = False) -> int:
    """C of an input or output shape: every op preserves it, so it flows both ways.

    Args:
      shape: an input or output shape, in the layout ``channels_last`` names.
      ndim: the number of spatial axes (1, 2 or 3).
      channels_last: whether channels follow the spatial axes.

    Returns:
      The channel count.
    """
    return _split("channels", shape, ndim, channels_last)[2]


def input_shape_from_output(output_shape: Shape, input_spatial: Size | None = None, *,
                            ndim: int = 2, channels_last: bool = False) -> tuple[int, ...]:
    """Backward inference of an adaptive pool's input shape from its output shape.

    Args:
      output_shape: the adaptive op's output shape.
      input_spatial: the input's spatial extents. Required: they cannot be inferred (any
        input extent pools to the requested output).
      ndim: the number of spatial axes (1, 2 or 3).
      channels_last: whether channels follow the spatial axes.

    Returns:
      The input shape: batch and C from ``output_shape``, spatial extents from
      ``input_spatial``.
    """
    batched, spatial, c = _split("input_shape_from_output", output_shape, ndim,
                                 channels_last)
    if input_spatial is None:
        raise ValueError(
            f"input_spatial is required: the input's spatial extents are not inferable "
            f"backward from output shape {tuple(output_shape)} (every input extent pools to "
            f"{spatial}); give them from the network input or the preceding operation")
    extents = checks.int_tuple("input_spatial", input_spatial, ndim, minimum=1,
                                repeat_single=False)
    lead = (output_shape[0],) if batched else ()
    return lead + ((*extents, c) if channels_last else (c, *extents))


# --- unpooling and padding ---------------------------------------------------------------

def max_unpool1d(input_shape: Shape, kernel_size: Size, stride: Size | None = None,
                 padding: Size = 0, output_size: Sequence[int] | None = None, *,
                 channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.max_unpool1d`.

    Args:
      input_shape: the pooled values', ``[B, C, L]`` or ``[C, L]`` (``[B, L, C]`` or ``[L, C]`` with
        ``channels_last``).
      kernel_size, stride, padding, output_size, channels_last: as
        :func:`jaxpool.max_unpool1d`.

    Returns:
      The output shape, same layout: L becomes ``(L - 1)*stride - 2*padding + kernel_size``
      or ``output_size``.

    Example:
      >>> jaxpool.shapes.max_unpool1d((8, 16, 50), 2)
      (8, 16, 100)
    """
    return _unpool("max_unpool1d", 1, input_shape, kernel_size, stride, padding, output_size,
                   channels_last)


def max_unpool2d(input_shape: Shape, kernel_size: Size, stride: Size | None = None,
                 padding: Size = 0, output_size: Sequence[int] | None = None, *,
                 channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.max_unpool2d`.

    Args:
      input_shape: the pooled values', ``[B, C, H, W]`` or ``[C, H, W]`` (``[B, H, W, C]`` or ``[H, W, C]`` with
        ``channels_last``).
      kernel_size, stride, padding, output_size, channels_last: as
        :func:`jaxpool.max_unpool2d`.

    Returns:
      The output shape, same layout: each of H, W becomes
      ``(n - 1)*stride - 2*padding + kernel_size`` or ``output_size``.

    Example:
      >>> jaxpool.shapes.max_unpool2d((8, 64, 112, 112), 2)
      (8, 64, 224, 224)
    """
    return _unpool("max_unpool2d", 2, input_shape, kernel_size, stride, padding, output_size,
                   channels_last)


def max_unpool3d(input_shape: Shape, kernel_size: Size, stride: Size | None = None,
                 padding: Size = 0, output_size: Sequence[int] | None = None, *,
                 channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.max_unpool3d`.

    Args:
      input_shape: the pooled values', ``[B, C, D, H, W]`` or ``[C, D, H, W]`` (``[B, D, H, W, C]`` or ``[D, H, W, C]`` with
        ``channels_last``).
      kernel_size, stride, padding, output_size, channels_last: as
        :func:`jaxpool.max_unpool3d`.

    Returns:
      The output shape, same layout: each of D, H, W becomes
      ``(n - 1)*stride - 2*padding + kernel_size`` or ``output_size``.

    Example:
      >>> jaxpool.shapes.max_unpool3d((2, 8, 4, 16, 16), 2, output_size=(9, 32, 32))
      (2, 8, 9, 32, 32)
    """
    return _unpool("max_unpool3d", 3, input_shape, kernel_size, stride, padding, output_size,
                   channels_last)


def pad(input_shape: Shape, pad: Sequence[int], mode: str = "constant",
        value: float | None = None, *, channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.pad`.

    Args:
      input_shape: the input's shape (channels-first, or ``[..., C]`` with ``channels_last``).
      pad, mode, value, channels_last: as :func:`jaxpool.pad`.

    Returns:
      The output shape: each padded axis grows by its ``lo + hi`` (negative pads crop).

    Example:
      >>> jaxpool.shapes.pad((8, 64, 128, 128), (3, 3, 3, 3), "reflect")
      (8, 64, 134, 134)
    """
    return plan_pad(_input("pad", input_shape), pad, mode, value, channels_last).output_shape


def _unpool(op: str, ndim: int, input_shape: Shape, kernel_size: Size, stride: Size | None,
            padding: Size, output_size: Sequence[int] | None,
            channels_last: bool) -> tuple[int, ...]:
    return plan_max_unpool(op, _input(op, input_shape), None, ndim, kernel_size, stride,
                           padding, output_size, channels_last).output_shape


# --- resampling ------------------------------------------------------------------------------

from jaxpool.resampling.functions import ScaleArg, SizeArg  # noqa: E402
from jaxpool.resampling.plan import plan_interpolate, plan_pixel_shuffle  # noqa: E402


def interpolate(input_shape: Shape, size: SizeArg = None, scale_factor: ScaleArg = None,
                mode: str = "nearest", align_corners: bool | None = None,
                recompute_scale_factor: bool | None = None, antialias: bool = False, *,
                channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.interpolate`.

    Args:
      input_shape: ``[B, C, *spatial]`` with 1 to 3 spatial axes (``[B, *spatial, C]`` with
        ``channels_last``).
      size, scale_factor, mode, align_corners, recompute_scale_factor, antialias,
        channels_last: as :func:`jaxpool.interpolate`.

    Returns:
      The output shape, same layout: each spatial extent ``size``, or
      ``int(n * scale_factor)``.

    Example:
      >>> jaxpool.shapes.interpolate((8, 256, 25, 38), scale_factor=2)
      (8, 256, 50, 76)
    """
    shape = _input("interpolate", input_shape)
    sizes, _ = plan_interpolate("interpolate", shape, None, size, scale_factor, mode,
                                align_corners, recompute_scale_factor, antialias,
                                channels_last)
    first = 1 if channels_last else 2
    return shape[:first] + tuple(sizes) + shape[first + len(sizes):]


def upsample_nearest(input_shape: Shape, size: SizeArg = None, scale_factor: ScaleArg = None,
                     *, channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.upsample_nearest`.

    Args:
      input_shape: as :func:`interpolate`'s.
      size, scale_factor, channels_last: as :func:`jaxpool.upsample_nearest`.

    Returns:
      The output shape, same layout.
    """
    return interpolate(input_shape, size, scale_factor, "nearest",
                       channels_last=channels_last)


def upsample_bilinear(input_shape: Shape, size: SizeArg = None, scale_factor: ScaleArg = None,
                      *, channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.upsample_bilinear`.

    Args:
      input_shape: ``[B, C, H, W]`` (``[B, H, W, C]`` with ``channels_last``).
      size, scale_factor, channels_last: as :func:`jaxpool.upsample_bilinear`.

    Returns:
      The output shape, same layout.
    """
    return interpolate(input_shape, size, scale_factor, "bilinear", True,
                       channels_last=channels_last)


def pixel_shuffle(input_shape: Shape, upscale_factor: int, *, channels_last: bool = False
                  ) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.pixel_shuffle`.

    Args:
      input_shape: ``[*, C*r*r, H, W]`` (``[*, H, W, C*r*r]`` with ``channels_last``).
      upscale_factor, channels_last: as :func:`jaxpool.pixel_shuffle`.

    Returns:
      ``[*, C, H*r, W*r]`` (``[*, H*r, W*r, C]``).

    Example:
      >>> jaxpool.shapes.pixel_shuffle((8, 27, 32, 32), 3)
      (8, 3, 96, 96)
    """
    return plan_pixel_shuffle("pixel_shuffle", _input("pixel_shuffle", input_shape),
                              upscale_factor, channels_last, inverse=False)[1]


def pixel_unshuffle(input_shape: Shape, downscale_factor: int, *, channels_last: bool = False
                    ) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.pixel_unshuffle`.

    Args:
      input_shape: ``[*, C, H*r, W*r]`` (``[*, H*r, W*r, C]`` with ``channels_last``).
      downscale_factor, channels_last: as :func:`jaxpool.pixel_unshuffle`.

    Returns:
      ``[*, C*r*r, H, W]`` (``[*, H, W, C*r*r]``).

    Example:
      >>> jaxpool.shapes.pixel_unshuffle((8, 3, 96, 96), 3)
      (8, 27, 32, 32)
    """
    return plan_pixel_shuffle("pixel_unshuffle", _input("pixel_unshuffle", input_shape),
                              downscale_factor, channels_last, inverse=True)[1]


# --- the shape rule of an op with none written above: read from its spec -------------------

def _array_shape_name(array: str) -> str:
    return "input_shape" if array == "x" else f"{array}_shape"


@functools.lru_cache(maxsize=None)
def _from_spec(name: str) -> Callable[..., tuple]:
    """``name``'s shape rule: its function traced abstractly (its arguments are checked in
    plain Python before anything is traced, so it raises the op's own errors). Takes a
    shape per array (``input_shape`` for ``x``, ``<name>_shape`` for the others), then the
    op's other arguments; returns the output's shape (a tuple of shapes for several)."""
    import jax
    import jax.numpy as jnp

    from jaxpool import registry

    spec = registry.SPECS[name]
    function = registry.FUNCTIONS[name]

    def shape_rule(*args: Any, **kwargs: Any) -> tuple:
        shapes = [kwargs.pop(_array_shape_name(a)) if _array_shape_name(a) in kwargs
                  else args[i] for i, a in enumerate(spec.arrays)]
        rest = args[len(shapes):] if len(args) > len(shapes) else ()
        arrays = [jax.ShapeDtypeStruct(
            _input(name, s, _array_shape_name(a)),
            jnp.float32 if a in spec.differentiable else jnp.int32)
            for a, s in zip(spec.arrays, shapes)]
        out = jax.eval_shape(lambda *xs: function(*xs, *rest, **kwargs), *arrays)
        return (tuple(out.shape) if hasattr(out, "shape")
                else tuple(tuple(o.shape) for o in out))

    shape_rule.__name__ = shape_rule.__qualname__ = name
    shape_rule.__doc__ = (f"Output shape of :func:`jaxpool.{name}`: its arguments, with a "
                          f"shape in place of each array.")
    return shape_rule


def __getattr__(name: str) -> Callable[..., tuple]:
    from jaxpool import registry

    if name in registry.SPECS:
        return _from_spec(name)
    raise AttributeError(f"module 'jaxpool.shapes' has no attribute {name!r}")
