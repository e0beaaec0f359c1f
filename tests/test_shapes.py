"""jaxpool.shapes against jax.eval_shape and torch's output shapes, and backward inference:
every op of jaxpool.registry.SPECS has a written-out rule with its arguments."""

import inspect
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxpool
from jaxpool import registry, shapes
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


def test_resampling_rules_raise_the_ops_errors():
    for call in (lambda: shapes.interpolate((2, 3, 8), size=3, scale_factor=2),
                 lambda: shapes.interpolate((2, 3, 8), scale_factor=0.1),
                 lambda: shapes.interpolate((2, 3, 8), size=3, mode="bilinear"),
                 lambda: shapes.pixel_shuffle((2, 6, 3, 3), 2),
                 lambda: shapes.pixel_unshuffle((2, 8, 3, 4), 2)):
        with pytest.raises(ValueError):
            call()


# --- every op: a written-out rule with the op's arguments, agreeing with jax.eval_shape --------

def _rule_name(array: str) -> str:
    """The rule's argument for the op's array (or samples) argument ``array``."""
    return "input_shape" if array in ("x", "input") else f"{array}_shape"


# Arguments of the op that change no shape, so that its rule leaves them out: the indices
# (given the values' shape), a max unpool's indices (the values' shape), the key the samples
# are drawn from, and the mesh axes (a rule gives the whole array's shape).
NO_SHAPE = ("return_indices", "key", "axis_names")
UNPOOL_INDICES = "indices"


@pytest.mark.parametrize("name", list(registry.SPECS))
def test_every_op_has_a_written_out_rule_with_its_arguments(name):
    rule = vars(shapes).get(name)
    assert inspect.isfunction(rule) and rule.__module__ == "jaxpool.shapes", name
    assert rule.__name__ == name and "Returns:" in rule.__doc__ and "Args:" in rule.__doc__
    spec = registry.SPECS[name]
    wanted = []
    for p in inspect.signature(registry.FUNCTIONS[name]).parameters.values():
        if p.name in NO_SHAPE or (p.name == UNPOOL_INDICES and name.startswith("max_unpool")):
            continue
        if p.name in spec.arrays or p.name == "samples":
            p = p.replace(name=_rule_name(p.name))
        wanted.append(p.replace(annotation=inspect.Parameter.empty))
    got = [p.replace(annotation=inspect.Parameter.empty)
           for p in inspect.signature(rule).parameters.values()]
    assert got == wanted


def test_rules_are_plain_functions_of_the_module():
    # a module __getattr__ would answer for a name no rule is written for
    assert "__getattr__" not in vars(shapes)
    with pytest.raises(AttributeError):
        shapes.not_an_op  # noqa: B018


_HALF = {2: np.full((2, 3, 2), 0.5, np.float32), 3: np.full((1, 2, 3), 0.5, np.float32)}

