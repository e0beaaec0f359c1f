"""Every jaxpool op the suite checks, and the torch function each must match.

``OPS[name]`` says how many spatial axes the op works on, its kind, the names of its
positional arguments after the array inputs (torch's order) and how to build its torch
counterpart on channels-first inputs from keyword arguments, all read from the op's spec
(:mod:`jaxpool.registry`) and its function's signature. ``torch_counterpart`` /
``jax_counterpart`` give both sides for either layout. A new op joins by its spec, and its
argument sets in ``grid``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.nn.functional as F

from ..convert import output_leaves, to_torch

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


def _torch_fn(fn, names: dict[str, str] | None = None) -> Callable[[dict], Callable]:
    """``fn`` on the arrays, with the keyword arguments; those that torch names otherwise
    (``names``: jaxpool's name -> torch's) renamed, each as a tensor in the first array's
    dtype (torch asks for its input's; a half-precision case's float64 reference runs on
    float64 inputs)."""
    if not names:
        return lambda kwargs: (lambda *arrays: fn(*arrays, **kwargs))

    def build(kwargs):
        def call(*arrays):
            kw = {names.get(k, k): (to_torch(v).to(arrays[0].dtype)
                                    if k in names and v is not None else v)
                  for k, v in kwargs.items()}
            return fn(*arrays, **kw)

        return call

    return build


def _torch_global(reduce: str) -> Callable[[dict], Callable]:
    # Axes 2 and 3, not -2 and -1: a rank-3 input must raise, as it does in jaxpool.
    return lambda kwargs: (lambda x: getattr(x, reduce)(dim=(2, 3)))


@dataclasses.dataclass(frozen=True)
class Op:
    # spatial axes; None: every axis after [B, C] (interpolate), or one per pair of ``pad``
    ndim: int | None
    kind: str  # "avg", "adaptive", "global", "max", "adaptive_max", "lp", "global_max",
    #            "interpolate", "unpool", "pad", "shuffle"; else the spec's family
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


# The kinds whose derivatives hold only away from ties (a max picks one of equal elements).
MAX_KINDS = ("max", "adaptive_max", "global_max", "fractional_max_pool")

# The suite's kind of each family of jaxpool.registry (its argument sets and error calls).
_KINDS = {"avg_pool": "avg", "adaptive_avg_pool": "adaptive", "global_avg_pool": "global",
          "max_pool": "max", "adaptive_max_pool": "adaptive_max", "lp_pool": "lp",
          "global_max_pool": "global_max", "interpolate": "interpolate",
          "max_unpool": "unpool", "pad": "pad", "pixel_shuffle": "shuffle"}

# jaxpool's arguments that torch names otherwise, by family: fractional max pooling's
# samples are torch's ``_random_samples``.
_TORCH_NAMES = {"fractional_max_pool": {"samples": "_random_samples"}}

# torch twins that are not ``torch_fn(twin)``.
_TORCH_BUILDERS = {"avg": _torch_avg, "global": lambda ndim: _torch_global("mean"),
                   "global_max": lambda ndim: _torch_global("amax")}


def _resolve(dotted: str) -> Callable:
    import importlib
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _from_spec(spec) -> Op:
    """The suite's row of a jaxpool op, read from its spec and its function's signature."""
    import inspect

    from jaxpool import registry

    kind = _KINDS.get(spec.family, spec.family)
    parameters = list(inspect.signature(registry.FUNCTIONS[spec.name]).parameters.values())
    params = tuple(p.name for p in parameters[len(spec.arrays):]
                   if p.kind is p.POSITIONAL_OR_KEYWORD)
    torch_fn = (_TORCH_BUILDERS[kind](spec.ndim) if kind in _TORCH_BUILDERS
                else _torch_fn(_resolve(spec.torch), _TORCH_NAMES.get(spec.family)))
    return Op(spec.ndim, kind, params, torch_fn, arrays=len(spec.arrays))


def _ops() -> dict[str, Op]:
    import jaxpool  # noqa: F401 (registers every op)
    from jaxpool import registry

    # every op with argument sets (written in grid.py for the families in _KINDS, else its
    # spec's), but those that call another with some arguments fixed (upsample_*)
    return {name: _from_spec(spec) for name, spec in registry.SPECS.items()
            if spec.halo != "delegate" and (spec.family in _KINDS or spec.samples)}


OPS: dict[str, Op] = _ops()
"""Every op the suite checks, from :data:`jaxpool.registry.SPECS`."""


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
    if not channels_last:  # (the ops without a layout take no channels_last)
        return lambda *arrays: fn(*arrays, **kwargs)
    return lambda *arrays: fn(*arrays, **kwargs, channels_last=channels_last)
