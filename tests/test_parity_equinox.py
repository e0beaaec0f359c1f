"""parity on Equinox ports written as Equinox users write them: one example at a time,
``jax.vmap`` over tokens inside, BatchNorm with its ``eqx.nn.State``. Three models, each
with its torch original, float64:

* a torchvision-style ResNet (BatchNorm, residual blocks with an ``eqx.nn.Sequential``
  shortcut, max pool, adaptive pool);
* a ViT (patch convolution, a class token and position embeddings held raw,
  ``nn.MultiheadAttention`` against ``eqx.nn.MultiheadAttention``);
* a BERT encoder from token ids with an attention mask (Hugging Face's torch BERT against
  a port with the attention written out, returning a dict named as torch's output).

For each: the load equals a map written out by hand, leaf by leaf, and leaves the user's
module and state as they were; the weights go back into torch unchanged; the faithful port
passes in both modes; planted bugs (a wrong epsilon, a swapped kernel, a missing
activation) are each the first row named. Every Equinox layer type with a rule is
checked against its torch counterpart on its own.
"""

from __future__ import annotations

import copy
import functools
import itertools

import numpy as np
import pytest
import torch

import parity
from parity.convert import x64

eqx = pytest.importorskip("equinox")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

torch.manual_seed(0)


def _f64(tree):
    return jax.tree_util.tree_map(
        lambda a: a.astype(jnp.float64) if eqx.is_inexact_array(a) else a, tree)


def _build(make):
    """``make()`` (a module, or (module, state)) in float64, with random arrays drawn in
    NumPy: Equinox's own initialisers compile a program per shape, which took most of a
    test's time (the load replaces every one of them anyway)."""
    with x64():
        shapes = eqx.filter_eval_shape(make)
    rng = np.random.default_rng(2)

    def concrete(a):
        if not isinstance(a, jax.ShapeDtypeStruct):
            return a
        if jnp.issubdtype(a.dtype, jnp.inexact):
            return parity.to_jax(rng.standard_normal(a.shape).astype(np.float64))
        if a.weak_type:  # a BatchNorm's counter, as Equinox makes it
            return jnp.asarray(0)
        return parity.to_jax(np.zeros(a.shape, a.dtype))

    return jax.tree_util.tree_map(concrete, shapes)


