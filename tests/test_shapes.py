"""jaxpool.shapes against jax.eval_shape, and backward inference."""

import jax
import jax.numpy as jnp
import pytest

import jaxpool
from jaxpool import shapes
from test_values import ADAPTIVE_CASES, AVG_CASES


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("ndim,shape,output_size",
                         [(d, s, o) for d, cases in ADAPTIVE_CASES.items() for s, o in cases])
def test_adaptive_shapes_match_eval_shape(ndim, shape, output_size, channels_last):
    rule = getattr(shapes, f"adaptive_avg_pool{ndim}d")
    fn = getattr(jaxpool, f"adaptive_avg_pool{ndim}d")
    x = jax.ShapeDtypeStruct(shape, jnp.float32)
    assert rule(shape, output_size, channels_last=channels_last) == jax.eval_shape(
        lambda a: fn(a, output_size, channels_last=channels_last), x).shape


@pytest.mark.parametrize("ndim,shape,args",
                         [(d, s, a) for d, cases in AVG_CASES.items() for s, a in cases[:40]])
def test_avg_pool_shapes_match_eval_shape(ndim, shape, args):
    rule = getattr(shapes, f"avg_pool{ndim}d")
    fn = getattr(jaxpool, f"avg_pool{ndim}d")
    x = jax.ShapeDtypeStruct(shape, jnp.float32)
    assert rule(shape, **args) == jax.eval_shape(lambda a: fn(a, **args), x).shape


def test_global_shape():
    assert shapes.global_avg_pool((4, 32, 7, 7)) == (4, 32)
    assert shapes.global_avg_pool((4, 7, 7, 32), channels_last=True) == (4, 32)
    assert jax.eval_shape(jaxpool.global_avg_pool,
                          jax.ShapeDtypeStruct((4, 32, 7, 7), jnp.float32)).shape == (4, 32)


def test_catalog_shapes():
    assert shapes.avg_pool((1, 3, 15, 15), 3, stride=2, padding=1,
                           count_include_pad=False) == (1, 3, 8, 8)
    assert shapes.avg_pool((1, 8, 16, 16), 2) == (1, 8, 8, 8)
    assert shapes.adaptive_avg_pool((1, 4, 8, 8), (2, 3)) == (1, 4, 2, 3)


def test_backward_inference():
    assert shapes.adaptive_output_size((5, 6, 3, 3)) == (3, 3)
    assert shapes.adaptive_output_size((5, 3, 2, 6), channels_last=True) == (3, 2)
    assert shapes.channels((5, 6, 3, 3)) == 6
    assert shapes.channels((5, 3, 3, 6), channels_last=True) == 6
    assert shapes.input_shape_from_output((5, 6, 3, 3), (9, 9)) == (5, 6, 9, 9)
    assert shapes.input_shape_from_output((6, 3, 3), (9, 8)) == (6, 9, 8)
    assert shapes.input_shape_from_output((5, 3, 3, 6), (9, 8), channels_last=True) == (5, 9, 8, 6)
    with pytest.raises(ValueError, match="not inferable backward"):
        shapes.input_shape_from_output((5, 6, 3, 3))


def test_shape_rules_raise_the_ops_errors():
    with pytest.raises(ValueError, match="padding"):
        shapes.avg_pool2d((1, 3, 8, 8), 2, padding=2)
    with pytest.raises(ValueError, match="output_size"):
        shapes.adaptive_avg_pool2d((1, 3, 8, 8), 0)
