"""A small SegNet-style segmentation network in Flax, trained on generated images, and its
torch twin checked layer by layer with `parity`.

The encoder pads by reflection (`jaxpool.linen.ReflectionPad2d`, CycleGAN's border
handling), convolves and pools with `jaxpool.linen.MaxPool2d(2, return_indices=True)`; the
decoder puts each feature back where its maximum was with `jaxpool.linen.MaxUnpool2d(2)`
(SegNet's decoder), and an auxiliary head at quarter resolution is upsampled bilinearly
(`jaxpool.linen.Upsample(scale_factor=4, mode="bilinear")`, align_corners=False as
DeepLab's heads) and added to the logits. Every one of these layers is differentiated
without a scatter, so training repeats bit for bit on GPU and TPU.

The torch twin starts from its own initialisation; `parity.load_torch_weights` puts those
weights into the Flax model, which is trained for a few steps (optax Adam) to segment
discs and squares from the background; `parity.to_torch_weights` writes the trained
weights back into the twin, and `parity.compare_layers` checks every layer's output and
every parameter gradient against torch in float64 and float32.

    python examples/segment.py                # about 20 s on a laptop CPU
    python examples/segment.py --steps 200    # a better segmentation
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
import optax
import torch

import jaxpool.linen as jpl
import parity

CLASSES = ("background", "disc", "square")


def make_scenes(n: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` noisy grey images ``[n, size, size, 1]`` holding one disc and one square each,
    and their per-pixel labels ``[n, size, size]`` (0 background, 1 disc, 2 square)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size] + 0.5
    images = rng.normal(0.0, 0.25, (n, size, size, 1)).astype(np.float32)
    labels = np.zeros((n, size, size), np.int32)
    for i in range(n):
        r = rng.uniform(0.12, 0.2) * size
        cx, cy = rng.uniform(r, size - r, 2)
        square = (np.abs(xx - cx) <= r) & (np.abs(yy - cy) <= r)
        r = rng.uniform(0.12, 0.2) * size
        cx, cy = rng.uniform(r, size - r, 2)
        disc = np.hypot(xx - cx, yy - cy) <= r
        labels[i][square] = 2
        labels[i][disc] = 1
        images[i, ..., 0] += 0.8 * (square | disc)
    return images, labels


# --------------------------------------------------------------------------- torch


class TorchSegNet(torch.nn.Module):
    def __init__(self, width: int = 8):
        super().__init__()
        c = width
        self.pad1, self.enc1 = torch.nn.ReflectionPad2d(1), torch.nn.Conv2d(1, c, 3)
        self.pool1 = torch.nn.MaxPool2d(2, return_indices=True)
        self.pad2, self.enc2 = torch.nn.ReflectionPad2d(1), torch.nn.Conv2d(c, 2 * c, 3)
        self.pool2 = torch.nn.MaxPool2d(2, return_indices=True)
        self.pad3, self.mid = torch.nn.ReflectionPad2d(1), torch.nn.Conv2d(2 * c, 2 * c, 3)
        self.aux = torch.nn.Conv2d(2 * c, len(CLASSES), 1)
        self.up = torch.nn.Upsample(scale_factor=4, mode="bilinear", align_corners=False)
        self.unpool2 = torch.nn.MaxUnpool2d(2)
        self.pad4, self.dec2 = torch.nn.ReflectionPad2d(1), torch.nn.Conv2d(2 * c, c, 3)
        self.unpool1 = torch.nn.MaxUnpool2d(2)
        self.pad5, self.dec1 = torch.nn.ReflectionPad2d(1), torch.nn.Conv2d(c, c, 3)
        self.head = torch.nn.Conv2d(c, len(CLASSES), 1)

    def forward(self, x):
        relu = torch.relu
        x, i1 = self.pool1(relu(self.enc1(self.pad1(x))))
        x, i2 = self.pool2(relu(self.enc2(self.pad2(x))))
        x = relu(self.mid(self.pad3(x)))
        aux = self.up(self.aux(x))
        x = relu(self.dec2(self.pad4(self.unpool2(x, i2))))
        x = relu(self.dec1(self.pad5(self.unpool1(x, i1))))
        return self.head(x) + aux


# --------------------------------------------------------------------------- Flax


class SegNet(nn.Module):
    """The twin in linen, channels-last: ``[B, H, W, 1] -> [B, H, W, classes]``."""

    width: int = 8

    @nn.compact
    def __call__(self, x):
        c = self.width
        conv = lambda n, k=3: nn.Conv(n, (k, k), padding="VALID")
        x, i1 = jpl.MaxPool2d(2, return_indices=True)(
            nn.relu(conv(c)(jpl.ReflectionPad2d(1)(x))))
        x, i2 = jpl.MaxPool2d(2, return_indices=True)(
            nn.relu(conv(2 * c)(jpl.ReflectionPad2d(1)(x))))
        x = nn.relu(conv(2 * c)(jpl.ReflectionPad2d(1)(x)))
        aux = jpl.Upsample(scale_factor=4, mode="bilinear", align_corners=False)(
            conv(len(CLASSES), 1)(x))
        x = nn.relu(conv(c)(jpl.ReflectionPad2d(1)(jpl.MaxUnpool2d(2)(x, i2))))
        x = nn.relu(conv(c)(jpl.ReflectionPad2d(1)(jpl.MaxUnpool2d(2)(x, i1))))
        return conv(len(CLASSES), 1)(x) + aux


def train(model, variables, images, labels, steps: int, batch: int, seed: int):
    optimizer = optax.adam(3e-3)
    params = variables["params"]
    state = optimizer.init(params)

    def loss_fn(params, x, y):
        logits = model.apply({"params": params}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @jax.jit
    def step(params, state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(steps):
        pick = rng.choice(len(images), batch, replace=False)
        params, state, loss = step(params, state, images[pick], labels[pick])
        losses.append(float(loss))
    return {"params": params}, losses


def pixel_accuracy(model, variables, images, labels) -> float:
    logits = jax.jit(model.apply)(variables, images)
    return float(jnp.mean(jnp.argmax(logits, -1) == labels))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=60, help="training steps (default 60)")
    p.add_argument("--size", type=int, default=32, help="image size, a multiple of 4")
    p.add_argument("--width", type=int, default=8, help="channels of the first layer")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("out"), help="where the metrics go")
    args = p.parse_args(argv)
    if args.size % 4:
        p.error("--size must be a multiple of 4 (two 2x2 poolings)")

    t0 = time.perf_counter()
    images, labels = make_scenes(256, args.size, args.seed)
    test_images, test_labels = make_scenes(32, args.size, args.seed + 1)
    torch.manual_seed(args.seed)
    torch_model = TorchSegNet(args.width).double()
    model = SegNet(args.width)
    example = jnp.ones((1, args.size, args.size, 1))
    # Jitted: Flax's init run eagerly compiles every op on its own (the same values).
    init = jax.jit(model.init)(jax.random.key(0), example)
    variables = parity.load_torch_weights(torch_model, init, model=model, x=example)
    before = pixel_accuracy(model, variables, test_images, test_labels)
    variables, losses = train(model, variables, images, labels, args.steps, args.batch_size,
                              args.seed)
    after = pixel_accuracy(model, variables, test_images, test_labels)
    trained = time.perf_counter() - t0
    print(f"SegNet-style network, {sum(t.numel() for t in torch_model.parameters()):,} "
          f"parameters; {args.steps} Adam steps on {args.size}x{args.size} scenes: loss "
          f"{losses[0]:.3f} -> {losses[-1]:.3f}, test pixel accuracy {before:.1%} -> "
          f"{after:.1%} (background alone: {np.mean(test_labels == 0):.1%}) ({trained:.0f} s)")

    # the trained weights, back into torch (paired in the order the model calls its layers)
    parity.to_torch_weights(variables, torch_model, model=model, x=example)
    x = np.moveaxis(test_images[:2], -1, 1).astype(np.float64)  # torch's layout
    reports = {}
    for dtype in (np.float64, np.float32):
        t1 = time.perf_counter()
        report = parity.compare_layers(torch_model, model, variables, x.astype(dtype))
        reports[np.dtype(dtype).name] = report
        print(report.format().rstrip("\n") if dtype is np.float64 else report.summary())
        print(f"({time.perf_counter() - t1:.0f} s)")
    seconds = time.perf_counter() - t0

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "segment_metrics.json").write_text(json.dumps({
        "losses": losses, "accuracy_before": before, "accuracy_after": after,
        "parity_ok": {k: r.ok for k, r in reports.items()}, "seconds": seconds}, indent=1))
    return 0 if all(r.ok for r in reports.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
