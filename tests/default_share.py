"""Which cases of a long argument grid the default run takes.

The default run takes a fixed share of a grid, spread over it: every ``every``-th case in
the grid's own order. With ``every`` prime to the lengths of the grid's factors, the share
still holds each value of each argument (each grid's test checks that it does, with
``option_values``). ``-m slow`` runs every case.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import pytest


def default_cases(cases: Sequence, every: int) -> Sequence:
    """The cases the default run takes: the 0th, ``every``-th, 2 ``every``-th ..."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    return cases[::every]


def default_share(cases: list, every: int) -> list:
    """``cases`` for ``pytest.mark.parametrize``: ``default_cases`` run by default, the
    others are marked slow (ids given to ``parametrize`` still apply)."""
    taken = set(default_cases(range(len(cases)), every))
    return [case if i in taken else
            pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=pytest.mark.slow)
            for i, case in enumerate(cases)]


def each_once(cases: list, options: Sequence, ids: Sequence[str] | None = None) -> list:
    """``(*case, option)`` for ``pytest.mark.parametrize``, for every case and option: the
    default run takes each case once, with the options in turn (case ``i`` with option
    ``i % len(options)``, so each option is taken while there are as many cases); the other
    pairs are marked slow. ``ids``: one per case (the option is appended)."""
    params = []
    for i, case in enumerate(cases):
        case = case if isinstance(case, tuple) else (case,)
        for j, option in enumerate(options):
            marks = () if j == i % len(options) else (pytest.mark.slow,)
            id_ = None if ids is None else f"{ids[i]}-{getattr(option, '__name__', option)}"
            params.append(pytest.param(*case, option, marks=marks, id=id_))
    return params


def option_values(cases: Iterable[tuple]) -> set:
    """Every (group, argument, value) of ``(group, kwargs)`` pairs (values by ``repr``)."""
    return {(group, k, repr(v)) for group, kwargs in cases for k, v in kwargs.items()}
