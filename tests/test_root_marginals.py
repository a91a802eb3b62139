"""The root's L2 pass with marginals by semismooth Newton (``topdown.estimation.root_marginals``)
against the general solver, on the problem ``topdown.estimation.family`` builds for it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import solvers
from solvers.builders import children_l2_problem
from topdown.estimation.root_marginals import RootMarginal, root_marginal_l2


def _marginal_matrix(shape: tuple[int, ...], kept: tuple[int, ...]) -> sp.csr_matrix:
    mat = sp.identity(1, format="csr")
    for axis, n in enumerate(shape):
        factor = sp.identity(n, format="csr") if axis in kept else sp.csr_matrix(np.ones((1, n)))
        mat = sp.kron(mat, factor, format="csr")
    return mat


def _groups(mat: sp.csr_matrix) -> np.ndarray:
    return sp.csc_matrix(mat).indices.astype(np.int64)


def _general(y, w, queries, lo, hi):
    """The same root problem as the per-family path poses it, solved by Clarabel."""
    n = y.size
    ms = [(sp.identity(n, format="csr"), y[None, :], np.full((1, n), w))]
    ms += [(Q, z[None, :], np.full((1, z.size), v)) for Q, z, v in queries]
    extra = {}
    if np.isfinite(lo) or np.isfinite(hi):
        extra = {"extra_A": sp.csr_matrix(np.ones((1, n))), "extra_lb": [lo], "extra_ub": [hi]}
    problem = children_l2_problem(None, ms, k=1, n=n, lifted=True, **extra)
    return np.maximum(solvers.solve(problem, solver="cvxpy:CLARABEL", tolerance=1e-10).x[:n], 0)


def _objective(x, y, w, queries):
    return w * ((x - y) ** 2).sum() + sum(v * ((Q @ x - z) ** 2).sum() for Q, z, v in queries)


def test_hand_worked_root_with_one_marginal():
    """Cells (a0, a1) x (b0, b1) measured at (4, -1, 2, 1) with weight 1, the marginal over
    ``a`` at (9, 0) with weight 1. Per group the stationarity condition is
    ``x_i = y_i + (z - S)`` on the positive cells, ``S`` their group's sum. Group a0: both
    positive, S = 3 + 2 (9 - S), S = 7, x = (6, 1). Group a1: S = 3 - 2 S, S = 1, x = (1, 0)
    (the second cell at its bound, where the condition holds with equality as well)."""
    y = np.array([4.0, -1.0, 2.0, 1.0])
    m = RootMarginal(np.array([0, 0, 1, 1]), np.array([9.0, 0.0]), 1.0)
    np.testing.assert_allclose(root_marginal_l2(y, 1.0, [m]), [6.0, 1.0, 1.0, 0.0], atol=1e-9)
    # held at a total of 4 the cells move down together: x = max(0, t - theta), sum 4
    held = root_marginal_l2(y, 1.0, [m], lo=4, hi=4)
    assert held is not None and abs(held.sum() - 4) < 1e-9


@pytest.mark.parametrize("seed", range(12))
def test_root_newton_equals_the_general_solver(seed):
    """Random domains of 2-4 attributes, the detailed cells and 1-4 marginals (the total among
    them or not), weights over four orders, answers far from consistent and negative ones,
    sometimes bounds on the total (an equality among them): the Newton answer is feasible, no
    worse than Clarabel's objective, and equal to its answer to the solvers' accuracy."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(2, 5, size=int(rng.integers(2, 5))))
    cells = int(np.prod(shape))
    subsets = [c for r in range(len(shape)) for c in itertools.combinations(range(len(shape)), r)]
    picks = rng.choice(len(subsets), size=min(len(subsets), int(rng.integers(1, 5))), replace=False)
    truth = rng.poisson(rng.uniform(0.5, 8), cells).astype(float)
    y = truth + rng.normal(0, rng.uniform(0.5, 5), cells)
    w = 10.0 ** rng.uniform(-1, 1)
    queries = []
    for i in picks:
        Q = _marginal_matrix(shape, subsets[i])
        z = Q @ truth + rng.normal(0, rng.uniform(0.5, 10), Q.shape[0])
        queries.append((Q, z, 10.0 ** rng.uniform(-2, 2)))
    lo, hi = -np.inf, np.inf
    if seed % 3 == 1:
        lo = hi = float(truth.sum())
    elif seed % 3 == 2:
        lo, hi = 0.5 * truth.sum(), 0.8 * truth.sum()
    marginals = [RootMarginal(_groups(Q), z, v) for Q, z, v in queries]
    x = root_marginal_l2(y, w, marginals, lo, hi)
    assert x is not None and np.all(x >= 0)
    assert lo - 1e-6 <= x.sum() <= hi + 1e-6
    ref = _general(y, w, queries, lo, hi)
    scale = 1 + np.abs(y).max()
    assert _objective(x, y, w, queries) <= _objective(ref, y, w, queries) * (1 + 1e-7) + 1e-7
    np.testing.assert_allclose(x, ref, atol=1e-4 * scale)


def test_an_empty_window_is_left_to_the_general_path():
    m = RootMarginal(np.zeros(3, dtype=np.int64), np.array([5.0]), 1.0)
    assert root_marginal_l2(np.ones(3), 1.0, [m], lo=2, hi=1) is None
    assert root_marginal_l2(np.ones(3), 1.0, [m], hi=-1) is None


def test_a_production_root_takes_the_newton_iteration_and_matches_the_general_path():
    """The PL94 production strategy (detailed cells and marginals at every level) with the
    state's total held: the root's L2 pass is the Newton iteration, not CVXPY, and its counts
    equal the general path's (Clarabel named for the L2 pass) within a unit per cell, with the
    same total."""
    from benchmarks.pl94 import make_state, pl94_schema, production_strategy
    from constraints import ConstraintSet, SumEqualRealTotal, TrueExpression
    from topdown import release

    state = make_state(3_000, seed=5)
    held = ConstraintSet()
    held.add(SumEqualRealTotal(TrueExpression()), level=0)
    kwargs = {"seed": 2, "geography": state.geography, "constraints": held}
    schema, strategy = pl94_schema(False), production_strategy(False)
    fast = release(state.records, schema, strategy, **kwargs)
    general = release(state.records, schema, strategy, solver={"l2": "cvxpy:CLARABEL"}, **kwargs)
    assert fast.stats[0].solved_in("l2") == {"root_newton": 1}
    assert "root_newton" not in general.stats[0].solved_in("l2")
    assert fast.check_correctness().ok
    assert fast.counts[0].sum() == len(state.records) == general.counts[0].sum()
    assert np.abs(fast.counts[0].astype(int) - general.counts[0].astype(int)).max() <= 1
