"""What ``compare_layers`` returns: one ``LayerRow`` per compared weight, output and
gradient, gathered in a ``ModelReport`` (a table, a dict, the first divergence)."""

from __future__ import annotations

import dataclasses
import io
import math
from typing import Literal

from .results import ParityError, fmt

__all__ = ["KINDS", "LayerRow", "ModelReport"]

# row kind -> how the table shows it
KINDS = {"weight": "weight", "input": "in", "output": "out", "gradient": "grad",
         "input gradient": "in-grad"}
BY_POSITION = "*"  # marks a row whose calls were paired by position


@dataclasses.dataclass
class LayerRow:
    """One compared array: a Flax leaf against torch's tensor (``kind="weight"``), a layer's
    input as the port computed it in shadow mode, what the code between two layers (an
    attention block's own arithmetic) gives (``"input"``), a layer's output (``"output"``), a parameter's gradient (``"gradient"``) or the gradient at a
    layer's input, what its backward returns (``"input gradient"``; the model's own row is
    the gradient with respect to the input).

    ``abs_err``/``rel_err``: JAX against torch, or, where the comparison has a float64
    reference, against torch run in float64 on the same numbers; then ``ref_err`` is torch's
    own error against that reference.

    ``by_position``: (torch type, Flax type) where the two calls were paired by their
    position alone (one call left over on each side between the same pairs, with the same
    shapes; see ``parity.pairing``), None otherwise. ``unpaired_before``: (torch module
    names, Flax module paths) left unpaired that ran right before this row's calls: before
    them for an output, after them (backpropagation's order) for a gradient."""

    kind: str
    torch_name: str
    flax_path: str
    shape: tuple[int, ...]  # torch's shape
    abs_err: float
    rel_err: float
    tol: float
    ok: bool
    note: str = ""
    detail: str = ""
    ref_err: float | None = None
    by_position: tuple[str, str] | None = None
    unpaired_before: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["shape"] = list(self.shape)
        d["by_position"] = (None if self.by_position is None else
                            dict(zip(("torch", "flax"), self.by_position)))
        d["unpaired_before"] = {side: list(names) for side, names
                                in zip(("torch", "flax"), self.unpaired_before)}
        for k in ("abs_err", "rel_err", "tol", "ref_err"):
            if d[k] is not None and not math.isfinite(d[k]):
                d[k] = str(d[k])
        return d


