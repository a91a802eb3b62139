"""The replay of captured problems: its means, its profile and its independent answer checks."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import solvers
from benchmarks.solvers import replay
from solvers import Problem, SolveResult, SolveStatus
from solvers.export import write_problem

pytest.importorskip("highspy")


def test_shifted_geometric_mean_hand_worked() -> None:
    # (0 + 1) * (3 + 1) = 4, geometric mean 2, minus the shift: 1
    assert replay.shifted_geomean(np.array([0.0, 3.0])) == pytest.approx(1.0)
    # equal times give that time back, whatever the shift
    assert replay.shifted_geomean(np.array([0.25] * 3), shift=10.0) == pytest.approx(0.25)


def _attempt(file: str, backend: str, time: float, solved: bool) -> replay.Attempt:
    return replay.Attempt(file, "coupled", "QP", 4, backend, "optimal", time, solved=solved)


def test_performance_profile_ratios_hand_worked() -> None:
    attempts = [
        _attempt("p1", "a", 1.0, True),
        _attempt("p1", "b", 3.0, True),
        _attempt("p2", "a", 8.0, True),
        _attempt("p2", "b", 2.0, True),
        _attempt("p3", "a", 5.0, True),
        _attempt("p3", "b", 0.5, False),  # fastest, but wrong: does not set the best time
    ]
    ratios = replay.profile_ratios(attempts)
    np.testing.assert_allclose(ratios["a"], [1.0, 4.0, 1.0])
    np.testing.assert_allclose(ratios["b"], [3.0, 1.0, np.inf])


def test_summary_charges_failures_at_the_limit() -> None:
    attempts = [_attempt("p1", "a", 3.0, True), _attempt("p2", "a", 0.5, False)]
    table = replay.summary(attempts, time_limit=15.0)
    row = table.iloc[0]
    assert (row["class"], row["attempted"], row["solved"]) == ("QP coupled", 2, 1)
    # (3 + 1) * (15 + 1) = 64, geometric mean 8, minus the shift
    assert row["sgm_seconds"] == pytest.approx(7.0)


def test_relative_gap_ignores_the_constant_the_solver_never_sees() -> None:
    # optimum 36 = 1e9 (constant) - (1e9 - 36): a 1e-4 error is 1e-13 of what was solved
    assert replay.relative_gap(36.0001, 36.0, offset=1e9) < 1e-12
    assert replay.relative_gap(2.5, 2.0, offset=0.0) == pytest.approx(0.25)


class _Wrong(solvers.Backend):
    """Says optimal and returns a point that breaks the row (x = 0 with x0 + x1 = 1)."""

    name = "test:wrong"
    supports_lp = True

    def solve(self, problem: Problem, **options: object) -> SolveResult:
        x = np.zeros(problem.n)
        return SolveResult(SolveStatus.OPTIMAL, x, problem.objective_value(x), 0.0, self.name, "")


class _Lazy(solvers.Backend):
    """Says optimal and returns a feasible but suboptimal vertex (x = (0, 1))."""

    name = "test:lazy"
    supports_lp = True

    def solve(self, problem: Problem, **options: object) -> SolveResult:
        x = np.array([0.0, 1.0])
        return SolveResult(SolveStatus.OPTIMAL, x, problem.objective_value(x), 0.0, self.name, "")


def test_replay_checks_answers_instead_of_trusting_them(tmp_path, capsys) -> None:
    # min x0 + 2 x1 s.t. x0 + x1 = 1, 0 <= x <= 1: optimum x = (1, 0), objective 1
    lp = Problem(
        c=np.array([1.0, 2.0]),
        lb=np.zeros(2),
        ub=np.ones(2),
        A=sp.csr_matrix(np.ones((1, 2))),
        row_lb=np.ones(1),
        row_ub=np.ones(1),
    )
    write_problem(lp, tmp_path / "lp.mps")
    solvers.register(_Wrong)
    solvers.register(_Lazy)
    try:
        code = replay.main(
            [
                "--problems",
                str(tmp_path),
                "--solvers",
                "highs,closed_form,test:wrong,test:lazy",
                "--time-limit",
                "5",
            ]
        )
    finally:
        solvers.unregister("test:wrong")
        solvers.unregister("test:lazy")
    assert code == 0
    rows = pd.read_csv(tmp_path / "replay.csv").set_index("backend")
    assert rows.loc["highs", "status"] == "optimal" and bool(rows.loc["highs", "solved"])
    assert rows.loc["highs", "objective"] == pytest.approx(1.0)
    # x0 + x1 = 1 in one row with unit coefficients and [0, 1] bounds: the closed form applies
    assert bool(rows.loc["closed_form", "solved"])
    assert rows.loc["test:wrong", "status"] == "infeasible answer"
    assert rows.loc["test:wrong", "violation"] == pytest.approx(1.0)
    assert rows.loc["test:lazy", "status"] == "suboptimal"
    assert rows.loc["test:lazy", "gap"] == pytest.approx(1.0)
    assert not rows.loc[["test:wrong", "test:lazy"], "solved"].any()
    out = capsys.readouterr().out
    assert "# python" in out and "LP separable" in out
    assert (tmp_path / "replay_profile.png").stat().st_size > 0
    summary = pd.read_csv(tmp_path / "replay_summary.csv").set_index("backend")
    # the failures are charged at the limit: (5 + 1) - 1
    assert summary.loc["test:wrong", "sgm_seconds"] == pytest.approx(5.0)
    assert math.isclose(summary.loc["highs", "solved"], 1)


def test_sample_keeps_the_extremes_of_each_group() -> None:
    index = pd.DataFrame(
        {
            "level": [1] * 5 + [2] * 2,
            "pass": ["l2"] * 7,
            "kind": ["QP"] * 7,
            "structure": ["coupled"] * 7,
            "variables": [50, 10, 40, 20, 30, 7, 3],
        }
    )
    picked = replay.sample(index, 3)
    assert sorted(picked["variables"]) == [3, 7, 10, 30, 50]


def test_bench_solvers_forwards_problems_to_the_replay(tmp_path, capsys) -> None:
    from benchmarks.solvers.bench_solvers import main as bench_main

    separable = Problem(
        c=np.array([-2.0, -4.0]),
        lb=np.zeros(2),
        ub=np.full(2, np.inf),
        P=sp.identity(2, format="csc"),
        A=sp.csr_matrix(np.ones((1, 2))),
        row_lb=np.full(1, 3.0),
        row_ub=np.full(1, 3.0),
    )
    write_problem(separable, tmp_path / "qp.mps")
    assert bench_main(["--problems", str(tmp_path), "--solvers", "closed_form"]) == 0
    rows = pd.read_csv(tmp_path / "replay.csv")
    # min 1/2 |x|^2 - 2 x0 - 4 x1 on x0 + x1 = 3, x >= 0: x = (0.5, 2.5), objective
    # 1/2 (0.25 + 6.25) - 1 - 10 = -7.75
    assert rows.loc[0, "objective"] == pytest.approx(-7.75)
    assert "QP separable" in capsys.readouterr().out
