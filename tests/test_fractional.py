"""fractional_max_pool2d/3d against torch (CPU) for the same samples: values and indices bit
for bit (float64, float32 and half precision, small extents swept, ties, NaN and inf),
derivatives of the first and second order, transforms, keys, argument errors, torch's
OpInfo samples, and no scatter in any derivative's lowered program."""

import itertools
import re
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from default_share import default_share, each_once
from jaxpool import strategy_table
from jaxpool.fractional.functions import fractional_max_pool2d, fractional_max_pool3d
from jaxpool.fractional.plan import step

pytestmark = pytest.mark.usefixtures("x64")

OURS = {2: fractional_max_pool2d, 3: fractional_max_pool3d}
TORCH = {2: F.fractional_max_pool2d, 3: F.fractional_max_pool3d}


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _samples(rng, shape, dtype, in_spatial=None, out_spatial=None, kernel=None):
    """Samples ``[N, C, d]`` in [0, 1): uniform, with 0, the largest value below 1, and (given
    the extents) values on and next to where ``(i + u) * alpha`` crosses an integer."""
    s = rng.random(shape).astype(dtype)
    flat = s.reshape(-1, shape[-1])
    top = np.nextafter(dtype(1), dtype(0))
    d = shape[-1]
    for row in range(flat.shape[0]):
        for j in range(d):
            pick = rng.integers(0, 4)
            if pick == 0:
                flat[row, j] = rng.choice([dtype(0), top])
            elif pick == 1 and in_spatial is not None:
                # sample slot j belongs to spatial axis: 2-D (W, H), 3-D (T, H, W)
                axis = (1, 0)[j] if d == 2 else j
                n, o, k = in_spatial[axis], out_spatial[axis], kernel[axis]
                if o > 1 and n > k:
                    alpha = (n - k) / (o - 1)
                    u = dtype((rng.integers(0, n) / alpha - rng.integers(0, o - 1)) % 1.0)
                    for _ in range(int(rng.integers(-1, 2))):
                        u = np.nextafter(u, dtype(0))
                    flat[row, j] = u if 0 <= u < 1 else dtype(0)
    return flat.reshape(shape)


def _torch(d, x, k, samples, **kw):
    v, i = TORCH[d](torch.from_numpy(x), k, return_indices=True,
                    _random_samples=torch.from_numpy(samples), **kw)
    return v.numpy(), i.numpy()


def _ours(d, x, k, samples, **kw):
    v, i = OURS[d](jnp.asarray(x), k, return_indices=True, samples=jnp.asarray(samples), **kw)
    return np.asarray(v), np.asarray(i)


def _same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    if got.dtype.kind == "f":
        assert np.array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}")), \
            (got, want)
    else:
        np.testing.assert_array_equal(got, want)


def _values(rng, shape, dtype, nonfinite=True):
    """Small integers (ties everywhere, signed zeros), with NaN, inf and -inf sprinkled."""
    x = rng.integers(-2, 3, shape).astype(dtype)
    x[rng.random(shape) < 0.1] = -0.0
    if nonfinite:
        for value in (np.nan, np.inf, -np.inf):
            x[rng.random(shape) < 0.06] = value
    return x


# --- values and indices, bit for bit -------------------------------------------------------

def _triples(dims):
    """Every (extent, kernel, output) of extents 1-5 and kernels 1-3 that torch accepts."""
    strict = 1 if dims == 3 else 0
    return [(n, k, o) for n in range(1, 6) for k in range(1, 4) for o in range(0, n + 1)
            if o + k - 1 <= n - strict and k <= n]


def _sweep_cases(dims):
    triples = _triples(dims)
    m = len(triples)
    # each triple on every axis, its partners cycling through the others
    return [tuple(triples[(i * (7 + 4 * a) + 3 * a) % m] for a in range(dims))
            for i in range(m)]


@pytest.mark.parametrize("dims,axes", default_share(
    [(2, c) for c in _sweep_cases(2)] + [(3, c) for c in _sweep_cases(3)], 3))
def test_small_extents_match_torch_bit_for_bit(dims, axes):
    rng = _rng("sweep", dims, axes)
    sizes, kernel, out = (tuple(t[j] for t in axes) for j in range(3))
    x = _values(rng, (2, 6) + sizes, np.float64)
    s = _samples(rng, (2, 6, dims), np.float64, sizes, out, kernel)
    want = _torch(dims, x, kernel, s, output_size=out)
    got = _ours(dims, x, kernel, s, output_size=out)
    for g, w in zip(got, want):
        _same_bits(g, w)


