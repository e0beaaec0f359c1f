"""One small case per strategy the library can choose, for the structural tests."""

import dataclasses

import torch.nn.functional as F

import jaxpool
from jaxpool.pooling.plan import plan_adaptive, plan_avg_pool
from jaxpool.strategy_table import BACKENDS
from jaxpool.pooling.windows import STRATEGIES, TANGENTS

# name -> (function of an array, input shape, the op's plan)
CASES = {
    "identity+sums": (lambda x: jaxpool.adaptive_avg_pool2d(x, (6, 2)), (2, 3, 6, 8),
                      lambda s: plan_adaptive("", s, None, 2, (6, 2))),
    "sums": (lambda x: jaxpool.adaptive_avg_pool2d(x, 4), (2, 3, 15, 13),
             lambda s: plan_adaptive("", s, None, 2, 4)),
    "sums up": (lambda x: jaxpool.adaptive_avg_pool2d(x, (9, 5)), (2, 3, 7, 3),
                lambda s: plan_adaptive("", s, None, 2, (9, 5))),
    "blocks": (lambda x: jaxpool.avg_pool2d(x, 4), (2, 3, 80, 72),
               lambda s: plan_avg_pool("", s, None, 2, 4)),
    "blocks long": (lambda x: jaxpool.avg_pool1d(x, 4), (1, 2, 400),
                    lambda s: plan_avg_pool("", s, None, 1, 4)),
    "taps short": (lambda x: jaxpool.avg_pool2d(x, 2), (2, 3, 40, 36),
                   lambda s: plan_avg_pool("", s, None, 2, 2)),
    "repeat": (lambda x: jaxpool.adaptive_avg_pool2d(x, (40, 36)), (1, 2, 4, 3),
               lambda s: plan_adaptive("", s, None, 2, (40, 36))),
    "taps": (lambda x: jaxpool.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
             (2, 3, 40, 38),
             lambda s: plan_avg_pool("", s, None, 2, 3, 2, 1, True, False)),
    "taps channels-last": (lambda x: jaxpool.avg_pool2d(x, 3, 2, 1, channels_last=True),
                           (2, 40, 38, 3),
                           lambda s: plan_avg_pool("", s, None, 2, 3, 2, 1, channels_last=True)),
    "taps long": (lambda x: jaxpool.avg_pool1d(x, 3, 1, 1), (1, 2, 2100),
                  lambda s: plan_avg_pool("", s, None, 1, 3, 1, 1)),
    "blocks channels-last": (lambda x: jaxpool.avg_pool2d(x, 2, channels_last=True),
                             (2, 40, 36, 3),
                             lambda s: plan_avg_pool("", s, None, 2, 2, channels_last=True)),
    "blocks adaptive channels-last": (
        lambda x: jaxpool.adaptive_avg_pool2d(x, 3, channels_last=True), (2, 12, 12, 33),
        lambda s: plan_adaptive("", s, None, 2, 3, channels_last=True)),
    "sums channels-last": (lambda x: jaxpool.adaptive_avg_pool2d(x, 4, channels_last=True),
                           (2, 15, 13, 33),
                           lambda s: plan_adaptive("", s, None, 2, 4, channels_last=True)),
    "sums up + blocks channels-last": (
        lambda x: jaxpool.adaptive_avg_pool2d(x, (9, 3), channels_last=True), (2, 7, 12, 33),
        lambda s: plan_adaptive("", s, None, 2, (9, 3), channels_last=True)),
    # 9 -> 12 and 20 -> 32: the written-out sums' and the matrix's windows, repeating
    "families": (lambda x: jaxpool.adaptive_avg_pool2d(x, (12, 32)), (2, 3, 9, 20),
                 lambda s: plan_adaptive("", s, None, 2, (12, 32))),
    "families channels-last": (
        lambda x: jaxpool.adaptive_avg_pool2d(x, (15, 3), channels_last=True), (2, 10, 4, 5),
        lambda s: plan_adaptive("", s, None, 2, (15, 3), channels_last=True)),
    "matrix": (lambda x: jaxpool.adaptive_avg_pool2d(x, (21, 17)), (1, 2, 30, 30),
               lambda s: plan_adaptive("", s, None, 2, (21, 17))),
    "matrix equal windows": (lambda x: jaxpool.avg_pool1d(x, 10, 1, 2), (1, 2, 40),
                             lambda s: plan_avg_pool("", s, None, 1, 10, 1, 2)),
    "global": (lambda x: jaxpool.global_avg_pool(x), (2, 3, 5, 7), None),
    "3d mixed": (lambda x: jaxpool.adaptive_avg_pool3d(x, (2, 3, 8)), (1, 2, 4, 5, 4),
                 lambda s: plan_adaptive("", s, None, 3, (2, 3, 8))),
}


