"""parity on Hugging Face ``transformers`` 4.x's Flax text ports, from their token ids: BERT,
GPT-2 (the LM head, tied to the token embeddings; ``Conv1D`` Linears holding [in, out]) and
T5's encoder (``shared`` and ``encoder.embed_tokens``: one tensor under two names), with
BEiT for blocks that return more on one side; under slow, RoBERTa, DistilBERT, ELECTRA,
OPT, ALBERT (one layer's weights called at every depth, on both sides) and BART (an encoder
and a decoder, one embedding under three names). Small configs, random weights, no download:

* the documented load equals Hugging Face's own converter
  (``convert_pytorch_state_dict_to_flax``) leaf for leaf, ties reported;
* ``compare_layers`` from the ids (and an attention mask) passes, chained and shadow,
  float64 and float32 (against torch in float64);
* a planted kernel change and a planted epsilon change are each the first row named;
* a change inside an attention block, outside every module with weights, is named in
  shadow mode too (the input of the layer after it, as the port computed it).

T5's Flax norm computes in float32 whatever its dtype: its float64 comparison fails at the
first norm, its float32 one passes. The default run checks each claim once; every model in
every mode is under ``slow``.
"""

from __future__ import annotations

import copy
import inspect
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import parity
from parity.convert import x64

transformers = pytest.importorskip("transformers")
flax_utils = pytest.importorskip("transformers.modeling_flax_pytorch_utils")
from flax.traverse_util import flatten_dict, unflatten_dict  # noqa: E402

transformers.logging.set_verbosity_error()

VOCAB, LENGTH = 50, 7


@pytest.fixture(scope="module", autouse=True)
def clip_with_old_keywords():
    """Hugging Face's Flax T5 calls ``jnp.clip(x, a_max=...)``, keywords newer JAX dropped:
    the old ones mapped onto the new while these tests run."""
    if "a_max" in inspect.signature(jnp.clip).parameters:
        yield
        return
    clip = jnp.clip

    def old_keywords(a, *args, a_min=None, a_max=None, **kwargs):
        kwargs.setdefault("min", a_min)
        kwargs.setdefault("max", a_max)
        return clip(a, *args, **kwargs)

    jnp.clip = old_keywords
    try:
        yield
    finally:
        jnp.clip = clip


