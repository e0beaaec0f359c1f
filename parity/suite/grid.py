"""The cases of the suite: which ops run on which inputs with which arguments.

A ``Case`` is one op with one set of arguments on one input (shape, dtype, layout); the
grid of cases is ``quick_cases()`` or ``full_cases()``. ``ErrorCase`` lists argument sets
on which torch and jaxpool must both raise. ``run_case`` turns either into a ``CaseResult``.
"""

from __future__ import annotations

import dataclasses
import time
import zlib
from typing import Any, Callable, Iterable

import ml_dtypes
import numpy as np

from ..compare import Call, compare, compare_errors
from ..results import Report
from .ops import MAX_KINDS, OPS, jax_counterpart, torch_counterpart, torch_error_fn

__all__ = [
    "OPS",
    "DTYPES",
    "Case",
    "ErrorCase",
    "CaseResult",
    "quick_cases",
    "full_cases",
    "error_cases",
    "run_case",
]

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
    # the shapes of the arrays after the first (ops that read a second array, such as
    # grid_sample's grid), channels-first; each drawn from a standard normal
    shapes: tuple[tuple[int, ...], ...] = ()

    @property
    def ndim(self) -> int:
        return OPS[self.op].spatial(self.shape, dict(self.kwargs))

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
                 "recompute_scale_factor": ("recompute-scale", "given-scale")}
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
        if self.shapes:
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

    def drawn(self) -> dict[str, np.ndarray]:
        """Arrays that both sides take by keyword, drawn once from the case's seed and never
        differentiated: fractional max pooling's samples ``[N, C, d]`` (N = 1 unbatched),
        uniform in ``[0, 1)`` in the case's dtype (jaxpool's ``samples``, torch's
        ``_random_samples``)."""
        if OPS[self.op].kind != "fractional_max_pool":
            return {}
        rng = np.random.default_rng([self.seed, 1])  # (the inputs draw from the seed alone)
        dtype = DTYPES[self.dtype]
        batch = self.shape[0] if len(self.shape) == self.ndim + 2 else 1
        u = rng.random((batch, self.shape[-self.ndim - 1], self.ndim)).astype(dtype)
        below_one = dtype.type(1 - float(ml_dtypes.finfo(dtype).epsneg))
        return {"samples": np.minimum(u, below_one)}  # (rounding may have reached 1)

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
                         label=case.key, program_key=repr(case))
    report.label = case.key
    return CaseResult(case, report, time.perf_counter() - t0, time.process_time() - cpu0)


# --------------------------------------------------------------------------- the grids

