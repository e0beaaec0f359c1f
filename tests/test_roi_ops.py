"""roi_pool, ps_roi_align, ps_roi_pool and multi_scale_roi_align against torchvision's
algorithms, written here in torch (float64 where tolerance matters): values (the kernels'
bits), derivatives of the first and second order (torch autograd of the references), every
small extent, ties and zeros after a ReLU, NaN, empty bins, boxes outside the map, the
static bounds, argument errors, no scatter in any derivative's program, the modules, and
jaxpool.torchax's lowering of torchvision's operators.

The references follow torchvision's CPU kernels (``roi_pool_kernel.cpp``,
``ps_roi_align_kernel.cpp``, ``ps_roi_pool_kernel.cpp``) and ``MultiScaleRoIAlign``
(``poolers.py``):

- roi_pool: corners times the scale rounded half away from zero, the extent
  ``max(x2 - x1 + 1, 1)``, bin edges ``floor`` / ``ceil`` clamped to ``[0, size]``, an
  empty bin 0, else the scan ``v > best`` from ``-FLT_MAX`` (its gradient: torch.where's,
  the winner's);
- ps_roi_pool: the extent without the +1, edges clamped to ``[0, size - 1]`` (the
  forward's clamp: the gradient is autograd's of that forward), the pixels summed row by
  row over the area;
- ps_roi_align: roi_align's samples, aligned, a sample outside ``[-1, size]`` 0 unread,
  the mean over the int product of the adaptive counts;
- each ps op's output channel ``c`` of bin ``(i, j)`` reading channel ``(c * PH + i) * PW
  + j``;
- the level mapper ``floor(4 + log2(sqrt(area) / 224) + 1e-6)`` clamped, then roi_align
  per level.
"""

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from default_share import default_share
from test_roi_align import _boxes, _ops, _programs, _torch_axis, torch_roi_align

import jaxpool
from jaxpool import strategy_table

pytestmark = pytest.mark.usefixtures("x64")

FLT_MAX = float(np.finfo(np.float32).max)


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(("roi ops",) + key).encode()))


# --- the torch references -------------------------------------------------------------------

def _round_half_away(x):
    whole = torch.trunc(x)
    return torch.where((x - whole).abs() >= 0.5, whole + torch.sign(x), whole)


def _torch_edges(rois, scale, pooled, limits, plus):
    """Each box's bins' (start, end) rows and columns, as the kernels' ints."""
    corners = _round_half_away(rois[:, 1:5].detach() * scale).long()
    edges = []
    for lo, hi, bins, limit in ((1, 3, pooled[0], limits[0]), (0, 2, pooled[1], limits[1])):
        extent = torch.clamp(corners[:, hi] - corners[:, lo] + plus, min=1)
        size = extent.to(rois.dtype) / bins
        p = torch.arange(bins, dtype=rois.dtype)
        start = torch.floor(p[None] * size[:, None]).long() + corners[:, lo, None]
        end = torch.ceil((p[None] + 1) * size[:, None]).long() + corners[:, lo, None]
        edges.append((start.clamp(0, limit), end.clamp(0, limit)))
    return edges


def _groups(out, pooled):
    """``[K, PH, PW, C]`` computed on every channel -> ``[K, C / (PH * PW), PH, PW]``, bin
    (i, j) of output channel c from channel (c * PH + i) * PW + j."""
    k, ph, pw, c = out.shape
    c_out = c // (ph * pw)
    channel = (torch.arange(c_out)[None, None, :] * ph + torch.arange(ph)[:, None, None]) \
        * pw + torch.arange(pw)[None, :, None]
    picked = torch.gather(out, 3, channel[None].expand(k, ph, pw, c_out))
    return picked.permute(0, 3, 1, 2)


def torch_roi_pool(x, rois, scale, pooled, position_sensitive=False):
    """torchvision's roi_pool (``position_sensitive``: ps_roi_pool) in torch ops."""
    n, c, height, width = x.shape
    k, (ph, pw) = rois.shape[0], pooled
    image = rois[:, 0].detach().long()
    less = 1 if position_sensitive else 0
    (hs, he), (ws, we) = _torch_edges(rois, scale, pooled, (height - less, width - less),
                                      0 if position_sensitive else 1)
    flat = x.reshape(n, c, height * width)
    out = torch.zeros((k, ph, pw, c), dtype=x.dtype)
    for i in range(ph):
        for j in range(pw):
            rows = int((he[:, i] - hs[:, i]).max()) if k else 0
            cols = int((we[:, j] - ws[:, j]).max()) if k else 0
            empty = ((he[:, i] <= hs[:, i]) | (we[:, j] <= ws[:, j]))[:, None]
            if position_sensitive:
                best = torch.zeros((k, c), dtype=x.dtype)
            else:
                best = torch.where(empty, 0.0, -FLT_MAX).to(x.dtype).expand(k, c)
            for dy in range(rows):
                for dx in range(cols):
                    h, w = hs[:, i] + dy, ws[:, j] + dx
                    inside = ((h < he[:, i]) & (w < we[:, j]))[:, None]
                    pos = torch.where(inside[:, 0], h * width + w, 0)
                    v = flat[image, :, pos]
                    if position_sensitive:
                        best = torch.where(inside, best + v, best)
                    else:
                        best = torch.where(inside & (v > best), v, best)
            if position_sensitive:
                area = ((he[:, i] - hs[:, i]) * (we[:, j] - ws[:, j])).to(x.dtype)[:, None]
                best = torch.where(empty, 0.0, best / area.clamp(min=1))
            out = _set(out, i, j, best)
    return _groups(out, pooled) if position_sensitive else out.permute(0, 3, 1, 2)


