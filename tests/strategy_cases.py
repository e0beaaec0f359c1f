"""One small case per strategy the library can choose, for the structural tests."""

import jaxpool
from jaxpool.plan import plan_adaptive, plan_avg_pool
from jaxpool.windows import STRATEGIES

# name -> (function of a channels-first array, input shape)
CASES = {
    "identity+blocks": (lambda x: jaxpool.adaptive_avg_pool2d(x, (6, 2)), (2, 3, 6, 8)),
    "blocks": (lambda x: jaxpool.avg_pool2d(x, 2), (2, 3, 8, 6)),
    "repeat": (lambda x: jaxpool.adaptive_avg_pool2d(x, (8, 9)), (2, 3, 4, 3)),
    "taps": (lambda x: jaxpool.avg_pool2d(x, 3, 2, 1, ceil_mode=True,
                                          count_include_pad=False), (2, 3, 9, 8)),
    "matrix": (lambda x: jaxpool.adaptive_avg_pool2d(x, (7, 11)), (1, 2, 30, 30)),
    "joint matrix": (lambda x: jaxpool.adaptive_avg_pool2d(x, 4), (2, 3, 15, 13)),
    "matrix up": (lambda x: jaxpool.adaptive_avg_pool2d(x, (9, 5)), (2, 3, 7, 3)),
    "global": (lambda x: jaxpool.global_avg_pool(x), (2, 3, 5, 7)),
    "1d taps": (lambda x: jaxpool.avg_pool1d(x, 3, 1, 1), (2, 3, 9)),
    "3d mixed": (lambda x: jaxpool.adaptive_avg_pool3d(x, (2, 3, 8)), (1, 2, 4, 5, 4)),
}

# The strategies each case exercises, read from the library's own plans.
COVERED = set()
COVERED.update(plan_adaptive("", (2, 3, 6, 8), None, 2, (6, 2)).strategies)
COVERED.update(plan_avg_pool("", (2, 3, 8, 6), None, 2, 2).strategies)
COVERED.update(plan_adaptive("", (2, 3, 4, 3), None, 2, (8, 9)).strategies)
COVERED.update(plan_avg_pool("", (2, 3, 9, 8), None, 2, 3, 2, 1, True, False).strategies)
COVERED.update(plan_adaptive("", (1, 2, 30, 30), None, 2, (7, 11)).strategies)
PER_AXIS_MATRIX = not plan_adaptive("", (1, 2, 30, 30), None, 2, (7, 11)).joint
JOINT_MATRIX = plan_adaptive("", (2, 3, 15, 13), None, 2, 4).joint


def test_every_strategy_has_a_case():
    assert COVERED == set(STRATEGIES)
    assert PER_AXIS_MATRIX and JOINT_MATRIX
