"""Argument checks shared by the functions, the Flax modules and :mod:`jaxpool.shapes`.

They run on Python values and static shapes only, so every error is raised before any
computation, with the argument's name, its value and what would be accepted.
"""

from __future__ import annotations

import operator

import numpy as np

INT_MAX = 2**31 - 1
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_bool(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def int_tuple(name: str, value, ndim: int, *, minimum: int, allow_none: bool = False
              ) -> tuple:
    """An int (repeated ``ndim`` times) or a tuple/list of ``ndim`` ints, each in
    ``[minimum, 2**31 - 1]`` (``None`` entries allowed when ``allow_none``)."""
    noun = "an int" if not allow_none else "an int, None"
    accepted = f"{noun} or a tuple of {ndim} such values, each in [{minimum}, {INT_MAX}]"
    if is_int(value) or (allow_none and value is None):
        items = (value,) * ndim
    elif isinstance(value, (tuple, list)):
        if len(value) != ndim:
            raise ValueError(f"{name} must have {ndim} entries (one per spatial axis), "
                             f"got {value!r} with {len(value)}; expected {accepted}")
        items = tuple(value)
    else:
        raise TypeError(f"{name} must be {accepted}, got {value!r}")
    for item in items:
        if item is None and allow_none:
            continue
        if not is_int(item):
            raise TypeError(f"{name} must be {accepted}, got {value!r} "
                            f"(entry {item!r} is a {type(item).__name__})")
        if not minimum <= item <= INT_MAX:
            raise ValueError(f"{name} must be {accepted}, got {value!r}")
    return tuple(None if item is None else operator.index(item) for item in items)


def check_channels_last(value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError("channels_last must be True (channels after the spatial axes, "
                        "[B, *spatial, C]) or False (torch's [B, C, *spatial]), "
                        f"got {value!r}")
    return bool(value)


def check_input(op: str, shape: tuple, dtype, ndim: int, channels_last: bool,
                batched_only: bool = False) -> tuple[bool, tuple[int, ...], int]:
    """Validate an input's shape and dtype; return (batched, spatial extents, channel axis)."""
    shape = tuple(shape)
    layout = ("[B, " + ", ".join(_spatial_names(ndim)) + ", C]" if channels_last
              else "[B, C, " + ", ".join(_spatial_names(ndim)) + "]")
    ranks = (ndim + 2,) if batched_only else (ndim + 1, ndim + 2)
    if len(shape) not in ranks:
        unbatched = layout.replace("B, ", "")
        allowed = (f"rank {ndim + 2} {layout}" if batched_only
                   else f"rank {ndim + 1} {unbatched} or rank {ndim + 2} {layout}")
        raise ValueError(f"{op} expects x of {allowed}, got shape {shape} "
                         f"(rank {len(shape)})")
    if dtype is not None:
        check_dtype(op, dtype)
    batched = len(shape) == ndim + 2
    non_batch = shape[1:] if batched else shape
    if any(extent == 0 for extent in non_batch):
        raise ValueError(f"{op} expects non-zero channel and spatial extents, got x of shape "
                         f"{shape} (only the batch axis may be empty)")
    if channels_last:
        spatial = non_batch[:-1]
        channel_axis = len(shape) - 1
    else:
        spatial = non_batch[1:]
        channel_axis = 1 if batched else 0
    return batched, tuple(int(s) for s in spatial), channel_axis


def check_dtype(op: str, dtype) -> None:
    name = np.dtype(dtype).name
    if name not in FLOAT_DTYPES:
        raise TypeError(f"{op} expects a floating-point x ({', '.join(FLOAT_DTYPES)}), "
                        f"got dtype {name}")


def _spatial_names(ndim: int) -> tuple[str, ...]:
    return {1: ("L",), 2: ("H", "W"), 3: ("D", "H", "W")}[ndim]