def _set(out, i, j, value):
    """``out`` with bin (i, j) set to ``value`` ([K, C]), differentiably."""
    mask = torch.zeros(out.shape[1:3], dtype=torch.bool)
    mask[i, j] = True
    return torch.where(mask[None, :, :, None], value[:, None, None, :], out)


def torch_ps_roi_align(x, rois, scale, pooled, ratio):
    """torchvision's ps_roi_align in torch ops."""
    n, c, height, width = x.shape
    k, (ph, pw), dtype = rois.shape[0], pooled, x.dtype
    image = rois[:, 0].detach().long()
    start_w, start_h = rois[:, 1] * scale - 0.5, rois[:, 2] * scale - 0.5
    end_w, end_h = rois[:, 3] * scale - 0.5, rois[:, 4] * scale - 0.5
    roi_w, roi_h = end_w - start_w, end_h - start_h
    bin_h, bin_w = roi_h / ph, roi_w / pw
    if ratio > 0:
        rows = cols = torch.full((k,), ratio, dtype=torch.int64)
        count = torch.full((k,), ratio * ratio, dtype=dtype)
    else:
        def per_bin(extent, bins):
            n_ = torch.ceil(extent.detach() / bins)
            fits = torch.isfinite(n_) & (n_ >= -2 ** 31) & (n_ <= 2 ** 31 - 1)
            return torch.where(fits, n_, -2 ** 31).to(torch.int32)
        raw_h, raw_w = per_bin(roi_h, ph), per_bin(roi_w, pw)
        count = (raw_h * raw_w).to(dtype)  # the kernel's int product
        rows, cols = raw_h.clamp(min=0).long(), raw_w.clamp(min=0).long()
    flat = x.reshape(n, c, height * width)
    out = torch.zeros((k, ph, pw, c), dtype=dtype)
    p_h = torch.arange(ph, dtype=dtype)[None, :]
    p_w = torch.arange(pw, dtype=dtype)[None, :]
    for iy in range(int(rows.max()) if k else 0):
        y = (p_h * bin_h[:, None] + start_h[:, None]) + \
            ((iy + 0.5) * bin_h[:, None]) / torch.clamp(rows, min=1).to(dtype)[:, None]
        in_y, y_low, y_high, hy, ly = _torch_axis(y, height)
        for ix in range(int(cols.max()) if k else 0):
            xx = (p_w * bin_w[:, None] + start_w[:, None]) + \
                ((ix + 0.5) * bin_w[:, None]) / torch.clamp(cols, min=1).to(dtype)[:, None]
            in_x, x_low, x_high, hx, lx = _torch_axis(xx, width)
            used = ((iy < rows) & (ix < cols))[:, None, None]
            live = in_y[:, :, None] & in_x[:, None, :] & used
            sample = 0
            for yi, wy in ((y_low, hy), (y_high, ly)):
                for xi, wx in ((x_low, hx), (x_high, lx)):
                    pos = torch.where(live, yi[:, :, None] * width + xi[:, None, :], 0)
                    w = torch.where(live, wy[:, :, None] * wx[:, None, :], 0.0)
                    v = flat[image[:, None, None], :, pos]
                    v = torch.where(live[..., None], v, 0.0)  # outside: 0, unread
                    term = w[..., None] * v
                    sample = term if isinstance(sample, int) else sample + term
            out = torch.where(used[..., None], out + sample, out)
    return _groups(out / count[:, None, None, None], pooled)


def torch_levels(rois, k_min, k_max, scale0=224, level0=4):
    """torchvision's LevelMapper on [K, 5] boxes (-1: no level)."""
    area = (rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2])
    s = torch.sqrt(area.detach())
    level = torch.floor(level0 + torch.log2(s / scale0) + torch.tensor(1e-6, dtype=s.dtype))
    level = torch.clamp(level, min=k_min, max=k_max)
    return torch.where(torch.isnan(level), -1, torch.nan_to_num(level) - k_min).long()


def torch_multi_scale(maps, rois, pooled, ratio, scales, k_min, k_max):
    levels = torch_levels(rois, k_min, k_max) if len(maps) > 1 else \
        torch.zeros(rois.shape[0], dtype=torch.long)
    out = torch.zeros((rois.shape[0], maps[0].shape[1]) + pooled, dtype=maps[0].dtype)
    for level, (m, s) in enumerate(zip(maps, scales)):
        mine = (levels == level)[:, None, None, None]
        out = torch.where(mine, torch_roi_align(m, rois, s, pooled, ratio, False), out)
    return out


# --- the comparison -------------------------------------------------------------------------

