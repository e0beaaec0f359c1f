"""Shape rules of every op, in plain Python: no tracing, no arrays.

Forward: each function takes the op's arguments, a shape in place of each array
(``input_shape`` for ``x`` or ``input``, ``grid_shape``, ``theta_shape``, ``boxes_shape``,
``samples_shape``; a max unpool's indices have ``input_shape``, and ``return_indices``,
``key`` and ``axis_names`` change no shape), with the op's names and defaults, and returns
the output shape, raising the op's own errors. Backward, as
the catalog defines it: ``output_size`` and the channel count can be read from an output
shape, the input's spatial extents cannot (every input extent maps to the requested output).

Example:
  >>> jaxpool.shapes.max_pool2d((8, 64, 112, 112), 3, 2, 1)
  (8, 64, 56, 56)
"""

from __future__ import annotations

import numbers
from typing import Sequence, cast

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
from jaxpool.resampling.plan import (plan_channel_shuffle, plan_interpolate,  # noqa: E402
                                     plan_pixel_shuffle)


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


def channel_shuffle(input_shape: Shape, groups: int, *, channels_last: bool = False
                    ) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.channel_shuffle`.

    Args:
      input_shape: ``[B, C, *spatial]``, rank 3 or more (``[B, *spatial, C]`` with
        ``channels_last``).
      groups, channels_last: as :func:`jaxpool.channel_shuffle`.

    Returns:
      ``input_shape``: the channels are reordered, not resized.

    Example:
      >>> jaxpool.shapes.channel_shuffle((8, 24, 28, 28), 3)
      (8, 24, 28, 28)
    """
    shape = _input("channel_shuffle", input_shape)
    plan_channel_shuffle("channel_shuffle", shape, groups, channels_last)
    return shape


# --- the ops of several arrays, and those whose plans check a dtype ----------------------------

from jaxpool.fractional.functions import Ratio  # noqa: E402
from jaxpool.fractional.plan import plan_fractional  # noqa: E402
from jaxpool.grid_sampling.plan import plan_affine_grid, plan_grid_sample  # noqa: E402
from jaxpool.patches.plan import plan_fold, plan_unfold  # noqa: E402
from jaxpool.roi.plan import (check_box_list, plan_multi_scale_roi_align,  # noqa: E402
                              plan_roi_align, plan_roi_pool)

_DTYPE = "float32"
"""The dtype these rules give the plans that check one: a rule sees no dtype, every one of
these ops takes float32, and none of their output shapes depends on the dtype."""


def grid_sample(input_shape: Shape, grid_shape: Shape, mode: str = "bilinear",
                padding_mode: str = "zeros", align_corners: bool | None = None, *,
                channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.grid_sample`.

    Args:
      input_shape: ``[N, C, H, W]`` or ``[N, C, D, H, W]`` (``[N, H, W, C]`` or
        ``[N, D, H, W, C]`` with ``channels_last``).
      grid_shape: ``[N, Ho, Wo, 2]`` or ``[N, Do, Ho, Wo, 3]``.
      mode, padding_mode, align_corners, channels_last: as :func:`jaxpool.grid_sample`.

    Returns:
      ``[N, C, Ho, Wo]`` or ``[N, C, Do, Ho, Wo]`` (channels last with ``channels_last``):
      the grid's points, the input's channels.

    Example:
      >>> jaxpool.shapes.grid_sample((8, 3, 64, 64), (8, 32, 48, 2), align_corners=False)
      (8, 3, 32, 48)
    """
    # align_corners=None is not defaulted here: the op's warning is about values, not shapes.
    return plan_grid_sample(_input("grid_sample", input_shape), _DTYPE,
                            _input("grid_sample", grid_shape, "grid_shape"), _DTYPE, mode,
                            padding_mode, align_corners, channels_last).out_shape


def affine_grid(theta_shape: Shape, size: Sequence[int], align_corners: bool | None = None
                ) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.affine_grid`.

    Args:
      theta_shape: ``[N, 2, 3]`` (2-D) or ``[N, 3, 4]`` (3-D).
      size, align_corners: as :func:`jaxpool.affine_grid`.

    Returns:
      ``[N, H, W, 2]`` for ``size`` ``(N, C, H, W)``, ``[N, D, H, W, 3]`` for
      ``(N, C, D, H, W)``.

    Example:
      >>> jaxpool.shapes.affine_grid((8, 2, 3), (8, 3, 32, 48), align_corners=False)
      (8, 32, 48, 2)
    """
    plan = plan_affine_grid(_input("affine_grid", theta_shape, "theta_shape"), _DTYPE, size,
                            align_corners)
    return (plan.batch, *plan.spatial, len(plan.spatial))


