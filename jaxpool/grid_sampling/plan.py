"""The arithmetic of ``grid_sample`` and ``affine_grid``, in plain Python: torch's argument
checks, and the static decisions of one call (mode, padding, layout, extents)."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Sequence

import numpy as np

from jaxpool.core import dtypes
from jaxpool.core.memo import memoized_plan
from jaxpool.core.stack import find_stack_level

# In torch's order: ATen's grid_sampler codes each by its position (jaxpool.torchax reads them).
MODES = ("bilinear", "nearest", "bicubic")
PADDING_MODES = ("zeros", "border", "reflection")


# --- plans: argument checks and static decisions, plain Python ----------------------------

@dataclasses.dataclass(frozen=True)
class GridSamplePlan:
    """What one ``grid_sample`` call computes: ``in_spatial`` (D, H, W or H, W) read at the
    ``out_spatial`` points of the grid, for ``batch`` examples of ``channels`` channels."""
    mode: str
    padding_mode: str
    align_corners: bool
    channels_last: bool
    batch: int
    channels: int
    in_spatial: tuple
    out_spatial: tuple
    dtype: str

    @property
    def dims(self) -> int:
        return len(self.in_spatial)

    @property
    def compute_dtype(self) -> str:
        """Half precision computes in float32 and rounds once."""
        return dtypes.compute_dtype(self.dtype)

    @property
    def out_shape(self) -> tuple:
        if self.channels_last:
            return (self.batch,) + self.out_spatial + (self.channels,)
        return (self.batch, self.channels) + self.out_spatial


@memoized_plan
def plan_grid_sample(input_shape: Sequence[int], input_dtype: str, grid_shape: Sequence[int],
                     grid_dtype: str, mode: str, padding_mode: str, align_corners,
                     channels_last: bool) -> GridSamplePlan:
    """torch's checks (``F.grid_sample``, ``check_grid_sampler_common``/``_2d``/``_3d``),
    raised as ValueError/TypeError naming the argument and value."""
    if mode not in MODES:
        raise ValueError(f"grid_sample: mode must be 'bilinear', 'nearest' or 'bicubic', "
                         f"got {mode!r}")
    if padding_mode not in PADDING_MODES:
        raise ValueError(f"grid_sample: padding_mode must be 'zeros', 'border' or "
                         f"'reflection', got {padding_mode!r}")
    if align_corners is not None and not isinstance(align_corners, (bool, np.bool_)):
        raise TypeError(f"grid_sample: align_corners must be a bool or None, got "
                        f"{align_corners!r}")
    input_shape, grid_shape = tuple(input_shape), tuple(grid_shape)
    if len(input_shape) not in (4, 5) or len(grid_shape) != len(input_shape):
        raise ValueError(f"grid_sample: expected 4-D or 5-D input and grid with the same "
                         f"number of dimensions, got input of shape {input_shape} and grid "
                         f"of shape {grid_shape}")
    if not dtypes.is_floating(input_dtype):
        raise TypeError(f"grid_sample: input must have a floating dtype, got {input_dtype}")
    if grid_dtype != input_dtype:
        raise TypeError(f"grid_sample: expected input and grid to have the same dtype, got "
                        f"input {input_dtype} and grid {grid_dtype}")
    dims = len(input_shape) - 2
    if grid_shape[0] != input_shape[0]:
        raise ValueError(f"grid_sample: expected grid and input to have the same batch "
                         f"size, got input of shape {input_shape} and grid of shape "
                         f"{grid_shape}")
    if grid_shape[-1] != dims:
        raise ValueError(f"grid_sample: expected grid to have size {dims} in its last "
                         f"dimension for {len(input_shape)}-D input, got grid of shape "
                         f"{grid_shape}")
    if channels_last:
        batch, *in_spatial, channels = input_shape
    else:
        batch, channels, *in_spatial = input_shape
    for axis, size in enumerate(in_spatial):
        if size == 0:
            raise ValueError(f"grid_sample: expected input to have non-empty spatial "
                             f"dimensions, got input of shape {input_shape} with spatial "
                             f"dimension {axis} empty")
    if mode == "bicubic" and dims != 2:
        raise ValueError(f"grid_sample: mode 'bicubic' supports only 4-D input, got input "
                         f"of shape {input_shape}")
    positions = batch * int(np.prod(in_spatial))
    if positions > dtypes.INT32_MAX or 16 * batch * int(np.prod(grid_shape[1:-1])) > dtypes.INT32_MAX:
        raise ValueError(f"grid_sample: input of shape {input_shape} with grid of shape "
                         f"{grid_shape} has more positions than int32 indexes")
    return GridSamplePlan(mode, padding_mode, bool(align_corners), bool(channels_last),
                          batch, channels, tuple(in_spatial), tuple(grid_shape[1:-1]),
                          input_dtype)


@dataclasses.dataclass(frozen=True)
class AffineGridPlan:
    """``affine_grid``: the base grid of ``spatial`` (D, H, W or H, W) points."""
    batch: int
    spatial: tuple
    align_corners: bool
    dtype: str

    @property
    def compute_dtype(self) -> str:
        return dtypes.compute_dtype(self.dtype)


@memoized_plan
def plan_affine_grid(theta_shape: Sequence[int], theta_dtype: str, size,
                     align_corners) -> AffineGridPlan:
    """torch's checks (``F.affine_grid``)."""
    if not dtypes.is_floating(theta_dtype):
        raise TypeError(f"affine_grid: theta must have a floating dtype, got {theta_dtype}")
    try:
        size = tuple(int(s) for s in size)
    except TypeError:
        raise TypeError(f"affine_grid: size must be a sequence of ints, got {size!r}") from None
    theta_shape = tuple(theta_shape)
    if len(size) == 4:
        expected = (2, 3)
    elif len(size) == 5:
        expected = (3, 4)
    else:
        raise ValueError(f"affine_grid: size must have 4 (2-D) or 5 (3-D) entries, got "
                         f"{size}")
    if len(theta_shape) != 3 or theta_shape[1:] != expected:
        raise ValueError(f"affine_grid: expected theta of shape [N, {expected[0]}, "
                         f"{expected[1]}] for size {size}, got theta of shape {theta_shape}")
    spatial = size[2:]
    # torch skips this check (and only warns) for a unit span under align_corners.
    if not (align_corners and min(spatial) == 1) and min(size) <= 0:
        raise ValueError(f"affine_grid: expected a positive size, got {size}")
    if theta_shape[0] != size[0]:
        raise ValueError(f"affine_grid: theta's batch {theta_shape[0]} differs from "
                         f"size[0] = {size[0]}")
    return AffineGridPlan(size[0], spatial, bool(align_corners), theta_dtype)


def default_align_corners(align_corners: bool | None) -> bool:
    """``align_corners`` None is False, with torch's warning, raised at the user's line."""
    if align_corners is None:
        warnings.warn("Default grid_sample and affine_grid behavior has changed to "
                      "align_corners=False since 1.3.0. Please specify align_corners=True "
                      "if the old behavior is desired. See the documentation of "
                      "grid_sample for details.", stacklevel=find_stack_level())
        return False
    return align_corners
