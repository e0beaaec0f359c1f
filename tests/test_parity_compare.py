"""parity.compare on functions other than jaxpool's, and on planted bugs it must catch.

The JAX average pool below is lax.reduce_window, so these tests do not depend on jaxpool.
Every planted bug has a correct twin that must pass: a check that cannot pass proves nothing.
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import parity
from default_share import each_once

DTYPES = [np.float64, np.float32, np.float16, ml_dtypes.bfloat16]


# --------------------------------------------------------------------------- functions


def jax_avg_pool2d(x, k=3, s=2):
    """Reference avg pool on [B, C, H, W] without padding (reduce_window)."""
    summed = jax.lax.reduce_window(x.astype(jnp.float32) if x.dtype in (jnp.float16, jnp.bfloat16)
                                   else x, 0.0, jax.lax.add, (1, 1, k, k), (1, 1, s, s), "VALID")
    return (summed / (k * k)).astype(x.dtype)


def torch_avg_pool2d(x):
    return F.avg_pool2d(x, 3, 2)


def torch_off_by_one_window(x):
    """Right everywhere but in the last window along W, which starts one element early."""
    y = F.avg_pool2d(x, 3, 2)
    last = F.avg_pool2d(x[..., :, -4:-1], 3, 2)
    return torch.cat([y[..., :-1], last], dim=-1)


class _WrongBackward(torch.autograd.Function):
    """avg_pool2d(x, 3, 2) with a correct forward and a backward that divides by 8, not 9."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.avg_pool2d(x, 3, 2)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return torch.ops.aten.avg_pool2d_backward(g, x, [3, 3], [2, 2], [0, 0], False, True, 8)


def torch_wrong_backward(x):
    return _WrongBackward.apply(x)


def torch_wrong_second_order(x, c=0.25):
    """Value and first derivative vanish at the point; the second derivative is 2c."""
    return F.avg_pool2d(x + c * (x - x.detach()) ** 2, 3, 2)


def torch_wrong_third_order(x, c=0.25):
    return F.avg_pool2d(x + c * (x - x.detach()) ** 3, 3, 2)


def jax_layer_norm(x, g):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / jnp.sqrt(v + 1e-5) * g


def torch_layer_norm(x, g):
    # Written out: F.layer_norm's third derivatives are what parity is not testing here.
    m = x.mean(-1, keepdim=True)
    v = ((x - m) ** 2).mean(-1, keepdim=True)
    return (x - m) / torch.sqrt(v + 1e-5) * g


@pytest.fixture
def image():
    return np.random.default_rng(0).standard_normal((2, 3, 9, 9))


# --------------------------------------------------------------------------- conversion


@pytest.mark.parametrize("dtype", DTYPES + [np.int32, np.int64, np.bool_])
def test_conversion_round_trip_is_bit_exact(dtype):
    a = (np.random.default_rng(1).standard_normal((3, 4, 5)) * 100).astype(dtype)
    t = parity.to_torch(a)
    j = parity.to_jax(t)
    back = parity.to_numpy(j)
    assert tuple(t.shape) == a.shape and j.shape == a.shape
    assert parity.to_numpy(t).dtype == a.dtype and back.dtype == a.dtype
    assert back.tobytes() == a.tobytes()


def test_conversion_keeps_float64_and_handles_views_and_scalars():
    a = np.random.default_rng(2).standard_normal((4, 5))
    assert parity.to_jax(a).dtype == jnp.float64  # even with JAX's x64 mode off
    t = parity.to_torch(a.T)  # non-contiguous view
    assert t.shape == (5, 4) and torch.equal(t, torch.from_numpy(a.T.copy()))
    assert parity.to_torch(np.float64(3.5)).shape == ()
    tt = torch.arange(12.0, dtype=torch.float64).reshape(3, 4).T.requires_grad_()
    np.testing.assert_array_equal(parity.to_numpy(parity.to_jax(tt)), tt.detach().numpy())
    with pytest.raises(TypeError, match="dtype"):
        parity.to_torch(np.array(["a"]))


# --------------------------------------------------------------------------- agreement


# float64 and bfloat16 by default (a direct reference and a float64 one); float32 and float16
# under -m slow: the suite's float32 cases (test_parity_report.py) and float16's tests below
# take them by default.
@pytest.mark.parametrize("dtype", [d if d in (np.float64, ml_dtypes.bfloat16) else
                                   pytest.param(d, marks=pytest.mark.slow) for d in DTYPES])
