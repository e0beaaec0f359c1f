"""The checks ``compare`` runs: one table, each check defined once.

===========================  =====  ============================================================
check                        order  what is compared (JAX side / torch side)
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

Both programs of a check see the function under test as ``f(xs) -> ys``: ``xs`` the list of
differentiated input leaves, ``ys`` the list of floating-point output leaves (integer
outputs such as indices are compared by ``value`` only). ``g(xs) = [tanh(y * (1 / s_y))]`` and
``phi(xs) = sum(w_y * g_y)`` with random weights ``w`` and per-output scales ``s`` (the
output's root mean square, at least 1) that keep tanh away from saturation: a nonlinear
functional is needed because many ops of interest (pooling, matmul) are linear, and their own
second derivatives are zero and would prove nothing. (A product, not a quotient: nested
``torch.func.jvp`` divides by a number through a Python decomposition, 2x slower.) The
random directions (``u``, ``t``, ``vv``, ``dh``, ``df``, ``dirs``, ``w``) are the same numbers
on both sides.

A check's result is one array per output leaf (``like="output"``) or per differentiated
input leaf (``like="input"``); that is how its rows are labelled.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import torch

from . import programs

__all__ = ["CHECK_PROGRAM_OPTIONS", "Check", "Failed", "JaxSide", "Joint", "TorchSide",
           "check_program_options", "checks", "joints", "run_jax", "run_torch"]


class Failed:
    """A side that raised instead of computing a check."""

    def __init__(self, exc: BaseException):
        self.text = short_exc(exc)

    def __repr__(self):
        return self.text


def short_exc(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:160] if msg else ''}"


# --------------------------------------------------------------------------- the two sides


@dataclasses.dataclass
class JaxSide:
    """What a JAX program sees, inside ``jax.jit``."""

    f: Callable[[list], list]
    f_all: Callable[[list], list]  # every output leaf, integers included
    xs: list
    data: dict
    fdtype: np.dtype
    scales: list[float]

    def g(self, xs):
        return [jnp.tanh(y.astype(self.fdtype) * (1 / s)) for y, s in zip(self.f(xs), self.scales)]

    def phi(self, xs):
        return sum(jnp.sum(w * g) for w, g in zip(self.data["w"], self.g(xs)))

    def contract(self, a, b):
        return sum(jnp.sum(x.astype(self.fdtype) * y.astype(self.fdtype)) for x, y in zip(a, b))

    def vjp(self, f, xs, u):
        return jax.vjp(f, xs)[1](u)[0]

    def jvp(self, f, xs, t):
        return jax.jvp(f, (xs,), (t,))[1]


@dataclasses.dataclass
class TorchSide:
    """What a torch program sees. ``forward_ad=False`` computes every JVP through reverse
    mode (d/du <u^T J, t>), for functions without forward-mode rules."""

    f: Callable[[list], list]
    f_all: Callable[[list], list]
    primals: list
    data: dict
    fdtype: torch.dtype
    scales: list[float]
    forward_ad: bool = True
    used_jvp: bool = False

    def leaves(self) -> list:
        return [x.detach().clone().requires_grad_(True) for x in self.primals]

    def g(self, xs):
        return [torch.tanh(y.to(self.fdtype) * (1 / s)) for y, s in zip(self.f(xs), self.scales)]

    def phi(self, xs):
        return sum((w * g).sum() for w, g in zip(self.data["w"], self.g(xs)))

    def contract(self, a, b):
        return sum((x.to(self.fdtype) * y.to(self.fdtype)).sum() for x, y in zip(a, b))

    def grad(self, ys, xs, us=None, create_graph=True) -> list:
        """autograd.grad that tolerates outputs without a graph and unused inputs (zeros);
        ``us`` defaults to ones for scalar outputs."""
        if us is None:
            us = [torch.ones((), dtype=self.fdtype)] * len(ys)
        pairs = [(y, u) for y, u in zip(ys, us) if y is not None and y.requires_grad]
        if not pairs:
            return [torch.zeros_like(x) for x in xs]
        res = torch.autograd.grad([y for y, _ in pairs], xs, [u for _, u in pairs],
                                  create_graph=create_graph, allow_unused=True)
        return [torch.zeros_like(x) if r is None else r for x, r in zip(xs, res)]

    def vjp(self, f, xs, us, create_graph=True):
        return self.grad(f(xs), xs, us, create_graph)

    def jvp(self, f, xs, ts):
        """J t; ``xs`` must require grad (they do when they come from ``leaves``)."""
        self.used_jvp = True
        if self.forward_ad:
            return list(torch.func.jvp(lambda *a: tuple(f(list(a))), tuple(xs), tuple(ts))[1])
        ys = f(xs)
        us = [torch.zeros_like(y, requires_grad=True) for y in ys]
        return self.grad(self.vjp(lambda _: ys, xs, us), us, ts)


def _requiring_grad(arrays):
    return [a.detach().clone().requires_grad_(True) for a in arrays]


# --------------------------------------------------------------------------- the checks


@dataclasses.dataclass(frozen=True)
class Check:
    """One row kind: ``jax(JaxSide)`` and ``torch(TorchSide)`` return one array per leaf."""

    name: str
    order: int
    like: str  # "output" or "input": which leaves the result has
    jax: Callable[[JaxSide], list]
    torch: Callable[[TorchSide], list]


def _jax_double_backward(s: JaxSide, wrt: str):
    if wrt == "cotangent":
        return s.vjp(lambda u: s.vjp(s.f, s.xs, u), s.data["u"], s.data["vv"])
    return s.vjp(lambda xs: s.vjp(s.f, xs, s.data["u"]), s.xs, s.data["vv"])


def _torch_double_backward(s: TorchSide, wrt: str):
    xs, us = s.leaves(), _requiring_grad(s.data["u"])
    g = s.vjp(s.f, xs, us)
    return s.grad(g, us if wrt == "cotangent" else xs, s.data["vv"], create_graph=False)


def _jax_reverse(k: int):
    """D^k phi contracted with k - 1 directions: grad of <grad .., d> nested k - 1 times."""

    def prog(s: JaxSide):
        h = jax.grad(s.phi)
        for d in s.data["dirs"][: k - 1]:
            h = (lambda h, d: jax.grad(lambda xs: s.contract(h(xs), d)))(h, d)
        return h(s.xs)

    return prog


def _torch_reverse(k: int):
    def prog(s: TorchSide):
        xs = s.leaves()
        g = s.grad([s.phi(xs)], xs, create_graph=k > 1)
        for j, d in enumerate(s.data["dirs"][: k - 1]):
            g = s.grad([s.contract(g, d)], xs, create_graph=j < k - 2)
        return g

    return prog


def _forward(k: int):
    """D^k g[df, .., df]: nested JVPs, written once for both sides."""

    def prog(s):
        h = s.g
        for _ in range(k):
            h = (lambda h: lambda xs: s.jvp(h, xs, s.data["df"]))(h)
        return h(s.xs if isinstance(s, JaxSide) else s.leaves())

    return prog


def _torch_hvp(s: TorchSide):
    # torch's reverse-over-reverse against JAX's forward-over-reverse.
    xs = s.leaves()
    g = s.grad([s.phi(xs)], xs)
    return s.grad([s.contract(g, s.data["dh"])], xs, create_graph=False)


def _torch_value(s: TorchSide):
    with torch.no_grad():
        return s.f_all(s.primals)


def checks(orders: int) -> list[Check]:
    """The checks up to derivative order ``orders``, in the order of the report."""
    table = [Check("value", 0, "output", lambda s: s.f_all(s.xs), _torch_value)]
    if orders >= 1:
        table += [
            Check("vjp", 1, "input", lambda s: s.vjp(s.f, s.xs, s.data["u"]),
                  lambda s: s.vjp(s.f, s.leaves(), s.data["u"], create_graph=False)),
            Check("jvp", 1, "output", lambda s: s.jvp(s.f, s.xs, s.data["t"]),
                  lambda s: s.jvp(s.f, s.leaves(), s.data["t"])),
        ]
    if orders >= 2:
        table += [
            Check("double backward d/dcot", 2, "output",
                  lambda s: _jax_double_backward(s, "cotangent"),
                  lambda s: _torch_double_backward(s, "cotangent")),
            Check("double backward d/dinput", 2, "input",
                  lambda s: _jax_double_backward(s, "input"),
                  lambda s: _torch_double_backward(s, "input")),
            Check("hvp", 2, "input", lambda s: s.jvp(jax.grad(s.phi), s.xs, s.data["dh"]),
                  _torch_hvp),
        ]
        for k in range(2, orders + 1):
            table += [Check(f"d{k} reverse", k, "input", _jax_reverse(k), _torch_reverse(k)),
                      Check(f"d{k} forward", k, "output", _forward(k), _forward(k))]
    return table


# --------------------------------------------------------------------------- shared programs

@dataclasses.dataclass(frozen=True)
class Joint:
    """Checks whose JAX results one program computes together: a derivative's program
    computes the lower one on its way (the primal of a ``vjp`` or ``jvp``, or a ``grad``'s
    auxiliary output), so the fused program traces and compiles it once. ``jax(JaxSide)``
    returns one result per name, each as its check's own program returns it."""

    names: tuple[str, ...]
    jax: Callable[[JaxSide], tuple[list, ...]]


