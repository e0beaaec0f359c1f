"""The arithmetic of ``fractional_max_pool2d/3d``, in plain Python: torch's argument checks
and the static decisions of one call (extents, kernel, the step ``alpha`` of each axis).

torch (``aten/src/ATen/native/FractionalMaxPool2d.cpp``, ``FractionalMaxPool3d.cpp``)
places the windows of one (batch, channel) plane along each axis from one sample ``u`` in
``[0, 1)``::

    alpha = scalar(in - k) / scalar(out - 1)
    start[i] = int((i + u) * alpha) - int(u * alpha)    for i < out - 1
    start[out - 1] = in - k

every operation rounded to the input's own dtype (``scalar_t``: float16 and bfloat16
included, no wider accumulator), ``int`` truncating. The samples' last axis holds, for 2-D
input, ``(u_W, u_H)`` (width first), for 3-D input ``(u_T, u_H, u_W)``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Sequence

import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy)
import numpy as np

from jaxpool.core import checks, dtypes
from jaxpool.core.memo import memoized_plan



@dataclasses.dataclass(frozen=True)
class FractionalPlan:
    """One call: ``batch`` x ``channels`` planes of ``in_spatial`` pooled by ``kernel``
    windows to ``out_spatial``; ``alphas`` are torch's steps per axis (in the input's
    dtype, held as Python floats, exact); ``sample_axes[a]`` is where axis ``a``'s sample
    lies in the samples' last axis."""
    name: str
    batched: bool
    batch: int
    channels: int
    in_spatial: tuple
    out_spatial: tuple
    kernel: tuple
    alphas: tuple
    channels_last: bool
    dtype: str

    @property
    def dims(self) -> int:
        return len(self.in_spatial)

    @property
    def sample_axes(self) -> tuple:
        return (1, 0) if self.dims == 2 else (0, 1, 2)

    @property
    def samples_shape(self) -> tuple:
        """``[N, C, dims]`` (N is 1 for unbatched input)."""
        return (self.batch if self.batched else 1, self.channels, self.dims)

    @property
    def compute_dtype(self) -> str:
        """Half precision computes the window starts in float32, rounding every step."""
        return dtypes.compute_dtype(self.dtype)

    @property
    def output_shape(self) -> tuple:
        lead = (self.batch,) if self.batched else ()
        if self.channels_last:
            return lead + self.out_spatial + (self.channels,)
        return lead + (self.channels,) + self.out_spatial


