"""grid_sample and affine_grid against torch (CPU, float64 where tolerance matters): values,
derivatives of the first and second order, NaN and inf, half precision, argument errors,
and no scatter in any derivative's lowered program."""

import itertools
import re
import warnings
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from default_share import default_share, each_once
from jaxpool import strategy_table
from jaxpool.core.gather import read, sort_order, sorted_sum
from jaxpool.grid_sampling.functions import affine_grid, grid_sample

pytestmark = pytest.mark.usefixtures("x64")

MODES = ("bilinear", "nearest", "bicubic")
PADDINGS = ("zeros", "border", "reflection")
COMBOS = [(dims, mode, padding, align)
          for dims, mode, padding, align in itertools.product((2, 3), MODES, PADDINGS,
                                                              (False, True))
          if not (dims == 3 and mode == "bicubic")]


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _case(dims, key, extent=5, spread=3.0):
    """Input [2, 3, *S] (S each 1..extent), grid [2, *O, dims] in [-spread, spread] with a
    third of its coordinates moved onto pixels and borders, and a cotangent."""
    rng = _rng(dims, key)
    sizes = tuple(int(s) for s in rng.integers(1, extent + 1, dims))
    points = tuple(int(s) for s in rng.integers(1, 5, dims))
    x = rng.standard_normal((2, 3) + sizes)
    g = rng.uniform(-spread, spread, (2,) + points + (dims,))
    # Pixel centres and borders in pixel units: i, -0.5, n - 0.5, for either convention.
    flat = g.reshape(-1, dims)
    for k in range(0, flat.shape[0], 3):
        for d in range(dims):
            n = sizes[dims - 1 - d]
            pixel = rng.choice([0, n - 1, -0.5, n - 0.5, rng.integers(0, n)])
            flat[k, d] = (2 * pixel + 1) / n - 1 if rng.random() < 0.5 else \
                (2 * pixel / (n - 1) - 1 if n > 1 else 0.0)
    ct = rng.standard_normal((2, 3) + points)
    return x, g, ct


def _torch_derivatives(x, g, ct, mode, padding, align, second=None):
    xt = torch.tensor(x, requires_grad=True)
    gt = torch.tensor(g, requires_grad=True)
    y = F.grid_sample(xt, gt, mode=mode, padding_mode=padding, align_corners=align)
    gx, gg = torch.autograd.grad(y, (xt, gt), torch.tensor(ct),
                                 create_graph=second is not None)
    out = [y.detach().numpy(), gx.detach().numpy(), gg.detach().numpy()]
    if second is not None:
        vx, vg = (torch.tensor(v) for v in second)
        h = torch.autograd.grad((gx * vx).sum() + (gg * vg).sum(), (xt, gt),
                                allow_unused=True)
        out += [np.zeros_like(a) if b is None else b.numpy() for a, b in zip((x, g), h)]
    return out


def _jax_derivatives(x, g, ct, mode, padding, align, second=None):
    def f(x, g):
        return grid_sample(x, g, mode, padding, align)

    y, back = jax.vjp(f, jnp.asarray(x), jnp.asarray(g))
    out = [y, *back(jnp.asarray(ct))]
    if second is not None:
        def s(x, g):
            gx, gg = jax.vjp(f, x, g)[1](jnp.asarray(ct))
            return jnp.sum(gx * second[0]) + jnp.sum(gg * second[1])
        out += list(jax.jit(jax.grad(s, (0, 1)))(jnp.asarray(x), jnp.asarray(g)))
    return [np.asarray(o) for o in out]


def _assert_matches(got, want, names, exact=False):
    for a, b, name in zip(got, want, names):
        if exact:
            np.testing.assert_array_equal(a, b, err_msg=name)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, equal_nan=True,
                                       err_msg=name)


# --- the sorted gather ----------------------------------------------------------------------

def _ops(fn, *args):
    return set(re.findall(r"\b(?:stablehlo|chlo|mhlo)\.([a-z_]+)",
                          jax.jit(fn).lower(*args).as_text()))


