"""Every pooling op on every small input: extents 1-5 on each spatial axis, with every
output size, kernel, stride, padding, dilation, ceil_mode and count_include_pad that torch
accepts there, 1d/2d/3d, both layouts.

For each case, against torch (float64): values (max pooling's bit for bit, a zero's sign
included, and its indices exactly), the gradient and the forward-mode derivative. And one
property: a transform never changes a value: the plain call's bits (``np.signbit`` too)
and indices come out the same under ``jit``, ``jvp``, ``vjp``, ``grad``, ``linearize`` and
``vmap``. The inputs hold signed zeros and ties (as after a ReLU).

The default run takes a fixed sample of each sweep (its edge cases, or one drawn call that
torch accepts); ``-m slow`` runs all of it. Cases are
compiled a group at a time, one program per group: compile time dominates on the CPU.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxpool
from jaxpool.pooling.windows import holds_no_element, max_pool_plan
from torch_reference import to_channels_first, to_channels_last

pytestmark = pytest.mark.usefixtures("x64")

EXTENTS = range(1, 6)
KERNELS = range(1, 7)
STRIDES = range(1, 7)
OUTPUT_SIZES = (1, 2, 3, 4, 5, 6, None)
NORMS = (1, 2, 3, 1.5, float("inf"), -float("inf"))
GROUP = 12                  # cases per compiled program
# cases per (op, ndim) in the default run beside the edges (_edges): one call torch accepts
# for the ops without edges, none for the others (compile time dominates, max pooling's
# the most)
SAMPLE = {"avg": 1, "adaptive_avg": 0, "global_avg": 0, "lp": 1, "max": 0, "adaptive_max": 0,
          "global_max": 0}


def _edges(op: str, ndim: int) -> list[Case]:
    """Always in the default run: windows over a whole axis (a zero's sign), and an
    extent of 1 pooled to several windows."""
    if op.startswith("global"):
        return [Case(op, (1, 2)), Case(op, (2, 3), channels_last=True)]
    if op.startswith("adaptive"):
        return [Case(op, (1,) * ndim, ((3,),) * ndim),
                Case(op, (2, 3, 2)[:ndim], ((1,),) * ndim, channels_last=True)]
    if op == "max":
        extents = (2, 3, 2)[:ndim]
        # and windows that hold no element: dilated taps that step over one row
        empty = ((2, 1, 1, 2),) + tuple((n, 1, 0, 1) for n in extents[1:])
        return [Case(op, extents, tuple((n, 1, 0, 1) for n in extents), (False,)),
                Case(op, (1,) + extents[1:], empty, (False,), channels_last=ndim > 1)]
    return []


@dataclasses.dataclass(frozen=True)
class Case:
    """One call: op, spatial extents, per-axis options (one tuple per axis), op-wide
    options, layout."""

    op: str
    extents: tuple[int, ...]
    axes: tuple[tuple, ...] = ()
    flags: tuple = ()
    channels_last: bool = False

    @property
    def ndim(self) -> int:
        return len(self.extents)

    @property
    def shape(self) -> tuple[int, ...]:
        """Channels-first input shape (torch's)."""
        return (2, 3) + self.extents

    def arguments(self) -> dict:
        # 1d ops take ints (torch's lp_pool1d multiplies by its kernel_size)
        per_axis = [v[0] if self.ndim == 1 else v for v in zip(*self.axes)]
        if self.op == "avg":
            k, s, p = per_axis
            ceil_mode, count_include_pad = self.flags
            return dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil_mode,
                        count_include_pad=count_include_pad)
        if self.op == "max":
            k, s, p, d = per_axis
            return dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=self.flags[0])
        if self.op in ("adaptive_avg", "adaptive_max"):
            return dict(output_size=per_axis[0])
        if self.op == "lp":
            k, s = per_axis
            return dict(norm_type=self.flags[0], kernel_size=k, stride=s,
                        ceil_mode=self.flags[1])
        return {}

    def __str__(self) -> str:
        layout = " NHWC" if self.channels_last else ""
        return f"{self.op}{self.ndim}d {self.extents} {self.arguments()}{layout}"


