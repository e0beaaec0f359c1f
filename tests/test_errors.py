"""Bad input: a ValueError or TypeError naming the argument and the value, before any
computation; and torch rejects the same calls (except where jaxpool documents otherwise)."""

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


def test_documented_differences_from_torch():
    """stride 0 means kernel_size (torch raises); an empty batch works, as in torch."""
    x = np.arange(2 * 3 * 6 * 6, dtype=np.float32).reshape(2, 3, 6, 6)
    np.testing.assert_array_equal(np.asarray(jaxpool.avg_pool2d(x, 2, stride=0)),
                                  np.asarray(jaxpool.avg_pool2d(x, 2)))
    with pytest.raises(RuntimeError):
        F.avg_pool2d(torch.tensor(x), 2, stride=0)
    empty = jaxpool.adaptive_avg_pool2d(np.zeros((0, 3, 6, 6), np.float32), 4)
    assert empty.shape == (0, 3, 4, 4)
