"""Shared fixtures: float64 JAX for the modules that ask for it, torch references, and a frozen heap for the benchmark tools' timing loops."""

import gc
import importlib.util
import zlib

import numpy as np
import pytest
import torch
from parity.convert import x64 as x64_mode

torch.set_num_threads(1)


@pytest.fixture
def frozen_heap():
    """The objects on the heap before the test frozen, so that a garbage collection during
    the test (the benchmark tools' timing loop runs one before it times) reads only the
    test's own: with JAX, torch and the suite's objects on the heap each took about half a
    second."""
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture
def x64():
    """Run the test with JAX float64 enabled (torch is the oracle in float64)."""
    with x64_mode():
        yield


@pytest.fixture
def rng(request):
    """A generator seeded from the test's id, so every case draws its own fixed numbers."""
    seed = zlib.crc32(request.node.nodeid.encode())  # str hash() differs between processes
    return np.random.default_rng(seed)


def pytest_runtest_setup(item):
    """``@pytest.mark.needs_recent("module")``: the test needs an optional package that the
    lowest supported versions do not have (torchax before Python 3.11): skipped where the
    module is not installed, rather than failing."""
    for marker in item.iter_markers("needs_recent"):
        for module in marker.args:
            if importlib.util.find_spec(module) is None:
                pytest.skip(f"needs {module}, which is not installed (a newer optional package "
                            f"than the lowest supported versions)")

