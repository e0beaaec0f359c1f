"""multi_scale_deformable_attention against the pure-PyTorch references, written out below
(float64 where tolerance matters): values on a sweep of small levels, derivatives of the
value, the locations and the weights to order 3 in reverse and forward mode, per-level
point counts and RT-DETRv2's discrete sampling, the real modules' configurations, NaN and
inf, the same bits under transforms, half precision, bad calls, the coordinates at exact
edges (jaxpool's formula, torch's CPU kernel's, the CUDA kernel's), one sort per call and
no scatter in any derivative's program on the GPU and TPU tables.

The references:

- ``torch_msda``: Hugging Face's ``multi_scale_deformable_attention`` (Deformable DETR's
  PyTorch path; mmcv's ``multi_scale_deformable_attn_pytorch`` is the same code): one
  ``F.grid_sample(bilinear, zeros, align_corners=False)`` of ``2 * loc - 1`` per level;
- ``torch_msda_v2``: RT-DETRv2's ``deformable_attention_core_func_v2``: a point count per
  level, and its ``discrete`` method, ``int64(loc * [W, H] + 0.5)`` clamped by ``H - 1``.

torch has no forward mode for ``grid_sample``; a forward-mode derivative of the reference
is taken as the derivative of its VJP in the cotangent (``J t = d/du <J^T u, t>``), which
torch's double backward gives at every order.
"""

import functools
import re
import zlib
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from default_share import default_share
from jaxpool import strategy_table
from jaxpool.deformable import kernel as deformable_kernel
from jaxpool.deformable.functions import multi_scale_deformable_attention as msda

pytestmark = pytest.mark.usefixtures("x64")


# --- the torch references ---------------------------------------------------------------------

def torch_msda(value, spatial_shapes, sampling_locations, attention_weights):
    """Hugging Face's ``multi_scale_deformable_attention``. value [B, S, heads, dim],
    sampling_locations [B, Q, heads, L, P, 2], attention_weights [B, Q, heads, L, P];
    returns [B, Q, heads * dim]."""
    batch_size, _, num_heads, hidden_dim = value.shape
    _, num_queries, num_heads, num_levels, num_points, _ = sampling_locations.shape
    value_list = value.split([height * width for height, width in spatial_shapes], dim=1)
    sampling_grids = 2 * sampling_locations - 1
    sampling_value_list = []
    for level_id, (height, width) in enumerate(spatial_shapes):
        value_l_ = (value_list[level_id].flatten(2).transpose(1, 2)
                    .reshape(batch_size * num_heads, hidden_dim, height, width))
        sampling_grid_l_ = sampling_grids[:, :, :, level_id].transpose(1, 2).flatten(0, 1)
        sampling_value_l_ = F.grid_sample(value_l_, sampling_grid_l_, mode="bilinear",
                                          padding_mode="zeros", align_corners=False)
        sampling_value_list.append(sampling_value_l_)
    attention_weights = attention_weights.transpose(1, 2).reshape(
        batch_size * num_heads, 1, num_queries, num_levels * num_points)
    output = ((torch.stack(sampling_value_list, dim=-2).flatten(-2) * attention_weights)
              .sum(-1).view(batch_size, num_heads * hidden_dim, num_queries))
    return output.transpose(1, 2).contiguous()


def torch_msda_v2(value, value_spatial_shapes, sampling_locations, attention_weights,
                  num_points_list, method="default"):
    """RT-DETRv2's ``deformable_attention_core_func_v2``. value [B, S, heads, dim],
    sampling_locations [B, Q, heads, sum(P_l), 2], attention_weights [B, Q, heads,
    sum(P_l)]; returns [B, Q, heads * dim]."""
    bs, _, n_head, c = value.shape
    _, Len_q, _, _, _ = sampling_locations.shape
    split_shape = [h * w for h, w in value_spatial_shapes]
    value_list = value.permute(0, 2, 3, 1).flatten(0, 1).split(split_shape, dim=-1)
    if method == "default":
        sampling_grids = 2 * sampling_locations - 1
    elif method == "discrete":
        sampling_grids = sampling_locations
    sampling_grids = sampling_grids.permute(0, 2, 1, 3, 4).flatten(0, 1)
    sampling_locations_list = sampling_grids.split(num_points_list, dim=-2)
    sampling_value_list = []
    for level, (h, w) in enumerate(value_spatial_shapes):
        value_l = value_list[level].reshape(bs * n_head, c, h, w)
        sampling_grid_l = sampling_locations_list[level]
        if method == "default":
            sampling_value_l = F.grid_sample(value_l, sampling_grid_l, mode="bilinear",
                                             padding_mode="zeros", align_corners=False)
        elif method == "discrete":
            sampling_coord = (sampling_grid_l * torch.tensor([[w, h]], device=value.device)
                              + 0.5).to(torch.int64)
            # FIX ME? for rectangle input
            sampling_coord = sampling_coord.clamp(0, h - 1)
            sampling_coord = sampling_coord.reshape(bs * n_head, Len_q * num_points_list[level],
                                                    2)
            s_idx = (torch.arange(sampling_coord.shape[0], device=value.device)
                     .unsqueeze(-1).repeat(1, sampling_coord.shape[1]))
            sampling_value_l = value_l[s_idx, :, sampling_coord[..., 1], sampling_coord[..., 0]]
            sampling_value_l = sampling_value_l.permute(0, 2, 1).reshape(
                bs * n_head, c, Len_q, num_points_list[level])
        sampling_value_list.append(sampling_value_l)
    attn_weights = attention_weights.permute(0, 2, 1, 3).reshape(bs * n_head, 1, Len_q,
                                                                 sum(num_points_list))
    weighted_sample_locs = torch.concat(sampling_value_list, dim=-1) * attn_weights
    output = weighted_sample_locs.sum(-1).reshape(bs, n_head * c, Len_q)
    return output.permute(0, 2, 1)


# --- cases ------------------------------------------------------------------------------------

def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _case(key, levels, *, heads=2, dim=3, points=2, batch=2, queries=3, per_level=None,
          spread=0.2):
    """value, locations in [-spread, 1 + spread] and weights, float64; with ``per_level``
    (a count per level) the flat layout."""
    rng = _rng(key, levels, heads, dim, points, batch, queries, per_level)
    tokens = sum(h * w for h, w in levels)
    value = rng.standard_normal((batch, tokens, heads, dim))
    if per_level is None:
        lead = (batch, queries, heads, len(levels), points)
    else:
        lead = (batch, queries, heads, sum(per_level))
    locations = rng.uniform(-spread, 1 + spread, lead + (2,))
    weights = rng.standard_normal(lead)
    return value, locations, weights