def test_softplus_agrees_in_every_dtype(dtype):
    x = np.random.default_rng(3).standard_normal((4, 6)).astype(dtype)
    report = parity.compare(jax.nn.softplus, F.softplus, x, orders=3)
    assert report.ok, report
    names = {r.name for r in report.rows}
    assert {"value", "vjp", "jvp", "double backward d/dcot", "double backward d/dinput", "hvp",
            "d2 reverse", "d2 forward", "d3 reverse", "d3 forward"} <= names
    assert report.reference == ("float64" if dtype in (np.float16, ml_dtypes.bfloat16) else "direct")


def test_two_inputs_matmul_and_layer_norm():
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    # to order 2: a matmul's third derivatives are zero (the layer norm's are not)
    report = parity.compare(jnp.matmul, torch.matmul, a, b, orders=2)
    assert report.ok, report
    x, g = rng.standard_normal((3, 5)), rng.standard_normal(5)
    assert parity.compare(jax_layer_norm, torch_layer_norm, x, g).ok


def test_non_float_inputs_are_passed_but_not_differentiated():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((5, 3))
    idx = np.array([4, 0, 0, 2])
    report = parity.compare(lambda x, i: jnp.sin(x[i]), lambda x, i: torch.sin(x[i]), x, idx)
    assert report.ok, report
    report = parity.compare(lambda x, y: x * y, lambda x, y: x * y, x, x + 1, argnums=1)
    assert report.ok, report


def test_pooling_reference_agrees_with_torch(image):
    report = parity.compare(jax_avg_pool2d, torch_avg_pool2d, image, orders=3)
    assert report.ok, report
    assert report.first_failing_order is None


def test_same_seed_same_report(image):
    a = parity.compare(jax_avg_pool2d, torch_avg_pool2d, image, orders=2, seed=7)
    b = parity.compare(jax_avg_pool2d, torch_avg_pool2d, image, orders=2, seed=7)
    assert [r.abs_err for r in a.rows] == [r.abs_err for r in b.rows]


# --------------------------------------------------------------------------- planted bugs


def _assert_caught_at(report, order):
    assert not report.ok
    assert report.first_failing_order == order, report
    assert all(r.ok for r in report.rows if r.order < order), report


def test_off_by_one_window_is_caught_at_order_0(image):
    report = parity.compare(jax_avg_pool2d, torch_off_by_one_window, image)
    _assert_caught_at(report, 0)
    value = next(r for r in report.rows if r.name == "value")
    # Only the last window along W differs, and the diff says where.
    assert "worst at output" in value.detail and ", 3]" in value.detail


def test_wrong_backward_is_caught_at_order_1(image):
    report = parity.compare(jax_avg_pool2d, torch_wrong_backward, image)
    _assert_caught_at(report, 1)
    rows = {r.name: r for r in report.rows}
    assert not rows["vjp"].ok
    # The custom Function has no forward-mode rule: torch's JVP falls back to reverse mode,
    # which inherits the wrong backward.
    assert not rows["jvp"].ok and "double backward" in rows["jvp"].note


def test_wrong_second_order_is_caught_at_order_2(image):
    report = parity.compare(jax_avg_pool2d, torch_wrong_second_order, image)
    _assert_caught_at(report, 2)
    rows = {r.name: r for r in report.rows}
    for name in ("double backward d/dinput", "hvp", "d2 reverse", "d2 forward"):
        assert not rows[name].ok, name
    assert rows["double backward d/dcot"].ok  # d/du of u^T J is J: first order, right
    assert parity.compare(jax_avg_pool2d, torch_wrong_second_order, image, orders=1).ok


def test_wrong_third_order_is_caught_at_order_3(image):
    _assert_caught_at(parity.compare(jax_avg_pool2d, torch_wrong_third_order, image), 3)
    assert parity.compare(jax_avg_pool2d, torch_wrong_third_order, image, orders=2).ok


HALF_BUGS = [(torch_off_by_one_window, 0), (torch_wrong_backward, 1),
             (torch_wrong_second_order, 2)]


# Each bug in one half dtype by default (the dtypes in turn), each with its correct twin in
# that dtype; every bug in both under -m slow.
@pytest.mark.parametrize("bug,order,dtype", each_once(
    HALF_BUGS, [np.float16, ml_dtypes.bfloat16],
    ids=["off_by_one_window", "wrong_backward", "wrong_second_order"]))
def test_planted_bugs_are_caught_in_half_precision(image, bug, order, dtype):
    x = image.astype(dtype)
    assert parity.compare(jax_avg_pool2d, torch_avg_pool2d, x).ok
    _assert_caught_at(parity.compare(jax_avg_pool2d, bug, x), order)


