"""Bad input: a ValueError or TypeError naming the argument and the value, before any
computation; and torch rejects the same calls (except where jaxpool documents otherwise:
``EXPECTED_DIFFERENCES`` in test_opinfo.py)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxpool

X = np.zeros((2, 3, 6, 6), np.float32)

# (call, error type, words the message must contain, torch call that must also fail or None)
BAD = [
    ("rank 2", lambda: jaxpool.adaptive_avg_pool2d(X[0, 0], 2), ValueError, ["shape (6, 6)", "rank 3"],
     lambda: F.adaptive_avg_pool2d(torch.zeros(6, 6), 2)),
    ("rank 5", lambda: jaxpool.adaptive_avg_pool2d(X[None], 2), ValueError, ["rank 5"],
     lambda: F.adaptive_avg_pool2d(torch.zeros(1, 2, 3, 6, 6), 2)),
    ("global rank 3", lambda: jaxpool.global_avg_pool(X[0]), ValueError, ["rank 4"], None),
    ("output_size -1", lambda: jaxpool.adaptive_avg_pool2d(X, -1), ValueError, ["output_size", "-1"],
     lambda: F.adaptive_avg_pool2d(torch.zeros(2, 3, 6, 6), -1)),
    ("output_size 0", lambda: jaxpool.adaptive_avg_pool2d(X, (0, 2)), ValueError,
     ["output_size", "(0, 2)"], None),
    ("output_size 2**31", lambda: jaxpool.adaptive_avg_pool2d(X, 2**31), ValueError,
     ["output_size", str(2**31)], lambda: F.adaptive_avg_pool2d(torch.zeros(2, 3, 6, 6), 2**31)),
    ("output_size float", lambda: jaxpool.adaptive_avg_pool2d(X, 2.0), TypeError,
     ["output_size", "2.0"], None),
    ("output_size bool", lambda: jaxpool.adaptive_avg_pool2d(X, (True, 2)), TypeError,
     ["output_size", "True"], None),
    ("output_size length", lambda: jaxpool.adaptive_avg_pool2d(X, (2, 2, 2)), ValueError,
     ["output_size", "(2, 2, 2)", "2 entries"], None),
    ("int input", lambda: jaxpool.adaptive_avg_pool2d(X.astype(np.int64), 2), TypeError,
     ["int64", "float"], lambda: F.adaptive_avg_pool2d(torch.zeros(2, 3, 6, 6, dtype=torch.long), 2)),
    ("bool input", lambda: jaxpool.avg_pool2d(X.astype(bool), 2), TypeError, ["bool"], None),
    ("complex input", lambda: jaxpool.avg_pool2d(X.astype(np.complex64), 2), TypeError,
     ["complex64"], None),
    ("empty H", lambda: jaxpool.adaptive_avg_pool2d(np.zeros((2, 3, 0, 6), np.float32), 2),
     ValueError, ["(2, 3, 0, 6)", "non-zero"],
     lambda: F.adaptive_avg_pool2d(torch.zeros(2, 3, 0, 6), 2)),
    ("padding > kernel//2", lambda: jaxpool.avg_pool2d(X, 2, padding=2), ValueError,
     ["padding", "2", "kernel_size"], lambda: F.avg_pool2d(torch.zeros(2, 3, 6, 6), 2, padding=2)),
    ("kernel larger than input", lambda: jaxpool.avg_pool2d(X[..., :2, :2], 3), ValueError,
     ["kernel_size=3", "(2, 2)"], lambda: F.avg_pool2d(torch.zeros(2, 3, 2, 2), 3)),
    ("divisor_override 0", lambda: jaxpool.avg_pool2d(X, 2, divisor_override=0), ValueError,
     ["divisor_override", "0"], lambda: F.avg_pool2d(torch.zeros(2, 3, 6, 6), 2, divisor_override=0)),
    ("divisor_override float", lambda: jaxpool.avg_pool2d(X, 2, divisor_override=2.5), TypeError,
     ["divisor_override", "2.5"], None),
    ("kernel 0", lambda: jaxpool.avg_pool2d(X, 0), ValueError, ["kernel_size", "0"],
     lambda: F.avg_pool2d(torch.zeros(2, 3, 6, 6), 0)),
    ("kernel float", lambda: jaxpool.avg_pool2d(X, 2.0), TypeError, ["kernel_size", "2.0"], None),
    ("stride negative", lambda: jaxpool.avg_pool2d(X, 2, stride=-1), ValueError, ["stride", "-1"],
     lambda: F.avg_pool2d(torch.zeros(2, 3, 6, 6), 2, stride=-1)),
    ("padding negative", lambda: jaxpool.avg_pool2d(X, 2, padding=-1), ValueError,
     ["padding", "-1"], lambda: F.avg_pool2d(torch.zeros(2, 3, 6, 6), 2, padding=-1)),
    ("kernel tuple length", lambda: jaxpool.avg_pool2d(X, (2, 2, 2)), ValueError,
     ["kernel_size", "(2, 2, 2)"], lambda: F.avg_pool2d(torch.zeros(2, 3, 6, 6), (2, 2, 2))),
    ("ceil_mode not bool", lambda: jaxpool.avg_pool2d(X, 2, ceil_mode="yes"), TypeError,
     ["ceil_mode", "'yes'"], None),
    ("layout", lambda: jaxpool.avg_pool2d(X, 2, channels_last="NHWC"), TypeError,
     ["channels_last", "'NHWC'"], None),
    ("3d rank", lambda: jaxpool.avg_pool3d(X[0, 0], 2), ValueError, ["rank 4", "rank 5"],
     lambda: F.avg_pool3d(torch.zeros(6, 6), 2)),
    # Sizes: any concrete integer, never a bool, a float or a traced value.
    ("kernel traced", lambda: jax.jit(lambda x, k: jaxpool.avg_pool2d(x, k))(X, 2), TypeError,
     ["kernel_size", "static", "x.shape", "static_argnums"], None),
    ("output_size traced", lambda: jax.jit(lambda x, k: jaxpool.adaptive_max_pool2d(x, k))(
        X, jnp.array([2, 2])), TypeError, ["output_size", "static", "static_argnums"], None),
    ("dilation traced", lambda: jax.jit(lambda x, d: jaxpool.max_pool2d(x, 3, dilation=(d, 1)))(
        X, 2), TypeError, ["dilation", "static"], None),
    ("kernel numpy bool", lambda: jaxpool.avg_pool2d(X, np.bool_(True)), TypeError,
     ["kernel_size", "True"], lambda: F.avg_pool2d(torch.zeros(2, 3, 6, 6), np.bool_(True))),
    ("kernel bool array", lambda: jaxpool.avg_pool2d(X, np.array([True, True])), TypeError,
     ["kernel_size", "bool"], None),
    ("kernel torch bool", lambda: jaxpool.max_pool2d(X, torch.tensor(True)), TypeError,
     ["kernel_size", "bool"], None),
    ("kernel float array", lambda: jaxpool.avg_pool2d(X, np.array([2.0, 2.0])), TypeError,
     ["kernel_size", "2."], None),
    ("kernel jax float", lambda: jaxpool.avg_pool2d(X, jnp.float32(2)), TypeError,
     ["kernel_size", "2"], None),
    ("kernel 2-d array", lambda: jaxpool.avg_pool2d(X, np.full((2, 2), 2)), TypeError,
     ["kernel_size", "shape (2, 2)"], None),
    ("padding 3 entries", lambda: jaxpool.avg_pool2d(X, 3, padding=(1, 1, 1)), ValueError,
     ["padding", "(1, 1, 1)", "1 or 2 entries"],
     lambda: F.avg_pool2d(torch.zeros(2, 3, 6, 6), 3, padding=(1, 1, 1))),
    ("padding empty", lambda: jaxpool.avg_pool2d(X, 3, padding=()), ValueError,
     ["padding", "()"], lambda: F.avg_pool2d(torch.zeros(2, 3, 6, 6), 3, padding=())),
    ("output_size 1-tuple in 2d", lambda: jaxpool.adaptive_avg_pool2d(X, (3,)), ValueError,
     ["output_size", "(3,)", "2 entries"],
     lambda: F.adaptive_avg_pool2d(torch.zeros(2, 3, 6, 6), (3,))),
    ("dilation 0", lambda: jaxpool.max_pool2d(X, 3, dilation=0), ValueError, ["dilation", "0"],
     lambda: F.max_pool2d(torch.zeros(2, 3, 6, 6), 3, dilation=0)),
    ("dilation float", lambda: jaxpool.max_pool2d(X, 3, dilation=1.5), TypeError,
     ["dilation", "1.5"], None),
    # A torch tensor as x: say how to convert it.
    *[(f"torch tensor into {name}", functools.partial(getattr(jaxpool, name),
                                                      torch.zeros(2, 3, 6, 6), *args),
       TypeError, [name, "torch", "parity.to_jax", ".numpy()"], None)
      for name, args in [("avg_pool2d", (2,)), ("adaptive_avg_pool2d", (2,)),
                         ("global_avg_pool", ()), ("max_pool2d", (2,)),
                         ("adaptive_max_pool2d", (2,)), ("global_max_pool", ()),
                         ("lp_pool2d", (2, 2))]],
]


# Resampling: interpolate's and pixel shuffle's arguments, as torch checks them.
_T = lambda *shape: torch.zeros(*shape)  # noqa: E731
BAD += [
    ("interpolate size and scale", lambda: jaxpool.interpolate(X, 3, 2.0), ValueError,
     ["size=3", "scale_factor=2.0"], lambda: F.interpolate(_T(2, 3, 6, 6), 3, 2.0)),
    ("interpolate neither", lambda: jaxpool.interpolate(X), ValueError, ["size", "scale_factor"],
     lambda: F.interpolate(_T(2, 3, 6, 6))),
    ("interpolate mode", lambda: jaxpool.interpolate(X, 3, mode="cubic"), ValueError,
     ["mode", "'cubic'"], lambda: F.interpolate(_T(2, 3, 6, 6), 3, mode="cubic")),
    ("interpolate mode rank", lambda: jaxpool.interpolate(X, 3, mode="linear"), ValueError,
     ["'linear'", "rank 3"], lambda: F.interpolate(_T(2, 3, 6, 6), 3, mode="linear")),
    ("interpolate rank 2", lambda: jaxpool.interpolate(X[0, 0], 3), ValueError, ["rank", "(6, 6)"],
     lambda: F.interpolate(_T(6, 6), 3)),
    ("interpolate align_corners nearest", lambda: jaxpool.interpolate(X, 3, align_corners=True),
     ValueError, ["align_corners", "'nearest'"],
     lambda: F.interpolate(_T(2, 3, 6, 6), 3, align_corners=True)),
    ("interpolate size length", lambda: jaxpool.interpolate(X, (3,)), ValueError,
     ["size", "(3,)", "2 entries"], lambda: F.interpolate(_T(2, 3, 6, 6), (3,))),
    ("interpolate size float", lambda: jaxpool.interpolate(X, (3.0, 3)), TypeError,
     ["size", "3.0"], lambda: F.interpolate(_T(2, 3, 6, 6), (3.0, 3))),
    ("interpolate size 0", lambda: jaxpool.interpolate(X, (0, 3)), ValueError, ["size", "(0, 3)"],
     lambda: F.interpolate(_T(2, 3, 6, 6), (0, 3))),
    ("interpolate scale to 0", lambda: jaxpool.interpolate(X, scale_factor=0.1), ValueError,
     ["scale_factor=0.1", "(0, 0)"], lambda: F.interpolate(_T(2, 3, 6, 6), scale_factor=0.1)),
    ("interpolate scale negative", lambda: jaxpool.interpolate(X, scale_factor=-2), ValueError,
     ["scale_factor", "-2"], lambda: F.interpolate(_T(2, 3, 6, 6), scale_factor=-2)),
    ("interpolate scale length", lambda: jaxpool.interpolate(X, scale_factor=(2, 2, 2)), ValueError,
     ["scale_factor", "2 entries"], lambda: F.interpolate(_T(2, 3, 6, 6), scale_factor=(2, 2, 2))),
    ("interpolate recompute with size",
     lambda: jaxpool.interpolate(X, 3, recompute_scale_factor=True), ValueError,
     ["recompute_scale_factor", "size"],
     lambda: F.interpolate(_T(2, 3, 6, 6), 3, recompute_scale_factor=True)),
    ("interpolate antialias nearest", lambda: jaxpool.interpolate(X, 3, antialias=True),
     ValueError, ["antialias", "'nearest'"],
     lambda: F.interpolate(_T(2, 3, 6, 6), 3, antialias=True)),
    ("interpolate antialias trilinear",
     lambda: jaxpool.interpolate(X[None], 3, mode="trilinear", antialias=True), ValueError,
     ["antialias"], lambda: F.interpolate(_T(1, 2, 3, 6, 6), 3, mode="trilinear", antialias=True)),
    ("interpolate lanczos", lambda: jaxpool.interpolate(X, 3, mode="lanczos"), ValueError,
     ["lanczos"], None),
    ("interpolate int input", lambda: jaxpool.interpolate(X.astype(np.int64), 3), TypeError,
     ["int64"], None),
    ("interpolate align_corners str",
     lambda: jaxpool.interpolate(X, 3, mode="bilinear", align_corners="yes"), TypeError,
     ["align_corners", "'yes'"], None),
    ("interpolate empty channels", lambda: jaxpool.interpolate(X[:, :0], 3), ValueError,
     ["non-zero"], lambda: F.interpolate(_T(2, 0, 6, 6), 3)),
    ("interpolate torch tensor", lambda: jaxpool.interpolate(_T(2, 3, 6, 6), 3), TypeError,
     ["torch", "parity.to_jax"], None),
    ("pixel_shuffle factor 0", lambda: jaxpool.pixel_shuffle(X, 0), ValueError,
     ["upscale_factor", "0"], lambda: F.pixel_shuffle(_T(2, 3, 6, 6), 0)),
    ("pixel_shuffle channels", lambda: jaxpool.pixel_shuffle(X, 2), ValueError,
     ["channel count 3", "4"], lambda: F.pixel_shuffle(_T(2, 3, 6, 6), 2)),
    ("pixel_shuffle rank 2", lambda: jaxpool.pixel_shuffle(X[0, 0], 1), ValueError,
     ["rank 3", "(6, 6)"], lambda: F.pixel_shuffle(_T(6, 6), 1)),
    ("pixel_unshuffle extents", lambda: jaxpool.pixel_unshuffle(X, 4), ValueError,
     ["downscale_factor=4", "(6, 6)"], lambda: F.pixel_unshuffle(_T(2, 3, 6, 6), 4)),
    ("pixel_shuffle float factor", lambda: jaxpool.pixel_shuffle(X, 1.0), TypeError,
     ["upscale_factor", "1.0"], lambda: F.pixel_shuffle(_T(2, 3, 6, 6), 1.0)),
]

@pytest.mark.parametrize("name,call,error,words,torch_call", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_rejected_with_a_clear_message(name, call, error, words, torch_call):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} not in {info.value}"
    if torch_call is not None:
        with pytest.raises((RuntimeError, ValueError, TypeError, NotImplementedError)):
            torch_call()


def test_errors_come_before_any_computation():
    """The checks run on the static shape: tracing raises them, nothing is dispatched."""
    with pytest.raises(ValueError, match="padding"):
        jax.eval_shape(lambda x: jaxpool.avg_pool2d(x, 2, padding=2),
                       jax.ShapeDtypeStruct((2, 3, 6, 6), jnp.float32))


def test_an_empty_batch_works():
    """As in torch: only the batch axis may be empty."""
    empty = jaxpool.adaptive_avg_pool2d(np.zeros((0, 3, 6, 6), np.float32), 4)
    assert empty.shape == tuple(F.adaptive_avg_pool2d(torch.zeros(0, 3, 6, 6), 4).shape)


def test_a_torch_tensor_is_not_printed():
    """The message names the tensor's dtype and shape, not its values."""
    with pytest.raises(TypeError) as info:
        jaxpool.avg_pool2d(torch.full((2, 3, 6, 6), 12345.0), 2)
    assert "12345" not in str(info.value) and "(2, 3, 6, 6)" in str(info.value)


def test_concrete_sizes_of_every_integer_kind_are_python_ints():
    """NumPy, JAX and torch integers become plain ints: plans stay hashable and compare equal
    whatever kind of integer the caller used."""
    from jaxpool.pooling.plan import plan_avg_pool
    forms = [3, np.int64(3), np.uint8(3), jnp.int32(3), np.array(3), torch.tensor(3),
             (3, 3), [3, 3], (3,), np.array([3, 3]), jnp.array([3, 3], jnp.int16),
             torch.Size([3, 3]), torch.tensor([3, 3])]
    plans = {plan_avg_pool("avg_pool2d", X.shape, X.dtype, 2, form) for form in forms}
    assert len(plans) == 1
    assert all(type(v) is int for axis in plans.pop().axes for v in axis.starts + axis.stops)
