"""Plans remembered by their arguments, so that an eager call with the arguments of an
earlier one skips the plain-Python checks and window arithmetic (half of a small eager
call's time)."""

from __future__ import annotations

import functools
import math
from typing import Callable, TypeVar

import numpy as np

F = TypeVar("F", bound=Callable)
C = TypeVar("C", bound=type)

_PLAIN = (bool, int, float, str, type(None), np.dtype, np.generic)


_SIMPLE = frozenset({int, str, bool, type(None)})


def _key(args: tuple):
    """A hashable key for a plan's arguments that tells apart what the plan could: the type
    of every leaf (2 and 2.0 and True), a zero's sign (a pad value of -0.0); None where an
    argument is something else (an array, a tracer), which is not remembered.

    Runs on every eager call, so the usual arguments (ints, strings, bools, None, floats,
    a dtype, a tuple of ints) take one loop: the arguments themselves beside their types;
    anything else takes ``_nested_key``."""
    signature: list = []
    for value in args:
        kind = type(value)
        if kind in _SIMPLE:
            signature.append(kind)
        elif kind is tuple:
            kinds = tuple(map(type, value))
            if not _SIMPLE.issuperset(kinds):
                return _nested_key(args)
            signature.append(kinds)
        elif kind is float:
            signature.append(math.copysign(1.0, value))
        elif isinstance(value, np.dtype):
            signature.append(kind)
        else:
            return _nested_key(args)
    return args, tuple(signature)


def _nested_key(value):
    """``_key`` for any nesting: ``(type, value)`` per leaf, ``(type, keys)`` per list or
    tuple (never equal to one of ``_key``'s, whose first item is the arguments' tuple)."""
    kind = type(value)
    if kind in _SIMPLE:
        return (kind, value)
    if kind is tuple or kind is list:
        keys = tuple(map(_nested_key, value))
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
        key = _key(args + tuple(kwargs.items()) if kwargs else args)
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


def hash_once(cls: C) -> C:
    """A frozen dataclass whose hash is computed once per object and kept.

    A plan is a static argument of its op's compiled program, so ``jax.jit`` hashes it on
    every eager call, and a plan's per-window and per-output tuples make that slow
    (BENCHMARKS.md, "Eager calls"; evidence ``hash_once``). The kept hash is left out of
    pickles (a string's hash differs between processes)."""
    fields_hash = vars(cls)["__hash__"]  # the dataclass's, over its fields

    def __hash__(self) -> int:
        try:
            return self.__dict__["_hash"]
        except KeyError:
            value = fields_hash(self)
            object.__setattr__(self, "_hash", value)
            return value

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    setattr(cls, "__hash__", __hash__)
    setattr(cls, "__getstate__", __getstate__)
    return cls
