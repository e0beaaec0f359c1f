"""jaxpool: torch-exact average pooling for JAX, scatter-free to any derivative order."""

from jaxpool import shapes
from jaxpool.ops import (adaptive_avg_pool, adaptive_avg_pool1d, adaptive_avg_pool2d,
                         adaptive_avg_pool3d, avg_pool, avg_pool1d, avg_pool2d, avg_pool3d,
                         global_avg_pool)

__version__ = "0.1.0"

__all__ = [
    "adaptive_avg_pool", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "avg_pool", "avg_pool1d", "avg_pool2d", "avg_pool3d", "global_avg_pool", "shapes",
    "linen", "nnx",
]


def __getattr__(name):
    # Flax is imported only when its modules are asked for.
    if name in ("linen", "nnx"):
        import importlib
        return importlib.import_module(f"jaxpool.{name}")
    raise AttributeError(f"module 'jaxpool' has no attribute {name!r}")
