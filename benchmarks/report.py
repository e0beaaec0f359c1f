"""Markdown table, PNG chart and JSON from the results of a run."""

from __future__ import annotations

import json
import os

from .runner import EAGER_MODES, MODE_TITLES
from .sides import CANDIDATES, PEERS, SIDE_NAMES

__all__ = ["BEGIN", "END", "chart", "markdown", "peer_ratio", "splice", "write_json"]

BEGIN = "<!-- benchmarks:begin -->"
END = "<!-- benchmarks:end -->"
SHORT = {"unsupported": "n/a", "error": "raises", "wrong": "wrong", "missing": "-"}
FLOOR_TARGET = 3.0  # forward within 3x of a plain copy of the bytes it reads and writes ...
FLOOR_BYTES = 10e6  # ... on every cell that reads more than 10 MB
FIRST_TARGET = 2.0  # a first eager call within 2x of the first call under jax.jit
REPEAT_TARGET = 3.0  # a repeat eager call within 3x of torch's


def _fmt(ms: float) -> str:
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"


def _cell(entry: dict | None, reps: int) -> str:
    if entry is None:
        return ""
    if entry["status"] != "ok" or "median_ms" not in entry:
        return SHORT.get(entry["status"], entry["status"])
    half_iqr = (entry["q75_ms"] - entry["q25_ms"]) / 2
    n = len(entry["samples_ms"])
    return f"{_fmt(entry['median_ms'])} ±{_fmt(half_iqr)}" + (f" (n={n})" if n < reps else "")


def misses(r: dict) -> list[str]:
    """The targets result `r` misses, in words."""
    out = []
    if r["ratio_peer"] is not None and r["ratio_peer"] > 1.0:
        out.append(f"{r['ratio_peer']:.2f}x {r['best_peer']}")
    if (r["mode"] == "fwd" and r["bytes"] > FLOOR_BYTES and r["ratio_floor"] is not None
            and r["ratio_floor"] > FLOOR_TARGET):
        out.append(f"{r['ratio_floor']:.1f}x the floor")
    if (r.get("ratio_jit") or 0) > FIRST_TARGET:
        out.append(f"first call {r['ratio_jit']:.1f}x the first call under jit")
    if (r.get("ratio_torch") or 0) > REPEAT_TARGET:
        out.append(f"repeat call {r['ratio_torch']:.1f}x {r['best_torch']}")
    jp = r["sides"].get("jaxpool")
    if jp and jp["status"] not in ("ok", "missing"):
        out.append(f"jaxpool {jp['status']}: {jp.get('error') or jp.get('note')}")
    return out


def _profile(r: dict) -> str:
    """What the run measured besides time, for a row that misses: page faults per call
    (fresh memory) and kernels in the compiled program, for jaxpool and its best peer; in
    the eager modes, the XLA programs jaxpool's first call compiled."""
    if r["mode"] in EAGER_MODES:
        counts = [f"{name} {e['first_compiles']}" for name in ("jaxpool", "floor")
                  for e in [r["sides"].get(name, {})] if e.get("first_compiles") is not None]
        return f" (XLA programs compiled by the first call: {', '.join(counts)})" if counts else ""
    parts = []
    for name in ("jaxpool", r["best_peer"], "floor"):
        e = r["sides"].get(name) if name else None
        if not e or e.get("status") != "ok" or (name == "floor" and r["mode"] == "fwd"):
            continue
        bits = []
        if e.get("faults_per_call") is not None:
            bits.append(f"{e['faults_per_call']:.0f} page faults")
        if e.get("kernels"):
            bits.append(f"{e['kernels']} kernel" + ("s" if e["kernels"] > 1 else ""))
        if bits:
            parts.append(f"{name} {', '.join(bits)}")
    return f" ({'; '.join(parts)} per call)" if parts else ""