def _compare(jax_fn, torch_fn, x, boxes, ct, *, box_grad, second=None, rtol=1e-10):
    """Values (bits), the input's (and the boxes') gradient, and with ``second`` the
    derivative of <gradient, second> (torch autograd of the reference)."""
    xt = torch.tensor(x, requires_grad=True)
    bt = torch.tensor(boxes, requires_grad=box_grad)
    y = torch_fn(xt, bt)
    inputs = (xt, bt) if box_grad else (xt,)
    grads = torch.autograd.grad(y, inputs, torch.tensor(ct), create_graph=second is not None,
                                allow_unused=True) if y.requires_grad else [None] * len(inputs)
    grads = [torch.zeros_like(i) if g is None else g for g, i in zip(grads, inputs)]

    def f(x, b):
        return jax_fn(x, b)

    got, back = jax.vjp(f, jnp.asarray(x), jnp.asarray(boxes))
    np.testing.assert_array_equal(got, y.detach().numpy(), err_msg="values: the kernel's bits")
    jgrads = back(jnp.asarray(ct))
    for g, w, name in zip(jgrads, grads, ("input", "boxes")):
        np.testing.assert_allclose(g, w.detach().numpy(), rtol=rtol, atol=1e-12,
                                   equal_nan=True, err_msg=f"{name} gradient")
    if second is not None:
        vs = [torch.tensor(v) for v in second[:len(inputs)]]
        inner = sum((g * v).sum() for g, v in zip(grads, vs))
        # (a max's gradient is constant in the input: no graph to differentiate)
        h = torch.autograd.grad(inner, inputs, allow_unused=True) if inner.requires_grad \
            else [None] * len(inputs)

        def s(x, b):
            g = jax.vjp(f, x, b)[1](jnp.asarray(ct))
            return sum(jnp.sum(gi * vi) for gi, vi in zip(g, second[:len(inputs)]))

        hj = jax.jit(jax.grad(s, (0, 1)))(jnp.asarray(x), jnp.asarray(boxes))
        for a, w, name in zip(hj, h, ("input", "boxes")):
            want = np.zeros_like(a) if w is None else w.numpy()
            np.testing.assert_allclose(a, want, rtol=rtol, atol=1e-12,
                                       err_msg=f"second order: {name}")


def _case(key, extent=5, count=12, channels=2, pooled=None, ps=False):
    rng = _rng(*key)
    height, width = (int(s) for s in rng.integers(1, extent + 1, 2))
    scale = float(rng.choice((1.0, 0.5, 2.0)))
    if pooled is None:
        pooled = tuple(int(s) for s in rng.integers(1, 4, 2))
    c = channels * pooled[0] * pooled[1] if ps else channels
    x = rng.standard_normal((2, c, height, width))
    boxes = _boxes(rng, 2, height, width, count, scale)
    ct = rng.standard_normal((count, channels) + pooled)
    return x, boxes, pooled, scale, ct


# --- roi_pool -------------------------------------------------------------------------------

SWEEP = list(range(12))


@pytest.mark.parametrize("key", default_share(SWEEP, 12))
def test_roi_pool_matches_torchvision(key):
    x, boxes, pooled, scale, ct = _case(("roi_pool", key))
    _compare(lambda x, b: jaxpool.roi_pool(x, b, pooled, scale),
             lambda x, b: torch_roi_pool(x, b, scale, pooled), x, boxes, ct, box_grad=False)
    # traced boxes: the map's extent is the bound, every bin fits
    jitted = jax.jit(lambda x, b: jaxpool.roi_pool(x, b, pooled, scale))(x, boxes)
    np.testing.assert_array_equal(jitted, jaxpool.roi_pool(x, boxes, pooled, scale))


EXTENTS = [(h, w) for h in range(1, 6) for w in range(1, 6)]
EXTENT_BINS = ((2, 2), (1, 2))


