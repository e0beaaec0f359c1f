"""The implementations the benchmark sets side by side.

Each JAX side turns a cell into a function of the input as laid out in memory
([B, C, H, W], or [B, H, W, C] for channels-last cells) that returns the pooled
output in the same layout ([B, C] for global pooling). A side that has no way to
express a cell raises `Unsupported`; one whose library is not installed is
reported as missing and skipped.
"""

from __future__ import annotations

import importlib
import os
import sys

import numpy as np

__all__ = ["CANDIDATES", "DEFAULT_SIDES", "JAX_SIDES", "PEERS", "SIDE_NAMES", "TORCH_SIDES",
           "Unsupported", "missing_reason"]

SIDE_NAMES = ("jaxpool", "torch", "torch-1t", "flax", "keras", "equinox", "floor",
              "reduce_window")
# Sides whose time counts as "the fastest peer": every side but jaxpool, the floor and
# the candidates. "torch" runs with one thread per core, "torch-1t" with one thread: on a
# loaded machine torch's parallel kernels can be slower than its serial ones.
PEERS = ("torch", "torch-1t", "flax", "keras", "equinox")
TORCH_SIDES = ("torch", "torch-1t")
# Other ways jaxpool could compute a cell, timed only when asked for (--sides): whether
# one of them beats jaxpool's own strategy on a backend.
CANDIDATES = ("reduce_window",)
DEFAULT_SIDES = tuple(s for s in SIDE_NAMES if s not in CANDIDATES)
MODULES = {
    "jaxpool": "jaxpool",
    "torch": "torch",
    "torch-1t": "torch",
    "flax": "flax.linen",
    "keras": "keras",
    "equinox": "equinox",
    "floor": "jax",
    "reduce_window": "jaxpool",
}


class Unsupported(Exception):
    """The side has no call that computes this cell."""


def _import_keras():
    # Keras picks its backend at import time; the bench compares keras on JAX.
    if "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = "jax"
    keras = importlib.import_module("keras")
    if keras.backend.backend() != "jax":
        raise ImportError(f"keras was already imported with the {keras.backend.backend()!r} backend")
    return keras


def missing_reason(name: str) -> str | None:
    """None if side `name` can run here, else why not."""
    try:
        if name == "keras":
            _import_keras()
        else:
            mod = importlib.import_module(MODULES[name])
            if name == "jaxpool":
                for attr in ("adaptive_avg_pool2d", "avg_pool2d", "global_avg_pool"):
                    if not hasattr(mod, attr):
                        return f"jaxpool has no {attr}"
    except Exception as exc:  # noqa: BLE001  an optional peer may fail to import in many ways
        return f"not installed ({type(exc).__name__}: {exc})"
    return None


def _to_nhwc(case):
    import jax.numpy as jnp

    if case.channels_last:
        return lambda x: x
    return lambda x: jnp.transpose(x, (0, 2, 3, 1))


def _from_nhwc(case):
    import jax.numpy as jnp

    if case.channels_last:
        return lambda y: y
    return lambda y: jnp.transpose(y, (0, 3, 1, 2))


