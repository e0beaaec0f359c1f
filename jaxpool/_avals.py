"""Abstract arrays for the derivative rules' ``jax.linear_transpose`` calls."""
from __future__ import annotations

import jax


def shaped_like(t: jax.Array, shape: tuple[int, ...]):
    """An abstract array of ``shape`` with ``t``'s dtype and, inside ``shard_map``, its
    per-device (varying) mesh axes: a bare ``ShapeDtypeStruct`` carries none, and
    ``shard_map``'s default check then rejects the transposed map's output as the tangent
    of a per-device value. JAX without ``jax.typeof`` has no such axes to carry."""
    typeof = getattr(jax, "typeof", None)
    if typeof is None:
        return jax.ShapeDtypeStruct(shape, t.dtype)
    return typeof(t).update(shape=tuple(shape))