# The default run: extents 1 x 1 and 5 x 5, each with one of the bins in turn; every
# extent with both under -m slow.
@pytest.mark.parametrize("height,width,pooled", [
    pytest.param(h, w, pooled, marks=() if i % 24 == 0 and j == (i // 24) % 2 else
                 (pytest.mark.slow,))
    for i, (h, w) in enumerate(EXTENTS) for j, pooled in enumerate(EXTENT_BINS)])
def test_every_small_extent_matches(height, width, pooled):
    """Each extent 1-5 per axis, boxes of every kind, every op."""
    rng = _rng("extent", height, width)
    x = rng.standard_normal((2, 4, height, width))
    boxes = _boxes(rng, 2, height, width, 12, 1.0)
    xt, bt = torch.tensor(x), torch.tensor(boxes)
    np.testing.assert_array_equal(jaxpool.roi_pool(x, boxes, pooled),
                                  torch_roi_pool(xt, bt, 1.0, pooled).numpy())
    c = pooled[0] * pooled[1] * 2
    xs, xst = x[:, :c], xt[:, :c]
    np.testing.assert_array_equal(jaxpool.ps_roi_pool(xs, boxes, pooled),
                                  torch_roi_pool(xst, bt, 1.0, pooled, True).numpy())
    for ratio in (2, -1):
        np.testing.assert_array_equal(
            jaxpool.ps_roi_align(xs, boxes, pooled, 1.0, ratio),
            torch_ps_roi_align(xst, bt, 1.0, pooled, ratio).numpy(), err_msg=f"{ratio}")


@pytest.mark.parametrize("position_sensitive", [False, True], ids=["roi_pool", "ps_roi_pool"])
@pytest.mark.parametrize("key", default_share(list(range(6)), 6))
def test_both_reads_of_the_bins_give_the_same_bits(position_sensitive, key):
    """Each pixel its own gather (a small bound) or one gather and a loop (a large one):
    the same values, winners and derivatives of the first and second order, bit for bit,
    on ties, zeros and NaN."""
    import dataclasses

    from jaxpool.roi import kernel
    from jaxpool.roi.plan import plan_roi_pool

    x, boxes, pooled, scale, ct = _case(("both reads", key), ps=position_sensitive)
    x = np.maximum(np.round(x * 2), 0.0) * np.where(_rng("sign", key).random(x.shape) < 0.2,
                                                    -1.0, 1.0)  # ties, +-0
    x[0, 0, 0, 0] = np.nan
    op = "ps_roi_pool" if position_sensitive else "roi_pool"
    plan = plan_roi_pool(x.shape, "float64", boxes.shape, "float64", pooled, scale, None,
                         False, None, op=op, position_sensitive=position_sensitive)
    assert plan.reads_apart
    x, boxes, ct = jnp.asarray(x), jnp.asarray(boxes), jnp.asarray(ct)
    tangent = jnp.asarray(_rng("tangent", key).standard_normal(x.shape))
    results = []
    for apart in (True, False):
        each = dataclasses.replace(plan, reads_apart=apart)

        def f(x, each=each):
            return kernel.roi_pool(each, x, boxes)

        def grad(x, f=f):
            return jax.vjp(f, x)[1](ct)[0]

        got = [f(x), grad(x), jax.jvp(f, (x,), (tangent,))[1],
               jax.grad(lambda x, grad=grad: jnp.sum(jnp.nan_to_num(grad(x)) ** 2))(x),
               jax.jit(f)(x)]
        if not position_sensitive:
            got.append(kernel.roi_pool_argmax(each, x, boxes))
        results.append([np.asarray(g) for g in got])
    for apart, loop in zip(*results):
        assert apart.tobytes() == loop.tobytes()


def test_ties_and_zeros_after_relu_go_to_the_first_pixel():
    """Many equal values (a ReLU's zeros, small integers): the first in row-major order
    wins, and takes the whole gradient."""
    rng = _rng("ties")
    x = np.maximum(rng.integers(-3, 3, (2, 3, 5, 6)).astype(np.float64), 0.0)
    x[0, 0] = 0.0  # a channel of zeros only
    x[1, 1, :, :3] = -0.0
    boxes = _boxes(rng, 2, 5, 6, 12, 1.0)
    ct = rng.standard_normal((12, 3, 2, 3))
    _compare(lambda x, b: jaxpool.roi_pool(x, b, (2, 3)),
             lambda x, b: torch_roi_pool(x, b, 1.0, (2, 3)), x, boxes, ct, box_grad=False)
    got = np.asarray(jaxpool.roi_pool(x, boxes, (2, 3)))
    want = torch_roi_pool(torch.tensor(x), torch.tensor(boxes), 1.0, (2, 3)).numpy()
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_nan_never_wins_and_a_bin_of_nan_is_minus_flt_max():
    """torchvision's scan compares ``v > best``: NaN and -inf never replace the best."""
    rng = _rng("nan")
    x = rng.standard_normal((1, 2, 4, 4))
    x[0, 0, :2, :2] = np.nan
    x[0, 1, 0, 0] = np.inf
    x[0, 1, 2:, 2:] = -np.inf
    boxes = np.array([[0, 0, 0, 1, 1], [0, 0, 0, 3, 3], [0, 2, 2, 3, 3]], np.float64)
    ct = rng.standard_normal((3, 2, 2, 2))
    _compare(lambda x, b: jaxpool.roi_pool(x, b, 2),
             lambda x, b: torch_roi_pool(x, b, 1.0, (2, 2)), x, boxes, ct, box_grad=False)
    out = np.asarray(jaxpool.roi_pool(x, boxes, 2))
    assert (out[0, 0] == -FLT_MAX).all() and (out[2, 1] == -FLT_MAX).all()


def test_second_order_of_the_max_is_zero_and_finite():
    x, boxes, pooled, scale, ct = _case(("second max",))
    rng = _rng("second max v")
    second = (rng.standard_normal(x.shape), rng.standard_normal(boxes.shape))
    _compare(lambda x, b: jaxpool.roi_pool(x, b, pooled, scale),
             lambda x, b: torch_roi_pool(x, b, scale, pooled), x, boxes, ct, box_grad=False,
             second=second)


def test_a_box_past_the_bin_bound_is_nan_under_jit_and_an_error_eagerly():
    x = _rng("bound").standard_normal((2, 3, 8, 8))
    # 2x2 bins: box 0 spans 3 pixels a bin, box 1 five
    boxes = np.array([[0, 0, 0, 5, 5], [1, 0, 0, 9, 9], [1, 1, 1, 2, 2]], np.float64)
    want = torch_roi_pool(torch.tensor(x), torch.tensor(boxes), 1.0, (2, 2)).numpy()
    short = jax.jit(lambda x, b: jaxpool.roi_pool(x, b, 2, max_bin_size=4))(x, boxes)
    assert np.isnan(short[1]).all()
    np.testing.assert_array_equal(np.asarray(short)[[0, 2]], want[[0, 2]])
    exact = jax.jit(lambda x, b: jaxpool.roi_pool(x, b, 2, max_bin_size=5))(x, boxes)
    np.testing.assert_array_equal(exact, want)
    with pytest.raises(ValueError, match="box 1 has bins of up to 5x5"):
        jaxpool.roi_pool(x, boxes, 2, max_bin_size=4)
    grads = jax.grad(lambda x: jnp.nansum(jax.jit(
        lambda x, b: jaxpool.roi_pool(x, b, 2, max_bin_size=4))(x, boxes)))(x)
    assert np.isfinite(grads).all()
    # a traced box naming no image, or with a corner no int holds
    bad = boxes.copy()
    bad[2, 0] = 2.0
    bad[0, 1] = np.nan
    out = np.asarray(jax.jit(lambda x, b: jaxpool.ps_roi_pool(x[:, :2], b, (1, 2)))(x, bad))
    assert np.isnan(out[[0, 2]]).all() and np.isfinite(out[1]).all()
    with pytest.raises(ValueError, match="not finite"):
        jaxpool.roi_pool(x, bad[:2], 2)


# --- ps_roi_pool and ps_roi_align -----------------------------------------------------------

@pytest.mark.parametrize("key", default_share(SWEEP, 12))
def test_ps_roi_pool_matches_torchvision(key):
    x, boxes, pooled, scale, ct = _case(("ps_roi_pool", key), ps=True)
    _compare(lambda x, b: jaxpool.ps_roi_pool(x, b, pooled, scale),
             lambda x, b: torch_roi_pool(x, b, scale, pooled, True), x, boxes, ct,
             box_grad=False)


PS_ALIGN = [(ratio, key) for ratio in (1, 2, 0, -1) for key in range(3)]


def _ps_align_params(every=7):
    """(ratio, key, second_order): the default run takes a fixed ratio (1, to the first
    order) and an adaptive one (0, to the second); -m slow every case to the second."""
    params = []
    for i, case in enumerate(PS_ALIGN):
        if i % every:
            params.append(pytest.param(*case, True, marks=pytest.mark.slow))
        elif case[0] > 0:
            params += [pytest.param(*case, False),
                       pytest.param(*case, True, marks=pytest.mark.slow)]
        else:
            params.append(pytest.param(*case, True))
    return params


@pytest.mark.parametrize("ratio,key,second_order", _ps_align_params())
def test_ps_roi_align_matches_torchvision(ratio, key, second_order):
    x, boxes, pooled, scale, ct = _case(("ps_roi_align", ratio, key), ps=True)
    rng = _rng("ps second", ratio, key)
    second = (rng.standard_normal(x.shape), rng.standard_normal(boxes.shape))
    _compare(lambda x, b: jaxpool.ps_roi_align(x, b, pooled, scale, ratio, 8),
             lambda x, b: torch_ps_roi_align(x, b, scale, pooled, ratio), x, boxes, ct,
             box_grad=True, second=second if second_order else None)
    eager = jaxpool.ps_roi_align(x, boxes, pooled, scale, ratio)
    want = torch_ps_roi_align(torch.tensor(x), torch.tensor(boxes), scale, pooled, ratio)
    np.testing.assert_array_equal(eager, want.numpy())


def test_ps_ops_nonfinite_and_empty_boxes():
    """A NaN in the first pixel does not reach an empty ps_roi_align sample; an empty box
    with adaptive sampling divides 0 by 0 (NaN), as torchvision's kernel."""
    x, boxes, pooled, scale, ct = _case(("ps nonfinite",), ps=True)
    x[:, :, 0, 0] = np.nan
    x[1, 0, -1, -1] = np.inf
    for ratio in (2, -1):
        got = jaxpool.ps_roi_align(x, boxes, pooled, scale, ratio)
        want = torch_ps_roi_align(torch.tensor(x), torch.tensor(boxes), scale, pooled, ratio)
        np.testing.assert_array_equal(got, want.numpy())
    empty = np.array([[0, 1.0, 1.0, 1.0, 2.0]])
    assert np.isnan(jaxpool.ps_roi_align(x, empty, pooled, 1.0, -1)).all()
    np.testing.assert_array_equal(jaxpool.ps_roi_pool(x, boxes, pooled, scale),
                                  torch_roi_pool(torch.tensor(x), torch.tensor(boxes), scale,
                                                 pooled, True).numpy())


def test_a_sum_of_negative_zeros_is_plus_zero():
    """A bin whose samples or pixels are all -0.0 is +0.0, as the kernels' sums start from
    +0.0 (``0.0 + -0.0``): with one sample per bin as with many, plain and jitted."""
    rng = _rng("negative zeros")
    x = -np.zeros((2, 8, 5, 5))
    some = rng.random(x.shape) < 0.15
    x[some] = rng.standard_normal(int(some.sum()))
    boxes = _boxes(rng, 2, 5, 5, 12, 1.0)
    xt, bt = torch.tensor(x), torch.tensor(boxes)
    cases = {f"roi_align {r}": (lambda x, b, r=r: jaxpool.roi_align(x, b, 2, 1.0, r, False, 8),
                                torch_roi_align(xt, bt, 1.0, (2, 2), r, False))
             for r in (1, 2, -1)}
    cases.update({f"ps_roi_align {r}": (
        lambda x, b, r=r: jaxpool.ps_roi_align(x, b, 2, 1.0, r, 8),
        torch_ps_roi_align(xt, bt, 1.0, (2, 2), r)) for r in (1, -1)})
    cases["ps_roi_pool"] = (lambda x, b: jaxpool.ps_roi_pool(x, b, 2, 1.0, 5),
                            torch_roi_pool(xt, bt, 1.0, (2, 2), True))
    cases["multi_scale_roi_align"] = (
        lambda x, b: jaxpool.multi_scale_roi_align([x], b, 2, 1, [(5, 5)]),
        torch_roi_align(xt, bt, 1.0, (2, 2), 1, False))
    for name, (f, want) in cases.items():
        want = want.numpy()
        assert (want == 0).any() and not np.signbit(want[want == 0]).any(), name
        for got in (np.asarray(f(x, boxes)), np.asarray(jax.jit(f)(x, boxes))):
            np.testing.assert_array_equal(got, want, err_msg=name)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=name)