def trained_like(model: torch.nn.Module) -> torch.nn.Module:
    """Norm scales near 1 and shifts away from 0: a fresh norm hides a wrong epsilon."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm) or hasattr(m, "variance_epsilon"):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=g))
                if getattr(m, "bias", None) is not None:
                    m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))
    return model.double().eval()


def _norms(model) -> list[tuple[str, torch.nn.Module]]:
    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, torch.nn.LayerNorm) or hasattr(m, "variance_epsilon")]


def _plant_epsilon(norm) -> None:
    if hasattr(norm, "variance_epsilon"):
        norm.variance_epsilon = 1e-3
    else:
        norm.eps = 1e-3


class Case:
    """A torch model, the Flax port's linen module (float64 and float32), the ids and the
    arguments each side takes, HF's converted weights and parity's load."""

    def __init__(self, name: str):
        self.name = name
        rng = np.random.default_rng(0)
        # ids from 3: torch's padding row (id 0 in BERT, 1 in RoBERTa and OPT) gets no
        # gradient, the Flax one does
        self.x = rng.integers(3, VOCAB, (2, LENGTH))
        mask = np.ones((2, LENGTH), np.int64)
        mask[1, LENGTH - 2:] = 0
        positions = np.broadcast_to(np.arange(LENGTH), (2, LENGTH))
        self.torch_kwargs: dict = {"attention_mask": mask}
        self.flax_kwargs: dict = {"attention_mask": mask}
        small = dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2,
                     num_attention_heads=2, intermediate_size=24, max_position_embeddings=16)
        if name in ("bert", "roberta", "electra", "albert"):
            config, torch_cls, flax_cls = {
                "bert": (transformers.BertConfig, transformers.BertModel,
                         transformers.FlaxBertModel),
                "roberta": (transformers.RobertaConfig, transformers.RobertaModel,
                            transformers.FlaxRobertaModel),
                "electra": (transformers.ElectraConfig, transformers.ElectraModel,
                            transformers.FlaxElectraModel),
                "albert": (transformers.AlbertConfig, transformers.AlbertModel,
                           transformers.FlaxAlbertModel)}[name]
            config = config(**small, **({} if name in ("bert", "roberta")
                                        else {"embedding_size": 8}))
            # RoBERTa counts positions from its padding id + 1, as torch's side does
            self.flax_kwargs.update(token_type_ids=np.zeros_like(self.x),
                                    position_ids=positions + (2 if name == "roberta" else 0))
        elif name == "distilbert":
            config = transformers.DistilBertConfig(vocab_size=VOCAB, dim=16, n_layers=2,
                                                   n_heads=2, hidden_dim=24,
                                                   max_position_embeddings=16)
            torch_cls, flax_cls = transformers.DistilBertModel, transformers.FlaxDistilBertModel
        elif name == "opt":
            config = transformers.OPTConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2,
                                            ffn_dim=24, num_attention_heads=2,
                                            max_position_embeddings=16, word_embed_proj_dim=16)
            torch_cls, flax_cls = transformers.OPTModel, transformers.FlaxOPTModel
            self.torch_kwargs["use_cache"] = False
            # torch's OPT counts positions over the mask: the same positions for the port
            self.flax_kwargs["position_ids"] = np.cumsum(mask, 1) * mask - 1
        elif name == "bart":  # encoder and decoder, three names for one embedding
            config = transformers.BartConfig(vocab_size=VOCAB, d_model=16, encoder_layers=1,
                                             decoder_layers=1, encoder_attention_heads=2,
                                             decoder_attention_heads=2, encoder_ffn_dim=24,
                                             decoder_ffn_dim=24, max_position_embeddings=16)
            torch_cls, flax_cls = transformers.BartModel, transformers.FlaxBartModel
            self.torch_kwargs.update(decoder_input_ids=self.x, use_cache=False)
            self.flax_kwargs.update(decoder_input_ids=self.x, position_ids=positions,
                                    decoder_attention_mask=np.ones_like(mask),
                                    decoder_position_ids=positions)
        elif name == "gpt2":
            config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=16, n_layer=2, n_head=2,
                                             n_positions=16)
            torch_cls, flax_cls = transformers.GPT2LMHeadModel, transformers.FlaxGPT2LMHeadModel
            self.torch_kwargs["use_cache"] = False
            self.flax_kwargs["position_ids"] = positions
        elif name == "t5":
            config = transformers.T5Config(vocab_size=VOCAB, d_model=16, d_kv=8, d_ff=24,
                                           num_layers=2, num_heads=2)
            torch_cls, flax_cls = transformers.T5EncoderModel, transformers.FlaxT5EncoderModel
        else:  # beit: a vision model whose blocks return more in torch
            config = transformers.BeitConfig(hidden_size=16, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=24,
                                             image_size=8, patch_size=4, num_channels=3)
            torch_cls, flax_cls = transformers.BeitModel, transformers.FlaxBeitModel
            self.x = rng.standard_normal((2, 3, 8, 8))
            self.torch_kwargs, self.flax_kwargs = {}, {}
        self.config = config
        with x64():
            self.torch = trained_like(torch_cls(config))
            hf = flax_cls(config, dtype=jnp.float64, _do_init=False)
            self.module = hf.module
            self.module32 = flax_cls(config, dtype=jnp.float32, _do_init=False).module
            self.x_flax = np.moveaxis(self.x, 1, -1) if name == "beit" else self.x
            shapes = jax.eval_shape(lambda key: self.module.init(key, self.x_flax,
                                                                 **self.flax_kwargs),
                                    jax.random.key(0))
            self.init = jax.tree_util.tree_map(lambda a: np.zeros(a.shape, np.float64),
                                               dict(shapes))
            like = types.SimpleNamespace(params=self.init["params"],
                                         base_model_prefix=hf.base_model_prefix)
            ref = flatten_dict({"params": flax_utils.convert_pytorch_state_dict_to_flax(
                self.torch.state_dict(), like)})
            self.reference = {k: np.asarray(v, np.float64) for k, v in ref.items()}
            # the documented load, into the structure eval_shape gives
            self.loaded = parity.load_torch_weights(self.torch, shapes, model=self.module,
                                                    x=self.x_flax, flax_kwargs=self.flax_kwargs)

    def compare(self, variables=None, torch_model=None, **kwargs):
        kwargs.setdefault("gradients", False)
        float32 = kwargs.get("dtype") == np.float32
        return parity.compare_layers(torch_model or self.torch,
                                     self.module32 if float32 else self.module,
                                     self.loaded if variables is None else variables, self.x,
                                     flax_kwargs=self.flax_kwargs,
                                     torch_kwargs=self.torch_kwargs, **kwargs)


_CASES: dict[str, Case] = {}  # each model built once per run


def _get(name: str) -> Case:
    if name not in _CASES:
        _CASES[name] = Case(name)
    return _CASES[name]


@pytest.fixture(params=["bert", "gpt2", "t5", "beit"] + [
    pytest.param(n, marks=pytest.mark.slow)
    for n in ("roberta", "distilbert", "electra", "opt", "albert", "bart")])
def case(request):
    return _get(request.param)


def test_the_documented_load_equals_hf_converter_and_reports_ties(case):
    flat = {k: np.asarray(v) for k, v in flatten_dict(case.loaded).items()}
    # HF's converter also writes what the Flax model does not hold (a tied head), and
    # from_pt drops it: the Flax model's leaves are the ones compared
    assert set(flat) <= set(case.reference), set(flat) - set(case.reference)
    differ = [k for k in flat if not np.array_equal(flat[k], case.reference[k])]
    assert not differ, differ
    ties = parity.pairing.match_weights(case.torch, case.loaded).ties
    assert ties == {"gpt2": {"lm_head.weight": "transformer.wte.weight"},
                    "t5": {"encoder.embed_tokens.weight": "shared.weight"},
                    "bart": {"encoder.embed_tokens.weight": "shared.weight",
                             "decoder.embed_tokens.weight": "shared.weight"}}.get(case.name, {})
    back = parity.to_torch_weights(case.loaded, copy.deepcopy(case.torch))
    for name, t in back.state_dict().items():
        torch.testing.assert_close(t, case.torch.state_dict()[name], rtol=0, atol=0)


def test_gpt2_conv1d_is_transposed_by_its_shapes_and_its_square_ones_by_the_others():
    case = _get("gpt2")
    text = parity.pairing.match_weights(case.torch, case.loaded).format()
    assert ("transformer.h.0.attn.c_attn (Conv1D) -> transformer/h/0/attn/c_attn "
            "[inferred: kernel transposed (shapes), by name]") in text
    assert ("transformer.h.0.attn.c_proj (Conv1D) -> transformer/h/0/attn/c_proj "
            "[inferred: kernel transposed (as the 6 other Conv1D layers' shapes say), "
            "by name]") in text
    assert "lm_head.weight: tied, the same tensor as transformer.wte.weight" in text


NAMES = ("bert", "gpt2", "t5", "beit", "roberta", "distilbert", "electra", "opt", "albert",
         "bart")


def _grid(default: set, *axes) -> list:
    """Every combination of ``axes`` (the model first), those in ``default`` run by
    default, the rest under slow."""
    import itertools

    return [pytest.param(*combo, id="-".join(map(str, combo)),
                         marks=() if combo in default else pytest.mark.slow)
            for combo in itertools.product(NAMES, *axes)]


# BERT's by default in test_integer_inputs_reach_both_sides_as_they_are (chained, float64,
# with gradients).
@pytest.mark.parametrize("name, mode, dtype, gradients", _grid(
    {("gpt2", "shadow", "float32", True), ("t5", "shadow", "float32", False),
     ("beit", "chained", "float64", True)},
    ("chained", "shadow"), ("float64", "float32"), (False, True)))
def test_the_faithful_port_passes_from_its_token_ids(name, mode, dtype, gradients):
    case = _get(name)
    report = case.compare(mode=mode, dtype=np.dtype(dtype), gradients=gradients)
    if case.name == "t5" and dtype == "float64":
        # Flax's T5 norm computes its variance in float32 whatever the dtype
        first = report.first_divergence
        assert (first.kind, first.torch_name) == ("output", "encoder.block.0.layer.0.layer_norm"), \
            report.format()
        return
    assert report.ok, report.format()
    if case.name == "beit":  # torch's embeddings return (embeddings, (height, width))
        outputs = {r.torch_name: r.flax_path for r in report.rows if r.kind == "output"}
        assert outputs["embeddings[0]"] == "embeddings", outputs
        assert "embeddings[1][0] (torch, scalar): not a floating-point array" in report.one_sided


def _planted_kernel(case: Case) -> tuple[dict, str]:
    flat = dict(flatten_dict(case.loaded))
    keys = sorted(k for k in flat if k[-1] == "kernel")
    key = keys[len(keys) // 2]
    flat[key] = np.asarray(flat[key]) * (1 + 1e-6)
    return unflatten_dict(flat), "/".join(key[1:])


@pytest.mark.parametrize("name, mode", _grid({("bert", "chained")}, ("chained", "shadow")))
def test_a_planted_kernel_change_is_named_first(name, mode):
    case = _get(name)
    variables, path = _planted_kernel(case)
    report = case.compare(variables, mode=mode)
    first = report.first_divergence
    assert (first.kind, first.flax_path) == ("weight", path), report.format()


@pytest.mark.parametrize("name, mode", _grid({("gpt2", "shadow")}, ("chained", "shadow")))
def test_a_planted_epsilon_change_is_named_first(name, mode):
    case = _get(name)
    torch_model = copy.deepcopy(case.torch)
    norms = _norms(torch_model)
    name, norm = norms[len(norms) // 2]
    _plant_epsilon(norm)
    dtype = np.float32 if case.name == "t5" else np.float64
    report = case.compare(torch_model=torch_model, mode=mode, dtype=dtype)
    first = report.first_divergence
    assert (first.kind, first.torch_name) == ("output", name), report.format()


@pytest.mark.parametrize("mode", ["shadow", pytest.param("chained", marks=pytest.mark.slow)])
def test_a_change_inside_an_attention_block_is_named_in_either_mode(mode):
    """torch's second block attends without scaling its scores (the arithmetic between
    c_attn and c_proj, in no module of its own): shadow mode names the input of c_proj as
    the port computed it, chained mode c_proj's output."""
    case = _get("gpt2")
    torch_model = copy.deepcopy(case.torch)
    torch_model.config._attn_implementation = "eager"
    torch_model.transformer.h[1].attn.scale_attn_weights = False
    report = case.compare(torch_model=torch_model, mode=mode)
    first = report.first_divergence
    want = "input" if mode == "shadow" else "output"
    assert (first.kind, first.torch_name) == (want, "transformer.h.1.attn.c_proj"), report.format()


