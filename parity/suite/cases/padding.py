"""Cases of jaxpool.padding: pad in every mode, on one, two and three axes, with negative
pads (crops) and a circular pad that wraps a cropped axis."""

from __future__ import annotations

import numpy as np

from .common import Sets, pick

MAIN: dict[str, Sets] = {
    "pad": [((2, 3, 5, 6), dict(pad=(2, 1, 1, 3), mode="reflect"))],
}

EXTRA: dict[str, Sets] = {
    "pad": [
        ((2, 3, 7), dict(pad=(3, 2), mode="reflect")),
        ((3, 4, 5), dict(pad=(2, 0, 1, 1), mode="replicate")),  # unbatched
        ((1, 2, 3, 4, 3), dict(pad=(1, 2, 3, 0, 2, 1), mode="circular")),
        ((2, 3, 6, 5), dict(pad=(-1, 2, 1, -2), mode="constant", value=0.5)),  # crops
        ((1, 2, 3, 4, 5), dict(pad=(1, 1, 2, 0, 0, 1), mode="replicate")),
        ((2, 3, 5, 6), dict(pad=(4, -2, 0, 3), mode="circular")),  # wraps the cropped axis
    ],
}

VALUES_ONLY: dict[str, list] = {
    "pad": [((1, 2, 5, 6), dict(pad=(2, 1, 1, 3), mode="reflect"), "nonfinite", False)],
}

# The default run leaves out reflect on one axis and replicate on three (reflect runs on
# two axes, replicate on two, three axes with circular); --full runs them.
DEFAULT: dict[str, Sets] = {"pad": pick(MAIN["pad"] + EXTRA["pad"], 1, 5)}


def _pad_errors(rng: np.random.Generator) -> list:
    x = rng.standard_normal((2, 3, 4, 5))
    return [
        ("odd pad length", (x, (1, 2, 1)), {}),
        ("reflect pad = extent", (x, (5, 0)), {"mode": "reflect"}),
        ("circular pad > extent", (x, (0, 0, 5, 0)), {"mode": "circular"}),
        ("unknown mode", (x, (1, 1)), {"mode": "symmetric"}),
        ("value with reflect", (x, (1, 1)), {"mode": "reflect", "value": 1.0}),
        ("replicate on rank 5 with 2 entries", (x[None], (1, 1)), {"mode": "replicate"}),
    ]


ERRORS = {"pad": _pad_errors}