def markdown(results: list[dict], meta: dict, chart_path: str | None = None) -> str:
    """The results as a markdown section: header, tables, targets, notes, chart."""
    jitted = [r for r in results if r["mode"] not in EAGER_MODES]
    eager = [r for r in results if r["mode"] in EAGER_MODES]
    lines = [
        f"Run of {meta['date']} on {meta['machine']}; {meta['versions']}.",
        "",
        f"Command: `{meta['command']}` ({meta['elapsed_s'] / 60:.1f} min"
        + (f"; {meta['stopped']}" if meta.get("stopped") else "") + ").",
        "",
        f"Milliseconds per call: median of {meta['reps']} interleaved samples "
        "± half the interquartile range (n = fewer samples, for a side slower than "
        f"{meta.get('side_budget_s', '?')} s per cell). Modes: "
        + "; ".join(f"`{m}` = {t}" for m, t in MODE_TITLES.items()
                    if any(r["mode"] == m for r in results))
        + ". `wrong` = values differ from torch (not timed); `n/a` = no equivalent call; "
        "`raises` = the call fails; `-` = not installed"
        + (f"; `torch` runs on {meta.get('torch_threads', '?')} threads, `torch-1t` on one."
           if any("torch-1t" in r["sides"] for r in results) else "."),
    ]
    if jitted:
        lines += ["", *_jit_table(jitted, meta)]
    if eager:
        lines += ["", *_eager_table(eager, meta)]
    missed = [(r, m) for r in results for m in [misses(r)] if m]
    lines += ["", f"Targets: {len(results) - len(missed)} of {len(results)} rows meet every target."]
    if missed:
        lines += ["Rows that miss one:", ""]
        lines += [f"- {r['cell']}, {r['mode']}: {'; '.join(m)}{_profile(r)}" for r, m in missed]
    lines += _candidates(results)
    notes = _notes(results)
    if notes:
        lines += ["", "Notes on the peers:", ""] + notes
    if chart_path:
        lines += ["", "![jaxpool's time over the fastest correct peer's, per cell and mode]"
                  f"({chart_path})"]
    return "\n".join(lines) + "\n"


def _sides(results: list[dict]) -> list[str]:
    return [s for s in SIDE_NAMES if any(s in r["sides"] for r in results)]


def _ratio(value: float | None, target: float, text: str = "") -> str:
    if value is None:
        return ""
    shown = f"{value:.2f}"
    return (f"**{shown}**" if value > target else shown) + (f" ({text})" if text else "")


def _jit_table(results: list[dict], meta: dict) -> list[str]:
    """Jitted calls: every side's time, jaxpool over the fastest peer and over the floor."""
    sides = _sides(results)
    lines = [
        "Under `jax.jit` (compiled before timing). `floor` = a plain copy of the bytes the "
        "forward reads and writes (a negation of (input + output) / 2 elements, jitted, "
        "differentiated the same way). `best peer` = jaxpool's "
        "time over the fastest peer whose values match torch; **bold** = a target missed "
        f"(above 1.0x the best peer; forward above {FLOOR_TARGET:g}x the floor on a cell over "
        f"{FLOOR_BYTES / 1e6:g} MB).",
        "",
        "| cell | MB | mode | " + " | ".join(sides) + " | jaxpool / best peer | jaxpool / floor |",
        "|---|---:|---|" + "---:|" * len(sides) + "---:|---:|",
    ]
    last = None
    for r in results:
        first = r["cell"] != last
        last = r["cell"]
        cells = [_cell(r["sides"].get(s), meta["reps"]) for s in sides]
        peer = _ratio(r["ratio_peer"], 1.0, r["best_peer"])
        floor = ""
        if r["ratio_floor"] is not None:
            floor = f"{r['ratio_floor']:.1f}"
            if r["mode"] == "fwd" and r["bytes"] > FLOOR_BYTES and r["ratio_floor"] > FLOOR_TARGET:
                floor = f"**{floor}**"
        mb = f"{r['bytes'] / 1e6:.1f}" if first else ""
        lines.append(
            f"| {r['cell'] if first else ''} | {mb} | {r['mode']} | " + " | ".join(cells)
            + f" | {peer} | {floor} |"
        )
    return lines


