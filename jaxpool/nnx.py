"""Flax ``nnx`` pooling modules: stateless, channels-last by default.

Each class is the description of the same name in ``jaxpool._modules`` (typed fields in
torch.nn's order, docstring, call) on ``nnx.Module``: ``MaxPool2d(3, 2, 1)`` as
``torch.nn.MaxPool2d(3, 2, 1)``, then ``pool(x)``. Their fields are static, so ``nnx.jit``
compiles one program per configuration. They take ``[B, *spatial, C]`` (what Flax
convolutions produce); ``channels_last=False`` takes torch's ``[B, C, *spatial]``.
"""

import typing

import jax
from jax.typing import ArrayLike

from jaxpool import _modules
from jaxpool.fractional.functions import Ratio
from jaxpool.pooling.functions import Size

try:
    from flax import nnx
except ImportError as error:
    raise ImportError(_modules.flax_missing("jaxpool.nnx")) from error


class AvgPool1d(nnx.Module, _modules.AvgPool1d): ...
class AvgPool2d(nnx.Module, _modules.AvgPool2d): ...
class AvgPool3d(nnx.Module, _modules.AvgPool3d): ...
class AdaptiveAvgPool1d(nnx.Module, _modules.AdaptiveAvgPool1d): ...
class AdaptiveAvgPool2d(nnx.Module, _modules.AdaptiveAvgPool2d): ...
class AdaptiveAvgPool3d(nnx.Module, _modules.AdaptiveAvgPool3d): ...
class MaxPool1d(nnx.Module, _modules.MaxPool1d): ...
class MaxPool2d(nnx.Module, _modules.MaxPool2d): ...
class MaxPool3d(nnx.Module, _modules.MaxPool3d): ...
class AdaptiveMaxPool1d(nnx.Module, _modules.AdaptiveMaxPool1d): ...
class AdaptiveMaxPool2d(nnx.Module, _modules.AdaptiveMaxPool2d): ...
class AdaptiveMaxPool3d(nnx.Module, _modules.AdaptiveMaxPool3d): ...
class LPPool1d(nnx.Module, _modules.LPPool1d): ...
class LPPool2d(nnx.Module, _modules.LPPool2d): ...
class LPPool3d(nnx.Module, _modules.LPPool3d): ...
class GlobalAvgPool(nnx.Module, _modules.GlobalAvgPool): ...
class GlobalMaxPool(nnx.Module, _modules.GlobalMaxPool): ...
class MaxUnpool1d(nnx.Module, _modules.MaxUnpool1d): ...
class MaxUnpool2d(nnx.Module, _modules.MaxUnpool2d): ...
class MaxUnpool3d(nnx.Module, _modules.MaxUnpool3d): ...
class ReflectionPad1d(nnx.Module, _modules.ReflectionPad1d): ...
class ReflectionPad2d(nnx.Module, _modules.ReflectionPad2d): ...
class ReflectionPad3d(nnx.Module, _modules.ReflectionPad3d): ...
class ReplicationPad1d(nnx.Module, _modules.ReplicationPad1d): ...
class ReplicationPad2d(nnx.Module, _modules.ReplicationPad2d): ...
class ReplicationPad3d(nnx.Module, _modules.ReplicationPad3d): ...
class CircularPad1d(nnx.Module, _modules.CircularPad1d): ...
class CircularPad2d(nnx.Module, _modules.CircularPad2d): ...
class CircularPad3d(nnx.Module, _modules.CircularPad3d): ...
class ZeroPad1d(nnx.Module, _modules.ZeroPad1d): ...
class ZeroPad2d(nnx.Module, _modules.ZeroPad2d): ...
class ZeroPad3d(nnx.Module, _modules.ZeroPad3d): ...
class ConstantPad1d(nnx.Module, _modules.ConstantPad1d): ...
class ConstantPad2d(nnx.Module, _modules.ConstantPad2d): ...
class ConstantPad3d(nnx.Module, _modules.ConstantPad3d): ...


class _Fractional(nnx.Module):
    """The nnx side of the fractional max pools: the samples from an ``nnx.Rngs`` stream."""

    def __init__(self, kernel_size: Size, output_size: Size | None = None,
                 output_ratio: Ratio | None = None, return_indices: bool = False,
                 channels_last: bool = True, *, rng_collection: str = _modules.RNG_STREAM,
                 rngs: nnx.Rngs | nnx.RngStream | None = None) -> None:
        """torch.nn's arguments, the layout, and where the samples come from: the stream
        ``rng_collection`` of ``rngs`` (an ``nnx.Rngs``; or an ``nnx.RngStream``), as
        ``nnx.Dropout``'s."""
        if rngs is not None and not isinstance(rngs, (nnx.Rngs, nnx.RngStream)):
            raise TypeError(f"{type(self).__name__}: rngs must be an nnx.Rngs, an "
                            f"nnx.RngStream or None, got {rngs!r}")
        _modules.FractionalMaxPool.__init__(self, kernel_size,  # type: ignore[arg-type]
                                            output_size, output_ratio, return_indices,
                                            channels_last)
        self.rng_collection = rng_collection
        self.rngs = rngs

    def __call__(self, x: ArrayLike, samples: ArrayLike | None = None, *,
                 rngs: nnx.Rngs | nnx.RngStream | jax.Array | None = None) -> typing.Any:
        """Pools ``x`` over windows placed by ``samples`` if given, else by samples drawn
        from ``rngs`` (the call's, else the module's: an ``nnx.Rngs``, an ``nnx.RngStream``
        or a ``jax.random`` key); layout and result as in the class docstring."""
        key = None
        if samples is None:
            source = self.rngs if rngs is None else rngs
            if source is None:
                raise ValueError(
                    f"{type(self).__name__} has no random stream to draw its samples from: "
                    f"give it rngs=nnx.Rngs({self.rng_collection}=seed) (at construction or "
                    f"to the call), or pass the samples to the call")
            if isinstance(source, nnx.Rngs):
                key = source[self.rng_collection]()
            elif isinstance(source, nnx.RngStream):
                key = source()
            else:
                key = source
        return _modules.FractionalMaxPool.__call__(self, x, samples,  # type: ignore[arg-type]
                                                   key=key)


