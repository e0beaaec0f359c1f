"""Docstring pieces that a family's functions share: written here once, filled in per rank.

A family's docstring is a ``str.format`` template over the fields of :func:`rank_fields`
(``{d}``, ``{x}``, ``{index}``, ...) and ``{axis_names}``.
"""

from __future__ import annotations

from typing import Callable

from jaxpool.core.types import F

AXIS_NAMES = """\
axis_names: inside ``shard_map``, the mesh axis name of each sharded spatial
        axis, outermost first (None: unsharded): each device exchanges only its halo.
        Under plain ``jit`` a sharded input needs none: the op partitions itself the
        same way (:mod:`jaxpool.halo.jit`, :doc:`scale`)."""

_LAYOUTS = {
    1: ("``[B, C, L]`` or ``[C, L]``", "``[B, L, C]`` or ``[L, C]``", "``l``", "row"),
    2: ("``[B, C, H, W]`` or ``[C, H, W]``", "``[B, H, W, C]`` or ``[H, W, C]``",
        "``h*W + w``", "plane"),
    3: ("``[B, C, D, H, W]`` or ``[C, D, H, W]``", "``[B, D, H, W, C]`` or ``[D, H, W, C]``",
        "``(d*H + h)*W + w``", "volume"),
}

# The docstrings' examples: an input of each rank and what pooling it by 2 gives.
_EXAMPLES = {
    1: ("(8, 16, 100)", "(8, 16, 50)"),
    2: ("(8, 16, 32, 32)", "(8, 16, 16, 16)"),
    3: ("(2, 16, 8, 32, 32)", "(2, 16, 4, 16, 16)"),
}


def rank_fields(ndim: int) -> dict[str, str]:
    """The template fields of rank ``ndim``: ``d`` ("2d"), ``x`` and ``x_last`` (the
    input's layouts), ``index`` (a flat index's formula), ``plane`` ("plane"),
    ``shape`` and ``halved`` (an example input's shape, and pooled by 2)."""
    first, last, index, plane = _LAYOUTS[ndim]
    shape, halved = _EXAMPLES[ndim]
    return dict(d=f"{ndim}d", x=first, x_last=last, index=index, plane=plane, shape=shape,
                halved=halved, axis_names=AXIS_NAMES)


def fill(template: str, ndim: int, **fields: str) -> str:
    """``template`` filled in for rank ``ndim`` (``fields`` add to or replace the rank's)."""
    return template.format(**{**rank_fields(ndim), **fields})


def filled(template: str, ndim: int, **fields: str) -> Callable[[F], F]:
    """A decorator that sets a rank's docstring: ``template`` filled in for ``ndim``."""
    def set_doc(function: F) -> F:
        function.__doc__ = fill(template, ndim, **fields)
        return function
    return set_doc