@pytest.mark.slow
def test_read_derivatives_match_take_and_hold_no_scatter():
    rng = _rng("read")
    v = jnp.asarray(rng.standard_normal((7, 3)))
    idx = jnp.asarray(rng.integers(0, 7, 20), jnp.int32)
    w = jnp.asarray(rng.standard_normal((20, 3)))

    def loss(take):
        return lambda v: jnp.sum(w * jnp.sin(take(v)) ** 2)

    ours, ref = loss(lambda v: read(v, idx)), loss(lambda v: jnp.take(v, idx, axis=0))
    for order in (lambda f: jax.grad(f),
                  lambda f: jax.grad(lambda v: jnp.sum(jnp.cos(jax.grad(f)(v)))),
                  lambda f: jax.jacfwd(jax.grad(f))):
        np.testing.assert_allclose(order(ours)(v), order(ref)(v), rtol=1e-12, atol=1e-14)
        assert not {op for op in _ops(order(ours), v) if "scatter" in op}
    assert any("scatter" in op for op in _ops(jax.grad(ref), v))  # the check can fail
    batched = jnp.asarray(rng.standard_normal((4, 7, 3)))
    indices = jnp.asarray(rng.integers(0, 7, (4, 20)), jnp.int32)
    per_example = jax.vmap(lambda v, i: jax.grad(
        lambda v: jnp.sum(w * jnp.sin(read(v, i)) ** 2))(v))
    expected = jax.vmap(lambda v, i: jax.grad(
        lambda v: jnp.sum(w * jnp.sin(jnp.take(v, i, axis=0)) ** 2))(v))
    np.testing.assert_allclose(per_example(batched, indices), expected(batched, indices),
                               rtol=1e-12, atol=1e-14)


def test_sorted_sum_adds_rows_into_their_positions():
    order = sort_order(jnp.array([3, 3, 0, 3], jnp.int32), 5)
    rows = jnp.arange(8.0).reshape(4, 2)
    np.testing.assert_array_equal(sorted_sum(rows, order, 5),
                                  [[4, 5], [0, 0], [0, 0], [0 + 2 + 6, 1 + 3 + 7], [0, 0]])


# --- values and derivatives against torch ---------------------------------------------------

SWEEP = [(combo, key) for combo in COMBOS for key in range(3)]


@pytest.mark.parametrize("combo,key", default_share(SWEEP, 23))
def test_values_and_vjp_match_torch(combo, key):
    dims, mode, padding, align = combo
    x, g, ct = _case(dims, key)
    got = _jax_derivatives(x, g, ct, mode, padding, align)
    want = _torch_derivatives(x, g, ct, mode, padding, align)
    if mode == "nearest":
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[2], want[2])
    _assert_matches(got, want, ("values", "input gradient", "grid gradient"))


SECOND = [(combo, key) for combo in COMBOS for key in range(2)]


@pytest.mark.parametrize("combo,key", default_share(SECOND, 17))
def test_second_order_matches_torch_double_backward(combo, key):
    dims, mode, padding, align = combo
    x, g, ct = _case(dims, ("second", key))
    rng = _rng("second", combo, key)
    second = (rng.standard_normal(x.shape), rng.standard_normal(g.shape))
    got = _jax_derivatives(x, g, ct, mode, padding, align, second)
    want = _torch_derivatives(x, g, ct, mode, padding, align, second)
    _assert_matches(got, want, ("values", "input gradient", "grid gradient",
                                "second order: input", "second order: grid"))


@pytest.mark.parametrize("dims,mode,padding,align", default_share(COMBOS, 17))
def test_far_outside_reflects_over_several_periods(dims, mode, padding, align):
    combo = (dims, mode, padding, align)
    x, g, ct = _case(dims, ("far",), spread=11.0)
    _assert_matches(_jax_derivatives(x, g, ct, mode, padding, align),
                    _torch_derivatives(x, g, ct, mode, padding, align),
                    ("values", "input gradient", "grid gradient"))


@pytest.mark.parametrize("dims,mode,padding,align", default_share(COMBOS, 17))
def test_float32_values_match_torch(dims, mode, padding, align):
    combo = (dims, mode, padding, align)
    x, g, _ = _case(dims, ("float32",))
    want = F.grid_sample(torch.tensor(x, dtype=torch.float32),
                         torch.tensor(g, dtype=torch.float32), mode=mode,
                         padding_mode=padding, align_corners=align).numpy()
    got = np.asarray(grid_sample(jnp.asarray(x, jnp.float32), jnp.asarray(g, jnp.float32),
                                 mode, padding, align))
    assert got.dtype == np.float32
    if mode == "nearest":
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


