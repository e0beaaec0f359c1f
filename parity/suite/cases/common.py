"""The words the family files write their cases in.

Each family file (``pooling.py``, ``roi.py``, ...) holds, by op name, any of these tables:

``MAIN``, ``EXTRA``: argument sets ``(shape, kwargs)`` or ``(shape, kwargs, shapes)``:
  ``shape`` the first array's, channels-first; ``kwargs`` every other argument by name;
  ``shapes`` those of the arrays after the first (grid_sample's grid, roi_align's boxes).
  The main sets run in every dtype and layout in ``--full``; the default run takes every
  set once (:func:`parity.suite.cases.quick_cases`).
``DEFAULT``: the default run's sets, where they are not ``MAIN`` then ``EXTRA`` (see
  :func:`pick`).
``FULL``: more sets, for ``--full`` only.
``VALUES_ONLY``: ``(shape, kwargs, special, channels_last)``, checked without derivatives
  in float64; ``special`` names the inputs (see ``Case.special``).
``ERRORS``: ``rng -> [(label, args, kwargs)]``: calls on which torch and jaxpool must both
  raise; ``args`` are the arrays and positional arguments, in jaxpool's order.
``DRAWN``: ``(case, rng) -> {name: array}``: arrays both sides take by keyword, drawn from
  the case's seed and never differentiated (fractional max pooling's samples, roi_align's
  boxes).
``CHEAPER``: ``{(op, i): set}``, a cheaper stand-in for set ``i`` of ``MAIN + EXTRA`` in the
  default grid.

Nothing here imports the suite's ops: the family files are data.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

Shape = tuple[int, ...]
Sets = list[tuple]  # (shape, kwargs) or (shape, kwargs, shapes)
ErrorCalls = Callable[[np.random.Generator], list[tuple[str, tuple, dict[str, Any]]]]

__all__ = ["ErrorCalls", "Sets", "Shape", "normals", "pick", "ties"]


def ties(shape: Shape, kwargs: dict[str, Any]) -> list:
    """Values-only entries on inputs full of equal elements: max(x - 1, 0) channels-first,
    small integers channels-last."""
    return [(shape, kwargs, "relu ties", False), (shape, kwargs, "integer ties", True)]


def pick(sets: Sets, *drop: int, again: int | None = None,
         instead: dict[int, tuple] | None = None) -> Sets:
    """The default run's sets out of an op's ``sets`` (``MAIN`` then ``EXTRA``): those at
    the indices ``drop`` left out, ``instead[i]`` in place of set ``i``, and the set at
    ``again`` (an index into what is left) once more at the end."""
    instead = instead or {}
    chosen = [instead.get(i, s) for i, s in enumerate(sets) if i not in drop]
    return chosen + ([chosen[again]] if again is not None else [])


def normals(rng: np.random.Generator, *shapes: Shape) -> tuple[np.ndarray, ...]:
    """One float64 array per shape, drawn from a standard normal in order: the arrays of a
    bad call, which fails on its shapes or arguments, not on its values."""
    return tuple(rng.standard_normal(s) for s in shapes)
