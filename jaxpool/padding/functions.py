"""The padding function: ``torch.nn.functional.pad``'s modes and rules.

Every mode copies, so values are torch's bit for bit (the sign of a zero included), and
every derivative, of any order and in either mode, is built from slices, pads, reversals
and sums: no scatter, no gather.
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxpool import registry
from jaxpool.core.types import AxisNames
from jaxpool.halo import kernel as halo
from jaxpool.padding import kernel
from jaxpool.padding.plan import plan_pad
from jaxpool.registry import Prepared, Spec

PadMode = Literal["constant", "reflect", "replicate", "circular"]


def _prepare(spec: Spec, x: Any, *, pad: Sequence[int], mode: PadMode, value: float | None,
             channels_last: bool, axis_names: AxisNames) -> Prepared:
    shape = halo.pad_shape(x.shape, pad, channels_last, axis_names)  # unsharded
    plan = plan_pad(shape, pad, mode, value, channels_last)
    fill = np.asarray(plan.value).astype(np.dtype(x.dtype))
    last = len(x.shape) - (2 if channels_last else 1)

    def compute(x, names):
        if names is not None:
            return halo.pad(kernel.pad, plan, x, jnp.asarray(fill), names)
        return kernel.pad(plan, x, fill)
    return Prepared(compute, tuple(sorted(last - i for i in range(len(pad) // 2))))


@registry.op(Spec("pad", "pad", _prepare, halo="pad", torch="torch.nn.functional.pad",
                  aten=("pad", "constant_pad_nd", "_pad_circular", "reflection_pad1d",
                        "reflection_pad2d", "reflection_pad3d", "replication_pad1d",
                        "replication_pad2d", "replication_pad3d"),
                  opinfo=("nn.functional.pad",),
                  modules=tuple(f"{kind}Pad{d}d" for kind in ("Reflection", "Replication", "Circular", "Zero",
                                                      "Constant") for d in (1, 2, 3))))
def pad(x: ArrayLike, pad: Sequence[int], mode: PadMode = "constant",
        value: float | None = None, *, channels_last: bool = False,
        axis_names: AxisNames = None) -> jax.Array:
    """Pad (or, with negative entries, crop) the trailing axes, as
    ``torch.nn.functional.pad``.

    ``pad`` holds pairs ``(lo, hi)`` read as torch reads them: the first pair pads the last
    axis, the next the one before it, and so on. With ``channels_last=True`` the last axis
    holds the channels and is skipped: the first pair pads the axis before it, so the same
    ``pad`` lands on the same spatial axes as torch's on the channels-first array (the
    channel axis is never padded; pad it with ``channels_last=False``).

    Modes (torch's rules):

    - ``constant``: ``value`` (default 0) outside; any rank, up to one pair per axis;
      negative entries crop;
    - ``reflect``: mirrored about the edge element (not repeated); each entry smaller than
      its axis's extent;
    - ``replicate``: the edge element repeated;
    - ``circular``: wrapped around; entries at most the extent. Negative entries crop
      first, and the wrap is of the cropped axis.

    ``reflect``, ``replicate`` and ``circular`` take 2, 4 or 6 entries (1, 2 or 3 spatial
    axes) on an input of one more axis (unbatched, ``[C, *spatial]``) or two more
    (``[B, C, *spatial]``); they take no ``value`` (None or 0).

    Args:
      x: an array of any dtype.
      pad: an even number of ints, ``(lo, hi)`` per axis, last axis first.
      mode: ``"constant"``, ``"reflect"``, ``"replicate"`` or ``"circular"``.
      value: the constant (``mode="constant"`` only), cast to ``x``'s dtype as torch does.
      channels_last: the last axis holds channels: pairs start at the axis before it.
      axis_names: inside ``shard_map``, the mesh axis name of each padded axis, outermost
        first (None: unsharded); each device pads its block of the output, exchanging
        only the rows it copies from its neighbours. Under plain ``jit`` a sharded input
        needs none: the op partitions itself the same way (:mod:`jaxpool.halo.jit`,
        :doc:`scale`).

    Returns:
      ``x``'s dtype; each padded axis grows by ``lo + hi``.

    Example:
      >>> jaxpool.pad(jnp.arange(4.0).reshape(1, 1, 4), (2, 1), "reflect")
      Array([[[2., 1., 0., 1., 2., 3., 2.]]], dtype=float32)
      >>> jaxpool.pad(jnp.ones((2, 8, 8, 3)), (1, 1, 2, 2), channels_last=True).shape
      (2, 12, 10, 3)
    """
    return registry.run("pad", locals())
