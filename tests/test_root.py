"""The root's passes in closed form (``topdown.estimation.root``) against the general solvers."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import solvers
from solvers.builders import children_l2_problem, rounding_problem, rounding_solution
from topdown.estimation.root import root_l2, root_round


def _general_l2(y, w, t, v, lo=-np.inf, hi=np.inf):
    """The root's L2 problem as ``topdown.estimation.family`` builds it (detailed and total queries, the
    total bounds as an extra row), solved by HiGHS's QP."""
    n = y.size
    ms = [(sp.identity(n, format="csr"), y[None, :], np.full((1, n), w))]
    if v > 0:
        ms.append((sp.csr_matrix(np.ones((1, n))), np.array([[t]]), np.array([[v]])))
    extra = {}
    if np.isfinite(lo) or np.isfinite(hi):
        extra = {"extra_A": sp.csr_matrix(np.ones((1, n))), "extra_lb": [lo], "extra_ub": [hi]}
    problem = children_l2_problem(None, ms, k=1, n=n, lifted=v > 0, **extra)
    return np.maximum(solvers.solve(problem, solver="highs").x[:n], 0.0)


def _objective(x, y, w, t, v):
    return w * ((x - y) ** 2).sum() + v * (x.sum() - t) ** 2


def test_hand_worked_root():
    """y = (5, 1, -2), w = v = 1, t = 0: x_i = max(0, y_i - theta) with theta = s. Two active
    values would give s = 6 - 2 theta = theta, theta = 2 > 1: not active; one gives
    s = 5 - theta = theta, theta = 2.5, x = (2.5, 0, 0). Without the total: the clip. With the
    total held at 7: the projection, (5, 1) + 0.5 each."""
    np.testing.assert_allclose(root_l2(np.array([5.0, 1.0, -2.0]), 1.0, 0.0, 1.0), [2.5, 0, 0])
    # no total term: the clip; a total forced to 7 by its bounds: the projection
    np.testing.assert_array_equal(root_l2(np.array([5.0, 1.0, -2.0]), 1.0), [5, 1, 0])
    np.testing.assert_allclose(root_l2(np.array([5.0, 1.0, -2.0]), 1.0, lo=7, hi=7), [5.5, 1.5, 0])
    assert root_l2(np.array([1.0]), 1.0, hi=-1) is None


@pytest.mark.parametrize("seed", range(40))
def test_root_l2_equals_the_general_solver(seed):
    """Random roots (negative answers, totals far off the cells' sum, weights over four orders,
    sometimes no total term, sometimes bounds on the total, an equality among them): the closed
    form is feasible, no worse than HiGHS's objective, and equal to its answer to HiGHS's
    accuracy."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    y = rng.normal(rng.uniform(-3, 10), rng.uniform(0.5, 20), n)
    if seed % 5 == 0:
        y = np.round(y)  # ties
    w = 10.0 ** rng.uniform(-2, 1)
    v = 0.0 if seed % 7 == 0 else 10.0 ** rng.uniform(-2, 2)
    t = float(np.maximum(y, 0).sum() + rng.normal(0, 30))
    lo, hi = -np.inf, np.inf
    if seed % 3 == 1:
        lo, hi = sorted(rng.uniform(0, 2 * np.abs(y).sum() + 1, 2))
    if seed % 6 == 2:
        lo = hi = float(rng.integers(0, 200))
    x = root_l2(y, w, t, v, lo, hi)
    ref = _general_l2(y, w, t, v, lo, hi)
    assert x is not None and x.min() >= 0
    assert lo - 1e-9 <= x.sum() <= hi + 1e-9 * (1 + abs(hi))
    mine, theirs = _objective(x, y, w, t, v), _objective(ref, y, w, t, v)
    assert mine <= theirs + 1e-9 * (1 + abs(theirs))
    np.testing.assert_allclose(x, ref, atol=1e-5 * (1 + np.abs(y).max()))


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("controlled", [True, False])
def test_root_round_equals_the_general_rounding(seed, controlled):
    """The root's rounding reaches HiGHS's objective on the problem ``topdown.estimation.family`` builds
    (one-unit window, the controlled total row and the total bounds), within a unit per cell,
    and holds the window."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    x = np.abs(rng.normal(3, 4, n))
    if seed % 4 == 0:
        x[: n // 2] = np.round(x[: n // 2]) + 0.5  # exact ties
    lo, hi = -np.inf, np.inf
    total = x.sum()
    if seed % 3 == 1:
        lo = hi = float(np.round(total))
    elif seed % 3 == 2:
        lo, hi = np.floor(total) - 3, np.floor(total) - 1  # pulls the total down
    counts = root_round(x, lo, hi, controlled=controlled)
    rows = []
    if controlled:
        rows.append((np.floor(total + 1e-9), np.ceil(total - 1e-9)))
    if np.isfinite(lo):
        rows.append((lo, hi))
    bounds = np.array(rows, dtype=float).reshape(-1, 2)
    A = sp.csr_matrix(np.ones((len(rows), n)))
    problem, floor = rounding_problem(
        x[None, :], None, width=1, extra_A=A, extra_lb=bounds[:, 0], extra_ub=bounds[:, 1]
    )
    try:
        solution = solvers.solve(problem, solver="highs").x
    except solvers.InfeasibleError:
        assert counts is None
        return
    ref = rounding_solution(np.round(solution), floor).reshape(-1)
    assert counts is not None
    assert np.abs(counts - x).sum() <= np.abs(ref - x).sum() + 1e-9
    assert np.all(np.abs(counts - x) < 1)
    for low, high in rows:
        assert low - 1e-9 <= counts.sum() <= high + 1e-9


def test_a_held_root_total_keeps_the_closed_forms():
    """A root total published exactly (an invariant bound at the root): the root's passes are
    still closed forms and hold it, the levels below (nothing binds their nodes) are still
    batched, and the root equals the general path's (HiGHS named for the rounding) in total
    and within a unit per cell."""
    from benchmarks.pl94 import detailed_strategy, make_state, pl94_schema
    from constraints import ConstraintSet, SumEqualRealTotal, TrueExpression
    from topdown import release

    state = make_state(5_000, seed=2)
    held = ConstraintSet()
    held.add(SumEqualRealTotal(TrueExpression()), level=0)
    kwargs = {"seed": 4, "geography": state.geography, "constraints": held}
    schema, strategy = pl94_schema(False), detailed_strategy(False)
    closed = release(state.records, schema, strategy, **kwargs)
    general = release(state.records, schema, strategy, solver={"rounding": "highs"}, **kwargs)
    assert closed.check_correctness().ok and general.check_correctness().ok
    assert closed.stats[0].solved_in("l2") == {"closed_form": 1}
    assert closed.counts[0].sum() == len(state.records) == general.counts[0].sum()
    assert np.abs(closed.counts[0] - general.counts[0]).max() <= 1
    # batched below: a detailed-only BLUE feeds the totals no weight (topdown.blue.metric)
    assert "closed_form" in closed.stats[-1].solved_in("l2")
