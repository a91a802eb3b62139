"""The BLUE's array kernels against their plain definitions: a group's projection summed over
its members (directly, or as the identity minus the projectors left out), averages taken from
stored larger averages, and the merged subtraction of the other groups' parts."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from topdown.blue_recursions import _averages, _group_part, _minus, _project

SHAPE = (5, 2, 3, 4)  # 5 nodes, three attributes


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
    values = rng.integers(-5, 20, size=SHAPE)
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


def test_minus_subtracts_every_term_and_leaves_them_unchanged():
    rng = np.random.default_rng(5)
    values = rng.integers(-5, 20, size=SHAPE).astype(np.int16)
    terms = [
        rng.normal(size=(5, 2, 3, 1)),
        rng.normal(size=(5, 1, 1, 1)),  # merged into the first
        rng.normal(size=(5, 1, 1, 4)),  # a second full-size pass
        rng.normal(size=(5, 2, 1, 1)),  # merged into the first
    ]
    before = [t.copy() for t in terms]
    got = _minus(values, terms)
    expected = values - sum(np.broadcast_to(t, SHAPE) for t in terms)
    np.testing.assert_allclose(got, expected, atol=1e-12)
    assert got.dtype == float
    for t, b in zip(terms, before, strict=True):
        np.testing.assert_array_equal(t, b)
    np.testing.assert_array_equal(_minus(values, []), values)