def _trained_like(model: torch.nn.Module) -> torch.nn.Module:
    """Norm scales and shifts away from 1 and 0, running statistics away from 0 and 1: a
    fresh norm is the identity, under which an epsilon or a swap could pass unseen."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.LayerNorm)):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
    return model.double().eval()


# --------------------------------------------------------------------------- ResNet


class TorchBlock(torch.nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.relu = torch.nn.ReLU(inplace=True)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = torch.nn.Sequential(
                torch.nn.Conv2d(cin, cout, 1, stride, bias=False), torch.nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class TorchResNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.relu = torch.nn.ReLU(inplace=True)
        self.maxpool = torch.nn.MaxPool2d(3, 2, 1)
        self.layer1 = torch.nn.Sequential(TorchBlock(8, 8, 1))
        self.layer2 = torch.nn.Sequential(TorchBlock(8, 16, 2))
        self.avgpool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class Block(eqx.Module):
    conv1: eqx.nn.Conv2d
    bn1: eqx.nn.BatchNorm
    conv2: eqx.nn.Conv2d
    bn2: eqx.nn.BatchNorm
    downsample: eqx.nn.Sequential | None
    relu_after_bn1: bool = eqx.field(static=True)

    def __init__(self, cin, cout, stride, key, eps=1e-5, relu_after_bn1=True):
        k1, k2, k3 = jax.random.split(key, 3)
        self.conv1 = eqx.nn.Conv2d(cin, cout, 3, stride, 1, use_bias=False, key=k1)
        self.bn1 = eqx.nn.BatchNorm(cout, "batch", mode="batch")
        self.conv2 = eqx.nn.Conv2d(cout, cout, 3, 1, 1, use_bias=False, key=k2)
        self.bn2 = eqx.nn.BatchNorm(cout, "batch", eps=eps, mode="batch")
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = eqx.nn.Sequential([
                eqx.nn.Conv2d(cin, cout, 1, stride, use_bias=False, key=k3),
                eqx.nn.BatchNorm(cout, "batch", mode="batch")])
        self.relu_after_bn1 = relu_after_bn1

    def __call__(self, x, state):
        out, state = self.bn1(self.conv1(x), state)
        if self.relu_after_bn1:
            out = jax.nn.relu(out)
        out, state = self.bn2(self.conv2(out), state)
        identity = x
        if self.downsample is not None:
            identity, state = self.downsample(x, state)
        return jax.nn.relu(out + identity), state


class ResNet(eqx.Module):
    conv1: eqx.nn.Conv2d
    bn1: eqx.nn.BatchNorm
    maxpool: eqx.nn.MaxPool2d
    layer1: list
    layer2: list
    avgpool: eqx.nn.AdaptiveAvgPool2d
    fc: eqx.nn.Linear

    def __init__(self, key, eps=1e-5, relu_after_bn1=True):
        k = jax.random.split(key, 4)
        self.conv1 = eqx.nn.Conv2d(3, 8, 3, 1, 1, use_bias=False, key=k[0])
        self.bn1 = eqx.nn.BatchNorm(8, "batch", mode="batch")
        self.maxpool = eqx.nn.MaxPool2d(3, 2, 1)
        self.layer1 = [Block(8, 8, 1, k[1], relu_after_bn1=relu_after_bn1)]
        self.layer2 = [Block(8, 16, 2, k[2], eps=eps)]
        self.avgpool = eqx.nn.AdaptiveAvgPool2d(1)
        self.fc = eqx.nn.Linear(16, 10, key=k[3])

    def __call__(self, x, state):
        x, state = self.bn1(self.conv1(x), state)
        x = self.maxpool(jax.nn.relu(x))
        for block in self.layer1 + self.layer2:
            x, state = block(x, state)
        return self.fc(self.avgpool(x).reshape(-1)), state


def _resnet_map(t: TorchResNet, m: ResNet, state) -> list[tuple[str, object, np.ndarray]]:
    """The load written out: (what, Equinox array, torch's value in Equinox's layout)."""
    def w(p):
        return p.detach().numpy()

    out = []

    def bn(name, tb, eb):
        mean, var = state.get(eb.batch_state_index)
        out.extend([(f"{name}.weight", eb.weight, w(tb.weight)),
                    (f"{name}.bias", eb.bias, w(tb.bias)),
                    (f"{name}.running_mean", mean, w(tb.running_mean)),
                    (f"{name}.running_var", var, w(tb.running_var))])

    out.append(("conv1", m.conv1.weight, w(t.conv1.weight)))
    bn("bn1", t.bn1, m.bn1)
    for name, tl, el in (("layer1", t.layer1, m.layer1), ("layer2", t.layer2, m.layer2)):
        tb, eb = tl[0], el[0]
        out.append((f"{name}.0.conv1", eb.conv1.weight, w(tb.conv1.weight)))
        bn(f"{name}.0.bn1", tb.bn1, eb.bn1)
        out.append((f"{name}.0.conv2", eb.conv2.weight, w(tb.conv2.weight)))
        bn(f"{name}.0.bn2", tb.bn2, eb.bn2)
        if tb.downsample is not None:
            out.append((f"{name}.0.downsample.0", eb.downsample.layers[0].weight,
                        w(tb.downsample[0].weight)))
            bn(f"{name}.0.downsample.1", tb.downsample[1], eb.downsample.layers[1])
    out += [("fc.weight", m.fc.weight, w(t.fc.weight)), ("fc.bias", m.fc.bias, w(t.fc.bias))]
    return out


# --------------------------------------------------------------------------- ViT

D, HEADS, PATCH, IMAGE = 16, 2, 4, 8


class TorchViTBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(D)
        self.attn = torch.nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.norm2 = torch.nn.LayerNorm(D)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(D, 2 * D), torch.nn.GELU(),
                                       torch.nn.Linear(2 * D, D))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TorchViT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        n = (IMAGE // PATCH) ** 2
        self.patch = torch.nn.Conv2d(3, D, PATCH, PATCH)
        self.cls_token = torch.nn.Parameter(torch.randn(1, 1, D))
        self.pos_embed = torch.nn.Parameter(torch.randn(1, n + 1, D))
        self.blocks = torch.nn.ModuleList([TorchViTBlock() for _ in range(2)])
        self.norm = torch.nn.LayerNorm(D)
        self.head = torch.nn.Linear(D, 5)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


class ViTBlock(eqx.Module):
    norm1: eqx.nn.LayerNorm
    attn: eqx.nn.MultiheadAttention
    norm2: eqx.nn.LayerNorm
    mlp: eqx.nn.Sequential

    def __init__(self, key, activation=functools.partial(jax.nn.gelu, approximate=False)):
        k1, k2, k3 = jax.random.split(key, 3)
        self.norm1 = eqx.nn.LayerNorm(D)
        self.attn = eqx.nn.MultiheadAttention(HEADS, D, use_query_bias=True, use_key_bias=True,
                                              use_value_bias=True, use_output_bias=True, key=k1)
        self.norm2 = eqx.nn.LayerNorm(D)
        self.mlp = eqx.nn.Sequential([eqx.nn.Linear(D, 2 * D, key=k2), eqx.nn.Lambda(activation),
                                      eqx.nn.Linear(2 * D, D, key=k3)])

    def __call__(self, x):
        h = jax.vmap(self.norm1)(x)
        x = x + self.attn(h, h, h)
        return x + jax.vmap(self.mlp)(jax.vmap(self.norm2)(x))


class ViT(eqx.Module):
    patch: eqx.nn.Conv2d
    cls_token: jax.Array
    pos_embed: jax.Array
    blocks: list
    norm: eqx.nn.LayerNorm
    head: eqx.nn.Linear

    def __init__(self, key, **block):
        k = jax.random.split(key, 6)
        n = (IMAGE // PATCH) ** 2
        self.patch = eqx.nn.Conv2d(3, D, PATCH, PATCH, key=k[0])
        self.cls_token = jax.random.normal(k[1], (1, 1, D))
        self.pos_embed = jax.random.normal(k[2], (1, n + 1, D))
        self.blocks = [ViTBlock(k[3], **block), ViTBlock(k[4], **block)]
        self.norm = eqx.nn.LayerNorm(D)
        self.head = eqx.nn.Linear(D, 5, key=k[5])

    def __call__(self, x):
        x = self.patch(x).reshape(D, -1).T
        x = jnp.concatenate([self.cls_token[0], x]) + self.pos_embed[0]
        for block in self.blocks:
            x = block(x)
        return self.head(jax.vmap(self.norm)(x)[0])


def _vit_map(t: TorchViT, m: ViT, state=None):
    def w(p):
        return p.detach().numpy()

    out = [("patch.weight", m.patch.weight, w(t.patch.weight)),
           ("patch.bias", m.patch.bias, w(t.patch.bias)[:, None, None]),
           ("cls_token", m.cls_token, w(t.cls_token)), ("pos_embed", m.pos_embed, w(t.pos_embed))]
    for i, (tb, eb) in enumerate(zip(t.blocks, m.blocks)):
        q, k, v = np.split(w(tb.attn.in_proj_weight), 3)
        qb, kb, vb = np.split(w(tb.attn.in_proj_bias), 3)
        a = eb.attn
        out += [(f"blocks.{i}.norm1.weight", eb.norm1.weight, w(tb.norm1.weight)),
                (f"blocks.{i}.norm1.bias", eb.norm1.bias, w(tb.norm1.bias)),
                (f"blocks.{i}.attn.q", a.query_proj.weight, q),
                (f"blocks.{i}.attn.qb", a.query_proj.bias, qb),
                (f"blocks.{i}.attn.k", a.key_proj.weight, k),
                (f"blocks.{i}.attn.kb", a.key_proj.bias, kb),
                (f"blocks.{i}.attn.v", a.value_proj.weight, v),
                (f"blocks.{i}.attn.vb", a.value_proj.bias, vb),
                (f"blocks.{i}.attn.out", a.output_proj.weight, w(tb.attn.out_proj.weight)),
                (f"blocks.{i}.attn.outb", a.output_proj.bias, w(tb.attn.out_proj.bias)),
                (f"blocks.{i}.norm2.weight", eb.norm2.weight, w(tb.norm2.weight)),
                (f"blocks.{i}.norm2.bias", eb.norm2.bias, w(tb.norm2.bias))]
        for j in (0, 2):
            out += [(f"blocks.{i}.mlp.{j}.weight", eb.mlp.layers[j].weight, w(tb.mlp[j].weight)),
                    (f"blocks.{i}.mlp.{j}.bias", eb.mlp.layers[j].bias, w(tb.mlp[j].bias))]
    out += [("norm.weight", m.norm.weight, w(t.norm.weight)),
            ("norm.bias", m.norm.bias, w(t.norm.bias)),
            ("head.weight", m.head.weight, w(t.head.weight)),
            ("head.bias", m.head.bias, w(t.head.bias))]
    return out


# --------------------------------------------------------------------------- BERT

VOCAB, LENGTH = 50, 7


class SelfAttention(eqx.Module):
    query: eqx.nn.Linear
    key: eqx.nn.Linear
    value: eqx.nn.Linear
    heads: int = eqx.field(static=True)

    def __init__(self, d, heads, key):
        k = jax.random.split(key, 3)
        self.query, self.key, self.value = (eqx.nn.Linear(d, d, key=kk) for kk in k)
        self.heads = heads

    def __call__(self, x, mask):
        t, d = x.shape
        q, k, v = (jax.vmap(p)(x).reshape(t, self.heads, -1)
                   for p in (self.query, self.key, self.value))
        scores = jnp.einsum("qhd,khd->hqk", q, k) / jnp.sqrt(d // self.heads)
        scores = jnp.where(mask[None, None, :] > 0, scores, jnp.finfo(scores.dtype).min)
        return jnp.einsum("hqk,khd->qhd", jax.nn.softmax(scores, -1), v).reshape(t, d)


class EncoderLayer(eqx.Module):
    attention: SelfAttention
    attention_output: eqx.nn.Linear
    attention_norm: eqx.nn.LayerNorm
    intermediate: eqx.nn.Linear
    output: eqx.nn.Linear
    output_norm: eqx.nn.LayerNorm
    activation: bool = eqx.field(static=True)

    def __init__(self, d, ff, heads, key, eps=1e-12, activation=True):
        k = jax.random.split(key, 4)
        self.attention = SelfAttention(d, heads, k[0])
        self.attention_output = eqx.nn.Linear(d, d, key=k[1])
        self.attention_norm = eqx.nn.LayerNorm(d, eps=eps)
        self.intermediate = eqx.nn.Linear(d, ff, key=k[2])
        self.output = eqx.nn.Linear(ff, d, key=k[3])
        self.output_norm = eqx.nn.LayerNorm(d, eps=1e-12)
        self.activation = activation

    def __call__(self, x, mask):
        h = jax.vmap(self.attention_output)(self.attention(x, mask))
        x = jax.vmap(self.attention_norm)(x + h)
        h = jax.vmap(self.intermediate)(x)
        if self.activation:
            h = jax.nn.gelu(h, approximate=False)
        return jax.vmap(self.output_norm)(x + jax.vmap(self.output)(h))


class Embeddings(eqx.Module):
    word_embeddings: eqx.nn.Embedding
    position_embeddings: eqx.nn.Embedding
    token_type_embeddings: eqx.nn.Embedding
    LayerNorm: eqx.nn.LayerNorm

    def __init__(self, d, key):
        k = jax.random.split(key, 3)
        self.word_embeddings = eqx.nn.Embedding(VOCAB, d, key=k[0])
        self.position_embeddings = eqx.nn.Embedding(16, d, key=k[1])
        self.token_type_embeddings = eqx.nn.Embedding(2, d, key=k[2])
        self.LayerNorm = eqx.nn.LayerNorm(d, eps=1e-12)

    def __call__(self, ids):
        x = (jax.vmap(self.word_embeddings)(ids)
             + jax.vmap(self.position_embeddings)(jnp.arange(ids.shape[0]))
             + jax.vmap(self.token_type_embeddings)(jnp.zeros_like(ids)))
        return jax.vmap(self.LayerNorm)(x)


class Bert(eqx.Module):
    embeddings: Embeddings
    layers: list
    pooler: eqx.nn.Linear

    def __init__(self, key, d=16, ff=24, heads=2, **layer):
        k = jax.random.split(key, 4)
        self.embeddings = Embeddings(d, k[0])
        self.layers = [EncoderLayer(d, ff, heads, k[1], **layer),
                       EncoderLayer(d, ff, heads, k[2])]
        self.pooler = eqx.nn.Linear(d, d, key=k[3])

    def __call__(self, ids, mask):
        x = self.embeddings(ids)
        for layer in self.layers:
            x = layer(x, mask)
        return {"last_hidden_state": x, "pooler_output": jnp.tanh(self.pooler(x[0]))}


def _bert_map(t, m: Bert, state=None):
    def w(p):
        return p.detach().numpy()

    e, te = m.embeddings, t.embeddings
    out = [("word", e.word_embeddings.weight, w(te.word_embeddings.weight)),
           ("position", e.position_embeddings.weight, w(te.position_embeddings.weight)),
           ("token_type", e.token_type_embeddings.weight, w(te.token_type_embeddings.weight)),
           ("ln.weight", e.LayerNorm.weight, w(te.LayerNorm.weight)),
           ("ln.bias", e.LayerNorm.bias, w(te.LayerNorm.bias))]
    for i, (el, tl) in enumerate(zip(m.layers, t.encoder.layer)):
        pairs = [(el.attention.query, tl.attention.self.query),
                 (el.attention.key, tl.attention.self.key),
                 (el.attention.value, tl.attention.self.value),
                 (el.attention_output, tl.attention.output.dense),
                 (el.attention_norm, tl.attention.output.LayerNorm),
                 (el.intermediate, tl.intermediate.dense), (el.output, tl.output.dense),
                 (el.output_norm, tl.output.LayerNorm)]
        for k, (a, b) in enumerate(pairs):
            out += [(f"layer{i}.{k}.weight", a.weight, w(b.weight)),
                    (f"layer{i}.{k}.bias", a.bias, w(b.bias))]
    out += [("pooler.weight", m.pooler.weight, w(t.pooler.dense.weight)),
            ("pooler.bias", m.pooler.bias, w(t.pooler.dense.bias))]
    return out


# --------------------------------------------------------------------------- the cases


class Case:
    """A torch model, its Equinox port (float64, fresh weights) and state, the input and
    the arguments each side takes, and parity's load."""

    def __init__(self, name: str):
        self.name = name
        rng = np.random.default_rng(0)
        self.torch_kwargs: dict = {}
        self.flax_kwargs: dict = {}
        with x64():
            if name == "resnet":
                self.torch = _trained_like(TorchResNet())
                self.make = lambda **kw: _build(lambda: eqx.nn.make_with_state(ResNet)(
                    jax.random.key(0), **kw))
                self.x = rng.standard_normal((2, 3, 16, 16))
                self.hand_map = _resnet_map
            elif name == "vit":
                self.torch = _trained_like(TorchViT())
                self.make = lambda **kw: (_build(lambda: ViT(jax.random.key(0), **kw)), None)
                self.x = rng.standard_normal((2, 3, IMAGE, IMAGE))
                self.hand_map = _vit_map
            else:
                transformers = pytest.importorskip("transformers")
                transformers.logging.set_verbosity_error()
                config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=16,
                                                 num_hidden_layers=2, num_attention_heads=2,
                                                 intermediate_size=24, max_position_embeddings=16)
                self.torch = _trained_like(transformers.BertModel(config))
                self.make = lambda **kw: (_build(lambda: Bert(jax.random.key(0), **kw)), None)
                self.x = rng.integers(3, VOCAB, (2, LENGTH))
                mask = np.ones((2, LENGTH), np.int64)
                mask[1, LENGTH - 2:] = 0
                self.torch_kwargs, self.flax_kwargs = {"attention_mask": mask}, {"mask": mask}
                self.hand_map = _bert_map
            self.model, self.state = self.make()
            self.before = [np.array(a) for a in _leaves(self.model, self.state)]
            self.loaded = self.load(self.model, self.state)

    def load(self, model, state):
        target = model if state is None else (model, state)
        with x64():
            out = parity.load_torch_weights(self.torch, target, x=self.x,
                                            flax_kwargs=self.flax_kwargs)
        return (out, None) if state is None else out

    def report(self):
        """The chained comparison of the faithful port, without gradients (made once)."""
        if not hasattr(self, "_report"):
            self._report = self.compare()
        return self._report

    def compare(self, loaded=None, torch_model=None, **kwargs):
        model, state = loaded or self.loaded
        kwargs.setdefault("gradients", False)
        with x64():
            return parity.compare_layers(torch_model or self.torch, model, state, self.x,
                                         torch_kwargs=self.torch_kwargs,
                                         flax_kwargs=self.flax_kwargs, **kwargs)


