"""One entry per op, and the one driver that runs every op.

A :class:`Spec` says what a public function is: its array arguments (and which of them are
differentiable), how its arguments are checked and planned (``prepare``), how it runs on a
spatially sharded input (``halo``), its torch twin and ATen names, the entries of torch's
OpInfo catalog that sample it, and the ``torch.nn`` modules that wrap it.
``jaxpool.torchax``'s table, parity's suite (whose argument sets live in
``parity/suite/cases/``) and the tests' op tables read :data:`SPECS`; the shape rules (:mod:`jaxpool.shapes`) and the modules
(:mod:`jaxpool._modules`) are checked against it by a test.

Each public function is written as::

    @registry.op(Spec("avg_pool2d", "avg_pool", _prepare_avg, ndim=2, ...))
    def avg_pool2d(x, kernel_size, ...) -> jax.Array:
        return registry.run("avg_pool2d", locals())

    def _prepare_avg(spec, x, *, kernel_size: Size, ..., axis_names: AxisNames) -> Prepared:
        plan = plan_avg_pool(...)  # the checks, in plain Python
        return Prepared(lambda x, names: ..., plan.spatial_axes)

and :func:`run` does the rest, the same way for every op: the arrays' static shapes and
dtypes, the checks and the plan (``prepare``), then the route: the per-device code inside
``shard_map`` (``axis_names``), the partitioned primitive under ``jit`` on several devices
(:mod:`jaxpool.halo.jit`, every argument passed by name), or the op's own program.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import numpy as np

from jaxpool.core import checks
from jaxpool.core.types import F
from jaxpool.halo import jit as halo_jit

HALO_RULES = ("pool", "resample", "unpool", "pad", "shuffle", "replicate", "delegate")
"""How an op runs on a spatially sharded input: ``pool``, ``resample``, ``unpool``, ``pad``
(:mod:`jaxpool.halo.kernel`'s exchanges), ``shuffle`` (each device its own block), ``replicate``
(the partitioner gathers the spatial axes; values stay right) and ``delegate`` (the op
calls another op, which routes itself)."""


class Prepared(NamedTuple):
    """What an op's ``prepare`` gives the driver: the checked and planned call.

    ``compute(*arrays, axis_names)`` runs the op's kernel on the arrays (as JAX arrays) with
    the per-device code's ``axis_names`` (None: unsharded). ``spatial``: the axes of the
    first array that ``axis_names`` name. ``single``: one result, not a tuple.
    ``partitions``: the call may take :mod:`jaxpool.halo.jit`'s primitive (False where the
    op delegates, or checks concrete arrays eagerly). (A tuple, not a frozen dataclass: it
    is made on every call, and eager calls are counted in microseconds.)"""

    compute: Callable[..., Any]
    spatial: tuple[int, ...]
    single: bool = True
    partitions: bool = True


@dataclasses.dataclass(frozen=True)
class Spec:
    """One op (see the module docstring).

    ``prepare(spec, *arrays, axis_names=..., **arguments) -> Prepared`` raises the op's
    argument errors before any computation; ``arrays`` are the array arguments with a
    static shape and dtype (not yet converted), by position; every other argument comes as
    a typed keyword of ``prepare``'s signature."""

    name: str
    family: str  # ops that share a docstring and a kernel: "max_pool" for max_pool1d/2d/3d
    prepare: Callable[..., Prepared]
    ndim: int | None = None  # spatial axes the name fixes (None: the input's or arguments')
    arrays: tuple[str, ...] = ("x",)
    differentiable: tuple[str, ...] = ("x",)
    halo: str = "replicate"
    torch: str | None = None  # the torch twin, dotted: "torch.nn.functional.avg_pool2d"
    aten: tuple[str, ...] = ()  # ATen ops jaxpool.torchax lowers to this op
    opinfo: tuple[str, ...] = ()  # entries of torch's OpInfo catalog (op_db) that sample it
    modules: tuple[str, ...] = ()  # the torch.nn modules, and jaxpool.linen/nnx's classes
    optional: tuple[str, ...] = ()  # arrays that may be None (deform_conv2d's bias, mask)
    @property
    def rank(self) -> int:
        """``ndim``, of an op whose name fixes it."""
        if self.ndim is None:
            raise TypeError(f"{self.name}: its name fixes no number of spatial axes")
        return self.ndim

    def __post_init__(self) -> None:
        if self.halo not in HALO_RULES:
            raise ValueError(f"{self.name}: halo must be one of {HALO_RULES}, got {self.halo!r}")
        if not set(self.differentiable) | set(self.optional) <= set(self.arrays):
            raise ValueError(f"{self.name}: differentiable {self.differentiable} and optional "
                             f"{self.optional} are not among the arrays {self.arrays}")


SPECS: dict[str, Spec] = {}
"""Every public op's spec, by the function's name."""

FUNCTIONS: dict[str, Callable[..., Any]] = {}
"""Every public op's function, by its name."""


def op(spec: Spec) -> Callable[[F], F]:
    """Registers ``spec`` for the function it decorates (whose name must be the spec's),
    and returns the function unchanged."""
    def register(function: F) -> F:
        if function.__name__ != spec.name:
            raise ValueError(f"spec {spec.name!r} decorates {function.__name__!r}")
        if spec.name in SPECS:
            raise ValueError(f"{spec.name!r} is registered twice")
        SPECS[spec.name] = spec
        FUNCTIONS[spec.name] = function
        return function
    return register


def static(op_name: str, x: Any) -> Any:
    """``x`` as something with a static ``shape`` and ``dtype``, without converting it (a
    conversion could change the dtype before the checks see it). A tuple (the maps of
    multi_scale_roi_align) is each of its arrays."""
    if isinstance(x, tuple):
        return tuple(static(op_name, a) for a in x)
    checks.check_array(op_name, x)
    return x if hasattr(x, "shape") and hasattr(x, "dtype") else np.asarray(x)


def _as_jax(x: Any) -> Any:
    return tuple(map(checks.as_jax, x)) if isinstance(x, tuple) else checks.as_jax(x)


def run(name: str, args: dict[str, Any]) -> Any:
    """Runs the op ``name`` on its arguments, by name (the public function's ``locals()``):
    check -> plan -> route. The spec's ``prepare`` takes the arrays by position and every
    other argument as a keyword."""
    spec = SPECS[name]
    axis_names = args.pop("axis_names", None)  # (``args`` is the caller's own locals())
    if len(spec.arrays) == 1:  # the usual call, without a loop: eager calls count each us
        x = static(name, args.pop(spec.arrays[0]))
        call = spec.prepare(spec, x, axis_names=axis_names, **args)
        if axis_names is None and call.partitions and halo_jit.active(x):
            return halo_jit.call(FUNCTIONS[name], {spec.arrays[0]: x}, call.spatial, args,
                                 single=call.single)
        return call.compute(checks.as_jax(x), axis_names)
    given = [(a, args.pop(a)) for a in spec.arrays]
    arrays = tuple(None if v is None and a in spec.optional else static(name, v)
                   for a, v in given)
    call = spec.prepare(spec, *arrays, axis_names=axis_names, **args)
    if axis_names is None and call.partitions and halo_jit.active(arrays[0]):
        return halo_jit.call(FUNCTIONS[name], dict(zip(spec.arrays, arrays)), call.spatial,
                             args, single=call.single)
    return call.compute(*(None if a is None else _as_jax(a) for a in arrays),
                        axis_names)
