"""Flax ``linen`` pooling modules: parameter-free, channels-last by default.

Each class is the description of the same name in ``jaxpool._modules`` (typed fields in
torch.nn's order, docstring, call) on ``flax.linen.Module``: ``MaxPool2d(3, 2, 1)`` as
``torch.nn.MaxPool2d(3, 2, 1)``, then ``apply({}, x)`` or a call inside a model. They take
``[B, *spatial, C]`` (what Flax convolutions produce); ``channels_last=False`` takes torch's
``[B, C, *spatial]``.
"""

import typing

import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxpool import _modules

try:
    import flax.linen as nn
except ImportError as error:
    raise ImportError(_modules.flax_missing("jaxpool.linen")) from error


class _Module(nn.Module):
    """The linen side of every module below."""

    # linen binds, names and tabulates only the methods written in a Module's own class body.
    __call__ = _modules.Pool.__call__


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
class GlobalAvgPool(_Module, _modules.GlobalAvgPool): ...
class GlobalMaxPool(_Module, _modules.GlobalMaxPool): ...


class _Unpool(nn.Module):
    """The linen side of the unpooling modules: called with the pool's indices."""

    __call__ = _modules.Unpool.__call__


class _Pad(nn.Module):
    """The linen side of the padding modules."""

    __call__ = _modules.Pad.__call__


class MaxUnpool1d(_Unpool, _modules.MaxUnpool1d): ...  # type: ignore[misc]
class MaxUnpool2d(_Unpool, _modules.MaxUnpool2d): ...  # type: ignore[misc]
class MaxUnpool3d(_Unpool, _modules.MaxUnpool3d): ...  # type: ignore[misc]
class ReflectionPad1d(_Pad, _modules.ReflectionPad1d): ...
class ReflectionPad2d(_Pad, _modules.ReflectionPad2d): ...
class ReflectionPad3d(_Pad, _modules.ReflectionPad3d): ...
class ReplicationPad1d(_Pad, _modules.ReplicationPad1d): ...
class ReplicationPad2d(_Pad, _modules.ReplicationPad2d): ...
class ReplicationPad3d(_Pad, _modules.ReplicationPad3d): ...
class CircularPad1d(_Pad, _modules.CircularPad1d): ...
class CircularPad2d(_Pad, _modules.CircularPad2d): ...
class CircularPad3d(_Pad, _modules.CircularPad3d): ...
class ZeroPad1d(_Pad, _modules.ZeroPad1d): ...
class ZeroPad2d(_Pad, _modules.ZeroPad2d): ...
class ZeroPad3d(_Pad, _modules.ZeroPad3d): ...
class ConstantPad1d(_Pad, _modules.ConstantPad1d): ...
class ConstantPad2d(_Pad, _modules.ConstantPad2d): ...
class ConstantPad3d(_Pad, _modules.ConstantPad3d): ...


class _Fractional(nn.Module):
    """The linen side of the fractional max pools: the samples from an rng stream."""

    rng_collection: str = _modules.RNG_STREAM
    """The rng stream the samples are drawn from (``apply(..., rngs={name: key})``)."""

    def __call__(self, x: ArrayLike, samples: ArrayLike | None = None) -> typing.Any:
        """Pools ``x`` over windows placed by ``samples`` if given, else by samples drawn
        from the ``rng_collection`` stream (layout and result as in the class docstring)."""
        key = None
        if samples is None:
            # make_rng falls back to "params" (which init(key, x) has), as for flax's Dropout
            if not (self.has_rng(self.rng_collection) or self.has_rng("params")):
                raise ValueError(
                    f"{type(self).__name__} draws its samples from the rng stream "
                    f"{self.rng_collection!r}, which this call has not: apply(variables, x, "
                    f"rngs={{{self.rng_collection!r}: key}}), or pass the samples to the "
                    f"call")
            key = self.make_rng(self.rng_collection)
        return _modules.FractionalMaxPool.__call__(self, x, samples,  # type: ignore[arg-type]
                                                   key=key)


class FractionalMaxPool2d(_Fractional, _modules.FractionalMaxPool2d): ...  # type: ignore[misc]
class FractionalMaxPool3d(_Fractional, _modules.FractionalMaxPool3d): ...  # type: ignore[misc]


class Upsample(_Module, _modules.Upsample): ...
class UpsamplingNearest2d(_Module, _modules.UpsamplingNearest2d): ...
class UpsamplingBilinear2d(_Module, _modules.UpsamplingBilinear2d): ...
class PixelShuffle(_Module, _modules.PixelShuffle): ...
class PixelUnshuffle(_Module, _modules.PixelUnshuffle): ...
class ChannelShuffle(_Module, _modules.ChannelShuffle): ...
class Unfold(_Module, _modules.Unfold): ...
class Fold(_Module, _modules.Fold): ...


class MultiScaleDeformableAttention(nn.Module, _modules.MultiScaleDeformableAttention):
    # (the docstring is the description's)
    param_dtype: typing.Any = jnp.float32
    """The parameters' dtype; the computation follows the inputs', as ``nn.Dense``'s."""

    def setup(self) -> None:
        self.check_configuration()
        for which in self.PROJECTIONS:  # each under torch's name
            _, features, weight_init, bias_init = self.projection(which)
            setattr(self, which, nn.Dense(features, kernel_init=weight_init,
                                          bias_init=bias_init, param_dtype=self.param_dtype,
                                          name=which))

    def __call__(self, hidden_states: ArrayLike, reference_points: ArrayLike,
                 spatial_shapes: typing.Any, value: ArrayLike | None = None,
                 attention_mask: ArrayLike | None = None,
                 position_embeddings: ArrayLike | None = None) -> typing.Any:
        """The attention's output ``[B, Q, embed_dim]`` (arguments as in the class
        docstring)."""
        return self.attend(lambda which, x: getattr(self, which)(x), hidden_states,
                           reference_points, spatial_shapes, value, attention_mask,
                           position_embeddings)


class DeformConv2d(nn.Module, _modules.DeformConv2d):
    # (the docstring is the description's)
    param_dtype: typing.Any = jnp.float32
    """The parameters' dtype; the computation follows the inputs'."""

    @nn.compact
    def __call__(self, input: ArrayLike, offset: ArrayLike,
                 mask: ArrayLike | None = None) -> typing.Any:
        """``[B, out_channels, out_h, out_w]`` (arguments as in the class docstring)."""
        self.check_configuration()
        init = self.initializer()
        weight = self.param("weight", init, self.weight_shape, self.param_dtype)
        bias = self.param("bias", init, (self.out_channels,), self.param_dtype) \
            if self.bias else None
        dtype = jnp.result_type(input)
        return self.convolve(weight.astype(dtype), None if bias is None else
                             bias.astype(dtype), input, offset, mask)


class _Boxes(nn.Module):
    """The linen side of the RoI modules: called with the boxes."""

    __call__ = _modules._Boxes.__call__


class RoIAlign(_Boxes, _modules.RoIAlign): ...  # type: ignore[misc]
class RoIPool(_Boxes, _modules.RoIPool): ...  # type: ignore[misc]
class PSRoIAlign(_Boxes, _modules.PSRoIAlign): ...  # type: ignore[misc]
class PSRoIPool(_Boxes, _modules.PSRoIPool): ...  # type: ignore[misc]


class MultiScaleRoIAlign(nn.Module, _modules.MultiScaleRoIAlign):
    __call__ = _modules.MultiScaleRoIAlign.__call__
