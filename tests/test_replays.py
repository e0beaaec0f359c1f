"""Replays of real models' grid_sample, affine_grid and unfold calls against torch.

Each replay computes what a model's own code computes, on the kind of tensors it feeds the
call, once in torch as the model does and once in JAX with jaxpool, on the same float64
inputs; the values and the gradients with respect to every input (the sampled tensor and
whatever the grid is made of) must agree to rounding:

- torchvision's tensor ``rotate`` and ``affine``: the grid its ``_gen_affine_grid`` builds
  (pixel-centred, normalised after the matrix, one grid expanded over the batch), then
  ``grid_sample(..., padding_mode="zeros", align_corners=False)``, with the fill's mask
  channel where a fill is given;
- RAFT (torchvision's ``models/optical_flow``): the correlation pyramid's lookup, a
  ``[B*H*W, 1, h, w]`` correlation volume read at a 7x7 window around each pixel's flow
  target in absolute pixel coordinates with ``align_corners=True``, at every pyramid
  level; and its convex upsampling of the flow, which unfolds 3x3 neighbourhoods;
- MONAI's ``Warp`` (2-D and 3-D, bilinear, ``align_corners=True``, ``border`` and
  ``zeros``) and ``DVF2DDF``, which warps a displacement field by itself;
- Hugging Face transformers' ``MultiScaleDeformableAttention`` fallback: per level, values
  ``[B*heads, head_dim, H, W]`` read at ``[B*heads, queries, points, 2]``, bilinear, zeros,
  ``align_corners=False``, weighted by the attention;
- the spatial transformer of PyTorch's tutorial: ``affine_grid`` then ``grid_sample``.

Each replay's JAX side is compiled once, values and gradients in one program.
"""

from __future__ import annotations

import functools
import math
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxpool

pytestmark = pytest.mark.usefixtures("x64")


# --- torchvision: tensor rotate and affine ------------------------------------------------

def inverse_affine_matrix(center, angle, translate, scale, shear):
    """torchvision's ``_get_inverse_affine_matrix``: the 6 entries of the map from output
    to input pixels (centred coordinates), for a rotation by ``angle`` degrees, scale,
    shear (degrees, x and y) and translation about ``center``."""
    rot = math.radians(angle)
    sx, sy = (math.radians(s) for s in shear)
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    m = [v / scale for v in (d, -b, 0.0, -c, a, 0.0)]
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty)
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty)
    m[2] += cx
    m[5] += cy
    return m


def expanded_size(matrix, w, h):
    """torchvision's ``_compute_affine_output_size`` (``rotate(expand=True)``): (ow, oh)."""
    pts = np.array([[-0.5 * w, -0.5 * h, 1.0], [-0.5 * w, 0.5 * h, 1.0],
                    [0.5 * w, 0.5 * h, 1.0], [0.5 * w, -0.5 * h, 1.0]], np.float32)
    new = pts @ np.asarray(matrix, np.float32).reshape(2, 3).T
    lo, hi = new.min(0) + np.float32([w * 0.5, h * 0.5]), new.max(0) + np.float32([w * 0.5, h * 0.5])
    tol = np.float32(1e-4)
    size = np.ceil(np.trunc(hi / tol) * tol) - np.floor(np.trunc(lo / tol) * tol)
    return int(size[0]), int(size[1])


def torchvision_grid_torch(theta, w, h, ow, oh):
    """The grid of torchvision's ``_gen_affine_grid``: pixel-centred base points, the
    matrix applied, then divided by the input's half-size. [1, oh, ow, 2]."""
    base = torch.empty(1, oh, ow, 3, dtype=theta.dtype)
    base[..., 0].copy_(torch.linspace(-ow * 0.5 + 0.5, ow * 0.5 + 0.5 - 1, steps=ow))
    base[..., 1].copy_(torch.linspace(-oh * 0.5 + 0.5, oh * 0.5 + 0.5 - 1, steps=oh)
                       .unsqueeze_(-1))
    base[..., 2].fill_(1)
    scaled = theta.transpose(1, 2) / torch.tensor([0.5 * w, 0.5 * h], dtype=theta.dtype)
    return base.view(1, oh * ow, 3).bmm(scaled).view(1, oh, ow, 2)


