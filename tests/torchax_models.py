"""Small torch models with the pooling and resampling of torchvision's and timm's
architectures (definitions only, small widths: torchvision's own classes are not used), and
the comparison of one model through torchax against torch eager.

``python -m tests.torchax_models`` prints, for each op form and each model, how far
torchax alone and torchax with jaxpool are from torch in float64 (values / gradient, worst
absolute difference), and the scatters and gathers in the jitted gradient.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import jaxpool.torchax as jt


def conv(cin, cout, k=3, s=1, p=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, p), nn.ReLU())


class Inception(nn.Module):
    """GoogLeNet's block: its pool branch is a 3/1/1 ceil-mode max pool."""

    def __init__(self, cin, c):
        super().__init__()
        self.b1, self.b2 = conv(cin, c, 1, 1, 0), conv(cin, c, 3)
        self.b3 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv(cin, c, 1, 1, 0))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b2(x), self.b3(x)], 1)


class GoogLeNet(nn.Module):
    """torchvision's GoogLeNet layout: ceil-mode 3/2 max pools between blocks, an
    adaptive average pool before the classifier."""

    def __init__(self, n=10):
        super().__init__()
        self.stem = nn.Sequential(conv(3, 8, 7, 2, 3), nn.MaxPool2d(3, 2, ceil_mode=True))
        self.a = Inception(8, 4)
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.b = Inception(12, 4)
        self.fc = nn.Linear(12, n)

    def forward(self, x):
        x = self.b(self.pool(self.a(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Fire(nn.Module):
    def __init__(self, cin, s, e):
        super().__init__()
        self.squeeze = conv(cin, s, 1, 1, 0)
        self.e1, self.e3 = conv(s, e, 1, 1, 0), conv(s, e, 3)

    def forward(self, x):
        x = self.squeeze(x)
        return torch.cat([self.e1(x), self.e3(x)], 1)


class SqueezeNet(nn.Module):
    """torchvision's SqueezeNet 1.1: fire modules between ceil-mode 3/2 max pools, a conv
    classifier and an adaptive average pool."""

    def __init__(self, n=10):
        super().__init__()
        self.features = nn.Sequential(conv(3, 8, 3, 2, 0), nn.MaxPool2d(3, 2, ceil_mode=True),
                                      Fire(8, 4, 6), nn.MaxPool2d(3, 2, ceil_mode=True),
                                      Fire(12, 4, 6))
        self.classifier = nn.Sequential(nn.Conv2d(12, n, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


class DenseNet(nn.Module):
    """torchvision's DenseNet: a 3/2/1 max pool stem, dense layers concatenated, a
    transition's 2/2 average pool, adaptive average pool."""

    def __init__(self, n=10):
        super().__init__()
        self.stem = nn.Sequential(conv(3, 8, 7, 2, 3), nn.MaxPool2d(3, 2, 1))
        self.l1, self.l2 = conv(8, 4), conv(12, 4)
        self.transition = nn.Sequential(nn.Conv2d(16, 8, 1), nn.AvgPool2d(2, 2))
        self.fc = nn.Linear(8, n)

    def forward(self, x):
        x = self.stem(x)
        x = torch.cat([x, self.l1(x)], 1)
        x = torch.cat([x, self.l2(x)], 1)
        x = F.relu(self.transition(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1))


class ResNet(nn.Module):
    """torchvision's ResNet: 7/2/3 conv, 3/2/1 max pool, a residual block, adaptive
    average pool."""

    def __init__(self, n=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.block = nn.Sequential(conv(8, 8), nn.Conv2d(8, 8, 3, 1, 1))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8, n)

    def forward(self, x):
        x = self.stem(x)
        x = F.relu(x + self.block(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class PyramidSegmenter(nn.Module):
    """A segmentation head as torchvision's DeepLabV3 ASPP pooling and PSPNet: adaptive
    average pools to 1, 2, 3 and 6, each upsampled bilinearly back; the logits upsampled
    bilinearly to the input."""

    def __init__(self, n=4):
        super().__init__()
        self.backbone = nn.Sequential(conv(3, 8, 3, 2, 1), conv(8, 8, 3, 2, 1))
        self.branches = nn.ModuleList(
            nn.Sequential(nn.AdaptiveAvgPool2d(s), nn.Conv2d(8, 2, 1)) for s in (1, 2, 3, 6))
        self.head = nn.Conv2d(16, n, 1)

    def forward(self, x):
        f = self.backbone(x)
        pooled = [F.interpolate(b(f), size=f.shape[-2:], mode="bilinear", align_corners=False)
                  for b in self.branches]
        y = self.head(torch.cat([f, *pooled], 1))
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


class SegNet(nn.Module):
    """SegNet: 2/2 max pools that keep their indices, MaxUnpool2d in the decoder."""

    def __init__(self, n=4):
        super().__init__()
        self.e1, self.e2 = conv(3, 6), conv(6, 8)
        self.pool = nn.MaxPool2d(2, 2, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2, 2)
        self.d2, self.d1 = conv(8, 6), nn.Conv2d(6, n, 3, 1, 1)

    def forward(self, x):
        x, i1 = self.pool(self.e1(x))
        x, i2 = self.pool(self.e2(x))
        x = self.d2(self.unpool(x, i2))
        return self.d1(self.unpool(x, i1))


class GlobalPoolNet(nn.Module):
    """timm's classifier head with ``global_pool="max"`` (adaptive max pool to 1) or
    ``"avgmax"`` (the mean of the average and max pools), after a ceil-mode average pool
    stem (timm's ``avg_down``)."""

    def __init__(self, pool: str, n=10):
        super().__init__()
        self.pool_type = pool
        self.features = nn.Sequential(conv(3, 8, 3, 2, 1),
                                      nn.AvgPool2d(3, 2, ceil_mode=True, count_include_pad=False),
                                      conv(8, 8))
        self.fc = nn.Linear(8, n)

    def forward(self, x):
        x = self.features(x)
        pooled = F.adaptive_max_pool2d(x, 1)
        if self.pool_type == "avgmax":
            pooled = 0.5 * (pooled + F.adaptive_avg_pool2d(x, 1))
        return self.fc(torch.flatten(pooled, 1))


class ResNetD(nn.Module):
    """timm's ResNet-D (``avg_down=True``): the shortcut's 2/2 ceil-mode average pool
    without padding in the divisor, before its 1x1 conv."""

    def __init__(self, n=10):
        super().__init__()
        self.stem = nn.Sequential(conv(3, 8, 3, 2, 1), nn.MaxPool2d(3, 2, 1))
        self.block = nn.Sequential(conv(8, 8, 3, 2, 1), nn.Conv2d(8, 8, 3, 1, 1))
        self.down = nn.Sequential(nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False),
                                  nn.Conv2d(8, 8, 1))
        self.fc = nn.Linear(8, n)

    def forward(self, x):
        x = self.stem(x)
        x = F.relu(self.down(x) + self.block(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


MODELS = {
    "GoogLeNet": (GoogLeNet, 33), "SqueezeNet": (SqueezeNet, 33), "DenseNet": (DenseNet, 32),
    "ResNet": (ResNet, 32),
    "timm ResNet-D (avg_down)": (ResNetD, 36), "segmentation (PSP/ASPP)": (PyramidSegmenter, 24),
    "SegNet": (SegNet, 16), "timm global_pool=max": (lambda: GlobalPoolNet("max"), 29),
    "timm global_pool=avgmax": (lambda: GlobalPoolNet("avgmax"), 29),
}
"""name: (constructor, input extent)."""

def nan_at(x):
    x = x.clone()
    x.view(-1)[5] = float("nan")
    return x


def pool_then_unpool(d, k, s):
    pool, unpool = getattr(F, f"max_pool{d}d"), getattr(F, f"max_unpool{d}d")
    return lambda x: unpool(*pool(x, k, s, return_indices=True), k, s, output_size=x.shape[2:])


aten = torch.ops.aten
# name: (function of one tensor, input shape, exact: values are torch's bit for bit)
CASES = {
    "avg_pool1d ceil": (lambda x: F.avg_pool1d(x, 3, 2, ceil_mode=True), (2, 3, 8), False),
    "avg_pool2d ceil": (lambda x: F.avg_pool2d(x, 3, 2, ceil_mode=True), (2, 3, 8, 8), False),
    "avg_pool2d pad no-count": (lambda x: F.avg_pool2d(x, 3, 2, 1, True, False), (1, 2, 7, 8),
                                False),
    "avg_pool2d divisor": (lambda x: F.avg_pool2d(x, 2, divisor_override=3), (1, 2, 6, 6), False),
    "avg_pool3d ceil": (lambda x: F.avg_pool3d(x, 3, 2, ceil_mode=True), (1, 2, 6, 6, 5), False),
    "lp_pool2d": (lambda x: F.lp_pool2d(x, 2.0, 2), (1, 2, 6, 6), False),
    "lp_pool1d": (lambda x: F.lp_pool1d(x.exp(), 3.0, 3, 2), (1, 2, 9), False),  # sum > 0
    "max_pool1d": (lambda x: F.max_pool1d(x, 3, 2, 1), (2, 3, 9), True),
    "max_pool2d ceil": (lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True), (2, 3, 8, 8), True),
    "max_pool2d dilation": (lambda x: F.max_pool2d(x, 3, 1, 1, dilation=2), (1, 2, 8, 8), True),
    "max_pool2d indices": (lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True),
                           (1, 2, 8, 8), True),
    "max_pool3d indices ceil": (lambda x: F.max_pool3d(x, 2, 2, ceil_mode=True,
                                                       return_indices=True), (1, 2, 5, 5, 4), True),
    "adaptive_avg_pool1d": (lambda x: F.adaptive_avg_pool1d(x, 4), (1, 2, 9), False),
    "adaptive_avg_pool2d ragged": (lambda x: F.adaptive_avg_pool2d(x, (3, 5)), (1, 2, 7, 8),
                                   False),
    "adaptive_avg_pool3d": (lambda x: F.adaptive_avg_pool3d(x, 2), (1, 2, 5, 5, 3), False),
    "adaptive_max_pool1d": (lambda x: F.adaptive_max_pool1d(x, 4), (1, 2, 9), True),
    "adaptive_max_pool2d indices": (lambda x: F.adaptive_max_pool2d(x, 3, return_indices=True),
                                    (1, 2, 7, 8), True),
    "adaptive_max_pool3d": (lambda x: F.adaptive_max_pool3d(x, 2), (1, 2, 5, 5, 3), True),
    "nearest 1d scale": (lambda x: F.interpolate(x, scale_factor=2), (1, 2, 5), True),
    "nearest 2d size": (lambda x: F.interpolate(x, size=(7, 5)), (1, 2, 4, 6), True),
    "nearest-exact 3d": (lambda x: F.interpolate(x, size=5, mode="nearest-exact"),
                         (1, 2, 3, 4, 3), True),
    "linear align_corners": (lambda x: F.interpolate(x, scale_factor=1.5, mode="linear",
                                                     align_corners=True), (1, 2, 6), False),
    "bilinear scale": (lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear"),
                       (1, 2, 5, 6), False),
    "bicubic int size": (lambda x: F.interpolate(x, size=8, mode="bicubic"), (1, 2, 5, 6), False),
    "Upsample(size=8)": (nn.Upsample(size=8, mode="bilinear"), (1, 2, 5, 5), False),
    "bilinear antialias": (lambda x: F.interpolate(x, size=4, mode="bilinear", antialias=True),
                           (1, 2, 9, 8), False),
    "bicubic antialias": (lambda x: F.interpolate(x, scale_factor=0.5, mode="bicubic",
                                                  antialias=True), (1, 2, 9, 8), False),
    "trilinear": (lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"), (1, 1, 3, 3, 2),
                  False),
    "area": (lambda x: F.interpolate(x, size=(3, 5), mode="area"), (1, 2, 7, 8), False),
    "aten upsample_bilinear2d.vec": (lambda x: aten.upsample_bilinear2d.vec(x, None, False,
                                                                            [1.5, 2.0]),
                                     (1, 2, 4, 4), False),
    "aten upsample_bilinear2d.default scales": (lambda x: aten.upsample_bilinear2d.default(
        x, [8, 10], False, 1.7, 1.7), (1, 2, 5, 6), False),
    "aten upsample_nearest2d.default": (lambda x: aten.upsample_nearest2d.default(x, [5, 7]),
                                        (1, 2, 4, 4), True),
    "aten avg_pool2d stride=[]": (lambda x: aten.avg_pool2d.default(x, [2, 2], []),
                                  (1, 2, 6, 6), False),
    "max_unpool1d": (pool_then_unpool(1, 2, 2), (1, 2, 8), True),
    "max_unpool2d": (pool_then_unpool(2, 2, 2), (1, 2, 6, 7), True),
    "max_unpool3d": (pool_then_unpool(3, 2, 2), (1, 1, 4, 4, 5), True),
    # padded windows; disjoint, as jaxpool's gradient differs from torch's for repeats
    "MaxUnpool2d 3/3/1": (lambda x: nn.MaxUnpool2d(3, 3, 1)(*F.max_pool2d(
        x, 3, 3, 1, return_indices=True), output_size=x.shape[2:]), (1, 2, 7, 7), True),
    "aten.max_unpool2d packet": (lambda x: aten.max_unpool2d(*F.max_pool2d(
        x, 2, 2, return_indices=True), [6, 6]), (1, 2, 6, 6), True),
    "reflect 1d": (lambda x: F.pad(x, (2, 3), "reflect"), (1, 2, 6), True),
    "ReflectionPad2d": (nn.ReflectionPad2d((1, 2, 3, 0)), (1, 2, 5, 5), True),
    "replicate 3d": (lambda x: F.pad(x, (1, 0, 2, 1, 0, 2), "replicate"), (1, 1, 3, 4, 3), True),
    "circular 2d": (lambda x: F.pad(x, (2, 1, 1, 1), "circular"), (1, 2, 4, 5), True),
    "constant crop": (lambda x: F.pad(x, (1, -2, 2, 0), value=1.5), (1, 2, 5, 5), True),
    "aten.reflection_pad2d packet": (lambda x: aten.reflection_pad2d(x, [1, 1, 2, 2]),
                                     (1, 2, 4, 4), True),
    "aten._upsample_bicubic2d_aa packet": (lambda x: aten._upsample_bicubic2d_aa(
        x, None, False, [0.5, 0.75]), (1, 2, 8, 8), False),
    "pixel_shuffle": (lambda x: F.pixel_shuffle(x, 2), (1, 8, 3, 3), True),
    "pixel_unshuffle": (lambda x: F.pixel_unshuffle(x, 2), (1, 2, 4, 6), True),
}


class Call(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def first(y):
    return y[0] if isinstance(y, tuple) else y


FORBIDDEN = ("scatter", "gather", "select_and_scatter")


def hlo_counts(text: str) -> dict[str, int]:
    """Scatter, gather and select_and_scatter ops in a StableHLO module's text."""
    return {name: len(re.findall(rf"stablehlo\.{name}\b", text)) for name in FORBIDDEN}


def build(name: str, seed: int = 0):
    """The model in float64 and its input ``[2, 3, n, n]``, both on torch's CPU."""
    make, extent = MODELS[name]
    torch.manual_seed(seed)
    model = make().double()
    x = torch.randn(2, 3, extent, extent, dtype=torch.float64)
    return model, x


def compare(name: str, env) -> dict:
    """One model through torchax (``env`` as installed or not) against torch eager:
    the worst absolute difference of the logits and of the parameter gradients of
    ``sum(logits * w)``, and the forbidden ops in the jitted gradient's StableHLO."""
    model, x = build(name)
    logits = model(x)
    w = torch.randn(logits.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    names = [n for n, _ in model.named_parameters()]
    grads = torch.autograd.grad((logits * w).sum(), list(model.parameters()))
    states, fn = jt.torchax.extract_jax(model, env)
    xj, wj = jnp.asarray(x.numpy()), jnp.asarray(w.numpy())

    def loss(params):
        logits = fn(params, (xj,))
        return jnp.sum(logits * wj), logits

    # the logits come out of the gradient's program: one model compiled, not two
    step = jax.jit(jax.value_and_grad(loss, has_aux=True))
    lowered = step.lower(states)
    text = lowered.as_text()
    (_, out), g = lowered.compile()(states)
    out = np.asarray(out)
    return {
        "logits": float(np.max(np.abs(out - logits.detach().numpy()))),
        "grads": max(float(np.max(np.abs(np.asarray(g[n]) - t.numpy())))
                     for n, t in zip(names, grads)),
        **hlo_counts(text),
    }


def compare_op(name: str, env) -> dict:
    """One op form of CASES through torchax against torch eager: worst absolute
    differences of the values and of the gradient, whether the indices are torch's, and
    the forbidden ops in the jitted gradient (torch's vjp of a random cotangent)."""
    fn, shape, _ = CASES[name]
    gen = torch.Generator().manual_seed(len(name))
    x = torch.randn(shape, dtype=torch.float64, generator=gen).requires_grad_()
    expected = fn(x)
    ct = torch.randn(first(expected).shape, dtype=torch.float64, generator=gen)
    (grad,) = torch.autograd.grad(first(expected), x, ct)
    _, jfn = jt.torchax.extract_jax(Call(fn), env)
    xj, ctj = jnp.asarray(x.detach().numpy()), jnp.asarray(ct.numpy())
    row = {}
    actual = jfn({}, (xj,))
    difference = np.asarray(first(actual)) - first(expected).detach().numpy()
    row["values"] = float(np.max(np.abs(difference)))
    if isinstance(expected, tuple):
        row["indices equal"] = bool(np.array_equal(np.asarray(actual[1]), expected[1].numpy()))
    step = jax.jit(jax.grad(lambda a: jnp.vdot(first(jfn({}, (a,))), ctj)))
    row.update(hlo_counts(step.lower(xj).as_text()))
    row["grad"] = float(np.max(np.abs(np.asarray(step(xj)) - grad.numpy())))
    return row


def _cell(row: dict) -> str:
    if "error" in row:
        return row["error"]
    forbidden = ", ".join(f"{row[k]} {k}" for k in FORBIDDEN if row.get(k)) or "none"
    indices = "" if row.get("indices equal", True) else ", indices differ"
    first_col = "values" if "values" in row else "logits"
    second_col = "grad" if "grad" in row else "grads"
    return f"{row[first_col]:.1e} / {row[second_col]:.1e}{indices}; {forbidden}"


def _rows(compare_one, names, env):
    rows = []
    for name in names:
        row = {}
        for label, install in (("torchax", False), ("jaxpool", True)):
            (jt.install if install else jt.uninstall)(env)
            try:
                row[label] = compare_one(name, env)
            except Exception as error:  # noqa: BLE001 (a failure is a row of the table)
                row[label] = {"error": f"{type(error).__name__}: {str(error)[:60]}"}
        rows.append((name, row))
    jt.uninstall(env)
    return rows


def main():
    jax.config.update("jax_enable_x64", True)
    env = jt.torchax.default_env()
    for title, compare_one, names in (("op", compare_op, CASES), ("model", compare, MODELS)):
        print(f"\n| {title} | torchax 0.0.13 alone | torchax + jaxpool |")
        print("|---|---|---|")
        for name, row in _rows(compare_one, names, env):
            print(f"| {name} | {_cell(row['torchax'])} | {_cell(row['jaxpool'])} |")


if __name__ == "__main__":
    main()
