"""Every jaxpool op the suite checks, and the torch function each must match.

``OPS[name]`` says how many spatial axes the op works on, its kind, the names of its
positional arguments after the array inputs (torch's order) and how to build its torch
counterpart on channels-first inputs from keyword arguments. ``torch_counterpart`` /
``jax_counterpart`` give both sides for either layout. Adding an op is a row here and its
argument sets in ``grid``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.nn.functional as F

from ..convert import output_leaves

__all__ = ["MAX_KINDS", "OPS", "Op", "jax_counterpart", "torch_counterpart", "torch_error_fn"]


def _pair1d(v):
    return (1, v[0] if isinstance(v, (tuple, list)) else v)


def _torch_avg(ndim: int) -> Callable[[dict], Callable]:
    pool = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[ndim]

    def build(kwargs):
        kw = dict(kwargs)
        if ndim == 1 and kw.get("divisor_override") is not None:
            # torch's avg_pool1d has no divisor_override: pool a [.., 1, L] view in 2d.
            kw["kernel_size"] = _pair1d(kw["kernel_size"])
            if kw.get("stride") is not None:
                kw["stride"] = _pair1d(kw["stride"])
            kw["padding"] = (0, _pair1d(kw.get("padding", 0))[1])
            return lambda x: F.avg_pool2d(x.unsqueeze(-2), **kw).squeeze(-2)
        if ndim == 1:
            kw.pop("divisor_override", None)
        return lambda x: pool(x, **kw)

    return build


def _torch_fn(fn) -> Callable[[dict], Callable]:
    return lambda kwargs: (lambda *arrays: fn(*arrays, **kwargs))


def _torch_global(reduce: str) -> Callable[[dict], Callable]:
    # Axes 2 and 3, not -2 and -1: a rank-3 input must raise, as it does in jaxpool.
    return lambda kwargs: (lambda x: getattr(x, reduce)(dim=(2, 3)))


@dataclasses.dataclass(frozen=True)
class Op:
    # spatial axes; None: every axis after [B, C] (interpolate), or one per pair of ``pad``
    ndim: int | None
    kind: str  # "avg", "adaptive", "global", "max", "adaptive_max", "lp", "global_max",
    #            "interpolate", "unpool", "pad", "shuffle"
    params: tuple[str, ...]  # positional arguments after the arrays, in torch's order
    torch: Callable[[dict], Callable]  # keyword arguments -> torch function of the arrays
    # (channels-first)
    arrays: int = 1  # array inputs: x, and max_unpool's indices (never differentiated)

    def spatial(self, shape: tuple[int, ...], kwargs: dict) -> int:
        """The number of spatial axes of a case on a channels-first input of ``shape``."""
        if self.ndim is not None:
            return self.ndim
        if self.kind == "pad":
            return len(kwargs["pad"]) // 2
        return len(shape) - 2


_AVG = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")
_MAX = ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")
_LP = ("norm_type", "kernel_size", "stride", "ceil_mode")
_ADAPTIVE_MAX = ("output_size", "return_indices")
_INTERPOLATE = ("size", "scale_factor", "mode", "align_corners", "recompute_scale_factor",
                "antialias")
_UNPOOL = ("kernel_size", "stride", "padding", "output_size")

# The kinds whose derivatives hold only away from ties (a max picks one of equal elements).
MAX_KINDS = ("max", "adaptive_max", "global_max")

OPS: dict[str, Op] = {
    "avg_pool1d": Op(1, "avg", _AVG, _torch_avg(1)),
    "avg_pool2d": Op(2, "avg", _AVG, _torch_avg(2)),
    "avg_pool3d": Op(3, "avg", _AVG, _torch_avg(3)),
    "adaptive_avg_pool1d": Op(1, "adaptive", ("output_size",), _torch_fn(F.adaptive_avg_pool1d)),
    "adaptive_avg_pool2d": Op(2, "adaptive", ("output_size",), _torch_fn(F.adaptive_avg_pool2d)),
    "adaptive_avg_pool3d": Op(3, "adaptive", ("output_size",), _torch_fn(F.adaptive_avg_pool3d)),
    "global_avg_pool": Op(2, "global", (), _torch_global("mean")),
    "max_pool1d": Op(1, "max", _MAX, _torch_fn(F.max_pool1d)),
    "max_pool2d": Op(2, "max", _MAX, _torch_fn(F.max_pool2d)),
    "max_pool3d": Op(3, "max", _MAX, _torch_fn(F.max_pool3d)),
    "adaptive_max_pool1d": Op(1, "adaptive_max", _ADAPTIVE_MAX, _torch_fn(F.adaptive_max_pool1d)),
    "adaptive_max_pool2d": Op(2, "adaptive_max", _ADAPTIVE_MAX, _torch_fn(F.adaptive_max_pool2d)),
    "adaptive_max_pool3d": Op(3, "adaptive_max", _ADAPTIVE_MAX, _torch_fn(F.adaptive_max_pool3d)),
    "lp_pool1d": Op(1, "lp", _LP, _torch_fn(F.lp_pool1d)),
    "lp_pool2d": Op(2, "lp", _LP, _torch_fn(F.lp_pool2d)),
    "lp_pool3d": Op(3, "lp", _LP, _torch_fn(F.lp_pool3d)),
    "global_max_pool": Op(2, "global_max", (), _torch_global("amax")),
    "interpolate": Op(None, "interpolate", _INTERPOLATE, _torch_fn(F.interpolate)),
    "max_unpool1d": Op(1, "unpool", _UNPOOL, _torch_fn(F.max_unpool1d), arrays=2),
    "max_unpool2d": Op(2, "unpool", _UNPOOL, _torch_fn(F.max_unpool2d), arrays=2),
    "max_unpool3d": Op(3, "unpool", _UNPOOL, _torch_fn(F.max_unpool3d), arrays=2),
    "pad": Op(None, "pad", ("pad", "mode", "value"), _torch_fn(F.pad)),
    "pixel_shuffle": Op(2, "shuffle", ("upscale_factor",), _torch_fn(F.pixel_shuffle)),
    "pixel_unshuffle": Op(2, "shuffle", ("downscale_factor",), _torch_fn(F.pixel_unshuffle)),
}


def torch_counterpart(op: str, kwargs: dict, channels_last: bool = False) -> Callable:
    """The torch function that ``jaxpool.<op>(*arrays, **kwargs)`` must match (same layout
    as the arrays)."""
    spec = OPS[op]
    fn = spec.torch(kwargs)
    if not channels_last:
        return fn

    def channels_last_fn(*arrays):
        # torch works channels-first: move the channel axis there, and every output of the
        # input's rank (values and indices alike) back.
        x = arrays[0]
        c = x.ndim - spec.spatial(tuple(x.shape), kwargs) - 1
        y = fn(*(a.movedim(-1, c) for a in arrays))
        if isinstance(y, torch.Tensor):
            return y.movedim(c, -1) if y.ndim == x.ndim else y
        return tuple(t.movedim(c, -1) if t.ndim == x.ndim else t for _, t in output_leaves(y))

    return channels_last_fn


def torch_error_fn(op: str) -> Callable:
    """torch's side of the error cases: ``fn(*arrays, *args, **kwargs)`` with jaxpool's
    argument order, so that one ``Call`` serves both sides."""
    n = OPS[op].arrays

    def fn(*args, **kwargs):
        kwargs.update(zip(OPS[op].params, args[n:]))
        return torch_counterpart(op, kwargs)(*args[:n])

    return fn


def jax_counterpart(op: str, kwargs: dict, channels_last: bool = False) -> Callable:
    import jaxpool

    fn = getattr(jaxpool, op)
    return lambda *arrays: fn(*arrays, **kwargs, channels_last=channels_last)