@pytest.mark.slow
def test_jvp_is_the_transpose_of_the_vjp():
    """torch has no forward mode here: J t checked against the rows of J^T (jacrev)."""
    for dims, mode, padding in ((2, "bicubic", "reflection"), (3, "bilinear", "border")):
        x, g, _ = _case(dims, ("jvp", mode))
        rng = _rng("jvp", dims)
        tx, tg = rng.standard_normal(x.shape), rng.standard_normal(g.shape)

        def f(x, g):
            return grid_sample(x, g, mode, padding, False)

        _, tangent = jax.jvp(f, (jnp.asarray(x), jnp.asarray(g)),
                             (jnp.asarray(tx), jnp.asarray(tg)))
        jx, jg = jax.jacrev(f, (0, 1))(jnp.asarray(x), jnp.asarray(g))
        out_axes = tuple(range(tangent.ndim))
        expected = (np.tensordot(jx, tx, axes=x.ndim) + np.tensordot(jg, tg, axes=g.ndim))
        np.testing.assert_allclose(tangent, expected, rtol=1e-12, atol=1e-12)
        assert out_axes


BITS = [(dims, mode, padding, align, dtype)
        for (dims, mode, padding, align), dtype in itertools.product(
            COMBOS, ("float64", "float32"))]
# one case by default, with jit, vmap and jvp (each transform compiles its own program);
# every combination, with every transform, under -m slow
BITS_DEFAULT = {(2, "bilinear", "reflection", True, "float32")}


@pytest.mark.parametrize("dims,mode,padding,align,dtype,more", [
    pytest.param(*case, more, marks=() if case in BITS_DEFAULT and not more else
                 (pytest.mark.slow,))
    for case in BITS for more in ((False, True) if case in BITS_DEFAULT else (True,))])
def test_transforms_give_the_same_bits(dims, mode, padding, align, dtype, more):
    """The values, bit for bit: plain, jit, vmap, jvp (with ``more``: vmap of a batch,
    vjp, linearize, vmap of jvp, channels last)."""
    x, g, ct = _case(dims, ("bits", mode), spread=1.5)
    x, g, ct = (jnp.asarray(a, dtype) for a in (x, g, ct))

    def f(x, g):
        return grid_sample(x, g, mode, padding, align)

    eager = f(x, g)
    values = {
        "jit": jax.jit(f)(x, g),
        "vmap": jax.vmap(lambda x, g: f(x[None], g[None])[0])(x, g),
        "jvp": jax.jvp(f, (x, g), (x, g))[0],
    }
    if more:
        values.update({
            "vmap of the batch": jax.vmap(f)(jnp.stack([x, x]), jnp.stack([g, g]))[1],
            "vjp": jax.vjp(f, x, g)[0],
            "linearize": jax.linearize(f, x, g)[0],
            "vmap of jvp": jax.vmap(lambda x, g: jax.jvp(f, (x[None], g[None]),
                                                         (x[None], g[None]))[0][0])(x, g),
            "channels last": jnp.moveaxis(grid_sample(jnp.moveaxis(x, 1, -1), g, mode,
                                                      padding, align, channels_last=True),
                                          -1, 1),
        })
    for name, value in values.items():
        np.testing.assert_array_equal(value, eager, err_msg=name)


@pytest.mark.slow
def test_transforms_give_the_same_gradients_to_rounding():
    """The derivatives' own products and sums are JAX's: other programs may contract them
    into fused multiply-adds differently, within a rounding."""
    for dims, mode, padding in ((2, "bilinear", "zeros"), (2, "bicubic", "border"),
                                (3, "nearest", "reflection"), (3, "bilinear", "zeros")):
        x, g, ct = _case(dims, ("bits", mode))
        x, g, ct = jnp.asarray(x), jnp.asarray(g), jnp.asarray(ct)

        def f(x, g):
            return grid_sample(x, g, mode, padding, True)

        grads = jax.vjp(f, x, g)[1](ct)
        jit_grads = jax.jit(lambda x, g, ct: jax.vjp(f, x, g)[1](ct))(x, g, ct)
        per_example = jax.vmap(lambda x, g, ct: jax.vjp(f, x[None], g[None])[1](ct[None]))(
            x, g, ct)
        for a, b, c in zip(grads, jit_grads, per_example):
            # a rounding of the gradient's scale (an entry summed to near 0 from terms of
            # that size keeps their rounding)
            atol = 4 * np.finfo(np.float64).eps * float(np.abs(a).max(initial=1.0))
            np.testing.assert_allclose(a, b, rtol=1e-15, atol=atol)
            np.testing.assert_allclose(c[:, 0], a, rtol=1e-14, atol=atol)