def _jax_vjp_and_double_backward(s: JaxSide):
    # u -> vjp(f, xs, u) and xs -> vjp(f, xs, u) in one pullback; its primal is the vjp.
    vjp, pullback = jax.vjp(lambda u, xs: s.vjp(s.f, xs, u), s.data["u"], s.xs)
    d_cot, d_input = pullback(s.data["vv"])
    return vjp, d_cot, d_input


def _jax_reverse_top_two(k: int):
    """D^(k-1) phi and D^k phi: the gradient of <D^(k-1) phi, d>, which it keeps as aux."""

    def prog(s: JaxSide):
        lower = _jax_reverse(k - 1)
        d = s.data["dirs"][k - 2]

        def contracted(xs):
            h = lower(dataclasses.replace(s, xs=xs))
            return s.contract(h, d), h

        top, below = jax.grad(contracted, has_aux=True)(s.xs)
        return below, top

    return prog


def _jax_forward_top_two(k: int):
    """D^(k-1) g and D^k g: the primal and tangent of one more nested JVP."""

    def prog(s: JaxSide):
        lower = _forward(k - 1)
        return jax.jvp(lambda xs: lower(dataclasses.replace(s, xs=xs)), (s.xs,),
                       (s.data["df"],))

    return prog


def joints(orders: int) -> list[Joint]:
    """The shared programs among ``checks(orders)``; each check is in at most one."""
    out = []
    if orders >= 2:
        out.append(Joint(("vjp", "double backward d/dcot", "double backward d/dinput"),
                         _jax_vjp_and_double_backward))
    if orders >= 3:
        out += [Joint((f"d{orders - 1} reverse", f"d{orders} reverse"),
                      _jax_reverse_top_two(orders)),
                Joint((f"d{orders - 1} forward", f"d{orders} forward"),
                      _jax_forward_top_two(orders))]
    return out


