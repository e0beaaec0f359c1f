"""One description of each pooling module, which ``jaxpool.linen`` and ``jaxpool.nnx`` share.

A description is a dataclass: the module's fields (torch.nn's arguments in torch.nn's order,
typed, with torch's defaults, then ``channels_last`` where the op has one), its docstring,
and its call (the function of the same name, each field passed to it by name).
``jaxpool.linen.MaxPool2d`` is ``class MaxPool2d(<linen base>, MaxPool2d)``,
``jaxpool.nnx.MaxPool2d`` the same on ``nnx.Module``: the framework adds its own machinery
and nothing else.

No Flax here, so that the Flax modules' import can say how to install it.
"""

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, ClassVar, cast

from jax.typing import ArrayLike

import jaxpool
from jaxpool.pooling.functions import OutputSize, Size


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
        # The fields are the function's arguments after x, under the same names, but for
        # axis_names (per-device code inside shard_map calls the functions themselves).
        names = [n for n in list(inspect.signature(self.function).parameters)[1:]
                 if n != "axis_names"]
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


# --- fractional max pooling ----------------------------------------------------------------

from jaxpool.fractional.functions import Ratio  # noqa: E402

RNG_STREAM = "fractional"
"""The random stream the fractional max pools draw their samples from, by default:
``jaxpool.linen``'s rng stream (``apply(..., rngs={"fractional": key})``), the stream of the
``nnx.Rngs`` that ``jaxpool.nnx``'s modules are given (``nnx.Rngs(fractional=0)``; an
``Rngs`` without it gives its ``default`` stream). Each module's ``rng_collection`` names
another, as ``flax``'s ``Dropout`` does."""


@dataclasses.dataclass(eq=False, repr=False)
class FractionalMaxPool(Pool):
    """What the fractional max pooling descriptions share: torch.nn.FractionalMaxPool's
    fields (its ``_random_samples`` is the call's ``samples``), and a call that takes the
    samples, or the key to draw them from."""

    kernel_size: Size
    output_size: Size | None = None
    output_ratio: Ratio | None = None
    return_indices: bool = False
    channels_last: bool = True

    def __call__(self, x: ArrayLike, samples: ArrayLike | None = None, *,
                 key: ArrayLike | None = None) -> Any:
        """Pools ``x`` over the windows that ``samples`` place (``[N, C, d]`` in ``[0, 1)``
        in ``x``'s dtype, N = 1 for one unbatched example), or samples drawn from ``key``
        (exactly one of the two); layout and result as in the class docstring."""
        return self.function(x, self.kernel_size, self.output_size, self.output_ratio,
                             self.return_indices, samples, key=key,
                             channels_last=self.channels_last)


class FractionalMaxPool2d(FractionalMaxPool):
    """2d fractional max pooling, as ``torch.nn.FractionalMaxPool2d(kernel_size, output_size,
    output_ratio, return_indices)``: windows of ``kernel_size`` placed by one random sample
    per (batch, channel) plane and axis, as ``jaxpool.fractional_max_pool2d``.

    ``[B, H, W, C]`` or ``[H, W, C]`` (channels-last, the default) or ``[B, C, H, W]`` /
    ``[C, H, W]`` with ``channels_last=False`` -> H, W = ``output_size`` (or ``int(extent *
    output_ratio)``). With ``return_indices=True``, ``(values, indices)``: torch's flat
    index ``h * W + w`` of each maximum in its plane.

    The samples are drawn afresh on every call, as torch's module draws them: in
    ``jaxpool.linen`` from the ``"fractional"`` rng stream (``apply(..., rngs={"fractional":
    key})``), in ``jaxpool.nnx`` from the ``rngs`` given at construction (or to the call),
    in ``jaxpool.equinox`` from the call's ``key``; ``rng_collection`` names another
    stream (linen and nnx). A call may give them instead, ``pool(x, samples)``: ``[B, C,
    2]`` (``[1, C, 2]`` for one example) in ``[0, 1)`` in ``x``'s dtype, ``(u_W, u_H)``
    as torch's ``_random_samples``.

        >>> x = jnp.arange(2 * 9 * 9 * 3.0).reshape(2, 9, 9, 3)
        >>> pool = jaxpool.linen.FractionalMaxPool2d(2, output_ratio=0.5)
        >>> pool.apply({}, x, rngs={"fractional": jax.random.key(0)}).shape
        (2, 4, 4, 3)
        >>> from flax import nnx
        >>> pool = jaxpool.nnx.FractionalMaxPool2d(3, 5, rngs=nnx.Rngs(fractional=0))
        >>> pool(x).shape
        (2, 5, 5, 3)
        >>> pool(x, jnp.full((2, 3, 2), 0.5)).shape  # the samples given, not drawn
        (2, 5, 5, 3)
    """

    function = staticmethod(jaxpool.fractional_max_pool2d)


class FractionalMaxPool3d(FractionalMaxPool):
    """3d fractional max pooling, as ``torch.nn.FractionalMaxPool3d(kernel_size, output_size,
    output_ratio, return_indices)``: windows of ``kernel_size`` placed by one random sample
    per (batch, channel) volume and axis, as ``jaxpool.fractional_max_pool3d``.

    ``[B, D, H, W, C]`` or ``[D, H, W, C]`` (channels-last, the default) or
    ``[B, C, D, H, W]`` / ``[C, D, H, W]`` with ``channels_last=False`` -> D, H, W =
    ``output_size`` (or ``int(extent * output_ratio)``). With ``return_indices=True``,
    ``(values, indices)``: torch's flat index ``(d * H + h) * W + w`` of each maximum.

    The samples are drawn afresh on every call, as torch's module draws them: in
    ``jaxpool.linen`` from the ``"fractional"`` rng stream (``apply(..., rngs={"fractional":
    key})``), in ``jaxpool.nnx`` from the ``rngs`` given at construction (or to the call),
    in ``jaxpool.equinox`` from the call's ``key``; ``rng_collection`` names another
    stream (linen and nnx). A call may give them instead, ``pool(x, samples)``: ``[B, C,
    3]`` (``[1, C, 3]`` for one example) in ``[0, 1)`` in ``x``'s dtype, ``(u_D, u_H,
    u_W)`` as torch's ``_random_samples``.

        >>> x = jnp.ones((1, 8, 8, 8, 2))
        >>> pool = jaxpool.linen.FractionalMaxPool3d(2, output_size=(3, 4, 5))
        >>> pool.apply({}, x, rngs={"fractional": jax.random.key(0)}).shape
        (1, 3, 4, 5, 2)
        >>> from flax import nnx
        >>> pool = jaxpool.nnx.FractionalMaxPool3d(2, output_ratio=0.5, return_indices=True,
        ...                                        rngs=nnx.Rngs(0))
        >>> values, indices = pool(x)
        >>> values.shape, indices.shape == values.shape
        ((1, 4, 4, 4, 2), True)
    """

    function = staticmethod(jaxpool.fractional_max_pool3d)


# --- unpooling and padding -----------------------------------------------------------------

from jaxpool.core import checks  # noqa: E402
from jaxpool.padding.functions import PadMode  # noqa: E402


