"""jaxpool: torch's pooling, resampling and padding for JAX, exact, deterministic and
scatter-free to any derivative order."""

from jaxpool import halo_jit, shapes, strategy_table  # noqa: F401 (halo_jit.route, strategy_table.use_backend)
from jaxpool.pooling import (adaptive_avg_pool, adaptive_avg_pool1d, adaptive_avg_pool2d,
                         adaptive_avg_pool3d, adaptive_max_pool, adaptive_max_pool1d,
                         adaptive_max_pool2d, adaptive_max_pool3d, avg_pool, avg_pool1d,
                         avg_pool2d, avg_pool3d, global_avg_pool, global_max_pool, lp_pool,
                         lp_pool1d, lp_pool2d, lp_pool3d, max_pool, max_pool1d, max_pool2d,
                         max_pool3d)
from jaxpool.unpooling import max_unpool1d, max_unpool2d, max_unpool3d
from jaxpool.folding import fold, unfold
from jaxpool.fractional import fractional_max_pool2d, fractional_max_pool3d
from jaxpool.grid_sampling import affine_grid, grid_sample
from jaxpool.padding import pad
from jaxpool.roi import roi_align
from jaxpool.resampling import (channel_shuffle, interpolate, pixel_shuffle, pixel_unshuffle, upsample_bilinear,
                                upsample_nearest)

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
    "roi_align",
]


def __getattr__(name):
    # Flax and Equinox are imported only when their modules are asked for.
    if name in ("linen", "nnx", "equinox"):
        import importlib
        return importlib.import_module(f"jaxpool.{name}")
    raise AttributeError(f"module 'jaxpool' has no attribute {name!r}")
