"""Eager calls: one compiled program per plan, shape and dtype, traced once and reused,
gradients too; under an outer jit XLA inlines it, so the compiled program holds no call."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpool
from default_share import default_share
from jaxpool.pooling import kernel, kernel_max

OPS = {
    "avg_pool2d": (lambda x: jaxpool.avg_pool2d(x, 3, 2, 1), kernel, "window_sums"),
    "adaptive_avg_pool2d": (lambda x: jaxpool.adaptive_avg_pool2d(x, 4), kernel, "window_sums"),
    "max_pool2d": (lambda x: jaxpool.max_pool2d(x, 3, 2, 1), kernel_max, "window_max"),
    "adaptive_max_pool2d": (lambda x: jaxpool.adaptive_max_pool2d(x, 4, True), kernel_max,
                            "window_max"),
    "lp_pool2d": (lambda x: jaxpool.lp_pool2d(x, 2, 3), kernel, "window_sums"),
}


def _counting(monkeypatch, module, name):
    calls = []
    inner = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(None)
        return inner(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


# Every other op by default (both kernels' programs, window sums and window max, among
# them), every op under -m slow.
@pytest.mark.parametrize("op", default_share(list(OPS), 2))
def test_eager_calls_trace_once_per_shape(op, monkeypatch, rng):
    pool, module, name = OPS[op]
    jax.clear_caches()  # another test may have compiled this plan already
    traces = _counting(monkeypatch, module, name)
    x = jnp.asarray(rng.standard_normal((2, 3, 15, 15)), jnp.float32)
    first = pool(x)
    count = len(traces)
    assert count >= 1
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(pool(x)[0] if isinstance(first, tuple)
                                                 else pool(x)),
                                      np.asarray(first[0] if isinstance(first, tuple)
                                                 else first))
    assert len(traces) == count, "a repeated eager call traced the op again"
    pool(jnp.asarray(rng.standard_normal((2, 3, 16, 16)), jnp.float32))
    assert len(traces) > count, "a new shape must get its own program"


@pytest.mark.parametrize("op", ["avg_pool2d", "max_pool2d"])
def test_eager_gradients_reuse_their_programs(op, monkeypatch, rng):
    pool, module, name = OPS[op]
    jax.clear_caches()
    traces = _counting(monkeypatch, module, name)
    grad = jax.grad(lambda a: jnp.sum(jnp.sin(pool(a))))
    x = jnp.asarray(rng.standard_normal((2, 3, 15, 15)), jnp.float32)
    expected = jax.jit(grad)(x)
    np.testing.assert_allclose(np.asarray(grad(x)), np.asarray(expected), rtol=1e-6)
    count = len(traces)
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(grad(x)), np.asarray(expected), rtol=1e-6)
    assert len(traces) == count


# Every other op by default, as above.
@pytest.mark.parametrize("op", default_share(list(OPS), 2))
def test_under_jit_the_op_costs_no_call(op):
    """An outer jit compiles the op's own operations: XLA inlines the nested program, so the
    optimized program holds no call (the eager programs cost nothing under jit)."""
    pool, _, _ = OPS[op]
    x = jax.ShapeDtypeStruct((2, 3, 15, 15), jnp.float32)
    for program in (pool, jax.grad(lambda a: jnp.sum(jnp.sin(_values(pool(a))))),):
        optimized = jax.jit(program).lower(x).compile().as_text()
        assert not re.search(r"\bcall\(", optimized), op


def _values(out):
    return out[0] if isinstance(out, tuple) else out


# Arguments that differ in type or in a zero's sign only: a remembered plan must never
# answer for another of them.
_LOOKALIKES = {
    "plan_avg_pool": [
        lambda f, k=k: f("avg_pool2d", (1, 2, 8, 8), np.dtype("float32"), 2, k)
        for k in (2, 2.0, True, np.int64(2), [2, 2], (2, 2), (2, 2.0), (True, 2), "2")],
    "plan_max_pool": [
        lambda f, s=s: f("max_pool2d", (1, 2, 8, 8), np.dtype("float32"), 2, 3, s, 1)
        for s in (None, 2, 2.0, (2, 2), [2, 2], 0, False)],
    "plan_interpolate": [
        lambda f, s=s: f("interpolate", (1, 2, 8, 8), np.dtype("float32"), None, s, "bilinear")
        for s in (2, 2.0, True, (2, 2), [2, 2.0], 1.5, -0.0, 0.0)],
    "plan_pad": [
        lambda f, v=v: f((1, 2, 4), (1, 0), "constant", v)
        for v in (0, 0.0, -0.0, False, None, 1, 1.0, True, float("nan"), np.float32(-0.0))],
}


@pytest.mark.parametrize("name", list(_LOOKALIKES))
def test_remembered_plans_answer_as_a_fresh_plan_would(name):
    """Each call, in either order, gives what the plan function itself gives (the same
    plan, the pad value with its sign, or the same error), remembered or not."""
    from jaxpool.padding import plan as pad_plan
    from jaxpool.pooling import plan as pool_plan
    from jaxpool.resampling import plan as resampling_plan
    from jaxpool.unpooling import plan as unpool_plan

    remembered = next(getattr(m, name) for m in (pool_plan, unpool_plan, pad_plan, resampling_plan)
                      if hasattr(m, name))
    fresh = remembered.__wrapped__

    def outcome(f, call):
        try:
            result = call(f)
        except (TypeError, ValueError) as exc:
            return type(exc), str(exc)
        value = getattr(result, "value", None)
        sign = None if value is None else np.signbit(np.float64(value))
        return result, repr(value), sign

    calls = _LOOKALIKES[name]
    for order in (calls, calls[::-1], calls + calls):
        for call in order:
            got, want = outcome(remembered, call), outcome(fresh, call)
            assert got[1:] == want[1:] and (got[0] == want[0] or got[0] is want[0])


def _fresh_plans():
    """Each kind of plan that is a static argument of a compiled program, made twice
    without the remembered plans (equal, not the same object)."""
    from jaxpool.padding import plan as pad_plan
    from jaxpool.pooling import plan as pool_plan
    from jaxpool.resampling import plan as resampling_plan
    from jaxpool.unpooling import plan as unpool_plan

    f32 = np.dtype("float32")
    calls = [
        lambda: pool_plan.plan_avg_pool.__wrapped__("avg_pool2d", (1, 2, 9, 9), f32, 2, 3, 2, 1),
        lambda: resampling_plan.plan_interpolate.__wrapped__(
            "interpolate", (1, 2, 9, 9), f32, None, 2, "bilinear")[1],
        lambda: unpool_plan.plan_max_unpool.__wrapped__("max_unpool2d", (1, 2, 4, 4), f32, 2,
                                                      2),
        lambda: pad_plan.plan_pad.__wrapped__((1, 2, 4), (1, 2), "reflect", None),
    ]
    return [(call(), call()) for call in calls]


def test_plans_keep_their_hash_and_equal_plans_hash_alike():
    """jit hashes a static plan on every eager call: the hash is computed once per plan,
    equal plans (another object) hash alike and find the same program, and a pickled plan
    carries no kept hash (a string's hash differs between processes)."""
    import pickle

    for first, second in _fresh_plans():
        assert first == second and first is not second
        assert hash(first) == hash(second)
        assert first.__dict__["_hash"] == hash(first)  # kept
        copy = pickle.loads(pickle.dumps(first))
        assert "_hash" not in copy.__dict__ and copy == first and hash(copy) == hash(first)


def test_pad_values_of_either_zero_sign_are_torchs_after_one_another():
    torch = pytest.importorskip("torch")
    x = np.ones((1, 2, 3), np.float32)
    for value in (0.0, -0.0, 0.0, -0.0):
        got = np.asarray(jaxpool.pad(jnp.asarray(x), (2, 1), value=value))
        want = torch.nn.functional.pad(torch.from_numpy(x), (2, 1), value=value).numpy()
        assert got.tobytes() == want.tobytes()


# --- eager gradients as two programs: the jitted bits, and nothing else changes ---------

_X = (1, 2, 8, 7)
# name -> (op of one array, input shape); the eager programs' every kind (jaxpool._eager)
EVERY_OP = {
    "avg_pool2d": (lambda x: jaxpool.avg_pool2d(x, 3, 2, 1), _X),
    "adaptive_avg_pool2d": (lambda x: jaxpool.adaptive_avg_pool2d(x, 4), _X),
    "max_pool2d indices": (lambda x: jaxpool.max_pool2d(x, 2, return_indices=True), _X),
    "adaptive_max_pool2d": (lambda x: jaxpool.adaptive_max_pool2d(x, (5, 3)), _X),
    "lp_pool2d": (lambda x: jaxpool.lp_pool2d(x, 2, 3), _X),
    "lp_pool2d inf": (lambda x: jaxpool.lp_pool2d(x, float("inf"), 3), _X),
    "global_avg_pool": (jaxpool.global_avg_pool, _X),
    "global_max_pool": (jaxpool.global_max_pool, _X),
    "bilinear": (lambda x: jaxpool.interpolate(x, scale_factor=2, mode="bilinear"), _X),
    "nearest": (lambda x: jaxpool.interpolate(x, size=(13, 5)), _X),
    "bicubic": (lambda x: jaxpool.interpolate(x, size=(5, 17), mode="bicubic"), _X),
    "area": (lambda x: jaxpool.interpolate(x, size=(5, 3), mode="area"), _X),
    "trilinear": (lambda x: jaxpool.interpolate(x, scale_factor=1.5, mode="trilinear"),
                  (1, 2, 6, 5, 4)),
    "pad reflect": (lambda x: jaxpool.pad(x, (3, 2, 1, 3), "reflect"), _X),
    "pad constant": (lambda x: jaxpool.pad(x, (3, -2, 1, 3), value=1.5), _X),
    "pixel_shuffle": (lambda x: jaxpool.pixel_shuffle(x, 2), (2, 8, 5, 6)),
    "pixel_unshuffle": (lambda x: jaxpool.pixel_unshuffle(x, 2), (2, 2, 6, 4)),
    "max_unpool2d": (lambda x: jaxpool.max_unpool2d(
        x, jnp.asarray(np.arange(4)[:, None] * 14 + np.arange(3) * 2 + 1, jnp.int32)
        * jnp.ones((1, 2, 1, 1), jnp.int32), 2, output_size=(8, 7)), (1, 2, 4, 3)),
}
EAGER_DEFAULT = ("max_pool2d indices", "bilinear", "pad reflect", "max_unpool2d")


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _modes(op):
    """Values and first derivatives (both modes), and a second derivative, of ``op``; the
    cotangent and the tangent are arguments, so that the jitted program cannot fold them
    into the op's (XLA:CPU fuses a tangent computed in the program into the op's sums,
    which can move their last bit: docs/determinism.rst, "Eager calls")."""
    f = lambda x: _first(op(x))  # noqa: E731

    def second(x, ct, t):
        return jax.grad(lambda a: jnp.sum(jnp.tanh(jax.vjp(f, a)[1](ct)[0]) ** 2))(x)

    return {"values": lambda x, ct, t: f(x),
            "vjp": lambda x, ct, t: jax.vjp(f, x)[1](ct)[0],
            "jvp": lambda x, ct, t: jax.jvp(f, (x,), (t,))[1],
            "second": second}


@pytest.mark.parametrize("name", [n if n in EAGER_DEFAULT else pytest.param(n, marks=pytest.mark.slow)
                                  for n in EVERY_OP])
def test_eager_results_are_the_jitted_bits(name, rng):
    op, shape = EVERY_OP[name]
    x = jnp.asarray(rng.standard_normal(shape), jnp.float32)
    if name == "lp_pool2d":
        x = jnp.abs(x) + 0.5
    ct = jnp.asarray(rng.standard_normal(jax.eval_shape(lambda a: _first(op(a)), x).shape),
                     jnp.float32)
    t = jnp.cos(x)
    for mode, fn in _modes(op).items():
        eager, jitted = np.asarray(fn(x, ct, t)), np.asarray(jax.jit(fn)(x, ct, t))
        if name.startswith("lp_pool2d") and mode == "second":
            # XLA fuses the power and root chain of a second derivative differently in one
            # program than across the eager ones: the same values to rounding
            np.testing.assert_allclose(eager, jitted, rtol=2e-6, atol=1e-6)
            continue
        assert eager.tobytes() == jitted.tobytes(), f"{name}: {mode}"


# --- what an eager derivative passes from the forward program to the derivative's -------

# name -> (op, input shape): programs whose linearization once passed masks, positions and
# pieces of the input (several times the input's bytes), or captured per-tap constants
_PASSING = {
    "pad reflect": (lambda x: jaxpool.pad(x, (3, 3, 3, 3), "reflect"), (2, 4, 12, 12)),
    "pad replicate": (lambda x: jaxpool.pad(x, (3, 3, 3, 3), "replicate"), (2, 4, 12, 12)),
    "nearest 12 -> 17": (lambda x: jaxpool.interpolate(x, size=17), (2, 4, 12, 12)),
    "max_pool3d": (lambda x: jaxpool.max_pool3d(x, 3, 2, 1), (2, 2, 6, 6, 6)),
    "adaptive_max_pool2d": (lambda x: jaxpool.adaptive_max_pool2d(x, 5), (2, 4, 12, 12)),
    "roi_align": (lambda x: jaxpool.roi_align(
        x, jnp.asarray([[0, 1.0, 2.0, 9.0, 11.0], [1, 3.0, 0.5, 7.0, 6.0]]), 3, 1.0, 2),
        (2, 4, 12, 12)),
}


@pytest.mark.parametrize("name", list(_PASSING))
def test_an_eager_derivative_keeps_no_more_than_the_input(name, rng):
    """``jax.linearize`` of the op: the arrays it keeps for the derivative (what an eager
    ``jax.grad`` passes from its forward program to its derivative's, each a cost per call)
    hold the input and at most a few small constants (``jaxpool.core.program``)."""
    op, shape = _PASSING[name]
    x = jnp.asarray(rng.standard_normal(shape), jnp.float32)
    _, linear = jax.linearize(op, x)
    kept = jax.make_jaxpr(linear)(x).consts
    assert sum(np.asarray(c).nbytes for c in kept) <= x.nbytes + 256, (
        f"{name}: {len(kept)} arrays kept, {[np.shape(c) for c in kept]}")


def test_static_arrays_are_their_values():
    from jaxpool.core.program import static_array
    rng = np.random.default_rng(0)
    cases = [np.array([True]), np.array([False, True, True]), np.array([True, False]),
             np.array([7], np.int32), np.arange(5, dtype=np.int32) * 3 - 4,
             np.array([2, 2, 2], np.int32), np.array([0, 1, 3], np.int32),
             np.array([True, False] * 6)]  # six runs: captured
    cases += [rng.integers(0, 2, n).astype(bool) for n in range(1, 12)]
    for values in cases:
        for ndim, axis in ((1, 0), (3, 1), (4, 3)):
            shape = [1] * ndim
            shape[axis] = len(values)
            got = jax.jit(lambda: static_array(values, shape, axis))()
            assert got.dtype == values.dtype and got.shape == tuple(shape)
            np.testing.assert_array_equal(np.asarray(got), values.reshape(shape))