def torchvision_grid_jax(theta, w, h, ow, oh):
    """The same grid built in JAX."""
    xs = jnp.linspace(-ow * 0.5 + 0.5, ow * 0.5 + 0.5 - 1, ow, dtype=theta.dtype)
    ys = jnp.linspace(-oh * 0.5 + 0.5, oh * 0.5 + 0.5 - 1, oh, dtype=theta.dtype)
    base = jnp.stack([jnp.broadcast_to(xs, (oh, ow)), jnp.broadcast_to(ys[:, None], (oh, ow)),
                      jnp.ones((oh, ow), theta.dtype)], -1).reshape(1, oh * ow, 3)
    scaled = jnp.swapaxes(theta, 1, 2) / jnp.asarray([0.5 * w, 0.5 * h], theta.dtype)
    return (base @ scaled).reshape(1, oh, ow, 2)


def torchvision_apply_torch(img, grid, mode, fill):
    """torchvision's ``_apply_grid_transform`` on a float image [N, C, H, W]."""
    grid = grid.expand(img.shape[0], *grid.shape[1:])
    if fill is not None:
        img = torch.cat((img, torch.ones_like(img[:, :1])), dim=1)
    img = F.grid_sample(img, grid, mode=mode, padding_mode="zeros", align_corners=False)
    if fill is not None:
        mask, img = img[:, -1:], img[:, :-1]
        mask = mask.expand_as(img)
        fill_img = torch.tensor(fill, dtype=img.dtype).view(1, len(fill), 1, 1).expand_as(img)
        if mode == "nearest":
            img = img.clone()
            img[mask < 0.5] = fill_img[mask < 0.5]
        else:
            img = img * mask + (1.0 - mask) * fill_img
    return img


def torchvision_apply_jax(img, grid, mode, fill):
    grid = jnp.broadcast_to(grid, (img.shape[0],) + grid.shape[1:])
    if fill is not None:
        img = jnp.concatenate([img, jnp.ones_like(img[:, :1])], axis=1)
    img = jaxpool.grid_sample(img, grid, mode, "zeros", align_corners=False)
    if fill is not None:
        mask, img = img[:, -1:], img[:, :-1]
        fill_img = jnp.asarray(fill, img.dtype).reshape(1, len(fill), 1, 1)
        if mode == "nearest":
            img = jnp.where(mask < 0.5, fill_img, img)
        else:
            img = img * mask + (1.0 - mask) * fill_img
    return img


# name: (image [N, C, H, W], mode, fill, matrix arguments, expand)
TORCHVISION = {
    "rotate 30 bilinear": (
        (2, 3, 9, 11), "bilinear", None,
        {"center": (0.0, 0.0), "angle": -30.0, "translate": (0.0, 0.0), "scale": 1.0,
         "shear": (0.0, 0.0)}, False),
    "rotate 37 nearest expand fill": (
        (2, 3, 8, 10), "nearest", (0.5, 0.2, 0.9),
        {"center": (0.0, 0.0), "angle": -37.0, "translate": (0.0, 0.0), "scale": 1.0,
         "shear": (0.0, 0.0)}, True),
    "rotate about a corner bilinear fill": (
        (1, 3, 7, 7), "bilinear", (1.0, 1.0, 1.0),
        {"center": (-3.5, -3.5), "angle": -50.0, "translate": (0.0, 0.0), "scale": 1.0,
         "shear": (0.0, 0.0)}, False),
    "affine bilinear": (
        (2, 3, 10, 8), "bilinear", None,
        {"center": (0.0, 0.0), "angle": 25.0, "translate": (1.0, -2.0), "scale": 1.3,
         "shear": (10.0, -5.0)}, False),
    "affine nearest": (
        (2, 1, 6, 9), "nearest", None,
        {"center": (0.0, 0.0), "angle": -70.0, "translate": (-1.0, 0.0), "scale": 0.8,
         "shear": (0.0, 20.0)}, False),
}


def _torchvision_case(name, rng):
    shape, mode, fill, how, expand = TORCHVISION[name]
    h, w = shape[-2:]
    matrix = inverse_affine_matrix(**how)
    ow, oh = expanded_size(matrix, w, h) if expand else (w, h)
    img = rng.uniform(0, 1, shape)  # a float image
    grid = torchvision_grid_torch(torch.tensor(matrix, dtype=torch.float64).reshape(1, 2, 3),
                                  w, h, ow, oh).numpy()
    return (img, grid), {"mode": mode, "fill": fill}, (w, h, ow, oh, matrix)


