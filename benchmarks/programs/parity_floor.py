"""What a first run of ``python -m parity`` costs, and how much of it no op can remove.

Each case of the report's default grid runs twice through ``parity.compare``, in one process,
with nothing stored (every program traced and compiled): once as the report runs it, and
once with both sides replaced by negation of the same float inputs (the same inputs,
dtypes, orders of derivative and checks, around an op whose derivatives are trivial;
none where the case is one on which both sides must raise). The
second is the floor: what tracing and compiling the checks' own programs costs, which
no pooling rule can make smaller. Runs alternate, case by case, so both see the same
machine.

Run from the repository root:

    python -m benchmarks.programs.parity_floor              # every case: 6 minutes on 2 cores
    python -m benchmarks.programs.parity_floor --every 3    # every third case

Prints seconds of CPU (this process's user and system time) and of wall clock, by op and
in all.
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np


def _negate(*inputs):
    return [-a for a in inputs if _is_float(a)]


def _is_float(a) -> bool:
    from parity.tolerances import is_float

    if hasattr(a, "is_floating_point"):  # a torch tensor
        return a.is_floating_point()
    return hasattr(a, "dtype") and is_float(a.dtype)


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    report = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, report


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def run(every: int, ops: set[str] | None) -> list[str]:
    from parity import compare
    from parity.suite import cases as suite_cases

    cases = [c for c in suite_cases.quick_cases() if not isinstance(c, suite_cases.ErrorCase)
             and (ops is None or c.op in ops)][::every]
    suite_cases.run_case(cases[0])  # imports and first-call set-up, not counted
    totals = collections.defaultdict(lambda: np.zeros(4))  # wall, cpu: case, floor
    failed = []
    for case in cases:
        jax_fn, torch_fn = case.functions()
        inputs = case.inputs()
        real = _timed(lambda: compare(jax_fn, torch_fn, *inputs, orders=case.orders,
                                      seed=case.seed))
        if not real[2].ok:  # a disagreement is the report's business; its cost is not the floor's
            failed.append(case)
            continue
        floor = (0.0, 0.0)
        if not all(row.note.startswith("both raised") for row in real[2].rows):
            floor = _timed(lambda: compare(_negate, _negate, *inputs, orders=case.orders,
                                           seed=case.seed))
            if not floor[2].ok:
                raise AssertionError(f"{case.key}: the floor fails")
        totals[case.op] += (real[0], real[1], floor[0], floor[1])

    lines = ["| op | cases | case CPU s | floor CPU s | floor share | case wall s | floor wall s |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    counts = collections.Counter(c.op for c in cases if c not in failed)
    for op in sorted(totals, key=lambda o: -totals[o][1]):
        wall, cpu, floor_wall, floor_cpu = totals[op]
        lines.append(f"| {op} | {counts[op]} | {cpu:.1f} | {floor_cpu:.1f} | "
                     f"{_share(floor_cpu, cpu)} | {wall:.1f} | {floor_wall:.1f} |")
    wall, cpu, floor_wall, floor_cpu = sum(totals.values())
    lines.append(f"| all | {len(cases)} | {cpu:.1f} | {floor_cpu:.1f} | {_share(floor_cpu, cpu)} "
                 f"| {wall:.1f} | {floor_wall:.1f} |")
    lines += [f"left out, since it fails: {c.key}" for c in failed]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.programs.parity_floor",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=int, default=1, metavar="N",
                        help="run every N-th case of the default run (default: all)")
    parser.add_argument("--op", default=None,
                        help="comma-separated ops to run (default: every op)")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error(f"--every must be at least 1, got {args.every}")
    ops = None if args.op is None else set(args.op.split(","))
    print("\n".join(run(args.every, ops)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
