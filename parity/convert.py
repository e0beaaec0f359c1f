"""Moving arrays between NumPy, JAX and torch without changing a single bit.

Values, shape and dtype survive the trip, bfloat16 included (NumPy spells it
``ml_dtypes.bfloat16``; torch cannot import that dtype directly, so it travels
as raw 16-bit words). 64-bit dtypes need JAX's x64 mode; ``to_jax`` turns it on
for the conversion so a float64 tensor never silently becomes float32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import jax
import ml_dtypes
import numpy as np
import torch

__all__ = ["to_torch", "to_jax", "to_numpy", "numpy_dtype", "x64", "TORCH_DTYPES", "is_array",
           "map_arrays", "output_leaves"]

# NumPy dtype -> torch dtype, for the dtypes parity moves across.
TORCH_DTYPES = {
    np.dtype(np.float64): torch.float64,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float16): torch.float16,
    np.dtype(ml_dtypes.bfloat16): torch.bfloat16,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int16): torch.int16,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.bool_): torch.bool,
    np.dtype(np.complex64): torch.complex64,
    np.dtype(np.complex128): torch.complex128,
}
_NUMPY_DTYPES = {v: k for k, v in TORCH_DTYPES.items()}


def numpy_dtype(torch_dtype: torch.dtype) -> np.dtype:
    """NumPy dtype matching a torch dtype (bfloat16 -> ml_dtypes.bfloat16)."""
    if torch_dtype not in _NUMPY_DTYPES:
        raise TypeError(f"no NumPy dtype for torch dtype {torch_dtype}")
    return _NUMPY_DTYPES[torch_dtype]


def x64():
    """Context manager under which JAX keeps 64-bit dtypes (a no-op if already on)."""
    if jax.config.jax_enable_x64:
        return contextlib.nullcontext()
    enable = getattr(jax, "enable_x64", None)
    if enable is None:  # older jax keeps it in jax.experimental
        from jax.experimental import enable_x64 as enable
    return enable(True)


def to_numpy(x) -> np.ndarray:
    """NumPy copy of a NumPy/JAX array or torch tensor, same dtype (bfloat16 as ml_dtypes)."""
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu().resolve_conj().resolve_neg().contiguous()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
        if t.dtype not in _NUMPY_DTYPES:
            raise TypeError(f"to_numpy: unsupported torch dtype {t.dtype}")
        return t.numpy().copy()
    return np.array(x, copy=True, order="C")


def to_torch(array) -> torch.Tensor:
    """torch tensor with the same values, shape and dtype as a NumPy/JAX array.

    Returns a fresh CPU tensor that owns its memory (no aliasing with ``array``).
    """
    if isinstance(array, torch.Tensor):
        return array.detach().clone()
    a = to_numpy(array)
    if a.dtype not in TORCH_DTYPES:
        raise TypeError(f"to_torch: unsupported dtype {a.dtype} (array of shape {a.shape})")
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def to_jax(tensor) -> jax.Array:
    """JAX array with the same values, shape and dtype as a torch tensor or NumPy array."""
    a = to_numpy(tensor)
    with x64():
        out = jax.device_put(a)  # jnp.asarray would compile a program per shape and dtype
    if out.dtype != a.dtype:  # pragma: no cover - would mean a silent cast
        raise TypeError(f"to_jax: dtype {a.dtype} became {out.dtype}")
    return out


def is_array(a) -> bool:
    """A NumPy/JAX array, NumPy scalar or torch tensor (what parity converts; the rest of an
    argument pytree, ints, strings, None, reaches both sides unchanged)."""
    return isinstance(a, (np.ndarray, np.generic, jax.Array, torch.Tensor))


def map_arrays(convert, tree):
    """``tree`` with every array leaf replaced by ``convert(leaf)``; other leaves as they are."""
    return jax.tree_util.tree_map(lambda a: convert(a) if is_array(a) else a, tree)


def output_leaves(y, path: str = "output") -> list[tuple[str, object]]:
    """Flatten a result into ``(path, leaf)`` pairs: an array, or tuples, lists, named tuples
    and mappings of them (what JAX functions and torch modules return). Mappings go in
    sorted key order, so that a dict keeps its order through ``jax.jit``; None is empty."""
    if y is None:
        return []
    if isinstance(y, Mapping):
        keys = list(y)
        try:
            keys = sorted(keys)
        except TypeError:  # keys of mixed types: keep the mapping's own order
            pass
        return [leaf for k in keys for leaf in output_leaves(y[k], f"{path}[{k!r}]")]
    if isinstance(y, (tuple, list)):
        # named tuples have _fields; torch.return_types (struct sequences) __match_args__
        fields = getattr(type(y), "_fields", None) or getattr(type(y), "__match_args__", None)
        names = [f".{f}" for f in fields] if fields else [f"[{i}]" for i in range(len(y))]
        return [leaf for name, item in zip(names, y) for leaf in output_leaves(item, path + name)]
    return [(path, y)]
