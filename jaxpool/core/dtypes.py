"""Dtypes by name, in plain Python: what the checks accept and what an op computes in."""

from __future__ import annotations

from typing import Any

import numpy as np

INT32_MAX = 2**31 - 1
"""The largest count or index torch's kernels hold in an int32 (and jaxpool's indices)."""

FLOATING = ("float16", "bfloat16", "float32", "float64")
"""The floating dtypes every op takes."""


def name(x: Any) -> str:
    """The dtype name of an array (``"float32"``), or the type name of anything else (so that
    an error can say what it got)."""
    return np.dtype(x.dtype).name if hasattr(x, "dtype") else type(x).__name__


def is_floating(dtype: str) -> bool:
    return dtype in FLOATING


def compute_dtype(dtype: Any) -> str:
    """The dtype an op computes in: float32 for float16 and bfloat16 (rounded once at the
    end, as torch's CPU kernels accumulate), else ``dtype`` itself."""
    dtype = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    return "float32" if dtype in ("float16", "bfloat16") else dtype