# Argument sets and bad calls (those torch rejects too) for the ops whose shape rules once
# traced the op: ((the arrays' shapes), keyword arguments).
_HALFWAY = {2: np.full((1, 2, 2), 0.5), 3: np.full((1, 2, 3), 0.5)}  # samples of 0.5
SPEC_SAMPLES = {
    'channel_shuffle': ((((2, 6, 3, 4),), dict(groups=3)), (((2, 4, 5),), dict(groups=2)),
        (((1, 8, 2, 3, 2),), dict(groups=4))),
    'grid_sample': (
        (((2, 3, 5, 6), (2, 4, 3, 2)), dict(mode="bilinear", align_corners=False)),
        (((1, 2, 4, 5), (1, 3, 4, 2)), dict(mode="bicubic",
                                            padding_mode="reflection",
                                            align_corners=True)),
        (((1, 2, 3, 4, 5), (1, 2, 3, 2, 3)), dict(padding_mode="border",
                                                  align_corners=False)),
        (((2, 3, 5, 6), (2, 4, 3, 2)), dict(mode="nearest",
                                            padding_mode="reflection",
                                            align_corners=False))),
    'affine_grid': ((((2, 2, 3),), dict(size=(2, 3, 4, 5), align_corners=False)),
        (((1, 3, 4),), dict(size=(1, 2, 3, 4, 5), align_corners=True))),
    'unfold': ((((2, 3, 7, 9),), dict(kernel_size=(3, 2), dilation=(1, 2),
                               padding=1, stride=(2, 1))),
        (((3, 5, 6),), dict(kernel_size=2))),
    'fold': ((((2, 12, 20),), dict(output_size=(5, 6), kernel_size=2)),
        (((1, 18, 16),), dict(output_size=(7, 8), kernel_size=3, padding=1,
                              stride=2))),
    'fractional_max_pool2d': (
            (((2, 3, 7, 9),), dict(kernel_size=(3, 2), output_size=(4, 5), return_indices=True)),
            (((3, 8, 6),), dict(kernel_size=2, output_ratio=(0.5, 0.7), return_indices=True)),
            (((1, 2, 7, 6),), dict(kernel_size=2, output_size=(4, 3))),  # values only
        ),
    'fractional_max_pool3d': (
            (((1, 2, 5, 6, 7),), dict(kernel_size=2, output_size=(3, 4, 5), return_indices=True)),
            (((2, 6, 5, 8),), dict(kernel_size=(1, 2, 3), output_ratio=(0.5, 0.7, 0.5),
                                   return_indices=True)),
        ),
}
SPEC_ERRORS = {
    'channel_shuffle': (("rank 2", ((6, 4),), dict(groups=2)),
        ("groups that do not divide the channels", ((2, 6, 3),),
         dict(groups=4)),
        ("groups=0", ((2, 6, 3),), dict(groups=0))),
    'grid_sample': (
        ("bicubic on 5-D input", ((1, 2, 3, 4, 5), (1, 2, 3, 2, 3)),
         dict(mode="bicubic", align_corners=False)),
        ("grid's last axis 3 on 4-D input", ((1, 2, 4, 5), (1, 3, 4, 3)),
         dict(align_corners=False)),
        ("batch mismatch", ((2, 2, 4, 5), (1, 3, 4, 2)),
         dict(align_corners=False)),
        ("unknown mode", ((1, 2, 4, 5), (1, 3, 4, 2)),
         dict(mode="linear", align_corners=False)),
        ("unknown padding_mode", ((1, 2, 4, 5), (1, 3, 4, 2)),
         dict(padding_mode="wrap", align_corners=False))),
    'affine_grid': (("theta for 3-D with a 4-D size", ((2, 3, 4),),
         dict(size=(2, 3, 4, 5), align_corners=False)),
        ("size of 3 entries", ((2, 2, 3),),
         dict(size=(2, 3, 4), align_corners=False))),
    'unfold': (("kernel_size 0", ((2, 3, 5, 6),), dict(kernel_size=0)),
        ("rank 5", ((1, 2, 3, 5, 6),), dict(kernel_size=2)),
        ("kernel larger than input", ((1, 2, 3, 3),), dict(kernel_size=4))),
    'fold': (("blocks that do not match output_size", ((1, 12, 19),),
         dict(output_size=(5, 6), kernel_size=2)),
        ("channels not divisible by the kernel", ((1, 10, 20),),
         dict(output_size=(5, 6), kernel_size=2))),
    'fractional_max_pool2d': (
            ("pool taller than the input", ((1, 2, 5, 5),),
             dict(kernel_size=2, output_size=(5, 3), samples=_HALFWAY[2])),
            ("neither output_size nor output_ratio", ((1, 2, 5, 5),),
             dict(kernel_size=2, samples=_HALFWAY[2])),
            ("samples of other channels", ((1, 3, 5, 5),),
             dict(kernel_size=2, output_size=3, samples=_HALFWAY[2])),
            ("samples of 3 per plane", ((1, 2, 5, 5),),
             dict(kernel_size=2, output_size=3, samples=_HALFWAY[3])),
            ("rank 2", ((5, 5),), dict(kernel_size=2, output_size=3, samples=_HALFWAY[2])),
            ("kernel_size of 3", ((1, 2, 5, 5),),
             dict(kernel_size=(2, 2, 2), output_size=3, samples=_HALFWAY[2])),
            ("negative output_size", ((1, 2, 5, 5),),
             dict(kernel_size=2, output_size=-1, samples=_HALFWAY[2])),
        ),
    'fractional_max_pool3d': (
            ("pool exactly fitting (torch's strict 3-D check)", ((1, 2, 5, 5, 5),),
             dict(kernel_size=2, output_size=4, samples=_HALFWAY[3])),
            ("samples of 2 per plane", ((1, 2, 5, 5, 5),),
             dict(kernel_size=2, output_size=3, samples=_HALFWAY[2])),
            ("output_size of 2", ((1, 2, 5, 5, 5),),
             dict(kernel_size=2, output_size=(3, 3), samples=_HALFWAY[3])),
            ("rank 3", ((5, 5, 5),), dict(kernel_size=2, output_size=3, samples=_HALFWAY[3])),
        ),
}

