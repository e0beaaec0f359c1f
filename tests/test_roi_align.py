"""roi_align against torchvision's algorithm, written here in torch (float64 where tolerance
matters): values (its bits), derivatives in the input and the boxes of the first and second
order, forward mode, transforms, NaN and inf, half precision, the adaptive grid's bound,
argument errors, no scatter in any derivative's program, and a replay of Faster R-CNN's
box head pooling (``MultiScaleRoIAlign``).

The torch reference follows torchvision's CPU kernel (``roi_align_kernel.cpp``): a sample
outside ``[-1, size]`` (or NaN) reads the image's first pixel with weight 0, coordinates at
or below 0 are 0, at or past the last pixel are the last pixel, without ``aligned`` a box is
at least 1 x 1, an adaptive grid is ``ceil(extent / bins)`` per box (none where that is not
a positive int), the mean divides by ``max(rows * cols, 1)``, and each bin sums its samples
in the kernel's order. Its input gradient is torch autograd's, the empty samples' reads
detached (the kernel's backward skips them); its box gradient is autograd's of the same
arithmetic (torchvision's pure-torch ``_roi_align`` differentiates the boxes too)."""

import re
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from default_share import default_share, each_once

from jaxpool import strategy_table
from jaxpool.roi.functions import roi_align

pytestmark = pytest.mark.usefixtures("x64")


# --- the torch reference --------------------------------------------------------------------

def _torch_axis(c, size):
    inside = (c >= -1) & (c <= size)
    c = torch.where(c <= 0, torch.zeros_like(c), c)
    low = torch.where(inside, c, torch.zeros_like(c)).detach().to(torch.int64)
    last = low >= size - 1
    high = torch.where(last, size - 1, low + 1)
    low = torch.where(last, size - 1, low)
    c = torch.where(last, low.to(c.dtype), c)
    l = c - low
    return inside, low, high, 1.0 - l, l


def torch_roi_align(x, rois, spatial_scale, pooled, sampling_ratio, aligned):
    """torchvision's roi_align in torch ops (``x``: [N, C, H, W], ``rois``: [K, 5])."""
    n, c, height, width = x.shape
    k, (ph, pw), dtype = rois.shape[0], pooled, x.dtype
    index = rois[:, 0].detach()
    image = torch.where((index >= 0) & (index < n), index, 0).to(torch.int64)
    scale = torch.tensor(spatial_scale, dtype=dtype)
    offset = 0.5 if aligned else 0.0
    start_w, start_h = rois[:, 1] * scale - offset, rois[:, 2] * scale - offset
    end_w, end_h = rois[:, 3] * scale - offset, rois[:, 4] * scale - offset
    roi_w, roi_h = end_w - start_w, end_h - start_h
    if not aligned:
        roi_w = torch.where(roi_w < 1, torch.ones_like(roi_w), roi_w)
        roi_h = torch.where(roi_h < 1, torch.ones_like(roi_h), roi_h)
    bin_h, bin_w = roi_h / ph, roi_w / pw
    if sampling_ratio > 0:
        rows = cols = torch.full((k,), sampling_ratio, dtype=torch.int64)
    else:
        def per_bin(extent, bins):
            n_ = torch.ceil(extent.detach() / bins)
            ok = torch.isfinite(n_) & (n_ > 0) & (n_ <= 2 ** 31 - 1)
            return torch.where(ok, n_, 0).to(torch.int64)
        rows, cols = per_bin(roi_h, ph), per_bin(roi_w, pw)
    count = torch.clamp(rows * cols, min=1).to(dtype)
    flat = x.reshape(n, c, height * width)
    out = torch.zeros((k, ph, pw, c), dtype=dtype)
    p_h = torch.arange(ph, dtype=dtype)[None, :]
    p_w = torch.arange(pw, dtype=dtype)[None, :]
    for iy in range(int(rows.max()) if k else 0):
        y = (start_h[:, None] + p_h * bin_h[:, None]) + \
            ((iy + 0.5) * bin_h[:, None]) / torch.clamp(rows, min=1).to(dtype)[:, None]
        in_y, y_low, y_high, hy, ly = _torch_axis(y, height)
        for ix in range(int(cols.max()) if k else 0):
            xx = (start_w[:, None] + p_w * bin_w[:, None]) + \
                ((ix + 0.5) * bin_w[:, None]) / torch.clamp(cols, min=1).to(dtype)[:, None]
            in_x, x_low, x_high, hx, lx = _torch_axis(xx, width)
            used = ((iy < rows) & (ix < cols))[:, None, None]
            live = in_y[:, :, None] & in_x[:, None, :] & used
            sample = 0
            for t, (yi, wy) in enumerate(((y_low, hy), (y_high, ly))):
                for xi, wx in ((x_low, hx), (x_high, lx)):
                    pos = torch.where(live, yi[:, :, None] * width + xi[:, None, :], 0)
                    w = torch.where(live, wy[:, :, None] * wx[:, None, :], 0.0)
                    v = flat[image[:, None, None], :, pos]  # [K, ph, pw, C]
                    v = torch.where(live[..., None], v, v.detach())
                    term = w[..., None] * v
                    sample = term if isinstance(sample, int) else sample + term
            out = torch.where(used[..., None], out + sample, out)
    return (out / count[:, None, None, None]).permute(0, 3, 1, 2)


