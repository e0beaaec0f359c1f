"""The unpooling cells: jaxpool.max_unpool2d against torch and against a scatter
(``jnp.zeros(...).at[indices].set(values)``, the obvious JAX port of max_unpool, whose
gradient is a gather and whose value is a scatter: not deterministic on GPU; a reference,
not a correct peer).

``python -m benchmarks.programs.unpool_pad`` times them, with the padding cells
(:mod:`benchmarks.cells.padding`), in one table. Each cell gives torch's op and each JAX
side's, the indices they take (an argument of the jitted program, as in a model: a
constant would let XLA fold the index comparisons away), and its floor: a jitted program
that reads the values where the index is non-negative and the indices, and writes an
output-sized array by a strided pad, each byte once, with no choice of source.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["CELLS", "Cell", "extra", "floor", "sides"]


@dataclasses.dataclass(frozen=True)
class Cell:
    name: str
    shape: tuple[int, ...]  # the pooled values, [B, C, H, W]; unpooled 2x2 to [B, C, 2H, 2W]


CELLS = (
    Cell("SegNet max_unpool 2x2, 4x64x112x112 -> 224", (4, 64, 112, 112)),
    Cell("max_unpool2d 2x2, 4x128x28x28", (4, 128, 28, 28)),
)


def extra(cell: Cell) -> np.ndarray:
    """The indices: those of a 2x2 max pooling of a random encoder map twice the size."""
    import torch
    import torch.nn.functional as F

    b, c, h, w = cell.shape
    encoder = torch.from_numpy(np.random.default_rng(1).standard_normal(
        (b, c, 2 * h, 2 * w)).astype(np.float32))
    return F.max_pool2d(encoder, 2, return_indices=True)[1].numpy()


def sides(cell: Cell, indices, device=None):
    """(torch op, {side: (jax op of (x, indices), indices)}); torch's indices on
    ``device`` (a :class:`benchmarks.runner.Device`; default the CPU)."""
    import jax
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F

    import jaxpool

    it = torch.from_numpy(indices)
    ij = jnp.asarray(indices.astype(np.int32))
    if device is not None:
        it = it.to(device.torch_device)
        ij = jax.device_put(ij, device.jax_device)
    b, c, h, w = cell.shape

    def scatter(x, i):
        flat = jnp.zeros((b * c, 4 * h * w), x.dtype)
        rows = jnp.arange(b * c)[:, None]
        out = flat.at[rows, i.reshape(b * c, -1)].set(x.reshape(b * c, -1))
        return out.reshape(b, c, 2 * h, 2 * w)

    return (lambda t: F.max_unpool2d(t, it, 2),
            {"jaxpool": (lambda x, i: jaxpool.max_unpool2d(x, i, 2), ij),
             "jnp scatter": (scatter, ij)})


def floor(cell: Cell):
    """The cell's floor program (see the module docstring): (x, indices) -> output-sized."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    spatial = len(cell.shape) - 2
    widths = [(0, 0, 0)] * 2 + [(0, 1, 1)] * spatial
    return jax.jit(lambda x, i: lax.pad(jnp.where(i >= 0, x, 0), jnp.zeros((), x.dtype),
                                        widths))
