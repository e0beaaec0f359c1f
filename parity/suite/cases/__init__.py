"""The suite's cases: which ops run on which inputs with which arguments.

Each op family's cases are written in its own file, in the words of
:mod:`parity.suite.cases.common` (``MAIN``, ``EXTRA``, ``VALUES_ONLY``, ``ERRORS``, ...):
``pooling``, ``unpooling``, ``padding``, ``resampling``, ``grid_sampling``, ``patches``,
``fractional``, ``roi``, ``deformable``. This module gathers them and makes the cases: a ``Case`` is one op
with one argument set on one input (shape, dtype, layout), an ``ErrorCase`` the calls on
which torch and jaxpool must both raise; the default run is ``quick_cases()``, the long
sweep ``full_cases()``, and ``run_case`` turns a case into a ``CaseResult``. ``unchecked``
says which ops cannot be checked here, and why.
"""

from __future__ import annotations

import dataclasses
import time
import zlib
from typing import Any, Callable, Iterable

import ml_dtypes
import numpy as np

from ...checks import check_program_options
from ...compare import Call, compare, compare_errors
from ...results import Report
from ..ops import MAX_KINDS, OPS, jax_counterpart, torch_counterpart, torch_error_fn, unavailable
from . import (deformable, fractional, grid_sampling, padding, patches, pooling, resampling,
               roi, unpooling)

__all__ = [
    "OPS",
    "DTYPES",
    "FAMILIES",
    "Case",
    "ErrorCase",
    "CaseResult",
    "quick_cases",
    "full_cases",
    "error_cases",
    "run_case",
    "unchecked",
]

FAMILIES = (pooling, unpooling, padding, resampling, grid_sampling, patches, fractional, roi,
            deformable)
"""The family files, one per folder of jaxpool."""


def _gathered(table: str) -> dict:
    """``table`` of every family file, by op (an op's entry is written in one file only)."""
    out: dict = {}
    for family in FAMILIES:
        for op, value in getattr(family, table, {}).items():
            if op in out:
                raise ValueError(f"{op!r}: {table} is written in two family files")
            out[op] = value
    return out


MAIN = _gathered("MAIN")
EXTRA = _gathered("EXTRA")
DEFAULT = _gathered("DEFAULT")
FULL = _gathered("FULL")
VALUES_ONLY = _gathered("VALUES_ONLY")
ERRORS = _gathered("ERRORS")
DRAWN = _gathered("DRAWN")
CHEAPER = _gathered("CHEAPER")  # by (op, index into MAIN + EXTRA)

