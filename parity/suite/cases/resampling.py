"""Cases of jaxpool.resampling: interpolate, pixel_shuffle, pixel_unshuffle and
channel_shuffle.

interpolate's sets hold every mode on the number of axes it takes, align_corners, a
non-integer scale (whose nearest index torch computes in the input's dtype), a
recomputed scale and antialias. upsample_nearest and upsample_bilinear have no cases of
their own: they call interpolate with some arguments fixed.
"""

from __future__ import annotations

import numpy as np

from .common import Sets, normals, pick

MAIN: dict[str, Sets] = {
    "interpolate": [
        ((2, 3, 5, 7), dict(scale_factor=1.7, mode="nearest")),
        ((2, 3, 5, 7), dict(size=(8, 5), mode="bilinear", align_corners=False)),
        ((2, 3, 5, 7), dict(size=(9, 11), mode="bicubic", align_corners=False)),
    ],
    "pixel_shuffle": [((2, 8, 3, 4), dict(upscale_factor=2))],
    "pixel_unshuffle": [((2, 2, 6, 4), dict(downscale_factor=2))],
    "channel_shuffle": [((2, 6, 3, 4), dict(groups=3))],
}

EXTRA: dict[str, Sets] = {
    "interpolate": [
        ((2, 3, 9), dict(scale_factor=0.6, mode="linear", align_corners=True)),
        ((1, 2, 3, 4, 5), dict(size=(5, 3, 7), mode="trilinear")),
        ((2, 3, 9), dict(size=4, mode="nearest")),
        ((1, 2, 3, 4, 3), dict(scale_factor=(1.5, 0.75, 2.0), mode="nearest")),
        ((2, 3, 5, 7), dict(scale_factor=1.7, mode="nearest-exact")),
        ((2, 3, 7, 9), dict(size=(3, 4), mode="area")),
        ((2, 3, 5, 7), dict(scale_factor=2.5, mode="bilinear", align_corners=True,
                            recompute_scale_factor=True)),
        ((1, 2, 9, 8), dict(size=(4, 3), mode="bilinear", antialias=True)),
        ((1, 2, 9, 8), dict(size=(5, 11), mode="bicubic", antialias=True)),
        ((1, 2, 4, 5), dict(scale_factor=2, mode="bicubic", align_corners=True)),
    ],
    "pixel_shuffle": [((18, 2, 3), dict(upscale_factor=3))],  # unbatched
    "pixel_unshuffle": [((1, 2, 6, 9), dict(downscale_factor=3))],
    "channel_shuffle": [((2, 4, 5), dict(groups=2)), ((1, 8, 2, 3, 2), dict(groups=4))],
}

VALUES_ONLY: dict[str, list] = {
    "interpolate": [((1, 2, 5, 6), dict(size=(7, 4), mode="bilinear"), "nonfinite", False),
                    ((1, 2, 5, 6), dict(scale_factor=1.7, mode="nearest"), "nonfinite", True)],
}

# The default run leaves out nearest on one axis (nearest runs on two axes and on three
# at mixed scales) and bicubic with align_corners (align_corners runs with linear and
# bilinear, bicubic with half-pixel centers and with antialias); --full runs them.
DEFAULT: dict[str, Sets] = {
    "interpolate": pick(MAIN["interpolate"] + EXTRA["interpolate"], 5, 12),
}


def _interpolate_errors(rng: np.random.Generator) -> list:
    x = rng.standard_normal((2, 3, 5, 6))
    return [
        ("neither size nor scale_factor", (x,), {}),
        ("both size and scale_factor", (x, (4, 4), 2.0), {}),
        ("unknown mode", (x, (4, 4)), {"mode": "bilinearish"}),
        ("bilinear on one spatial axis", (x[0], 4), {"mode": "bilinear"}),
        ("trilinear on two", (x, (4, 4)), {"mode": "trilinear"}),
        ("align_corners with nearest", (x, (4, 4)), {"align_corners": True}),
        ("wrong-length size", (x, (4, 4, 4)), {"mode": "nearest"}),
        ("antialias with nearest", (x, (4, 4)), {"antialias": True}),
    ]


def _pixel_shuffle_errors(rng: np.random.Generator) -> list:
    x = rng.standard_normal((2, 6, 3, 4))
    return [("channels not a multiple of r^2", (x, 2), {}), ("rank 2", (x[0, 0], 2), {}),
            ("factor 0", (x, 0), {})]


def _pixel_unshuffle_errors(rng: np.random.Generator) -> list:
    x = rng.standard_normal((2, 2, 5, 4))
    return [("extent not a multiple of r", (x, 2), {}), ("rank 2", (x[0, 0], 2), {}),
            ("factor 0", (x, 0), {})]


def _channel_shuffle_errors(rng: np.random.Generator) -> list:
    return [
        ("rank 2", normals(rng, (6, 4)), dict(groups=2)),
        ("groups that do not divide the channels", normals(rng, (2, 6, 3)), dict(groups=4)),
        ("groups=0", normals(rng, (2, 6, 3)), dict(groups=0)),
    ]


ERRORS = {
    "interpolate": _interpolate_errors,
    "pixel_shuffle": _pixel_shuffle_errors,
    "pixel_unshuffle": _pixel_unshuffle_errors,
    "channel_shuffle": _channel_shuffle_errors,
}
