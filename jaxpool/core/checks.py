"""Argument checks shared by the functions, the Flax modules and :mod:`jaxpool.shapes`.

They run on Python values and static shapes only, so every error is raised before any
computation, with the argument's name, its value and what would be accepted.
"""

from __future__ import annotations

import operator

import jax
import jax.numpy
import numpy as np

from jaxpool.core.dtypes import FLOATING, INT32_MAX



def check_array(op: str, x) -> None:
    """Reject a torch tensor given as ``x``, saying how to convert it (JAX cannot read its
    dtype). torch is not imported for this: the check reads the type's module."""
    if type(x).__module__.split(".")[0] == "torch":
        raise TypeError(f"{op} takes a JAX or NumPy array, got a torch tensor ({x.dtype}, "
                        f"shape {tuple(x.shape)}); convert it first: parity.to_jax(t) (bit for "
                        f"bit, bfloat16 included) or jnp.asarray(t.detach().cpu().numpy())")


def as_jax(x) -> jax.Array:
    """``x`` as a JAX array; one already (a tracer too) is passed through, which saves an
    eager call a conversion."""
    return x if isinstance(x, jax.Array) else jax.numpy.asarray(x)


def check_shape(op: str, shape, name: str = "input_shape") -> tuple[int, ...]:
    """A shape given to a shape rule: a tuple, list or torch.Size of ints, not an array."""
    if hasattr(shape, "shape") and hasattr(shape, "dtype"):
        raise TypeError(f"{op} takes the input's shape, not the input: pass x.shape (got an "
                        f"array of shape {tuple(shape.shape)} and dtype {shape.dtype})")
    accepted = "a tuple of non-negative ints, such as x.shape"
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"{op}: {name} must be {accepted}, got {shape!r}")
    extents = tuple(as_int(f"{op}: {name}", extent, shape, accepted) for extent in shape)
    if any(extent < 0 for extent in extents):
        raise ValueError(f"{op}: {name} must be {accepted}, got {shape!r}")
    return extents


def as_int(name: str, entry, value, accepted: str) -> int:
    """``entry`` (of the argument ``value``) as a Python int: any concrete integer (Python,
    NumPy, JAX or torch scalar, or 0-d array), never a bool, a float or a traced value."""
    def bad(kind: str) -> TypeError:
        which = "" if entry is value else f"entry {entry!r} "
        return TypeError(f"{name} must be {accepted}, got {value!r} ({which}is a {kind})")

    if isinstance(entry, (bool, np.bool_)) or str(getattr(entry, "dtype", "")).endswith("bool"):
        raise bad("bool")
    try:
        return operator.index(entry)
    except (jax.errors.TracerIntegerConversionError, jax.errors.ConcretizationTypeError):
        raise TypeError(
            f"{name} must be static, got a traced value {entry!r}: sizes fix the output "
            f"shape, so they cannot depend on a traced argument. Compute them from static "
            f"shapes (x.shape) or Python ints, or mark the argument static: "
            f"jax.jit(f, static_argnums=...)") from None
    except TypeError:
        raise bad(str(getattr(entry, "dtype", type(entry).__name__))) from None


def check_bool(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _entries(name: str, value, accepted: str) -> list | None:
    """The entries of a sequence or 1-d array, or None for a single value."""
    if isinstance(value, (tuple, list)):  # torch.Size is a tuple
        return list(value)
    shape = getattr(value, "shape", ())
    if len(shape) == 0:
        return None
    if len(shape) > 1:
        raise TypeError(f"{name} must be {accepted}, got an array of shape {tuple(shape)}")
    return list(value)


def int_tuple(name: str, value, ndim: int, *, minimum: int, allow_none: bool = False,
              repeat_single: bool = True) -> tuple:
    """Sizes in every form torch accepts, as ``ndim`` Python ints in ``[minimum, 2**31 - 1]``:
    an int (repeated on every axis), or a tuple, list, torch.Size or 1-d integer array of
    ``ndim`` entries (or of one, repeated, when ``repeat_single``); ``None`` entries too when
    ``allow_none``. An int is any concrete integer (see :func:`as_int`)."""
    noun = "an int, None" if allow_none else "an int"
    counts = f"1 or {ndim}" if repeat_single and ndim > 1 else f"{ndim}"
    accepted = f"{noun} or a tuple of {counts} such values, each in [{minimum}, {INT32_MAX}]"
    entries = _entries(name, value, accepted)
    if entries is None:
        items = (value,) * ndim
    elif len(entries) == ndim or (repeat_single and len(entries) == 1):
        items = tuple(entries) * (ndim // len(entries))
    else:
        raise ValueError(f"{name} must have {counts} entries (one per spatial axis), "
                         f"got {value!r} with {len(entries)}; expected {accepted}")
    sizes = tuple(None if item is None and allow_none else as_int(name, item, value, accepted)
                  for item in items)
    if any(size is not None and not minimum <= size <= INT32_MAX for size in sizes):
        raise ValueError(f"{name} must be {accepted}, got {value!r}")
    return sizes


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
    if name not in FLOATING:
        raise TypeError(f"{op} expects a floating-point x ({', '.join(FLOATING)}), "
                        f"got dtype {name}")


def _spatial_names(ndim: int) -> tuple[str, ...]:
    return {1: ("L",), 2: ("H", "W"), 3: ("D", "H", "W")}[ndim]
