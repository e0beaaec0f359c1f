"""The cells the benchmark times, and torch's reference for each.

A cell is one pooling call on one input shape. Shapes are given channels-first
([B, C, H, W]) whatever the layout in memory; a channels-last cell holds the same
tensor as [B, H, W, C].
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

__all__ = ["EAGER_MODES", "GRIDS", "JIT_MODES", "MODES", "Case", "adaptive", "adaptive_max", "avg",
           "global_", "max_", "select"]

JIT_MODES = ("fwd", "grad", "gradgrad")
# The same quantities without jax.jit: first call (tracing and compiling included) and
# repeat call.
EAGER_MODES = ("eager-fwd", "eager-grad")
MODES = JIT_MODES + EAGER_MODES
MODE_TITLES = {
    "fwd": "forward",
    "grad": "grad of sum(pool(x)**2)",
    "gradgrad": "grad of |grad|**2",
    "eager-fwd": "forward, no jit",
    "eager-grad": "grad of sum(pool(x)**2), no jit",
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One grid cell: an op, its arguments and a channels-first input shape."""

    op: str  # "adaptive" | "avg" | "global" | "max" | "adaptive_max"
    shape: tuple[int, int, int, int]  # [B, C, H, W]
    dtype: str = "float32"
    channels_last: bool = False
    output_size: tuple[int, int] | None = None
    kernel_size: int = 0
    stride: int = 0
    padding: int = 0
    ceil_mode: bool = False
    count_include_pad: bool = True
    # "normal": N(0, 1). "ties": ReLU(N(0, 1)) rounded to quarters, as after a ReLU in low
    # precision: many windows hold their maximum twice, so that a max pooling whose
    # gradient goes elsewhere than torch's (another element, or split) is marked wrong.
    values: str = "normal"

    @property
    def is_max(self) -> bool:
        return self.op in ("max", "adaptive_max")

    @property
    def adaptive(self) -> bool:
        return self.op in ("adaptive", "adaptive_max")

    @property
    def memory_shape(self) -> tuple[int, ...]:
        b, c, h, w = self.shape
        return (b, h, w, c) if self.channels_last else (b, c, h, w)

    @property
    def spatial_axes(self) -> tuple[int, int]:
        return (1, 2) if self.channels_last else (2, 3)

    @property
    def itemsize(self) -> int:
        return {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}[self.dtype]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    @property
    def stride_(self) -> int:
        return self.stride or self.kernel_size

    @property
    def label(self) -> str:
        shape = "x".join(map(str, self.shape))
        if self.adaptive:
            oh, ow = self.output_size
            text = f"adaptive {'max ' * self.is_max}{shape} -> {oh if oh == ow else (oh, ow)}"
        elif self.op in ("avg", "max"):
            text = f"{self.op} {shape} k{self.kernel_size}"
            if self.stride_ != self.kernel_size:
                text += f" s{self.stride_}"
            if self.padding:
                text += f" p{self.padding}"
            if self.ceil_mode:
                text += " ceil"
            if not self.count_include_pad:
                text += " excl-pad"
        else:
            text = f"global {shape}"
        if self.channels_last:
            text += " NHWC"
        if self.dtype != "float32":
            text += " " + {"bfloat16": "bf16", "float16": "f16", "float64": "f64"}[self.dtype]
        return text

    def plan(self, channels_last: bool | None = None):
        """jaxpool's plan of this cell (:mod:`jaxpool.pooling.plan`), for the input as laid out in
        memory, or channels-first with ``channels_last=False``."""
        from jaxpool.pooling import plan as pool_plan

        cl = self.channels_last if channels_last is None else channels_last
        shape = self.memory_shape if cl == self.channels_last else self.shape
        if self.op == "global":
            return pool_plan.plan_global("global_avg_pool", shape, None, cl)
        if self.adaptive:
            return pool_plan.plan_adaptive(f"{self.op}_pool2d", shape, None, 2, self.output_size, cl)
        if self.is_max:
            return pool_plan.plan_max_pool("max_pool2d", shape, None, 2, self.kernel_size, self.stride_,
                                      self.padding, 1, self.ceil_mode, cl)
        return pool_plan.plan_avg_pool("avg_pool2d", shape, None, 2, self.kernel_size, self.stride_,
                                  self.padding, self.ceil_mode, self.count_include_pad, None, cl)

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Channels-first output shape, from jaxpool's shape rules."""
        if self.op == "global":
            return self.shape[:2]
        return self.plan(channels_last=False).output_shape

    @property
    def ceil_matters(self) -> bool:
        """Whether ``ceil_mode`` changes this cell's output (a peer without it cannot run it)."""
        return self.ceil_mode and self.output_shape != dataclasses.replace(
            self, ceil_mode=False).output_shape

    def to_memory(self, a: np.ndarray) -> np.ndarray:
        """A channels-first array in this cell's memory layout."""
        if self.channels_last and a.ndim == 4:
            return np.ascontiguousarray(a.transpose(0, 2, 3, 1))
        return a

    def torch_op(self):
        """Torch's function for this cell: channels-first tensor -> tensor."""
        import torch.nn.functional as F

        if self.adaptive:
            size = self.output_size
            pool = F.adaptive_max_pool2d if self.is_max else F.adaptive_avg_pool2d
            return lambda t: pool(t, size)
        if self.op == "global":
            return lambda t: F.adaptive_avg_pool2d(t, 1).flatten(1)
        k, s, p = self.kernel_size, self.stride_, self.padding
        ceil, cip = self.ceil_mode, self.count_include_pad
        if self.is_max:
            return lambda t: F.max_pool2d(t, k, s, p, ceil_mode=ceil)
        return lambda t: F.avg_pool2d(t, k, s, p, ceil_mode=ceil, count_include_pad=cip)