def _eager_table(results: list[dict], meta: dict) -> list[str]:
    """Eager calls: each side's first call and repeat call; jaxpool's first call against its
    first call under jit, its repeat call against torch's."""
    sides = [s for s in ("jaxpool", *PEERS, "floor") if s in _sides(results)]
    lines = [
        "Without `jax.jit`: each side's first call / repeat call. A JAX side's first call "
        "comes after `jax.clear_caches()`, so it traces and compiles again (median of a few); "
        "torch's is its first call on the cell's tensor. The floor shows what the loss around "
        "the pooling costs eagerly. `jit first` = jaxpool's first call "
        "under a fresh `jax.jit` (trace, compile and run). Targets: jaxpool's first call "
        f"within {FIRST_TARGET:g}x of its `jit first`, its repeat call within "
        f"{REPEAT_TARGET:g}x of torch's (the faster torch side); **bold** = missed.",
        "",
        "| cell | mode | " + " | ".join(sides)
        + " | jaxpool jit first | first / jit first | repeat / torch |",
        "|---|---|" + "---:|" * len(sides) + "---:|---:|---:|",
    ]
    last = None
    for r in results:
        first = r["cell"] != last
        last = r["cell"]
        cells = []
        for s in sides:
            e = r["sides"].get(s)
            text = _cell(e, meta["reps"])
            if e and e["status"] == "ok" and "first_ms" in e:
                text = f"{_fmt(e['first_ms'])} / {text}"
            cells.append(text)
        jit_first = r["sides"].get("jaxpool", {}).get("jit_first_ms")
        lines.append(
            f"| {r['cell'] if first else ''} | {r['mode']} | " + " | ".join(cells)
            + f" | {_fmt(jit_first) if jit_first else ''} | {_ratio(r.get('ratio_jit'), FIRST_TARGET)}"
            + f" | {_ratio(r.get('ratio_torch'), REPEAT_TARGET, r.get('best_torch') or '')} |"
        )
    return lines


def _median(r: dict, side: str) -> float | None:
    e = r["sides"].get(side)
    return e.get("median_ms") if e and e["status"] == "ok" else None


def _candidates(results: list[dict]) -> list[str]:
    """A table of jaxpool's own strategy against each candidate timed beside it."""
    rows = []
    for r in results:
        mine = _median(r, "jaxpool")
        for name in CANDIDATES:
            theirs = _median(r, name)
            if mine and theirs:
                fastest = name if theirs < mine else "jaxpool"
                rows.append(f"| {r['cell']} | {r['mode']} | {name} | {_fmt(mine)} | {_fmt(theirs)} "
                            f"| {theirs / mine:.2f} | {fastest} |")
    if not rows:
        return []
    return ["", "Candidate strategies, per cell and mode (candidate / jaxpool below 1: the "
            "candidate is faster here):", "",
            "| cell | mode | candidate | jaxpool | candidate ms | candidate / jaxpool | fastest |",
            "|---|---|---|---:|---:|---:|---|", *rows]


def _notes(results: list[dict]) -> list[str]:
    """Each distinct note, wrong value or error per side, with the cells (and modes) it concerns."""
    all_modes = list(dict.fromkeys(r["mode"] for r in results))
    grouped: dict[tuple[str, str], dict[str, list[str]]] = {}
    for r in results:
        for side, e in r["sides"].items():
            texts = list(e.get("notes") or [])
            if e["status"] in ("unsupported", "missing"):
                texts.append(f"{SHORT[e['status']]}: {e.get('note') or e.get('error')}")
            elif e["status"] in ("wrong", "error"):
                texts.append(f"{SHORT[e['status']]}: {e.get('error')}")
            for t in texts:
                grouped.setdefault((side, t), {}).setdefault(r["cell"], []).append(r["mode"])

    def where(cells):
        return ", ".join(c if modes == all_modes else f"{c} ({', '.join(modes)})"
                         for c, modes in cells.items())

    return [f"- {side}, {t}: {where(cells)}" for (side, t), cells in sorted(grouped.items())]


# One marker per mode: filled under jax.jit, hollow without it.
MODE_MARKERS = {"fwd": ("o", "#1f77b4"), "grad": ("s", "#ff7f0e"), "gradgrad": ("D", "#2ca02c"),
                "eager-fwd": ("o", "#9467bd"), "eager-grad": ("s", "#8c564b")}


def peer_ratio(r: dict) -> tuple[float | None, str | None]:
    """jaxpool's median time over the fastest correct peer's, and that peer, for result `r`
    (repeat calls in the eager modes); None where jaxpool or every peer failed."""
    if r.get("ratio_peer") is not None:
        return r["ratio_peer"], r["best_peer"]
    mine = _median(r, "jaxpool")
    peers = {p: t for p in PEERS for t in [_median(r, p)] if t}
    if not mine or not peers:
        return None, None
    best = min(peers, key=peers.get)
    return mine / peers[best], best