def test_half_accumulation_is_caught():
    """A global average over 32x32 activations that accumulates in bfloat16 instead of
    float32 is less accurate than torch, and the half-precision tolerance notices."""
    x = np.random.default_rng(6).standard_normal((4, 8, 32, 32)).astype(ml_dtypes.bfloat16)

    def jax_sum_in_half(x):
        flat = x.astype(jnp.float32).reshape(*x.shape[:-2], -1)

        def add(i, total):  # round the running sum to bfloat16 after every element
            return jax.lax.reduce_precision(total + flat[..., i], 8, 7)

        total = jax.lax.fori_loop(0, flat.shape[-1], add, jnp.zeros(flat.shape[:-1]))
        return (total / flat.shape[-1]).astype(jnp.bfloat16)

    def jax_sum_in_float32(x):
        return x.astype(jnp.float32).mean((2, 3)).astype(x.dtype)

    torch_mean = lambda x: x.mean((2, 3))  # noqa: E731
    assert parity.compare(jax_sum_in_float32, torch_mean, x, orders=0).ok
    report = parity.compare(jax_sum_in_half, torch_mean, x, orders=0)
    assert not report.ok, report


class _SoftplusNoHalfBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.softplus(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if x.dtype in (torch.float16, torch.bfloat16):
            raise NotImplementedError("no half-precision backward")
        return g * torch.sigmoid(x)


# jax.nn.softplus's own third derivative in bfloat16 changed between jax releases: jax
# 0.4.38's misses the tolerance on one element of 21 (a fact of that jax's function, not of
# the emulation this test is about).
_OLD_JAX = tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 5)


# bfloat16 under -m slow: the same emulation as float16's
@pytest.mark.parametrize("dtype", [np.float16, pytest.param(
    ml_dtypes.bfloat16, marks=[pytest.mark.slow, pytest.mark.xfail(
        _OLD_JAX, reason="jax.nn.softplus's third derivative in bfloat16 before jax 0.5",
        strict=False)])])
def test_torch_without_half_kernels_is_emulated_in_float32(dtype):
    x = np.random.default_rng(9).standard_normal((3, 7)).astype(dtype)

    def softplus_no_half(x):
        if x.dtype in (torch.float16, torch.bfloat16):
            raise NotImplementedError("no half-precision kernel")
        return F.softplus(x)

    report = parity.compare(jax.nn.softplus, softplus_no_half, x)
    assert report.ok, report
    assert all("float32, rounded to" in r.note for r in report.rows)

    report = parity.compare(jax.nn.softplus, _SoftplusNoHalfBackward.apply, x, orders=1)
    assert report.ok, report
    rows = {r.name: r for r in report.rows}
    assert rows["value"].note == "" and "float32, rounded to" in rows["vjp"].note


def test_reverse_only_jax_function_fails_forward_mode_rows(image):
    @jax.custom_vjp
    def pool(x):
        return jax_avg_pool2d(x)

    pool.defvjp(lambda x: (pool(x), x), lambda x, g: jax.vjp(jax_avg_pool2d, x)[1](g))
    report = parity.compare(pool, torch_avg_pool2d, image, orders=2)
    rows = {r.name: r for r in report.rows}
    assert rows["value"].ok and rows["vjp"].ok
    assert not rows["jvp"].ok and "jax raised" in rows["jvp"].note
    assert not rows["d2 forward"].ok


def test_shape_and_dtype_mismatch_fail_without_crashing(image):
    report = parity.compare(lambda x: jax_avg_pool2d(x, 3, 1), torch_avg_pool2d, image)
    assert not report.ok and "shape" in report.rows[0].note
    report = parity.compare(lambda x: jax_avg_pool2d(x).astype(jnp.float32), torch_avg_pool2d, image)
    assert not report.ok and "dtype" in report.rows[0].note


def test_one_side_raising_on_the_forward_is_a_failure(image):
    def boom(x):
        raise ValueError("no")

    report = parity.compare(boom, torch_avg_pool2d, image)
    assert not report.ok and "only jax raised" in report.rows[0].note
    assert parity.compare(boom, lambda x: boom(x), image).ok  # both raise: they agree


def test_tolerance_override(image):
    loose = parity.compare(jax_avg_pool2d, torch_off_by_one_window, image, orders=0, rtol=10.0)
    assert loose.ok
    x = image.astype(np.float32)
    strict = parity.compare(jax_avg_pool2d, torch_avg_pool2d, x, orders=1, rtol=0.0, atol=0.0)
    assert all(r.tol == 0.0 for r in strict.rows)