def test_channels_last_and_lists_of_boxes():
    x, boxes, pooled, scale, _ = _case(("layout",), ps=True)
    per_image = [boxes[boxes[:, 0] == i][:, 1:] for i in range(2)]
    rois = np.concatenate([np.concatenate([np.full((len(b), 1), float(i)), b], 1)
                           for i, b in enumerate(per_image)])
    for op in (jaxpool.roi_pool, jaxpool.ps_roi_pool,
               lambda *a, **k: jaxpool.ps_roi_align(*a, sampling_ratio=-1, **k)):
        want = op(x, rois, pooled, scale)
        np.testing.assert_array_equal(op(x, per_image, pooled, scale), want)
        last = op(np.moveaxis(x, 1, -1), rois, pooled, scale, channels_last=True)
        np.testing.assert_array_equal(np.moveaxis(np.asarray(last), -1, 1), want)


def test_no_boxes():
    x = np.ones((2, 8, 4, 5))
    for op in (jaxpool.roi_pool, jaxpool.ps_roi_pool, jaxpool.ps_roi_align):
        assert op(x, np.zeros((0, 5)), 2).shape[0] == 0


# --- multi-scale ----------------------------------------------------------------------------

def _fpn_case(key, image=(256, 320), count=24, channels=3, dtype=np.float64):
    """Maps of strides 4 to 32, boxes of every level (sqrt(area) from 30 to 600 pixels,
    the levels' edges at 112, 224 and 448), one inverted."""
    rng = _rng("fpn", key)
    maps = [rng.standard_normal((2, channels, image[0] >> s, image[1] >> s)).astype(dtype)
            for s in range(2, 6)]
    side = np.exp(rng.uniform(np.log(30), np.log(600), count))
    ratio = rng.uniform(0.7, 1.4, count)
    sizes = np.stack([side * ratio, side / ratio], 1)
    corner = rng.uniform(0, 1, (count, 2)) * (np.array(image[::-1]) - sizes / 2)
    boxes = np.concatenate([rng.integers(0, 2, (count, 1)), corner, corner + sizes], 1)
    boxes[-1, 3] = boxes[-1, 1] - 1  # inverted: no level
    return maps, boxes.astype(dtype), [image, (image[0] - 8, image[1])]