def test_integer_inputs_reach_both_sides_as_they_are():
    """The ids stay int64 on both sides, the precision is the model's, and no gradient is
    taken at the ids (the first gradients at an input are the embeddings' outputs')."""
    case = _get("bert")
    report = case.compare(gradients=True)
    assert report.ok and report.dtype == "float64", report.format()
    at_inputs = [r.torch_name for r in report.rows if r.kind == "input gradient"]
    assert "" not in at_inputs and "embeddings.word_embeddings" not in at_inputs
    assert "embeddings.LayerNorm" in at_inputs
    with pytest.raises(TypeError, match="x is int64 and the torch model holds no "
                                        "floating-point tensor"):
        parity.compare_layers(torch.nn.Identity(), case.module, case.loaded, case.x)


class _SquareConv1D(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = transformers.pytorch_utils.Conv1D(6, 6)

    def forward(self, x):
        return self.proj(x)


def test_a_square_weight_of_no_known_type_is_refused_until_its_rule_is_registered():
    import flax.linen as nn

    class Port(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(6, name="proj")(x)

    torch_model = _SquareConv1D().double()
    x = np.random.default_rng(0).standard_normal((3, 6))
    variables = {"params": {"proj": {"kernel": np.zeros((6, 6)), "bias": np.zeros(6)}}}
    with pytest.raises(ValueError) as err:
        parity.load_torch_weights(torch_model, variables)
    msg = str(err.value)
    assert "proj (Conv1D) -> proj: kernel as it is, kernel transposed" in msg, msg
    assert "parity.layout.register" in msg
    rule = parity.layout.register(transformers.pytorch_utils.Conv1D,
                                  {"weight": "kernel", "bias": "bias"})
    try:
        loaded = parity.load_torch_weights(torch_model, variables)
        np.testing.assert_array_equal(loaded["params"]["proj"]["kernel"],
                                      torch_model.proj.weight.detach().numpy())
        report = parity.compare_layers(torch_model, Port(), loaded, x)
        assert report.ok, report.format()
    finally:
        parity.layout.unregister(rule)
    with pytest.raises(ValueError, match="cannot be told"):
        parity.load_torch_weights(torch_model, variables)


class _TiedHead(torch.nn.Module):
    """An embedding and an output layer of one tensor (GPT-2's LM head)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.embed(ids)))


def test_a_port_that_holds_a_tied_weight_twice_loads_it_twice_and_sums_its_gradients():
    import flax.linen as nn

    class Port(nn.Module):
        @nn.compact
        def __call__(self, ids):
            return nn.Dense(10, use_bias=False, name="head")(
                jnp.tanh(nn.Embed(10, 4, name="embed")(ids)))

    torch_model = _TiedHead().double()
    ids = np.random.default_rng(0).integers(0, 10, (2, 5))
    with x64():
        shapes = jax.eval_shape(Port().init, jax.random.key(0), ids)
        variables = parity.load_torch_weights(torch_model, shapes, model=Port(), x=ids)
        w = torch_model.embed.weight.detach().numpy()
        np.testing.assert_array_equal(variables["params"]["embed"]["embedding"], w)
        np.testing.assert_array_equal(variables["params"]["head"]["kernel"], w.T)
        report = parity.compare_layers(torch_model, Port(), variables, ids)
    assert report.ok, report.format()
    grads = [r.flax_path for r in report.rows if r.kind == "gradient"]
    assert grads == ["embed/embedding + head/kernel"], grads
