"""A module call as a run records it, on either side (``parity.record_torch``,
``parity.record_flax``), and a side's run: the calls of a model's description
(``parity.description``), what ``parity.pairing`` aligns and ``parity.layers`` compares.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["Call", "Run"]


@dataclasses.dataclass
class Call:
    """One call of one module, as a run recorded it. ``inputs`` are its positional array
    arguments, ``outputs`` its output leaves ((leaf path, array); shapes and dtypes only in a
    trace); ``input_grads`` and ``output_grads`` (parallel to them, None where not
    differentiated) the loss's cotangents there. ``start`` numbers the calls in the order
    they begin; a run lists them in the order they return. ``own_inputs``: in shadow mode,
    the array arguments the port computed itself, before torch's took their place."""

    path: str  # torch module name, or Flax module path
    type_name: str
    start: int
    inputs: list = dataclasses.field(default_factory=list)
    outputs: list = dataclasses.field(default_factory=list)
    input_grads: list = dataclasses.field(default_factory=list)
    output_grads: list = dataclasses.field(default_factory=list)
    own_inputs: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Run:
    """One side's run: its module calls (in the order they return), the gradients of its
    parameters by name, and ``error`` if the model raised (the calls then stop there)."""

    calls: list[Call]
    grads: dict[str, np.ndarray]
    error: str | None = None
