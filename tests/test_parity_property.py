"""Property test: random shapes and pooling arguments, jaxpool against torch via parity.compare.

Each test draws ``PARITY_HYPOTHESIS_EXAMPLES`` cases (default 15) under ``-m slow``, and a
third as many in the default run: set the variable higher for a longer hunt, e.g.
``PARITY_HYPOTHESIS_EXAMPLES=2000 pytest -m slow tests/test_parity_property.py``.
Cases are tiny and float64, to derivative order 1 or 2 (the suite, ``python -m parity``,
covers order 3 and the other dtypes).
"""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import parity
from parity.suite.ops import jax_counterpart, torch_counterpart

EXAMPLES = int(os.environ.get("PARITY_HYPOTHESIS_EXAMPLES", "15"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
# The default run's share: each example compiles its own programs.
DEFAULT_SETTINGS = settings(SETTINGS, max_examples=max(1, EXAMPLES // 3))


def _tuple_or_int(draw, values):
    """Draw whether to pass per-axis values as a tuple or (when they agree) as one int."""
    if len(set(values)) == 1 and draw(st.booleans()):
        return values[0]
    return tuple(values)


@st.composite
def layouts(draw, ndim, sizes):
    batch = draw(st.sampled_from([None, 1, 2]))
    channels = draw(st.integers(1, 3))
    shape = ((batch,) if batch else ()) + (channels,) + tuple(sizes)
    return shape, draw(st.booleans())


@st.composite
def avg_pool_cases(draw):
    ndim = draw(st.integers(1, 3))
    max_size = {1: 12, 2: 7, 3: 5}[ndim]
    kernel = [draw(st.integers(1, 4)) for _ in range(ndim)]
    padding = [draw(st.integers(0, k // 2)) for k in kernel]
    stride = [draw(st.integers(1, 3)) for _ in range(ndim)]
    # At least one full window fits: n + 2p >= k. torch's avg_pool3d also wants n >= k
    # (padding aside), where jaxpool returns what avg_pool1d/2d would: not drawn here.
    sizes = [draw(st.integers(lo, lo + max_size - 1))
             for lo in (max(1, k - 2 * p) if ndim < 3 else k for k, p in zip(kernel, padding))]
    shape, channels_last = draw(layouts(ndim, sizes))
    kwargs = dict(
        kernel_size=_tuple_or_int(draw, kernel),
        stride=None if draw(st.booleans()) else _tuple_or_int(draw, stride),
        padding=_tuple_or_int(draw, padding),
        ceil_mode=draw(st.booleans()),
        count_include_pad=draw(st.booleans()),
        divisor_override=draw(st.none() | st.integers(1, 6)),
    )
    return f"avg_pool{ndim}d", shape, kwargs, channels_last


@st.composite
def adaptive_cases(draw):
    ndim = draw(st.integers(1, 3))
    max_size = {1: 12, 2: 7, 3: 5}[ndim]
    sizes = [draw(st.integers(1, max_size)) for _ in range(ndim)]
    # Shrink, ragged, equal and upsampling output sizes, or None (keep the extent).
    out = [draw(st.none() | st.integers(1, n + 3)) for n in sizes]
    shape, channels_last = draw(layouts(ndim, sizes))
    output_size = out[0] if ndim == 1 and out[0] is not None else tuple(out)
    if ndim == 1 and out[0] is None:
        output_size = sizes[0]
    return f"adaptive_avg_pool{ndim}d", shape, dict(output_size=output_size), channels_last


def _check(case, orders, seed):
    op, shape, kwargs, channels_last = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if channels_last:
        ndim = int(op[-2])
        x = np.ascontiguousarray(np.moveaxis(x, len(shape) - ndim - 1, -1))
    report = parity.compare(jax_counterpart(op, kwargs, channels_last),
                            torch_counterpart(op, kwargs, channels_last),
                            x, orders=orders, seed=seed)
    assert report.ok, f"{op}(x: {x.shape}, {kwargs}, channels_last={channels_last})\n{report}"
    # Shown by --hypothesis-show-statistics: how many cases compared values, not errors.
    event("both raised" if report.rows[0].note.startswith("both raised") else "compared")


@DEFAULT_SETTINGS
@given(case=avg_pool_cases(), orders=st.integers(1, 2), seed=st.integers(0, 2**32 - 1))
def test_avg_pool_matches_torch(case, orders, seed):
    _check(case, orders, seed)


@pytest.mark.slow
@SETTINGS
@given(case=avg_pool_cases(), orders=st.integers(1, 2), seed=st.integers(0, 2**32 - 1))
def test_avg_pool_matches_torch_more_examples(case, orders, seed):
    _check(case, orders, seed)


@DEFAULT_SETTINGS
@given(case=adaptive_cases(), orders=st.integers(1, 2), seed=st.integers(0, 2**32 - 1))
def test_adaptive_avg_pool_matches_torch(case, orders, seed):
    _check(case, orders, seed)


@pytest.mark.slow
@SETTINGS
@given(case=adaptive_cases(), orders=st.integers(1, 2), seed=st.integers(0, 2**32 - 1))
def test_adaptive_avg_pool_matches_torch_more_examples(case, orders, seed):
    _check(case, orders, seed)
