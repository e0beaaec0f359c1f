"""unfold and fold (im2col, col2im) against torch: each strategy chosen where it is meant
(``blocks``: windows that do not overlap, a reshape and a transpose; ``phases``: overlapping
windows, one pass per pair of tap groups), values bit for bit in float64 and float32 (unfold
copies; fold adds in torch's order), derivatives of both modes to the third order,
transforms, non-finite values and signed zeros, half precision, errors, torch's own samples,
no scatter or gather in any derivative (under the GPU table too), programs that do not grow
with the taps, and VOLO's outlook attention."""

import collections
import math
import re
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxpool
from default_share import default_share, each_once, option_values
from jaxpool import strategy_table
from jaxpool.patches.plan import STRATEGIES, plan_fold, plan_unfold
from jaxpool.patches.functions import fold, unfold
from opinfo_catalog import catalog, drawn_samples
from test_derivatives import _derivative_programs, _lowered_ops

pytestmark = pytest.mark.usefixtures("x64")


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _bits(a) -> np.ndarray:
    """An array's bytes, so that ``-0`` differs from ``+0`` (NaNs compare by payload too)."""
    a = np.asarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def assert_same_bits(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    np.testing.assert_array_equal(_bits(actual), _bits(expected))


def _torch_unfold(x, **kwargs):
    return F.unfold(torch.from_numpy(np.ascontiguousarray(x)), **kwargs).numpy()


def _torch_fold(c, output_size, **kwargs):
    return F.fold(torch.from_numpy(np.ascontiguousarray(c)), output_size, **kwargs).numpy()


# --- every small extent: one (extent, kernel, dilation, padding, stride) per axis ----------

AXIS_OPTIONS = [(n, k, d, p, s) for n in range(1, 6) for k in (1, 2, 3) for d in (1, 2)
                for p in (0, 1, 2) for s in (1, 2, 3)
                if (n + 2 * p - d * (k - 1) - 1) // s + 1 >= 1]
# Each height option paired with a width option a prime step away, so every option runs on
# both axes and the pairs differ.
SWEEP = [(AXIS_OPTIONS[i], AXIS_OPTIONS[(7 * i + 3) % len(AXIS_OPTIONS)])
         for i in range(len(AXIS_OPTIONS))]
SWEEP_EVERY = 40


def _sweep_kwargs(rows, cols):
    return dict(kernel_size=(rows[1], cols[1]), dilation=(rows[2], cols[2]),
                padding=(rows[3], cols[3]), stride=(rows[4], cols[4]))


def test_the_default_sweep_holds_every_option_on_both_axes():
    taken = SWEEP[::SWEEP_EVERY]
    names = ("extent", "kernel", "dilation", "padding", "stride")
    for axis in (0, 1):
        every = option_values((("axis", dict(zip(names, case[axis]))) for case in SWEEP))
        held = option_values((("axis", dict(zip(names, case[axis]))) for case in taken))
        assert held == every


def test_the_default_sweep_takes_every_strategy():
    chosen = {plan_unfold((2, 3, rows[0], cols[0]), np.dtype(np.float64),
                          **_sweep_kwargs(rows, cols)).strategy
              for rows, cols in SWEEP[::SWEEP_EVERY]}
    assert chosen == set(STRATEGIES)


@pytest.mark.parametrize("rows,cols", default_share(SWEEP, SWEEP_EVERY))
def test_every_small_extent_matches_torch_bit_for_bit(rows, cols):
    """Values of both ops and their VJPs (unfold's is a fold, added in torch's order) in
    float64, batched and unbatched; the JVPs are the ops themselves; float32 values and
    VJPs too, where a changed order of additions would show."""
    kwargs = _sweep_kwargs(rows, cols)
    rng = _rng(rows, cols)
    x = rng.standard_normal((2, 3, rows[0], cols[0]))
    _float32_matches_torch(x, (rows[0], cols[0]), kwargs, rng)
    expected = _torch_unfold(x, **kwargs)
    assert_same_bits(unfold(x, **kwargs), expected)
    assert_same_bits(unfold(x[1], **kwargs), _torch_unfold(x[1], **kwargs))
    c = rng.standard_normal(expected.shape)
    size = (rows[0], cols[0])
    assert_same_bits(fold(c, size, **kwargs), _torch_fold(c, size, **kwargs))
    assert_same_bits(fold(c[0], size, **kwargs), _torch_fold(c[0], size, **kwargs))

    xt = torch.from_numpy(x).requires_grad_(True)
    F.unfold(xt, **kwargs).backward(torch.from_numpy(c))
    ct = torch.from_numpy(c).requires_grad_(True)
    F.fold(ct, size, **kwargs).backward(torch.from_numpy(x))

    @jax.jit
    def derivatives(x, c):
        unfold_vjp = jax.vjp(lambda a: unfold(a, **kwargs), x)[1](c)[0]
        fold_vjp = jax.vjp(lambda a: fold(a, size, **kwargs), c)[1](x)[0]
        unfold_jvp = jax.jvp(lambda a: unfold(a, **kwargs), (x,), (x[::-1],))[1]
        fold_jvp = jax.jvp(lambda a: fold(a, size, **kwargs), (c,), (c[::-1],))[1]
        return unfold_vjp, fold_vjp, unfold_jvp, fold_jvp

    unfold_vjp, fold_vjp, unfold_jvp, fold_jvp = derivatives(x, c)
    assert_same_bits(unfold_vjp, xt.grad.numpy())
    assert_same_bits(fold_vjp, ct.grad.numpy())
    assert_same_bits(unfold_jvp, _torch_unfold(x[::-1], **kwargs))
    assert_same_bits(fold_jvp, _torch_fold(c[::-1], size, **kwargs))


def _float32_matches_torch(x, size, kwargs, rng):
    """unfold, fold and both VJPs in float32, bit for bit torch's."""
    x = x.astype(np.float32)
    expected = _torch_unfold(x, **kwargs)
    c = rng.standard_normal(expected.shape).astype(np.float32)
    assert_same_bits(unfold(x, **kwargs), expected)
    assert_same_bits(fold(c, size, **kwargs), _torch_fold(c, size, **kwargs))
    xt = torch.from_numpy(x).requires_grad_(True)
    F.unfold(xt, **kwargs).backward(torch.from_numpy(c))
    ct = torch.from_numpy(c).requires_grad_(True)
    F.fold(ct, size, **kwargs).backward(torch.from_numpy(x))
    assert_same_bits(jax.vjp(lambda a: unfold(a, **kwargs), x)[1](jnp.asarray(c))[0],
                     xt.grad.numpy())
    assert_same_bits(jax.vjp(lambda a: fold(a, size, **kwargs), c)[1](jnp.asarray(x))[0],
                     ct.grad.numpy())


# --- the strategies -----------------------------------------------------------------------

# name -> (image shape, kwargs, strategy, tap groups per axis). The cells' own arguments
# (benchmarks/cells/patches.py) on small images, and the edges of each strategy.
STRATEGY_CASES = {
    "patchify 16": ((2, 3, 32, 48), dict(kernel_size=16, stride=16), "blocks", (1, 1)),
    "tnt 4/4": ((2, 3, 12, 8), dict(kernel_size=4, stride=4), "blocks", (1, 1)),
    # padded before, cropped after (height) or padded after (width)
    "blocks padded and cropped": ((2, 2, 11, 9), dict(kernel_size=(4, 3), stride=(4, 3),
                                                      padding=2), "blocks", (1, 1)),
    "blocks with gaps": ((2, 2, 6, 5), dict(kernel_size=2, stride=3, padding=1), "blocks",
                         (1, 1)),
    "dilated blocks": ((1, 2, 11, 7), dict(kernel_size=2, dilation=(2, 3), stride=(5, 4)),
                       "blocks", (1, 1)),
    "t2t 7/4/2": ((1, 2, 22, 19), dict(kernel_size=7, stride=4, padding=2), "phases", (2, 2)),
    "volo 3/2/1": ((2, 3, 9, 8), dict(kernel_size=3, stride=2, padding=1), "phases", (2, 2)),
    "stride 1": ((2, 3, 5, 6), dict(kernel_size=3, padding=1), "phases", (3, 3)),
    "dilated phases": ((1, 2, 9, 8), dict(kernel_size=3, dilation=2, stride=3, padding=1),
                       "phases", (2, 2)),
    "blocks by phases": ((2, 2, 8, 7), dict(kernel_size=(4, 3), stride=(4, 1)), "phases",
                         (1, 3)),
}


def test_the_default_shares_take_every_strategy():
    for cases, taken in ((STRATEGY_CASES, STRATEGY_DEFAULT),
                         (DERIVATIVE_CASES, list(DERIVATIVE_CASES)[::2])):
        chosen = {plan_unfold(cases[name][0], np.dtype(np.float64), **cases[name][1]).strategy
                  for name in taken}
        assert chosen == set(STRATEGIES), taken
    # each op's default cases take both strategies
    for which in ("unfold", "fold"):
        chosen = {plan_unfold(DERIVATIVE_CASES[name][0], np.dtype(np.float64),
                              **DERIVATIVE_CASES[name][1]).strategy
                  for name, op in DERIVATIVE_DEFAULT if op == which}
        assert chosen == set(STRATEGIES), which


@pytest.mark.parametrize("name", list(STRATEGY_CASES))
def test_each_strategy_is_chosen_where_it_is_meant(name):
    shape, kwargs, strategy, groups = STRATEGY_CASES[name]
    plan = plan_unfold(shape, np.dtype(np.float32), **kwargs)
    assert plan.strategy == strategy
    assert tuple(len(axis.groups) for axis in plan.phases) == groups
    assert plan_fold(plan.columns_shape, np.dtype(np.float32), shape[-2:], **kwargs) == plan
    for axis, k, d, s in zip(plan.phases, plan.kernel, plan.dilation, plan.stride):
        # at most ceil(((k - 1)*d + 1) / s) passes, never more than the taps
        assert len(axis.groups) <= min(k, -(-((k - 1) * d + 1) // s))
        assert sum(g.count for g in axis.groups) == k


# Two cases by default: each strategy, padded, cropped, dilated.
STRATEGY_DEFAULT = ("blocks padded and cropped", "dilated phases")


@pytest.mark.parametrize("name", [
    name if name in STRATEGY_DEFAULT else pytest.param(name, marks=pytest.mark.slow)
    for name in STRATEGY_CASES])
def test_each_strategy_matches_torch_bit_for_bit(name):
    """float64 and float32, batched and unbatched: unfold's copies, fold's sums in torch's
    order (in float32 a changed order would show), and both VJPs."""
    shape, kwargs, _, _ = STRATEGY_CASES[name]
    rng = _rng(name, "bits")
    x = rng.standard_normal(shape)
    _float32_matches_torch(x, shape[-2:], kwargs, rng)
    _float32_matches_torch(x[0], shape[-2:], kwargs, rng)
    expected = _torch_unfold(x, **kwargs)
    assert_same_bits(unfold(x, **kwargs), expected)
    c = rng.standard_normal(expected.shape)
    assert_same_bits(fold(c, shape[-2:], **kwargs), _torch_fold(c, shape[-2:], **kwargs))


# --- derivatives ------------------------------------------------------------------------

DERIVATIVE_CASES = {  # name -> (image shape, kwargs)
    "overlapping": ((2, 3, 5, 6), dict(kernel_size=3, padding=1)),
    "strided dilated": ((1, 2, 7, 6), dict(kernel_size=(2, 3), dilation=(2, 1), padding=(1, 0),
                                           stride=(2, 3))),
    "gaps": ((2, 2, 6, 5), dict(kernel_size=2, stride=3, padding=1)),
    "unbatched": ((3, 4, 5), dict(kernel_size=(3, 2), stride=(1, 2))),
    **{name: STRATEGY_CASES[name][:2] for name in ("patchify 16", "blocks padded and cropped",
                                                   "t2t 7/4/2", "volo 3/2/1")},
}


def _ops(shape, kwargs):
    """(unfold of the image, fold of its columns, columns shape)."""
    columns = plan_unfold(shape, np.dtype(np.float64), **kwargs).columns_shape
    return (lambda a: unfold(a, **kwargs),
            lambda c: fold(c, shape[-2:], **kwargs), columns)


def _third_order_torch(op, a, w, v, u):
    """torch's derivatives of L = sum(w * tanh(op)^2): the gradient, the derivative of
    <grad L, v> and that of <its result, u> (double and triple backward)."""
    at = torch.from_numpy(a).requires_grad_(True)
    loss = (torch.from_numpy(w) * torch.tanh(op(at)) ** 2).sum()
    (grad,) = torch.autograd.grad(loss, at, create_graph=True)
    (second,) = torch.autograd.grad((grad * torch.from_numpy(v)).sum(), at, create_graph=True)
    (third,) = torch.autograd.grad((second * torch.from_numpy(u)).sum(), at)
    return grad.detach().numpy(), second.detach().numpy(), third.numpy()


def _derivative_case(name, which):
    """(op, its torch twin, input shape, output shape) of unfold or fold on a case."""
    shape, kwargs = DERIVATIVE_CASES[name]
    unfold_op, fold_op, columns = _ops(shape, kwargs)
    if which == "unfold":
        return unfold_op, lambda t: F.unfold(t, **kwargs), shape, columns
    return fold_op, lambda t: F.fold(t, shape[-2:], **kwargs), columns, shape


# Every other case by default (overlapping, gaps, patchify, T2T), each with one op in turn:
# each op on both strategies.
DERIVATIVE_DEFAULT = [(name, ("unfold", "fold")[i % 2])
                      for i, name in enumerate(list(DERIVATIVE_CASES)[::2])]
DERIVATIVE_PAIRS = [pytest.param(name, which, marks=() if (name, which) in DERIVATIVE_DEFAULT
                                 else (pytest.mark.slow,))
                    for which in ("unfold", "fold") for name in DERIVATIVE_CASES]


@pytest.mark.parametrize("name,which", DERIVATIVE_PAIRS)
def test_derivatives_match_torch_to_third_order(name, which):
    op, torch_op, in_shape, out_shape = _derivative_case(name, which)
    rng = _rng(name, which)
    a, v, u = (rng.standard_normal(in_shape) for _ in range(3))
    w = rng.standard_normal(out_shape)
    loss = lambda p: jnp.sum(w * jnp.tanh(op(p)) ** 2)  # noqa: E731
    grad, second, third = _third_order_torch(torch_op, a, w, v, u)

    @jax.jit
    def derivatives(a, v, u):
        along_v = lambda p: jnp.sum(jax.grad(loss)(p) * v)  # noqa: E731
        reverse_over_reverse = jax.grad(along_v)(a)
        forward_over_reverse = jax.jvp(jax.grad(loss), (a,), (v,))[1]
        third_reverse = jax.grad(lambda p: jnp.sum(jax.grad(along_v)(p) * u))(a)
        third_forward = jax.jvp(jax.grad(along_v), (a,), (u,))[1]
        # the JVP is the transpose of the VJP: reverse mode applied twice
        tangent = jax.jvp(op, (a,), (v,))[1]
        vjp = jax.vjp(op, a)[1]
        vjp_of_vjp = jax.vjp(lambda c: vjp(c)[0], jnp.zeros(out_shape))[1](v)[0]
        return (jax.grad(loss)(a), reverse_over_reverse, forward_over_reverse, third_reverse,
                third_forward, tangent, vjp_of_vjp)

    first, rr, fr, rrr, frr, tangent, vjp_of_vjp = derivatives(a, v, u)
    np.testing.assert_allclose(first, grad, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rr, second, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fr, second, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rrr, third, rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(frr, third, rtol=1e-10, atol=1e-11)
    assert_same_bits(tangent, vjp_of_vjp)


def _programs(name, which):
    """The derivative programs the scatter check lowers, and their input."""
    shape, kwargs = DERIVATIVE_CASES[name]
    op, _, in_shape, _ = _derivative_case(name, which)
    rng = _rng(name, which, "lowered")
    a = jnp.asarray(rng.standard_normal(in_shape))
    w = jnp.asarray(rng.standard_normal(jax.eval_shape(op, a).shape))
    programs = _derivative_programs(op, a, w)
    if len(shape) == 3:
        del programs["per-example grad"]  # an unbatched input has no examples to map over
    return programs, a


# The default run: the third-order test's pairs (each op on both strategies), unfold under
# the GPU's table and fold under the CPU's (the plans read no table: the GPU's programs are
# the CPU's); every pair under both under -m slow.
@pytest.mark.parametrize("name,which,backend", [
    pytest.param(name, which, backend,
                 marks=() if (name, which) in DERIVATIVE_DEFAULT
                 and (backend == "gpu") == (which == "unfold") else (pytest.mark.slow,))
    for name in DERIVATIVE_CASES for which in ("unfold", "fold")
    for backend in ("cpu", "gpu")])
def test_no_scatter_or_gather_at_any_order(name, which, backend):
    with strategy_table.use_backend(backend):
        programs, a = _programs(name, which)
        for program, fn in programs.items():
            ops = _lowered_ops(jax.jit(fn).lower(a))
            banned = {o for o in ops if "scatter" in o or o == "gather"}
            assert not banned, f"{which} {name}: {program} lowers to {banned}"


# What the derivatives hold besides the two ops: unfold and fold are each other's
# transpose, so the pads, slices and joins of every order are theirs, none JAX's.
STRUCTURAL = {"pad", "slice", "concatenate", "gather", "scatter", "scatter-add",
              "dynamic_slice", "dynamic_update_slice", "select_n"}


def _primitives(jaxpr, found=None) -> set[str]:
    found = set() if found is None else found
    for eqn in jaxpr.eqns:
        found.add(eqn.primitive.name)
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", value)
            if hasattr(inner, "eqns"):
                _primitives(inner, found)
    return found


@pytest.mark.parametrize("name", default_share(list(DERIVATIVE_CASES), 3))
def test_every_derivative_is_unfold_or_fold(name):
    for which in ("unfold", "fold"):
        programs, a = _programs(name, which)
        for program in ("vjp", "jvp", "grad", "grad2", "grad3", "hvp", "per-example grad"):
            if program in programs:
                found = _primitives(jax.make_jaxpr(programs[program])(a).jaxpr)
                assert {"jaxpool_unfold", "jaxpool_fold"} & found, (which, program)
                assert not STRUCTURAL & found, (which, program, STRUCTURAL & found)


def _op_counts(fn, shape) -> collections.Counter:
    text = jax.jit(fn).lower(jax.ShapeDtypeStruct(shape, jnp.float64)).as_text()
    return collections.Counter(re.findall(r"\bstablehlo\.([a-z_]+)", text))


def _third_derivative(op):
    grad = jax.grad(lambda a: jnp.sum(jnp.tanh(op(a)) ** 2))
    second = jax.grad(lambda a: jnp.sum(grad(a) ** 2))
    return jax.grad(lambda a: jnp.sum(second(a) ** 2))


@pytest.mark.parametrize("small,large,shape", [
    # blocks: a 2 x 2 cut and a ViT patchify, tiling the image: no pad or slice at all
    (dict(kernel_size=2, stride=2), dict(kernel_size=16, stride=16), (2, 3, 64, 64)),
    # padded and cropped: one pad per op
    (dict(kernel_size=2, stride=2, padding=1), dict(kernel_size=16, stride=16, padding=3),
     (2, 3, 62, 63)),
    # phases: 2 x 2 groups of 4 taps and of 49 (T2T's 7/4/2)
    (dict(kernel_size=2, stride=1, padding=1), dict(kernel_size=7, stride=4, padding=2),
     (1, 2, 56, 56)),
])
def test_programs_do_not_grow_with_the_taps(small, large, shape):
    """The third derivative's program, op by op, is the same for 4 taps as for 49 or 256:
    one pass per pair of tap groups, never one per tap."""
    counts = [_op_counts(_third_derivative(lambda a, kw=kw: unfold(a, **kw)), shape)
              for kw in (small, large)]
    assert counts[0] == counts[1]
    if "padding" not in small:
        assert counts[0]["pad"] == counts[0]["slice"] == 0
    assert counts[0]["pad"] <= 8 * 4  # 8 ops (4 unfolds and 4 folds), 2 x 2 groups each


# --- transforms -------------------------------------------------------------------------

# patchify (blocks) and VOLO (phases) by default
@pytest.mark.parametrize("name", default_share(
    ["patchify 16", "overlapping", "t2t 7/4/2", "blocks padded and cropped", "volo 3/2/1",
     "strided dilated"], 4))
def test_jit_and_vmap_give_the_same_bits(name):
    """float32, where a changed order of additions would show: the plain call's bits under
    jit, vmap, grad, jvp, vjp and linearize, and a derivative's bits those of the op (the
    JVP) or of its transpose (the VJP) called plainly."""
    shape, kwargs = DERIVATIVE_CASES[name]
    unfold_op, fold_op, columns = _ops(shape, kwargs)
    rng = _rng(name, "transforms")
    x = rng.standard_normal(shape).astype(np.float32)
    c = rng.standard_normal(columns).astype(np.float32)
    for op, a in ((unfold_op, x), (fold_op, c)):
        eager = np.asarray(op(a))
        assert_same_bits(jax.jit(op)(a), eager)
        assert_same_bits(jax.vmap(op)(a[:, None])[:, 0], eager)
        assert_same_bits(jax.vmap(op)(a), np.stack([np.asarray(op(e)) for e in a]))
        # a linear loss: its cotangent is w itself (XLA:CPU contracts a product computed
        # in the same fused loop as the sums into fused multiply-adds)
        w = rng.standard_normal(eager.shape).astype(np.float32)
        loss = lambda p, w: jnp.sum(w * op(p))  # noqa: E731
        grad = np.asarray(jax.grad(loss)(a, w))
        assert_same_bits(jax.jit(jax.grad(loss))(a, w), grad)
        assert_same_bits(jax.vmap(jax.grad(loss))(a[:, None], w[:, None])[:, 0], grad)
        assert_same_bits(jax.jvp(op, (a,), (a,))[0], eager)
        assert_same_bits(jax.vjp(op, a)[0], eager)
        t = rng.standard_normal(a.shape).astype(np.float32)
        assert_same_bits(jax.jvp(op, (a,), (t,))[1], op(t))
        value, linear = jax.linearize(op, a)
        assert_same_bits(value, eager)
        assert_same_bits(linear(t), op(t))
        assert_same_bits(jax.jit(linear)(t), op(t))
        transposed = unfold_op if op is fold_op else fold_op
        assert_same_bits(jax.vjp(op, a)[1](w)[0], transposed(w))
        assert_same_bits(jax.jit(lambda a, w: jax.vjp(op, a)[1](w)[0])(a, w), transposed(w))


# --- non-finite values, signed zeros, half precision -----------------------------------

# Every other case by default: dilated, strided and padded overlapping windows, and padded
# blocks.
NONFINITE_CASES = [dict(kernel_size=(3, 1), dilation=2, padding=(2, 0)),
                   dict(kernel_size=3, padding=1),
                   dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, stride=1),
                   dict(kernel_size=(4, 3), stride=(4, 3), padding=(2, 1)),
                   dict(kernel_size=2, stride=2)]


def _with_nonfinite(rng, shape):
    a = rng.standard_normal(shape)
    flat = a.reshape(-1)
    spots = rng.choice(flat.size, size=max(3, flat.size // 6), replace=False)
    flat[spots] = rng.choice([np.inf, -np.inf, np.nan, -0.0], size=spots.size)
    return a


@pytest.mark.parametrize("kwargs", default_share(NONFINITE_CASES, 2), ids=str)
def test_nonfinite_values_and_zero_signs_land_where_torchs_do(kwargs):
    rng = _rng("nonfinite", kwargs)
    x = _with_nonfinite(rng, (2, 2, 5, 6))
    cols = _torch_unfold(x, **kwargs)
    assert_same_bits(unfold(x, **kwargs), cols)
    c = _with_nonfinite(rng, cols.shape)
    assert_same_bits(fold(c, (5, 6), **kwargs), _torch_fold(c, (5, 6), **kwargs))
    xt = torch.from_numpy(x).requires_grad_(True)
    F.unfold(xt, **kwargs).backward(torch.from_numpy(c))
    assert_same_bits(jax.vjp(lambda a: unfold(a, **kwargs), x)[1](jnp.asarray(c))[0],
                     xt.grad.numpy())
    ct = torch.from_numpy(c).requires_grad_(True)
    F.fold(ct, (5, 6), **kwargs).backward(torch.from_numpy(x))
    assert_same_bits(jax.vjp(lambda a: fold(a, (5, 6), **kwargs), c)[1](jnp.asarray(x))[0],
                     ct.grad.numpy())
    # the tangents: torch.func.jvp of these linear ops is the op of the tangent
    assert_same_bits(jax.jvp(lambda a: unfold(a, **kwargs), (np.zeros_like(x),), (x,))[1],
                     cols)
    assert_same_bits(jax.jvp(lambda a: fold(a, (5, 6), **kwargs), (np.zeros_like(c),), (c,))[1],
                     _torch_fold(c, (5, 6), **kwargs))


@pytest.mark.parametrize("kernel_size", [1, 2, 3])
@pytest.mark.parametrize("strided", [False, True], ids=["stride 1", "blocks"])
def test_fold_of_negative_zeros_is_positive_zero_as_torchs(kernel_size, strided):
    """torch adds every column onto zeros: 0 + -0 is +0, also where a pixel takes one
    column only (a 1x1 kernel, windows that do not overlap)."""
    stride = kernel_size if strided else 1
    shape = plan_unfold((1, 2, 4, 4), np.dtype(np.float64), kernel_size, stride=stride)
    c = -np.zeros(shape.columns_shape)
    out = fold(c, (4, 4), kernel_size, stride=stride)
    assert_same_bits(out, _torch_fold(c, (4, 4), kernel_size=kernel_size, stride=stride))
    assert not np.signbit(np.asarray(out)).any()


# each dtype with one of the cases by default, in turn; every pair under -m slow
@pytest.mark.parametrize("dtype,case", each_once(
    ["float16", "bfloat16"], [(dict(kernel_size=3, padding=1, stride=2), (9, 8)),
                              (dict(kernel_size=(2, 4), dilation=(1, 2)), (6, 9))]))
def test_half_precision_rounds_as_torch(dtype, case):
    """torch's CPU col2im adds in the input's dtype, rounding after every addition; so does
    fold (and unfold's gradient, a fold)."""
    torch_dtype = getattr(torch, dtype)
    rng = _rng("half", dtype)
    kwargs, size = case
    x = torch.from_numpy(rng.standard_normal((2, 3) + size) * 30).to(torch_dtype)
    cols = F.unfold(x, **kwargs)
    c = torch.from_numpy(rng.standard_normal(cols.shape) * 30).to(torch_dtype)
    as_jax = lambda t: jnp.asarray(t.float().numpy()).astype(dtype)  # noqa: E731
    as_f32 = lambda a: np.asarray(jnp.asarray(a).astype(jnp.float32))  # noqa: E731
    xg = x.clone().requires_grad_(True)
    F.unfold(xg, **kwargs).backward(c)
    assert_same_bits(as_f32(unfold(as_jax(x), **kwargs)), cols.float().numpy())
    assert_same_bits(as_f32(fold(as_jax(c), size, **kwargs)),
                     F.fold(c, size, **kwargs).float().numpy())
    grad = jax.vjp(lambda a: unfold(a, **kwargs), as_jax(x))[1](as_jax(c))[0]
    assert grad.dtype == jnp.dtype(dtype)
    assert_same_bits(as_f32(grad), xg.grad.float().numpy())


# --- errors -----------------------------------------------------------------------------

X = np.zeros((2, 3, 5, 5), np.float32)
C = np.zeros((2, 12, 16), np.float32)  # unfold(X, 2)

# (id, call, error type, words the message must contain, torch's call, which must fail too)
BAD = [
    ("rank 2", lambda: unfold(X[0, 0], 2), ValueError, ["(5, 5)", "rank 3"],
     lambda: F.unfold(torch.zeros(5, 5), 2)),
    ("rank 5", lambda: unfold(X[None], 2), ValueError, ["(1, 2, 3, 5, 5)"],
     lambda: F.unfold(torch.zeros(1, 2, 3, 5, 5), 2)),
    ("empty channels", lambda: unfold(X[:, :0], 2), ValueError, ["(2, 0, 5, 5)", "non-zero"],
     lambda: F.unfold(torch.zeros(2, 0, 5, 5), 2)),
    ("unbatched empty channels", lambda: unfold(X[0, :0], 2), ValueError, ["(0, 5, 5)"],
     lambda: F.unfold(torch.zeros(0, 5, 5), 2)),
    ("kernel 0", lambda: unfold(X, 0), ValueError, ["kernel_size", "0"],
     lambda: F.unfold(torch.zeros(2, 3, 5, 5), 0)),
    ("kernel 1-tuple", lambda: unfold(X, (2,)), ValueError, ["kernel_size", "(2,)", "2 entries"],
     lambda: F.unfold(torch.zeros(2, 3, 5, 5), (2,))),
    ("kernel 3-tuple", lambda: unfold(X, (2, 2, 2)), ValueError, ["kernel_size", "(2, 2, 2)"],
     lambda: F.unfold(torch.zeros(2, 3, 5, 5), (2, 2, 2))),
    ("kernel float", lambda: unfold(X, 2.0), TypeError, ["kernel_size", "2.0"],
     lambda: F.unfold(torch.zeros(2, 3, 5, 5), 2.0)),
    ("kernel bool", lambda: unfold(X, True), TypeError, ["kernel_size", "True"],
     lambda: F.unfold(torch.zeros(2, 3, 5, 5), True)),
    ("dilation 0", lambda: unfold(X, 2, dilation=(1, 0)), ValueError, ["dilation", "(1, 0)"],
     lambda: F.unfold(torch.zeros(2, 3, 5, 5), 2, dilation=(1, 0))),
    ("padding -1", lambda: unfold(X, 2, padding=-1), ValueError, ["padding", "-1"],
     lambda: F.unfold(torch.zeros(2, 3, 5, 5), 2, padding=-1)),
    ("stride 0", lambda: unfold(X, 2, stride=0), ValueError, ["stride", "0"],
     lambda: F.unfold(torch.zeros(2, 3, 5, 5), 2, stride=0)),
    ("kernel beyond the input", lambda: unfold(X, 6), ValueError,
     ["kernel_size=(6, 6)", "(5, 5)", "(0, 0)"], lambda: F.unfold(torch.zeros(2, 3, 5, 5), 6)),
    ("dilated kernel beyond the input", lambda: unfold(X, 3, dilation=(1, 3)), ValueError,
     ["dilation=(1, 3)"], lambda: F.unfold(torch.zeros(2, 3, 5, 5), 3, dilation=(1, 3))),
    ("integer input", lambda: unfold(X.astype(np.int64), 2), TypeError, ["int64"],
     lambda: F.unfold(torch.zeros(2, 3, 5, 5, dtype=torch.long), 2)),
    ("torch tensor", lambda: unfold(torch.zeros(2, 3, 5, 5), 2), TypeError, ["torch tensor"], None),
    ("fold rank 1", lambda: fold(C[0, 0], 5, 2), ValueError, ["(16,)", "rank 2"],
     lambda: F.fold(torch.zeros(16), 5, 2)),
    ("fold rank 4", lambda: fold(C[None], 5, 2), ValueError, ["(1, 2, 12, 16)"],
     lambda: F.fold(torch.zeros(1, 2, 12, 16), 5, 2)),
    ("fold empty L", lambda: fold(C[..., :0], 1, 2), ValueError, ["(2, 12, 0)"],
     lambda: F.fold(torch.zeros(2, 12, 0), 1, 2)),
    ("fold channels not divisible", lambda: fold(C[:, :10], 5, 2), ValueError,
     ["divisible", "10", "(2, 2)"], lambda: F.fold(torch.zeros(2, 10, 16), 5, 2)),
    ("fold L mismatch", lambda: fold(C, 6, 2), ValueError, ["output_size=6", "5 * 5", "L=16"],
     lambda: F.fold(torch.zeros(2, 12, 16), 6, 2)),
    ("fold output_size 0", lambda: fold(C[..., :1], (0, 1), 1), ValueError,
     ["output_size", "(0, 1)"], lambda: F.fold(torch.zeros(2, 12, 1), (0, 1), 1)),
    ("fold output_size -1", lambda: fold(C, (-1, 5), 2), ValueError, ["output_size", "-1"],
     lambda: F.fold(torch.zeros(2, 12, 16), (-1, 5), 2)),
    ("fold output_size 1-tuple", lambda: fold(C, (5,), 2), ValueError, ["output_size", "(5,)"],
     lambda: F.fold(torch.zeros(2, 12, 16), (5,), 2)),
    ("fold output_size float", lambda: fold(C, 5.0, 2), TypeError, ["output_size", "5.0"],
     lambda: F.fold(torch.zeros(2, 12, 16), 5.0, 2)),
    ("fold no blocks", lambda: fold(C[..., :1], 1, 2), ValueError, ["output_size=1", "0 * 0"],
     lambda: F.fold(torch.zeros(2, 12, 1), 1, 2)),
    ("fold stride 0", lambda: fold(C, 5, 2, stride=0), ValueError, ["stride", "0"],
     lambda: F.fold(torch.zeros(2, 12, 16), 5, 2, stride=0)),
    ("fold integer input", lambda: fold(C.astype(np.int32), 5, 2), TypeError, ["int32"],
     lambda: F.fold(torch.zeros(2, 12, 16, dtype=torch.int32), 5, 2)),
]


@pytest.mark.parametrize("call,error,words,torch_call", [case[1:] for case in BAD],
                         ids=[case[0] for case in BAD])
def test_bad_arguments_raise_before_any_work_as_torch_refuses(call, error, words, torch_call):
    with pytest.raises(error) as raised:
        call()
    for word in words:
        assert word in str(raised.value), (word, str(raised.value))
    if torch_call is not None:
        with pytest.raises((RuntimeError, ValueError, TypeError, IndexError, NotImplementedError)):
            torch_call()


def test_sizes_take_every_integer_form_torch_does():
    x = _rng("forms").standard_normal((1, 2, 6, 5))
    expected = _torch_unfold(x, kernel_size=2, stride=(1, 2))
    for kernel in (2, np.int64(2), [2, 2], (2, np.int32(2)), torch.Size([2, 2]), jnp.asarray(2)):
        assert_same_bits(unfold(x, kernel, stride=[1, 2]), expected)


def test_empty_batch_gives_an_empty_result_as_torchs():
    x = np.zeros((0, 2, 4, 4))
    assert unfold(x, 2).shape == F.unfold(torch.zeros(0, 2, 4, 4), 2).shape
    c = np.zeros((0, 8, 9))
    assert fold(c, 4, 2).shape == F.fold(torch.zeros(0, 8, 9), 4, 2).shape


def test_traced_sizes_are_refused():
    with pytest.raises(TypeError, match="kernel_size must be static"):
        jax.jit(lambda a, k: unfold(a, k))(X, 2)


# --- torch's own samples ----------------------------------------------------------------

# The catalog has an entry for unfold only (no error inputs); each sample's columns are also
# folded back, so fold runs on the same arguments. Every SPREAD-th sample by default: six,
# with every kernel size, dilation, padding, stride and input shape that every 11th has.
OPINFO = catalog(lambda info: info.name, ["unfold"])  # not Tensor.unfold, also named unfold
SAMPLE_COUNT = 163
SPREAD = 31


@pytest.fixture(scope="module")
def unfold_samples():
    return drawn_samples(OPINFO["nn.functional.unfold"], torch.float64)


def test_the_catalog_holds_the_samples_counted(unfold_samples):
    assert len(unfold_samples) == SAMPLE_COUNT


@pytest.mark.parametrize("index", default_share(list(range(SAMPLE_COUNT)), SPREAD))
def test_torchs_samples_match_bit_for_bit(index, unfold_samples):
    sample = unfold_samples[index]
    x = sample.input.detach().numpy()
    names = ("kernel_size", "dilation", "padding", "stride")
    kwargs = {**dict(zip(names, sample.args)), **sample.kwargs}
    expected = F.unfold(sample.input, **kwargs).numpy()
    assert_same_bits(unfold(x, **kwargs), expected)
    c = _rng("sample", index).standard_normal(expected.shape)
    size = x.shape[-2:]
    assert_same_bits(fold(c, size, **kwargs), _torch_fold(c, size, **kwargs))


# --- a real use: VOLO's outlook attention -----------------------------------------------

def _outlook_attention(unfold_op, fold_op, pool, softmax, x, wv, wa, wp, heads, kernel, stride):
    """timm's ``OutlookAttention.forward`` on ``[B, H, W, C]`` with bias-free linears: values
    unfolded (padding kernel // 2), attention from the pooled map, weighted values folded
    back and projected. ``x`` and the weights are torch or JAX arrays alike."""
    b, h, w, c = x.shape
    padding = kernel // 2
    bh, bw = math.ceil(h / stride), math.ceil(w / stride)
    v = unfold_op(_permute(x @ wv, (0, 3, 1, 2)), kernel, 1, padding, stride)
    v = v.reshape(b, heads, c // heads, kernel * kernel, bh * bw)
    v = _permute(v, (0, 1, 4, 3, 2))
    pooled = _permute(pool(_permute(x, (0, 3, 1, 2)), stride), (0, 2, 3, 1))
    attn = (pooled @ wa).reshape(b, bh * bw, heads, kernel * kernel, kernel * kernel)
    attn = softmax(_permute(attn, (0, 2, 1, 3, 4)) * (c // heads) ** -0.5)
    out = _permute(attn @ v, (0, 1, 4, 3, 2)).reshape(b, c * kernel * kernel, bh * bw)
    out = fold_op(out, (h, w), kernel, 1, padding, stride)
    return _permute(out, (0, 2, 3, 1)) @ wp


def _permute(a, axes):
    return a.permute(*axes) if isinstance(a, torch.Tensor) else a.transpose(axes)


def test_volo_outlook_attention_matches_torch():
    rng = _rng("volo")
    heads, kernel, stride, c = 2, 3, 2, 8
    x = rng.standard_normal((2, 7, 6, c))
    wv, wp = rng.standard_normal((c, c)) / 3, rng.standard_normal((c, c)) / 3
    wa = rng.standard_normal((c, heads * kernel ** 4)) / 3
    pool_torch = lambda t, s: F.avg_pool2d(t, s, s, ceil_mode=True)  # noqa: E731
    pool_jax = lambda a, s: jaxpool.avg_pool2d(a, s, s, ceil_mode=True)  # noqa: E731
    tensors = [torch.from_numpy(a).requires_grad_(True) for a in (x, wv, wa, wp)]
    expected = _outlook_attention(F.unfold, F.fold, pool_torch, lambda t: t.softmax(-1),
                                  tensors[0], *tensors[1:], heads, kernel, stride)
    cotangent = rng.standard_normal(expected.shape)
    expected.backward(torch.from_numpy(cotangent))

    def attention(*arrays):
        return _outlook_attention(unfold, fold, pool_jax, lambda a: jax.nn.softmax(a, -1),
                                  *arrays, heads, kernel, stride)

    actual, vjp = jax.vjp(jax.jit(attention), x, wv, wa, wp)
    np.testing.assert_allclose(actual, expected.detach().numpy(), rtol=1e-12, atol=1e-13)
    for grad, tensor in zip(vjp(jnp.asarray(cotangent)), tensors):
        np.testing.assert_allclose(grad, tensor.grad.numpy(), rtol=1e-11, atol=1e-12)