_CASES: dict[str, Case] = {}


def _get(name: str) -> Case:
    if name not in _CASES:
        _CASES[name] = Case(name)
    return _CASES[name]


@pytest.fixture(params=["resnet", "vit", "bert"])
def case(request):
    return _get(request.param)


def _leaves(model, state):
    params = jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array))
    stats = [] if state is None else [a for a in jax.tree_util.tree_leaves(state)
                                      if jnp.issubdtype(a.dtype, jnp.floating)]
    return params + stats


def test_the_load_equals_the_map_written_out_and_leaves_the_port_as_it_was(case):
    model, state = case.loaded
    expected = case.hand_map(case.torch, model, state)
    for what, have, want in expected:
        assert np.asarray(have).dtype == np.float64, what
        np.testing.assert_array_equal(np.asarray(have), want, err_msg=what)
    # the map covers every floating-point leaf of the port and its state
    assert len(expected) == len(_leaves(model, state))
    # the user's module and state are as they were, and the state is still usable
    for a, b in zip(_leaves(case.model, case.state), case.before, strict=True):
        np.testing.assert_array_equal(np.asarray(a), b)
    assert model is not case.model
    # and back into torch, unchanged
    back = copy.deepcopy(case.torch)
    with torch.no_grad():
        for p in back.parameters():
            p.zero_()
    parity.to_torch_weights(case.loaded if state is not None else model, back, x=case.x,
                            flax_kwargs=case.flax_kwargs)
    for name, t in case.torch.state_dict().items():
        torch.testing.assert_close(back.state_dict()[name], t, rtol=0, atol=0, msg=name)


