"""Cases of jaxpool.pooling: average, adaptive, max, adaptive max, LP and global pooling.

Chosen to hit the hard parts: ragged and overlapping windows, padding, ceil_mode's extra
window, dilation, indices or none, batched and unbatched inputs; and, values only,
non-finite inputs, inputs full of ties and an odd LP norm's negative windows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .common import Sets, pick, ties

_ND = (1, 2, 3)

# The first set of each op, in every dtype and both layouts under --full.
MAIN: dict[str, Sets] = {
    "avg_pool1d": [((2, 3, 11), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                      count_include_pad=False))],
    "avg_pool2d": [((2, 3, 7, 9), dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1),
                                        ceil_mode=True, count_include_pad=False))],
    "avg_pool3d": [((1, 2, 5, 6, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True))],
    "adaptive_avg_pool1d": [((2, 3, 11), dict(output_size=4))],
    "adaptive_avg_pool2d": [((2, 3, 7, 9), dict(output_size=(4, 5)))],
    "adaptive_avg_pool3d": [((1, 2, 5, 6, 7), dict(output_size=(3, 4, 2)))],
    "global_avg_pool": [((2, 3, 5, 7), dict())],
    "max_pool1d": [((2, 3, 11), dict(kernel_size=3, stride=2, padding=1, dilation=2,
                                      ceil_mode=True, return_indices=True))],
    "max_pool2d": [((2, 3, 7, 9), dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1),
                                        ceil_mode=True, return_indices=True))],
    "max_pool3d": [((1, 2, 5, 6, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                           return_indices=True))],
    "adaptive_max_pool1d": [((2, 3, 15), dict(output_size=4, return_indices=True))],
    "adaptive_max_pool2d": [((2, 3, 7, 9), dict(output_size=(4, 5), return_indices=True))],
    "adaptive_max_pool3d": [((1, 2, 5, 6, 7), dict(output_size=(3, 4, 2), return_indices=True))],
    "lp_pool1d": [((2, 3, 11), dict(norm_type=2, kernel_size=3, stride=2, ceil_mode=True))],
    "lp_pool2d": [((2, 3, 7, 9), dict(norm_type=3, kernel_size=(3, 2), stride=(2, 1)))],
    "lp_pool3d": [((1, 2, 5, 6, 7), dict(norm_type=1, kernel_size=2, stride=(2, 1, 2),
                                          ceil_mode=True))],
    "global_max_pool": [((2, 3, 5, 7), dict())],
}

EXTRA: dict[str, Sets] = {
    "avg_pool1d": [
        ((2, 3, 10), dict(kernel_size=4)),
        ((3, 9), dict(kernel_size=3, stride=1, padding=1)),  # unbatched, count_include_pad
        ((2, 2, 10), dict(kernel_size=3, stride=2, divisor_override=2)),
    ],
    "avg_pool2d": [
        ((2, 3, 8, 8), dict(kernel_size=2)),
        ((3, 7, 6), dict(kernel_size=3, stride=1, padding=1)),  # unbatched
        ((1, 2, 9, 7), dict(kernel_size=(3, 3), stride=(3, 2), padding=1, divisor_override=5)),
        ((1, 2, 6, 6), dict(kernel_size=(6, 1), stride=(1, 2))),  # window = whole extent
    ],
    "avg_pool3d": [
        ((1, 2, 4, 5, 6), dict(kernel_size=(2, 3, 2), stride=(1, 2, 2), padding=(1, 1, 0),
                               count_include_pad=False)),
        ((2, 4, 4, 5), dict(kernel_size=2, divisor_override=3)),  # unbatched
    ],
    "adaptive_avg_pool1d": [
        ((2, 3, 4), dict(output_size=7)),  # upsampling: windows repeat elements
        ((3, 12), dict(output_size=4)),  # exact division, unbatched
    ],
    "adaptive_avg_pool2d": [
        ((2, 2, 4, 5), dict(output_size=(7, 3))),  # up on one axis, ragged on the other
        ((2, 3, 8, 6), dict(output_size=(None, 4))),
        ((3, 5, 5), dict(output_size=1)),  # unbatched, global
    ],
    "adaptive_avg_pool3d": [
        ((1, 2, 3, 4, 5), dict(output_size=(5, None, 2))),
        ((2, 4, 6, 3), dict(output_size=(2, 3, 3))),  # unbatched
    ],
    "global_avg_pool": [
        ((1, 4, 1, 1), dict()),
        ((3, 2, 6, 1), dict()),
    ],
    "max_pool1d": [
        ((2, 3, 10), dict(kernel_size=4)),  # values only: no indices asked for
        ((3, 9), dict(kernel_size=2, stride=1, padding=1, return_indices=True)),  # unbatched
        ((2, 2, 12), dict(kernel_size=3, dilation=3, ceil_mode=True, return_indices=True)),
    ],
    "max_pool2d": [
        ((2, 3, 8, 8), dict(kernel_size=2)),
        ((1, 2, 9, 7), dict(kernel_size=3, stride=2, padding=1, dilation=(2, 1),
                            return_indices=True)),
        ((3, 7, 6), dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 0), ceil_mode=True,
                         return_indices=True)),  # unbatched
    ],
    "max_pool3d": [
        ((1, 2, 4, 5, 6), dict(kernel_size=(2, 3, 2), stride=(1, 2, 2), padding=(1, 1, 0),
                               dilation=(1, 1, 2), return_indices=True)),
        ((2, 4, 4, 5), dict(kernel_size=2, return_indices=True)),  # unbatched
    ],
    "adaptive_max_pool1d": [
        ((2, 3, 4), dict(output_size=7, return_indices=True)),  # upsampling
        ((3, 12), dict(output_size=5)),  # unbatched, no indices
    ],
    "adaptive_max_pool2d": [
        ((2, 2, 15, 5), dict(output_size=(4, 7), return_indices=True)),  # ragged 15 -> 4, up
        ((2, 3, 8, 6), dict(output_size=(None, 4), return_indices=True)),
        ((3, 5, 5), dict(output_size=1)),  # unbatched, global
    ],
    "adaptive_max_pool3d": [
        ((1, 2, 3, 4, 5), dict(output_size=(5, None, 2), return_indices=True)),
        ((2, 4, 6, 3), dict(output_size=(2, 3, 3), return_indices=True)),  # unbatched
    ],
    "lp_pool1d": [
        ((2, 3, 10), dict(norm_type=1, kernel_size=4)),
        ((3, 9), dict(norm_type=3, kernel_size=2, stride=1)),  # unbatched
    ],
    "lp_pool2d": [
        ((2, 3, 8, 8), dict(norm_type=2, kernel_size=2)),
        ((1, 2, 9, 7), dict(norm_type=1, kernel_size=3, stride=(3, 2), ceil_mode=True)),
        ((3, 7, 6), dict(norm_type=2, kernel_size=(2, 3))),  # unbatched
    ],
    "lp_pool3d": [
        ((1, 2, 4, 5, 6), dict(norm_type=2, kernel_size=(2, 3, 2), stride=(1, 2, 2))),
        ((2, 4, 4, 5), dict(norm_type=3, kernel_size=2)),  # unbatched
    ],
    "global_max_pool": [
        ((1, 4, 1, 1), dict()),
        ((3, 2, 6, 1), dict()),
    ],
}

# Inputs with inf, -inf and nan; for the max ops inputs full of ties; for an odd LP norm,
# inputs with negative windows (torch's p-th root of a negative sum is nan).
VALUES_ONLY: dict[str, list] = {
    "avg_pool2d": [((1, 2, 6, 7), dict(kernel_size=3, stride=2, padding=1), "nonfinite", False)],
    "adaptive_avg_pool1d": [((2, 2, 9), dict(output_size=5), "nonfinite", False)],
    "adaptive_avg_pool2d": [((1, 2, 6, 7), dict(output_size=(4, 3)), "nonfinite", False)],
    "max_pool1d": ties((2, 3, 11), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                         return_indices=True)),
    "max_pool2d": [((1, 2, 6, 7), dict(kernel_size=3, stride=2, padding=1, return_indices=True),
                    "nonfinite", False)]
    + ties((2, 3, 7, 9), dict(kernel_size=3, stride=2, padding=1, dilation=(1, 2),
                              return_indices=True)),
    "max_pool3d": ties((1, 2, 5, 6, 7), dict(kernel_size=2, stride=1, padding=1,
                                              return_indices=True)),
    "adaptive_max_pool1d": ties((2, 3, 15), dict(output_size=4, return_indices=True)),
    "adaptive_max_pool2d": [((1, 2, 6, 7), dict(output_size=(4, 3), return_indices=True),
                             "nonfinite", False)]
    + ties((2, 3, 15, 9), dict(output_size=(4, 5), return_indices=True)),
    "adaptive_max_pool3d": ties((1, 2, 5, 6, 7), dict(output_size=(3, 4, 2),
                                                       return_indices=True)),
    "global_max_pool": ties((2, 3, 5, 7), dict()),
    "lp_pool1d": [((2, 3, 11), dict(norm_type=3, kernel_size=3, stride=2), "negative sums",
                   False)],
    "lp_pool2d": [((1, 2, 6, 7), dict(norm_type=2, kernel_size=2), "nonfinite", False)],
}

# Stand-ins in the default run for the two sets whose programs cost the most: the same
# kinds of argument, and jaxpool runs the same lines in either layout as for the originals
# (which strategy and derivative rule each axis takes), with fewer taps or windows.
# max_pool3d's main set: 27 taps, 4.5 s of CPU to trace and compile; this one 12 taps
# (dilation keeps every axis's windows overlapping, ceil_mode adds a window on one axis),
# 2.1 s. adaptive_max_pool2d's ragged 15 -> 4 and up 5 -> 7: 4 and 7 families of windows,
# 3.1 to 4.7 s; ragged 7 -> 4 and up 3 -> 5: 4 and 5 families, 1.6 s. --full runs the
# originals.
CHEAPER: dict[tuple[str, int], tuple] = {
    ("max_pool3d", 0): ((1, 2, 5, 6, 7), dict(kernel_size=(3, 2, 2), stride=2,
                                              padding=(1, 1, 0), dilation=(1, 2, 2),
                                              ceil_mode=True, return_indices=True)),
    ("adaptive_max_pool2d", 1): ((2, 2, 7, 3), dict(output_size=(4, 5),
                                                    return_indices=True)),
}


def _default(op: str, *drop: int, again: int | None = None) -> Sets:
    return pick(MAIN[op] + EXTRA[op], *drop, again=again,
                instead={i: s for (o, i), s in CHEAPER.items() if o == op})


# Where an op is not named here, the default run runs its MAIN and EXTRA sets, each once;
# between them they hold every kind of behaviour the op has, each in one dtype and layout,
# and an op with fewer sets than dtypes runs them again from the first. Named here: an op
# with three sets gives its fourth dtype (bfloat16) its cheapest set again, not its main
# one, where the main one's program costs 1.6 to 4 times as much CPU to trace and compile;
# max_pool3d and adaptive_max_pool2d run a cheaper stand-in (CHEAPER) for their costliest
# set.
DEFAULT: dict[str, Sets] = {
    "avg_pool3d": _default("avg_pool3d", again=2),
    "adaptive_avg_pool3d": _default("adaptive_avg_pool3d", again=2),
    "max_pool3d": _default("max_pool3d", again=2),
    "adaptive_max_pool2d": _default("adaptive_max_pool2d"),
    "adaptive_max_pool1d": _default("adaptive_max_pool1d", again=1),
    "adaptive_max_pool3d": _default("adaptive_max_pool3d", again=2),
    "global_max_pool": _default("global_max_pool", again=2),
}


# --- --full: sweeps of every argument ---------------------------------------------------

# Batched and unbatched inputs per number of spatial axes (at most 512 elements: the max
# ops' inputs are distinct multiples of 1/16, exact in bfloat16).
_FULL_SHAPES = {1: [(2, 3, 9), (3, 16)],
                2: [(2, 2, 7, 9), (3, 10, 8)],
                3: [(1, 2, 5, 6, 7), (1, 8, 5, 6)]}


def _full_avg(ndim: int) -> Sets:
    out = []
    for shape in _FULL_SHAPES[ndim]:
        for k, s, p in [(1, None, 0), (2, None, 0), (3, 1, 1), (3, 2, 1), (4, 3, 2), (5, 2, 2)]:
            if k > min(shape[-ndim:]) + 2 * p:
                continue
            for ceil, cip, div in [(False, True, None), (True, False, None), (True, True, None),
                                   (False, False, 3)]:
                out.append((shape, dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil,
                                        count_include_pad=cip, divisor_override=div)))
    return out


def _full_max(ndim: int) -> Sets:
    out = []
    for shape in _FULL_SHAPES[ndim]:
        for k, s, p, d in [(1, None, 0, 1), (2, None, 0, 1), (3, 1, 1, 1), (3, 2, 1, 2),
                           (2, 2, 1, 3), (4, 3, 2, 1)]:
            if d * (k - 1) + 1 > min(shape[-ndim:]) + 2 * p:
                continue
            for ceil, indices in [(False, True), (True, True), (True, False)]:
                out.append((shape, dict(kernel_size=k, stride=s, padding=p, dilation=d,
                                        ceil_mode=ceil, return_indices=indices)))
    return out


def _full_lp(ndim: int) -> Sets:
    out = []
    for shape in _FULL_SHAPES[ndim]:
        for k, s in [(1, None), (2, None), (3, 1), (3, 2), (4, 3)]:
            if k > min(shape[-ndim:]):
                continue
            for norm, ceil in [(1, False), (2, True), (3, False), (2, False)]:
                out.append((shape, dict(norm_type=norm, kernel_size=k, stride=s,
                                        ceil_mode=ceil)))
    return out


def _full_adaptive(ndim: int) -> Sets:
    shapes = {1: [(2, 3, 9), (1, 2, 16), (3, 5)],
              2: [(2, 2, 7, 9), (1, 3, 10, 8), (2, 5, 6)],
              3: [(1, 2, 5, 6, 7), (1, 1, 8, 4, 6), (2, 5, 4, 5)]}[ndim]
    out = []
    for shape in shapes:
        spatial = shape[-ndim:]
        # torch's adaptive_avg_pool1d takes no None; 2d/3d do.
        for mode in ("one", "down", "ragged", "same", "up") + (("none",) if ndim > 1 else ()):
            size = []
            for i, n in enumerate(spatial):
                size.append({"one": 1, "down": max(1, n // 2), "ragged": max(1, n - 2 - i),
                             "same": n, "up": n + 3 + i, "none": None if i == 0 else 2}[mode])
            out.append((shape, dict(output_size=tuple(size) if ndim > 1 else size[0])))
    return out


def _full_adaptive_max(ndim: int) -> Sets:
    return [(shape, {**kw, "return_indices": i % 2 == 0})
            for i, (shape, kw) in enumerate(_full_adaptive(ndim))]


_FULL_GLOBAL: Sets = [((2, 3, 5, 7), {}), ((1, 4, 1, 1), {}), ((3, 2, 6, 1), {}),
                      ((2, 2, 9, 8), {})]

FULL: dict[str, Sets] = {
    **{f"avg_pool{n}d": _full_avg(n) for n in _ND},
    **{f"adaptive_avg_pool{n}d": _full_adaptive(n) for n in _ND},
    **{f"max_pool{n}d": _full_max(n) for n in _ND},
    **{f"adaptive_max_pool{n}d": _full_adaptive_max(n) for n in _ND},
    **{f"lp_pool{n}d": _full_lp(n) for n in _ND},
    "global_avg_pool": _FULL_GLOBAL,
    "global_max_pool": _FULL_GLOBAL,
}


# --- bad arguments ----------------------------------------------------------------------

def _window_errors(kind: str, ndim: int):
    """Bad calls of a pool of ``kind`` ("avg", "max", "lp", "adaptive", "adaptive_max",
    "global", "global_max") on ``ndim`` spatial axes.

    Left out on purpose, because the two differ by design: stride=0 (jaxpool reads it as
    kernel_size, torch raises) and output_size 0 (jaxpool raises, torch returns an empty
    array); integer input to the avg, max and LP pools (torch pools some integer dtypes,
    jaxpool raises) and to global_max_pool (torch's amax takes it)."""

    def calls(rng: np.random.Generator) -> list:
        x = rng.standard_normal((2, 3) + (5,) * ndim)
        if kind in ("global", "global_max"):  # [B, C, H, W] only
            out: list[tuple[str, tuple, dict[str, Any]]] = [("rank 3", (x[0],), {})]
            if kind == "global":
                out.append(("int64 input", (x.astype(np.int64),), {}))
            return out
        low = x[0, 0] if ndim > 1 else x[0, 0, :]
        # the positional arguments of a valid call after x
        valid = {"avg": (2,), "max": (2,), "lp": (2, 2), "adaptive": (2,),
                 "adaptive_max": (2,)}[kind]
        out = [("wrong rank", (low, *valid), {}), ("rank too high", (x[None], *valid), {})]
        too_long = (2,) * (ndim + 1)
        if kind in ("avg", "max"):
            out += [
                ("kernel larger than input", (x, 7), {}),
                ("padding > kernel//2", (x, 3), {"padding": 2}),
                ("bool input", (x > 0, 2), {}),
                ("negative padding", (x, 3), {"padding": -1}),
            ]
            if ndim > 1:
                out.append(("wrong-length kernel_size", (x, too_long), {}))
        if kind == "avg":
            out += [("int32 input", (x.astype(np.int32), 2), {}),
                    ("divisor_override=0", (x, 2), {"divisor_override": 0})]
        if kind == "max":
            out.append(("dilation=0", (x, 2), {"dilation": 0}))
        if kind == "lp":
            out += [("kernel larger than input", (x, 2, 7), {}), ("norm_type=0", (x, 0, 2), {})]
            if ndim > 1:
                out.append(("wrong-length kernel_size", (x, 2, too_long), {}))
        if kind in ("adaptive", "adaptive_max"):
            out += [("negative output_size", (x, -1), {}),
                    ("int64 input", (x.astype(np.int64), 2), {})]
            if ndim > 1:
                out.append(("wrong-length output_size", (x, too_long), {}))
        return out

    return calls


ERRORS = {
    **{f"{name}{n}d": _window_errors(kind, n) for n in _ND
       for name, kind in (("avg_pool", "avg"), ("adaptive_avg_pool", "adaptive"),
                          ("max_pool", "max"), ("adaptive_max_pool", "adaptive_max"),
                          ("lp_pool", "lp"))},
    "global_avg_pool": _window_errors("global", 2),
    "global_max_pool": _window_errors("global_max", 2),
}