def _torch_fn(levels, mode="bilinear", per_level=None):
    """The reference for a call, as a function of (value, locations, weights) tensors."""
    levels = [tuple(level) for level in levels]
    if mode == "bilinear" and per_level is None:
        return lambda v, loc, w: torch_msda(v, levels, loc, w)
    method = "default" if mode == "bilinear" else "discrete"

    def fn(v, loc, w):
        counts = per_level
        if counts is None:
            b, q, h, n, p, _ = loc.shape
            loc, w, counts = loc.reshape(b, q, h, n * p, 2), w.reshape(b, q, h, n * p), [p] * n
        return torch_msda_v2(v, levels, loc, w, list(counts), method)
    return fn


def _jax_fn(levels, mode="bilinear", per_level=None):
    return lambda v, loc, w: msda(v, levels, loc, w, mode=mode, points_per_level=per_level)


def _close(got, want, name, rtol=1e-10, atol=1e-12):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=atol,
                               equal_nan=True, err_msg=name)


# --- values -----------------------------------------------------------------------------------

LEVEL_SETS = [((1, 1),), ((3, 5),), ((4, 4), (2, 2)), ((1, 3), (5, 2)),
              ((5, 7), (3, 3), (1, 1)), ((2, 6), (1, 4), (3, 1))]
SWEEP = [(levels, heads, points) for levels in LEVEL_SETS for heads in (1, 3)
         for points in (1, 2, 4)]


@pytest.mark.parametrize("levels,heads,points", default_share(SWEEP, 9))
def test_values_match_the_reference(levels, heads, points):
    v, loc, w = _case("values", levels, heads=heads, points=points, spread=0.4)
    want = torch_msda(torch.tensor(v), levels, torch.tensor(loc), torch.tensor(w)).numpy()
    _close(msda(v, levels, loc, w), want, "values", rtol=1e-12, atol=1e-13)


PER_LEVEL = [(((4, 4), (2, 2), (1, 1)), (3, 1, 2)), (((3, 5), (2, 2)), (1, 4)),
             (((1, 1),), (2,))]


@pytest.mark.parametrize("levels,counts,mode", [
    (*case, mode) if (i + (mode == "nearest")) % 2 == 0 else
    pytest.param(*case, mode, marks=pytest.mark.slow)
    for i, case in enumerate(PER_LEVEL) for mode in ("bilinear", "nearest")])
def test_points_per_level_and_discrete_sampling_match_rtdetrv2(levels, counts, mode):
    """RT-DETRv2's flat layout; its discrete method clamps x by H - 1 as well, which this
    reference shares with jaxpool only where x's pixel stays below H: on a wide level
    the locations' x are kept there (``test_discrete_sampling_clamps_each_axis``)."""
    v, loc, w = _case("per level", levels, per_level=counts, spread=0.6)
    if mode == "nearest":
        start = 0
        for (h, width), count in zip(levels, counts):
            # x from [-0.6, 1.6] onto [-0.6, top): its pixel below min(H, W)
            top = (min(h, width) - 0.5) / width - 1e-6
            x = loc[..., start:start + count, 0]
            loc[..., start:start + count, 0] = -0.6 + (x + 0.6) * (top + 0.6) / 2.2
            start += count
    want = _torch_fn(levels, mode, counts)(*map(torch.tensor, (v, loc, w))).numpy()
    got = msda(v, levels, loc, w, mode=mode, points_per_level=counts)
    _close(got, want, "values", rtol=1e-12, atol=1e-13)
    # the same points in the [.., L, P, 2] layout where every level has as many
    if len(set(counts)) == 1:
        shaped = msda(v, levels, loc.reshape(loc.shape[:3] + (len(levels), counts[0], 2)),
                      w.reshape(w.shape[:3] + (len(levels), counts[0])), mode=mode)
        np.testing.assert_array_equal(shaped, got)


def test_discrete_sampling_clamps_each_axis():
    """jaxpool clamps x into [0, W - 1]; RT-DETRv2 clamps x into [0, H - 1] too ("FIX ME?
    for rectangle input"), which reads column H - 1 for x past it on a wide level (and
    indexes past the row on a tall one). On square levels the two agree everywhere."""
    levels, counts = ((2, 5),), (1,)
    v, _, w = _case("clamp", levels, per_level=counts, batch=1, queries=1, heads=1)
    loc = np.array([0.95, 0.3]).reshape(1, 1, 1, 1, 2)  # x: pixel int(4.75 + 0.5) = 5 -> 4
    got = np.asarray(msda(v, levels, loc, w, mode="nearest", points_per_level=counts))
    row = 1 * 5 + 4  # y: int(0.6 + 0.5) = 1
    np.testing.assert_array_equal(got[0, 0], w[0, 0, 0, 0] * v[0, row, 0])
    theirs = torch_msda_v2(torch.tensor(v), levels, torch.tensor(loc), torch.tensor(w),
                           list(counts), "discrete")
    np.testing.assert_array_equal(theirs.numpy()[0, 0], w[0, 0, 0, 0] * v[0, 1 * 5 + 1, 0])
    square = ((3, 3), (2, 2))
    v, loc, w = _case("clamp square", square, per_level=(2, 2), spread=3.0)
    loc.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, 1e30, -1e30, 2.0 ** 70]
    want = torch_msda_v2(torch.tensor(v), square, torch.tensor(loc), torch.tensor(w), [2, 2],
                         "discrete").numpy()
    _close(msda(v, square, loc, w, mode="nearest", points_per_level=(2, 2)), want, "square",
           rtol=1e-12, atol=1e-13)


# --- derivatives ------------------------------------------------------------------------------

def _torch_reverse(fn, arrays, directions, order):
    """The reverse-mode derivatives of the reference: ``d^k <fn, ct>`` contracted with the
    next directions, each order's gradient in every array."""
    xs = [torch.tensor(a, requires_grad=True) for a in arrays]
    scalar = (fn(*xs) * torch.tensor(directions[0])).sum()
    out = []
    for k in range(order):
        if scalar.requires_grad:
            grads = torch.autograd.grad(scalar, xs, create_graph=k + 1 < order,
                                        allow_unused=True)
        else:  # a constant: the derivatives below were constants
            grads = [None] * len(xs)
        grads = [torch.zeros_like(x) if g is None else g for x, g in zip(xs, grads)]
        out.append([g.detach().numpy() for g in grads])
        if k + 1 < order:
            scalar = sum((g * torch.tensor(d)).sum() for g, d in zip(grads, directions[k + 1]))
    return out