@pytest.mark.parametrize("dims,dtype,batched,how", default_share(
    list(itertools.product((2, 3), (np.float64, np.float32), (True, False), ("size", "ratio"))),
    5))
def test_values_and_indices_match_torch(dims, dtype, batched, how):
    rng = _rng("values", dims, dtype.__name__, batched, how)
    sizes = (17, 23) if dims == 2 else (9, 11, 10)
    kernel = (3, 2) if dims == 2 else (2, 3, 2)
    out = (9, 13) if dims == 2 else (4, 6, 5)
    kw = dict(output_size=out) if how == "size" else \
        dict(output_ratio=tuple(o / n + 0.01 for o, n in zip(out, sizes)))
    shape = ((3, 4) if batched else (4,)) + sizes
    x = rng.standard_normal(shape).astype(dtype)
    s = _samples(rng, (3 if batched else 1, 4, dims), dtype, sizes, out, kernel)
    for g, w in zip(_ours(dims, x, kernel, s, **kw), _torch(dims, x, kernel, s, **kw)):
        _same_bits(g, w)


# The default run: 2-D, each dtype with one extent in turn; the other pairs, and 3-D, under
# -m slow.
@pytest.mark.parametrize("dims,dtype,n", [
    pytest.param(dims, dtype, n, marks=() if dims == 2 and i == j else (pytest.mark.slow,))
    for dims in (2, 3) for i, dtype in enumerate((np.float32, np.float64))
    for j, n in enumerate((37, 193))])
def test_window_starts_at_their_thresholds_match_torch(dims, dtype, n):
    """Kernel 1, one output row per plane: each index is a window start, for samples on and
    beside every threshold of float32 and float64 rounding, many extents."""
    rng = _rng("thresholds", dims, dtype.__name__, n)
    for o in (2, 31, n):
        if dims == 3 and o == n:
            continue
        sizes = (n,) + (2,) * (dims - 1)
        out = (o,) + (1,) * (dims - 1)
        us = []
        alpha = (n - 1) / (o - 1)
        for i, j in itertools.product(range(o - 1), range(0, n, 3)):
            u = dtype(j / alpha - i)
            if 0 <= u < 1:
                us += [u, np.nextafter(u, dtype(0)), np.nextafter(u, dtype(1))]
        us = np.asarray([u for u in us if 0 <= u < 1][:600] or [dtype(0)], dtype)
        s = rng.random((1, len(us), dims)).astype(dtype)
        s[0, :, 1 if dims == 2 else 0] = us
        x = rng.standard_normal((1, len(us)) + sizes).astype(dtype)
        want = _torch(dims, x, 1, s, output_size=out)
        got = _ours(dims, x, 1, s, output_size=out)
        for g, w in zip(got, want):
            _same_bits(g, w)


def _to_numpy(t):
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(jnp.bfloat16)
    return t.numpy()


# each rank with one dtype by default, in turn; every pair under -m slow
@pytest.mark.parametrize("dims,dtype", each_once([2, 3], [torch.float16, torch.bfloat16]))
def test_half_precision_windows_match_torch(dims, dtype):
    """torch rounds every step of the window arithmetic to the half dtype."""
    rng = _rng("half", dims, str(dtype))
    sizes = (61, 7) if dims == 2 else (5, 61, 6)
    out = (29, 3) if dims == 2 else (2, 29, 3)
    kernel = (2, 2) if dims == 2 else (2, 2, 2)
    x = torch.randn((2, 40) + sizes, generator=torch.Generator().manual_seed(1)).to(dtype)
    s64 = _samples(rng, (2, 40, dims), np.float64, sizes, out, kernel)
    s = torch.from_numpy(s64).to(dtype).clamp(max=torch.finfo(dtype).eps * -0.5 + 1)
    try:
        wv, wi = TORCH[dims](x, kernel, output_size=out, return_indices=True,
                             _random_samples=s)
    except RuntimeError:  # a window that torch's half arithmetic puts outside: it asserts
        pytest.skip("torch's kernel asserts on these samples")
    gv, gi = OURS[dims](jnp.asarray(_to_numpy(x)), kernel, output_size=out,
                        return_indices=True, samples=jnp.asarray(_to_numpy(s)))
    _same_bits(gi, wi.numpy())
    _same_bits(np.asarray(gv).astype(np.float32), wv.float().numpy())


