"""Plans remembered by their arguments, so that an eager call with the arguments of an
earlier one skips the plain-Python checks and window arithmetic (half of a small eager
call's time)."""

from __future__ import annotations

import functools
import math
from typing import Callable, TypeVar

import numpy as np

F = TypeVar("F", bound=Callable)

_PLAIN = (bool, int, float, str, type(None), np.dtype, np.generic)


_SIMPLE = frozenset({int, str, bool, type(None)})


def _key(value):
    """A hashable key that tells apart what the plan could: the type of every leaf (2 and
    2.0 and True), a zero's sign (a pad value of -0.0); None for anything else (an
    array, a tracer), which is not remembered. (Exact types first: this runs on every
    eager call.)"""
    kind = type(value)
    if kind in _SIMPLE:
        return (kind, value)
    if kind is tuple or kind is list:
        keys = tuple(map(_key, value))
        return None if None in keys else (kind, keys)
    if kind is float or isinstance(value, np.floating):
        return (kind, value, math.copysign(1.0, value))
    if isinstance(value, _PLAIN):
        return (kind, value)
    return None


def memoized_plan(plan: F, size: int = 4096) -> F:
    """``plan`` remembered by its arguments' keys (``_key``); calls with an argument of
    another kind run it as before. A plan that raises is not remembered, so a bad call
    raises every time."""
    cache: dict = {}

    @functools.wraps(plan)
    def remembered(*args, **kwargs):
        key = _key(args + tuple(kwargs.items()))
        if key is None:
            return plan(*args, **kwargs)
        try:
            return cache[key]
        except KeyError:
            pass
        result = plan(*args, **kwargs)
        if len(cache) >= size:
            cache.clear()
        cache[key] = result
        return result

    return remembered  # type: ignore[return-value]