# --- RAFT: correlation pyramid lookup and convex upsampling --------------------------------

RAFT_LEVELS, RAFT_RADIUS = 2, 3  # 7x7 windows, as raft_small


def raft_lookup_torch(fmap1, fmap2, coords):
    """RAFT's CorrBlock: build the pyramid from two feature maps [B, C, H, W], read it
    around ``coords`` [B, 2, H, W] (absolute (x, y) pixel positions); [B, L*49, H, W]."""
    b, c, h, w = fmap1.shape
    corr = fmap1.view(b, c, h * w).transpose(1, 2) @ fmap2.view(b, c, h * w)
    corr = (corr / torch.sqrt(torch.tensor(c))).view(b * h * w, 1, h, w)
    pyramid = [corr]
    for _ in range(RAFT_LEVELS - 1):
        pyramid.append(F.avg_pool2d(pyramid[-1], kernel_size=2, stride=2))
    side = 2 * RAFT_RADIUS + 1
    d = torch.linspace(-RAFT_RADIUS, RAFT_RADIUS, side)
    delta = torch.stack(torch.meshgrid(d, d, indexing="ij"), dim=-1).view(1, side, side, 2)
    centres = coords.permute(0, 2, 3, 1).reshape(b * h * w, 1, 1, 2)
    out = []
    for level in pyramid:
        points = centres + delta
        lh, lw = level.shape[-2:]
        x, y = points.split([1, 1], dim=-1)
        grid = torch.cat([2 * x / (lw - 1) - 1, 2 * y / (lh - 1) - 1], dim=-1)
        out.append(F.grid_sample(level, grid, mode="bilinear", align_corners=True)
                   .view(b, h, w, -1))
        centres = centres / 2
    return torch.cat(out, dim=-1).permute(0, 3, 1, 2).contiguous()


def raft_lookup_jax(fmap1, fmap2, coords):
    b, c, h, w = fmap1.shape
    corr = jnp.swapaxes(fmap1.reshape(b, c, h * w), 1, 2) @ fmap2.reshape(b, c, h * w)
    corr = (corr / jnp.sqrt(jnp.asarray(c, jnp.float32))).reshape(b * h * w, 1, h, w)
    pyramid = [corr]
    for _ in range(RAFT_LEVELS - 1):
        pyramid.append(jaxpool.avg_pool2d(pyramid[-1], 2, 2))
    side = 2 * RAFT_RADIUS + 1
    # torch's linspace gives these integers exactly; jnp.linspace in float32 need not
    # (-0.99999988 for -1)
    d = jnp.arange(-RAFT_RADIUS, RAFT_RADIUS + 1, dtype=jnp.float32)
    # RAFT stacks the meshgrid's (row, column) as (x, y): its window is the transpose of the
    # square around the point, which for a square window is the same set of points.
    delta = jnp.stack(jnp.meshgrid(d, d, indexing="ij"), axis=-1).reshape(1, side, side, 2)
    centres = jnp.transpose(coords, (0, 2, 3, 1)).reshape(b * h * w, 1, 1, 2)
    out = []
    for level in pyramid:
        points = centres + delta
        lh, lw = level.shape[-2:]
        grid = jnp.concatenate([2 * points[..., :1] / (lw - 1) - 1,
                                2 * points[..., 1:] / (lh - 1) - 1], axis=-1)
        out.append(jaxpool.grid_sample(level, grid, "bilinear", "zeros", align_corners=True)
                   .reshape(b, h, w, -1))
        centres = centres / 2
    return jnp.transpose(jnp.concatenate(out, axis=-1), (0, 3, 1, 2))


def raft_upsample_torch(flow, up_mask):
    """RAFT's ``upsample_flow`` with a mask: each fine pixel a convex combination of the
    3x3 coarse neighbourhood (``F.unfold``) of its coarse pixel. [B, 2, 8H, 8W]."""
    b, _, h, w = flow.shape
    up_mask = torch.softmax(up_mask.view(b, 1, 9, 8, 8, h, w), dim=2)
    up = F.unfold(8 * flow, kernel_size=3, padding=1).view(b, 2, 9, 1, 1, h, w)
    up = torch.sum(up_mask * up, dim=2)
    return up.permute(0, 1, 4, 2, 5, 3).reshape(b, 2, 8 * h, 8 * w)