@pytest.mark.parametrize("dims", [2, 3])
def test_ties_and_nonfinite_go_where_torch_puts_them(dims):
    rng = _rng("ties", dims)
    sizes = (8, 9) if dims == 2 else (6, 7, 6)
    out = (5, 4) if dims == 2 else (3, 4, 3)
    for trial in range(3):
        x = np.maximum(rng.standard_normal((2, 5) + sizes), 0.0)  # ReLU: ties of zeros
        if trial:
            x = _values(rng, (2, 5) + sizes, np.float64)
        if trial == 2:  # whole windows of -inf, and of NaN
            x[0, 0] = -np.inf
            x[0, 1] = np.nan
        s = _samples(rng, (2, 5, dims), np.float64, sizes, out, (2,) * dims)
        for g, w in zip(_ours(dims, x, 2, s, output_size=out),
                        _torch(dims, x, 2, s, output_size=out)):
            _same_bits(g, w)


@pytest.mark.parametrize("dims", [2, 3])
def test_channels_last_is_the_transposed_layout(dims):
    rng = _rng("last", dims)
    sizes = (7, 8) if dims == 2 else (5, 6, 7)
    x = rng.standard_normal((2, 3) + sizes)
    s = rng.random((2, 3, dims))
    v, i = _ours(dims, x, 2, s, output_size=3)
    vl, il = OURS[dims](jnp.asarray(np.moveaxis(x, 1, -1)), 2, output_size=3,
                        return_indices=True, samples=jnp.asarray(s), channels_last=True)
    _same_bits(np.moveaxis(np.asarray(vl), -1, 1), v)
    _same_bits(np.moveaxis(np.asarray(il), -1, 1), i)


def test_empty_batch_and_empty_output_match_torch():
    rng = _rng("empty")
    for dims, shape, out in ((2, (0, 2, 5, 5), 3), (2, (1, 2, 5, 5), 0), (3, (0, 2, 4, 5, 4), 2),
                             (3, (1, 2, 4, 5, 4), 0)):
        x = rng.standard_normal(shape)
        s = rng.random((shape[0], 2, dims))
        for g, w in zip(_ours(dims, x, 2, s, output_size=out),
                        _torch(dims, x, 2, s, output_size=out)):
            _same_bits(g, w)
        grad = jax.grad(lambda x: OURS[dims](x, 2, output_size=out,
                                             samples=jnp.asarray(s)).sum())(jnp.asarray(x))
        _same_bits(grad, np.zeros_like(x))


# --- derivatives ----------------------------------------------------------------------------

def _case(dims, key, batched=True):
    rng = _rng("case", dims, key, batched)
    sizes = tuple(int(v) for v in rng.integers(4, 9, dims))
    kernel = tuple(int(v) for v in rng.integers(1, 4, dims))
    # extents where the windows overlap (k > step), so one element can win several
    out = tuple(int(rng.integers(max(1, n - k - 1), n - k + (1 if dims == 2 else 0) + 1))
                for n, k in zip(sizes, kernel))
    lead = (2, 3) if batched else (3,)
    x = rng.standard_normal(lead + sizes)
    s = _samples(rng, (lead[0] if batched else 1, 3, dims), np.float64, sizes, out, kernel)
    ct = rng.standard_normal(lead + out)
    return x, s, kernel, out, ct


@pytest.mark.parametrize("dims,key,batched", default_share(
    list(itertools.product((2, 3), range(3), (True, False))), 7))
def test_first_and_second_order_match_torch(dims, key, batched):
    x, s, kernel, out, ct = _case(dims, key, batched)
    w = _rng("w", dims, key).standard_normal(x.shape)
    # torch: the vjp, and the vjp of <w, vjp> in the cotangent (its only argument that
    # matters: the input's second derivative is zero)
    xt = torch.tensor(x, requires_grad=True)
    ctt = torch.tensor(ct, requires_grad=True)
    y = TORCH[dims](xt, kernel, output_size=out, _random_samples=torch.from_numpy(s))
    gx, = torch.autograd.grad(y, xt, ctt, create_graph=True)
    gct, = torch.autograd.grad(gx, ctt, torch.from_numpy(w))

    def f(x):
        return OURS[dims](x, kernel, output_size=out, samples=jnp.asarray(s))

    def vjp(x, ct):
        return jax.vjp(f, x)[1](ct)[0]

    @jax.jit
    def both(x, ct, w):
        return vjp(x, ct), jax.vjp(vjp, x, ct)[1](w)

    got, (gx2, gct2) = both(jnp.asarray(x), jnp.asarray(ct), jnp.asarray(w))
    # each window's cotangent added into its element in the windows' order, as torch's
    # backward adds them where windows overlap: its bits
    _same_bits(got, gx.detach().numpy())
    _same_bits(gct2, gct.numpy())
    _same_bits(gx2, np.zeros_like(x))


