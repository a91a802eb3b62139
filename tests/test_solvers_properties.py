"""Property tests: the closed-form fast paths equal the general solvers on random instances.

Instances mimic a TopDown parent: k children over n cells, Poisson true counts, the parent as
their sum, Gaussian noise with a variance per child. Example counts are kept small so the file
runs in well under a minute.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import solvers
from solvers import children_l2_problem, rounding_problem, rounding_solution
from solvers.backends.closed_form import ClosedFormBackend
from solvers.status import raise_for_status

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def separable(draw):
    """(k, n, parent, noisy Y, weights per child) for a detailed-only children problem."""
    k = draw(st.integers(2, 6))
    n = draw(st.integers(1, 12))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    true = rng.poisson(rng.uniform(0.2, 5.0), (k, n)).astype(float)
    parent = true.sum(axis=0)
    sigma = rng.uniform(0.3, 3.0, k)
    noisy = true + rng.normal(0.0, 1.0, (k, n)) * sigma[:, None]
    return k, n, parent, noisy, 1.0 / sigma**2


def _qp_reference() -> list[str]:
    return [s for s in ("highs", "cvxpy:CLARABEL") if s in solvers.available()]


@SETTINGS
@given(separable())
def test_closed_form_projection_matches_qp_solvers(case) -> None:
    k, n, parent, noisy, weights = case
    problem = children_l2_problem(
        parent, [(sp.identity(n, format="csr"), noisy, weights)], k=k, n=n, name="prop projection"
    )
    assert solvers.get("closed_form").accepts(problem) is True
    fast = solvers.solve(problem, "closed_form")
    assert problem.max_violation(fast.x) <= 1e-9 * (1 + parent.max())
    for name in _qp_reference():
        ref = solvers.solve(problem, name)
        scale = 1.0 + np.abs(ref.x).max()
        assert np.abs(fast.x - ref.x).max() <= 1e-5 * scale, name
        assert fast.objective <= ref.objective + 1e-7 * (1 + abs(ref.objective)), name


@SETTINGS
@given(separable())
def test_closed_form_root_is_clipped_targets(case) -> None:
    k, n, _, noisy, weights = case
    problem = children_l2_problem(None, [(sp.identity(n, format="csr"), noisy, weights)], k=k, n=n)
    result = solvers.solve(problem, "closed_form")
    np.testing.assert_allclose(result.x, np.maximum(noisy, 0).reshape(-1), atol=1e-12)


@SETTINGS
@given(separable())
def test_rounding_is_integral_consistent_and_l1_optimal(case) -> None:
    k, n, parent, noisy, weights = case
    l2 = children_l2_problem(parent, [(sp.identity(n, format="csr"), noisy, weights)], k=k, n=n)
    x_tilde = np.maximum(solvers.solve(l2, "closed_form").x.reshape(k, n), 0.0)
    problem, floor = rounding_problem(x_tilde, parent, name="prop rounding")
    assert solvers.get("closed_form").accepts(problem) is True
    result = solvers.solve(problem, "closed_form")
    counts = rounding_solution(result.x, floor).reshape(k, n)
    assert counts.min() >= 0
    np.testing.assert_array_equal(counts.sum(axis=0), parent.astype(np.int64))
    distance = np.abs(counts - x_tilde).sum()
    assert result.objective == pytest.approx(distance, abs=1e-9)
    if "highs" in solvers.available():
        relaxed = solvers.Problem(
            c=problem.c,
            lb=problem.lb,
            ub=problem.ub,
            A=problem.A,
            row_lb=problem.row_lb,
            row_ub=problem.row_ub,
            offset=problem.offset,
        )
        lp = solvers.solve(relaxed, "highs")
        assert distance == pytest.approx(lp.objective, abs=1e-6)


@settings(max_examples=10, deadline=None)
@given(separable(), st.integers(2, 3))
def test_wide_rounding_matches_width_one_without_pressure(case, width) -> None:
    k, n, parent, noisy, weights = case
    l2 = children_l2_problem(parent, [(sp.identity(n, format="csr"), noisy, weights)], k=k, n=n)
    x_tilde = solvers.solve(l2).x.reshape(k, n)
    narrow, floor = rounding_problem(x_tilde, parent)
    wide, floor_w = rounding_problem(x_tilde, parent, width=width)
    a = solvers.solve(narrow)
    b = solvers.solve(wide, "highs")
    assert b.objective == pytest.approx(a.objective, abs=1e-6)
    np.testing.assert_array_equal(rounding_solution(b.x, floor_w).reshape(k, n).sum(axis=0), parent)


@settings(max_examples=15, deadline=None)
@given(separable())
def test_closed_form_declines_coupled_problems(case) -> None:
    k, n, parent, noisy, weights = case
    total = sp.csr_matrix(np.ones((1, n)))
    measurements = [
        (sp.identity(n, format="csr"), noisy, weights),
        (total, noisy.sum(axis=1, keepdims=True), weights),
    ]
    problem = children_l2_problem(parent, measurements, k=k, n=n, name="coupled")
    if n > 1:
        verdict = solvers.get("closed_form").accepts(problem)
        assert isinstance(verdict, str) and "diagonal" in verdict
        assert solvers.auto_candidates(problem)[0] != "closed_form"
    # child totals alone make the bipartite (network-flow) form; a cap on the first cell of
    # each child on top puts those variables in three rows: no longer a flow, declined
    first = sp.csr_matrix(([1.0], ([0], [0])), shape=(1, n))
    capped, _ = rounding_problem(
        np.abs(noisy),
        parent,
        extra_A=sp.vstack(
            [sp.kron(sp.identity(k), total), sp.kron(sp.identity(k), first)], format="csr"
        ),
        extra_ub=np.full(2 * k, 1e9),
    )
    verdict = solvers.get("closed_form").accepts(capped)
    assert isinstance(verdict, str) and "row" in verdict


@st.composite
def ragged(draw):
    """A partition of n variables into groups of unequal sizes, some variables in no group."""
    n = draw(st.integers(2, 25))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    groups = rng.integers(-1, max(1, n // 3), n)  # -1: in no row
    m = int(groups.max()) + 1
    used = np.flatnonzero(groups >= 0)
    A = sp.csr_matrix((np.ones(used.size), (groups[used], used)), shape=(m, n))
    return n, m, groups, A, rng


@SETTINGS
@given(ragged())
def test_closed_form_ragged_projection_matches_qp_solver(case) -> None:
    n, m, groups, A, rng = case
    w = rng.uniform(0.2, 5.0, n)
    y = rng.normal(1.0, 2.0, n)
    b = np.array(
        [
            max(0.0, y[groups == g].sum() + rng.normal()) if (groups == g).any() else 0.0
            for g in range(m)
        ]
    )
    free = groups < 0
    lb = np.where(free, -1.0, 0.0)
    ub = np.where(free, 1.5, np.inf)
    problem = solvers.Problem(
        c=-w * y,
        lb=lb,
        ub=ub,
        P=sp.diags(w, format="csc"),
        A=A,
        row_lb=b,
        row_ub=b,
        name="ragged projection",
    )
    assert solvers.get("closed_form").accepts(problem) is True
    fast = solvers.solve(problem, "closed_form")
    for name in _qp_reference():
        ref = solvers.solve(problem, name)
        assert np.abs(fast.x - ref.x).max() <= 1e-5 * (1 + np.abs(ref.x).max()), name


@SETTINGS
@given(ragged())
def test_closed_form_ragged_rounding_matches_milp(case) -> None:
    n, m, groups, A, rng = case
    c = np.round(rng.normal(0.0, 1.0, n), 1)  # ties are likely: optimum value must agree
    sizes = np.bincount(groups[groups >= 0], minlength=m)
    b = np.array([rng.integers(0, s + 1) for s in sizes], dtype=float)
    problem = solvers.Problem(
        c=c,
        lb=np.zeros(n),
        ub=np.ones(n),
        A=A,
        row_lb=b,
        row_ub=b,
        integrality=np.ones(n, dtype=bool),
        name="ragged rounding",
    )
    fast = solvers.solve(problem, "closed_form")
    assert problem.max_violation(fast.x) == 0.0
    if "highs" in solvers.available():
        assert fast.objective == pytest.approx(solvers.solve(problem, "highs").objective, abs=1e-9)


@st.composite
def controlled(draw):
    """A controlled-rounding problem: the L2 answer of a family, the cell-by-cell consistency
    rows and one row per child keeping its total between the floor and ceiling of its L2
    total; sometimes a parent nudged by a unit, which can make it infeasible."""
    k = draw(st.integers(1, 7))
    n = draw(st.integers(1, 25))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.gamma(0.7, 3.0, (k, n)) * (rng.random((k, n)) < 0.8)
    whole = rng.random(n) < 0.3  # cells whose L2 values are already integers
    x[:, whole] = np.round(x[:, whole])
    parent = np.round(x.sum(axis=0))
    if draw(st.booleans()):
        parent = np.maximum(parent + rng.integers(-1, 2, n), 0)
    else:  # the L2 answer sums to the parent: scale each cell to it
        col = x.sum(axis=0)
        x = np.where(col > 0, x * np.divide(parent, col, where=col > 0, out=np.zeros(n)), 0.0)
        parent = np.round(x.sum(axis=0))
    totals = x.sum(axis=1)
    rows = sp.kron(sp.identity(k, format="csr"), np.ones((1, n)), format="csr")
    problem, _ = rounding_problem(
        x,
        parent,
        extra_A=rows,
        extra_lb=np.floor(totals + 1e-9),
        extra_ub=np.ceil(totals - 1e-9),
        name="controlled rounding",
    )
    return problem


@settings(SETTINGS, max_examples=100)
@given(controlled(), st.booleans())
def test_closed_form_controlled_rounding_equals_highs(problem, integral) -> None:
    """The network-flow fast path is exact: the same optimum (or the same infeasibility) as
    HiGHS on the rounding MILP and on its LP relaxation."""
    if problem.m and not (np.diff(sp.csc_matrix(problem.A).indptr) == 2).all():
        return  # k = 1 without consistency rows is the partition case, tested above
    if not integral:
        problem = dataclasses.replace(problem, integrality=None)
    flow = ClosedFormBackend(transport_max_ratio=np.inf)  # small cases too, not only fast ones
    assert flow.accepts(problem) is True
    try:
        ref = solvers.solve(problem, "highs")
    except solvers.InfeasibleError:
        with pytest.raises(solvers.InfeasibleError, match="closed_form on problem"):
            raise_for_status(flow.solve(problem))
        return
    fast = raise_for_status(flow.solve(problem))
    assert problem.max_violation(fast.x) == 0.0
    assert np.array_equal(fast.x, np.round(fast.x))
    assert fast.objective == pytest.approx(ref.objective, abs=1e-9)
