"""Cells timed in three quantities, jitted, each JAX side against torch's autograd in the
same process: the forward, the gradient of ``sum(y**2)`` in the differentiated inputs, and
the second derivative (the gradient of the squared input-gradient norm, an R1 penalty).

A :class:`Cell` holds its inputs (differentiated), its constants (not differentiated) and
each side's function of them; :func:`run` checks every side's values against torch's
(float32), and each JAX peer's against jaxpool's, before it times them (a wrong side
raises); :func:`table` is the markdown table. The patches cells
(:mod:`benchmarks.cells.patches`) and the roi_align cells (:mod:`benchmarks.cells.roi`)
are such cells.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from benchmarks.runner import check, measure

__all__ = ["MODES", "Cell", "jax_modes", "run", "table", "torch_modes"]

MODES = ("fwd", "grad", "second")


@dataclasses.dataclass(frozen=True)
class Cell:
    """A benchmark cell: what it is in words, the differentiated inputs' values, the
    constant ones', and each side's function ``f(inputs, constants)`` (tuples of arrays)
    of JAX arrays (``jax``) and of torch tensors (``torch``)."""

    words: str
    inputs: tuple
    constants: tuple
    jax: dict
    torch: Callable


def jax_modes(f):
    """The three quantities of ``f(inputs, constants)`` of JAX arrays, in the inputs."""
    import jax
    import jax.numpy as jnp

    def grad(xs, cs):
        return jax.grad(lambda xs: jnp.sum(jnp.square(f(xs, cs))))(xs)

    def second(xs, cs):
        return jax.grad(lambda xs: sum(jnp.sum(jnp.square(g)) for g in grad(xs, cs)))(xs)

    return {"fwd": f, "grad": grad, "second": second}


def torch_modes(f, xs, cs):
    """Thunks computing the same three quantities with torch autograd (a list each)."""
    import torch

    def fwd():
        with torch.no_grad():
            return [f(xs, cs)]

    def grad(create_graph=False):
        leaves = tuple(x.detach().requires_grad_(True) for x in xs)
        y = f(leaves, cs)
        return leaves, torch.autograd.grad(y.square().sum(), leaves, create_graph=create_graph)

    def second():
        leaves, gs = grad(create_graph=True)
        return list(torch.autograd.grad(sum(g.square().sum() for g in gs), leaves))

    return {"fwd": fwd, "grad": lambda: list(grad()[1]), "second": second}


def run(names, reps: int, min_sample_s: float, budget_s: float | None = None, *,
        built: dict[str, Callable[[], Cell]], modes=MODES) -> list[dict]:
    """Check, then time every side of the cells ``names`` of ``built`` (name -> a function
    building the cell) in ``modes``: one dict per cell and quantity, ``{"cell",
    "quantity", "words", "sides": {side: measure's stats}}``."""
    import jax
    import jax.numpy as jnp
    import torch

    out = []
    for name in names:
        cell = built[name]()
        xs = tuple(jnp.asarray(a, jnp.float32) for a in cell.inputs)
        cs = tuple(jnp.asarray(a, jnp.float32) for a in cell.constants)
        xt = tuple(torch.tensor(a, dtype=torch.float32) for a in cell.inputs)
        ct = tuple(torch.tensor(a, dtype=torch.float32) for a in cell.constants)
        torch_side = torch_modes(cell.torch, xt, ct)
        for quantity in modes:
            want = [w.detach().numpy().astype(np.float64) for w in torch_side[quantity]()]
            fns, first = {}, None
            for side, f in cell.jax.items():
                fn = jax.jit(jax_modes(f)[quantity])
                got = [np.asarray(g) for g in jax.tree_util.tree_leaves(fn(xs, cs))]
                wrong = [check(a, b, "float32") for a, b in zip(got, want)]
                if first is not None:  # a peer against jaxpool's values too
                    wrong += [check(a, b.astype(np.float64), "float32")
                              for a, b in zip(got, first)]
                if len(got) != len(want) or any(wrong):
                    raise AssertionError(f"{side} {name} {quantity}: {wrong}")
                first = got if first is None else first
                fns[side] = lambda fn=fn, xs=xs, cs=cs: jax.block_until_ready(fn(xs, cs))
                del got
            del want, first
            fns["torch"] = torch_side[quantity]
            out.append({"cell": name, "quantity": quantity, "words": cell.words,
                        "sides": measure(fns, reps, min_sample_s, budget_s=budget_s)})
    return out


def _ms(stats) -> str:
    m = stats["median_ms"]
    spread = (stats["q75_ms"] - stats["q25_ms"]) / 2
    digits = 3 if m < 1 else 2 if m < 10 else 1 if m < 100 else 0
    return f"{m:.{digits}f} ±{spread:.{digits}f}"


def table(results: list[dict]) -> str:
    """The markdown table: one row per cell and quantity, a column per side."""
    lines = [("| cell | quantity | jaxpool ms | JAX peer | JAX peer ms | torch ms | "
              "jaxpool / fastest peer |"), "|---|---|---:|---|---:|---:|---:|"]
    previous = None
    for r in results:
        sides = r["sides"]
        peer = next(s for s in sides if s not in ("jaxpool", "torch"))
        fastest = min(sides[s]["median_ms"] for s in sides if s != "jaxpool")
        new = r["cell"] != previous  # a cell's words and peer on its first row only
        previous = r["cell"]
        lines.append(f"| {r['words'] if new else ''} | {r['quantity']} | "
                     f"{_ms(sides['jaxpool'])} | {peer if new else ''} | "
                     f"{_ms(sides[peer])} | {_ms(sides['torch'])} | "
                     f"{sides['jaxpool']['median_ms'] / fastest:.2f} |")
    return "\n".join(lines)


def sides_table(results: list[dict]) -> str:
    """The markdown table: one row per cell and quantity, a column per side; the ratio is
    jaxpool's median over the fastest peer's (every side not named ``jaxpool...``), and
    each other jaxpool side's (``jaxpool-sorted``: the GPU table's adding) too."""
    sides = list(results[0]["sides"]) if results else ["jaxpool", "torch"]
    ours = [s for s in sides if s.startswith("jaxpool")]
    peers = [s for s in sides if s not in ours]
    columns = ours + peers
    head = "| cell | quantity | " + " | ".join(f"{s} ms" for s in columns) + " | " + \
        " | ".join(f"{s} / fastest peer" for s in ours) + " |"
    lines = [head, "|---|---|" + "---:|" * (len(columns) + len(ours))]
    previous = None
    for r in results:
        t = r["sides"]
        fastest = min(t[s]["median_ms"] for s in peers)
        words = r["words"] if r["cell"] != previous else ""
        previous = r["cell"]
        lines.append(f"| {words} | {r['quantity']} | "
                     + " | ".join(_ms(t[s]) for s in columns) + " | "
                     + " | ".join(f"{t[s]['median_ms'] / fastest:.2f}" for s in ours) + " |")
    return "\n".join(lines)


def cells_main(prog: str, description: str, cells: Callable[[bool], dict],
               default_cells: tuple, argv=None) -> int:
    """The command line of a cells module timed as a sides table: ``--cells``,
    ``--quantities``, the timing settings and ``--sorted`` (``cells(sorted_side)`` builds
    the cells, with a ``jaxpool-sorted`` side where asked)."""
    import argparse
    import datetime

    from benchmarks.machine import describe, versions

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--cells", default=",".join(default_cells),
                        help="comma-separated (default %(default)s)")
    parser.add_argument("--quantities", default=",".join(MODES),
                        help="comma-separated of %(default)s")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--min-sample-s", type=float, default=0.05)
    parser.add_argument("--budget-s", type=float, default=30.0)
    parser.add_argument("--sorted", action="store_true",
                        help="also jaxpool with the GPU table's adding")
    args = parser.parse_args(argv)
    built = cells(args.sorted)
    names = [n for n in args.cells.split(",") if n]
    unknown = [n for n in names if n not in built]
    if unknown:
        parser.error(f"--cells: unknown {unknown}; known {sorted(built)}")
    modes = tuple(q for q in args.quantities.split(",") if q)
    if set(modes) - set(MODES):
        parser.error(f"--quantities: a comma-separated subset of {MODES}")
    results = run(names, args.reps, args.min_sample_s, args.budget_s, built=built, modes=modes)
    print(f"{datetime.date.today()}, {describe()}, {versions()}; median ms per call "
          "± half the interquartile range, float32")
    print()
    print(sides_table(results))
    return 0
