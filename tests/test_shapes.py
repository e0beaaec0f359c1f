"""jaxpool.shapes against jax.eval_shape and torch's output shapes, and backward inference."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxpool
from jaxpool import shapes
from torch_reference import to_channels_last
from test_values import ADAPTIVE_CASES, AVG_CASES, AVG_GRID_2D

# (input shape, arguments) of the max and lp ops: plain, strided and padded, dilated,
# ceil_mode (with a last window that would start in the padding), unbatched, empty batch.
MAX_CASES = {
    1: [((2, 3, 11), dict(kernel_size=3)), ((2, 3, 11), dict(kernel_size=3, stride=2, padding=1)),
        ((3, 10), dict(kernel_size=2, stride=3, dilation=2, ceil_mode=True)),
        ((0, 2, 7), dict(kernel_size=(2,), padding=(1,), ceil_mode=True))],
    2: [((2, 3, 9, 10), dict(kernel_size=3, stride=2, padding=1)),
        ((2, 3, 9, 10), dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0),
                             dilation=(2, 1), ceil_mode=True)),
        ((3, 7, 7), dict(kernel_size=3, stride=2, ceil_mode=True)),
        ((1, 2, 6, 6), dict(kernel_size=2, stride=(), dilation=(3,)))],
    3: [((1, 2, 5, 6, 7), dict(kernel_size=2)),
        ((2, 5, 6, 7), dict(kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1),
                            dilation=(1, 2, 1), ceil_mode=True))],
}
LP_CASES = {
    1: [((2, 3, 11), dict(norm_type=2, kernel_size=3)),
        ((3, 10), dict(norm_type=1.5, kernel_size=3, stride=2, ceil_mode=True))],
    2: [((2, 3, 9, 10), dict(norm_type=2, kernel_size=3, stride=2)),
        ((3, 9, 10), dict(norm_type=float("inf"), kernel_size=(3, 2), stride=(2, 3),
                          ceil_mode=True))],
    3: [((1, 2, 5, 6, 7), dict(norm_type=3, kernel_size=2)),
        ((2, 5, 6, 7), dict(norm_type=2, kernel_size=(3, 2, 3), stride=(2, 1, 2),
                            ceil_mode=True))],
}
ADAPTIVE_MAX_CASES = {d: cases[:6] for d, cases in ADAPTIVE_CASES.items()}
RULES = [f"{kind}{d}d" for kind in ("avg_pool", "adaptive_avg_pool", "max_pool",
                                     "adaptive_max_pool", "lp_pool") for d in (1, 2, 3)]
RULES += ["global_avg_pool", "global_max_pool"]


def _torch_shape(op: str, shape, args) -> tuple:
    out = getattr(F, op)(torch.zeros(shape), **args)
    return tuple(out.shape)


def _both_layouts(op: str, ndim: int, shape, args):
    """The rule's shape in both layouts against torch's (moved to channels-last)."""
    rule = getattr(shapes, op)
    expected = _torch_shape(op, shape, args)
    assert rule(shape, **args) == expected
    shape_last = to_channels_last(np.empty(shape, np.uint8), ndim).shape
    expected_last = to_channels_last(np.empty(expected, np.uint8), ndim).shape
    assert rule(shape_last, **args, channels_last=True) == expected_last


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
                         [(d, s, a) for d, cases in AVG_CASES.items() for s, a in cases]
                         + [(2, s, a) for s, a in AVG_GRID_2D[:40]])
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


@pytest.mark.parametrize("ndim,shape,args",
                         [(d, s, a) for d, cases in MAX_CASES.items() for s, a in cases])
def test_max_pool_shapes_match_torch(ndim, shape, args):
    _both_layouts(f"max_pool{ndim}d", ndim, shape, args)


@pytest.mark.parametrize("ndim,shape,output_size",
                         [(d, s, o) for d, cases in ADAPTIVE_MAX_CASES.items() for s, o in cases])
def test_adaptive_max_pool_shapes_match_torch(ndim, shape, output_size):
    _both_layouts(f"adaptive_max_pool{ndim}d", ndim, shape, dict(output_size=output_size))


@pytest.mark.parametrize("ndim,shape,args",
                         [(d, s, a) for d, cases in LP_CASES.items() for s, a in cases])
def test_lp_pool_shapes_match_torch(ndim, shape, args):
    _both_layouts(f"lp_pool{ndim}d", ndim, shape, args)


def test_global_max_shape():
    assert shapes.global_max_pool((4, 32, 7, 5)) == tuple(torch.zeros(4, 32, 7, 5).amax((2, 3)).shape)
    assert shapes.global_max_pool((4, 7, 5, 32), channels_last=True) == (4, 32)


@pytest.mark.parametrize("op", RULES)
def test_rules_take_the_ops_arguments(op):
    """Each rule has its op's signature, with ``input_shape`` for ``x`` (and no
    ``return_indices``: the indices have the values' shape; no ``axis_names``: a rule gives
    the whole array's shape, which per-device code splits over its devices)."""
    wanted = [p.replace(name="input_shape", annotation=inspect.Parameter.empty)
              if name == "x" else p.replace(annotation=inspect.Parameter.empty)
              for name, p in inspect.signature(getattr(jaxpool, op)).parameters.items()
              if name not in ("return_indices", "axis_names")]
    got = [p.replace(annotation=inspect.Parameter.empty)
           for p in inspect.signature(getattr(shapes, op)).parameters.values()]
    assert got == wanted
    assert getattr(shapes, op).__doc__ and "Returns:" in getattr(shapes, op).__doc__