# name -> the same op in torch, taking and returning the case's layout
TORCH = {
    "identity+sums": lambda t: F.adaptive_avg_pool2d(t, (6, 2)),
    "sums": lambda t: F.adaptive_avg_pool2d(t, 4),
    "sums up": lambda t: F.adaptive_avg_pool2d(t, (9, 5)),
    "blocks": lambda t: F.avg_pool2d(t, 4),
    "blocks long": lambda t: F.avg_pool1d(t, 4),
    "taps short": lambda t: F.avg_pool2d(t, 2),
    "repeat": lambda t: F.adaptive_avg_pool2d(t, (40, 36)),
    "taps": lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "taps channels-last": lambda t: F.avg_pool2d(t.permute(0, 3, 1, 2), 3, 2, 1).permute(0, 2, 3, 1),
    "taps long": lambda t: F.avg_pool1d(t, 3, 1, 1),
    "blocks channels-last": lambda t: F.avg_pool2d(t.permute(0, 3, 1, 2), 2).permute(0, 2, 3, 1),
    "blocks adaptive channels-last":
        lambda t: F.adaptive_avg_pool2d(t.permute(0, 3, 1, 2), 3).permute(0, 2, 3, 1),
    "sums channels-last":
        lambda t: F.adaptive_avg_pool2d(t.permute(0, 3, 1, 2), 4).permute(0, 2, 3, 1),
    "sums up + blocks channels-last":
        lambda t: F.adaptive_avg_pool2d(t.permute(0, 3, 1, 2), (9, 3)).permute(0, 2, 3, 1),
    "families": lambda t: F.adaptive_avg_pool2d(t, (12, 32)),
    "families channels-last":
        lambda t: F.adaptive_avg_pool2d(t.permute(0, 3, 1, 2), (15, 3)).permute(0, 2, 3, 1),
    "matrix": lambda t: F.adaptive_avg_pool2d(t, (21, 17)),
    "matrix equal windows": lambda t: F.avg_pool1d(t, 10, 1, 2),
    "global": lambda t: t.mean(dim=(2, 3)),
    "3d mixed": lambda t: F.adaptive_avg_pool3d(t, (2, 3, 8)),
}


# Max and LP pooling: one case per way an axis is reduced (a walk over one family of
# windows, with padding, dilation and ceil-mode overhang; several interleaved families for
# ragged adaptive windows; identity axes; channels-last; global; doubling spans for long
# windows, and the walk for long windows that reach into the left padding), and LP's two
# forms.
MAX_CASES = {
    "max family padded": (lambda x: jaxpool.max_pool2d(x, 3, 2, 1), (2, 3, 11, 10)),
    "max family dilated ceil": (lambda x: jaxpool.max_pool2d(x, (3, 2), 2, 1, (2, 3), True),
                                (2, 3, 12, 11)),
    "max families ragged": (lambda x: jaxpool.adaptive_max_pool2d(x, (4, 3)), (2, 3, 10, 7)),
    "max families up + identity": (lambda x: jaxpool.adaptive_max_pool2d(x, (7, None)),
                                   (2, 3, 3, 5)),
    "max channels-last 3d": (lambda x: jaxpool.max_pool3d(x, 2, channels_last=True),
                             (2, 4, 6, 4, 3)),
    "max 1d unbatched": (lambda x: jaxpool.max_pool1d(x, 4, 3, 2, ceil_mode=True), (3, 17)),
    "global max": (lambda x: jaxpool.global_max_pool(x), (2, 3, 5, 7)),
    "max doubling": (lambda x: jaxpool.adaptive_max_pool2d(x, (2, 1)), (2, 3, 40, 19)),
    "max long window padded": (lambda x: jaxpool.max_pool1d(x, 20, 3, 10, ceil_mode=True),
                               (2, 3, 45)),
    # ragged axes of more than windows.MAX_MAX_FAMILIES families: sliding windows and picks
    "max sliding": (lambda x: jaxpool.adaptive_max_pool2d(x, (19, 3)), (2, 3, 50, 7)),
    "max sliding up": (lambda x: jaxpool.adaptive_max_pool1d(x, 23), (2, 3, 7)),
    "lp": (lambda x: jaxpool.lp_pool2d(x, 3, 3, 2, ceil_mode=True), (2, 3, 11, 10)),
    "lp inf": (lambda x: jaxpool.lp_pool1d(x, float("inf"), 3), (2, 3, 13)),
}

MAX_TORCH = {
    "max family padded": lambda t: F.max_pool2d(t, 3, 2, 1),
    "max family dilated ceil": lambda t: F.max_pool2d(t, (3, 2), 2, 1, (2, 3), True),
    "max families ragged": lambda t: F.adaptive_max_pool2d(t, (4, 3)),
    "max families up + identity": lambda t: F.adaptive_max_pool2d(t, (7, None)),
    "max channels-last 3d":
        lambda t: F.max_pool3d(t.permute(0, 4, 1, 2, 3), 2).permute(0, 2, 3, 4, 1),
    "max 1d unbatched": lambda t: F.max_pool1d(t, 4, 3, 2, ceil_mode=True),
    "global max": lambda t: t.amax(dim=(2, 3)),
    "max doubling": lambda t: F.adaptive_max_pool2d(t, (2, 1)),
    "max long window padded": lambda t: F.max_pool1d(t, 20, 3, 10, ceil_mode=True),
    "max sliding": lambda t: F.adaptive_max_pool2d(t, (19, 3)),
    "max sliding up": lambda t: F.adaptive_max_pool1d(t, 23),
    "lp": lambda t: F.lp_pool2d(t, 3, 3, 2, ceil_mode=True),
    "lp inf": lambda t: F.lp_pool1d(t, float("inf"), 3),
}


def _axes(plan):
    return list(zip(plan.strategies, plan.tangents))


def plans(backend):
    """Each case's plan as ``backend``'s table makes it."""
    return {name: dataclasses.replace(planner(shape), backend=backend)
            for name, (_, shape, planner) in CASES.items() if planner}


# every backend's strategies: the tests run them all on the CPU
AXES = [axis for backend in BACKENDS for plan in plans(backend).values()
        for axis in _axes(plan)]


def test_every_strategy_has_a_case():
    assert set(TORCH) == set(CASES) and set(MAX_TORCH) == set(MAX_CASES)
    assert {strategy for strategy, _ in AXES} == set(STRATEGIES)
    assert {tangent for _, tangent in AXES} == set(TANGENTS)
    # taps with derivatives from one reduce_window and without
    assert {t for s, t in AXES if s == "taps"} >= {"reduce_window", "taps"}
