"""Production's hold (``Strategy.multipass_tolerance``, the DAS's ``opt_tol_slack`` 0.1; the
DHC preset holds exactly instead): the Newton passes (``topdown.estimation.multipass_newton``)
hold each first-pass answer within the tolerance, agree with the general path holding the same
tolerance (Clarabel), use the slack (their answer is not the one held at 1e-6), and the
tolerance a strategy states reaches the solver."""

from __future__ import annotations

import numpy as np
import pytest

import tests.test_multipass_marginals as tm
from topdown.estimation.multipass_newton import Marginal, chunk_two_passes, root_two_passes
from topdown.estimation.root_marginals import RootMarginal

SLACK = 0.1
#: the two paths' cells: Clarabel's sit about 4e-5 from the exact ones; the Newton pass 2
#: stops once its box's targets move less than HOLD_SETTLE of the tolerance (0.005) a round,
#: within about 0.03 of the optimum's cells on these families
ATOL = 0.05


def _solve(y, p, w, marginals, solver: str, tolerance: float):
    """The per-family path's L2 answer (every cell) at ``tolerance`` and its backends."""
    return tm.solve_held(y, p, w, marginals, solver, tolerance=tolerance)


def _pass_1(y, p, w, marginals):
    """The first pass's answers, to the general path's precision (Clarabel, held at 1e-6)."""
    x, _ = _solve(y, p, w, marginals, "cvxpy:CLARABEL", 1e-6)
    return tm._answers(x)


def _largest_move(x, first):
    return max(float(np.abs(a - b).max()) for a, b in zip(tm._answers(x), first, strict=True))


@pytest.mark.parametrize("seed", range(4))
def test_family_holds_within_the_slack_as_the_general_path(seed):
    y, p, w, marginals = tm._inputs(seed, k=2 + seed % 3, second=seed % 2 == 1)
    x, solved = _solve(y, p, w, marginals, "auto", SLACK)
    assert solved == {"marginal_newton_multipass": 1}
    reference, general = _solve(y, p, w, marginals, "cvxpy:CLARABEL", SLACK)
    assert general == {"cvxpy:CLARABEL": 2}
    np.testing.assert_allclose(x, reference, atol=ATOL)
    assert x.min() >= 0
    np.testing.assert_allclose(x.sum(axis=0), p, atol=1e-9)
    first = _pass_1(y, p, w, marginals)
    # within the slack of pass 1's answers (to the two pass 1s' difference, about 1e-4)...
    assert _largest_move(x, first) <= SLACK + 1e-3
    # ... and using it: the answer held at 1e-6 is another one
    tight, _ = _solve(y, p, w, marginals, "auto", 1e-6)
    assert _largest_move(tight, first) < 1e-3
    assert _largest_move(x, first) > SLACK / 2
    assert np.abs(x - tight).max() > 3 * ATOL


@pytest.mark.parametrize("seed", range(3))
def test_root_holds_within_the_slack_as_the_general_path(seed):
    y, _, w, marginals = tm._inputs(10 + seed, k=1, second=seed == 1)
    x, solved = _solve(y, None, w, marginals, "auto", SLACK)
    assert solved == {"root_newton_multipass": 1}
    reference, _ = _solve(y, None, w, marginals, "cvxpy:CLARABEL", SLACK)
    np.testing.assert_allclose(x, reference, atol=ATOL)
    assert _largest_move(x, _pass_1(y, None, w, marginals)) <= SLACK + 1e-3


def test_a_worked_case_moves_the_held_total_by_the_slack():
    """Two cells, the total first then ``detailed``: pass 1 fits the total alone (10), pass 2
    fits the cells (6 and 7, weight 1) with the total within 0.5 of 10. The exact answer is
    the cells' projection onto ``x1 + x2 = 10.5``: (4.75, 5.75); held at 1e-6 it is
    (4.5, 5.5)."""
    groups = np.zeros(2, dtype=np.int64)
    total = [RootMarginal(groups, np.array([10.0]), 1.0)]
    y = np.array([6.0, 7.0])
    x = root_two_passes(y, 1.0, total, (0,), tolerance=0.5)
    assert x is not None
    # within HOLD_MARGIN of the tolerance of the optimum, and within the tolerance
    np.testing.assert_allclose(x, [4.75, 5.75], atol=0.05)
    assert abs(x.sum() - 10.0) <= 0.5 + 1e-9
    held = root_two_passes(y, 1.0, total, (0,), tolerance=1e-6)
    assert held is not None
    np.testing.assert_allclose(held, [4.5, 5.5], atol=1e-5)