class Unpool(Pool):
    """What the unpooling descriptions share: the call takes the max pool's indices, and
    ``output_size`` as torch.nn.MaxUnpool's forward does."""

    kernel_size: Size
    stride: Size | None
    padding: Size
    channels_last: bool

    def __call__(self, x: ArrayLike, indices: ArrayLike,  # type: ignore[override]
                 output_size: Any = None) -> Any:
        """Unpools ``x`` with the ``indices`` of the matching max pool (layout and result as
        in the class docstring)."""
        return self.function(x, indices, self.kernel_size, self.stride, self.padding,
                             output_size, channels_last=self.channels_last)


class Pad(Pool):
    """What the padding descriptions share: torch.nn's ``padding`` (an int for every side,
    or ``(left, right)``, ``(left, right, top, bottom)``, ``(left, right, top, bottom,
    front, back)``: the last spatial axis first, as ``F.pad``), on the spatial axes of the
    layout ``channels_last`` names."""

    mode: ClassVar[PadMode]
    ndim: ClassVar[int]
    function = staticmethod(jaxpool.pad)
    padding: Size
    channels_last: bool

    def __call__(self, x: ArrayLike) -> Any:
        """Pads ``x`` (layout and result as in the class docstring)."""
        pairs = checks.int_tuple("padding", self.padding, 2 * self.ndim,
                                  minimum=-checks.INT32_MAX, repeat_single=False)
        value = getattr(self, "value", None) if self.mode == "constant" else None
        return jaxpool.pad(x, pairs, self.mode, value, channels_last=self.channels_last)


@dataclasses.dataclass(eq=False, repr=False)
class _MaxUnpool(Unpool):
    """Max unpooling: torch.nn.MaxUnpool's fields (see ``jaxpool.max_unpool2d``)."""

    kernel_size: Size
    stride: Size | None = None  # None (or 0, or empty): kernel_size
    padding: Size = 0
    channels_last: bool = True


@dataclasses.dataclass(eq=False, repr=False)
class _Pad(Pad):
    """Padding by one of F.pad's copying modes: torch.nn's ``padding``."""

    padding: Size
    channels_last: bool = True


@dataclasses.dataclass(eq=False, repr=False)
class _ConstantPad(Pad):
    """Constant padding: torch.nn.ConstantPad's ``padding`` and ``value``."""

    mode = "constant"
    padding: Size
    value: float
    channels_last: bool = True


@dataclasses.dataclass(eq=False, repr=False)
class _ZeroPad(Pad):
    """Zero padding: torch.nn.ZeroPad's ``padding``."""

    mode = "constant"
    padding: Size
    channels_last: bool = True
    value: ClassVar[float] = 0.0


class MaxUnpool1d(_MaxUnpool):
    """1d max unpooling, as ``torch.nn.MaxUnpool1d(kernel_size, stride, padding)``; called
    as ``unpool(x, indices, output_size=None)`` with the matching max pool's indices.

    ``[B, L, C]`` or ``[L, C]`` (channels-last, the default) or ``[B, C, L]`` / ``[C, L]``
    with ``channels_last=False``; the output has the same layout, L unpooled as in
    ``jaxpool.max_unpool1d`` (each index inside its own window).

        >>> x = jnp.arange(16.0).reshape(1, 8, 2)
        >>> values, indices = jaxpool.linen.MaxPool1d(2, return_indices=True).apply({}, x)
        >>> jaxpool.linen.MaxUnpool1d(2).apply({}, values, indices).shape
        (1, 8, 2)
        >>> jaxpool.nnx.MaxUnpool1d(2)(values, indices, output_size=(9,)).shape
        (1, 9, 2)
    """

    function = staticmethod(jaxpool.max_unpool1d)


class MaxUnpool2d(_MaxUnpool):
    """2d max unpooling, as ``torch.nn.MaxUnpool2d(kernel_size, stride, padding)``; called
    as ``unpool(x, indices, output_size=None)`` with the matching max pool's indices
    (SegNet's decoder).

    ``[B, H, W, C]`` or ``[H, W, C]`` (channels-last, the default) or ``[B, C, H, W]`` /
    ``[C, H, W]`` with ``channels_last=False``; the output has the same layout, H and W
    unpooled as in ``jaxpool.max_unpool2d`` (each index inside its own window).

        >>> x = jnp.ones((2, 8, 8, 3))
        >>> values, indices = jaxpool.nnx.MaxPool2d(2, return_indices=True)(x)
        >>> jaxpool.linen.MaxUnpool2d(2).apply({}, values, indices).shape
        (2, 8, 8, 3)
        >>> jaxpool.nnx.MaxUnpool2d(2)(values, indices).shape
        (2, 8, 8, 3)
    """

    function = staticmethod(jaxpool.max_unpool2d)


class MaxUnpool3d(_MaxUnpool):
    """3d max unpooling, as ``torch.nn.MaxUnpool3d(kernel_size, stride, padding)``; called
    as ``unpool(x, indices, output_size=None)`` with the matching max pool's indices.

    ``[B, D, H, W, C]`` or ``[D, H, W, C]`` (channels-last, the default) or
    ``[B, C, D, H, W]`` / ``[C, D, H, W]`` with ``channels_last=False``; the output has the
    same layout, D, H and W unpooled as in ``jaxpool.max_unpool3d``.

        >>> x = jnp.ones((1, 4, 4, 4, 2))
        >>> values, indices = jaxpool.nnx.MaxPool3d(2, return_indices=True)(x)
        >>> jaxpool.linen.MaxUnpool3d(2).apply({}, values, indices).shape
        (1, 4, 4, 4, 2)
        >>> jaxpool.nnx.MaxUnpool3d(2)(values, indices).shape
        (1, 4, 4, 4, 2)
    """

    function = staticmethod(jaxpool.max_unpool3d)


class ReflectionPad1d(_Pad):
    """1d reflection padding, as ``torch.nn.ReflectionPad1d(padding)``: ``padding`` an int
    or ``(left, right)``, each smaller than L.

    ``[B, L, C]`` or ``[L, C]`` (channels-last, the default) or ``[B, C, L]`` / ``[C, L]``
    with ``channels_last=False``: L padded as ``jaxpool.pad(x, padding, "reflect")``.

        >>> x = jnp.arange(4.0).reshape(1, 4, 1)
        >>> jaxpool.linen.ReflectionPad1d((2, 1)).apply({}, x)[0, :, 0]
        Array([2., 1., 0., 1., 2., 3., 2.], dtype=float32)
        >>> jaxpool.nnx.ReflectionPad1d(3)(x).shape
        (1, 10, 1)
    """

    mode, ndim = "reflect", 1


class ReflectionPad2d(_Pad):
    """2d reflection padding, as ``torch.nn.ReflectionPad2d(padding)`` (CycleGAN's
    generators): ``padding`` an int or ``(left, right, top, bottom)``, each smaller than its
    axis.

    ``[B, H, W, C]`` or ``[H, W, C]`` (channels-last, the default) or ``[B, C, H, W]`` /
    ``[C, H, W]`` with ``channels_last=False``: W padded by the first pair, H by the second.

        >>> x = jnp.ones((2, 8, 8, 3))
        >>> jaxpool.linen.ReflectionPad2d(3).apply({}, x).shape
        (2, 14, 14, 3)
        >>> jaxpool.nnx.ReflectionPad2d((1, 1, 2, 0))(x).shape
        (2, 10, 10, 3)
    """

    mode, ndim = "reflect", 2


