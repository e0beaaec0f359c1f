"""Train a torch CNN in JAX through torchax, with jaxpool's pooling: exact and scatter-free.

The model is a small torch module in torchvision's GoogLeNet layout (written out below,
torchvision is not needed): ceil-mode 3/2 max pools between blocks, an inception block
whose pool branch is a 3/1/1 ceil-mode max pool, a ceil-mode average pool and an adaptive
average pool before the classifier. torchax runs it on JAX arrays (`torchax.extract_jax`),
`jaxpool.torchax.install()` makes its pooling jaxpool's, and JAX trains it
(`jax.value_and_grad`, plain SGD, one jitted step), in float64:

    python examples/torchax_train.py                 # 20 steps
    python examples/torchax_train.py --steps 5

Printed: the parameter gradients at the first step against torch's autograd (with and
without jaxpool), the loss per step, and the scatter, gather and select_and_scatter ops in
the jitted training step with and without jaxpool (what makes a GPU backward
non-reproducible, and what XLA's deterministic mode cannot compile).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import jaxpool.torchax as jt  # before torchax: it makes torchax 0.0.13 import on torch 2.13

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_shapes  # noqa: E402 (the examples' generated data set)

torchax = jt.torchax
FORBIDDEN = ("scatter", "gather", "select_and_scatter")


class Inception(nn.Module):
    """GoogLeNet's block, narrow: 1x1, 3x3 and a ceil-mode max pool + 1x1."""

    def __init__(self, cin: int, c: int):
        super().__init__()
        self.b1 = nn.Conv2d(cin, c, 1)
        self.b2 = nn.Conv2d(cin, c, 3, padding=1)
        self.b3 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), nn.Conv2d(cin, c, 1))

    def forward(self, x):
        return F.relu(torch.cat([self.b1(x), self.b2(x), self.b3(x)], 1))


class TinyGoogLeNet(nn.Module):
    """[B, 3, 28, 28] -> [B, 10] logits."""

    def __init__(self, width: int = 8, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, ceil_mode=True))           # 28 -> 14
        self.a = Inception(width, width)
        self.pool = nn.AvgPool2d(3, 2, ceil_mode=True)                       # 14 -> 7
        self.b = Inception(3 * width, width)
        self.head = nn.Sequential(nn.MaxPool2d(3, 2, ceil_mode=True),            # 7 -> 3
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(3 * width, classes))

    def forward(self, x):
        return self.head(self.b(self.pool(self.a(self.stem(x)))))


def counts(text: str) -> dict[str, int]:
    return {name: len(re.findall(rf"stablehlo\.{name}\b", text)) for name in FORBIDDEN}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--width", type=int, default=8, help="channels of each branch")
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("out"), help="where the metrics go")
    args = p.parse_args(argv)
    jax.config.update("jax_enable_x64", True)

    images, labels = make_shapes(args.batch_size * args.steps, seed=args.seed)
    images = np.ascontiguousarray(images.transpose(0, 3, 1, 2), dtype=np.float64)  # NCHW
    torch.manual_seed(args.seed)
    model = TinyGoogLeNet(args.width).double()
    env = torchax.default_env()

    def loss_of(fn):
        def loss(params, x, y):
            logits = fn(params, (x,))
            # one-hot, not take_along_axis: a gather (and a scatter in its gradient)
            one_hot = jax.nn.one_hot(y, logits.shape[-1], dtype=logits.dtype)
            return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * one_hot, -1))
        return loss

    # The first batch's gradients against torch's autograd, with and without jaxpool.
    x0, y0 = images[:args.batch_size], labels[:args.batch_size]
    torch_loss = F.cross_entropy(model(torch.from_numpy(x0)), torch.from_numpy(y0).long())
    names = [n for n, _ in model.named_parameters()]
    torch_grads = dict(zip(names, torch.autograd.grad(torch_loss, list(model.parameters()))))
    report = {}
    for label, install in (("torchax alone", False), ("torchax + jaxpool", True)):
        (jt.install if install else jt.uninstall)(env)
        params, fn = torchax.extract_jax(model, env)
        step = jax.jit(jax.value_and_grad(loss_of(fn)))
        lowered = step.lower(params, jnp.asarray(x0), jnp.asarray(y0))
        compiled = lowered.compile()
        _, grads = compiled(params, jnp.asarray(x0), jnp.asarray(y0))
        worst = max(float(np.max(np.abs(np.asarray(grads[n]) - torch_grads[n].numpy())))
                    for n in names)
        found = counts(lowered.as_text())
        report[label] = {"grad_max_abs_err": worst, **found}
        print(f"{label:18s} gradient vs torch: max abs error {worst:.1e}; jitted step: "
              + ", ".join(f"{v} {k}" for k, v in found.items()))

    # Train with jaxpool installed: the last pass's parameters and its compiled step.
    step = compiled
    losses = []
    for i in range(args.steps):
        batch = slice(i * args.batch_size, (i + 1) * args.batch_size)
        loss, grads = step(params, jnp.asarray(images[batch]), jnp.asarray(labels[batch]))
        params = jax.tree.map(lambda w, g: w - args.lr * g, params, grads)
        losses.append(float(loss))
        if i % max(args.steps // 5, 1) == 0 or i == args.steps - 1:
            print(f"step {i:3d}  loss {float(loss):.4f}")
    jt.uninstall(env)

    ok = (report["torchax + jaxpool"]["grad_max_abs_err"] < 1e-12
          and not any(report["torchax + jaxpool"][k] for k in FORBIDDEN))
    print("gradients equal torch's to rounding, no scatter or gather with jaxpool:", ok)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "torchax_train_metrics.json").write_text(json.dumps(
        {"losses": losses, "report": report, "ok": ok}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
