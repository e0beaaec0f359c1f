"""The padding cells: jaxpool.pad against torch's F.pad and against jnp.pad (the pad modes
it has: reflect, edge, wrap).

``python -m benchmarks.programs.unpool_pad`` times them, with the unpooling cells
(:mod:`benchmarks.cells.unpooling`), in one table. Each cell gives torch's op and each
JAX side's, and its floor: a jitted constant pad to the output's shape, which reads the
input and writes an output-sized array, each byte once, with no choice of source.
"""

from __future__ import annotations

import dataclasses

__all__ = ["CELLS", "JNP_MODES", "Cell", "extra", "floor", "sides"]


@dataclasses.dataclass(frozen=True)
class Cell:
    name: str
    shape: tuple[int, ...]  # the input, [B, C, *spatial]
    mode: str               # pad's mode
    width: int              # pad's entry on every side of every spatial axis


CELLS = (
    Cell("ReflectionPad2d(3), 8x64x128x128", (8, 64, 128, 128), "reflect", 3),
    Cell("ReplicationPad2d(3), 8x64x128x128", (8, 64, 128, 128), "replicate", 3),
    Cell("ReflectionPad2d(1), 4x256x64x64", (4, 256, 64, 64), "reflect", 1),
    Cell("ReplicationPad3d(2), 2x32x24^3", (2, 32, 24, 24, 24), "replicate", 2),
)
JNP_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def extra(cell: Cell) -> None:
    """Padding takes no argument beside the input."""


def sides(cell: Cell, _extra=None, device=None):
    """(torch op, {side: (jax op of (x, None), None)})."""
    import jax.numpy as jnp
    import torch.nn.functional as F

    import jaxpool

    spatial = len(cell.shape) - 2
    pads = (cell.width,) * (2 * spatial)
    widths = ((0, 0), (0, 0)) + ((cell.width, cell.width),) * spatial
    return (lambda t: F.pad(t, pads, cell.mode),
            {"jaxpool": (lambda x, _: jaxpool.pad(x, pads, cell.mode), None),
             "jnp.pad": (lambda x, _: jnp.pad(x, widths, mode=JNP_MODES[cell.mode]), None)})


def floor(cell: Cell):
    """The cell's floor program (see the module docstring): (x, None) -> output-sized."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    spatial = len(cell.shape) - 2
    widths = [(0, 0, 0)] * 2 + [(cell.width, cell.width, 0)] * spatial
    return jax.jit(lambda x, _: lax.pad(x, jnp.zeros((), x.dtype), widths))