# (the op's arrays' shapes, its other arguments), for each op beside SPEC_SAMPLES: both
# layouts, unbatched input, indices, given samples, a list of boxes.
EVAL_CASES = {
    "avg_pool1d": [(((2, 3, 11),), dict(kernel_size=3, stride=2, padding=1)),
                   (((3, 10),), dict(kernel_size=2, ceil_mode=True))],
    "avg_pool2d": [(((2, 3, 9, 10),), dict(kernel_size=3, stride=2, padding=1,
                                           ceil_mode=True)),
                   (((2, 9, 10, 3),), dict(kernel_size=(3, 2), channels_last=True))],
    "avg_pool3d": [(((1, 2, 5, 6, 7),), dict(kernel_size=2, divisor_override=3))],
    "adaptive_avg_pool1d": [(((2, 3, 11),), dict(output_size=4))],
    "adaptive_avg_pool2d": [(((2, 3, 9, 10),), dict(output_size=(4, None))),
                            (((2, 9, 10, 3),), dict(output_size=3, channels_last=True))],
    "adaptive_avg_pool3d": [(((1, 2, 5, 6, 7),), dict(output_size=(2, 3, 4)))],
    "max_pool1d": [(((2, 3, 11),), dict(kernel_size=3, stride=2, padding=1, dilation=2,
                                        return_indices=True))],
    "max_pool2d": [(((2, 3, 9, 10),), dict(kernel_size=3, stride=2, padding=1,
                                           ceil_mode=True)),
                   (((9, 10, 3),), dict(kernel_size=2, return_indices=True,
                                        channels_last=True))],
    "max_pool3d": [(((1, 2, 5, 6, 7),), dict(kernel_size=(1, 2, 3)))],
    "adaptive_max_pool1d": [(((2, 3, 11),), dict(output_size=4, return_indices=True))],
    "adaptive_max_pool2d": [(((2, 3, 9, 10),), dict(output_size=(4, None)))],
    "adaptive_max_pool3d": [(((2, 5, 6, 7),), dict(output_size=2))],
    "lp_pool1d": [(((2, 3, 11),), dict(norm_type=2, kernel_size=3))],
    "lp_pool2d": [(((2, 3, 9, 10),), dict(norm_type=1.5, kernel_size=(3, 2), stride=2,
                                          ceil_mode=True))],
    "lp_pool3d": [(((1, 2, 5, 6, 7),), dict(norm_type=3, kernel_size=2))],
    "global_avg_pool": [(((4, 32, 7, 5),), {}),
                        (((4, 7, 5, 32),), dict(channels_last=True))],
    "global_max_pool": [(((4, 32, 7, 5),), {})],
    "interpolate": [(((2, 3, 7),), dict(scale_factor=1.7)),
                    (((2, 3, 5, 6, 7),), dict(size=(4, 9, 2), mode="trilinear")),
                    (((2, 9, 10, 3),), dict(size=4, mode="area", channels_last=True))],
    "upsample_nearest": [(((2, 3, 4, 5),), dict(scale_factor=2))],
    "upsample_bilinear": [(((2, 3, 4, 5),), dict(size=(9, 7)))],
    "pixel_shuffle": [(((2, 18, 4, 5),), dict(upscale_factor=3)),
                      (((2, 4, 5, 18),), dict(upscale_factor=3, channels_last=True))],
    "pixel_unshuffle": [(((2, 2, 6, 9),), dict(downscale_factor=3))],
    "channel_shuffle": [(((2, 3, 4, 6),), dict(groups=2, channels_last=True))],
    "max_unpool1d": [(((2, 3, 5), (2, 3, 5)), dict(kernel_size=2))],
    "max_unpool2d": [(((2, 3, 4, 5), (2, 3, 4, 5)), dict(kernel_size=3, stride=2, padding=1)),
                     (((2, 4, 5, 3), (2, 4, 5, 3)), dict(kernel_size=2, output_size=(9, 10),
                                                         channels_last=True))],
    "max_unpool3d": [(((1, 2, 2, 3, 4), (1, 2, 2, 3, 4)), dict(kernel_size=2))],
    "pad": [(((2, 3, 5, 6),), dict(pad=(1, 2, 3, 4), mode="reflect")),
            (((2, 5, 6, 3),), dict(pad=(1, -1), channels_last=True)),
            (((2, 3, 4),), dict(pad=(2, 1), mode="circular"))],
    "grid_sample": [(((2, 5, 6, 3), (2, 4, 3, 2)), dict(align_corners=True,
                                                        channels_last=True))],
    "affine_grid": [(((1, 2, 3),), dict(size=(1, 3, 1, 1), align_corners=True))],
    "unfold": [(((0, 3, 5, 6),), dict(kernel_size=2, stride=2))],
    "fold": [(((12, 20),), dict(output_size=(5, 6), kernel_size=2))],
    "fractional_max_pool2d": [(((2, 7, 9, 3),), dict(kernel_size=2, output_size=(4, 5),
                                                     samples=_HALF[2], channels_last=True))],
    "fractional_max_pool3d": [(((2, 5, 6, 7),), dict(kernel_size=2, output_ratio=0.5,
                                                     samples=_HALF[3]))],
    "roi_align": [(((2, 3, 8, 8), (4, 5)), dict(output_size=2, sampling_ratio=2)),
                  (((2, 8, 8, 3), [(3, 4), (2, 4)]), dict(output_size=(2, 3),
                                                          max_sampling_ratio=2,
                                                          channels_last=True))],
}


