"""Does a JAX function agree with a torch function, in value and in derivatives of every order?

``compare(jax_fn, torch_fn, *inputs)`` feeds both functions exactly the same numbers and
runs every check of ``parity.checks`` (value, VJP, JVP, double backward, HVP, k-th
derivatives in both modes), one row per check and leaf, with the tolerances of
``parity.tolerances``.

Inputs and outputs are pytrees: arrays, or tuples, lists, dicts and named tuples of arrays
(a Flax parameter dict, what a torch module returns). Every floating-point array leaf of the
selected arguments is differentiated; integer arrays are passed along; anything that is not
an array (ints, tuples of ints, strings, None) reaches both sides unchanged. Integer outputs
(indices) are compared exactly by the value check and left out of the derivatives.

Every random cotangent, tangent, direction and weight comes from
``numpy.random.default_rng(seed)``, is rounded to the dtype it is used in, and is then given
to both sides, so both differentiate along exactly the same directions. The generator is
salted so that the directions never coincide with inputs a caller drew from
``default_rng(seed)`` (for a layer norm, u = x would make every VJP vanish).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np
import torch

from . import programs
from .checks import Failed, JaxSide, TorchSide, checks, run_jax, run_torch, short_exc
from .convert import (TORCH_DTYPES, is_array, map_arrays, numpy_dtype, output_leaves, to_jax,
                      to_numpy, to_torch, x64)
from .results import Report, Row
from .tolerances import HALF, Diff, functional_dtype, is_float, tolerance, unit_roundoff

__all__ = ["Call", "compare", "compare_errors", "assert_parity"]


class Call:
    """Positional and keyword arguments for one call in ``compare_errors`` / ``bad_inputs``.

    Array arguments (NumPy or JAX arrays, also inside tuples, lists and dicts) are converted
    for each side, so both receive the same numbers; everything else is passed as is.
    ``label`` names the case in the report.
    """

    def __init__(self, *args, label: str | None = None, **kwargs):
        self.args = args
        self.kwargs = kwargs
        self.label = label or self._describe()

    def _describe(self) -> str:
        args, kwargs = map_arrays(_ArrayLabel, (self.args, self.kwargs))
        return ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])

    def __repr__(self) -> str:
        return f"Call({self.label})"


class _ArrayLabel:
    """An array as a ``Call`` label shows it: dtype and shape."""

    def __init__(self, a):
        self.text = f"{np.dtype(to_numpy(a).dtype).name}{list(a.shape)}"

    def __repr__(self) -> str:
        return self.text


class _Inputs:
    """The positional inputs of one ``compare`` call, split into array leaves (converted for
    each side) and the rest (passed as is); ``diff`` are the leaves to differentiate."""

    def __init__(self, inputs: tuple, argnums: Sequence[int] | int | None):
        flat, self.treedef = jax.tree_util.tree_flatten_with_path(tuple(inputs))
        self.leaves = [leaf for _, leaf in flat]
        self.array_pos = [i for i, leaf in enumerate(self.leaves) if is_array(leaf)]
        self.arrays = [to_numpy(self.leaves[i]) for i in self.array_pos]
        arg_of = [flat[i][0][0].idx for i in self.array_pos]
        self.labels = [f"input{flat[i][0][0].idx}{jax.tree_util.keystr(flat[i][0][1:])}"
                       for i in self.array_pos]
        floats = [j for j, a in enumerate(self.arrays) if is_float(a.dtype)]
        if argnums is None:
            self.diff = floats
        else:
            argnums = [argnums] if isinstance(argnums, int) else list(argnums)
            for i in argnums:
                if not any(arg_of[j] == i for j in floats):
                    raise ValueError(f"argnums entry {i} is not a floating-point input "
                                     f"(or a pytree with floating-point arrays)")
            self.diff = [j for j in floats if arg_of[j] in argnums]
        self.others = [j for j in range(len(self.arrays)) if j not in self.diff]

    def build(self, arrays: Sequence) -> list:
        """The positional arguments with ``arrays`` in place of the array leaves."""
        leaves = list(self.leaves)
        for i, a in zip(self.array_pos, arrays):
            leaves[i] = a
        return list(jax.tree_util.tree_unflatten(self.treedef, leaves))

    def merge(self, diff_arrays: Sequence, other_arrays: Sequence) -> list:
        """Array leaves in order, from the differentiated ones and the others."""
        arrays = [None] * len(self.arrays)
        for j, a in zip(self.diff, diff_arrays):
            arrays[j] = a
        for j, a in zip(self.others, other_arrays):
            arrays[j] = a
        return arrays


def _leaves(fn, args) -> list:
    return [leaf for _, leaf in output_leaves(fn(*args))]


def compare(
    jax_fn: Callable,
    torch_fn: Callable,
    *inputs,
    orders: int = 3,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
    argnums: Sequence[int] | int | None = None,
    reference: str = "auto",
    bad_inputs: Sequence[Any] = (),
    jit: bool = True,
    label: str = "",
    program_key: str | None = None,
    compiler_options: Mapping[str, Any] | None = None,
) -> Report:
    """Check that ``jax_fn(*inputs)`` and ``torch_fn(*inputs)`` agree, derivatives included.

    Args:
      jax_fn, torch_fn: take the same positional arguments (JAX arrays on one side, torch
        tensors on the other, in the same pytrees) and return an array or a pytree of
        arrays (tuples, lists, dicts, named tuples).
      inputs: NumPy or JAX arrays, pytrees of them, or anything else (passed unchanged).
        Both sides get exactly these numbers.
      orders: highest derivative order checked (0: values only, 1: + VJP/JVP, 2: + double
        backward, Hessian-vector product and second derivatives, k: up to k-th derivatives).
      rtol, atol: override the dtype's tolerance (``abs_err <= atol + rtol * max|torch|``).
      seed: seed of the cotangents, tangents and directions.
      argnums: which positional inputs to differentiate (default: every floating-point array
        leaf of every input).
      reference: "auto" (float64 torch reference for float16/bfloat16, direct otherwise),
        "direct" (JAX vs torch in the input dtype) or "float64" (always against float64).
      bad_inputs: input tuples (or ``Call`` objects) on which both functions must raise.
      jit: compile the JAX side (one fused program per call); False for functions that
        cannot be traced.
      label: name shown in the report.
      program_key: a name that fixes both functions and the inputs that are not arrays;
        inside ``parity.programs.program_store(dir)`` the JAX side's compiled program is
        kept under it (with the arrays' shapes and dtypes) and torch's results (with the
        arrays' values), and loaded from there next time instead of being traced, compiled
        and computed again. None (the default) computes everything on every call.
      compiler_options: XLA options for compiling the JAX side's programs (``jax.jit``'s
        ``lower(...).compile(compiler_options)``); None: XLA's defaults. The suite passes
        :func:`parity.checks.check_program_options`.

    Returns:
      A ``Report`` with one row per check and leaf; ``report.ok`` is True iff every row
      passed.
    """
    if not isinstance(orders, int) or isinstance(orders, bool) or orders < 0:
        raise ValueError(f"orders must be an int >= 0, got {orders!r}")
    if reference not in ("auto", "direct", "float64"):
        raise ValueError(f"reference must be 'auto', 'direct' or 'float64', got {reference!r}")
    if not inputs:
        raise ValueError("compare needs at least one input")
    args = _Inputs(inputs, argnums)
    if not args.diff:
        orders = 0  # nothing to differentiate

    # The dtype that sets the tolerance: the least precise differentiated input.
    float_dtypes = ([args.arrays[j].dtype for j in args.diff]
                    or [a.dtype for a in args.arrays if is_float(a.dtype)]
                    or [np.dtype(np.float64)])
    dtype = max(float_dtypes, key=unit_roundoff)
    use_ref = reference == "float64" or (reference == "auto" and dtype in HALF)

    with x64():
        checker = _Checker(jax_fn, torch_fn, args, orders, seed, dtype, jit, program_key,
                           compiler_options)
        rows = checker.run(use_ref, rtol, atol)
        if bad_inputs:
            cases = [c if isinstance(c, Call) else Call(*(c if isinstance(c, tuple) else (c,)))
                     for c in bad_inputs]
            rows += compare_errors(jax_fn, torch_fn, cases).rows
    return Report(rows=rows, label=label, dtype=np.dtype(dtype).name,
                  reference="float64" if use_ref else "direct")


def _cast_floats(tensors, dtype):
    return [t.to(dtype) if t.is_floating_point() else t for t in tensors]


def _as_numpy(sides):
    """A side's results as NumPy arrays (failures as they are), to be stored."""
    t_side, notes, r_side = sides
    convert = lambda side: {k: r if isinstance(r, Failed) else [to_numpy(t) for t in r]
                            for k, r in side.items()}
    return convert(t_side), notes, convert(r_side)


def _round_results(results, dtype):
    """Round every floating-point tensor of a side's results to ``dtype``."""
    return {k: r if isinstance(r, Failed) else _cast_floats(r, dtype) for k, r in results.items()}


class _Checker:
    """One ``compare`` call: the shared random data, both sides, and the rows."""

    def __init__(self, jax_fn, torch_fn, args: _Inputs, orders, seed, dtype, jit,
                 program_key=None, compiler_options=None):
        self.jax_fn, self.torch_fn, self.args = jax_fn, torch_fn, args
        self.program_key = program_key
        self.compiler_options = dict(compiler_options or {})
        self.orders, self.seed, self.dtype, self.jit = orders, seed, np.dtype(dtype), jit
        self.fdtype = functional_dtype(dtype)
        self.t_arrays = [to_torch(a) for a in args.arrays]

    # -- forward: shape and dtype, decided by torch (the oracle)

    def _torch_forward(self, arrays):
        with torch.no_grad():
            out = output_leaves(self.torch_fn(*self.args.build(arrays)))
        bad = [path for path, y in out if not isinstance(y, torch.Tensor)]
        if bad or not out:
            raise TypeError("torch_fn must return tensors (or tuples, lists, dicts of them); "
                            f"got no tensor at {', '.join(bad) or 'output'}")
        return out

    def _jax_forward_spec(self):
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in self.args.arrays]
        store = programs.active_store()
        try:
            def leaves(*a):
                return _leaves(self.jax_fn, self.args.build(a))

            if store is not None and self.program_key is not None:
                return store.eval_shape(leaves, f"{self.program_key}|forward", *specs)
            return jax.eval_shape(leaves, *specs)
        except Exception:  # noqa: BLE001 - not traceable abstractly: run it
            ys = _leaves(self.jax_fn, self.args.build([to_jax(a) for a in self.args.arrays]))
            return [jax.ShapeDtypeStruct(y.shape, y.dtype) for y in ys]

    def _forward(self, use_ref):
        """(torch output leaves, emulated?) or a failing value row."""
        emulated = False
        try:
            y_t = self._torch_forward(self.t_arrays)
        except Exception as e:  # noqa: BLE001
            y_t = Failed(e)
            if use_ref and self.dtype in HALF:
                # torch lacks this op in half precision (avg_pool3d on the CPU, for one).
                # Stand in with what its half kernels do elsewhere: float32, rounded once.
                try:
                    y32 = self._torch_forward(_cast_floats(self.t_arrays, torch.float32))
                    half = TORCH_DTYPES[self.dtype]
                    y_t = [(p, y.to(half) if y.is_floating_point() else y) for p, y in y32]
                    emulated = True
                except Exception:  # noqa: BLE001 - keep the original failure
                    pass
        try:
            y_spec = self._jax_forward_spec()
        except Exception as e:  # noqa: BLE001
            y_spec = Failed(e)
        if isinstance(y_t, Failed) or isinstance(y_spec, Failed):
            both = isinstance(y_t, Failed) and isinstance(y_spec, Failed)
            if both:
                note = f"both raised; jax: {y_spec!r} | torch: {y_t!r}"
            elif isinstance(y_spec, Failed):
                note = f"only jax raised: {y_spec!r}"
            else:
                note = f"only torch raised: {y_t!r}"
            return None, Row("value", 0, math.nan, math.nan, math.nan, both, note)
        mismatch = []
        if len(y_spec) != len(y_t):
            mismatch.append(f"{len(y_spec)} output arrays (jax) vs {len(y_t)} (torch: "
                            f"{', '.join(p for p, _ in y_t)})")
        for (path, t), j in zip(y_t, y_spec):
            where = "" if len(y_t) == 1 else f"{path}: "
            if tuple(j.shape) != tuple(t.shape):
                mismatch.append(f"{where}shape {tuple(j.shape)} (jax) vs {tuple(t.shape)} (torch)")
            if np.dtype(j.dtype) != numpy_dtype(t.dtype):
                mismatch.append(f"{where}dtype {np.dtype(j.dtype).name} (jax) vs "
                                f"{numpy_dtype(t.dtype).name} (torch)")
        if mismatch:
            return None, Row("value", 0, math.inf, math.inf, 0.0, False, "; ".join(mismatch))
        return (y_t, emulated), None

    # -- the shared random data

    def _draw(self, y_t):
        """Cotangents, tangents, directions and weights: drawn in float64 and rounded once to
        the dtype they are used in; one array per floating-point output or differentiated
        input leaf."""
        rng = np.random.default_rng([self.seed, 0x9A817])
        self.out_labels = [p for p, _ in y_t]
        self.float_out = [i for i, (_, y) in enumerate(y_t) if y.is_floating_point()]
        if not self.float_out:
            self.orders = 0
        outs = [(tuple(y_t[i][1].shape), numpy_dtype(y_t[i][1].dtype)) for i in self.float_out]
        ins = [(self.args.arrays[j].shape, self.args.arrays[j].dtype) for j in self.args.diff]

        def draw(specs, dtype=None):
            return [rng.standard_normal(s).astype(dtype or d) for s, d in specs]

        self.data = {"u": draw(outs), "t": draw(ins), "vv": draw(ins),
                     "w": draw(outs, self.fdtype), "dh": draw(ins), "df": draw(ins),
                     "dirs": [draw(ins) for _ in range(max(self.orders - 1, 0))]}
        self.scales = []
        for i in self.float_out:
            y = to_numpy(y_t[i][1]).astype(np.float64)
            finite = y.size and np.all(np.isfinite(y))
            self.scales.append(max(1.0, float(np.sqrt(np.mean(y**2)))) if finite else 1.0)

    def _data_as(self, convert, cast=None):
        return jax.tree_util.tree_map(lambda a: convert(a if cast is None else a.astype(cast)),
                                      self.data)

    # -- the sides

    def _torch(self, t_arrays, cast, fdtype):
        def f_all(xs):
            arrays = list(t_arrays)
            for j, x in zip(self.args.diff, xs):
                arrays[j] = x
            return _leaves(self.torch_fn, self.args.build(arrays))

        def f(xs):
            ys = f_all(xs)
            return [ys[i] for i in self.float_out]

        side = TorchSide(f, f_all, [t_arrays[j] for j in self.args.diff],
                         self._data_as(to_torch, cast), fdtype, self.scales)
        return run_torch(checks(self.orders), side)

    def _torch_emulated(self):
        """torch in float32, every result rounded to the half dtype."""
        side, notes = self._torch(_cast_floats(self.t_arrays, torch.float32), np.float32,
                                  torch.float32)
        return _round_results(side, TORCH_DTYPES[self.dtype]), notes

    def _jax(self):
        args, float_out = self.args, self.float_out

        def make_side(dxs, others, data):
            def f_all(xs):
                return _leaves(self.jax_fn, args.build(args.merge(xs, others)))

            def f(xs):
                ys = f_all(xs)
                return [ys[i] for i in float_out]

            return JaxSide(f, f_all, list(dxs), data, self.fdtype, self.scales)

        dxs = [to_jax(args.arrays[j]) for j in args.diff]
        others = [to_jax(args.arrays[j]) for j in args.others]
        name = None
        if self.program_key is not None:
            # Everything make_side closes over besides the function, which the key names.
            name = (f"{self.program_key}|orders={self.orders}|scales={self.scales!r}|"
                    f"float_out={float_out}|fdtype={self.fdtype.name}")
        return run_jax(checks(self.orders), make_side, (dxs, others, self._data_as(to_jax)),
                       self.jit, name, self.compiler_options)

    def _torch_results(self, use_ref, emulated):
        """torch's side of every check, its notes and the float64 reference's side ({} when
        not used); from the store when ``program_key`` names this comparison."""
        store = programs.active_store()
        if store is None or self.program_key is None:
            return self._torch_sides(use_ref, emulated)
        # torch's results follow from the functions (which the key names), the arrays'
        # values and the random data, which the seed and the torch forward's scales fix.
        digest = hashlib.sha256()
        for a in self.args.arrays:
            digest.update(f"{a.shape}{a.dtype}".encode() + np.ascontiguousarray(a).tobytes())
        name = (f"{self.program_key}|torch|orders={self.orders}|seed={self.seed}|"
                f"scales={self.scales!r}|ref={use_ref}|emulated={emulated}|{digest.hexdigest()}")
        return store.results(name, lambda: _as_numpy(self._torch_sides(use_ref, emulated)))

    def _torch_sides(self, use_ref, emulated):
        name = self.dtype.name
        emulation_note = f"torch has no {name} kernel here: float32, rounded to {name}"
        if emulated:
            t_side, t_notes = self._torch_emulated()
            t_notes = {k: emulation_note for k in t_side}
        else:
            t_side, t_notes = self._torch(self.t_arrays, None, TORCH_DTYPES[self.fdtype])
        r_side = {}
        if use_ref:
            r_side, _ = self._torch(_cast_floats(self.t_arrays, torch.float64), np.float64,
                                    torch.float64)
            lacking = [k for k, v in t_side.items()
                       if isinstance(v, Failed) and not isinstance(r_side.get(k), Failed)]
            if lacking:  # a derivative without a half kernel: emulate that check alone
                e_side, _ = self._torch_emulated()
                for k in lacking:
                    t_side[k], t_notes[k] = e_side[k], emulation_note
        return t_side, t_notes, r_side

    # -- rows

    def run(self, use_ref, rtol, atol):
        fwd, failed_row = self._forward(use_ref)
        if failed_row is not None:
            return [failed_row]
        y_t, emulated = fwd
        self._draw(y_t)
        t_side, t_notes, r_side = self._torch_results(use_ref, emulated)
        j_side = self._jax()
        rows = []
        for c in checks(self.orders):
            if c.name == "value":
                labels = self.out_labels
            elif c.like == "output":
                labels = [self.out_labels[i] for i in self.float_out]
            else:
                labels = [self.args.labels[j] for j in self.args.diff]
            rows += self._rows(c.name, c.order, labels, j_side[c.name], t_side[c.name],
                               r_side.get(c.name) if use_ref else None,
                               t_notes.get(c.name, ""), rtol, atol)
        return rows

    def _rows(self, name, order, labels, jr, tr, ref, note, rtol, atol):
        """One row per leaf of one check."""
        failed = [(s, r) for s, r in (("jax", jr), ("torch", tr), ("torch float64", ref))
                  if isinstance(r, Failed)]
        if failed:
            both = isinstance(jr, Failed) and isinstance(tr, Failed)
            msg = "; ".join(f"{s} raised {r!r}" for s, r in failed)
            return [Row(name, order, math.nan, math.nan, math.nan, both,
                        (note + "; " if note else "") + msg)]
        if not len(jr) == len(tr) == len(labels):
            return [Row(name, order, math.inf, math.inf, 0.0, False,
                        f"{len(jr)} results (jax) vs {len(tr)} (torch)")]
        rows = []
        for i, label in enumerate(labels):
            row_name = name if len(labels) == 1 else f"{name} {label}"
            t = to_numpy(tr[i])
            exact = not is_float(t.dtype)  # indices and masks must be equal
            want = t if exact or ref is None else to_numpy(ref[i])
            diff = Diff(jr[i], want, label)
            ref_err = None
            if ref is not None and not exact:
                ref_err = Diff(t, want, label).worst
            tol = 0.0 if exact else tolerance(self.dtype, order, diff.scale, ref_err=ref_err,
                                               rtol=rtol, atol=atol)
            ok = bool(diff.worst <= tol)
            rows.append(Row(row_name, order, diff.worst, diff.rel, tol, ok, note, ref_err,
                            "" if ok else diff.detail(tol)))
        return rows


