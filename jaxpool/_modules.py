"""One description of each pooling module, which ``jaxpool.linen`` and ``jaxpool.nnx`` share.

A description is a dataclass: the module's fields (torch.nn's arguments in torch.nn's order,
typed, with torch's defaults, then ``channels_last``), its docstring, and its call (the
function of the same name, each field passed to it by name). ``jaxpool.linen.MaxPool2d`` is
``class MaxPool2d(<linen base>, MaxPool2d)``, ``jaxpool.nnx.MaxPool2d`` the same on
``nnx.Module``: the framework adds its own machinery and nothing else.

No Flax here, so that the Flax modules' import can say how to install it.
"""

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, ClassVar

from jax.typing import ArrayLike

import jaxpool
from jaxpool.pooling import OutputSize, Size


def flax_missing(module: str) -> str:
    """The message of the ImportError that ``module`` raises when Flax is not installed."""
    return f'{module} needs Flax, an optional dependency: pip install "jaxpool[flax]"'


class Pool:
    """What every description has: the function it wraps and the call."""

    function: ClassVar[Callable[..., Any]]
    """The pooling function the module calls (``jaxpool.max_pool2d`` for ``MaxPool2d``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The Flax classes are written without a docstring: they show their description's.
        if cls.__doc__ is None:
            cls.__doc__ = next((base.__doc__ for base in cls.__mro__[1:]
                                if issubclass(base, Pool) and base.__doc__), None)
        super().__init_subclass__(**kwargs)

    def __call__(self, x: ArrayLike) -> Any:
        """Pools ``x`` (layout and result as in the class docstring): an array, or
        ``(values, indices)`` with ``return_indices=True``."""
        # The fields are the function's arguments after x, under the same names.
        names = list(inspect.signature(self.function).parameters)[1:]
        return self.function(x, **{name: getattr(self, name) for name in names})


# The families of fields. eq=False, repr=False: equality, hashing and repr stay the
# framework's (linen: by fields; nnx: by identity).

@dataclasses.dataclass(eq=False, repr=False)
class _AvgPool(Pool):
    """Average pooling: torch.nn.AvgPool's fields (see ``jaxpool.avg_pool2d``)."""

    kernel_size: Size
    stride: Size | None = None  # None (or 0, or empty): kernel_size
    padding: Size = 0
    ceil_mode: bool = False
    count_include_pad: bool = True
    divisor_override: int | None = None
    channels_last: bool = True


@dataclasses.dataclass(eq=False, repr=False)
class _AdaptiveAvgPool(Pool):
    """Adaptive average pooling: torch.nn.AdaptiveAvgPool's field."""

    output_size: OutputSize
    channels_last: bool = True


@dataclasses.dataclass(eq=False, repr=False)
class _MaxPool(Pool):
    """Max pooling: torch.nn.MaxPool's fields in its order (``return_indices`` before
    ``ceil_mode``, unlike the function)."""

    kernel_size: Size
    stride: Size | None = None  # None (or 0, or empty): kernel_size
    padding: Size = 0
    dilation: Size = 1
    return_indices: bool = False
    ceil_mode: bool = False
    channels_last: bool = True


@dataclasses.dataclass(eq=False, repr=False)
class _AdaptiveMaxPool(Pool):
    """Adaptive max pooling: torch.nn.AdaptiveMaxPool's fields."""

    output_size: OutputSize
    return_indices: bool = False
    channels_last: bool = True


@dataclasses.dataclass(eq=False, repr=False)
class _LPPool(Pool):
    """Power-average pooling: torch.nn.LPPool's fields."""

    norm_type: float
    kernel_size: Size
    stride: Size | None = None  # None (or 0, or empty): kernel_size
    ceil_mode: bool = False
    channels_last: bool = True


@dataclasses.dataclass(eq=False, repr=False)
class _GlobalPool(Pool):
    """Pooling over all spatial axes: ``[B, H, W, C]`` (``[B, C, H, W]``) -> ``[B, C]``."""

    channels_last: bool = True


