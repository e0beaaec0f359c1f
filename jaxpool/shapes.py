"""Shape rules of every op, in plain Python: no tracing, no arrays.

Forward: each function takes an input shape and the op's arguments and returns the output
shape (raising the op's own errors). Backward, as the catalog defines it: ``output_size`` and
the channel count can be read from an output shape, the input's spatial extents cannot
(every input extent maps to the requested output).
"""

from __future__ import annotations

from jaxpool import _checks
from jaxpool.plan import plan_adaptive, plan_avg_pool, plan_global


def _avg_pool_shape(ndim: int, name: str):
    def shape_rule(input_shape, kernel_size, stride=None, padding=0, ceil_mode=False,
                   count_include_pad=True, divisor_override=None, *, channels_last=False):
        return plan_avg_pool(name, tuple(input_shape), None, ndim, kernel_size, stride,
                             padding, ceil_mode, count_include_pad, divisor_override,
                             channels_last).output_shape

    shape_rule.__name__ = shape_rule.__qualname__ = name
    shape_rule.__doc__ = f"Output shape of ``jaxpool.{name}`` for an input of ``input_shape``."
    return shape_rule


def _adaptive_shape(ndim: int, name: str):
    def shape_rule(input_shape, output_size, *, channels_last=False):
        return plan_adaptive(name, tuple(input_shape), None, ndim, output_size,
                             channels_last).output_shape

    shape_rule.__name__ = shape_rule.__qualname__ = name
    shape_rule.__doc__ = f"Output shape of ``jaxpool.{name}`` for an input of ``input_shape``."
    return shape_rule


avg_pool1d = _avg_pool_shape(1, "avg_pool1d")
avg_pool2d = _avg_pool_shape(2, "avg_pool2d")
avg_pool3d = _avg_pool_shape(3, "avg_pool3d")
adaptive_avg_pool1d = _adaptive_shape(1, "adaptive_avg_pool1d")
adaptive_avg_pool2d = _adaptive_shape(2, "adaptive_avg_pool2d")
adaptive_avg_pool3d = _adaptive_shape(3, "adaptive_avg_pool3d")
avg_pool = avg_pool2d
adaptive_avg_pool = adaptive_avg_pool2d


def global_avg_pool(input_shape, *, channels_last=False):
    """Output shape of ``jaxpool.global_avg_pool``: ``[B, C, H, W] -> [B, C]``."""
    plan = plan_global("global_avg_pool", tuple(input_shape), None, channels_last)
    channel_axis = 3 if plan.spatial_axes == (1, 2) else 1
    return (input_shape[0], input_shape[channel_axis])


def _split(op: str, shape, ndim: int, channels_last: bool):
    shape = tuple(shape)
    batched, spatial, channel_axis = _checks.check_input(op, shape, None, ndim,
                                                         _checks.check_channels_last(
                                                             channels_last))
    return batched, spatial, shape[channel_axis]


def adaptive_output_size(output_shape, *, ndim: int = 2, channels_last: bool = False
                         ) -> tuple[int, ...]:
    """Backward inference: the ``output_size`` that produced ``output_shape``."""
    _, spatial, _ = _split("adaptive_output_size", output_shape, ndim, channels_last)
    return spatial


def channels(shape, *, ndim: int = 2, channels_last: bool = False) -> int:
    """C of an input or output shape: every op preserves it, so it flows both ways."""
    return _split("channels", shape, ndim, channels_last)[2]


def input_shape_from_output(output_shape, input_spatial=None, *, ndim: int = 2,
                            channels_last: bool = False) -> tuple[int, ...]:
    """Backward inference of an adaptive pool's input shape from its output shape.

    Batch and C come from ``output_shape``; the spatial extents cannot (any input extent
    pools to the requested output), so ``input_spatial`` must give them.
    """
    batched, spatial, c = _split("input_shape_from_output", output_shape, ndim,
                                 channels_last)
    if input_spatial is None:
        raise ValueError(
            f"input_spatial is required: the input's spatial extents are not inferable "
            f"backward from output shape {tuple(output_shape)} (every input extent pools to "
            f"{spatial}); give them from the network input or the preceding operation")
    extents = _checks.int_tuple("input_spatial", input_spatial, ndim, minimum=1)
    lead = (output_shape[0],) if batched else ()
    return lead + ((*extents, c) if channels_last else (c, *extents))
