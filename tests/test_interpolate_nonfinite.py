"""interpolate on every small extent with NaN, +inf and -inf, against torch (float64).

Every mode and flag (bilinear and bicubic each plain, with ``align_corners`` and with
``antialias``; nearest, nearest-exact and area in 1d, 2d and 3d; linear and trilinear,
plain and with ``align_corners``), inputs of extent 1-3 and outputs of 1-7 on each axis.
Each case plants NaN, +inf and -inf, one at a time at every position and in pairs, one
plane of the batch each, in

- the input: jaxpool's values against torch's forward;
- the cotangent: jaxpool's reverse mode against torch's backward;
- the tangent: jaxpool's forward mode against ``torch.func.jvp``;

the NaN and inf (positions, and the signs of the infinities) exactly, the finite entries to
rounding. And the values' bits plain, under ``jit`` and under ``vmap``.

Where torch's backward is not the transpose of torch's own forward, jaxpool's derivative
is the transpose of its forward: ``DIFFERENCES`` lists those cases, each row checked on
every case it covers (torch still differs from itself, and jaxpool gives the transpose of
torch's forward, computed from torch's forward alone).

The default run takes one case of each flavour (each difference row's example for the
flavours of the rows), spread so that every input and output extent still appears
(``_default_cases``); ``-m slow`` runs all of them. Cases are compiled a group at a time.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxpool

pytestmark = pytest.mark.usefixtures("x64")

# name -> (spatial axes, interpolate's keyword arguments)
FLAVOURS = {
    "nearest 1d": (1, {"mode": "nearest"}),
    "nearest 2d": (2, {"mode": "nearest"}),
    "nearest 3d": (3, {"mode": "nearest"}),
    "nearest-exact 1d": (1, {"mode": "nearest-exact"}),
    "nearest-exact 2d": (2, {"mode": "nearest-exact"}),
    "nearest-exact 3d": (3, {"mode": "nearest-exact"}),
    "area 1d": (1, {"mode": "area"}),
    "area 2d": (2, {"mode": "area"}),
    "area 3d": (3, {"mode": "area"}),
    "linear": (1, {"mode": "linear"}),
    "linear align_corners": (1, {"mode": "linear", "align_corners": True}),
    "bilinear": (2, {"mode": "bilinear"}),
    "bilinear align_corners": (2, {"mode": "bilinear", "align_corners": True}),
    "bilinear antialias": (2, {"mode": "bilinear", "antialias": True}),
    "bicubic": (2, {"mode": "bicubic"}),
    "bicubic align_corners": (2, {"mode": "bicubic", "align_corners": True}),
    "bicubic antialias": (2, {"mode": "bicubic", "antialias": True}),
    "trilinear": (3, {"mode": "trilinear"}),
    "trilinear align_corners": (3, {"mode": "trilinear", "align_corners": True}),
}
IN_EXTENTS = (1, 2, 3)
OUT_EXTENTS = tuple(range(1, 8))
AXIS_PAIRS = tuple(itertools.product(IN_EXTENTS, OUT_EXTENTS))  # (in, out) on one axis
VALUES = (np.nan, np.inf, -np.inf)
KINDS = ("values", "reverse", "forward")
GROUP = 12           # cases per compiled program


@dataclasses.dataclass(frozen=True)
class Case:
    flavour: str
    extents: tuple[int, ...]   # the input's spatial extents
    sizes: tuple[int, ...]     # the output's

    @property
    def kwargs(self) -> dict:
        return {**FLAVOURS[self.flavour][1], "size": self.sizes}

    def __str__(self) -> str:
        return f"{self.flavour} {self.extents} -> {self.sizes}"


def _cases() -> list[Case]:
    """1d, and the interpolating modes in 2d: every (input, output) extent on every axis,
    all combinations. The copying and pooling modes in 2d and everything in 3d: each axis
    through every pair, the other axes drawn (a fixed draw); their axes do not interact."""
    cases = []
    for flavour, (ndim, kwargs) in FLAVOURS.items():
        if ndim == 1 or (ndim == 2 and kwargs["mode"] in ("bilinear", "bicubic")):
            for pairs in itertools.product(AXIS_PAIRS, repeat=ndim):
                cases.append(Case(flavour, tuple(n for n, _ in pairs),
                                  tuple(k for _, k in pairs)))
            continue
        draw = np.random.default_rng(ndim)
        for axis in range(ndim):
            for pair in AXIS_PAIRS:
                pairs = [AXIS_PAIRS[i] for i in draw.integers(len(AXIS_PAIRS), size=ndim)]
                pairs[axis] = pair
                cases.append(Case(flavour, tuple(n for n, _ in pairs),
                                  tuple(k for _, k in pairs)))
    return cases


CASES = _cases()


# --- the planted planes ------------------------------------------------------------------

def _planted(extents: tuple[int, ...], rng) -> np.ndarray:
    """``[1, planes, *extents]`` float64: finite normals, and in each plane NaN, +inf or
    -inf at one position (every value at every position), then pairs of infinities (both
    signs, the same and opposite) and a NaN with an inf, at drawn positions."""
    size = int(np.prod(extents))
    planes = []
    for position, value in itertools.product(range(size), VALUES):
        plane = rng.standard_normal(size)
        plane[position] = value
        planes.append(plane)
    if size > 1:
        for first, second in [(np.inf, np.inf), (np.inf, -np.inf), (-np.inf, -np.inf),
                              (np.nan, np.inf)]:
            for _ in range(3):
                plane = rng.standard_normal(size)
                plane[rng.choice(size, 2, replace=False)] = (first, second)
                planes.append(plane)
    return np.stack(planes).reshape((1, len(planes)) + extents)


# --- torch ---------------------------------------------------------------------------------

def _torch_values(case: Case, x: np.ndarray) -> np.ndarray:
    return F.interpolate(torch.from_numpy(x), **case.kwargs).numpy()


def _torch_backward(case: Case, x: np.ndarray, cotangent: np.ndarray) -> np.ndarray:
    xt = torch.from_numpy(x).requires_grad_()
    y = F.interpolate(xt, **case.kwargs)
    return torch.autograd.grad(y, xt, torch.from_numpy(cotangent))[0].numpy()


def _torch_jvp(case: Case, x: np.ndarray, tangent: np.ndarray) -> np.ndarray:
    return torch.func.jvp(lambda a: F.interpolate(a, **case.kwargs), (torch.from_numpy(x),),
                          (torch.from_numpy(tangent),))[1].numpy()


def _key(value: float) -> str:
    return "nan" if np.isnan(value) else "+inf" if value > 0 else "-inf"


def _forward_transposed(case: Case, cotangent: np.ndarray) -> np.ndarray:
    """The transpose of torch's forward applied to ``cotangent``, from torch's forward
    alone, every product kept: input ``j`` sums output ``i``'s ``w_ij * c_i`` over the
    outputs that tap it. For a finite ``c_i`` that is the forward matrix's entry (the unit
    images' outputs); for a NaN or inf it is the output ``i`` of torch's forward on ``c_i``
    planted at ``j`` alone (zeros elsewhere): ``0`` where ``i`` does not tap ``j``, else
    the sum of ``w * c_i`` over ``i``'s taps of ``j``, a zero weight's ``0 * inf`` NaN."""
    size = int(np.prod(case.extents))
    unit = np.eye(size).reshape((1, size) + case.extents)
    matrix = _torch_values(case, unit).reshape(size, -1).T           # [out, in]
    out = np.empty(cotangent.shape[:2] + case.extents)
    flat_c = cotangent.reshape(cotangent.shape[:2] + (-1,))
    probes = {}
    for value in VALUES:
        probe = _torch_values(case, np.where(unit == 1, value, 0.0))
        probes[_key(value)] = probe.reshape(size, -1).T               # [out, in]
    with np.errstate(invalid="ignore", over="ignore"):
        for b, p in itertools.product(range(cotangent.shape[0]), range(cotangent.shape[1])):
            c = flat_c[b, p]
            finite = np.isfinite(c)
            total = matrix[finite].T @ c[finite]
            for i in np.flatnonzero(~finite):
                total = total + probes[_key(c[i])][i]
            out[b, p] = total.reshape(case.extents)
    return out


def _torch_expected(case: Case, data: dict) -> dict:
    return {"values": _torch_values(case, data["x"]),
            "reverse": _torch_backward(case, data["x_reverse"], data["cotangent"]),
            "forward": _torch_jvp(case, data["x"], data["tangent"])}


# --- jaxpool ---------------------------------------------------------------------------------

def _data(case: Case, rng) -> dict:
    x = _planted(case.extents, rng)
    cotangent = _planted(case.sizes, rng)
    return {"x": x,
            "tangent": _planted(case.extents, rng),
            "x_reverse": rng.standard_normal(cotangent.shape[:2] + case.extents),
            "cotangent": cotangent}


def _interpolate(case: Case) -> Callable:
    kwargs = case.kwargs
    return lambda a: jaxpool.interpolate(a, **kwargs)


def _jaxpool(case: Case, data: dict) -> dict:
    """The case's values (plain, under jit and under vmap, one plane a call) and
    derivatives: one compiled program besides the plain call's own (one program per case
    compiles faster than one per several cases)."""
    f = _interpolate(case)

    @jax.jit
    def everything(d):
        # the map is linear: the tangent's derivative does not depend on the primal
        values, forward = jax.jvp(f, (d["x"],), (d["tangent"],))
        single = lambda plane: f(plane[None, None])[0, 0]  # noqa: E731
        return {"values": values, "forward": forward,
                "vmap": jax.vmap(single)(d["x"][0])[None],
                "reverse": jax.vjp(f, d["x_reverse"])[1](d["cotangent"])[0]}

    out = everything({k: jnp.asarray(v) for k, v in data.items()})
    out["plain"] = f(jnp.asarray(data["x"]))   # its own compiled program
    return {k: np.asarray(v) for k, v in out.items()}


# --- where jaxpool deliberately differs from torch -------------------------------------------

def _transpose_of_torchs_forward(case: Case, data: dict, kind: str) -> np.ndarray:
    return _forward_transposed(case, data["cotangent"])


def _torch_on_the_transposed_input(case: Case, data: dict, kind: str) -> np.ndarray:
    """torch's values (``values``) or forward-mode derivative (``forward``, torch's forward
    on the tangent) with height and width swapped, swapped back."""
    a = data["x"] if kind == "values" else data["tangent"]
    swapped = dataclasses.replace(case, extents=case.extents[::-1], sizes=case.sizes[::-1])
    out = _torch_values(swapped, np.ascontiguousarray(np.swapaxes(a, 2, 3)))
    return np.ascontiguousarray(np.swapaxes(out, 2, 3))


@dataclasses.dataclass(frozen=True)
class Difference:
    """Where jaxpool's result is not torch's: ``kinds`` of the cases ``applies`` holds for,
    whose jaxpool result is ``reference(case, data, kind)``, computed from torch. ``example``:
    a case on which torch's own result is not ``reference``'s."""

    what: str
    kinds: tuple[str, ...]
    applies: Callable[[Case], bool]
    reference: Callable[[Case, dict, str], np.ndarray]
    example: Case


def _antialias(case: Case) -> bool:
    return bool(case.kwargs.get("antialias"))


DIFFERENCES = (
    Difference(
        "antialias, an extent unchanged: torch's forward copies that axis, its backward "
        "applies the filter along it, whose taps beside each element weigh 0, so a "
        "cotangent's inf becomes NaN at the neighbours (0 * inf); jaxpool's reverse mode is "
        "the transpose of the copy",
        ("reverse",),
        lambda c: _antialias(c) and any(n == k > 1 for n, k in zip(c.extents, c.sizes)),
        _transpose_of_torchs_forward, Case("bilinear antialias", (1, 3), (1, 3))),
    Difference(
        "antialias, an output width of 1 from a height that changes: torch's CPU kernel "
        "gives every output row of a column the same value whatever the height weights (a "
        "torch bug, in its forward mode too); jaxpool applies them, as torch does on the "
        "transposed input",
        ("values", "forward"),
        lambda c: _antialias(c) and c.sizes[1] == 1 and c.sizes[0] != c.extents[0],
        _torch_on_the_transposed_input, Case("bilinear antialias", (2, 2), (4, 1))),
    Difference(
        "bicubic, the whole output the input's size: torch's backward copies the cotangent, "
        "its forward applies the cubic taps, whose weights beside each element are 0 (an "
        "input's inf is NaN at the outputs around it); jaxpool's reverse mode is the "
        "transpose of that forward (a cotangent's inf NaN at the inputs around it)",
        ("reverse",),
        lambda c: c.kwargs["mode"] == "bicubic" and not _antialias(c) and c.sizes == c.extents,
        _transpose_of_torchs_forward, Case("bicubic", (2, 3), (2, 3))),
)


def difference_of(case: Case, kind: str) -> Difference | None:
    return next((d for d in DIFFERENCES if kind in d.kinds and d.applies(case)), None)


# --- comparisons -------------------------------------------------------------------------------

def pattern_mismatch(got: np.ndarray, expected: np.ndarray) -> str | None:
    """Why ``got`` is not ``expected``: NaN and inf elsewhere, or a finite entry off by more
    than rounding; None when they agree."""
    if got.shape != expected.shape:
        return f"shape {got.shape}, torch {expected.shape}"
    for pick in (np.isnan, np.isposinf, np.isneginf):
        bad = np.flatnonzero(pick(got) != pick(expected))
        if bad.size:
            return (f"{pick.__name__} at {bad.size} of {got.size} entries (torch "
                    f"{int(pick(expected).sum())}, jaxpool {int(pick(got).sum())})")
    finite = np.isfinite(expected)
    if not np.allclose(got[finite], expected[finite], rtol=1e-12, atol=1e-12):
        return f"finite entries off by {np.abs(got[finite] - expected[finite]).max():.3g}"
    return None


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def check_group(cases, rows: bool = True) -> list[tuple[Case, str, str]]:
    """``(case, kind, why)`` for every check of ``cases`` that fails: kinds values, reverse
    and forward against torch (or, where ``DIFFERENCES`` says so and ``rows``, the row's
    reference), and "bits" for a transform that changed a value."""
    rng = np.random.default_rng(len(cases) * 7919 + sum(len(str(c)) for c in cases))
    found = []
    for case in cases:
        d = _data(case, rng)
        got = _jaxpool(case, d)
        expected = _torch_expected(case, d)
        for kind in KINDS:
            row = difference_of(case, kind) if rows else None
            want = expected[kind] if row is None else row.reference(case, d, kind)
            why = pattern_mismatch(got[kind], want)
            if why:
                found.append((case, kind, why if row is None else f"{why} ({row.what[:30]})"))
        for how in ("values", "vmap"):
            if not _same_bits(got[how], got["plain"]):
                found.append((case, "bits", f"{'jit' if how == 'values' else how} "
                                            f"changes bits"))
    return found


def _torch_agrees(case: Case, kind: str) -> bool:
    """Whether torch's own result is the reference of ``case``'s row on planted data."""
    row = difference_of(case, kind)
    d = _data(case, np.random.default_rng(0))
    return pattern_mismatch(_torch_expected(case, d)[kind], row.reference(case, d, kind)) is None


# --- the tests -----------------------------------------------------------------------------------

def _default_cases() -> list[Case]:
    """One case of each flavour, the offset turning with the flavour, and each difference
    row's example, which stands for its flavour (more cases of a flavour repeat its
    derivative rule on other extents): the default run holds every flavour, input extent
    and output extent, and every row."""
    examples = [row.example for row in DIFFERENCES]
    picked = []
    for f, flavour in enumerate(FLAVOURS):
        if any(e.flavour == flavour for e in examples):
            continue
        cases = [c for c in CASES if c.flavour == flavour]
        picked.append(cases[(5 * f) % len(cases)])
    return picked + examples


DEFAULT_CASES = _default_cases()


def _groups():
    default = [pytest.param(tuple(DEFAULT_CASES[i:i + GROUP]), id=f"default-{i // GROUP}")
               for i in range(0, len(DEFAULT_CASES), GROUP)]
    every = [pytest.param(tuple(CASES[i:i + GROUP]), id=f"{CASES[i].flavour}-{i // GROUP}",
                          marks=pytest.mark.slow) for i in range(0, len(CASES), GROUP)]
    return default + every


@pytest.mark.parametrize("cases", _groups())
def test_nonfinite_values_and_derivatives_where_torch_puts_them(cases):
    found = check_group(cases)
    assert not found, f"{len(found)} checks fail:\n" + "\n".join(
        f"{case} {kind}: {why}" for case, kind, why in found[:20])


def test_the_default_share_holds_every_flavour_and_extent():
    assert {c.flavour for c in DEFAULT_CASES} == set(FLAVOURS)
    assert {n for c in DEFAULT_CASES for n in c.extents} == set(IN_EXTENTS)
    assert {k for c in DEFAULT_CASES for k in c.sizes} == set(OUT_EXTENTS)
    for row in DIFFERENCES:
        assert any(row.applies(c) for c in DEFAULT_CASES), row.what


@pytest.mark.parametrize("row", DIFFERENCES, ids=lambda d: d.what.split(":")[0])
def test_the_differences_are_torchs(row):
    """On the row's example, torch's result is not the row's reference, which jaxpool
    gives; for the reverse rows the reference is the transpose of torch's own forward, so
    there torch's backward is not that transpose."""
    case = row.example
    assert any(row.applies(case) and difference_of(case, kind) is row for kind in row.kinds)
    d = _data(case, np.random.default_rng(0))
    got = _jaxpool(case, d)
    expected = _torch_expected(case, d)
    for kind in row.kinds:
        reference = row.reference(case, d, kind)
        assert pattern_mismatch(expected[kind], reference) is not None, (
            f"torch now agrees: {case} {kind}")
        assert pattern_mismatch(got[kind], reference) is None, f"{case} {kind}"


def test_the_transpose_of_torchs_forward_is_torchs_backward_elsewhere():
    """The reverse rows' reference, built from torch's forward alone, is torch's own
    backward where that is the transpose: clamped taps read twice, negative weights."""
    case = Case("bicubic", (3, 2), (5, 7))
    assert difference_of(case, "reverse") is None
    d = _data(case, np.random.default_rng(1))
    assert pattern_mismatch(_forward_transposed(case, d["cotangent"]),
                            _torch_expected(case, d)["reverse"]) is None
