"""Cases of jaxpool.fractional: fractional_max_pool2d/3d.

Each case draws the windows' samples once, ``[N, C, d]`` (N = 1 unbatched) uniform in
``[0, 1)`` in its dtype, and gives them to jaxpool as ``samples`` and to torch as
``_random_samples``; every set pools some axis to 3 windows or more, where the samples
move them.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .common import Sets, normals, ties

MAIN: dict[str, Sets] = {
    "fractional_max_pool2d": [
        ((2, 3, 7, 9), dict(kernel_size=(3, 2), output_size=(4, 5), return_indices=True)),
    ],
    "fractional_max_pool3d": [
        ((1, 2, 5, 6, 7), dict(kernel_size=2, output_size=(3, 4, 5), return_indices=True)),
    ],
}

EXTRA: dict[str, Sets] = {
    "fractional_max_pool2d": [
        ((3, 8, 6), dict(kernel_size=2, output_ratio=(0.5, 0.7), return_indices=True)),
        ((1, 2, 7, 6), dict(kernel_size=2, output_size=(4, 3))),  # values only
    ],
    "fractional_max_pool3d": [
        ((2, 6, 5, 8), dict(kernel_size=(1, 2, 3), output_ratio=(0.5, 0.7, 0.5),
                            return_indices=True)),
    ],
}

VALUES_ONLY: dict[str, list] = {
    "fractional_max_pool2d": [((1, 2, 6, 7), dict(kernel_size=2, output_size=(4, 3),
                                                  return_indices=True), "nonfinite", False)]
    + ties((2, 3, 7, 9), dict(kernel_size=(3, 2), output_size=(4, 5), return_indices=True)),
    "fractional_max_pool3d": ties((1, 2, 5, 6, 7), dict(kernel_size=2, output_size=(3, 4, 5),
                                                         return_indices=True)),
}


def _samples(case, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The windows' samples ``[N, C, d]``, uniform in ``[0, 1)`` in the case's dtype."""
    dtype = case.numpy_dtype
    batch = case.shape[0] if len(case.shape) == case.ndim + 2 else 1
    u = rng.random((batch, case.shape[-case.ndim - 1], case.ndim)).astype(dtype)
    below_one = dtype.type(1 - float(ml_dtypes.finfo(dtype).epsneg))
    return {"samples": np.minimum(u, below_one)}  # (rounding may have reached 1)


DRAWN = {"fractional_max_pool2d": _samples, "fractional_max_pool3d": _samples}

_HALFWAY = {2: np.full((1, 2, 2), 0.5), 3: np.full((1, 2, 3), 0.5)}  # samples of 0.5


def _errors_2d(rng: np.random.Generator) -> list:
    return [
        ("pool taller than the input", normals(rng, (1, 2, 5, 5)),
         dict(kernel_size=2, output_size=(5, 3), samples=_HALFWAY[2])),
        ("neither output_size nor output_ratio", normals(rng, (1, 2, 5, 5)),
         dict(kernel_size=2, samples=_HALFWAY[2])),
        ("samples of other channels", normals(rng, (1, 3, 5, 5)),
         dict(kernel_size=2, output_size=3, samples=_HALFWAY[2])),
        ("samples of 3 per plane", normals(rng, (1, 2, 5, 5)),
         dict(kernel_size=2, output_size=3, samples=_HALFWAY[3])),
        ("rank 2", normals(rng, (5, 5)), dict(kernel_size=2, output_size=3,
                                              samples=_HALFWAY[2])),
        ("kernel_size of 3", normals(rng, (1, 2, 5, 5)),
         dict(kernel_size=(2, 2, 2), output_size=3, samples=_HALFWAY[2])),
        ("negative output_size", normals(rng, (1, 2, 5, 5)),
         dict(kernel_size=2, output_size=-1, samples=_HALFWAY[2])),
    ]


def _errors_3d(rng: np.random.Generator) -> list:
    return [
        ("pool exactly fitting (torch's strict 3-D check)", normals(rng, (1, 2, 5, 5, 5)),
         dict(kernel_size=2, output_size=4, samples=_HALFWAY[3])),
        ("samples of 2 per plane", normals(rng, (1, 2, 5, 5, 5)),
         dict(kernel_size=2, output_size=3, samples=_HALFWAY[2])),
        ("output_size of 2", normals(rng, (1, 2, 5, 5, 5)),
         dict(kernel_size=2, output_size=(3, 3), samples=_HALFWAY[3])),
        ("rank 3", normals(rng, (5, 5, 5)), dict(kernel_size=2, output_size=3,
                                                 samples=_HALFWAY[3])),
    ]


ERRORS = {"fractional_max_pool2d": _errors_2d, "fractional_max_pool3d": _errors_3d}