# --- cases ----------------------------------------------------------------------------------

def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _boxes(rng, batch, height, width, count, scale):
    """Boxes in the image's coordinates: inside, outside, on the borders, empty and
    inverted, half of them with an edge on a pixel or border."""
    rows = []
    for j in range(count):
        kind = j % 6
        x = np.sort(rng.uniform(-0.5, width + 0.5, 2))
        y = np.sort(rng.uniform(-0.5, height + 0.5, 2))
        if kind == 1:  # outside, partly or wholly
            x = np.sort(rng.uniform(-3, width + 3, 2))
            y = np.sort(rng.uniform(-3, height + 3, 2))
        elif kind == 2:  # on pixels and borders
            x = np.sort(rng.choice([-1, -0.5, 0, width - 1, width - 0.5, width,
                                    rng.integers(0, width)], 2))
            y = np.sort(rng.choice([-1, -0.5, 0, height - 1, height - 0.5, height,
                                    rng.integers(0, height)], 2))
        elif kind == 3:  # empty
            x[1] = x[0]
        elif kind == 4:  # inverted
            y = y[::-1]
        elif kind == 5:  # large: several samples per bin when adaptive
            x = np.array([-1.0, width + 1.5])
            y = np.array([rng.uniform(-1, 1), height + rng.uniform(0, 2)])
        rows.append([rng.integers(0, batch), x[0], y[0], x[1], y[1]])
    boxes = np.asarray(rows, np.float64)
    boxes[:, 1:] /= scale  # scales are powers of two: exact
    return boxes


SCALES = (1.0, 0.5, 2.0)


def _case(key, extent=5, count=12):
    rng = _rng(key)
    height, width = (int(s) for s in rng.integers(1, extent + 1, 2))
    scale = float(rng.choice(SCALES))
    x = rng.standard_normal((2, 3, height, width))
    boxes = _boxes(rng, 2, height, width, count, scale)
    pooled = tuple(int(s) for s in rng.integers(1, 4, 2))
    ct = rng.standard_normal((count, 3) + pooled)
    return x, boxes, pooled, scale, ct


def _torch_derivatives(x, boxes, ct, pooled, scale, ratio, aligned, second=None):
    xt = torch.tensor(x, requires_grad=True)
    bt = torch.tensor(boxes, requires_grad=True)
    y = torch_roi_align(xt, bt, scale, pooled, ratio, aligned)
    gx, gb = torch.autograd.grad(y, (xt, bt), torch.tensor(ct),
                                 create_graph=second is not None, allow_unused=True)
    gb = torch.zeros_like(bt) if gb is None else gb
    out = [y.detach().numpy(), gx.detach().numpy(), gb.detach().numpy()]
    if second is not None:
        vx, vb = (torch.tensor(v) for v in second)
        h = torch.autograd.grad((gx * vx).sum() + (gb * vb).sum(), (xt, bt),
                                allow_unused=True)
        out += [np.zeros_like(a) if g is None else g.numpy() for a, g in zip((x, boxes), h)]
    return out


def _jax_derivatives(x, boxes, ct, pooled, scale, ratio, aligned, second=None, bound=None):
    def f(x, b):
        return roi_align(x, b, pooled, scale, ratio, aligned, bound)

    y, back = jax.vjp(f, jnp.asarray(x), jnp.asarray(boxes))
    out = [y, *back(jnp.asarray(ct))]
    if second is not None:
        def s(x, b):
            gx, gb = jax.vjp(f, x, b)[1](jnp.asarray(ct))
            return jnp.sum(gx * second[0]) + jnp.sum(gb * second[1])
        out += list(jax.jit(jax.grad(s, (0, 1)))(jnp.asarray(x), jnp.asarray(boxes)))
    return [np.asarray(o) for o in out]