def _eval_cases():
    for name, spec in registry.SPECS.items():
        cases = EVAL_CASES.get(name, []) + list(SPEC_SAMPLES.get(name, ()))
        for i, (arrays, kwargs) in enumerate(cases):
            yield pytest.param(name, arrays, kwargs, id=f"{name}-{i}")


def _abstract(name: str, array: str, shape):
    """The op's array: a list of them for a list of shapes (roi_align's boxes per image)."""
    if shape and isinstance(shape[0], tuple):
        return [_abstract(name, array, s) for s in shape]
    floating = array in registry.SPECS[name].differentiable
    return jax.ShapeDtypeStruct(shape, jnp.float32 if floating else jnp.int32)


def _rule_arguments(name: str, arrays, kwargs):
    """The op's call as its rule's: a shape for each array, no argument that changes no
    shape."""
    spec = registry.SPECS[name]
    shapes_ = [s for a, s in zip(spec.arrays, arrays)
               if not (a == UNPOOL_INDICES and name.startswith("max_unpool"))]
    rule_kwargs = {k: v for k, v in kwargs.items() if k not in NO_SHAPE}
    if rule_kwargs.get("samples") is not None:
        rule_kwargs["samples_shape"] = np.shape(rule_kwargs.pop("samples"))
    return shapes_, rule_kwargs


@pytest.mark.parametrize("name,arrays,kwargs", list(_eval_cases()))
def test_every_rule_agrees_with_eval_shape(name, arrays, kwargs):
    op_kwargs = dict(kwargs)
    if name.startswith("fractional") and op_kwargs.get("samples") is None:
        op_kwargs["key"] = jax.random.key(0)
    abstract = [_abstract(name, a, s) for a, s in zip(registry.SPECS[name].arrays, arrays)]
    out = jax.eval_shape(lambda *xs: registry.FUNCTIONS[name](*xs, **op_kwargs), *abstract)
    values = out[0] if isinstance(out, tuple) else out  # indices: the values' shape
    shapes_, rule_kwargs = _rule_arguments(name, arrays, kwargs)
    got = getattr(shapes, name)(*shapes_, **rule_kwargs)
    assert got == values.shape and all(type(n) is int for n in got)
    if isinstance(out, tuple):
        assert all(o.shape == values.shape for o in out)