JAX_OPS = {
    "avg": {1: jaxpool.avg_pool1d, 2: jaxpool.avg_pool2d, 3: jaxpool.avg_pool3d},
    "max": {1: jaxpool.max_pool1d, 2: jaxpool.max_pool2d, 3: jaxpool.max_pool3d},
    "adaptive_avg": {1: jaxpool.adaptive_avg_pool1d, 2: jaxpool.adaptive_avg_pool2d,
                     3: jaxpool.adaptive_avg_pool3d},
    "adaptive_max": {1: jaxpool.adaptive_max_pool1d, 2: jaxpool.adaptive_max_pool2d,
                     3: jaxpool.adaptive_max_pool3d},
    "lp": {1: jaxpool.lp_pool1d, 2: jaxpool.lp_pool2d, 3: jaxpool.lp_pool3d},
    "global_avg": {2: jaxpool.global_avg_pool},
    "global_max": {2: jaxpool.global_max_pool},
}
TORCH_OPS = {
    "avg": {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d},
    "max": {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d},
    "adaptive_avg": {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d,
                     3: F.adaptive_avg_pool3d},
    "adaptive_max": {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d,
                     3: F.adaptive_max_pool3d},
    "lp": {1: F.lp_pool1d, 2: F.lp_pool2d, 3: F.lp_pool3d},
    # global pooling: torch's mean, and max pooling's pick (adaptive_max_pool2d(x, 1))
    "global_avg": {2: lambda t: t.mean(dim=(2, 3))},
    "global_max": {2: lambda t, **kw: F.adaptive_max_pool2d(t, 1, **kw)},
}
PICKS = ("max", "adaptive_max", "global_max")   # values picked, not computed: bit for bit


