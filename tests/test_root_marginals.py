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


def _random_root(seed: int, shape: tuple[int, ...], persons: int, fine: tuple[int, ...] = ()):
    """A sparse root: ``persons`` spread over a few cells, detailed noise that keeps about half
    the domain positive at mu = 0, every one- and two-way marginal and the marginal keeping
    the ``fine`` axes (groups of a few cells), as the DHC preset's root has."""
    rng = np.random.default_rng(seed)
    cells = int(np.prod(shape))
    truth = np.bincount(rng.integers(0, cells // 20, persons) * 20, minlength=cells)
    y = truth + rng.normal(0, 2.0, cells)
    marginals, queries = [], []
    axes = range(len(shape))
    kepts = itertools.chain.from_iterable(itertools.combinations(axes, r) for r in (1, 2))
    for kept in [*kepts, *([fine] if fine else [])]:
        Q = _marginal_matrix(shape, kept)
        z = Q @ truth + rng.normal(0, 1.0, Q.shape[0])
        v = 10.0 ** rng.uniform(-1, 1)
        marginals.append(RootMarginal(_groups(Q), z, v))
        queries.append((Q, z, v))
    return y, 0.25, marginals, queries


def _kkt_violation(x, y, w, queries) -> float:
    """The largest violation of the L2 pass's optimality conditions (no bound on the total):
    the objective's gradient is 0 on the positive cells and >= 0 on the zero ones, relative
    to the size of the gradient's terms."""
    grad = w * (x - y) + sum(v * (Q.T @ (Q @ x - z)) for Q, z, v in queries)
    scale = 1 + w * np.abs(y).max() + sum(v * np.abs(z).max() for _, z, v in queries)
    return (
        float(np.maximum(np.abs(grad[x > 0]).max(initial=0), (-grad[x == 0]).max(initial=0)))
        / scale
    )


def _force_route(monkeypatch: pytest.MonkeyPatch, route: str) -> list[int]:
    """Sends the Newton steps on the positive cells' groups to ``route`` (the factorisation
    at any size and density, or never); returns the list a spy appends to at each step the
    factorisation solved."""
    from topdown.estimation import root_marginals as rm

    solved: list[int] = []
    factorised = rm._ActiveStep._factorised

    def spy(self, b):
        d = factorised(self, b)
        if d is not None:
            solved.append(1)
        return d

    on = route == "factorised"
    monkeypatch.setattr(rm, "SPARSE_GROUPS", 10**9 if on else 0)
    monkeypatch.setattr(rm, "SPARSE_DENSITY", 10**9 if on else 0)
    monkeypatch.setattr(rm, "SPARSE_PAIRS", 10**12 if on else 0)
    monkeypatch.setattr(rm._ActiveStep, "_factorised", spy)
    return solved


#: 1-way 54, 2-way 900, the fine marginal (8 x 2 x 2 x 12) 384
GROUPS_OF_THE_SPARSE_ROOT = 1338


@pytest.mark.parametrize("route", ["factorised", "conjugate_gradients"])
@pytest.mark.parametrize("seed", range(4))
def test_each_newton_step_route_gives_the_dense_answer(monkeypatch, route, seed):
    """The Newton step solved on the positive cells' groups, by a sparse factorisation or by
    conjugate gradients, gives the answer of the step with ``H`` built over every group (the
    small-domain route), which the general solver agrees with (test above); with a bound on
    the total binding as well. Each route is forced by its module constant, and a spy checks
    it ran."""
    from topdown.estimation import root_marginals as rm

    y, w, marginals, queries = _random_root(seed, (3, 4, 5, 6), 60, fine=(0, 1, 3))
    lo, hi = -np.inf, (40.0 if seed % 2 else np.inf)  # 60 persons, y's positive part far more
    with monkeypatch.context() as built:
        built.setattr(rm, "DENSE_GROUPS", 10**9)
        built.setattr(rm, "DENSE_PER_CELL", 10**9)
        built.setattr(rm._ActiveStep, "solve", None)  # not called
        dense = root_marginal_l2(y, w, marginals, lo, hi)
    monkeypatch.setattr(rm, "DENSE_GROUPS", 0)
    factorised = _force_route(monkeypatch, route)
    x = root_marginal_l2(y, w, marginals, lo, hi)
    assert dense is not None and x is not None
    assert bool(factorised) == (route == "factorised")
    np.testing.assert_allclose(x, dense, atol=1e-6 * (1 + np.abs(y).max()))
    if seed % 2 == 0:
        assert _kkt_violation(x, y, w, queries) < 1e-8


@pytest.mark.parametrize("route", ["factorised", "conjugate_gradients"])
def test_a_sparse_root_of_ten_thousand_cells_meets_the_optimality_conditions(monkeypatch, route):
    """A DHC-like root (11,520 cells, 200 persons on 1 cell in 20, 16 marginals, one of
    groups of 3 cells): the answer is sparse, non-negative and optimal (KKT within 1e-8 of
    the terms' size), by either route of the step on the positive cells' groups (the step
    over every group is not taken at this size: 1,338 groups, their cube above 100 x cells)."""
    y, w, marginals, queries = _random_root(7, (8, 2, 30, 2, 12), 200, fine=(0, 1, 3, 4))
    assert sum(m.answers.size for m in marginals) == GROUPS_OF_THE_SPARSE_ROOT
    factorised = _force_route(monkeypatch, route)
    x = root_marginal_l2(y, w, marginals)
    assert bool(factorised) == (route == "factorised")
    assert x is not None and np.all(x >= 0)
    assert (x > 0).sum() < y.size / 4
    assert _kkt_violation(x, y, w, queries) < 1e-8
