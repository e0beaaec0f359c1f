"""parity: check that JAX code agrees with torch code, in value and in derivatives of every
order::

    report = parity.compare(jax_fn, torch_fn, x, orders=3)
    report.ok, report.rows
    parity.assert_parity(jax_fn, torch_fn, x)          # raises ParityError with a diff
    parity.compare_errors(jax_fn, torch_fn, [parity.Call(x, bad=1)])

    variables = parity.load_torch_weights(torch_model, flax_variables, model=flax_model,
                                          x=example)    # or an nnx model, an Equinox port
    report = parity.compare_layers(torch_model, flax_model, variables, x)   # mode="shadow"
    report.first_divergence, print(report.format())

Modules: ``compare`` (the checker), ``checks`` (the table of checks it runs), ``results``
(``Row``, ``Report``, ``ParityError``), ``tolerances``, ``convert`` (arrays across, bit for
bit); for whole models, bottom up: ``layout`` (layer types and layout rules), ``calls``
(a recorded module call), ``record_torch``, ``record_flax`` and ``record_equinox`` (each
framework's module calls; ``equinox_tree`` reads and writes an Equinox port's layers and
state), ``description`` (one description per model, of the same form for both: modules,
parameters with shapes, ties, calls), ``pairing`` (``align``: the one alignment of two
descriptions, which layer and call is which), then ``weights`` (torch weights into Flax and
back), ``layers`` (layer by layer comparison) and ``model_report``, which read that
alignment; ``programs`` keeps compiled JAX programs and torch's results on disk between
runs. ``python -m parity`` runs jaxpool's own suite (``parity.suite``): every op
against torch.
"""

from .compare import Call, assert_parity, compare, compare_errors
from .convert import to_jax, to_numpy, to_torch
from .layers import assert_model_parity, compare_layers
from .model_report import LayerRow, ModelReport
from .results import ParityError, Report, Row
from .tolerances import DEFAULT_TOLERANCES
from .weights import load_torch_weights, to_torch_weights

__all__ = [
    "Call",
    "DEFAULT_TOLERANCES",
    "LayerRow",
    "ModelReport",
    "ParityError",
    "Report",
    "Row",
    "assert_model_parity",
    "assert_parity",
    "compare",
    "compare_errors",
    "compare_layers",
    "load_torch_weights",
    "to_jax",
    "to_numpy",
    "to_torch",
    "to_torch_weights",
]