# Representative argument sets per op, the first of the default grid's (--full runs each in
# every dtype and both layouts). Chosen to hit the hard parts: ragged/overlapping windows, padding, ceil_mode's extra window,
# a non-integer scale (whose nearest index torch computes in the input's dtype).
_MAIN: dict[str, list[tuple[tuple[int, ...], dict[str, Any]]]] = {
    "avg_pool1d": [((2, 3, 11), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                      count_include_pad=False))],
    "avg_pool2d": [((2, 3, 7, 9), dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1),
                                        ceil_mode=True, count_include_pad=False))],
    "avg_pool3d": [((1, 2, 5, 6, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True))],
    "adaptive_avg_pool1d": [((2, 3, 11), dict(output_size=4))],
    "adaptive_avg_pool2d": [((2, 3, 7, 9), dict(output_size=(4, 5)))],
    "adaptive_avg_pool3d": [((1, 2, 5, 6, 7), dict(output_size=(3, 4, 2)))],
    "global_avg_pool": [((2, 3, 5, 7), dict())],
    "max_pool1d": [((2, 3, 11), dict(kernel_size=3, stride=2, padding=1, dilation=2,
                                      ceil_mode=True, return_indices=True))],
    "max_pool2d": [((2, 3, 7, 9), dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1),
                                        ceil_mode=True, return_indices=True))],
    "max_pool3d": [((1, 2, 5, 6, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                           return_indices=True))],
    "adaptive_max_pool1d": [((2, 3, 15), dict(output_size=4, return_indices=True))],
    "adaptive_max_pool2d": [((2, 3, 7, 9), dict(output_size=(4, 5), return_indices=True))],
    "adaptive_max_pool3d": [((1, 2, 5, 6, 7), dict(output_size=(3, 4, 2), return_indices=True))],
    "lp_pool1d": [((2, 3, 11), dict(norm_type=2, kernel_size=3, stride=2, ceil_mode=True))],
    "lp_pool2d": [((2, 3, 7, 9), dict(norm_type=3, kernel_size=(3, 2), stride=(2, 1)))],
    "lp_pool3d": [((1, 2, 5, 6, 7), dict(norm_type=1, kernel_size=2, stride=(2, 1, 2),
                                          ceil_mode=True))],
    "global_max_pool": [((2, 3, 5, 7), dict())],
    "interpolate": [
        ((2, 3, 5, 7), dict(scale_factor=1.7, mode="nearest")),
        ((2, 3, 5, 7), dict(size=(8, 5), mode="bilinear", align_corners=False)),
        ((2, 3, 5, 7), dict(size=(9, 11), mode="bicubic", align_corners=False)),
    ],
    "max_unpool1d": [((2, 3, 5), dict(kernel_size=2))],
    "max_unpool2d": [((2, 3, 3, 4), dict(kernel_size=(2, 3), stride=(2, 3), padding=(1, 0)))],
    "max_unpool3d": [((1, 2, 2, 3, 2), dict(kernel_size=2))],
    "pad": [((2, 3, 5, 6), dict(pad=(2, 1, 1, 3), mode="reflect"))],
    "pixel_shuffle": [((2, 8, 3, 4), dict(upscale_factor=2))],
    "pixel_unshuffle": [((2, 2, 6, 4), dict(downscale_factor=2))],
}

