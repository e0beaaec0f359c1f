"""Shared pieces of the examples: a generated image data set and a small classifier.

`classifier.py`, `per_example_grads.py` and `sharded.py` all use the same model and data,
so that each shows one thing (training, per-example gradients, sharding) on the same
network rather than on three slightly different ones.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import flax.linen as nn
import jax
import numpy as np

import jaxpool.linen as jpl

SHAPE_NAMES = (
    "square", "frame", "disk", "ring", "h-bar",
    "v-bar", "diagonal", "anti-diag", "plus", "cross",
)
NUM_CLASSES = len(SHAPE_NAMES)


def _masks(label: int, dx: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """Boolean mask of shape class `label`, in coordinates scaled to the shape's half-size."""
    ax, ay = np.abs(dx), np.abs(dy)
    box, r = np.maximum(ax, ay), np.hypot(dx, dy)
    thin = 0.3
    hbar = (ay <= thin) & (ax <= 1)
    vbar = (ax <= thin) & (ay <= 1)
    diag = (np.abs(dx - dy) <= thin * 1.4) & (box <= 1)
    anti = (np.abs(dx + dy) <= thin * 1.4) & (box <= 1)
    return [
        box <= 1,
        (box <= 1) & (box >= 0.6),
        r <= 1,
        (r <= 1) & (r >= 0.6),
        hbar,
        vbar,
        diag,
        anti,
        hbar | vbar,
        diag | anti,
    ][label]


def make_shapes(n: int, size: int = 28, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Render `n` coloured shapes on noisy backgrounds, one of ten classes each.

    Returns images [n, size, size, 3] float32 in roughly [0, 1] (channels-last, as Flax
    wants) and labels [n] int32. Deterministic in `seed`; nothing is downloaded.
    """
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_CLASSES, n).astype(np.int32)
    half = rng.uniform(0.18, 0.32, n) * size
    cx = rng.uniform(half, size - half)
    cy = rng.uniform(half, size - half)
    grid = np.arange(size, dtype=np.float64) + 0.5
    dx = (grid[None, None, :] - cx[:, None, None]) / half[:, None, None]
    dy = (grid[None, :, None] - cy[:, None, None]) / half[:, None, None]
    dx, dy = np.broadcast_arrays(dx, dy)
    mask = np.zeros((n, size, size), dtype=bool)
    for c in range(NUM_CLASSES):
        sel = labels == c
        mask[sel] = _masks(c, dx[sel], dy[sel])
    fg = rng.uniform(0.5, 1.0, (n, 1, 1, 3))
    bg = rng.uniform(0.0, 0.3, (n, 1, 1, 3))
    img = np.where(mask[..., None], fg, bg) + rng.normal(0.0, 0.08, (n, size, size, 3))
    return img.astype(np.float32), labels


class ShapesNet(nn.Module):
    """Small convnet: [..., 28, 28, 3] -> [..., 10] logits, batched or unbatched.

    conv 3x3 -> AvgPool2d(2) -> conv 3x3 -> AdaptiveAvgPool2d(5) -> dense. The adaptive
    pool maps 14 to 5, so its windows are ragged and overlap: the case jaxpool gets exactly
    as torch does and a plain strided pool cannot express.
    """

    features: tuple[int, int] = (16, 32)
    pooled: int = 5
    num_classes: int = NUM_CLASSES

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(self.features[0], (3, 3), padding=1)(x))
        x = jpl.AvgPool2d(2)(x)
        x = nn.relu(nn.Conv(self.features[1], (3, 3), padding=1)(x))
        x = jpl.AdaptiveAvgPool2d(self.pooled)(x)
        # Flatten the last three axes only, so one example ([H, W, C]) works as well as a batch.
        x = x.reshape(x.shape[:-3] + (-1,))
        return nn.Dense(self.num_classes)(x)


def param_count(params) -> int:
    return sum(int(np.prod(p.shape)) for p in jax.tree_util.tree_leaves(params))


def interleaved_timings(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Seconds per call of each (already compiled) thunk, run in turn so that load on a
    shared machine hits all of them alike."""
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            times[name].append(time.perf_counter() - t0)
    return times


def summarize(ts: list[float]) -> str:
    """Median and interquartile range of timings, in milliseconds."""
    ms = sorted(t * 1e3 for t in ts)
    if len(ms) >= 4:
        q = statistics.quantiles(ms, n=4)
        return f"{statistics.median(ms):8.3f} ms (IQR {q[0]:.3f}-{q[2]:.3f})"
    return f"{statistics.median(ms):8.3f} ms"
