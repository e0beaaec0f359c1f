"""torch's own test inputs for the resampling ops (``opinfo_catalog``), run through jaxpool.

The catalog holds samples for ``nn.functional.interpolate`` (one
variant per mode), ``upsample_bilinear``, ``upsample_nearest``, ``_upsample_bilinear2d_aa``
(interpolate's antialias path), ``pixel_shuffle`` and ``pixel_unshuffle``; none of them has
error inputs. Every sample must give torch's values (nearest modes and pixel shuffle bit
for bit). Every sample's taps and weights are checked in plain Python (no compilation); a
spread of them runs through jaxpool itself (all of them under ``-m slow``).
``EXPECTED_DIFFERENCES`` lists where jaxpool deliberately does something else, each row
checked to be a real difference.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxpool
from jaxpool.resampling.plan import plan_interpolate
from opinfo_catalog import Difference, as_numpy, catalog, difference_of, drawn_samples, run
from test_interpolate import evaluate

pytestmark = pytest.mark.usefixtures("x64")

INTERPOLATE_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear",
                     "area")
OPS = tuple(f"interpolate {m}" for m in INTERPOLATE_MODES) + (
    "upsample_bilinear", "upsample_nearest", "_upsample_bilinear2d_aa", "pixel_shuffle",
    "pixel_unshuffle")


def _catalog_name(op: str) -> str:
    return op if op.startswith("_") else "nn.functional." + op


OPINFO = catalog(lambda info: (info.name + " " + info.variant_test_name).strip(),
                 {op.split()[0] for op in OPS})
# Every SPREAD-th sample of each op runs through jaxpool in the default run (each is a
# program to compile; a different offset per op); the plain-Python check of the taps and
# weights takes every sample, and -m slow runs every sample through jaxpool.
SPREAD = 11


@dataclasses.dataclass(frozen=True, repr=False)
class Call:
    """One call: ``op`` names the torch function (``F.<op>``), ``x`` is NumPy."""

    op: str
    x: np.ndarray
    kwargs: dict
    label: str = ""

    def __repr__(self) -> str:
        return f"{self.label or self.op}: x{self.x.shape} {self.x.dtype}, kwargs={self.kwargs!r}"


def _torch_function(op: str) -> Callable:
    if op == "_upsample_bilinear2d_aa":
        return torch._C._nn._upsample_bilinear2d_aa
    return getattr(F, op)


def _as_interpolate(call: Call) -> dict:
    """The call's arguments as ``jaxpool.interpolate``'s."""
    kw = dict(call.kwargs)
    if call.op == "upsample_nearest":
        return {**kw, "mode": "nearest"}
    if call.op == "upsample_bilinear":
        return {**kw, "mode": "bilinear", "align_corners": True}
    if call.op == "_upsample_bilinear2d_aa":
        return {"size": kw["output_size"], "scale_factor": kw.get("scale_factors"),
                "mode": "bilinear", "align_corners": kw["align_corners"], "antialias": True}
    return kw


def _expressible(call: Call) -> bool:
    """Whether ``interpolate`` can make the call: the private aten overload's samples that
    give both an output size and the scales its kernel maps coordinates with cannot be
    (``interpolate`` passes one or the other); ``test_unreachable_samples`` counts them."""
    return call.kwargs.get("scales_h") is None and call.kwargs.get("scales_w") is None


def _jaxpool(call: Call):
    if call.op.startswith("pixel"):
        return run(getattr(jaxpool, call.op), call.x, **call.kwargs)
    return run(lambda: jaxpool.interpolate(call.x, **_as_interpolate(call)))


def _torch(call: Call):
    return run(lambda: _torch_function(call.op)(torch.from_numpy(call.x), **call.kwargs).numpy())


# --- the expected differences ---------------------------------------------------------------

def _width_one_antialias_applies(call: Call) -> bool:
    kw = _as_interpolate(call)
    if not kw.get("antialias"):
        return False
    sizes, _ = plan_interpolate("", call.x.shape, call.x.dtype, **{
        k: v for k, v in kw.items() if k != "antialias"}, antialias=True)
    return sizes[1] == 1 and sizes[0] != call.x.shape[2]


def _transposed(call: Call) -> Call:
    """The same call on H and W swapped (torch's separable passes, in the other order)."""
    kw = _as_interpolate(call)
    swap = lambda v: tuple(v)[::-1] if isinstance(v, (tuple, list)) else v  # noqa: E731
    kw = {**kw, "size": swap(kw.get("size")), "scale_factor": swap(kw.get("scale_factor"))}
    return dataclasses.replace(call, op="interpolate transposed",
                               x=np.ascontiguousarray(np.swapaxes(call.x, 2, 3)), kwargs=kw)


_X = np.random.default_rng(0).standard_normal((2, 3, 9, 7))

EXPECTED_DIFFERENCES = (
    Difference(
        "antialias with an output width of 1 applies the height filter; torch's CPU kernel "
        "ignores the height weights there (every output row reads the whole column)",
        "a torch bug: the same call on the transposed input (height and width swapped) gives "
        "jaxpool's values in torch too",
        _width_one_antialias_applies, _transposed,
        (Call("interpolate", _X, {"size": (4, 1), "mode": "bilinear", "antialias": True}),
         Call("interpolate", _X, {"size": (3, 1), "mode": "bicubic", "antialias": True}))),
)


def _difference(call: Call) -> Difference | None:
    return difference_of(call, EXPECTED_DIFFERENCES)


def _expected(call: Call):
    """torch's result for the call (or for its torch equivalent), or the exception wanted."""
    difference = _difference(call)
    if difference is not None and difference.torch_equivalent is None:
        return None, difference.error
    reference = call if difference is None else difference.torch_equivalent(call)
    if reference.op == "interpolate transposed":
        out = F.interpolate(torch.from_numpy(reference.x), **reference.kwargs).numpy()
        return np.ascontiguousarray(np.swapaxes(out, 2, 3)), None
    out, error = _torch(reference)
    return out, (None if error is None else (ValueError, TypeError))


def _exact(call: Call) -> bool:
    mode = _as_interpolate(call).get("mode", "nearest")
    return call.op.startswith("pixel") or mode.startswith("nearest")


def _mismatch(actual, error, expected, wanted, exact: bool, dtype) -> str | None:
    if wanted is not None:
        return None if isinstance(error, wanted) else (
            f"{'returned' if error is None else f'raised {error!r}'}; expected {wanted}")
    if error is not None:
        return f"raised {type(error).__name__}: {error}"
    actual = np.asarray(actual)
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return f"shape/dtype {actual.shape} {actual.dtype}, torch {expected.shape} {expected.dtype}"
    if exact:
        return None if np.array_equal(actual, expected, equal_nan=True) else "values differ"
    tol = 1e-12 if dtype == np.float64 else 1e-5
    if not np.allclose(actual, expected, rtol=tol, atol=tol, equal_nan=True):
        return f"max abs error {np.abs(actual - expected).max():.3g}"
    return None


@functools.lru_cache(maxsize=None)
def samples(op: str, dtype: torch.dtype) -> tuple[Call, ...]:
    calls = []
    for i, s in enumerate(drawn_samples(OPINFO[_catalog_name(op)], dtype)):
        kwargs = dict(s.kwargs)
        if op.startswith("interpolate") and s.args:
            kwargs["size"] = s.args[0]
        name = "interpolate" if op.startswith("interpolate") else op
        calls.append(Call(name, as_numpy(s.input), kwargs, f"{op} sample {i}"))
    return tuple(calls)


def _check(calls, through_jaxpool: bool):
    failures = []
    for call in filter(_expressible, calls):
        expected, wanted = _expected(call)
        if through_jaxpool:
            actual, error = _jaxpool(call)
        elif call.op.startswith("pixel"):
            continue
        else:
            try:
                _, plan = plan_interpolate("interpolate", call.x.shape, call.x.dtype,
                                           **_as_interpolate(call))
                if plan is None:  # area: adaptive_avg_pool, checked through jaxpool
                    continue
                actual, error = evaluate(plan, call.x), None
            except (ValueError, TypeError) as e:
                actual, error = None, e
        why = _mismatch(actual, error, expected, wanted, _exact(call), call.x.dtype)
        if why:
            failures.append(f"{call}\n    {why}")
    assert not failures, f"{len(failures)} of {len(calls)} calls differ from torch:\n" + \
        "\n".join(failures[:12])


def test_the_catalog_has_every_op():
    names = [_catalog_name(op) for op in OPS]
    assert set(names) <= set(OPINFO), sorted(set(names) - set(OPINFO))
    assert all(OPINFO[n].error_inputs_func is None for n in names), "new error inputs to run"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("op", OPS)
def test_samples_taps_and_weights(op, dtype):
    """Every sample, from its plan evaluated in NumPy: torch's values (and errors)."""
    _check(samples(op, dtype), through_jaxpool=False)


@pytest.mark.parametrize("op", OPS)
def test_samples_through_jaxpool_spread(op):
    calls = samples(op, torch.float64)
    _check(calls[(3 * OPS.index(op)) % min(SPREAD, len(calls))::SPREAD], through_jaxpool=True)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("op", OPS)
def test_samples_through_jaxpool_all(op, dtype):
    _check(samples(op, dtype), through_jaxpool=True)


def test_unreachable_samples():
    unreachable = [c for op in OPS for c in samples(op, torch.float64) if not _expressible(c)]
    assert [c.op for c in unreachable] == ["_upsample_bilinear2d_aa"] * 2, unreachable


@pytest.mark.parametrize("difference", EXPECTED_DIFFERENCES, ids=lambda d: d.what[:40])
def test_expected_differences_are_real(difference):
    """On each example jaxpool and torch differ, and jaxpool does what the table says."""
    for call in difference.examples:
        assert _difference(call) is difference, call
        theirs, torch_error = _torch(call)
        mine, error = _jaxpool(call)
        if difference.torch_equivalent is None:
            assert torch_error is None and isinstance(error, difference.error), (call, error)
            continue
        assert error is None and torch_error is None, (call, error, torch_error)
        assert not np.allclose(np.asarray(mine), theirs, rtol=1e-6, atol=1e-6), call
        expected, _ = _expected(call)
        np.testing.assert_allclose(np.asarray(mine), expected, rtol=1e-12, atol=1e-12)
