"""What ``compare`` returns: one ``Row`` per check and leaf, gathered in a ``Report``."""

from __future__ import annotations

import dataclasses
import math

__all__ = ["ParityError", "Report", "Row", "fmt"]


class ParityError(AssertionError):
    """Raised by ``assert_parity`` / ``Report.raise_if_failed`` (and ``assert_model_parity``);
    the message is the diff."""


@dataclasses.dataclass
class Row:
    """One check on one leaf: JAX against torch (or against torch's float64 reference for
    half dtypes). ``name`` is the check, followed by the leaf's path when the check has
    more than one leaf (``vjp input1['w']``, ``value [1]``)."""

    name: str
    order: int
    abs_err: float
    rel_err: float
    tol: float
    ok: bool
    note: str = ""
    ref_err: float | None = None  # torch's own error against the float64 reference
    detail: str = ""  # where the worst element is and what each side said

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        for k in ("abs_err", "rel_err", "tol", "ref_err"):
            if isinstance(d[k], float) and not math.isfinite(d[k]):
                d[k] = str(d[k])
        return d


def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isnan(x):
        return "n/a"
    return f"{x:.2e}"


@dataclasses.dataclass
class Report:
    """Outcome of ``compare``: ``ok`` and one ``Row`` per check and leaf."""

    rows: list[Row]
    label: str = ""
    dtype: str = ""
    reference: str = "direct"

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    @property
    def failures(self) -> list[Row]:
        return [r for r in self.rows if not r.ok]

    @property
    def first_failing_order(self) -> int | None:
        """Lowest derivative order with a failing row (None if everything passed)."""
        orders = [r.order for r in self.rows if not r.ok]
        return min(orders) if orders else None

    def worst_by_order(self) -> dict[int, float]:
        """Largest relative error per derivative order (error rows excluded)."""
        out: dict[int, float] = {}
        for r in self.rows:
            if r.name.startswith("raises"):
                continue
            out[r.order] = max(out.get(r.order, 0.0), r.rel_err)
        return out

    def __bool__(self) -> bool:  # so that `assert parity.compare(...)` reads naturally
        return self.ok

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "dtype": self.dtype,
            "reference": self.reference,
            "ok": self.ok,
            "rows": [r.to_dict() for r in self.rows],
        }

    def format(self, failures_only: bool = False) -> str:
        """Plain-text table; failing rows are followed by where and by how much."""
        rows = self.failures if failures_only else self.rows
        width = max([26] + [len(r.name) for r in rows])
        lines = []
        if self.dtype:
            lines.append(f"{self.label} [{self.dtype}, reference: {self.reference}]".strip())
        elif self.label:
            lines.append(self.label)
        lines.append(f"{'check':<{width}} {'ord':>3} {'max abs err':>11} {'max rel err':>11} "
                     f"{'tolerance':>10}  result")
        for r in rows:
            lines.append(
                f"{r.name:<{width}} {r.order:>3} {fmt(r.abs_err):>11} {fmt(r.rel_err):>11} "
                f"{fmt(r.tol):>10}  {'ok' if r.ok else 'FAIL'}"
                + (f"  ({r.note})" if r.note else "")
            )
            if not r.ok and r.detail:
                lines.extend("      " + d for d in r.detail.splitlines())
        n_fail = len(self.failures)
        lines.append(
            f"{len(self.rows) - n_fail}/{len(self.rows)} checks passed"
            + ("" if not n_fail else f"; first failure at order {self.first_failing_order}")
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def raise_if_failed(self) -> "Report":
        if not self.ok:
            raise ParityError("JAX and torch disagree\n" + self.format(failures_only=True))
        return self