class ReflectionPad3d(_Pad):
    """3d reflection padding, as ``torch.nn.ReflectionPad3d(padding)``: ``padding`` an int or
    ``(left, right, top, bottom, front, back)``.

    ``[B, D, H, W, C]`` or ``[D, H, W, C]`` (channels-last, the default) or
    ``[B, C, D, H, W]`` / ``[C, D, H, W]`` with ``channels_last=False``.

        >>> x = jnp.ones((1, 4, 4, 4, 2))
        >>> jaxpool.linen.ReflectionPad3d(1).apply({}, x).shape
        (1, 6, 6, 6, 2)
        >>> jaxpool.nnx.ReflectionPad3d((1, 0, 0, 0, 2, 2))(x).shape
        (1, 8, 4, 5, 2)
    """

    mode, ndim = "reflect", 3


class ReplicationPad1d(_Pad):
    """1d replication padding, as ``torch.nn.ReplicationPad1d(padding)``: the edge element
    repeated; ``padding`` an int or ``(left, right)`` (negative: crop).

    ``[B, L, C]`` or ``[L, C]`` (channels-last, the default) or ``[B, C, L]`` / ``[C, L]``
    with ``channels_last=False``.

        >>> x = jnp.arange(3.0).reshape(1, 3, 1)
        >>> jaxpool.linen.ReplicationPad1d((2, 1)).apply({}, x)[0, :, 0]
        Array([0., 0., 0., 1., 2., 2.], dtype=float32)
        >>> jaxpool.nnx.ReplicationPad1d(1)(x).shape
        (1, 5, 1)
    """

    mode, ndim = "replicate", 1


class ReplicationPad2d(_Pad):
    """2d replication padding, as ``torch.nn.ReplicationPad2d(padding)``: ``padding`` an
    int or ``(left, right, top, bottom)``.

    ``[B, H, W, C]`` or ``[H, W, C]`` (channels-last, the default) or ``[B, C, H, W]`` /
    ``[C, H, W]`` with ``channels_last=False``.

        >>> x = jnp.ones((2, 8, 8, 3))
        >>> jaxpool.linen.ReplicationPad2d(2).apply({}, x).shape
        (2, 12, 12, 3)
        >>> jaxpool.nnx.ReplicationPad2d((0, 1, 0, 1), channels_last=False)(x).shape
        (2, 8, 9, 4)
    """

    mode, ndim = "replicate", 2


class ReplicationPad3d(_Pad):
    """3d replication padding, as ``torch.nn.ReplicationPad3d(padding)``: ``padding`` an
    int or ``(left, right, top, bottom, front, back)``.

    ``[B, D, H, W, C]`` or ``[D, H, W, C]`` (channels-last, the default) or
    ``[B, C, D, H, W]`` / ``[C, D, H, W]`` with ``channels_last=False``.

        >>> x = jnp.ones((1, 4, 4, 4, 2))
        >>> jaxpool.linen.ReplicationPad3d(1).apply({}, x).shape
        (1, 6, 6, 6, 2)
        >>> jaxpool.nnx.ReplicationPad3d(2)(x).shape
        (1, 8, 8, 8, 2)
    """

    mode, ndim = "replicate", 3


class CircularPad1d(_Pad):
    """1d circular padding, as ``torch.nn.CircularPad1d(padding)``: wrapped around;
    ``padding`` an int or ``(left, right)``, each at most L.

    ``[B, L, C]`` or ``[L, C]`` (channels-last, the default) or ``[B, C, L]`` / ``[C, L]``
    with ``channels_last=False``.

        >>> x = jnp.arange(3.0).reshape(1, 3, 1)
        >>> jaxpool.linen.CircularPad1d((2, 1)).apply({}, x)[0, :, 0]
        Array([1., 2., 0., 1., 2., 0.], dtype=float32)
        >>> jaxpool.nnx.CircularPad1d(3)(x).shape
        (1, 9, 1)
    """

    mode, ndim = "circular", 1


class CircularPad2d(_Pad):
    """2d circular padding, as ``torch.nn.CircularPad2d(padding)``: ``padding`` an int or
    ``(left, right, top, bottom)``.

    ``[B, H, W, C]`` or ``[H, W, C]`` (channels-last, the default) or ``[B, C, H, W]`` /
    ``[C, H, W]`` with ``channels_last=False``.

        >>> x = jnp.ones((2, 8, 8, 3))
        >>> jaxpool.linen.CircularPad2d(1).apply({}, x).shape
        (2, 10, 10, 3)
        >>> jaxpool.nnx.CircularPad2d((1, 2, 0, 0))(x).shape
        (2, 8, 11, 3)
    """

    mode, ndim = "circular", 2


class CircularPad3d(_Pad):
    """3d circular padding, as ``torch.nn.CircularPad3d(padding)``: ``padding`` an int or
    ``(left, right, top, bottom, front, back)``.

    ``[B, D, H, W, C]`` or ``[D, H, W, C]`` (channels-last, the default) or
    ``[B, C, D, H, W]`` / ``[C, D, H, W]`` with ``channels_last=False``.

        >>> x = jnp.ones((1, 4, 4, 4, 2))
        >>> jaxpool.linen.CircularPad3d(1).apply({}, x).shape
        (1, 6, 6, 6, 2)
        >>> jaxpool.nnx.CircularPad3d(2)(x).shape
        (1, 8, 8, 8, 2)
    """

    mode, ndim = "circular", 3


class ZeroPad1d(_ZeroPad):
    """1d zero padding, as ``torch.nn.ZeroPad1d(padding)``: ``padding`` an int or
    ``(left, right)`` (negative: crop).

    ``[B, L, C]`` or ``[L, C]`` (channels-last, the default) or ``[B, C, L]`` / ``[C, L]``
    with ``channels_last=False``.

        >>> x = jnp.ones((2, 5, 3))
        >>> jaxpool.linen.ZeroPad1d(2).apply({}, x).shape
        (2, 9, 3)
        >>> jaxpool.nnx.ZeroPad1d((-1, 1))(x).shape
        (2, 5, 3)
    """

    ndim = 1


class ZeroPad2d(_ZeroPad):
    """2d zero padding, as ``torch.nn.ZeroPad2d(padding)``: ``padding`` an int or
    ``(left, right, top, bottom)`` (negative: crop).

    ``[B, H, W, C]`` or ``[H, W, C]`` (channels-last, the default) or ``[B, C, H, W]`` /
    ``[C, H, W]`` with ``channels_last=False``.

        >>> x = jnp.ones((2, 8, 8, 3))
        >>> jaxpool.linen.ZeroPad2d(1).apply({}, x).shape
        (2, 10, 10, 3)
        >>> jaxpool.nnx.ZeroPad2d((0, 0, -2, 1))(x).shape
        (2, 7, 8, 3)
    """

    ndim = 2


class ZeroPad3d(_ZeroPad):
    """3d zero padding, as ``torch.nn.ZeroPad3d(padding)``: ``padding`` an int or
    ``(left, right, top, bottom, front, back)``.

    ``[B, D, H, W, C]`` or ``[D, H, W, C]`` (channels-last, the default) or
    ``[B, C, D, H, W]`` / ``[C, D, H, W]`` with ``channels_last=False``.

        >>> x = jnp.ones((1, 4, 4, 4, 2))
        >>> jaxpool.linen.ZeroPad3d(1).apply({}, x).shape
        (1, 6, 6, 6, 2)
        >>> jaxpool.nnx.ZeroPad3d((1, 1, 0, 0, 0, 0))(x).shape
        (1, 4, 4, 6, 2)
    """

    ndim = 3