def _faithful_grid():
    # each model by default but BERT (whose faithful chained comparison without gradients
    # runs by default below), each mode and each dtype
    default = {("resnet", "shadow", "float32"), ("vit", "chained", "float64")}
    return [pytest.param(*combo, id="-".join(combo),
                         marks=() if combo in default else pytest.mark.slow)
            for combo in itertools.product(("resnet", "vit", "bert"), ("chained", "shadow"),
                                           ("float64", "float32"))]


@pytest.mark.parametrize("name, mode, dtype", _faithful_grid())
def test_the_faithful_port_passes(name, mode, dtype):
    """float32 is judged against torch in float64 (parity_guide, tolerances)."""
    case = _get(name)
    report = case.compare(mode=mode, gradients=True, dtype=np.dtype(dtype))
    assert report.ok, report.format()
    kinds = {r.kind for r in report.rows}
    assert {"weight", "output", "gradient", "input gradient"} <= kinds
    assert "torch vs Equinox" in report.format()


def test_the_faithful_bert_passes_from_its_token_ids():
    report = _get("bert").report()
    assert report.ok, report.format()


def test_train_mode_normalises_with_the_batch_statistics_on_both_sides():
    """mode="batch" trains as torch does."""
    report = _get("resnet").compare(train=True)
    assert report.ok and "train mode" in report.format(), report.format()


