"""The deformable attention cells: ``jaxpool.multi_scale_deformable_attention`` in the layers
that call it, float32 on the CPU: Deformable DETR's encoder (every token a query over a
4-level pyramid) and decoder (300 queries), and RT-DETR's decoder (3 levels of a 640 x 640
image). Each cell is timed forward, as the gradient of ``sum(y**2)`` in the value, the
locations and the weights, and as the second derivative (the gradient in all three of the
squared value-gradient norm), jitted, beside:

- ``torch``: the pure-PyTorch reference (Hugging Face's ``multi_scale_deformable_attention``,
  one ``F.grid_sample`` per level) on the CPU, autograd;
- ``grid_sample per level``: the same composition in JAX with ``jaxpool.grid_sample`` (one
  read and one sort per level, the weighting outside);
- ``jnp gather``: a plain JAX port reading the 4 corners of each level with ``jnp`` indexing
  (its derivatives are XLA's scatter-adds);
- ``jaxpool-sorted``: jaxpool with the GPU table's adding (the sorted sum in place of the
  CPU table's scatter-add): the evidence for the strategy table's row.

Run from the repository root:

    python -m benchmarks.cells.deformable                 # markdown table, median ms per call
    python -m benchmarks.cells.deformable --cells rtdetr-decoder --reps 5
    python -m benchmarks.cells.deformable --memory        # peak bytes of the gradient too

Every side's values are first compared with torch's (float32, 1e-4 of the largest value);
a wrong side raises. ``--scale`` divides the encoder's pyramid (2: levels 50x75 to 7x10).
"""

from __future__ import annotations

import argparse
import datetime
import math

import numpy as np

from benchmarks.machine import describe, versions
from benchmarks.runner import check, measure

MODES = ("fwd", "grad", "second")

DETR_LEVELS = ((100, 150), (50, 75), (25, 38), (13, 19))  # an 800 x 1200 image, strides 8-64
RTDETR_LEVELS = ((80, 80), (40, 40), (20, 20))  # 640 x 640, strides 8-32


def _cells(scale: int = 4):
    """name -> (levels, batch, queries (None: every token), heads, head_dim, points)."""
    small = tuple((math.ceil(h / scale), math.ceil(w / scale)) for h, w in DETR_LEVELS)
    return {
        # Deformable DETR's encoder: each token attends 4 points of each level.
        "detr-encoder": (small, 1, None, 8, 32, 4),
        # its decoder: 300 object queries over the full pyramid.
        "detr-decoder": (DETR_LEVELS, 2, 300, 8, 32, 4),
        # RT-DETR's decoder: 300 queries over 3 levels.
        "rtdetr-decoder": (RTDETR_LEVELS, 2, 300, 8, 32, 4),
    }


def _data(levels, batch, queries, heads, dim, points):
    """value, locations (reference points inside the map plus a few pixels of each level)
    and softmax weights, float64."""
    rng = np.random.default_rng(0)
    tokens = sum(h * w for h, w in levels)
    q = tokens if queries is None else queries
    value = rng.standard_normal((batch, tokens, heads, dim))
    normaliser = np.asarray([[w, h] for h, w in levels], np.float64)[None, None, None, :, None]
    reference = rng.uniform(0.02, 0.98, (batch, q, 1, len(levels), 1, 2))
    locations = reference + rng.normal(0, 2.0, (batch, q, heads, len(levels), points, 2)) \
        / normaliser
    logits = rng.standard_normal((batch, q, heads, len(levels) * points))
    weights = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return value, locations, weights.reshape(batch, q, heads, len(levels), points)


# --- the JAX sides ---------------------------------------------------------------------------

def _per_level_grid_sample(levels):
    """The reference's composition, each level one ``jaxpool.grid_sample``."""
    import jax.numpy as jnp

    import jaxpool

    def f(value, locations, weights):
        b, _, heads, dim = value.shape
        _, q, _, n, points, _ = locations.shape
        starts = np.cumsum([0] + [h * w for h, w in levels])
        sampled = []
        for level, (h, w) in enumerate(levels):
            v = value[:, starts[level]:starts[level + 1]].reshape(b, h * w, heads * dim)
            v = jnp.swapaxes(v, 1, 2).reshape(b * heads, dim, h, w)
            g = jnp.swapaxes(2 * locations[:, :, :, level] - 1, 1, 2)
            sampled.append(jaxpool.grid_sample(v, g.reshape(b * heads, q, points, 2),
                                               "bilinear", "zeros", align_corners=False))
        wts = jnp.swapaxes(weights, 1, 2).reshape(b * heads, 1, q, n * points)
        stacked = jnp.stack(sampled, -2)
        out = (stacked.reshape(stacked.shape[:-2] + (-1,)) * wts).sum(-1)
        return jnp.swapaxes(out.reshape(b, heads * dim, q), 1, 2)

    return f