# More argument sets, each in one dtype and layout in the default grid (--full runs each in
# every dtype, and in both layouts in float64).
_EXTRA: dict[str, list[tuple[tuple[int, ...], dict[str, Any]]]] = {
    "avg_pool1d": [
        ((2, 3, 10), dict(kernel_size=4)),
        ((3, 9), dict(kernel_size=3, stride=1, padding=1)),  # unbatched, count_include_pad
        ((2, 2, 10), dict(kernel_size=3, stride=2, divisor_override=2)),
    ],
    "avg_pool2d": [
        ((2, 3, 8, 8), dict(kernel_size=2)),
        ((3, 7, 6), dict(kernel_size=3, stride=1, padding=1)),  # unbatched
        ((1, 2, 9, 7), dict(kernel_size=(3, 3), stride=(3, 2), padding=1, divisor_override=5)),
        ((1, 2, 6, 6), dict(kernel_size=(6, 1), stride=(1, 2))),  # window = whole extent
    ],
    "avg_pool3d": [
        ((1, 2, 4, 5, 6), dict(kernel_size=(2, 3, 2), stride=(1, 2, 2), padding=(1, 1, 0),
                               count_include_pad=False)),
        ((2, 4, 4, 5), dict(kernel_size=2, divisor_override=3)),  # unbatched
    ],
    "adaptive_avg_pool1d": [
        ((2, 3, 4), dict(output_size=7)),  # upsampling: windows repeat elements
        ((3, 12), dict(output_size=4)),  # exact division, unbatched
    ],
    "adaptive_avg_pool2d": [
        ((2, 2, 4, 5), dict(output_size=(7, 3))),  # up on one axis, ragged on the other
        ((2, 3, 8, 6), dict(output_size=(None, 4))),
        ((3, 5, 5), dict(output_size=1)),  # unbatched, global
    ],
    "adaptive_avg_pool3d": [
        ((1, 2, 3, 4, 5), dict(output_size=(5, None, 2))),
        ((2, 4, 6, 3), dict(output_size=(2, 3, 3))),  # unbatched
    ],
    "global_avg_pool": [
        ((1, 4, 1, 1), dict()),
        ((3, 2, 6, 1), dict()),
    ],
    "max_pool1d": [
        ((2, 3, 10), dict(kernel_size=4)),  # values only: no indices asked for
        ((3, 9), dict(kernel_size=2, stride=1, padding=1, return_indices=True)),  # unbatched
        ((2, 2, 12), dict(kernel_size=3, dilation=3, ceil_mode=True, return_indices=True)),
    ],
    "max_pool2d": [
        ((2, 3, 8, 8), dict(kernel_size=2)),
        ((1, 2, 9, 7), dict(kernel_size=3, stride=2, padding=1, dilation=(2, 1),
                            return_indices=True)),
        ((3, 7, 6), dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 0), ceil_mode=True,
                         return_indices=True)),  # unbatched
    ],
    "max_pool3d": [
        ((1, 2, 4, 5, 6), dict(kernel_size=(2, 3, 2), stride=(1, 2, 2), padding=(1, 1, 0),
                               dilation=(1, 1, 2), return_indices=True)),
        ((2, 4, 4, 5), dict(kernel_size=2, return_indices=True)),  # unbatched
    ],
    "adaptive_max_pool1d": [
        ((2, 3, 4), dict(output_size=7, return_indices=True)),  # upsampling
        ((3, 12), dict(output_size=5)),  # unbatched, no indices
    ],
    "adaptive_max_pool2d": [
        ((2, 2, 15, 5), dict(output_size=(4, 7), return_indices=True)),  # ragged 15 -> 4, up
        ((2, 3, 8, 6), dict(output_size=(None, 4), return_indices=True)),
        ((3, 5, 5), dict(output_size=1)),  # unbatched, global
    ],
    "adaptive_max_pool3d": [
        ((1, 2, 3, 4, 5), dict(output_size=(5, None, 2), return_indices=True)),
        ((2, 4, 6, 3), dict(output_size=(2, 3, 3), return_indices=True)),  # unbatched
    ],
    "lp_pool1d": [
        ((2, 3, 10), dict(norm_type=1, kernel_size=4)),
        ((3, 9), dict(norm_type=3, kernel_size=2, stride=1)),  # unbatched
    ],
    "lp_pool2d": [
        ((2, 3, 8, 8), dict(norm_type=2, kernel_size=2)),
        ((1, 2, 9, 7), dict(norm_type=1, kernel_size=3, stride=(3, 2), ceil_mode=True)),
        ((3, 7, 6), dict(norm_type=2, kernel_size=(2, 3))),  # unbatched
    ],
    "lp_pool3d": [
        ((1, 2, 4, 5, 6), dict(norm_type=2, kernel_size=(2, 3, 2), stride=(1, 2, 2))),
        ((2, 4, 4, 5), dict(norm_type=3, kernel_size=2)),  # unbatched
    ],
    "global_max_pool": [
        ((1, 4, 1, 1), dict()),
        ((3, 2, 6, 1), dict()),
    ],
    "interpolate": [
        ((2, 3, 9), dict(scale_factor=0.6, mode="linear", align_corners=True)),
        ((1, 2, 3, 4, 5), dict(size=(5, 3, 7), mode="trilinear")),
        ((2, 3, 9), dict(size=4, mode="nearest")),
        ((1, 2, 3, 4, 3), dict(scale_factor=(1.5, 0.75, 2.0), mode="nearest")),
        ((2, 3, 5, 7), dict(scale_factor=1.7, mode="nearest-exact")),
        ((2, 3, 7, 9), dict(size=(3, 4), mode="area")),
        ((2, 3, 5, 7), dict(scale_factor=2.5, mode="bilinear", align_corners=True,
                            recompute_scale_factor=True)),
        ((1, 2, 9, 8), dict(size=(4, 3), mode="bilinear", antialias=True)),
        ((1, 2, 9, 8), dict(size=(5, 11), mode="bicubic", antialias=True)),
        ((1, 2, 4, 5), dict(scale_factor=2, mode="bicubic", align_corners=True)),
    ],
    "max_unpool1d": [
        ((3, 4), dict(kernel_size=3, stride=3, output_size=(13,))),  # unbatched, a larger size
    ],
    "max_unpool2d": [
        ((1, 2, 3, 3), dict(kernel_size=2, output_size=(7, 6))),
        ((3, 2, 4), dict(kernel_size=3, stride=3, padding=1)),  # unbatched
    ],
    "max_unpool3d": [
        ((2, 2, 3, 2), dict(kernel_size=(1, 2, 2), stride=(1, 2, 2))),  # unbatched
    ],
    "pad": [
        ((2, 3, 7), dict(pad=(3, 2), mode="reflect")),
        ((3, 4, 5), dict(pad=(2, 0, 1, 1), mode="replicate")),  # unbatched
        ((1, 2, 3, 4, 3), dict(pad=(1, 2, 3, 0, 2, 1), mode="circular")),
        ((2, 3, 6, 5), dict(pad=(-1, 2, 1, -2), mode="constant", value=0.5)),  # crops
        ((1, 2, 3, 4, 5), dict(pad=(1, 1, 2, 0, 0, 1), mode="replicate")),
        ((2, 3, 5, 6), dict(pad=(4, -2, 0, 3), mode="circular")),  # wraps the cropped axis
    ],
    "pixel_shuffle": [((18, 2, 3), dict(upscale_factor=3))],  # unbatched
    "pixel_unshuffle": [((1, 2, 6, 9), dict(downscale_factor=3))],
}