def raft_upsample_jax(flow, up_mask):
    b, _, h, w = flow.shape
    up_mask = jax.nn.softmax(up_mask.reshape(b, 1, 9, 8, 8, h, w), axis=2)
    up = jaxpool.unfold(8 * flow, 3, padding=1).reshape(b, 2, 9, 1, 1, h, w)
    up = jnp.sum(up_mask * up, axis=2)
    return jnp.transpose(up, (0, 1, 4, 2, 5, 3)).reshape(b, 2, 8 * h, 8 * w)


def _raft_lookup_case(rng):
    b, c, h, w = 1, 6, 6, 6
    fmap1, fmap2 = rng.standard_normal((2, b, c, h, w))
    # make_coords_grid plus a flow of a few pixels: some windows reach past the border
    ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    coords = np.stack([xs, ys])[None] + rng.normal(0, 1.5, (b, 2, h, w))
    return fmap1, fmap2, coords


# --- MONAI: Warp and DVF2DDF --------------------------------------------------------------

def monai_warp_torch(image, ddf, padding):
    """MONAI's ``Warp`` (PyTorch path): the identity grid in voxels plus the displacement,
    normalised per axis for ``align_corners=True``, axes reversed to (x, y[, z])."""
    dims = image.ndim - 2
    mesh = torch.meshgrid(*[torch.arange(0, s) for s in ddf.shape[2:]], indexing="ij")
    ref = torch.stack([torch.stack(mesh, 0)] * ddf.shape[0], 0).to(ddf)
    grid = (ref + ddf).permute([0] + list(range(2, 2 + dims)) + [1])
    grid = torch.stack([grid[..., i] * 2 / (s - 1) - 1 for i, s in enumerate(grid.shape[1:-1])],
                       -1)
    grid = grid[..., list(range(dims - 1, -1, -1))]
    return F.grid_sample(image, grid, mode="bilinear", padding_mode=padding, align_corners=True)


def monai_warp_jax(image, ddf, padding):
    mesh = jnp.meshgrid(*[jnp.arange(s) for s in ddf.shape[2:]], indexing="ij")
    ref = jnp.broadcast_to(jnp.stack(mesh, 0).astype(ddf.dtype), ddf.shape)
    grid = jnp.moveaxis(ref + ddf, 1, -1)
    grid = jnp.stack([grid[..., i] * 2 / (s - 1) - 1 for i, s in enumerate(grid.shape[1:-1])],
                     -1)
    return jaxpool.grid_sample(image, grid[..., ::-1], "bilinear", padding, align_corners=True)


DVF_STEPS = 3


def monai_dvf2ddf_torch(dvf):
    """MONAI's ``DVF2DDF``: scaling and squaring, the field warped by itself each step."""
    ddf = dvf / 2**DVF_STEPS
    for _ in range(DVF_STEPS):
        ddf = ddf + monai_warp_torch(ddf, ddf, "zeros")
    return ddf


def monai_dvf2ddf_jax(dvf):
    ddf = dvf / 2**DVF_STEPS
    for _ in range(DVF_STEPS):
        ddf = ddf + monai_warp_jax(ddf, ddf, "zeros")
    return ddf


# name: (image shape [B, C, *S], padding); the displacement is [B, dims, *S]
MONAI = {
    "2d border": ((2, 2, 6, 5), "border"),
    "2d zeros": ((1, 3, 5, 7), "zeros"),
    "3d border": ((1, 2, 4, 5, 3), "border"),
    "3d zeros": ((2, 1, 3, 4, 5), "zeros"),
}


# --- transformers: multi-scale deformable attention --------------------------------------

DEFORMABLE_SHAPES = ((5, 6), (3, 3))  # (H, W) per level


