"""``python -m parity``: check every jaxpool op against torch, values and derivatives to order 3.

Exit status 0 only if every check passed (1 if any failed, 2 for bad arguments); an op whose
torch twin does not load here (roi_align without torchvision's compiled ops) is named in
the report as not checked, with why, and fails nothing. The cases run in one process per
CPU (this one and workers), and the compiled programs and torch's results are kept in a
per-user cache directory between runs (``--no-cache`` to compute everything afresh).
``python -m parity picture RESULTS.json PNG`` draws the picture of a saved ``--json`` run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys
import time

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from . import cases as suite
from . import picture as picture_mod
from . import report as report_mod
from . import runner
from .ops import OPS


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m parity",
        description="Check jaxpool against torch.nn.functional: forward values and "
                    "derivatives to order 3, every op, dtype and layout.",
        epilog="python -m parity picture RESULTS.json PNG: draw the picture of an earlier "
               "run's --json results again, without running the cases.",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--quick", action="store_true",
                      help="the default run: each op's argument sets once each, in every "
                           "dtype and both layouts taken in turn, derivatives to order 3 in "
                           "float64 and float32 and to order 2 in float16 and bfloat16 "
                           "(about 110 s of CPU from nothing stored, shared by one process "
                           "per CPU)")
    which.add_argument("--full", action="store_true",
                      help="every argument set in every dtype, the main ones in both "
                           "layouts, every one in both in float64 (a long sweep)")
    p.add_argument("--op", action="append", metavar="OP",
                   help=f"only these ops (repeat or comma-separate): {', '.join(OPS)}")
    p.add_argument("--dtype", action="append", metavar="DTYPE",
                   help=f"only these dtypes: {', '.join(suite.DTYPES)}")
    p.add_argument("--layout", choices=("first", "last"), help="only this layout")
    p.add_argument("--orders", type=int, default=None, metavar="N",
                   help="highest derivative order of every case with derivatives (default: "
                        "3, and 2 for float16 and bfloat16 in the default run)")
    p.add_argument("--detail", action="store_true",
                   help="print a row per case (default: a row per op)")
    p.add_argument("--json", type=pathlib.Path, metavar="PATH",
                   help="write results as JSON (every case and check)")
    p.add_argument("--markdown", type=pathlib.Path, metavar="PATH",
                   help="write results as a Markdown report (a row per op, then per case) "
                        "that shows the --picture PNG (default: PATH with the suffix .png, "
                        "when matplotlib is installed)")
    p.add_argument("--picture", type=pathlib.Path, metavar="PATH",
                   help="draw a PNG of the worst error / tolerance per op and derivative "
                        "order (needs matplotlib)")
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="processes running cases: this one and N - 1 workers (default: one "
                        f"per CPU, here {runner.default_jobs()})")
    cache = p.add_mutually_exclusive_group()
    cache.add_argument("--cache-dir", type=pathlib.Path, default=runner.default_cache_dir(),
                       metavar="DIR",
                       help="keep the compiled programs and torch's results in DIR between runs "
                            "(default: %(default)s)")
    cache.add_argument("--no-cache", action="store_true",
                       help="trace and compile every program and compute torch's side afresh, "
                            "and keep none")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    return p


def select_cases(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list:
    """The cases the arguments ask for, but those of the ops that cannot be checked here
    (``unchecked``)."""
    ops = _split(args.op)
    dtypes = _split(args.dtype)
    for op in ops or []:
        if op not in OPS:
            parser.error(f"--op: unknown op {op!r}; choose from {', '.join(OPS)}")
    for dt in dtypes or []:
        if dt not in suite.DTYPES:
            parser.error(f"--dtype: unknown dtype {dt!r}; choose from {', '.join(suite.DTYPES)}")
    if args.orders is not None and args.orders < 0:
        parser.error(f"--orders must be >= 0, got {args.orders}")
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    if args.full:
        cases = suite.full_cases(ops, dtypes)
        if args.layout:
            cases = [c for c in cases if c.layout in (args.layout, "-")]
    else:
        # The default run takes the layouts in turn: one layout gets every argument set.
        cases = suite.quick_cases(ops, dtypes, [args.layout] if args.layout else None)
    skipped = suite.unchecked(ops)
    cases = [c for c in cases if c.op not in skipped]
    if args.orders is not None:
        # values-only cases stay values only
        cases = [dataclasses.replace(c, orders=args.orders if c.orders else 0)
                 if isinstance(c, suite.Case) else c for c in cases]
    return cases


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["picture"]:
        return picture_mod.main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.picture and not picture_mod.available():
        parser.error(f"--picture: {picture_mod.MISSING_MATPLOTLIB}")
    console = Console(width=None if sys.stdout.isatty() else 160)
    cases = select_cases(args, parser)
    unchecked = suite.unchecked(_split(args.op))
    if args.list:
        for c in cases:
            console.print(c.key, markup=False, highlight=False)
        for op, why in unchecked.items():
            console.print(f"{op} {report_mod.NOT_CHECKED}: {why}", markup=False,
                          highlight=False)
        return 0
    try:
        import jaxpool  # noqa: F401
    except ImportError as e:
        console.print(f"parity: cannot import jaxpool ({e}); install it first", style="red")
        return 2
    t0 = time.perf_counter()
    progress = Progress(
        SpinnerColumn(), BarColumn(bar_width=24), MofNCompleteColumn(),
        TextColumn("{task.fields[failed]}", style="bold red"), TimeElapsedColumn(),
        TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.description}", style="dim"),
        console=console, transient=True, disable=args.no_progress,
    )
    with progress:
        task = progress.add_task("", total=len(cases), failed="")
        failed = 0

        def done(res: suite.CaseResult) -> None:
            nonlocal failed
            failed += not res.ok
            progress.update(task, advance=1, description=res.case.key,
                            failed=f"{failed} failed" if failed else "")

        results = runner.run_cases(cases, args.jobs or runner.default_jobs(),
                         None if args.no_cache else args.cache_dir, done)
    seconds = time.perf_counter() - t0

    render = report_mod.render_table if args.detail else report_mod.render_summary
    render(results, console, seconds, unchecked=unchecked)
    doc = report_mod.to_json(results, seconds, unchecked)
    if args.json:
        args.json.write_text(doc)
        console.print(f"JSON written to {args.json}")
    picture = args.picture
    if picture is None and args.markdown:
        if picture_mod.available():
            picture = args.markdown.with_suffix(".png")
        else:  # the report is complete without it
            console.print(f"no picture: {picture_mod.MISSING_MATPLOTLIB}", style="dim")
    if picture:
        picture_mod.write_picture(json.loads(doc), picture)
        console.print(f"Picture written to {picture}")
    if args.markdown:
        shown = picture and pathlib.Path(os.path.relpath(picture, args.markdown.parent)).as_posix()
        args.markdown.write_text(report_mod.to_markdown(results, seconds, shown or None,
                                                        unchecked))
        console.print(f"Markdown written to {args.markdown}")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