# --------------------------------------------------------------------------- running them

CHECK_PROGRAM_OPTIONS = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
"""XLA options for programs that run once, on small arrays: the suite's checks. They cost
their compile time alone, and most of it went to making fast machine code: LLVM's
optimisation of it (about 40%), then, of what was left, XLA:CPU's MLIR fusion emitters
(about 45%; its older elemental emitter compiles the same fusions in half the time). XLA's
own passes are the same (the program jaxpool emits, fused the same way). Against XLA's
defaults, over every case of the suite, integers and max pooling's picks are the same bits
and every other result is within 16 ulps of its scale (arithmetic whose machine code is
laid out differently), where the tolerances allow about 4500 ulps of scale in float64 and
170 in float32: ``tests/test_parity_programs.py`` checks it. An option that the installed
jaxlib does not know is left out (``check_program_options``)."""


def check_program_options() -> dict:
    """``CHECK_PROGRAM_OPTIONS`` less those that the installed jaxlib does not know (an
    older one lacks ``xla_cpu_use_fusion_emitters``)."""
    return {name: value for name, value in CHECK_PROGRAM_OPTIONS.items()
            if _known_option(name, value)}


@functools.lru_cache(maxsize=None)
def _known_option(name: str, value) -> bool:
    # XLA rejects an option it does not know when compiling, whatever the program.
    try:
        jax.jit(lambda x: x + 1).lower(np.float32(0)).compile({name: value})
    except Exception:  # noqa: BLE001 - jaxlib raises its own error type
        return False
    return True


