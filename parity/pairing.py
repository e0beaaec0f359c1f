"""Which torch layer is which Flax layer: the one pairing that ``load_torch_weights``,
``to_torch_weights`` and ``compare_layers`` use.

Weights (``match_weights``): torch's layers are taken in registration order (the order of
``state_dict``). When the order the Flax model calls its modules is known (``order``, from
``parity.record_flax.call_order``: a run of the model), each torch layer takes the first
Flax layer, from where the previous pair left off, whose leaves its layout rule fills with
the right shapes. A variables dict's own order is never trusted (``jax.jit(init)``,
``tree_map`` and train steps return its keys sorted, which is not creation order): without
``order``, a pair is only made where nothing else is possible - equal names ("layer1.0.conv1"
and "layer1_0/conv1"), or the one layer of the other side that fits by kind and shape, one
forced pair at a time - and anything still open raises a ValueError that lists the
candidates and the ``name_map`` entries that would settle it. ``name_map={torch module
name: Flax module path}`` pairs by hand.

Module calls (``pair_calls``): every recorded call of a module with weights goes with the
calls of its weight pair; ``name_map`` entries (any module, with weights or not: residual
blocks, pooling) and the two models themselves pair their calls; the rest go by kind
(``kind``) and order, the k-th call of a torch ``MaxPool2d`` with the k-th Flax
``MaxPool2d``. What is left is paired by position where that is the only reading: between
two pairs that follow each other on both sides (in the order calls return; the start of
the run counts as one), each side holding exactly one call left over, of a module without
weights or a ``name_map`` entry, with the same input and output shapes (an adaptive pool
ported as a fixed one, a ``MaxPool2d`` ported as another module). A gap holding more than
one call on either side stays unpaired; a call that encloses pairs (a ``Sequential`` that
holds compared layers) is structure, not counted. Weights never pair by position: a wrong
positional pair costs one misleading row, a wrong weight pair a silently wrong load.

This module sits above the layer types and layout rules (``parity.layout``) and the calls
(``parity.calls``), and below the public ``load_torch_weights`` / ``to_torch_weights``
(``parity.weights``) and ``compare_layers`` (``parity.layers``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from .calls import Call, Run
from .layout import (LAYOUT_RULES, FlaxLayer, LayoutRule, TorchLayer, flax_layers, flax_layout,
                     torch_layers)

__all__ = ["Call", "CallPair", "Pair", "Run", "WeightMap", "kind", "match_weights", "pair_calls"]


# --------------------------------------------------------------------------- module calls


def kind(type_name: str) -> str:
    """What a module is, in words both sides use: Conv2d and Conv are both "Conv", and
    TorchBasicBlock and BasicBlock both "BasicBlock" (so that both can live in one file)."""
    name = re.sub(r"^(Torch|Flax|Linen|Nnx|Jax)(?=[A-Z])|(?<=[a-z0-9])(Torch|Flax|Linen|Nnx|Jax)$",
                  "", type_name)
    name = re.sub(r"[123]d$", "", name)
    return {"Dense": "Linear", "Embed": "Embedding"}.get(name, name)


Gap = tuple[tuple[str, ...], tuple[str, ...]]  # (torch module names, Flax module paths)


@dataclasses.dataclass
class CallPair:
    """A torch call and the Flax call it is compared with. ``by_position``: paired by
    position alone (see the module docstring). ``before`` / ``after``: the modules of each
    side left unpaired between this pair and the one before (after) it, in the order calls
    return; empty where the two sides' pairs are not in the same order there."""

    torch: Call
    flax: Call
    by_position: bool = False
    before: Gap = ((), ())
    after: Gap = ((), ())