class ConstantPad1d(_ConstantPad):
    """1d constant padding, as ``torch.nn.ConstantPad1d(padding, value)``: ``padding`` an int
    or ``(left, right)`` (negative: crop).

    ``[B, L, C]`` or ``[L, C]`` (channels-last, the default) or ``[B, C, L]`` / ``[C, L]``
    with ``channels_last=False``.

        >>> x = jnp.ones((1, 2, 1))
        >>> jaxpool.linen.ConstantPad1d((1, 2), -1.0).apply({}, x)[0, :, 0]
        Array([-1.,  1.,  1., -1., -1.], dtype=float32)
        >>> jaxpool.nnx.ConstantPad1d(1, 3.5)(x).shape
        (1, 4, 1)
    """

    ndim = 1


class ConstantPad2d(_ConstantPad):
    """2d constant padding, as ``torch.nn.ConstantPad2d(padding, value)``: ``padding`` an
    int or ``(left, right, top, bottom)``.

    ``[B, H, W, C]`` or ``[H, W, C]`` (channels-last, the default) or ``[B, C, H, W]`` /
    ``[C, H, W]`` with ``channels_last=False``.

        >>> x = jnp.ones((2, 8, 8, 3))
        >>> jaxpool.linen.ConstantPad2d(1, 0.5).apply({}, x).shape
        (2, 10, 10, 3)
        >>> jaxpool.nnx.ConstantPad2d((1, 0, 1, 0), -1.0)(x).shape
        (2, 9, 9, 3)
    """

    ndim = 2


class ConstantPad3d(_ConstantPad):
    """3d constant padding, as ``torch.nn.ConstantPad3d(padding, value)``: ``padding`` an
    int or ``(left, right, top, bottom, front, back)``.

    ``[B, D, H, W, C]`` or ``[D, H, W, C]`` (channels-last, the default) or
    ``[B, C, D, H, W]`` / ``[C, D, H, W]`` with ``channels_last=False``.

        >>> x = jnp.ones((1, 4, 4, 4, 2))
        >>> jaxpool.linen.ConstantPad3d(1, 2.0).apply({}, x).shape
        (1, 6, 6, 6, 2)
        >>> jaxpool.nnx.ConstantPad3d(2, 0.0)(x).shape
        (1, 8, 8, 8, 2)
    """

    ndim = 3


# --- resampling ----------------------------------------------------------------------------

from jaxpool.resampling.functions import ScaleArg, SizeArg  # noqa: E402


def _upsample(x: ArrayLike, size: SizeArg = None, scale_factor: ScaleArg = None,
              mode: str = "nearest", align_corners: bool | None = None,
              recompute_scale_factor: bool | None = None, *, channels_last: bool = False) -> Any:
    """torch.nn.Upsample's call: ``interpolate`` without ``antialias``."""
    return jaxpool.interpolate(x, size, scale_factor, mode, align_corners,
                               recompute_scale_factor, channels_last=channels_last)


@dataclasses.dataclass(eq=False, repr=False)
class _Resize(Pool):
    """Resizing by size or scale factor: torch.nn.Upsampling*'s fields."""

    size: SizeArg = None
    scale_factor: ScaleArg = None
    channels_last: bool = True


@dataclasses.dataclass(eq=False, repr=False)
class _Upsample(Pool):
    """torch.nn.Upsample's fields."""

    size: SizeArg = None
    scale_factor: ScaleArg = None
    mode: str = "nearest"
    align_corners: bool | None = None
    recompute_scale_factor: bool | None = None
    channels_last: bool = True


@dataclasses.dataclass(eq=False, repr=False)
class _PixelShuffle(Pool):
    upscale_factor: int
    channels_last: bool = True


@dataclasses.dataclass(eq=False, repr=False)
class _PixelUnshuffle(Pool):
    downscale_factor: int
    channels_last: bool = True


class Upsample(_Upsample):
    """Resize the spatial axes, as ``torch.nn.Upsample(size, scale_factor, mode,
    align_corners, recompute_scale_factor)``: ``jaxpool.interpolate`` in every mode.

    ``[B, *spatial, C]`` (channels-last, the default; 1 to 3 spatial axes) or
    ``[B, C, *spatial]`` with ``channels_last=False``; the output has the same layout.

        >>> x = jnp.ones((2, 8, 8, 3))
        >>> jaxpool.linen.Upsample(scale_factor=2, mode="bilinear").apply({}, x).shape
        (2, 16, 16, 3)
        >>> jaxpool.nnx.Upsample(size=(5, 12))(x).shape
        (2, 5, 12, 3)
    """

    function = staticmethod(_upsample)


class UpsamplingNearest2d(_Resize):
    """Nearest upsampling, as ``torch.nn.UpsamplingNearest2d(size, scale_factor)``
    (``jaxpool.upsample_nearest``).

    ``[B, H, W, C]`` (channels-last, the default) or ``[B, C, H, W]`` with
    ``channels_last=False``; the output has the same layout. Values are copies.

        >>> x = jnp.ones((2, 8, 8, 3))
        >>> jaxpool.linen.UpsamplingNearest2d(scale_factor=2).apply({}, x).shape
        (2, 16, 16, 3)
        >>> jaxpool.nnx.UpsamplingNearest2d(size=12, channels_last=False)(x).shape
        (2, 8, 12, 12)
    """

    function = staticmethod(jaxpool.upsample_nearest)


class UpsamplingBilinear2d(_Resize):
    """Bilinear upsampling with ``align_corners=True``, as
    ``torch.nn.UpsamplingBilinear2d(size, scale_factor)`` (``jaxpool.upsample_bilinear``).

    ``[B, H, W, C]`` (channels-last, the default) or ``[B, C, H, W]`` with
    ``channels_last=False``; the output has the same layout.

        >>> x = jnp.ones((2, 8, 8, 3))
        >>> jaxpool.linen.UpsamplingBilinear2d(scale_factor=2).apply({}, x).shape
        (2, 16, 16, 3)
        >>> jaxpool.nnx.UpsamplingBilinear2d(size=(9, 10))(x).shape
        (2, 9, 10, 3)
    """

    function = staticmethod(jaxpool.upsample_bilinear)


class PixelShuffle(_PixelShuffle):
    """Channels into space, as ``torch.nn.PixelShuffle(upscale_factor)``
    (``jaxpool.pixel_shuffle``).

    ``[*, H, W, C*r*r] -> [*, H*r, W*r, C]`` (channels-last, the default) or
    ``[*, C*r*r, H, W] -> [*, C, H*r, W*r]`` with ``channels_last=False``, torch's channel
    order either way.

        >>> x = jnp.ones((2, 8, 8, 27))
        >>> jaxpool.linen.PixelShuffle(3).apply({}, x).shape
        (2, 24, 24, 3)
        >>> jaxpool.nnx.PixelShuffle(2, channels_last=False)(jnp.ones((2, 12, 5, 5))).shape
        (2, 3, 10, 10)
    """

    function = staticmethod(jaxpool.pixel_shuffle)


