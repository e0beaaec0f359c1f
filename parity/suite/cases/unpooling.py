"""Cases of jaxpool.unpooling: max_unpool1d/2d/3d.

The indices are those of torch's max_pool with the same arguments (``Case.inputs``); values
only, indices from overlapping windows, some naming one element twice.
"""

from __future__ import annotations

import numpy as np

from .common import Sets

MAIN: dict[str, Sets] = {
    "max_unpool1d": [((2, 3, 5), dict(kernel_size=2))],
    "max_unpool2d": [((2, 3, 3, 4), dict(kernel_size=(2, 3), stride=(2, 3), padding=(1, 0)))],
    "max_unpool3d": [((1, 2, 2, 3, 2), dict(kernel_size=2))],
}

EXTRA: dict[str, Sets] = {
    "max_unpool1d": [
        ((3, 4), dict(kernel_size=3, stride=3, output_size=(13,))),  # unbatched, a larger size
    ],
    "max_unpool2d": [
        ((1, 2, 3, 3), dict(kernel_size=2, output_size=(7, 6))),
        ((3, 2, 4), dict(kernel_size=3, stride=3, padding=1)),  # unbatched
    ],
    "max_unpool3d": [
        ((2, 2, 3, 2), dict(kernel_size=(1, 2, 2), stride=(1, 2, 2))),  # unbatched
    ],
}

VALUES_ONLY: dict[str, list] = {
    "max_unpool2d": [((2, 3, 3, 4), dict(kernel_size=3, stride=2), "repeated indices", False),
                     ((2, 3, 3, 4), dict(kernel_size=3, stride=2), "repeated indices", True)],
}


def _unpool_errors(ndim: int):
    def calls(rng: np.random.Generator) -> list:
        x = rng.standard_normal((2, 3) + (2,) * ndim)
        indices = np.zeros(x.shape, np.int64)
        return [
            ("indices of another shape", (x, indices[..., :1], 2), {}),
            ("output_size a stride too large", (x, indices, 2), {"output_size": (6,) * ndim}),
            ("wrong rank", (x[0, 0], indices[0, 0], 2), {}) if ndim > 1
            else ("rank too high", (x[None], indices[None], 2), {}),
            ("float indices", (x, indices.astype(np.float64), 2), {}),
        ]

    return calls


ERRORS = {f"max_unpool{n}d": _unpool_errors(n) for n in (1, 2, 3)}