@pytest.mark.parametrize("dims", [2, 3])
def test_overlapping_windows_add_back_in_torchs_order(dims):
    """Windows of 3 at steps under 2, so an element wins up to 2 windows per axis: the
    gradient adds their cotangents in the windows' order, torch's bits."""
    rng = _rng("overlap", dims)
    sizes, out = (7, 5, 5)[:dims], (3, 2, 2)[:dims]
    for _ in range(8):
        x = np.round(rng.standard_normal((2, 3) + sizes) * 2) / 2  # ties among the taps
        s = rng.random((2, 3, dims))
        ct = rng.standard_normal((2, 3) + out)
        xt = torch.tensor(x, requires_grad=True)
        y = TORCH[dims](xt, 3, output_size=out, _random_samples=torch.from_numpy(s))
        (want,) = torch.autograd.grad(y, xt, torch.tensor(ct))
        got = jax.vjp(lambda x: OURS[dims](x, 3, output_size=out, samples=jnp.asarray(s)),
                      jnp.asarray(x))[1](jnp.asarray(ct))[0]
        _same_bits(got, want.numpy())


@pytest.mark.parametrize("dims", [2, 3])
def test_jvp_is_reverse_mode_twice(dims):
    x, s, kernel, out, ct = _case(dims, "jvp")
    t = _rng("t", dims).standard_normal(x.shape)

    def f(x):
        return OURS[dims](x, kernel, output_size=out, samples=jnp.asarray(s))

    @jax.jit
    def modes(x, t, ct):
        forward = jax.jvp(f, (x,), (t,))[1]
        pullback = jax.vjp(f, x)[1]
        twice = jax.vjp(lambda c: pullback(c)[0], ct)[1](t)[0]
        # forward over reverse: a Hessian-vector product of a piecewise linear op
        hvp = jax.jvp(jax.grad(lambda x: jnp.sum(f(x) * ct)), (x,), (t,))[1]
        return forward, twice, hvp

    forward, twice, hvp = modes(jnp.asarray(x), jnp.asarray(t), jnp.asarray(ct))
    _same_bits(forward, twice)
    _same_bits(hvp, np.zeros(x.shape))


