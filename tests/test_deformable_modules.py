"""MultiScaleDeformableAttention in jaxpool.linen, jaxpool.nnx and jaxpool.equinox against
Hugging Face's torch modules at their real configurations (Deformable DETR's encoder: 256
channels, 8 heads, 4 levels, 4 points; RT-DETR's decoder: 3 levels, boxes): the initial
parameters as torch's ``_init_weights`` sets them, torch's weights loaded through
``parity.load_torch_weights`` with no hand-written map (equal to one written by hand), the
outputs and gradients layer by layer in float64 (``parity.compare_layers``), a planted bug
named where it is, Equinox's one example against its batch, and bad calls.

The levels are small (the configurations' channels, heads, levels and points are real;
the feature maps are a few pixels) so that each comparison compiles and runs in seconds.
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import parity
from jaxpool import _modules

flax = pytest.importorskip("flax")
eqx = pytest.importorskip("equinox")
transformers = pytest.importorskip("transformers")

import jaxpool.equinox  # noqa: E402
import jaxpool.linen  # noqa: E402
import jaxpool.nnx  # noqa: E402
from flax import nnx  # noqa: E402
from transformers.models.deformable_detr import modeling_deformable_detr as hf_detr  # noqa: E402
from transformers.models.rt_detr import modeling_rt_detr as hf_rtdetr  # noqa: E402

pytestmark = pytest.mark.usefixtures("x64")

DETR_LEVELS = ((6, 5), (3, 3), (2, 1), (1, 1))   # 4 levels, odd sizes and 1 x 1
RTDETR_LEVELS = ((5, 4), (3, 2), (1, 1))        # RT-DETR's 3


def detr_attention(seed: int = 0) -> torch.nn.Module:
    """Deformable DETR's encoder self-attention (its configuration's defaults), float64,
    with torch's default Linear initialisation: every weight nonzero, so that every path
    shows."""
    torch.manual_seed(seed)
    config = hf_detr.DeformableDetrConfig()
    assert (config.d_model, config.encoder_attention_heads, config.num_feature_levels,
            config.encoder_n_points) == (256, 8, 4, 4)
    return hf_detr.DeformableDetrMultiscaleDeformableAttention(
        config, config.encoder_attention_heads, config.encoder_n_points).double().eval()


def rtdetr_attention(seed: int = 0) -> torch.nn.Module:
    """RT-DETR's decoder cross-attention (its configuration's defaults), float64."""
    torch.manual_seed(seed)
    config = hf_rtdetr.RTDetrConfig()
    assert (config.d_model, config.decoder_attention_heads, config.num_feature_levels,
            config.decoder_n_points) == (256, 8, 3, 4)
    return hf_rtdetr.RTDetrMultiscaleDeformableAttention(
        config, config.decoder_attention_heads, config.decoder_n_points).double().eval()


def encoder_call(rng, levels=DETR_LEVELS, batch=2, mask=True):
    """(x, torch_kwargs, flax_kwargs) of an encoder's self-attention: the queries are the
    positions, reference points at each one's pixel centre scaled per level, a padding
    mask and position embeddings. The value is given to the port as well: torch's is a
    second tensor (``encoder_hidden_states``), not the input whose gradient is compared."""
    tokens = sum(h * w for h, w in levels)
    x = rng.standard_normal((batch, tokens, 256))
    reference = rng.uniform(0, 1, (batch, tokens, len(levels), 2))
    pos = rng.standard_normal((batch, tokens, 256))
    padding = rng.uniform(size=(batch, tokens)) > 0.2 if mask else None
    starts = np.cumsum([0] + [h * w for h, w in levels])[:-1]
    torch_kwargs = dict(attention_mask=padding, encoder_hidden_states=x,
                        position_embeddings=pos, reference_points=reference,
                        spatial_shapes=np.array(levels), spatial_shapes_list=list(levels),
                        level_start_index=starts)
    flax_kwargs = dict(reference_points=reference, spatial_shapes=levels, value=x,
                       attention_mask=padding, position_embeddings=pos)
    return x, torch_kwargs, flax_kwargs


def decoder_call(rng, levels=RTDETR_LEVELS, batch=2, queries=7):
    """(x, torch_kwargs, flax_kwargs) of RT-DETR's decoder cross-attention: queries apart
    from the value (the encoder's memory), boxes ``(cx, cy, w, h)`` given once for every
    level (``[B, Q, 1, 4]``, as its decoder passes them), no mask."""
    tokens = sum(h * w for h, w in levels)
    x = rng.standard_normal((batch, queries, 256))
    memory = rng.standard_normal((batch, tokens, 256))
    boxes = np.concatenate([rng.uniform(0.1, 0.9, (batch, queries, 1, 2)),
                            rng.uniform(0.05, 0.5, (batch, queries, 1, 2))], -1)
    pos = rng.standard_normal((batch, queries, 256))
    starts = np.cumsum([0] + [h * w for h, w in levels])[:-1]
    torch_kwargs = dict(encoder_hidden_states=memory, position_embeddings=pos,
                        reference_points=boxes, spatial_shapes=np.array(levels),
                        spatial_shapes_list=list(levels), level_start_index=starts)
    flax_kwargs = dict(reference_points=boxes, spatial_shapes=levels, value=memory,
                       position_embeddings=pos)
    return x, torch_kwargs, flax_kwargs


def port(framework: str, levels: int = 4):
    """An initialised port of the configuration (256 channels, 8 heads, 4 points)."""
    if framework == "linen":
        return jaxpool.linen.MultiScaleDeformableAttention(256, 8, levels, 4)
    if framework == "nnx":
        return jaxpool.nnx.MultiScaleDeformableAttention(256, 8, levels, 4, rngs=nnx.Rngs(0))
    return jaxpool.equinox.MultiScaleDeformableAttention(256, 8, levels, 4,
                                                         key=jax.random.key(0))


def loaded(framework, torch_module, x, flax_kwargs, levels=4):
    """The port with torch's weights, through parity with no map; and the arguments
    compare_layers takes for it."""
    model = port(framework, levels)
    if framework == "linen":
        variables = model.init(jax.random.key(0), jnp.asarray(x), **flax_kwargs)
        variables = parity.load_torch_weights(torch_module, variables, model=model, x=x,
                                              flax_kwargs=flax_kwargs)
        return model, variables
    if framework == "nnx":
        return parity.load_torch_weights(torch_module, model, x=x, flax_kwargs=flax_kwargs), None
    return parity.load_torch_weights(torch_module, model, x=x, flax_kwargs=flax_kwargs), None


def by_hand(framework, torch_module, model, variables):
    """Each projection's (weight, bias) in the port, in torch's layout, read by its
    name."""
    out = {}
    for name in _modules.MultiScaleDeformableAttention.PROJECTIONS:
        if framework == "linen":
            leaf = variables["params"][name]
            out[name] = (np.asarray(leaf["kernel"]).T, np.asarray(leaf["bias"]))
        elif framework == "nnx":
            layer = getattr(model, name)
            out[name] = (np.asarray(layer.kernel[...]).T, np.asarray(layer.bias[...]))
        else:
            layer = getattr(model, name)
            out[name] = (np.asarray(layer.weight), np.asarray(layer.bias))
    return out


# --- the initial parameters ---------------------------------------------------------------------


@pytest.mark.parametrize("framework", ["linen", "nnx", "equinox"])
def test_initial_parameters_are_torchs(framework):
    # torch's, from Hugging Face's _init_weights, in float64 (torch's default dtype set so
    # that its offset bias is computed in float64 too)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        reference = detr_attention()
        hf_detr.DeformableDetrPreTrainedModel._init_weights(
            types.SimpleNamespace(config=hf_detr.DeformableDetrConfig()), reference)
    finally:
        torch.set_default_dtype(default)
    # (jitted: Equinox's constructor draws the parameters, eagerly compiling op by op)
    model = eqx.filter_jit(port)(framework) if framework == "equinox" else port(framework)
    x = np.zeros((1, sum(h * w for h, w in DETR_LEVELS), 256))
    kwargs = dict(reference_points=np.full((1, x.shape[1], 4, 2), 0.5), spatial_shapes=DETR_LEVELS)
    # (jitted: linen's init runs the call, which eagerly compiles op by op)
    variables = jax.jit(lambda key: model.init(key, jnp.asarray(x), **kwargs))(
        jax.random.key(1)) if framework == "linen" else None
    ours = by_hand(framework, reference, model, variables)
    for name, (weight, bias) in ours.items():
        theirs = getattr(reference, name)
        assert weight.shape == tuple(theirs.weight.shape) and bias.shape == tuple(theirs.bias.shape)
        np.testing.assert_allclose(bias, theirs.bias.detach().numpy(), rtol=0, atol=1e-6)
        if name in ("sampling_offsets", "attention_weights"):
            assert not weight.any()
        else:  # Xavier-uniform: its bound, and a spread no narrower than a third of it
            bound = np.sqrt(6 / (weight.shape[0] + weight.shape[1]))
            assert np.abs(weight).max() <= bound and weight.std() > bound / 3 / np.sqrt(3)
    # the offsets' bias in float64 as torch computes it in float64
    np.testing.assert_allclose(
        _modules.deformable_offset_bias(8, 4, 4),
        reference.sampling_offsets.bias.detach().numpy(), rtol=0, atol=1e-15)


# --- weights through parity, and the comparison with torch --------------------------------------


# Equinox's parity path (one example under parity's vmap) under -m slow: the same
# projections and call as linen's and nnx's, which run by default.
@pytest.mark.parametrize("framework,case", [
    ("linen", "detr"), ("nnx", "rtdetr"),
    pytest.param("equinox", "detr", marks=pytest.mark.slow)])
def test_weights_load_by_name_and_outputs_match_torch(framework, case, rng):
    if case == "detr":
        torch_module, levels = detr_attention(), 4
        x, torch_kwargs, flax_kwargs = encoder_call(rng, mask=framework == "linen")
    else:
        torch_module, levels = rtdetr_attention(), 3
        x, torch_kwargs, flax_kwargs = decoder_call(rng)
    model, variables = loaded(framework, torch_module, x, flax_kwargs, levels)
    # what a hand-written map would load
    ours = by_hand(framework, torch_module, model, variables)
    for name, (weight, bias) in ours.items():
        theirs = getattr(torch_module, name)
        np.testing.assert_array_equal(weight, theirs.weight.detach().numpy())
        np.testing.assert_array_equal(bias, theirs.bias.detach().numpy())

    kwargs = dict(channels_last=False, torch_kwargs=torch_kwargs, flax_kwargs=flax_kwargs)
    if framework == "equinox":  # one example at a time: the batch axis is parity's vmap
        kwargs["flax_kwargs"] = {k: v for k, v in flax_kwargs.items()}
    report = parity.compare_layers(torch_module, model, variables, x, **kwargs)
    assert report.ok, report.format()
    paired = {row.torch_name for row in report.rows if row.kind == "output"}
    # every projection and the module itself, the output to rounding (float64)
    assert set(_modules.MultiScaleDeformableAttention.PROJECTIONS) <= paired, paired
    model_rows = [r for r in report.rows if r.kind == "output" and r.flax_path == ""]
    assert model_rows and model_rows[0].abs_err < 1e-13


def test_a_planted_bug_is_named_first(rng, monkeypatch):
    # the levels' (W, H) normaliser of the offsets swapped to (H, W): the projections are
    # right, so shadow mode names the code between them and output_proj, at its input
    torch_module = detr_attention()
    x, torch_kwargs, flax_kwargs = encoder_call(rng, batch=1, mask=False)
    model, variables = loaded("linen", torch_module, x, flax_kwargs)
    kwargs = dict(channels_last=False, torch_kwargs=torch_kwargs, flax_kwargs=flax_kwargs,
                  mode="shadow", gradients=False)
    # (without the bug these rows pass: test_weights_load_by_name_and_outputs_match_torch)
    real = jaxpool.multi_scale_deformable_attention

    def swapped(value, levels, locations, weights):
        scale = jnp.asarray([(w / h, h / w) for h, w in levels], locations.dtype)
        return real(value, levels, locations * scale[None, None, None, :, None, :], weights)

    monkeypatch.setattr(_modules.jaxpool, "multi_scale_deformable_attention", swapped)
    report = parity.compare_layers(torch_module, model, variables, x, **kwargs)
    first = report.first_divergence
    assert first is not None and first.torch_name == "output_proj" and first.kind == "input", \
        report.format()
    # every projection before it agrees
    assert all(r.ok for r in report.rows if r.torch_name in
               ("value_proj", "sampling_offsets", "attention_weights"))


# --- Equinox: one example, a batch ----------------------------------------------------------------


def test_equinox_one_example_is_its_batch_of_one(rng):
    model = jaxpool.equinox.MultiScaleDeformableAttention(32, 4, 2, 2, key=jax.random.key(0))
    levels = ((3, 2), (1, 2))
    x = jnp.asarray(rng.standard_normal((2, 8, 32)))
    points = jnp.asarray(rng.uniform(size=(2, 8, 2, 2)))
    mask = jnp.asarray(rng.uniform(size=(2, 8)) > 0.3)

    @jax.jit
    def calls(x, points, mask):
        batched = model(x, points, levels, attention_mask=mask)
        one = jax.vmap(lambda a, p, m: model(a, p, levels, attention_mask=m))(x, points, mask)
        return batched, one

    batched, one = calls(x, points, mask)
    np.testing.assert_allclose(np.asarray(one), np.asarray(batched), rtol=1e-13, atol=1e-14)


# --- bad calls --------------------------------------------------------------------------------


@pytest.mark.parametrize("framework", ["linen", "nnx", "equinox"])
def test_bad_configuration_raises_naming_it(framework):
    make = {"linen": lambda **k: jaxpool.linen.MultiScaleDeformableAttention(**k).init(
                jax.random.key(0), jnp.zeros((1, 2, k["embed_dim"])), jnp.zeros((1, 2, 1, 2)),
                ((1, 2),)),
            "nnx": lambda **k: jaxpool.nnx.MultiScaleDeformableAttention(**k, rngs=nnx.Rngs(0)),
            "equinox": lambda **k: jaxpool.equinox.MultiScaleDeformableAttention(
                **k, key=jax.random.key(0))}[framework]
    with pytest.raises(ValueError, match="embed_dim must be divisible by num_heads.*30.*8"):
        make(embed_dim=30, num_heads=8, num_levels=1)
    with pytest.raises(ValueError, match="num_points must be positive, got 0"):
        make(embed_dim=32, num_heads=8, num_levels=1, num_points=0)
    with pytest.raises(TypeError, match="num_levels must be an int, got 2.0"):
        make(embed_dim=32, num_heads=8, num_levels=2.0)


BAD_CALLS = [
    ("reference_points", dict(reference_points=np.zeros((1, 5, 2, 3))), ValueError,
     r"reference_points must be \[B, Q, num_levels=2.*got shape \(1, 5, 2, 3\)"),
    ("three levels", dict(spatial_shapes=((2, 2), (1, 1), (1, 1))), ValueError,
     r"spatial_shapes must be num_levels=2"),
    ("areas", dict(spatial_shapes=((2, 2), (1, 2))), ValueError,
     r"hidden_states \(the value, none given\) must be \[B=1, S=6.*got shape \(1, 5, 32\)"),
    ("value", dict(value=np.zeros((1, 4, 32))), ValueError, r"value must be \[B=1, S=5"),
    ("float mask", dict(attention_mask=np.ones((1, 5))), TypeError,
     "attention_mask must be boolean.*float64"),
    ("mask shape", dict(attention_mask=np.ones((1, 4), bool)), ValueError,
     r"attention_mask must be \[B, S\] = \(1, 5\)"),
    ("integer queries", dict(hidden_states=np.ones((1, 5, 32), np.int32)), TypeError,
     "hidden_states must be floating point, got dtype int32"),
    ("spatial_shapes floats", dict(spatial_shapes=((2.0, 2.0), (1.0, 1.0))), TypeError,
     "spatial_shapes must be a static sequence"),
]


@pytest.mark.parametrize("label,change,error,match", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_call_raises_naming_the_argument(label, change, error, match):
    model = jaxpool.nnx.MultiScaleDeformableAttention(32, 4, 2, 2, rngs=nnx.Rngs(0))
    call = dict(hidden_states=np.zeros((1, 5, 32)), reference_points=np.zeros((1, 5, 2, 2)),
                spatial_shapes=((2, 2), (1, 1)))
    call.update(change)
    with pytest.raises(error, match=match):
        model(**call)


def test_traced_spatial_shapes_raise():
    model = jaxpool.nnx.MultiScaleDeformableAttention(32, 4, 1, 2, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="spatial_shapes must be a static sequence"):
        jax.jit(lambda s: model(jnp.zeros((1, 4, 32)), jnp.zeros((1, 4, 1, 2)), s))(
            jnp.array([[2, 2]]))