def unfold(input_shape: Shape, kernel_size: Size, dilation: Size = 1, padding: Size = 0,
           stride: Size = 1) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.unfold`.

    Args:
      input_shape: ``[N, C, H, W]`` or ``[C, H, W]``.
      kernel_size, dilation, padding, stride: as :func:`jaxpool.unfold`.

    Returns:
      ``[N, C*kh*kw, L]`` (or ``[C*kh*kw, L]``), ``L = bh*bw`` blocks with
      ``b = (n + 2*padding - dilation*(k - 1) - 1) // stride + 1`` per axis.

    Example:
      >>> jaxpool.shapes.unfold((8, 3, 32, 32), 3, padding=1, stride=2)
      (8, 27, 256)
    """
    return plan_unfold(_input("unfold", input_shape), _DTYPE, kernel_size, dilation, padding,
                       stride).columns_shape


def fold(input_shape: Shape, output_size: Size, kernel_size: Size, dilation: Size = 1,
         padding: Size = 0, stride: Size = 1) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.fold`.

    Args:
      input_shape: ``[N, C*kh*kw, L]`` or ``[C*kh*kw, L]``, with ``L`` the count of blocks
        that ``output_size`` holds.
      output_size, kernel_size, dilation, padding, stride: as :func:`jaxpool.fold`.

    Returns:
      ``[N, C, *output_size]`` (or ``[C, *output_size]``).

    Example:
      >>> jaxpool.shapes.fold((8, 27, 256), (32, 32), 3, padding=1, stride=2)
      (8, 3, 32, 32)
    """
    return plan_fold(_input("fold", input_shape), _DTYPE, output_size, kernel_size, dilation,
                     padding, stride).image_shape


def fractional_max_pool2d(input_shape: Shape, kernel_size: Size,
                          output_size: Size | None = None, output_ratio: Ratio | None = None,
                          samples_shape: Shape | None = None, *, channels_last: bool = False
                          ) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.fractional_max_pool2d` (its indices have the same
    shape).

    Args:
      input_shape: ``[N, C, H, W]`` or ``[C, H, W]`` (``[N, H, W, C]`` or ``[H, W, C]`` with
        ``channels_last``).
      kernel_size, output_size, output_ratio, channels_last: as
        :func:`jaxpool.fractional_max_pool2d`.
      samples_shape: the given samples' shape, ``[N, C, 2]`` (N = 1 unbatched); None for a
        call that draws them from a key.

    Returns:
      The output shape, same layout: H, W become ``output_size``, or
      ``int(n * output_ratio)``.

    Example:
      >>> jaxpool.shapes.fractional_max_pool2d((8, 16, 32, 32), 3, output_ratio=0.5)
      (8, 16, 16, 16)
    """
    return _fractional("fractional_max_pool2d", 2, input_shape, kernel_size, output_size,
                       output_ratio, samples_shape, channels_last)


