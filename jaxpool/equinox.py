"""Equinox pooling modules: ``eqx.Module`` classes with static fields, channels-first by
default.

Each class is the description of the same name in ``jaxpool._modules`` (typed fields in
torch.nn's order, docstring, call) on ``equinox.Module``, as ``jaxpool.linen`` and
``jaxpool.nnx`` are on Flax: ``MaxPool2d(3, 2, 1)`` as ``torch.nn.MaxPool2d(3, 2, 1)``, then
``pool(x)``. Equinox's conventions, where they differ from the Flax modules':

- one example ``[C, *spatial]``, as Equinox's layers take (map a batch with ``jax.vmap`` or
  ``eqx.filter_vmap``), or a batch ``[B, C, *spatial]``; ``channels_last=True`` takes
  ``[*spatial, C]`` / ``[B, *spatial, C]`` (the Flax modules default to channels-last);
- ``pool(x, *, key=None)``, as every Equinox layer is called (the key is used only by modules
  that draw at random);
- every field is static: ``eqx.filter_jit`` and ``eqx.filter_grad`` see a module without
  parameters and trace once per configuration.
"""

import dataclasses
import inspect
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from jax.typing import ArrayLike

from jaxpool import _modules

try:
    import equinox as eqx
except ImportError as error:
    raise ImportError('jaxpool.equinox needs Equinox, an optional dependency: '
                      'pip install "jaxpool[equinox]"') from error
import jax

_LAYOUT = ("On Equinox ``channels_last`` defaults to False: one example ``[C, *spatial]`` "
           "or a batch ``[B, C, *spatial]``, or with ``channels_last=True`` "
           "``[*spatial, C]`` / ``[B, *spatial, C]``; called as ``pool(x, key=None)``. "
           "The description shared with ``jaxpool.linen.{name}`` and "
           "``jaxpool.nnx.{name}`` (channels-last there):")


def _description(cls: type) -> Any:
    """The description a module class is built on: its first base from ``jaxpool._modules``
    with fields."""
    return next((base for base in cls.__mro__[1:] if issubclass(base, _modules.Pool)
                 and base.__module__ == _modules.__name__ and dataclasses.is_dataclass(base)),
                None)


def _docstring(name: str, description: type) -> str:
    """The description's docstring with the Equinox layout after its summary, without its
    examples (written for linen and nnx; docs/equinox.rst shows Equinox's)."""
    paragraphs = inspect.cleandoc(description.__doc__ or "").split("\n\n")
    prose = [p for p in paragraphs if not p.lstrip().startswith(">>>")]
    layout = textwrap.fill(_LAYOUT.format(name=name), 92)
    return "\n\n".join([prose[0], layout, *prose[1:]])


class _Module(eqx.Module):
    """The Equinox side of every module below."""

    _description: ClassVar[type[_modules.Pool]]
    _takes_key: ClassVar[bool]
    _batch_spatial_axes: ClassVar[int | None] = None
    """Spatial axes of a function that takes batches only (``[B, C, *spatial]``): one
    example gets a batch axis of 1 around the call. None: the function takes one example
    itself, as torch's does."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        description = _description(cls)
        if description is not None:
            cls._description = description
            cls._takes_key = "key" in inspect.signature(description.__call__).parameters
            # The description's fields again, each static: Equinox reads "static" from the
            # class's own field, and the description's fields are shared with linen and nnx.
            # Equinox makes the class a dataclass after this hook, so they replace the
            # inherited ones in place (torch.nn's order stays).
            annotations = dict(cls.__dict__.get("__annotations__", {}))
            for field in dataclasses.fields(description):
                if field.name in annotations:
                    continue
                annotations[field.name] = field.type
                default = False if field.name == "channels_last" else field.default
                setattr(cls, field.name, eqx.field(static=True) if default is dataclasses.MISSING
                        else eqx.field(static=True, default=default))
            cls.__annotations__ = annotations
            if cls.__doc__ is None:
                cls.__doc__ = _docstring(cls.__name__, description)
        super().__init_subclass__(**kwargs)

    def _spatial_axes(self, rank: int) -> int | None:
        return self._batch_spatial_axes

    def __call__(self, x: ArrayLike, *, key: Any = None) -> Any:
        """``x`` pooled (layout and result as in the class docstring): an array, or
        ``(values, indices)`` with ``return_indices=True``. ``key``: a ``jax.random`` key
        for modules that draw at random, else unused."""
        call: Callable[..., Any] = self._description.__call__
        keyword = {"key": key} if self._takes_key else {}
        rank = jax.numpy.ndim(x)
        spatial = self._spatial_axes(rank)
        if spatial is None or rank != spatial + 1:
            return call(self, x, **keyword)
        out = call(self, jax.numpy.expand_dims(x, 0), **keyword)
        return jax.tree.map(lambda a: a[0], out)


class _Unpool(_Module):
    """The Equinox side of the unpooling modules: called with the pool's indices."""

    def __call__(self, x: ArrayLike, indices: ArrayLike,  # type: ignore[override]
                 output_size: Any = None, *, key: Any = None) -> Any:
        """``x`` unpooled with the ``indices`` of the matching max pool (layout and result
        as in the class docstring); ``key`` is unused."""
        call: Callable[..., Any] = _modules.Unpool.__call__
        return call(self, x, indices, output_size)


