"""``torch.nn.functional.grid_sample`` and ``affine_grid``: reading at positions the data
gives, torch-exact, with derivatives of every order (in the input and the grid, in both
modes) whose only gathers read and which hold no scatter (:mod:`jaxpool.core.gather`).

:mod:`jaxpool.grid_sampling.plan` checks and plans a call in plain Python, :mod:`jaxpool.grid_sampling.kernel`
computes it.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.typing import ArrayLike

from jaxpool import registry
from jaxpool.core import dtypes
from jaxpool.core.types import AxisNames
from jaxpool.grid_sampling import kernel
from jaxpool.grid_sampling.plan import (plan_affine_grid, default_align_corners,
                               plan_grid_sample)
from jaxpool.registry import Prepared, Spec

def _prepare_grid_sample(spec: Spec, x: Any, grid: Any, *, mode: str, padding_mode: str,
                         align_corners: bool | None, channels_last: bool,
                         axis_names: AxisNames) -> Prepared:
    plan = plan_grid_sample(x.shape, dtypes.name(x), grid.shape, dtypes.name(grid), mode,
                            padding_mode, align_corners, channels_last)
    default_align_corners(align_corners)
    # a sharded input is replicated by XLA's partitioner: the reads go anywhere
    return Prepared(lambda x, grid, names: kernel.grid_sample(plan, x, grid), (),
                    partitions=False)


@registry.op(Spec("grid_sample", "grid_sample", _prepare_grid_sample, arrays=("input", "grid"),
                  differentiable=("input", "grid"), torch="torch.nn.functional.grid_sample",
                  aten=("grid_sampler", "grid_sampler_2d", "grid_sampler_3d"),
                  opinfo=("nn.functional.grid_sample",)))
def grid_sample(input: ArrayLike, grid: ArrayLike, mode: str = "bilinear",
                padding_mode: str = "zeros", align_corners: bool | None = None, *,
                channels_last: bool = False) -> jax.Array:
    """Sample ``input`` at the grid's points, as ``torch.nn.functional.grid_sample``.

    Each point ``(x, y[, z])`` of the grid is in ``[-1, 1]`` (the corners' centres with
    ``align_corners``, else their outer edges); ``mode`` ``bilinear`` (trilinear on 5-D
    input) weighs the 4 (8) corners around it, ``nearest`` copies the nearest element
    (torch's rounding, half to even: bit for bit), ``bicubic`` (4-D only) weighs 16 taps
    with torch's cubic (A = -0.75). ``padding_mode`` says what is read outside: ``zeros``,
    ``border`` (the edge) or ``reflection``. The arithmetic is torch's CPU kernels' (the
    vectorized one for 4-D input, the scalar one for 5-D), NaN and inf included; the
    derivatives in the input and the grid are torch's, one-sided at the borders where its
    kernel is, and every order in both modes reads with gathers and adds back with a sorted,
    segmented sum: no scatter, so they repeat bit for bit on GPU and TPU (torch's CUDA
    backward adds with atomics).

    Args:
      input: ``[N, C, H, W]`` or ``[N, C, D, H, W]``; with ``channels_last``,
        ``[N, H, W, C]`` or ``[N, D, H, W, C]``. Floating point.
      grid: ``[N, Ho, Wo, 2]`` or ``[N, Do, Ho, Wo, 3]`` in ``input``'s dtype; the last
        axis holds ``(x, y[, z])``, x along the last spatial axis.
      mode: ``"bilinear"``, ``"nearest"`` or ``"bicubic"``.
      padding_mode: ``"zeros"``, ``"border"`` or ``"reflection"``.
      align_corners: as torch's (None is False, with torch's warning).
      channels_last: channels after the spatial axes, in ``input`` and the result.

    Returns:
      ``[N, C, Ho, Wo]`` (``[N, C, Do, Ho, Wo]``; channels last ``[N, Ho, Wo, C]``) in
      ``input``'s dtype; float16/bfloat16 compute in float32 and round once.

    Example:
      >>> theta = jnp.asarray([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
      >>> x = jnp.arange(16.0).reshape(1, 1, 4, 4)
      >>> grid = jaxpool.affine_grid(theta, (1, 1, 4, 4), align_corners=False)
      >>> bool((jaxpool.grid_sample(x, grid, align_corners=False) == x).all())
      True
    """
    return registry.run("grid_sample", locals())


def _prepare_affine_grid(spec: Spec, theta: Any, *, size: tuple[int, ...],
                        align_corners: bool | None, axis_names: AxisNames) -> Prepared:
    align = default_align_corners(align_corners)
    plan = plan_affine_grid(theta.shape, dtypes.name(theta), size, align)
    return Prepared(lambda theta, names: kernel.affine_grid(plan, theta), (),
                    partitions=False)


@registry.op(Spec("affine_grid", "affine_grid", _prepare_affine_grid, arrays=("theta",),
                  differentiable=("theta",), torch="torch.nn.functional.affine_grid",
                  aten=("affine_grid_generator",)))
def affine_grid(theta: ArrayLike, size: tuple[int, ...], align_corners: bool | None = None
                ) -> jax.Array:
    """The grid of an affine map, as ``torch.nn.functional.affine_grid``: for
    :func:`grid_sample`, a spatial transformer's sampling grid.

    Args:
      theta: ``[N, 2, 3]`` (2-D) or ``[N, 3, 4]`` (3-D) affine matrices, floating point.
      size: the output's size ``(N, C, H, W)`` or ``(N, C, D, H, W)``.
      align_corners: as :func:`grid_sample`'s (None is False, with torch's warning).

    Returns:
      ``[N, H, W, 2]`` (``[N, D, H, W, 3]``) in ``theta``'s dtype: ``theta`` applied to the
      normalised coordinates of every output point, as torch computes them.

    Example:
      >>> jaxpool.affine_grid(jnp.zeros((2, 2, 3)), (2, 3, 5, 7), align_corners=True).shape
      (2, 5, 7, 2)
    """
    return registry.run("affine_grid", locals())
