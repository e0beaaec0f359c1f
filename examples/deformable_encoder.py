"""Port Deformable DETR's encoder layer from torch to Flax, check it, and train it with a
penalty that differentiates it twice.

The torch layer is Hugging Face's ``DeformableDetrEncoderLayer`` (multi-scale deformable
self-attention over a feature pyramid, then a feed-forward block, each with a residual and
a LayerNorm), on its pure-PyTorch path. The port is a linen module built on
``jaxpool.linen.MultiScaleDeformableAttention``, its layers named as torch's, so that:

1. ``parity.load_torch_weights`` loads torch's weights with no hand-written map;
2. ``parity.compare_layers`` checks it against torch layer by layer in float64 (every
   weight, every layer's output and gradient), the padding mask and the position
   embeddings included;
3. it trains for a few steps (Adam) to match a teacher (the same layer with other
   weights) on generated pyramids, with an R1-style penalty: the squared gradient of the
   output with respect to the input, so each step differentiates the deformable attention
   twice, in its values and in its sampling locations;
4. the training step, traced for a GPU (jaxpool's GPU table), holds no scatter: the reads
   are gathers, added back by a sorted, segmented sum;
5. the step run twice on the same parameters and batch gives the same bits.

    python examples/deformable_encoder.py                # about a minute on a laptop CPU
    python examples/deformable_encoder.py --steps 3 --size 4 --d-model 32
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from tqdm import tqdm
from transformers import DeformableDetrConfig
from transformers.models.deformable_detr.modeling_deformable_detr import (
    DeformableDetrEncoderLayer)

import jaxpool
import jaxpool.linen as jpl
import parity

R1_WEIGHT = 0.1


class EncoderLayer(nn.Module):
    """``DeformableDetrEncoderLayer`` (eval mode: no dropout) in linen, its layers under
    torch's names. ``x [B, S, d_model]``, the pyramid's positions end to end."""

    d_model: int
    heads: int
    levels: int
    points: int
    ffn: int

    @nn.compact
    def __call__(self, x, reference_points, spatial_shapes, attention_mask=None,
                 position_embeddings=None):
        attended = jpl.MultiScaleDeformableAttention(
            self.d_model, self.heads, self.levels, self.points, name="self_attn")(
            x, reference_points, spatial_shapes, attention_mask=attention_mask,
            position_embeddings=position_embeddings)
        # torch's LayerNorm epsilon (Flax's default is 1e-6)
        x = nn.LayerNorm(epsilon=1e-5, name="self_attn_layer_norm")(x + attended)
        h = nn.Dense(self.d_model, name="fc2")(nn.relu(nn.Dense(self.ffn, name="fc1")(x)))
        return nn.LayerNorm(epsilon=1e-5, name="final_layer_norm")(x + h)


def pyramid(size: int) -> tuple[tuple[int, int], ...]:
    """Three levels, each half the last (rounded up): (size, size + 1), ... (not square, so
    that a swapped height and width would show)."""
    levels, h = [], size
    for _ in range(3):
        levels.append((h, h + 1))
        h = (h + 1) // 2
    return tuple(levels)


def reference_points(levels, batch: int) -> np.ndarray:
    """The encoder's reference points: every position's pixel centre in [0, 1], the same
    on every level (Hugging Face's ``get_reference_points`` with no padding)."""
    points = []
    for h, w in levels:
        y, x = np.meshgrid((np.arange(h) + 0.5) / h, (np.arange(w) + 0.5) / w, indexing="ij")
        points.append(np.stack([x.ravel(), y.ravel()], -1))
    points = np.concatenate(points)
    return np.broadcast_to(points[None, :, None, :], (batch, len(points), len(levels), 2)).copy()


def make_batch(rng, levels, batch: int, d_model: int):
    """Generated features, a padding mask (the last positions of the second example's
    largest level), position embeddings; float32."""
    tokens = sum(h * w for h, w in levels)
    x = rng.standard_normal((batch, tokens, d_model)).astype(np.float32)
    mask = np.ones((batch, tokens), bool)
    mask[1 % batch, levels[0][1] * (levels[0][0] - 1):levels[0][0] * levels[0][1]] = False
    pos = (0.1 * rng.standard_normal((batch, tokens, d_model))).astype(np.float32)
    return x, mask, pos


def torch_call_kwargs(levels, reference, mask, pos) -> dict:
    return dict(attention_mask=mask, position_embeddings=pos, reference_points=reference,
                spatial_shapes=np.array(levels), spatial_shapes_list=list(levels),
                level_start_index=np.cumsum([0] + [h * w for h, w in levels])[:-1])


def lowered_ops(lowered) -> set[str]:
    """The StableHLO (and CHLO/MHLO) op names in a lowered program."""
    return set(re.findall(r"\b(?:stablehlo|chlo|mhlo)\.([a-z_]+)", lowered.as_text()))


def sha(tree) -> str:
    h = hashlib.sha256()
    for a in jax.tree_util.tree_leaves(tree):
        h.update(np.asarray(a).tobytes())
    return h.hexdigest()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    p.add_argument("--size", type=int, default=12,
                   help="height of the pyramid's largest level (default 12)")
    p.add_argument("--d-model", type=int, default=64, help="channels (default 64)")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("out"),
                   help="folder for deformable_encoder_metrics.json (default: out/)")
    args = p.parse_args(argv)
    if min(args.steps, args.size, args.batch_size) < 1 or args.d_model < 8 or args.d_model % 8:
        p.error("--steps, --size and --batch-size must be >= 1, --d-model a multiple of 8")

    levels = pyramid(args.size)
    config = DeformableDetrConfig(d_model=args.d_model, encoder_attention_heads=8,
                                  num_feature_levels=len(levels), encoder_n_points=4,
                                  encoder_ffn_dim=2 * args.d_model)
    torch.manual_seed(args.seed)
    torch_layer = DeformableDetrEncoderLayer(config).eval()
    port = EncoderLayer(args.d_model, 8, len(levels), 4, 2 * args.d_model)
    rng = np.random.default_rng(args.seed)
    x, mask, pos = make_batch(rng, levels, args.batch_size, args.d_model)
    reference = reference_points(levels, args.batch_size).astype(np.float32)
    flax_kwargs = dict(reference_points=reference, spatial_shapes=levels, attention_mask=mask,
                       position_embeddings=pos)
    print(f"pyramid {levels}, {x.shape[1]} positions of {args.d_model} channels; "
          f"8 heads, 4 points per level")

    # 1. torch's weights, paired by name with the port's layers
    variables = jax.jit(lambda key: port.init(key, x, **flax_kwargs))(jax.random.key(0))
    variables = parity.load_torch_weights(torch_layer, variables, model=port, x=x,
                                          flax_kwargs=flax_kwargs)
    print(parity.pairing.match_weights(torch_layer, variables).format())

    # 2. layer by layer, in float64, values and gradients
    report = parity.compare_layers(
        torch_layer, port, variables, x.astype(np.float64), channels_last=False,
        torch_kwargs=torch_call_kwargs(levels, reference, mask, pos), flax_kwargs=flax_kwargs)
    print(report.format(gradients=False))

    # 3. training: match a teacher, with an R1 penalty (a double backward)
    teacher = jax.jit(lambda key: port.init(key, x, **flax_kwargs))(jax.random.key(1))

    def forward(params, x, mask, pos):
        return port.apply(params, x, reference, levels, attention_mask=mask,
                          position_embeddings=pos)

    # a fixed random readout of the output: the penalty's score (the plain sum of a
    # LayerNorm's output would not depend on x)
    readout = jnp.asarray(np.random.default_rng(args.seed + 1).standard_normal(
        (1, x.shape[1], args.d_model)) / np.sqrt(x.shape[1] * args.d_model), jnp.float32)

    def loss_fn(params, x, mask, pos):
        target = forward(teacher, x, mask, pos)
        fit = jnp.mean((forward(params, x, mask, pos) - target) ** 2)
        # the penalty's gradient in x passes through the attention's reads (the values and
        # the sampling locations): its gradient in the parameters differentiates them twice
        g = jax.grad(lambda x: jnp.sum(forward(params, x, mask, pos) * readout))(x)
        r1 = jnp.mean(jnp.sum(g ** 2, axis=(1, 2)))
        return fit + R1_WEIGHT * r1, (fit, r1)

    tx = optax.adam(args.lr)

    @jax.jit
    def step(params, opt, x, mask, pos):
        (loss, (fit, r1)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, x, mask, pos)
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt, jnp.stack([loss, fit, r1])

    params, opt = variables, tx.init(variables)
    # 4. the step as a GPU traces it: jaxpool's GPU table (the table is read when a
    # program is traced; on the CPU's the reads may be added back by XLA:CPU's
    # scatter-add, which runs in one fixed order there). The same program trains here.
    jax.clear_caches()
    with jaxpool.strategy_table.use_backend("gpu"):
        lowered = step.lower(params, opt, x, mask, pos)
    ops = lowered_ops(lowered)
    step = lowered.compile()
    scatters = sorted(op for op in ops if "scatter" in op)
    print(f"training step (loss + {R1_WEIGHT} x R1, its gradient, Adam) as traced for a GPU: "
          f"scatter ops: {', '.join(scatters) or 'none'}; gather ops: "
          f"{'yes' if 'gather' in ops else 'none'} (the attention's reads)")

    history = []
    for _ in tqdm(range(args.steps), desc="train", unit="step"):
        x, mask, pos = make_batch(rng, levels, args.batch_size, args.d_model)
        params, opt, metrics = step(params, opt, x, mask, pos)
        history.append(np.asarray(metrics))
    history = np.asarray(history)
    k = max(1, min(10, args.steps // 4))
    first, last = float(history[:k, 1].mean()), float(history[-k:, 1].mean())
    print(f"fit to the teacher (mean squared error), mean of the first and last {k} steps: "
          f"{first:.4f} -> {last:.4f}; R1 {history[0, 2]:.3f} -> {history[-1, 2]:.3f}")

    # 5. the same step twice on the same parameters and batch: the same bits
    runs = [sha(step(params, opt, x, mask, pos)) for _ in range(2)]
    same = runs[0] == runs[1]
    print(f"training step with its double backward, run twice: "
          f"{'bitwise identical' if same else 'DIFFER'} ({runs[0][:16]}, {runs[1][:16]})")

    args.out.mkdir(parents=True, exist_ok=True)
    metrics = {"levels": levels, "steps": args.steps, "parity_ok": report.ok,
               "parity_worst_output_abs_err": max(
                   (r.abs_err for r in report.rows if r.kind == "output"), default=None),
               "losses": history[:, 0].tolist(), "fit_first": first, "fit_last": last,
               "step_scatter_ops": scatters, "step_has_gather": "gather" in ops,
               "bitwise_identical": same}
    (args.out / "deformable_encoder_metrics.json").write_text(json.dumps(metrics, indent=2))
    return 0 if report.ok and same and not scatters else 1


if __name__ == "__main__":
    sys.exit(main())