def _gather_port(levels):
    """A plain JAX port: each level's 4 corners read with ``jnp`` indexing from the value
    laid out ``[B, heads, H * W, dim]``, outside the level masked to 0."""
    import jax.numpy as jnp

    def f(value, locations, weights):
        b, _, heads, dim = value.shape
        _, q, _, n, points, _ = locations.shape
        starts = np.cumsum([0] + [h * w for h, w in levels])
        out = 0.0
        bi = jnp.arange(b)[:, None, None, None]
        hi = jnp.arange(heads)[None, :, None, None]
        for level, (h, w) in enumerate(levels):
            v = jnp.transpose(value[:, starts[level]:starts[level + 1]], (0, 2, 1, 3))
            loc = jnp.transpose(locations[:, :, :, level], (0, 2, 1, 3, 4))  # [b, h, q, p, 2]
            x = loc[..., 0] * w - 0.5
            y = loc[..., 1] * h - 0.5
            x0, y0 = jnp.floor(x), jnp.floor(y)
            fx, fy = x - x0, y - y0
            sample = 0.0
            for dy, wy in ((0, 1 - fy), (1, fy)):
                for dx, wx in ((0, 1 - fx), (1, fx)):
                    xi, yi = x0 + dx, y0 + dy
                    inside = (xi >= 0) & (xi <= w - 1) & (yi >= 0) & (yi <= h - 1)
                    flat = (jnp.clip(yi, 0, h - 1) * w + jnp.clip(xi, 0, w - 1)).astype(jnp.int32)
                    read = v[bi, hi, flat]  # [b, heads, q, p, dim]
                    sample = sample + jnp.where(inside, wy * wx, 0)[..., None] * read
            a = jnp.transpose(weights[:, :, :, level], (0, 2, 1, 3))[..., None]
            out = out + (sample * a).sum(3)  # [b, heads, q, dim]
        return jnp.transpose(out, (0, 2, 1, 3)).reshape(b, q, heads * dim)

    return f


def _jax_modes(f):
    """The three quantities of ``f(value, locations, weights)``."""
    import jax
    import jax.numpy as jnp

    def grad(*a):
        return jax.grad(lambda *a: jnp.sum(jnp.square(f(*a))), (0, 1, 2))(*a)

    def second(*a):
        return jax.grad(lambda *a: jnp.sum(jnp.square(grad(*a)[0])), (0, 1, 2))(*a)

    return {"fwd": f, "grad": grad, "second": second}


def _torch_modes(f, arrays):
    import torch

    def fwd():
        with torch.no_grad():
            return f(*arrays)

    def grad(create_graph=False):
        leaves = [a.detach().requires_grad_(True) for a in arrays]
        y = f(*leaves)
        return leaves, torch.autograd.grad(y.square().sum(), leaves, create_graph=create_graph)

    def second():
        leaves, (gv, _, _) = grad(create_graph=True)
        return torch.autograd.grad(gv.square().sum(), leaves)

    return {"fwd": fwd, "grad": lambda: grad()[1], "second": second}


# --- peak memory -----------------------------------------------------------------------------

def _jax_peak_bytes(fn, *args) -> int | None:
    import jax

    try:
        m = jax.jit(fn).lower(*args).compile().memory_analysis()
    except Exception:  # noqa: BLE001 - not every backend reports it
        return None
    if m is None:
        return None
    peak = getattr(m, "peak_memory_in_bytes", 0)
    return int(peak or (m.argument_size_in_bytes + m.output_size_in_bytes
                        + m.temp_size_in_bytes - m.alias_size_in_bytes))