class PixelUnshuffle(_PixelUnshuffle):
    """Space into channels, as ``torch.nn.PixelUnshuffle(downscale_factor)``
    (``jaxpool.pixel_unshuffle``), the inverse of ``PixelShuffle``.

    ``[*, H*r, W*r, C] -> [*, H, W, C*r*r]`` (channels-last, the default) or
    ``[*, C, H*r, W*r] -> [*, C*r*r, H, W]`` with ``channels_last=False``.

        >>> x = jnp.ones((2, 24, 24, 3))
        >>> jaxpool.linen.PixelUnshuffle(3).apply({}, x).shape
        (2, 8, 8, 27)
        >>> jaxpool.nnx.PixelUnshuffle(2)(x).shape
        (2, 12, 12, 12)
    """

    function = staticmethod(jaxpool.pixel_unshuffle)


@dataclasses.dataclass(eq=False, repr=False)
class _ChannelShuffle(Pool):
    """torch.nn.ChannelShuffle's field."""

    groups: int
    channels_last: bool = True


class ChannelShuffle(_ChannelShuffle):
    """Interleave the channels of ``groups`` groups, as ``torch.nn.ChannelShuffle(groups)``
    (``jaxpool.channel_shuffle``, ShuffleNet's shuffle).

    ``[B, *spatial, C]`` (channels-last, the default; rank 3 or more) or ``[B, C, *spatial]``
    with ``channels_last=False``; the output has the input's shape, channel
    ``g*(C/groups) + k`` moved to ``k*groups + g``.

        >>> x = jnp.arange(6.0).reshape(1, 1, 6)
        >>> jaxpool.linen.ChannelShuffle(3).apply({}, x)[0, 0]
        Array([0., 2., 4., 1., 3., 5.], dtype=float32)
        >>> jaxpool.nnx.ChannelShuffle(2, channels_last=False)(jnp.ones((2, 4, 5, 5))).shape
        (2, 4, 5, 5)
    """

    function = staticmethod(jaxpool.channel_shuffle)


# --- sliding blocks ------------------------------------------------------------------------

@dataclasses.dataclass(eq=False, repr=False)
class _Unfold(Pool):
    """torch.nn.Unfold's fields; channels-first only, as torch's (no ``channels_last``)."""

    kernel_size: Size
    dilation: Size = 1
    padding: Size = 0
    stride: Size = 1


@dataclasses.dataclass(eq=False, repr=False)
class _Fold(Pool):
    """torch.nn.Fold's fields; channels-first only, as torch's (no ``channels_last``)."""

    output_size: Size
    kernel_size: Size
    dilation: Size = 1
    padding: Size = 0
    stride: Size = 1


class Unfold(_Unfold):
    """Sliding blocks of an image as columns, as ``torch.nn.Unfold(kernel_size, dilation,
    padding, stride)`` (``jaxpool.unfold``, im2col).

    ``[B, C, H, W]`` or ``[C, H, W]`` -> ``[B, C*kh*kw, L]`` (``[C*kh*kw, L]``), ``L`` the
    blocks' count as in ``jaxpool.unfold``; channels-first only, torch's layout.

        >>> x = jnp.ones((2, 3, 8, 8))
        >>> jaxpool.linen.Unfold(3, padding=1, stride=2).apply({}, x).shape
        (2, 27, 16)
        >>> jaxpool.nnx.Unfold((2, 3))(x).shape
        (2, 18, 42)
    """

    function = staticmethod(jaxpool.unfold)


class Fold(_Fold):
    """Columns summed back into an image, as ``torch.nn.Fold(output_size, kernel_size,
    dilation, padding, stride)`` (``jaxpool.fold``, col2im; the adjoint of ``Unfold``).

    ``[B, C*kh*kw, L]`` or ``[C*kh*kw, L]`` -> ``[B, C, *output_size]``
    (``[C, *output_size]``), ``L`` the blocks' count in ``output_size``; channels-first
    only, torch's layout.

        >>> columns = jnp.ones((2, 27, 16))
        >>> jaxpool.linen.Fold((8, 8), 3, padding=1, stride=2).apply({}, columns).shape
        (2, 3, 8, 8)
        >>> jaxpool.nnx.Fold(4, 2, stride=2)(jnp.ones((12, 4))).shape
        (3, 4, 4)
    """

    function = staticmethod(jaxpool.fold)


# --- boxes (torchvision.ops) -------------------------------------------------------------

class _Boxes(Pool):
    """What the RoI descriptions share: the call takes the boxes."""

    def __call__(self, x: ArrayLike, boxes: Any) -> Any:  # type: ignore[override]
        """Pools each of ``boxes`` (``[K, 5]`` rows ``(batch index, x1, y1, x2, y2)``, or a
        list of each image's ``[L_i, 4]``) from ``x`` (layout and result as in the class
        docstring)."""
        names = [n for n in list(inspect.signature(self.function).parameters)[2:]
                 if n != "axis_names"]
        return self.function(x, boxes, **{name: getattr(self, name) for name in names})


@dataclasses.dataclass(eq=False, repr=False)
class _RoIAlign(_Boxes):
    """torchvision.ops.RoIAlign's fields, then the adaptive grid's bound and the layout."""

    output_size: int | tuple[int, int]
    spatial_scale: float
    sampling_ratio: int
    aligned: bool = False
    max_sampling_ratio: int | None = None
    channels_last: bool = True


@dataclasses.dataclass(eq=False, repr=False)
class _PSRoIAlign(_Boxes):
    """torchvision.ops.PSRoIAlign's fields, then the adaptive grid's bound and the layout."""

    output_size: int | tuple[int, int]
    spatial_scale: float
    sampling_ratio: int
    max_sampling_ratio: int | None = None
    channels_last: bool = True


@dataclasses.dataclass(eq=False, repr=False)
class _RoIPool(_Boxes):
    """torchvision.ops.RoIPool's (and PSRoIPool's) fields, then the bins' bound and the
    layout."""

    output_size: int | tuple[int, int]
    spatial_scale: float
    max_bin_size: int | None = None
    channels_last: bool = True


class RoIAlign(_RoIAlign):
    """Mask R-CNN's RoIAlign, as ``torchvision.ops.RoIAlign(output_size, spatial_scale,
    sampling_ratio, aligned)`` (``jaxpool.roi_align``); called on the maps and the boxes.

    ``[N, H, W, C]`` (channels-last, the default) or ``[N, C, H, W]`` with
    ``channels_last=False`` -> ``[K, *output_size, C]`` (``[K, C, *output_size]``);
    ``max_sampling_ratio``: the adaptive grid's bound for traced boxes.

        >>> x, boxes = jnp.ones((2, 32, 32, 8)), jnp.asarray([[0.0, 2.0, 2.0, 20.0, 14.0]])
        >>> jaxpool.linen.RoIAlign(7, 0.5, 2).apply({}, x, boxes).shape
        (1, 7, 7, 8)
        >>> jaxpool.nnx.RoIAlign((7, 7), 0.5, 2, aligned=True)(x, boxes).shape
        (1, 7, 7, 8)
    """

    function = staticmethod(jaxpool.roi_align)


