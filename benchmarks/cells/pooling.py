"""The pooling cells: the grid of 2d pooling calls that ``python -m benchmarks`` times on
every side, and the 3d max-pooling cell with its own table.

A grid cell is one pooling call on one input shape. Shapes are given channels-first
([B, C, H, W]) whatever the layout in memory; a channels-last cell holds the same
tensor as [B, H, W, C]. ``GRIDS`` names the grid's cell sets (short, full, smoke).

The 3d cell: jaxpool.max_pool3d(x, 3, 2, 1) on 4x64x16x56x56 (video, ReLU inputs full of
ties) against torch on one thread, gradient and second derivative under jax.jit, both
layouts (torch's channels-last is ``channels_last_3d``). Run from the repository root:

    python -m benchmarks.cells.pooling      # the 3d cell: median ms per call, ratio to torch-1t

Each side's output is first compared with torch's in float64; a wrong side raises.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re

import numpy as np

__all__ = ["GRIDS", "MAX3D_SHAPE", "Case", "adaptive", "adaptive_max", "avg", "global_", "main",
           "max3d_rows", "max_", "select"]


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


MAX3D_SHAPE = (4, 64, 16, 56, 56)  # the 3d cell's input, channels-first
MAX3D_WORDS = ("The 3d max-pooling cell: jaxpool.max_pool3d(x, 3, 2, 1) on 4x64x16x56x56 "
               "(video, ReLU inputs full of ties) against torch on one thread, gradient and "
               "second derivative under jax.jit, both layouts (torch's channels-last is "
               "``channels_last_3d``).")


def max3d_rows(reps: int, min_sample_s: float) -> list[str]:
    """The 3d cell's table rows: each layout's gradient and second derivative."""
    import jax
    import jax.numpy as jnp
    import torch

    import jaxpool
    from benchmarks.runner import check, jax_mode, measure, torch_mode

    x64 = np.maximum(np.random.default_rng(0).standard_normal(MAX3D_SHAPE), 0)

    def torch_op(a):
        return torch.nn.functional.max_pool3d(a, 3, 2, 1)

    lines = []
    for channels_last in (False, True):
        x = jnp.asarray(np.moveaxis(x64, 1, -1) if channels_last else x64, jnp.float32)
        t = torch.from_numpy(x64.astype(np.float32))
        if channels_last:
            t = t.contiguous(memory_format=torch.channels_last_3d)
        for mode in ("grad", "gradgrad"):
            fn = jax.jit(jax_mode(lambda a: jaxpool.max_pool3d(a, 3, 2, 1,
                                                               channels_last=channels_last),
                                  mode))
            y = np.asarray(fn(x))
            wrong = check(np.moveaxis(y, -1, 1) if channels_last else y,
                          torch_mode(torch_op, torch.from_numpy(x64), mode)().numpy(),
                          "float32")
            if wrong:
                raise AssertionError(f"jaxpool {mode}: {wrong}")
            timed = measure({"jaxpool": lambda: jax.block_until_ready(fn(x)),
                             "torch-1t": torch_mode(torch_op, t, mode, threads=1)},
                            reps, min_sample_s)
            j, r = timed["jaxpool"], timed["torch-1t"]
            spread = {k: (v["q75_ms"] - v["q25_ms"]) / 2 for k, v in timed.items()}
            lines.append(f"| {'NDHWC' if channels_last else 'NCDHW'} | {mode} | "
                         f"{j['median_ms']:.1f} ±{spread['jaxpool']:.1f} | "
                         f"{r['median_ms']:.1f} ±{spread['torch-1t']:.1f} | "
                         f"{j['median_ms'] / r['median_ms']:.2f} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cells.pooling",
                                     description=MAX3D_WORDS)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--min-sample-s", type=float, default=0.05)
    args = parser.parse_args(argv)
    print("| layout | mode | jaxpool ms | torch-1t ms | ratio |\n|---|---|---:|---:|---:|")
    print("\n".join(max3d_rows(args.reps, args.min_sample_s)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