def _torch_peak_bytes(thunk, held: int) -> int | None:
    """``held`` (the inputs) plus the profiler's peak of the call's allocations."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        thunk()
    peak = 0

    def walk(event):
        nonlocal peak
        fields = event.extra_fields
        if type(fields).__name__ == "_ExtraFields_Allocation":
            peak = max(peak, fields.total_allocated)
        for child in event.children:
            walk(child)

    try:
        for event in prof.profiler.kineto_results.experimental_event_tree():
            walk(event)
    except AttributeError:  # a torch without this profiler API
        return None
    return held + int(peak)


# --- the table -------------------------------------------------------------------------------

def run(names, reps: int, min_sample_s: float, scale: int = 4, memory: bool = False,
        sides=None) -> tuple[list[str], list[str]]:
    """The table's rows and notes, for the cells ``names``."""
    import jax
    import jax.numpy as jnp
    import torch

    from jaxpool import strategy_table
    from jaxpool.deformable.functions import multi_scale_deformable_attention

    rows, notes = [], []
    for name in names:
        levels, batch, queries, heads, dim, points = _cells(scale)[name]
        arrays64 = _data(levels, batch, queries, heads, dim, points)
        arrays = tuple(jnp.asarray(a, jnp.float32) for a in arrays64)
        tensors = [torch.tensor(a, dtype=torch.float32) for a in arrays64]

        def ours(v, loc, w, levels=levels):
            return multi_scale_deformable_attention(v, levels, loc, w)

        def reference(v, loc, w, levels=levels):
            from parity.deformable import multi_scale_deformable_attention
            return multi_scale_deformable_attention(v, levels, loc, w)

        jax_sides = {"jaxpool": _jax_modes(ours),
                     "grid_sample per level": _jax_modes(_per_level_grid_sample(levels)),
                     "jnp gather": _jax_modes(_gather_port(levels))}
        torch_side = _torch_modes(reference, tensors)
        for quantity in MODES:
            want = torch_side[quantity]()
            want = [w.detach().numpy() for w in (want if isinstance(want, tuple) else (want,))]
            fns = {}
            for side, modes in list(jax_sides.items()) + [("jaxpool-sorted", None)]:
                if sides and side not in sides:
                    continue
                if side == "jaxpool-sorted":
                    # a new function traced under the GPU table: its sorted sum
                    with strategy_table.use_backend("gpu"):
                        call = jax.jit(_jax_modes(lambda *a: ours(*a))[quantity]).lower(
                            *arrays).compile()
                else:
                    call = jax.jit(modes[quantity])
                got = jax.tree_util.tree_leaves(call(*arrays))
                wrong = [check(a, b, "float32") for a, b in zip(got, want)]
                if any(wrong):
                    raise AssertionError(f"{side} {name} {quantity}: {wrong}")
                fns[side] = lambda call=call: jax.block_until_ready(call(*arrays))
            fns["torch"] = torch_side[quantity]
            timed = measure(fns, reps, min_sample_s)
            peers = [s for s in timed if s not in ("jaxpool", "jaxpool-sorted")]
            fastest = min(timed[s]["median_ms"] for s in peers)
            for side, t in timed.items():
                spread = (t["q75_ms"] - t["q25_ms"]) / 2
                rows.append(f"| {name} | {quantity} | {side} | {t['median_ms']:.3f} | "
                            f"±{spread:.3f} | {t['median_ms'] / fastest:.2f} |")
        if memory:
            held = sum(t.numel() * t.element_size() for t in tensors)
            mine = _jax_peak_bytes(jax_sides["jaxpool"]["grad"], *arrays)
            theirs = _torch_peak_bytes(torch_side["grad"], held)
            notes.append(f"{name}: peak bytes of the gradient: jaxpool "
                         f"{mine / 1e6 if mine else float('nan'):.1f} MB (compiled program), "
                         f"torch {theirs / 1e6 if theirs else float('nan'):.1f} MB "
                         f"(inputs plus the profiler's peak)")
    return rows, notes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cells.deformable",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default=",".join(_cells()),
                        help="comma-separated cells (default %(default)s)")
    parser.add_argument("--sides", default="",
                        help="comma-separated JAX sides (default: all; torch always runs)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--min-sample-s", type=float, default=0.05)
    parser.add_argument("--scale", type=int, default=4,
                        help="divide the encoder's pyramid by this (default %(default)s)")
    parser.add_argument("--memory", action="store_true",
                        help="also report the gradient's peak bytes, jaxpool and torch")
    args = parser.parse_args(argv)
    names = [n for n in args.cells.split(",") if n]
    unknown = [n for n in names if n not in _cells()]
    if unknown:
        parser.error(f"unknown cells {unknown}; known: {', '.join(_cells())}")
    sides = [s for s in args.sides.split(",") if s] or None
    rows, notes = run(names, args.reps, args.min_sample_s, args.scale, args.memory, sides)
    print(f"{datetime.date.today().isoformat()}, {describe()}, {versions()}.")
    print("Ratio: the median over the fastest peer's (torch, grid_sample per level, "
          "jnp gather).\n")
    print("| cell | quantity | side | median ms | spread | ratio |\n"
          "|---|---|---|---:|---:|---:|")
    print("\n".join(rows))
    for note in notes:
        print(f"\n{note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