class PSRoIAlign(_PSRoIAlign):
    """R-FCN's position-sensitive RoIAlign, as ``torchvision.ops.PSRoIAlign(output_size,
    spatial_scale, sampling_ratio)`` (``jaxpool.ps_roi_align``).

    ``[N, H, W, C]`` (channels-last, the default) or ``[N, C, H, W]`` with
    ``channels_last=False``, ``C`` a multiple of ``PH * PW`` -> ``[K, PH, PW, C / (PH *
    PW)]`` (``[K, C / (PH * PW), PH, PW]``).

        >>> x, boxes = jnp.ones((2, 32, 32, 18)), jnp.asarray([[0.0, 2.0, 2.0, 20.0, 14.0]])
        >>> jaxpool.linen.PSRoIAlign(3, 0.5, 2).apply({}, x, boxes).shape
        (1, 3, 3, 2)
        >>> jaxpool.nnx.PSRoIAlign(3, 0.5, -1)(x, boxes).shape
        (1, 3, 3, 2)
    """

    function = staticmethod(jaxpool.ps_roi_align)


class RoIPool(_RoIPool):
    """Fast R-CNN's RoIPool, as ``torchvision.ops.RoIPool(output_size, spatial_scale)``
    (``jaxpool.roi_pool``).

    ``[N, H, W, C]`` (channels-last, the default) or ``[N, C, H, W]`` with
    ``channels_last=False`` -> ``[K, *output_size, C]`` (``[K, C, *output_size]``);
    ``max_bin_size``: the bins' bound for traced boxes.

        >>> x, boxes = jnp.ones((2, 32, 32, 8)), jnp.asarray([[0.0, 2.0, 2.0, 20.0, 14.0]])
        >>> jaxpool.linen.RoIPool(7, 0.5).apply({}, x, boxes).shape
        (1, 7, 7, 8)
        >>> jaxpool.nnx.RoIPool((2, 2), 1.0, max_bin_size=10)(x, boxes).shape
        (1, 2, 2, 8)
    """

    function = staticmethod(jaxpool.roi_pool)


class PSRoIPool(_RoIPool):
    """R-FCN's position-sensitive RoIPool, as ``torchvision.ops.PSRoIPool(output_size,
    spatial_scale)`` (``jaxpool.ps_roi_pool``).

    ``[N, H, W, C]`` (channels-last, the default) or ``[N, C, H, W]`` with
    ``channels_last=False``, ``C`` a multiple of ``PH * PW`` -> ``[K, PH, PW, C / (PH *
    PW)]`` (``[K, C / (PH * PW), PH, PW]``).

        >>> x, boxes = jnp.ones((2, 32, 32, 18)), jnp.asarray([[0.0, 2.0, 2.0, 20.0, 14.0]])
        >>> jaxpool.linen.PSRoIPool(3, 0.5).apply({}, x, boxes).shape
        (1, 3, 3, 2)
        >>> jaxpool.nnx.PSRoIPool(3, 1.0)(x, boxes).shape
        (1, 3, 3, 2)
    """

    function = staticmethod(jaxpool.ps_roi_pool)


@dataclasses.dataclass(eq=False, repr=False)
class _MultiScaleRoIAlign(Pool):
    """torchvision.ops.MultiScaleRoIAlign's fields, then the adaptive grid's bound and the
    layout."""

    featmap_names: tuple[str, ...]
    output_size: int | tuple[int, int]
    sampling_ratio: int
    canonical_scale: float = 224
    canonical_level: float = 4
    max_sampling_ratio: int | None = None
    channels_last: bool = True


class MultiScaleRoIAlign(_MultiScaleRoIAlign):
    """Each box pooled from its FPN level, as ``torchvision.ops.MultiScaleRoIAlign(
    featmap_names, output_size, sampling_ratio, canonical_scale=224, canonical_level=4)``
    (``jaxpool.multi_scale_roi_align``); called as torchvision's, on a dict of maps, each
    image's boxes ``[L_i, 4]`` (or ``[K, 5]`` rows) and the images' ``(height, width)``.

    The maps named in ``featmap_names`` (a tuple), in the dict's order, each ``[N, H_l,
    W_l, C]`` (channels-last, the default) or ``[N, C, H_l, W_l]`` with
    ``channels_last=False`` -> ``[K, *output_size, C]`` (``[K, C, *output_size]``).

        >>> maps = {str(i): jnp.ones((1, 64 >> i, 64 >> i, 8)) for i in range(4)}
        >>> boxes = [jnp.asarray([[0.0, 0.0, 100.0, 100.0], [10.0, 10.0, 250.0, 200.0]])]
        >>> pool = jaxpool.linen.MultiScaleRoIAlign(("0", "1", "2", "3"), 7, 2)
        >>> pool.apply({}, maps, boxes, [(256, 256)]).shape
        (2, 7, 7, 8)
        >>> jaxpool.nnx.MultiScaleRoIAlign(("0", "2"), 7, 2)(maps, boxes, [(256, 256)]).shape
        (2, 7, 7, 8)
    """

    function = staticmethod(jaxpool.multi_scale_roi_align)

    def __call__(self, x: Any, boxes: Any,  # type: ignore[override]
                 image_shapes: Any) -> Any:
        """Pools ``boxes`` from the maps of ``x`` (a dict) named in ``featmap_names``;
        ``image_shapes``: each image's ``(height, width)`` before the backbone."""
        features = [v for k, v in x.items() if k in self.featmap_names]
        return self.function(features, boxes, self.output_size, self.sampling_ratio,
                             image_shapes, self.canonical_scale, self.canonical_level,
                             self.max_sampling_ratio, channels_last=self.channels_last)


# --- every description ---------------------------------------------------------------------

DESCRIPTIONS: dict[str, type[Pool]] = {
    name: value for name, value in list(globals().items())
    if isinstance(value, type) and issubclass(value, Pool) and not name.startswith("_")
    and "function" in dir(value) and name not in ("Pool", "Unpool", "Pad")}
"""Every module's description by its class name: ``jaxpool.linen``, ``jaxpool.nnx`` and
``jaxpool.equinox`` each have a class of that name built on it."""


# --- modules with weights ------------------------------------------------------------------
# Not descriptions of a function's arguments (not in DESCRIPTIONS): each framework builds
# the projections in its own way, under torch's names, and hands them to the call below.

import math  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

Initializer = Callable[[Any, tuple, Any], Any]
"""``init(key, shape, dtype) -> array``, as Flax's and ``jax.nn.initializers``'."""


def deformable_offset_bias(num_heads: int, num_levels: int, num_points: int) -> np.ndarray:
    """``sampling_offsets``' initial bias, as Deformable DETR sets it (Hugging Face's and
    mmcv's ``init_weights``): head ``h`` looks along the angle ``2 pi h / heads``, its
    direction scaled so that its larger coordinate is 1, and point ``p`` lies ``p + 1``
    times that far, on every level. ``[heads * levels * points * 2]`` (x, y innermost),
    computed in float64: a float32 parameter holds it rounded once, where torch's float32
    arithmetic rounds each step (they differ by float32 rounding)."""
    thetas = np.arange(num_heads, dtype=np.float64) * (2.0 * math.pi / num_heads)
    grid = np.stack([np.cos(thetas), np.sin(thetas)], -1)
    grid = grid / np.abs(grid).max(-1, keepdims=True)
    grid = np.broadcast_to(grid[:, None, None, :], (num_heads, num_levels, num_points, 2))
    return (grid * np.arange(1, num_points + 1)[None, None, :, None]).reshape(-1)