@pytest.mark.slow
def test_an_ema_batch_norm_in_train_mode_is_a_difference_of_the_model():
    """mode="ema" blends the running statistics into the batch's: named at the first
    BatchNorm."""
    case = _get("resnet")
    model, _ = _build(lambda: eqx.nn.make_with_state(ResNet)(jax.random.key(0)))
    with x64():
        model = jax.tree_util.tree_map(  # every BatchNorm in mode "ema", with its own state
            lambda m: eqx.nn.BatchNorm(m.input_size, "batch", mode="ema")
            if isinstance(m, eqx.nn.BatchNorm) else m, model,
            is_leaf=lambda m: isinstance(m, eqx.nn.BatchNorm))
        state = eqx.nn.State(model)
    first = case.compare(case.load(model, state), train=True).first_divergence
    assert (first.kind, first.torch_name) == ("output", "bn1"), first


def test_the_resnet_pairs_every_layer_with_weights_and_its_blocks():
    report = _get("resnet").report()
    outputs = {r.torch_name: r.flax_path for r in report.rows if r.kind == "output"}
    assert outputs["layer2.0.downsample.1"] == "layer2/0/downsample/layers/1", outputs
    assert outputs["layer2.0"] == "layer2/0", outputs  # its (output, state): the output
    assert outputs["maxpool"] == "maxpool" and outputs["avgpool"] == "avgpool"
    assert outputs[""] == "", outputs


