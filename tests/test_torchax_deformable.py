"""Deformable attention's pure-PyTorch path through jaxpool.torchax: Hugging Face's
Deformable DETR attention (``grid_sample`` once per level, its
``multi_scale_deformable_attention``) run as a JAX function, against torch eager in
float64, with no scatter in its derivatives' programs under the GPU and TPU table, at
orders 1 to 3 (3 under -m slow); torchax alone adds its reads back with scatters.

The programs are lowered with jaxpool's GPU table (``strategy_table.use_backend("gpu")``;
on the CPU table grid_sample may take XLA:CPU's scatter-add, deterministic there) and run
here as they were lowered.
"""

from __future__ import annotations

import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

if sys.version_info < (3, 11):  # torchax's releases need 3.11; from 3.11 on it is installed
    pytest.skip("torchax needs Python >= 3.11", allow_module_level=True)
transformers = pytest.importorskip("transformers")

import jaxpool.torchax as jt  # noqa: E402
from jaxpool import strategy_table  # noqa: E402
from parity.convert import x64 as x64_mode  # noqa: E402
from transformers.models.deformable_detr import modeling_deformable_detr as hf  # noqa: E402

torchax = jt.torchax
LEVELS = ((4, 3), (2, 2), (1, 1))   # 3 levels: odd sizes, a 1 x 1
TOKENS = sum(h * w for h, w in LEVELS)


@pytest.fixture(scope="module")
def env():
    with x64_mode():
        environment = jt.install(torchax.default_env())
        yield environment
        jt.uninstall(environment)


def scatters(text: str) -> int:
    return len(re.findall(r"stablehlo\.scatter\b", text))


class Attention(torch.nn.Module):
    """Hugging Face's Deformable DETR attention on its pure-PyTorch path (no custom
    kernel on the CPU), called as its encoder calls it: self-attention over the levels."""

    def __init__(self):
        super().__init__()
        config = hf.DeformableDetrConfig(d_model=16, num_feature_levels=len(LEVELS))
        self.attention = hf.DeformableDetrMultiscaleDeformableAttention(config, 2, 2)
        self.register_buffer("shapes", torch.tensor(LEVELS))
        self.register_buffer("starts", torch.tensor([0, 12, 16]))

    def forward(self, x, reference_points):
        return self.attention(hidden_states=x, encoder_hidden_states=x,
                              reference_points=reference_points, spatial_shapes=self.shapes,
                              spatial_shapes_list=list(LEVELS),
                              level_start_index=self.starts)[0]


class Core(torch.nn.Module):
    """Hugging Face's ``MultiScaleDeformableAttention`` module alone: value, locations and
    weights in, one ``grid_sample`` per level."""

    def __init__(self):
        super().__init__()
        self.core = hf.MultiScaleDeformableAttention()

    def forward(self, value, locations, weights):
        return self.core(value, None, list(LEVELS), None, locations, weights, 64)


def test_attention_and_its_gradient_are_torchs_without_scatter(env):
    torch.manual_seed(0)
    model = Attention().double()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, TOKENS, 16, dtype=torch.float64, generator=gen)
    reference = torch.rand(2, TOKENS, len(LEVELS), 2, dtype=torch.float64, generator=gen)
    cotangent = torch.randn(2, TOKENS, 16, dtype=torch.float64, generator=gen)
    inputs = (x.clone().requires_grad_(), reference.clone().requires_grad_())
    expected = model(*inputs)
    names = [n for n, _ in model.named_parameters()]
    grads = torch.autograd.grad(expected, [*model.parameters(), *inputs], cotangent)

    params, fn = torchax.extract_jax(model, env)
    args = [jnp.asarray(a.numpy()) for a in (x, reference)]

    def gradient(params, x, reference):
        out, vjp = jax.vjp(lambda p, x, r: fn(p, (x, r)), params, x, reference)
        return out, vjp(jnp.asarray(cotangent.numpy()))

    with strategy_table.use_backend("gpu"):
        lowered = jax.jit(gradient).lower(params, *args)
    assert scatters(lowered.as_text()) == 0
    out, (g_params, g_x, g_reference) = lowered.compile()(params, *args)
    np.testing.assert_allclose(np.asarray(out), expected.detach().numpy(), rtol=0, atol=1e-14)
    ours = [g_params[n] for n in names] + [g_x, g_reference]
    for name, mine, theirs in zip(names + ["x", "reference_points"], ours, grads):
        np.testing.assert_allclose(np.asarray(mine), theirs.numpy(), rtol=1e-12, atol=1e-13,
                                   err_msg=name)


# Order 3 under -m slow (its program takes about 10 s to trace through torchax and
# compile); order 2 by default.
@pytest.mark.parametrize("installed,order", [
    (True, 2), pytest.param(True, 3, marks=pytest.mark.slow), (False, 2)],
    ids=["jaxpool-2", "jaxpool-3", "torchax alone-2"])
def test_higher_derivatives_are_torchs_and_scatter_free_only_with_jaxpool(env, installed,
                                                                          order):
    gen = torch.Generator().manual_seed(2)
    value = torch.randn(2, TOKENS, 2, 3, dtype=torch.float64, generator=gen)
    # about a tenth of the points past a level's edge, where the read is zero
    locations = torch.rand(2, 5, 2, 3, 2, 2, dtype=torch.float64, generator=gen) * 1.2 - 0.1
    weights = torch.rand(2, 5, 2, 3, 2, dtype=torch.float64, generator=gen)
    arrays = (value, locations, weights)
    c = torch.randn(2, 5, 6, dtype=torch.float64, generator=gen)
    directions = [torch.randn(a.shape, dtype=torch.float64, generator=gen) for a in arrays]

    # torch: the order-th derivative of phi = sum(tanh(f) * c), along order - 1
    # directions, in all three arrays
    inputs = [a.clone().requires_grad_() for a in arrays]
    phi = (torch.tanh(Core()(*inputs)) * c).sum()
    for _ in range(order - 1):
        grads = torch.autograd.grad(phi, inputs, create_graph=True)
        phi = sum((g * d).sum() for g, d in zip(grads, directions))
    expected = torch.autograd.grad(phi, inputs)

    if not installed:
        jt.uninstall(env)
    try:
        params, fn = torchax.extract_jax(Core(), env)
        cj = jnp.asarray(c.numpy())
        dirs = [jnp.asarray(d.numpy()) for d in directions]

        def along(f):
            return lambda *a: sum(jnp.vdot(g, d) for g, d in
                                  zip(jax.grad(f, argnums=(0, 1, 2))(*a), dirs))

        def phi_jax(*a):
            return jnp.sum(jnp.tanh(fn(params, a)) * cj)

        f = phi_jax
        for _ in range(order - 1):
            f = along(f)
        args = [jnp.asarray(a.numpy()) for a in arrays]
        with strategy_table.use_backend("gpu"):
            lowered = jax.jit(jax.grad(f, argnums=(0, 1, 2))).lower(*args)
    finally:
        if not installed:
            jt.install(env)
    if not installed:  # torchax's own grid_sample reads with gathers, adds back by scatter
        assert scatters(lowered.as_text()) > 0
        return
    assert scatters(lowered.as_text()) == 0
    for mine, theirs in zip(lowered.compile()(*args), expected):
        np.testing.assert_allclose(np.asarray(mine), theirs.numpy(), rtol=1e-11, atol=1e-12)