def _divisible_window(case):
    _, _, h, w = case.shape
    oh, ow = case.output_size
    if h % oh or w % ow:
        return None
    return (h // oh, w // ow)


def jaxpool_side(case):
    import jaxpool

    cl = case.channels_last
    if case.op == "global":
        return (lambda x: jaxpool.global_avg_pool(x, channels_last=cl)), None
    if case.adaptive:
        size = case.output_size
        pool = jaxpool.adaptive_max_pool2d if case.is_max else jaxpool.adaptive_avg_pool2d
        return (lambda x: pool(x, size, channels_last=cl)), None
    k, s, p, ceil = case.kernel_size, case.stride_, case.padding, case.ceil_mode
    if case.is_max:
        return (lambda x: jaxpool.max_pool2d(x, k, s, p, ceil_mode=ceil, channels_last=cl)), None
    cip = case.count_include_pad
    return (
        lambda x: jaxpool.avg_pool2d(
            x, k, s, p, ceil_mode=ceil, count_include_pad=cip, channels_last=cl
        )
    ), None


def flax_side(case):
    import flax.linen as nn
    import jax.numpy as jnp

    to, back = _to_nhwc(case), _from_nhwc(case)
    notes = [] if case.channels_last else ["NHWC only: NCHW input transposed and back"]
    name = "max_pool" if case.is_max else "avg_pool"
    pool = getattr(nn, name)
    if case.op == "global":
        _, _, h, w = case.shape
        return (lambda x: jnp.reshape(pool(to(x), (h, w)), (x.shape[0], -1))), notes
    if case.adaptive:
        window = _divisible_window(case)
        if window is None:
            raise Unsupported("no adaptive pooling; ragged windows have no fixed-window equivalent")
        notes.append(f"no adaptive pooling: timed as the equivalent {name} (kernel = stride = H/out)")
        return (lambda x: back(pool(to(x), window, strides=window))), notes
    if case.ceil_matters:
        raise Unsupported("no ceil_mode")
    k, s, p = case.kernel_size, case.stride_, case.padding
    # Explicit pads: max_pool pads with -inf (never selected), avg_pool with zeros.
    options = {"padding": ((p, p), (p, p))}
    if not case.is_max:
        options["count_include_pad"] = case.count_include_pad
    return (lambda x: back(pool(to(x), (k, k), strides=(s, s), **options))), notes


def keras_side(case):
    keras = _import_keras()
    fmt = "channels_last" if case.channels_last else "channels_first"
    if case.op == "global":
        axes = case.spatial_axes
        # keras.layers.GlobalAveragePooling2D is this mean.
        return (lambda x: keras.ops.mean(x, axis=axes)), ["global pooling as GlobalAveragePooling2D (ops.mean)"]
    if case.adaptive:
        size = case.output_size
        pool = keras.ops.adaptive_max_pool if case.is_max else keras.ops.adaptive_average_pool
        return (lambda x: pool(x, size, data_format=fmt)), None
    k, s, p = case.kernel_size, case.stride_, case.padding
    if case.ceil_matters:
        raise Unsupported("no ceil_mode")
    if p == 0:
        padding = "valid"
    else:
        # "same" makes ceil(n/s) windows, pads max((out-1)*s + k - n, 0) in all with the
        # left half rounded down (with -inf for max pooling), and leaves the padding out of
        # an average's divisor.
        same_ok = all(
            -(-n // s) == out and max((out - 1) * s + k - n, 0) // 2 == p
            for n, out in zip(case.shape[2:], case.output_shape[2:])
        )
        if not same_ok:
            raise Unsupported(f"padding={p} has no 'valid'/'same' equivalent")
        if not case.is_max and case.count_include_pad:
            raise Unsupported("'same' padding leaves the padding out of the divisor (no count_include_pad)")
        padding = "same"
    pool = keras.ops.max_pool if case.is_max else keras.ops.average_pool
    return (lambda x: pool(x, (k, k), strides=(s, s), padding=padding, data_format=fmt)), None


def equinox_side(case):
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    notes = ["per-example module, vmapped over the batch"]
    if case.channels_last:
        notes.append("channels-first only: NHWC input transposed and back")
        to = lambda x: jnp.transpose(x, (0, 3, 1, 2))
        back = lambda y: jnp.transpose(y, (0, 2, 3, 1)) if y.ndim == 4 else y
    else:
        to = back = lambda a: a
    if case.op == "global":
        inner = eqx.nn.AdaptiveAvgPool2d((1, 1))
        pool = lambda x: jnp.reshape(inner(x), (-1,))
    elif case.adaptive:
        pool = (eqx.nn.AdaptiveMaxPool2d if case.is_max else eqx.nn.AdaptiveAvgPool2d)(
            case.output_size)
    else:
        if not case.is_max and case.padding and not case.count_include_pad:
            raise Unsupported("divides by the whole kernel: no count_include_pad=False")
        pool = (eqx.nn.MaxPool2d if case.is_max else eqx.nn.AvgPool2d)(
            case.kernel_size, case.stride_, case.padding, use_ceil=case.ceil_mode
        )
    batched = jax.vmap(pool)
    return (lambda x: back(batched(to(x)))), notes


def floor_side(case):
    """A plain copy of the bytes the forward must read and write: a negation of the input's
    first (input + output) / 2 elements (this machine's memory bandwidth for the cell),
    differentiated the same way as every side."""
    import math

    moved = (math.prod(case.shape) + math.prod(case.output_shape)) // 2
    return (lambda x: -x.reshape(-1)[:moved]), None


def reduce_window_side(case):
    """Average pooling as ``lax.reduce_window`` sums over jaxpool's windows, divided by
    torch's counts: the form this project started from, whose gradient is a pad and another
    ``reduce_window`` (no scatter); slow on XLA:CPU, perhaps not on GPU and TPU."""
    import jax.numpy as jnp
    from jax import lax

    if case.is_max:
        raise Unsupported("average pooling only")
    plan = case.plan()
    if not all(a.uniform for a in plan.axes):
        raise Unsupported("windows of different lengths")
    rank = len(plan.input_shape)
    dims, strides, pads = [1] * rank, [1] * rank, [(0, 0)] * rank
    divisor = np.ones([1] * rank)
    for axis, a in zip(plan.spatial_axes, plan.axes):
        dims[axis], strides[axis] = a.lengths[0], a.stride
        # Windows start at 0 in the left-padded input; a ceil_mode window may overhang it.
        pads[axis] = (a.pad_lo, max(0, a.stops[-1] - a.pad_lo - a.in_size))
        along = [1] * rank
        along[axis] = a.out_size
        divisor = divisor * np.reshape(a.divisors, along)
    out_shape = plan.output_shape

    def pool(x):
        wide = x.astype(jnp.promote_types(x.dtype, jnp.float32))
        # A NumPy zero, so that JAX sees a sum (reduce_window_sum, differentiable to any order).
        sums = lax.reduce_window(wide, np.zeros((), wide.dtype), lax.add, dims, strides, pads)
        y = (lax.slice(sums, (0,) * rank, out_shape) / divisor.astype(wide.dtype)).astype(x.dtype)
        return y.reshape(x.shape[0], -1) if case.op == "global" else y

    return pool, None


JAX_SIDES = {
    "jaxpool": jaxpool_side,
    "flax": flax_side,
    "keras": keras_side,
    "equinox": equinox_side,
    "floor": floor_side,
    "reduce_window": reduce_window_side,
}
