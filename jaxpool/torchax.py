"""torch models on JAX through torchax, with jaxpool's pooling, resampling and padding.

torchax runs PyTorch modules on JAX arrays; :func:`install` makes every op of this family
that torchax can reach (the torch functions it catches before ATen, and the ATen
overloads) run through jaxpool, so values are torch's and derivatives of every order hold
no scatter or gather::

    import jaxpool.torchax                      # imports torchax (see below)
    env = jaxpool.torchax.install()             # torchax.default_env(), or install(env)
    with env:
        y = model.to("jax")(x.to("jax"))
    jaxpool.torchax.uninstall(env)              # torchax's own definitions back

Layout stays torch's: channels first. :data:`OPS` names what is covered.

torchax 0.0.13 names, at import, ATen overloads that torch 2.13 removed (named-dimension
ones such as ``aten.prod.dim_Dimname``), so ``import torchax`` fails there. Importing this
module imports torchax with those names standing in as inert placeholders for the
duration of the import only, and only for torchax <= 0.0.13 on a torch that lacks them;
import ``jaxpool.torchax`` before ``torchax`` on such a torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.metadata
import inspect
import re
import sys
from typing import Any, Callable

import jax.numpy as jnp
import torch
import torch.nn.functional as F

import jaxpool
from jaxpool import registry
from jaxpool.grid_sampling import plan as grid_sampling_plan
from jaxpool.roi import functions as roi_functions

# --- importing torchax --------------------------------------------------------------------

_LAST_RELEASE_NAMING_REMOVED = (0, 0, 13)
# What torchax 0.0.13 reads from torch.ops.aten at import (amp.py's autocast table,
# decompositions.py's list): named-dimension overloads torch 2.13 no longer has.
_NAMED_AT_IMPORT = (
    ("prod", "dim_Dimname"), ("index_copy", "dimname"), ("index_copy_", "dimname"),
    ("index_add", "dimname"), ("index_fill", "Dimname_Scalar"),
    ("index_fill", "Dimname_Tensor"), ("index_fill_", "Dimname_Scalar"),
    ("index_fill_", "Dimname_Tensor"), ("all", "dimname"), ("all", "dimname_out"),
    ("norm", "names_ScalarOpt_dim"), ("norm", "names_ScalarOpt_dim_dtype"),
    ("norm", "names_out"), ("norm", "names_dtype_out"), ("std", "names_dim"),
    ("std", "names_out"), ("std", "correction_names"), ("std", "correction_names_out"),
    ("std_mean", "names_dim"), ("std_mean", "correction_names"), ("unbind", "Dimname"),
)


class _RemovedOverload:
    """Stands for an overload torch no longer has: a key nothing dispatches to."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<removed overload aten.{self.name}>"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def missing_overloads(torchax_version: str) -> list[tuple[str, str]]:
    """The overloads torchax of this version names at import that this torch lacks (none
    for a torchax after 0.0.13)."""
    if _version(torchax_version) > _LAST_RELEASE_NAMING_REMOVED:
        return []
    return [(packet, overload) for packet, overload in _NAMED_AT_IMPORT
            if hasattr(torch.ops.aten, packet)
            and overload not in getattr(torch.ops.aten, packet).overloads()]


@contextlib.contextmanager
def placeholders(names: list[tuple[str, str]]):
    """Inert stand-ins for the given ``(packet, overload)`` names while the block runs."""
    for packet, overload in names:
        setattr(getattr(torch.ops.aten, packet), overload,
                _RemovedOverload(f"{packet}.{overload}"))
    try:
        yield
    finally:
        for packet, overload in names:
            delattr(getattr(torch.ops.aten, packet), overload)


# torchax reads the removed names in these modules, some only when its first
# environment is built: all are imported under the placeholders.
_READS_AT_IMPORT = ("torchax", "torchax.amp", "torchax.decompositions", "torchax.ops.jaten",
                    "torchax.ops.jtorch", "torchax.ops.jc10d", "torchax.ops.jtorchvision_nms")