def test_bad_compare_arguments(image):
    with pytest.raises(ValueError, match="orders"):
        parity.compare(jax_avg_pool2d, torch_avg_pool2d, image, orders=-1)
    with pytest.raises(ValueError, match="reference"):
        parity.compare(jax_avg_pool2d, torch_avg_pool2d, image, reference="exact")
    with pytest.raises(ValueError, match="argnums"):
        parity.compare(jax_avg_pool2d, torch_avg_pool2d, image, argnums=3)


# --------------------------------------------------------------------------- errors


def test_compare_errors():
    x = np.random.default_rng(8).standard_normal((1, 2, 5, 5))

    def jax_pool(x, k, padding=0):
        if k > x.shape[-1] or padding > k // 2:
            raise ValueError(f"bad kernel_size={k} / padding={padding}")
        return jax_avg_pool2d(x, k, k)

    cases = [parity.Call(x, 7), parity.Call(x, 3, padding=2, label="padding > k//2")]
    report = parity.compare_errors(jax_pool, F.avg_pool2d, cases)
    assert report.ok, report
    assert report.rows[1].name == "raises padding > k//2"

    # torch raises, JAX returns: a failure. Neither raises: a failure too.
    report = parity.compare_errors(jax_avg_pool2d, F.avg_pool2d, [parity.Call(x, 7, 1)])
    assert not report.ok and "only torch raised" in report.rows[0].note
    report = parity.compare_errors(jax_pool, F.avg_pool2d, [parity.Call(x, 3)])
    assert not report.ok and "neither" in report.rows[0].note


def test_bad_inputs_rows_in_compare(image):
    report = parity.compare(jax_avg_pool2d, torch_avg_pool2d, image, orders=0,
                            bad_inputs=[image[0, 0], (image.astype(np.int32),)])
    err_rows = [r for r in report.rows if r.name.startswith("raises")]
    assert len(err_rows) == 2
    # lax.reduce_window on a rank-2 array raises like torch; int32 is averaged by JAX and
    # rejected by torch, so only the first agrees.
    assert err_rows[0].ok and not err_rows[1].ok


def test_assert_parity_raises_a_readable_diff(image):
    parity.assert_parity(jax_avg_pool2d, torch_avg_pool2d, image, orders=1)
    with pytest.raises(parity.ParityError) as info:
        parity.assert_parity(jax_avg_pool2d, torch_wrong_backward, image, orders=1)
    msg = str(info.value)
    assert "vjp" in msg and "FAIL" in msg and "worst at input0" in msg
    assert "value" not in msg.split("\n", 2)[2]  # only failing rows are listed


def test_report_serialises(image):
    report = parity.compare(jax_avg_pool2d, torch_off_by_one_window, image, orders=1)
    d = report.to_dict()
    assert d["ok"] is False and len(d["rows"]) == len(report.rows)
    assert "FAIL" in str(report)
    assert set(report.worst_by_order()) == {0, 1}


# --------------------------------------------------------------------------- pytrees


def test_non_array_arguments_reach_both_sides_unchanged(image):
    import jaxpool

    report = parity.compare(jaxpool.avg_pool2d, F.avg_pool2d, image, 3, orders=1)
    assert report.ok, report
    assert [r.name for r in report.rows] == ["value", "vjp", "jvp"]
    # tuples of ints, None and bools are arguments, not inputs to differentiate
    report = parity.compare(jaxpool.avg_pool2d, F.avg_pool2d, image, (3, 2), None, (1, 0), True,
                            orders=1)
    assert report.ok, report
    assert parity.compare(lambda x, mode: jnp.tanh(x) if mode == "tanh" else x,
                          lambda x, mode: torch.tanh(x) if mode == "tanh" else x,
                          image, "tanh").ok


def _jax_mlp(params, x):
    h = jnp.tanh(x @ params["hidden"]["w"] + params["hidden"]["b"])
    return h @ params["out"]


def _torch_mlp(params, x):
    h = torch.tanh(x @ params["hidden"]["w"] + params["hidden"]["b"])
    return h @ params["out"]


@pytest.fixture
def mlp():
    rng = np.random.default_rng(11)
    params = {"hidden": {"w": rng.standard_normal((4, 5)), "b": rng.standard_normal(5)},
              "out": rng.standard_normal((5, 2))}
    return params, rng.standard_normal((3, 4))


