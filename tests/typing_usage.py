"""How a type checker sees the public API: checked by mypy (tests/test_typing.py), never run.

``assert_type`` fails the check when a type differs; a ``type: ignore[code]`` marks a call
the checker must reject (``warn_unused_ignores`` fails the check if it accepts it).
"""

import jax
import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx
from typing_extensions import assert_type

import jaxpool
import jaxpool.linen
import jaxpool.nnx
import parity

x = jnp.ones((8, 3, 32, 32))

# Values, or (values, indices) when return_indices is a literal True.
assert_type(jaxpool.avg_pool2d(x, 3, 2, 1), jax.Array)
assert_type(jaxpool.avg_pool2d(np.ones((3, 32, 32)), (3, 3)), jax.Array)
assert_type(jaxpool.adaptive_avg_pool2d(x, (7, None)), jax.Array)
assert_type(jaxpool.global_avg_pool(x), jax.Array)
assert_type(jaxpool.max_pool2d(x, 3), jax.Array)
assert_type(jaxpool.max_pool2d(x, 3, return_indices=True), tuple[jax.Array, jax.Array])
assert_type(jaxpool.max_pool1d(x[0], 3, 2, 1, 1, False, True), tuple[jax.Array, jax.Array])
assert_type(jaxpool.adaptive_max_pool3d(x[None], 2, return_indices=True),
            tuple[jax.Array, jax.Array])
assert_type(jaxpool.max_pool(x, 2), jax.Array)
assert_type(jaxpool.lp_pool2d(x, 2.0, 3), jax.Array)
assert_type(jaxpool.global_max_pool(x, channels_last=True), jax.Array)


def pool(x: jax.Array, with_indices: bool) -> None:
    # A bool known only at run time gives either.
    assert_type(jaxpool.max_pool2d(x, 3, return_indices=with_indices),
                jax.Array | tuple[jax.Array, jax.Array])


values, indices = jaxpool.max_pool2d(x, 3, return_indices=True)
assert_type(indices, jax.Array)

# Shape rules return plain ints.
assert_type(jaxpool.shapes.max_pool2d(x.shape, 3, 2, 1), tuple[int, ...])
assert_type(jaxpool.shapes.global_avg_pool((8, 3, 7, 7)), tuple[int, int])

# Modules: typed fields in torch.nn's order.
assert_type(jaxpool.nnx.MaxPool2d(3, 2, 1).kernel_size, jaxpool.pooling.functions.Size)
jaxpool.linen.AvgPool2d(kernel_size=2, ceil_mode=True)
jaxpool.nnx.AdaptiveAvgPool2d((4, 4))
assert isinstance(jaxpool.nnx.GlobalAvgPool(), nnx.Module)

# What the checker rejects.
jaxpool.avg_pool2d(x, "3")  # type: ignore[arg-type]
jaxpool.max_pool2d(x, 3, channels_lst=True)  # type: ignore[call-overload]
jaxpool.avg_pool2d(x, 3, 2, 1, False, True, None, True)  # type: ignore[call-arg]
jaxpool.shapes.avg_pool2d(x.shape, 2.5)  # type: ignore[arg-type]
jaxpool.nnx.MaxPool2d(3, ceil_mode="yes")  # type: ignore[arg-type]

# parity's public API.
report = parity.compare(lambda a: jaxpool.avg_pool2d(a, 2),
                        lambda a: torch.nn.functional.avg_pool2d(a, 2), np.ones((1, 1, 4, 4)))
assert_type(report, parity.Report)
assert_type(report.ok, bool)
assert_type(parity.to_jax(torch.ones(2)), jax.Array)
