"""The models of ``python -m benchmarks.programs.models``, each written three ways with the same
architecture and the same numbers: in Flax with jaxpool's layers (``jaxpool.linen``), in Flax
with the layers a JAX user would otherwise write (``Layers("peer")``), and in torch.

A Flax model takes its pooling, resampling, padding, unpooling and pixel-shuffle layers from a
``Layers``, channels-last; everything else (convolutions, dense layers, activations) is plain
Flax, so the two Flax versions have the same parameters. The torch model registers its layers
in the order the Flax model calls them, which is how ``parity.to_torch_weights`` pairs them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

__all__ = ["KINDS", "MODELS", "PEER_CALLS", "Layers", "Spec"]

# The layer kinds a model may take from its Layers; a swap replaces one kind at a time.
KINDS = ("max_pool", "avg_pool", "global_avg", "adaptive_avg", "resize", "pad", "unpool",
         "pixel_shuffle")

# What the JAX peer writes for each kind, for the report.
PEER_CALLS = {
    "max_pool": "flax.linen.max_pool",
    "avg_pool": "flax.linen.avg_pool",
    "global_avg": "jnp.mean",
    "adaptive_avg": "a mean of slices per window (no library call exists)",
    "resize": "jax.image.resize (align_corners=True: jax.image.scale_and_translate)",
    "pad": "jnp.pad(mode='edge')",
    "unpool": "argmax over reshaped windows, a one-hot select back",
    "pixel_shuffle": "reshape and transpose",
}


@dataclasses.dataclass(frozen=True)
class Layers:
    """The parameter-free layers of one side, on channels-last arrays: jaxpool's
    (``side="jaxpool"``) or the peer's (``side="peer"``); ``swapped`` names kinds the jaxpool
    side takes from the peer (to find which layer makes a step slower)."""

    side: str = "jaxpool"
    swapped: tuple[str, ...] = ()

    def _peer(self, kind: str) -> bool:
        return self.side == "peer" or kind in self.swapped

    def max_pool(self, x, k: int, s: int, p: int = 0):
        import flax.linen as nn

        import jaxpool.linen as jl

        n = x.ndim - 2
        if self._peer("max_pool"):  # pads with -inf, as torch
            return nn.max_pool(x, (k,) * n, (s,) * n, ((p, p),) * n)
        return (jl.MaxPool2d if n == 2 else jl.MaxPool3d)(k, s, p)(x)

    def avg_pool(self, x, k: int):
        import flax.linen as nn

        import jaxpool.linen as jl

        if self._peer("avg_pool"):
            return nn.avg_pool(x, (k, k), (k, k))
        return jl.AvgPool2d(k)(x)

    def global_avg(self, x):
        """[B, *spatial, C] -> [B, C]."""
        import jax.numpy as jnp

        import jaxpool.linen as jl

        if self._peer("global_avg"):
            return jnp.mean(x, axis=tuple(range(1, x.ndim - 1)))
        return jl.GlobalAvgPool()(x)

    def adaptive_avg(self, x, size: int):
        """[B, H, W, C] -> [B, size, size, C], torch's windows."""
        import jax.numpy as jnp

        import jaxpool.linen as jl

        if self._peer("adaptive_avg"):
            h, w = x.shape[1:3]
            rows = [[(i * n // size, -(-(i + 1) * n // size)) for i in range(size)]
                    for n in (h, w)]
            return jnp.stack([jnp.stack([jnp.mean(x[:, a:b, c:d], axis=(1, 2))
                                         for c, d in rows[1]], 1) for a, b in rows[0]], 1)
        return jl.AdaptiveAvgPool2d(size)(x)

    def resize(self, x, scale: int, align_corners: bool = False):
        """Linear (bilinear, trilinear) upsampling by an integer ``scale``."""
        import jax
        import jax.numpy as jnp

        import jaxpool.linen as jl

        spatial = x.shape[1:-1]
        size = tuple(scale * d for d in spatial)
        if self._peer("resize"):
            shape = (x.shape[0], *size, x.shape[-1])
            if not align_corners:
                return jax.image.resize(x, shape, "linear")
            # jax.image.resize has no align_corners; its corner-aligned map, which gives
            # torch's values: in = out * (n - 1) / (m - 1)
            s = [(m - 1) / (n - 1) for n, m in zip(spatial, size)]
            return jax.image.scale_and_translate(
                x, shape, tuple(range(1, len(spatial) + 1)), jnp.array(s, jnp.float32),
                jnp.array([0.5 - 0.5 * v for v in s], jnp.float32), "linear", antialias=False)
        mode = "bilinear" if len(spatial) == 2 else "trilinear"
        return jl.Upsample(scale_factor=scale, mode=mode, align_corners=align_corners)(x)

    def pad_replicate(self, x, w: int):
        import jax.numpy as jnp

        import jaxpool.linen as jl

        n = x.ndim - 2
        if self._peer("pad"):
            return jnp.pad(x, ((0, 0),) + ((w, w),) * n + ((0, 0),), mode="edge")
        return (jl.ReplicationPad2d if n == 2 else jl.ReplicationPad3d)(w)(x)

    def pool_with_indices(self, x, k: int):
        """2d max pooling by non-overlapping k x k windows: (values, what unpool needs)."""
        import jax.numpy as jnp

        import jaxpool.linen as jl

        if self._peer("unpool"):
            b, h, w, c = x.shape
            windows = (x.reshape(b, h // k, k, w // k, k, c).transpose(0, 1, 3, 5, 2, 4)
                       .reshape(b, h // k, w // k, c, k * k))
            # torch's winner: the first maximum in row-major window order
            onehot = jnp.argmax(windows, -1)[..., None] == jnp.arange(k * k)
            return jnp.sum(jnp.where(onehot, windows, 0), -1), onehot
        return jl.MaxPool2d(k, return_indices=True)(x)

    def unpool(self, values, indices, k: int):
        import jax.numpy as jnp

        import jaxpool.linen as jl

        if self._peer("unpool"):
            b, h, w, c = values.shape
            out = jnp.where(indices, values[..., None], 0).reshape(b, h, w, c, k, k)
            return out.transpose(0, 1, 4, 2, 5, 3).reshape(b, h * k, w * k, c)
        return jl.MaxUnpool2d(k)(values, indices)

    def pixel_shuffle(self, x, r: int):
        import jaxpool.linen as jl

        if self._peer("pixel_shuffle"):  # torch's channel order: c * r * r + i * r + j
            b, h, w, c = x.shape
            return (x.reshape(b, h, w, c // (r * r), r, r).transpose(0, 1, 4, 2, 5, 3)
                    .reshape(b, h * r, w * r, c // (r * r)))
        return jl.PixelShuffle(r)(x)


# ---- the Flax models (channels-last) ----------------------------------------------------

def _flax():
    """The Flax model classes, defined on first use (Flax is imported only then)."""
    import flax.linen as nn
    import jax.numpy as jnp

    relu = nn.relu

    def conv(f, k, s=1, p=0, d=1, n=2):
        return nn.Conv(f, (k,) * n, (s,) * n, padding=p, kernel_dilation=(d,) * n)

    class ResNet(nn.Module):
        """[B, H, W, 3] -> [B, classes]: stem, max pool 3/2/1, a basic block, a downsampling
        block whose shortcut average-pools 2x2 (ResNet-D), global average, dense."""

        layers: Layers
        width: int = 32
        classes: int = 10

        @nn.compact
        def __call__(self, x):
            L, w = self.layers, self.width
            h = L.max_pool(relu(conv(w, 7, 2, 3)(x)), 3, 2, 1)
            r = relu(conv(w, 3, 1, 1)(h))
            h = relu(h + conv(w, 3, 1, 1)(r))
            r = relu(conv(2 * w, 3, 2, 1)(h))
            r = conv(2 * w, 3, 1, 1)(r)
            h = relu(r + conv(2 * w, 1)(L.avg_pool(h, 2)))
            return nn.Dense(self.classes)(L.global_avg(h))

    class UNet(nn.Module):
        """[B, H, W, 3] -> [B, H, W, classes]: two max-pool levels down, bilinear x2 up,
        skips concatenated."""

        layers: Layers
        width: int = 16
        classes: int = 3

        @nn.compact
        def __call__(self, x):
            L, w = self.layers, self.width

            def block(h, f):
                return relu(conv(f, 3, 1, 1)(relu(conv(f, 3, 1, 1)(h))))

            e1 = block(x, w)
            e2 = block(L.max_pool(e1, 2, 2), 2 * w)
            b = block(L.max_pool(e2, 2, 2), 4 * w)
            d2 = block(jnp.concatenate([L.resize(b, 2), e2], -1), 2 * w)
            d1 = block(jnp.concatenate([L.resize(d2, 2), e1], -1), w)
            return conv(self.classes, 1)(d1)

    class UNet3d(nn.Module):
        """[B, D, H, W, 1] -> [B, D, H, W, classes]: convolutions on replicate-padded
        volumes, max pool 2, trilinear x2 up."""

        layers: Layers
        width: int = 8
        classes: int = 2

        @nn.compact
        def __call__(self, x):
            L, w = self.layers, self.width

            def block(h, f):
                return relu(conv(f, 3, p="VALID", n=3)(L.pad_replicate(h, 1)))

            e1 = block(x, w)
            e2 = block(L.max_pool(e1, 2, 2), 2 * w)
            b = block(L.max_pool(e2, 2, 2), 4 * w)
            d2 = block(jnp.concatenate([L.resize(b, 2), e2], -1), 2 * w)
            d1 = block(jnp.concatenate([L.resize(d2, 2), e1], -1), w)
            return conv(self.classes, 1, n=3)(d1)

    class DeepLab(nn.Module):
        """[B, H, W, 3] -> [B, H, W, classes]: a stride-8 backbone, an ASPP head (1x1, two
        dilated 3x3, image pooling), logits upsampled x8 bilinear with align_corners."""

        layers: Layers
        width: int = 16
        classes: int = 21

        @nn.compact
        def __call__(self, x):
            L, w = self.layers, self.width
            h = relu(conv(w, 3, 2, 1)(x))
            h = relu(conv(2 * w, 3, 2, 1)(h))
            h = relu(conv(4 * w, 3, 2, 1)(h))
            branches = [relu(conv(2 * w, 1)(h)), relu(conv(2 * w, 3, 1, 2, 2)(h)),
                        relu(conv(2 * w, 3, 1, 4, 4)(h))]
            pooled = relu(conv(2 * w, 1)(L.global_avg(h)[:, None, None, :]))
            branches.append(jnp.broadcast_to(pooled, branches[0].shape))
            h = relu(conv(2 * w, 1)(jnp.concatenate(branches, -1)))
            return L.resize(conv(self.classes, 1)(h), 8, align_corners=True)

    class SegNet(nn.Module):
        """[B, H, W, 3] -> [B, H, W, classes]: two conv + max-pool levels keeping the
        indices, a decoder that max-unpools with them."""

        layers: Layers
        width: int = 16
        classes: int = 4

        @nn.compact
        def __call__(self, x):
            L, w = self.layers, self.width
            v1, i1 = L.pool_with_indices(relu(conv(w, 3, 1, 1)(x)), 2)
            v2, i2 = L.pool_with_indices(relu(conv(2 * w, 3, 1, 1)(v1)), 2)
            d = relu(conv(w, 3, 1, 1)(L.unpool(v2, i2, 2)))
            return conv(self.classes, 3, 1, 1)(L.unpool(d, i1, 2))

    class ESPCN(nn.Module):
        """[B, H, W, 1] -> [B, rH, rW, 1]: three convolutions, pixel shuffle by r."""

        layers: Layers
        width: int = 64
        r: int = 3

        @nn.compact
        def __call__(self, x):
            h = jnp.tanh(conv(self.width, 5, 1, 2)(x))
            h = jnp.tanh(conv(self.width // 2, 3, 1, 1)(h))
            return self.layers.pixel_shuffle(conv(self.r * self.r, 3, 1, 1)(h), self.r)

    class Critic(nn.Module):
        """[B, 16, 16, 1] -> [B]: WGAN-GP's critic, a ragged adaptive average 7 -> 4."""

        layers: Layers
        width: int = 16

        @nn.compact
        def __call__(self, x):
            w = self.width
            h = nn.leaky_relu(conv(w, 4, 2, 1)(x), 0.2)
            h = nn.leaky_relu(conv(2 * w, 2, p="VALID")(h), 0.2)
            h = self.layers.adaptive_avg(h, 4)
            h = jnp.transpose(h, (0, 3, 1, 2)).reshape(h.shape[0], -1)  # torch's flatten order
            return nn.Dense(1)(h)[:, 0]

    return {"resnet": ResNet, "unet": UNet, "unet3d": UNet3d, "deeplab": DeepLab,
            "segnet": SegNet, "espcn": ESPCN, "wgan-gp": Critic}


# ---- the torch models (channels-first), layers registered in the Flax call order ----------

def _torch():
    import torch
    import torch.nn.functional as F
    from torch import nn

    class ResNet(nn.Module):
        def __init__(self, width=32, classes=10):
            super().__init__()
            w = width
            self.stem = nn.Conv2d(3, w, 7, 2, 3)
            self.a1, self.a2 = nn.Conv2d(w, w, 3, 1, 1), nn.Conv2d(w, w, 3, 1, 1)
            self.b1, self.b2 = nn.Conv2d(w, 2 * w, 3, 2, 1), nn.Conv2d(2 * w, 2 * w, 3, 1, 1)
            self.short = nn.Conv2d(w, 2 * w, 1)
            self.fc = nn.Linear(2 * w, classes)

        def forward(self, x):
            h = F.max_pool2d(F.relu(self.stem(x)), 3, 2, 1)
            h = F.relu(h + self.a2(F.relu(self.a1(h))))
            r = self.b2(F.relu(self.b1(h)))
            h = F.relu(r + self.short(F.avg_pool2d(h, 2)))
            return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))

    class _Block(nn.Module):
        def __init__(self, cin, f, n=2):
            super().__init__()
            conv = nn.Conv2d if n == 2 else nn.Conv3d
            self.c1, self.c2 = conv(cin, f, 3, 1, 1), conv(f, f, 3, 1, 1)

        def forward(self, h):
            return F.relu(self.c2(F.relu(self.c1(h))))

    class UNet(nn.Module):
        def __init__(self, width=16, classes=3):
            super().__init__()
            w = width
            self.e1, self.e2, self.b = _Block(3, w), _Block(w, 2 * w), _Block(2 * w, 4 * w)
            self.d2, self.d1 = _Block(6 * w, 2 * w), _Block(3 * w, w)
            self.out = nn.Conv2d(w, classes, 1)

        def forward(self, x):
            up = lambda h: F.interpolate(h, scale_factor=2, mode="bilinear")  # noqa: E731
            e1 = self.e1(x)
            e2 = self.e2(F.max_pool2d(e1, 2))
            b = self.b(F.max_pool2d(e2, 2))
            d2 = self.d2(torch.cat([up(b), e2], 1))
            return self.out(self.d1(torch.cat([up(d2), e1], 1)))

    class UNet3d(nn.Module):
        def __init__(self, width=8, classes=2):
            super().__init__()
            w = width

            def conv(cin, f):
                return nn.Conv3d(cin, f, 3, 1, 1, padding_mode="replicate")

            self.e1, self.e2, self.b = conv(1, w), conv(w, 2 * w), conv(2 * w, 4 * w)
            self.d2, self.d1 = conv(6 * w, 2 * w), conv(3 * w, w)
            self.out = nn.Conv3d(w, classes, 1)

        def forward(self, x):
            up = lambda h: F.interpolate(h, scale_factor=2, mode="trilinear")  # noqa: E731
            e1 = F.relu(self.e1(x))
            e2 = F.relu(self.e2(F.max_pool3d(e1, 2)))
            b = F.relu(self.b(F.max_pool3d(e2, 2)))
            d2 = F.relu(self.d2(torch.cat([up(b), e2], 1)))
            return self.out(F.relu(self.d1(torch.cat([up(d2), e1], 1))))

    class DeepLab(nn.Module):
        def __init__(self, width=16, classes=21):
            super().__init__()
            w = width
            self.c1, self.c2 = nn.Conv2d(3, w, 3, 2, 1), nn.Conv2d(w, 2 * w, 3, 2, 1)
            self.c3 = nn.Conv2d(2 * w, 4 * w, 3, 2, 1)
            self.a1 = nn.Conv2d(4 * w, 2 * w, 1)
            self.a2 = nn.Conv2d(4 * w, 2 * w, 3, 1, 2, dilation=2)
            self.a3 = nn.Conv2d(4 * w, 2 * w, 3, 1, 4, dilation=4)
            self.pool = nn.Conv2d(4 * w, 2 * w, 1)
            self.project = nn.Conv2d(8 * w, 2 * w, 1)
            self.classify = nn.Conv2d(2 * w, classes, 1)

        def forward(self, x):
            h = F.relu(self.c3(F.relu(self.c2(F.relu(self.c1(x))))))
            branches = [F.relu(self.a1(h)), F.relu(self.a2(h)), F.relu(self.a3(h))]
            pooled = F.relu(self.pool(F.adaptive_avg_pool2d(h, 1)))
            branches.append(pooled.expand_as(branches[0]))
            h = F.relu(self.project(torch.cat(branches, 1)))
            return F.interpolate(self.classify(h), scale_factor=8, mode="bilinear",
                                 align_corners=True)

    class SegNet(nn.Module):
        def __init__(self, width=16, classes=4):
            super().__init__()
            w = width
            self.e1, self.e2 = nn.Conv2d(3, w, 3, 1, 1), nn.Conv2d(w, 2 * w, 3, 1, 1)
            self.d2, self.d1 = nn.Conv2d(2 * w, w, 3, 1, 1), nn.Conv2d(w, classes, 3, 1, 1)

        def forward(self, x):
            v1, i1 = F.max_pool2d(F.relu(self.e1(x)), 2, return_indices=True)
            v2, i2 = F.max_pool2d(F.relu(self.e2(v1)), 2, return_indices=True)
            d = F.relu(self.d2(F.max_unpool2d(v2, i2, 2)))
            return self.d1(F.max_unpool2d(d, i1, 2))

    class ESPCN(nn.Module):
        def __init__(self, width=64, r=3):
            super().__init__()
            self.c1 = nn.Conv2d(1, width, 5, 1, 2)
            self.c2 = nn.Conv2d(width, width // 2, 3, 1, 1)
            self.c3 = nn.Conv2d(width // 2, r * r, 3, 1, 1)
            self.r = r

        def forward(self, x):
            h = torch.tanh(self.c2(torch.tanh(self.c1(x))))
            return F.pixel_shuffle(self.c3(h), self.r)

    class Critic(nn.Module):
        def __init__(self, width=16):
            super().__init__()
            self.c1 = nn.Conv2d(1, width, 4, 2, 1)
            self.c2 = nn.Conv2d(width, 2 * width, 2)
            self.fc = nn.Linear(2 * width * 16, 1)

        def forward(self, x):
            h = F.leaky_relu(self.c1(x), 0.2)
            h = F.leaky_relu(self.c2(h), 0.2)
            return self.fc(F.adaptive_avg_pool2d(h, 4).flatten(1))[:, 0]

    return {"resnet": ResNet, "unet": UNet, "unet3d": UNet3d, "deeplab": DeepLab,
            "segnet": SegNet, "espcn": ESPCN, "wgan-gp": Critic}


# ---- the specs: shapes, losses, which layers --------------------------------------------

@dataclasses.dataclass(frozen=True)
class Spec:
    """One model: its input (channels-first, as torch takes it), its loss, its layer kinds;
    ``tiny``: the shape and widths of the test grid."""

    name: str
    title: str
    shape: tuple[int, ...]
    loss: str  # "classify" | "segment" | "regress" | "wgan-gp"
    kinds: tuple[str, ...]
    kwargs: dict = dataclasses.field(default_factory=dict)
    tiny_shape: tuple[int, ...] = ()
    tiny_kwargs: dict = dataclasses.field(default_factory=dict)
    classes: int = 0  # of the classification/segmentation loss; r for "regress"

    def flax_module(self, layers: Layers, tiny: bool = False):
        return _flax()[self.name](layers, **(self.tiny_kwargs if tiny else self.kwargs))

    def torch_module(self, tiny: bool = False):
        return _torch()[self.name](**(self.tiny_kwargs if tiny else self.kwargs))

    def input_shape(self, tiny: bool = False) -> tuple[int, ...]:
        return self.tiny_shape if tiny else self.shape

    def batch(self, tiny: bool = False, seed: int = 0) -> dict[str, np.ndarray]:
        """The step's batch, channels-first float32 images and int32 labels."""
        rng = np.random.default_rng(seed)
        shape = self.input_shape(tiny)
        x = rng.standard_normal(shape, dtype=np.float32)
        if self.loss == "classify":
            return {"x": x, "y": rng.integers(0, self.classes, shape[0]).astype(np.int32)}
        if self.loss == "segment":
            labels = rng.integers(0, self.classes, (shape[0],) + shape[2:])
            return {"x": x, "y": labels.astype(np.int32)}
        if self.loss == "regress":  # the high-resolution image
            r = self.classes
            y = rng.standard_normal((shape[0], shape[1], r * shape[2], r * shape[3]),
                                    dtype=np.float32)
            return {"x": x, "y": np.tanh(y)}
        return {"x": x, "fake": rng.standard_normal(shape, dtype=np.float32),  # WGAN-GP
                "eps": rng.uniform(size=(shape[0], 1, 1, 1)).astype(np.float32)}


MODELS = {spec.name: spec for spec in (
    Spec("resnet", "ResNet-shaped classifier", (16, 3, 64, 64), "classify",
         ("max_pool", "avg_pool", "global_avg"), tiny_shape=(2, 3, 16, 16),
         tiny_kwargs={"width": 4}, classes=10),
    Spec("unet", "U-Net (max pool, bilinear x2)", (4, 3, 64, 64), "segment",
         ("max_pool", "resize"), tiny_shape=(2, 3, 16, 16), tiny_kwargs={"width": 4},
         classes=3),
    Spec("unet3d", "3d U-Net (trilinear x2, replicate pad)", (2, 1, 16, 16, 16), "segment",
         ("max_pool", "resize", "pad"), tiny_shape=(1, 1, 8, 8, 8), tiny_kwargs={"width": 2},
         classes=2),
    Spec("deeplab", "DeepLab-style head (bilinear x8, align_corners)", (4, 3, 96, 96),
         "segment", ("global_avg", "resize"), tiny_shape=(2, 3, 32, 32),
         tiny_kwargs={"width": 4}, classes=21),
    Spec("segnet", "SegNet decoder (max_unpool)", (8, 3, 64, 64), "segment", ("unpool",),
         tiny_shape=(2, 3, 16, 16), tiny_kwargs={"width": 4}, classes=4),
    Spec("espcn", "ESPCN upscaler (pixel shuffle x3)", (8, 1, 32, 32), "regress",
         ("pixel_shuffle",), tiny_shape=(2, 1, 8, 8), tiny_kwargs={"width": 8}, classes=3),
    Spec("wgan-gp", "WGAN-GP critic (adaptive avg 7 -> 4, double backward)", (64, 1, 16, 16),
         "wgan-gp", ("adaptive_avg",), tiny_shape=(4, 1, 16, 16), tiny_kwargs={"width": 4}),
)}


def loss_fns(spec: Spec) -> tuple[Callable, Callable]:
    """(JAX loss of (apply, params, batch), torch loss of (model, batch)): the same
    quantity; the JAX batch is channels-last."""
    import jax
    import jax.numpy as jnp
    import optax
    import torch
    import torch.nn.functional as F

    if spec.loss in ("classify", "segment"):
        def jax_loss(apply, params, b):
            logits = apply(params, b["x"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, b["y"]).mean()

        def torch_loss(model, b):
            return F.cross_entropy(model(b["x"]), b["y"].long())
    elif spec.loss == "regress":
        def jax_loss(apply, params, b):
            return jnp.mean(jnp.square(apply(params, b["x"]) - b["y"]))

        def torch_loss(model, b):
            return F.mse_loss(model(b["x"]), b["y"])
    else:
        def jax_loss(apply, params, b):
            real, fake, eps = b["x"], b["fake"], b["eps"]
            x_hat = eps * real + (1 - eps) * fake
            g = jax.grad(lambda x: apply(params, x).sum())(x_hat)
            norm = jnp.sqrt(jnp.sum(g * g, axis=(1, 2, 3)) + 1e-12)
            gp = jnp.mean(jnp.square(norm - 1))
            return -(apply(params, real).mean() - apply(params, fake).mean()) + 10 * gp

        def torch_loss(model, b):
            real, fake, eps = b["x"], b["fake"], b["eps"]
            x_hat = (eps * real + (1 - eps) * fake).requires_grad_(True)
            (g,) = torch.autograd.grad(model(x_hat).sum(), x_hat, create_graph=True)
            norm = torch.sqrt(g.square().sum((1, 2, 3)) + 1e-12)
            gp = (norm - 1).square().mean()
            return -(model(real).mean() - model(fake).mean()) + 10 * gp
    return jax_loss, torch_loss