def test_the_vit_attention_is_one_layer_on_both_sides():
    case = _get("vit")
    report = case.report()
    assert ("blocks.0.attn (MultiheadAttention) -> blocks/0/attn [equinox multihead_attention"
            in report.alignment), report.alignment
    weights = {r.torch_name: r.flax_path for r in report.rows if r.kind == "weight"}
    assert weights["blocks.1.attn.in_proj_weight[16:32]"] == "blocks/1/attn/key_proj/weight"
    assert weights["blocks.1.attn.out_proj.weight"] == "blocks/1/attn/output_proj/weight"
    assert weights["cls_token"] == "cls_token"
    # torch's attention returns (output, None): the output is compared
    outputs = {r.torch_name: r.flax_path for r in report.rows if r.kind == "output"}
    assert outputs["blocks.0.attn[0]"] == "blocks/0/attn", outputs


def test_the_bert_output_is_compared_by_its_names():
    report = _get("bert").report()
    outputs = {r.torch_name: r.flax_path for r in report.rows if r.kind == "output"}
    assert outputs["['pooler_output']"] == "['pooler_output']", outputs
    assert outputs["embeddings.word_embeddings"] == "embeddings/word_embeddings"


# --------------------------------------------------------------------------- planted bugs


def _swap_kernel(case: Case) -> tuple[tuple, str]:
    """A kernel loaded with two of its axes swapped (a square one, so that it still runs)."""
    model, state = case.loaded
    where, path = {"resnet": (lambda m: m.layer1[0].conv2.weight, "layer1/0/conv2/weight"),
                   "vit": (lambda m: m.blocks[1].attn.query_proj.weight,
                           "blocks/1/attn/query_proj/weight"),
                   "bert": (lambda m: m.layers[1].attention.key.weight,
                            "layers/1/attention/key/weight")}[case.name]
    w = where(model)
    swapped = jnp.swapaxes(w, -1, -2) if case.name == "resnet" else w.T
    return (eqx.tree_at(where, model, swapped), state), path


def _bug_grid(default):
    return [pytest.param(name, mode, marks=() if (name, mode) == default else pytest.mark.slow)
            for name in ("resnet", "vit", "bert") for mode in ("chained", "shadow")]


@pytest.mark.parametrize("name, mode", _bug_grid(("vit", "chained")))
def test_a_swapped_kernel_is_named_first(name, mode):
    case = _get(name)
    loaded, path = _swap_kernel(case)
    first = case.compare(loaded, mode=mode).first_divergence
    assert (first.kind, first.flax_path) == ("weight", path), first


_EPSILON = {"resnet": ({"eps": 1e-3}, "layer2.0.bn2"),
            "bert": ({"eps": 1e-3}, "encoder.layer.0.attention.output.LayerNorm")}


@pytest.mark.parametrize("name, mode", [p for p in _bug_grid(("bert", "shadow"))
                                         if p.values[0] in _EPSILON])
def test_a_wrong_epsilon_is_named_first(name, mode):
    case = _get(name)
    kwargs, where = _EPSILON[name]
    with x64():
        buggy = case.load(*case.make(**kwargs))
    first = case.compare(buggy, mode=mode).first_divergence
    assert (first.kind, first.torch_name) == ("output", where), first


_ACTIVATION = {"resnet": ({"relu_after_bn1": False}, "layer1.0.conv2"),
               "vit": ({"activation": lambda x: x}, "blocks.0.mlp.2"),
               "bert": ({"activation": False}, "encoder.layer.0.output.dense")}


@pytest.mark.parametrize("name, mode", _bug_grid(("resnet", "shadow")))
def test_a_missing_activation_is_named_first(name, mode):
    """The activation is no module of its own: chained mode names the layer after it,
    shadow mode that layer's input, as the port computed it from torch's values."""
    case = _get(name)
    kwargs, where = _ACTIVATION[name]
    with x64():
        buggy = case.load(*case.make(**kwargs))
    first = case.compare(buggy, mode=mode).first_divergence
    want = "input" if mode == "shadow" else "output"
    assert (first.kind, first.torch_name) == (want, where), first


# --------------------------------------------------------------------------- each layer type


