"""The strategy table per backend: every backend's strategies run on the CPU, torch's values
and derivatives, no scatter or gather; plans and programs never mix two backends' tables."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxpool
from jaxpool import strategy_table
from jaxpool.core.gather import ADDING
from jaxpool.pooling.plan import plan_avg_pool
from jaxpool.resampling.plan import SAMPLING_STRATEGIES
from jaxpool.pooling.windows import STRATEGIES, TANGENTS
from strategy_cases import CASES, TORCH, plans

pytestmark = pytest.mark.usefixtures("x64")


def test_every_entry_names_a_strategy_and_every_backend_reads_one():
    known = (set(STRATEGIES) | set(TANGENTS) | set(SAMPLING_STRATEGIES)
             | set(ADDING) | {strategy_table.RULES})
    for key, row in strategy_table.TABLE.items():
        assert set(row) >= {"cpu", "gpu"} and set(row.values()) <= known, key
        if key[1] != "reads added back":  # its CPU strategy is one name, not a rule
            assert row["cpu"] == strategy_table.RULES, "the CPU's rules live in choose_*"
        for backend in strategy_table.BACKENDS:
            assert strategy_table.lookup(*key, backend) == row.get(backend, row["gpu"])
    with pytest.raises(ValueError, match="'cuda'"):
        with strategy_table.use_backend("cuda"):
            pass


def _lowered(fn, x) -> str:
    return jax.jit(fn).lower(x).as_text()


def test_an_op_reads_the_table_of_the_backend_it_is_traced_for():
    """Forced, the GPU's table reaches the program (its reduce_window sums), and a program
    traced for one table is not handed to the other: the plan carries the backend."""
    x = jax.ShapeDtypeStruct((2, 3, 16, 16), jnp.float64)
    pool = lambda a: jaxpool.avg_pool2d(a, 3, 1, 1)  # noqa: E731
    assert strategy_table.current_backend() == "cpu"
    on_cpu = _lowered(pool, x)
    with strategy_table.use_backend("gpu"):
        assert strategy_table.current_backend() == "gpu"
        # a new function: jax.jit would hand back the program it traced for `pool`
        on_gpu = _lowered(lambda a: jaxpool.avg_pool2d(a, 3, 1, 1), x)
        eager_gpu = plan_avg_pool("", (2, 3, 16, 16), np.float64, 2, 3, 1, 1,
                                  backend=strategy_table.current_backend())
    assert "reduce_window" in on_gpu and "reduce_window" not in on_cpu.split("func.func")[1]
    assert eager_gpu.strategies == ("reduce_window", "reduce_window")
    assert plan_avg_pool("", (2, 3, 16, 16), np.float64, 2, 3, 1, 1).strategies == ("taps",
                                                                                   "taps")
    # the eager programs, cached by plan, follow the table too
    y = np.random.default_rng(0).standard_normal((2, 3, 16, 16))
    with strategy_table.use_backend("gpu"):
        gpu_values = np.asarray(pool(jnp.asarray(y)))
    np.testing.assert_allclose(gpu_values, np.asarray(pool(jnp.asarray(y))), rtol=1e-13)


# A spread of ops whose GPU strategies differ from the CPU's (reduce_window values and
# derivatives next to the CPU's tangent rules), and resampling and LP pooling.
SPREAD = ["taps", "taps long", "blocks channels-last", "sums up + blocks channels-last",
          "matrix equal windows", "3d mixed"]
OTHERS = {
    "lp_pool2d": (lambda x: jaxpool.lp_pool2d(x, 2, 3, 2, ceil_mode=True), (2, 3, 11, 10),
                  lambda t: F.lp_pool2d(t, 2, 3, 2, ceil_mode=True)),
    "area": (lambda x: jaxpool.interpolate(x, size=(5, 4), mode="area"), (2, 3, 15, 12),
             lambda t: F.interpolate(t, size=(5, 4), mode="area")),
    "bilinear": (lambda x: jaxpool.interpolate(x, scale_factor=2, mode="bilinear"),
                 (1, 2, 9, 7), lambda t: F.interpolate(t, scale_factor=2, mode="bilinear")),
}


def _case(name):
    if name in OTHERS:
        return OTHERS[name]
    pool, shape, _ = CASES[name]
    return pool, shape, TORCH[name]


def test_the_spread_takes_other_strategies_on_the_gpu():
    gpu, cpu = plans("gpu"), plans("cpu")
    for name in SPREAD:
        assert "reduce_window" in gpu[name].strategies and gpu[name] != cpu[name], name
        assert gpu[name].strategies != cpu[name].strategies, name


TABLE_DEFAULT = ("taps", "sums up + blocks channels-last", "matrix equal windows", "lp_pool2d",
                 "area")


@pytest.mark.parametrize("name", [n if n in TABLE_DEFAULT else pytest.param(n, marks=pytest.mark.slow)
                                  for n in SPREAD + list(OTHERS)])
def test_the_gpu_table_on_the_cpu_is_torchs(name, rng):
    pool, shape, reference = _case(name)
    x = rng.standard_normal(shape)
    if name == "lp_pool2d":
        x = np.abs(x) + 0.5
    with strategy_table.use_backend("gpu"):
        y, pullback = jax.vjp(pool, jnp.asarray(x))
        ct = rng.standard_normal(y.shape)
        (grad,) = pullback(jnp.asarray(ct))
        second = jax.grad(lambda a: jnp.sum(jax.grad(
            lambda b: jnp.sum(jnp.tanh(pool(b)) ** 2))(a) ** 2))
        text = _lowered(second, jax.ShapeDtypeStruct(shape, jnp.float64))
    t = torch.tensor(x, requires_grad=True)
    want = reference(t)
    (want_grad,) = torch.autograd.grad(want, t, torch.tensor(ct))
    np.testing.assert_allclose(np.asarray(y), want.detach().numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(np.asarray(grad), want_grad.numpy(), rtol=1e-12, atol=1e-13)
    ops = set(re.findall(r"\b(?:stablehlo|chlo)\.([a-z_]+)", text))
    assert not {op for op in ops if "scatter" in op or op == "gather"}, name