def deformable_attention_torch(value, locations, weights):
    """``MultiScaleDeformableAttention``'s PyTorch path. value [B, sum(H*W), heads, dim],
    locations [B, queries, heads, levels, points, 2] in [0, 1] (x, y), weights
    [B, queries, heads, levels, points]; returns [B, queries, heads*dim]."""
    b, _, heads, dim = value.shape
    _, q, _, levels, points, _ = locations.shape
    per_level = value.split([h * w for h, w in DEFORMABLE_SHAPES], dim=1)
    grids = 2 * locations - 1
    sampled = []
    for level, (h, w) in enumerate(DEFORMABLE_SHAPES):
        v = per_level[level].flatten(2).transpose(1, 2).reshape(b * heads, dim, h, w)
        g = grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        sampled.append(F.grid_sample(v, g, mode="bilinear", padding_mode="zeros",
                                     align_corners=False))
    weights = weights.transpose(1, 2).reshape(b * heads, 1, q, levels * points)
    out = (torch.stack(sampled, dim=-2).flatten(-2) * weights).sum(-1)
    return out.view(b, heads * dim, q).transpose(1, 2).contiguous()


def deformable_attention_jax(value, locations, weights):
    b, _, heads, dim = value.shape
    _, q, _, levels, points, _ = locations.shape
    splits = np.cumsum([h * w for h, w in DEFORMABLE_SHAPES])[:-1]
    per_level = jnp.split(value, splits, axis=1)
    grids = 2 * locations - 1
    sampled = []
    for level, (h, w) in enumerate(DEFORMABLE_SHAPES):
        v = jnp.swapaxes(per_level[level].reshape(b, h * w, heads * dim), 1, 2)
        v = v.reshape(b * heads, dim, h, w)
        g = jnp.swapaxes(grids[:, :, :, level], 1, 2).reshape(b * heads, q, points, 2)
        sampled.append(jaxpool.grid_sample(v, g, "bilinear", "zeros", align_corners=False))
    weights = jnp.swapaxes(weights, 1, 2).reshape(b * heads, 1, q, levels * points)
    stacked = jnp.stack(sampled, axis=-2)
    out = (stacked.reshape(stacked.shape[:-2] + (-1,)) * weights).sum(-1)
    return jnp.swapaxes(out.reshape(b, heads * dim, q), 1, 2)


def _deformable_case(rng):
    b, q, heads, dim, points = 2, 4, 2, 3, 3
    levels = len(DEFORMABLE_SHAPES)
    tokens = sum(h * w for h, w in DEFORMABLE_SHAPES)
    value = rng.standard_normal((b, tokens, heads, dim))
    # reference points inside the map plus offsets in pixels of each level, as the layer
    # forms them: some locations fall outside [0, 1]
    reference = rng.uniform(0.05, 0.95, (b, q, 1, levels, 1, 2))
    normaliser = np.asarray([[w, h] for h, w in DEFORMABLE_SHAPES], np.float64)
    offsets = rng.normal(0, 1.5, (b, q, heads, levels, points, 2))
    locations = reference + offsets / normaliser[None, None, None, :, None, :]
    logits = rng.standard_normal((b, q, heads, levels * points))
    weights = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return value, locations, weights.reshape(b, q, heads, levels, points)


# --- PyTorch's spatial transformer tutorial -----------------------------------------------

def stn_torch(x, theta):
    grid = F.affine_grid(theta, x.size(), align_corners=False)
    return F.grid_sample(x, grid, align_corners=False)


def stn_jax(x, theta):
    grid = jaxpool.affine_grid(theta, x.shape, align_corners=False)
    return jaxpool.grid_sample(x, grid, align_corners=False)


def _stn_case(rng, shape):
    n, dims = shape[0], len(shape) - 2
    x = np.maximum(rng.standard_normal(shape), 0)  # activations after a ReLU
    eye = np.eye(dims, dims + 1)
    theta = eye + rng.normal(0, 0.3, (n, dims, dims + 1))
    return x, theta


# --- the replays --------------------------------------------------------------------------

