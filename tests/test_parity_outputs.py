"""Which outputs of two paired calls are compared: by what both sides say (names, the
same place in the same structure, the main output), never by a shape alone; and
dict-like outputs (Hugging Face's ``ModelOutput``) take part in shadow mode as tuples do.

The false alarm this settles: OPT's and BART's attention returned ``(output, weights,
(key, value))`` in torch (transformers before 4.48) and ``(output, weights)`` in Flax;
where the sequence length is the head size, the key cache has the attention weights'
shape, and a faithful port failed at ``self_attn[2][0] / self_attn[1]``. Hugging Face's
torch and Flax OPT and BART, at every tried configuration where the sequence length is the
head size (and the hidden size over the heads), pass in both modes. Where the length is
also the width, an activation's shape reads the same in torch's layout and channels-last:
those rows are not compared unless another array tells the layout, and the report says so.
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import parity
from parity.convert import x64
from parity.pairing import match_outputs

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


def _sds(*shape):
    return jax.ShapeDtypeStruct(shape, np.float64)


def test_leaves_that_only_a_shape_would_pair_are_one_sided_with_the_reason():
    b, h, t = 2, 2, 8  # the sequence length is the head size
    torch_out = [("[0]", np.zeros((b, t, 16))), ("[2][0]", np.zeros((b, h, t, t))),
                 ("[2][1]", np.zeros((b, h, t, t)))]
    flax_out = [("[0]", _sds(b, t, 16)), ("[1]", _sds(b, h, t, t))]
    m = match_outputs(torch_out, flax_out, channels_last=False)
    assert m.pairs == [(0, 0)]
    assert m.torch_only == [1, 2] and m.flax_only == [1]
    assert "only its shape would pair it with Flax's [1]" in m.why[("torch", 1)]
    assert "only its shape would pair it with torch's [2][0], [2][1]" in m.why[("flax", 1)]


def test_leaves_pair_by_name_by_place_and_the_main_output():
    # names agree whatever the order and the kind of mapping
    t = [("['hidden']", np.zeros((2, 3))), ("['pooled']", np.zeros((2, 4)))]
    f = [(".pooled", _sds(2, 4)), (".hidden", _sds(2, 3))]
    assert match_outputs(t, f, False).pairs == [(0, 1), (1, 0)]
    # the same place in the same structure, weights with the output on both sides
    t = [("[0]", np.zeros((2, 5, 8))), ("[1]", np.zeros((2, 2, 5, 5)))]
    f = [("[0]", _sds(2, 5, 8)), ("[1]", _sds(2, 2, 5, 5))]
    assert match_outputs(t, f, False).pairs == [(0, 0), (1, 1)]
    # an output alone against (output, weights): the main output
    m = match_outputs([("", np.zeros((2, 5, 8)))], f, False)
    assert m.pairs == [(0, 0)] and m.flax_only == [1] and not m.why
    # one side broadcasting what the other repeats is one row
    m = match_outputs([("[0]", np.zeros((1, 5)))], [("[0]", _sds(2, 5))], False)
    assert m.pairs == [(0, 0)]
    # a shape no row compares, at the same place: one-sided, and said so
    m = match_outputs([("[0]", np.zeros((2, 5))), ("[1]", np.zeros((3,)))],
                      [("[0]", _sds(2, 5)), ("[1]", _sds(4,))], False)
    assert m.pairs == [(0, 0)] and "of a shape no row compares" in m.why[("torch", 1)]


# --------------------------------------------------------------------------- OPT and BART

VOCAB = 50


def _legacy_opt(model):
    """OPT's attention and decoder layer as transformers before 4.48 returned and read them:
    the attention returns (output, weights, (key, value)), the layer unpacks three."""
    def attn_forward(self, hidden_states, attention_mask=None, layer_head_mask=None,
                     output_attentions=False, **_):
        out, weights = type(self).forward(self, hidden_states, attention_mask=attention_mask,
                                          layer_head_mask=layer_head_mask,
                                          output_attentions=output_attentions)
        b, t, _ = hidden_states.shape

        def heads(proj):  # the cache, computed as the attention computes it (no module call)
            y = torch.nn.functional.linear(hidden_states, proj.weight, proj.bias)
            return y.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)

        return out, weights, (heads(self.k_proj), heads(self.v_proj))

    def layer_forward(self, hidden_states, attention_mask=None, layer_head_mask=None,
                      output_attentions=False, **_):
        residual = hidden_states
        if self.do_layer_norm_before:
            hidden_states = self.self_attn_layer_norm(hidden_states)
        hidden_states, weights, _present = self.self_attn(
            hidden_states=hidden_states, attention_mask=attention_mask,
            layer_head_mask=layer_head_mask, output_attentions=output_attentions)
        hidden_states = residual + hidden_states
        if not self.do_layer_norm_before:
            hidden_states = self.self_attn_layer_norm(hidden_states)
        shape = hidden_states.shape
        hidden_states = hidden_states.reshape(-1, hidden_states.size(-1))
        residual = hidden_states
        if self.do_layer_norm_before:
            hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = self.fc2(self.activation_fn(self.fc1(hidden_states)))
        hidden_states = (residual + hidden_states).view(shape)
        if not self.do_layer_norm_before:
            hidden_states = self.final_layer_norm(hidden_states)
        return (hidden_states,) + ((weights,) if output_attentions else ())

    for layer in model.decoder.layers:
        layer.self_attn.forward = types.MethodType(attn_forward, layer.self_attn)
        layer.forward = types.MethodType(layer_forward, layer)
    return model


class Case:
    """HF's torch model and Flax module at a configuration where the sequence length is the
    head size: hidden / heads = length."""

    def __init__(self, name: str, hidden: int, heads: int, legacy: bool = False):
        length = hidden // heads
        rng = np.random.default_rng(0)
        self.x = rng.integers(3, VOCAB, (2, length))
        mask = np.ones((2, length), np.int64)
        mask[1, length - 2:] = 0
        positions = np.broadcast_to(np.arange(length), (2, length))
        self.torch_kwargs: dict = {"attention_mask": mask, "use_cache": False}
        self.flax_kwargs: dict = {"attention_mask": mask}
        if name == "opt":
            config = transformers.OPTConfig(vocab_size=VOCAB, hidden_size=hidden,
                                            num_hidden_layers=2, ffn_dim=24,
                                            num_attention_heads=heads, max_position_embeddings=32,
                                            word_embed_proj_dim=hidden)
            torch_cls, flax_cls = transformers.OPTModel, transformers.FlaxOPTModel
            self.flax_kwargs["position_ids"] = np.cumsum(mask, 1) * mask - 1
        else:
            config = transformers.BartConfig(vocab_size=VOCAB, d_model=hidden, encoder_layers=1,
                                             decoder_layers=1, encoder_attention_heads=heads,
                                             decoder_attention_heads=heads, encoder_ffn_dim=24,
                                             decoder_ffn_dim=24, max_position_embeddings=32)
            torch_cls, flax_cls = transformers.BartModel, transformers.FlaxBartModel
            self.torch_kwargs["decoder_input_ids"] = self.x
            self.flax_kwargs.update(decoder_input_ids=self.x, position_ids=positions,
                                    decoder_attention_mask=np.ones_like(mask),
                                    decoder_position_ids=positions)
        with x64():
            self.torch = torch_cls(config).double().eval()
            if legacy:
                self.torch = _legacy_opt(self.torch)
            self.module = flax_cls(config, dtype=jnp.float64, _do_init=False).module

    def compare(self, **kwargs):
        kwargs.setdefault("gradients", False)
        with x64():
            return parity.compare_layers(self.torch, self.module, None, self.x,
                                         flax_kwargs=self.flax_kwargs,
                                         torch_kwargs=self.torch_kwargs, **kwargs)


_CASES: dict = {}


def _get(*key) -> Case:
    if key not in _CASES:
        _CASES[key] = Case(*key)
    return _CASES[key]


CONFIGS = [(16, 2), (16, 4), (8, 1)]  # (hidden, heads): the length is hidden / heads


def _grid(default):
    import itertools

    out = []
    for (name, legacy), (hidden, heads), mode, output_attentions in itertools.product(
            (("opt", True), ("opt", False), ("bart", False)), CONFIGS, ("chained", "shadow"),
            (False, True)):
        combo = (name, legacy, hidden, heads, mode, output_attentions)
        out.append(pytest.param(*combo, id="-".join(map(str, combo)),
                                marks=() if combo in default else pytest.mark.slow))
    return out


@pytest.mark.parametrize("name, legacy, hidden, heads, mode, output_attentions", _grid({
    ("opt", True, 16, 2, "chained", False), ("bart", False, 16, 2, "shadow", True)}))
def test_no_faithful_port_fails_where_the_cache_has_the_weights_shape(
        name, legacy, hidden, heads, mode, output_attentions):
    case = _get(name, hidden, heads, legacy)
    case.torch_kwargs["output_attentions"] = output_attentions
    case.flax_kwargs["output_attentions"] = output_attentions
    # torch's sdpa attention returns no weights; BART's eager one does, in the model's
    # dtype (OPT's computes its softmax in float32, a difference of the model)
    weights = name == "bart" and output_attentions
    case.torch.config._attn_implementation = "eager" if weights else "sdpa"
    report = case.compare(mode=mode, gradients=True)
    assert report.ok, report.format()
    if hidden // heads == hidden:  # a token model: its rows compared in torch's layout too
        settled = case.compare(mode=mode, gradients=True, channels_last=False)
        assert settled.ok and not settled.untold, settled.format()
    if legacy:  # the key cache is never compared with the weights
        assert not any("[2]" in r.torch_name for r in report.rows), report.format()
        said = [s for s in report.one_sided if "self_attn[2][0]" in s]
        assert said and all("only its shape would pair it" in s for s in said), report.one_sided
    if weights:  # the weights are: both sides return them at the same place
        rows = {r.torch_name: r.flax_path for r in report.rows if r.kind == "output"}
        attn = [k for k in rows if k.endswith("self_attn[1]")]
        assert attn and all(rows[k].endswith("self_attn[1]") for k in attn), rows


# --------------------------------------------------------------------------- ModelOutput


class _TorchInner(torch.nn.Module):
    def forward(self, x):
        from transformers.modeling_outputs import BaseModelOutput

        return BaseModelOutput(last_hidden_state=torch.tanh(x))


class _TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = torch.nn.Linear(4, 4)
        self.inner = _TorchInner()
        self.act = torch.nn.Tanh()
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.head(self.act(self.inner(self.dense(x)).last_hidden_state))


def _port(act_backward_scale: float):
    import flax.linen as nn
    from transformers.modeling_flax_outputs import FlaxBaseModelOutput

    @jax.custom_vjp
    def tanh(x):
        return jnp.tanh(x)

    tanh.defvjp(lambda x: (jnp.tanh(x), jnp.tanh(x)),
                lambda y, g: (act_backward_scale * g * (1 - y * y),))

    class Inner(nn.Module):
        def __call__(self, x):
            return FlaxBaseModelOutput(last_hidden_state=jnp.tanh(x))

    class Tanh(nn.Module):
        def __call__(self, x):
            return tanh(x)

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = Inner(name="inner")(nn.Dense(4, name="dense")(x)).last_hidden_state
            return nn.Dense(3, name="head")(Tanh(name="act")(h))

    return Net()


def test_a_model_output_gets_its_cotangent_in_shadow_mode():
    """The activation's backward alone is wrong: in shadow mode the block before it, which
    returns a ModelOutput on both sides, takes torch's cotangent and passes (without it,
    the activation's error would reach it); only the activation fails, at its input
    gradient."""
    torch_net = _TorchNet().double()
    x = np.random.default_rng(0).standard_normal((2, 4))
    with x64():
        good = parity.compare_layers(torch_net, _port(1.0), None, x, mode="shadow")
        assert good.ok, good.format()
        bad = parity.compare_layers(torch_net, _port(1.5), None, x, mode="shadow")
    failing = {(r.kind, r.torch_name) for r in bad.rows if not r.ok}
    assert failing == {("input gradient", "act")}, bad.format()
    outputs = [r.flax_path for r in bad.rows if r.kind == "output"]
    assert "inner['last_hidden_state']" in outputs, outputs


def test_record_torch_probes_every_leaf_of_a_model_output():
    from parity import record_torch

    net = _TorchNet().double()
    run = record_torch.run(net, np.ones((2, 4)), lambda leaves: [np.ones((2, 3))],
                           gradients=True)
    inner = next(c for c in run.calls if c.path == "inner")
    assert [p for p, _ in inner.outputs] == ["['last_hidden_state']"]
    assert len(inner.output_grads) == 1 and inner.output_grads[0] is not None


def test_an_array_whose_layout_the_shapes_cannot_tell_is_not_compared_and_said_so():
    """Where the length is the width (OPT at hidden 8, one head, length 8), [2, 8, 8] reads
    the same with axis 1 moved last (a channels-last port) and as it is, and no array of
    the model tells which: those rows are not compared (they failed, transposed, before),
    and the report says how to settle it; ``channels_last=False`` compares them all."""
    case = _get("opt", 8, 1, False)
    case.torch_kwargs["output_attentions"] = case.flax_kwargs["output_attentions"] = False
    case.torch.config._attn_implementation = "sdpa"
    told = case.compare()
    assert told.ok and told.untold, told.format()
    assert "output of decoder.embed_tokens / decoder/embed_tokens (2x8x8)" in told.untold
    assert "pass channels_last=False" in told.format()
    settled = case.compare(channels_last=False)
    assert settled.ok and not settled.untold, settled.format()
    outputs = {r.torch_name for r in settled.rows if r.kind == "output"}
    assert "decoder.embed_tokens" in outputs
