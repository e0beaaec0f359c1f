"""jaxpool: torch's pooling, resampling and padding for JAX, exact, deterministic and
scatter-free to any derivative order."""

from jaxpool import shapes, strategy_table  # noqa: F401 (strategy_table.use_backend)
from jaxpool.halo import jit as halo_jit  # noqa: F401 (halo_jit.route, the name the docs give)
from jaxpool.pooling.functions import (adaptive_avg_pool, adaptive_avg_pool1d, adaptive_avg_pool2d,
                                       adaptive_avg_pool3d, adaptive_max_pool, adaptive_max_pool1d,
                                       adaptive_max_pool2d, adaptive_max_pool3d, avg_pool,
                                       avg_pool1d, avg_pool2d, avg_pool3d, global_avg_pool,
                                       global_max_pool, lp_pool, lp_pool1d, lp_pool2d, lp_pool3d,
                                       max_pool, max_pool1d, max_pool2d, max_pool3d)
from jaxpool.unpooling.functions import max_unpool1d, max_unpool2d, max_unpool3d
from jaxpool.padding.functions import pad
from jaxpool.resampling.functions import (channel_shuffle, interpolate, pixel_shuffle,
                                          pixel_unshuffle, upsample_bilinear, upsample_nearest)
from jaxpool.grid_sampling.functions import affine_grid, grid_sample
from jaxpool.patches.functions import fold, unfold
from jaxpool.fractional.functions import fractional_max_pool2d, fractional_max_pool3d
from jaxpool.roi.functions import (multi_scale_roi_align, ps_roi_align, ps_roi_pool,
                                   roi_align, roi_pool)
from jaxpool.deformable.functions import deform_conv2d, multi_scale_deformable_attention

__version__ = "0.1.0"

__all__ = [
    "adaptive_avg_pool", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "adaptive_max_pool", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
    "avg_pool", "avg_pool1d", "avg_pool2d", "avg_pool3d", "global_avg_pool",
    "global_max_pool", "lp_pool", "lp_pool1d", "lp_pool2d", "lp_pool3d", "max_pool",
    "max_pool1d", "max_pool2d", "max_pool3d", "shapes", "linen", "nnx", "equinox",
    "interpolate", "pixel_shuffle", "pixel_unshuffle", "upsample_bilinear", "upsample_nearest",
    "max_unpool1d", "max_unpool2d", "max_unpool3d", "pad", "grid_sample", "affine_grid",
    "unfold", "fold", "channel_shuffle", "fractional_max_pool2d", "fractional_max_pool3d",
    "roi_align", "multi_scale_deformable_attention", "roi_pool", "ps_roi_align",
    "ps_roi_pool", "multi_scale_roi_align", "deform_conv2d",
]


def __getattr__(name):
    # Flax and Equinox are imported only when their modules are asked for.
    if name in ("linen", "nnx", "equinox"):
        import importlib
        return importlib.import_module(f"jaxpool.{name}")
    raise AttributeError(f"module 'jaxpool' has no attribute {name!r}")
