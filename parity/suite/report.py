"""Rendering suite results: a rich table for the terminal, JSON and Markdown for sharing."""

from __future__ import annotations

import json
import math
import platform
from typing import Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..tolerances import TOLERANCE_NOTE
from .grid import CaseResult

__all__ = ["TOLERANCE_NOTE", "summary", "render_table", "to_json", "to_markdown"]


def _orders(results: Sequence[CaseResult]) -> list[int]:
    return sorted({r.order for res in results for r in res.report.rows})


def summary(results: Sequence[CaseResult], seconds: float | None = None) -> str:
    """One line: how many cases and checks passed, and how long it took."""
    n_cases = len(results)
    n_failed = sum(not r.ok for r in results)
    n_checks = sum(len(r.report.rows) for r in results)
    n_checks_failed = sum(len(r.report.failures) for r in results)
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    if not n_failed:
        return f"PASS: {n_cases} cases, {n_checks} checks, all agree with torch{took}"
    return (f"FAIL: {n_failed} of {n_cases} cases ({n_checks_failed} of {n_checks} checks) "
            f"disagree with torch{took}")


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


def render_table(results: Sequence[CaseResult], console: Console | None = None,
                 seconds: float | None = None, failures: bool = True) -> None:
    """Print the results table, the failing checks in detail, and the summary line."""
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
        errors_only = all(r.name.startswith("raises") for r in res.report.rows)
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
    console.print(table)
    console.print(TOLERANCE_NOTE, style="dim", highlight=False)
    if failures:
        for res in results:
            if not res.ok:
                console.print(f"\n{res.case.key}", style="bold red", markup=False,
                              highlight=False)
                console.print(res.report.format(failures_only=True), markup=False,
                              highlight=False)
    console.print(summary(results, seconds), highlight=False,
                  style="bold green" if all(r.ok for r in results) else "bold red")


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


def to_json(results: Sequence[CaseResult], seconds: float | None = None) -> str:
    """Everything: per case, per check errors and tolerances, plus the environment."""
    doc = {
        "summary": {
            "ok": all(r.ok for r in results),
            "cases": len(results),
            "failed_cases": sum(not r.ok for r in results),
            "checks": sum(len(r.report.rows) for r in results),
            "failed_checks": sum(len(r.report.failures) for r in results),
            "seconds": seconds,
            "line": summary(results, seconds),
        },
        "environment": _environment(),
        "tolerances": TOLERANCE_NOTE,
        "cases": [
            {
                "op": r.case.op,
                "case": r.case.label,
                "dtype": r.case.dtype,
                "layout": r.case.layout,
                "orders": r.case.orders,
                "ok": r.ok,
                "seconds": round(r.seconds, 3),
                "reference": r.report.reference,
                "rows": [row.to_dict() for row in r.report.rows],
            }
            for r in results
        ],
    }
    return json.dumps(doc, indent=2)


def to_markdown(results: Sequence[CaseResult], seconds: float | None = None) -> str:
    """A GitHub-flavoured Markdown table with the summary and failure details."""
    orders = _orders(results)
    env = _environment()
    lines = [
        "# parity: jaxpool vs torch.nn.functional",
        "",
        f"**{summary(results, seconds)}**",
        "",
        f"jax {env['jax']}, torch {env['torch']}, jaxpool {env['jaxpool']}, "
        f"Python {env['python']}.",
        "",
        "| op | case | dtype | layout | " + " | ".join(f"order {o}" for o in orders) + " | result |",
        "|---|---|---|---|" + "---:|" * len(orders) + "---|",
    ]
    for res in results:
        c = res.case
        errors_only = all(r.name.startswith("raises") for r in res.report.rows)
        cells = []
        for o in orders:
            if errors_only:
                cells.append("-")
                continue
            v, ok = _worst(res, o)
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