def pair_calls(t_calls: list[Call], f_calls: list[Call], weights: WeightMap,
               name_map: Mapping[str, str], channels_last: bool = True
               ) -> tuple[list[CallPair], list[str], list[str]]:
    """The pairs of calls in torch's order (both lists in the order calls return), and the
    modules of each side left unpaired (each once). ``channels_last``: the Flax side's
    arrays of rank >= 3 may have torch's axis 1 last (``parity.layout.flax_layout``)."""
    fixed = {p.torch.name: p.flax.path for p in weights.pairs}
    fixed.update(name_map)
    fixed[""] = ""  # the models themselves
    fixed_flax = set(fixed.values())
    queues: dict[tuple, list[Call]] = {}  # per key, the Flax calls not yet paired
    for c in f_calls:
        k = ("fixed", c.path) if c.path in fixed_flax else ("kind", kind(c.type_name))
        queues.setdefault(k, []).append(c)
    pairs: list[tuple[Call, Call]] = []
    for c in t_calls:
        k = ("fixed", fixed[c.path]) if c.path in fixed else ("kind", kind(c.type_name))
        queue = queues.get(k)
        if queue:
            pairs.append((c, queue.pop(0)))
    by_position = []
    for gap in _gaps(t_calls, f_calls, pairs):
        if gap is None or not len(gap[0]) == len(gap[1]) == 1:
            continue
        t, f = gap[0][0], gap[1][0]
        if t.path not in fixed and f.path not in fixed_flax and _shapes_fit(t, f, channels_last):
            by_position.append((t, f))
    t_at = {id(c): i for i, c in enumerate(t_calls)}
    pairs = sorted(pairs + by_position, key=lambda p: t_at[id(p[0])])
    positional = {id(t) for t, _ in by_position}
    gaps = [((), ()) if g is None else
            (tuple(dict.fromkeys(c.path for c in g[0])), tuple(dict.fromkeys(c.path for c in g[1])))
            for g in _gaps(t_calls, f_calls, pairs)]
    out = [CallPair(t, f, id(t) in positional, gaps[i],
                    gaps[i + 1] if i + 1 < len(gaps) else ((), ()))
           for i, (t, f) in enumerate(pairs)]
    paired = {id(c) for p in pairs for c in p}
    unpaired_torch = list(dict.fromkeys(c.path for c in t_calls if id(c) not in paired))
    left = sorted((c for c in f_calls if id(c) not in paired), key=lambda c: c.start)
    return out, unpaired_torch, list(dict.fromkeys(c.path for c in left))


def _gaps(t_calls: list[Call], f_calls: list[Call], pairs: list[tuple[Call, Call]]
          ) -> list[tuple[list[Call], list[Call]] | None]:
    """For each pair (in torch's order), the calls of each side left unpaired between it and
    the pair before it (the start of the run, for the first), leaving out calls that enclose
    a pair; None where the previous pair is not also the previous one on the Flax side."""
    t_at = {id(c): i for i, c in enumerate(t_calls)}
    f_at = {id(c): i for i, c in enumerate(f_calls)}
    paired = {id(c) for p in pairs for c in p}
    f_rank = {i: r for r, i in enumerate(sorted(f_at[id(f)] for _, f in pairs))}

    def between(calls, at, prev, call):
        lo = at[id(prev)] + 1 if prev is not None else 0
        # Calls nest: one that returns after ``prev`` and began before it encloses it.
        return [c for c in calls[lo:at[id(call)]] if id(c) not in paired
                and (prev is None or c.start > prev.start)]

    gaps: list[tuple[list[Call], list[Call]] | None] = []
    t_prev: Call | None = None
    f_prev: Call | None = None
    for t, f in sorted(pairs, key=lambda p: t_at[id(p[0])]):
        want = f_rank[f_at[id(f_prev)]] + 1 if f_prev is not None else 0
        if f_rank[f_at[id(f)]] != want:
            gaps.append(None)
        else:
            gaps.append((between(t_calls, t_at, t_prev, t), between(f_calls, f_at, f_prev, f)))
        t_prev, f_prev = t, f
    return gaps