def _ratios(name: str, output_ratio, dims: int) -> tuple:
    accepted = f"a number or a tuple of 1 or {dims} numbers, each >= 0"
    entries = list(output_ratio) if isinstance(output_ratio, (tuple, list)) else [output_ratio]
    if len(entries) not in (1, dims):
        raise ValueError(f"{name}: output_ratio must be {accepted}, got {output_ratio!r}")
    for entry in entries:
        if isinstance(entry, (bool, np.bool_)) or not isinstance(entry, numbers.Real):
            raise TypeError(f"{name}: output_ratio must be {accepted}, got {output_ratio!r}")
        if not (math.isfinite(entry) and float(entry) >= 0):
            raise ValueError(f"{name}: output_ratio must be {accepted}, got {output_ratio!r}")
    return tuple(float(e) for e in entries) * (dims // len(entries))


def step(in_size: int, out_size: int, kernel: int, dtype: str) -> float:
    """torch's ``alpha`` of one axis, rounded as in ``dtype``: ``(in - k) / (out - 1)``
    (1.0 where the axis has one window or none: it is then unused)."""
    if out_size <= 1:
        return 1.0
    t = np.dtype(dtype).type
    with np.errstate(all="ignore"):
        return float(t(t(in_size - kernel) / t(out_size - 1)))


@memoized_plan
def plan_fractional(name: str, input_shape: Sequence[int], dtype, dims: int, kernel_size,
                    output_size, output_ratio, samples_shape, samples_dtype,
                    have_key: bool, channels_last) -> FractionalPlan:
    """torch's checks (``F.fractional_max_pool{2,3}d`` and the ATen meta functions), as
    ValueError/TypeError naming the argument and value, before any computation.

    ``samples_shape``/``samples_dtype``: the given samples' (None: none given);
    ``have_key``: a key was given. Exactly one of the two must be."""
    channels_last = checks.check_channels_last(channels_last)
    batched, in_spatial, channel_axis = checks.check_input(
        name, tuple(input_shape), dtype, dims, channels_last)
    dtype = np.dtype(dtype).name if dtype is not None else "float32"
    shape = tuple(int(s) for s in input_shape)
    kernel = checks.int_tuple(f"{name}: kernel_size", kernel_size, dims, minimum=1)
    if output_size is not None and output_ratio is not None:
        raise ValueError(f"{name}: only one of output_size and output_ratio may be given, "
                         f"got output_size={output_size!r} and output_ratio={output_ratio!r}")
    if output_size is None and output_ratio is None:
        raise ValueError(f"{name} requires specifying either an output_size or an "
                         f"output_ratio")
    if output_size is not None:
        out = checks.int_tuple(f"{name}: output_size", output_size, dims, minimum=0)
    else:
        # torch: int(size * ratio) in Python floats.
        out = tuple(int(s * r) for s, r in zip(in_spatial, _ratios(name, output_ratio, dims)))
    # torch's own checks and their order; the 3-D kernel asks for a strict inequality.
    names = ("height", "width") if dims == 2 else ("time", "width", "height")
    axes = (0, 1) if dims == 2 else (0, 2, 1)
    for label, a in zip(names, axes):
        fits = (out[a] + kernel[a] - 1 <= in_spatial[a] if dims == 2
                else out[a] + kernel[a] - 1 < in_spatial[a])
        if not fits:
            need = "<=" if dims == 2 else "<"
            raise ValueError(
                f"{name}: pool {label} {kernel[a]} too large relative to input {label} "
                f"{in_spatial[a]} (output {out[a]} + kernel {kernel[a]} - 1 must be {need} "
                f"{in_spatial[a]}; output_size={output_size!r}, output_ratio="
                f"{output_ratio!r}, input of shape {shape})")
    batch = shape[0] if batched else 1
    channels = shape[channel_axis]
    planes = batch * channels
    taps = math.prod(kernel)
    if planes * math.prod(in_spatial) > dtypes.INT32_MAX or \
            planes * math.prod(out) * taps > dtypes.INT32_MAX:
        raise ValueError(f"{name}: input of shape {shape} with output {out} and kernel "
                         f"{kernel} has more positions than int32 indexes")
    expected = (batch, channels, dims)
    if samples_shape is None and not have_key:
        raise ValueError(f"{name} needs its windows' random samples: pass samples= (an "
                         f"array of shape {list(expected)} in [0, 1), in the input's dtype) "
                         f"or key= (a jax.random key to draw them from)")
    if samples_shape is not None and have_key:
        raise ValueError(f"{name}: give either samples= or key=, not both")
    if samples_shape is not None:
        samples_shape = tuple(samples_shape)
        if samples_dtype != dtype:
            raise TypeError(f"{name}: samples must have the input's dtype {dtype}, got "
                            f"samples of dtype {samples_dtype}")
        if samples_shape != expected:
            raise ValueError(f"{name}: samples must have shape {list(expected)} ([N, C, "
                             f"{dims}], N = 1 for unbatched input), got shape "
                             f"{list(samples_shape)} for input of shape {shape}")
    alphas = tuple(step(i, o, k, dtype) for i, o, k in zip(in_spatial, out, kernel))
    return FractionalPlan(name, batched, shape[0] if batched else 1, channels, in_spatial,
                          tuple(out), kernel, alphas, channels_last, dtype)


def window_starts(plan: FractionalPlan, samples: np.ndarray, axis: int) -> np.ndarray:
    """torch's window starts along spatial ``axis``, ``[N, C, out]`` int64, from concrete
    samples ``[N, C, dims]`` in NumPy (the arithmetic the kernel follows in JAX), unclipped."""
    t = np.dtype(plan.dtype).type
    size, out, k = plan.in_spatial[axis], plan.out_spatial[axis], plan.kernel[axis]
    u = np.asarray(samples)[..., plan.sample_axes[axis]].astype(t)[..., None]
    lead = u.shape[:-1]
    last = np.full(lead + (min(out, 1),), size - k, np.int64)
    if out <= 1:
        return last
    alpha = t(plan.alphas[axis])
    i = np.arange(out - 1).astype(t)
    with np.errstate(all="ignore"):
        high = ((i + u).astype(t) * alpha).astype(t)
        low = (u * alpha).astype(t)
        starts = np.trunc(high.astype(np.float64)) - np.trunc(low.astype(np.float64))
    return np.concatenate([starts.astype(np.int64), last], axis=-1)


def check_sample_values(plan: FractionalPlan, samples: np.ndarray) -> None:
    """Concrete samples must be finite and place every window inside the input, where
    torch's kernel asserts (samples in ``[0, 1)`` always do, but for a half-precision step
    rounded up)."""
    values = np.asarray(samples)
    finite = np.isfinite(values.astype(np.float64))
    if not finite.all():
        where = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise ValueError(f"{plan.name}: samples must be finite (in [0, 1)), got "
                         f"{float(values[where])!r} at {where}")
    for axis in range(plan.dims):
        starts = window_starts(plan, values, axis)
        limit = plan.in_spatial[axis] - plan.kernel[axis]
        bad = (starts < 0) | (starts > limit)
        if bad.any():
            n, c, i = (int(v) for v in np.argwhere(bad)[0])
            u = float(values[n, c, plan.sample_axes[axis]])
            raise ValueError(
                f"{plan.name}: samples[{n}, {c}, {plan.sample_axes[axis]}] = {u!r} starts "
                f"window {i} of spatial axis {axis} at {int(starts[n, c, i])}, outside the "
                f"input (starts must be in [0, {limit}]; samples in [0, 1) keep them there)")
