"""Cases of jaxpool.roi: roi_align, roi_pool, ps_roi_align and ps_roi_pool against
``torchvision.ops``' functions of the same names (multi_scale_roi_align is roi_align per
level: its cases are roi_align's).

The boxes are drawn per case (:func:`_boxes`) and given to both sides by keyword, never
differentiated: torchvision's operator has no derivative in them, and jaxpool reads
concrete boxes to size an adaptive grid (``sampling_ratio <= 0``). A set's ``shapes``
say their format: ``((K, 5),)`` a ``[K, 5]`` array of ``(batch index, x1, y1, x2, y2)``
rows, ``((L_0, 4), (L_1, 4), ...)`` a list of each image's ``[L_i, 4]`` boxes.

Without torchvision's compiled operator the cases do not run, and the report says why
(:func:`parity.suite.ops.unavailable`).
"""

from __future__ import annotations

import numpy as np

from .common import Sets

MAIN: dict[str, Sets] = {
    "roi_align": [
        ((2, 3, 7, 9), dict(output_size=(2, 3), spatial_scale=0.5, sampling_ratio=2,
                            aligned=False), ((6, 5),)),
    ],
    "roi_pool": [
        ((2, 3, 7, 9), dict(output_size=(2, 3), spatial_scale=0.5), ((6, 5),)),
    ],
    # the position-sensitive ops: C = C_out * PH * PW
    "ps_roi_align": [
        ((2, 12, 7, 9), dict(output_size=(2, 3), spatial_scale=0.5, sampling_ratio=2),
         ((6, 5),)),
    ],
    "ps_roi_pool": [
        ((2, 12, 7, 9), dict(output_size=(2, 3), spatial_scale=0.5), ((6, 5),)),
    ],
}

EXTRA: dict[str, Sets] = {
    "roi_align": [
        # adaptive: each box its own grid, sized from the concrete boxes
        ((2, 3, 6, 5), dict(output_size=2, sampling_ratio=-1, aligned=True), ((6, 5),)),
        ((1, 2, 5, 8), dict(output_size=(3, 2), spatial_scale=2.0, sampling_ratio=0),
         ((5, 5),)),
        # a list of per-image boxes, an image without any
        ((3, 2, 6, 6), dict(output_size=(2, 2), spatial_scale=0.25, sampling_ratio=3,
                            aligned=True), ((2, 4), (0, 4), (3, 4))),
    ],
    "roi_pool": [
        ((3, 2, 6, 5), dict(output_size=3, spatial_scale=2.0), ((2, 4), (0, 4), (3, 4))),
    ],
    "ps_roi_align": [
        # adaptive, as R-FCN's 7x7 head calls it
        ((1, 8, 6, 5), dict(output_size=2, sampling_ratio=-1), ((6, 5),)),
    ],
    "ps_roi_pool": [
        ((3, 4, 6, 6), dict(output_size=(1, 2), spatial_scale=0.25), ((2, 4), (0, 4), (3, 4))),
    ],
}

_QUARTERS = 4  # box corners on a grid of quarter pixels: exact in every dtype
_KINDS = ("inside", "past", "small", "large", "empty", "inverted")


def _corners(kind: str, rng: np.random.Generator, extent: int) -> tuple[int, int]:
    """One axis of a box, in quarter pixels of an axis of ``extent`` pixels."""
    q = _QUARTERS * extent
    if kind == "inside":
        low = int(rng.integers(0, q - _QUARTERS))
        return low, int(rng.integers(low + 1, q + 1))
    if kind == "past":  # either border
        return (int(rng.integers(-2 * _QUARTERS, 0)),
                int(rng.integers(q - _QUARTERS, q + 2 * _QUARTERS)))
    if kind == "small":  # under a pixel: unaligned, a 1 x 1 box
        low = int(rng.integers(0, q - 2))
        return low, low + int(rng.integers(1, 3))
    if kind == "large":  # larger than the map: several samples per bin when adaptive
        return -_QUARTERS, q + int(rng.integers(2, 7))
    low = int(rng.integers(0, q))  # empty
    return low, low


def _boxes(case, rng: np.random.Generator) -> dict[str, object]:
    """The case's boxes in its dtype, cycling through boxes inside the map, past its
    borders, under a pixel, larger than the map, empty (x2 = x1) and inverted (y2 < y1),
    in the format of ``case.shapes``; coordinates are the map's divided by
    ``spatial_scale``.

    No inverted box where ``aligned`` meets adaptive sampling: there torchvision's CPU
    kernel raises (a negative count sizes a vector), where its CUDA kernel and jaxpool
    give 0."""
    n, _, height, width = case.shape
    kw = dict(case.kwargs)
    scale = kw.get("spatial_scale", 1.0)
    kinds: tuple[str, ...] = _KINDS
    # (ps_roi_align is always aligned)
    if (kw.get("aligned", False) or case.op == "ps_roi_align") and \
            kw.get("sampling_ratio", -1) <= 0:
        kinds = tuple(k for k in _KINDS if k != "inverted")
    listed = case.shapes[0][1] == 4
    count = sum(s[0] for s in case.shapes) if listed else case.shapes[0][0]
    rows = []
    for j in range(count):
        kind = kinds[j % len(kinds)]
        x1, x2 = _corners("inside" if kind == "inverted" else kind, rng, width)
        y1, y2 = _corners("inside" if kind in ("empty", "inverted") else kind, rng, height)
        rows.append((x1, y2, x2, y1) if kind == "inverted" else (x1, y1, x2, y2))
    coords = np.asarray(rows, np.float64).reshape(count, 4) / _QUARTERS / scale
    dtype = case.numpy_dtype
    if listed:
        splits = np.cumsum([s[0] for s in case.shapes])[:-1]
        return {"boxes": [np.ascontiguousarray(b.astype(dtype))
                          for b in np.split(coords, splits)]}
    index = rng.integers(0, n, count).astype(np.float64)
    return {"boxes": np.concatenate([index[:, None], coords], axis=1).astype(dtype)}


DRAWN = {"roi_align": _boxes, "roi_pool": _boxes, "ps_roi_align": _boxes, "ps_roi_pool": _boxes}


def _roi_align_errors(rng: np.random.Generator) -> list:
    x = rng.standard_normal((2, 3, 5, 6))
    boxes = np.array([[0.0, 0.5, 0.5, 3.0, 2.5], [1.0, 1.0, 0.0, 5.0, 4.0]])
    return [
        ("boxes of 4 columns", (x, boxes[:, 1:], 2), {}),
        ("input of rank 3", (x[0], boxes, 2), {}),
        ("negative output_size", (x, boxes, -1), {}),
        ("sampling_ratio not an int", (x, boxes, 2), {"sampling_ratio": 1.5}),
        ("spatial_scale a string", (x, boxes, 2), {"spatial_scale": "1"}),
        ("integer input", (x.astype(np.int64), boxes.astype(np.int64), 2), {}),
    ]


def _ps_errors(rng: np.random.Generator) -> list:
    x = rng.standard_normal((2, 8, 5, 6))
    boxes = np.array([[0.0, 0.5, 0.5, 3.0, 2.5], [1.0, 1.0, 0.0, 5.0, 4.0]])
    return [
        ("channels not a multiple of the bins", (x[:, :6], boxes, 2), {}),
        ("boxes of 4 columns", (x, boxes[:, 1:], 2), {}),
        ("integer input", (x.astype(np.int64), boxes.astype(np.int64), 2), {}),
    ]


ERRORS = {"roi_align": _roi_align_errors, "roi_pool": _roi_align_errors,
          "ps_roi_align": _ps_errors, "ps_roi_pool": _ps_errors}
