"""Window arithmetic for one spatial axis, in plain Python (no JAX, no tracing).

Every pooling op in jaxpool is separable: along each spatial axis it sums a set of windows
``[start, stop)`` of the (zero-padded) input, and the result is divided by the product of
per-axis divisors (or by ``divisor_override``). An :class:`AxisPlan` describes one axis and
names the strategy that computes its window sums; :func:`choose_strategy` is the one place
where that choice is made.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from jaxpool import strategy_table

# Per-axis strategies, from cheapest to most general (and ``reduce_window``, one
# ``lax.reduce_window`` sum, which backends other than the CPU take: jaxpool.strategy_table).
# Every one of them is built from pad, slice, reshape, broadcast, reduce-sum, reduce-window
# sums, select and dot, so no derivative contains a scatter.
STRATEGIES = ("identity", "sums", "blocks", "repeat", "taps", "families", "matrix",
              "reduce_window")
# How derivatives are computed along an axis (see choose_tangent).
TANGENTS = ("identity", "values", "reduce_window", "rows", "matrix", "taps", "blocks")

# Beyond this window length, one strided slice per offset makes a program that grows with
# the window; the window-matrix product does not.
MAX_TAPS = 8
# Equal windows up to this long always take strided slices; longer ones (adaptive 56 -> 7,
# 32 -> 4) pool faster, and differentiate much faster, as written-out sums.
MAX_SHORT_TAPS = 3

# Up to this many single-element slices, an axis is pooled by writing each window's sum
# out: XLA fuses them into one pass that reads the input once and writes only the output
# (on XLA:CPU close to the one-read floor and ahead of torch: BENCHMARKS.md, cell
# `adaptive 8x32x225x225 -> 11`), and the program stays bounded. Its derivatives come from
# the window matrix, so its size is bounded too.
MAX_SUM_SLICES = 512
MAX_TANGENT_MATRIX = 8192
# The written-out sums only pay when few windows remain; above this many windows the
# sums lose to reshaping, and reshapes and strided slices vectorize better
# (BENCHMARKS.md, evidence `MAX_SUM_WINDOWS`).
MAX_SUM_WINDOWS = 16
# Windows longer than this that tile the axis (adaptive 512 -> 1, 224 -> 7, 112 -> 7) are
# reshaped and summed rather than written out: the sums' program, and its compile time,
# grow with the window where the reshape's do not, and on XLA:CPU the reshape
# differentiates faster and pools about as fast (BENCHMARKS.md, "Compile time of the
# other ops", case `adaptive_avg_pool2d 1 on 512x512`; evidence `MAX_SUM_TILE`).
MAX_SUM_TILE = MAX_TAPS
# Up to this many families of repeating windows an upsampling axis is summed family by
# family: a program that grows with the families. Beyond this many, its second
# derivative compiles far slower than the window matrix's (whose compile time stays
# flat), so such axes take the other strategies (BENCHMARKS.md, evidence `MAX_FAMILIES`).
MAX_FAMILIES = 8
# Fewer windows per family than this, and the written-out sums differentiate faster than
# the families (BENCHMARKS.md, evidence `MIN_FAMILY_WINDOWS`).
MIN_FAMILY_WINDOWS = 3
# Rows at least this long (elements after the axis) make the broadcast that transposes
# ``blocks`` on an outer axis a row-by-row copy, which XLA:CPU runs at memory speed.
MIN_BROADCAST_ROW = 32


@dataclass(frozen=True)
class AxisPlan:
    """How to pool one axis of extent ``in_size`` into ``out_size`` windows.

    Window ``i`` holds ``padded[starts[i]:stops[i]:dilation]`` where ``padded`` is the input
    with ``pad_lo`` padding elements before it (zeros for a sum, never selected by a max);
    ``divisors[i]`` is torch's per-axis count for that window (average pooling only).
    """

    in_size: int
    out_size: int
    pad_lo: int
    starts: tuple[int, ...]
    stops: tuple[int, ...]
    divisors: tuple[int, ...]
    dilation: int = 1

    @property
    def lengths(self) -> tuple[int, ...]:
        return tuple(b - a for a, b in zip(self.starts, self.stops))

    @property
    def stride(self) -> int | None:
        """The common step between window starts, or None when the starts are irregular."""
        if self.out_size == 1:
            return max(self.lengths)
        steps = {b - a for a, b in zip(self.starts, self.starts[1:])}
        return steps.pop() if len(steps) == 1 else None

    @property
    def uniform(self) -> bool:
        return len(set(self.lengths)) == 1 and bool(self.stride)

    def real_rows(self, i: int) -> range:
        """Input indices (unpadded) inside window ``i``; padding adds nothing to a sum."""
        lo = max(self.starts[i] - self.pad_lo, 0)
        hi = min(self.stops[i] - self.pad_lo, self.in_size)
        return range(lo, hi)

    def strategy(self, innermost: bool = False, row_length: int = 1,
                 backend: str = "cpu") -> str:
        return choose_strategy(self, innermost, row_length, backend)

    def windows_of_rows(self) -> tuple[tuple[int, ...], ...]:
        """For each input index, the windows that hold it (the transposed structure)."""
        holding: list[list[int]] = [[] for _ in range(self.in_size)]
        for i in range(self.out_size):
            for r in self.real_rows(i):
                holding[r].append(i)
        return tuple(tuple(h) for h in holding)

    def tangent(self, innermost: bool = False, row_length: int = 1,
                elementwise_cotangent: bool = False, backend: str = "cpu") -> str:
        return choose_tangent(self, innermost, row_length, elementwise_cotangent, backend)


def choose_strategy(plan: AxisPlan, innermost: bool = False, row_length: int = 1,
                    backend: str = "cpu") -> str:
    """Pick the cheapest exact strategy for one axis on ``backend``.

    ``innermost``: the axis is the last of the array; ``row_length``: the elements after it
    (later spatial axes counted at their pooled extent). ``backend``: whose entry of
    :data:`jaxpool.strategy_table.TABLE` applies; where it says ``RULES``, the rules
    below (XLA:CPU's); on the GPU, equal windows take ``reduce_window`` (one
    ``lax.reduce_window`` sum).

    - ``identity``: every window is one element, in order (nothing to do);
    - ``blocks``: windows tile the axis back to back: reshape and sum. First on an outer
      axis with long rows (channels-last) for windows longer than ``MAX_SHORT_TAPS``: its
      transpose is a broadcast that copies whole rows, and XLA does not fold it into its
      consumers, so its gradient beats that of ``sums``, whose slices XLA copies into the
      broadcast that follows, once per output element (BENCHMARKS.md, cell
      ``adaptive 32x64x56x56 -> 7 NHWC``). Shorter tiles take ``taps`` for their values
      (the slices' forward beats ``blocks``'s, which XLA:CPU runs on one thread: cell
      ``avg 16x64x56x56 k2 NHWC``) and ``blocks`` for their derivatives (see
      :func:`choose_tangent`);
    - ``taps`` first for short equal windows (kernel 2 or 3): a few strided slices beat
      ``blocks`` and ``sums`` in the forward and the gradient (BENCHMARKS.md, cell
      ``avg 64x64x56x56 k2``; evidence ``choose_strategy: taps first``);
    - ``sums``: small axes: each window's sum written out from single-element slices
      (not for tiles longer than ``MAX_SUM_TILE``: ``blocks``);
    - ``repeat``: upsampling by an integer factor: broadcast and reshape;
    - ``families``: upsampling by a ratio that is not an integer (adaptive 9 -> 12, whose
      windows repeat every 4 outputs over 3 inputs): each family of equal windows summed
      from one strided slice per tap, the families interleaved by a stack and reshape
      (:func:`repeating_families`). Against the written-out sums and the window matrix
      it replaces: a faster forward and second derivative (a much smaller program), the
      gradient about as fast or faster (BENCHMARKS.md, cell ``adaptive 16x64x9x9 -> 12``;
      evidence ``choose_strategy: families``). Not for downsampling, whose families hold
      long windows and differentiate slower than the sums;
    - ``taps``: equal windows at a fixed stride: one strided slice per window offset;
    - ``matrix``: anything else (ragged adaptive windows, long overlapping windows): a
      product with the 0/1 window matrix.
    """
    tiles = plan.uniform and plan.lengths[0] == plan.stride
    if plan.uniform:
        length, stride = plan.lengths[0], plan.stride
        if length == 1 and stride == 1 and plan.starts[0] == 0 and plan.pad_lo == 0 \
                and plan.out_size == plan.in_size:
            return "identity"
        chosen = strategy_table.lookup("window sums", "equal windows", backend)
        if chosen != strategy_table.RULES:
            return chosen
    if (tiles and not innermost and row_length >= MIN_BROADCAST_ROW
            and plan.lengths[0] > MAX_SHORT_TAPS):
        return "blocks"
    if plan.uniform and plan.lengths[0] <= MAX_SHORT_TAPS:
        return "taps"
    if tiles and plan.lengths[0] > MAX_SUM_TILE:
        return "blocks"
    sums_fit = (sum(len(plan.real_rows(i)) for i in range(plan.out_size)) <= MAX_SUM_SLICES
                and plan.in_size * plan.out_size <= MAX_TANGENT_MATRIX
                and plan.out_size <= MAX_SUM_WINDOWS)
    families = repeating_families(plan)
    if families and (not sums_fit or plan.out_size >= MIN_FAMILY_WINDOWS * len(families)):
        return "families"
    if sums_fit:
        return "sums"
    if tiles:
        return "blocks"
    if plan.uniform and plan.lengths[0] <= MAX_TAPS:
        return "taps"
    if is_integer_upsampling(plan):
        return "repeat"
    return "matrix"


def choose_tangent(plan: AxisPlan, innermost: bool = False, row_length: int = 1,
                   elementwise_cotangent: bool = False, backend: str = "cpu") -> str:
    """Pick how derivatives along one axis are computed on ``backend`` (the same linear
    map either way). Where :data:`jaxpool.strategy_table.TABLE` names a rule for the
    backend, that rule; else the rules below (XLA:CPU's), for the values
    strategy the CPU would take (on a backend whose values differ, ``values`` becomes the
    CPU strategy's own derivative, ``blocks``).

    Every rule adds only each window's own elements, in both modes and at every order, so
    a NaN or inf in a tangent or cotangent reaches what torch's does; none is a product
    with the 0/1 window matrix (``0 * inf`` would spread it along the axis).

    - ``identity``: nothing to do;
    - ``values``: JAX differentiates the values' strategy;
    - ``rows``: for ``sums`` on an outer axis with long rows (channels-last): the tangent
      is written as the transpose of "each input row is the sum of the windows that hold
      it", so that reverse mode, which transposes it back, writes the gradient one row at
      a time from slices of the cotangent, faster than a window-matrix product, which
      needs a transpose around it on outer axes (BENCHMARKS.md, cell
      ``adaptive 64x256x15x15 -> 4 NHWC``); and for ``sums`` elsewhere, although the
      product (which spreads NaN and inf) is faster on long equal windows: keeping NaN
      and inf local costs most there, and no local rule tried did better
      (BENCHMARKS.md, "Derivative rules that keep NaN and inf where torch puts them",
      cell ``adaptive 32x64x56x56 -> 7``);
    - ``taps``: for ``taps``, the same strided slices with each slice padded to the full
      output: its values are slower (XLA writes each padded slice out), its derivatives
      faster than differentiating the values' form (BENCHMARKS.md, cell
      ``avg 16x64x56x56 k3 s2 p1 ceil``);
    - ``blocks``: reshape and sum, for windows up to ``MAX_SHORT_TAPS`` long that tile the
      axis (``avg_pool2d(x, 2)``), whatever the values' strategy: its transpose is a
      broadcast, which XLA:CPU fuses with the forward's strided slices into one pass over
      the gradient on every thread (the values' own ``blocks`` ended in one single-threaded
      fusion; a ``reduce_window`` transpose is a pass per axis). Against the rules it
      replaced: a faster second derivative everywhere and a faster gradient on 2x2
      windows (3x3 tiles: no faster), and keeping ``reduce_window`` on the innermost
      axis beside it made the gradient slower (BENCHMARKS.md, cells
      ``avg 16x64x56x56 k2 NHWC``, ``avg 64x64x56x56 k2``, ``avg 32x256x14x14 k2``;
      "``avg_pool2d(x, 2)``'s derivatives"). Not where the cotangent reaching the pooling
      is an elementwise chain of the op's own (``elementwise_cotangent``, LP pooling): XLA
      fuses that chain and the forward into the broadcast and recomputes them for every
      input element, slower than the rules below (same section, ``lp_pool2d(x, 2, 2)``);
    - ``reduce_window``: one ``lax.reduce_window`` sum, for ``blocks`` and ``taps`` of
      windows up to ``MAX_SHORT_TAPS`` long on the innermost axis when the matrix is small
      (their own transposes run slowly on XLA:CPU there, and ``reduce_window`` is as fast
      as the product or faster: BENCHMARKS.md, cells ``avg 32x256x14x14 k2``,
      ``avg 32x64x32x32 k3 s1 p1``); longer windows make XLA:CPU's ``reduce_window``
      slower than ``rows`` (cell ``adaptive 32x64x56x56 -> 7``);
    - ``matrix``: for ``matrix`` (windows too many for ``rows``): each window's elements
      selected with the 0/1 window matrix and summed, the product's work without its
      vectorized kernel, in a program whose size does not grow with the windows.
    """
    strategy = choose_strategy(plan, innermost, row_length)
    if strategy == "identity":
        return "identity"
    if backend != "cpu":
        situation = ("equal windows at stride 1" if plan.uniform and plan.stride == 1
                     and plan.lengths[0] > 1 else "other windows")
        chosen = strategy_table.lookup("window sums derivative", situation, backend)
        if chosen != strategy_table.RULES:
            return chosen
        tangent = choose_tangent(plan, innermost, row_length, elementwise_cotangent)
        if tangent == "values" and choose_strategy(plan, innermost, row_length,
                                                   backend) != strategy:
            return "blocks" if strategy == "blocks" else tangent
        return tangent
    if strategy == "sums":
        return "rows"
    if strategy == "matrix":
        return "matrix"
    if (not elementwise_cotangent and strategy in ("blocks", "taps") and plan.uniform
            and plan.lengths[0] == plan.stride and plan.lengths[0] <= MAX_SHORT_TAPS):
        return "blocks"
    if (innermost and strategy in ("blocks", "taps") and plan.lengths[0] <= MAX_SHORT_TAPS
            and plan.in_size * plan.out_size <= MAX_TANGENT_MATRIX):
        return "reduce_window"
    if strategy == "taps":
        return "taps"
    return "values"


def repeating_families(plan: AxisPlan) -> tuple[WindowFamily, ...] | None:
    """The families of an upsampling axis whose windows repeat (``n -> k`` with ``k > n``
    and ``gcd(n, k) > 1``, not an integer factor), if at most ``MAX_FAMILIES``; else None."""
    if (plan.out_size <= plan.in_size or plan.pad_lo or plan.dilation != 1
            or is_integer_upsampling(plan)):
        return None
    families = window_families(plan)
    return families if len(families) < plan.out_size and len(families) <= MAX_FAMILIES \
        else None


def is_integer_upsampling(plan: AxisPlan) -> bool:
    n, k = plan.in_size, plan.out_size
    return (plan.pad_lo == 0 and k % n == 0 and k > n
            and plan.starts == tuple(i * n // k for i in range(k))
            and set(plan.lengths) == {1})


def adaptive_plan(in_size: int, out_size: int) -> AxisPlan:
    """torch's adaptive windows: ``[floor(i*n/k), ceil((i+1)*n/k))`` for ``i < k``."""
    n, k = in_size, out_size
    starts = tuple(i * n // k for i in range(k))
    stops = tuple(-((-(i + 1) * n) // k) for i in range(k))
    lengths = tuple(b - a for a, b in zip(starts, stops))
    return AxisPlan(n, k, 0, starts, stops, lengths)


def avg_pool_out_size(in_size: int, kernel: int, stride: int, padding: int,
                      ceil_mode: bool, dilation: int = 1) -> int:
    """torch's ``pooling_output_shape``: floor (or ceil) division, and with ``ceil_mode`` the
    last window may not start inside the right padding. ``kernel`` spans
    ``dilation * (kernel - 1) + 1`` elements."""
    span = in_size + 2 * padding - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= in_size + padding:
        out -= 1
    return out


def avg_pool_plan(in_size: int, kernel: int, stride: int, padding: int, ceil_mode: bool,
                  count_include_pad: bool) -> AxisPlan:
    """torch's avg_pool windows along one axis, in coordinates of the left-padded input.

    ``divisors`` follow torch: with ``count_include_pad`` the window clipped to the padded
    extent ``in_size + 2*padding``; without it, the window clipped to the real input.
    """
    k = avg_pool_out_size(in_size, kernel, stride, padding, ceil_mode)
    starts, stops, divisors = [], [], []
    for i in range(k):
        lo = i * stride - padding                  # in input coordinates
        hi_padded = min(lo + kernel, in_size + padding)
        count = (hi_padded - lo) if count_include_pad else (min(lo + kernel, in_size) - max(lo, 0))
        starts.append(lo + padding)
        stops.append(lo + padding + kernel)
        divisors.append(count)
    # A ceil-mode window may overhang the padded input; its overhang holds zeros, so the
    # window keeps its full kernel length (uniform windows stay uniform) and only the
    # divisor sees the clipping.
    return AxisPlan(in_size, k, padding, tuple(starts), tuple(stops), tuple(divisors))


def max_pool_plan(in_size: int, kernel: int, stride: int, padding: int, dilation: int,
                  ceil_mode: bool) -> AxisPlan:
    """torch's max_pool windows along one axis, in coordinates of the left-padded input:
    window ``i`` holds every ``dilation``-th element of ``[i*stride, i*stride + span)``
    (``span = dilation*(kernel-1) + 1``). Taps in the padding (or beyond the input, in
    ceil mode) are never selected; ``divisors`` counts the real ones."""
    k = avg_pool_out_size(in_size, kernel, stride, padding, ceil_mode, dilation)
    span = dilation * (kernel - 1) + 1
    starts = tuple(i * stride for i in range(k))
    stops = tuple(a + span for a in starts)
    real = tuple(sum(0 <= a + j * dilation - padding < in_size for j in range(kernel))
                 for a in starts)
    return AxisPlan(in_size, k, padding, starts, stops, real, dilation)


def holds_no_element(plan: AxisPlan) -> bool:
    """Whether no window of a max pooling axis holds an input element: dilated taps that
    step from the padding over a tiny input (1 element, kernel 2, dilation 2, padding 1).
    Then no window of the op holds one. Along an axis either every window holds an element
    or none does (checked for extents to 40, kernels to 8, strides to 6, dilations to 8)."""
    return plan.out_size > 0 and not any(plan.divisors)


def first_taps(plan: AxisPlan) -> tuple[int, ...]:
    """Each window's first tap at or after the input's start (input coordinates; it may
    lie beyond the input): where torch's max pooling starts its walk, and the index it
    reports for a window that holds no element."""
    return tuple(a - plan.pad_lo + -(-max(plan.pad_lo - a, 0) // plan.dilation) * plan.dilation
                 for a in plan.starts)


@dataclass(frozen=True)
class WindowFamily:
    """Windows ``first, first + period, first + 2*period, ...`` of an axis (``count`` of
    them) that start ``step`` apart from ``start`` (padded coordinates) and hold ``taps``
    elements each, ``dilation`` apart: one strided slice of the padded input per tap."""

    first: int
    period: int
    count: int
    start: int
    step: int
    taps: int
    dilation: int

    @property
    def span(self) -> int:
        """Elements from a window's first tap to its last, both included."""
        return (self.taps - 1) * self.dilation + 1

    def coordinates(self, tap: int, pad_lo: int) -> tuple[int, ...]:
        """Input index (unpadded) of element ``tap`` of each window of the family."""
        return tuple(self.start + q * self.step + tap * self.dilation - pad_lo
                     for q in range(self.count))


def window_families(plan: AxisPlan) -> tuple[WindowFamily, ...]:
    """Split an axis's windows into the fewest families of equal windows at a fixed step,
    taking every ``period``-th window (``period`` the smallest divisor of ``out_size`` that
    works). Pooling windows make one family; torch's adaptive windows make
    ``out_size / gcd(in_size, out_size)`` (window ``i`` of ``n -> k`` starts at
    ``floor(i*n/k)``, so windows ``k/g`` apart start ``n/g`` apart), so a ragged axis is
    pooled from strided slices too, with no gather."""
    k, d = plan.out_size, plan.dilation
    counts = tuple(len(range(a, b, d)) for a, b in zip(plan.starts, plan.stops))
    for period in (p for p in range(1, k + 1) if k % p == 0):
        families = []
        for first in range(period):
            starts = plan.starts[first::period]
            steps = {b - a for a, b in zip(starts, starts[1:])}
            if len(set(counts[first::period])) != 1 or len(steps) > 1:
                break
            families.append(WindowFamily(first, period, len(starts), starts[0],
                                         steps.pop() if steps else 1, counts[first], d))
        else:
            return tuple(families)
    raise AssertionError("unreachable: period out_size always works")


# Up to this many taps a family of max-pooling windows is walked tap by tap (a program that
# grows with the window); longer windows (global and adaptive heads: 56 -> 1, 1000 -> 37)
# take the maxima of doubling spans, a program that grows with the window's logarithm,
# whose compile time stays small where the walk's grows with the window (BENCHMARKS.md,
# evidence `MAX_WALK_TAPS`).
MAX_WALK_TAPS = 16


def choose_max_strategy(plan: AxisPlan, family: WindowFamily) -> str:
    """How a family of max-pooling windows is reduced, torch's pick either way:

    - ``walk``: one strided slice per tap, each compared with the winner so far;
    - ``doubling``: winners of spans of 1, 2, 4, ... taps from all positions, each level
      from two shifted slices of the one below; a window combines the spans that tile it,
      left to right. For windows with more than ``MAX_WALK_TAPS`` taps none of which lies
      in the left padding (a padded tap there could shadow a real -inf).
    """
    left_padded = family.start - plan.pad_lo < 0
    return "doubling" if family.taps > MAX_WALK_TAPS and not left_padded else "walk"


# Up to this many taps per window (the product over the pooled axes) the derivatives of
# a max pooling come from each window's winner over all axes at once: reverse mode then
# writes one compare and select per tap and window, a program that grows with the
# product, where the walk's own derivative grows with the sum.
MAX_PICK_TAPS = 32
# Up to this many elements, a ragged axis's gradient may be written one row at a time (a
# program that grows with the axis).
MAX_PICK_ROWS = 64


def choose_max_tangent(axes: tuple[AxisPlan, ...], innermost_pooled: bool) -> tuple[str, ...]:
    """How the derivatives of a max pooling's window maxima are computed, per spatial axis
    (the same linear map either way, which sends each window's tangent to its winner).
    ``axes``: the op's per-axis plans; ``innermost_pooled``: the last array axis is the
    last of them and pools (channels-first).

    - ``identity``: nothing to do along the axis;
    - ``whole axis``: one window over the axis: the winner's position by reductions, held
      constant;
    - ``picks``: every pooling axis at once, from each window's winner coded as a small
      integer (which tap along each axis), kept by the walk: reverse mode builds each
      phase of the input (position mod stride, per axis) from the few windows that reach
      it, compared with their codes, and interleaves the phases, where the walk's
      transpose writes a padded copy per tap and axis. For one family of windows at a
      fixed stride on every pooling axis, walked, with at most ``MAX_PICK_TAPS`` taps;
      on channels-first arrays only when the innermost axis's windows overlap at a stride
      of at least 2: there and on channels-last arrays the picks beat ``values`` in the
      gradient and the second derivative, where on channels-first windows at stride 1 or
      without overlap they lose one of the two (BENCHMARKS.md, cells
      ``max 64x64x112x112 k3 s2 p1``, ``max 64x64x112x112 k3 s2 p1 NHWC``,
      ``max 32x192x56x56 k3 s2 ceil``, against ``max 32x192x28x28 k3 s1 p1`` and
      ``max 16x64x112x112 k2``; evidence ``choose_max_tangent: picks``);
    - ``winners``: one axis at a time, from each window's winning tap along it: reverse
      mode builds the gradient from ``ceil(span / step)`` shifted copies of the pooled
      cotangent per family. For ragged adaptive axes (several families), all walked,
      where it beats ``values`` (BENCHMARKS.md, cells ``adaptive max 64x256x15x15 -> 4``,
      ``adaptive max 64x256x15x15 -> 4 NHWC``, ``adaptive max 32x256x14x14 -> 3``);
    - ``rows``: as ``winners``, one input row (along the axis) at a time, each the sum of
      the few windows that hold it, for ragged axes of at most ``MAX_SUM_WINDOWS`` windows
      over at most ``MAX_PICK_ROWS`` elements that are not the innermost array axis:
      there as fast as ``winners`` or faster, most on channels-last arrays; on the
      innermost axis its gradient is slower (BENCHMARKS.md, cells
      ``adaptive max 64x256x15x15 -> 4``, ``adaptive max 32x256x14x14 -> 3`` and their
      ``NHWC`` cells; "Max-pooling derivatives");
    - ``sliding``: for axes of many families (:func:`is_sliding`), JAX differentiates the
      maxima of sliding windows and the picks that copy each output's from them;
    - ``values``: the walk's own decisions repeated on the tangent, padded once
      (``kernel_max._max_with_walk_tangents``: the picks of JAX's derivative of the walk,
      whose per-tap pads made its second derivative recompute the comparisons), or JAX's
      derivative of the doubling spans (whose program grows with the window's logarithm).
    """
    pooled = [plan for plan in axes if not is_identity(plan)]
    picks = (bool(pooled) and all(_one_walked_family(p) for p in pooled)
             and math.prod(window_families(p)[0].taps for p in pooled) <= MAX_PICK_TAPS)
    if picks and innermost_pooled:
        picks = window_families(axes[-1])[0].step >= 2 and _overlapping(axes[-1])
    rules = []
    for i, plan in enumerate(axes):
        if is_identity(plan):
            rules.append("identity")
        elif is_whole_axis(plan):
            rules.append("whole axis")
        elif picks:
            rules.append("picks")
        else:
            families = window_families(plan)
            walked = all(choose_max_strategy(plan, f) == "walk" for f in families)
            innermost = innermost_pooled and i == len(axes) - 1
            if is_sliding(plan):
                rules.append("sliding")
            elif len(families) > 1 and walked:
                rows = (not innermost and plan.out_size <= MAX_SUM_WINDOWS
                        and plan.in_size <= MAX_PICK_ROWS)
                rules.append("rows" if rows else "winners")
            else:
                rules.append("values")
    return tuple(rules)


# Up to this many families a ragged axis walks each family; more (adaptive 300 -> 97 makes
# 97) take ``sliding``: a program per family made the compile time grow with the output
# size (BENCHMARKS.md, "Compile time of the other ops", case
# `adaptive_max_pool2d 97 on 300x300`).
MAX_MAX_FAMILIES = 16


def is_sliding(plan: AxisPlan) -> bool:
    """Whether a max pooling axis takes ``sliding``: the maxima of every window of each
    length at every start (one family per length, stride 1, walked or by doubling spans),
    from which each output copies its own window's (jaxpool.resampling.kernel's picks, whose
    derivative copies back). For unpadded, undilated axes of more than
    ``MAX_MAX_FAMILIES`` families (ragged adaptive windows); JAX differentiates it."""
    return (plan.pad_lo == 0 and plan.dilation == 1
            and len(window_families(plan)) > MAX_MAX_FAMILIES)


def sliding_plan(plan: AxisPlan, length: int) -> AxisPlan:
    """Every window of ``length`` elements of ``plan``'s axis, one per start."""
    count = plan.in_size - length + 1
    return AxisPlan(plan.in_size, count, 0, tuple(range(count)),
                    tuple(range(length, plan.in_size + 1)), (length,) * count)


def codes_at_once(axes: tuple[AxisPlan, ...]) -> bool:
    """Whether the ``picks`` rule finds each window's winner over every pooling axis in one
    pass (a strided slice per combination of taps, from one padded copy of the input)
    rather than walking the axes one at a time, which writes each axis's maxima and codes
    out: for three pooling axes whose windows overlap, where the one pass beats the walk
    in the gradient and the second derivative; without overlap, or on two axes or one,
    it does not (BENCHMARKS.md, ``python -m benchmarks.cells.pooling``'s cells
    ``max3d 4x64x16x56x56 k3 s2 p1`` and ``max3d 4x16x56x56x64 k3 s2 p1 NDHWC``, against
    ``max 32x192x56x56 k3 s2 ceil`` and ``max 32x192x56x56 k3 s2 ceil NHWC``; evidence
    ``codes_at_once``)."""
    pooled = [plan for plan in axes if not is_identity(plan)]
    return len(pooled) == 3 and all(_overlapping(plan) for plan in pooled)


def _overlapping(plan: AxisPlan) -> bool:
    family = window_families(plan)[0]
    return family.span > family.step


def _one_walked_family(plan: AxisPlan) -> bool:
    families = window_families(plan)
    return (len(families) == 1 and families[0].step > 0 and families[0].count > 1
            and not is_whole_axis(plan) and choose_max_strategy(plan, families[0]) == "walk")


def is_whole_axis(plan: AxisPlan) -> bool:
    """One window holding every element of the axis (global and adaptive -> 1 pooling)."""
    return (plan.out_size == 1 and plan.in_size > 1 and plan.pad_lo == 0
            and plan.dilation == 1 and plan.starts == (0,) and plan.stops == (plan.in_size,))


def is_identity(plan: AxisPlan) -> bool:
    """Every window is one element, in order: nothing to do along this axis."""
    return (plan.out_size == plan.in_size and plan.pad_lo == 0
            and plan.starts == tuple(range(plan.in_size))
            and all(b - a == 1 for a, b in zip(plan.starts, plan.stops)))