def _ties(shape: tuple[int, ...], kwargs: dict[str, Any]) -> list:
    """Inputs full of equal elements: max(x - 1, 0) channels-first, small integers
    channels-last."""
    return [(shape, kwargs, "relu ties", False), (shape, kwargs, "integer ties", True)]


# Values (and indices) only, no derivatives: (shape, arguments, special, channels_last).
# Inputs with inf, -inf and nan; for the max ops inputs full of ties; for an odd LP norm,
# inputs with negative windows (torch's p-th root of a negative sum is nan).
_VALUES_ONLY: dict[str, list[tuple[tuple[int, ...], dict[str, Any], str, bool]]] = {
    "avg_pool2d": [((1, 2, 6, 7), dict(kernel_size=3, stride=2, padding=1), "nonfinite", False)],
    "adaptive_avg_pool1d": [((2, 2, 9), dict(output_size=5), "nonfinite", False)],
    "adaptive_avg_pool2d": [((1, 2, 6, 7), dict(output_size=(4, 3)), "nonfinite", False)],
    "max_pool1d": _ties((2, 3, 11), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                          return_indices=True)),
    "max_pool2d": [((1, 2, 6, 7), dict(kernel_size=3, stride=2, padding=1, return_indices=True),
                    "nonfinite", False)]
    + _ties((2, 3, 7, 9), dict(kernel_size=3, stride=2, padding=1, dilation=(1, 2),
                               return_indices=True)),
    "max_pool3d": _ties((1, 2, 5, 6, 7), dict(kernel_size=2, stride=1, padding=1,
                                               return_indices=True)),
    "adaptive_max_pool1d": _ties((2, 3, 15), dict(output_size=4, return_indices=True)),
    "adaptive_max_pool2d": [((1, 2, 6, 7), dict(output_size=(4, 3), return_indices=True),
                             "nonfinite", False)]
    + _ties((2, 3, 15, 9), dict(output_size=(4, 5), return_indices=True)),
    "adaptive_max_pool3d": _ties((1, 2, 5, 6, 7), dict(output_size=(3, 4, 2),
                                                        return_indices=True)),
    "global_max_pool": _ties((2, 3, 5, 7), dict()),
    "fractional_max_pool2d": [((1, 2, 6, 7), dict(kernel_size=2, output_size=(4, 3),
                                                  return_indices=True), "nonfinite", False)]
    + _ties((2, 3, 7, 9), dict(kernel_size=(3, 2), output_size=(4, 5), return_indices=True)),
    "fractional_max_pool3d": _ties((1, 2, 5, 6, 7), dict(kernel_size=2, output_size=(3, 4, 5),
                                                          return_indices=True)),
    "lp_pool1d": [((2, 3, 11), dict(norm_type=3, kernel_size=3, stride=2), "negative sums",
                   False)],
    "lp_pool2d": [((1, 2, 6, 7), dict(norm_type=2, kernel_size=2), "nonfinite", False)],
    "interpolate": [((1, 2, 5, 6), dict(size=(7, 4), mode="bilinear"), "nonfinite", False),
                    ((1, 2, 5, 6), dict(scale_factor=1.7, mode="nearest"), "nonfinite", True)],
    "max_unpool2d": [((2, 3, 3, 4), dict(kernel_size=3, stride=2), "repeated indices", False),
                     ((2, 3, 3, 4), dict(kernel_size=3, stride=2), "repeated indices", True)],
    "pad": [((1, 2, 5, 6), dict(pad=(2, 1, 1, 3), mode="reflect"), "nonfinite", False)],
}


