"""Shared fixtures: float64 JAX for the modules that ask for it, and torch references."""

import contextlib
import zlib

import jax
import numpy as np
import pytest
import torch

torch.set_num_threads(1)


@contextlib.contextmanager
def _x64():
    enable = getattr(jax, "enable_x64", None)
    if enable is None:  # older jax
        from jax.experimental import enable_x64 as enable
    with enable(True):
        yield


@pytest.fixture
def x64():
    """Run the test with JAX float64 enabled (torch is the oracle in float64)."""
    with _x64():
        yield


@pytest.fixture
def rng(request):
    """A generator seeded from the test's id, so every case draws its own fixed numbers."""
    seed = zlib.crc32(request.node.nodeid.encode())  # str hash() differs between processes
    return np.random.default_rng(seed)