def test_channels_last_is_the_transposed_layout():
    x, g, _ = _case(2, ("channels last",))
    want = grid_sample(jnp.asarray(x), jnp.asarray(g), "bicubic", "reflection", False)
    got = grid_sample(jnp.moveaxis(jnp.asarray(x), 1, -1), jnp.asarray(g), "bicubic",
                      "reflection", False, channels_last=True)
    np.testing.assert_array_equal(jnp.moveaxis(got, -1, 1), want)


# --- NaN, inf, half precision ---------------------------------------------------------------

NONFINITE = (np.nan, np.inf, -np.inf, 1e30, -1e30)


@pytest.mark.parametrize("dims,mode,padding,align", default_share(COMBOS, 11))
def test_nonfinite_values_go_where_torch_puts_them(dims, mode, padding, align):
    combo = (dims, mode, padding, align)
    x, g, ct = _case(dims, ("nonfinite",))
    rng = _rng("nonfinite", combo)
    g.reshape(-1)[rng.choice(g.size, 5, replace=False)] = NONFINITE
    x.reshape(-1)[rng.choice(x.size, 2, replace=False)] = [np.nan, np.inf]
    got = np.asarray(grid_sample(jnp.asarray(x), jnp.asarray(g), mode, padding, align))
    want = F.grid_sample(torch.tensor(x), torch.tensor(g), mode=mode, padding_mode=padding,
                         align_corners=align).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("dims,mode,padding,align", default_share(COMBOS, 6))
