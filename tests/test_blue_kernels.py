"""The BLUE's array kernels against their plain definitions: a group's projection summed over
its members (directly, or as the identity minus the projectors left out), averages taken from
stored larger averages, the merged subtraction of the other groups' parts and the downward
shift, the last two a block of nodes at a time (blocks of one to three nodes here)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from topdown.blue import recursions as blue_recursions
from topdown.blue.recursions import (
    _averages,
    _group_part,
    _minus,
    _project,
    add_reduced,
    child_sums,
    shifted,
)
from topdown.support import row_blocks

SHAPE = (5, 2, 3, 4)  # 5 nodes, three attributes
BLOCKS = [1, 3, 100]  # rows per block


def _subsets(axes):
    return [frozenset(c) for r in range(len(axes) + 1) for c in itertools.combinations(axes, r)]


def _plain(x, members):
    return sum(np.broadcast_to(_project(x, s), x.shape) for s in members)


@pytest.mark.parametrize(
    "members",
    [
        tuple(s for s in _subsets((0, 1, 2)) if s),  # every non-empty subset: x minus its mean
        tuple(_subsets((0, 2))),  # every subset of two axes: the identity on them
        tuple(s for s in _subsets((0, 1, 2)) if len(s) >= 2),  # four of eight: summed
        (frozenset({1}),),
        (frozenset(),),
    ],
)
def test_group_part_is_the_sum_of_its_members_projections(members):
    rng = np.random.default_rng(3)
    x = rng.normal(size=SHAPE)
    axes = frozenset().union(*members)
    got = _group_part(x, members, axes)
    np.testing.assert_allclose(np.broadcast_to(got, SHAPE), _plain(x, members), atol=1e-12)


def test_averages_come_from_stored_larger_ones_and_equal_direct_means():
    rng = np.random.default_rng(4)
    values = rng.integers(-5, 20, size=SHAPE).astype(np.int8)  # as leaf measurements are
    store: dict = {}
    mean = _averages(store, values)
    a = mean(frozenset({0, 1}))  # from the values
    b = mean(frozenset({1}))  # from a
    c = mean(frozenset())  # from b, the smallest that keeps nothing
    np.testing.assert_allclose(a, values.mean(axis=3, keepdims=True))
    np.testing.assert_allclose(b, values.mean(axis=(1, 3), keepdims=True))
    np.testing.assert_allclose(c, values.mean(axis=(1, 2, 3), keepdims=True))
    assert mean(frozenset({1})) is b  # computed once
    assert mean(frozenset({0, 1, 2})) is values  # nothing to average: the values themselves


@pytest.mark.parametrize("block_rows", BLOCKS)
def test_minus_subtracts_every_term_scales_and_leaves_them_unchanged(monkeypatch, block_rows):
    monkeypatch.setattr(row_blocks, "BLOCK_BYTES", block_rows * 24 * 8)  # 24 cells a row
    rng = np.random.default_rng(5)
    values = rng.integers(-5, 20, size=SHAPE).astype(np.int16)
    terms = [
        rng.normal(size=(5, 2, 3, 1)),
        rng.normal(size=(5, 1, 1, 1)),  # merged into the first
        rng.normal(size=(5, 1, 1, 4)),  # a second full-size pass
        rng.normal(size=(5, 2, 1, 1)),  # merged into the first
    ]
    weight = rng.uniform(0.5, 2.0, size=(5, 1, 1, 1))
    before = [t.copy() for t in terms]
    got = _minus(values, terms, weight)
    expected = weight * (values - sum(np.broadcast_to(t, SHAPE) for t in terms))
    np.testing.assert_allclose(got, expected, atol=1e-12)
    assert got.dtype == float
    for t, b in zip(terms, before, strict=True):
        np.testing.assert_array_equal(t, b)
    np.testing.assert_array_equal(_minus(values, [], np.ones((5, 1, 1, 1))), values)


@pytest.mark.parametrize("block_rows", BLOCKS)
def test_shifted_moves_each_node_by_its_share_of_its_parents_gap(monkeypatch, block_rows):
    monkeypatch.setattr(row_blocks, "BLOCK_BYTES", block_rows * 4 * 8)  # 4 cells a row
    base = np.arange(28).reshape(7, 4)  # integers, as raw leaf measurements are
    gap = np.array([[1.0, -2.0, 0.5, 4.0], [10.0, 0.0, -1.0, 3.0]])
    parent = np.array([0, 0, 1, 1, 1, 0, 1])
    ratio = np.array([0.5, 0.25, 0.2, 0.3, 0.5, 0.25, 0.0])
    got = shifted(base, gap, parent, ratio)
    # leaf 2: base [8, 9, 10, 11] + 0.2 * [10, 0, -1, 3]
    np.testing.assert_allclose(got[2], [10.0, 9.0, 9.8, 11.6])
    np.testing.assert_allclose(got, base + ratio[:, None] * gap[parent])
    np.testing.assert_array_equal(base, np.arange(28).reshape(7, 4))  # left unchanged
    own = base.astype(float)  # in place: the downward pass's own subtree estimates
    assert shifted(own, gap, parent, ratio, in_place=True) is own
    np.testing.assert_array_equal(own, got)
    with pytest.raises(ValueError, match="float64"):  # raw measurements are never moved
        shifted(base, gap, parent, ratio, in_place=True)


def test_add_reduced_broadcasts_a_groups_part_over_the_other_axes():
    rng = np.random.default_rng(6)
    out = rng.normal(size=(5, 24))
    before = out.copy()
    part = rng.normal(size=(5, 2 * 1 * 4))  # the group's axes: the first and the last
    add_reduced(out, part, (2, 1, 4), (2, 3, 4))
    expected = before.reshape(SHAPE) + part.reshape(5, 2, 1, 4)
    np.testing.assert_allclose(out, expected.reshape(5, 24), atol=1e-12)


def _summing(parent: np.ndarray, n_parents: int) -> sp.csr_matrix:
    n = parent.size
    return sp.csr_matrix((np.ones(n), (parent, np.arange(n))), shape=(n_parents, n))


@pytest.mark.parametrize("block_bytes", [1, 200, 1 << 24])
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int64, np.uint8])
def test_child_sums_by_blocks_equal_the_sparse_product(monkeypatch, block_bytes, dtype):
    """Integer values, children numbered parent by parent (parents 2 and 5 childless), summed a
    block of parents at a time (one parent per block, a few, all): the sparse product's
    float64 sums, exactly; extreme values of the type included (no overflow in the sums)."""
    monkeypatch.setattr(blue_recursions, "CHILD_BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(5)
    kids = np.array([3, 1, 0, 4, 2, 0, 5, 1])
    parent = np.repeat(np.arange(kids.size), kids)
    info = np.iinfo(dtype)
    values = rng.integers(info.min, info.max, size=(parent.size, 6), endpoint=True, dtype=dtype)
    values[0] = info.max
    values[1:3] = info.max  # a parent's three children at the top of the type
    S = _summing(parent, kids.size)
    got = child_sums(S, values)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, S @ values.astype(np.float64))
    assert (got[[2, 5]] == 0).all()
    assert got[0, 0] == 3.0 * info.max


def test_child_sums_of_floats_or_unordered_children_are_the_plain_product(monkeypatch):
    """Floats (the sums' order could change their rounding) and children not numbered parent
    by parent take the product as it is: the blocks are never used."""
    parent = np.array([1, 0, 1, 0])  # children interleaved
    S = _summing(parent, 2)
    ints = np.arange(8).reshape(4, 2)
    floats = ints / 3.0

    def refuse(*args, **kwargs):
        raise AssertionError("blocks used")

    monkeypatch.setattr(blue_recursions, "row_blocks", refuse)
    np.testing.assert_array_equal(child_sums(S, ints), S @ ints)
    ordered = _summing(np.array([0, 0, 1, 1]), 2)
    np.testing.assert_array_equal(child_sums(ordered, floats), ordered @ floats)