class AvgPool1d(_AvgPool):
    """1d average pooling, as ``torch.nn.AvgPool1d(kernel_size, stride, padding, ...)``.

    ``[B, L, C]`` or ``[L, C]`` (channels-last, the default) or ``[B, C, L]`` / ``[C, L]``
    with ``channels_last=False``; the output has the same layout, L pooled as in
    ``jaxpool.avg_pool1d``.

        >>> x = jnp.ones((2, 9, 4))
        >>> jaxpool.linen.AvgPool1d(3, 2, 1).apply({}, x).shape
        (2, 5, 4)
        >>> jaxpool.nnx.AvgPool1d(3, 2, 1)(x).shape
        (2, 5, 4)
    """

    function = staticmethod(jaxpool.avg_pool1d)


class AvgPool2d(_AvgPool):
    """2d average pooling, as ``torch.nn.AvgPool2d(kernel_size, stride, padding, ...)``.

    ``[B, H, W, C]`` or ``[H, W, C]`` (channels-last, the default) or ``[B, C, H, W]`` /
    ``[C, H, W]`` with ``channels_last=False``; the output has the same layout, H and W
    pooled as in ``jaxpool.avg_pool2d``.

        >>> x = jnp.ones((2, 8, 8, 3))
        >>> jaxpool.linen.AvgPool2d(2).apply({}, x).shape
        (2, 4, 4, 3)
        >>> jaxpool.nnx.AvgPool2d(3, stride=2, padding=1, ceil_mode=True)(x).shape
        (2, 5, 5, 3)
    """

    function = staticmethod(jaxpool.avg_pool2d)


class AvgPool3d(_AvgPool):
    """3d average pooling, as ``torch.nn.AvgPool3d(kernel_size, stride, padding, ...)``.

    ``[B, D, H, W, C]`` or ``[D, H, W, C]`` (channels-last, the default) or
    ``[B, C, D, H, W]`` / ``[C, D, H, W]`` with ``channels_last=False``; the output has the
    same layout, D, H and W pooled as in ``jaxpool.avg_pool3d``.

        >>> x = jnp.ones((1, 4, 6, 6, 2))
        >>> jaxpool.linen.AvgPool3d((2, 3, 3)).apply({}, x).shape
        (1, 2, 2, 2, 2)
        >>> jaxpool.nnx.AvgPool3d(2, channels_last=False)(x).shape
        (1, 4, 3, 3, 1)
    """

    function = staticmethod(jaxpool.avg_pool3d)


class AdaptiveAvgPool1d(_AdaptiveAvgPool):
    """1d adaptive average pooling, as ``torch.nn.AdaptiveAvgPool1d(output_size)``.

    ``[B, L, C]`` or ``[L, C]`` (channels-last, the default) or ``[B, C, L]`` / ``[C, L]``
    with ``channels_last=False`` -> L = ``output_size``, windows as in
    ``jaxpool.adaptive_avg_pool1d``.

        >>> x = jnp.ones((2, 15, 4))
        >>> jaxpool.linen.AdaptiveAvgPool1d(4).apply({}, x).shape
        (2, 4, 4)
        >>> jaxpool.nnx.AdaptiveAvgPool1d(6, channels_last=False)(x).shape
        (2, 15, 6)
    """

    function = staticmethod(jaxpool.adaptive_avg_pool1d)


class AdaptiveAvgPool2d(_AdaptiveAvgPool):
    """2d adaptive average pooling, as ``torch.nn.AdaptiveAvgPool2d(output_size)``.

    ``[B, H, W, C]`` or ``[H, W, C]`` (channels-last, the default) or ``[B, C, H, W]`` /
    ``[C, H, W]`` with ``channels_last=False`` -> H, W = ``output_size`` (``None`` keeps an
    extent), ragged windows as in ``jaxpool.adaptive_avg_pool2d``.

        >>> x = jnp.ones((2, 15, 15, 8))
        >>> jaxpool.linen.AdaptiveAvgPool2d(4).apply({}, x).shape
        (2, 4, 4, 8)
        >>> jaxpool.nnx.AdaptiveAvgPool2d((1, None))(x).shape
        (2, 1, 15, 8)
    """

    function = staticmethod(jaxpool.adaptive_avg_pool2d)