def test_parameter_pytree_is_differentiated_leaf_by_leaf(mlp):
    params, x = mlp
    report = parity.compare(_jax_mlp, _torch_mlp, params, x, orders=2)
    assert report.ok, report
    names = [r.name for r in report.rows]
    for check in ("vjp", "double backward d/dinput", "hvp", "d2 reverse"):
        assert [n for n in names if n.startswith(check + " ")] == [
            f"{check} input0['hidden']['b']", f"{check} input0['hidden']['w']",
            f"{check} input0['out']", f"{check} input1"]
    assert "value" in names and "jvp" in names  # one output: no path
    # argnums picks whole arguments: only the parameters
    report = parity.compare(_jax_mlp, _torch_mlp, params, x, orders=1, argnums=0)
    assert not any(r.name.endswith("input1") for r in report.rows)


def test_wrong_gradient_of_one_parameter_is_named_by_its_path(mlp):
    params, x = mlp

    def torch_wrong_bias_grad(params, x):
        b = params["hidden"]["b"]
        b = b + 0.5 * (b - b.detach())  # same value, gradient 1.5 times too large
        return _torch_mlp({**params, "hidden": {**params["hidden"], "b": b}}, x)

    report = parity.compare(_jax_mlp, torch_wrong_bias_grad, params, x, orders=1)
    failing = {r.name for r in report.failures}
    assert failing == {"vjp input0['hidden']['b']", "jvp"}, report
    row = next(r for r in report.rows if r.name == "vjp input0['hidden']['b']")
    assert "worst at input0['hidden']['b'][" in row.detail


def test_pytree_outputs_each_leaf_its_own_rows():
    x = np.random.default_rng(12).standard_normal((3, 6))

    def jax_stats(x):
        return {"mean": x.mean(-1), "parts": (jnp.sin(x), [x**2])}

    def torch_stats(x):
        return {"parts": (torch.sin(x), [x**2]), "mean": x.mean(-1)}  # another dict order

    report = parity.compare(jax_stats, torch_stats, x, orders=2)
    assert report.ok, report
    values = [r.name for r in report.rows if r.name.startswith("value")]
    assert values == ["value output['mean']", "value output['parts'][0]",
                      "value output['parts'][1][0]"]
    assert any(r.name == "jvp output['parts'][0]" for r in report.rows)

    def torch_stats_wrong(x):
        return {"parts": (torch.sin(x), [x**2 + 1e-9]), "mean": x.mean(-1)}

    report = parity.compare(jax_stats, torch_stats_wrong, x, orders=0)
    assert [r.name for r in report.failures] == ["value output['parts'][1][0]"]


def test_named_tuple_and_integer_outputs():
    """torch.sort returns a named tuple (values, indices); the indices are compared exactly
    and left out of the derivatives."""
    x = np.random.default_rng(13).standard_normal((4, 7))

    def jax_sort(x):
        i = jnp.argsort(x, axis=-1)
        return jnp.take_along_axis(x, i, -1), i

    report = parity.compare(jax_sort, lambda x: torch.sort(x, -1), x, orders=2)
    assert report.ok, report
    index_rows = [r for r in report.rows if r.name.endswith(".indices")]
    assert [r.name for r in index_rows] == ["value output.indices"]
    assert index_rows[0].tol == 0.0
    assert any(r.name == "vjp" for r in report.rows)  # one float output: no path

    def jax_sort_off_by_one(x):
        v, i = jax_sort(x)
        return v, i.at[0, 0].add(1)

    report = parity.compare(jax_sort_off_by_one, lambda x: torch.sort(x, -1), x, orders=1)
    assert [r.name for r in report.failures] == ["value output.indices"]
    assert "worst at output.indices[0, 0]" in report.failures[0].detail


def test_leaf_count_and_structure_mismatch_is_a_failure():
    x = np.random.default_rng(14).standard_normal((3, 4))
    report = parity.compare(lambda x: (x, x), lambda x: x, x)
    assert not report.ok and "2 output arrays (jax) vs 1" in report.rows[0].note


def test_call_arguments_may_be_pytrees():
    x = np.random.default_rng(15).standard_normal((2, 3, 6, 6))
    calls = [parity.Call({"x": x}, 2), parity.Call([x], kernel_size=2)]

    def jax_pool(x, kernel_size):
        if not isinstance(x, jax.Array):
            raise TypeError(f"x must be an array, got {type(x).__name__}")
        return jax_avg_pool2d(x, kernel_size, kernel_size)

    report = parity.compare_errors(jax_pool, F.avg_pool2d, calls)
    assert report.ok, report
    assert report.rows[0].name == "raises {'x': float64[2, 3, 6, 6]}, 2"
    assert report.rows[1].name == "raises [float64[2, 3, 6, 6]], kernel_size=2"