def test_aliases():
    for alias in ("avg_pool", "adaptive_avg_pool", "max_pool", "adaptive_max_pool", "lp_pool"):
        assert getattr(shapes, alias) is getattr(shapes, alias + "2d")


def test_an_array_instead_of_its_shape_says_pass_x_shape():
    x = np.full((2, 3, 8, 8), 12345.0)
    for call in (lambda: shapes.avg_pool2d(x, 2), lambda: shapes.max_pool2d(jnp.asarray(x), 2),
                 lambda: shapes.adaptive_avg_pool2d(torch.tensor(x), 2),
                 lambda: shapes.global_max_pool(jax.ShapeDtypeStruct(x.shape, x.dtype)),
                 lambda: shapes.channels(x)):
        with pytest.raises(TypeError, match="pass x.shape") as info:
            call()
        assert "12345" not in str(info.value) and "(2, 3, 8, 8)" in str(info.value)


def test_bad_shapes_are_rejected():
    with pytest.raises(TypeError, match="input_shape"):
        shapes.avg_pool2d((2, 3, 8.0, 8), 2)
    with pytest.raises(ValueError, match="input_shape"):
        shapes.avg_pool2d((2, 3, -8, 8), 2)
    assert shapes.avg_pool2d(torch.Size([2, 3, 8, 8]), 2) == (2, 3, 4, 4)
    assert shapes.avg_pool2d([2, 3, np.int64(8), 8], 2) == (2, 3, 4, 4)


# --- resampling -------------------------------------------------------------------------------

RESAMPLING_CASES = [
    ("interpolate", (2, 3, 7), dict(scale_factor=1.7)),
    ("interpolate", (2, 3, 100, 9), dict(scale_factor=(0.29, 2.5), mode="bilinear")),
    ("interpolate", (2, 3, 5, 6, 7), dict(size=(4, 9, 2), mode="trilinear")),
    ("interpolate", (2, 3, 9, 10), dict(size=4, mode="area")),
    ("interpolate", (0, 3, 9, 10), dict(scale_factor=3, mode="nearest-exact",
                                        recompute_scale_factor=True)),
    ("interpolate", (2, 3, 30, 31), dict(size=(7, 8), mode="bicubic", antialias=True)),
    ("upsample_nearest", (2, 3, 4, 5), dict(scale_factor=2)),
    ("upsample_bilinear", (2, 3, 4, 5), dict(size=(9, 7))),
    ("pixel_shuffle", (2, 18, 4, 5), dict(upscale_factor=3)),
    ("pixel_shuffle", (5, 2, 8, 1, 1), dict(upscale_factor=2)),
    ("pixel_unshuffle", (2, 2, 6, 9), dict(downscale_factor=3)),
]


@pytest.mark.parametrize("op,shape,args", RESAMPLING_CASES, ids=[c[0] for c in RESAMPLING_CASES])
def test_resampling_shapes_match_torch_and_eval_shape(op, shape, args):
    expected = _torch_shape(op, shape, args)
    assert getattr(shapes, op)(shape, **args) == expected
    assert jax.eval_shape(lambda x: getattr(jaxpool, op)(x, **args),
                          jax.ShapeDtypeStruct(shape, jnp.float32)).shape == expected
    last = tuple(np.moveaxis(np.empty(shape, np.uint8), -3 if "pixel" in op else 1, -1).shape)
    expected_last = tuple(np.moveaxis(np.empty(expected, np.uint8),
                                      -3 if "pixel" in op else 1, -1).shape)
    assert getattr(shapes, op)(last, **args, channels_last=True) == expected_last


@pytest.mark.parametrize("op", ["interpolate", "upsample_nearest", "upsample_bilinear",
                                "pixel_shuffle", "pixel_unshuffle"])
def test_resampling_rules_take_the_ops_arguments(op):
    wanted = [p.replace(name="input_shape", annotation=inspect.Parameter.empty)
              if name == "x" else p.replace(annotation=inspect.Parameter.empty)
              for name, p in inspect.signature(getattr(jaxpool, op)).parameters.items()
              if name != "axis_names"]
    got = [p.replace(annotation=inspect.Parameter.empty)
           for p in inspect.signature(getattr(shapes, op)).parameters.values()]
    assert got == wanted


def test_resampling_rules_raise_the_ops_errors():
    for call in (lambda: shapes.interpolate((2, 3, 8), size=3, scale_factor=2),
                 lambda: shapes.interpolate((2, 3, 8), scale_factor=0.1),
                 lambda: shapes.interpolate((2, 3, 8), size=3, mode="bilinear"),
                 lambda: shapes.pixel_shuffle((2, 6, 3, 3), 2),
                 lambda: shapes.pixel_unshuffle((2, 8, 3, 4), 2)):
        with pytest.raises(ValueError):
            call()
