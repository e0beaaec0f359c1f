"""The deformable convolution cells: ``jaxpool.deform_conv2d`` (torchvision's
``deform_conv2d``) in the layers that call it, float32 on the CPU, with the mask (DCN v2):

- ``dcnv2-resnet50``: a DCN v2 block of a ResNet-50 stage (DCNv2's ResNet-50, mmdetection's
  ``dcn=dict(type='DCNv2')``): the bottleneck's 3x3 convolution, 256 channels in and out,
  one offset group, stride 1, padding 1, no bias (a batch norm follows), on the 14x14 map
  of conv4_x (a 224 x 224 image), batch 2;
- ``edvr-align``: an EDVR-style alignment (EDVR's PCD module, BasicVSR++'s second-order
  alignment: ``DCNv2Pack(64, 64, 3, padding=1, deformable_groups=8)``): 64 channels, 8
  offset groups, 3x3, with bias, on a 32x32 map (the second level of the PCD
  pyramid on EDVR's 64 x 64 training patches), batch 2.

The offsets are drawn as a trained DCN's (a few pixels, normal with a 1.5-pixel spread:
at the maps' edges a quarter of the 14x14 map's taps and a ninth of the 32x32 map's read
partly off the map, half of those wholly), the masks as its sigmoid (in (0, 1)), the
weight (and bias) as torchvision's ``DeformConv2d`` initialises them.

Each cell is timed forward, as the gradient of ``sum(y**2)`` in the input, the offset,
the mask, the weight (and the bias where there is one), and as the second derivative (the
gradient in all of them of the squared gradient's norm: :mod:`benchmarks.derivatives`),
jitted, beside:

- ``torch``: the pure-torch twin of torchvision's CPU kernel (:mod:`parity.deform_conv`:
  its im2col read with ``torch.gather``, then one matmul) on the CPU, autograd
  (torchvision's compiled operator is not in this environment; it has no double backward);
- ``jnp gather``: a plain JAX port reading the 4 corners of every tap with ``jnp`` indexing,
  then one ``einsum`` with the weight (its derivatives are XLA's scatter-adds);
- with ``--sorted``, ``jaxpool-sorted``: jaxpool with the GPU table's adding (the sorted
  sum in place of the CPU table's scatter-add): the evidence for the strategy table's row.

Run from the repository root:

    python -m benchmarks.cells.deform_conv                 # markdown table, median ms per call
    python -m benchmarks.cells.deform_conv --cells edvr-align --reps 5
    python -m benchmarks.cells.deform_conv --sorted        # and the GPU table's adding

Every side's values are first compared with torch's (float32, 1e-4 of the largest value),
and the JAX peers' with jaxpool's; a wrong side raises.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from benchmarks.derivatives import Cell, cells_main

__all__ = ["DEFAULT_CELLS", "cells", "main"]


def _data(batch: int, channels: int, out_channels: int, size: int, kernel: int,
          offset_groups: int, bias: bool, seed: int) -> tuple:
    """input, offset, mask, weight (and bias), float64, for stride 1 and ``padding =
    kernel // 2`` (the output as big as the map)."""
    rng = np.random.default_rng(seed)
    taps = kernel * kernel
    x = rng.standard_normal((batch, channels, size, size))
    offset = rng.normal(0.0, 1.5, (batch, 2 * offset_groups * taps, size, size))
    mask = 1 / (1 + np.exp(-rng.normal(0.0, 1.5, (batch, offset_groups * taps, size, size))))
    # torchvision's DeformConv2d.reset_parameters: kaiming_uniform_(a=sqrt(5)), the bias
    # uniform in +-1/sqrt(fan_in)
    bound = 1 / np.sqrt(channels * taps)
    weight = rng.uniform(-bound, bound, (out_channels, channels, kernel, kernel))
    arrays = (x, offset, mask, weight)
    return arrays + (rng.uniform(-bound, bound, (out_channels,)),) if bias else arrays