# The default grid's argument sets (see quick_cases). Where an op is not named here, they
# are its _MAIN and _EXTRA sets, each once; between them they hold every kind of behaviour
# the op has (for max pooling: overlapping windows, padding, ceil_mode's extra window,
# dilation, indices or none, an unbatched input), each in one dtype and layout, and an op
# with fewer sets than dtypes runs them again from the first. Named here:
# - an op with three sets gives its fourth dtype (bfloat16) its cheapest set again, not its
#   main one, where the main one's program costs 1.6 to 4 times as much CPU to trace and
#   compile;
# - max_pool3d and adaptive_max_pool2d run a cheaper stand-in (_CHEAPER) for their
#   costliest set;
# - interpolate leaves out nearest on one axis (nearest runs on two axes and on three at
#   mixed scales) and bicubic with align_corners (align_corners runs with linear and
#   bilinear, bicubic with half-pixel centers and with antialias);
# - pad leaves out reflect on one axis and replicate on three (reflect runs on two axes,
#   replicate on two, three axes with circular);
# --full runs every set in every dtype.
def _sets(op: str, *drop: int, again: int | None = None) -> list:
    sets = [_CHEAPER.get((op, i), v) for i, v in enumerate(_MAIN[op] + _EXTRA[op])
            if i not in drop]
    return sets + ([sets[again]] if again is not None else [])


# Stand-ins in the default grid for the two sets whose programs cost the most: the same
# kinds of argument, and jaxpool runs the same lines in either layout as for the originals
# (which strategy and derivative rule each axis takes), with fewer taps or windows.
# max_pool3d's main set: 27 taps, 4.5 s of CPU to trace and compile; this one 12 taps
# (dilation keeps every axis's windows overlapping, ceil_mode adds a window on one axis),
# 2.1 s. adaptive_max_pool2d's ragged 15 -> 4 and up 5 -> 7: 4 and 7 families of windows,
# 3.1 to 4.7 s; ragged 7 -> 4 and up 3 -> 5: 4 and 5 families, 1.6 s. --full runs the
# originals.
_CHEAPER: dict[tuple[str, int], tuple[tuple[int, ...], dict[str, Any]]] = {
    ("max_pool3d", 0): ((1, 2, 5, 6, 7), dict(kernel_size=(3, 2, 2), stride=2,
                                              padding=(1, 1, 0), dilation=(1, 2, 2),
                                              ceil_mode=True, return_indices=True)),
    ("adaptive_max_pool2d", 1): ((2, 2, 7, 3), dict(output_size=(4, 5),
                                                    return_indices=True)),
}


_DEFAULT: dict[str, list[tuple[tuple[int, ...], dict[str, Any]]]] = {
    "avg_pool3d": _sets("avg_pool3d", again=2),
    "adaptive_avg_pool3d": _sets("adaptive_avg_pool3d", again=2),
    "max_pool3d": _sets("max_pool3d", again=2),
    "adaptive_max_pool2d": _sets("adaptive_max_pool2d"),
    "adaptive_max_pool1d": _sets("adaptive_max_pool1d", again=1),
    "adaptive_max_pool3d": _sets("adaptive_max_pool3d", again=2),
    "global_max_pool": _sets("global_max_pool", again=2),
    "interpolate": _sets("interpolate", 5, 12),
    "pad": _sets("pad", 1, 5),
}


def _kw(d: dict) -> tuple:
    return tuple(d.items())


LAYOUTS = ("first", "last")

