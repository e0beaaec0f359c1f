"""The torch twin of ``jaxpool.multi_scale_deformable_attention``: torch has no such op in
``torch.nn.functional``, so its twin is the pure-PyTorch reference the models run where
their CUDA extension is not built, written here as they write it.

- :func:`multi_scale_deformable_attention`: Hugging Face's (``transformers``' Deformable
  DETR, the same as mmcv's ``multi_scale_deformable_attn_pytorch``): one
  ``F.grid_sample(bilinear, zeros, align_corners=False)`` per level of ``2 * loc - 1``, the
  samples weighted and summed.
- :func:`deformable_attention_core_func_v2`: RT-DETRv2's, with a point count per level and
  its ``discrete`` method (``int64(loc * size + 0.5)``, clamped by ``H - 1`` on both axes
  as it writes it).

:func:`torch_twin` is the twin parity's suite calls: either reference, as a call's
arguments ask.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

__all__ = ["deformable_attention_core_func_v2", "multi_scale_deformable_attention",
           "torch_twin"]


def multi_scale_deformable_attention(value: torch.Tensor, spatial_shapes: Sequence,
                                     sampling_locations: torch.Tensor,
                                     attention_weights: torch.Tensor) -> torch.Tensor:
    """value ``[B, S, heads, dim]``, sampling_locations ``[B, Q, heads, L, P, 2]``,
    attention_weights ``[B, Q, heads, L, P]`` -> ``[B, Q, heads * dim]``."""
    batch, _, heads, dim = value.shape
    _, queries, _, levels, points, _ = sampling_locations.shape
    value_list = value.split([h * w for h, w in spatial_shapes], dim=1)
    sampling_grids = 2 * sampling_locations - 1
    sampled = []
    for level, (h, w) in enumerate(spatial_shapes):
        value_l = value_list[level].flatten(2).transpose(1, 2).reshape(batch * heads, dim, h, w)
        grid_l = sampling_grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        sampled.append(F.grid_sample(value_l, grid_l, mode="bilinear", padding_mode="zeros",
                                     align_corners=False))
    attention_weights = attention_weights.transpose(1, 2).reshape(batch * heads, 1, queries,
                                                                  levels * points)
    output = (torch.stack(sampled, dim=-2).flatten(-2) * attention_weights).sum(-1)
    return output.view(batch, heads * dim, queries).transpose(1, 2).contiguous()


def deformable_attention_core_func_v2(value: torch.Tensor, spatial_shapes: Sequence,
                                      sampling_locations: torch.Tensor,
                                      attention_weights: torch.Tensor,
                                      num_points_list: Sequence[int],
                                      method: str = "default") -> torch.Tensor:
    """value ``[B, S, heads, dim]``, sampling_locations ``[B, Q, heads, sum(P_l), 2]``,
    attention_weights ``[B, Q, heads, sum(P_l)]`` -> ``[B, Q, heads * dim]``."""
    bs, _, n_head, c = value.shape
    _, len_q, _, _, _ = sampling_locations.shape
    split_shape = [h * w for h, w in spatial_shapes]
    value_list = value.permute(0, 2, 3, 1).flatten(0, 1).split(split_shape, dim=-1)
    if method == "default":
        sampling_grids = 2 * sampling_locations - 1
    elif method == "discrete":
        sampling_grids = sampling_locations
    else:
        raise ValueError(f"method must be 'default' or 'discrete', got {method!r}")
    sampling_grids = sampling_grids.permute(0, 2, 1, 3, 4).flatten(0, 1)
    locations_list = sampling_grids.split(list(num_points_list), dim=-2)
    sampled = []
    for level, (h, w) in enumerate(spatial_shapes):
        value_l = value_list[level].reshape(bs * n_head, c, h, w)
        grid_l = locations_list[level]
        if method == "default":
            value_at = F.grid_sample(value_l, grid_l, mode="bilinear", padding_mode="zeros",
                                     align_corners=False)
        else:
            coord = (grid_l * torch.tensor([[w, h]], device=value.device) + 0.5).to(torch.int64)
            coord = coord.clamp(0, h - 1)  # (RT-DETRv2's "FIX ME? for rectangle input")
            coord = coord.reshape(bs * n_head, len_q * num_points_list[level], 2)
            s_idx = torch.arange(coord.shape[0], device=value.device).unsqueeze(-1).repeat(
                1, coord.shape[1])
            value_at = value_l[s_idx, :, coord[..., 1], coord[..., 0]]
            value_at = value_at.permute(0, 2, 1).reshape(bs * n_head, c, len_q,
                                                         num_points_list[level])
        sampled.append(value_at)
    weights = attention_weights.permute(0, 2, 1, 3).reshape(bs * n_head, 1, len_q,
                                                            sum(num_points_list))
    output = (torch.concat(sampled, dim=-1) * weights).sum(-1).reshape(bs, n_head * c, len_q)
    return output.permute(0, 2, 1)


def torch_twin(value: torch.Tensor, sampling_locations: torch.Tensor,
               attention_weights: torch.Tensor, *, spatial_shapes: Sequence,
               mode: str = "bilinear", points_per_level: Sequence[int] | None = None
               ) -> torch.Tensor:
    """The reference for a ``jaxpool.multi_scale_deformable_attention`` call, its arrays
    first and every other argument by name (the form parity's suite calls a twin in):
    Hugging Face's for bilinear reading of ``P`` points per level, RT-DETRv2's otherwise
    (``nearest``: its ``discrete`` method)."""
    if mode not in ("bilinear", "nearest"):
        raise ValueError(f"mode must be 'bilinear' or 'nearest', got {mode!r}")
    shapes = [tuple(int(s) for s in pair) for pair in spatial_shapes]
    if mode == "bilinear" and points_per_level is None:
        return multi_scale_deformable_attention(value, shapes, sampling_locations,
                                                attention_weights)
    locations, weights, counts = sampling_locations, attention_weights, points_per_level
    if counts is None:
        b, q, h, levels, p, _ = locations.shape
        locations = locations.reshape(b, q, h, levels * p, 2)
        weights = weights.reshape(b, q, h, levels * p)
        counts = [p] * levels
    method = "default" if mode == "bilinear" else "discrete"
    return deformable_attention_core_func_v2(value, shapes, locations, weights, list(counts),
                                             method)
