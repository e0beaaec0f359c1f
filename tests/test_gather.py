"""jaxpool.core.gather's ``read_along`` and ``read_pieces``: the same values, bit for bit, as
``read`` (rows, axis 0) or as ``read`` of the transposed values (axis 1), in one gather or in
pieces, and the same derivatives (``read_pieces``: bit for bit, the program of one read);
batching rules; no scatter."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from default_share import each_once

from jaxpool.core.gather import (read, read_along, read_pieces, sort_order, sorted_sum,
                                 sorted_sum_along)

pytestmark = pytest.mark.usefixtures("x64")


def _data(seed=0, m=7, c=3, k=20):
    rng = np.random.default_rng(seed)
    v = jnp.asarray(rng.standard_normal((m, c)))
    idx = jnp.asarray(rng.integers(0, m, k), jnp.int32)
    w = jnp.asarray(rng.standard_normal((k, c)))
    return v, sort_order(idx, m), w


def _bits(a, b):
    a, b = np.atleast_1d(np.asarray(a)), np.atleast_1d(np.asarray(b))
    return a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


ORDERS = {
    "grad": lambda f: jax.grad(f),
    "grad of grad": lambda f: jax.grad(lambda v: jnp.sum(jnp.cos(jax.grad(f)(v)))),
    "jacfwd of grad": lambda f: jax.jacfwd(jax.grad(f)),
}


# each piece count with one way of adding by default, in turn; every pair under -m slow
@pytest.mark.parametrize("pieces,adding", each_once([1, 4], ["sorted", "scatter"]))
def test_read_along_is_read_bit_for_bit(pieces, adding):
    v, order, w = _data()
    kw = dict(pieces=pieces, adding=adding)
    rows = jax.jit(lambda v: read(v, order, adding=adding))(v)
    assert _bits(jax.jit(lambda v: read_along(v, order, **kw))(v), rows)
    assert _bits(jax.jit(lambda v: read_along(v.T, order, axis=1, **kw))(v), rows.T)

    def loss(take):
        return lambda v: jnp.sum(w * jnp.sin(take(v)) ** 2)

    ours = loss(lambda v: read(v, order, adding=adding))
    along0 = loss(lambda v: read_along(v, order, **kw))
    along1 = loss(lambda v: read_along(v.T, order, axis=1, **kw).T)
    # Derivative programs that read in pieces fuse otherwise, so round otherwise (where
    # XLA:CPU makes a product and a sum one fused multiply-add): the same to rounding.
    exact = pieces == 1
    for name, d in ORDERS.items():
        want = jax.jit(d(ours))(v)
        for got in (jax.jit(d(along0))(v), jax.jit(d(along1))(v)):
            if exact:
                assert _bits(got, want), name
            else:
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14, err_msg=name)


def test_sorted_sum_along_adds_as_sorted_sum():
    order = sort_order(jnp.array([3, 3, 0, 3], jnp.int32), 5)
    rows = jnp.arange(8.0).reshape(4, 2)
    want = sorted_sum(rows, order, 5)
    np.testing.assert_array_equal(sorted_sum_along(rows, order, 5), want)
    np.testing.assert_array_equal(sorted_sum_along(rows.T, order, 5, axis=1), want.T)
    np.testing.assert_array_equal(
        sorted_sum_along(rows.T, order, 5, axis=1, adding="scatter"), want.T)


@pytest.mark.parametrize("axis", [0, 1])
def test_read_along_batches(axis):
    rng = np.random.default_rng(1)
    bv = jnp.asarray(rng.standard_normal((4, 7, 3)))
    bi = jnp.asarray(rng.integers(0, 7, (4, 20)), jnp.int32)
    w = jnp.asarray(rng.standard_normal((20, 3)))

    def along(v, order):  # [7, 3] -> [20, 3], read at ``axis`` of its layout
        if axis == 0:
            return read_along(v, order, pieces=2)
        return read_along(v.T, order, axis=1, pieces=2).T

    def grads(take):
        return jax.vmap(lambda v, i: jax.grad(
            lambda v: jnp.sum(w * jnp.sin(take(v, i)) ** 2))(v))

    want = grads(lambda v, i: read(v, i))(bv, bi)
    assert _bits(grads(lambda v, i: along(v, sort_order(i, 7)))(bv, bi), want)
    # One sort for the whole batch.
    order = sort_order(bi[0], 7)
    want = jax.vmap(lambda v: jax.grad(
        lambda v: jnp.sum(w * jnp.sin(read(v, order)) ** 2))(v))(bv)
    got = jax.vmap(lambda v: jax.grad(
        lambda v: jnp.sum(w * jnp.sin(along(v, order)) ** 2))(v))(bv)
    assert _bits(got, want)
    # The values batched along another axis than the leading one, the index batched too.
    got = jax.vmap(lambda v, i: read_along(v, sort_order(i, 7), axis=1, pieces=2),
                   in_axes=(2, 0), out_axes=2)(bv, bi[:3])
    want = jnp.stack([jnp.take(bv[:, :, c], bi[c], axis=1) for c in range(3)], 2)
    assert _bits(got, want)


@pytest.mark.parametrize("adding", ["sorted", "scatter"])
def test_read_pieces_is_the_reshaped_read_bit_for_bit(adding):
    v, order, w = _data()

    def loss(take):
        return lambda v: sum(jnp.sum(wi * jnp.sin(r) ** 2)
                             for wi, r in zip(w.reshape(4, 5, 3), take(v)))

    ours = loss(lambda v: read_pieces(v, order, 4, adding=adding))
    want = loss(lambda v: list(read(v, order, adding=adding).reshape(4, 5, 3)))
    assert _bits(jax.jit(ours)(v), jax.jit(want)(v))
    for name, d in ORDERS.items():
        assert _bits(jax.jit(d(ours))(v), jax.jit(d(want))(v)), name
    # Under vmap: one sort for the batch, or one per example.
    bv = jnp.stack([v, 2 * v])
    assert _bits(jax.vmap(jax.grad(ours))(bv), jax.vmap(jax.grad(want))(bv))
    rng = np.random.default_rng(2)
    bi = jnp.asarray(rng.integers(0, 7, (2, 20)), jnp.int32)
    got = jax.vmap(lambda v, i: jnp.stack(read_pieces(v, sort_order(i, 7), 4)))(bv, bi)
    assert _bits(got, jax.vmap(lambda v, i: v[i].reshape(4, 5, 3))(bv, bi))
    # Its transpose, as linear_transpose calls it.
    ct = list(w.reshape(4, 5, 3))
    spread = jax.linear_transpose(lambda v: read_pieces(v, order, 4, adding=adding), v)
    assert _bits(spread(ct)[0], sorted_sum(w, order, 7, adding=adding))


@pytest.mark.parametrize("read_in_pieces", [
    lambda v, order: read_along(v, order, pieces=4),
    lambda v, order: jnp.concatenate(read_pieces(v, order, 4))])
def test_reads_lower_one_gather_per_piece_and_no_scatter_sorted(read_in_pieces):
    v, order, w = _data(k=24)

    def f(v):
        return jnp.sum(w[:, :1] * jnp.sin(read_in_pieces(v, order)) ** 2)

    text = jax.jit(f).lower(v).compile().as_text()
    assert len(re.findall(r"= \S+ gather\(", text)) == 4
    for d in ORDERS.values():
        ops = set(re.findall(r"\b(?:stablehlo|chlo|mhlo)\.([a-z_]+)",
                             jax.jit(d(f)).lower(v).as_text()))
        assert not {op for op in ops if "scatter" in op}


def test_read_along_checks_its_arguments():
    v, order, _ = _data()
    with pytest.raises(ValueError, match="pieces must divide"):
        read_along(v, order, pieces=3)
    with pytest.raises(ValueError, match="pieces must divide"):
        read_pieces(v, order, 3)
    with pytest.raises(ValueError, match="sort is into"):
        read_along(v, order, axis=1)
    with pytest.raises(ValueError, match="out of range"):
        read_along(v, order, axis=2)