@pytest.mark.parametrize("ratio", default_share([2, -1], 2))
def test_multi_scale_matches_torchvision(ratio):
    maps, boxes, image_shapes = _fpn_case(ratio)
    scales, k_min, k_max = [2.0 ** -s for s in range(2, 6)], 2, 5
    levels = torch_levels(torch.tensor(boxes), k_min, k_max)
    assert set(levels.tolist()) >= {-1, 0, 1, 2}, levels
    rng = _rng("fpn ct", ratio)
    ct = rng.standard_normal((len(boxes), 3, 3, 2))
    tmaps = [torch.tensor(m, requires_grad=True) for m in maps]
    tb = torch.tensor(boxes, requires_grad=True)
    want = torch_multi_scale(tmaps, tb, (3, 2), ratio, scales, k_min, k_max)
    want_grads = torch.autograd.grad(want, tmaps + [tb], torch.tensor(ct))

    def f(maps, b):
        return jaxpool.multi_scale_roi_align(maps, b, (3, 2), ratio, image_shapes,
                                             max_sampling_ratio=40)

    eager = jaxpool.multi_scale_roi_align(maps, boxes, (3, 2), ratio, image_shapes)
    np.testing.assert_array_equal(eager, want.detach().numpy())
    y, back = jax.vjp(jax.jit(f), [jnp.asarray(m) for m in maps], jnp.asarray(boxes))
    np.testing.assert_array_equal(y, want.detach().numpy())
    grads, box_grad = back(jnp.asarray(ct))
    for a, b in zip(list(grads) + [box_grad], want_grads):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-10, atol=1e-12)