def _shapes_fit(t: Call, f: Call, channels_last: bool) -> bool:
    """Whether the two calls take and return arrays of the same shapes (each side's layout)."""
    t_shapes = [a.shape for a in t.inputs] + [a.shape for _, a in t.outputs]
    f_shapes = [a.shape for a in f.inputs] + [a.shape for _, a in f.outputs]
    return (len(t.inputs) == len(f.inputs) and len(t.outputs) == len(f.outputs)
            and all(flax_layout(a, b, channels_last) is not None
                    for a, b in zip(t_shapes, f_shapes)))


# --------------------------------------------------------------------------- weights


@dataclasses.dataclass
class Pair:
    """A torch layer, the Flax layer it fills, and the rule that maps one onto the other."""

    torch: TorchLayer
    flax: FlaxLayer
    rule: LayoutRule

    def tensors(self):
        """(torch tensor name, Flax leaf name) for each tensor of the pair."""
        return [(t, self.rule.flax_leaf(t)) for t in self.torch.tensors]


@dataclasses.dataclass
class WeightMap:
    """Which torch layer fills which Flax layer (``pairs``, in torch's order)."""

    pairs: list[Pair]


def _shape_diffs(rule: LayoutRule, t: TorchLayer, f: FlaxLayer) -> list[str] | None:
    """None if ``rule`` maps t's tensors to other leaf names than f has; else the leaves whose
    shapes disagree (empty: every shape fits)."""
    if {rule.flax_leaf(n) for n in t.tensors} != set(f.leaves):
        return None
    diffs = []
    for n, x in t.tensors.items():
        want = rule.convert(n, np.empty(tuple(x.shape), np.int8), "flax").shape
        have = f.shape(rule.flax_leaf(n) or "")
        if want != have:
            diffs.append(f"{rule.flax_leaf(n)} {want} from torch's {t.full_name(n)} "
                         f"{tuple(x.shape)} vs {have} in Flax")
    return diffs


_FLAX_TYPES = {name for r in LAYOUT_RULES for name in r.flax_types}


def _flax_type(f: FlaxLayer) -> str | None:
    """The Flax layer's class name where it is known: an nnx module's, or the one in a
    linen auto-name ("BatchNorm_0"); None for names a user gave."""
    if f.module is not None:
        return None  # _fits reads the class itself
    m = re.fullmatch(r"([A-Z][A-Za-z]*)_\d+", f.path.rpartition("/")[2])
    return m.group(1) if m and m.group(1) in _FLAX_TYPES else None


def _fits(rule: LayoutRule, t: TorchLayer, f: FlaxLayer) -> bool:
    if f.module is not None and not any(c.__name__ in rule.flax_types
                                        for c in type(f.module).__mro__):
        return False
    named = _flax_type(f)
    if named is not None and named not in rule.flax_types:
        return False
    if "weight" in t.tensors and t.tensors["weight"].ndim not in rule.weight_ndims:
        return False
    if rule.kind.startswith("conv_transpose") and f.module is not None:
        flipped = not getattr(f.module, "transpose_kernel", False)
        if flipped != (rule.kind == "conv_transpose"):
            return False
    return _shape_diffs(rule, t, f) == []


def _rule(t: TorchLayer, f: FlaxLayer) -> LayoutRule | None:
    return next((r for r in t.rules() if _fits(r, t, f)), None)


def _shape_note(t: TorchLayer, f: FlaxLayer, rule: LayoutRule) -> str | None:
    """Why ``rule`` does not fit t to f when their leaves have the same names, or None."""
    diffs = _shape_diffs(rule, t, f)
    if not diffs:
        return None
    return f"{t.name or '(root)'} ({t.type_name}) -> {f.path or '(root)'}: " + "; ".join(diffs)


def _path(p) -> str:
    return "/".join(map(str, p)) if isinstance(p, (tuple, list)) else str(p)


def _prefixes(names, sep: str) -> set[str]:
    out = {""}
    for n in names:
        parts = n.split(sep) if n else []
        out.update(sep.join(parts[:i]) for i in range(1, len(parts) + 1))
    return out


