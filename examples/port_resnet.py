"""Port a torch ResNet-18 to Flax and prove the port, layer by layer, with `parity`.

The torch model is written out below (torchvision is not needed). Its Flax linen port uses
jaxpool's pooling layers: `jaxpool.linen.MaxPool2d(3, 2, 1)` for the stem and
`jaxpool.linen.AdaptiveAvgPool2d(1)` for the head, whose numbers are torch's. The torch
weights go into the port with `parity.load_torch_weights` (paired in the order the port
calls its layers), and `parity.compare_layers` checks every weight, every layer's output,
the logits, and the gradient of a loss with respect to every parameter and at every layer's
input, in float64 and in float32 (judged against torch in float64), BatchNorm in eval mode,
in both modes: chained (each side runs on its own outputs) and shadow (each Flax layer gets
the torch layer's recorded input and output cotangent, so each row is that layer's own
error).

    python examples/port_resnet.py                          # the port agrees: exit 0
    python examples/port_resnet.py --plant-bug layer2.0.bn2  # a BatchNorm epsilon changed
    python examples/port_resnet.py --plant-bug layer3.1.conv1   # a conv's padding
    python examples/port_resnet.py --plant-bug maxpool       # a pooling argument
    python examples/port_resnet.py --list-layers             # where a bug can go

`--plant-bug LAYER` changes one layer of the Flax port (named as in torch): a convolution's
padding, a BatchNorm's epsilon or the max pool's padding and ceil_mode. The report must
name that layer as the first divergence in every precision and mode (exit 0 if it does, 1
if not).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import torch

import jaxpool.linen as jpl
import parity

# --------------------------------------------------------------------------- torch


class TorchBasicBlock(torch.nn.Module):
    """torchvision's BasicBlock: two 3x3 convolutions and a shortcut (1x1 conv when the
    shape changes)."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(c_out)
        self.relu = torch.nn.ReLU(inplace=True)
        self.conv2 = torch.nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(c_out)
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = torch.nn.Sequential(
                torch.nn.Conv2d(c_in, c_out, 1, stride, bias=False), torch.nn.BatchNorm2d(c_out))

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + (x if self.downsample is None else self.downsample(x)))


