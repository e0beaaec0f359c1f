"""A NaN or inf reaches exactly the outputs whose windows hold it, as in torch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxpool

from strategy_cases import CASES, TORCH



def _same_pattern(got, expected):
    for pick in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(pick(got), pick(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("values", [(np.nan,), (np.inf,), (-np.inf,), (np.inf, -np.inf),
                                    (np.nan, np.inf, -np.inf, np.inf)])
@pytest.mark.parametrize("name", list(CASES))
def test_non_finite_values_stay_in_their_windows(name, values, rng):
    pool, shape, _ = CASES[name]
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    spots = rng.choice(flat.size, size=len(values), replace=False)
    flat[spots] = values
    expected = TORCH[name](torch.tensor(x)).numpy()
    _same_pattern(np.asarray(jax.jit(pool)(jnp.asarray(x))), expected)
    # vmap turns the finite/non-finite branch into a select: still exact.
    _same_pattern(np.asarray(jax.vmap(pool)(jnp.asarray(x[:, None]))[:, 0]), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_non_finite_in_windows_too_long_for_the_coded_count(dtype, rng, x64):
    """Windows of 3001 elements: the matrix path counts infinities in two planes."""
    x = rng.standard_normal((1, 2, 6001)).astype(dtype)
    x[0, 0, [10, 3000]] = [np.inf, -np.inf]
    x[0, 1, 5000] = np.nan
    expected = torch.nn.functional.adaptive_avg_pool1d(torch.tensor(x), 2).numpy()
    _same_pattern(np.asarray(jax.jit(lambda a: jaxpool.adaptive_avg_pool1d(a, 2))(x)), expected)


def test_the_pattern_check_can_fail():
    """A matrix product without the non-finite branch smears one inf over its row."""
    x = np.zeros((1, 1, 1, 5), np.float32)
    x[..., 0] = np.inf
    matrix = np.array([[1, 1, 0, 0, 0], [0, 0, 1, 1, 1]], np.float32)
    smeared = (jnp.asarray(x) @ jnp.asarray(matrix.T))
    expected = torch.nn.functional.adaptive_avg_pool2d(torch.tensor(x), (1, 2)).numpy()
    with pytest.raises(AssertionError):
        _same_pattern(np.asarray(smeared), expected)
