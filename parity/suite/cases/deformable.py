"""Cases of jaxpool.deformable: deform_conv2d against torchvision's CPU kernel written in
torch (:mod:`parity.deform_conv`), and multi_scale_deformable_attention against the
pure-PyTorch reference (:mod:`parity.deformable`: Hugging Face's ``multi_scale_deformable_attention``
for ``P`` points on every level, RT-DETRv2's ``deformable_attention_core_func_v2`` for a
count per level and for its discrete sampling, ``mode="nearest"``).

A set's ``shape`` is the value's ``[B, S, heads, head_dim]``, its ``shapes`` the locations'
and the weights'. All three are drawn from a standard normal: about a third of each
location's coordinates fall in ``[0, 1]``, the rest read zeros past the level's edge
(bilinear) or its border pixel (nearest). The discrete cases keep to square levels, where
RT-DETRv2's clamp of x by ``H - 1`` is the level's own.
"""

from __future__ import annotations

import numpy as np

from .common import Sets, normals

OP = "multi_scale_deformable_attention"

CONV = "deform_conv2d"

# deform_conv2d: a set's ``shape`` is the input's, its ``shapes`` the offset's, the
# weight's, the bias's and the mask's, all drawn from a standard normal (offsets of about a
# pixel: taps inside, across pixels and past the border).

MAIN: dict[str, Sets] = {
    CONV: [
        # DCN v2: 3 x 3, padding 1, one offset group, mask and bias
        ((2, 4, 5, 6), dict(stride=1, padding=1, dilation=1),
         ((2, 18, 5, 6), (3, 4, 3, 3), (3,), (2, 9, 5, 6))),
    ],
    OP: [
        # Deformable DETR's layout: 2 levels, 2 points on each
        ((2, 26, 2, 3), dict(spatial_shapes=((4, 5), (2, 3))),
         ((2, 3, 2, 2, 2, 2), (2, 3, 2, 2, 2))),
    ],
}

EXTRA: dict[str, Sets] = {
    CONV: [
        # offset groups 2, weight groups 2, stride and dilation per axis
        ((1, 4, 6, 5), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
         ((1, 36, 3, 1), (4, 2, 3, 3), (4,), (1, 18, 3, 1))),
    ],
    OP: [
        # RT-DETRv2's layout: a count per level, a 1 x 1 level
        ((1, 17, 3, 2), dict(spatial_shapes=((3, 5), (1, 2)), points_per_level=(3, 1)),
         ((1, 4, 3, 4, 2), (1, 4, 3, 4))),
        # its discrete sampling, square levels
        ((2, 14, 2, 2), dict(spatial_shapes=((3, 3), (2, 2), (1, 1)), mode="nearest",
                             points_per_level=(2, 1, 1)),
         ((2, 3, 2, 4, 2), (2, 3, 2, 4))),
        # three levels, odd sizes, one point each
        ((1, 40, 1, 4), dict(spatial_shapes=((5, 7), (2, 2), (1, 1))),
         ((1, 5, 1, 3, 1, 2), (1, 5, 1, 3, 1))),
    ],
}


def _errors(rng: np.random.Generator) -> list:
    levels = ((2, 3), (1, 2))
    v, loc, w = normals(rng, (2, 8, 2, 3), (2, 4, 2, 2, 1, 2), (2, 4, 2, 2, 1))
    return [
        ("locations' last axis 3",
         (v, levels, normals(rng, (2, 4, 2, 2, 1, 3))[0], w), {}),
        ("areas that do not sum to S", (v, ((2, 3), (2, 2)), loc, w), {}),
        ("heads that disagree", (normals(rng, (2, 8, 3, 3))[0], levels, loc, w), {}),
        ("batch that disagrees", (normals(rng, (3, 8, 2, 3))[0], levels, loc, w), {}),
        ("three levels in the locations, two in spatial_shapes",
         (v, levels, normals(rng, (2, 4, 2, 3, 1, 2))[0], normals(rng, (2, 4, 2, 3, 1))[0]),
         {}),
        ("points_per_level that do not sum to the locations'",
         (v, levels, normals(rng, (2, 4, 2, 3, 2))[0], normals(rng, (2, 4, 2, 3))[0]),
         {"points_per_level": (1, 1)}),
        ("integer value", (v.astype(np.int64), levels, loc, w), {}),
        ("unknown mode", (v, levels, loc, w), {"mode": "bicubic"}),
    ]


def _conv_errors(rng: np.random.Generator) -> list:
    x, o, w, b, m = normals(rng, (2, 4, 5, 5), (2, 18, 3, 3), (2, 4, 3, 3), (2,),
                            (2, 9, 3, 3))
    return [
        ("offset channels not 2 * kh * kw * groups", (x, o[:, :-1], w, b), {"mask": m}),
        ("mask of the wrong shape", (x, o, w, b), {"mask": m[:, :4]}),
        ("weight channels that do not divide the input's",
         (x, o, normals(rng, (2, 3, 3, 3))[0], b), {"mask": m}),
        ("offset of the wrong extent", (x, o[:, :, :2], w, b), {"mask": m}),
        ("kernel larger than the map", (x[:, :, :2], o, w, b), {"mask": m}),
    ]


ERRORS = {OP: _errors, CONV: _conv_errors}