def adaptive(shape, out, **kw) -> Case:
    out = (out, out) if isinstance(out, int) else tuple(out)
    return Case("adaptive", tuple(shape), output_size=out, **kw)


def avg(shape, k, s=0, p=0, **kw) -> Case:
    return Case("avg", tuple(shape), kernel_size=k, stride=s or k, padding=p, **kw)


def global_(shape, **kw) -> Case:
    return Case("global", tuple(shape), **kw)


def max_(shape, k, s=0, p=0, **kw) -> Case:
    return Case("max", tuple(shape), kernel_size=k, stride=s or k, padding=p,
                values="ties", **kw)


def adaptive_max(shape, out, **kw) -> Case:
    out = (out, out) if isinstance(out, int) else tuple(out)
    return Case("adaptive_max", tuple(shape), output_size=out, values="ties", **kw)


FULL = (
    adaptive((64, 256, 15, 15), 4),
    adaptive((64, 256, 32, 32), 4),
    adaptive((32, 64, 56, 56), 7),
    adaptive((16, 64, 50, 50), 9),
    adaptive((16, 64, 7, 7), 9),
    adaptive((8, 32, 224, 224), 7),
    adaptive((8, 32, 225, 225), 11),
    adaptive((32, 512, 7, 7), 1),
    adaptive((64, 128, 33, 33), (5, 3)),
    adaptive((32, 64, 56, 56), 7, channels_last=True),
    adaptive((64, 256, 15, 15), 4, channels_last=True),
    adaptive((64, 256, 15, 15), 4, dtype="bfloat16"),
    avg((64, 64, 56, 56), 2),
    avg((64, 64, 56, 56), 3, 2, 1, count_include_pad=False),
    avg((32, 64, 32, 32), 3, 1, 1),
    avg((32, 256, 14, 14), 2),
    avg((16, 64, 56, 56), 3, 2, 1, ceil_mode=True),
    global_((64, 512, 7, 7)),
    global_((16, 256, 56, 56)),
    max_((64, 64, 112, 112), 3, 2, 1),  # the ResNet stem
    max_((64, 64, 112, 112), 3, 2, 1, channels_last=True),
    max_((32, 192, 56, 56), 3, 2, ceil_mode=True),  # GoogLeNet / Inception
    adaptive_max((32, 512, 7, 7), 1),
    adaptive_max((64, 256, 15, 15), 4),
    # the kinds of max-pooling derivative that lagged torch: a max head on a small map,
    # ragged adaptive windows, an inception branch (stride 1), VGG's 2x2, channels-last
    adaptive_max((32, 512, 9, 9), 1),
    adaptive_max((32, 512, 7, 7), 1, channels_last=True),
    adaptive_max((32, 256, 14, 14), 3),
    adaptive_max((32, 256, 14, 14), 3, channels_last=True),
    adaptive_max((64, 256, 15, 15), 4, channels_last=True),
    max_((32, 192, 28, 28), 3, 1, 1),
    max_((16, 64, 112, 112), 2),
    max_((32, 192, 56, 56), 3, 2, ceil_mode=True, channels_last=True),
    # average pooling's common cases where a peer led: DenseNet's 2x2 transition in flax's
    # own layout, and adaptive upsampling by a non-integer ratio
    avg((16, 64, 56, 56), 2, channels_last=True),
    adaptive((16, 64, 9, 9), 12),
)

# The default: one cell per kind of behaviour (ragged, keras-wrong, overlapping, ceil,
# global), the max cells of the full grid at a quarter or less of their size; a few
# minutes on 2 cores.
SHORT = (
    adaptive((64, 256, 15, 15), 4),
    adaptive((16, 64, 50, 50), 9),
    adaptive((32, 64, 56, 56), 7),
    avg((32, 64, 32, 32), 3, 1, 1),
    avg((16, 64, 56, 56), 3, 2, 1, ceil_mode=True),
    global_((64, 512, 7, 7)),
    max_((16, 64, 56, 56), 3, 2, 1),
    max_((16, 64, 56, 56), 3, 2, 1, channels_last=True),
    max_((8, 192, 28, 28), 3, 2, ceil_mode=True),
    adaptive_max((16, 256, 15, 15), 4),
)

# Tiny shapes that exercise every code path of the tool in seconds.
SMOKE = (
    adaptive((2, 3, 15, 15), 4),
    adaptive((2, 3, 7, 7), 9),
    adaptive((2, 3, 12, 12), (3, 4), channels_last=True),
    adaptive((2, 3, 15, 15), 4, dtype="bfloat16"),
    avg((2, 3, 9, 9), 3, 2, 1, count_include_pad=False),
    avg((2, 3, 9, 9), 3, 2, 1, ceil_mode=True),
    avg((2, 3, 8, 8), 2),
    global_((2, 3, 5, 5)),
    max_((2, 3, 9, 9), 3, 2, 1),
    max_((2, 3, 10, 10), 3, 2, ceil_mode=True, channels_last=True),
    adaptive_max((2, 3, 15, 15), 4),
    adaptive_max((2, 3, 14, 14), 7),
)

GRIDS = {"short": SHORT, "full": FULL, "smoke": SMOKE}


def select(cases, pattern: str | None):
    """Cells whose label matches the regular expression `pattern` (all if None)."""
    if not pattern:
        return tuple(cases)
    rx = re.compile(pattern)
    return tuple(c for c in cases if rx.search(c.label))