def test_multi_scale_float32_levels_and_one_level():
    maps, boxes, image_shapes = _fpn_case("float32", dtype=np.float32)
    want = torch_multi_scale([torch.tensor(m) for m in maps], torch.tensor(boxes), (2, 2), 2,
                             [2.0 ** -s for s in range(2, 6)], 2, 5)
    np.testing.assert_array_equal(
        jaxpool.multi_scale_roi_align(maps, boxes, 2, 2, image_shapes), want.numpy())
    # one map: every box on it, the mapper skipped (the inverted box too)
    one = jaxpool.multi_scale_roi_align(maps[1:2], boxes, 2, 2, image_shapes)
    np.testing.assert_array_equal(one, jaxpool.roi_align(maps[1], boxes, 2, 0.125, 2))


# --- argument errors ------------------------------------------------------------------------

def _errors():
    x, b = np.zeros((2, 8, 4, 4)), np.zeros((1, 5))
    pool, ps_pool, ps_align = jaxpool.roi_pool, jaxpool.ps_roi_pool, jaxpool.ps_roi_align
    ms = jaxpool.multi_scale_roi_align
    maps = [np.zeros((2, 3, 8, 8)), np.zeros((2, 3, 4, 4))]
    return [
        ("roi_pool boxes", pool, (x, np.zeros((1, 4)), 2), {}, ValueError, r"boxes.*\[K, 5\]"),
        ("roi_pool output_size", pool, (x, b, -1), {}, ValueError, "output_size"),
        ("roi_pool bound", pool, (x, b, 2), dict(max_bin_size=0), ValueError, "max_bin_size"),
        ("roi_pool bound type", pool, (x, b, 2), dict(max_bin_size=1.5), TypeError,
         "max_bin_size"),
        ("roi_pool dtype", pool, (x, b.astype(np.float32), 2), {}, TypeError, "input's dtype"),
        ("roi_pool batch index", pool, (x, np.array([[2.0, 0, 0, 1, 1]]), 2), {}, ValueError,
         "batch index"),
        ("ps_roi_pool groups", ps_pool, (x, b, 3), {}, ValueError, "multiple"),
        ("ps_roi_pool zero bins", ps_pool, (x, b, (0, 2)), {}, ValueError, "multiple"),
        ("ps_roi_align groups", ps_align, (x[:, :6], b, 2), {}, ValueError, "multiple"),
        ("ps_roi_align rank", ps_align, (x[0], b, 2), {}, ValueError, "4-D"),
        ("ps_roi_align scale", ps_align, (x, b, 2), dict(spatial_scale="1"), TypeError,
         "spatial_scale"),
        ("ps_roi_align ratio", ps_align, (x, b, 2), dict(sampling_ratio=1.5), TypeError,
         "sampling_ratio"),
        ("ps_roi_align list", ps_align, (x, [np.zeros((1, 5))], 2), {}, ValueError,
         r"ps_roi_align: boxes\[0\]"),
        ("multi_scale features", ms, (np.zeros((2, 3, 8, 8)), b, 2, 2, [(8, 8)]), {},
         TypeError, "features must be a list"),
        ("multi_scale channels", ms, ([maps[0], np.zeros((2, 4, 4, 4))], b, 2, 2, [(8, 8)]),
         {}, ValueError, "channels"),
        ("multi_scale images", ms, (maps, b, 2, 2, []), {}, ValueError, "image_shapes"),
        ("multi_scale image size", ms, (maps, b, 2, 2, [(8, -1)]), {}, ValueError,
         r"image_shapes\[0\]"),
        ("multi_scale canonical", ms, (maps, b, 2, 2, [(8, 8)]), dict(canonical_scale="a"),
         TypeError, "canonical_scale"),
        ("multi_scale boxes", ms, (maps, np.zeros((1, 4)), 2, 2, [(8, 8)]), {}, ValueError,
         r"\[K, 5\]"),
        ("torch tensor", pool, (torch.zeros(2, 3, 4, 4), b, 2), {}, TypeError, "torch tensor"),
    ]


@pytest.mark.parametrize("name,op,args,kwargs,error,words", _errors(),
                         ids=[e[0] for e in _errors()])
def test_argument_errors(name, op, args, kwargs, error, words):
    with pytest.raises(error, match=words):
        op(*args, **kwargs)


# --- no scatter at any order ----------------------------------------------------------------

@pytest.mark.parametrize("op,every", [("roi_pool", False)] + [
    pytest.param(op, True, marks=pytest.mark.slow)
    for op in ("roi_pool", "ps_roi_pool", "ps_roi_align", "multi_scale_roi_align")])
# the default run: roi_pool's kernel (ps_roi_pool's too), the programs that hold the others
# (test_roi_align's _programs); ps_roi_align and multi_scale_roi_align are roi_align's
# align_bins, whose no-scatter test_roi_align runs
def test_no_scatter_at_any_order(op, every):
    x, boxes, pooled, scale, ct = _case(("scatter", op), extent=3, count=3, pooled=(2, 2),
                                        ps=True)
    x, b = jnp.asarray(x[:, :8]), jnp.asarray(boxes)
    pooled = (2, 2)
    f = {
        "roi_pool": lambda x, b: jaxpool.roi_pool(x, b, pooled, scale),
        "ps_roi_pool": lambda x, b: jaxpool.ps_roi_pool(x, b, pooled, scale),
        "ps_roi_align": lambda x, b: jaxpool.ps_roi_align(x, b, pooled, scale, -1, 3),
        "multi_scale_roi_align": lambda x, b: jaxpool.multi_scale_roi_align(
            [x, x[:, :, ::2, ::2]], b, pooled, 2, [(6, 6)]),
    }[op]
    out = f(x, b)
    w = jnp.cos(jnp.arange(out.size, dtype=out.dtype)).reshape(out.shape)
    with strategy_table.use_backend("gpu"):
        for name, program in _programs(f, x, b, w, every).items():
            banned = {o for o in _ops(program, x, b) if "scatter" in o}
            assert not banned, f"{name} lowers to {banned}"


