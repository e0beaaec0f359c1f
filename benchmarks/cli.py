"""Command line: check and time jaxpool against its peers, write a table and a chart."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
import time

from . import machine
from .cells.pooling import GRIDS, select
from .runner import MODES
from .sides import DEFAULT_SIDES, SIDE_NAMES

__all__ = ["chart_main", "main", "parse_args"]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Time jaxpool against torch, flax, keras and equinox, side by side and "
        "interleaved, on a grid of pooling cells; check every side's values against torch first.",
        epilog="python -m benchmarks chart RESULTS.json [PNG]: draw the chart of an earlier "
        "run's results.json again, without timing anything.",
    )
    p.add_argument("--grid", choices=sorted(GRIDS), default="short",
                   help="which cells: short (the default: one cell per kind of behaviour, a few "
                   "minutes on 2 cores), full (every cell, the record in BENCHMARKS.md), or "
                   "smoke (tiny shapes, a self-check)")
    p.add_argument("--full", action="store_true", help="the full grid (same as --grid full)")
    p.add_argument("--cells", default=None, metavar="REGEX",
                   help="only the cells whose label matches, e.g. 'adaptive.*-> 4'")
    p.add_argument("--modes", default=",".join(MODES),
                   help=f"comma-separated subset of {','.join(MODES)} (the eager ones: "
                   "first and repeat calls without jax.jit)")
    p.add_argument("--sides", default=",".join(DEFAULT_SIDES),
                   help=f"comma-separated subset of {','.join(SIDE_NAMES)} "
                   f"(default {','.join(DEFAULT_SIDES)})")
    p.add_argument("--reps", type=int, default=None,
                   help="samples per side and cell (default 15 on the full grid, else 5)")
    p.add_argument("--min-sample-ms", type=float, default=None,
                   help="each sample repeats the call to last at least this long "
                   "(default 20 on the full grid, else 5)")
    p.add_argument("--first-reps", type=int, default=3,
                   help="eager modes: first calls timed per JAX side, each after clearing "
                   "JAX's caches (default 3)")
    p.add_argument("--side-budget-s", type=float, default=None, metavar="S",
                   help="a side whose samples would take longer than this on one cell and mode "
                   "gets fewer of them, at least 3, and fewer first calls, at least 1 "
                   "(default 10 on the full grid, else 3)")
    p.add_argument("--time-limit-s", type=float, default=None, metavar="S",
                   help="start no new cell after this many seconds (the report says where it "
                   "stopped)")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: the cores this process may use)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench-results", metavar="DIR",
                   help="folder for results.md, results.json and chart.png (default bench-results)")
    p.add_argument("--markdown", default=None, metavar="FILE",
                   help="also put the table and chart between the bench markers of FILE "
                   "(appended if it has none), e.g. BENCHMARKS.md")
    p.add_argument("--section", default=None, metavar="NAME",
                   help="with --markdown, use the markers of section NAME "
                   "(<!-- benchmarks:NAME:begin/end -->), so one file can hold several runs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.full:
        args.grid = "full"
    full = args.grid == "full"
    if args.reps is None:
        args.reps = 15 if full else 5
    if args.min_sample_ms is None:
        args.min_sample_ms = 20 if full else 5
    if args.side_budget_s is None:
        args.side_budget_s = 10.0 if full else 3.0
    args.modes = _subset(p, "--modes", args.modes, MODES)
    args.sides = _subset(p, "--sides", args.sides, SIDE_NAMES)
    if args.reps < 1:
        p.error(f"--reps must be >= 1, got {args.reps}")
    if args.first_reps < 1:
        p.error(f"--first-reps must be >= 1, got {args.first_reps}")
    if args.min_sample_ms < 0:
        p.error(f"--min-sample-ms must be >= 0, got {args.min_sample_ms}")
    return args


def _subset(p, flag, text, allowed):
    items = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in items if s not in allowed]
    if bad or not items:
        p.error(f"{flag} takes a comma-separated subset of {','.join(allowed)}, got {text!r}")
    return tuple(s for s in allowed if s in items)


class _Progress:
    """A rich progress bar over the timing repetitions; one line per step when not on a terminal."""

    def __init__(self, total: int, enabled: bool):
        self.bar = None
        self.lines = enabled and not sys.stderr.isatty()
        self.t0 = time.perf_counter()
        if enabled and not self.lines:
            try:
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TextColumn,
                    TimeElapsedColumn,
                    TimeRemainingColumn,
                )
            except ImportError:
                return
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TimeRemainingColumn(), transient=False)
            self.task = self.bar.add_task("starting", total=total)

    def __enter__(self):
        if self.bar:
            self.bar.start()
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.stop()

    def status(self, text: str):
        if self.bar:
            self.bar.update(self.task, description=text)
        elif self.lines and text.endswith("timing"):
            print(f"[{time.perf_counter() - self.t0:6.0f} s] {text}", file=sys.stderr, flush=True)

    def tick(self):
        if self.bar:
            self.bar.advance(self.task)


def _environment() -> str:
    """Settings from the environment that change what the run measures, as a command prefix."""
    keys = ("GLIBC_TUNABLES", "XLA_FLAGS")
    return "".join(f"{k}={shlex.quote(os.environ[k])} " for k in keys if os.environ.get(k))


def chart_main(argv=None) -> int:
    """``python -m benchmarks chart RESULTS.json [PNG]``: the chart of a run already made."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks chart",
        description="Draw the chart of jaxpool's time over the fastest correct peer's, per "
        "cell and mode, from the results.json of an earlier run.",
    )
    p.add_argument("results", metavar="RESULTS.json", help="a results.json the tool wrote")
    p.add_argument("png", nargs="?", default=None, metavar="PNG",
                   help="where to write the chart (default: chart.png beside RESULTS.json)")
    args = p.parse_args(argv)
    from . import report

    with open(args.results) as f:
        data = json.load(f)
    png = args.png or os.path.join(os.path.dirname(args.results), "chart.png")
    try:
        report.chart(data["results"], png, data.get("meta"))
    except ImportError as exc:
        print(f"no chart: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {png}")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["chart"]:
        return chart_main(argv[1:])
    args = parse_args(argv)
    started = time.perf_counter()
    cases = select(GRIDS[args.grid], args.cells)
    if not cases:
        print(f"no cell of the {args.grid} grid matches {args.cells!r}", file=sys.stderr)
        return 2

    from . import report
    from .runner import Device, run_case
    from .sides import missing_reason

    try:
        device = Device(args.device, args.threads)
    except RuntimeError as exc:  # JAX has no backend for the device
        print(f"no {args.device} device: {exc}", file=sys.stderr)
        return 2
    sides = {s: missing_reason(s) for s in args.sides}
    if device.torch_missing and sides.get("torch") is None and "torch" in sides:
        sides["torch"] = device.torch_missing
    if args.device == "gpu" and "torch-1t" in sides:
        sides["torch-1t"] = "CPU threads only"
    if sides.get("jaxpool"):
        print(f"warning: jaxpool cannot run: {sides['jaxpool']}", file=sys.stderr)
    for s, why in sides.items():
        if why and s != "jaxpool":
            print(f"skipping {s}: {why}", file=sys.stderr)

    results, stopped = [], None
    total = len(cases) * len(args.modes) * args.reps
    with _Progress(total, not args.no_progress) as progress:
        for i, case in enumerate(cases):
            if i and args.time_limit_s and time.perf_counter() - started > args.time_limit_s:
                stopped = (f"stopped at the time limit ({args.time_limit_s:g} s) after {i} of "
                           f"{len(cases)} cells")
                print(stopped, file=sys.stderr)
                break
            results += run_case(case, sides, device, modes=args.modes, reps=args.reps,
                                min_sample_s=args.min_sample_ms / 1e3, seed=args.seed,
                                budget_s=args.side_budget_s, first_reps=args.first_reps,
                                status=progress.status, tick=progress.tick)

    meta = {
        "date": datetime.date.today().isoformat(),
        "machine": machine.describe(args.device, device.jax_device),
        "device": args.device,
        "torch_threads": device.threads,
        "versions": machine.versions(),
        "command": _environment() + shlex.join(["python", "-m", "benchmarks", *argv]),
        "reps": args.reps,
        "min_sample_ms": args.min_sample_ms,
        "first_reps": args.first_reps,
        "side_budget_s": args.side_budget_s,
        "elapsed_s": time.perf_counter() - started,
        "stopped": stopped,
    }
    os.makedirs(args.out, exist_ok=True)
    chart_file = os.path.join(args.out, "chart.png")
    try:
        report.chart(results, chart_file, meta)
    except ImportError as exc:  # matplotlib is optional: the tables are the record
        print(f"no chart: {exc}", file=sys.stderr)
        chart_file = None
    report.write_json(results, meta, os.path.join(args.out, "results.json"))
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(report.markdown(results, meta, chart_file and "chart.png"))
    if args.markdown:
        rel = chart_file and os.path.relpath(chart_file, os.path.dirname(os.path.abspath(args.markdown)))
        report.splice(args.markdown, report.markdown(results, meta, rel and rel.replace(os.sep, "/")),
                      *report.markers(args.section))
    print(report.markdown(results, meta, None))
    print(f"wrote {os.path.join(args.out, 'results.md')}, results.json"
          + (" and chart.png" if chart_file else "")
          + (f"; updated {args.markdown}" if args.markdown else ""))
    return 0
