"""Benchmark: jaxpool against torch, flax, keras and equinox, side by side.

Run ``python -m jaxpool.bench --help``. The peers are optional (the ``bench`` extra);
the tool skips those that are not installed.
"""

from .cli import main

__all__ = ["main"]