# --- the modules ----------------------------------------------------------------------------

def test_modules_call_their_functions():
    pytest.importorskip("flax")
    eqx = pytest.importorskip("equinox")  # noqa: F841
    import jaxpool.equinox
    import jaxpool.linen
    import jaxpool.nnx

    x, boxes, pooled, scale, _ = _case(("modules",), ps=True)
    last = np.moveaxis(x, 1, -1)
    calls = [
        ("RoIAlign", (pooled, scale, 2), jaxpool.roi_align(x, boxes, pooled, scale, 2)),
        ("RoIPool", (pooled, scale), jaxpool.roi_pool(x, boxes, pooled, scale)),
        ("PSRoIAlign", (pooled, scale, 2), jaxpool.ps_roi_align(x, boxes, pooled, scale, 2)),
        ("PSRoIPool", (pooled, scale), jaxpool.ps_roi_pool(x, boxes, pooled, scale)),
    ]
    for name, args, want in calls:
        want = np.asarray(want)
        flax_want = np.moveaxis(want, 1, -1)
        np.testing.assert_array_equal(
            getattr(jaxpool.linen, name)(*args).apply({}, last, boxes), flax_want)
        np.testing.assert_array_equal(getattr(jaxpool.nnx, name)(*args)(last, boxes), flax_want)
        np.testing.assert_array_equal(getattr(jaxpool.equinox, name)(*args)(x, boxes), want)
    maps, fpn_boxes, image_shapes = _fpn_case("modules")
    features = {"0": maps[0], "1": maps[1], "pool": maps[2]}
    want = jaxpool.multi_scale_roi_align(maps[:2], fpn_boxes, 3, 2, image_shapes)
    for module in (jaxpool.linen.MultiScaleRoIAlign(["0", "1"], 3, 2, channels_last=False),
                   jaxpool.nnx.MultiScaleRoIAlign(["0", "1"], 3, 2, channels_last=False),
                   jaxpool.equinox.MultiScaleRoIAlign(["0", "1"], 3, 2)):
        call = (lambda *a: module.apply({}, *a)) if hasattr(module, "apply") else module
        np.testing.assert_array_equal(call(features, fpn_boxes, image_shapes), want)


# --- jaxpool.torchax ------------------------------------------------------------------------

_SCHEMAS = {
    "roi_pool": "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt "
                "pooled_height, SymInt pooled_width) -> (Tensor, Tensor)",
    "ps_roi_pool": "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt "
                   "pooled_height, SymInt pooled_width) -> (Tensor, Tensor)",
    "ps_roi_align": "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt "
                    "pooled_height, SymInt pooled_width, int sampling_ratio) -> "
                    "(Tensor, Tensor)",
}
_LIBRARY = []  # the schemas defined here where torchvision is absent, kept alive


def _torchvision_op(name):
    try:
        return getattr(torch.ops.torchvision, name).default
    except (AttributeError, RuntimeError):
        if not _LIBRARY:
            _LIBRARY.append(torch.library.Library("torchvision", "FRAGMENT"))
        _LIBRARY[0].define(_SCHEMAS[name])
        return getattr(torch.ops.torchvision, name).default


def test_torchax_lowers_torchvisions_operators():
    """``torchvision::roi_pool``, ``ps_roi_pool`` and ``ps_roi_align`` (their schemas,
    registered here where torchvision is absent) are in jaxpool.torchax's table: each
    returns the output and the kernel's int32 map (argmax, channel mapping)."""
    torchax_module = pytest.importorskip("jaxpool.torchax")
    ops = {name: _torchvision_op(name) for name in _SCHEMAS}
    lowered = {o.torch_op: o for o in torchax_module._table()}
    x, boxes, pooled, scale, _ = _case(("torchax",), ps=True)
    xj, bj = jnp.asarray(x), jnp.asarray(boxes)
    out, argmax = lowered[ops["roi_pool"]](xj, bj, scale, *pooled)
    np.testing.assert_array_equal(out, jaxpool.roi_pool(x, boxes, pooled, scale))
    assert argmax.shape == out.shape and argmax.dtype == jnp.int32
    out, mapping = lowered[ops["ps_roi_pool"]](xj, bj, scale, *pooled)
    np.testing.assert_array_equal(out, jaxpool.ps_roi_pool(x, boxes, pooled, scale))
    # the channel each output reads: (c * PH + i) * PW + j
    c, i, j = np.meshgrid(*(np.arange(s) for s in out.shape[1:]), indexing="ij")
    np.testing.assert_array_equal(mapping[0], (c * pooled[0] + i) * pooled[1] + j)
    out, _ = lowered[ops["ps_roi_align"]](xj, bj, scale, *pooled, -1)
    np.testing.assert_array_equal(out, jaxpool.ps_roi_align(x, boxes, pooled, scale, -1))
