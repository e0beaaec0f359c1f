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


def _rows(linear: Any, x: Any) -> Any:
    """An ``eqx.nn.Linear`` (which takes one vector) on every row of ``x``: one
    ``jax.vmap`` per leading axis, called as the port runs (where parity's recorder sees
    each map)."""
    for _ in range(jax.numpy.ndim(x) - 1):
        linear = jax.vmap(linear)
    return linear(x)


class MultiScaleDeformableAttention(eqx.Module, _modules.MultiScaleDeformableAttention):
    """Multi-scale deformable attention with torch's parameters (Hugging Face's
    ``DeformableDetrMultiscaleDeformableAttention``, RT-DETR's, mmcv's without dropout and
    residual): ``jaxpool.linen.MultiScaleDeformableAttention``'s description, with its
    projections ``eqx.nn.Linear`` layers under torch's names and in torch's layout
    (``weight [out, in]``), initialised as torch's.

    On Equinox the call takes one example, ``hidden_states [Q, embed_dim]``,
    ``reference_points [Q, levels, 2 or 4]``, ``value [S, embed_dim]``, ``attention_mask
    [S]`` (map a batch with ``jax.vmap``), or a batch in the Flax modules' shapes
    (``[B, Q, embed_dim]`` and so on), and a ``key`` that is unused (there is no dropout).

        >>> import equinox as eqx
        >>> attention = jaxpool.equinox.MultiScaleDeformableAttention(
        ...     32, 4, num_levels=2, num_points=2, key=jax.random.key(0))
        >>> x, points = jnp.ones((20, 32)), jnp.full((20, 2, 2), 0.5)   # one example
        >>> attention(x, points, ((4, 4), (2, 2))).shape
        (20, 32)
    """

    embed_dim: int = eqx.field(static=True)
    num_heads: int = eqx.field(static=True)
    num_levels: int = eqx.field(static=True)
    num_points: int = eqx.field(static=True)
    sampling_offsets: eqx.nn.Linear
    attention_weights: eqx.nn.Linear
    value_proj: eqx.nn.Linear
    output_proj: eqx.nn.Linear

    def __init__(self, embed_dim: int = 256, num_heads: int = 8, num_levels: int = 4,
                 num_points: int = 4, *, dtype: Any = None, key: Any) -> None:
        """torch's configuration (mmcv's names and defaults: Deformable DETR's), the
        parameters' dtype (None: Equinox's default) and the ``jax.random`` key they are
        drawn from."""
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.num_levels, self.num_points = num_levels, num_points
        self.check_configuration()
        for which, k in zip(self.PROJECTIONS, jax.random.split(key, len(self.PROJECTIONS))):
            inputs, features, weight_init, bias_init = self.projection(which)
            k_weight, k_bias, k_layer = jax.random.split(k, 3)
            linear = eqx.nn.Linear(inputs, features, dtype=dtype, key=k_layer)
            kind = linear.weight.dtype
            linear = eqx.tree_at(lambda m: (m.weight, m.bias), linear,
                                 (weight_init(k_weight, (features, inputs), kind),
                                  bias_init(k_bias, (features,), kind)))
            setattr(self, which, linear)

    def __call__(self, hidden_states: ArrayLike, reference_points: ArrayLike,
                 spatial_shapes: Any, value: ArrayLike | None = None,
                 attention_mask: ArrayLike | None = None,
                 position_embeddings: ArrayLike | None = None, *, key: Any = None) -> Any:
        """The attention's output, ``[Q, embed_dim]`` for one example, ``[B, Q,
        embed_dim]`` for a batch (arguments as in the class docstring); ``key`` is
        unused."""
        if jax.numpy.ndim(hidden_states) != 2:  # a batch
            return self.attend(lambda which, x: _rows(getattr(self, which), x), hidden_states,
                               reference_points, spatial_shapes, value, attention_mask,
                               position_embeddings)

        def batch(a: Any) -> Any:
            return None if a is None else jax.numpy.expand_dims(jax.numpy.asarray(a), 0)

        # the projections on the example's rows, as an Equinox model calls a Linear
        out = self.attend(lambda which, x: _rows(getattr(self, which), x[0])[None],
                          batch(hidden_states), batch(reference_points), spatial_shapes,
                          batch(value), batch(attention_mask), batch(position_embeddings))
        return out[0]


