"""Flax ``nnx`` modules wrapping the pooling functions.

Stateless ``nnx.Module``s. They default to channels-last (``[B, *spatial, C]``, what Flax
convolutions produce); pass ``channels_last=False`` for torch's ``[B, C, *spatial]``.
"""

from __future__ import annotations

from flax import nnx

from jaxpool import ops


class _AvgPool(nnx.Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None, channels_last=True):
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override
        self.channels_last = channels_last

    def __call__(self, x):
        return self._fn(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                        self.count_include_pad, self.divisor_override,
                        channels_last=self.channels_last)


class _AdaptiveAvgPool(nnx.Module):
    def __init__(self, output_size, channels_last=True):
        self.output_size = output_size
        self.channels_last = channels_last

    def __call__(self, x):
        return self._fn(x, self.output_size, channels_last=self.channels_last)


class AvgPool1d(_AvgPool):
    """``jaxpool.avg_pool1d`` as a module: ``[B, L, C]`` (default) or ``[B, C, L]``."""
    _fn = staticmethod(ops.avg_pool1d)


class AvgPool2d(_AvgPool):
    """``jaxpool.avg_pool2d`` as a module: ``[B, H, W, C]`` (default) or ``[B, C, H, W]``."""
    _fn = staticmethod(ops.avg_pool2d)


class AvgPool3d(_AvgPool):
    """``jaxpool.avg_pool3d`` as a module: ``[B, D, H, W, C]`` (default) or ``[B, C, D, H, W]``."""
    _fn = staticmethod(ops.avg_pool3d)


class AdaptiveAvgPool1d(_AdaptiveAvgPool):
    """``jaxpool.adaptive_avg_pool1d`` as a module: ``[B, L, C]`` (default) or ``[B, C, L]``."""
    _fn = staticmethod(ops.adaptive_avg_pool1d)


class AdaptiveAvgPool2d(_AdaptiveAvgPool):
    """``jaxpool.adaptive_avg_pool2d`` as a module: ``[B, H, W, C]`` (default) or
    ``[B, C, H, W]``."""
    _fn = staticmethod(ops.adaptive_avg_pool2d)


class AdaptiveAvgPool3d(_AdaptiveAvgPool):
    """``jaxpool.adaptive_avg_pool3d`` as a module: ``[B, D, H, W, C]`` (default) or
    ``[B, C, D, H, W]``."""
    _fn = staticmethod(ops.adaptive_avg_pool3d)


class GlobalAvgPool(nnx.Module):
    """``jaxpool.global_avg_pool`` as a module: ``[B, H, W, C]`` (default) or
    ``[B, C, H, W]`` -> ``[B, C]``."""

    def __init__(self, channels_last=True):
        self.channels_last = channels_last

    def __call__(self, x):
        return ops.global_avg_pool(x, channels_last=self.channels_last)