# The default grid's derivative order per dtype where it is not 3. In float16 and bfloat16
# a third derivative is checked to about 0.5% and 4% of its scale (against 1e-12 and 2e-5
# in float64 and float32), and its program costs half as much again to trace and compile
# as the one to order 2 (the default grid's 51 half-precision programs: 39 s of CPU to
# order 3, 27 s to order 2); every op still has its third derivatives checked in float64
# and float32, in both layouts. (--full and --orders 3 check every dtype to order 3.)
DEFAULT_ORDERS = {"float16": 2, "bfloat16": 2}


def _spec_sets(op: str) -> list:
    """An op's argument sets from its spec (``jaxpool.registry``), where none are written
    here: ``(shape, kwargs, shapes of the other arrays)``."""
    from jaxpool import registry

    return [(shapes[0], dict(kw), tuple(shapes[1:]))
            for shapes, kw in registry.SPECS[op].samples]


def _main(op: str) -> list:
    return _MAIN[op] if op in _MAIN else _spec_sets(op)[:1]


def _extra(op: str) -> list:
    return _EXTRA[op] if op in _MAIN else _spec_sets(op)[1:]


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
    """The argument sets the default grid runs for ``op``, each once (see ``quick_cases``)."""
    chosen = _DEFAULT.get(op)
    return list(chosen) if chosen is not None else _main(op) + _extra(op)


def _family_index(op: str) -> int:
    """The op's place among the ops of its kind (max_pool1d 0, max_pool2d 1, ...)."""
    return [o for o in OPS if OPS[o].kind == OPS[op].kind].index(op)


