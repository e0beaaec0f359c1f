"""The fractional max pooling cells: ``fractional_max_pool2d/3d`` where networks call them,
float32 on the CPU, the samples fixed (torch's ``_random_samples``, jaxpool's ``samples``):

- ``fractional2d``: ``FractionalMaxPool2d(3, output_ratio=0.5)`` on ``[8, 64, 56, 56]``
  (a ResNet stage's map halved, as torch's docs' example pools);
- ``fractional2d-graham``: ``FractionalMaxPool2d(2, output_ratio=1 / sqrt(2))`` on
  ``[8, 96, 32, 32]`` (Graham's fractional max pooling, a ratio of 2 ** -0.5 per layer);
- ``fractional3d``: ``FractionalMaxPool3d(2, output_ratio=0.5)`` on ``[2, 16, 16, 32, 32]``.

Each cell is timed forward, as the gradient of ``sum(y**2)`` in the input and as the
second derivative, jitted, beside:

- ``torch``: ``F.fractional_max_pool2d/3d`` on the CPU, autograd;
- ``jnp gather``: a plain JAX port reading each window's elements with ``jnp`` indexing and
  taking ``jnp.max`` (its derivatives are XLA's scatter-adds);
- with ``--sorted``, ``jaxpool-sorted``: jaxpool with the GPU table's adding (the sorted sum
  in place of the CPU table's scatter-add), a column and a ratio of its own: the evidence
  for the strategy table's row.

Run from the repository root:

    python -m benchmarks.cells.fractional                 # markdown table, median ms per call
    python -m benchmarks.cells.fractional --cells fractional3d --reps 5
    python -m benchmarks.cells.fractional --sorted        # and the GPU table's adding

Every side's values are first compared with torch's; a wrong side raises.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from benchmarks.derivatives import Cell, cells_main

__all__ = ["DEFAULT_CELLS", "cells", "main"]


def _cell(words: str, shape: tuple, kernel: int, ratio: float, seed: int,
          sorted_side: bool) -> Cell:
    import jaxpool

    dims = len(shape) - 2
    ours_fn = getattr(jaxpool, f"fractional_max_pool{dims}d")
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    samples = rng.random(shape[:2] + (dims,))
    out = tuple(int(n * ratio) for n in shape[2:])

    def ours(xs, cs):
        return ours_fn(xs[0], kernel, output_ratio=ratio, samples=cs[0])

    def ours_sorted(xs, cs):
        from jaxpool import strategy_table

        with strategy_table.use_backend("gpu"):
            return ours_fn(xs[0], kernel, output_ratio=ratio, samples=cs[0])

    def peer(xs, cs):
        return _gather_port(xs[0], cs[0], (kernel,) * dims, out)

    def theirs(xs, cs):
        import torch

        f = getattr(torch.nn.functional, f"fractional_max_pool{dims}d")
        return f(xs[0], kernel, output_ratio=(ratio,) * dims, _random_samples=cs[0])

    sides = {"jaxpool": ours, "jnp gather": peer}
    if sorted_side:
        sides["jaxpool-sorted"] = ours_sorted
    return Cell(f"{words} ({'x'.join(map(str, shape))}, k{kernel}, ratio {ratio:.3g})",
                (x,), (samples,), sides, theirs)


def _gather_port(x, samples, kernel: tuple, out: tuple):
    """Fractional max pooling as a plain JAX port writes it: torch's window starts from the
    samples, every window's elements read with ``jnp`` indexing, ``jnp.max`` over them."""
    import jax.numpy as jnp

    dims = len(kernel)
    n, c = x.shape[:2]
    # the samples' last axis holds (u_W, u_H) in 2-D, (u_T, u_H, u_W) in 3-D
    sample_axes = (1, 0) if dims == 2 else (0, 1, 2)
    index = []
    for a in range(dims):
        size, k, o = x.shape[2 + a], kernel[a], out[a]
        alpha = (size - k) / (o - 1)
        u = samples[..., sample_axes[a]][..., None]
        i = jnp.arange(o - 1, dtype=x.dtype)
        starts = ((i + u) * alpha).astype(jnp.int32) - (u * alpha).astype(jnp.int32)
        starts = jnp.concatenate([starts, jnp.full((n, c, 1), size - k, jnp.int32)], -1)
        taps = starts[..., None] + jnp.arange(k)  # [N, C, out, k]
        shape = [n, c] + [1] * (2 * dims)
        shape[2 + a], shape[2 + dims + a] = o, k
        index.append(jnp.moveaxis(taps, 3, -1).reshape(
            (n, c) + tuple(o if b == a else 1 for b in range(dims)) + (1,) * a + (k,)
            + (1,) * (dims - a - 1)))
    planes = (jnp.arange(n)[:, None], jnp.arange(c)[None, :])
    lead = tuple(p.reshape(p.shape + (1,) * (2 * dims)) for p in planes)
    windows = x[lead + tuple(index)]  # [N, C, *out, *kernel]
    return jnp.max(windows.reshape((n, c) + out + (math.prod(kernel),)), axis=-1)


def cells(sorted_side: bool = False) -> dict[str, Callable[[], Cell]]:
    """name -> a function building the cell (its inputs drawn on the call)."""
    s = sorted_side
    return {
        "fractional2d": lambda: _cell("FractionalMaxPool2d", (8, 64, 56, 56), 3, 0.5, 0, s),
        "fractional2d-graham": lambda: _cell("Graham's FractionalMaxPool2d",
                                             (8, 96, 32, 32), 2, 2 ** -0.5, 1, s),
        "fractional3d": lambda: _cell("FractionalMaxPool3d", (2, 16, 16, 32, 32), 2, 0.5,
                                      2, s),
    }


DEFAULT_CELLS = ("fractional2d", "fractional2d-graham", "fractional3d")


def main(argv=None) -> int:
    return cells_main("python -m benchmarks.cells.fractional", __doc__.split("\n\n")[0], cells,
                      DEFAULT_CELLS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