class AdaptiveAvgPool3d(_AdaptiveAvgPool):
    """3d adaptive average pooling, as ``torch.nn.AdaptiveAvgPool3d(output_size)``.

    ``[B, D, H, W, C]`` or ``[D, H, W, C]`` (channels-last, the default) or
    ``[B, C, D, H, W]`` / ``[C, D, H, W]`` with ``channels_last=False`` -> D, H, W =
    ``output_size``, windows as in ``jaxpool.adaptive_avg_pool3d``.

        >>> x = jnp.ones((1, 4, 7, 7, 2))
        >>> jaxpool.linen.AdaptiveAvgPool3d((1, 3, 3)).apply({}, x).shape
        (1, 1, 3, 3, 2)
        >>> jaxpool.nnx.AdaptiveAvgPool3d(1)(x).shape
        (1, 1, 1, 1, 2)
    """

    function = staticmethod(jaxpool.adaptive_avg_pool3d)


class MaxPool1d(_MaxPool):
    """1d max pooling, as ``torch.nn.MaxPool1d(kernel_size, stride, padding, dilation,
    return_indices, ceil_mode)``.

    ``[B, L, C]`` or ``[L, C]`` (channels-last, the default) or ``[B, C, L]`` / ``[C, L]``
    with ``channels_last=False``; the output has the same layout, L pooled as in
    ``jaxpool.max_pool1d``. With ``return_indices=True``, ``(values, indices)``: torch's
    index of each selected element along L.

        >>> x = jnp.ones((2, 9, 4))
        >>> jaxpool.linen.MaxPool1d(3, 2, 1).apply({}, x).shape
        (2, 5, 4)
        >>> jaxpool.nnx.MaxPool1d(2, dilation=2)(x).shape
        (2, 4, 4)
    """

    function = staticmethod(jaxpool.max_pool1d)


class MaxPool2d(_MaxPool):
    """2d max pooling, as ``torch.nn.MaxPool2d(kernel_size, stride, padding, dilation,
    return_indices, ceil_mode)``.

    ``[B, H, W, C]`` or ``[H, W, C]`` (channels-last, the default) or ``[B, C, H, W]`` /
    ``[C, H, W]`` with ``channels_last=False``; the output has the same layout, H and W
    pooled as in ``jaxpool.max_pool2d``. With ``return_indices=True``, ``(values, indices)``:
    torch's flat index ``h * W + w`` of each selected element in its ``[H, W]`` plane.

        >>> x = jnp.ones((2, 32, 32, 8))
        >>> jaxpool.linen.MaxPool2d(3, 2, 1).apply({}, x).shape  # the ResNet stem
        (2, 16, 16, 8)
        >>> values, indices = jaxpool.nnx.MaxPool2d(3, 2, ceil_mode=True,
        ...                                         return_indices=True)(x)
        >>> values.shape, indices.shape
        ((2, 16, 16, 8), (2, 16, 16, 8))
    """

    function = staticmethod(jaxpool.max_pool2d)