def _layers():
    """(torch layer, its Equinox counterpart, input) for every Equinox layer type with a
    rule: the layouts are checked by running both."""
    k = jax.random.key(0)
    return {
        "Linear": (torch.nn.Linear(5, 3), eqx.nn.Linear(5, 3, key=k), (4, 5)),
        "Conv1d": (torch.nn.Conv1d(4, 6, 3, padding=1, groups=2),
                   eqx.nn.Conv1d(4, 6, 3, padding=1, groups=2, key=k), (2, 4, 9)),
        "Conv2d": (torch.nn.Conv2d(3, 4, (3, 2), stride=2), eqx.nn.Conv2d(3, 4, (3, 2), 2, key=k),
                   (2, 3, 8, 7)),
        "Conv3d": (torch.nn.Conv3d(2, 3, 2), eqx.nn.Conv3d(2, 3, 2, key=k), (2, 2, 4, 4, 4)),
        "ConvTranspose1d": (torch.nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1,
                                                     output_padding=1),
                            eqx.nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1,
                                                   output_padding=1, key=k), (2, 3, 5)),
        "ConvTranspose2d": (torch.nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 1), groups=2),
                            eqx.nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 1), groups=2, key=k),
                            (2, 4, 5, 4)),
        "ConvTranspose3d": (torch.nn.ConvTranspose3d(2, 3, 2, stride=2),
                            eqx.nn.ConvTranspose3d(2, 3, 2, stride=2, key=k), (2, 2, 3, 3, 3)),
        "LayerNorm": (torch.nn.LayerNorm((3, 4)), eqx.nn.LayerNorm((3, 4)), (2, 3, 4)),
        "GroupNorm": (torch.nn.GroupNorm(2, 4), eqx.nn.GroupNorm(2, 4), (2, 4, 5)),
        "RMSNorm": (torch.nn.RMSNorm(6, eps=1e-6),
                    eqx.nn.RMSNorm(6, eps=1e-6, use_bias=False), (3, 6)),
        "Embedding": (torch.nn.Embedding(7, 3), eqx.nn.Embedding(7, 3, key=k), (2, 4)),
        "MultiheadAttention": (
            torch.nn.MultiheadAttention(8, 2, batch_first=True),
            eqx.nn.MultiheadAttention(2, 8, use_query_bias=True, use_key_bias=True,
                                      use_value_bias=True, use_output_bias=True, key=k),
            (2, 5, 8)),
        "MultiheadAttention kdim": (
            torch.nn.MultiheadAttention(8, 2, kdim=6, vdim=6, batch_first=True),
            eqx.nn.MultiheadAttention(2, 8, 6, 6, use_query_bias=True, use_key_bias=True,
                                      use_value_bias=True, use_output_bias=True, key=k),
            (2, 5, 8)),
    }


class _Only(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x, *more):
        out = self.layer(x, *more) if more else (self.layer(x, x, x)[0] if isinstance(
            self.layer, torch.nn.MultiheadAttention) else self.layer(x))
        return out


class _EqxOnly(eqx.Module):
    layer: eqx.Module

    def __call__(self, x, *more):  # one example
        if isinstance(self.layer, eqx.nn.MultiheadAttention):
            return self.layer(x, *more) if more else self.layer(x, x, x)
        if isinstance(self.layer, eqx.nn.Embedding):
            return jax.vmap(self.layer)(x)
        return self.layer(x)


# Named here rather than read from _layers(): building the layers draws Equinox's initial
# weights, whose programs compile for seconds, in every process that collects this file.
LAYERS = ("Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
          "ConvTranspose3d", "LayerNorm", "GroupNorm", "RMSNorm", "Embedding",
          "MultiheadAttention", "MultiheadAttention kdim")


def test_every_layer_type_is_named():
    assert tuple(_layers()) == LAYERS


# The plain 3d convolutions under -m slow: their rules are the 1d and 2d ones' (grouped,
# strided, output-padded and non-square kernels there).
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n.endswith("3d")
                                  else n for n in LAYERS])
def test_each_layer_type_loads_and_computes_as_torch(name):
    t_layer, e_layer, shape = _layers()[name]
    rng = np.random.default_rng(0)
    with torch.no_grad():
        for p in t_layer.parameters():
            p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape))))
    t = _Only(t_layer).double().eval()
    x = (rng.integers(0, 7, shape) if name == "Embedding" else rng.standard_normal(shape))
    with x64():
        port = _f64(_EqxOnly(e_layer))
        more = ()
        if name == "MultiheadAttention kdim":
            kv = rng.standard_normal((2, 5, 6))
            more = (kv, kv)
        loaded = parity.load_torch_weights(t, port)
        with torch.no_grad():
            want = t(*map(torch.from_numpy, (x,) + more))
        if isinstance(want, tuple):
            want = want[0]
        have = jax.vmap(loaded)(jnp.asarray(x), *map(jnp.asarray, more))
        np.testing.assert_allclose(np.asarray(have), want.numpy(), rtol=1e-12, atol=1e-12)
        back = copy.deepcopy(t)
        parity.to_torch_weights(loaded, back)
        for n, v in t.state_dict().items():
            torch.testing.assert_close(back.state_dict()[n], v, rtol=0, atol=0)


