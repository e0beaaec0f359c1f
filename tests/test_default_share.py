"""The default run's share of a parametrized grid: what runs by default, what -m slow adds."""

import pytest

from default_share import default_share, each_once


def _split(params):
    """(default, slow) lists of each parameter set's values."""
    default, slow = [], []
    for p in params:
        values = p.values if hasattr(p, "values") else (p if isinstance(p, tuple) else (p,))
        marks = [m.name for m in getattr(p, "marks", ())]
        (slow if "slow" in marks else default).append(tuple(values))
    return default, slow


def test_default_share_takes_every_nth_and_marks_the_rest_slow():
    default, slow = _split(default_share(list("abcdefg"), 3))
    assert default == [("a",), ("d",), ("g",)]
    assert sorted(default + slow) == [(c,) for c in "abcdefg"]


def test_each_once_takes_each_case_once_with_the_options_in_turn():
    cases = [("a", 1), ("b", 2), ("c", 3)]
    params = each_once(cases, [False, True], ids=["a", "b", "c"])
    default, slow = _split(params)
    assert default == [("a", 1, False), ("b", 2, True), ("c", 3, False)]
    assert sorted(default + slow) == sorted((*c, o) for c in cases for o in (False, True))
    assert [p.id for p in params] == ["a-False", "a-True", "b-False", "b-True", "c-False",
                                      "c-True"]


def test_each_once_names_a_class_option_by_its_name():
    assert [p.id for p in each_once(["x"], [int, float], ids=["x"])] == ["x-int", "x-float"]


@pytest.mark.parametrize("name,option", each_once(["p", "q"], [1, 2]))
def test_each_once_parametrizes(name, option):
    assert (name, option) in {("p", 1), ("q", 2), ("p", 2), ("q", 1)}
