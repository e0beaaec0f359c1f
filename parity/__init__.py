"""parity: check that JAX code agrees with torch code, in value and in derivatives of every
order.

    report = parity.compare(jax_fn, torch_fn, x, orders=3)
    report.ok, report.rows
    parity.assert_parity(jax_fn, torch_fn, x)          # raises ParityError with a diff
    parity.compare_errors(jax_fn, torch_fn, [parity.Call(x, bad=1)])

Modules: ``compare`` (the checker), ``checks`` (the table of checks it runs), ``results``
(``Row``, ``Report``, ``ParityError``), ``tolerances``, ``convert`` (arrays across, bit for
bit). ``python -m parity`` runs the jaxpool pooling suite (``parity.pooling``).
"""

from .compare import Call, assert_parity, compare, compare_errors
from .convert import to_jax, to_numpy, to_torch
from .results import ParityError, Report, Row
from .tolerances import DEFAULT_TOLERANCES

__all__ = [
    "Call",
    "DEFAULT_TOLERANCES",
    "ParityError",
    "Report",
    "Row",
    "assert_parity",
    "compare",
    "compare_errors",
    "to_jax",
    "to_numpy",
    "to_torch",
]