def test_the_state_is_written_as_each_batch_norm_mode_reads_it():
    """mode="batch" normalises with its running averages over a debiasing factor its counter
    gives: the load sets the counter to 0, and a trained state is read back through it;
    mode="ema" reads its statistics as they are."""
    t = torch.nn.Sequential(torch.nn.BatchNorm1d(3)).double().eval()
    with torch.no_grad():
        t[0].running_mean.copy_(torch.tensor([0.1, -0.2, 0.3]))
        t[0].running_var.copy_(torch.tensor([0.5, 1.5, 2.0]))

    class Port(eqx.Module):
        bn: eqx.nn.BatchNorm

        def __init__(self, mode):
            self.bn = eqx.nn.BatchNorm(3, "batch", mode=mode)

        def __call__(self, x, state):
            return self.bn(x, state)

    x = np.random.default_rng(0).standard_normal((4, 3))
    with x64():
        for mode in ("batch", "ema"):
            port, state = _f64(eqx.nn.make_with_state(Port)(mode))
            if mode == "batch":  # a state after five training steps
                idx = port.bn.batch_counter
                state = jax.tree_util.tree_map(lambda a: a, state).set(idx, state.get(idx) + 5)
            loaded, new_state = parity.load_torch_weights(t, (port, state))
            report = parity.compare_layers(t, loaded, new_state, x)
            assert report.ok, report.format()
            if mode == "batch":
                assert int(state.get(port.bn.batch_counter)) == 5  # the given state, as it was
                assert int(new_state.get(loaded.bn.batch_counter)) == 0
        # a trained "batch" state: its statistics are what inference divides out
        port, state = _f64(eqx.nn.make_with_state(Port)("batch"))
        idx, stats = port.bn.batch_counter, port.bn.batch_state_index
        state = jax.tree_util.tree_map(lambda a: a, state)
        state = state.set(idx, state.get(idx) + 2)
        state = state.set(stats, (jnp.full(3, 0.19, jnp.float64), jnp.full(3, 0.38, jnp.float64)))
        back = copy.deepcopy(t)
        parity.to_torch_weights((port, state), back)
        scale = 1 - 0.99 ** 2
        np.testing.assert_allclose(back[0].running_mean.numpy(), 0.19 / scale, rtol=1e-12)
        np.testing.assert_allclose(back[0].running_var.numpy(), 0.38 / scale, rtol=1e-12)


def test_a_port_with_batch_norm_needs_its_state():
    case = _get("resnet")
    with pytest.raises(ValueError, match=r"pass the port with its state, \(model, state\)"):
        parity.load_torch_weights(case.torch, case.model)
    with pytest.raises(ValueError, match=r"pass the port with its state"):
        case.compare((case.model, None))


def test_a_square_weight_of_no_known_type_is_refused_for_an_equinox_linear():
    """GPT-2's Conv1D holds a Linear's weight as [in, out]; Equinox's Linear holds [out, in]:
    a square one fits both ways, and the load refuses until the type's layout is
    registered (never loading it as it is because the names agree)."""
    transformers = pytest.importorskip("transformers")
    conv1d = transformers.pytorch_utils.Conv1D

    class Torch(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = conv1d(6, 6)

        def forward(self, x):
            return self.proj(x)

    class Port(eqx.Module):
        proj: eqx.nn.Linear

        def __call__(self, x):
            return self.proj(x)

    t = Torch().double()
    with torch.no_grad():
        t.proj.weight.normal_()
    with x64():
        port = _f64(Port(eqx.nn.Linear(6, 6, key=jax.random.key(0))))
    with pytest.raises(ValueError) as err:
        parity.load_torch_weights(t, port)
    msg = str(err.value)
    assert "proj (Conv1D) -> proj: weight as it is, weight transposed" in msg, msg
    assert 'register(<type>, {"weight": "weight", "bias": "bias"}' in msg, msg
    rule = parity.layout.register(conv1d, {"weight": "weight", "bias": "bias"},
                                  to_flax={"weight": np.transpose},
                                  to_torch={"weight": np.transpose})
    try:
        loaded = parity.load_torch_weights(t, port)
        np.testing.assert_array_equal(np.asarray(loaded.proj.weight),
                                      t.proj.weight.detach().numpy().T)
        x = np.random.default_rng(0).standard_normal((3, 6))
        with x64():
            report = parity.compare_layers(t, loaded, None, x)
        assert report.ok, report.format()
    finally:
        parity.layout.unregister(rule)


def test_bad_arguments():
    case = _get("vit")
    with pytest.raises(TypeError, match="its eqx.nn.State or None"):
        parity.compare_layers(case.torch, case.loaded[0], {"params": {}}, case.x)
    with pytest.raises(ValueError, match="for an Equinox port, pass x alone"):
        parity.load_torch_weights(case.torch, case.model, model=case.loaded[0],
                                  x=case.x)
    with pytest.raises(ValueError, match="takes one example; pass vmap=False"):
        parity.load_torch_weights(case.torch, case.model, x=case.x[0])
