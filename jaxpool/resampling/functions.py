"""The resampling functions: ``torch.nn.functional.interpolate``, ``pixel_shuffle`` and
``pixel_unshuffle``, with torch's semantics.

Layout: channels-first by default (``[B, C, *spatial]``, as torch); ``channels_last=True``
takes and returns ``[B, *spatial, C]``. Arguments are checked in plain Python
(:mod:`jaxpool.resampling.plan`) before any computation; each call runs one compiled program per
plan, input shape and dtype.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import jax
from jax.typing import ArrayLike

from jaxpool import registry
from jaxpool.halo import kernel as halo
from jaxpool.resampling import kernel
from jaxpool.core.program import program
from jaxpool.core.types import AxisNames
from jaxpool.pooling.functions import adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d
from jaxpool.registry import Prepared, Spec
from jaxpool.resampling.plan import plan_channel_shuffle, plan_interpolate, plan_pixel_shuffle
from jaxpool.strategy_table import current_backend

SizeArg = Union[int, Sequence[int], None]
"""An int for every spatial axis, or exactly one per axis."""
ScaleArg = Union[float, Sequence[float], None]
"""A number for every spatial axis, or exactly one per axis."""

_AREA = {1: adaptive_avg_pool1d, 2: adaptive_avg_pool2d, 3: adaptive_avg_pool3d}


def _prepare_interpolate(spec: Spec, x: Any, *, size: SizeArg, scale_factor: ScaleArg,
                         mode: str, align_corners: bool | None,
                         recompute_scale_factor: bool | None, antialias: bool,
                         channels_last: bool, axis_names: AxisNames) -> Prepared:
    shape = halo.resample_shape(spec.name, x.shape, channels_last, axis_names)
    sizes, plan = plan_interpolate(spec.name, shape, x.dtype, size, scale_factor, mode,
                                   align_corners, recompute_scale_factor, antialias,
                                   channels_last, current_backend())
    if plan is None:  # area: adaptive average pooling, which routes itself
        def area(x, names):
            return _AREA[len(sizes)](x, sizes, channels_last=channels_last, axis_names=names)
        return Prepared(area, (), partitions=False)

    def compute(x, names):
        if names is not None:
            return halo.resample(kernel.run, plan, x, names)
        return kernel.run(plan, x)
    return Prepared(compute, plan.spatial_axes)


_UPSAMPLE_ATEN = tuple(f"upsample_{mode}{d}d" for mode, d in [
    ("nearest", 1), ("nearest", 2), ("nearest", 3), ("linear", 1), ("bilinear", 2),
    ("bicubic", 2), ("trilinear", 3)]) + ("_upsample_nearest_exact1d", "_upsample_nearest_exact2d",
    "_upsample_nearest_exact3d", "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa")


@registry.op(Spec("interpolate", "interpolate", _prepare_interpolate, halo="resample",
                  torch="torch.nn.functional.interpolate", aten=_UPSAMPLE_ATEN,
                  opinfo=("nn.functional.interpolate",), modules=("Upsample",)))
def interpolate(x: ArrayLike, size: SizeArg = None, scale_factor: ScaleArg = None,
                mode: str = "nearest", align_corners: bool | None = None,
                recompute_scale_factor: bool | None = None, antialias: bool = False, *,
                channels_last: bool = False, axis_names: AxisNames = None) -> jax.Array:
    """Resize the spatial axes, as ``torch.nn.functional.interpolate``.

    Modes and the ranks they take (as torch's): ``nearest``, ``nearest-exact`` and
    ``area`` on 1 to 3 spatial axes; ``linear`` on 1, ``bilinear`` and ``bicubic`` on 2,
    ``trilinear`` on 3. The taps and weights are torch's CPU kernels', computed in the
    same arithmetic (float32 for float32 and half precision, float64 for float64):

    - ``nearest``: source ``floor(i * scale)``; 2d as torch's ``nearest_idx`` (an
      unchanged extent copies, a doubled one halves), 1d and 3d as torch's forward
      kernels, so the index can depend on the dtype as torch's does. Values are copies:
      torch's bit for bit. ``nearest-exact``: ``floor((i + 1/2) * scale)``.
    - ``linear``, ``bilinear``, ``trilinear``: torch's source coordinate (half-pixel, or
      ``(n-1)/(out-1)`` with ``align_corners``), clamped at the edges; an unchanged extent
      is ``x*1 + x*0``, as torch's (inf becomes NaN).
    - ``bicubic``: torch's cubic kernel (A = -0.75), its four taps clamped to the edges.
    - ``antialias=True`` (bilinear and bicubic): torch's separable filter, widened by the
      downscale and normalised (bicubic with A = -0.5); an unchanged extent is copied.
    - ``area``: ``adaptive_avg_pool`` to the output extents.

    The scale: ``(n-1)/(out-1)`` with ``align_corners``; else ``1/scale_factor`` when
    ``scale_factor`` is given and ``recompute_scale_factor`` is not True, else ``n/out``.
    Every product torch computes is computed, a zero weight's too: NaN and inf land where
    torch's do. Derivatives (any order, both modes) are the transpose of these values and
    hold no scatter or gather.

    Args:
      x: ``[B, C, *spatial]`` with 1 to 3 spatial axes; with ``channels_last``,
        ``[B, *spatial, C]``. Floating point.
      size: the output's spatial extents: an int for every axis or one per axis.
      scale_factor: instead of ``size``: a number for every axis or one per axis; each
        extent becomes ``int(n * scale_factor)``.
      mode: one of the modes above.
      align_corners: the interpolating modes only (default False): map the corner
        elements' centres onto each other.
      recompute_scale_factor: with ``scale_factor``, map coordinates with ``n/out``
        instead of ``1/scale_factor``.
      antialias: ``bilinear`` and ``bicubic`` only.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial axis,
        outermost first (None: unsharded): each device exchanges only its halo. Under
        plain ``jit`` a sharded input needs none: the op partitions itself the same way
        (:mod:`jaxpool.halo.jit`, :doc:`scale`).

    Returns:
      ``x``'s layout and dtype with the new spatial extents. float16/bfloat16 compute in
      float32 and round once (the nearest modes copy).

    Example:
      >>> jaxpool.interpolate(jnp.ones((2, 8, 16, 16)), scale_factor=2, mode="bilinear").shape
      (2, 8, 32, 32)
    """
    return registry.run("interpolate", locals())


def _prepare_upsample(mode: str, align_corners: bool | None):
    """``interpolate`` with ``mode`` and ``align_corners`` fixed; it routes itself."""
    def prepare(spec: Spec, x: Any, *, size: SizeArg, scale_factor: ScaleArg,
                channels_last: bool, axis_names: AxisNames) -> Prepared:
        def upsample(x, names):
            return interpolate(x, size, scale_factor, mode, align_corners,
                               channels_last=channels_last, axis_names=names)
        return Prepared(upsample, (), partitions=False)
    return prepare


@registry.op(Spec("upsample_nearest", "interpolate", _prepare_upsample("nearest", None),
                  halo="delegate", torch="torch.nn.functional.upsample_nearest",
                  opinfo=("nn.functional.upsample_nearest",), modules=("UpsamplingNearest2d",)))
def upsample_nearest(x: ArrayLike, size: SizeArg = None, scale_factor: ScaleArg = None, *,
                     channels_last: bool = False, axis_names: AxisNames = None) -> jax.Array:
    """``torch.nn.functional.upsample_nearest``: :func:`interpolate` with ``mode="nearest"``.

    Args:
      x, size, scale_factor, channels_last: as :func:`interpolate`.

    Returns:
      ``x``'s layout and dtype with the new spatial extents; values copied.

    Example:
      >>> jaxpool.upsample_nearest(jnp.ones((2, 8, 5)), scale_factor=3).shape
      (2, 8, 15)
    """
    return registry.run("upsample_nearest", locals())


@registry.op(Spec("upsample_bilinear", "interpolate", _prepare_upsample("bilinear", True),
                  halo="delegate", torch="torch.nn.functional.upsample_bilinear",
                  opinfo=("nn.functional.upsample_bilinear",), modules=("UpsamplingBilinear2d",)))
def upsample_bilinear(x: ArrayLike, size: SizeArg = None, scale_factor: ScaleArg = None, *,
                      channels_last: bool = False, axis_names: AxisNames = None
                      ) -> jax.Array:
    """``torch.nn.functional.upsample_bilinear``: :func:`interpolate` with
    ``mode="bilinear"`` and ``align_corners=True``.

    Args:
      x: ``[B, C, H, W]``; with ``channels_last``, ``[B, H, W, C]``.
      size, scale_factor, channels_last: as :func:`interpolate`.

    Returns:
      ``x``'s layout and dtype with the new spatial extents.

    Example:
      >>> jaxpool.upsample_bilinear(jnp.ones((2, 8, 5, 5)), size=9).shape
      (2, 8, 9, 9)
    """
    return registry.run("upsample_bilinear", locals())


def _shuffled(spec: Spec, x: Any, factor: int, channels_last: bool, axis_names: AxisNames,
              inverse: bool) -> Prepared:
    r, _ = plan_pixel_shuffle(spec.name, x.shape, factor, channels_last, inverse=inverse)
    halo.check_shuffle(spec.name, x.shape, channels_last, axis_names, r, inverse)
    run = _unshuffle if inverse else _shuffle
    # each device (un)shuffles its own block: the same program with axis_names
    return Prepared(lambda x, names: run(x, r, bool(channels_last)),
                    _last_two(len(x.shape), channels_last))


def _prepare_pixel_shuffle(spec: Spec, x: Any, *, upscale_factor: int, channels_last: bool,
                           axis_names: AxisNames) -> Prepared:
    return _shuffled(spec, x, upscale_factor, channels_last, axis_names, inverse=False)


def _prepare_pixel_unshuffle(spec: Spec, x: Any, *, downscale_factor: int, channels_last: bool,
                             axis_names: AxisNames) -> Prepared:
    return _shuffled(spec, x, downscale_factor, channels_last, axis_names, inverse=True)


@registry.op(Spec("pixel_shuffle", "pixel_shuffle", _prepare_pixel_shuffle,
                  ndim=2, halo="shuffle", torch="torch.nn.functional.pixel_shuffle",
                  aten=("pixel_shuffle",), opinfo=("nn.functional.pixel_shuffle",),
                  modules=("PixelShuffle",)))
def pixel_shuffle(x: ArrayLike, upscale_factor: int, *, channels_last: bool = False,
                  axis_names: AxisNames = None) -> jax.Array:
    """Move channels into space, as ``torch.nn.functional.pixel_shuffle``.

    ``[*, C*r*r, H, W] -> [*, C, H*r, W*r]`` with ``r = upscale_factor``: channel
    ``c*r*r + i*r + j`` at ``(h, w)`` goes to ``(c, h*r + i, w*r + j)``. With
    ``channels_last``, ``[*, H, W, C*r*r] -> [*, H*r, W*r, C]`` in the same order.

    Args:
      x: ``[*, C*r*r, H, W]`` (rank 3 or more; any dtype); with ``channels_last``,
        ``[*, H, W, C*r*r]``.
      upscale_factor: ``r``, a positive int.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial axis
        (H, W; None: unsharded): each device shuffles its own block, no exchange.

    Returns:
      ``[*, C, H*r, W*r]`` (``[*, H*r, W*r, C]``) in ``x``'s dtype, every value copied.

    Example:
      >>> jaxpool.pixel_shuffle(jnp.ones((2, 27, 8, 8)), 3).shape
      (2, 3, 24, 24)
    """
    return registry.run("pixel_shuffle", locals())


@registry.op(Spec("pixel_unshuffle", "pixel_shuffle",
                  _prepare_pixel_unshuffle, ndim=2, halo="shuffle",
                  torch="torch.nn.functional.pixel_unshuffle", aten=("pixel_unshuffle",),
                  opinfo=("nn.functional.pixel_unshuffle",), modules=("PixelUnshuffle",)))
def pixel_unshuffle(x: ArrayLike, downscale_factor: int, *, channels_last: bool = False,
                    axis_names: AxisNames = None) -> jax.Array:
    """Move space into channels, as ``torch.nn.functional.pixel_unshuffle``, the inverse
    of :func:`pixel_shuffle`.

    Args:
      x: ``[*, C, H*r, W*r]`` (rank 3 or more; any dtype); with ``channels_last``,
        ``[*, H*r, W*r, C]``.
      downscale_factor: ``r``, a positive int.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial axis
        (H, W; None: unsharded): each device unshuffles its own block (of a multiple of
        ``r`` rows), no exchange.

    Returns:
      ``[*, C*r*r, H, W]`` (``[*, H, W, C*r*r]``) in ``x``'s dtype, every value copied.

    Example:
      >>> jaxpool.pixel_unshuffle(jnp.ones((2, 3, 24, 24)), 3).shape
      (2, 27, 8, 8)
    """
    return registry.run("pixel_unshuffle", locals())


# --- channel shuffle (docs/adding_an_op.rst walks through it) ---------------------------

def _prepare_channel_shuffle(spec: Spec, x: Any, *, groups: int, channels_last: bool,
                             axis_names: AxisNames) -> Prepared:
    groups, axis = plan_channel_shuffle(spec.name, x.shape, groups, channels_last)
    if axis_names is not None:
        halo.check_axis_names(spec.name, axis_names, len(x.shape) - 2)
    # channels only: each device shuffles its own block, and XLA partitions it as it is
    return Prepared(lambda x, names: kernel.channel_shuffle(x, groups, axis), (),
                    partitions=False)


@registry.op(Spec("channel_shuffle", "channel_shuffle", _prepare_channel_shuffle,
                  halo="shuffle", torch="torch.nn.functional.channel_shuffle",
                  aten=("channel_shuffle",), opinfo=("nn.functional.channel_shuffle",),
                  modules=("ChannelShuffle",)))
def channel_shuffle(x: ArrayLike, groups: int, *, channels_last: bool = False,
                    axis_names: AxisNames = None) -> jax.Array:
    """Interleave the channels of ``groups`` groups, as
    ``torch.nn.functional.channel_shuffle`` (ShuffleNet's shuffle).

    Channel ``g*(C/groups) + k`` goes to ``k*groups + g``: ``[B, C, *spatial]`` viewed as
    ``[B, groups, C/groups, *spatial]``, its two channel axes swapped.

    Args:
      x: ``[B, C, *spatial]`` (rank 3 or more, any dtype); with ``channels_last``,
        ``[B, *spatial, C]``.
      groups: a positive int that divides ``C``.
      channels_last: channels after the spatial axes.
      axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial axis
        (None: unsharded): each device shuffles its own block, no exchange.

    Returns:
      ``x``'s shape, layout and dtype, every value copied.

    Example:
      >>> jaxpool.channel_shuffle(jnp.arange(6.0).reshape(1, 6, 1), 3)[0, :, 0]
      Array([0., 2., 4., 1., 3., 5.], dtype=float32)
    """
    return registry.run("channel_shuffle", locals())


# --- end of channel shuffle ----------------------------------------------------------------


def _last_two(rank: int, channels_last) -> tuple[int, int]:
    last = rank - (2 if channels_last else 1)
    return (last - 1, last)


_shuffle = program((1, 2))(kernel.pixel_shuffle)
_unshuffle = program((1, 2))(kernel.pixel_unshuffle)
