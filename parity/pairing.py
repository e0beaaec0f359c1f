"""Which torch layer is which Flax layer: the one alignment that ``load_torch_weights``,
``to_torch_weights`` and ``compare_layers`` read.

``align(torch_desc, flax_desc, name_map=...)`` takes the two models' descriptions
(``parity.description``: modules, parameters with shapes, ties and, where a model ran, its
calls) and returns an ``Alignment``: the weight pairs (``WeightMap``), the call pairs
(``CallPair``, where both models ran) and what each side leaves unpaired, with why;
``format_alignment`` (``Alignment.format``) prints it. ``match_weights(source, target)`` is
the weight pairs of ``align`` on the descriptions of a torch model and Flax variables.

Weights (``match_weights``), strongest signal first, each step only among the layers the
steps before left: ``name_map={torch module name: Flax module path}`` (by hand); names that
agree (``name_keys``: the same words up to separators, index style and plurals, "layer.0",
"layer_0", "layers_0" and "layer/layer_0" alike, with a prefix every name of one side shares
dropped where that makes more names agree) with the layout rule fitting the shapes: never
overridden by order; the one layer of the other side that fits by kind and shape, one forced
pair at a time; and last, where the order the Flax model calls its modules is known
(the Flax description's ``order``, from one abstract run), torch's registration order against it,
each torch layer taking the first Flax layer that fits from where the previous pair left
off - unless the names say otherwise (another candidate's last word is the torch layer's,
this one's is not). A variables dict's own order is never trusted (``jax.jit(init)``,
``tree_map`` and train steps return its keys sorted). What is left open raises a ValueError
that lists the candidates and the ``name_map`` entries that would settle it. Each pair
records the signal that made it (``Pair.signal``; ``WeightMap.format()`` prints them). Raw
parameters (a module of no known type holding ``nn.Parameter`` attributes: a class token,
position embeddings) follow ``parity.layout.raw_rule``: the leaves of the same names and
shapes, never an Equinox layer of a type with a rule (Equinox names its Linear's weight as
torch does: a square weight of another layout would load as it is). Rules are for one side
(``LayoutRule.side``: Flax or Equinox layers), so that one torch type has a rule for each.

Module calls (``pair_calls``, where both descriptions hold calls): every recorded call of a module with weights goes with the
calls of its weight pair; ``name_map`` entries (any module, with weights or not) and the two
models themselves pair their calls. Between two such pairs that follow each other on both
sides (in the order calls return), the calls left on each side are aligned as a diff aligns
two sequences (``_align``: order kept, matched by kind or name with the shapes fitting), so
that one module more or less on one side (an ``nn.Identity`` shortcut) shifts nothing after
it. Calls that enclose pairs (blocks, a ``Sequential``) are aligned the same way among
themselves. What is left is paired by position only where that is the only reading: each
side holding exactly one call left in the gap, of kinds that may stand for one another (two
pools: an adaptive pool ported as a fixed one), with the same input and output shapes.
Weights never pair by position: a wrong positional pair costs one misleading row, a wrong
weight pair a silently wrong load. Shapes fit when the main input and the main output (the
first floating-point array of each) do, so that a block returning (output, weights) on one
side pairs with one returning its output alone; ``match_outputs`` says which output leaves
are then compared: those both sides put at the same place (names, positions in the same
structure) and the main outputs, never two leaves that only a shape would pair. A module applied unbound inside a linen model (a tied head's
``Dense.apply``) is recorded under its own label, never as the model.

Tied torch weights (one tensor under several names, ``TorchLayer.ties``) pair once, under
their first name; a tied layer pairs on its own only with a Flax layer left over (a port
that holds its own copy). A module of no known type with a 2-d ``weight`` may follow
``parity.layout.inferred_rules`` (as it is, transposed): the shapes decide, a square weight
follows the layers of the same types, or the load refuses (``_settle_transforms``).

This module sits above the descriptions (``parity.description``), the layer types and
layout rules (``parity.layout``) and the calls (``parity.calls``), and below the public
``load_torch_weights`` / ``to_torch_weights`` (``parity.weights``) and ``compare_layers``
(``parity.layers``): it reads descriptions and never a model.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from .calls import Call, Run
from .description import ModelDescription, describe_flax, describe_torch
from .layout import (EQUINOX, INFERRED, LAYOUT_RULES, RAW, FlaxLayer, LayoutRule, TorchLayer,
                     flax_layout, registered_rules)

__all__ = ["Alignment", "Call", "CallPair", "OutputMatch", "Pair", "Run", "WeightMap", "align",
           "corresponding_outputs", "format_alignment", "kind", "match_outputs",
           "match_weights", "name_keys", "name_tokens", "pair_calls"]


# --------------------------------------------------------------------------- the alignment


@dataclasses.dataclass
class Alignment:
    """Which torch module is which Flax module, as ``align`` finds it: the weight pairs
    (``weights``, each with the signal that made it, and the tied tensors), the call pairs
    (``calls``, in torch's order, each with its signal; None where the two models did not
    both run), and the modules of each side left unpaired, each once, with why
    (``unpaired_torch``, ``unpaired_flax``: {module name: reason})."""

    weights: WeightMap
    calls: list[CallPair] | None = None
    unpaired_torch: dict[str, str] = dataclasses.field(default_factory=dict)
    unpaired_flax: dict[str, str] = dataclasses.field(default_factory=dict)

    def format(self) -> str:
        return format_alignment(self)


def align(torch_desc: ModelDescription, flax_desc: ModelDescription,
          name_map: Mapping[str, Any] | None = None, *,
          channels_last: bool = True) -> Alignment:
    """The one alignment of two descriptions (``parity.description``): the weight pairs, and,
    where both models ran (both descriptions hold calls), the call pairs and what is left on
    each side. ``name_map``: ``{torch module name: Flax module path}`` (paths as "a/b" or
    tuples); where both ran, its entries between modules with weights pair weights, and
    every entry pairs calls (each module must then be called). ``channels_last``: the Flax
    side's arrays of rank >= 3 may have torch's axis 1 last.

    Raises:
      ValueError: for a name_map entry that names no module (or one never called), and
        for weights left over or left open (see ``match_weights``).
    """
    name_map = {str(k): _path(v) for k, v in (name_map or {}).items()}
    t_calls, f_calls = torch_desc.calls, flax_desc.calls
    if t_calls is None or f_calls is None:
        return Alignment(_match_weights(torch_desc, flax_desc, name_map))
    # Entries naming a torch module without weights of its own pair calls only.
    with_weights = {m.name for m in torch_desc.modules if m.layer is not None}
    weights = _match_weights(torch_desc, flax_desc,
                             {k: v for k, v in name_map.items() if k in with_weights})
    _check_name_map(name_map, t_calls, f_calls)
    pairs, unpaired_torch, unpaired_flax = pair_calls(t_calls, f_calls, weights, name_map,
                                                      channels_last)
    fixed = {p.torch.name: p.flax.path for p in weights.pairs}
    fixed.update(name_map)
    fixed[""] = ""
    paired = {id(c) for p in pairs for c in (p.torch, p.flax)}
    root = min((c.start for c in f_calls if c.path == ""), default=None)
    f_fixed = {f: t for t, f in fixed.items()}
    return Alignment(
        weights, pairs,
        _why_unpaired(unpaired_torch, t_calls, paired, lambda c: fixed.get(c.path), "Flax"),
        _why_unpaired(unpaired_flax, f_calls, paired,
                      lambda c: (f_fixed.get(c.path) if c.path != "" or c.start == root
                                 else None), "torch"))


def _why_unpaired(names: list[str], calls: list[Call], paired: set[int],
                  counterpart, other: str) -> dict[str, str]:
    """{module name: why it is left unpaired}, from its first call left unpaired."""
    at_paired = [(i, c.start) for i, c in enumerate(calls) if id(c) in paired]
    out: dict[str, str] = {}
    for i, c in enumerate(calls):
        if id(c) in paired or c.path not in names or c.path in out:
            continue
        fixed = counterpart(c)
        if fixed is not None:
            out[c.path] = (f"its counterpart, {other} {fixed or '(model)'}, has no call left "
                           "for it")
        elif any(j < i and start > c.start for j, start in at_paired):
            out[c.path] = (f"a block around compared calls, and no {other} block of its kind "
                           "or name with fitting shapes")
        else:
            out[c.path] = (f"no {other} call of its kind or name with fitting shapes in its "
                           "place")
    return {n: out.get(n, "") for n in names}


def _check_name_map(name_map: Mapping[str, str], t_calls: list[Call],
                    f_calls: list[Call]) -> None:
    t_names = list(dict.fromkeys(c.path for c in t_calls))
    f_paths = list(dict.fromkeys(c.path for c in sorted(f_calls, key=lambda c: c.start)))
    for t, f in name_map.items():
        if t not in t_names:
            raise ValueError(f"name_map: torch module {t!r} is never called; torch calls "
                             + ", ".join(repr(n) for n in t_names))
        if f not in f_paths:
            raise ValueError(f"name_map: Flax module {f!r} is never called; Flax calls "
                             + ", ".join(repr(p) for p in f_paths))


def format_alignment(alignment: Alignment) -> str:
    """The alignment as text: the weight pairs, the call pairs (each with the signal that
    made it), and the modules left on each side, with why."""
    lines = ["weights (torch -> Flax [layout rule, by signal]):"]
    lines += [f"  {line}" for line in alignment.weights.format().splitlines()]
    if alignment.calls is None:
        lines.append("calls: not aligned (the two models did not both run)")
        return "\n".join(lines)
    lines.append("calls (torch -> Flax [by signal], in the order they return):")
    lines += [f"  {p.torch.path or '(model)'} ({p.torch.type_name}) -> "
              f"{p.flax.path or '(model)'} ({p.flax.type_name}) [{p.signal}]"
              for p in alignment.calls]
    for side, left in (("torch", alignment.unpaired_torch), ("Flax", alignment.unpaired_flax)):
        lines.append(f"left unpaired, {side}: "
                     + (", ".join(n or "(model)" for n in left) or "none"))
        lines += [f"  {n or '(model)'}: {why}" for n, why in left.items() if why]
    return "\n".join(lines)


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
    signal: str = ""  # "weights", "name_map", "model", "aligned", "block" or "position"


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
    queues: dict[str, list[Call]] = {}  # per fixed Flax path, its calls not yet paired
    # The model is the call that begins first; a module applied unbound inside it (a tied
    # head's ``Dense.apply``) has an empty path too, and is no model.
    root = min((c.start for c in f_calls if c.path == ""), default=None)
    def pinned(c: Call) -> bool:  # a Flax call that pairs by its path
        return c.path in fixed_flax and (c.path != "" or c.start == root)

    for c in f_calls:
        if pinned(c):
            queues.setdefault(c.path, []).append(c)
    pairs: list[tuple[Call, Call]] = []
    for c in t_calls:
        queue = queues.get(fixed[c.path]) if c.path in fixed else None
        if queue:
            pairs.append((c, queue.pop(0)))
    # The rest, gap by gap between those pairs: the two sequences of calls aligned.
    aligned = []
    for gap in _gaps(t_calls, f_calls, pairs):
        if gap is not None:
            aligned += _align([c for c in gap[0] if c.path not in fixed],
                              [c for c in gap[1] if not pinned(c)], channels_last)
    pairs += aligned
    blocks = _named_leftovers(t_calls, f_calls, pairs, lambda c: c.path in fixed, pinned,
                              channels_last)
    pairs += blocks
    by_position = []
    for gap in _gaps(t_calls, f_calls, pairs):
        if gap is None or not len(gap[0]) == len(gap[1]) == 1:
            continue
        t, f = gap[0][0], gap[1][0]
        if (t.path not in fixed and not pinned(f) and _family(t) == _family(f)
                and _shapes_fit(t, f, channels_last)):
            by_position.append((t, f))
    t_at = {id(c): i for i, c in enumerate(t_calls)}
    pairs = sorted(pairs + by_position, key=lambda p: t_at[id(p[0])])
    positional = {id(t) for t, _ in by_position}
    gaps = [((), ()) if g is None else
            (tuple(dict.fromkeys(c.path for c in g[0])), tuple(dict.fromkeys(c.path for c in g[1])))
            for g in _gaps(t_calls, f_calls, pairs)]
    weight_names = {p.torch.name for p in weights.pairs}
    how = {id(t): "aligned" for t, _ in aligned}
    how.update({id(t): "block" for t, _ in blocks})
    how.update({id(t): "position" for t, _ in by_position})

    def signal(t):
        if t.path == "":
            return "model"
        if t.path in name_map:
            return "name_map"
        return "weights" if t.path in weight_names else how.get(id(t), "")

    out = [CallPair(t, f, id(t) in positional, gaps[i],
                    gaps[i + 1] if i + 1 < len(gaps) else ((), ()), signal(t))
           for i, (t, f) in enumerate(pairs)]
    paired = {id(c) for p in pairs for c in p}
    unpaired_torch = list(dict.fromkeys(c.path for c in t_calls if id(c) not in paired))
    left = sorted((c for c in f_calls if id(c) not in paired), key=lambda c: c.start)
    return out, unpaired_torch, list(dict.fromkeys(c.path for c in left))


def _named_leftovers(t_calls, f_calls, pairs, t_pinned, f_pinned, channels_last):
    """Calls still unpaired that enclose pairs (blocks and containers: a residual block, a
    ``Sequential``), left out of the gaps: the two sequences of them aligned (by kind or
    name, with the shapes fitting), so that their outputs are compared too."""
    paired = {id(c) for p in pairs for c in p}

    def enclosers(calls, skip):
        at_paired = [(i, c.start) for i, c in enumerate(calls) if id(c) in paired]
        return [c for i, c in enumerate(calls) if id(c) not in paired and not skip(c)
                and any(j < i and start > c.start for j, start in at_paired)]

    return _align(enclosers(t_calls, t_pinned), enclosers(f_calls, f_pinned), channels_last)


def _family(c: Call) -> str:
    """Kinds that may stand for one another where a call is alone in its place: any two
    pools (an adaptive pool ported as a fixed one); otherwise the kind itself."""
    k = kind(c.type_name)
    return "pool" if "pool" in k.lower() else k


def _match(t: Call, f: Call, channels_last: bool) -> float:
    """How well two weightless calls agree: 0 (never paired) unless the shapes fit and the
    kinds or the names agree; names that agree weigh on top of the kind."""
    if not _shapes_fit(t, f, channels_last):
        return 0.0
    same_kind = kind(t.type_name) == kind(f.type_name)
    same_name = name_tokens(t.path) == name_tokens(f.path)
    if not (same_kind or same_name):
        return 0.0
    last = _last_word(t.path)
    return 2.0 * same_kind + 1.0 * same_name + 0.5 * (last is not None
                                                       and last == _last_word(f.path))


def _align(ts: list[Call], fs: list[Call], channels_last: bool) -> list[tuple[Call, Call]]:
    """The best order-keeping matching of two call sequences (a diff: one call more or less
    on one side shifts nothing after it)."""
    n, m = len(ts), len(fs)
    if not n or not m:
        return []
    score = [[_match(t, f, channels_last) for f in fs] for t in ts]
    best = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            b = max(best[i + 1][j], best[i][j + 1])
            if score[i][j] > 0:
                b = max(b, score[i][j] + best[i + 1][j + 1])
            best[i][j] = b
    out, i, j = [], 0, 0
    while i < n and j < m:
        if score[i][j] > 0 and best[i][j] == score[i][j] + best[i + 1][j + 1]:
            out.append((ts[i], fs[j]))
            i, j = i + 1, j + 1
        elif best[i][j] == best[i + 1][j]:
            i += 1
        else:
            j += 1
    return out


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


def _is_float_array(a) -> bool:
    return np.issubdtype(np.dtype(a.dtype), np.floating)


def _shapes_fit(t: Call, f: Call, channels_last: bool) -> bool:
    """Whether the two calls take and return arrays of the same shapes (each side's layout):
    their main input and main output (the first floating-point array of each; both absent
    counts), so that an attention block returning (output, weights) on one side and its
    output alone on the other, or a mask passed as an array on one side only, still fit."""
    def main(arrays):
        return next((tuple(a.shape) for a in arrays if _is_float_array(a)), None)

    t_in, f_in = main(t.inputs), main(f.inputs)
    t_out, f_out = main([a for _, a in t.outputs]), main([a for _, a in f.outputs])
    if (t_in is None) != (f_in is None) or (t_out is None) != (f_out is None):
        return False
    return all(a is None or flax_layout(a, b, channels_last) is not None
               for a, b in ((t_in, f_in), (t_out, f_out)))


@dataclasses.dataclass
class OutputMatch:
    """Which output leaves of two paired calls are compared (``pairs``: (torch index, Flax
    index)), which each side returns alone (``torch_only``, ``flax_only``), and why, where
    the reason is more than "the other side has no such leaf" (``why``: (side, index) ->
    reason, side "torch" or "flax")."""

    pairs: list[tuple[int, int]]
    torch_only: list[int]
    flax_only: list[int]
    why: dict[tuple[str, int], str] = dataclasses.field(default_factory=dict)


def _path_key(path: str) -> tuple[str, ...]:
    """A leaf's place in its structure, in words both sides use: "['logits'][0]" and
    ".logits[0]" are both ("logits", "0")."""
    return tuple(re.findall(r"[A-Za-z0-9_]+", path))


def _outputs_fit(a, b, channels_last: bool) -> bool:
    """Whether a torch leaf and a Flax leaf have shapes one row can compare (a layout move,
    or one broadcasting to the other)."""
    sa, sb = tuple(np.shape(a)), tuple(np.shape(b))
    if flax_layout(sa, sb, channels_last) is not None:
        return True
    if len(sa) != len(sb):
        return False
    try:
        common = tuple(np.broadcast_shapes(sa, sb))
    except ValueError:
        return False
    return common in (sa, sb)


def match_outputs(t_outputs: list, f_outputs: list, channels_last: bool) -> OutputMatch:
    """Which output leaves ((leaf path, array) lists) of two paired calls are compared,
    by what both sides say, never by a shape alone:

    * leaves at the same place (the same path: the same names, or the same positions in
      the same structure) are compared where their shapes fit;
    * the main outputs (the first floating-point leaf of each side, what the calls were
      paired by) are compared where both are left and their shapes fit, so that a block
      returning (output, weights) on one side and its output alone on the other compares
      its output (BEiT's embeddings return (embeddings, (height, width)) in torch);
    * a floating-point leaf left over that only its shape would pair with one of the other
      side's (an attention block's key cache, [batch, heads, length, head size], against
      the other side's attention weights, [batch, heads, length, length], where the length
      is the head size) is one-sided, with the reason; so is everything else left.
    """
    t_float = [i for i, (_, a) in enumerate(t_outputs) if _is_float_array(a)]
    f_float = [j for j, (_, a) in enumerate(f_outputs) if _is_float_array(a)]
    why: dict[tuple[str, int], str] = {}
    pairs: list[tuple[int, int]] = []
    f_by_key: dict[tuple, list[int]] = {}
    for j, (p, _) in enumerate(f_outputs):
        f_by_key.setdefault(_path_key(p), []).append(j)
    for i, (p, a) in enumerate(t_outputs):
        same = f_by_key.get(_path_key(p), [])
        if len(same) != 1:
            continue
        j = same[0]
        b = f_outputs[j][1]
        if _is_float_array(a) != _is_float_array(b):
            continue
        fits = (_outputs_fit(a, b, channels_last) if _is_float_array(a)
                else tuple(np.shape(a)) == tuple(np.shape(b)))
        if fits:
            pairs.append((i, j))
        else:
            text = "x".join(map(str, np.shape(b))) or "scalar"
            why[("torch", i)] = (f"at the place of Flax's {f_outputs[j][0] or '(output)'} "
                                 f"({text}), of a shape no row compares with it")
            why[("flax", j)] = f"at the place of torch's {p or '(output)'}, of another shape"
    t_done, f_done = {i for i, _ in pairs}, {j for _, j in pairs}
    if (t_float and f_float and t_float[0] not in t_done and f_float[0] not in f_done
            and _outputs_fit(t_outputs[t_float[0]][1], f_outputs[f_float[0]][1], channels_last)):
        pairs.append((t_float[0], f_float[0]))
    pairs.sort()
    t_done, f_done = {i for i, _ in pairs}, {j for _, j in pairs}
    t_left = [i for i in t_float if i not in t_done]
    f_left = [j for j in f_float if j not in f_done]
    for side, left, mine, other, other_left, other_side in (
            ("torch", t_left, t_outputs, f_outputs, f_left, "Flax"),
            ("flax", f_left, f_outputs, t_outputs, t_left, "torch")):
        for i in left:
            if (side, i) in why:
                continue
            alike = [other[j][0] or "(output)" for j in other_left
                     if tuple(np.shape(other[j][1])) == tuple(np.shape(mine[i][1]))]
            if alike:
                why[(side, i)] = (f"only its shape would pair it with {other_side}'s "
                                  f"{', '.join(alike)}: not compared (return it at the same "
                                  "place or under the same name on both sides to compare it)")
    return OutputMatch(pairs, [i for i in range(len(t_outputs)) if i not in t_done],
                       [j for j in range(len(f_outputs)) if j not in f_done], why)


def corresponding_outputs(t_outputs: list, f_outputs: list, channels_last: bool
                          ) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """Which output leaves of two paired calls are compared: ((torch index, Flax index), ...)
    and the indices each side returns alone (``match_outputs``, without the reasons)."""
    m = match_outputs(t_outputs, f_outputs, channels_last)
    return m.pairs, m.torch_only, m.flax_only


# --------------------------------------------------------------------------- weights


@dataclasses.dataclass
class Pair:
    """A torch layer, the Flax layer it fills, and the rule that maps one onto the other."""

    torch: TorchLayer
    flax: FlaxLayer
    rule: LayoutRule
    signal: str = ""  # what paired them: "name_map", "name", "only fit" or "order"
    evidence: str = ""  # what picked an inferred rule's transform (the shapes, other layers)

    def tensors(self):
        """(torch tensor name, Flax leaf name) for each tensor of the pair; a tensor that is
        several leaves gives one part per leaf ("in_proj_weight[0/3]",
        ``parity.layout.LayoutRule.parts``)."""
        return self.rule.parts(self.torch.tensors)


@dataclasses.dataclass
class WeightMap:
    """Which torch layer fills which Flax layer (``pairs``, in torch's order), and the torch
    tensors that are another's (``ties``: full name -> the full name loaded, compared and
    written back in its place; a tied tensor that the Flax side holds apart pairs as any
    other)."""

    pairs: list[Pair]
    ties: dict[str, str] = dataclasses.field(default_factory=dict)

    def format(self) -> str:
        """The pairing, a line a pair: torch layer, Flax layer, layout rule (and what picked
        an inferred rule's transform), and the signal that paired them; then the ties."""
        lines = [f"{p.torch.name or '(root)'} ({p.torch.type_name}) -> "
                 f"{p.flax.path or '(root)'} [{p.rule.kind}"
                 + (f" ({p.evidence})" if p.evidence else "") + f", by {p.signal}]"
                 for p in self.pairs]
        lines += [f"{alias}: tied, the same tensor as {canonical} (loaded and compared once)"
                  for alias, canonical in self.ties.items()]
        return "\n".join(lines)


def _shape_diffs(rule: LayoutRule, t: TorchLayer, f: FlaxLayer) -> list[str] | None:
    """None if ``rule`` maps t's tensors to other leaf names than f has; else the leaves whose
    shapes disagree (empty: every shape fits)."""
    parts = rule.parts(t.tensors)
    if {leaf for _, leaf in parts} != set(f.leaves) or len(parts) != len(f.leaves):
        return None
    diffs = []
    for n, leaf in parts:
        shape = t.tensor_shape(n)
        want = rule.convert(n, np.empty(shape, np.int8), "flax").shape
        have = f.shape(leaf or "")
        if want != have:
            diffs.append(f"{leaf} {want} from torch's {t.full_name(n)} "
                         f"{shape} vs {have} in {_side_name(f)}")
    return diffs


def _side_name(f: FlaxLayer) -> str:
    return "Equinox" if f.side == EQUINOX else "Flax"


def _flax_type(f: FlaxLayer) -> str | None:
    """The Flax layer's class name where it is known: an nnx module's, or the one in a
    linen auto-name ("BatchNorm_0"); None for names a user gave."""
    if f.module is not None:
        return None  # _fits reads the class itself
    known = {name for r in registered_rules() + LAYOUT_RULES for name in r.flax_types}
    m = re.fullmatch(r"([A-Z][A-Za-z]*)_\d+", f.path.rpartition("/")[2])
    return m.group(1) if m and m.group(1) in known else None


def _fits(rule: LayoutRule, t: TorchLayer, f: FlaxLayer) -> bool:
    if rule.kind == RAW:
        # Equinox's own layers have rules: raw names would load a square weight of another
        # layout (GPT-2's Conv1D into a Linear) as it is
        return not _equinox_layer(f) and _shape_diffs(rule, t, f) == []
    if rule.side is not None and rule.side != f.side:
        return False
    if rule.flax_types:
        if f.module is not None and not any(c.__name__ in rule.flax_types
                                            for c in type(f.module).__mro__):
            return False
        named = _flax_type(f)
        if named is not None and named not in rule.flax_types:
            return False
    if ("weight" in t.tensors and rule.weight_ndims
            and t.tensors["weight"].ndim not in rule.weight_ndims):
        return False
    if rule.kind.startswith("conv_transpose") and f.module is not None and f.side == "flax":
        flipped = not getattr(f.module, "transpose_kernel", False)
        if flipped != (rule.kind == "conv_transpose"):
            return False
    return _shape_diffs(rule, t, f) == []


def _equinox_layer(f: FlaxLayer) -> bool:
    """Whether ``f`` is one of Equinox's own layers (``equinox.nn``), which have rules."""
    return f.side == EQUINOX and type(f.module).__module__.startswith("equinox.")


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


def _explicit(name_map: Mapping[str, str], torch_desc: ModelDescription,
              flax_desc: ModelDescription) -> dict[str, FlaxLayer]:
    """The name_map entries between layers with weights; entries naming modules without
    weights on both sides are for ``pair_calls``; the rest raise."""
    t_layers, f_layers = torch_desc.layers(), flax_desc.layers()
    t_by_name = {t.name: t for t in t_layers}
    f_by_path = {f.path: f for f in f_layers}
    t_modules = {m.name for m in torch_desc.modules} | _prefixes(t_by_name, ".")
    f_modules = _prefixes([m.name for m in flax_desc.modules]
                          + list(flax_desc.order or []), "/")
    explicit: dict[str, FlaxLayer] = {}
    for t_name, f_path in name_map.items():
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
    None when unknown (see the module docstring). The weight pairs of ``align`` on the two
    models' descriptions. Raises ValueError listing everything left over, or every pairing
    left open."""
    return align(describe_torch(source), describe_flax(target, order=order), name_map).weights


def _match_weights(torch_desc: ModelDescription, flax_desc: ModelDescription,
                   name_map: Mapping[str, str]) -> WeightMap:
    """The weight pairs of two descriptions (see the module docstring)."""
    all_t, f_layers = torch_desc.layers(), flax_desc.layers()
    order = flax_desc.order
    explicit = _explicit(name_map, torch_desc, flax_desc)
    # A tied layer (its tensors an earlier module's) needs no Flax layer of its own.
    tied = [t for t in all_t if t.tied and t.name not in explicit]
    t_layers = [t for t in all_t if all(t is not u for u in tied)]
    pairs = [Pair(t, explicit[t.name], r, "name_map") for t in t_layers if t.name in explicit
             and (r := _rule(t, explicit[t.name])) is not None]
    unmatched = [t for t in t_layers if t.name in explicit and all(p.torch is not t for p in pairs)]
    t_left = [t for t in t_layers if t.name not in explicit]
    f_left = [f for f in f_layers if all(f is not g for g in explicit.values())]
    named = _name_pairs(t_left, f_left)
    pairs += named
    t_left = [t for t in t_left if all(p.torch is not t for p in named)]
    f_left = [f for f in f_left if all(p.flax is not f for p in named)]
    more, no_fit, open_ = _forced_pairs(t_left, f_left)
    pairs += more
    unmatched += no_fit
    if open_:
        if order is None:
            raise ValueError(_ambiguity_message(open_))
        t_open = [t for t, _ in open_.values()]
        f_open = [f for f in f_left if all(p.flax is not f for p in more)]
        by_order, no_fit, conflicts = _pairs_in_order(t_open, f_open)
        if conflicts:
            raise ValueError(_ambiguity_message(conflicts, order_conflict=True))
        pairs += by_order
        unmatched += no_fit
    used = {id(p.flax) for p in pairs}
    unset = [f for f in f_layers if id(f) not in used]
    if tied and unset:  # a port that keeps its own copy of a tied weight: by name, or the one fit
        copies = _name_pairs(tied, unset)
        rest = [t for t in tied if all(p.torch is not t for p in copies)]
        copies += _forced_pairs(rest, [f for f in unset if all(p.flax is not f for p in copies)])[0]
        pairs += copies
        unset = [f for f in unset if all(p.flax is not f for p in copies)]
    if unmatched or unset:
        raise ValueError(_mismatch_message(unmatched, unset, _shape_notes(unmatched, unset,
                                                                          explicit)))
    _settle_transforms(pairs)
    paired = {id(p.torch) for p in pairs}
    ties = {t.full_name(n): canonical for t in all_t if id(t) not in paired
            for n, canonical in t.ties.items()}
    by_torch = {id(p.torch): p for p in pairs}
    return WeightMap([by_torch[id(t)] for t in all_t if id(t) in by_torch], ties)


def _rule_key(p: Pair) -> tuple:
    """Pairs whose layers are of the same types (the Flax type where it is known, and the
    leaves' names): one type's weights have one layout."""
    f_type = type(p.flax.module).__name__ if p.flax.module is not None else _flax_type(p.flax)
    return (p.torch.type_name, f_type, tuple(sorted(p.flax.leaves)))


def _settle_transforms(pairs: list[Pair]) -> None:
    """Give each pair on an inferred rule (``parity.layout.inferred_rules``) the one transform
    its shapes allow; where both fit (a square weight), the one every other pair of the
    same types was given by its shapes. Raises ValueError listing the pairs still open."""
    inferred = {id(p): [r for r in p.torch.rules() if r.kind.startswith(INFERRED)
                        and _fits(r, p.torch, p.flax)]
                for p in pairs if p.rule.kind.startswith(INFERRED)}
    by_shape: dict[tuple, dict[str, int]] = {}
    for p in pairs:
        fitting = inferred.get(id(p), [])
        if len(fitting) == 1:
            p.rule, p.evidence = fitting[0], "shapes"
            kinds = by_shape.setdefault(_rule_key(p), {})
            kinds[fitting[0].kind] = kinds.get(fitting[0].kind, 0) + 1
    open_ = []
    for p in pairs:
        fitting = inferred.get(id(p), [])
        if len(fitting) < 2:
            continue
        kinds = by_shape.get(_rule_key(p), {})
        if len(kinds) == 1:
            (kind_, n), = kinds.items()
            p.rule = next(r for r in fitting if r.kind == kind_)
            p.evidence = f"as the {n} other {p.torch.type_name} layers' shapes say"
        else:
            open_.append((p, fitting, kinds))
    if open_:
        raise ValueError(_transform_message(open_))


def _transform_message(open_) -> str:
    lines = ["the layout of these torch layers' weights cannot be told: their type has no "
             "layout rule, a square weight fits the port's layer both as it is and "
             "transposed, and the other layers of the same types do not settle it:"]
    for p, fitting, kinds in open_:
        seen = ("" if not kinds else "; the others of its types fit "
                + " and ".join(f"{k.split(': ')[1]} ({n})" for k, n in kinds.items()))
        lines.append(f"  {p.torch.name or '(root)'} ({p.torch.type_name}) -> "
                     f"{p.flax.path or '(root)'}: "
                     + ", ".join(r.kind.split(": ")[1] for r in fitting) + seen)
    types_ = ", ".join(dict.fromkeys(p.torch.type_name for p, _, _ in open_))
    leaf = "weight" if any(p.flax.side == EQUINOX for p, _, _ in open_) else "kernel"
    lines.append(f"Register the layout of the type ({types_}) with parity.layout.register: "
                 f"register(<type>, {{\"weight\": \"{leaf}\", \"bias\": \"bias\"}}, "
                 "to_flax={\"weight\": np.transpose}, to_torch={\"weight\": np.transpose}) "
                 f"for a {leaf} that is the torch weight transposed, or without to_flax and "
                 "to_torch for one that is the weight as it is.")
    return "\n".join(lines)


# --------------------------------------------------------------------------- names


_WORD = re.compile(r"[A-Za-z]+|\d+")


def name_tokens(name: str) -> tuple[str, ...]:
    """A module name in words both sides use: split at any separator ("layer.0", "layer_0",
    "layer/0" and "layers_0" are all ("layer", "0")), lower case, a plural's "s" dropped, a
    word repeated in a row said once ("layer/layer_0" is "layer.0")."""
    out: list[str] = []
    for w in _WORD.findall(name):
        w = w.lower()
        if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
            w = w[:-1]
        if not out or out[-1] != w:
            out.append(w)
    return tuple(out)


def _common_prefix(names: list[tuple[str, ...]]) -> int:
    """How many leading words every name shares (one word left to each name at least)."""
    if len(names) < 2:
        return 0
    n = min(len(t) for t in names) - 1
    k = 0
    while k < n and all(t[k] == names[0][k] for t in names):
        k += 1
    return k


def name_keys(t_names: list[str], f_names: list[str]) -> tuple[list, list]:
    """Each side's names as ``name_tokens``, with a prefix that every name of one side
    shares (a wrapper's "module" or "model") dropped where that makes more names agree."""
    t_tok, f_tok = [name_tokens(n) for n in t_names], [name_tokens(n) for n in f_names]
    best = (t_tok, f_tok)
    best_hits = len(set(t_tok) & set(f_tok))
    kt, kf = _common_prefix(t_tok), _common_prefix(f_tok)
    for cut_t, cut_f in ((kt, 0), (0, kf), (kt, kf)):
        if cut_t == cut_f == 0:
            continue
        tt, ff = [t[cut_t:] for t in t_tok], [f[cut_f:] for f in f_tok]
        hits = len(set(tt) & set(ff))
        if hits > best_hits:
            best, best_hits = (tt, ff), hits
    return best


def _name_pairs(t_layers: list[TorchLayer], f_layers: list[FlaxLayer]) -> list[Pair]:
    """Layers whose names agree (``name_keys``; each name once on each side) and whose
    tensors fit: paired whatever the order says."""
    t_keys, f_keys = name_keys([t.name for t in t_layers], [f.path for f in f_layers])
    t_count: dict = {}
    f_count: dict = {}
    for k in t_keys:
        t_count[k] = t_count.get(k, 0) + 1
    for k in f_keys:
        f_count[k] = f_count.get(k, 0) + 1
    f_by_key = {k: f for k, f in zip(f_keys, f_layers) if f_count[k] == 1}
    pairs = []
    for t, k in zip(t_layers, t_keys):
        f = f_by_key.get(k) if t_count[k] == 1 else None
        if f is not None and (rule := _rule(t, f)) is not None:
            pairs.append(Pair(t, f, rule, "name"))
    return pairs


def _last_word(name: str) -> str | None:
    words = [w for w in name_tokens(name) if not w.isdigit()]
    return words[-1] if words else None


# --------------------------------------------------------------------------- order


def _pairs_in_order(t_layers, f_layers):
    """Each torch layer (registration order) takes the first Flax layer (call order) that
    fits, from where the previous pair left off (then from the start). A pair whose names
    say otherwise (another candidate's last word is the torch layer's, this one's is not)
    is a conflict: returned as {torch name: (layer, candidates)}, nothing guessed."""
    taken: set[int] = set()
    pairs, unmatched, last = [], [], 0
    conflicts: dict = {}
    for t in t_layers:
        candidates = [f for f in f_layers[last:] + f_layers[:last] if id(f) not in taken]
        fitting = [(f, r) for f in candidates if (r := _rule(t, f)) is not None]
        if not fitting:
            unmatched.append(t)
            continue
        f, rule = fitting[0]
        word = _last_word(t.name)
        if (word is not None and _last_word(f.path) != word
                and any(_last_word(g.path) == word for g, _ in fitting[1:])):
            conflicts[t.name] = (t, [g for g, _ in fitting])
            continue
        taken.add(id(f))
        last = f_layers.index(f) + 1
        pairs.append(Pair(t, f, rule, "order"))
    return pairs, unmatched, conflicts


def _forced_pairs(t_left, f_left):
    """Pairs that need no order: repeatedly, a layer that fits exactly one layer left on
    the other side. Returns the pairs, the torch layers that fit nothing, and {torch
    name: (layer, its candidates)} for those left open."""
    pairs = []
    t_left, f_left = list(t_left), list(f_left)
    fits = {id(t): [f for f in f_left if _rule(t, f) is not None] for t in t_left}

    def take(t, f):
        pairs.append(Pair(t, f, _rule(t, f), "only fit"))
        t_left.remove(t)
        f_left.remove(f)
        for cands in fits.values():
            if f in cands:
                cands.remove(f)

    progress = True
    while progress:
        progress = False
        for t in list(t_left):
            if t in t_left and len(fits[id(t)]) == 1:
                take(t, fits[id(t)][0])
                progress = True
        for f in list(f_left):
            takers = [t for t in t_left if f in fits[id(t)]]
            if len(takers) == 1 and len(fits[id(takers[0])]) >= 1:
                take(takers[0], f)
                progress = True
    unmatched = [t for t in t_left if not fits[id(t)]]
    open_ = {t.name: (t, fits[id(t)]) for t in t_left if fits[id(t)]}
    return pairs, unmatched, open_


def _ambiguity_message(open_: dict, order_conflict: bool = False) -> str:
    if order_conflict:
        lines = ["the torch and Flax weights cannot be paired without guessing: the order "
                 "the Flax model calls its modules and the modules' names disagree for "
                 "these torch layers, which fit more than one Flax layer by kind and shape:"]
    else:
        lines = ["the torch and Flax weights cannot be paired without guessing: the order "
                 "of a variables dict is not the order the model calls its modules "
                 "(jax.jit(init), tree_map and train steps return its keys sorted), and "
                 "these torch layers fit more than one Flax layer by kind and shape:"]
    for name, (t, cands) in open_.items():
        lines.append(f"  {name or '(root)'} ({t.type_name}): "
                     + ", ".join(f.path or "(root)" for f in cands))
    template = ", ".join(f'"{name}": "<path>"' for name in open_)
    if not order_conflict:
        lines.append("Pass the Flax model and an example input (model=..., x=...), so that "
                     "the order the model calls its modules decides, or name_map entries for "
                     "these layers, each <path> one of its candidates above: "
                     f"name_map={{{template}}}")
    else:
        lines.append("Pass name_map entries for these layers, each <path> one of its "
                     f"candidates above: name_map={{{template}}}")
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
               + ("" if any(r.kind != RAW for r in t.rules())
                  else " (no layout rule for this module type; raw parameters pair by "
                       "name with equal shapes)")
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