def _assert_matches(got, want, names):
    np.testing.assert_array_equal(got[0], want[0], err_msg="values: the kernel's bits")
    for a, b, name in zip(got[1:], want[1:], names[1:]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, equal_nan=True,
                                   err_msg=name)


RATIOS = (1, 2, 3, 0, -1)
SWEEP = [(ratio, aligned, key) for ratio in RATIOS for aligned in (False, True)
         for key in range(4)]
BOUND = 8  # every case's adaptive count is below it


def _sweep_params(every=13):
    """(ratio, aligned, key, derivatives): every ``every``-th case by default (ratios 1, 2,
    0 and -1, both alignments), the derivatives on every other one of them (a fixed ratio
    and an adaptive one; the second-order test's default case takes aligned=False); each
    case with its derivatives under -m slow."""
    params = []
    for i, case in enumerate(SWEEP):
        if i % every:
            params.append(pytest.param(*case, True, marks=pytest.mark.slow))
        elif (i // every) % 2:
            params.append(pytest.param(*case, True))
        else:
            params += [pytest.param(*case, False),
                       pytest.param(*case, True, marks=pytest.mark.slow)]
    return params


@pytest.mark.parametrize("ratio,aligned,key,derivatives", _sweep_params())
def test_values_and_vjp_match_torchvision(ratio, aligned, key, derivatives):
    x, boxes, pooled, scale, ct = _case(("sweep", key, ratio, aligned))
    want = _torch_derivatives(x, boxes, ct, pooled, scale, ratio, aligned)
    # eager (boxes read, the grid sized to them); the derivative in the boxes traces them
    # (the bound), and so does jit
    eager = roi_align(x, boxes, pooled, scale, ratio, aligned)
    np.testing.assert_array_equal(eager, want[0], err_msg="eager values: the kernel's bits")
    if derivatives:
        got = _jax_derivatives(x, boxes, ct, pooled, scale, ratio, aligned, bound=BOUND)
        _assert_matches(got, want, ("values", "input gradient", "box gradient"))
    if ratio <= 0:
        jitted = jax.jit(lambda x, b: roi_align(x, b, pooled, scale, ratio, aligned, BOUND))
        np.testing.assert_array_equal(jitted(x, boxes), want[0])


SECOND = [(ratio, aligned, key) for ratio in (-1, 2) for aligned in (False, True)
          for key in range(3)]


@pytest.mark.parametrize("ratio,aligned,key", default_share(SECOND, 12))
def test_second_order_matches_torch_double_backward(ratio, aligned, key):
    x, boxes, pooled, scale, ct = _case(("second", key), count=6)
    rng = _rng("second", ratio, aligned, key)
    second = (rng.standard_normal(x.shape), rng.standard_normal(boxes.shape))
    got = _jax_derivatives(x, boxes, ct, pooled, scale, ratio, aligned, second, bound=BOUND)
    want = _torch_derivatives(x, boxes, ct, pooled, scale, ratio, aligned, second)
    _assert_matches(got, want, ("values", "input gradient", "box gradient",
                                "second order: input", "second order: boxes"))


EXTENTS = [(h, w) for h in range(1, 6) for w in range(1, 6)]
EXTENT_OPTIONS = ((2, False), (-1, True), (0, False), (1, True))


# The default run: the square extents 1-5, each with one (ratio, aligned) in turn (every
# one of them taken); every extent with every option under -m slow.
@pytest.mark.parametrize("height,width,ratio,aligned", [
    pytest.param(h, w, ratio, aligned,
                 marks=() if i % 6 == 0 and j == (i // 6) % len(EXTENT_OPTIONS) else
                 (pytest.mark.slow,))
    for i, (h, w) in enumerate(EXTENTS) for j, (ratio, aligned) in enumerate(EXTENT_OPTIONS)])
def test_every_small_extent_matches(height, width, ratio, aligned):
    """Each extent 1-5 per axis, boxes of every kind, both alignments, fixed and adaptive."""
    rng = _rng("extent", height, width)
    x = rng.standard_normal((2, 2, height, width))
    boxes = _boxes(rng, 2, height, width, 12, 1.0)
    want = torch_roi_align(torch.tensor(x), torch.tensor(boxes), 1.0, (2, 3), ratio,
                           aligned).numpy()
    got = roi_align(x, boxes, (2, 3), 1.0, ratio, aligned)
    np.testing.assert_array_equal(got, want, err_msg=f"{ratio} {aligned}")


def test_float32_values_are_the_kernels_bits():
    x, boxes, pooled, scale, _ = _case(("float32",), count=24)
    for ratio, aligned in ((2, False), (-1, True), (0, False)):
        want = torch_roi_align(torch.tensor(x, dtype=torch.float32),
                               torch.tensor(boxes, dtype=torch.float32), scale, pooled,
                               ratio, aligned).numpy()
        got = roi_align(np.float32(x), np.float32(boxes), pooled, scale, ratio, aligned)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_jvp_is_the_transpose_of_the_vjp():
    """torchvision has no forward mode: J t checked against the rows of J^T (jacrev)."""
    for ratio, aligned in ((2, False), (-1, True)):
        x, boxes, pooled, scale, _ = _case(("jvp", ratio), count=6)
        rng = _rng("jvp tangents", ratio)
        tx, tb = rng.standard_normal(x.shape), rng.standard_normal(boxes.shape)

        def f(x, b):
            return roi_align(x, b, pooled, scale, ratio, aligned, BOUND)

        _, tangent = jax.jvp(f, (jnp.asarray(x), jnp.asarray(boxes)),
                             (jnp.asarray(tx), jnp.asarray(tb)))
        jx, jb = jax.jacrev(f, (0, 1))(jnp.asarray(x), jnp.asarray(boxes))
        expected = np.tensordot(jx, tx, axes=x.ndim) + np.tensordot(jb, tb, axes=2)
        np.testing.assert_allclose(tangent, expected, rtol=1e-12, atol=1e-12)


# The default run: the adaptive grid, without the per-example gradients (vmap of the vjp;
# the slow run adds them, and the fixed grid)
@pytest.mark.parametrize("ratio,aligned,more", [
    (-1, True, False), pytest.param(-1, True, True, marks=pytest.mark.slow),
    pytest.param(2, False, True, marks=pytest.mark.slow)])
def test_transforms_give_the_same_bits(ratio, aligned, more):
    x, boxes, pooled, scale, ct = _case(("bits", ratio), count=8)
    x, b, ct = jnp.asarray(x), jnp.asarray(boxes), jnp.asarray(ct)

    def f(x, b, bound=BOUND):
        return roi_align(x, b, pooled, scale, ratio, aligned, bound)

    eager = f(x, b, None)
    np.testing.assert_array_equal(jax.jit(f)(x, b), eager)
    np.testing.assert_array_equal(jax.jvp(f, (x, b), (x, b))[0], eager)
    y, back = jax.vjp(f, x, b)
    np.testing.assert_array_equal(y, eager)
    # a batch of two copies of the maps, the boxes per example
    xs, bs = jnp.stack([x, x[::-1]]), jnp.stack([b, b])
    batched = jax.vmap(f)(xs, bs)
    np.testing.assert_array_equal(batched[0], eager)
    np.testing.assert_array_equal(batched[1], f(x[::-1], b, None))
    grads = back(ct)
    jit_grads = jax.jit(lambda x, b, ct: jax.vjp(f, x, b)[1](ct))(x, b, ct)
    for a, j in zip(grads, jit_grads):
        np.testing.assert_allclose(j, a, rtol=1e-15, atol=1e-15)
    if more:
        per_example = jax.vmap(lambda x, b, ct: jax.vjp(f, x, b)[1](ct))(
            xs[:1], bs[:1], ct[None])
        for a, v in zip(grads, per_example):
            np.testing.assert_allclose(v[0], a, rtol=1e-14, atol=1e-15)


def test_list_of_boxes_is_the_k5_array():
    x, boxes, pooled, scale, _ = _case(("list",))
    per_image = [boxes[boxes[:, 0] == i][:, 1:] for i in range(2)]
    rois = np.concatenate([np.concatenate([np.full((len(b), 1), float(i)), b], 1)
                           for i, b in enumerate(per_image)])
    want = roi_align(x, rois, pooled, scale, 2)
    np.testing.assert_array_equal(roi_align(x, per_image, pooled, scale, 2), want)
    np.testing.assert_array_equal(
        roi_align(x, [jnp.asarray(b) for b in per_image], pooled, scale, 2), want)
    got = jax.jit(lambda x, bs: roi_align(x, bs, pooled, scale, 2))(
        x, [jnp.asarray(b) for b in per_image])
    np.testing.assert_array_equal(got, want)


def test_channels_last_is_the_transposed_layout():
    x, boxes, pooled, scale, _ = _case(("channels last",))
    want = roi_align(x, boxes, pooled, scale, -1, True)
    got = roi_align(np.moveaxis(x, 1, -1), boxes, pooled, scale, -1, True,
                    channels_last=True)
    np.testing.assert_array_equal(np.moveaxis(np.asarray(got), -1, 1), want)


def test_no_boxes_no_channels():
    x = np.ones((2, 3, 4, 5))
    assert roi_align(x, np.zeros((0, 5)), (2, 3)).shape == (0, 3, 2, 3)
    assert roi_align(np.ones((2, 0, 4, 5)), np.ones((1, 5)), 2, sampling_ratio=2).shape == \
        (1, 0, 2, 2)
    g = jax.grad(lambda x: roi_align(x, np.zeros((0, 5)), 2, sampling_ratio=2).sum())(x)
    np.testing.assert_array_equal(g, np.zeros_like(x))


# --- the adaptive grid's bound --------------------------------------------------------------

def _big_and_small():
    x = _rng("bound").standard_normal((2, 3, 5, 5))
    # 2x2 bins: the first box needs ceil(4 / 2) = 2 per axis, the second ceil(9.8 / 2) = 5
    boxes = np.array([[0, 0.5, 0.5, 4.5, 4.5], [1, -2.4, -2.4, 7.4, 7.4],
                      [1, 1.0, 1.0, 2.0, 2.0]])
    return x, boxes


def test_traced_adaptive_boxes_need_a_bound():
    x, boxes = _big_and_small()
    with pytest.raises(ValueError, match="max_sampling_ratio"):
        jax.jit(lambda x, b: roi_align(x, b, 2))(x, boxes)
    with pytest.raises(ValueError, match="max_sampling_ratio"):
        jax.vmap(lambda b: roi_align(x, b, 2))(boxes[None])
    # a fixed grid, or boxes closed over (concrete), need none
    jax.jit(lambda x, b: roi_align(x, b, 2, sampling_ratio=2))(x, boxes)
    jax.jit(lambda x: roi_align(x, boxes, 2))(x)


def test_a_box_past_the_bound_is_nan_under_jit_and_an_error_eagerly():
    x, boxes = _big_and_small()
    want = torch_roi_align(torch.tensor(x), torch.tensor(boxes), 1.0, (2, 2), -1,
                           False).numpy()
    exact = jax.jit(lambda x, b: roi_align(x, b, 2, max_sampling_ratio=5))(x, boxes)
    np.testing.assert_array_equal(exact, want)
    short = jax.jit(lambda x, b: roi_align(x, b, 2, max_sampling_ratio=4))(x, boxes)
    assert np.isnan(short[1]).all()
    np.testing.assert_array_equal(np.asarray(short)[[0, 2]], want[[0, 2]])
    grads = jax.grad(lambda x, b: jnp.nansum(roi_align(x, b, 2, max_sampling_ratio=4)),
                     (0, 1))(x, boxes)  # the boxes traced: the bound holds
    assert all(np.isfinite(g).all() for g in grads)
    with pytest.raises(ValueError, match="box 1 needs 5x5 samples"):
        roi_align(x, boxes, 2, max_sampling_ratio=4)
    np.testing.assert_array_equal(roi_align(x, boxes, 2, max_sampling_ratio=5), want)


def test_a_traced_box_naming_no_image_is_nan():
    x, boxes = _big_and_small()
    boxes = boxes.copy()
    boxes[2, 0] = 2.0
    out = jax.jit(lambda x, b: roi_align(x, b, 2, sampling_ratio=2))(x, boxes)
    assert np.isnan(out[2]).all() and np.isfinite(out[:2]).all()
    with pytest.raises(ValueError, match="box 2 has 2.0"):
        roi_align(x, boxes, 2, sampling_ratio=2)


# --- NaN, inf, half precision ---------------------------------------------------------------

# The default run: (2, False) with its derivatives, (1, True) its values (its derivatives
# under -m slow, with the other cases')
@pytest.mark.parametrize("ratio,aligned,derivatives", [
    (2, False, True), pytest.param(-1, True, True, marks=pytest.mark.slow),
    (1, True, False), pytest.param(1, True, True, marks=pytest.mark.slow),
    pytest.param(0, False, True, marks=pytest.mark.slow)])
def test_nonfinite_values_go_where_torchvision_puts_them(ratio, aligned, derivatives):
    x, boxes, pooled, scale, ct = _case(("nonfinite", ratio, aligned))
    rng = _rng("nonfinite", ratio)
    x.reshape(-1)[rng.choice(x.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    x[1, :, 0, 0] = np.inf  # an empty sample of image 1 reads it
    ct.reshape(-1)[rng.choice(ct.size, 2, replace=False)] = [np.inf, np.nan]
    boxes[-1, 1:] = [np.nan, 0.0, 1.0, 1.0]
    boxes[-2, 1:] = [-np.inf, 0.0, np.inf, 1.0]
    want = _torch_derivatives(x, boxes, ct, pooled, scale, ratio, aligned)
    np.testing.assert_array_equal(roi_align(x, boxes, pooled, scale, ratio, aligned), want[0])
    if not derivatives:
        return
    got = _jax_derivatives(x, boxes, ct, pooled, scale, ratio, aligned, bound=BOUND)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-12, equal_nan=True)
    # the box derivative of the finite boxes (torchvision's operator gives none; at a
    # NaN or infinite box, its pure-torch fallback's NaN comes from branches the kernel
    # never takes)
    finite = np.isfinite(boxes).all(axis=1)
    np.testing.assert_allclose(got[2][finite], want[2][finite], rtol=1e-10, atol=1e-12,
                               equal_nan=True)


@pytest.mark.parametrize("ratio", default_share([2, -1], 1))
def test_forward_mode_in_the_maps_alone_keeps_torchs_nonfinite_places(ratio):
    """Constant boxes, a map with NaN and inf: the tangent in the maps alone (no ``0 *
    inf`` from the boxes' weights) and a Hessian-vector product of ``sum(y ** 2)``
    (forward over reverse) are torch's, NaN where torch's are and nowhere else."""
    x, boxes, pooled, scale, _ = _case(("forward nonfinite", ratio))
    rng = _rng("forward nonfinite", ratio)
    x.reshape(-1)[rng.choice(x.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    tangent = rng.standard_normal(x.shape)
    xt, bt, tt = torch.tensor(x, requires_grad=True), torch.tensor(boxes), torch.tensor(tangent)

    def torch_f(x):
        return torch_roi_align(x, bt, scale, pooled, ratio, aligned=False)

    y = torch_f(xt)
    # J t as the transpose of the transpose (torch's double backward), and H t
    ct = torch.zeros_like(y, requires_grad=True)
    (vjp,) = torch.autograd.grad(y, xt, ct, create_graph=True)
    (want_jvp,) = torch.autograd.grad(vjp, ct, tt)
    (g,) = torch.autograd.grad((y ** 2).sum(), xt, create_graph=True)
    (want_hvp,) = torch.autograd.grad(g, xt, tt)

    def f(x):
        return roi_align(x, jnp.asarray(boxes), pooled, scale, ratio, False, BOUND)

    got_jvp = jax.jvp(f, (jnp.asarray(x),), (jnp.asarray(tangent),))[1]
    got_hvp = jax.jvp(jax.grad(lambda x: jnp.sum(f(x) ** 2)), (jnp.asarray(x),),
                      (jnp.asarray(tangent),))[1]
    for got, want in ((got_jvp, want_jvp), (got_hvp, want_hvp)):
        want = want.detach().numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, equal_nan=True)


# each dtype with one grid by default (fixed, adaptive), both under -m slow
@pytest.mark.parametrize("dtype,grid", each_once(["float16", "bfloat16"],
                                                 [(2, False), (-1, True)]))
def test_half_precision_rounds_once(dtype, grid):
    """float32 arithmetic rounded once: the reference in float32 on the same (rounded)
    values, rounded to the dtype."""
    ratio, aligned = grid
    x, boxes, pooled, scale, _ = _case(("half",))
    tx = torch.tensor(x).to(getattr(torch, dtype))
    tb = torch.tensor(boxes).to(getattr(torch, dtype))
    got = roi_align(jnp.asarray(tx.float().numpy(), dtype),
                    jnp.asarray(tb.float().numpy(), dtype), pooled, scale, ratio, aligned)
    assert got.dtype == jnp.dtype(dtype)
    want = torch_roi_align(tx.float(), tb.float(), scale, pooled, ratio,
                           aligned).to(tx.dtype).float().numpy()
    np.testing.assert_array_equal(np.asarray(got.astype(jnp.float32)), want)


# --- argument errors ------------------------------------------------------------------------

def _errors():
    x, b = np.zeros((2, 3, 4, 4)), np.zeros((1, 5))
    return [
        ("input rank", (np.zeros((3, 4, 4)), b), {}, ValueError, "4-D"),
        ("boxes columns", (x, np.zeros((1, 4))), {}, ValueError, r"\[K, 5\]"),
        ("list entry columns", (x, [np.zeros((1, 5))]), {}, ValueError, r"boxes\[0\].*\[L, 4\]"),
        ("empty list", (x, []), {}, ValueError, "empty list"),
        ("dtype", (x, b.astype(np.float32)), {}, TypeError, "input's dtype"),
        ("integer", (x.astype(np.int32), b.astype(np.int32)), {}, TypeError, "floating"),
        ("output_size", (x, b), dict(output_size=(2, 2, 2)), ValueError, "output_size"),
        ("negative output_size", (x, b), dict(output_size=-1), ValueError, "output_size"),
        ("float output_size", (x, b), dict(output_size=2.0), TypeError, "output_size"),
        ("sampling_ratio", (x, b), dict(sampling_ratio=1.5), TypeError, "sampling_ratio"),
        ("aligned", (x, b), dict(aligned=1), TypeError, "aligned"),
        ("bound", (x, b), dict(max_sampling_ratio=0), ValueError, "max_sampling_ratio"),
        ("spatial_scale", (x, b), dict(spatial_scale="1"), TypeError, "spatial_scale"),
        ("empty map", (np.zeros((2, 3, 0, 4)), b), {}, ValueError, "non-empty"),
        ("batch index", (x, np.array([[2.0, 0, 0, 1, 1]])), {}, ValueError, "batch index"),
        ("no images", (np.zeros((0, 3, 4, 4)), b), {}, ValueError, "which has none"),
        ("torch tensor", (torch.zeros(2, 3, 4, 4), b), {}, TypeError, "torch tensor"),
    ]


@pytest.mark.parametrize("name,args,kwargs,error,words", _errors(),
                         ids=[e[0] for e in _errors()])
def test_argument_errors(name, args, kwargs, error, words):
    kwargs = dict(dict(output_size=2), **kwargs)
    with pytest.raises(error, match=words):
        roi_align(*args, **kwargs)


# --- no scatter at any order ----------------------------------------------------------------

def _ops(fn, *args):
    return set(re.findall(r"\b(?:stablehlo|chlo|mhlo)\.([a-z_]+)",
                          jax.jit(fn).lower(*args).as_text()))


def _programs(f, x, b, w, every=True):
    """The derivative programs of ``<w, tanh(f)**2>`` in each array; without ``every``,
    those that hold the others (grad of grad holds grad), and the input's vmap of grad
    only (the boxes' gradient adds nothing back into the maps)."""
    def loss(x, b):
        return jnp.sum(w * jnp.tanh(f(x, b)) ** 2)

    progs = {"forward": f}
    for i, name in ((0, "input"), (1, "boxes")):
        def at(a, x, b, i=i):
            return (a, b) if i == 0 else (x, a)
        progs.update({
            f"vjp {name}": lambda x, b, i=i: jax.vjp(f, x, b)[1](jnp.ones_like(f(x, b)))[i],
            f"jvp {name}": lambda x, b, i=i: jax.jvp(lambda a: f(*at(a, x, b, i)),
                                                     ((x, b)[i],), ((x, b)[i],))[1],
            f"grad {name}": jax.grad(loss, i),
            f"grad of grad {name}": jax.grad(lambda x, b, i=i: jnp.sum(
                jnp.sin(jax.grad(loss, i)(x, b))), i),
            f"jacfwd {name}": jax.jacfwd(jax.grad(loss, i), i),
            f"vmap of grad {name}": lambda x, b, i=i: jax.vmap(
                lambda x, b: jax.grad(loss, i)(x, b), (None, 0))(x, jnp.stack([b, b])),
        })
    if not every:
        progs = {k: p for k, p in progs.items()
                 if k not in ("grad input", "grad boxes", "vmap of grad boxes")}
    return progs


@pytest.mark.parametrize("ratio,every", [(-1, False),
                                         pytest.param(-1, True, marks=pytest.mark.slow),
                                         pytest.param(2, True, marks=pytest.mark.slow)])
def test_no_scatter_at_any_order(ratio, every):
    """The GPU's table: every derivative program free of scatters (by default those that
    hold the others)."""
    x, boxes, pooled, scale, ct = _case(("scatter",), extent=3, count=3)
    x, b, w = jnp.asarray(x[:, :2]), jnp.asarray(boxes), jnp.asarray(ct[:, :2])

    def f(x, b):
        return roi_align(x, b, pooled, scale, ratio, True, 3)

    with strategy_table.use_backend("gpu"):
        for name, program in _programs(f, x, b, w, every).items():
            banned = {op for op in _ops(program, x, b) if "scatter" in op}
            assert not banned, f"{name} lowers to {banned}"


# --- Faster R-CNN's box head pooling --------------------------------------------------------

def _fpn_levels(boxes):
    """The FPN paper's rule: level floor(4 + log2(sqrt(area) / 224)), clamped to 2..5."""
    area = (boxes[:, 3] - boxes[:, 1]) * (boxes[:, 4] - boxes[:, 2])
    level = np.floor(4 + np.log2(np.sqrt(area) / 224) + 1e-6)
    return np.clip(level, 2, 5).astype(int)


@pytest.mark.slow
@pytest.mark.parametrize("bins", [7, 14])  # the box head's and the mask head's
def test_multiscale_roi_align_replay(bins):
    """``MultiScaleRoIAlign(['0', '1', '2', '3'], bins, 2)`` on a 2-image batch of
    512 x 640: levels of stride 4 to 32, each box pooled from its level's map."""
    rng = _rng("multiscale")
    image = (512, 640)
    scales = [2.0 ** -s for s in range(2, 6)]
    maps = [rng.standard_normal((2, 4, int(image[0] * s), int(image[1] * s)))
            for s in scales]
    # ten boxes a level: sqrt(area) in [224 * 2 ** (level - 4), twice that)
    side = np.repeat(224.0 * 2.0 ** (np.arange(2, 6) - 4), 10) * rng.uniform(1, 1.9, 40)
    side = np.minimum(side, 500.0)
    ratio = rng.uniform(0.8, 1.25, 40)
    sizes = np.stack([side * ratio, side / ratio], 1)
    corner = rng.uniform(0, 1, (40, 2)) * (np.array(image[::-1]) - sizes / 2)
    boxes = np.concatenate([rng.integers(0, 2, (40, 1)), corner, corner + sizes], 1)
    levels = _fpn_levels(boxes)
    assert set(levels) == {2, 3, 4, 5}
    ct = rng.standard_normal((40, 4, bins, bins))

    def pooled(maps, boxes):
        out = 0
        for level, (m, s) in enumerate(zip(maps, scales), start=2):
            mine = jnp.asarray(levels == level)[:, None, None, None]
            out = out + jnp.where(mine, roi_align(m, boxes, bins, s, 2), 0.0)
        return out

    y, back = jax.vjp(jax.jit(pooled), [jnp.asarray(m) for m in maps], jnp.asarray(boxes))
    grads, box_grad = back(jnp.asarray(ct))

    tmaps = [torch.tensor(m, requires_grad=True) for m in maps]
    tboxes = torch.tensor(boxes, requires_grad=True)
    want = torch.zeros((40, 4, bins, bins), dtype=torch.float64)
    for level, (m, s) in enumerate(zip(tmaps, scales), start=2):
        idx = torch.tensor(np.nonzero(levels == level)[0])
        want = want.index_put((idx,), torch_roi_align(m, tboxes[idx], s, (bins, bins), 2, False))
    want_grads = torch.autograd.grad(want, tmaps + [tboxes], torch.tensor(ct))
    np.testing.assert_array_equal(y, want.detach().numpy())
    for a, b in zip(list(grads) + [box_grad], want_grads):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-10, atol=1e-12)


# --- jaxpool.torchax ------------------------------------------------------------------------

def test_torchax_lowers_torchvisions_operator():
    """``torchvision::roi_align`` (its schema, registered here where torchvision is absent)
    is in jaxpool.torchax's table, its arguments bound by the schema."""
    torchax_module = pytest.importorskip("jaxpool.torchax")
    try:
        op = torch.ops.torchvision.roi_align.default
    except (AttributeError, RuntimeError):
        library = torch.library.Library("torchvision", "DEF")
        library.define("roi_align(Tensor input, Tensor rois, float spatial_scale, "
                       "SymInt pooled_height, SymInt pooled_width, int sampling_ratio, "
                       "bool aligned) -> Tensor")
        op = torch.ops.torchvision.roi_align.default
    lowered = {o.torch_op: o for o in torchax_module._table()}
    assert op in lowered
    x, boxes = _big_and_small()
    got = lowered[op](jnp.asarray(x), jnp.asarray(boxes), 0.5, 2, 3, -1, True)
    want = torch_roi_align(torch.tensor(x), torch.tensor(boxes), 0.5, (2, 3), -1, True)
    np.testing.assert_array_equal(got, want.numpy())
