"""The argument types that several families' signatures share."""

from __future__ import annotations

from typing import Sequence, TypeVar, Union, Callable, Any

Size = Union[int, Sequence[int]]
"""An int for every spatial axis, or one entry per axis (a 1-sequence is repeated)."""

OutputSize = Union[int, None, Sequence[Union[int, None]]]
"""An int for every spatial axis, or exactly one entry per axis; ``None`` keeps that
axis's extent."""

AxisNames = Union[Sequence[Union[str, None]], None]
"""Inside ``jax.shard_map``: one mesh axis name per spatial axis, None where unsharded."""

F = TypeVar("F", bound=Callable[..., Any])
"""A function, typed as itself through a decorator."""