def _import_torchax():
    names = [] if "torchax.decompositions" in sys.modules else missing_overloads(
        importlib.metadata.version("torchax"))
    with placeholders(names):
        for module in _READS_AT_IMPORT:
            importlib.import_module(module)
    return sys.modules["torchax"]


torchax = _import_torchax()
interop = importlib.import_module("torchax.interop")

# --- torchax's argument forms, converted in one place -------------------------------------


def _plain(name: str, value: Any) -> Any:
    """torchax's form of one argument as jaxpool takes it: symbolic sizes as ints, lists
    (and ``torch.Size``) as tuples, an empty ``stride`` (ATen's None) as None."""
    if isinstance(value, torch.SymInt):
        return int(value)
    if isinstance(value, torch.SymFloat):
        return float(value)
    if isinstance(value, (list, tuple)) and not hasattr(value, "shape"):
        items = tuple(_plain(name, item) for item in value)
        return None if name == "stride" and not items else items
    return value


def _bind_schema(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> dict:
    """An ATen call's arguments by their schema names, defaults filled in; the tensor
    argument is named ``x`` (``self`` or ``input`` in the schema)."""
    named = {}
    for position, argument in enumerate(op._schema.arguments):
        if position < len(args):
            value = args[position]
        elif argument.name in kwargs:
            value = kwargs[argument.name]
        elif argument.has_default_value():
            value = argument.default_value
        else:
            raise TypeError(f"{op}: missing argument {argument.name!r}")
        named["x" if argument.name in ("self", "input") else argument.name] = value
    return named


def _bind_function(fn: Callable, args: tuple, kwargs: dict) -> dict:
    """A torch function's call by the jaxpool function's parameter names (the tensor
    ``input`` is jaxpool's ``x``)."""
    kwargs = {("x" if key == "input" else key): value for key, value in kwargs.items()}
    return dict(inspect.signature(fn).bind(*args, **kwargs).arguments)


@dataclasses.dataclass(frozen=True)
class Op:
    """One torch op (an ATen overload or a torch function torchax catches) and the JAX
    function that computes it from the op's arguments by name."""
    torch_op: Any
    compute: Callable[..., Any]
    bind: Callable[[tuple, dict], dict]

    def __call__(self, *args, **kwargs):
        named = self.bind(args, kwargs)
        return self.compute(**{key: _plain(key, value) for key, value in named.items()})


def _aten(op, compute) -> Op:
    return Op(op, compute, lambda args, kwargs: _bind_schema(op, args, kwargs))


def _function(torch_function, jaxpool_function, **fixed) -> Op:
    def compute(**named):
        return jaxpool_function(**named, **fixed)
    return Op(torch_function, compute,
              lambda args, kwargs: _bind_function(jaxpool_function, args, kwargs))


# --- what each op computes ----------------------------------------------------------------


def _with_indices(fn):
    return lambda **named: fn(**named, return_indices=True)


def _pad(mode):
    return lambda x, padding: jaxpool.pad(x, padding, mode)


def _unpool_from_output(fn, ndim):
    """ATen's max_unpool carries no kernel (2d: nor stride and padding), only the output
    extents: each window is taken as the widest kernel that still gives them (stride
    ``out // n`` and no padding where ATen gives neither), which holds every window of
    the pool that made the indices when kernel == stride. Indices outside these windows
    raise a ValueError when concrete; ``F.max_unpool*d``, which carries the pool's
    arguments, is taken before ATen."""
    def compute(x, indices, output_size, stride=None, padding=None):
        extents = x.shape[-ndim:]
        stride = stride or tuple(max(out // n, 1) for out, n in zip(output_size, extents))
        padding = padding or (0,) * ndim
        kernel = tuple(out - (n - 1) * s + 2 * p
                       for out, n, s, p in zip(output_size, extents, stride, padding))
        return fn(x, indices, kernel, stride, padding, output_size)
    return compute


def _resize(mode: str, antialias: bool = False):
    """ATen's upsample overloads: ``.vec`` takes ``output_size`` or ``scale_factors``;
    ``.default`` takes ``output_size`` and the scales torch maps coordinates with (those
    of a scale-factor call, whose extents are ``floor(n * scale)``)."""
    def compute(x, output_size, align_corners=None, scale_factors=None, **scales):
        given = scale_factors if scale_factors is not None else tuple(scales.values())
        if output_size is not None and (align_corners or all(s is None for s in given)):
            return jaxpool.interpolate(x, output_size, None, mode, align_corners,
                                       antialias=antialias)
        extents = x.shape[-len(given):]
        if any(s is None for s in given) or (output_size is not None and tuple(
                int(n * s) for n, s in zip(extents, given)) != tuple(output_size)):
            raise ValueError(
                f"upsample ({mode}): output_size={output_size} with scales={given} on "
                f"extents {tuple(extents)}: jaxpool maps coordinates by the scales only "
                f"where each extent is floor(n * scale)")
        return jaxpool.interpolate(x, None, given, mode, align_corners,
                                   recompute_scale_factor=False, antialias=antialias)
    return compute


aten = torch.ops.aten

def _grid_sampler(x, grid, interpolation_mode, padding_mode, align_corners):
    # ATen codes a mode and a padding mode by its position in torch's lists, which
    # grid_sampling's plan keeps in torch's order
    return jaxpool.grid_sample(x, grid, grid_sampling_plan.MODES[interpolation_mode],
                               grid_sampling_plan.PADDING_MODES[padding_mode], align_corners)


def _fractional(function):
    """ATen's fractional_max_pool: (values, indices) from torch's drawn samples."""
    def compute(x, kernel_size, output_size, random_samples):
        return function(x, kernel_size, output_size, return_indices=True,
                        samples=random_samples)
    return compute


def _roi_align(x, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    """``torchvision::roi_align``'s schema (no ``max_sampling_ratio``: adaptive sampling
    needs concrete boxes, as torchax's eager calls give them)."""
    return jaxpool.roi_align(x, rois, (pooled_height, pooled_width), spatial_scale,
                             sampling_ratio, aligned)


def _deform_conv2d(input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w,
                   dilation_h, dilation_w, n_weight_grps, n_offset_grps, use_mask):
    """``torchvision::deform_conv2d``'s schema: the groups are the shapes' (jaxpool reads
    them as torchvision's Python wrapper does), the mask is used only with ``use_mask``
    (else it is an empty placeholder), the bias always (zeros where the call gave none)."""
    return jaxpool.deform_conv2d(input, offset, weight, bias, (stride_h, stride_w),
                                 (pad_h, pad_w), (dilation_h, dilation_w),
                                 mask if use_mask else None)


def _roi_pool(x, rois, spatial_scale, pooled_height, pooled_width):
    """``torchvision::roi_pool``: the output and the winners (its ``argmax``)."""
    pooled = (pooled_height, pooled_width)
    return (jaxpool.roi_pool(x, rois, pooled, spatial_scale),
            roi_functions.roi_pool_argmax(x, rois, pooled, spatial_scale))


def _channel_mapping(out, pooled_height, pooled_width):
    """The position-sensitive ops' second output: the channel each output read, ``(c *
    PH + i) * PW + j`` (int32, the output's shape)."""
    c_out = out.shape[1]
    c = jnp.arange(c_out, dtype=jnp.int32)[:, None, None]
    i = jnp.arange(pooled_height, dtype=jnp.int32)[None, :, None]
    j = jnp.arange(pooled_width, dtype=jnp.int32)[None, None, :]
    return jnp.broadcast_to((c * pooled_height + i) * pooled_width + j, out.shape)


def _ps_roi_pool(x, rois, spatial_scale, pooled_height, pooled_width):
    """``torchvision::ps_roi_pool``: the output and its channel mapping."""
    out = jaxpool.ps_roi_pool(x, rois, (pooled_height, pooled_width), spatial_scale)
    return out, _channel_mapping(out, pooled_height, pooled_width)


def _ps_roi_align(x, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio):
    """``torchvision::ps_roi_align``: the output and its channel mapping (adaptive
    sampling reads the concrete boxes of torchax's eager calls, as ``_roi_align``)."""
    out = jaxpool.ps_roi_align(x, rois, (pooled_height, pooled_width), spatial_scale,
                               sampling_ratio)
    return out, _channel_mapping(out, pooled_height, pooled_width)


def _torchvision_ops() -> list[Op]:
    """torchvision's operators, where torchvision is loaded (jaxpool does not import it:
    import torchvision before this module to have them)."""
    ops = []
    # each where its schema is defined (an older torchvision may lack one)
    for name, compute in (("roi_pool", _roi_pool), ("ps_roi_pool", _ps_roi_pool),
                          ("ps_roi_align", _ps_roi_align)):
        try:
            ops.append(_aten(getattr(torch.ops.torchvision, name).default, compute))
        except (AttributeError, RuntimeError):
            pass
    try:
        roi_align = torch.ops.torchvision.roi_align.default
    except (AttributeError, RuntimeError):
        return ops
    ops.append(_aten(roi_align, _roi_align))
    try:
        ops.append(_aten(torch.ops.torchvision.deform_conv2d.default, _deform_conv2d))
    except (AttributeError, RuntimeError):  # an older torchvision without the operator
        pass
    return ops


def _by_schema(function):
    """``function`` called with the ATen schema's arguments by name, the tensor (``self``,
    named ``x`` by the binder) first, whatever the function calls it."""
    def compute(**named):
        if "x" in named:
            return function(named.pop("x"), **named)
        return function(**named)
    return compute


def _upsample_ops(packet, mode, antialias=False):
    compute = _resize(mode, antialias)

    def bind(args, kwargs):
        # A call of the packet: .vec's scale_factors is a list (or None after a size),
        # .default's scales are numbers.
        scale_position = len(packet.vec._schema.arguments) - 1
        vec = "scale_factors" in kwargs or args[1] is None or (
            len(args) > scale_position and isinstance(args[scale_position], (list, tuple)))
        return _bind_schema(packet.vec if vec else packet.default, args, kwargs)
    return [_aten(packet.default, compute), _aten(packet.vec, compute),
            Op(packet, compute, bind)]


def _with_packets(ops: list[Op]) -> list[Op]:
    """torchax looks up a call of a packet (``torch.ops.aten.avg_pool2d(...)``) by the
    packet: each packet with one functional overload is defined as that overload."""
    packets = [Op(op.torch_op.overloadpacket, op.compute, op.bind) for op in ops
               if isinstance(op.torch_op, torch._ops.OpOverload)
               and [name for name in op.torch_op.overloadpacket.overloads()
                    if "out" not in name] == ["default"]]
    return ops + packets


def _table() -> tuple[Op, ...]:
    ops = [
        _function(F.interpolate, jaxpool.interpolate),
        _function(F.max_pool2d, jaxpool.max_pool2d),
        _function(F.pad, jaxpool.pad),
        _function(F.max_unpool1d, jaxpool.max_unpool1d),
        _function(F.max_unpool2d, jaxpool.max_unpool2d),
        _function(F.max_unpool3d, jaxpool.max_unpool3d),
        _aten(aten.pad.default, jaxpool.pad),
        _aten(aten.constant_pad_nd.default, lambda x, pad, value: jaxpool.pad(x, pad, "constant",
                                                                             value)),
        _aten(aten._pad_circular.default, lambda x, pad: jaxpool.pad(x, pad, "circular")),
        _aten(aten.pixel_shuffle.default, jaxpool.pixel_shuffle),
        _aten(aten.pixel_unshuffle.default, jaxpool.pixel_unshuffle),
        _aten(aten.max_unpool2d.default, _unpool_from_output(jaxpool.max_unpool2d, 2)),
        _aten(aten.max_unpool3d.default, _unpool_from_output(jaxpool.max_unpool3d, 3)),
        *_upsample_ops(aten.upsample_linear1d, "linear"),
        *_upsample_ops(aten.upsample_bilinear2d, "bilinear"),
        *_upsample_ops(aten.upsample_bicubic2d, "bicubic"),
        *_upsample_ops(aten.upsample_trilinear3d, "trilinear"),
        *_upsample_ops(aten._upsample_bilinear2d_aa, "bilinear", antialias=True),
        *_upsample_ops(aten._upsample_bicubic2d_aa, "bicubic", antialias=True),
    ]
    for d in (1, 2, 3):
        avg, amax = getattr(jaxpool, f"avg_pool{d}d"), getattr(jaxpool, f"max_pool{d}d")
        adaptive_avg = getattr(jaxpool, f"adaptive_avg_pool{d}d")
        adaptive_max = getattr(jaxpool, f"adaptive_max_pool{d}d")
        ops += [
            _aten(getattr(aten, f"avg_pool{d}d").default, avg),
            _aten(getattr(aten, f"max_pool{d}d").default, amax),
            _aten(getattr(aten, f"max_pool{d}d_with_indices").default, _with_indices(amax)),
            _aten(getattr(aten, f"adaptive_max_pool{d}d").default, _with_indices(adaptive_max)),
            _aten(getattr(aten, ("adaptive_avg_pool1d" if d == 1 else
                                 f"_adaptive_avg_pool{d}d")).default, adaptive_avg),
            _aten(getattr(aten, f"reflection_pad{d}d").default, _pad("reflect")),
            _aten(getattr(aten, f"replication_pad{d}d").default, _pad("replicate")),
            *_upsample_ops(getattr(aten, f"upsample_nearest{d}d"), "nearest"),
            *_upsample_ops(getattr(aten, f"_upsample_nearest_exact{d}d"), "nearest-exact"),
        ]
    ops += [_aten(getattr(aten, name).default, _grid_sampler)
            for name in ("grid_sampler", "grid_sampler_2d", "grid_sampler_3d")]
    ops += [_aten(aten.fractional_max_pool2d.default,
                  _fractional(jaxpool.fractional_max_pool2d)),
            _aten(aten.fractional_max_pool3d.default,
                  _fractional(jaxpool.fractional_max_pool3d))]
    ops += _torchvision_ops()
    # an op's ATen names that need no adapter: the schema's arguments are its function's
    covered = {op.torch_op for op in ops}
    for spec in registry.SPECS.values():
        for name in spec.aten:
            overload = getattr(aten, name).default
            if overload not in covered:
                ops.append(_aten(overload, _by_schema(registry.FUNCTIONS[spec.name])))
    return tuple(_with_packets(ops))


OPS: tuple[Op, ...] = _table()
"""Every op :func:`install` defines: ``op.torch_op`` is the ATen overload or the torch
function, ``op(*args, **kwargs)`` computes it in JAX from torchax's arguments."""

# --- installing into an environment -------------------------------------------------------


def _torch_impl(op: Op):
    """torchax calls a user definition with torchax tensors: unwrap, compute, wrap."""
    def impl(*args, **kwargs):
        return interop.call_jax(op, *args, **kwargs)
    return impl


def install(env=None):
    """Define every op of :data:`OPS` in ``env`` (default ``torchax.default_env()``) by
    jaxpool; returns ``env``. :func:`uninstall` puts torchax's definitions back."""
    env = torchax.default_env() if env is None else env
    if not hasattr(env, "override_op_definition"):
        raise TypeError(f"install: env must be a torchax Environment, got {type(env).__name__}")
    # torchax has no public way to read or remove a definition: its table (_ops) is read
    # here only to keep what uninstall restores.
    saved = getattr(env, "_jaxpool_saved", None)
    if saved is None:
        env._jaxpool_saved = {op.torch_op: env._ops.get(op.torch_op) for op in OPS}
    for op in OPS:
        env.override_op_definition(op.torch_op, _torch_impl(op))
    return env


def uninstall(env=None):
    """Restore in ``env`` the definitions :func:`install` replaced; returns ``env``."""
    env = torchax.default_env() if env is None else env
    saved = getattr(env, "_jaxpool_saved", None)
    if saved is None:
        return env
    for torch_op, previous in saved.items():
        if previous is None:
            env._ops.pop(torch_op, None)
        else:
            env._ops[torch_op] = previous
    del env._jaxpool_saved
    return env


def installed(env=None) -> bool:
    """Whether :func:`install` defined this family in ``env``."""
    env = torchax.default_env() if env is None else env
    return getattr(env, "_jaxpool_saved", None) is not None