def _jax_reverse(fn, arrays, directions, order):
    ct = jnp.asarray(directions[0])

    def level(k):
        if k == 0:
            return lambda *xs: jnp.sum(fn(*xs) * ct)
        below = level(k - 1)
        return lambda *xs: sum(jnp.sum(g * d) for g, d in
                               zip(jax.grad(below, (0, 1, 2))(*xs), directions[k]))

    xs = [jnp.asarray(a) for a in arrays]
    # one program for every order (the highest holds the lower ones)
    every = jax.jit(lambda *xs: [jax.grad(level(k), (0, 1, 2))(*xs) for k in range(order)])
    return [[np.asarray(g) for g in grads] for grads in every(*xs)]


def _torch_forward(fn, arrays, tangents, order):
    """``D^k fn [t, ..., t]``, k = 1..order: each order the derivative of the last one's
    VJP in its cotangent (torch's double backward)."""
    xs = [torch.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(t) for t in tangents]
    current, out = fn(*xs), []
    for k in range(order):
        if not current.requires_grad:  # a constant: every further derivative is 0
            current = torch.zeros_like(current)
            out.append(current.numpy())
            continue
        u = torch.zeros_like(current, requires_grad=True)
        grads = torch.autograd.grad(current, xs, u, create_graph=True, allow_unused=True)
        inner = sum((g * t).sum() for g, t in zip(grads, ts) if g is not None)
        if not torch.is_tensor(inner) or not inner.requires_grad:
            current = torch.zeros_like(current)
        else:
            current = torch.autograd.grad(inner, u, create_graph=k + 1 < order)[0]
        out.append(current.detach().numpy())
    return out


def _jax_forward(fn, arrays, tangents, order):
    xs, ts = [jnp.asarray(a) for a in arrays], tuple(jnp.asarray(t) for t in tangents)

    def level(k):
        if k == 0:
            return fn
        below = level(k - 1)
        return lambda *a: jax.jvp(below, a, ts)[1]

    every = jax.jit(lambda *xs: [level(k + 1)(*xs) for k in range(order)])
    return [np.asarray(d) for d in every(*xs)]


def _directions(key, arrays, out_shape, order):
    rng = _rng("directions", key)
    return [rng.standard_normal(out_shape)] + [
        [rng.standard_normal(a.shape) for a in arrays] for _ in range(order - 1)]


DERIVATIVE_CASES = [
    ("bilinear", ((3, 4), (2, 2), (1, 1)), None),
    ("bilinear", ((2, 3), (1, 2)), (3, 1)),
    ("nearest", ((3, 3), (2, 2)), (2, 1)),
    ("bilinear", ((1, 1), (4, 2)), None),
]


