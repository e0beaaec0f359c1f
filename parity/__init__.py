"""parity: check that a JAX function and a torch function agree, in value and in
derivatives of every order.

    report = parity.compare(jax_fn, torch_fn, x, orders=3)
    report.ok, report.rows
    parity.assert_parity(jax_fn, torch_fn, x)          # raises ParityError with a diff
    parity.compare_errors(jax_fn, torch_fn, [parity.Call(x, bad=1)])

``python -m parity`` runs the pooling suite (jaxpool against torch.nn.functional).
"""

from .compare import (
    DEFAULT_TOLERANCES,
    Call,
    ParityError,
    Report,
    Row,
    assert_parity,
    compare,
    compare_errors,
)
from .convert import to_jax, to_numpy, to_torch

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
