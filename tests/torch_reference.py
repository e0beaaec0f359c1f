"""torch.nn.functional counterparts of the jaxpool ops, for the tests to compare against."""

import numpy as np
import torch
import torch.nn.functional as F

import jaxpool
from parity.suite.ops import OPS

AVG = {1: jaxpool.avg_pool1d, 2: jaxpool.avg_pool2d, 3: jaxpool.avg_pool3d}
ADAPTIVE = {1: jaxpool.adaptive_avg_pool1d, 2: jaxpool.adaptive_avg_pool2d,
            3: jaxpool.adaptive_avg_pool3d}
TORCH_AVG = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
TORCH_ADAPTIVE = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d,
                  3: F.adaptive_avg_pool3d}


def to_channels_first(a: np.ndarray, ndim: int) -> np.ndarray:
    """[B, *spatial, C] (or [*spatial, C]) -> [B, C, *spatial] (or [C, *spatial])."""
    return np.moveaxis(a, -1, a.ndim - ndim - 1)


def to_channels_last(a: np.ndarray, ndim: int) -> np.ndarray:
    return np.moveaxis(a, a.ndim - ndim - 1, -1)


def torch_avg_pool(x: torch.Tensor, ndim: int, kernel_size, stride=None, padding=0,
                   ceil_mode=False, count_include_pad=True, divisor_override=None):
    """torch's avg_pool (the 1d op pooled as 2d where it needs ``divisor_override``)."""
    build = OPS[f"avg_pool{ndim}d"].torch
    return build(dict(kernel_size=kernel_size, stride=stride, padding=padding,
                      ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                      divisor_override=divisor_override))(x)


def torch_global(x: torch.Tensor):
    return x.mean(dim=(2, 3))