@pytest.mark.parametrize("mode,levels,counts", default_share(DERIVATIVE_CASES, 2))
def test_reverse_mode_to_order_3_matches_torch(mode, levels, counts):
    arrays = _case(("reverse", mode), levels, per_level=counts, heads=2, dim=2, queries=2)
    out_shape = (2, 2, 4)
    directions = _directions(("reverse", mode, levels), arrays, out_shape, 3)
    got = _jax_reverse(_jax_fn(levels, mode, counts), arrays, directions, 3)
    want = _torch_reverse(_torch_fn(levels, mode, counts), arrays, directions, 3)
    for k, (g, w) in enumerate(zip(got, want)):
        for name, a, b in zip(("value", "locations", "weights"), g, w):
            _close(a, b, f"order {k + 1} in {name}", rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("mode,levels,counts", default_share(DERIVATIVE_CASES, 2)[::-1])
def test_forward_mode_to_order_3_matches_torch(mode, levels, counts):
    arrays = _case(("forward", mode), levels, per_level=counts, heads=2, dim=2, queries=2)
    rng = _rng("tangents", mode, levels)
    tangents = [rng.standard_normal(a.shape) for a in arrays]
    got = _jax_forward(_jax_fn(levels, mode, counts), arrays, tangents, 3)
    want = _torch_forward(_torch_fn(levels, mode, counts), arrays, tangents, 3)
    for k, (g, w) in enumerate(zip(got, want)):
        _close(g, w, f"order {k + 1}", rtol=1e-9, atol=1e-10)


# --- the real modules' configurations ---------------------------------------------------------

CONFIGS = {
    # Deformable DETR: 4 levels, 8 heads, 4 points, d_model 256 (head_dim 32), a small
    # pyramid (strides 8-64 of a 64 x 80 image)
    "deformable detr": (((8, 10), (4, 5), (2, 3), (1, 2)), 8, 32, 4, None, "bilinear"),
    # RT-DETR: 3 levels, 8 heads, 4 points, hidden 256 (strides 8-32 of 64 x 64)
    "rt-detr": (((8, 8), (4, 4), (2, 2)), 8, 32, 4, None, "bilinear"),
    # RT-DETRv2's discrete cross-attention, a point count per level
    "rt-detrv2 discrete": (((8, 8), (4, 4), (2, 2)), 8, 32, None, (4, 4, 4), "nearest"),
}


@pytest.mark.parametrize("name", default_share(list(CONFIGS), 2))
def test_real_configurations_values_and_gradients(name):
    """Reference points inside the map plus offsets of a few pixels of each level, the
    weights a softmax over the level's points, as the layers form them."""
    levels, heads, dim, points, counts, mode = CONFIGS[name]
    rng = _rng("config", name)
    b, q = 2, 5
    tokens = sum(h * w for h, w in levels)
    value = rng.standard_normal((b, tokens, heads, dim))
    n = len(levels) * points if points else sum(counts)
    level_of = np.repeat(np.arange(len(levels)), points if points else counts)
    normaliser = np.asarray([[w, h] for h, w in levels], np.float64)[level_of]
    reference = rng.uniform(0.05, 0.95, (b, q, 1, 1, 2))
    locations = reference + rng.normal(0, 1.5, (b, q, heads, n, 2)) / normaliser
    logits = rng.standard_normal((b, q, heads, n))
    weights = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    if counts is None:
        locations = locations.reshape(b, q, heads, len(levels), points, 2)
        weights = weights.reshape(b, q, heads, len(levels), points)
    arrays = (value, locations, weights)
    ct = rng.standard_normal((b, q, heads * dim))
    got = _jax_reverse(_jax_fn(levels, mode, counts), arrays, [ct], 1)[0]
    want = _torch_reverse(_torch_fn(levels, mode, counts), arrays, [ct], 1)[0]
    _close(msda(*arrays[:1], levels, *arrays[1:], mode=mode, points_per_level=counts),
           _torch_fn(levels, mode, counts)(*map(torch.tensor, arrays)).numpy(), "values",
           rtol=1e-12, atol=1e-13)
    for label, a, c in zip(("value", "locations", "weights"), got, want):
        _close(a, c, f"gradient in {label}", rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_one_op_is_the_per_level_grid_sample_composition():
    """jaxpool's per-level composition (tests/test_replays.py's) gives the same values."""
    import jaxpool

    levels = ((5, 6), (3, 3))
    v, loc, w = _case("composition", levels, points=3, spread=0.3)
    b, _, heads, dim = v.shape
    _, q, _, n, points, _ = loc.shape
    per_level = np.split(v, np.cumsum([h * w_ for h, w_ in levels])[:-1], axis=1)
    sampled = []
    for level, (h, w_) in enumerate(levels):
        vl = np.swapaxes(per_level[level].reshape(b, h * w_, heads * dim), 1, 2)
        grid = np.swapaxes(2 * loc[:, :, :, level] - 1, 1, 2).reshape(b * heads, q, points, 2)
        sampled.append(jaxpool.grid_sample(vl.reshape(b * heads, dim, h, w_), grid,
                                           align_corners=False))
    weights = np.swapaxes(w, 1, 2).reshape(b * heads, 1, q, n * points)
    stacked = jnp.stack(sampled, -2)
    out = (stacked.reshape(stacked.shape[:-2] + (-1,)) * weights).sum(-1)
    want = jnp.swapaxes(out.reshape(b, heads * dim, q), 1, 2)
    _close(msda(v, levels, loc, w), want, "composition", rtol=1e-13, atol=1e-14)


# --- transforms, NaN and inf, half precision --------------------------------------------------

@pytest.mark.parametrize("mode,dtype,more", [
    ("bilinear", "float32", False), pytest.param("bilinear", "float32", True,
                                                 marks=pytest.mark.slow),
    pytest.param("nearest", "float64", True, marks=pytest.mark.slow)])
def test_transforms_give_the_same_bits(mode, dtype, more):
    """The values, bit for bit: plain, jit, vmap, jvp, vjp (with ``more``: vmap over the
    value only and of a batch of calls, linearize, vmap of jvp); and the gradient under jit
    and eagerly."""
    levels, counts = ((3, 4), (2, 2)), (1, 2)
    v, loc, w = _case(("bits", mode), levels, per_level=counts)
    v, loc, w = (jnp.asarray(a, dtype) for a in (v, loc, w))

    def f(v, loc, w):
        return msda(v, levels, loc, w, mode=mode, points_per_level=counts)

    eager = f(v, loc, w)
    one = lambda v, loc, w: f(v[None], loc[None], w[None])[0]  # noqa: E731
    y, back = jax.vjp(f, v, loc, w)  # (its pullback: the gradient below)
    values = {
        "jit": jax.jit(f)(v, loc, w),
        "vmap": jax.vmap(one)(v, loc, w),
        "jvp": jax.jvp(f, (v, loc, w), (v, loc, w))[0],
        "vjp": y,
    }
    if more:  # (the slow run)
        values["vmap over the value only"] = jax.vmap(f, (0, None, None))(
            jnp.stack([v, v]), loc, w)[0]
        values["linearize"] = jax.linearize(f, v, loc, w)[0]
        values["vmap of calls"] = jax.vmap(f)(jnp.stack([v, v]), jnp.stack([loc, loc]),
                                              jnp.stack([w, w]))[1]
        values["vmap of jvp"] = jax.vmap(
            lambda v, loc, w: jax.jvp(one, (v, loc, w), (v, loc, w))[0])(v, loc, w)
    for name, value in values.items():
        np.testing.assert_array_equal(value, eager, err_msg=name)
    ct = jnp.ones_like(eager)  # an argument of the jitted call: a constant XLA may fold
    grads = back(ct)
    jit_grads = jax.jit(lambda ct, *a: jax.vjp(f, *a)[1](ct))(ct, v, loc, w)
    for name, a, b in zip(("value", "locations", "weights"), grads, jit_grads):
        np.testing.assert_array_equal(a, b, err_msg=f"gradient in {name}")


NONFINITE = (np.nan, np.inf, -np.inf, 1e30, -1e30)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_nan_and_inf_go_where_the_reference_puts_them(mode):
    """In the value, the locations and the weights; the gradients in the value for a
    NaN or inf value and cotangent (finite locations)."""
    levels, counts = ((3, 3), (2, 2)), (2, 2)
    v, loc, w = _case(("nonfinite", mode), levels, per_level=counts, spread=0.5)
    rng = _rng("nonfinite", mode)
    v.reshape(-1)[rng.choice(v.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    loc.reshape(-1)[rng.choice(loc.size, 5, replace=False)] = NONFINITE
    w.reshape(-1)[rng.choice(w.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    want = _torch_fn(levels, mode, counts)(*map(torch.tensor, (v, loc, w))).numpy()
    got = np.asarray(msda(v, levels, loc, w, mode=mode, points_per_level=counts))
    assert np.isnan(want).any() and np.isinf(want).any()
    _close(got, want, "values")
    # gradients: NaN and inf in the value and the cotangent, finite locations and weights
    v2, loc2, w2 = _case(("nonfinite gradients", mode), levels, per_level=counts)
    v2.reshape(-1)[rng.choice(v2.size, 2, replace=False)] = [np.nan, -np.inf]
    ct = rng.standard_normal(want.shape)
    ct.reshape(-1)[rng.choice(ct.size, 2, replace=False)] = [np.inf, np.nan]
    got = _jax_reverse(_jax_fn(levels, mode, counts), (v2, loc2, w2), [ct], 1)[0]
    want = _torch_reverse(_torch_fn(levels, mode, counts), (v2, loc2, w2), [ct], 1)[0]
    _close(got[0], want[0], "gradient in value")
    _close(got[2], want[2], "gradient in weights")
    # the locations: torch's factored sums can give inf where the products give NaN
    np.testing.assert_array_equal(np.isfinite(got[1]), np.isfinite(want[1]))
    finite = np.isfinite(want[1])
    _close(got[1][finite], want[1][finite], "gradient in locations")


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_forward_mode_in_the_value_alone_keeps_the_references_nonfinite_places(mode):
    """Constant locations and weights, a value with NaN and inf: the tangent in the value
    alone (no ``0 * inf`` from the constants) and a Hessian-vector product of
    ``sum(y ** 2)`` (forward over reverse) are the reference's, NaN where its are."""
    levels, counts = ((3, 3), (2, 2)), (2, 2)
    v, loc, w = _case(("value alone", mode), levels, per_level=counts)
    rng = _rng("value alone", mode)
    v.reshape(-1)[rng.choice(v.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    t = rng.standard_normal(v.shape)
    reference, lt, wt = _torch_fn(levels, mode, counts), torch.tensor(loc), torch.tensor(w)
    vt = torch.tensor(v, requires_grad=True)
    y = reference(vt, lt, wt)
    u = torch.zeros_like(y, requires_grad=True)
    (vjp,) = torch.autograd.grad(y, vt, u, create_graph=True)
    (want_jvp,) = torch.autograd.grad(vjp, u, torch.tensor(t))
    (g,) = torch.autograd.grad((reference(vt, lt, wt) ** 2).sum(), vt, create_graph=True)
    (want_hvp,) = torch.autograd.grad(g, vt, torch.tensor(t))

    def f(v):
        return msda(v, levels, loc, w, mode=mode, points_per_level=counts)

    v, t = jnp.asarray(v), jnp.asarray(t)
    got_jvp = jax.jvp(f, (v,), (t,))[1]
    got_hvp = jax.jvp(jax.grad(lambda v: jnp.sum(f(v) ** 2)), (v,), (t,))[1]
    for name, got, want in (("jvp", got_jvp, want_jvp), ("hvp", got_hvp, want_hvp)):
        want = want.detach().numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        _close(got, want, name)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_zeros_keep_the_references_sign(mode):
    """A value of -0.0 among a few values: each output's zero has the reference's sign
    (its sum over the points starts from +0.0), plain and jitted."""
    levels, counts = ((3, 3), (2, 2)), (2, 2)
    v, loc, w = _case(("zeros", mode), levels, per_level=counts)
    rng = _rng("zeros", mode)
    v = np.where(rng.random(v.shape) < 0.1, v, -0.0)
    want = _torch_fn(levels, mode, counts)(*map(torch.tensor, (v, loc, w))).numpy()

    def f(v, loc, w):
        return msda(v, levels, loc, w, mode=mode, points_per_level=counts)

    assert (want == 0).any()
    for got in (f(v, loc, w), jax.jit(f)(v, loc, w)):
        _close(got, want, "values")
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_computes_in_float32_and_rounds_once(dtype):
    levels = ((3, 4), (2, 2))
    v, loc, w = _case("half", levels)
    half = [torch.tensor(a).to(getattr(torch, dtype)) for a in (v, loc, w)]
    got = msda(*[jnp.asarray(t.float().numpy(), dtype) for t in half[:1]], levels,
               *[jnp.asarray(t.float().numpy(), dtype) for t in half[1:]])
    assert got.dtype == jnp.dtype(dtype)
    want = torch_msda(half[0].float(), levels, half[1].float(), half[2].float())
    want = want.to(getattr(torch, dtype)).float().numpy()
    eps = float(torch.finfo(getattr(torch, dtype)).eps)
    np.testing.assert_allclose(np.asarray(got.astype(jnp.float32)), want, rtol=eps,
                               atol=eps * 1e-2)


def test_empty_queries_and_channels():
    levels = ((2, 2),)
    for shape in ((2, 0, 3, 1, 2), (0, 4, 3, 1, 2)):
        b = shape[0]
        out = msda(np.zeros((b, 4, 3, 5)), levels, np.zeros(shape + (2,)), np.zeros(shape))
        assert out.shape == (b, shape[1], 15)
    out = msda(np.zeros((2, 4, 3, 0)), levels, np.zeros((2, 4, 3, 1, 2, 2)),
               np.zeros((2, 4, 3, 1, 2)))
    assert out.shape == (2, 4, 0)


# --- the coordinates at exact edges -----------------------------------------------------------
# A point whose pixel coordinate is an integer (a pixel centre) or an edge (-1, size) is
# read the same from either side, but its derivative in the location is one-sided: floor
# decides which corners it weighs. The three implementations round the coordinate
# differently, so such a point can land on different sides:
#   jaxpool:        ((2 * loc - 1) + 1) * (size / 2) - 0.5, each operation rounded;
#   torch's CPU:    the same, the last multiply-subtract fused into one FMA (the vectorized
#                   grid_sample kernel, as compiled for x86 with FMA);
#   the CUDA kernel (Deformable DETR's, mmcv's): loc * size - 0.5, one FMA (nvcc contracts
#                   it), and a point at or past -1 or size read by no corner at all.

def _fma(a, b, c, dtype):
    """``a * b + c`` rounded once to ``dtype`` (to nearest, ties to even)."""
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    f = dtype(float(exact))
    candidates = (f, np.nextafter(f, dtype(-np.inf)), np.nextafter(f, dtype(np.inf)))
    bits = {np.float32: np.uint32, np.float64: np.uint64}[dtype]
    return min(candidates, key=lambda x: (abs(Fraction(float(x)) - exact),
                                          int(np.asarray(x).view(bits)) & 1))


def _jaxpool_formula(loc, size):
    loc = np.asarray(loc)
    t = loc.dtype.type
    g = t(2) * loc - t(1)
    return (g + t(1)) * t(size / 2) - t(0.5)


def _torch_cpu_formula(loc, size):
    loc = np.asarray(loc)
    t = loc.dtype.type
    g = t(2) * loc - t(1)
    return np.array([_fma(gi + t(1), t(size / 2), t(-0.5), t) for gi in np.ravel(g)],
                    t).reshape(loc.shape)


def _cuda_formula(loc, size):
    loc = np.asarray(loc)
    t = loc.dtype.type
    return np.array([_fma(li, t(size), t(-0.5), t) for li in np.ravel(loc)],
                    t).reshape(loc.shape)


def _probe(locations, width, dtype=np.float64):
    """jaxpool's pixel coordinate x of each location, read off the op: a 1 x width level
    holding x itself at pixel x, read at x in [0, 1): the output is e * 0 + w * 1 = x."""
    locations = np.asarray(locations, dtype)
    n = locations.size
    value = (np.arange(width) == 1).astype(dtype).reshape(1, width, 1, 1)
    loc = np.stack([locations, np.full_like(locations, 0.5)], -1).reshape(1, n, 1, 1, 1, 2)
    out = msda(value, [(1, width)], loc, np.ones((1, n, 1, 1, 1), dtype))
    return np.asarray(out).reshape(n)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_each_variants_formula_for_the_pixel_coordinate(dtype):
    """jaxpool's coordinate is its formula's, bit for bit; torch's CPU grid_sample (the
    reference) computes the FMA formula; the CUDA formula differs from both in the last
    bit for a share of locations."""
    width = 7
    rng = np.random.default_rng(0)
    # locations whose x lies in [0, 1): the probe reads x itself
    loc = rng.uniform(0.5 / width, 1.5 / width, 4000).astype(dtype)
    got = _probe(loc, width, dtype)
    ours = _jaxpool_formula(loc, width)
    np.testing.assert_array_equal(got, ours)
    # torch's CPU kernel, read the same way from the reference
    value = torch.tensor((np.arange(width) == 1).astype(dtype)).reshape(1, width, 1, 1)
    tloc = torch.tensor(np.stack([loc, np.full_like(loc, 0.5)], -1)).reshape(1, -1, 1, 1, 1, 2)
    theirs = torch_msda(value, [(1, width)], tloc,
                        torch.ones(tloc.shape[:-1], dtype=value.dtype)).reshape(-1).numpy()
    np.testing.assert_array_equal(theirs, _torch_cpu_formula(loc, width))
    differs = np.mean(theirs != got)
    assert 0.1 < differs < 0.6, differs  # the last bit, not the value
    np.testing.assert_allclose(theirs, got, rtol=0, atol=4 * np.finfo(dtype).eps)
    cuda = _cuda_formula(loc, width)
    assert 0.1 < np.mean(cuda != ours) < 0.9
    assert 0.05 < np.mean(cuda != theirs) < 0.9


def test_exact_edges_take_the_side_jaxpools_coordinate_falls_on():
    """At a pixel centre the derivative in the location is the right-hand one (floor's
    side) of jaxpool's coordinate; where the reference's FMA puts the same location a
    rounding off the centre, torch's gradient is the one of the side it lands on. At
    x = -1 exactly jaxpool (and the reference) read pixel 0 with weight 0, so the
    derivative is pixel 0's value times the size; the CUDA kernel skips such a point
    (derivative 0)."""

    def d_loc(values, loc_x, torch_side=False):
        width = len(values)
        value = np.asarray(values, np.float64).reshape(1, width, 1, 1)
        loc = np.array([loc_x, 0.5]).reshape(1, 1, 1, 1, 1, 2)
        w = np.ones((1, 1, 1, 1, 1))
        if torch_side:
            return _torch_reverse(_torch_fn([(1, width)]), (value, loc, w),
                                  [np.ones((1, 1, 1))], 1)[0][1].reshape(-1)[0]
        return float(jax.grad(lambda l: msda(value, [(1, width)], l, w).sum())(loc)
                     .reshape(-1)[0])

    def slope(values, x):  # d/dloc on the cell [floor(x), floor(x) + 1]
        base = int(np.floor(x))
        high = values[base + 1] if base + 1 < len(values) else 0.0
        low = values[base] if base >= 0 else 0.0
        return (high - low) * len(values)

    values = [1.0, 10.0, 100.0, 1000.0, 10000.0]
    width = len(values)
    outcomes = set()
    for i in range(width - 1):
        centre = (i + 0.5) / width  # a pixel centre in the real numbers
        for loc_x in (np.nextafter(centre, -1.0), centre, np.nextafter(centre, 2.0)):
            ours, fused = _jaxpool_formula(loc_x, width), _torch_cpu_formula(loc_x, width)
            if ours != np.floor(ours):
                continue  # not on a centre for jaxpool
            assert d_loc(values, loc_x) == pytest.approx(slope(values, ours), rel=1e-12)
            assert d_loc(values, loc_x, True) == pytest.approx(slope(values, fused),
                                                               rel=1e-12)
            outcomes.add(bool(np.floor(fused) == np.floor(ours)))
    assert True in outcomes  # both on the centre (or the same side of it)
    # x = -1: with a width of 4, loc = -1/8 lands on it exactly in every formula
    values = [3.0, 5.0, 7.0, 11.0]
    loc_x = -1 / 8
    assert _jaxpool_formula(loc_x, 4) == _torch_cpu_formula(loc_x, 4) == -1.0
    assert d_loc(values, loc_x) == pytest.approx(values[0] * 4, rel=1e-12)
    assert d_loc(values, loc_x, True) == pytest.approx(values[0] * 4, rel=1e-12)
    # the CUDA kernel's test `w_im > -1` fails there: no corner, no derivative
    assert not _cuda_formula(loc_x, 4) > -1


# --- one sort, and no scatter at any order ----------------------------------------------------

def _ops(fn, *args):
    return re.findall(r"\b(?:stablehlo|chlo|mhlo)\.([a-z_]+)", jax.jit(fn).lower(*args).as_text())


def _programs(f, arrays, w, every=True):
    """The derivative programs of ``<w, tanh(f)**2>`` in each array; without ``every``,
    those that hold the others (grad of grad holds grad; hvp, jacfwd's rows)."""
    def loss(*a):
        return jnp.sum(w * jnp.tanh(f(*a)) ** 2)

    progs = {"forward": f}
    for i, name in enumerate(("value", "locations", "weights")):
        def at(a, arrays, i=i):
            return tuple(a if j == i else arrays[j] for j in range(3))

        progs.update({
            f"vjp {name}": lambda *a, i=i: jax.vjp(f, *a)[1](jnp.ones_like(f(*a)))[i],
            f"jvp {name}": lambda *a, i=i: jax.jvp(lambda x: f(*at(x, a, i)), (a[i],),
                                                   (a[i],))[1],
            f"grad {name}": jax.grad(loss, i),
            f"grad of grad {name}": jax.grad(lambda *a, i=i: jnp.sum(
                jnp.sin(jax.grad(loss, i)(*a))), i),
            f"hvp {name}": lambda *a, i=i: jax.jvp(lambda x: jax.grad(loss, i)(*at(x, a, i)),
                                                   (a[i],), (a[i],))[1],
            f"jacfwd {name}": jax.jacfwd(jax.grad(loss, i), i),
            f"vmap of grad {name}": lambda *a, i=i: jax.vmap(
                lambda v, l, ww: jax.grad(loss, i)(v[None], l[None], ww[None]))(*a),
        })
    progs["third order"] = jax.grad(lambda *a: jnp.sum(jnp.cos(jax.grad(
        lambda *b: jnp.sum(jnp.sin(jax.grad(loss, (0, 1, 2))(*b)[1])), (0, 1, 2))(*a)[0])))
    if not every:
        held = {f"{kind} {name}" for name in ("value", "locations", "weights")
                for kind in ("grad", "jacfwd")} | {"vmap of grad locations",
                                                   "vmap of grad weights"}
        progs = {k: p for k, p in progs.items() if k not in held}
    return progs


@pytest.mark.parametrize("backend,every", [("gpu", False),
                                           pytest.param("gpu", True, marks=pytest.mark.slow),
                                           pytest.param("tpu", True, marks=pytest.mark.slow)])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_no_scatter_at_any_order(mode, backend, every):
    """The GPU's and TPU's tables: every derivative program free of scatters (by default
    those that hold the others); the check fails on a gather-based port's gradient."""
    levels, counts = ((3, 3), (2, 2)), (1, 1)
    v, loc, w = _case(("scatter", mode), levels, per_level=counts, batch=2, queries=2)
    arrays = tuple(jnp.asarray(a) for a in (v, loc, w))
    out_w = jnp.asarray(_rng("scatter w").standard_normal((2, 2, 6)))

    def f(v, loc, w):
        return msda(v, levels, loc, w, mode=mode, points_per_level=counts)

    for name, program in _programs(f, arrays, out_w, every).items():
        with strategy_table.use_backend(backend):
            ops = _ops(program, *arrays)
        banned = {op for op in ops if "scatter" in op}
        assert not banned, f"{name} lowers to {banned}"
    with strategy_table.use_backend(backend):
        assert any("scatter" in op for op in _ops(jax.grad(
            lambda v: jnp.sum(jnp.take(v.reshape(-1, 2), jnp.array([0, 3, 3]), axis=0))),
            arrays[0]))


def test_one_sort_per_call_for_every_level_head_channel_and_order():
    """Three levels, three heads, four channels: the forward, the gradient and a second
    derivative each lower to one sort (XLA drops the forward's, which nothing uses)."""
    levels = ((3, 4), (2, 2), (1, 3))
    v, loc, w = _case("one sort", levels, heads=3, dim=4, points=1, queries=2)
    arrays = tuple(jnp.asarray(a) for a in (v, loc, w))

    def loss(*a):
        return jnp.sum(jnp.sin(msda(a[0], levels, *a[1:])))

    def second(*a):
        return sum(jnp.sum(g ** 2) for g in jax.grad(loss, (0, 1, 2))(*a))

    programs = {"forward": loss, "gradient": jax.grad(loss, (0, 1, 2)),
                "second derivative": jax.grad(second, (0, 1, 2))}
    with strategy_table.use_backend("gpu"):
        for name, program in programs.items():
            assert _ops(program, *arrays).count("sort") == 1, name


@pytest.mark.slow
def test_the_compiled_derivatives_sort_once():
    levels = ((3, 4), (2, 2), (1, 3))
    arrays = tuple(jnp.asarray(a) for a in _case("one sort", levels, heads=3, dim=4, points=1,
                                                 queries=2))

    def loss(*a):
        return jnp.sum(jnp.sin(msda(a[0], levels, *a[1:])))

    first = jax.grad(loss, (0, 1, 2))
    second = jax.grad(lambda *a: sum(jnp.sum(g ** 2) for g in first(*a)), (0, 1, 2))
    with strategy_table.use_backend("gpu"):
        for program in (first, second):
            text = jax.jit(program).lower(*arrays).compile().as_text()
            assert len(re.findall(r"[)\]] sort\(", text)) == 1


@pytest.mark.parametrize("mode,orders", [("bilinear", 1),
                                         pytest.param("bilinear", 2, marks=pytest.mark.slow),
                                         pytest.param("nearest", 2, marks=pytest.mark.slow)])
def test_cpu_scatter_adds_as_the_sorted_sum(mode, orders):
    """The CPU's table adds back with a scatter-add (one thread, the rows' order): the
    same derivatives as the sorted sum, to rounding."""
    assert strategy_table.lookup("deformable attention", "reads added back", "cpu") == "scatter"
    levels, counts = ((3, 4), (2, 2)), (1, 2)
    arrays = tuple(jnp.asarray(a) for a in _case(("adding", mode), levels, per_level=counts))

    def derivatives():
        # a new function for each table: a traced one would keep its program
        def loss(*a):
            return jnp.sum(jnp.sin(msda(a[0], levels, *a[1:], mode=mode,
                                        points_per_level=counts)))
        first = jax.grad(loss, (0, 1, 2))
        if orders == 1:
            return first
        second = jax.grad(lambda *a: sum(jnp.sum(jnp.cos(d)) for d in first(*a)), (0, 1, 2))
        return lambda *a: (*first(*a), *second(*a))

    results = {}
    for backend in ("cpu", "gpu"):
        with strategy_table.use_backend(backend):
            program = jax.jit(derivatives())
            lowered = program.lower(*arrays)
            results[backend] = lowered.compile()(*arrays)
        assert ("scatter" in lowered.as_text()) == (backend == "cpu"), backend
    for a, b in zip(results["cpu"], results["gpu"]):
        _close(a, b, "cpu against gpu table", rtol=1e-12, atol=1e-13)


# --- bad calls --------------------------------------------------------------------------------

def _errors():
    v = np.zeros((2, 6, 2, 3))
    loc, w = np.zeros((2, 4, 2, 2, 1, 2)), np.zeros((2, 4, 2, 2, 1))
    levels = [(2, 2), (1, 2)]
    flat_loc, flat_w = np.zeros((2, 4, 2, 3, 2)), np.zeros((2, 4, 2, 3))
    return [
        ("last axis 3", (v, levels, np.zeros((2, 4, 2, 2, 1, 3)), w), {}, ValueError,
         r"last axis.*\(x, y\).*\(2, 4, 2, 2, 1, 3\)"),
        ("areas", (v, [(2, 2), (1, 3)], loc, w), {}, ValueError,
         r"spatial_shapes .*cover 7 positions.*S = 6"),
        ("heads", (np.zeros((2, 6, 3, 3)), levels, loc, w), {}, ValueError,
         r"3 heads.*has 2"),
        ("weights heads", (v, levels, loc, np.zeros((2, 4, 3, 2, 1))), {}, ValueError,
         r"attention_weights.*heads differs"),
        ("integer value", (v.astype(np.int32), levels, loc, w), {}, TypeError,
         r"value must have a floating dtype.*int32"),
        ("integer locations", (v, levels, loc.astype(np.int64), w), {}, TypeError,
         r"sampling_locations must have a floating dtype.*int64"),
        ("mixed dtypes", (v, levels, loc.astype(np.float32), w), {}, TypeError,
         r"one dtype.*float64, float32 and float64"),
        ("levels", (v, [(2, 2), (1, 1), (1, 1)], loc, w), {}, ValueError,
         r"L = 3 levels.*\(2, 4, 2, 2, 1, 2\)"),
        ("points", (v, levels, loc, np.zeros((2, 4, 2, 2, 3))), {}, ValueError,
         r"P differs"),
        ("batch", (np.zeros((3, 6, 2, 3)), levels, loc, w), {}, ValueError,
         r"batch 3.*has 2"),
        ("queries", (v, levels, loc, np.zeros((2, 5, 2, 2, 1))), {}, ValueError,
         r"Q differs"),
        ("value rank", (v[0], levels, loc, w), {}, ValueError, r"\[B, S, heads, head_dim\]"),
        ("locations rank", (v, levels, loc[..., 0, :], w), {}, ValueError,
         r"\[B, Q, heads, L, P, 2\]"),
        ("mode", (v, levels, loc, w), dict(mode="bicubic"), ValueError, r"mode.*'bicubic'"),
        ("empty level", (v, [(2, 3), (0, 4)], loc, w), {}, ValueError, r"level 1 is 0 x 4"),
        ("level not a pair", (v, [(2, 2, 1), (1, 2)], loc, w), {}, ValueError,
         r"has 3 sizes"),
        ("float sizes", (v, [(2.0, 2), (1, 2)], loc, w), {}, TypeError, r"spatial_shapes"),
        ("no levels", (v, [], loc, w), {}, ValueError, r"no level"),
        ("points_per_level sum", (v, levels, flat_loc, flat_w), dict(points_per_level=(1, 1)),
         ValueError, r"sum to 2.*\(2, 4, 2, 3, 2\)"),
        ("points_per_level length", (v, levels, flat_loc, flat_w),
         dict(points_per_level=(3,)), ValueError, r"2 positive ints"),
        ("points_per_level zero", (v, levels, flat_loc, flat_w),
         dict(points_per_level=(3, 0)), ValueError, r"points_per_level"),
        ("points_per_level an int", (v, levels, flat_loc, flat_w), dict(points_per_level=3),
         TypeError, r"points_per_level"),
        ("flat weights", (v, levels, flat_loc, w), dict(points_per_level=(1, 2)), ValueError,
         r"attention_weights must be \[B, Q, heads, sum\(points_per_level\)\]"),
        ("torch tensor", (torch.zeros(2, 6, 2, 3), levels, loc, w), {}, TypeError,
         r"torch tensor"),
    ]


@pytest.mark.parametrize("name,args,kwargs,error,words", _errors(),
                         ids=[e[0] for e in _errors()])
def test_bad_calls_name_the_argument_and_value(name, args, kwargs, error, words):
    with pytest.raises(error, match=words):
        msda(*args, **kwargs)


def test_bad_calls_raise_before_any_computation():
    """Under jit, with abstract arrays: the checks need no value."""
    v = jax.ShapeDtypeStruct((2, 6, 2, 3), jnp.float32)
    loc = jax.ShapeDtypeStruct((2, 4, 2, 2, 1, 2), jnp.float32)
    w = jax.ShapeDtypeStruct((2, 4, 2, 2, 1), jnp.float32)
    assert jax.eval_shape(lambda *a: msda(a[0], [(2, 2), (1, 2)], *a[1:]), v, loc, w).shape \
        == (2, 4, 6)
    with pytest.raises(ValueError, match="cover 7"):
        jax.eval_shape(lambda *a: msda(a[0], [(2, 2), (1, 3)], *a[1:]), v, loc, w)
    with pytest.raises(TypeError, match="static"):
        jax.jit(lambda s, *a: msda(a[0], s, *a[1:]))(jnp.array([[2, 2], [1, 2]]),
                                                       jnp.zeros((2, 6, 2, 3)),
                                                       jnp.zeros((2, 4, 2, 2, 1, 2)),
                                                       jnp.zeros((2, 4, 2, 2, 1)))


def test_spatial_shapes_as_an_array_and_the_shape_rule():
    import jaxpool.shapes

    levels = np.array([[2, 2], [1, 2]])
    v, loc, w = np.zeros((2, 6, 2, 3)), np.zeros((2, 4, 2, 2, 1, 2)), np.zeros((2, 4, 2, 2, 1))
    assert msda(v, levels, loc, w).shape == (2, 4, 6)
    assert msda(v, jnp.asarray(levels), loc, w).shape == (2, 4, 6)
    rule = jaxpool.shapes.multi_scale_deformable_attention
    assert rule(v.shape, levels, loc.shape, w.shape) == (2, 4, 6)
    assert rule((1, 16 + 4, 8, 32), [(4, 4), (2, 2)], (1, 300, 8, 7, 2), (1, 300, 8, 7),
                mode="nearest", points_per_level=(4, 3)) == (1, 300, 256)
    for name, args, kwargs, error, _ in _errors():
        if name in ("torch tensor", "integer value", "integer locations", "mixed dtypes"):
            continue  # the rule sees no array and no dtype
        with pytest.raises(error) as raised:
            msda(*args, **kwargs)
        with pytest.raises(error) as info:
            rule(args[0].shape, args[1], args[2].shape, args[3].shape, **kwargs)
        assert str(info.value) == str(raised.value), name


def test_the_parity_twin_is_the_reference():
    from parity.deformable import torch_twin

    levels = ((3, 4), (2, 2))
    v, loc, w = _case("twin", levels)
    tensors = list(map(torch.tensor, (v, loc, w)))
    np.testing.assert_array_equal(torch_twin(*tensors, spatial_shapes=levels).numpy(),
                                  torch_msda(tensors[0], levels, *tensors[1:]).numpy())
    v, loc, w = _case("twin flat", levels, per_level=(1, 3))
    tensors = list(map(torch.tensor, (v, loc, w)))
    for mode, method in (("bilinear", "default"), ("nearest", "discrete")):
        got = torch_twin(*tensors, spatial_shapes=levels, mode=mode, points_per_level=(1, 3))
        want = torch_msda_v2(tensors[0], levels, *tensors[1:], [1, 3], method)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