def fractional_max_pool3d(input_shape: Shape, kernel_size: Size,
                          output_size: Size | None = None, output_ratio: Ratio | None = None,
                          samples_shape: Shape | None = None, *, channels_last: bool = False
                          ) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.fractional_max_pool3d` (its indices have the same
    shape).

    Args:
      input_shape: ``[N, C, T, H, W]`` or ``[C, T, H, W]`` (``[N, T, H, W, C]`` or
        ``[T, H, W, C]`` with ``channels_last``).
      kernel_size, output_size, output_ratio, channels_last: as
        :func:`jaxpool.fractional_max_pool3d`.
      samples_shape: the given samples' shape, ``[N, C, 3]`` (N = 1 unbatched); None for a
        call that draws them from a key.

    Returns:
      The output shape, same layout: T, H, W become ``output_size``, or
      ``int(n * output_ratio)``.

    Example:
      >>> jaxpool.shapes.fractional_max_pool3d((2, 4, 9, 9, 9), 2, output_size=(4, 5, 6))
      (2, 4, 4, 5, 6)
    """
    return _fractional("fractional_max_pool3d", 3, input_shape, kernel_size, output_size,
                       output_ratio, samples_shape, channels_last)


def _fractional(op: str, ndim: int, input_shape: Shape, kernel_size: Size,
                output_size: Size | None, output_ratio: Ratio | None,
                samples_shape: Shape | None, channels_last: bool) -> tuple[int, ...]:
    # The op takes its samples or a key to draw them from; the shape depends on neither,
    # so without samples the rule checks the call as one with a key.
    samples = None if samples_shape is None else _input(op, samples_shape, "samples_shape")
    return plan_fractional(op, _input(op, input_shape), _DTYPE, ndim, kernel_size,
                           output_size, output_ratio, samples,
                           None if samples is None else _DTYPE, samples is None,
                           channels_last).output_shape


def roi_align(input_shape: Shape, boxes_shape: Shape | Sequence[Shape],
              output_size: int | tuple[int, int], spatial_scale: float = 1.0,
              sampling_ratio: int = -1, aligned: bool = False,
              max_sampling_ratio: int | None = None, *, channels_last: bool = False
              ) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.roi_align`.

    Args:
      input_shape: ``[N, C, H, W]`` (``[N, H, W, C]`` with ``channels_last``).
      boxes_shape: the boxes' ``[K, 5]``, or each image's ``[L_i, 4]`` in a list (K boxes
        in all).
      output_size, spatial_scale, sampling_ratio, aligned, max_sampling_ratio,
        channels_last: as :func:`jaxpool.roi_align`.

    Returns:
      ``[K, C, Ho, Wo]`` (``[K, Ho, Wo, C]`` with ``channels_last``): one map of
      ``output_size`` bins per box.

    Example:
      >>> jaxpool.shapes.roi_align((2, 256, 50, 50), [(300, 4), (200, 4)], 7)
      (500, 256, 7, 7)
    """
    op = "roi_align"
    if isinstance(boxes_shape, (tuple, list)) and any(
            isinstance(b, (tuple, list)) or hasattr(b, "shape") for b in boxes_shape):
        per_image = [_input(op, b, f"boxes_shape[{i}]") for i, b in enumerate(boxes_shape)]
        check_box_list(per_image, [_DTYPE] * len(per_image))
        boxes: tuple[int, ...] = (sum(b[0] for b in per_image), 5)
    else:
        boxes = _input(op, cast(Shape, boxes_shape), "boxes_shape")
    # An adaptive grid is sized from the boxes' values, which change no shape: without
    # them the rule checks the call as one on boxes of one sample per bin, where the op on
    # traced boxes would ask for max_sampling_ratio.
    adaptive = not (isinstance(sampling_ratio, numbers.Integral) and sampling_ratio > 0)
    bound = 1 if adaptive and max_sampling_ratio is None else max_sampling_ratio
    return plan_roi_align(_input(op, input_shape), _DTYPE, boxes, _DTYPE, output_size,
                          spatial_scale, sampling_ratio, aligned, bound,
                          channels_last).out_shape


def _boxes_shape(op: str, boxes_shape: Shape | Sequence[Shape]) -> tuple[int, ...]:
    """The boxes' ``[K, 5]``, from that shape or from each image's ``[L_i, 4]``."""
    if isinstance(boxes_shape, (tuple, list)) and any(
            isinstance(b, (tuple, list)) or hasattr(b, "shape") for b in boxes_shape):
        per_image = [_input(op, b, f"boxes_shape[{i}]") for i, b in enumerate(boxes_shape)]
        check_box_list(per_image, [_DTYPE] * len(per_image), op)
        return (sum(b[0] for b in per_image), 5)
    return _input(op, cast(Shape, boxes_shape), "boxes_shape")


def _grid_bound(sampling_ratio: int, max_sampling_ratio: int | None) -> int | None:
    # An adaptive grid is sized from the boxes' values, which change no shape: without
    # them a rule checks the call as one on boxes of one sample per bin.
    adaptive = not (isinstance(sampling_ratio, numbers.Integral) and sampling_ratio > 0)
    return 1 if adaptive and max_sampling_ratio is None else max_sampling_ratio


def roi_pool(input_shape: Shape, boxes_shape: Shape | Sequence[Shape],
             output_size: int | tuple[int, int], spatial_scale: float = 1.0,
             max_bin_size: int | None = None, *, channels_last: bool = False
             ) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.roi_pool`.

    Args:
      input_shape: ``[N, C, H, W]`` (``[N, H, W, C]`` with ``channels_last``).
      boxes_shape: as :func:`roi_align`'s.
      output_size, spatial_scale, max_bin_size, channels_last: as :func:`jaxpool.roi_pool`.

    Returns:
      ``[K, C, Ho, Wo]`` (``[K, Ho, Wo, C]`` with ``channels_last``).

    Example:
      >>> jaxpool.shapes.roi_pool((2, 256, 50, 50), (300, 5), 7, 1 / 16)
      (300, 256, 7, 7)
    """
    return plan_roi_pool(_input("roi_pool", input_shape), _DTYPE,
                         _boxes_shape("roi_pool", boxes_shape), _DTYPE, output_size,
                         spatial_scale, max_bin_size, channels_last).out_shape


