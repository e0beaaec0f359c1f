"""Every jaxpool op the suite checks, and the torch function each must match.

``OPS[name]`` says how many spatial axes the op works on, its kind, the names of its
positional arguments after the array inputs (torch's order) and how to build its torch
counterpart on channels-first inputs from keyword arguments, all read from the op's spec
(:mod:`jaxpool.registry`) and its function's signature. ``torch_counterpart`` /
``jax_counterpart`` give both sides for either layout; ``unavailable`` says why an op's
twin does not load here (roi_align's is torchvision's, an optional package). A new op joins
by its spec, and its cases in its family's file of :mod:`parity.suite.cases`.
"""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from typing import Callable

import torch
import torch.nn.functional as F

from ..convert import output_leaves, to_torch

__all__ = ["MAX_KINDS", "OPS", "Op", "jax_counterpart", "torch_counterpart", "torch_error_fn",
           "unavailable"]


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
    arrays: int = 1  # positional array inputs: x, max_unpool's indices (never
    #                  differentiated), grid_sample's grid
    array_names: tuple[str, ...] = ("x",)  # their names, by which jaxpool is called

    def spatial(self, shape: tuple[int, ...], kwargs: dict) -> int:
        """The number of spatial axes of a case on a channels-first input of ``shape``."""
        if self.ndim is not None:
            return self.ndim
        if self.kind == "pad":
            return len(kwargs["pad"]) // 2
        return len(shape) - 2


# The kinds whose derivatives hold only away from ties (a max picks one of equal elements).
MAX_KINDS = ("max", "adaptive_max", "global_max", "fractional_max_pool", "roi_pool")

# The suite's kind of each family of jaxpool.registry, where it is not the family's name.
_KINDS = {"avg_pool": "avg", "adaptive_avg_pool": "adaptive", "global_avg_pool": "global",
          "max_pool": "max", "adaptive_max_pool": "adaptive_max", "lp_pool": "lp",
          "global_max_pool": "global_max", "interpolate": "interpolate",
          "max_unpool": "unpool", "pad": "pad", "pixel_shuffle": "shuffle"}

# jaxpool's arguments that torch names otherwise, by family: fractional max pooling's
# samples are torch's ``_random_samples``.
_TORCH_NAMES = {"fractional_max_pool": {"samples": "_random_samples"}}

# Array arguments the suite gives both sides by keyword, never differentiated, by op:
# roi_align's boxes stay concrete inside jaxpool's traced program, where its adaptive grid
# is sized from them.
_KEYWORD_ARRAYS = {"roi_align": ("boxes",), "roi_pool": ("boxes",), "ps_roi_align": ("boxes",),
                   "ps_roi_pool": ("boxes",)}


# --- twins from packages beside torch ---------------------------------------------------