def test_zeros_keep_torchs_sign(dims, mode, padding, align):
    """A map of -0.0 (a few values among them): each output's zero has torch's sign, plain
    and jitted (the 3-D kernel's sum starts from +0.0, the 2-D one's from its first
    term)."""
    combo = (dims, mode, padding, align)
    x, g, _ = _case(dims, ("zeros",), spread=1.2)
    rng = _rng("zeros", combo)
    x = np.where(rng.random(x.shape) < 0.2, x, -0.0)
    want = F.grid_sample(torch.tensor(x), torch.tensor(g), mode=mode, padding_mode=padding,
                         align_corners=align).numpy()

    def f(x, g):
        return grid_sample(x, g, mode, padding, align)

    for got in (f(x, g), jax.jit(f)(x, g)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("dims,mode,padding,align", default_share(COMBOS, 17))
def test_nonfinite_input_and_cotangent_gradients_match_torch(dims, mode, padding, align):
    """NaN and inf in the input and the cotangent (finite grid): both gradients."""
    combo = (dims, mode, padding, align)
    x, g, ct = _case(dims, ("nonfinite gradients",))
    rng = _rng("nonfinite gradients", combo)
    x.reshape(-1)[rng.choice(x.size, 2, replace=False)] = [np.nan, -np.inf]
    ct.reshape(-1)[rng.choice(ct.size, 2, replace=False)] = [np.inf, np.nan]
    got = _jax_derivatives(x, g, ct, mode, padding, align)
    want = _torch_derivatives(x, g, ct, mode, padding, align)
    _assert_matches(got[:2], want[:2], ("values", "input gradient"))
    # The grid gradient: torch's factored sums ((ne - nw) * s + ...) can give inf where
    # the sum of products gives NaN; both are non-finite at the same places.
    np.testing.assert_array_equal(np.isfinite(got[2]), np.isfinite(want[2]))
    finite = np.isfinite(want[2])
    np.testing.assert_allclose(got[2][finite], want[2][finite], rtol=1e-10, atol=1e-12)


# The default run: every 17th combination, each with one dtype in turn; every pair under
# -m slow.
@pytest.mark.parametrize("dims,mode,padding,align,dtype", [
    pytest.param(*combo, dtype, marks=() if i % 17 == 0 and j == (i // 17) % 2 else
                 (pytest.mark.slow,))
    for i, combo in enumerate(COMBOS) for j, dtype in enumerate(("float16", "bfloat16"))])
def test_half_precision_rounds_once(dims, mode, padding, align, dtype):
    """float32 arithmetic rounded once: torch's float32 values rounded to the dtype, and
    torch's own half-precision kernel within a rounding or two."""
    x, g, _ = _case(dims, ("half",))
    tx = torch.tensor(x).to(getattr(torch, dtype))
    tg = torch.tensor(g).to(getattr(torch, dtype))
    got = grid_sample(jnp.asarray(tx.float().numpy(), dtype), jnp.asarray(tg.float().numpy(),
                                                                         dtype),
                      mode, padding, align)
    assert got.dtype == jnp.dtype(dtype)
    got = np.asarray(got.astype(jnp.float32))
    in_float32 = F.grid_sample(tx.float(), tg.float(), mode=mode, padding_mode=padding,
                               align_corners=align).to(tx.dtype).float().numpy()
    eps = float(torch.finfo(tx.dtype).eps)
    np.testing.assert_allclose(got, in_float32, rtol=eps, atol=eps * 1e-2)
    if mode == "bicubic":
        return  # torch's half kernel rounds every operation: far from the float32 values
    if mode == "nearest":
        # torch's half kernel computes the source coordinate in the half dtype: a point
        # within its rounding of a pixel's edge picks the neighbour (3-D, bfloat16)
        return
    torch_half = F.grid_sample(tx, tg, mode=mode, padding_mode=padding,
                               align_corners=align).float().numpy()
    scale = np.abs(torch_half).max(initial=1.0)
    np.testing.assert_allclose(got, torch_half, rtol=4 * eps, atol=4 * eps * scale)


# --- affine_grid ----------------------------------------------------------------------------

# each size once by default, the alignments in turn; both under -m slow
@pytest.mark.parametrize("size,align", each_once(
    [((2, 3, 1, 4),), ((1, 1, 5, 3),), ((2, 1, 4, 4),), ((2, 2, 1, 3, 4),),
     ((1, 1, 5, 2, 3),), ((1, 1, 2, 1, 1),)], [False, True]))
def test_affine_grid_matches_torch(size, align):
    dims = len(size) - 2
    theta = _rng("theta", size).standard_normal((size[0], dims, dims + 1))
    for dtype, tol in (("float64", 1e-15), ("float32", 3e-7)):
        want = F.affine_grid(torch.tensor(theta, dtype=getattr(torch, dtype)), list(size),
                             align_corners=align).numpy()
        got = np.asarray(affine_grid(jnp.asarray(theta, dtype), size, align))
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.slow
def test_affine_grid_then_grid_sample_matches_torch_gradients():
    theta = _rng("pipeline").standard_normal((2, 2, 3)) * 0.8
    x = _rng("pipeline x").standard_normal((2, 3, 4, 5))

    def ours(theta, x):
        return jnp.sum(grid_sample(x, affine_grid(theta, (2, 3, 3, 4), False), "bicubic",
                                   "reflection", False) ** 2)

    tt, xt = torch.tensor(theta, requires_grad=True), torch.tensor(x, requires_grad=True)
    loss = (F.grid_sample(xt, F.affine_grid(tt, [2, 3, 3, 4], align_corners=False),
                          mode="bicubic", padding_mode="reflection",
                          align_corners=False) ** 2).sum()
    want = torch.autograd.grad(loss, (tt, xt))
    got = jax.grad(ours, (0, 1))(jnp.asarray(theta), jnp.asarray(x))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-10, atol=1e-12)


# --- argument errors ------------------------------------------------------------------------

def _errors():
    f64 = np.float64
    x4, g4 = np.zeros((1, 1, 3, 3)), np.zeros((1, 2, 2, 2))
    x5, g5 = np.zeros((1, 1, 2, 3, 3)), np.zeros((1, 2, 2, 2, 3))
    return [
        ("mode", (x4, g4), dict(mode="linear"), ValueError, "mode"),
        ("padding", (x4, g4), dict(padding_mode="circular"), ValueError, "padding_mode"),
        ("rank", (np.zeros((1, 3, 3)), np.zeros((1, 2, 2))), {}, ValueError, "4-D or 5-D"),
        ("rank mismatch", (x4, g5), {}, ValueError, "same number"),
        ("last axis", (x4, np.zeros((1, 2, 2, 3))), {}, ValueError, "size 2"),
        ("batch", (x4, np.zeros((2, 2, 2, 2))), {}, ValueError, "batch"),
        ("dtype", (x4, g4.astype(np.float32)), {}, TypeError, "same dtype"),
        ("integer", (x4.astype(np.int32), g4.astype(np.int32)), {}, TypeError, "floating"),
        ("bicubic 5-D", (x5, g5), dict(mode="bicubic"), ValueError, "bicubic"),
        ("empty", (np.zeros((1, 1, 0, 3), f64), g4), {}, ValueError, "empty"),
    ]


@pytest.mark.parametrize("name,args,kwargs,error,words", _errors(),
                         ids=[e[0] for e in _errors()])
def test_grid_sample_errors_as_torch(name, args, kwargs, error, words):
    x, g = args
    with pytest.raises(Exception):
        F.grid_sample(torch.tensor(x), torch.tensor(g), align_corners=False, **kwargs)
    with pytest.raises(error, match=words):
        grid_sample(x, g, align_corners=False, **kwargs)


@pytest.mark.parametrize("theta_shape,size,words", [
    ((1, 2, 3), (1, 1, 4), "4 \\(2-D\\) or 5"),
    ((1, 3, 4), (1, 1, 4, 4), "\\[N, 2, 3\\]"),
    ((1, 2, 3), (1, 1, 2, 4, 4), "\\[N, 3, 4\\]"),
    ((1, 2, 3), (1, 1, 0, 4), "positive"),
])
def test_affine_grid_errors_as_torch(theta_shape, size, words):
    with pytest.raises((ValueError, NotImplementedError)):
        F.affine_grid(torch.zeros(theta_shape, dtype=torch.float64), list(size),
                      align_corners=False)
    with pytest.raises(ValueError, match=words):
        affine_grid(np.zeros(theta_shape), size, False)
    with pytest.raises(TypeError, match="floating"):
        affine_grid(np.zeros((1, 2, 3), np.int32), (1, 1, 2, 2), False)


def test_align_corners_none_warns_and_means_false():
    x, g, _ = _case(2, ("none",))
    with pytest.warns(UserWarning, match="align_corners=False"):
        got = grid_sample(jnp.asarray(x), jnp.asarray(g))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = F.grid_sample(torch.tensor(x), torch.tensor(g)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


# --- no scatter at any order ----------------------------------------------------------------

def _programs(f, x, g, w, every=True):
    """Every derivative program of ``<w, f(x, g)>``'s nonlinear cousin, for each argument;
    without ``every``, those that hold the others (grad of grad holds grad; hvp, jacfwd's
    rows) and the input's vmap of grad (the grid's gradient adds nothing back)."""
    def loss(x, g):
        return jnp.sum(w * jnp.tanh(f(x, g)) ** 2)

    progs = {"forward": lambda x, g: f(x, g)}
    for i, name in ((0, "input"), (1, "grid")):
        v = (x, g)[i]
        progs.update({
            f"vjp {name}": lambda x, g, i=i: jax.vjp(f, x, g)[1](jnp.ones_like(f(x, g)))[i],
            f"jvp {name}": lambda x, g, i=i, v=v: jax.jvp(
                lambda a: f(*[(x, g)[j] if j != i else a for j in range(2)]),
                ((x, g)[i],), (v,))[1],
            f"grad {name}": jax.grad(loss, i),
            f"grad of grad {name}": jax.grad(lambda x, g, i=i: jnp.sum(
                jnp.sin(jax.grad(loss, i)(x, g))), i),
            f"hvp {name}": lambda x, g, i=i, v=v: jax.jvp(
                lambda a: jax.grad(loss, i)(*[(x, g)[j] if j != i else a for j in range(2)]),
                ((x, g)[i],), (v,))[1],
            f"jacfwd {name}": jax.jacfwd(jax.grad(loss, i), i),
            f"vmap of grad {name}": lambda x, g, i=i: jax.vmap(
                lambda x, g: jax.grad(loss, i)(x[None], g[None]))(x, g),
        })
    if not every:
        held = {f"{kind} {name}" for kind in ("grad", "jacfwd") for name in ("input", "grid")}
        progs = {k: p for k, p in progs.items() if k not in held | {"vmap of grad grid"}}
    return progs


# The default run: one case on the GPU's table, the programs that hold the others; every
# case and program on both tables under -m slow.
@pytest.mark.parametrize("dims,mode,padding,backend,every", [
    (2, "bilinear", "zeros", "gpu", False)] + [
    pytest.param(*case, backend, True, marks=pytest.mark.slow)
    for backend in ("gpu", "tpu")
    for case in [(2, "bilinear", "zeros"), (3, "bilinear", "border"), (2, "nearest", "zeros"),
                 (2, "bicubic", "reflection")]])
def test_no_scatter_at_any_order(dims, mode, padding, backend, every):
    """The GPU's and TPU's tables: every derivative program free of scatters (by default
    those that hold the others)."""
    x, g, ct = _case(dims, ("scatter",), extent=3)
    x, g, w = jnp.asarray(x[:, :2]), jnp.asarray(g), jnp.asarray(ct[:, :2])

    def f(x, g):
        return grid_sample(x, g, mode, padding, False)

    for name, program in _programs(f, x, g, w, every).items():
        with strategy_table.use_backend(backend):
            ops = _ops(program, x, g)
        banned = {op for op in ops if "scatter" in op}
        assert not banned, f"{name} lowers to {banned}"


@pytest.mark.parametrize("dims,mode,padding,align", default_share(COMBOS, 34))
def test_cpu_scatter_adds_as_the_sorted_sum(dims, mode, padding, align):
    """The CPU's table adds back with a scatter-add (one thread, the rows' order): the
    same values and first and second derivatives as the sorted sum, to rounding."""
    assert strategy_table.lookup("grid sampling", "reads added back", "cpu") == "scatter"
    x, g, ct = _case(dims, ("adding", mode))
    x, g, ct = jnp.asarray(x), jnp.asarray(g), jnp.asarray(ct)

    def derivatives():
        # A new function for each table: a traced one would keep its program.
        def loss(x, g):
            return jnp.sum(ct * jnp.sin(grid_sample(x, g, mode, padding, align)))
        first = jax.grad(loss, (0, 1))
        second = jax.grad(lambda x, g: sum(jnp.sum(jnp.cos(d)) for d in first(x, g)),
                          (0, 1))
        return lambda x, g: (grid_sample(x, g, mode, padding, align), *first(x, g),
                             *second(x, g))

    results = {}
    for backend in ("cpu", "gpu"):
        with strategy_table.use_backend(backend):
            lowered = jax.jit(derivatives()).lower(x, g)  # the program that runs is the one read
            results[backend] = lowered.compile()(x, g)
        ops = set(re.findall(r"\b(?:stablehlo|chlo|mhlo)\.([a-z_]+)", lowered.as_text()))
        assert any("scatter" in op for op in ops) == (backend == "cpu"), backend
    for a, b in zip(results["cpu"], results["gpu"]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


# --- torch's OpInfo samples -----------------------------------------------------------------

def _opinfo_samples(name, kind="sample_inputs"):
    from torch.testing._internal.common_methods_invocations import op_db
    ops = [o for o in op_db if o.name == name and o.variant_test_name == ""]
    # (nn.functional.affine_grid has no entry in some torch versions)
    return list(ops[0].sample_inputs("cpu", torch.float64, requires_grad=False)) if ops else []


def _sample_ids(name):
    try:
        return list(range(len(_opinfo_samples(name, "sample_inputs"))))
    except ImportError:  # pragma: no cover - the internal test package is absent
        return []


GRID_SAMPLES = _sample_ids("nn.functional.grid_sample")
AFFINE_SAMPLES = _sample_ids("nn.functional.affine_grid")


@pytest.mark.parametrize("k", default_share(GRID_SAMPLES, 17))
def test_opinfo_grid_sample_samples(k):
    sample = _opinfo_samples("nn.functional.grid_sample", "sample_inputs")[k]
    x, (g,), kw = sample.input, sample.args, sample.kwargs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = F.grid_sample(x, g, **kw).numpy()
        got = grid_sample(jnp.asarray(x.numpy()), jnp.asarray(g.numpy()), **kw)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("k", default_share(AFFINE_SAMPLES, 5))
def test_opinfo_affine_grid_samples(k):
    sample = _opinfo_samples("nn.functional.affine_grid", "sample_inputs")[k]
    theta, args, kw = sample.input, sample.args, sample.kwargs
    want = F.affine_grid(theta, *args, **kw).numpy()
    got = affine_grid(jnp.asarray(theta.numpy()), *args, **kw)
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)
