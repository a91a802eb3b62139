"""The level-batched L2 pass equals the per-family one (property tests, and a hand case)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_batched_round import needing

import solvers
from solvers.builders import children_l2_problem
from topdown.estimation.batched.families import batched_l2, detailed_only
from topdown.estimation.family import FamilyTask, solve_family
from topdown.strategy import Query


def test_hand_worked_projection():
    """Parent cell 10 over noisy (8, 5, -3): threshold (8 + 5 - 10) / 2 = 1.5 -> (6.5, 3.5, 0).
    Parent cell 0: children 0. An only child copies its parent."""
    noisy = np.array([[8, 4], [5, 9], [-3, 2], [7, 7]])
    parent_counts = np.array([[10, 0], [3, 4]])
    parent = np.array([0, 0, 0, 1])
    x = batched_l2(noisy, parent_counts, parent)
    np.testing.assert_allclose(x, [[6.5, 0], [3.5, 0], [0, 0], [3, 4]])


def test_root_is_the_clipped_noisy_answers():
    np.testing.assert_array_equal(
        batched_l2(np.array([[3, -2, 0]]), None, np.array([-1])), [[3.0, 0.0, 0.0]]
    )


def test_detailed_only():
    assert detailed_only([Query(None)])
    assert detailed_only([Query(None)], first_pass=[0])
    assert not detailed_only([Query(None), Query(())])
    assert not detailed_only([Query(("A",))])


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"parent_counts \(shape \(2, 3\)\) must be"):
        batched_l2(np.zeros((2, 2)), np.zeros((2, 3)), np.array([0, 1]))
    with pytest.raises(ValueError, match=r"negative entry \(-1\)"):
        batched_l2(np.zeros((1, 2)), np.array([[0, -1]]), np.array([0]))


@st.composite
def levels(draw):
    """A random level: parents with 1..5 children, 1..7 cells, integer parent counts (many
    zeros) and noisy children's answers (negative ones included)."""
    cells = draw(st.integers(1, 7))
    n_parents = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(1, 5), min_size=n_parents, max_size=n_parents))
    parent = np.repeat(np.arange(n_parents), sizes)
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    parent = rng.permutation(parent)  # children of a parent need not be adjacent
    counts = rng.integers(0, 30, (n_parents, cells)) * (rng.random((n_parents, cells)) < 0.7)
    noisy = rng.integers(-10, 30, (parent.size, cells))
    return noisy, counts, parent


def _family(noisy, counts, parent, p):
    children = np.flatnonzero(parent == p)
    support = np.flatnonzero(counts[p] > 0)
    n, k = support.size, children.size
    Y = noisy[np.ix_(children, support)].astype(float)
    return children, support, n, k, Y


@settings(max_examples=60, deadline=None)
@given(levels())
@example(
    (
        np.array(
            [[19, 7, 17], [16, 27, 6], [-2, 15, 27], [28, 24, 17], [5, 5, -9], [-3, 3, 3]]
            + [[13, 10, 17]]
        ),
        np.array([[13, 2, 10], [18, 24, 21]]),
        np.array([1, 1, 0, 0, 1, 0, 0]),
    )
)
def test_batched_equals_the_per_family_qp(level):
    """Per family, the same L2 problem the family path builds, solved by the closed form and
    by a general QP solver (HiGHS), gives the batched answer."""
    noisy, counts, parent = level
    x = batched_l2(noisy, counts, parent)
    for p in range(counts.shape[0]):
        children, support, n, k, Y = _family(noisy, counts, parent, p)
        off = np.setdiff1d(np.arange(counts.shape[1]), support)
        np.testing.assert_array_equal(x[np.ix_(children, off)], 0.0)
        if n == 0:
            continue
        problem = children_l2_problem(
            counts[p, support].astype(float),
            [(sp.identity(n, format="csr"), Y, np.ones_like(Y))],
            k=k,
            n=n,
        )
        mine = x[np.ix_(children, support)]
        exact = solvers.solve(problem, solver="closed_form").x.reshape(k, n)
        np.testing.assert_allclose(mine, exact, atol=1e-9)
        # an interior-point QP solver as the general reference: HiGHS 1.15's QP solver cycles
        # on some of these tiny degenerate problems (18 million iterations on 12 variables,
        # the first family of the example above) and stops at its time limit
        general = solvers.solve(problem, solver="cvxpy:CLARABEL").x.reshape(k, n)
        np.testing.assert_allclose(mine, general, atol=1e-3)  # its tolerance, about 2e-4 here


