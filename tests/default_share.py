"""Which cases of a long argument grid the default run takes.

The default run takes a fixed share of a grid, spread over it: every ``every``-th case in
the grid's own order. With ``every`` prime to the lengths of the grid's factors, each value
of each argument still meets each other factor's values in that share. ``-m slow`` runs
every case.
"""

import pytest


def default_cases(cases: list, every: int) -> list:
    """The cases the default run takes: the 0th, ``every``-th, 2 ``every``-th ..."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    return cases[::every]


def default_share(cases: list, every: int) -> list:
    """``cases`` for ``pytest.mark.parametrize``: ``default_cases`` run by default, the
    others are marked slow (ids given to ``parametrize`` still apply)."""
    taken = {id(case) for case in default_cases(cases, every)}
    return [case if id(case) in taken else
            pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=pytest.mark.slow)
            for case in cases]