def chart(results: list[dict], path: str, meta: dict | None = None) -> None:
    """One row per cell: jaxpool's time over the fastest correct peer's, one marker per
    mode, on a log scale with 1.0 (as fast as the best peer) marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in MODE_TITLES if any(r["mode"] == m for r in results)]
    cells = list(dict.fromkeys(r["cell"] for r in results))
    fig, ax = plt.subplots(figsize=(8.5, 0.3 * len(cells) + 1.9))
    # Each mode a little off the cell's line, so that equal ratios do not hide each other.
    step = 0.6 / max(len(modes), 1)
    lowest, highest = 1.0, 1.0
    unmatched: dict[str, list[str]] = {}
    for j, mode in enumerate(modes):
        ys, xs = [], []
        for r in results:
            if r["mode"] != mode:
                continue
            ratio, _ = peer_ratio(r)
            if ratio is None:
                unmatched.setdefault(r["cell"], []).append(mode)
                continue
            ys.append(cells.index(r["cell"]) + (j - (len(modes) - 1) / 2) * step)
            xs.append(ratio)
        lowest, highest = min([lowest, *xs]), max([highest, *xs])
        marker, color = MODE_MARKERS.get(mode, ("^", "#7f7f7f"))
        eager = mode in EAGER_MODES
        ax.plot(xs, ys, linestyle="none", marker=marker, markersize=5.5,
                markerfacecolor="none" if eager else color, markeredgecolor=color,
                label=MODE_TITLES[mode] + (" (repeat call)" if eager else ""))
    lo, hi = lowest / 1.5, highest * 1.5
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ax.axvspan(1.0, hi, color="#d62728", alpha=0.07, lw=0)
    ax.axvline(1.0, color="black", lw=1)
    for cell, missed in unmatched.items():
        ax.annotate(f"no ratio: {', '.join(missed)}", (1, cells.index(cell)),
                    xycoords=("axes fraction", "data"), xytext=(-3, 0),
                    textcoords="offset points", ha="right", va="center", fontsize=6.5,
                    color="#7f7f7f")
    ax.set_yticks(range(len(cells)))
    ax.set_yticklabels(cells, fontsize=7.5)
    ax.set_ylim(len(cells) - 0.5, -0.5)
    for i in range(1, len(cells)):
        ax.axhline(i - 0.5, color="#dddddd", lw=0.5)
    ax.grid(axis="x", which="both", alpha=0.3)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("jaxpool's median time / the fastest correct peer's (log; right of 1: "
                  "jaxpool slower)", fontsize=8.5)
    title = "jaxpool against the fastest peer whose values match torch"
    if meta:
        title += f"\n{meta.get('date', '')}, {meta.get('machine', '')}"
    ax.set_title(title, fontsize=9)
    # The jitted modes on the legend's first line, the eager ones under them.
    handles = dict(zip(*ax.get_legend_handles_labels()[::-1]))
    labels = list(handles)
    jit = [t for t, m in zip(labels, modes) if m not in EAGER_MODES]
    eager = [t for t, m in zip(labels, modes) if m in EAGER_MODES]
    ncol = max(len(jit), len(eager), 1)
    order = [t for i in range(ncol) for t in (jit[i:i + 1] + eager[i:i + 1])]
    legend_in = 0.25 * (1 + bool(jit and eager)) + 0.1
    fig.legend([handles[t] for t in order], order, loc="lower center", ncol=ncol, fontsize=7.5,
               frameon=False)
    fig.tight_layout(rect=(0, legend_in / fig.get_figheight(), 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_json(results: list[dict], meta: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)


def markers(section: str | None = None) -> tuple[str, str]:
    """The begin and end markers of a generated section (the default one without a name)."""
    if not section:
        return BEGIN, END
    return f"<!-- benchmarks:{section}:begin -->", f"<!-- benchmarks:{section}:end -->"


def splice(path: str, section: str, begin: str = BEGIN, end: str = END) -> None:
    """Put `section` between the markers `begin` and `end` of file `path` (appended if it has none)."""
    text = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    block = f"{begin}\n{section}{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        tail = rest.split(end, 1)[1]
        text = head + block + tail
    else:
        text = text + ("\n" if text and not text.endswith("\n") else "") + block + "\n"
    with open(path, "w") as f:
        f.write(text)