def _constant(values: np.ndarray) -> Initializer:
    def init(key: Any, shape: tuple, dtype: Any = jnp.float32) -> Any:
        del key
        return jnp.asarray(values.reshape(shape), dtype)
    return init


@dataclasses.dataclass(eq=False, repr=False)
class MultiScaleDeformableAttention:
    """Multi-scale deformable attention, the module: Hugging Face's
    ``DeformableDetrMultiscaleDeformableAttention`` and ``RTDetrMultiscaleDeformableAttention``
    (mmcv's ``MultiScaleDeformableAttention`` without its dropout and residual), around
    :func:`jaxpool.multi_scale_deformable_attention`.

    Its parameters are torch's, under torch's names, so that ``parity.load_torch_weights``
    pairs them by name: ``sampling_offsets`` (a linear map ``embed_dim -> heads * levels *
    points * 2``), ``attention_weights`` (``-> heads * levels * points``), ``value_proj``
    and ``output_proj`` (``embed_dim -> embed_dim``). They start as torch's do: zero weights
    for the first two, the offsets' bias fanning each head's points out along its own
    direction (``deformable_offset_bias``), the weights' bias zero (equal weights), and
    Xavier-uniform weights with zero biases for the two projections.

    The call ``(hidden_states, reference_points, spatial_shapes, value=None,
    attention_mask=None, position_embeddings=None)``:

    - ``hidden_states [B, Q, embed_dim]``, the queries, plus ``position_embeddings`` if
      given, project to each head's sampling offsets and weights (a softmax over its
      ``levels * points`` samples);
    - ``value [B, S, embed_dim]``, every level's ``H_l x W_l`` positions row-major, the
      levels end to end, projects to what is read; by default ``hidden_states`` without
      the position embeddings (the encoder's self-attention); where ``attention_mask
      [B, S]`` is False (padding) it reads zero;
    - ``reference_points [B, Q, levels, 2]``, ``(x, y)`` in ``[0, 1]``: a query reads
      level ``l`` around it, offset by ``offset / (W_l, H_l)``; ``[B, Q, levels, 4]``,
      boxes ``(cx, cy, w, h)``: around the centre, offset by ``offset / points * (w, h) /
      2``; a levels axis of 1 is the same on every level (RT-DETR's decoder);
    - ``spatial_shapes``, the levels' ``(H_l, W_l)``, static.

    Returns ``[B, Q, embed_dim]``, ``output_proj`` of the heads' sums (torch's module also
    returns the attention weights).

        >>> attention = jaxpool.linen.MultiScaleDeformableAttention(32, 4, num_levels=2,
        ...                                                          num_points=2)
        >>> levels = ((4, 4), (2, 2))
        >>> x = jnp.ones((1, 20, 32))                   # every level's positions
        >>> points = jnp.full((1, 20, 2, 2), 0.5)       # reference points
        >>> variables = attention.init(jax.random.key(0), x, points, levels)
        >>> attention.apply(variables, x, points, levels).shape
        (1, 20, 32)
        >>> from flax import nnx
        >>> jaxpool.nnx.MultiScaleDeformableAttention(32, 4, 2, 2, rngs=nnx.Rngs(0))(
        ...     x, points, levels).shape
        (1, 20, 32)
    """

    embed_dim: int = 256
    num_heads: int = 8
    num_levels: int = 4
    num_points: int = 4

    PROJECTIONS: ClassVar[tuple[str, ...]] = (
        "sampling_offsets", "attention_weights", "value_proj", "output_proj")
    """The linear maps, in torch's order of registration."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The framework classes are written without a docstring: they show this one.
        if cls.__doc__ is None:
            cls.__doc__ = MultiScaleDeformableAttention.__doc__
        super().__init_subclass__(**kwargs)

    def check_configuration(self) -> None:
        """Raises for a configuration torch's module would refuse, before any parameter
        is made."""
        name = type(self).__name__
        for field in ("embed_dim", "num_heads", "num_levels", "num_points"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{name}: {field} must be an int, got {value!r}")
            if value < 1:
                raise ValueError(f"{name}: {field} must be positive, got {value!r}")
        if self.embed_dim % self.num_heads:
            raise ValueError(f"{name}: embed_dim must be divisible by num_heads, got "
                             f"embed_dim={self.embed_dim} and num_heads={self.num_heads}")

    def projection(self, which: str) -> tuple[int, int, Initializer, Initializer]:
        """``(in_features, out_features, weight_init, bias_init)`` of the projection
        ``which``. The weight initialisers give the same distribution for torch's
        ``[out, in]`` and Flax's ``[in, out]`` (Xavier's bound is symmetric in the two)."""
        samples = self.num_heads * self.num_levels * self.num_points
        zeros = jax.nn.initializers.zeros
        if which == "sampling_offsets":
            bias = deformable_offset_bias(self.num_heads, self.num_levels, self.num_points)
            return self.embed_dim, 2 * samples, zeros, _constant(bias)
        if which == "attention_weights":
            return self.embed_dim, samples, zeros, zeros
        if which in ("value_proj", "output_proj"):
            return self.embed_dim, self.embed_dim, jax.nn.initializers.xavier_uniform(), zeros
        raise ValueError(f"which must be one of {self.PROJECTIONS}, got {which!r}")

    def attend(self, project: Callable[[str, Any], Any], hidden_states: ArrayLike,
               reference_points: ArrayLike, spatial_shapes: Any,
               value: ArrayLike | None = None, attention_mask: ArrayLike | None = None,
               position_embeddings: ArrayLike | None = None) -> Any:
        """The call (see the class docstring), the projections applied by
        ``project(name, x)`` (``x [B, N, embed_dim]``)."""
        levels, mask = self._check_call(hidden_states, reference_points, spatial_shapes,
                                        value, attention_mask, position_embeddings)
        query = jnp.asarray(hidden_states)
        value = query if value is None else jnp.asarray(value)
        if position_embeddings is not None:
            query = query + jnp.asarray(position_embeddings)
        batch, queries, _ = query.shape
        heads, points = self.num_heads, self.num_points
        projected = project("value_proj", value)
        if mask is not None:
            projected = jnp.where(mask[..., None], projected, 0)
        projected = projected.reshape(batch, value.shape[1], heads, self.embed_dim // heads)
        offsets = project("sampling_offsets", query).reshape(
            batch, queries, heads, self.num_levels, points, 2)
        weights = jax.nn.softmax(project("attention_weights", query).reshape(
            batch, queries, heads, self.num_levels * points), axis=-1)
        weights = weights.reshape(batch, queries, heads, self.num_levels, points)
        reference = jnp.asarray(reference_points)
        # torch's order of operations, so that float64 agrees to the last bits
        if reference.shape[-1] == 2:
            normalizer = jnp.asarray([(w, h) for h, w in levels], offsets.dtype)
            locations = (reference[:, :, None, :, None, :]
                         + offsets / normalizer[None, None, None, :, None, :])
        else:
            locations = (reference[:, :, None, :, None, :2]
                         + offsets / points * reference[:, :, None, :, None, 2:] * 0.5)
        out = jaxpool.multi_scale_deformable_attention(
            projected, levels, locations.astype(projected.dtype), weights.astype(projected.dtype))
        return project("output_proj", out)

    def _check_call(self, hidden_states: Any, reference_points: Any, spatial_shapes: Any,
                    value: Any, attention_mask: Any, position_embeddings: Any
                    ) -> tuple[tuple[tuple[int, int], ...], Any]:
        """The levels' (H, W) and the mask as booleans (or None); raises, naming the
        argument, for a call torch's module would refuse or compute wrong."""
        name = type(self).__name__
        shape = tuple(np.shape(hidden_states))
        if len(shape) != 3 or shape[-1] != self.embed_dim:
            raise ValueError(f"{name}: hidden_states must be [B, Q, embed_dim={self.embed_dim}], "
                             f"got shape {shape}")
        for arg, array in (("hidden_states", hidden_states), ("reference_points",
                           reference_points), ("value", value),
                           ("position_embeddings", position_embeddings)):
            if array is not None and not jnp.issubdtype(jnp.result_type(array), jnp.floating):
                raise TypeError(f"{name}: {arg} must be floating point, got dtype "
                                f"{jnp.result_type(array)}")
        accepted = "a static sequence of (H, W) pairs of ints, one per level"
        try:
            array = np.asarray(spatial_shapes)  # a traced array raises here
        except TypeError:
            raise TypeError(f"{name}: spatial_shapes must be {accepted}, got "
                            f"{spatial_shapes!r}") from None
        if array.ndim != 2 or array.shape[1] != 2 or not np.issubdtype(array.dtype,
                                                                      np.integer):
            raise TypeError(f"{name}: spatial_shapes must be {accepted}, got "
                            f"{spatial_shapes!r}")
        levels = tuple((int(h), int(w)) for h, w in array)
        if len(levels) != self.num_levels or any(h < 1 or w < 1 for h, w in levels):
            raise ValueError(f"{name}: spatial_shapes must be num_levels={self.num_levels} "
                             f"(H, W) pairs of positive ints, got {spatial_shapes!r}")
        ref = tuple(np.shape(reference_points))
        if len(ref) != 4 or ref[:2] != shape[:2] or ref[2] not in (1, self.num_levels) \
                or ref[3] not in (2, 4):
            raise ValueError(
                f"{name}: reference_points must be [B, Q, num_levels={self.num_levels} (or 1, "
                f"the same on every level), 2] (points) or [..., 4] (boxes) with "
                f"hidden_states' [B, Q] = {shape[:2]}, got shape {ref}")
        if position_embeddings is not None and tuple(np.shape(position_embeddings)) != shape:
            raise ValueError(f"{name}: position_embeddings must have hidden_states' shape "
                             f"{shape}, got {tuple(np.shape(position_embeddings))}")
        tokens = sum(h * w for h, w in levels)
        value_shape = shape if value is None else tuple(np.shape(value))
        if value_shape != (shape[0], tokens, self.embed_dim):
            which = "hidden_states (the value, none given)" if value is None else "value"
            raise ValueError(f"{name}: {which} must be [B={shape[0]}, S={tokens}, "
                             f"embed_dim={self.embed_dim}], S the positions of spatial_shapes "
                             f"{levels}, got shape {value_shape}")
        if attention_mask is None:
            return levels, None
        mask = jnp.asarray(attention_mask)
        if mask.shape != value_shape[:2]:
            raise ValueError(f"{name}: attention_mask must be [B, S] = {value_shape[:2]}, "
                             f"got shape {mask.shape}")
        if mask.dtype == jnp.bool_:
            return levels, mask
        if not jnp.issubdtype(mask.dtype, jnp.integer):
            raise TypeError(f"{name}: attention_mask must be boolean (True where the value "
                            f"holds a position, False for padding) or integer (nonzero: a "
                            f"position), got dtype {mask.dtype}")
        return levels, mask != 0