def _replay(name):
    """(torch function, JAX function, float64 inputs) of a replay, each drawn from its name."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    kind, _, case = name.partition(": ")
    if kind == "torchvision":
        inputs, kw, _ = _torchvision_case(case, rng)
        return (functools.partial(torchvision_apply_torch, **kw),
                functools.partial(torchvision_apply_jax, **kw), inputs)
    if kind == "raft lookup":
        return raft_lookup_torch, raft_lookup_jax, _raft_lookup_case(rng)
    if kind == "raft upsample":
        b, h, w = 2, 3, 4
        return (raft_upsample_torch, raft_upsample_jax,
                (rng.normal(0, 2, (b, 2, h, w)), rng.standard_normal((b, 576, h, w))))
    if kind == "monai warp":
        shape, padding = MONAI[case]
        dims = len(shape) - 2
        ddf = rng.normal(0, 1.2, (shape[0], dims) + shape[2:])
        return (functools.partial(monai_warp_torch, padding=padding),
                functools.partial(monai_warp_jax, padding=padding),
                (rng.standard_normal(shape), ddf))
    if kind == "monai dvf2ddf":
        shape = (1, 2, 6, 5) if case == "2d" else (1, 3, 4, 3, 5)
        return monai_dvf2ddf_torch, monai_dvf2ddf_jax, (rng.normal(0, 2.0, shape),)
    if kind == "deformable attention":
        return deformable_attention_torch, deformable_attention_jax, _deformable_case(rng)
    if kind == "stn tutorial":
        shape = (2, 3, 7, 6) if case == "2d" else (2, 2, 3, 4, 5)
        return stn_torch, stn_jax, _stn_case(rng, shape)
    raise KeyError(name)


# One replay of each model's call in the default run; the other variants are slow (each
# compiles a program of its own, about two seconds).
SLOW = {"torchvision: rotate 30 bilinear", "torchvision: rotate about a corner bilinear fill",
        "torchvision: affine nearest", "monai warp: 2d zeros", "monai warp: 3d border",
        "monai dvf2ddf: 3d", "stn tutorial: 3d"}
REPLAYS = ([f"torchvision: {k}" for k in TORCHVISION] + ["raft lookup: radius 3",
           "raft upsample: convex"] + [f"monai warp: {k}" for k in MONAI]
           + ["monai dvf2ddf: 2d", "monai dvf2ddf: 3d", "deformable attention: 2 levels",
              "stn tutorial: 2d", "stn tutorial: 3d"])


@functools.cache
def _jax_program(name):
    """The replay's value and its VJP, one compiled program per replay."""
    _, jax_fn, _ = _replay(name)

    @jax.jit
    def program(inputs, cotangent):
        out, back = jax.vjp(jax_fn, *inputs)
        return out, back(cotangent)

    return program


def _torch_run(torch_fn, inputs, seed):
    """torch's value and its gradients for a cotangent drawn from ``seed``."""
    leaves = [torch.tensor(a, requires_grad=True) for a in inputs]
    out = torch_fn(*leaves)
    cotangent = np.random.default_rng(seed).standard_normal(tuple(out.shape))
    grads = torch.autograd.grad(out, leaves, torch.tensor(cotangent), allow_unused=True)
    return cotangent, out.detach().numpy(), [np.zeros_like(a) if g is None else g.numpy()
                                             for a, g in zip(inputs, grads)]


def _close(name, what, got, want):
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (name, what, got.shape,
                                                                 want.shape)
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12 * scale,
                               err_msg=f"{name}: {what}")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in REPLAYS])
def test_replay_matches_torch(name):
    torch_fn, _, inputs = _replay(name)
    inputs = tuple(np.asarray(a, np.float64) for a in inputs)
    cotangent, want_out, want_grads = _torch_run(torch_fn, inputs, zlib.crc32(name.encode()))
    out, grads = _jax_program(name)(tuple(jnp.asarray(a) for a in inputs),
                                    jnp.asarray(cotangent))
    _close(name, "value", out, want_out)
    for i, (g, w) in enumerate(zip(grads, want_grads)):
        _close(name, f"gradient of input {i}", g, w)
        # a replay whose gradient vanishes everywhere would check nothing
        assert np.abs(w).max() > 0 or (" nearest" in name and i == 1), (name, i)


# By default the grids of the torchvision replays the default run takes (an affine map, and
# a rotation that expands its output), every grid under -m slow.
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow)
                                  if f"torchvision: {n}" in SLOW else n for n in TORCHVISION])
def test_torchvision_grid_builder(name):
    """The grid torchvision builds, rebuilt in JAX from the same matrix (the replays above
    give both sides torch's grid)."""
    _, _, (w, h, ow, oh, matrix) = _torchvision_case(name, np.random.default_rng(0))
    theta = np.asarray(matrix, np.float64).reshape(1, 2, 3)
    want = torchvision_grid_torch(torch.tensor(theta), w, h, ow, oh).numpy()
    got = torchvision_grid_jax(jnp.asarray(theta), w, h, ow, oh)
    _close(name, "grid", got, want)
    if TORCHVISION[name][-1]:
        assert (ow, oh) != (w, h)  # the expanded case does expand