def _torchvision_roi_align() -> Callable:
    """``torchvision.ops.roi_align``, once it has run on a tiny input: without its compiled
    operator torchvision would fall back to its pure-torch ``_roi_align``, which computes
    other values past the borders."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchvision warns when its image decoders fail
        import torchvision.ops
    # the operator itself: it raises where torchvision's compiled library did not load
    torch.ops.torchvision.roi_align(torch.zeros(1, 1, 2, 2, dtype=torch.float64),
                                    torch.tensor([[0.0, 0.0, 0.0, 1.0, 1.0]],
                                                 dtype=torch.float64), 1.0, 1, 1, -1, False)
    return torchvision.ops.roi_align


def _torchvision_twin(name: str, *args) -> Callable[[], Callable]:
    """The loader of ``torchvision.ops.<name>``, once its operator has run on a tiny input
    with ``args`` after the input and boxes (it raises where the compiled library did not
    load)."""
    def load() -> Callable:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torchvision.ops
        getattr(torch.ops.torchvision, name)(
            torch.zeros(1, 4, 2, 2, dtype=torch.float64),
            torch.tensor([[0.0, 0.0, 0.0, 1.0, 1.0]], dtype=torch.float64), 1.0, *args)
        return getattr(torchvision.ops, name)
    return load


# op -> (package, loader): the loader returns the twin, or raises where it does not load
_OPTIONAL_TWINS: dict[str, tuple[str, Callable[[], Callable]]] = {
    "roi_align": ("torchvision", _torchvision_roi_align),
    "roi_pool": ("torchvision", _torchvision_twin("roi_pool", 1, 1)),
    "ps_roi_align": ("torchvision", _torchvision_twin("ps_roi_align", 2, 2, -1)),
    "ps_roi_pool": ("torchvision", _torchvision_twin("ps_roi_pool", 2, 2)),
}
_loaded: dict[str, tuple[Callable | None, str | None]] = {}  # op -> (twin, why not)


def _load(op: str) -> tuple[Callable | None, str | None]:
    if op not in _loaded:
        package, loader = _OPTIONAL_TWINS[op]
        settle = (f"to check it, install the {package} release built for torch "
                  f"{torch.__version__}")
        try:
            _loaded[op] = loader(), None
        except Exception as e:  # noqa: BLE001 - any failure to load is the reason
            from ..checks import short_exc

            if isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] == package:
                _loaded[op] = None, f"{package} is not installed; {settle}"
            else:
                _loaded[op] = None, (f"{package}'s compiled ops do not load "
                                     f"({short_exc(e)}); {settle}")
    return _loaded[op]


def unavailable(op: str) -> str | None:
    """Why ``op``'s torch twin does not load here, and how to settle it; None where it
    loads (every twin in torch itself does)."""
    if op not in _OPTIONAL_TWINS:
        return None
    return _load(op)[1]


def _optional_twin(op: str) -> Callable:
    twin, why = _load(op)
    if twin is None:
        raise RuntimeError(f"{op}'s torch twin does not load: {why}")
    return twin


class _Linear(torch.autograd.Function):
    """``apply(x)`` for a map linear in ``x`` whose adjoint is ``adjoint``: its derivatives
    of every order are the map and its adjoint, each once more a ``_Linear``."""

    @staticmethod
    def forward(ctx, x, apply, adjoint):
        ctx.maps = apply, adjoint
        return apply(x)

    @staticmethod
    def backward(ctx, g):
        apply, adjoint = ctx.maps
        return _Linear.apply(g, adjoint, apply), None, None


def _torch_roi_align(ndim, op: str = "roi_align") -> Callable[[dict], Callable]:
    """torchvision's roi_align (ps_roi_align, ps_roi_pool) on the input, the boxes from the
    keyword arguments (as tensors in the input's dtype). Its operator has a first
    derivative in the input alone, and no second; it is linear in the input, so every
    derivative is its forward or its backward kernel: the twin is that pair
    (``_Linear``)."""

    def build(kwargs):
        kw = {k: v for k, v in kwargs.items()
              if k not in ("boxes", "max_sampling_ratio", "max_bin_size")}

        def call(x):
            twin = _optional_twin(op)
            boxes = kwargs["boxes"]
            boxes = ([to_torch(b).to(x.dtype) for b in boxes]
                     if isinstance(boxes, (list, tuple)) else to_torch(boxes).to(x.dtype))

            def apply(v):
                return twin(v, boxes, **kw)

            def adjoint(g):
                with torch.enable_grad():
                    z = torch.zeros(x.shape, dtype=g.dtype, requires_grad=True)
                    return torch.autograd.grad(twin(z, boxes, **kw), z, g)[0]

            return _Linear.apply(x, apply, adjoint)

        return call

    return build


def _torch_roi_pool(ndim) -> Callable[[dict], Callable]:
    """torchvision's roi_pool on the input, the boxes from the keyword arguments: a max,
    differentiated by torch autograd through its operator (its first derivative only)."""

    def build(kwargs):
        kw = {k: v for k, v in kwargs.items() if k not in ("boxes", "max_bin_size")}

        def call(x):
            twin = _optional_twin("roi_pool")
            boxes = kwargs["boxes"]
            boxes = ([to_torch(b).to(x.dtype) for b in boxes]
                     if isinstance(boxes, (list, tuple)) else to_torch(boxes).to(x.dtype))
            return twin(x, boxes, **kw)

        return call

    return build


# torch twins that are not ``torch_fn(twin)``.
_TORCH_BUILDERS = {"avg": _torch_avg, "global": lambda ndim: _torch_global("mean"),
                   "global_max": lambda ndim: _torch_global("amax"),
                   "roi_align": _torch_roi_align,
                   "ps_roi_align": lambda ndim: _torch_roi_align(ndim, "ps_roi_align"),
                   "ps_roi_pool": lambda ndim: _torch_roi_align(ndim, "ps_roi_pool"),
                   "roi_pool": _torch_roi_pool}


def _resolve(dotted: str) -> Callable:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _from_spec(spec) -> Op:
    """The suite's row of a jaxpool op, read from its spec and its function's signature."""
    import inspect

    from jaxpool import registry

    kind = _KINDS.get(spec.family, spec.family)
    arrays = [a for a in spec.arrays if a not in _KEYWORD_ARRAYS.get(spec.name, ())]
    parameters = list(inspect.signature(registry.FUNCTIONS[spec.name]).parameters.values())
    # (the arrays need not lead: multi_scale_deformable_attention takes spatial_shapes
    # second, as its reference does)
    params = tuple(p.name for p in parameters
                   if p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in arrays)
    torch_fn = (_TORCH_BUILDERS[kind](spec.ndim) if kind in _TORCH_BUILDERS
                else _torch_fn(_resolve(spec.torch), _TORCH_NAMES.get(spec.family)))
    return Op(spec.ndim, kind, params, torch_fn, arrays=len(arrays),
              array_names=tuple(arrays))


def _ops() -> dict[str, Op]:
    import jaxpool  # noqa: F401 (registers every op)
    from jaxpool import registry

    # every op but those that call another with some arguments fixed (upsample_*: the
    # cases of the op they call check them)
    return {name: _from_spec(spec) for name, spec in registry.SPECS.items()
            if spec.halo != "delegate"}


OPS: dict[str, Op] = _ops()
"""Every op the suite checks, from :data:`jaxpool.registry.SPECS`; the cases of each are in
its family's file of :mod:`parity.suite.cases`."""


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
    import inspect

    import jaxpool

    signature = inspect.signature(getattr(jaxpool, op))

    def fn(*args, **kwargs):
        named = dict(signature.bind_partial(*args, **kwargs).arguments)
        arrays = [named.pop(a) for a in OPS[op].array_names]
        return torch_counterpart(op, named)(*arrays)

    return fn


def jax_counterpart(op: str, kwargs: dict, channels_last: bool = False) -> Callable:
    import jaxpool

    fn = getattr(jaxpool, op)
    names = OPS[op].array_names
    if not channels_last:  # (the ops without a layout take no channels_last)
        return lambda *arrays: fn(**dict(zip(names, arrays)), **kwargs)
    return lambda *arrays: fn(**dict(zip(names, arrays)), **kwargs,
                              channels_last=channels_last)