class MaxPool3d(_MaxPool):
    """3d max pooling, as ``torch.nn.MaxPool3d(kernel_size, stride, padding, dilation,
    return_indices, ceil_mode)``.

    ``[B, D, H, W, C]`` or ``[D, H, W, C]`` (channels-last, the default) or
    ``[B, C, D, H, W]`` / ``[C, D, H, W]`` with ``channels_last=False``; the output has the
    same layout, D, H and W pooled as in ``jaxpool.max_pool3d``. With
    ``return_indices=True``, ``(values, indices)``: torch's flat index ``(d * H + h) * W + w``
    of each selected element in its ``[D, H, W]`` volume.

        >>> x = jnp.ones((1, 4, 8, 8, 2))
        >>> jaxpool.linen.MaxPool3d((1, 3, 3), (1, 2, 2), (0, 1, 1)).apply({}, x).shape
        (1, 4, 4, 4, 2)
        >>> jaxpool.nnx.MaxPool3d(2)(x).shape
        (1, 2, 4, 4, 2)
    """

    function = staticmethod(jaxpool.max_pool3d)


class AdaptiveMaxPool1d(_AdaptiveMaxPool):
    """1d adaptive max pooling, as ``torch.nn.AdaptiveMaxPool1d(output_size,
    return_indices)``.

    ``[B, L, C]`` or ``[L, C]`` (channels-last, the default) or ``[B, C, L]`` / ``[C, L]``
    with ``channels_last=False`` -> L = ``output_size``, windows as in
    ``jaxpool.adaptive_max_pool1d``. With ``return_indices=True``, ``(values, indices)``.

        >>> x = jnp.ones((2, 15, 4))
        >>> jaxpool.linen.AdaptiveMaxPool1d(4).apply({}, x).shape
        (2, 4, 4)
        >>> jaxpool.nnx.AdaptiveMaxPool1d(1)(x).shape
        (2, 1, 4)
    """

    function = staticmethod(jaxpool.adaptive_max_pool1d)


class AdaptiveMaxPool2d(_AdaptiveMaxPool):
    """2d adaptive max pooling, as ``torch.nn.AdaptiveMaxPool2d(output_size,
    return_indices)``.

    ``[B, H, W, C]`` or ``[H, W, C]`` (channels-last, the default) or ``[B, C, H, W]`` /
    ``[C, H, W]`` with ``channels_last=False`` -> H, W = ``output_size`` (``None`` keeps an
    extent), windows as in ``jaxpool.adaptive_max_pool2d``. With ``return_indices=True``,
    ``(values, indices)``: flat ``h * W + w`` indices, as torch's.

        >>> x = jnp.ones((2, 15, 15, 8))
        >>> jaxpool.linen.AdaptiveMaxPool2d(1).apply({}, x).shape  # attention pooling
        (2, 1, 1, 8)
        >>> jaxpool.nnx.AdaptiveMaxPool2d((4, None))(x).shape
        (2, 4, 15, 8)
    """

    function = staticmethod(jaxpool.adaptive_max_pool2d)


class AdaptiveMaxPool3d(_AdaptiveMaxPool):
    """3d adaptive max pooling, as ``torch.nn.AdaptiveMaxPool3d(output_size,
    return_indices)``.

    ``[B, D, H, W, C]`` or ``[D, H, W, C]`` (channels-last, the default) or
    ``[B, C, D, H, W]`` / ``[C, D, H, W]`` with ``channels_last=False`` -> D, H, W =
    ``output_size``, windows as in ``jaxpool.adaptive_max_pool3d``. With
    ``return_indices=True``, ``(values, indices)``: flat indices in each volume, as torch's.

        >>> x = jnp.ones((1, 4, 7, 7, 2))
        >>> pool = jaxpool.nnx.AdaptiveMaxPool3d((2, 3, 3), return_indices=True)
        >>> values, indices = pool(x)
        >>> values.shape, indices.shape == values.shape
        ((1, 2, 3, 3, 2), True)
    """

    function = staticmethod(jaxpool.adaptive_max_pool3d)