def test_a_chunk_family_worked_case():
    """One family of two children on two cells (parent 5 and 5), first pass the children's
    totals (noisy 2 and 9; pass 1: 10 split 1.5 / 8.5), then ``detailed`` (child 0: 4, 4;
    child 1: 1, 1) with the totals within 0.5: child 0's total rises to 2.0, the boundary."""
    groups = np.zeros((1, 2), dtype=np.int64)
    totals = Marginal(groups, np.array([[[2.0], [9.0]]]), np.ones((1, 2)))
    y = np.array([[[4.0, 4.0], [1.0, 1.0]]])
    p = np.array([[5.0, 5.0]])
    x, settled = chunk_two_passes(y, p, np.ones((1, 2)), (totals,), (0,), tolerance=0.5)
    assert settled[0]
    sums = x[0].sum(axis=1)
    # pass 1: totals t0 + t1 = 10, fitted to (2, 9): (1.5, 8.5); pass 2 pulls child 0 up (its
    # cells say 8) and child 1 down, each as far as the hold allows: (2.0, 8.0)
    # (pass 2 aims at (1 - HOLD_MARGIN) of the tolerance, 1.95, and stops once its targets
    # move less than HOLD_SETTLE of it a round: 1.92 here); held at 1e-6: (1.5, 8.5)
    np.testing.assert_allclose(sums, [2.0, 8.0], atol=0.1)
    assert abs(sums[0] - 1.5) <= 0.5 + 1e-9
    held, _ = chunk_two_passes(y, p, np.ones((1, 2)), (totals,), (0,), tolerance=1e-6)
    np.testing.assert_allclose(held[0].sum(axis=1), [1.5, 8.5], atol=1e-5)
    np.testing.assert_allclose(x[0].sum(axis=0), p[0], atol=1e-9)


def test_the_strategy_tolerance_reaches_the_solver(monkeypatch):
    """A release of a strategy with ``multipass_tolerance=0.1`` (production's slack) calls the
    Newton passes with 0.1 at every level with a first pass, and the DHC preset's (None: held
    exactly) with the default 1e-6; ignoring the strategy's fails this."""
    from fractions import Fraction

    from benchmarks.synthetic import synthetic
    from topdown import release
    from topdown.presets import census2020_dhcp
    from topdown.query import Query
    from topdown.strategy import LevelStrategy, Strategy

    seen = tm.record_two_passes(monkeypatch, "tolerance")
    df, schema = synthetic(30, people=5, seed=2)
    first = ("SEX x AGE", "SEX")
    queries = ((Query.parse("detailed"), Fraction(1, 3)),) + tuple(
        (Query.parse(q), Fraction(1, 3)) for q in first
    )
    levels = tuple(LevelStrategy(Fraction(1, 4), queries, first) for _ in range(4))
    strategy = Strategy(levels, "discrete_gaussian", multipass_tolerance=SLACK)
    rel = release(df, schema, strategy, seed=1, estimator="topdown")
    assert rel.check_correctness().ok
    assert seen and set(seen) == {SLACK}
    seen.clear()
    tolerance = census2020_dhcp(("STATE",))[1].multipass_tolerance
    strategy = Strategy(levels, "discrete_gaussian", multipass_tolerance=tolerance)
    release(df, schema, strategy, seed=1, estimator="topdown")
    assert seen and set(seen) == {1e-6}


def test_the_strategy_checks_and_records_its_tolerance():
    """A tolerance is a positive finite number, named in the error; it survives the strategy's
    dict (``config.json``); the DHC preset states none (it holds exactly, one pass or two)."""
    from fractions import Fraction

    from topdown.errors import StrategyError
    from topdown.presets import census2020_dhcp
    from topdown.strategy import LevelStrategy, Strategy

    levels = (LevelStrategy(Fraction(1)),)
    for bad in (0, -0.1, float("nan"), float("inf"), True, "0.1"):
        with pytest.raises(StrategyError, match="multipass_tolerance"):
            Strategy(levels, multipass_tolerance=bad)
    strategy = Strategy(levels, multipass_tolerance=Fraction(1, 10))
    assert strategy.multipass_tolerance == SLACK
    assert Strategy.from_dict(strategy.to_dict()) == strategy
    assert "multipass_tolerance" not in Strategy(levels).to_dict()
    assert Strategy.from_dict(Strategy(levels).to_dict()).multipass_tolerance is None
    _, two = census2020_dhcp(("STATE",))
    _, one = census2020_dhcp(("STATE",), multipass=False)
    assert two.multipass_tolerance is None and one.multipass_tolerance is None
