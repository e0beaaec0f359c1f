"""Cases of jaxpool.patches: unfold (im2col) and fold (col2im), batched and unbatched, with
dilation, padding and strides."""

from __future__ import annotations

import numpy as np

from .common import Sets, normals

MAIN: dict[str, Sets] = {
    "unfold": [((2, 3, 7, 9), dict(kernel_size=(3, 2), dilation=(1, 2), padding=1,
                                   stride=(2, 1)))],
    "fold": [((2, 12, 20), dict(output_size=(5, 6), kernel_size=2))],
}

EXTRA: dict[str, Sets] = {
    "unfold": [((3, 5, 6), dict(kernel_size=2))],  # unbatched
    "fold": [((1, 18, 16), dict(output_size=(7, 8), kernel_size=3, padding=1, stride=2))],
}


def _unfold_errors(rng: np.random.Generator) -> list:
    return [
        ("kernel_size 0", normals(rng, (2, 3, 5, 6)), dict(kernel_size=0)),
        ("rank 5", normals(rng, (1, 2, 3, 5, 6)), dict(kernel_size=2)),
        ("kernel larger than input", normals(rng, (1, 2, 3, 3)), dict(kernel_size=4)),
    ]


def _fold_errors(rng: np.random.Generator) -> list:
    return [
        ("blocks that do not match output_size", normals(rng, (1, 12, 19)),
         dict(output_size=(5, 6), kernel_size=2)),
        ("channels not divisible by the kernel", normals(rng, (1, 10, 20)),
         dict(output_size=(5, 6), kernel_size=2)),
    ]


ERRORS = {"unfold": _unfold_errors, "fold": _fold_errors}
