"""A picture of the suite's results: per op and derivative order, the worst error over its
tolerance (below 1 passes), drawn from the JSON that ``--json`` writes.

matplotlib draws it and is not a dependency of ``parity``: it is imported only here, when
a picture is asked for. Draw one again from a saved run with
``python -m parity picture RESULTS.json PNG``.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
from typing import Any, Mapping, Sequence

__all__ = ["MISSING_MATPLOTLIB", "available", "error_ratios", "main", "write_picture"]

MISSING_MATPLOTLIB = "the picture needs matplotlib (pip install matplotlib)"
# The colour scale's ends: ratios beyond them take the end's colour (the cell shows the
# number). 1e-4 of the tolerance is as good as agreement gets in the colours.
LOW, HIGH = 1e-4, 1e2


def available() -> bool:
    """Whether matplotlib can be imported, so that a picture can be drawn."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _ratio(row: Mapping[str, Any]) -> float | None:
    """A check's error over its tolerance; None for a check that compared nothing (both
    sides nan, or both raised)."""
    err, tol = float(row["abs_err"]), float(row["tol"])
    if math.isnan(err):
        return None
    if tol > 0:
        return err / tol
    return 0.0 if err == 0 else math.inf  # exact results (indices, copies): tolerance 0


def error_ratios(doc: Mapping[str, Any]) -> tuple[list[str], list[int],
                                                   dict[tuple[str, int], tuple[float, bool]]]:
    """The ops (in the report's order), the derivative orders, and per op and order the
    largest error / tolerance over the op's cases and whether every such check passed."""
    worst: dict[tuple[str, int], tuple[float, bool]] = {}
    ops: dict[str, None] = {}
    orders: set[int] = set()
    for case in doc["cases"]:
        for row in case["rows"]:
            if row["name"].startswith("raises"):  # bad-argument calls: no error to compare
                continue
            ratio = _ratio(row)
            if ratio is None:
                continue
            key = (case["op"], int(row["order"]))
            ops[case["op"]] = None
            orders.add(key[1])
            before, ok = worst.get(key, (0.0, True))
            worst[key] = (max(before, ratio), ok and bool(row["ok"]))
    return list(ops), sorted(orders), worst


def _cell_text(ratio: float) -> str:
    if ratio == 0:
        return "0"
    if math.isinf(ratio):
        return "inf"
    return f"{ratio:.0e}".replace("e-0", "e-").replace("e+0", "e")


def write_picture(doc: Mapping[str, Any], path: str | pathlib.Path) -> None:
    """Draw the heat map of ``error_ratios(doc)`` (``doc``: the parsed ``--json`` output)
    into PNG ``path``. Raises ImportError with MISSING_MATPLOTLIB without matplotlib."""
    try:
        # A Figure of its own, not pyplot's: drawing leaves the caller's backend alone.
        from matplotlib.colors import LinearSegmentedColormap, LogNorm
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError(MISSING_MATPLOTLIB) from e
    import numpy as np

    ops, orders, worst = error_ratios(doc)
    if not ops:
        raise ValueError("no check with an error to draw (only bad-argument calls?)")
    errors = np.full((len(ops), len(orders)), np.nan)
    for (op, order), (ratio, _) in worst.items():
        errors[ops.index(op), orders.index(order)] = min(max(ratio, LOW), HIGH)
    fig = Figure(figsize=(1.2 + 0.75 * len(orders) + 1.6, 0.9 + 0.24 * len(ops)))
    ax = fig.subplots()
    # Greens below the tolerance, fading to pale yellow at it; reds above it: the colour
    # breaks where a check starts failing.
    at_one = math.log(1 / LOW) / math.log(HIGH / LOW)
    cmap = LinearSegmentedColormap.from_list("parity", [
        (0.0, "#004529"), (at_one / 2, "#41ab5d"), (at_one, "#ffffcc"),
        (min(at_one + 1e-3, 1.0), "#fd8d3c"), (1.0, "#800026")]).with_extremes(bad="#f2f2f2")
    norm = LogNorm(LOW, HIGH)
    image = ax.imshow(np.ma.masked_invalid(errors), cmap=cmap, norm=norm, aspect="auto")
    for (op, order), (ratio, ok) in worst.items():
        dark = not LOW * 30 < ratio < HIGH / 10  # white on the darkest greens and reds
        ax.text(orders.index(order), ops.index(op), _cell_text(ratio), ha="center", va="center",
                fontsize=6.5, fontweight="normal" if ok else "bold",
                color="white" if dark else "black")
    ax.set_xticks(range(len(orders)), [str(o) for o in orders], fontsize=8)
    ax.set_yticks(range(len(ops)), ops, fontsize=7)
    ax.set_xlabel("derivative order", fontsize=8)
    ax.tick_params(length=0)
    ax.xaxis.set_label_position("top")
    ax.xaxis.tick_top()
    bar = fig.colorbar(image, ax=ax, extend="both", fraction=0.12, pad=0.04)
    bar.ax.axhline(1.0, color="black", lw=1.5)
    bar.set_ticks([1e-4, 1e-2, 1, 1e2], labels=["1e-4", "1e-2", "1 = tolerance", "1e2"])
    bar.ax.tick_params(labelsize=7)
    cases = doc.get("summary", {}).get("cases")
    env = doc.get("environment", {})
    versions = ", ".join(f"{k} {env[k]}" for k in ("jaxpool", "jax", "torch") if env.get(k))
    ax.set_title("worst error / tolerance per op and order (below 1 passes)\n"
                 + ", ".join(t for t in (f"{cases} cases" if cases else "", versions) if t),
                 fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m parity picture RESULTS.json PNG``: the picture of a saved run."""
    p = argparse.ArgumentParser(
        prog="python -m parity picture",
        description="Draw the worst error / tolerance per op and derivative order from the "
                    "JSON of an earlier run (python -m parity --json RESULTS.json).")
    p.add_argument("results", type=pathlib.Path, metavar="RESULTS.json")
    p.add_argument("png", type=pathlib.Path, metavar="PNG")
    args = p.parse_args(argv)
    try:
        write_picture(json.loads(args.results.read_text()), args.png)
    except ImportError as e:
        print(f"parity: {e}", file=sys.stderr)
        return 2
    print(f"Picture written to {args.png}")
    return 0