class FractionalMaxPool2d(_Fractional, _modules.FractionalMaxPool2d): ...  # type: ignore[misc]
class FractionalMaxPool3d(_Fractional, _modules.FractionalMaxPool3d): ...  # type: ignore[misc]


class Upsample(nnx.Module, _modules.Upsample): ...
class UpsamplingNearest2d(nnx.Module, _modules.UpsamplingNearest2d): ...
class UpsamplingBilinear2d(nnx.Module, _modules.UpsamplingBilinear2d): ...
class PixelShuffle(nnx.Module, _modules.PixelShuffle): ...
class PixelUnshuffle(nnx.Module, _modules.PixelUnshuffle): ...
class ChannelShuffle(nnx.Module, _modules.ChannelShuffle): ...
class Unfold(nnx.Module, _modules.Unfold): ...
class Fold(nnx.Module, _modules.Fold): ...


class MultiScaleDeformableAttention(nnx.Module, _modules.MultiScaleDeformableAttention):
    # (the docstring is the description's)

    def __init__(self, embed_dim: int = 256, num_heads: int = 8, num_levels: int = 4,
                 num_points: int = 4, *, param_dtype: typing.Any = jax.numpy.float32,
                 rngs: nnx.Rngs) -> None:
        """torch's configuration (mmcv's names and defaults: Deformable DETR's), the
        parameters' dtype, and the ``nnx.Rngs`` the projections are drawn from."""
        _modules.MultiScaleDeformableAttention.__init__(self, embed_dim, num_heads,
                                                        num_levels, num_points)
        self.check_configuration()
        for which in self.PROJECTIONS:  # each under torch's name
            inputs, features, weight_init, bias_init = self.projection(which)
            setattr(self, which, nnx.Linear(inputs, features, kernel_init=weight_init,
                                            bias_init=bias_init, param_dtype=param_dtype,
                                            rngs=rngs))

    def __call__(self, hidden_states: ArrayLike, reference_points: ArrayLike,
                 spatial_shapes: typing.Any, value: ArrayLike | None = None,
                 attention_mask: ArrayLike | None = None,
                 position_embeddings: ArrayLike | None = None) -> typing.Any:
        """The attention's output ``[B, Q, embed_dim]`` (arguments as in the class
        docstring)."""
        return self.attend(lambda which, x: getattr(self, which)(x), hidden_states,
                           reference_points, spatial_shapes, value, attention_mask,
                           position_embeddings)


class DeformConv2d(nnx.Module, _modules.DeformConv2d):
    # (the docstring is the description's)

    # After construction ``bias`` is the parameter under torchvision's name (None with
    # ``bias=False``), no longer the description's flag: a type other than the base's
    # ``bool`` field, which mypy cannot express as an override.
    bias: nnx.Param | None  # type: ignore[assignment]

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Size,
                 stride: Size = 1, padding: Size = 0, dilation: Size = 1, groups: int = 1,
                 bias: bool = True, *, param_dtype: typing.Any = jax.numpy.float32,
                 rngs: nnx.Rngs) -> None:
        """torchvision's configuration, the parameters' dtype, and the ``nnx.Rngs`` they
        are drawn from."""
        _modules.DeformConv2d.__init__(self, in_channels, out_channels, kernel_size, stride,
                                       padding, dilation, groups, bias)
        self.check_configuration()
        init = self.initializer()
        self.weight = nnx.Param(init(rngs.params(), self.weight_shape, param_dtype))
        # the flag ``bias`` becomes the parameter of torch's name (None without one)
        self.bias = nnx.data(nnx.Param(init(rngs.params(), (out_channels,), param_dtype))
                             if bias else None)

    def __call__(self, input: ArrayLike, offset: ArrayLike,
                 mask: ArrayLike | None = None) -> typing.Any:
        """``[B, out_channels, out_h, out_w]`` (arguments as in the class docstring)."""
        dtype = jax.numpy.result_type(input)
        bias = None if self.bias is None else self.bias[...].astype(dtype)
        return self.convolve(self.weight[...].astype(dtype), bias, input, offset, mask)


class RoIAlign(nnx.Module, _modules.RoIAlign): ...
class RoIPool(nnx.Module, _modules.RoIPool): ...
class PSRoIAlign(nnx.Module, _modules.PSRoIAlign): ...
class PSRoIPool(nnx.Module, _modules.PSRoIPool): ...
class MultiScaleRoIAlign(nnx.Module, _modules.MultiScaleRoIAlign): ...