def _axis_options(op: str, n: int):
    """Every per-axis option on an extent ``n`` that jaxpool's argument rules allow (torch
    decides which of them it accepts)."""
    if op == "avg":
        return [(k, s, p) for k in KERNELS for s in STRIDES for p in range(k // 2 + 1)
                if n + 2 * p >= k]
    if op == "max":
        return [(k, s, p, d) for k in KERNELS for s in STRIDES for p in range(k // 2 + 1)
                for d in (1, 2, 3) if d * (k - 1) + 1 <= n + 2 * p]
    if op in ("adaptive_avg", "adaptive_max"):
        return [(k,) for k in OUTPUT_SIZES]
    if op == "lp":
        return [(k, s) for k in KERNELS for s in STRIDES if k <= n]
    return [()]


def _flag_options(op: str):
    if op == "avg":
        return list(itertools.product((False, True), (False, True)))
    if op == "max":
        return [(False,), (True,)]
    if op == "lp":
        return list(itertools.product(NORMS, (False, True)))
    return [()]


def _cases(op: str, ndim: int) -> list[Case]:
    """1d: every extent, per-axis option, op-wide option and layout. 2d and 3d: every
    extent and per-axis option on every axis, the other axes, the op-wide options and the
    layout drawn at random (a fixed draw)."""
    rng = np.random.default_rng(ndim * 1000 + len(op))
    flags = _flag_options(op)
    singles = [(n, option) for n in EXTENTS for option in _axis_options(op, n)]
    cases = []
    if op.startswith("global"):
        return [Case(op, (h, w), channels_last=cl)
                for h in EXTENTS for w in EXTENTS for cl in (False, True)]
    if ndim == 1:
        return [Case(op, (n,), (option,), flag, cl)
                for n, option in singles for flag in flags for cl in (False, True)]
    for axis in range(ndim):
        for n, option in singles:
            others = [singles[i] for i in rng.integers(len(singles), size=ndim)]
            others[axis] = (n, option)
            cases.append(Case(op, tuple(e for e, _ in others), tuple(o for _, o in others),
                              flags[rng.integers(len(flags))], bool(rng.integers(2))))
    return cases


def _holds_no_element(case: Case) -> bool:
    """Max pooling whose windows hold no element (dilated taps that step from the padding
    over the input): torch gives -inf and an index outside the plane, and its backward
    sends the gradient there (into the next plane, or out of its tensor), so the
    derivatives expected are those of a constant, zero."""
    return case.op == "max" and any(
        holds_no_element(max_pool_plan(n, k, s, p, d, case.flags[0]))
        for n, (k, s, p, d) in zip(case.extents, case.axes))


def _accepted(case: Case) -> bool:
    """Whether torch computes this call (it raises on windows that fit no output)."""
    try:
        TORCH_OPS[case.op][case.ndim](torch.zeros(case.shape, dtype=torch.float64),
                                      **case.arguments())
    except (RuntimeError, TypeError, ValueError):
        return False
    return True


def _groups(op: str, ndim: int):
    """The default run's sample of one sweep, then all of it (``-m slow``), in groups."""
    cases = _cases(op, ndim)
    drawn = (cases[i] for i in np.random.default_rng(7).permutation(len(cases)))
    sample = _edges(op, ndim) + list(itertools.islice(filter(_accepted, drawn), SAMPLE[op]))
    return ([pytest.param(tuple(sample[i:i + GROUP]), id=f"{op}{ndim}d-sample{i // GROUP}")
             for i in range(0, len(sample), GROUP)]
            + [pytest.param(tuple(cases[i:i + GROUP]), id=f"{op}{ndim}d-{i // GROUP}",
                            marks=pytest.mark.slow) for i in range(0, len(cases), GROUP)])


SWEEPS = [(op, ndim) for op in JAX_OPS for ndim in JAX_OPS[op]]
GROUPS = [p for op, ndim in SWEEPS for p in _groups(op, ndim)]


def _input(case: Case, rng) -> np.ndarray:
    """Signed zeros and ties everywhere (small multiples of 1/2); for LP's odd and
    fractional powers, positive values (torch's NaN for a negative window sum is the
    forward pass's business, checked in test_max_values)."""
    x = rng.choice(np.array([-1.5, -0.5, -0.0, 0.0, 0.0, 0.5, 1.0, 2.0]), case.shape)
    x[:, 0] = -np.abs(x[:, 0])      # a channel of no positive value: maxima of -0.0
    if case.op == "lp" and not (case.flags[0] % 2 == 0 or math.isinf(case.flags[0])):
        x = np.abs(x) + 0.25
    return x


def _jax_call(case: Case, with_indices: bool = False):
    fn = JAX_OPS[case.op][case.ndim]
    kwargs = dict(case.arguments(), channels_last=case.channels_last)
    if with_indices:
        kwargs["return_indices"] = True
    return lambda a: fn(a, **kwargs)


def _layout(case: Case, a: np.ndarray) -> np.ndarray:
    """A channels-first array (input or pooled output) in the case's layout."""
    return to_channels_last(a, case.ndim) if case.channels_last and a.ndim > 2 else a


def _channels_first(case: Case, a) -> np.ndarray:
    a = np.asarray(a)
    return to_channels_first(a, case.ndim) if case.channels_last and a.ndim > 2 else a


def _transforms(pool, x, t, c):
    """The pooled values as every transform computes them (and the derivatives)."""
    out = {"jit": pool(x)}
    out["jvp"], jvp_out = jax.jvp(pool, (x,), (t,))
    out["vjp"], vjp = jax.vjp(pool, x)
    out["linearize"], _ = jax.linearize(pool, x)
    (_, out["grad"]), grad = jax.value_and_grad(lambda a: (jnp.vdot(pool(a), c), pool(a)),
                                                has_aux=True)(x)
    out["vmap"] = jax.vmap(pool)(x[None])[0]
    return out, {"jvp": jvp_out, "vjp": vjp(c)[0], "grad": grad}


def _same_bits(got, expected, what):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape and got.dtype == expected.dtype, what
    same = (got == expected) | (np.isnan(got) & np.isnan(expected))
    same &= np.signbit(got) == np.signbit(expected)
    assert same.all(), f"{what}: {int((~same).sum())} of {got.size} values differ"


def _close(got, expected, what, exact=False):
    got = np.asarray(got)
    if exact:
        _same_bits(got, expected, what)
        return
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-13, equal_nan=True,
                               err_msg=what)


@pytest.mark.parametrize("cases", GROUPS)
def test_every_small_case_matches_torch_under_every_transform(cases):
    rng = np.random.default_rng(len(cases) * 31 + sum(map(len, map(str, cases))))
    # the calls torch refuses (no window fits) are test_errors' business
    cases = tuple(c for c in cases if _accepted(c))
    data = []
    for case in cases:
        x = _input(case, rng)
        x_torch = torch.tensor(x, requires_grad=True)
        reference = TORCH_OPS[case.op][case.ndim]
        kwargs = case.arguments()
        y = reference(x_torch, **kwargs)
        c = rng.standard_normal(y.shape)
        t = rng.standard_normal(x.shape)
        expected = {"values": y.detach().numpy()}
        if case.op in ("max", "adaptive_max", "global_max"):
            indices = reference(torch.tensor(x), **kwargs, return_indices=True)[1]
            expected["indices"] = indices.numpy()
        if _holds_no_element(case):  # (torch's backward would write out of bounds)
            expected["vjp"], expected["jvp"] = np.zeros(x.shape), np.zeros(y.shape)
        else:
            expected["vjp"] = torch.autograd.grad(y, x_torch, torch.tensor(c))[0].numpy()
            if case.op in ("max", "adaptive_max", "global_max"):
                # torch's forward-mode rule for max pooling, the tangent at the indices,
                # written out: torch.func.jvp crashes the process on some small dilated cases
                expected["jvp"] = torch.tensor(t).flatten(2).gather(
                    2, indices.flatten(2)).reshape(indices.shape).numpy()
            else:
                expected["jvp"] = torch.func.jvp(
                    lambda a: reference(a, **kwargs), (torch.tensor(x),),
                    (torch.tensor(t),))[1].numpy()
        if case.op == "global_max":
            expected = {k: v.reshape(v.shape[:2]) if k != "vjp" else v
                        for k, v in expected.items()}
            c = c.reshape(c.shape[:2])
        data.append(tuple(jnp.asarray(a) for a in
                          (_layout(case, x), _layout(case, t), _layout(case, c))) + (expected,))

    @jax.jit
    def everything(inputs):
        return [_transforms(_jax_call(case), x, t, c)
                for case, (x, t, c) in zip(cases, inputs)]

    results = everything([d[:3] for d in data])
    for case, (x, t, c, expected), (values, derivatives) in zip(cases, data, results):
        picks = case.op in PICKS
        plain = _jax_call(case)(x)      # no transform: the op's own compiled program
        _close(_channels_first(case, plain), expected["values"], f"{case}: values", picks)
        for transform, value in values.items():
            _same_bits(value, plain, f"{case}: values under {transform}")
        _close(_channels_first(case, derivatives["vjp"]), expected["vjp"], f"{case}: vjp")
        _close(_channels_first(case, derivatives["grad"]), expected["vjp"], f"{case}: grad")
        _close(_channels_first(case, derivatives["jvp"]), expected["jvp"], f"{case}: jvp")
        if case.op in ("max", "adaptive_max"):
            got, indices = _jax_call(case, with_indices=True)(x)
            _same_bits(got, plain, f"{case}: values with indices")
            np.testing.assert_array_equal(_channels_first(case, indices), expected["indices"],
                                          err_msg=f"{case}: indices")
            batched = jax.jit(jax.vmap(_jax_call(case, with_indices=True)))(x[None])
            np.testing.assert_array_equal(batched[1][0], indices,
                                          err_msg=f"{case}: indices under vmap")


def test_the_sweeps_cover_every_op_and_strategy():
    """Each op in 1d, 2d and 3d (global: 2d), and every per-axis strategy of the average
    and max ops, appears in the default run's sample."""
    from jaxpool.pooling import plan as planning
    from jaxpool.pooling.windows import STRATEGIES, TANGENTS, choose_max_strategy, window_families

    sampled = [c for p in GROUPS if not p.marks for c in p.values[0]]
    assert {(c.op, c.ndim) for c in sampled} == set(SWEEPS)
    strategies, tangents, max_strategies = set(), set(), set()
    for c in [c for p in GROUPS for c in p.values[0]]:
        shape = _layout(c, np.zeros(c.shape)).shape
        args = c.arguments()
        if c.op == "avg":
            plan = planning.plan_avg_pool("", shape, None, c.ndim, args["kernel_size"],
                                          args["stride"], args["padding"], args["ceil_mode"],
                                          args["count_include_pad"], None, c.channels_last)
        elif c.op == "adaptive_avg":
            plan = planning.plan_adaptive("", shape, None, c.ndim, args["output_size"],
                                          c.channels_last)
        elif c.op == "max":
            plan = planning.plan_max_pool("", shape, None, c.ndim, args["kernel_size"],
                                          args["stride"], args["padding"], args["dilation"],
                                          args["ceil_mode"], c.channels_last)
            max_strategies |= {choose_max_strategy(a, f) for a in plan.axes
                               for f in window_families(a)}
            continue
        else:
            continue
        strategies |= set(plan.strategies)
        tangents |= set(plan.tangents)
    # long windows and long rows (doubling spans, matrix, repeat: more than 5 elements or
    # 16 windows) and repeating upsampling windows (families: 6 -> 9 at the least) are
    # test_nonfinite's and strategy_cases' business
    # reduce_window is the GPU table's: tests/test_strategy_table runs it on the CPU
    assert strategies == set(STRATEGIES) - {"matrix", "repeat", "families", "reduce_window"}, \
        strategies
    assert tangents == set(TANGENTS) - {"matrix"}, tangents
    assert max_strategies == {"walk"}