class AvgPool1d(_Module, _modules.AvgPool1d): ...
class AvgPool2d(_Module, _modules.AvgPool2d): ...
class AvgPool3d(_Module, _modules.AvgPool3d): ...
class AdaptiveAvgPool1d(_Module, _modules.AdaptiveAvgPool1d): ...
class AdaptiveAvgPool2d(_Module, _modules.AdaptiveAvgPool2d): ...
class AdaptiveAvgPool3d(_Module, _modules.AdaptiveAvgPool3d): ...
class MaxPool1d(_Module, _modules.MaxPool1d): ...
class MaxPool2d(_Module, _modules.MaxPool2d): ...
class MaxPool3d(_Module, _modules.MaxPool3d): ...
class AdaptiveMaxPool1d(_Module, _modules.AdaptiveMaxPool1d): ...
class AdaptiveMaxPool2d(_Module, _modules.AdaptiveMaxPool2d): ...
class AdaptiveMaxPool3d(_Module, _modules.AdaptiveMaxPool3d): ...
class LPPool1d(_Module, _modules.LPPool1d): ...
class LPPool2d(_Module, _modules.LPPool2d): ...
class LPPool3d(_Module, _modules.LPPool3d): ...


class GlobalAvgPool(_Module, _modules.GlobalAvgPool):
    _batch_spatial_axes = 2  # [C, H, W] -> [C]


class GlobalMaxPool(_Module, _modules.GlobalMaxPool):
    _batch_spatial_axes = 2


class MaxUnpool1d(_Unpool, _modules.MaxUnpool1d): ...  # type: ignore[misc]
class MaxUnpool2d(_Unpool, _modules.MaxUnpool2d): ...  # type: ignore[misc]
class MaxUnpool3d(_Unpool, _modules.MaxUnpool3d): ...  # type: ignore[misc]
class ReflectionPad1d(_Module, _modules.ReflectionPad1d): ...
class ReflectionPad2d(_Module, _modules.ReflectionPad2d): ...
class ReflectionPad3d(_Module, _modules.ReflectionPad3d): ...
class ReplicationPad1d(_Module, _modules.ReplicationPad1d): ...
class ReplicationPad2d(_Module, _modules.ReplicationPad2d): ...
class ReplicationPad3d(_Module, _modules.ReplicationPad3d): ...
class CircularPad1d(_Module, _modules.CircularPad1d): ...
class CircularPad2d(_Module, _modules.CircularPad2d): ...
class CircularPad3d(_Module, _modules.CircularPad3d): ...
class ZeroPad1d(_Module, _modules.ZeroPad1d): ...
class ZeroPad2d(_Module, _modules.ZeroPad2d): ...
class ZeroPad3d(_Module, _modules.ZeroPad3d): ...
class ConstantPad1d(_Module, _modules.ConstantPad1d): ...
class ConstantPad2d(_Module, _modules.ConstantPad2d): ...
class ConstantPad3d(_Module, _modules.ConstantPad3d): ...


class Upsample(_Module, _modules.Upsample):
    # torch's interpolate reads the spatial axes from the rank (a batch always there), so
    # one example [C, H, W] would look like a batch [B, C, L]: the mode, or a size or scale
    # per axis, says how many spatial axes there are.
    _MODE_AXES: ClassVar[dict[str, int]] = {"linear": 1, "bilinear": 2, "bicubic": 2,
                                             "trilinear": 3}

    def _spatial_axes(self, rank: int) -> int | None:
        for given in (self.size, self.scale_factor):
            if isinstance(given, Sequence):
                return len(given)
        if self.mode in self._MODE_AXES:
            return self._MODE_AXES[self.mode]
        if rank in (3, 4):
            raise ValueError(
                f"Upsample(mode={self.mode!r}) with size={self.size!r} and "
                f"scale_factor={self.scale_factor!r} cannot tell one example [C, *spatial] "
                f"from a batch [B, C, *spatial] of rank {rank}: give size or scale_factor "
                f"with one entry per spatial axis, e.g. scale_factor=(2, 2)")
        return 1 if rank == 2 else None  # one example [C, L]; else the rank is a batch's


class UpsamplingNearest2d(_Module, _modules.UpsamplingNearest2d):
    _batch_spatial_axes = 2


class UpsamplingBilinear2d(_Module, _modules.UpsamplingBilinear2d):
    _batch_spatial_axes = 2


class PixelShuffle(_Module, _modules.PixelShuffle): ...
class PixelUnshuffle(_Module, _modules.PixelUnshuffle): ...
class ChannelShuffle(_Module, _modules.ChannelShuffle): ...
class Unfold(_Module, _modules.Unfold): ...
class Fold(_Module, _modules.Fold): ...


class _Fractional(_Module):
    """The Equinox side of the fractional max pools: the samples, or the key to draw them
    from, per call."""

    def __call__(self, x: ArrayLike, samples: ArrayLike | None = None, *,
                 key: Any = None) -> Any:
        """``x`` pooled over windows placed by ``samples`` (``[N, C, d]`` in ``[0, 1)``, N
        = 1 for one example) or by samples drawn from ``key`` (a ``jax.random`` key; exactly
        one of the two), layout and result as in the class docstring."""
        call: Callable[..., Any] = _modules.FractionalMaxPool.__call__
        return call(self, x, samples, key=key)


class FractionalMaxPool2d(_Fractional, _modules.FractionalMaxPool2d): ...
class FractionalMaxPool3d(_Fractional, _modules.FractionalMaxPool3d): ...