def _cell(words: str, batch: int, channels: int, out_channels: int, size: int, kernel: int,
          offset_groups: int, bias: bool, seed: int, sorted_side: bool) -> Cell:
    import jaxpool

    padding = kernel // 2

    def call(f, xs):
        x, offset, mask, weight = xs[:4]
        return f(x, offset, weight, xs[4] if bias else None, stride=1, padding=padding,
                 dilation=1, mask=mask)

    def ours(xs, cs):
        return call(jaxpool.deform_conv2d, xs)

    def ours_sorted(xs, cs):
        from jaxpool import strategy_table

        # the table is read when the program is traced: within, the GPU table's adding
        with strategy_table.use_backend("gpu"):
            return call(jaxpool.deform_conv2d, xs)

    def peer(xs, cs):
        return call(_gather_port, xs)

    def theirs(xs, cs):
        from parity.deform_conv import deform_conv2d

        return call(deform_conv2d, xs)

    sides = {"jaxpool": ours, "jnp gather": peer}
    if sorted_side:
        sides["jaxpool-sorted"] = ours_sorted
    shape = f"{batch}x{channels}x{size}x{size}"
    return Cell(f"{words} ({shape}, {kernel}x{kernel} to {out_channels}, offset groups "
                f"{offset_groups}, mask{', bias' if bias else ''})",
                _data(batch, channels, out_channels, size, kernel, offset_groups, bias, seed),
                (), sides, theirs)


def _gather_port(x, offset, weight, bias=None, stride=1, padding=0, dilation=1, mask=None):
    """torchvision's ``deform_conv2d`` as a plain JAX port writes it (stride, padding and
    dilation ints): every tap's 4 corners read with ``jnp`` indexing from the input laid
    out ``[B, G, H * W, C / G]``, a corner off the map masked to 0 (and the whole tap
    outside ``(-1, size)``), times the mask; then one ``einsum`` with the weight."""
    import jax
    import jax.numpy as jnp

    b, c, height, width = x.shape
    out_channels, per_weight_group, kh, kw = weight.shape
    taps = kh * kw
    groups = offset.shape[1] // (2 * taps)
    oh, ow = offset.shape[2:]
    table = jnp.transpose(x.reshape(b, groups, c // groups, height * width), (0, 1, 3, 2))
    offset = offset.reshape(b, groups, taps, 2, oh, ow)
    i, j = np.divmod(np.arange(taps), kw)
    base_y = (np.arange(oh)[None, :] * stride - padding + i[:, None] * dilation)[:, :, None]
    base_x = (np.arange(ow)[None, :] * stride - padding + j[:, None] * dilation)[:, None, :]
    y = base_y.astype(np.float32) + offset[:, :, :, 0]  # [B, G, taps, out_h, out_w]
    xx = base_x.astype(np.float32) + offset[:, :, :, 1]
    inside = ~((y <= -1) | (y >= height) | (xx <= -1) | (xx >= width))
    y0, x0 = jax.lax.stop_gradient(jnp.floor(y)), jax.lax.stop_gradient(jnp.floor(xx))
    ly, lx = y - y0, xx - x0
    bi = jnp.arange(b)[:, None, None, None, None]
    gi = jnp.arange(groups)[None, :, None, None, None]
    sample = 0.0
    for dy, wy in ((0, 1 - ly), (1, ly)):
        for dx, wx in ((0, 1 - lx), (1, lx)):
            row, col = y0 + dy, x0 + dx
            ok = inside & (row >= 0) & (row <= height - 1) & (col >= 0) & (col <= width - 1)
            flat = jnp.where(ok, row * width + col, 0).astype(jnp.int32)
            read = table[bi, gi, flat]  # [B, G, taps, out_h, out_w, C / G]
            sample = sample + (wy * wx)[..., None] * jnp.where(ok[..., None], read, 0)
    if mask is not None:
        sample = mask.reshape(b, groups, taps, oh, ow)[..., None] * sample
    # the columns [B, weight groups, C / groups * taps, P], channel-major as im2col's
    columns = jnp.transpose(sample, (0, 1, 5, 2, 3, 4))
    wg = c // per_weight_group
    columns = columns.reshape(b, wg, per_weight_group * taps, oh * ow)
    kernel = weight.reshape(wg, out_channels // wg, per_weight_group * taps)
    out = jnp.einsum("gok,bgkp->bgop", kernel, columns, precision="highest")
    out = out.reshape(b, out_channels, oh, ow)
    return out if bias is None else out + bias[None, :, None, None]


def cells(sorted_side: bool = False) -> dict[str, Callable[[], Cell]]:
    """name -> a function building the cell (its inputs drawn on the call)."""
    s = sorted_side
    return {
        "dcnv2-resnet50": lambda: _cell("DCN v2, ResNet-50 conv4_x", 2, 256, 256, 14, 3, 1,
                                        False, 0, s),
        "edvr-align": lambda: _cell("EDVR alignment", 2, 64, 64, 32, 3, 8, True, 1, s),
    }


DEFAULT_CELLS = ("dcnv2-resnet50", "edvr-align")


def main(argv=None) -> int:
    return cells_main("python -m benchmarks.cells.deform_conv", __doc__.split("\n\n")[0], cells,
                      DEFAULT_CELLS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