@dataclasses.dataclass
class ModelReport:
    """Outcome of ``compare_layers``: rows (the weights, the outputs in the order the layers
    return, the gradients in the order backpropagation computes them), the first that
    fails, and the modules of each side that have no counterpart (not compared).

    ``mode``: "chained" (each side runs on its own outputs, errors accumulate) or "shadow"
    (each Flax layer takes torch's recorded input and output cotangent: a row is that
    layer's own error). ``reference``: "torch" (compared directly) or "torch float64" (a
    low-precision run judged against torch in float64, next to torch's own error)."""

    rows: list[LayerRow]
    dtype: str
    train: bool
    unpaired_torch: list[str] = dataclasses.field(default_factory=list)
    unpaired_flax: list[str] = dataclasses.field(default_factory=list)
    mode: str = "chained"
    reference: str = "torch"
    alignment: str = ""  # what was paired, by which signal, and what was left (printable)
    # output leaves of paired calls that one side returns alone: "<call><leaf> (side,
    # shape): why" (not compared)
    one_sided: list[str] = dataclasses.field(default_factory=list)
    port: str = "Flax"  # what the port is written in: "Flax" or "Equinox"
    # rows not compared because the array's layout cannot be told: "<kind> of <torch> /
    # <port> (shape)"
    untold: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    def __bool__(self) -> bool:
        return self.ok

    @property
    def first_divergence(self) -> LayerRow | None:
        return next((r for r in self.rows if not r.ok), None)

    def to_dict(self) -> dict:
        first = self.first_divergence
        return {"ok": self.ok, "dtype": self.dtype, "train": self.train, "mode": self.mode,
                "reference": self.reference,
                "first_divergence": None if first is None else first.to_dict(),
                "rows": [r.to_dict() for r in self.rows],
                "unpaired_torch": self.unpaired_torch, "unpaired_flax": self.unpaired_flax,
                "one_sided": self.one_sided, "untold": self.untold}

    def _title(self) -> str:
        mode = "train" if self.train else "eval"
        against = ("" if self.reference == "torch" else
                   f", judged against torch in float64")
        return (f"parity: torch vs {self.port}, layer by layer ({self.dtype}, {mode} mode, "
                f"{self.mode}{against})")

    def table(self, gradients: bool = True):
        """A rich Table; the first divergence is marked."""
        from rich import box
        from rich.table import Table
        from rich.text import Text

        first = self.first_divergence
        table = Table(title=self._title(), title_justify="left", box=box.SIMPLE_HEAD,
                      pad_edge=False)
        columns: list[tuple[str, Literal["left", "right"]]] = [
            ("", "left"), ("torch", "left"), (self.port.lower(), "left"), ("shape", "left"),
            ("max abs err", "right"), ("max rel err", "right")]
        if self.reference != "torch":
            columns.append(("torch's err", "right"))
        columns += [("tolerance", "right"), ("result", "left")]
        for name, justify in columns:
            table.add_column(name, justify=justify, no_wrap=True)
        section = None
        for r in self.rows:
            if _hidden(r, gradients, first):
                continue
            group = "gradient" if r.kind.endswith("gradient") else r.kind
            if section is not None and group != section:
                table.add_section()
            section = group
            result = (Text("ok", style="green") if r.ok else
                      Text("FAIL <- first divergence" if r is first else "FAIL",
                           style="bold red"))
            mark = f" {BY_POSITION}" if r.by_position else ""
            cells = [KINDS.get(r.kind, r.kind), (r.torch_name or "(model)") + mark,
                     (r.flax_path or "(model)") + mark, "x".join(map(str, r.shape)) or "scalar",
                     fmt(r.abs_err), fmt(r.rel_err)]
            if self.reference != "torch":
                cells.append(fmt(r.ref_err))
            table.add_row(*cells, fmt(r.tol), result, style="bold" if r is first else None)
        return table

    def __rich__(self):
        return self.table()

    def _counts(self) -> str:
        n = {k: sum(r.kind == k for r in self.rows) for k in KINDS}
        parts = [f"{n['weight']} weights", f"{n['input']} layer inputs",
                 f"{n['output']} layer outputs",
                 f"{n['gradient']} gradients", f"{n['input gradient']} input gradients"]
        return ", ".join(p for p in parts if not p.startswith("0 "))

    def summary(self) -> str:
        first = self.first_divergence
        mode = "train" if self.train else "eval"
        if first is None:
            worst = _worst_share(r for r in self.rows if r.kind != "weight")
            return (f"PASS: {self._counts()} agree with torch ({self.dtype}, {mode} mode, "
                    f"{self.mode}; worst error / tolerance {worst:.1e})")
        n_fail = sum(not r.ok for r in self.rows)
        return (f"FAIL: {n_fail} of {len(self.rows)} rows disagree ({self.dtype}, "
                f"{self.mode}); first divergence: {_where(first, self.port)}")

    def format(self, gradients: bool = True, width: int = 200) -> str:
        """The table as plain text (as wide as it needs, up to ``width``), then what the first
        divergence is, the modules left unpaired and a summary line. ``gradients=False``
        leaves out the weight and gradient rows that pass."""
        from rich.console import Console

        console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
        console.print(self.table(gradients))
        first = self.first_divergence

        def say(text):
            console.print(text, markup=False, highlight=False)

        hidden = [r for r in self.rows if _hidden(r, gradients, first)]
        if hidden:
            say(f"{len(hidden)} weight and gradient rows pass and are not shown (worst error "
                f"/ tolerance {_worst_share(r for r in hidden if r.kind != 'weight'):.1e})")
        if first is not None:
            for note in filter(None, [first.note, first.detail]):
                say("first divergence: " + note)
        notes = dict.fromkeys(r.note for r in self.rows
                              if r.note and r is not first and (r.kind == "weight"
                                                                or r.torch_name == ""))
        for note in notes:
            say(note)
        positional = dict.fromkeys((r.torch_name or "(model)", r.flax_path or "(model)",
                                    r.by_position) for r in self.rows
                                   if r.by_position and r.kind == "output")
        if positional:
            say(f"{BY_POSITION} paired by position (the one call left on each side between "
                "the same pairs, same shapes): " + ", ".join(
                    f"{t} ({t_type}) / {f} ({f_type})"
                    for t, f, (t_type, f_type) in positional))
        for side, names in (("torch", self.unpaired_torch), (self.port, self.unpaired_flax)):
            if names:
                say(f"not compared, no counterpart found ({side}, {len(names)}): "
                    + ", ".join(n or "(model)" for n in names))
        if self.one_sided:
            say(f"not compared, returned by one side only ({len(self.one_sided)}): "
                + "; ".join(self.one_sided))
        if self.untold:
            say(f"not compared, the layout cannot be told ({len(self.untold)}; the shape "
                "reads the same with axis 1 moved last and as it is, and no other array of "
                "the call or the model tells which; pass channels_last=False for a port in "
                "torch's layout, or give the model an input whose shape tells): "
                + "; ".join(self.untold))
        say(self.summary())
        return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"

    def __str__(self) -> str:
        return self.format()

    def raise_if_failed(self) -> "ModelReport":
        if not self.ok:
            raise ParityError(self.summary() + "\n" + self.format(gradients=False))
        return self


def _where(r: LayerRow, port: str = "Flax") -> str:
    """Which row fails, in words: its calls, how they were paired, what ran right before."""
    t_type, f_type = (f" {r.by_position[0]}", f" {r.by_position[1]}") if r.by_position else ("", "")
    text = (f"{r.kind} of {r.torch_name or '(model)'} (torch{t_type}) / "
            f"{r.flax_path or '(model)'} ({port}{f_type})")
    if r.by_position:
        text += ", paired by position"
    sides = [f"{', '.join(n or '(model)' for n in names)} ({side})"
             for side, names in zip(("torch", port), r.unpaired_before) if names]
    if sides:
        text += "; right before it, not compared: " + "; ".join(sides)
    return text


def _hidden(r: LayerRow, gradients: bool, first) -> bool:
    return (not gradients and r.ok and r is not first
            and (r.kind == "weight" or r.kind.endswith("gradient")))


def _worst_share(rows) -> float:
    """The largest abs_err / tolerance: how close the closest row came to failing."""
    return max((r.abs_err / r.tol if r.tol > 0 else 0.0 for r in rows), default=0.0)
