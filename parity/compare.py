"""Does a JAX function agree with a torch function, in value and in derivatives of every order?

``compare(jax_fn, torch_fn, *inputs)`` feeds both functions exactly the same numbers
and checks, one row each:

===========================  =====  ============================================================
row                          order  what is compared (JAX side / torch side)
===========================  =====  ============================================================
value                        0      f(x), with shape and dtype
vjp                          1      u^T J, random cotangent u (``jax.vjp`` / ``autograd.grad``)
jvp                          1      J t, random tangent t (``jax.jvp`` / ``torch.func.jvp``)
double backward d/dcot       2      d<vjp(x, u), v>/du  (``jax.vjp`` of ``jax.vjp`` /
double backward d/dinput     2      d<vjp(x, u), v>/dx   ``autograd.grad(create_graph=True)``)
hvp                          2      H d of phi (forward-over-reverse / reverse-over-reverse)
d<k> reverse                 k      D^k phi[d1..d(k-1)], a gradient-shaped vector (grad of grad)
d<k> forward                 k      D^k g[d, .., d], output-shaped (nested jvp on both sides)
===========================  =====  ============================================================

where ``g(x) = tanh(f(x) / s)`` and ``phi(x) = sum(w * g(x))`` with random weights ``w`` and
a fixed scale ``s`` (the output's root mean square, at least 1) that keeps tanh away from
saturation. A nonlinear functional is needed because many ops of interest (pooling, matmul)
are linear: their own second derivatives are zero and would prove nothing.

Every random cotangent, tangent, direction and weight comes from
``numpy.random.default_rng(seed)``, is rounded to the dtype it is used in, and is then given
to both sides, so both differentiate along exactly the same directions.

Errors are measured normwise: ``abs_err = max|jax - torch|`` over every element of every
part of a check, ``rel_err = abs_err / max|torch|``. Elementwise relative errors would blow
up wherever a derivative happens to cancel to nearly zero.

Tolerances. ``float64`` and ``float32`` compare the two sides directly:
``abs_err <= atol + rtol * max|torch|`` with per-dtype defaults (``DEFAULT_TOLERANCES``).
``float16``/``bfloat16`` compare each side against a float64 torch reference (same rounded
inputs, exact arithmetic as far as float64 goes) and allow

    tol = 2 * (order + 1) * u * max|ref| + 3 * torch_err

``u`` is the unit roundoff of the dtype (half an ulp at 1). A correctly rounded result is
off by at most ``u * |value|``, and a check is a chain of ``order + 1`` half-precision maps
(the forward, then one tangent or cotangent map per order), each rounding what goes in and
what comes out: ``2 * (order + 1)`` roundings. Where cancellation makes the error larger
than that (random-sign cotangents do), ``torch_err`` - how far torch's own half-precision
result is from the float64 reference, reported as ``ref_err`` - says what is achievable;
JAX may be up to three times as far, since the worst of a few dozen elements varies that
much between two equally accurate implementations. So a half-precision row passes when JAX
is about as accurate as torch, not when it happens to round the same way. For half inputs the functional (tanh, products, sums) runs in float32 on
every side, so that its own rounding does not hide the op's.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import torch

from .convert import TORCH_DTYPES, numpy_dtype, to_jax, to_numpy, to_torch, x64

__all__ = [
    "Call",
    "Report",
    "Row",
    "ParityError",
    "DEFAULT_TOLERANCES",
    "compare",
    "compare_errors",
    "assert_parity",
]

_HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))

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


class ParityError(AssertionError):
    """Raised by ``assert_parity`` / ``Report.raise_if_failed``; the message is the diff."""


@dataclasses.dataclass
class Row:
    """One check: JAX against torch (or against torch's float64 reference for half dtypes)."""

    name: str
    order: int
    abs_err: float
    rel_err: float
    tol: float
    ok: bool
    note: str = ""
    ref_err: float | None = None  # torch's own error against the float64 reference
    detail: str = ""  # where the worst element is and what each side said

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        for k in ("abs_err", "rel_err", "tol", "ref_err"):
            if isinstance(d[k], float) and not math.isfinite(d[k]):
                d[k] = str(d[k])
        return d


@dataclasses.dataclass
class Report:
    """Outcome of ``compare``: ``ok`` and one ``Row`` per check."""

    rows: list[Row]
    label: str = ""
    dtype: str = ""
    reference: str = "direct"

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    @property
    def failures(self) -> list[Row]:
        return [r for r in self.rows if not r.ok]

    @property
    def first_failing_order(self) -> int | None:
        """Lowest derivative order with a failing row (None if everything passed)."""
        orders = [r.order for r in self.rows if not r.ok]
        return min(orders) if orders else None

    def worst_by_order(self) -> dict[int, float]:
        """Largest relative error per derivative order (error rows excluded)."""
        out: dict[int, float] = {}
        for r in self.rows:
            if r.name.startswith("raises"):
                continue
            out[r.order] = max(out.get(r.order, 0.0), r.rel_err)
        return out

    def __bool__(self) -> bool:  # so that `assert parity.compare(...)` reads naturally
        return self.ok

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "dtype": self.dtype,
            "reference": self.reference,
            "ok": self.ok,
            "rows": [r.to_dict() for r in self.rows],
        }

    def format(self, failures_only: bool = False) -> str:
        """Plain-text table; failing rows are followed by where and by how much."""
        rows = self.failures if failures_only else self.rows
        head = (f"{'check':<26} {'ord':>3} {'max abs err':>11} {'max rel err':>11} "
                f"{'tolerance':>10}  result")
        lines = []
        if self.dtype:
            lines.append(f"{self.label} [{self.dtype}, reference: {self.reference}]".strip())
        elif self.label:
            lines.append(self.label)
        lines.append(head)
        for r in rows:
            res = "ok" if r.ok else "FAIL"
            lines.append(
                f"{r.name:<26} {r.order:>3} {_fmt(r.abs_err):>11} {_fmt(r.rel_err):>11} "
                f"{_fmt(r.tol):>10}  {res}"
                + (f"  ({r.note})" if r.note else "")
            )
            if not r.ok and r.detail:
                lines.extend("      " + d for d in r.detail.splitlines())
        n_fail = len(self.failures)
        lines.append(
            f"{len(self.rows) - n_fail}/{len(self.rows)} checks passed"
            + ("" if not n_fail else f"; first failure at order {self.first_failing_order}")
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def raise_if_failed(self) -> "Report":
        if not self.ok:
            raise ParityError("JAX and torch disagree\n" + self.format(failures_only=True))
        return self


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isnan(x):
        return "n/a"
    return f"{x:.2e}"


class Call:
    """Positional and keyword arguments for one call in ``compare_errors`` / ``bad_inputs``.

    Array arguments (NumPy or JAX arrays) are converted for each side, so both receive the
    same numbers; everything else is passed as is. ``label`` names the case in the report.
    """

    def __init__(self, *args, label: str | None = None, **kwargs):
        self.args = args
        self.kwargs = kwargs
        self.label = label or self._describe()

    def _describe(self) -> str:
        def one(a):
            if isinstance(a, (np.ndarray, jax.Array, torch.Tensor)):
                return f"{np.dtype(to_numpy(a).dtype).name}{list(a.shape)}"
            return repr(a)

        parts = [one(a) for a in self.args] + [f"{k}={one(v)}" for k, v in self.kwargs.items()]
        return ", ".join(parts)

    def __repr__(self) -> str:
        return f"Call({self.label})"


# --------------------------------------------------------------------------- helpers


def _is_float(dtype) -> bool:
    return jnp.issubdtype(np.dtype(dtype), jnp.floating)


def _unit_roundoff(dtype) -> float:
    return float(ml_dtypes.finfo(np.dtype(dtype)).eps) / 2


def _functional_dtype(dtype) -> np.dtype:
    """Dtype of the nonlinear functional: float32 for halves (see the module docstring)."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype in _HALF else dtype


def _short_exc(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:160] if msg else ''}"


class _Failed:
    """A side that raised instead of computing a check."""

    def __init__(self, exc: BaseException):
        self.exc = exc

    def __repr__(self):
        return _short_exc(self.exc)


def _as_parts(x) -> list[np.ndarray]:
    """Flatten a check result (array, tuple, dict of those) to a list of float64 arrays."""
    if isinstance(x, dict):
        return [p for k in sorted(x) for p in _as_parts(x[k])]
    if isinstance(x, (list, tuple)):
        return [p for item in x for p in _as_parts(item)]
    return [to_numpy(x).astype(np.float64)]


class _Diff:
    """Worst absolute error over all parts of a check, and where it is."""

    def __init__(self, got: list[np.ndarray], want: list[np.ndarray], labels: list[str]):
        self.worst, self.scale, self.where, self.errs = 0.0, 0.0, "", []
        for g, w, lab in zip(got, want, labels):
            if g.shape != w.shape:
                self.worst, self.scale = math.inf, 0.0
                self.where = f"{lab}: shape {g.shape} (jax) vs {w.shape} (torch)"
                self.errs = []
                return
            if w.size == 0:
                continue
            finite = np.isfinite(w)
            self.scale = max(self.scale, float(np.max(np.abs(w[finite]), initial=0.0)))
            same = (g == w) | (np.isnan(g) & np.isnan(w))  # equal infinities, both NaN: agree
            with np.errstate(invalid="ignore"):
                err = np.where(same, 0.0, np.abs(g - w))
            err = np.where(np.isnan(err), np.inf, err)
            self.errs.append(err)
            i = int(np.argmax(err))
            e = float(err.flat[i])
            if e > self.worst or (e == self.worst and not self.where and e > 0):
                self.worst = e
                idx = [int(v) for v in np.unravel_index(i, w.shape)] if w.ndim else []
                self.where = (f"worst at {lab}{idx}: jax {g.flat[i]:.10g}, "
                              f"torch {w.flat[i]:.10g} (|diff| {e:.3g})")

    def detail(self, tol: float) -> str:
        if not self.errs:
            return self.where
        n = sum(int(np.sum(e > tol)) for e in self.errs)
        total = sum(e.size for e in self.errs)
        return f"{self.where}; {n} of {total} elements off by more than the tolerance"


# --------------------------------------------------------------------------- torch side


def _torch_grad(outputs, inputs, grad_outputs, create_graph=True):
    """autograd.grad that tolerates outputs without a graph and unused inputs (-> zeros)."""
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o is not None and o.requires_grad]
    if not pairs:
        return [torch.zeros_like(x) for x in inputs]
    res = torch.autograd.grad(
        [o for o, _ in pairs],
        inputs,
        [g for _, g in pairs],
        create_graph=create_graph,
        allow_unused=True,
    )
    return [torch.zeros_like(x) if r is None else r for x, r in zip(inputs, res)]


def _torch_jvp_via_vjp(f, xs, ts):
    """J t through reverse mode (d/du <u^T J, t>), for torch functions lacking forward AD.

    Differentiable itself, so it nests for higher orders; xs must require grad.
    """
    y = f(*xs)
    u = torch.zeros_like(y, requires_grad=True)
    g = _torch_grad([y], xs, [u], create_graph=True)
    (out,) = _torch_grad(g, [u], ts, create_graph=True)
    return out


def _torch_side(torch_fn, inputs, argnums, D, orders, fdtype, scale):
    """All checks on the torch side. Returns {name: result or _Failed} and notes."""
    inputs = list(inputs)
    notes: dict[str, str] = {}

    def f(*dxs):
        full = list(inputs)
        for i, a in zip(argnums, dxs):
            full[i] = a
        return torch_fn(*full)

    def leaves():
        return [inputs[i].detach().clone().requires_grad_(True) for i in argnums]

    out: dict[str, Any] = {}

    def run(name, fn):
        try:
            with torch.enable_grad():
                out[name] = fn()
        except Exception as e:  # noqa: BLE001 - any failure is reported, not raised
            out[name] = _Failed(e)

    def value():
        with torch.no_grad():
            return f(*[inputs[i] for i in argnums]).detach()

    run("value", value)
    if orders < 1:
        return out, notes

    def vjp():
        xs = leaves()
        return [g.detach() for g in _torch_grad([f(*xs)], xs, [D["u"]], create_graph=False)]

    def jvp():
        primals = tuple(inputs[i].detach() for i in argnums)
        try:
            return torch.func.jvp(f, primals, tuple(D["t"]))[1].detach()
        except Exception as e:  # noqa: BLE001 - op without forward AD: reverse-mode route
            notes["jvp"] = (f"torch forward AD unavailable ({type(e).__name__}); "
                            "torch via double backward")
            return _torch_jvp_via_vjp(f, leaves(), D["t"]).detach()

    run("vjp", vjp)
    run("jvp", jvp)
    if orders < 2:
        return out, notes

    def double_backward():
        xs = leaves()
        u = D["u"].detach().clone().requires_grad_(True)
        g = _torch_grad([f(*xs)], xs, [u], create_graph=True)
        res = _torch_grad(g, xs + [u], D["vv"], create_graph=False)
        return {"dx": [r.detach() for r in res[:-1]], "du": res[-1].detach()}

    def g_vec(*xs):
        return torch.tanh(f(*xs).to(fdtype) / scale)

    def phi(*xs):
        return (D["w"] * g_vec(*xs)).sum()

    def contract(gs, ds):
        return sum((a.to(fdtype) * b.to(fdtype)).sum() for a, b in zip(gs, ds))

    def reverse_tower():
        xs = leaves()
        g = _torch_grad([phi(*xs)], xs, [torch.ones((), dtype=fdtype)], create_graph=True)
        tower = {}
        for k in range(2, orders + 1):
            s = contract(g, D["dirs"][k - 2])
            g = _torch_grad([s], xs, [torch.ones((), dtype=fdtype)], create_graph=k < orders)
            tower[k] = [a.detach() for a in g]
        return tower

    def hvp():
        xs = leaves()
        g = _torch_grad([phi(*xs)], xs, [torch.ones((), dtype=fdtype)], create_graph=True)
        s = contract(g, D["dh"])
        return [a.detach() for a in _torch_grad([s], xs, [torch.ones((), dtype=fdtype)], False)]

    def forward(k):
        def nest_func(h):
            return lambda *xs: torch.func.jvp(h, xs, tuple(D["df"]))[1]

        def nest_ad(h):
            return lambda *xs: _torch_jvp_via_vjp(h, list(xs), D["df"])

        h = g_vec
        for _ in range(k):
            h = nest_func(h)
        try:
            return h(*[inputs[i].detach() for i in argnums]).detach()
        except Exception as e:  # noqa: BLE001
            notes[f"d{k} forward"] = (
                f"torch forward AD unavailable ({type(e).__name__}); torch via double backward"
            )
            h = g_vec
            for _ in range(k):
                h = nest_ad(h)
            return h(*leaves()).detach()

    run("double backward", double_backward)
    run("hvp", hvp)
    run("reverse", reverse_tower)
    for k in range(2, orders + 1):
        rev = out["reverse"]
        out[f"d{k} reverse"] = rev if isinstance(rev, _Failed) else rev[k]
        run(f"d{k} forward", lambda k=k: forward(k))
    del out["reverse"]
    return out, notes


def _cast_floats(tensors, dtype):
    return [t.to(dtype) if t.is_floating_point() else t for t in tensors]


def _round_results(r, dtype):
    """Round every tensor in a check result to ``dtype`` (keeps _Failed as is)."""
    if isinstance(r, _Failed):
        return r
    if isinstance(r, dict):
        return {k: _round_results(v, dtype) for k, v in r.items()}
    if isinstance(r, (list, tuple)):
        return [_round_results(v, dtype) for v in r]
    return r.to(dtype)


# --------------------------------------------------------------------------- JAX side


def _jax_programs(jax_fn, n_inputs, argnums, orders, fdtype, scale):
    """name -> program(dxs, others, D); the same checks as ``_torch_side``."""
    others_idx = [i for i in range(n_inputs) if i not in argnums]
    fdtype = jnp.dtype(fdtype)

    def make_f(others):
        def f(*dxs):
            full = [None] * n_inputs
            for i, a in zip(argnums, dxs):
                full[i] = a
            for i, a in zip(others_idx, others):
                full[i] = a
            return jax_fn(*full)

        return f

    def contract(gs, ds):
        return sum(jnp.sum(a.astype(fdtype) * b.astype(fdtype)) for a, b in zip(gs, ds))

    progs: dict[str, Callable] = {}
    progs["value"] = lambda dxs, others, D: make_f(others)(*dxs)
    if orders >= 1:
        progs["vjp"] = lambda dxs, others, D: jax.vjp(make_f(others), *dxs)[1](D["u"])
        progs["jvp"] = lambda dxs, others, D: jax.jvp(make_f(others), tuple(dxs), tuple(D["t"]))[1]
    if orders >= 2:

        def double_backward(dxs, others, D):
            f = make_f(others)
            _, back = jax.vjp(lambda xs, u: jax.vjp(f, *xs)[1](u), tuple(dxs), D["u"])
            dx, du = back(tuple(D["vv"]))
            return {"dx": list(dx), "du": du}

        def g_vec(f):
            return lambda xs: jnp.tanh(f(*xs).astype(fdtype) / scale)

        def phi(f, w):
            return lambda xs: jnp.sum(w * g_vec(f)(xs))

        def hvp(dxs, others, D):
            grad = jax.grad(phi(make_f(others), D["w"]))
            return jax.jvp(grad, (tuple(dxs),), (tuple(D["dh"]),))[1]

        def reverse(k):
            def prog(dxs, others, D):
                h = jax.grad(phi(make_f(others), D["w"]))
                for j in range(k - 1):
                    h = (lambda h, d: jax.grad(lambda xs: contract(h(xs), d)))(h, D["dirs"][j])
                return h(tuple(dxs))

            return prog

        def forward(k):
            def prog(dxs, others, D):
                h = g_vec(make_f(others))
                for _ in range(k):
                    h = (lambda h: lambda xs: jax.jvp(h, (xs,), (tuple(D["df"]),))[1])(h)
                return h(tuple(dxs))

            return prog

        progs["double backward"] = double_backward
        progs["hvp"] = hvp
        for k in range(2, orders + 1):
            progs[f"d{k} reverse"] = reverse(k)
            progs[f"d{k} forward"] = forward(k)
    return progs


def _run_jax(progs, dxs, others, D, jit):
    """Run every program, fused into one compiled program when possible.

    One fused ``jax.jit`` compiles once per call instead of once per check; if anything in
    it fails, each check runs on its own so the failure lands on the right row.
    """
    wrap = jax.jit if jit else (lambda fn: fn)

    def block(tree):
        return jax.tree_util.tree_map(
            lambda a: np.asarray(a) if isinstance(a, jax.Array) else a, tree)

    try:
        fused = wrap(lambda dxs, others, D: {k: p(dxs, others, D) for k, p in progs.items()})
        return block(fused(dxs, others, D))
    except Exception:  # noqa: BLE001 - localise below
        pass
    out = {}
    for name, p in progs.items():
        try:
            out[name] = block(wrap(p)(dxs, others, D))
        except _TRACING_ERRORS:
            # Python control flow on values cannot be compiled; run this check eagerly.
            try:
                out[name] = block(p(dxs, others, D))
            except Exception as e:  # noqa: BLE001
                out[name] = _Failed(e)
        except Exception as e:  # noqa: BLE001
            out[name] = _Failed(e)
    return out


_TRACING_ERRORS = tuple(
    getattr(jax.errors, n) for n in ("ConcretizationTypeError", "TracerBoolConversionError",
                                     "TracerIntegerConversionError", "TracerArrayConversionError")
    if hasattr(jax.errors, n))


# --------------------------------------------------------------------------- compare


_ORDER = {"value": 0, "vjp": 1, "jvp": 1, "double backward d/dcot": 2,
          "double backward d/dinput": 2, "hvp": 2}


def _split(results: dict) -> dict:
    """Report the two halves of the double backward as rows of their own."""
    out = {}
    for name, r in results.items():
        if name == "double backward":
            for key, part in (("du", "d/dcot"), ("dx", "d/dinput")):
                out[f"{name} {part}"] = r if isinstance(r, _Failed) else r[key]
        else:
            out[name] = r
    return out


def _order_of(name: str) -> int:
    if name in _ORDER:
        return _ORDER[name]
    return int(name.split()[0][1:])


def _labels(name, result, n_diff):
    parts = _as_parts(result)
    if name in ("value", "jvp", "double backward d/dcot") or "forward" in name:
        return ["output"] * len(parts)
    if len(parts) == n_diff:
        return [f"input{i}" for i in range(n_diff)]
    return ["output"] * len(parts)


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
) -> Report:
    """Check that ``jax_fn(*inputs)`` and ``torch_fn(*inputs)`` agree, derivatives included.

    Args:
      jax_fn, torch_fn: take the same positional arrays (JAX arrays / torch tensors) and
        return one array.
      inputs: NumPy or JAX arrays; both sides get exactly these numbers.
      orders: highest derivative order checked (0: values only, 1: + VJP/JVP, 2: + double
        backward, Hessian-vector product and second derivatives, k: up to k-th derivatives).
      rtol, atol: override the dtype's tolerance (``abs_err <= atol + rtol * max|torch|``).
      seed: seed of the cotangents, tangents and directions.
      argnums: which inputs to differentiate (default: every floating-point input).
      reference: "auto" (float64 torch reference for float16/bfloat16, direct otherwise),
        "direct" (JAX vs torch in the input dtype) or "float64" (always against float64).
      bad_inputs: input tuples (or ``Call``s) on which both functions must raise.
      jit: compile the JAX side (one fused program per call); False for functions that
        cannot be traced.
      label: name shown in the report.

    Returns:
      A ``Report``; ``report.ok`` is True iff every row passed.
    """
    if not isinstance(orders, int) or isinstance(orders, bool) or orders < 0:
        raise ValueError(f"orders must be an int >= 0, got {orders!r}")
    if reference not in ("auto", "direct", "float64"):
        raise ValueError(f"reference must be 'auto', 'direct' or 'float64', got {reference!r}")
    if not inputs:
        raise ValueError("compare needs at least one input array")
    np_inputs = [to_numpy(x) for x in inputs]
    if argnums is None:
        argnums = [i for i, a in enumerate(np_inputs) if _is_float(a.dtype)]
    elif isinstance(argnums, int):
        argnums = [argnums]
    argnums = sorted(int(i) for i in argnums)
    for i in argnums:
        if not 0 <= i < len(np_inputs) or not _is_float(np_inputs[i].dtype):
            raise ValueError(f"argnums entry {i} is not a floating-point input")
    if not argnums:
        orders = 0  # nothing to differentiate

    # The dtype that sets the tolerance: the least precise differentiated input.
    float_dtypes = ([np_inputs[i].dtype for i in argnums]
                    or [a.dtype for a in np_inputs if _is_float(a.dtype)]
                    or [np.dtype(np.float64)])
    dtype = max(float_dtypes, key=_unit_roundoff)
    use_ref = reference == "float64" or (reference == "auto" and dtype in _HALF)

    with x64():
        checker = _Checker(jax_fn, torch_fn, np_inputs, argnums, orders, seed, dtype, jit)
        rows = checker.run(use_ref, rtol, atol)
        if bad_inputs:
            cases = [c if isinstance(c, Call) else Call(*(c if isinstance(c, tuple) else (c,)))
                     for c in bad_inputs]
            rows += compare_errors(jax_fn, torch_fn, cases).rows
    return Report(rows=rows, label=label, dtype=np.dtype(dtype).name,
                  reference="float64" if use_ref else "direct")


class _Checker:
    """One ``compare`` call: the shared random data, both sides, and the rows."""

    def __init__(self, jax_fn, torch_fn, np_inputs, argnums, orders, seed, dtype, jit):
        self.jax_fn, self.torch_fn = jax_fn, torch_fn
        self.np_inputs, self.argnums, self.orders = np_inputs, argnums, orders
        self.seed, self.dtype, self.jit = seed, np.dtype(dtype), jit
        self.fdtype = _functional_dtype(dtype)
        self.t_inputs = [to_torch(a) for a in np_inputs]

    # -- forward: shape and dtype, decided by torch (the oracle)

    def _torch_forward(self, inputs):
        with torch.no_grad():
            y = self.torch_fn(*inputs)
        if not isinstance(y, torch.Tensor):
            raise TypeError(f"torch_fn must return one tensor, got {type(y).__name__}")
        return y

    def _jax_forward_spec(self):
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in self.np_inputs]
        try:
            return jax.eval_shape(self.jax_fn, *specs)
        except Exception:  # noqa: BLE001 - not traceable abstractly: run it
            y = self.jax_fn(*[to_jax(a) for a in self.np_inputs])
            return jax.ShapeDtypeStruct(y.shape, y.dtype)

    def _forward(self, use_ref):
        """(torch output, emulated?) or a failing value row."""
        emulated = False
        try:
            y_t = self._torch_forward(self.t_inputs)
        except Exception as e:  # noqa: BLE001
            y_t = _Failed(e)
            if use_ref and self.dtype in _HALF:
                # torch lacks this op in half precision (avg_pool3d on the CPU, for one).
                # Stand in with what its half kernels do elsewhere: float32, rounded once.
                try:
                    y32 = self._torch_forward(_cast_floats(self.t_inputs, torch.float32))
                    y_t, emulated = y32.to(TORCH_DTYPES[self.dtype]), True
                except Exception:  # noqa: BLE001 - keep the original failure
                    pass
        try:
            y_spec = self._jax_forward_spec()
        except Exception as e:  # noqa: BLE001
            y_spec = _Failed(e)
        if isinstance(y_t, _Failed) or isinstance(y_spec, _Failed):
            both = isinstance(y_t, _Failed) and isinstance(y_spec, _Failed)
            if both:
                note = f"both raised; jax: {y_spec!r} | torch: {y_t!r}"
            elif isinstance(y_spec, _Failed):
                note = f"only jax raised: {y_spec!r}"
            else:
                note = f"only torch raised: {y_t!r}"
            return None, Row("value", 0, math.nan, math.nan, math.nan, both, note)
        mismatch = []
        if tuple(y_spec.shape) != tuple(y_t.shape):
            mismatch.append(f"shape {tuple(y_spec.shape)} (jax) vs {tuple(y_t.shape)} (torch)")
        if np.dtype(y_spec.dtype) != numpy_dtype(y_t.dtype):
            mismatch.append(f"dtype {np.dtype(y_spec.dtype).name} (jax) vs "
                            f"{numpy_dtype(y_t.dtype).name} (torch)")
        if mismatch:
            return None, Row("value", 0, math.inf, math.inf, 0.0, False, "; ".join(mismatch))
        return (y_t, emulated), None

    # -- the shared random data

    def _draw(self, y_t):
        """Cotangents, tangents, directions and weights: drawn in float64 and rounded once
        to the dtype they are used in.

        The generator is salted so that the directions never coincide with inputs a caller
        drew from default_rng(seed) (for a layer norm, u = x would make every VJP vanish).
        """
        rng = np.random.default_rng([self.seed, 0x9A817])

        def draw(shape, dt):
            return rng.standard_normal(shape).astype(dt)

        like_inputs = [(self.np_inputs[i].shape, self.np_inputs[i].dtype) for i in self.argnums]
        y_shape, y_dtype = tuple(y_t.shape), numpy_dtype(y_t.dtype)
        self.data = {
            "u": draw(y_shape, y_dtype),
            "t": [draw(s, d) for s, d in like_inputs],
            "vv": [draw(s, d) for s, d in like_inputs],
            "w": draw(y_shape, self.fdtype),
            "dh": [draw(s, d) for s, d in like_inputs],
            "df": [draw(s, d) for s, d in like_inputs],
            "dirs": [[draw(s, d) for s, d in like_inputs] for _ in range(max(self.orders - 1, 0))],
        }
        y = to_numpy(y_t).astype(np.float64)
        finite = y.size and np.all(np.isfinite(y))
        self.scale = max(1.0, float(np.sqrt(np.mean(y**2)))) if finite else 1.0

    def _data_as(self, convert, cast=None):
        def conv(a):
            return convert(a if cast is None else a.astype(cast))

        out = {}
        for k, v in self.data.items():
            if k == "dirs":
                out[k] = [[conv(a) for a in d] for d in v]
            else:
                out[k] = [conv(a) for a in v] if isinstance(v, list) else conv(v)
        return out

    # -- the sides

    def _torch(self, inputs, cast, fdtype):
        return _torch_side(self.torch_fn, inputs, self.argnums, self._data_as(to_torch, cast),
                           self.orders, fdtype, self.scale)

    def _torch_emulated(self):
        """torch in float32, every result rounded to the half dtype."""
        half = TORCH_DTYPES[self.dtype]
        side, notes = self._torch(_cast_floats(self.t_inputs, torch.float32), np.float32,
                                  torch.float32)
        return {k: _round_results(v, half) for k, v in side.items()}, notes

    def _jax(self):
        dxs = [to_jax(self.np_inputs[i]) for i in self.argnums]
        others = [to_jax(a) for i, a in enumerate(self.np_inputs) if i not in self.argnums]
        progs = _jax_programs(self.jax_fn, len(self.np_inputs), self.argnums, self.orders,
                              self.fdtype, self.scale)
        return progs, _run_jax(progs, dxs, others, self._data_as(to_jax), self.jit)

    # -- rows

    def run(self, use_ref, rtol, atol):
        fwd, failed_row = self._forward(use_ref)
        if failed_row is not None:
            return [failed_row]
        y_t, emulated = fwd
        self._draw(y_t)
        name = self.dtype.name
        emulation_note = f"torch has no {name} kernel here: float32, rounded to {name}"
        if emulated:
            t_side, t_notes = self._torch_emulated()
            t_notes = {k: emulation_note for k in t_side}
        else:
            t_side, t_notes = self._torch(self.t_inputs, None, TORCH_DTYPES[self.fdtype])
        r_side = {}
        if use_ref:
            r_inputs = _cast_floats(self.t_inputs, torch.float64)
            r_side, _ = self._torch(r_inputs, np.float64, torch.float64)
            lacking = [k for k, v in t_side.items()
                       if isinstance(v, _Failed) and not isinstance(r_side.get(k), _Failed)]
            if lacking:  # a derivative without a half kernel: emulate that check alone
                e_side, _ = self._torch_emulated()
                for k in lacking:
                    t_side[k], t_notes[k] = e_side[k], emulation_note
        progs, j_side = self._jax()
        j_side, t_side, r_side = _split(j_side), _split(t_side), _split(r_side)
        for k in list(t_notes):
            if k == "double backward":
                t_notes[f"{k} d/dcot"] = t_notes[f"{k} d/dinput"] = t_notes[k]

        names = []
        for name in progs:  # the documented order, not the order the fused program returns
            names += ([f"{name} d/dcot", f"{name} d/dinput"] if name == "double backward"
                      else [name])
        return [self._row(name, j_side[name], t_side[name], r_side.get(name) if use_ref else None,
                          t_notes.get(name, ""), rtol, atol) for name in names]

    def _row(self, name, jr, tr, ref, note, rtol, atol):
        order = _order_of(name)
        use_ref = ref is not None
        want = ref if use_ref else tr
        failed = [(s, r) for s, r in (("jax", jr), ("torch", tr), ("torch float64", ref))
                  if isinstance(r, _Failed)]
        if failed:
            both = isinstance(jr, _Failed) and isinstance(tr, _Failed)
            msg = "; ".join(f"{s} raised {r!r}" for s, r in failed)
            return Row(name, order, math.nan, math.nan, math.nan, both,
                       (note + "; " if note else "") + msg)
        got_p, want_p = _as_parts(jr), _as_parts(want)
        if len(got_p) != len(want_p):
            return Row(name, order, math.inf, math.inf, 0.0, False, "different number of results")
        labels = _labels(name, want, len(self.argnums))
        diff = _Diff(got_p, want_p, labels)
        err, scale = diff.worst, diff.scale
        ref_err = _Diff(_as_parts(tr), want_p, labels).worst if use_ref else None
        if rtol is not None or atol is not None:
            tol = (atol or 0.0) + (rtol or 0.0) * scale
        elif use_ref:
            # Two roundings per half-precision map; about as accurate as torch itself.
            u = _unit_roundoff(self.dtype)
            tol = HALF_ROUNDINGS * (order + 1) * u * scale + TORCH_ERR_FACTOR * ref_err
        else:
            rtol0, atol0 = DEFAULT_TOLERANCES.get(self.dtype,
                                                  DEFAULT_TOLERANCES[np.dtype(np.float32)])
            tol = atol0 + rtol0 * scale
        rel = err / scale if scale > 0 else (0.0 if err == 0 else math.inf)
        ok = bool(err <= tol)
        return Row(name, order, err, rel, tol, ok, note, ref_err,
                   "" if ok else diff.detail(tol))


def compare_errors(jax_fn: Callable, torch_fn: Callable, cases: Sequence[Call]) -> Report:
    """Check that both functions raise on every case (exception types and messages may differ).

    ``cases`` are ``Call(*args, **kwargs)``; array arguments are converted for each side.
    A case where only one side raises, or neither does, is a failure.
    """
    rows = []
    for case in cases:
        if not isinstance(case, Call):
            raise TypeError(f"cases must be parity.Call objects, got {type(case).__name__}")
        outcome = {}
        for side, fn, conv in (("jax", jax_fn, to_jax), ("torch", torch_fn, to_torch)):
            args = [conv(a) if isinstance(a, (np.ndarray, jax.Array)) else a for a in case.args]
            kwargs = {k: conv(v) if isinstance(v, (np.ndarray, jax.Array)) else v
                      for k, v in case.kwargs.items()}
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
            note = f"only {'jax' if j is not None else 'torch'} raised: {_short_exc(j or t)}"
        detail = "" if ok else (f"jax: {_short_exc(j) if j else 'returned'}\n"
                                f"torch: {_short_exc(t) if t else 'returned'}")
        rows.append(Row(f"raises {case.label}", 0, math.nan, math.nan, math.nan, ok, note,
                        None, detail))
    return Report(rows=rows, label="errors")


def assert_parity(jax_fn: Callable, torch_fn: Callable, *inputs, **kwargs) -> Report:
    """``compare(...)`` that raises ``ParityError`` (an AssertionError) with a readable diff."""
    return compare(jax_fn, torch_fn, *inputs, **kwargs).raise_if_failed()
