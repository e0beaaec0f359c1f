"""Rendering suite results: a rich table for the terminal, JSON and Markdown for sharing.

Every renderer takes ``unchecked``, ``{op: why}`` for the ops that could not be checked here
(:func:`parity.suite.cases.unchecked`), and shows each as a row that says so, and why.
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
from typing import Mapping, Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..tolerances import TOLERANCE_NOTE
from .cases import CaseResult

__all__ = ["TOLERANCE_NOTE", "OpSummary", "by_op", "summary", "render_summary", "render_table",
           "to_json", "to_markdown"]


def _orders(results: Sequence[CaseResult]) -> list[int]:
    return sorted({r.order for res in results for r in res.report.rows})


def summary(results: Sequence[CaseResult], seconds: float | None = None,
            unchecked: Mapping[str, str] | None = None) -> str:
    """One line: how many cases and checks passed, how long it took, and the ops not
    checked."""
    n_cases = len(results)
    n_failed = sum(not r.ok for r in results)
    n_checks = sum(len(r.report.rows) for r in results)
    n_checks_failed = sum(len(r.report.failures) for r in results)
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    skipped = f"; not checked: {', '.join(unchecked)}" if unchecked else ""
    if not n_failed:
        return f"PASS: {n_cases} cases, {n_checks} checks, all agree with torch{took}{skipped}"
    return (f"FAIL: {n_failed} of {n_cases} cases ({n_checks_failed} of {n_checks} checks) "
            f"disagree with torch{took}{skipped}")


def _worst(res: CaseResult, order: int) -> tuple[float | None, bool]:
    rows = [r for r in res.report.rows if r.order == order]
    if not rows:
        return None, True
    vals = [r.rel_err for r in rows if not math.isnan(r.rel_err)]
    return (max(vals) if vals else None), all(r.ok for r in rows)


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if math.isinf(v):
        return "inf"
    return f"{v:.1e}"


_SHORT_DTYPE = {"float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def _errors_only(res: CaseResult) -> bool:
    return all(r.name.startswith("raises") for r in res.report.rows)


def _summary_line(console: Console, results: Sequence[CaseResult],
                  seconds: float | None, unchecked: Mapping[str, str] | None = None) -> None:
    console.print(summary(results, seconds, unchecked), highlight=False,
                  style="bold green" if all(r.ok for r in results) else "bold red")


NOT_CHECKED = "not checked"


def _print_unchecked(console: Console, unchecked: Mapping[str, str] | None) -> None:
    for op, why in (unchecked or {}).items():
        console.print(f"{op} {NOT_CHECKED}: {why}", style="yellow", markup=False,
                      highlight=False)


def _print_failures(console: Console, results: Sequence[CaseResult]) -> None:
    for res in results:
        if not res.ok:
            console.print(f"\n{res.case.key}", style="bold red", markup=False, highlight=False)
            console.print(res.report.format(failures_only=True), markup=False, highlight=False)


@dataclasses.dataclass
class OpSummary:
    """One op's cases together: how many, their checks, the worst relative error per
    derivative order (None where no check of that order ran) and which orders failed."""

    op: str
    cases: int
    dtypes: tuple[str, ...]
    layouts: tuple[str, ...]
    checks: int
    failed_checks: int
    errors: int  # bad-argument calls on which both sides must raise
    failed_errors: int
    worst: dict[int, float | None]
    failed_orders: frozenset[int]

    @property
    def ok(self) -> bool:
        return not self.failed_checks and not self.failed_errors


def by_op(results: Sequence[CaseResult]) -> list[OpSummary]:
    """The results gathered per op, in the order the ops first appear."""
    grouped: dict[str, list[CaseResult]] = {}
    for res in results:
        grouped.setdefault(res.case.op, []).append(res)
    orders = _orders(results)
    out = []
    for op, group in grouped.items():
        cases = [r for r in group if not _errors_only(r)]
        errors = [row for r in group if _errors_only(r) for row in r.report.rows]
        rows = [row for r in cases for row in r.report.rows]
        worst: dict[int, float | None] = {}
        for o in orders:
            vals = [row.rel_err for row in rows if row.order == o and not math.isnan(row.rel_err)]
            worst[o] = max(vals) if vals else None
        out.append(OpSummary(
            op, len(cases),
            tuple(dict.fromkeys(r.case.dtype for r in cases)),
            tuple(dict.fromkeys(r.case.layout for r in cases)),
            len(rows), sum(not row.ok for row in rows), len(errors),
            sum(not row.ok for row in errors), worst,
            frozenset(row.order for row in rows if not row.ok)))
    return out


def render_summary(results: Sequence[CaseResult], console: Console | None = None,
                   seconds: float | None = None, failures: bool = True,
                   unchecked: Mapping[str, str] | None = None) -> None:
    """Print one row per op (its cases, checks, worst error per order, bad-argument calls
    and result; one screen for the default run) and per op not checked, why each was
    not, the failing checks in detail, and the summary line."""
    console = console or Console()
    orders = _orders(results)
    table = Table(title="parity: jaxpool vs torch.nn.functional", title_justify="left",
                  caption="order k: worst relative error of the op's k-th derivative checks "
                          "over its cases; errors: bad-argument calls on which both raise; "
                          "--detail: a row per case",
                  caption_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    table.add_column("op", no_wrap=True)
    table.add_column("cases", justify="right", no_wrap=True)
    table.add_column("checks", justify="right", no_wrap=True)
    for o in orders:
        table.add_column(f"order {o}", justify="right", no_wrap=True)
    table.add_column("errors", justify="right", no_wrap=True)
    table.add_column("result", no_wrap=True, min_width=6)
    bad = "bold red"
    for s in by_op(results):
        cells = [Text(_fmt(s.worst[o]), style=bad if o in s.failed_orders else "")
                 for o in orders]
        table.add_row(
            s.op, str(s.cases),
            Text(f"{s.checks - s.failed_checks}/{s.checks}", style=bad if s.failed_checks else ""),
            *cells,
            Text(f"{s.errors - s.failed_errors}/{s.errors}" if s.errors else "-",
                 style=bad if s.failed_errors else ""),
            Text("pass", style="green") if s.ok else Text("FAIL", style=bad))
    for op in unchecked or {}:
        table.add_row(op, "-", "-", *["-"] * len(orders), "-", Text(NOT_CHECKED, style="yellow"))
    console.print(table)
    console.print(_SHORT_NOTE, style="dim", highlight=False)
    _print_unchecked(console, unchecked)
    if failures:
        _print_failures(console, results)
    _summary_line(console, results, seconds, unchecked)


_SHORT_NOTE = ("Errors are normwise, max|jax - reference| / max|reference| over a check; "
               "each dtype's tolerance is in --detail, --markdown and --json.")


def render_table(results: Sequence[CaseResult], console: Console | None = None,
                 seconds: float | None = None, failures: bool = True,
                 unchecked: Mapping[str, str] | None = None) -> None:
    """Print a row per case (``--detail``) and per op not checked, why each was not, the
    failing checks in detail, and the summary line."""
    console = console or Console()
    orders = _orders(results)
    table = Table(title="parity: jaxpool vs torch.nn.functional", title_justify="left",
                  caption="order k: worst relative error of the k-th derivative checks",
                  caption_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    table.add_column("op", overflow="fold", min_width=8)
    table.add_column("case", overflow="fold", min_width=10, ratio=1)
    table.add_column("dtype", no_wrap=True)
    table.add_column("layout", no_wrap=True)
    for o in orders:
        table.add_column(f"order {o}", justify="right", no_wrap=True)
    table.add_column("result", no_wrap=True, min_width=6)
    previous_op = None
    for res in results:
        c = res.case
        if previous_op is not None and c.op != previous_op:
            table.add_section()
        cells = []
        errors_only = _errors_only(res)
        for o in orders:
            if errors_only:
                cells.append(Text("-"))
                continue
            v, ok = _worst(res, o)
            cells.append(Text(_fmt(v), style="" if ok else "bold red"))
        if errors_only:
            n = len(res.report.rows)
            cells[0] = Text(f"{n - len(res.report.failures)}/{n}",
                            style="" if res.ok else "bold red")
        result = Text("pass", style="green") if res.ok else Text("FAIL", style="bold red")
        op = c.op if c.op != previous_op else ""
        table.add_row(op, c.label, _SHORT_DTYPE.get(c.dtype, c.dtype), c.layout, *cells, result)
        previous_op = c.op
    for op, why in (unchecked or {}).items():
        table.add_section()
        table.add_row(op, f"{NOT_CHECKED}: {why}", "-", "-", *["-"] * len(orders),
                      Text(NOT_CHECKED, style="yellow"))
    console.print(table)
    console.print(TOLERANCE_NOTE, style="dim", highlight=False)
    _print_unchecked(console, unchecked)
    if failures:
        _print_failures(console, results)
    _summary_line(console, results, seconds, unchecked)


def _environment() -> dict:
    import jax
    import torch

    try:
        import jaxpool
        version = getattr(jaxpool, "__version__", "?")
    except ImportError:  # pragma: no cover
        version = None
    return {"python": platform.python_version(), "jax": jax.__version__,
            "torch": torch.__version__, "jaxpool": version, "machine": platform.machine()}


def to_json(results: Sequence[CaseResult], seconds: float | None = None,
            unchecked: Mapping[str, str] | None = None) -> str:
    """Everything: per case, per check errors and tolerances, the environment, and each op
    not checked with why (``"unchecked"``)."""
    doc = {
        "summary": {
            "ok": all(r.ok for r in results),
            "cases": len(results),
            "failed_cases": sum(not r.ok for r in results),
            "checks": sum(len(r.report.rows) for r in results),
            "failed_checks": sum(len(r.report.failures) for r in results),
            "seconds": seconds,
            "unchecked": list(unchecked or {}),
            "line": summary(results, seconds, unchecked),
        },
        "environment": _environment(),
        "tolerances": TOLERANCE_NOTE,
        "ops": [
            {"op": o.op, "ok": o.ok, "cases": o.cases, "dtypes": list(o.dtypes),
             "layouts": list(o.layouts), "checks": o.checks, "failed_checks": o.failed_checks,
             "error_calls": o.errors, "failed_error_calls": o.failed_errors,
             "worst_rel_err_by_order": {str(k): v for k, v in o.worst.items()}}
            for o in by_op(results)
        ],
        "unchecked": [{"op": op, "checked": False, "reason": why}
                      for op, why in (unchecked or {}).items()],
        "cases": [
            {
                "op": r.case.op,
                "case": r.case.label,
                "dtype": r.case.dtype,
                "layout": r.case.layout,
                "orders": r.case.orders,
                "ok": r.ok,
                "seconds": round(r.seconds, 3),
                "cpu_seconds": None if r.cpu_seconds is None else round(r.cpu_seconds, 3),
                "reference": r.report.reference,
                "rows": [row.to_dict() for row in r.report.rows],
            }
            for r in results
        ],
    }
    return json.dumps(doc, indent=2)


def to_markdown(results: Sequence[CaseResult], seconds: float | None = None,
                picture: str | None = None, unchecked: Mapping[str, str] | None = None) -> str:
    """A GitHub-flavoured Markdown table with the summary, the ops not checked and why, and
    failure details; ``picture``, the path of the ``--picture`` PNG relative to the report,
    is shown under the table."""
    orders = _orders(results)
    env = _environment()
    lines = [
        "# parity: jaxpool vs torch.nn.functional",
        "",
        f"**{summary(results, seconds, unchecked)}**",
        "",
        f"jax {env['jax']}, torch {env['torch']}, jaxpool {env['jaxpool']}, "
        f"Python {env['python']}.",
        "",
        "| op | cases | checks | " + " | ".join(f"order {o}" for o in orders)
        + " | errors | result |",
        "|---|---:|---:|" + "---:|" * len(orders) + "---:|---|",
    ]
    for o in by_op(results):
        cells = [_fmt(o.worst[k]) if k not in o.failed_orders else f"**{_fmt(o.worst[k])}**"
                 for k in orders]
        errors = f"{o.errors - o.failed_errors}/{o.errors}" if o.errors else "-"
        lines.append(f"| {o.op} | {o.cases} | {o.checks - o.failed_checks}/{o.checks} | "
                     + " | ".join(cells) + f" | {errors} | {'pass' if o.ok else '**FAIL**'} |")
    for op in unchecked or {}:
        lines.append(f"| {op} | - | - | " + " | ".join("-" for _ in orders)
                     + f" | - | {NOT_CHECKED} |")
    for op, why in (unchecked or {}).items():
        lines += ["", f"{op} {NOT_CHECKED}: {why}"]
    if picture:
        lines += ["", f"![worst error over its tolerance, per op and order]({picture})"]
    lines += [
        "",
        "## Every case",
        "",
        "| op | case | dtype | layout | " + " | ".join(f"order {o}" for o in orders) + " | result |",
        "|---|---|---|---|" + "---:|" * len(orders) + "---|",
    ]
    for res in results:
        c = res.case
        errors_only = all(r.name.startswith("raises") for r in res.report.rows)
        cells = []
        for order in orders:
            if errors_only:
                cells.append("-")
                continue
            v, ok = _worst(res, order)
            cells.append(_fmt(v) if ok else f"**{_fmt(v)}**")
        if errors_only:
            n = len(res.report.rows)
            cells[0] = f"{n - len(res.report.failures)}/{n}"
        label = c.label.replace("|", "\\|")
        lines.append(f"| {c.op} | `{label}` | {c.dtype} | {c.layout} | " + " | ".join(cells)
                     + f" | {'pass' if res.ok else '**FAIL**'} |")
    lines += ["", "order k: worst relative error of the k-th derivative checks. " + TOLERANCE_NOTE,
              ""]
    failed = [r for r in results if not r.ok]
    if failed:
        lines += ["## Failures", ""]
        for res in failed:
            lines += [f"### {res.case.key}", "", "```", res.report.format(failures_only=True),
                      "```", ""]
    return "\n".join(lines)