def quick_cases(ops: Iterable[str] | None = None, dtypes: Iterable[str] | None = None,
                layouts: Iterable[str] | None = None) -> list:
    """The default grid: each op's argument sets (``_DEFAULT``), each run once, with
    derivatives to order 3 in float64 and float32 and to order 2 in float16 and bfloat16
    (``DEFAULT_ORDERS``).

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
            for dtype in dtypes for shape, kw, special, last in _VALUES_ONLY.get(op, [])]


# Batched and unbatched inputs per number of spatial axes (at most 512 elements: see inputs).
_FULL_SHAPES = {1: [(2, 3, 9), (3, 16)],
                2: [(2, 2, 7, 9), (3, 10, 8)],
                3: [(1, 2, 5, 6, 7), (1, 8, 5, 6)]}


def _full_avg(ndim: int) -> list:
    shapes = _FULL_SHAPES[ndim]
    out = []
    for shape in shapes:
        for k, s, p in [(1, None, 0), (2, None, 0), (3, 1, 1), (3, 2, 1), (4, 3, 2), (5, 2, 2)]:
            if k > min(shape[-ndim:]) + 2 * p:
                continue
            for ceil, cip, div in [(False, True, None), (True, False, None), (True, True, None),
                                   (False, False, 3)]:
                out.append((shape, dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil,
                                        count_include_pad=cip, divisor_override=div)))
    return out


def _full_max(ndim: int) -> list:
    shapes = _FULL_SHAPES[ndim]
    out = []
    for shape in shapes:
        for k, s, p, d in [(1, None, 0, 1), (2, None, 0, 1), (3, 1, 1, 1), (3, 2, 1, 2),
                           (2, 2, 1, 3), (4, 3, 2, 1)]:
            if d * (k - 1) + 1 > min(shape[-ndim:]) + 2 * p:
                continue
            for ceil, indices in [(False, True), (True, True), (True, False)]:
                out.append((shape, dict(kernel_size=k, stride=s, padding=p, dilation=d,
                                        ceil_mode=ceil, return_indices=indices)))
    return out


def _full_lp(ndim: int) -> list:
    out = []
    for shape in _FULL_SHAPES[ndim]:
        for k, s in [(1, None), (2, None), (3, 1), (3, 2), (4, 3)]:
            if k > min(shape[-ndim:]):
                continue
            for norm, ceil in [(1, False), (2, True), (3, False), (2, False)]:
                out.append((shape, dict(norm_type=norm, kernel_size=k, stride=s,
                                        ceil_mode=ceil)))
    return out


def _full_adaptive(ndim: int) -> list:
    shapes = {1: [(2, 3, 9), (1, 2, 16), (3, 5)],
              2: [(2, 2, 7, 9), (1, 3, 10, 8), (2, 5, 6)],
              3: [(1, 2, 5, 6, 7), (1, 1, 8, 4, 6), (2, 5, 4, 5)]}[ndim]
    out = []
    for shape in shapes:
        spatial = shape[-ndim:]
        # torch's adaptive_avg_pool1d takes no None; 2d/3d do.
        for mode in ("one", "down", "ragged", "same", "up") + (("none",) if ndim > 1 else ()):
            size = []
            for i, n in enumerate(spatial):
                size.append({"one": 1, "down": max(1, n // 2), "ragged": max(1, n - 2 - i),
                             "same": n, "up": n + 3 + i, "none": None if i == 0 else 2}[mode])
            out.append((shape, dict(output_size=tuple(size) if ndim > 1 else size[0])))
    return out


def full_cases(ops: Iterable[str] | None = None, dtypes: Iterable[str] | None = None) -> list:
    """Every argument set of the grid in every requested dtype (and both layouts in float64)."""
    ops = list(ops or OPS)
    dtypes = list(dtypes or DTYPES)
    cases: list = []
    for op in ops:
        ndim, kind = OPS[op].ndim or 0, OPS[op].kind  # 0: not a pool (set per case)
        if kind in ("avg", "max", "lp"):
            variants = {"avg": _full_avg, "max": _full_max, "lp": _full_lp}[kind](ndim)
        elif kind in ("adaptive", "adaptive_max"):
            variants = _full_adaptive(ndim)
            if kind == "adaptive_max":
                variants = [(shape, {**kw, "return_indices": i % 2 == 0})
                            for i, (shape, kw) in enumerate(variants)]
        elif kind in ("global", "global_max"):
            variants = [((2, 3, 5, 7), {}), ((1, 4, 1, 1), {}), ((3, 2, 6, 1), {}),
                        ((2, 2, 9, 8), {})]
        else:
            variants = []
        main = len(_main(op))
        variants = _main(op) + variants + _extra(op)
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
    """Bad arguments on which both torch and jaxpool raise.

    Left out on purpose, because the two differ by design: stride=0 (jaxpool reads it as
    kernel_size, torch raises) and output_size 0 (jaxpool raises, torch returns an empty
    array); integer input to the avg, max and LP pools (torch pools some integer dtypes,
    jaxpool raises) and to global_max_pool (torch's amax takes it).
    """
    kind = OPS[op].kind
    rng = np.random.default_rng(zlib.crc32(op.encode()))
    from jaxpool import registry

    if registry.SPECS[op].errors:
        return ErrorCase(op, tuple(
            (label, tuple(rng.standard_normal(s) for s in shapes), _kw(kw))
            for label, shapes, kw in registry.SPECS[op].errors))
    if kind in _ERROR_CALLS:
        return ErrorCase(op, tuple((label, args, _kw(kw))
                                   for label, args, kw in _ERROR_CALLS[kind](op, rng)))
    ndim = OPS[op].ndim
    assert ndim is not None, op  # the pools' axes are fixed
    x = rng.standard_normal((2, 3) + (5,) * ndim)
    low = x[0, 0] if ndim > 1 else x[0, 0, :]
    # the positional arguments of a valid call after x
    valid = {"avg": (2,), "max": (2,), "lp": (2, 2), "adaptive": (2,),
             "adaptive_max": (2,)}.get(kind)
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    if valid is None:  # global pools: [B, C, H, W] only
        calls.append(("rank 3", (x[0],), {}))
        if kind == "global":
            calls.append(("int64 input", (x.astype(np.int64),), {}))
        return ErrorCase(op, tuple((label, args, _kw(kw)) for label, args, kw in calls))
    calls += [("wrong rank", (low, *valid), {}), ("rank too high", (x[None], *valid), {})]
    too_long = (2,) * (ndim + 1)
    if kind in ("avg", "max"):
        calls += [
            ("kernel larger than input", (x, 7), {}),
            ("padding > kernel//2", (x, 3), {"padding": 2}),
            ("bool input", (x > 0, 2), {}),
            ("negative padding", (x, 3), {"padding": -1}),
        ]
        if ndim > 1:
            calls.append(("wrong-length kernel_size", (x, too_long), {}))
    if kind == "avg":
        calls += [("int32 input", (x.astype(np.int32), 2), {}),
                  ("divisor_override=0", (x, 2), {"divisor_override": 0})]
    if kind == "max":
        calls.append(("dilation=0", (x, 2), {"dilation": 0}))
    if kind == "lp":
        calls += [("kernel larger than input", (x, 2, 7), {}), ("norm_type=0", (x, 0, 2), {})]
        if ndim > 1:
            calls.append(("wrong-length kernel_size", (x, 2, too_long), {}))
    if kind in ("adaptive", "adaptive_max"):
        calls += [("negative output_size", (x, -1), {}),
                  ("int64 input", (x.astype(np.int64), 2), {})]
        if ndim > 1:
            calls.append(("wrong-length output_size", (x, too_long), {}))
    return ErrorCase(op, tuple((label, args, _kw(kw)) for label, args, kw in calls))


def _interpolate_errors(op: str, rng: np.random.Generator) -> list:
    x = rng.standard_normal((2, 3, 5, 6))
    return [
        ("neither size nor scale_factor", (x,), {}),
        ("both size and scale_factor", (x, (4, 4), 2.0), {}),
        ("unknown mode", (x, (4, 4)), {"mode": "bilinearish"}),
        ("bilinear on one spatial axis", (x[0], 4), {"mode": "bilinear"}),
        ("trilinear on two", (x, (4, 4)), {"mode": "trilinear"}),
        ("align_corners with nearest", (x, (4, 4)), {"align_corners": True}),
        ("wrong-length size", (x, (4, 4, 4)), {"mode": "nearest"}),
        ("antialias with nearest", (x, (4, 4)), {"antialias": True}),
    ]


def _unpool_errors(op: str, rng: np.random.Generator) -> list:
    ndim = int(op[-2])  # max_unpool<n>d
    x = rng.standard_normal((2, 3) + (2,) * ndim)
    indices = np.zeros(x.shape, np.int64)
    return [
        ("indices of another shape", (x, indices[..., :1], 2), {}),
        ("output_size a stride too large", (x, indices, 2), {"output_size": (6,) * ndim}),
        ("wrong rank", (x[0, 0], indices[0, 0], 2), {}) if ndim > 1
        else ("rank too high", (x[None], indices[None], 2), {}),
        ("float indices", (x, indices.astype(np.float64), 2), {}),
    ]


def _pad_errors(op: str, rng: np.random.Generator) -> list:
    x = rng.standard_normal((2, 3, 4, 5))
    return [
        ("odd pad length", (x, (1, 2, 1)), {}),
        ("reflect pad = extent", (x, (5, 0)), {"mode": "reflect"}),
        ("circular pad > extent", (x, (0, 0, 5, 0)), {"mode": "circular"}),
        ("unknown mode", (x, (1, 1)), {"mode": "symmetric"}),
        ("value with reflect", (x, (1, 1)), {"mode": "reflect", "value": 1.0}),
        ("replicate on rank 5 with 2 entries", (x[None], (1, 1)), {"mode": "replicate"}),
    ]


def _shuffle_errors(op: str, rng: np.random.Generator) -> list:
    if op == "pixel_shuffle":
        x = rng.standard_normal((2, 6, 3, 4))
        return [("channels not a multiple of r^2", (x, 2), {}), ("rank 2", (x[0, 0], 2), {}),
                ("factor 0", (x, 0), {})]
    x = rng.standard_normal((2, 2, 5, 4))
    return [("extent not a multiple of r", (x, 2), {}), ("rank 2", (x[0, 0], 2), {}),
            ("factor 0", (x, 0), {})]


# Error calls of the ops whose arguments are not windows: (label, arrays and positional
# arguments, keyword arguments), each one on which torch raises.
_ERROR_CALLS: dict[str, Callable[[str, np.random.Generator], list]] = {
    "interpolate": _interpolate_errors,
    "unpool": _unpool_errors,
    "pad": _pad_errors,
    "shuffle": _shuffle_errors,
}
