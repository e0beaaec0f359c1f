"""Cases of jaxpool.grid_sampling: grid_sample (every mode and padding mode, 4-D and 5-D
input, both align_corners) and affine_grid (2-D and 3-D).

grid_sample's grid is drawn from a standard normal: about a third of its points fall
outside ``[-1, 1]``, where the padding modes differ.
"""

from __future__ import annotations

import numpy as np

from .common import Sets, normals

MAIN: dict[str, Sets] = {
    "grid_sample": [
        ((2, 3, 5, 6), dict(mode="bilinear", align_corners=False), ((2, 4, 3, 2),)),
    ],
    "affine_grid": [((2, 2, 3), dict(size=(2, 3, 4, 5), align_corners=False))],
}

EXTRA: dict[str, Sets] = {
    "grid_sample": [
        ((1, 2, 4, 5), dict(mode="bicubic", padding_mode="reflection", align_corners=True),
         ((1, 3, 4, 2),)),
        ((1, 2, 3, 4, 5), dict(padding_mode="border", align_corners=False), ((1, 2, 3, 2, 3),)),
        ((2, 3, 5, 6), dict(mode="nearest", padding_mode="reflection", align_corners=False),
         ((2, 4, 3, 2),)),
    ],
    "affine_grid": [((1, 3, 4), dict(size=(1, 2, 3, 4, 5), align_corners=True))],
}


def _grid_sample_errors(rng: np.random.Generator) -> list:
    return [
        ("bicubic on 5-D input", normals(rng, (1, 2, 3, 4, 5), (1, 2, 3, 2, 3)),
         dict(mode="bicubic", align_corners=False)),
        ("grid's last axis 3 on 4-D input", normals(rng, (1, 2, 4, 5), (1, 3, 4, 3)),
         dict(align_corners=False)),
        ("batch mismatch", normals(rng, (2, 2, 4, 5), (1, 3, 4, 2)), dict(align_corners=False)),
        ("unknown mode", normals(rng, (1, 2, 4, 5), (1, 3, 4, 2)),
         dict(mode="linear", align_corners=False)),
        ("unknown padding_mode", normals(rng, (1, 2, 4, 5), (1, 3, 4, 2)),
         dict(padding_mode="wrap", align_corners=False)),
    ]


def _affine_grid_errors(rng: np.random.Generator) -> list:
    return [
        ("theta for 3-D with a 4-D size", normals(rng, (2, 3, 4)),
         dict(size=(2, 3, 4, 5), align_corners=False)),
        ("size of 3 entries", normals(rng, (2, 2, 3)), dict(size=(2, 3, 4), align_corners=False)),
    ]


ERRORS = {"grid_sample": _grid_sample_errors, "affine_grid": _affine_grid_errors}