@pytest.mark.parametrize("dims", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_transforms_give_the_same_bits(dims):
    x, s, kernel, out, ct = _case(dims, "transforms")
    xs = np.stack([x, x[::-1] * 2.0, -x])
    ss = np.stack([s, s[::-1], np.flip(s, -1).copy()])

    def f(x, s):
        return OURS[dims](x, kernel, output_size=out, return_indices=True, samples=s)

    def g(x, s):
        return jax.grad(lambda x: jnp.sum(jnp.sin(f(x, s)[0]) * jnp.asarray(ct)))(x)

    eager = [f(jnp.asarray(a), jnp.asarray(b)) for a, b in zip(xs, ss)]
    grads = [g(jnp.asarray(a), jnp.asarray(b)) for a, b in zip(xs, ss)]
    jitted = [jax.jit(f)(jnp.asarray(a), jnp.asarray(b)) for a, b in zip(xs, ss)]
    mapped = jax.vmap(f)(jnp.asarray(xs), jnp.asarray(ss))
    shared = jax.vmap(f, (0, None))(jnp.asarray(xs), jnp.asarray(ss[0]))
    mapped_grads = jax.jit(jax.vmap(g))(jnp.asarray(xs), jnp.asarray(ss))
    for b in range(3):
        for j in range(2):
            _same_bits(jitted[b][j], eager[b][j])
            _same_bits(mapped[j][b], eager[b][j])
        _same_bits(mapped_grads[b], grads[b])
        _same_bits(shared[0][b], f(jnp.asarray(xs[b]), jnp.asarray(ss[0]))[0])


# --- keys -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dims", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_a_key_draws_uniform_samples_reproducibly(dims):
    x = jnp.asarray(_rng("key", dims).standard_normal((3, 4) + (7,) * dims))
    key = jax.random.key(3)

    @jax.jit
    def drawn_and_given(x, key):
        drawn = jax.random.uniform(key, (3, 4, dims), x.dtype)
        return (OURS[dims](x, 2, output_size=4, return_indices=True, key=key),
                OURS[dims](x, 2, output_size=4, return_indices=True, samples=drawn), drawn)

    a = OURS[dims](x, 2, output_size=4, return_indices=True, key=key)
    b, c, drawn = drawn_and_given(x, key)
    assert bool(((drawn >= 0) & (drawn < 1)).all())
    for j in range(2):
        _same_bits(a[j], b[j])
        _same_bits(a[j], c[j])
    want = _torch(dims, np.asarray(x), 2, np.array(drawn), output_size=4)
    _same_bits(a[1], want[1])
    other = OURS[dims](x, 2, output_size=4, key=jax.random.PRNGKey(4))
    assert not np.array_equal(np.asarray(other), np.asarray(a[0]))
    y = OURS[dims](x.astype(jnp.bfloat16), 2, output_size=4, key=key)
    assert y.dtype == jnp.bfloat16


# --- errors ---------------------------------------------------------------------------------

def _error_cases():
    """(label, dims, input shape, kernel, keyword arguments, samples shape, words)."""
    return [
        ("pool too tall", 2, (1, 2, 5, 5), 2, dict(output_size=(5, 3)), (1, 2, 2),
         ["pool height 2", "input height 5"]),
        ("pool too wide", 2, (1, 2, 5, 5), (1, 3), dict(output_size=(3, 4)), (1, 2, 2),
         ["pool width 3", "input width 5"]),
        ("3-D pool exactly fitting", 3, (1, 2, 5, 5, 5), 2, dict(output_size=4), (1, 2, 3),
         ["pool time 2", "input time 5"]),
        ("3-D kernel 1 to full extent", 3, (1, 2, 5, 5, 5), 1, dict(output_size=(2, 5, 2)),
         (1, 2, 3), ["pool height 1", "input height 5"]),
        ("no output size", 2, (1, 2, 5, 5), 2, {}, (1, 2, 2),
         ["output_size", "output_ratio"]),
        ("samples of 2 dims", 2, (1, 2, 5, 5), 2, dict(output_size=3), (2, 2),
         ["samples", "shape", "[2, 2]"]),
        ("samples of 3 per plane for 2-D", 2, (1, 2, 5, 5), 2, dict(output_size=3), (1, 2, 3),
         ["samples", "[1, 2, 3]"]),
        ("samples of the wrong channels", 2, (1, 2, 5, 5), 2, dict(output_size=3), (1, 3, 2),
         ["samples", "[1, 3, 2]"]),
        ("samples of 2 per plane for 3-D", 3, (1, 2, 5, 5, 5), 2, dict(output_size=3),
         (1, 2, 2), ["samples", "[1, 2, 2]"]),
        ("input of rank 2", 2, (5, 5), 2, dict(output_size=3), (1, 1, 2), ["shape (5, 5)"]),
        ("empty channels", 2, (1, 0, 5, 5), 2, dict(output_size=3), (1, 0, 2),
         ["(1, 0, 5, 5)"]),
        ("kernel of 3 for 2-D", 2, (1, 2, 5, 5), (2, 2, 2), dict(output_size=3), (1, 2, 2),
         ["kernel_size", "(2, 2, 2)"]),
        ("output_size of 2 for 3-D", 3, (1, 2, 5, 5, 5), 2, dict(output_size=(3, 3)),
         (1, 2, 3), ["output_size", "(3, 3)"]),
        ("negative output_size", 2, (1, 2, 5, 5), 2, dict(output_size=-1), (1, 2, 2),
         ["output_size", "-1"]),
    ]


@pytest.mark.parametrize("label,dims,shape,kernel,kw,sshape,words", _error_cases(),
                         ids=[c[0] for c in _error_cases()])
def test_errors_as_torch(label, dims, shape, kernel, kw, sshape, words):
    x, s = np.zeros(shape), np.full(sshape, 0.5)
    with pytest.raises((RuntimeError, ValueError, TypeError)):
        TORCH[dims](torch.from_numpy(x), kernel, _random_samples=torch.from_numpy(s), **kw)
    with pytest.raises((ValueError, TypeError)) as info:
        OURS[dims](jnp.asarray(x), kernel, samples=jnp.asarray(s), **kw)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_samples_dtype_must_be_the_inputs_as_torch():
    x, s = np.zeros((1, 2, 5, 5), np.float32), np.full((1, 2, 2), 0.5)
    with pytest.raises(RuntimeError, match="same dtype"):
        F.fractional_max_pool2d(torch.from_numpy(x), 2, 3, _random_samples=torch.from_numpy(s))
    with pytest.raises(TypeError, match="samples must have the input's dtype float32"):
        fractional_max_pool2d(x, 2, 3, samples=s)


@pytest.mark.parametrize("kw,error,words", [
    (dict(), ValueError, ["samples=", "key="]),
    (dict(samples=np.full((1, 2, 2), 0.5), key=jax.random.key(0)), ValueError,
     ["samples=", "key=", "not both"]),
    (dict(samples=np.full((1, 2, 2), np.nan)), ValueError, ["finite", "nan"]),
    (dict(samples=np.full((1, 2, 2), 0.5), output_ratio=0.5), ValueError,
     ["output_size=3", "output_ratio=0.5"]),
    (dict(key=3), TypeError, ["key", "3"]),
    (dict(samples=np.full((1, 2, 2), 0.5), return_indices=1), TypeError, ["return_indices"]),
])
def test_own_errors_name_the_argument(kw, error, words):
    kw = dict(kw, output_size=3)
    with pytest.raises(error) as info:
        fractional_max_pool2d(np.zeros((1, 2, 5, 5)), 2, **kw)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize("kernel,kw,words", [
    (0, dict(output_size=3), ["kernel_size", "0"]),
    (2, dict(output_ratio=-0.5), ["output_ratio", "-0.5"]),
    (2, dict(output_ratio=(0.5, 0.5, 0.5)), ["output_ratio", "(0.5, 0.5, 0.5)"]),
    (2, dict(output_ratio="half"), ["output_ratio", "half"]),
])
def test_sizes_torch_lets_through_are_errors(kernel, kw, words):
    """torch pools with kernel 0 (a window of nothing: -inf) and reads ratios' lengths
    loosely; these are errors here."""
    with pytest.raises((ValueError, TypeError)) as info:
        fractional_max_pool2d(np.zeros((1, 2, 5, 5)), kernel, samples=np.full((1, 2, 2), 0.5),
                              **kw)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_traced_samples_outside_keep_their_windows_inside():
    x = jnp.asarray(_rng("outside").standard_normal((1, 2, 9, 9)))
    s = jnp.asarray([[[3.0, -2.0], [0.99, 7.5]]])
    v, i = jax.jit(lambda x, s: fractional_max_pool2d(x, 2, 4, return_indices=True,
                                                      samples=s))(x, s)
    assert bool(jnp.isfinite(v).all()) and bool(((i >= 0) & (i < 81)).all())


def test_step_is_rounded_in_the_dtype():
    assert step(10, 4, 3, "float32") == float(np.float32(7) / np.float32(3))
    assert step(10, 4, 3, "float64") == 7 / 3
    assert step(10, 4, 3, "float16") == float(np.float16(7) / np.float16(3))


# --- no scatter at any order ----------------------------------------------------------------

def _ops(fn, *args):
    text = jax.jit(fn).lower(*args).as_text()
    return set(re.findall(r"\b(?:stablehlo|chlo|mhlo)\.([a-z_]+)", text))


def _programs(f, x, s, w, v, every=True):
    """The derivative programs of ``<w, tanh(f)**2>``; without ``every``, those that hold
    the others (grad of grad holds grad; hvp, jacfwd's rows)."""
    def loss(x, s):
        return jnp.sum(w * jnp.tanh(f(x, s)) ** 2)

    grad = jax.grad(loss)
    programs = {
        "forward": lambda x, s: f(x, s),
        "vjp": lambda x, s: jax.vjp(lambda a: f(a, s), x)[1](jnp.ones_like(f(x, s)))[0],
        "jvp": lambda x, s: jax.jvp(lambda a: f(a, s), (x,), (v,))[1],
        "grad": grad,
        "grad of grad": jax.grad(lambda x, s: jnp.sum(jnp.sin(grad(x, s)))),
        "hvp": lambda x, s: jax.jvp(lambda a: grad(a, s), (x,), (v,))[1],
        "jacfwd": jax.jacfwd(grad),
        "vmap of grad": lambda x, s: jax.vmap(lambda x, s: grad(x[None], s[None]))(x, s),
        "key": lambda x, s: jax.grad(lambda x: jnp.sum(
            w * f(x, None, key=jax.random.key(0)) ** 2))(x),
    }
    if not every:
        programs = {k: p for k, p in programs.items() if k not in ("grad", "jacfwd")}
    return programs


# The default run: the GPU's table, the programs that hold the others; every program under
# both tables under -m slow.
@pytest.mark.parametrize("dims,backend,every", [(2, "gpu", False), (3, "gpu", False)] + [
    pytest.param(dims, backend, True, marks=pytest.mark.slow)
    for dims, backend in [(2, "gpu"), (3, "tpu"), (3, "gpu"), (2, "tpu")]])
def test_no_scatter_at_any_order(dims, backend, every):
    """The GPU's and TPU's tables: every derivative program free of scatters (by default
    those that hold the others)."""
    x, s, kernel, out, ct = _case(dims, "scatter")
    x, s, w = jnp.asarray(x), jnp.asarray(s), jnp.asarray(ct)
    v = jnp.asarray(_rng("v", dims).standard_normal(x.shape))

    def f(x, s, key=None):
        return OURS[dims](x, kernel, output_size=out, samples=s, key=key)

    for name, program in _programs(f, x, s, w, v, every).items():
        with strategy_table.use_backend(backend):
            ops = _ops(program, x, s)
        banned = {op for op in ops if "scatter" in op}
        assert not banned, f"{name} lowers to {banned}"


# the second derivative in 3-D by default, in 2-D too under -m slow
@pytest.mark.parametrize("dims,orders", [pytest.param(2, 2, marks=pytest.mark.slow), (2, 1),
                                         (3, 2)])
def test_cpu_scatter_adds_as_the_sorted_sum(dims, orders):
    """The CPU's table adds the rows back with a scatter-add (one thread, the rows'
    order): the same values and first (and second) derivatives as the sorted sum, to
    rounding (an element that wins several windows sums their cotangents)."""
    assert strategy_table.lookup("fractional max pooling", "reads added back",
                                 "cpu") == "scatter"
    x, s, kernel, out, ct = _case(dims, "adding")
    x, s, ct = jnp.asarray(x), jnp.asarray(s), jnp.asarray(ct)

    def derivatives():
        # A new function for each table: a traced one would keep its program.
        def loss(x):
            return jnp.sum(ct * jnp.sin(OURS[dims](x, kernel, output_size=out, samples=s)))
        first = jax.grad(loss)
        second = jax.grad(lambda x: jnp.sum(jnp.cos(first(x))))
        return lambda x: (OURS[dims](x, kernel, output_size=out, samples=s), first(x),
                          *((second(x),) if orders == 2 else ()))

    results = {}
    for backend in ("cpu", "gpu"):
        with strategy_table.use_backend(backend):
            lowered = jax.jit(derivatives()).lower(x)  # the program that runs is the one read
            results[backend] = lowered.compile()(x)
        ops = set(re.findall(r"\b(?:stablehlo|chlo|mhlo)\.([a-z_]+)", lowered.as_text()))
        assert any("scatter" in op for op in ops) == (backend == "cpu"), backend
    np.testing.assert_array_equal(results["cpu"][0], results["gpu"][0])
    for a, b in zip(results["cpu"][1:], results["gpu"][1:]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


# --- torch's OpInfo samples -----------------------------------------------------------------

def _opinfo_samples(name):
    from torch.testing._internal.common_methods_invocations import op_db
    ops = [o for o in op_db if o.name == name and o.variant_test_name == ""]
    return list(ops[0].sample_inputs("cpu", torch.float64, requires_grad=False)) if ops else []


def _sample_ids(name):
    try:
        return [(name, k) for k in range(len(_opinfo_samples(name)))]
    except ImportError:  # pragma: no cover - the internal test package is absent
        return []


OPINFO = (_sample_ids("nn.functional.fractional_max_pool2d")
          + _sample_ids("nn.functional.fractional_max_pool3d"))


@pytest.mark.parametrize("name,k", default_share(OPINFO, 17))
def test_opinfo_samples(name, k):
    sample = _opinfo_samples(name)[k]
    dims = 2 if name.endswith("2d") else 3
    x, (kernel,), kw = sample.input, sample.args, dict(sample.kwargs)
    with_indices = kw.pop("return_indices", False)
    batched = x.dim() == dims + 2
    given = kw.pop("_random_samples", None)  # some samples bring their own (outside [0, 1))
    s = _rng("opinfo", name, k).random((x.shape[0] if batched else 1, x.shape[-dims - 1], dims)) \
        if given is None else given.numpy()
    want = _torch(dims, x.numpy(), kernel, s, **kw)
    got = OURS[dims](jnp.asarray(x.numpy()), kernel, return_indices=with_indices,
                     samples=jnp.asarray(s), **kw)
    if with_indices:
        _same_bits(got[0], want[0])
        _same_bits(got[1], want[1])
    else:
        _same_bits(got, want[0])


def test_samples_outside_the_unit_interval_match_torch_where_it_pools():
    """torch takes any sample whose windows stay inside (C++ truncation toward zero);
    so do concrete and traced samples here."""
    rng = _rng("outside-unit")
    x = rng.standard_normal((1, 40, 16, 16))
    s = rng.uniform(-8, 8, (1, 40, 2))
    want = _torch(2, x, 1, s, output_size=8)
    for got in (_ours(2, x, 1, s, output_size=8),
                jax.jit(lambda x, s: fractional_max_pool2d(x, 1, 8, None, True, s))(x, s)):
        for g, w in zip(got, want):
            _same_bits(g, w)


def test_a_window_torch_puts_outside_is_an_error_as_torch():
    """bfloat16's step rounded up takes the last windows but one past the input's end:
    torch's kernel asserts; concrete samples are an error here."""
    x = np.zeros((1, 1, 1, 146), np.float32)
    s = np.asarray([[[0.5, 0.0]]], np.float32)
    with pytest.raises(RuntimeError):
        F.fractional_max_pool2d(torch.from_numpy(x).bfloat16(), 1, (1, 135),
                                _random_samples=torch.from_numpy(s).bfloat16())
    with pytest.raises(ValueError, match=r"samples\[0, 0, 0\] = 0.5 starts window"):
        fractional_max_pool2d(jnp.asarray(x, jnp.bfloat16), 1, (1, 135),
                              samples=jnp.asarray(s, jnp.bfloat16))


# --- parity's suite: both sides get the same samples ----------------------------------------

@pytest.mark.parametrize("dims", [2, 3])
def test_the_suites_cases_give_both_sides_the_same_samples(dims):
    """Each case of ``python -m parity`` draws its samples once, ``[N, C, d]`` in [0, 1) in
    its dtype, and gives them to jaxpool as ``samples`` and to torch as
    ``_random_samples``: its torch side is torch's function on those samples, not on samples
    torch draws."""
    from parity.suite import cases as suite

    cases = [c for c in suite.quick_cases(ops=[f"fractional_max_pool{dims}d"])
             if isinstance(c, suite.Case)]
    for case in cases:
        samples = case.drawn()["samples"]
        batch = case.shape[0] if len(case.shape) == dims + 2 else 1
        assert samples.shape == (batch, case.shape[-dims - 1], dims), case.key
        assert samples.dtype == suite.DTYPES[case.dtype], case.key
        assert ((samples >= 0) & (samples < 1)).all(), case.key
    case = next(c for c in cases if c.dtype == "float64" and not c.special)
    x, = case.inputs()
    jax_fn, torch_fn = case.functions()
    kw = dict(case.kwargs, return_indices=True)
    moved = lambda a: np.moveaxis(a, -1, -dims - 1) if case.channels_last else a
    want = _torch(dims, moved(x), kw.pop("kernel_size"), case.drawn()["samples"], **{
        k: v for k, v in kw.items() if k != "return_indices"})
    got = torch_fn(torch.from_numpy(x)), jax_fn(jnp.asarray(x))
    for side in got:
        for g, w in zip(side, want, strict=True):
            _same_bits(moved(np.asarray(g)), w)


@pytest.mark.parametrize("dims", [2, 3])
def test_the_suites_bad_calls_raise_for_their_arguments_on_torchs_side(dims):
    """torch's side of each bad call raises for the argument the call gets wrong, not for
    jaxpool's name ``samples``; the same call with good arguments returns."""
    from parity.suite import cases, ops

    op = f"fractional_max_pool{dims}d"
    torch_fn = ops.torch_error_fn(op)
    for label, (array, *_), kw in cases.error_cases(op).calls:
        x = torch.zeros(array.shape, dtype=torch.float64)
        with pytest.raises((RuntimeError, ValueError, TypeError, IndexError)) as info:
            torch_fn(x, **{k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
                           for k, v in kw})
        assert "keyword" not in str(info.value), (label, str(info.value))
    x = torch.zeros((1, 2) + (7,) * dims, dtype=torch.float64)
    out = torch_fn(x, 2, 3, None, False, torch.full((1, 2, dims), 0.5))
    assert tuple(out.shape) == (1, 2) + (3,) * dims
