"""The torch twin of ``jaxpool.deform_conv2d``: torchvision's CPU kernel
(``deform_conv2d_kernel.cpp``) written in torch, so that it runs, and differentiates to
every order, wherever torch does: torchvision's compiled operator is an optional package's,
with a first derivative only.

- :func:`deform_conv2d`: ``torchvision.ops.deform_conv2d``'s signature; its im2col (every
  tap of every output position read bilinearly where the offsets move it, times the
  mask), then one matmul per weight group, then the bias.
- :func:`torch_twin`: the same, the arrays first and the rest by name (the form parity's
  suite calls a twin in).
"""

from __future__ import annotations

import torch

__all__ = ["deform_conv2d", "torch_twin"]


def _pair(v) -> tuple[int, int]:
    return (int(v[0]), int(v[1])) if isinstance(v, (tuple, list)) else (int(v), int(v))


def _columns(input: torch.Tensor, offset: torch.Tensor, mask: torch.Tensor | None,
             kernel: tuple, stride: tuple, padding: tuple, dilation: tuple) -> torch.Tensor:
    """torchvision's ``deformable_im2col``: ``[B, C, kh * kw, out_h * out_w]``."""
    b, c, height, width = input.shape
    kh, kw = kernel
    taps = kh * kw
    groups = offset.shape[1] // (2 * taps)
    oh, ow = offset.shape[2:]
    offset = offset.reshape(b, groups, taps, 2, oh, ow)
    i = torch.arange(kh).repeat_interleave(kw)
    j = torch.arange(kw).repeat(kh)
    # (out_y * stride - pad) + i * dilation, in ints; then + the offset
    base_y = (torch.arange(oh)[None, :] * stride[0] - padding[0] + i[:, None] * dilation[0])
    base_x = (torch.arange(ow)[None, :] * stride[1] - padding[1] + j[:, None] * dilation[1])
    y = base_y[:, :, None].to(input.dtype) + offset[:, :, :, 0]
    x = base_x[:, None, :].to(input.dtype) + offset[:, :, :, 1]
    # bilinear_interpolate: 0 outside (-1, size) on either axis
    inside = ~((y <= -1) | (y >= height) | (x <= -1) | (x >= width))
    y_low, x_low = torch.floor(y).detach(), torch.floor(x).detach()
    lh, lw = y - y_low, x - x_low
    hh, hw = 1 - lh, 1 - lw
    planes = input.reshape(b, groups, c // groups, height * width)

    def corner(row, col):
        ok = inside & (row >= 0) & (row <= height - 1) & (col >= 0) & (col <= width - 1)
        flat = torch.where(ok, row * width + col, torch.zeros_like(row)).long()
        flat = flat.reshape(b, groups, 1, -1).expand(-1, -1, c // groups, -1)
        v = torch.gather(planes, 3, flat).reshape(b, groups, c // groups, taps, oh, ow)
        return torch.where(ok[:, :, None], v, torch.zeros((), dtype=v.dtype))

    v1, v2 = corner(y_low, x_low), corner(y_low, x_low + 1)
    v3, v4 = corner(y_low + 1, x_low), corner(y_low + 1, x_low + 1)
    w1, w2, w3, w4 = ((a * e)[:, :, None] for a, e in ((hh, hw), (hh, lw), (lh, hw), (lh, lw)))
    val = w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4
    val = torch.where(inside[:, :, None], val, torch.zeros((), dtype=val.dtype))
    if mask is not None:
        val = mask.reshape(b, groups, 1, taps, oh, ow) * val
    return val.reshape(b, c, taps, oh * ow)


def _check(input, offset, weight, bias, mask, stride, padding, dilation) -> None:
    """The CPU kernel's TORCH_CHECKs, as RuntimeError."""
    ok = input.dtype.is_floating_point and all(
        a is None or a.dtype == input.dtype for a in (offset, weight, bias, mask))
    ok = ok and input.ndim == offset.ndim == weight.ndim == 4 and \
        (mask is None or mask.ndim == 4)
    if ok:
        b, c, height, width = input.shape
        out_channels, per_group, kh, kw = weight.shape
        taps = kh * kw
        groups = offset.shape[1] // (2 * taps) if taps else 0
        out = tuple((n + 2 * p - (d * (k - 1) + 1)) // s + 1 for n, p, d, k, s in zip(
            (height, width), padding, dilation, (kh, kw), stride))
        ok = (taps > 0 and min(stride) > 0 and min(padding) >= 0 and min(dilation) > 0
              and per_group > 0 and c % per_group == 0
              and out_channels % (c // per_group) == 0 and groups > 0
              and c % groups == 0 and tuple(offset.shape) == (b, 2 * groups * taps) + out
              and (mask is None or tuple(mask.shape) == (b, groups * taps) + out)
              and (bias is None or tuple(bias.shape) == (out_channels,)) and min(out) > 0)
    if not ok:
        raise RuntimeError("deform_conv2d: the arguments fail torchvision's checks")


def deform_conv2d(input: torch.Tensor, offset: torch.Tensor, weight: torch.Tensor,
                  bias: torch.Tensor | None = None, stride=1, padding=0, dilation=1,
                  mask: torch.Tensor | None = None) -> torch.Tensor:
    """``torchvision.ops.deform_conv2d``, as its CPU kernel computes it:
    ``[B, out_channels, out_h, out_w]``; RuntimeError where its checks fail."""
    stride, padding, dilation = _pair(stride), _pair(padding), _pair(dilation)
    _check(input, offset, weight, bias, mask, stride, padding, dilation)
    out_channels, per_group, kh, kw = weight.shape
    b, c = input.shape[:2]
    groups = c // per_group
    oh, ow = offset.shape[2:]
    columns = _columns(input, offset, mask, (kh, kw), stride, padding, dilation)
    columns = columns.reshape(b, groups, per_group * kh * kw, oh * ow)
    kernel = weight.reshape(groups, out_channels // groups, per_group * kh * kw)
    out = torch.matmul(kernel, columns).reshape(b, out_channels, oh, ow)
    if bias is not None:
        out = out + bias.reshape(1, out_channels, 1, 1)
    return out


def torch_twin(input: torch.Tensor, offset: torch.Tensor, weight: torch.Tensor,
               bias: torch.Tensor | None = None, mask: torch.Tensor | None = None, *,
               stride=1, padding=0, dilation=1) -> torch.Tensor:
    """:func:`deform_conv2d` with the arrays first and the rest by name."""
    return deform_conv2d(input, offset, weight, bias, stride, padding, dilation, mask)