_TRACING_ERRORS = tuple(
    getattr(jax.errors, n) for n in ("ConcretizationTypeError", "TracerBoolConversionError",
                                     "TracerIntegerConversionError", "TracerArrayConversionError")
    if hasattr(jax.errors, n))

NO_FORWARD_AD = "torch forward AD unavailable ({}); torch via double backward"


def run_torch(table: list[Check], side: TorchSide) -> tuple[dict, dict]:
    """{check name: list of tensors or Failed}, {check name: note}.

    A check that fails while torch's forward mode is in use is run again through reverse
    mode: torch ops (and autograd.Functions) without forward-mode rules are common.
    """
    out: dict[str, list | Failed] = {}
    notes: dict[str, str] = {}
    for c in table:
        side.used_jvp, side.forward_ad = False, True
        try:
            with torch.enable_grad():
                out[c.name] = [r.detach() for r in c.torch(side)]
            continue
        except Exception as e:  # noqa: BLE001 - any failure is reported, not raised
            out[c.name] = Failed(e)
            if not side.used_jvp:
                continue
            notes[c.name] = NO_FORWARD_AD.format(type(e).__name__)
        side.forward_ad = False
        try:
            with torch.enable_grad():
                out[c.name] = [r.detach() for r in c.torch(side)]
        except Exception as e:  # noqa: BLE001
            out[c.name] = Failed(e)
    return out, notes


def run_jax(table: list[Check], make_side: Callable, args: tuple, jit: bool,
            name: str | None = None, compiler_options: dict | None = None) -> dict:
    """{check name: list of NumPy arrays or Failed}; ``make_side(*args)`` builds the JaxSide.

    Every check is fused into one compiled program when possible (one compilation per call
    instead of one per check); if anything in it fails, each check runs on its own so the
    failure lands on the right row. ``name`` names the fused program for the store of
    ``parity.programs`` (when one is open): with the table's checks and the arguments'
    shapes and dtypes it must determine the program. ``compiler_options``: XLA's, for
    every program compiled here.
    """
    options = dict(compiler_options or {})

    def compiled(fn):
        return lambda *a: jax.jit(fn).lower(*a).compile(options or None)(*a)

    wrap = compiled if jit else (lambda fn: fn)

    def block(results):
        return [np.asarray(r) for r in results]

    def program(c):
        return lambda *a: c.jax(make_side(*a))

    names = [c.name for c in table]
    shared = [j for j in joints(max(c.order for c in table)) if set(j.names) <= set(names)]
    alone = [c for c in table if not any(c.name in j.names for j in shared)]

    def fused_checks(*a):
        out = {c.name: program(c)(*a) for c in alone}
        for j in shared:
            out.update(zip(j.names, j.jax(make_side(*a))))
        return {n: list(out[n]) for n in names}

    store = programs.active_store()
    if jit and name is not None and store is not None:
        try:
            fused = store.jit(fused_checks, f"{name}|{names}", *args,
                              compiler_options=options)
            return {k: block(v) for k, v in fused(*args).items()}
        except Exception:  # noqa: BLE001 - not exportable: trace it as usual
            pass
    try:
        fused = wrap(fused_checks)
        return {k: block(v) for k, v in fused(*args).items()}
    except Exception:  # noqa: BLE001 - localise below
        pass
    out = {}
    for c in table:
        try:
            out[c.name] = block(wrap(program(c))(*args))
        except _TRACING_ERRORS:
            # Python control flow on values cannot be compiled; run this check eagerly.
            try:
                out[c.name] = block(program(c)(*args))
            except Exception as e:  # noqa: BLE001
                out[c.name] = Failed(e)
        except Exception as e:  # noqa: BLE001
            out[c.name] = Failed(e)
    return out