def _explicit(name_map, source, t_layers, f_layers, order) -> dict[str, FlaxLayer]:
    """The name_map entries between layers with weights; entries naming modules without
    weights on both sides are for ``pair_calls``; the rest raise."""
    t_by_name = {t.name: t for t in t_layers}
    f_by_path = {f.path: f for f in f_layers}
    t_modules = ({n for n, _ in source.named_modules()} if hasattr(source, "named_modules")
                 else _prefixes(t_by_name, "."))
    f_modules = _prefixes(list(f_by_path) + list(order or []), "/")
    explicit: dict[str, FlaxLayer] = {}
    for t_name, f_path in (name_map or {}).items():
        f_path = _path(f_path)
        if t_name not in t_modules:
            raise ValueError(f"name_map: no torch module {t_name!r}; torch's modules with "
                             f"weights are {', '.join(repr(t.name) for t in t_layers)}")
        if f_path not in f_modules:
            raise ValueError(f"name_map: no Flax module {f_path!r}; Flax's modules with "
                             f"weights are {', '.join(repr(f.path) for f in f_layers)}")
        t, f = t_by_name.get(t_name), f_by_path.get(f_path)
        if (t is None) != (f is None):
            has, lacks = ((f"torch {t_name!r}", f"Flax {f_path!r}") if f is None else
                          (f"Flax {f_path!r}", f"torch {t_name!r}"))
            raise ValueError(f"name_map pairs {has}, which has weights, with {lacks}, "
                             "which has none")
        if t is not None and f is not None:
            explicit[t_name] = f
    return explicit


def match_weights(source, target, name_map: Mapping[str, Any] | None = None,
                  order: list[str] | None = None) -> WeightMap:
    """Pair the layers of a torch module (or state dict) with those of linen variables or an
    nnx model; ``order`` is the order the Flax model calls its modules (module paths), or
    None when unknown (see the module docstring). Raises ValueError listing everything
    left over, or every pairing left open."""
    t_layers, f_layers = torch_layers(source), flax_layers(target, order)
    explicit = _explicit(name_map, source, t_layers, f_layers, order)
    if order is None:
        pairs, unmatched, open_ = _forced_pairs(t_layers, f_layers, explicit)
        if open_:
            raise ValueError(_ambiguity_message(open_))
    else:
        pairs, unmatched = _pairs_in_order(t_layers, f_layers, explicit)
    used = {id(p.flax) for p in pairs}
    unset = [f for f in f_layers if id(f) not in used]
    if unmatched or unset:
        raise ValueError(_mismatch_message(unmatched, unset, _shape_notes(unmatched, unset,
                                                                          explicit)))
    by_torch = {id(p.torch): p for p in pairs}
    return WeightMap([by_torch[id(t)] for t in t_layers])


def _pairs_in_order(t_layers, f_layers, explicit):
    """Each torch layer takes the first Flax layer that fits, from where the previous pair
    left off (then from the start)."""
    taken = {id(f) for f in explicit.values()}
    pairs, unmatched, last = [], [], 0
    for t in t_layers:
        if t.name in explicit:
            candidates = [explicit[t.name]]
        else:
            candidates = [f for f in f_layers[last:] + f_layers[:last] if id(f) not in taken]
        hit = next(((f, r) for f in candidates if (r := _rule(t, f)) is not None), None)
        if hit is None:
            unmatched.append(t)
            continue
        f, rule = hit
        taken.add(id(f))
        last = f_layers.index(f) + 1
        pairs.append(Pair(t, f, rule))
    return pairs, unmatched


def _same_name(t: TorchLayer, f: FlaxLayer) -> bool:
    return t.name.replace(".", "_") == f.path.replace("/", "_")