def ps_roi_pool(input_shape: Shape, boxes_shape: Shape | Sequence[Shape],
                output_size: int | tuple[int, int], spatial_scale: float = 1.0,
                max_bin_size: int | None = None, *, channels_last: bool = False
                ) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.ps_roi_pool`.

    Args:
      input_shape: ``[N, C, H, W]`` (``[N, H, W, C]`` with ``channels_last``), ``C`` a
        multiple of ``Ho * Wo``.
      boxes_shape: as :func:`roi_align`'s.
      output_size, spatial_scale, max_bin_size, channels_last: as
        :func:`jaxpool.ps_roi_pool`.

    Returns:
      ``[K, C / (Ho * Wo), Ho, Wo]`` (``[K, Ho, Wo, C / (Ho * Wo)]`` with ``channels_last``).

    Example:
      >>> jaxpool.shapes.ps_roi_pool((1, 490, 38, 50), (300, 5), 7, 1 / 16)
      (300, 10, 7, 7)
    """
    return plan_roi_pool(_input("ps_roi_pool", input_shape), _DTYPE,
                         _boxes_shape("ps_roi_pool", boxes_shape), _DTYPE, output_size,
                         spatial_scale, max_bin_size, channels_last, op="ps_roi_pool",
                         position_sensitive=True).out_shape


def ps_roi_align(input_shape: Shape, boxes_shape: Shape | Sequence[Shape],
                 output_size: int | tuple[int, int], spatial_scale: float = 1.0,
                 sampling_ratio: int = -1, max_sampling_ratio: int | None = None, *,
                 channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.ps_roi_align`.

    Args:
      input_shape: ``[N, C, H, W]`` (``[N, H, W, C]`` with ``channels_last``), ``C`` a
        multiple of ``Ho * Wo``.
      boxes_shape: as :func:`roi_align`'s.
      output_size, spatial_scale, sampling_ratio, max_sampling_ratio, channels_last: as
        :func:`jaxpool.ps_roi_align`.

    Returns:
      ``[K, C / (Ho * Wo), Ho, Wo]`` (``[K, Ho, Wo, C / (Ho * Wo)]`` with ``channels_last``).

    Example:
      >>> jaxpool.shapes.ps_roi_align((1, 490, 38, 50), [(300, 4)], 7, 1 / 16, 2)
      (300, 10, 7, 7)
    """
    op = "ps_roi_align"
    return plan_roi_align(_input(op, input_shape), _DTYPE, _boxes_shape(op, boxes_shape),
                          _DTYPE, output_size, spatial_scale, sampling_ratio, True,
                          _grid_bound(sampling_ratio, max_sampling_ratio), channels_last,
                          op=op, position_sensitive=True).out_shape


def multi_scale_roi_align(features_shape: Sequence[Shape],
                          boxes_shape: Shape | Sequence[Shape],
                          output_size: int | tuple[int, int], sampling_ratio: int,
                          image_shapes: Sequence[tuple[int, int]],
                          canonical_scale: float = 224, canonical_level: float = 4,
                          max_sampling_ratio: int | None = None, *,
                          channels_last: bool = False) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.multi_scale_roi_align`.

    Args:
      features_shape: each map's ``[N, C, H_l, W_l]`` (``[N, H_l, W_l, C]`` with
        ``channels_last``), in a list.
      boxes_shape: as :func:`roi_align`'s.
      output_size, sampling_ratio, image_shapes, canonical_scale, canonical_level,
        max_sampling_ratio, channels_last: as :func:`jaxpool.multi_scale_roi_align`.

    Returns:
      ``[K, C, Ho, Wo]`` (``[K, Ho, Wo, C]`` with ``channels_last``).

    Example:
      >>> maps = [(2, 256, 200 >> i, 272 >> i) for i in range(4)]
      >>> jaxpool.shapes.multi_scale_roi_align(maps, [(512, 4)] * 2, 7, 2, [(800, 1088)])
      (1024, 256, 7, 7)
    """
    op = "multi_scale_roi_align"
    if isinstance(features_shape, (str, bytes)) or not isinstance(features_shape, Sequence):
        raise TypeError(f"{op}: features_shape must be a list of the maps' shapes, got "
                        f"{features_shape!r}")
    shapes = [_input(op, s, f"features_shape[{i}]") for i, s in enumerate(features_shape)]
    return plan_multi_scale_roi_align(
        shapes, [_DTYPE] * len(shapes), _boxes_shape(op, boxes_shape), _DTYPE, output_size,
        sampling_ratio, image_shapes, canonical_scale, canonical_level,
        _grid_bound(sampling_ratio, max_sampling_ratio), channels_last).out_shape