@dataclasses.dataclass(eq=False, repr=False)
class DeformConv2d:
    """Deformable convolution, the module: ``torchvision.ops.DeformConv2d`` around
    :func:`jaxpool.deform_conv2d`, channels first (``[B, C, H, W]``), as torchvision's.

    Its parameters are torchvision's, under its names and in its layout, so that
    ``parity.load_torch_weights`` pairs them as they are: ``weight [out_channels,
    in_channels / groups, kh, kw]`` and ``bias [out_channels]`` (absent with
    ``bias=False``), both drawn as torchvision's ``reset_parameters`` draws them
    (``kaiming_uniform_(a=sqrt(5))``, ``uniform(-1/sqrt(fan_in), 1/sqrt(fan_in))``:
    uniform in ``±1/sqrt(fan_in)``, ``fan_in = in_channels / groups * kh * kw``).

    The call ``(input, offset, mask=None)``: ``offset [B, 2 * offset_groups * kh * kw,
    out_h, out_w]`` and ``mask [B, offset_groups * kh * kw, out_h, out_w]`` come from the
    user's own convolutions, as in torchvision. Returns ``[B, out_channels, out_h, out_w]``.

        >>> conv = jaxpool.linen.DeformConv2d(4, 8, 3, padding=1)
        >>> x, offset = jnp.ones((1, 4, 6, 6)), jnp.zeros((1, 18, 6, 6))
        >>> variables = conv.init(jax.random.key(0), x, offset)
        >>> conv.apply(variables, x, offset).shape
        (1, 8, 6, 6)
    """

    in_channels: int
    out_channels: int
    kernel_size: Size
    stride: Size = 1
    padding: Size = 0
    dilation: Size = 1
    groups: int = 1
    bias: bool = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The framework classes are written without a docstring: they show this one.
        if cls.__doc__ is None:
            cls.__doc__ = DeformConv2d.__doc__
        super().__init_subclass__(**kwargs)

    def check_configuration(self) -> None:
        """torchvision's checks, before any parameter is made."""
        name = type(self).__name__
        for field in ("in_channels", "out_channels", "groups"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{name}: {field} must be an int, got {value!r}")
            if value < 1:
                raise ValueError(f"{name}: {field} must be positive, got {value!r}")
        for field in ("in_channels", "out_channels"):
            if getattr(self, field) % self.groups:
                raise ValueError(f"{name}: {field} must be divisible by groups, got "
                                 f"{field}={getattr(self, field)} and groups={self.groups}")
        if not isinstance(self.bias, (bool, np.bool_)):
            raise TypeError(f"{name}: bias must be True or False, got {self.bias!r}")

    @property
    def kernel(self) -> tuple[int, int]:
        k = self.kernel_size
        if isinstance(k, (tuple, list)):
            return int(k[0]), int(k[1])
        side = int(cast(int, k))  # not a tuple or list: one int (or a NumPy integer)
        return side, side

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.out_channels, self.in_channels // self.groups) + self.kernel

    def initializer(self) -> Initializer:
        """Uniform in ``±1/sqrt(fan_in)``: torchvision's ``kaiming_uniform_(a=sqrt(5))``
        (gain ``sqrt(2 / (1 + 5))``, bound ``gain * sqrt(3 / fan_in)``) for the weight, and
        its bias's bound."""
        fan_in = self.weight_shape[1] * self.kernel[0] * self.kernel[1]
        bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0

        def init(key: Any, shape: tuple, dtype: Any = jnp.float32) -> Any:
            return jax.random.uniform(key, shape, dtype, -bound, bound)
        return init

    def convolve(self, weight: Any, bias: Any, input: ArrayLike, offset: ArrayLike,
                 mask: ArrayLike | None = None) -> Any:
        return jaxpool.deform_conv2d(input, offset, weight, bias, self.stride, self.padding,
                                     self.dilation, mask)