def _forced_pairs(t_layers, f_layers, explicit):
    """Pairs that need no order: name_map's, equal names, then, repeatedly, a layer that
    fits exactly one layer left on the other side. Returns the pairs, the torch layers
    that fit nothing, and {torch layer: its candidates} for those left open."""
    pairs = []
    t_left = [t for t in t_layers if t.name not in explicit]
    f_left = [f for f in f_layers if all(f is not g for g in explicit.values())]
    for t in t_layers:
        if t.name in explicit:
            rule = _rule(t, explicit[t.name])
            if rule is not None:
                pairs.append(Pair(t, explicit[t.name], rule))
    fits = {id(t): [f for f in f_left if _rule(t, f) is not None] for t in t_left}

    def take(t, f):
        pairs.append(Pair(t, f, _rule(t, f)))
        t_left.remove(t)
        f_left.remove(f)
        for cands in fits.values():
            if f in cands:
                cands.remove(f)

    for t in list(t_left):
        same = [f for f in fits[id(t)] if _same_name(t, f)]
        if len(same) == 1:
            take(t, same[0])
    progress = True
    while progress:
        progress = False
        for t in list(t_left):
            if t in t_left and len(fits[id(t)]) == 1:
                take(t, fits[id(t)][0])
                progress = True
        for f in list(f_left):
            takers = [t for t in t_left if f in fits[id(t)]]
            if len(takers) == 1:
                take(takers[0], f)
                progress = True
    unmatched = [t for t in t_left if not fits[id(t)]]
    open_ = {t.name: (t, fits[id(t)]) for t in t_left if fits[id(t)]}
    unmatched += [t for t in t_layers if t.name in explicit
                  and all(p.torch is not t for p in pairs)]
    return pairs, unmatched, open_


def _ambiguity_message(open_: dict) -> str:
    lines = ["the torch and Flax weights cannot be paired without guessing: the order of a "
             "variables dict is not the order the model calls its modules (jax.jit(init), "
             "tree_map and train steps return its keys sorted), and these torch layers fit "
             "more than one Flax layer by kind and shape:"]
    for name, (t, cands) in open_.items():
        lines.append(f"  {name or '(root)'} ({t.type_name}): "
                     + ", ".join(f.path or "(root)" for f in cands))
    template = ", ".join(f'"{name}": "<path>"' for name in open_)
    lines.append("Pass the Flax model and an example input (model=..., x=...), so that the "
                 "order the model calls its modules decides, or name_map entries for these "
                 f"layers, each <path> one of its candidates above: name_map={{{template}}}")
    return "\n".join(lines)


def _shape_notes(unmatched, unset, explicit) -> list[str]:
    notes: list[str] = []
    noted: set[int] = set()  # each leftover Flax layer explains one torch layer at most
    for t in unmatched:
        candidates = [explicit[t.name]] if t.name in explicit else unset
        hit = next(((f, n) for f in candidates if id(f) not in noted for r in t.rules()
                    if (n := _shape_note(t, f, r)) is not None), None)
        if hit:
            noted.add(id(hit[0]))
            notes.append(hit[1])
    return notes


def _mismatch_message(unmatched, unset, mismatched) -> str:
    lines = ["the torch and Flax weights do not line up"]
    tensors = [f"  {t.full_name(n)} {tuple(x.shape)} [{t.type_name}]"
               + ("" if t.rules() else " (no layout rule for this module type)")
               for t in unmatched for n, x in t.tensors.items()]
    leaves = [f"  {f.describe(n)} {f.shape(n)}" for f in unset for n in f.leaves]
    if tensors:
        lines += [f"torch tensors left unmatched ({len(tensors)}):", *tensors]
    if leaves:
        lines += [f"Flax leaves left unset ({len(leaves)}):", *leaves]
    if mismatched:
        lines += [f"shapes that disagree ({len(mismatched)}):", *[f"  {m}" for m in mismatched]]
    lines.append("Pass name_map={torch module name: Flax module path} to pair layers by hand.")
    return "\n".join(lines)