def compare_errors(jax_fn: Callable, torch_fn: Callable, cases: Sequence[Call]) -> Report:
    """Check that both functions raise on every case (exception types and messages may differ).

    ``cases`` are ``Call(*args, **kwargs)``; array arguments are converted for each side.
    A case where only one side raises, or neither does, is a failure.
    """
    rows = []
    for case in cases:
        if not isinstance(case, Call):
            raise TypeError(f"cases must be parity.Call objects, got {type(case).__name__}")
        outcome: dict[str, Any] = {}  # side: the exception it raised, or None
        for side, fn, conv in (("jax", jax_fn, to_jax), ("torch", torch_fn, to_torch)):
            args, kwargs = map_arrays(conv, (case.args, case.kwargs))
            try:
                with x64():
                    res = fn(*args, **kwargs)
                    if side == "jax":
                        jax.block_until_ready(res)
                outcome[side] = None
            except Exception as e:  # noqa: BLE001
                outcome[side] = e
        j, t = outcome["jax"], outcome["torch"]
        ok = j is not None and t is not None
        if ok:
            note = f"jax {type(j).__name__}, torch {type(t).__name__}"
        elif j is None and t is None:
            note = "neither side raised"
        else:
            note = f"only {'jax' if j is not None else 'torch'} raised: {short_exc(j or t)}"
        detail = "" if ok else (f"jax: {short_exc(j) if j else 'returned'}\n"
                                f"torch: {short_exc(t) if t else 'returned'}")
        rows.append(Row(f"raises {case.label}", 0, math.nan, math.nan, math.nan, ok, note,
                        None, detail))
    return Report(rows=rows, label="errors")


def assert_parity(jax_fn: Callable, torch_fn: Callable, *inputs, **kwargs) -> Report:
    """``compare(...)`` that raises ``ParityError`` (an AssertionError) with a readable diff."""
    return compare(jax_fn, torch_fn, *inputs, **kwargs).raise_if_failed()