class DeformConv2d(eqx.Module, _modules.DeformConv2d):
    """Deformable convolution with torchvision's parameters (``weight [out_channels,
    in_channels / groups, kh, kw]``, ``bias [out_channels]`` or None), drawn as
    torchvision draws them: ``jaxpool.linen.DeformConv2d``'s description. Channels first,
    as torchvision; the call takes a batch ``[B, C, H, W]`` (or one example ``[C, H, W]``,
    with ``offset`` and ``mask`` likewise unbatched).

        >>> conv = jaxpool.equinox.DeformConv2d(4, 8, 3, padding=1, key=jax.random.key(0))
        >>> conv(jnp.ones((4, 6, 6)), jnp.zeros((18, 6, 6))).shape   # one example
        (8, 6, 6)
    """

    in_channels: int = eqx.field(static=True)
    out_channels: int = eqx.field(static=True)
    kernel_size: Any = eqx.field(static=True)
    stride: Any = eqx.field(static=True)
    padding: Any = eqx.field(static=True)
    dilation: Any = eqx.field(static=True)
    groups: int = eqx.field(static=True)
    weight: Any
    bias: Any

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any,
                 stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1,
                 bias: bool = True, *, dtype: Any = None, key: Any) -> None:
        """torchvision's configuration, the parameters' dtype (None: float32, or float64
        under x64) and the ``jax.random`` key they are drawn from."""
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.groups = dilation, groups
        self.bias = bias  # the flag, checked, then the parameter of torch's name
        self.check_configuration()
        dtype = jax.numpy.zeros(()).dtype if dtype is None else dtype
        init = self.initializer()
        k_weight, k_bias = jax.random.split(key)
        self.weight = init(k_weight, self.weight_shape, dtype)
        self.bias = init(k_bias, (out_channels,), dtype) if bias else None

    def __call__(self, input: ArrayLike, offset: ArrayLike, mask: ArrayLike | None = None,
                 *, key: Any = None) -> Any:
        """``[B, out_channels, out_h, out_w]`` (``[out_channels, out_h, out_w]`` for one
        example); ``key`` is unused."""
        del key
        if jax.numpy.ndim(input) == 3:
            out = self.convolve(self.weight, self.bias, jax.numpy.asarray(input)[None],
                                jax.numpy.asarray(offset)[None],
                                None if mask is None else jax.numpy.asarray(mask)[None])
            return out[0]
        return self.convolve(self.weight, self.bias, input, offset, mask)


class _Boxes(_Module):
    """The Equinox side of the RoI modules: called with the boxes (a batch of maps, whose
    images the boxes' first column names)."""

    def __call__(self, x: ArrayLike, boxes: Any,  # type: ignore[override]
                 *, key: Any = None) -> Any:
        """The boxes pooled from ``x`` (layout and result as in the class docstring);
        ``key`` is unused."""
        call: Callable[..., Any] = _modules._Boxes.__call__
        return call(self, x, boxes)


# (ignore[misc]: _Boxes's call takes the boxes, Pool's, under the description, does not)
class RoIAlign(_Boxes, _modules.RoIAlign): ...  # type: ignore[misc]
class RoIPool(_Boxes, _modules.RoIPool): ...  # type: ignore[misc]
class PSRoIAlign(_Boxes, _modules.PSRoIAlign): ...  # type: ignore[misc]
class PSRoIPool(_Boxes, _modules.PSRoIPool): ...  # type: ignore[misc]


class MultiScaleRoIAlign(_Module, _modules.MultiScaleRoIAlign):
    def __call__(self, x: Any, boxes: Any, image_shapes: Any,  # type: ignore[override]
                 *, key: Any = None) -> Any:
        """The boxes pooled from the maps of ``x`` (a dict) named in ``featmap_names``;
        ``image_shapes``: each image's ``(height, width)``; ``key`` is unused."""
        call: Callable[..., Any] = _modules.MultiScaleRoIAlign.__call__
        return call(self, x, boxes, image_shapes)
