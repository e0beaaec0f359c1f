"""torch's own test inputs for the pooling ops (``opinfo_catalog``), run through jaxpool.

Every sample must give torch's values, and indices where ``return_indices`` asks for them;
every error input must raise a ValueError or TypeError. ``EXPECTED_DIFFERENCES`` lists where
jaxpool deliberately does something else, with the reason; each row is checked to be a real
difference.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import operator

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxpool
from default_share import each_once
from opinfo_catalog import (Difference, as_numpy, catalog, difference_of, drawn_error_inputs,
                            drawn_samples, first_line, run, short_name)

pytestmark = pytest.mark.usefixtures("x64")

AVG_OPS = ("avg_pool1d", "avg_pool2d", "avg_pool3d",
           "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d")
MAX_OPS = ("max_pool1d", "max_pool2d", "max_pool3d",
           "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d")
OPINFO = catalog(short_name, AVG_OPS + MAX_OPS)
SIZE_ARGUMENTS = ("kernel_size", "stride", "padding", "dilation", "output_size")

needs_max = pytest.mark.skipif(not hasattr(jaxpool, "max_pool2d"),
                               reason="jaxpool has no max pooling yet (jaxpool.max_pool2d)")

# max_pool1d/2d/3d have 576-1,440 samples each, and nearly every one is a program of its own
# to compile: the default run takes every SPREAD[op]-th (a prime, about the largest whose
# selection still holds every input shape and every value of every argument the catalog
# varies, which test_the_spread_holds_every_shape_and_argument_value checks); `-m slow`
# takes them all. The adaptive max ops have a few dozen samples: every third in the
# spread (the largest share that still holds them). By default each op's spread runs in
# one dtype (the dtypes in turn), under -m slow in both.
SPREAD = {"max_pool1d": 131, "max_pool2d": 157, "max_pool3d": 83}
ADAPTIVE_SPREAD = 3


@dataclasses.dataclass(frozen=True, repr=False)
class Call:
    """One call of an op, made the same way on both sides (x as NumPy for jaxpool, as a
    tensor for torch)."""

    op: str
    x: np.ndarray
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    label: str = ""

    @property
    def ndim(self) -> int:
        return int(self.op[-2])

    def named(self) -> dict:
        """The arguments after x, by name (only those given)."""
        bound = inspect.signature(getattr(jaxpool, self.op)).bind(None, *self.args,
                                                                  **self.kwargs)
        return {k: v for k, v in list(bound.arguments.items())[1:]}

    def with_named(self, named: dict) -> Call:
        return dataclasses.replace(self, args=(), kwargs=named)

    def __repr__(self) -> str:
        return (self.label or self.op) + (f": x{self.x.shape} {self.x.dtype}, "
                                          f"args={self.args!r}, kwargs={self.kwargs!r}")


def _per_axis(value, ndim: int) -> tuple:
    entries = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    return entries * ndim if len(entries) == 1 else entries


def _entries(value) -> list:
    if value is None:
        return [None]
    return list(np.asarray(value, dtype=object).reshape(-1))


# --- the expected differences ---------------------------------------------------------------

def _zero_stride_applies(call: Call) -> bool:
    stride = call.named().get("stride")
    return stride is not None and any(s == 0 for s in _entries(stride))


def _zero_stride_as_kernel(call: Call) -> Call:
    named = call.named()
    kernel = _per_axis(named["kernel_size"], call.ndim)
    stride = _per_axis(named["stride"], call.ndim)
    return call.with_named({**named, "stride": tuple(s or k for s, k in zip(stride, kernel))})


def _empty_output_applies(call: Call) -> bool:
    sizes = [s for s in _entries(call.named().get("output_size", 1)) if s is not None]
    return any(s == 0 for s in sizes) and all(s >= 0 for s in sizes)


def _is_python_size(value) -> bool:
    # bools count as Python ints here: torch rejects them, and so must jaxpool.
    entries = value if isinstance(value, (tuple, list)) else (value,)
    return all(e is None or isinstance(e, int) for e in entries)


def _integer_forms_apply(call: Call) -> bool:
    return any(not _is_python_size(v) for k, v in call.named().items() if k in SIZE_ARGUMENTS)


def _as_python_ints(call: Call) -> Call:
    def plain(value):
        if hasattr(value, "shape"):  # an array or an array scalar
            value = np.asarray(value).tolist()
        if isinstance(value, (tuple, list)):
            return tuple(None if v is None else operator.index(v) for v in value)
        return None if value is None else operator.index(value)

    return call.with_named({k: plain(v) if k in SIZE_ARGUMENTS else v
                            for k, v in call.named().items()})


def _none_sizes_apply(call: Call) -> bool:
    sizes = call.named().get("output_size", 1)
    return sizes is None or (call.ndim == 1 and None in _entries(sizes))


def _none_as_extent(call: Call) -> Call:
    named = call.named()
    extents = call.x.shape[-call.ndim:]
    sizes = _per_axis(named["output_size"], call.ndim)
    return call.with_named({**named, "output_size": tuple(
        n if s is None else s for s, n in zip(sizes, extents))})


def _integer_input_applies(call: Call) -> bool:
    return not np.issubdtype(call.x.dtype, np.floating)


_X2 = np.arange(2 * 3 * 6 * 7, dtype=np.float64).reshape(2, 3, 6, 7) % 5
_X1 = _X2[:, :, 0]

EXPECTED_DIFFERENCES = (
    Difference(
        "stride 0 (on any axis) means that axis's kernel_size; torch raises",
        "the catalog's convention: stride None or 0 is the default, so a stride computed as "
        "0 for 'no stride given' ports unchanged",
        _zero_stride_applies, _zero_stride_as_kernel,
        (Call("avg_pool2d", _X2, (2, 0)), Call("avg_pool2d", _X2, (3,), {"stride": (0, 2)}),
         Call("max_pool1d", _X1, (2,), {"stride": 0}))),
    Difference(
        "output_size 0 raises a ValueError; torch returns an empty tensor",
        "the catalog requires output_size >= 1: an empty pooled map is a bug in the caller's "
        "shape arithmetic more often than a request",
        _empty_output_applies, None,
        (Call("adaptive_avg_pool2d", _X2, ((0, 2),)), Call("adaptive_max_pool1d", _X1, (0,)))),
    Difference(
        "sizes may be NumPy, JAX or torch integers and integer arrays of any kind; torch's "
        "argument parser rejects NumPy arrays as kernel_size/stride/padding/dilation, 0-d "
        "arrays, and a NumPy integer output_size in the 2d/3d adaptive ops",
        "sizes come from array arithmetic (np.array(shape) // 2) in ported code; any concrete "
        "integer is unambiguous",
        _integer_forms_apply, _as_python_ints,
        (Call("avg_pool2d", _X2, (np.array([2, 3]),)),
         Call("avg_pool2d", _X2, (np.array(3), jnp.int32(2))),
         Call("adaptive_avg_pool2d", _X2, (np.int64(3),)),
         Call("max_pool2d", _X2, (jnp.array([3, 2]),), {"dilation": np.array([1, 2])}))),
    Difference(
        "output_size None (keep every extent), and None entries in the 1d ops; torch accepts "
        "None only as an entry of a 2d/3d tuple",
        "one rule for every op: None keeps that extent",
        _none_sizes_apply, _none_as_extent,
        (Call("adaptive_avg_pool2d", _X2, (None,)), Call("adaptive_avg_pool1d", _X1, ((None,),)),
         Call("adaptive_max_pool1d", _X1, ((None,),)))),
    Difference(
        "integer and bool inputs raise a TypeError; torch pools int64 in avg_pool and every "
        "integer type in max_pool2d/3d",
        "jaxpool's ops are differentiable floating-point ops (float16, bfloat16, float32, "
        "float64); integer average pooling would round where torch truncates",
        _integer_input_applies, None,
        (Call("avg_pool2d", _X2.astype(np.int64), (2,)),
         Call("max_pool2d", _X2.astype(np.int64), (2,))),
        TypeError),
)


def _difference(call: Call) -> Difference | None:
    return difference_of(call, EXPECTED_DIFFERENCES)


# --- running a call on both sides -------------------------------------------------------------

def _torch(call: Call):
    return run(getattr(F, call.op), torch.from_numpy(call.x), *call.args, **call.kwargs)


def _jaxpool(call: Call):
    return run(getattr(jaxpool, call.op), call.x, *call.args, **call.kwargs)


def _compare(actual, expected, exact: bool) -> str | None:
    """Why jaxpool's output differs from torch's, or None."""
    if isinstance(actual, tuple) != isinstance(expected, tuple):
        return f"returned {type(actual).__name__}, torch {type(expected).__name__}"
    outputs = zip(("values", "indices"), actual, expected) if isinstance(expected, tuple) \
        else [("values", actual, expected)]
    for name, mine, theirs in outputs:
        mine, theirs = np.asarray(mine), theirs.numpy()
        if mine.shape != theirs.shape:
            return f"{name}: shape {mine.shape}, torch {theirs.shape}"
        if name == "values" and mine.dtype != theirs.dtype:
            return f"values: dtype {mine.dtype}, torch {theirs.dtype}"
        if name == "indices" and not np.issubdtype(mine.dtype, np.integer):
            return f"indices: dtype {mine.dtype}, not an integer type"
        if exact or name == "indices":
            if not np.array_equal(mine, theirs, equal_nan=True):
                bad = int((mine != theirs).sum())
                return f"{name}: {bad} of {mine.size} elements differ (exact comparison)"
        elif not np.allclose(mine, theirs, rtol=1e-12, atol=1e-12, equal_nan=True):
            return f"{name}: max abs error {np.abs(mine - theirs).max():.3g}"
    return None


def _mismatch(call: Call, exact: bool) -> str | None:
    """Why jaxpool does not do what torch does on ``call`` (or what EXPECTED_DIFFERENCES
    says instead), or None when it does."""
    difference = _difference(call)
    actual, error = _jaxpool(call)
    if difference is not None and difference.torch_equivalent is None:
        wanted, why = (difference.error,), f"expected difference: {difference.what}"
    else:
        reference = call if difference is None else difference.torch_equivalent(call)
        expected, torch_error = _torch(reference)
        wanted = (ValueError, TypeError) if torch_error is not None else None
        why = f"torch: {first_line(torch_error)}" if torch_error is not None else ""
    if wanted is not None:
        if isinstance(error, wanted):
            return None
        got = "returned" if error is None else f"raised {first_line(error)}"
        return f"{got}; expected {' or '.join(w.__name__ for w in wanted)} ({why})"
    if error is not None:
        return f"raised {first_line(error)}"
    return _compare(actual, expected, exact)


def _check_all(calls, exact: bool) -> None:
    failures = [f"{call}\n    {why}" for call in calls
                if (why := _mismatch(call, exact)) is not None]
    assert not failures, f"{len(failures)} of {len(calls)} calls differ from torch:\n" + \
        "\n".join(failures[:15])


@functools.lru_cache(maxsize=None)
def samples(op: str, dtype: torch.dtype) -> tuple[Call, ...]:
    """Every OpInfo sample of ``op``."""
    return tuple(Call(op, as_numpy(s.input), tuple(s.args), dict(s.kwargs), f"{op} sample {i}")
                 for i, s in enumerate(drawn_samples(OPINFO[op], dtype)))


def error_inputs(op: str) -> tuple[Call, ...]:
    return tuple(Call(op, as_numpy(e.sample_input.input), tuple(e.sample_input.args),
                      dict(e.sample_input.kwargs),
                      f"{op} error input {i} (torch: {e.error_regex!r})")
                 for i, e in enumerate(drawn_error_inputs(OPINFO[op])))


# --- the tests ----------------------------------------------------------------------------------

def test_the_catalog_has_every_op():
    assert sorted(OPINFO) == sorted(AVG_OPS + MAX_OPS)


@pytest.mark.parametrize("op", AVG_OPS)
def test_avg_samples(op):
    _check_all(samples(op, torch.float64), exact=False)


@pytest.mark.parametrize("op", AVG_OPS)
def test_avg_error_inputs(op):
    _check_all(error_inputs(op), exact=False)


def _spread(op: str, dtype: torch.dtype) -> tuple[Call, ...]:
    """The samples the default run takes (another share per dtype)."""
    calls = samples(op, dtype)
    if op.startswith("adaptive"):
        return calls[(0 if dtype == torch.float32 else ADAPTIVE_SPREAD - 1)::ADAPTIVE_SPREAD]
    return calls[(0 if dtype == torch.float32 else SPREAD[op] // 2)::SPREAD[op]]


# Each op in one dtype by default (the dtypes in turn), both under -m slow.
@needs_max
@pytest.mark.parametrize("op,dtype", each_once(list(MAX_OPS), [torch.float32, torch.float64],
                                               ids=list(MAX_OPS)))
def test_max_samples_spread(op, dtype):
    """A fixed spread of the samples; max selects, so values are exact in every dtype."""
    _check_all(_spread(op, dtype), exact=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("op", MAX_OPS)
def test_the_spread_holds_every_shape_and_argument_value(op, dtype):
    def features(call: Call) -> set:
        return {("input shape", call.x.shape)} | {(k, repr(v)) for k, v in call.named().items()}

    every = set().union(*map(features, samples(op, dtype)))
    taken = set().union(*map(features, _spread(op, dtype)))
    assert every <= taken, sorted(every - taken)


@pytest.mark.slow
@needs_max
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("op", MAX_OPS)
def test_max_samples_all(op, dtype):
    _check_all(samples(op, dtype), exact=True)


@needs_max
@pytest.mark.parametrize("op", MAX_OPS)
def test_max_error_inputs(op):
    _check_all(error_inputs(op), exact=True)


@pytest.mark.parametrize("difference", EXPECTED_DIFFERENCES, ids=lambda d: d.what[:40])
def test_expected_differences_are_real(difference):
    """On each example exactly one side raises, and jaxpool does what the table says."""
    for call in difference.examples:
        if not hasattr(jaxpool, call.op):
            continue  # an op not landed yet: needs_max skips the catalog runs likewise
        assert _difference(call) is difference, call
        _, torch_error = _torch(call)
        _, jaxpool_error = _jaxpool(call)
        assert (torch_error is None) != (jaxpool_error is None), (
            f"{call}: not a difference (torch: {torch_error!r}, jaxpool: {jaxpool_error!r})")
        assert _mismatch(call, exact=False) is None, (call, _mismatch(call, exact=False))


# Argument forms torch accepts beyond the catalog's samples: a 1-tuple repeated on every axis,
# an empty stride meaning the default, lists, NumPy integers, torch.Size, 0-d integer tensors.
ARGUMENT_FORMS = (
    Call("avg_pool2d", _X2, (3,), {"padding": (1,)}),
    Call("avg_pool2d", _X2, ((3,), (2,), (1,))),
    Call("avg_pool2d", _X2, (2, ())),
    Call("avg_pool2d", _X2, (2, [])),
    Call("avg_pool2d", _X2, ([3, 2], [2, 1], [1, 0])),
    Call("avg_pool2d", _X2, (np.int64(3), np.int32(2), np.uint8(1))),
    Call("avg_pool2d", _X2, (torch.Size([3, 2]),)),
    Call("avg_pool2d", _X2, (torch.tensor(2),)),
    Call("avg_pool3d", _X2, ((2,), ())),
    Call("avg_pool1d", _X1, ([3], [], [1])),
    Call("adaptive_avg_pool1d", _X1, (np.int64(3),)),
    Call("adaptive_avg_pool1d", _X1, ([3],)),
    Call("adaptive_avg_pool2d", _X2, ([4, None],)),
    Call("adaptive_avg_pool2d", _X2, (torch.Size([4, 5]),)),
    Call("max_pool2d", _X2, (3,), {"stride": (), "padding": (1,), "dilation": (2,)}),
    Call("max_pool2d", _X2, ([3, 2], [2, 1], [1, 0], [1, 2])),
    Call("max_pool1d", _X1, (np.int64(3), [], (1,))),
    Call("adaptive_max_pool2d", _X2, (np.array([4, 5]), True)),
)


@pytest.mark.parametrize("call", ARGUMENT_FORMS, ids=str)
def test_argument_forms_torch_accepts(call):
    if not hasattr(jaxpool, call.op):
        pytest.skip(f"jaxpool has no {call.op} yet")
    assert _torch(call)[1] is None, "torch rejects this form: it belongs to the differences"
    assert _mismatch(call, exact=False) is None, _mismatch(call, exact=False)
