"""How far apart two results are, and how far apart they may be.

Errors are normwise: ``abs_err = max|got - want|`` over a result, ``rel_err = abs_err /
max|want|``. Elementwise relative errors would blow up wherever a derivative happens to
cancel to nearly zero.

``float64`` and ``float32`` compare the two sides directly: ``abs_err <= atol + rtol *
max|torch|`` with per-dtype defaults (``DEFAULT_TOLERANCES``). ``float16``/``bfloat16``
compare each side against a float64 torch reference (same rounded inputs) and allow

    tol = 2 * (order + 1) * u * max|ref| + 3 * torch_err

``u`` is the unit roundoff of the dtype (half an ulp at 1). A correctly rounded result is
off by at most ``u * |value|``, and a check is a chain of ``order + 1`` half-precision maps
(the forward, then one tangent or cotangent map per order), each rounding what goes in and
what comes out: ``2 * (order + 1)`` roundings. Where cancellation makes the error larger
than that (random-sign cotangents do), ``torch_err`` - how far torch's own half-precision
result is from the float64 reference, reported as ``ref_err`` - says what is achievable;
JAX may be up to three times as far, since the worst of a few dozen elements varies that
much between two equally accurate implementations. So a half-precision row passes when JAX
is about as accurate as torch, not when it happens to round the same way.

Integer and boolean results (indices, masks) must be equal: their tolerance is 0.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

__all__ = ["DEFAULT_TOLERANCES", "HALF", "HALF_ROUNDINGS", "TORCH_ERR_FACTOR", "TOLERANCE_NOTE",
           "Diff", "functional_dtype", "is_float", "tolerance", "unit_roundoff"]

HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))

# (rtol, atol) for direct comparisons; rtol is relative to max|torch value| of the check.
# float64: sums in a different order differ by a few ulps (1.1e-16) per term, and third
# derivatives chain several such sums; 1e-12 leaves room for thousands of terms.
# float32: the same at 6e-8 per ulp.
# Half dtypes use these only under reference="direct" or when no float64 reference is taken.
DEFAULT_TOLERANCES = {
    np.dtype(np.float64): (1e-12, 1e-14),
    np.dtype(np.float32): (2e-5, 1e-6),
    np.dtype(np.float16): (1e-2, 1e-3),
    np.dtype(ml_dtypes.bfloat16): (4e-2, 1e-2),
}

# Half precision, against the float64 reference: tol = HALF_ROUNDINGS * (order + 1) * u *
# max|ref| + TORCH_ERR_FACTOR * torch_err (see the module docstring).
HALF_ROUNDINGS = 2
TORCH_ERR_FACTOR = 3


def is_float(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.floating) or np.dtype(dtype) in HALF


def unit_roundoff(dtype) -> float:
    return float(ml_dtypes.finfo(np.dtype(dtype)).eps) / 2


def functional_dtype(dtype) -> np.dtype:
    """Dtype of the nonlinear functional of the higher-order checks: float32 for half inputs,
    so that its own rounding does not hide the function's."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype in HALF else dtype


def tolerance(dtype, order: int, scale: float, *, ref_err: float | None = None,
              rtol: float | None = None, atol: float | None = None) -> float:
    """Largest admissible ``abs_err`` for a check of ``order`` whose reference has max|.|
    ``scale``; ``ref_err`` (torch's own error) selects the half-precision rule."""
    if rtol is not None or atol is not None:
        return (atol or 0.0) + (rtol or 0.0) * scale
    if ref_err is not None:
        # Two roundings per half-precision map; about as accurate as torch itself.
        u = unit_roundoff(dtype)
        return HALF_ROUNDINGS * (order + 1) * u * scale + TORCH_ERR_FACTOR * ref_err
    rtol0, atol0 = DEFAULT_TOLERANCES.get(np.dtype(dtype), DEFAULT_TOLERANCES[np.dtype(np.float32)])
    return atol0 + rtol0 * scale


class Diff:
    """Normwise difference of one result: ``worst`` (max abs error), ``scale`` (max|want|
    over its finite elements) and where the worst element is."""

    def __init__(self, got, want, label: str):
        got = np.asarray(got, dtype=np.float64)
        want = np.asarray(want, dtype=np.float64)
        self.worst, self.scale, self.where, self.err = 0.0, 0.0, "", None
        if got.shape != want.shape:
            self.worst = math.inf
            self.where = f"{label}: shape {got.shape} (jax) vs {want.shape} (torch)"
            return
        if want.size == 0:
            return
        finite = np.isfinite(want)
        self.scale = float(np.max(np.abs(want[finite]), initial=0.0))
        same = (got == want) | (np.isnan(got) & np.isnan(want))  # equal infinities, both NaN
        with np.errstate(invalid="ignore"):
            err = np.where(same, 0.0, np.abs(got - want))
        self.err = np.where(np.isnan(err), np.inf, err)
        i = int(np.argmax(self.err))
        self.worst = float(self.err.flat[i])
        if self.worst > 0:
            idx = [int(v) for v in np.unravel_index(i, want.shape)] if want.ndim else []
            self.where = (f"worst at {label}{idx}: jax {got.flat[i]:.10g}, "
                          f"torch {want.flat[i]:.10g} (|diff| {self.worst:.3g})")

    @property
    def rel(self) -> float:
        if self.scale > 0:
            return self.worst / self.scale
        return 0.0 if self.worst == 0 else math.inf

    def detail(self, tol: float) -> str:
        if self.err is None:
            return self.where
        n = int(np.sum(self.err > tol))
        return f"{self.where}; {n} of {self.err.size} elements off by more than the tolerance"


def _tolerance_note() -> str:
    rt = {np.dtype(k).name: v[0] for k, v in DEFAULT_TOLERANCES.items()}
    return (
        "Errors are normwise: max|jax - reference| / max|reference| over a check. float64 and "
        f"float32 compare JAX with torch directly (rtol {rt['float64']:g} and "
        f"{rt['float32']:g} of max|torch|: a different summation order costs a few ulps per "
        "term). float16 and bfloat16 compare JAX with torch run in float64 on the same rounded "
        f"numbers, and allow {HALF_ROUNDINGS} * (order + 1) * u * max|reference| + "
        f"{TORCH_ERR_FACTOR} * (torch's own half-precision error): u is the unit roundoff "
        "(2^-11 for float16, 2^-8 for bfloat16), a correctly rounded result is off by at most "
        "u, and a check chains order + 1 half-precision maps, each rounding its input and its "
        "output; the second term admits the cancellation torch itself "
        "suffers, so JAX passes when it is about as accurate as torch. Integer results "
        "(indices) must be equal."
    )


TOLERANCE_NOTE = _tolerance_note()