def multi_scale_deformable_attention(value_shape: Shape, spatial_shapes: Sequence[Sequence[int]],
                                     sampling_locations_shape: Shape,
                                     attention_weights_shape: Shape, *, mode: str = "bilinear",
                                     points_per_level: Sequence[int] | None = None
                                     ) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.multi_scale_deformable_attention`.

    Args:
      value_shape: ``[B, S, heads, head_dim]``, ``S = sum(H_l * W_l)``.
      spatial_shapes: the levels' ``(H_l, W_l)``.
      sampling_locations_shape: ``[B, Q, heads, L, P, 2]`` (with ``points_per_level``,
        ``[B, Q, heads, sum(points_per_level), 2]``).
      attention_weights_shape: ``[B, Q, heads, L, P]`` (with ``points_per_level``,
        ``[B, Q, heads, sum(points_per_level)]``).
      mode, points_per_level: as :func:`jaxpool.multi_scale_deformable_attention`.

    Returns:
      ``[B, Q, heads * head_dim]``.

    Example:
      >>> jaxpool.shapes.multi_scale_deformable_attention(
      ...     (2, 100 * 150 + 50 * 75, 8, 32), [(100, 150), (50, 75)], (2, 300, 8, 2, 4, 2),
      ...     (2, 300, 8, 2, 4))
      (2, 300, 256)
    """
    from jaxpool.deformable.plan import plan_multi_scale_deformable_attention

    op = "multi_scale_deformable_attention"
    return plan_multi_scale_deformable_attention(
        _input(op, value_shape, "value_shape"), _DTYPE, spatial_shapes,
        _input(op, sampling_locations_shape, "sampling_locations_shape"), _DTYPE,
        _input(op, attention_weights_shape, "attention_weights_shape"), _DTYPE, mode,
        points_per_level).out_shape


def deform_conv2d(input_shape: Shape, offset_shape: Shape, weight_shape: Shape,
                  bias_shape: Shape | None = None, stride: Size = 1, padding: Size = 0,
                  dilation: Size = 1, mask_shape: Shape | None = None) -> tuple[int, ...]:
    """Output shape of :func:`jaxpool.deform_conv2d`.

    Args:
      input_shape: ``[B, C, H, W]``.
      offset_shape: ``[B, 2 * offset_groups * kh * kw, out_h, out_w]``.
      weight_shape: ``[out_channels, C / groups, kh, kw]``.
      bias_shape: ``[out_channels]``, or None.
      stride, padding, dilation: as :func:`jaxpool.deform_conv2d`.
      mask_shape: ``[B, offset_groups * kh * kw, out_h, out_w]``, or None.

    Returns:
      ``[B, out_channels, out_h, out_w]``.

    Example:
      >>> jaxpool.shapes.deform_conv2d((2, 64, 28, 28), (2, 18, 28, 28), (64, 64, 3, 3),
      ...                              padding=1, mask_shape=(2, 9, 28, 28))
      (2, 64, 28, 28)
    """
    from jaxpool.deformable.plan import plan_deform_conv2d

    op = "deform_conv2d"

    def given(shape: Shape | None, name: str) -> tuple[int, ...] | None:
        return None if shape is None else _input(op, shape, name)

    bias, mask = given(bias_shape, "bias_shape"), given(mask_shape, "mask_shape")
    return plan_deform_conv2d(
        _input(op, input_shape), _DTYPE, _input(op, offset_shape, "offset_shape"), _DTYPE,
        _input(op, weight_shape, "weight_shape"), _DTYPE, bias, None if bias is None else
        _DTYPE, mask, None if mask is None else _DTYPE, stride, padding, dilation).out_shape