DTYPES = {
    "float64": np.dtype(np.float64),
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One op, one argument set, one input: ``shape`` is channels-first (torch's layout)."""

    op: str
    shape: tuple[int, ...]
    kwargs: tuple[tuple[str, Any], ...]
    dtype: str = "float64"
    channels_last: bool = False
    orders: int = 3
    # "nonfinite": inf, -inf and nan planted in the input; "relu ties" / "integer ties":
    # inputs full of equal elements (max(x, 0), small integers); "negative sums": signed
    # inputs to an odd LP norm; "repeated indices": max_unpool's indices from overlapping
    # windows, some naming one element twice. Values (and indices) only.
    special: str = ""
    # the shapes of the arrays after the first, channels-first: grid_sample's grid, drawn
    # from a standard normal; or arrays the op takes by keyword (roi_align's boxes), which
    # the family's DRAWN rule draws
    shapes: tuple[tuple[int, ...], ...] = ()

    @property
    def ndim(self) -> int:
        return OPS[self.op].spatial(self.shape, dict(self.kwargs))

    @property
    def numpy_dtype(self) -> np.dtype:
        return DTYPES[self.dtype]

    @property
    def layout(self) -> str:
        return "last" if self.channels_last else "first"

    @property
    def label(self) -> str:
        """Arguments and input shape, e.g. ``[2,3,7,9] k=3 s=2 p=1 ceil``."""
        short = {"kernel_size": "k", "stride": "s", "padding": "p", "output_size": "out",
                 "divisor_override": "div", "dilation": "d", "norm_type": "norm",
                 "scale_factor": "scale", "upscale_factor": "r", "downscale_factor": "r",
                 "output_ratio": "ratio"}
        flags = {"ceil_mode": ("ceil", "floor"), "count_include_pad": ("pad-counted",
                 "pad-excluded"), "return_indices": ("indices", "no-indices"),
                 "align_corners": ("align-corners", "half-pixel"),
                 "antialias": ("antialias", "no-antialias"),
                 "recompute_scale_factor": ("recompute-scale", "given-scale"),
                 "aligned": ("aligned", "unaligned")}
        parts = ["[" + ",".join(map(str, shape)) + "]" for shape in (self.shape,) + self.shapes]
        for k, v in self.kwargs:
            if k in flags:
                parts.append(flags[k][0] if v else flags[k][1])
            elif k == "mode":
                parts.append(v)
            else:
                v = "x".join("-" if e is None else str(e) for e in v) if isinstance(v, tuple) else v
                parts.append(f"{short.get(k, k)}={v}")
        if self.special:
            parts.append(self.special)
        return " ".join(parts)

    @property
    def key(self) -> str:
        return f"{self.op} {self.label} {self.dtype} {self.layout}"

    @property
    def seed(self) -> int:
        return zlib.crc32(self.key.encode())

    def inputs(self) -> tuple[np.ndarray, ...]:
        """The array inputs in the case's layout and dtype: drawn in the channels-first shape
        (from a seed fixed by the case), then transposed for channels-last.

        Max pooling's derivatives agree only away from ties (at a tie each side may pick
        another element), so its inputs are distinct multiples of 1/16, exact in every
        dtype, unless the case is about ties. max_unpool's second input is the indices of
        torch's max_pool with the same arguments (each in its own window)."""
        rng = np.random.default_rng(self.seed)
        if self.shapes and OPS[self.op].arrays > 1:
            return tuple(np.ascontiguousarray(rng.standard_normal(s).astype(DTYPES[self.dtype]))
                         for s in (self.shape,) + self.shapes)
        last = len(self.shape) - self.ndim - 1
        if OPS[self.op].kind == "unpool":
            x = rng.standard_normal(self.shape).astype(DTYPES[self.dtype])
            indices = self._unpool_indices(rng)
            if self.channels_last:
                x, indices = np.moveaxis(x, last, -1), np.moveaxis(indices, last, -1)
            return np.ascontiguousarray(x), np.ascontiguousarray(indices)
        n = int(np.prod(self.shape))
        if self.special == "relu ties":  # mostly zeros: whole windows of them tie
            x = np.maximum(rng.standard_normal(self.shape) - 1.0, 0.0)
        elif self.special == "integer ties":
            x = rng.integers(-2, 3, self.shape).astype(np.float64)
        elif OPS[self.op].kind in MAX_KINDS:
            # |k| / 16 <= 16 is exact in bfloat16's 8 bits: distinct in every dtype.
            assert n <= 512, f"{self.key}: too many elements for distinct bfloat16 values"
            x = (rng.permutation(n) - n // 2).reshape(self.shape) / 16
        else:
            x = rng.standard_normal(self.shape)
            norm = dict(self.kwargs).get("norm_type", 2)
            if self.special != "negative sums" and norm not in (1, 2):
                # torch's LP pool takes the p-th root of the window's sum of x^p: nan where
                # that sum is negative (odd p) or x < 0 (fractional p). Positive inputs
                # keep the derivative checks on the function, not on nan propagation.
                x = np.abs(x)
        if self.special == "nonfinite":
            flat = x.reshape(-1)
            idx = rng.choice(flat.size, size=min(3, flat.size), replace=False)
            flat[idx] = [np.inf, -np.inf, np.nan][: len(idx)]
        if self.channels_last:
            x = np.moveaxis(x, last, -1)
        return (np.ascontiguousarray(x.astype(DTYPES[self.dtype])),)

    def _unpool_indices(self, rng: np.random.Generator) -> np.ndarray:
        """torch's max_pool indices on a plane of the unpooled extents (distinct values, so
        that each window has one maximum), of the case's shape."""
        import torch
        import torch.nn.functional as F

        kw = dict(self.kwargs)
        k, s, p = (tuple(int(v) for v in np.broadcast_to(v, self.ndim))
                   for v in (kw["kernel_size"], kw.get("stride") or kw["kernel_size"],
                             kw.get("padding", 0)))
        spatial = kw.get("output_size") or [
            (n - 1) * si - 2 * pi + ki for n, ki, si, pi in zip(self.shape[-self.ndim:], k, s, p)]
        plane = self.shape[:-self.ndim] + tuple(spatial[-self.ndim:])
        values = torch.from_numpy(rng.permutation(int(np.prod(plane))).reshape(plane) * 1.0)
        pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[self.ndim - 1]
        _, indices = pool(values, k, s, p, return_indices=True)
        assert tuple(indices.shape) == self.shape, (self.key, tuple(indices.shape))
        return indices.numpy()

    def drawn(self) -> dict[str, Any]:
        """Arrays that both sides take by keyword, drawn once from the case's seed by its
        family's ``DRAWN`` rule and never differentiated (fractional max pooling's
        samples, roi_align's boxes); none for most ops."""
        rule = DRAWN.get(self.op)
        if rule is None:
            return {}
        return rule(self, np.random.default_rng([self.seed, 1]))  # (inputs: the seed alone)

    def functions(self) -> tuple[Callable, Callable]:
        kw = dict(self.kwargs, **self.drawn())
        return (jax_counterpart(self.op, kw, self.channels_last),
                torch_counterpart(self.op, kw, self.channels_last))


@dataclasses.dataclass(frozen=True)
class ErrorCase:
    """Argument sets for ``op`` on which torch and jaxpool must both raise."""

    op: str
    calls: tuple[tuple[str, tuple, tuple[tuple[str, Any], ...]], ...]  # (label, args, kwargs)

    dtype = "-"
    layout = "-"
    orders = 0

    @property
    def label(self) -> str:
        return f"raises on bad arguments ({len(self.calls)} sets)"

    @property
    def key(self) -> str:
        return f"{self.op} errors"


@dataclasses.dataclass
class CaseResult:
    case: Case | ErrorCase
    report: Report
    seconds: float  # wall clock
    cpu_seconds: float | None = None  # the process's CPU time, its compiling threads included

    @property
    def ok(self) -> bool:
        return self.report.ok


def run_case(case: Case | ErrorCase) -> CaseResult:
    """Run one case (``compare`` or ``compare_errors``) and time it."""
    t0, cpu0 = time.perf_counter(), time.process_time()
    if isinstance(case, ErrorCase):
        import jaxpool

        calls = [Call(*args, label=label, **dict(kw)) for label, args, kw in case.calls]
        report = compare_errors(getattr(jaxpool, case.op), torch_error_fn(case.op), calls)
    else:
        jax_fn, torch_fn = case.functions()
        report = compare(jax_fn, torch_fn, *case.inputs(), orders=case.orders, seed=case.seed,
                         label=case.key, program_key=repr(case),
                         compiler_options=check_program_options())
    report.label = case.key
    return CaseResult(case, report, time.perf_counter() - t0, time.process_time() - cpu0)


# --------------------------------------------------------------------------- the runs

def _kw(d: dict) -> tuple:
    return tuple(d.items())


LAYOUTS = ("first", "last")

# The default run's derivative order per dtype where it is not 3. In float16 and bfloat16
# a third derivative is checked to about 0.5% and 4% of its scale (against 1e-12 and 2e-5
# in float64 and float32), and its program costs half as much again to trace and compile
# as the one to order 2 (the default run's 51 half-precision programs: 39 s of CPU to
# order 3, 27 s to order 2); every op still has its third derivatives checked in float64
# and float32, in both layouts. (--full and --orders 3 check every dtype to order 3.)
DEFAULT_ORDERS = {"float16": 2, "bfloat16": 2}


def _main(op: str) -> list:
    """The op's main argument sets: ``(shape, kwargs)`` or ``(shape, kwargs, shapes)``."""
    return MAIN[op]


def _extra(op: str) -> list:
    return EXTRA.get(op, [])


def _layouts(op: str, layouts: list[str]) -> list[str]:
    """The layouts an op takes: channels-first only where its function has no
    ``channels_last``, or reads a second array that is not laid out as the first."""
    import inspect

    import jaxpool

    has = "channels_last" in inspect.signature(getattr(jaxpool, op)).parameters
    if not has or (OPS[op].arrays > 1 and OPS[op].kind != "unpool"):
        return [layout for layout in layouts if layout == "first"] or ["first"]
    return layouts


def _default_variants(op: str) -> list:
    """The argument sets the default run runs for ``op``, each once (see ``quick_cases``)."""
    chosen = DEFAULT.get(op)
    return list(chosen) if chosen is not None else _main(op) + _extra(op)


def _family_index(op: str) -> int:
    """The op's place among the ops of its kind (max_pool1d 0, max_pool2d 1, ...)."""
    return [o for o in OPS if OPS[o].kind == OPS[op].kind].index(op)


def quick_cases(ops: Iterable[str] | None = None, dtypes: Iterable[str] | None = None,
                layouts: Iterable[str] | None = None) -> list:
    """The default run: each op's argument sets (its family's ``DEFAULT``, else ``MAIN``
    and ``EXTRA``), each run once, with derivatives to order 3 in float64 and float32 and
    to order 2 in float16 and bfloat16 (``DEFAULT_ORDERS``).

    The sets take the dtypes in turn (the first set float64, the next float32, ...; an op
    with fewer sets than dtypes runs them again until every dtype has one) and the layouts
    in turn, shifted by one for each further round of dtypes and for each next op of the
    same kind. So every op runs in every requested dtype and in both layouts, every kind of
    op in every dtype with every layout, every op to order 3 in both layouts (its float64
    and float32 sets take different ones), and one compiled program checks one argument set
    in one dtype and layout: a first run compiles 105 programs with derivatives, where
    crossing the main sets with every dtype and layout took 272 (``--full``: 3,042). Then the
    values-only cases (non-finite inputs, ties, negative sums, repeated indices) in
    float64 and each op's bad-argument calls.
    """
    ops = list(ops or OPS)
    dtypes = list(dtypes or DTYPES)
    layouts = list(layouts or LAYOUTS)
    cases: list = []
    for op in ops:
        variants = _default_variants(op)
        shift = _family_index(op)
        op_layouts = _layouts(op, layouts)
        for j in range(max(len(variants), len(dtypes))):
            shape, kw, *more = variants[j % len(variants)]
            turn = j // len(dtypes)
            layout = op_layouts[(j + turn + shift) % len(op_layouts)]
            dtype = dtypes[j % len(dtypes)]
            cases.append(Case(op, shape, _kw(kw), dtype, layout == "last",
                              orders=DEFAULT_ORDERS.get(dtype, 3),
                              shapes=more[0] if more else ()))
        if "float64" in dtypes:
            cases += [c for c in _values_only_cases(op, ("float64",)) if c.layout in layouts]
        cases.append(error_cases(op))
    return cases


def _values_only_cases(op: str, dtypes: Iterable[str]) -> list:
    return [Case(op, shape, _kw(kw), dtype, last, orders=0, special=special)
            for dtype in dtypes for shape, kw, special, last in VALUES_ONLY.get(op, [])]


def full_cases(ops: Iterable[str] | None = None, dtypes: Iterable[str] | None = None) -> list:
    """Every argument set (``MAIN``, ``FULL``, ``EXTRA``) in every requested dtype; the main
    sets in both layouts, the others in both in float64."""
    ops = list(ops or OPS)
    dtypes = list(dtypes or DTYPES)
    cases: list = []
    for op in ops:
        main = len(_main(op))
        variants = _main(op) + FULL.get(op, []) + _extra(op)
        both = _layouts(op, list(LAYOUTS)) == list(LAYOUTS)
        for i, (shape, kw, *more) in enumerate(variants):
            for dtype in dtypes:
                # channels-last is a transpose around the same computation: every argument
                # set gets it in float64, the main ones in every dtype.
                for cl in ((False, True) if both and (i < main or dtype == "float64")
                           else (False,)):
                    cases.append(Case(op, shape, _kw(kw), dtype, cl,
                                      shapes=more[0] if more else ()))
        cases += _values_only_cases(op, dtypes)
        cases.append(error_cases(op))
    return cases


def error_cases(op: str) -> ErrorCase:
    """The calls of the op's family's ``ERRORS`` on which both torch and jaxpool raise; their
    arrays drawn from a seed fixed by the op's name."""
    rng = np.random.default_rng(zlib.crc32(op.encode()))
    return ErrorCase(op, tuple((label, tuple(args), _kw(kw))
                               for label, args, kw in ERRORS[op](rng)))


def unchecked(ops: Iterable[str] | None = None) -> dict[str, str]:
    """Why each of ``ops`` (None: every op) that cannot be checked here is not: its torch
    twin does not load (``parity.suite.ops.unavailable``). Empty where every one can."""
    return {op: reason for op in (ops or OPS) if (reason := unavailable(op)) is not None}