class LPPool1d(_LPPool):
    """1d power-average pooling, as ``torch.nn.LPPool1d(norm_type, kernel_size, stride,
    ceil_mode)``: ``(sum of x ** norm_type over each window) ** (1 / norm_type)``.

    ``[B, L, C]`` or ``[L, C]`` (channels-last, the default) or ``[B, C, L]`` / ``[C, L]``
    with ``channels_last=False``; the output has the same layout, L pooled as in
    ``jaxpool.lp_pool1d`` (no padding).

        >>> x = jnp.ones((2, 9, 4))
        >>> jaxpool.linen.LPPool1d(2, 3).apply({}, x).shape
        (2, 3, 4)
        >>> jaxpool.nnx.LPPool1d(1.5, 3, stride=2)(x).shape
        (2, 4, 4)
    """

    function = staticmethod(jaxpool.lp_pool1d)


class LPPool2d(_LPPool):
    """2d power-average pooling, as ``torch.nn.LPPool2d(norm_type, kernel_size, stride,
    ceil_mode)``: ``(sum of x ** norm_type over each window) ** (1 / norm_type)``.

    ``[B, H, W, C]`` or ``[H, W, C]`` (channels-last, the default) or ``[B, C, H, W]`` /
    ``[C, H, W]`` with ``channels_last=False``; the output has the same layout, H and W
    pooled as in ``jaxpool.lp_pool2d`` (no padding).

        >>> x = jnp.ones((2, 8, 8, 3))
        >>> jaxpool.linen.LPPool2d(2, 2).apply({}, x).shape
        (2, 4, 4, 3)
        >>> jaxpool.nnx.LPPool2d(3, (3, 2), ceil_mode=True)(x).shape
        (2, 3, 4, 3)
    """

    function = staticmethod(jaxpool.lp_pool2d)


class LPPool3d(_LPPool):
    """3d power-average pooling, as ``torch.nn.LPPool3d(norm_type, kernel_size, stride,
    ceil_mode)``: ``(sum of x ** norm_type over each window) ** (1 / norm_type)``.

    ``[B, D, H, W, C]`` or ``[D, H, W, C]`` (channels-last, the default) or
    ``[B, C, D, H, W]`` / ``[C, D, H, W]`` with ``channels_last=False``; the output has the
    same layout, D, H and W pooled as in ``jaxpool.lp_pool3d`` (no padding).

        >>> x = jnp.ones((1, 4, 6, 6, 2))
        >>> jaxpool.linen.LPPool3d(2, 2).apply({}, x).shape
        (1, 2, 3, 3, 2)
        >>> jaxpool.nnx.LPPool3d(2, (1, 3, 3))(x).shape
        (1, 4, 2, 2, 2)
    """

    function = staticmethod(jaxpool.lp_pool3d)


class GlobalAvgPool(_GlobalPool):
    """Mean over the spatial axes: ``[B, H, W, C]`` (channels-last, the default) or
    ``[B, C, H, W]`` (``channels_last=False``) -> ``[B, C]``, as ``jaxpool.global_avg_pool``
    (torch: ``AdaptiveAvgPool2d(1)`` then ``flatten(1)``).

        >>> x = jnp.ones((2, 7, 7, 32))
        >>> jaxpool.linen.GlobalAvgPool().apply({}, x).shape
        (2, 32)
        >>> jaxpool.nnx.GlobalAvgPool(channels_last=False)(x).shape
        (2, 7)
    """

    function = staticmethod(jaxpool.global_avg_pool)


class GlobalMaxPool(_GlobalPool):
    """Maximum over the spatial axes, as ``jaxpool.global_max_pool`` (torch writes
    ``AdaptiveMaxPool2d(1)`` then ``flatten(1)``): ``[B, H, W, C]`` (channels-last, the
    default) or ``[B, C, H, W]`` -> ``[B, C]``.

        >>> x = jnp.arange(8.0).reshape(1, 2, 2, 2)
        >>> jaxpool.nnx.GlobalMaxPool()(x)  # the last axis is C
        Array([[6., 7.]], dtype=float32)
        >>> jaxpool.linen.GlobalMaxPool(channels_last=False).apply({}, x)  # axis 1 is C
        Array([[3., 7.]], dtype=float32)
    """

    function = staticmethod(jaxpool.global_max_pool)