def _errors():
    for name, spec in registry.SPECS.items():
        for label, arrays, kwargs in SPEC_ERRORS.get(name, ()):
            yield pytest.param(name, arrays, kwargs, id=f"{name}-{label}")


@pytest.mark.parametrize("name,arrays,kwargs", list(_errors()))
def test_every_rule_raises_the_ops_errors(name, arrays, kwargs):
    """Bad calls (those torch rejects too): the rule raises what the op does."""
    kwargs = {k: np.asarray(v, np.float32) if k == "samples" else v for k, v in kwargs.items()}
    spec = registry.SPECS[name]
    inputs = [np.zeros(s, np.float32 if a in spec.differentiable else np.int32)
              for a, s in zip(spec.arrays, arrays)]
    with pytest.raises((ValueError, TypeError)) as raised:
        registry.FUNCTIONS[name](*inputs, **kwargs)
    shapes_, rule_kwargs = _rule_arguments(name, arrays, kwargs)
    with pytest.raises(type(raised.value)) as info:
        getattr(shapes, name)(*shapes_, **rule_kwargs)
    assert str(info.value) == str(raised.value)


def test_several_arrays_shapes_by_name_and_a_list_of_boxes():
    assert shapes.grid_sample(input_shape=(2, 3, 8, 8), grid_shape=(2, 5, 4, 2)) == (2, 3, 5, 4)
    assert shapes.roi_align(input_shape=(2, 3, 8, 8), boxes_shape=(7, 5),
                            output_size=2) == (7, 3, 2, 2)
    assert shapes.affine_grid(theta_shape=(2, 3, 4), size=(2, 1, 4, 5, 6)) == (2, 4, 5, 6, 3)
    boxes = [np.array([[0, 0, 4, 4.0]], np.float32), np.zeros((2, 4), np.float32)]
    assert (shapes.roi_align((2, 3, 8, 8), [b.shape for b in boxes], 3)
            == jaxpool.roi_align(np.zeros((2, 3, 8, 8), np.float32), boxes, 3).shape
            == (3, 3, 3, 3))
    with pytest.raises(ValueError, match=r"boxes\[1\] must have shape \[L, 4\]"):
        shapes.roi_align((2, 3, 8, 8), [(1, 4), (2, 5)], 3)
    with pytest.raises(TypeError, match="pass x.shape"):
        shapes.grid_sample((2, 3, 8, 8), np.zeros((2, 5, 4, 2)))
    with pytest.raises(TypeError, match="pass x.shape"):
        shapes.fractional_max_pool2d((2, 3, 8, 8), 2, 4, samples_shape=_HALF[2])


def test_rules_need_no_values():
    # An adaptive roi_align grid is sized from the boxes' values, the fractional windows
    # from the samples' or a key: neither changes the shape, and a rule needs neither.
    boxes = np.array([[0, 0, 0, 7, 7], [1, 2, 2, 3, 5]], np.float32)
    assert (shapes.roi_align((2, 3, 8, 8), boxes.shape, (2, 3))
            == jaxpool.roi_align(np.zeros((2, 3, 8, 8), np.float32), boxes, (2, 3)).shape)
    assert shapes.fractional_max_pool2d((2, 3, 9, 9), 2, output_ratio=0.5) == (2, 3, 4, 4)
    with pytest.raises(ValueError, match=r"samples must have shape \[2, 3, 2\]"):
        shapes.fractional_max_pool2d((2, 3, 9, 9), 2, 4, samples_shape=(1, 3, 2))
    # torch's warning for align_corners=None is about values: the rules do not repeat it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert shapes.affine_grid((2, 2, 3), (2, 3, 4, 5)) == (2, 4, 5, 2)
        assert shapes.grid_sample((2, 3, 8, 8), (2, 4, 5, 2)) == (2, 3, 4, 5)