class TorchResNet18(torch.nn.Module):
    """[B, 3, H, W] -> [B, num_classes]."""

    def __init__(self, num_classes: int = 10, width: int = 64):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(width)
        self.relu = torch.nn.ReLU(inplace=True)
        self.maxpool = torch.nn.MaxPool2d(3, 2, 1)
        widths = (width, 2 * width, 4 * width, 8 * width)
        c_in = width
        for i, c_out in enumerate(widths):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", torch.nn.Sequential(
                TorchBasicBlock(c_in, c_out, stride), TorchBasicBlock(c_out, c_out, 1)))
            c_in = c_out
        self.avgpool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(8 * width, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# --------------------------------------------------------------------------- the Flax port


def _bn(local: str, prefix: str, bug: str) -> nn.BatchNorm:
    """torch's BatchNorm2d ``prefix.local``; torch's momentum 0.1 is Flax's 0.9."""
    planted = bug == ".".join(filter(None, (prefix, local)))
    return nn.BatchNorm(use_running_average=True, momentum=0.9,
                        epsilon=1e-3 if planted else 1e-5, name=local.replace(".", "_"))


def _conv(features: int, kernel: int, stride: int, padding: int, local: str, prefix: str,
          bug: str) -> nn.Conv:
    """torch's Conv2d ``prefix.local`` (no bias)."""
    planted = bug == ".".join(filter(None, (prefix, local)))
    return nn.Conv(features, (kernel, kernel), stride, padding=padding + planted,
                   use_bias=False, name=local.replace(".", "_"))


class BasicBlock(nn.Module):
    """[B, H, W, C_in] -> [B, H / stride, W / stride, C_out], channels-last. ``prefix`` is
    the block's torch name, so that ``bug`` can name one of its layers."""

    c_out: int
    stride: int
    prefix: str
    bug: str = ""

    @nn.compact
    def __call__(self, x):
        p, bug = self.prefix, self.bug
        y = _conv(self.c_out, 3, self.stride, 1, "conv1", p, bug)(x)
        y = nn.relu(_bn("bn1", p, bug)(y))
        y = _bn("bn2", p, bug)(_conv(self.c_out, 3, 1, 1, "conv2", p, bug)(y))
        if self.stride != 1 or x.shape[-1] != self.c_out:
            x = _conv(self.c_out, 1, self.stride, 0, "downsample.0", p, bug)(x)
            x = _bn("downsample.1", p, bug)(x)
        return nn.relu(y + x)


class ResNet18(nn.Module):
    """[B, H, W, 3] -> [B, num_classes]: torch's ResNet-18, channels-last. ``bug`` names
    the torch layer to change: a Conv2d gets one more padding, a BatchNorm2d epsilon 1e-3,
    the max pool padding 0 with ceil_mode (same output shape, windows shifted by one)."""

    num_classes: int = 10
    width: int = 64
    bug: str = ""

    @nn.compact
    def __call__(self, x):
        bug, w = self.bug, self.width
        x = nn.relu(_bn("bn1", "", bug)(_conv(w, 7, 2, 3, "conv1", "", bug)(x)))
        if bug == "maxpool":
            x = jpl.MaxPool2d(3, 2, padding=0, ceil_mode=True, name="maxpool")(x)
        else:
            x = jpl.MaxPool2d(3, 2, 1, name="maxpool")(x)
        for i, c_out in enumerate((w, 2 * w, 4 * w, 8 * w)):
            for j in range(2):
                prefix = f"layer{i + 1}.{j}"
                stride = 2 if i > 0 and j == 0 else 1
                x = BasicBlock(c_out, stride, prefix, bug, name=prefix.replace(".", "_"))(x)
        x = jpl.AdaptiveAvgPool2d(1, name="avgpool")(x)
        return nn.Dense(self.num_classes, name="fc")(x.reshape(x.shape[0], -1))


# --------------------------------------------------------------------------- the check


def trained_like(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Give every BatchNorm the non-trivial scale, shift and running statistics training
    leaves (fresh ones are the identity in eval mode and would hide an epsilon or a
    missing layer)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                c = m.num_features
                m.weight.copy_(1 + 0.2 * torch.randn(c, generator=g))
                m.bias.copy_(0.2 * torch.randn(c, generator=g))
                m.running_mean.copy_(0.2 * torch.randn(c, generator=g))
                m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
    return model.eval()


def layer_names(model: torch.nn.Module) -> list[str]:
    """The layers ``--plant-bug`` can change."""
    kinds = (torch.nn.Conv2d, torch.nn.BatchNorm2d, torch.nn.MaxPool2d)
    return [n for n, m in model.named_modules() if isinstance(m, kinds)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plant-bug", metavar="LAYER", default="",
                   help="change this layer of the Flax port (a torch module name, e.g. "
                        "layer2.0.bn2, layer3.1.conv1, maxpool)")
    p.add_argument("--list-layers", action="store_true", help="list the layers a bug can go in")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--size", type=int, default=64, help="input height and width")
    p.add_argument("--width", type=int, default=64,
                   help="channels of the first stage (torchvision's: 64)")
    p.add_argument("--dtype", choices=("float64", "float32"), action="append",
                   help="check only in this precision (default: float64 and float32)")
    p.add_argument("--mode", choices=("chained", "shadow"), action="append",
                   help="check only in this mode (default: chained and shadow)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--all-rows", action="store_true",
                   help="print every gradient row, not only the failing ones")
    p.add_argument("--out", type=Path, default=None, help="write the reports as JSON here")
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    torch_model = trained_like(TorchResNet18(width=args.width), args.seed)
    names = layer_names(torch_model)
    if args.list_layers:
        print("\n".join(names))
        return 0
    if args.plant_bug and args.plant_bug not in names:
        p.error(f"--plant-bug: no layer {args.plant_bug!r}; --list-layers lists them")

    x = np.random.default_rng(args.seed).standard_normal((args.batch, 3, args.size, args.size))
    model = ResNet18(width=args.width, bug=args.plant_bug)
    n_params = sum(t.numel() for t in torch_model.parameters())
    print(f"ResNet-18, {n_params:,} parameters, input {list(x.shape)} (torch layout); "
          + (f"bug planted in {args.plant_bug}" if args.plant_bug else "no bug planted"))

    # The port's variables, from torch, paired in the order the clean port calls its layers
    # (a wrong padding makes the buggy one fail to run, and the weights are the same).
    example = jnp.ones((1, args.size, args.size, 3))
    init = ResNet18(width=args.width).init(jax.random.key(0), example)
    variables = parity.load_torch_weights(torch_model, init, model=ResNet18(width=args.width),
                                          x=example)

    reports = {}
    for dtype in [np.dtype(d) for d in args.dtype or ("float64", "float32")]:
        for mode in args.mode or ("chained", "shadow"):
            t0 = time.perf_counter()
            report = parity.compare_layers(torch_model, model, variables, x.astype(dtype),
                                           mode=mode)
            seconds = time.perf_counter() - t0
            reports[f"{dtype.name} {mode}"] = report
            if len(reports) == 1 or not report.ok:
                print(report.format(gradients=args.all_rows), end="")
            else:
                print(report.summary())
            print(f"({seconds:.0f} s)")

    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "port_resnet.json").write_text(
            json.dumps({k: r.to_dict() for k, r in reports.items()}, indent=1))
    if not args.plant_bug:
        return 0 if all(r.ok for r in reports.values()) else 1
    named = [(r.first_divergence.torch_name if r.first_divergence else None)
             for r in reports.values()]
    found = all(n == args.plant_bug for n in named)
    print(f"planted in {args.plant_bug}; first divergence: "
          + ", ".join(f"{k} {n}" for k, n in zip(reports, named))
          + (" (found)" if found else " (NOT FOUND)"))
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
