"""Resampling arithmetic for one spatial axis, in plain Python (no JAX, no tracing).

Every mode of ``torch.nn.functional.interpolate`` but ``area`` (which is adaptive average
pooling, :func:`jaxpool.pooling.windows.adaptive_plan`) is separable: along each spatial axis,
output ``i`` is ``sum_t weights[i][t] * x[taps[i][t]]``. An :class:`AxisSampling` holds
those taps and weights, computed as torch 2.13's CPU kernels compute them: in float32 for
float32 and half-precision inputs and in float64 for float64 (so the taps of ``nearest``
depend on the dtype, as torch's do), with torch's clamping at the edges and the taps whose
weight is 0 kept, since torch multiplies them (``0 * inf`` is NaN in torch's result).

:func:`choose_sampling_strategy` is the one place where an axis's computation is chosen.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Sequence

import numpy as np

from jaxpool import strategy_table
from jaxpool.core import checks, dtypes
from jaxpool.core.memo import hash_once, memoized_plan
from jaxpool.pooling.plan import output_shape

PRECISIONS = ("float32", "float64")
"""The arithmetic torch's kernels use for the taps and weights: ``float32`` for float16,
bfloat16 and float32 inputs (torch's ``opmath`` type), ``float64`` for float64."""

MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")

SAMPLING_STRATEGIES = ("identity", "nonfinite-to-nan", "repeat", "phases", "filter-phases",
                       "picks", "copy-sums", "selections", "window-sums", "matrix")
"""How an axis is computed (see :func:`choose_sampling_strategy`)."""

# An axis whose outputs repeat their taps every `period` outputs (shifted by a fixed step)
# is computed from strided slices, `taps` products per phase, and its edge outputs (clamped
# taps) `taps` products per run of equal taps; up to this many products in all the program
# stays small, beyond it the window strategies are smaller.
MAX_PHASE_SLICES = 48
# The antialias filters (``filter-phases``) read 4-10 taps per output, each a strided
# slice times a vector of weights: up to this many products per period and edge run (bicubic
# 512 -> 224: 7 phases of 9 taps and 2 edge runs of 6-8 taps).
MAX_FILTER_PHASE_PRODUCTS = 128
# ... on axes this long or longer: on shorter ones the slices compile slower than the
# window sums, which cost little there at run time (BENCHMARKS.md, evidence
# `MIN_FILTER_PHASE_EXTENT`).
MIN_FILTER_PHASE_EXTENT = 256
# ... or with at most this many phases, whose slices compile as fast as the window sums
# at any extent: the transposes of bilinear and bicubic at integer scales, whose gradients
# ran 2-5x faster so (evidence `_linear_primitive`).
MAX_SHORT_FILTER_PERIOD = 4
# Outputs with different numbers of taps and no period (antialias at most scales; the
# transpose of interpolation, bicubic 224 -> 299: 5-6 taps per input) are picked as
# ``selections`` picks, missing taps masked, up to this many taps (one select tree each);
# beyond, the window sums, whose program does not grow with the taps.
MAX_SELECTION_TAPS = 8
# Outputs at the edges that break the periodic pattern are written out one by one; beyond
# this many the matrix product is used instead.
MAX_EDGE_OUTPUTS = 16
# Copies with a period take at most this many slices (phases and written-out edges); any
# other copying axis is picked from windows, a program whose size does not depend on the
# ratio or the extents.
MAX_COPY_SLICES = 8
# Axes this small (in * out) are a matrix product whatever their pattern: a program of a few
# operations, where slices would make dozens.
MAX_SMALL_MATRIX = 256
# Windows: the outputs go in blocks of up to this many, each block reading a window of the
# input that starts `stride` after the previous one's (see :class:`Windows`).
MAX_WINDOW_BLOCK = 64
# A window longer than this many strides would take that many slices to cut out.
MAX_WINDOW_CHUNKS = 4


@dataclass(frozen=True)
class AxisSampling:
    """How to resample one axis of extent ``in_size`` to ``out_size``.

    Output ``i`` is ``sum_t weights[i][t] * x[taps[i][t]]``, every product computed (a
    zero weight included, as torch does). ``copies``: every output is one element of the
    input, copied (the nearest modes, and the axes torch copies): no arithmetic at all.
    ``sums``: every output is the sum of its taps (none or more, every weight 1), added in
    tap order from ``+0``, as torch's backward of a copy adds into a zeroed gradient: the
    transpose of ``copies``. ``from_zero``: each output's weighted sum added into ``+0``, as
    torch's backward adds into a zeroed gradient: the transpose of a weighted map (whose
    own transpose, the map again, keeps a ``-0``).
    """

    in_size: int
    out_size: int
    taps: tuple[tuple[int, ...], ...]
    weights: tuple[tuple[float, ...], ...]
    copies: bool = False
    sums: bool = False
    from_zero: bool = False
    backend: str = "cpu"  # whose strategies (jaxpool.strategy_table)

    def strategy(self) -> str:
        return choose_sampling_strategy(self, self.backend)

    def linear_primitive(self) -> bool:
        """Whether the axis is computed as a linear primitive, whose tangent is the map
        itself and whose transpose is the map of :meth:`transposed`, by the strategy
        chosen for that plan (see :func:`choose_sampling_strategy`)."""
        return _linear_primitive(self)

    def matrix(self) -> np.ndarray:
        """The ``[out_size, in_size]`` matrix of the linear map (repeated taps summed)."""
        m = np.zeros((self.out_size, self.in_size))
        for i, (taps, weights) in enumerate(zip(self.taps, self.weights)):
            for j, w in zip(taps, weights):
                m[i, j] += w
        return m

    def support(self, which: Callable[[float], bool]) -> np.ndarray:
        """0/1 ``[out_size, in_size]``: output ``i`` multiplies input ``j`` by a weight
        ``w`` with ``which(w)``."""
        m = np.zeros((self.out_size, self.in_size))
        for i, (taps, weights) in enumerate(zip(self.taps, self.weights)):
            for j, w in zip(taps, weights):
                if which(w):
                    m[i, j] = 1.0
        return m

    def phases(self) -> Phases | None:
        return _cached_phases(self)

    def runs(self, outputs: range) -> list[range]:
        """``outputs`` in runs of consecutive outputs with the same taps (the clamped ends
        of an upsampling), each computed as one piece."""
        out: list[range] = []
        for i in outputs:
            if out and self.taps[i] == self.taps[out[-1].start]:
                out[-1] = range(out[-1].start, i + 1)
            else:
                out.append(range(i, i + 1))
        return out

    def transposed(self) -> AxisSampling:
        """The transpose of the map: input ``j`` of this axis is output ``j`` there, tapping
        the outputs that tap it here, with their weights (the zero weights too)."""
        return _transposed(self)

    def windows(self) -> Windows:
        """The outputs in blocks, each block's taps inside one window of a regular grid
        of windows over the input (see :class:`Windows`)."""
        return _windows(self)


@dataclass(frozen=True, eq=False)
class Windows:
    """The outputs of an axis in ``count`` blocks of ``block`` (the last one padded with
    outputs that are dropped); block ``b`` reads the ``length`` inputs from
    ``start + b*stride`` on (the input padded with zeros before 0 and past its end, where
    no tap reads). A regular grid, so cutting the windows out takes ``chunks`` slices
    whatever the ratio and extents, and the work is ``length`` per output.

    ``local[t]``: ``[count, block]``, the position of each output's tap ``t`` in its
    window, ``-1`` where the output has fewer taps (the padded outputs read position 0).
    ``layers``:
    ``(weights, support)``, both ``[count, block, length]``, one layer per repeat of a tap
    within an output: output ``i``'s ``r``-th product with window position ``j``."""

    in_size: int
    block: int
    count: int
    stride: int
    start: int
    length: int
    local: tuple[np.ndarray, ...]
    layers: tuple[tuple[np.ndarray, np.ndarray], ...]

    @property
    def chunks(self) -> int:
        return -(-self.length // self.stride)

    @property
    def padding(self) -> tuple[int, int]:
        """Zeros before and after the input so that every window lies inside it."""
        end = self.start + (self.count + self.chunks - 1) * self.stride
        return max(0, -self.start), max(0, end - self.in_size)


def _window_grid(lows: np.ndarray, highs: np.ndarray, block: int):
    """The shortest windows ``(stride, start, length)`` for blocks of ``block`` outputs
    whose taps span ``lows[i] .. highs[i]``, or None when they need too many chunks."""
    k = len(lows)
    count = -(-k // block)
    pad = count * block - k
    lo = np.concatenate([lows, np.repeat(lows[-1:], pad)]).reshape(count, block).min(1)
    hi = np.concatenate([highs, np.repeat(highs[-1:], pad)]).reshape(count, block).max(1)
    b = np.arange(count)
    slope = (lo[-1] - lo[0]) / max(count - 1, 1)
    strides = ({max(1, math.floor(slope)), max(1, math.ceil(slope))} if count > 1
               else {int(hi[0] - lo[0] + 1)})
    best = None
    for stride in sorted(strides):
        start = int((lo - b * stride).min())
        length = int((hi - b * stride).max()) - start + 1
        if -(-length // stride) <= MAX_WINDOW_CHUNKS and (best is None or length < best[2]):
            best = (stride, start, length)
    return best


def _spans(taps: tuple[tuple[int, ...], ...]) -> tuple[np.ndarray, np.ndarray]:
    """Each output's lowest and highest tap; an output with none (an input of a downscale
    that no output copies, in the transposed plan) takes its neighbour's, so that it
    lengthens no window."""
    previous = next(((min(t), max(t)) for t in taps if t), (0, 0))
    spans = []
    for t in taps:
        previous = (min(t), max(t)) if t else previous
        spans.append(previous)
    return np.array([s[0] for s in spans]), np.array([s[1] for s in spans])


@functools.lru_cache(maxsize=256)
def _windows(plan: AxisSampling) -> Windows:
    lows, highs = _spans(plan.taps)
    # The work is about out * length: the block whose windows are shortest for their
    # blocks' (a stride off the outputs' slope drifts, lengthening every window).
    best = None
    for block in range(1, min(MAX_WINDOW_BLOCK, plan.out_size) + 1):
        grid = _window_grid(lows, highs, block)
        if grid is not None:
            cost = -(-plan.out_size // block) * block * grid[2]
            if best is None or cost < best[0]:
                best = (cost, block, grid)
    if best is None:  # one block, one window over every tap
        best = (0, plan.out_size, _window_grid(lows, highs, plan.out_size))
    _, block, (stride, start, length) = best
    count = -(-plan.out_size // block)
    local = tuple(np.zeros((count, block), np.int64)
                  for _ in range(max((len(t) for t in plan.taps), default=0)))
    for i, taps in enumerate(plan.taps):
        for t in range(len(taps), len(local)):
            local[t][divmod(i, block)] = -1
    layers: list[tuple[np.ndarray, np.ndarray]] = []
    for i, (taps, weights) in enumerate(zip(plan.taps, plan.weights)):
        b, o = divmod(i, block)
        first = start + b * stride
        seen: dict[int, int] = {}
        for t, (j, w) in enumerate(zip(taps, weights)):
            local[t][b, o] = j - first
            r = seen.get(j, 0)
            seen[j] = r + 1
            if r == len(layers):
                layers.append((np.zeros((count, block, length)),
                               np.zeros((count, block, length), bool)))
            layers[r][0][b, o, j - first] = w
            layers[r][1][b, o, j - first] = True
    return Windows(plan.in_size, block, count, stride, start, length, local, tuple(layers))


@functools.lru_cache(maxsize=256)
def _linear_primitive(plan: AxisSampling) -> bool:
    strategy = plan.strategy()
    if strategy in ("filter-phases", "copy-sums") or (plan.copies and strategy != "repeat"):
        return True
    # Interpolation whose transpose takes strided slices or selections: JAX's own
    # transpose of the phases' slices (input-sized strided pads, added) or of the window
    # sums' rule ran 2-5x slower (BENCHMARKS.md, cells `bilinear x2, 4x256x32x32`, `U-Net
    # bilinear x2 align_corners, 4x64x64x64` and `bicubic 224 -> 299, 8x3`; evidence
    # `_linear_primitive`). The window sums as the transpose ran slower still.
    return (strategy in ("phases", "selections") and all(plan.transposed().taps)
            and plan.transposed().strategy() in ("phases", "filter-phases", "selections"))


@functools.lru_cache(maxsize=256)
def _transposed(plan: AxisSampling) -> AxisSampling:
    taps: list[list[int]] = [[] for _ in range(plan.in_size)]
    weights: list[list[float]] = [[] for _ in range(plan.in_size)]
    for i, (row, ws) in enumerate(zip(plan.taps, plan.weights)):
        for j, w in zip(row, ws):
            taps[j].append(i)
            weights[j].append(w)
    # Copies and sums are each other's transposes (each output of the transposed sums
    # taps one input, with weight 1); a weighted map's transpose adds from +0.
    return AxisSampling(plan.out_size, plan.in_size, tuple(map(tuple, taps)),
                        tuple(map(tuple, weights)), copies=plan.sums, sums=plan.copies,
                        from_zero=not (plan.copies or plan.sums or plan.from_zero),
                        backend=plan.backend)


@functools.lru_cache(maxsize=256)
def _cached_phases(plan: AxisSampling) -> Phases | None:
    # Tap counts that vary (antialias) come with weights that drift from period to period:
    # each output keeps its own. Cached: the search is a pass per candidate period.
    return find_phases(plan, own_weights=len({len(t) for t in plan.taps}) > 1)


@dataclass(frozen=True)
class Phases:
    """A periodic stretch of an axis: for outputs ``first + q*period + p`` (``q < count``,
    ``p < period``), tap ``t`` reads input ``starts[p][t] + q*step`` with the weight
    ``weights[p][t]``; the outputs before ``first`` and from ``first + count*period`` on are
    written out one by one. ``varying``: the weights differ from period to period (each
    output keeps its own, ``weights`` holds the first period's); only the taps and the zero
    weights repeat."""

    period: int
    step: int
    first: int
    count: int
    starts: tuple[tuple[int, ...], ...]
    weights: tuple[tuple[float, ...], ...]
    varying: bool = False

    @property
    def stop(self) -> int:
        return self.first + self.count * self.period


def _close(a: tuple[float, ...], b: tuple[float, ...], precision_of: float) -> bool:
    # Weights of a periodic axis repeat up to the rounding of the arithmetic that made them
    # (i * scale in float32 is not exactly periodic); zeros must repeat exactly, since a
    # zero weight decides where torch's NaN goes.
    return all((x == 0) == (y == 0) and abs(x - y) <= precision_of * max(abs(x), abs(y), 1e-300)
               for x, y in zip(a, b))


def find_phases(plan: AxisSampling, max_period: int | None = None,
                own_weights: bool = False) -> Phases | None:
    """The longest periodic stretch of ``plan`` (smallest period first), or None when none
    covers the axis up to ``MAX_EDGE_OUTPUTS`` outputs at its ends. ``own_weights``: only
    the taps and the zero weights need repeat, each output keeping its own weights (the
    antialias filters, computed at float32 centres, drift by more than a rounding over an
    axis)."""
    k = plan.out_size
    tolerance = math.inf if own_weights else 1e-5
    chosen = None
    ntaps = min((len(t) for t in plan.taps), default=0)
    budget = MAX_FILTER_PHASE_PRODUCTS if own_weights else MAX_PHASE_SLICES
    limit = max_period or max(1, budget // max(ntaps, 1))
    for period in range(1, min(limit, k) + 1):
        if k < 2 * period:
            break
        best = None
        step_counts: dict[int, int] = {}
        for i in range(k - period):
            steps = {b - a for a, b in zip(plan.taps[i], plan.taps[i + period])}
            if len(steps) == 1 and len(plan.taps[i]) == len(plan.taps[i + period]):
                s = steps.pop()
                step_counts[s] = step_counts.get(s, 0) + 1
        if not step_counts:
            continue
        step = max(step_counts, key=step_counts.__getitem__)
        run_start, i = None, 0
        # Runs of i where output i and output i + period match (taps shifted by `step`).
        good = [len(plan.taps[i]) == len(plan.taps[i + period])
                and all(b - a == step for a, b in zip(plan.taps[i], plan.taps[i + period]))
                and _close(plan.weights[i], plan.weights[i + period], tolerance)
                for i in range(k - period)]
        for i, ok in enumerate(good + [False]):
            if ok and run_start is None:
                run_start = i
            elif not ok and run_start is not None:
                length = i - run_start + period  # outputs covered by the run
                if best is None or length > best[1]:
                    best = (run_start, length)
                run_start = None
        if best is None:
            continue
        first, length = best
        count = length // period
        if count < 2 or first > MAX_EDGE_OUTPUTS or k - (first + count * period) > MAX_EDGE_OUTPUTS:
            continue
        starts = tuple(plan.taps[first + p] for p in range(period))
        if step <= 0 or any(t < 0 for s in starts for t in s):
            continue
        weights = tuple(plan.weights[first + p] for p in range(period))
        varying = own_weights and any(plan.weights[i] != plan.weights[i + period]
                                      for i in range(first, first + (count - 1) * period))
        found = Phases(period, step, first, count, starts, weights, varying)
        if not own_weights:
            return found
        # Taps alone repeat over short stretches at a smaller period (7 inputs per 3
        # outputs for a while at 16 per 7): the period that covers the most outputs.
        if chosen is None or count * period > chosen.count * chosen.period:
            chosen = found
    return chosen


def choose_sampling_strategy(plan: AxisSampling, backend: str = "cpu") -> str:
    """Pick how one axis is computed on ``backend``, all exact to torch's taps and NaN
    placement, each a program whose size is bounded whatever the ratio and extents. Where
    :data:`jaxpool.strategy_table.TABLE` names a strategy for the backend, that one; else
    (every backend so far) the rules below, XLA:CPU's (BENCHMARKS.md, "Resampling (CPU)"):

    - ``identity``: every output copies its own input element (nothing to do);
    - ``nonfinite-to-nan``: every output is ``x[i]*1 + x[i]*0`` (torch's linear modes when
      the extent does not change): ``x`` itself, with inf turned into NaN;
    - ``repeat``: copies at an integer upsampling (``i // factor``): broadcast and reshape;
    - ``phases``: the taps repeat every few outputs, shifted by a fixed step (a fixed
      integer or rational scale): one strided slice per phase and tap, the phases
      interleaved, and the few edge outputs that break the pattern written out;
    - ``filter-phases``: the same for antialias and the transposes of interpolation, whose
      outputs have different numbers of taps and weights that drift from period to period:
      each phase's taps are strided slices times constant vectors of its outputs' own
      weights (``phases`` takes weights that repeat to 1e-5; at 512 -> 224 a weight of
      0.0137 drifts by 3e-4 of itself within 116 outputs);
    - ``picks``: any other copies (nearest at an arbitrary scale): the outputs in blocks,
      each picked from its block's window of the input by a tree of selects (one level
      per bit of its position there); a linear map whose transpose is ``copy-sums``;
    - ``copy-sums``: the transpose of copies (``plan.sums``, on every backend, whatever
      the table says): each output's taps picked as ``picks`` picks them, added in tap
      order from ``+0``; ``phases`` where they repeat within as many slices as copies
      take;
    - ``selections``: an arbitrary scale with the same number of taps per output (linear,
      bicubic), or with up to ``MAX_SELECTION_TAPS`` (antialias, the transposes of
      interpolation): each tap picked as ``picks`` does, times a constant weight vector, a
      missing tap zero by a select;
    - ``window-sums``: antialias with more taps (outputs with different numbers): each
      block of outputs multiplies its window of the input by its constant weights, zero
      outside its taps by a select (so NaN and inf reach only the outputs that tap them),
      and sums: ``length`` products per output, where a matrix product spends ``in``;
    - ``matrix``: small axes: a product with the ``[out, in]`` matrix of the map, with a
      second product that keeps NaN and inf where torch puts them.

    ``filter-phases`` is a linear map whose tangent is itself and whose transpose is the
    map of ``plan.transposed()`` (each input's sum over the outputs that tap it, added into
    ``+0`` as torch's backward adds into a zeroed gradient), computed by the strategy chosen
    here for that plan; so are ``phases`` and ``selections`` where that plan takes
    strided slices or selections (``AxisSampling.linear_primitive``), and ``identity``, ``phases`` and
    ``picks`` of copies, whose transpose is ``copy-sums`` (``+0`` where the transpose of a
    slice would keep ``-0``). The derivative rule of the other ``selections``,
    ``window-sums`` and ``matrix`` is the window sums
    (``jaxpool.resampling.kernel._tap_sums``), each window repeated for its block's outputs
    by stacked copies.
    """
    n, k = plan.in_size, plan.out_size
    if plan.sums:
        return "phases" if _few_copy_slices(plan) else "copy-sums"
    one_tap = all(len(t) == 1 for t in plan.taps)
    if one_tap and n == k and all(t == (i,) for i, t in enumerate(plan.taps)):
        return "identity"
    chosen = strategy_table.lookup("resampling", "any axis", backend)
    if chosen != strategy_table.RULES:
        return chosen
    if (not plan.copies and n == k and all(t == (i, i) for i, t in enumerate(plan.taps))
            and all(w == (1.0, 0.0) for w in plan.weights)):
        return "nonfinite-to-nan"
    if plan.copies and k % n == 0 and all(t == (i * n // k,) for i, t in enumerate(plan.taps)):
        return "repeat"
    if plan.copies:
        return "phases" if _few_copy_slices(plan) else "picks"
    phases = plan.phases()
    if n * k <= MAX_SMALL_MATRIX:
        return "matrix"
    ntaps = len(plan.taps[0])
    equal_taps = all(len(t) == ntaps for t in plan.taps)
    if phases is not None:
        edge_runs = plan.runs(range(phases.first)) + plan.runs(range(phases.stop, k))
        products = (sum(len(s) for s in phases.starts)
                    + sum(len(plan.taps[run.start]) for run in edge_runs))
        if equal_taps and products <= MAX_PHASE_SLICES:
            return "phases"
        # Its derivative is the transposed plan's map: every input must be tapped.
        if (not equal_taps and products <= MAX_FILTER_PHASE_PRODUCTS
                and (max(n, k) >= MIN_FILTER_PHASE_EXTENT
                     or phases.period <= MAX_SHORT_FILTER_PERIOD)
                and all(plan.transposed().taps)):
            return "filter-phases"
    if equal_taps or max(map(len, plan.taps)) <= MAX_SELECTION_TAPS:
        return "selections"
    return "window-sums"


def _few_copy_slices(plan: AxisSampling) -> bool:
    """Copies or their sums repeat with a period, within ``MAX_COPY_SLICES`` slices (one
    per tap of each phase and of each edge output)."""
    phases = plan.phases()
    if phases is None:
        return False
    edges = list(range(phases.first)) + list(range(phases.stop, plan.out_size))
    slices = sum(len(s) for s in phases.starts) + sum(len(plan.taps[i]) for i in edges)
    return slices <= MAX_COPY_SLICES


# --- torch's arithmetic ------------------------------------------------------------------

def _scalar(precision: str) -> Callable[[float], float]:
    return np.float32 if precision == "float32" else np.float64  # type: ignore[return-value]


def _floorf(value) -> int:
    # torch's kernels floor with floorf, which first rounds a double to float32.
    return int(math.floor(np.float32(value)))


def compute_scale(in_size: int, out_size: int, align_corners: bool, scale: float | None,
                  precision: str):
    """torch's ``area_pixel_compute_scale``: ``(n-1)/(out-1)`` with ``align_corners`` (0
    for one output), else ``1/scale`` when a scale factor reaches the kernel, else
    ``n/out``; in the kernel's arithmetic."""
    f = _scalar(precision)
    if align_corners:
        return f(in_size - 1) / f(out_size - 1) if out_size > 1 else f(0)
    if scale is not None and scale > 0:
        return f(1.0 / scale)
    return f(in_size) / f(out_size)


def _fused_multiply_add(a, b: float, c: float, precision: str):
    """``a*b + c`` rounded once to ``precision``, as torch's compiled kernels compute it
    (the compiler fuses it into one FMA instruction): the rounding decides whether a source
    index that is an integer in exact arithmetic lands just above it, and so whether a tap
    weighs ``0`` (``0 * inf`` is NaN) or a tiny fraction (inf stays inf)."""
    exact = Fraction(float(a)) * Fraction(b) + Fraction(c)
    nearest = float(exact)  # correctly rounded to float64
    if precision != "float32":
        return np.float64(nearest)
    single = np.float32(nearest)
    if Fraction(nearest) == exact:
        return single
    # Rounding twice (to float64, then float32) can miss by one float32 step.
    candidates = (np.nextafter(single, np.float32(-np.inf)), single,
                  np.nextafter(single, np.float32(np.inf)))
    return min(candidates, key=lambda v: abs(Fraction(float(v)) - exact))


def _source_index(scale, i: int, align_corners: bool, cubic: bool, precision: str):
    f = _scalar(precision)
    if align_corners:
        return scale * f(i)
    src = _fused_multiply_add(scale, i + 0.5, -0.5, precision)
    return f(0) if (not cubic and src < 0) else src


def nearest_sampling(in_size: int, out_size: int, scale: float | None, exact: bool,
                     precision: str, kernel_rule: bool) -> AxisSampling:
    """torch's nearest (``exact``: nearest-exact) taps.

    ``kernel_rule``: the rule of torch's 1d and 3d forward kernels, ``floor(scale*i)``
    (``floor(scale*(i+1/2))`` for exact) with the scale and product in ``precision``;
    otherwise ``nearest_idx`` (2d forward, and torch's backward everywhere): an unchanged
    extent copies, a doubled one halves the index, else the same floor in float32.
    """
    n, k = in_size, out_size
    taps = []
    if kernel_rule:
        s = compute_scale(n, k, False, scale, precision)
        for i in range(k):
            if exact:
                real = _source_index(s, i, False, False, precision)
                j = _floorf(real + _scalar(precision)(0.5))
            else:
                j = _floorf(_source_index(s, i, True, False, precision))
            taps.append(min(j, n - 1))
    else:
        s32 = compute_scale(n, k, False, scale, "float32")
        for i in range(k):
            if exact:
                j = _floorf((i + 0.5) * np.float64(s32))
            elif k == n:
                j = i
            elif k == 2 * n:
                j = i >> 1
            else:
                j = _floorf(np.float32(i) * s32)
            taps.append(min(j, n - 1))
    return AxisSampling(n, k, tuple((j,) for j in taps), tuple((1.0,) for _ in taps),
                        copies=True)


def linear_sampling(in_size: int, out_size: int, align_corners: bool, scale: float | None,
                    precision: str) -> AxisSampling:
    """torch's linear taps: an unchanged extent is ``x[i]*1 + x[i]*0``; otherwise the
    source ``scale*(i+1/2) - 1/2`` clamped at 0 (``scale*i`` with ``align_corners``), its
    floor clamped to ``n-1``, the fraction clamped to ``[0, 1]``."""
    n, k = in_size, out_size
    f = _scalar(precision)
    if n == k:
        return AxisSampling(n, k, tuple((i, i) for i in range(k)), ((1.0, 0.0),) * k)
    s = compute_scale(n, k, align_corners, scale, precision)
    taps, weights = [], []
    for i in range(k):
        real = _source_index(s, i, align_corners, False, precision)
        j = min(_floorf(real), n - 1)
        lam1 = min(max(real - f(j), f(0)), f(1))
        lam0 = f(1) - lam1
        taps.append((j, j + (1 if j < n - 1 else 0)))
        weights.append((float(lam0), float(lam1)))
    return AxisSampling(n, k, tuple(taps), tuple(weights))


CUBIC_A = -0.75
"""torch's bicubic kernel (``antialias=False``)."""
CUBIC_A_ANTIALIAS = -0.5
"""torch's bicubic filter with ``antialias=True`` (Pillow's)."""


def _cubic1(x, a):
    return ((a + 2) * x - (a + 3)) * x * x + 1


def _cubic2(x, a):
    return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a


def cubic_sampling(in_size: int, out_size: int, align_corners: bool, scale: float | None,
                   precision: str) -> AxisSampling:
    """torch's bicubic taps: A = -0.75, the source coordinate unclamped, the four taps
    clamped to the edges (so edge outputs read one element more than once). No copy when
    the extent does not change (torch's forward has none)."""
    n, k = in_size, out_size
    f = _scalar(precision)
    a = f(CUBIC_A)
    s = compute_scale(n, k, align_corners, scale, precision)
    taps, weights = [], []
    for i in range(k):
        real = _source_index(s, i, align_corners, True, precision)
        j = min(_floorf(real), n - 1)
        t = min(max(real - f(j), f(0)), f(1))
        w = (_cubic2(t + f(1), a), _cubic1(t, a), _cubic1(f(1) - t, a),
             _cubic2(f(1) - t + f(1), a))
        taps.append(tuple(min(max(j - 1 + m, 0), n - 1) for m in range(4)))
        weights.append(tuple(float(v) for v in w))
    return AxisSampling(n, k, tuple(taps), tuple(weights))


# The filters compute in double (torch's constants are doubles) and return the kernel's type.

def _linear_filter(x) -> float:
    x = abs(float(x))
    return 1.0 - x if x < 1.0 else 0.0


def _cubic_filter(x) -> float:
    a = CUBIC_A_ANTIALIAS
    x = abs(float(x))
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    if x < 2.0:
        return (((x - 5.0) * x + 8.0) * x - 4.0) * a
    return 0.0


def antialias_sampling(in_size: int, out_size: int, align_corners: bool, scale: float | None,
                       precision: str, cubic: bool) -> AxisSampling:
    """torch's antialiased bilinear (``cubic``: bicubic, A = -0.5) taps: a filter whose
    support widens with the downscale (``support * scale``), evaluated at each input
    centre in ``[center - support, center + support)``, normalised to sum 1. An unchanged
    extent copies (torch skips the axis)."""
    n, k = in_size, out_size
    if n == k:
        return AxisSampling(n, k, tuple((i,) for i in range(k)), ((1.0,),) * k, copies=True)
    f = _scalar(precision)
    interp_size = 4 if cubic else 2
    filt = _cubic_filter if cubic else _linear_filter
    s = compute_scale(n, k, align_corners, scale, precision)
    # Mixed float/double expressions as torch writes them: double literals promote.
    support = f(interp_size * 0.5 * float(s)) if s >= 1 else f(interp_size * 0.5)
    max_size = int(math.ceil(support)) * 2 + 1
    invscale = f(1.0 / float(s)) if s >= 1 else f(1)
    taps, weights = [], []
    for i in range(k):
        center = f(float(s) * (i + 0.5))
        xmin = max(int(float(center) - float(support) + 0.5), 0)
        xsize = min(int(float(center) + float(support) + 0.5), n) - xmin
        xsize = min(max(xsize, 0), max_size)
        w = [f(filt((float(f(j + xmin) - center) + 0.5) * float(invscale)))
             for j in range(xsize)]
        total = f(0)
        for v in w:
            total = total + v
        if total != 0:
            w = [v / total for v in w]
        taps.append(tuple(range(xmin, xmin + xsize)))
        weights.append(tuple(float(v) for v in w))
    return AxisSampling(n, k, tuple(taps), tuple(weights))


# --- sizes and scales ----------------------------------------------------------------------

def output_extent(in_size: int, scale: float) -> int:
    """torch's extent from a scale factor: ``int(n * scale)`` in double precision (100 x
    0.29 gives 28)."""
    return int(math.floor(float(in_size) * float(scale)))


# --- a whole op -----------------------------------------------------------------------------

@hash_once
@dataclass(frozen=True)
class ResamplePlan:
    """A whole resampling: the input's shape, its spatial axes and one plan per axis."""

    input_shape: tuple[int, ...]
    spatial_axes: tuple[int, ...]
    axes: tuple[AxisSampling, ...]

    @property
    def output_shape(self) -> tuple[int, ...]:
        return output_shape(self.input_shape, self.spatial_axes, self.axes)

    @property
    def strategies(self) -> tuple[str, ...]:
        return tuple(p.strategy() for p in self.axes)

    @property
    def order(self) -> tuple[int, ...]:
        return resample_order(self.axes)


def resample_order(axes: Sequence[AxisSampling]) -> tuple[int, ...]:
    """The order in which the axes are resampled (indices into ``axes``): the innermost
    first, as torch's kernels nest their sums (the outermost axis's weights applied last);
    the outer axis first where both of two axes copy and each one that ``picks``
    upsamples. Copies give the same values in either order (their derivatives add in
    another order: the reverse mode adds the outer axis's sums last, as torch's backward
    adds row after row); of the picks' two orders, XLA:CPU ran this one up to 14x faster
    forward and 2-3x in reverse mode (BENCHMARKS.md, "The order of the copies' axes",
    cells ``1.9355, 2x1x200x300`` and ``40 -> 57, 8x64x40x40``); a downscale by picks,
    3-D picks, phases and repeats ran level or slower outer first."""
    picks = [a for a in axes if a.strategy() == "picks"]
    if (len(axes) == 2 and picks and all(a.copies for a in axes)
            and all(a.out_size > a.in_size for a in picks)):
        return tuple(range(len(axes)))
    return tuple(reversed(range(len(axes))))


@functools.lru_cache(maxsize=1024)
def axis_sampling(mode: str, in_size: int, out_size: int, align_corners: bool,
                  scale: float | None, precision: str, antialias: bool,
                  ndim: int, backend: str = "cpu") -> AxisSampling:
    """One axis of ``interpolate``'s ``mode`` (not ``area``), as torch's CPU kernels,
    computed by ``backend``'s strategy."""
    plan = _axis_sampling(mode, in_size, out_size, align_corners, scale, precision,
                          antialias, ndim)
    return plan if backend == "cpu" else dataclasses.replace(plan, backend=backend)


def _axis_sampling(mode: str, in_size: int, out_size: int, align_corners: bool,
                   scale: float | None, precision: str, antialias: bool,
                   ndim: int) -> AxisSampling:
    if mode in ("nearest", "nearest-exact"):
        return nearest_sampling(in_size, out_size, scale, mode == "nearest-exact", precision,
                                kernel_rule=ndim != 2)
    if antialias:
        return antialias_sampling(in_size, out_size, align_corners, scale, precision,
                                  cubic=mode == "bicubic")
    if mode == "bicubic":
        return cubic_sampling(in_size, out_size, align_corners, scale, precision)
    return linear_sampling(in_size, out_size, align_corners, scale, precision)


_MODE_RANK = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}


@memoized_plan
def plan_interpolate(op: str, shape, dtype, size=None, scale_factor=None, mode="nearest",
                     align_corners=None, recompute_scale_factor=None, antialias=False,
                     channels_last=False, backend="cpu"
                     ) -> tuple[tuple[int, ...], ResamplePlan | None]:
    """Check ``interpolate``'s arguments as torch does (raising before any computation) and
    return the output's spatial extents and the plan (None for ``area``, which is
    ``adaptive_avg_pool`` to those extents), computed by ``backend``'s strategies."""
    channels_last = checks.check_channels_last(channels_last)
    backend = strategy_table.check_backend(backend)
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(repr(m) for m in MODES)}, got "
                         f"{mode!r}" + (" (torch's lanczos is not supported)"
                                        if mode == "lanczos" else ""))
    if mode in ("nearest", "nearest-exact", "area"):
        if align_corners is not None:
            raise ValueError(f"align_corners can only be set with the interpolating modes "
                             f"(linear, bilinear, bicubic, trilinear), got "
                             f"align_corners={align_corners!r} with mode={mode!r}")
        align_corners = False
    elif align_corners is None:
        align_corners = False
    else:
        align_corners = checks.check_bool("align_corners", align_corners)
    antialias = checks.check_bool("antialias", antialias)
    if recompute_scale_factor is not None:
        recompute_scale_factor = checks.check_bool("recompute_scale_factor",
                                                    recompute_scale_factor)
    shape = tuple(shape)
    if len(shape) not in (3, 4, 5):
        raise ValueError(f"{op} expects x of rank 3, 4 or 5 ([B, C] and 1 to 3 spatial axes"
                         f"{', channels last' if channels_last else ''}), got shape {shape}")
    ndim = len(shape) - 2
    wanted = _MODE_RANK.get(mode)
    if wanted is not None and wanted != ndim:
        raise ValueError(f"mode={mode!r} needs x of rank {wanted + 2} ({wanted} spatial "
                         f"axes), got shape {shape} (rank {len(shape)})")
    if antialias and not (mode in ("bilinear", "bicubic") and ndim == 2):
        raise ValueError(f"antialias=True needs mode 'bilinear' or 'bicubic' and x of rank 4, "
                         f"got mode={mode!r} and shape {shape}")
    _, spatial, _ = checks.check_input(op, shape, dtype, ndim, channels_last,
                                        batched_only=True)
    if size is not None and scale_factor is not None:
        raise ValueError(f"give only one of size and scale_factor, got size={size!r} and "
                         f"scale_factor={scale_factor!r}")
    if size is None and scale_factor is None:
        raise ValueError("either size or scale_factor must be given (both are None)")
    if size is not None:
        if recompute_scale_factor:
            raise ValueError("recompute_scale_factor=True is not meaningful with an explicit "
                             f"size (size={size!r})")
        sizes = checks.int_tuple("size", size, ndim, minimum=1, repeat_single=False)
        scales: tuple[float | None, ...] = (None,) * ndim
    else:
        factors = _scale_tuple(scale_factor, ndim)
        sizes = tuple(output_extent(n, s) for n, s in zip(spatial, factors))
        if any(k < 1 for k in sizes):
            raise ValueError(f"scale_factor={scale_factor!r} gives output extents {sizes} "
                             f"from {spatial} (int(extent * scale_factor)); each must be >= 1")
        if any(k > dtypes.INT32_MAX for k in sizes):
            raise ValueError(f"scale_factor={scale_factor!r} gives output extents {sizes}, "
                             f"beyond {dtypes.INT32_MAX}")
        # The kernels map coordinates with 1/scale_factor unless the scale is recomputed
        # from the extents (area always recomputes).
        recompute = bool(recompute_scale_factor) or mode == "area"
        scales = (None,) * ndim if recompute else factors
    if mode == "area":
        return sizes, None
    precision = "float64" if np.dtype(dtype).name == "float64" else "float32"
    axes = tuple(axis_sampling(mode, n, k, align_corners, s, precision, antialias, ndim,
                               backend)
                 for n, k, s in zip(spatial, sizes, scales))
    first = 1 if channels_last else 2
    return sizes, ResamplePlan(shape, tuple(range(first, first + ndim)), axes)


def _scale_tuple(scale_factor, ndim: int) -> tuple[float, ...]:
    accepted = f"a positive finite number or a tuple of {ndim} such numbers"
    entries = (list(scale_factor) if isinstance(scale_factor, (tuple, list))
               else [scale_factor])
    if isinstance(scale_factor, (tuple, list)) and len(entries) != ndim:
        raise ValueError(f"scale_factor must have {ndim} entries (one per spatial axis), got "
                         f"{scale_factor!r} with {len(entries)}")
    values = []
    for entry in entries:
        if isinstance(entry, (bool, np.bool_)) or not isinstance(entry, (int, float,
                                                                         np.integer,
                                                                         np.floating)):
            raise TypeError(f"scale_factor must be {accepted}, got {scale_factor!r}")
        value = float(entry)
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"scale_factor must be {accepted}, got {scale_factor!r}")
        values.append(value)
    return tuple(values) * (ndim if len(values) == 1 else 1)


@memoized_plan
def plan_pixel_shuffle(op: str, shape, factor, channels_last, inverse: bool
                       ) -> tuple[int, tuple[int, ...]]:
    """Check ``pixel_shuffle`` (``inverse``: ``pixel_unshuffle``) as torch does and return
    the factor and the output shape."""
    name = "downscale_factor" if inverse else "upscale_factor"
    channels_last = checks.check_channels_last(channels_last)
    r = checks.as_int(name, factor, factor, "a positive int")
    if r < 1:
        raise ValueError(f"{op}: {name} must be a positive int, got {factor!r}")
    shape = tuple(shape)
    if len(shape) < 3:
        raise ValueError(f"{op} expects x of rank 3 or more ("
                         f"{'[*, H, W, C]' if channels_last else '[*, C, H, W]'}), got shape "
                         f"{shape}")
    (h, w, c) = shape[-3:] if channels_last else (shape[-2], shape[-1], shape[-3])
    if inverse:
        if h % r or w % r:
            raise ValueError(f"{op}: the spatial extents {(h, w)} (shape {shape}) must be "
                             f"divisible by {name}={r}")
        h, w, c = h // r, w // r, c * r * r
    else:
        if c % (r * r):
            raise ValueError(f"{op}: the channel count {c} (shape {shape}) must be divisible "
                             f"by {name}**2 = {r * r}")
        h, w, c = h * r, w * r, c // (r * r)
    return r, shape[:-3] + ((h, w, c) if channels_last else (c, h, w))


def plan_channel_shuffle(op: str, shape, groups, channels_last) -> tuple[int, int]:
    """Check ``channel_shuffle`` as torch does; return the groups and the channel axis."""
    channels_last = checks.check_channels_last(channels_last)
    g = checks.as_int("groups", groups, groups, "a positive int")
    shape = tuple(shape)
    if len(shape) < 3:
        raise ValueError(f"{op} expects x of rank 3 or more "
                         f"({'[B, *spatial, C]' if channels_last else '[B, C, *spatial]'}), "
                         f"got shape {shape}")
    if g < 1:
        raise ValueError(f"{op}: groups must be a positive int, got {groups!r}")
    axis = len(shape) - 1 if channels_last else 1
    if shape[axis] % g:
        raise ValueError(f"{op}: the channel count {shape[axis]} (shape {shape}) must be "
                         f"divisible by groups={g}")
    return g, axis