@settings(max_examples=40, deadline=None)
@given(levels(), st.integers(0, 2**31 - 1))
def test_weighted_batched_equals_the_per_family_qp(level, seed):
    """Children of unequal variance (an only child's measurements folded into a sibling, say):
    the batched projection weighted by 1/variance is the family's weighted L2 answer."""
    noisy, counts, parent = level
    weights = np.random.default_rng(seed).uniform(0.2, 5.0, parent.size)
    x = batched_l2(noisy, counts, parent, weights=weights)
    for p in range(counts.shape[0]):
        children, support, n, k, Y = _family(noisy, counts, parent, p)
        if n == 0 or k == 1:
            continue
        W = np.repeat(weights[children][:, None], n, axis=1)
        problem = children_l2_problem(
            counts[p, support].astype(float), [(sp.identity(n, format="csr"), Y, W)], k=k, n=n
        )
        exact = solvers.solve(problem, solver="closed_form").x.reshape(k, n)
        np.testing.assert_allclose(x[np.ix_(children, support)], exact, atol=1e-9)


def test_bad_weights_are_refused():
    with pytest.raises(ValueError, match=r"weights \(shape \(2,\)\) must be finite and > 0"):
        batched_l2(np.zeros((2, 2)), np.ones((1, 2)), np.array([0, 0]), weights=[1.0, 0.0])


@settings(max_examples=40, deadline=None)
@given(levels())
def test_solve_family_rounds_the_batched_answer(level):
    """``solve_family`` on each family returns integers within one unit of the batched L2
    answer that sum to the parent: the rounding of that same L2 answer."""
    noisy, counts, parent = level
    x = batched_l2(noisy, counts, parent)
    for p in range(counts.shape[0]):
        children, support, n, k, Y = _family(noisy, counts, parent, p)
        task = FamilyTask(
            level=1,
            parent_label=f"P{p}",
            child_labels=tuple(f"C{c}" for c in children),
            parent_values=counts[p, support].astype(float),
            measurements=((sp.identity(n, format="csr"), Y, np.ones_like(Y)),),
            support=support,
        )
        res = solve_family(task)
        assert res.stats.widened == 0
        np.testing.assert_array_equal(res.counts.sum(axis=0), counts[p, support])
        assert np.all(np.abs(res.counts - x[np.ix_(children, support)]) < 1 + 1e-9)


def test_chunked_buckets_give_the_same_answer():
    rng = np.random.default_rng(5)
    parent = rng.integers(0, 50, 300)
    counts = rng.integers(0, 40, (50, 9))
    noisy = rng.integers(-5, 40, (300, 9))
    np.testing.assert_allclose(
        batched_l2(noisy, counts, parent, max_values=1),
        batched_l2(noisy, counts, parent),
        atol=0,
    )


def test_release_uses_the_batched_pass_and_matches_the_per_family_path(tmp_path):
    """A detailed-only release takes the level-batched L2 pass below the root (its statistics
    say so). Against the per-family path (a capture forces it, as it records each family's
    problem), the first level below the root rounds the same L2 answer: within one unit cell
    by cell (the projections of integer answers often end in .5, a tie either rounding may
    break either way; deeper levels then have different parents)."""
    from benchmarks.synthetic import synthetic
    from topdown import Strategy, release

    df, schema = synthetic(400, people=5, seed=4)  # 2 states, 40 counties, 400 tracts
    strategy = Strategy.from_budgets(["1/2", "1/2", "1/2", "1/2"])
    batched = release(df, schema, strategy, seed=11, estimator="topdown")
    per_family = release(
        df, schema, strategy, seed=11, estimator="topdown", capture=tmp_path / "problems"
    )
    assert batched.check_correctness().ok
    for level in range(1, batched.tree.n_levels):
        families = needing(batched, level)
        assert families > 0
        assert batched.stats[level].solved_in("l2") == {"closed_form": families}
    assert len(list((tmp_path / "problems").glob("*L2*.mps"))) > 0
    assert per_family.check_correctness().ok
    np.testing.assert_array_equal(batched.counts[0], per_family.counts[0])
    assert np.abs(batched.counts[1] - per_family.counts[1]).max() <= 1
