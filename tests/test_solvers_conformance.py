"""Solver conformance suite: the same fixtures with known optima against every backend.

Every fixture's optimum is worked out by hand (in the comments) or by enumeration. Each test
is parametrised over all known and registered backend names; a backend that is not
installed, or that declines the problem kind, is skipped with the reason (run with ``-rs``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest
import scipy.sparse as sp

import solvers
from solvers import (
    InfeasibleError,
    NumericalError,
    Problem,
    SolverError,
    SolveResult,
    SolverLimitError,
    SolveStatus,
    UnboundedError,
    UnknownSolverError,
    UnsupportedProblemError,
)

KNOWN = [
    "closed_form",
    "highs",
    "cvxpy:CLARABEL",
    "cvxpy:OSQP",
    "cvxpy:HIGHS",
    "cvxpy:SCS",
    "cvxpy:SCIPY",
    "cvxpy:ECOS",
    "cvxpy:GLPK_MI",
    "cvxpy:GUROBI",
    "scipy",
]
ALL_NAMES = list(dict.fromkeys(KNOWN + solvers.registered()))
FIRST_ORDER = ("cvxpy:OSQP", "cvxpy:SCS")


@dataclass(frozen=True)
class Fixture:
    problem: Problem
    x: np.ndarray | None
    objective: float


def _rows(dense: list[list[float]]) -> sp.csr_matrix:
    return sp.csr_matrix(np.array(dense, dtype=float))


def _knapsack() -> Fixture:
    values = np.array([10.0, 13.0, 7.0, 8.0, 4.0])
    weights = np.array([5.0, 6.0, 4.0, 3.0, 2.0])
    best = min(
        (-(values @ np.array(z)), z)
        for z in itertools.product((0, 1), repeat=5)
        if weights @ np.array(z) <= 10
    )
    problem = Problem(
        c=-values,
        lb=np.zeros(5),
        ub=np.ones(5),
        A=sp.csr_matrix(weights[None, :]),
        row_lb=np.array([-np.inf]),
        row_ub=np.array([10.0]),
        integrality=np.ones(5, dtype=bool),
        name="milp knapsack",
    )
    return Fixture(problem, None, float(best[0]))


FIXTURES = {
    # min -x - 2y - 3z = -(x+y+z) - (y+z) - z with x+y+z <= 4, y+z <= 3, z <= 2: all three
    # tight at (1, 1, 2), objective -9, plus offset 0.5.
    "lp3": Fixture(
        Problem(
            c=np.array([-1.0, -2.0, -3.0]),
            lb=np.zeros(3),
            ub=np.array([np.inf, np.inf, 2.0]),
            A=_rows([[1, 1, 1], [0, 1, 1]]),
            row_lb=np.array([-np.inf, -np.inf]),
            row_ub=np.array([4.0, 3.0]),
            offset=0.5,
            name="lp 3 variables",
        ),
        np.array([1.0, 1.0, 2.0]),
        -8.5,
    ),
    # min x + y, x + y >= 1, x - y == 0, x free: x = y = 1/2.
    "lp_free": Fixture(
        Problem(
            c=np.array([1.0, 1.0]),
            lb=np.array([-np.inf, 0.0]),
            ub=np.full(2, np.inf),
            A=_rows([[1, 1], [1, -1]]),
            row_lb=np.array([1.0, 0.0]),
            row_ub=np.array([np.inf, 0.0]),
            name="lp free variable",
        ),
        np.array([0.5, 0.5]),
        1.0,
    ),
    # P = [[2,1],[1,2]], c = (2,-4): unconstrained optimum has x < 0; with x >= 0 the bound is
    # active, y minimises y^2 - 4y: (0, 2), objective -4.
    "qp_bound": Fixture(
        Problem(
            c=np.array([2.0, -4.0]),
            lb=np.zeros(2),
            ub=np.full(2, np.inf),
            P=sp.csc_matrix([[2.0, 1.0], [1.0, 2.0]]),
            name="qp active bound",
        ),
        np.array([0.0, 2.0]),
        -4.0,
    ),
    # Same with x + y == 3: on the line f = y^2 - 9y + 15 has y = 4.5 (x < 0), so x = 0, y = 3.
    "qp_row": Fixture(
        Problem(
            c=np.array([2.0, -4.0]),
            lb=np.zeros(2),
            ub=np.full(2, np.inf),
            P=sp.csc_matrix([[2.0, 1.0], [1.0, 2.0]]),
            A=_rows([[1, 1]]),
            row_lb=np.array([3.0]),
            row_ub=np.array([3.0]),
            name="qp with row",
        ),
        np.array([0.0, 3.0]),
        -3.0,
    ),
    # Weighted simplex projection: w = (2, 2, 4), y = (1, 3, -1), sum x = 3. Threshold
    # lam = 1 keeps x1, x2: x = (0.5, 2.5, 0), objective sum w/2 (x-y)^2 = 2.5.
    "qp_simplex": Fixture(
        Problem(
            c=-np.array([2.0, 6.0, -4.0]),
            lb=np.zeros(3),
            ub=np.full(3, np.inf),
            P=sp.diags([2.0, 2.0, 4.0], format="csc"),
            A=_rows([[1, 1, 1]]),
            row_lb=np.array([3.0]),
            row_ub=np.array([3.0]),
            offset=12.0,
            name="qp simplex projection",
        ),
        np.array([0.5, 2.5, 0.0]),
        2.5,
    ),
    # Partition rounding: groups {0,1} and {2,3}, one unit each: the cheaper of each pair.
    "milp_partition": Fixture(
        Problem(
            c=np.array([0.2, -0.4, 0.1, -0.3]),
            lb=np.zeros(4),
            ub=np.ones(4),
            A=_rows([[1, 1, 0, 0], [0, 0, 1, 1]]),
            row_lb=np.ones(2),
            row_ub=np.ones(2),
            integrality=np.ones(4, dtype=bool),
            name="milp partition rounding",
        ),
        np.array([0.0, 1.0, 0.0, 1.0]),
        -0.7,
    ),
    "milp_knapsack": _knapsack(),
    # Mixed integer: x integer, y continuous in [0, 0.7], max x + y with x + y <= 2.5:
    # x = 2, y = 0.5 (x = 1 leaves at most 1.7).
    "milp_mixed": Fixture(
        Problem(
            c=np.array([-1.0, -1.0]),
            lb=np.zeros(2),
            ub=np.array([10.0, 0.7]),
            A=_rows([[1, 1]]),
            row_lb=np.array([-np.inf]),
            row_ub=np.array([2.5]),
            integrality=np.array([True, False]),
            name="milp mixed integer",
        ),
        np.array([2.0, 0.5]),
        -2.5,
    ),
    # A free variable with zero cost: bounded (objective 0), whatever x0 is.
    "lp_zero_cost_free": Fixture(
        Problem(
            c=np.array([0.0, 1.0]),
            lb=np.array([-np.inf, 0.0]),
            ub=np.array([np.inf, 1.0]),
            name="lp zero-cost free variable",
        ),
        None,
        0.0,
    ),
}

INFEASIBLE = {
    "lp": Problem(
        c=np.ones(2),
        lb=np.zeros(2),
        ub=np.full(2, np.inf),
        A=_rows([[1, 1], [1, 1]]),
        row_lb=np.array([-np.inf, 2.0]),
        row_ub=np.array([1.0, np.inf]),
        name="infeasible lp",
    ),
    "qp_partition": Problem(
        c=np.zeros(2),
        lb=np.zeros(2),
        ub=np.full(2, np.inf),
        P=sp.identity(2, format="csc"),
        A=_rows([[1, 1]]),
        row_lb=np.array([-1.0]),
        row_ub=np.array([-1.0]),
        name="infeasible partition qp",
    ),
    "milp_partition": Problem(
        c=np.zeros(2),
        lb=np.zeros(2),
        ub=np.ones(2),
        A=_rows([[1, 1]]),
        row_lb=np.array([3.0]),
        row_ub=np.array([3.0]),
        integrality=np.ones(2, dtype=bool),
        name="infeasible partition milp",
    ),
}

UNBOUNDED = {
    "lp_rows": Problem(
        c=np.array([-1.0, 0.0]),
        lb=np.zeros(2),
        ub=np.full(2, np.inf),
        A=_rows([[1, -1]]),
        row_lb=np.array([-np.inf]),
        row_ub=np.array([1.0]),
        name="unbounded lp",
    ),
    "lp_bounds": Problem(
        c=np.array([-1.0, 1.0]), lb=np.zeros(2), ub=np.full(2, np.inf), name="unbounded box lp"
    ),
}


def _backend_or_skip(name: str, problem: Problem):
    if name not in solvers.available():
        pytest.skip(f"{name} is not installed")
    verdict = solvers.get(name).accepts(problem)
    if verdict is not True:
        pytest.skip(f"{name} declines {problem.kind}: {verdict or 'no reason given'}")
    return name


@pytest.mark.parametrize("name", ALL_NAMES)
@pytest.mark.parametrize("fixture_id", list(FIXTURES))
def test_known_optimum(name: str, fixture_id: str) -> None:
    fixture = FIXTURES[fixture_id]
    _backend_or_skip(name, fixture.problem)
    result = solvers.solve(fixture.problem, name)
    tol = 1e-4 if name in FIRST_ORDER else 1e-6
    assert result.status is SolveStatus.OPTIMAL
    assert result.solver == name and result.problem == fixture.problem.name
    assert result.time >= 0.0
    assert result.objective == pytest.approx(fixture.objective, rel=tol, abs=tol)
    assert fixture.problem.max_violation(result.x) <= tol
    if fixture.x is not None:
        np.testing.assert_allclose(result.x, fixture.x, atol=10 * tol)


@pytest.mark.parametrize("name", ALL_NAMES)
@pytest.mark.parametrize("fixture_id", list(INFEASIBLE))
def test_infeasible_raises_typed_error(name: str, fixture_id: str) -> None:
    problem = INFEASIBLE[fixture_id]
    _backend_or_skip(name, problem)
    with pytest.raises(InfeasibleError) as info:
        solvers.solve(problem, name)
    err = info.value
    assert err.status in (SolveStatus.INFEASIBLE, SolveStatus.INFEASIBLE_OR_UNBOUNDED)
    assert err.solver == name and err.problem == problem.name
    assert repr(problem.name) in str(err) and name in str(err)


@pytest.mark.parametrize("name", ALL_NAMES)
@pytest.mark.parametrize("fixture_id", list(UNBOUNDED))
def test_unbounded_raises_typed_error(name: str, fixture_id: str) -> None:
    problem = UNBOUNDED[fixture_id]
    _backend_or_skip(name, problem)
    with pytest.raises((UnboundedError, InfeasibleError)) as info:
        solvers.solve(problem, name)
    err = info.value
    assert err.status in (SolveStatus.UNBOUNDED, SolveStatus.INFEASIBLE_OR_UNBOUNDED)
    if isinstance(err, InfeasibleError):
        assert err.status is SolveStatus.INFEASIBLE_OR_UNBOUNDED
    assert err.solver == name and repr(problem.name) in str(err)


def test_auto_solves_every_fixture() -> None:
    for fixture in FIXTURES.values():
        result = solvers.solve(fixture.problem)
        assert result.objective == pytest.approx(fixture.objective, rel=1e-6, abs=1e-6)


def test_auto_prefers_closed_form_then_kind_order() -> None:
    assert solvers.auto_candidates(FIXTURES["qp_simplex"].problem)[0] == "closed_form"
    assert solvers.auto_candidates(FIXTURES["milp_partition"].problem)[0] == "closed_form"
    qp = solvers.auto_candidates(FIXTURES["qp_row"].problem)
    assert "closed_form" not in qp
    if "cvxpy:CLARABEL" in solvers.available():
        assert qp[0] == "cvxpy:CLARABEL"
    if "highs" in solvers.available():
        assert solvers.auto_candidates(FIXTURES["milp_knapsack"].problem)[0] == "highs"


def test_unknown_solver_lists_available() -> None:
    with pytest.raises(UnknownSolverError) as info:
        solvers.solve(FIXTURES["lp3"].problem, "no-such-solver")
    assert isinstance(info.value, ValueError)
    assert "'no-such-solver'" in str(info.value)
    for name in solvers.available():
        assert name in str(info.value)


def test_named_backend_declining_raises_unsupported() -> None:
    problem = FIXTURES["qp_row"].problem
    with pytest.raises(UnsupportedProblemError, match="coupled|diagonal") as info:
        solvers.solve(problem, "closed_form")
    assert info.value.problem == "qp with row" and "'qp with row'" in str(info.value)


def test_named_backend_not_strict_hands_a_declined_problem_to_auto() -> None:
    fixture = FIXTURES["qp_row"]
    result = solvers.solve(fixture.problem, "closed_form", strict=False)
    assert (
        result.solver != "closed_form"
        and result.solver == solvers.auto_candidates(fixture.problem)[0]
    )
    assert result.objective == pytest.approx(fixture.objective, abs=1e-6)
    # an accepted problem stays with the named backend
    separable = FIXTURES["qp_simplex"].problem
    assert solvers.solve(separable, "closed_form", strict=False).solver == "closed_form"


def _market_split(seed: int = 1, m: int = 4, n: int = 30) -> Problem:
    """Market-split MILP (Cornuejols-Dawande): tiny, yet far beyond a millisecond budget."""
    a = np.random.default_rng(seed).integers(0, 100, (m, n)).astype(float)
    b = np.floor(a.sum(axis=1) / 2)
    return Problem(
        c=np.zeros(n),
        lb=np.zeros(n),
        ub=np.ones(n),
        A=sp.csr_matrix(a),
        row_lb=b,
        row_ub=b,
        integrality=np.ones(n, dtype=bool),
        name="market split",
    )


@pytest.mark.parametrize("name", ["highs", "scipy", "cvxpy:HIGHS"])
def test_time_limit_maps_to_limit_error(name: str) -> None:
    problem = _market_split()
    _backend_or_skip(name, problem)
    with pytest.raises(SolverLimitError) as info:
        solvers.solve(problem, name, time_limit=0.02)
    assert info.value.status is SolveStatus.TIME_LIMIT
    assert "'market split'" in str(info.value)


class _FixedStatus:
    """A user backend in a few lines: returns a preset status (to test the mapping)."""

    supports_lp, supports_qp, supports_milp = True, False, False
    REQUIRED_MODULES = ("numpy",)

    def __init__(self, status: SolveStatus, name: str, x: tuple[float, ...] = (0.5, 0.5)) -> None:
        self.status, self.name, self.x = status, name, np.asarray(x, dtype=float)

    def accepts(self, problem: Problem) -> bool | str:
        return problem.kind == "LP" or "LP only"

    def solve(self, problem: Problem, **options) -> SolveResult:
        return SolveResult(
            self.status, self.x, problem.objective_value(self.x), 0.0, self.name, problem.name
        )


@pytest.mark.parametrize(
    "status,error",
    [
        (SolveStatus.OPTIMAL_INACCURATE, NumericalError),
        (SolveStatus.TIME_LIMIT, SolverLimitError),
        (SolveStatus.ITERATION_LIMIT, SolverLimitError),
        (SolveStatus.NUMERICAL_ERROR, NumericalError),
        (SolveStatus.UNKNOWN, SolverError),
    ],
)
def test_registered_user_backend_status_mapping(status: SolveStatus, error: type) -> None:
    problem = FIXTURES["lp_free"].problem
    solvers.register(_FixedStatus(status, "test:fixed"), prefer=True)
    try:
        assert solvers.available()[0] == "test:fixed"
        with pytest.raises(error, match="test:fixed on problem 'lp free variable'"):
            solvers.solve(problem, "test:fixed")
        if status is SolveStatus.OPTIMAL_INACCURATE:
            assert solvers.solve(problem, "test:fixed", allow_inaccurate=True).status is status
    finally:
        solvers.unregister("test:fixed")
    assert "test:fixed" not in solvers.available()


def test_auto_falls_back_after_numerical_error() -> None:
    solvers.register(_FixedStatus(SolveStatus.NUMERICAL_ERROR, "test:broken"), prefer=True)
    try:
        result = solvers.solve(FIXTURES["lp_free"].problem)
        assert result.solver != "test:broken" and result.objective == pytest.approx(1.0)
    finally:
        solvers.unregister("test:broken")


@pytest.mark.parametrize("status", [SolveStatus.OPTIMAL, SolveStatus.UNKNOWN])
def test_auto_moves_on_from_a_false_optimum_or_an_unknown_failure(status: SolveStatus) -> None:
    """A backend that says OPTIMAL for x = 0 (which breaks x + y >= 1), or fails with an
    unmapped status, is not the last word under ``auto``; named, its answer is refused."""
    solvers.register(_FixedStatus(status, "test:liar", x=(0.0, 0.0)), prefer=True)
    try:
        expected = "violates the constraints" if status is SolveStatus.OPTIMAL else "test:liar"
        with pytest.raises(SolverError, match=expected):
            solvers.solve(FIXTURES["lp_free"].problem, "test:liar")
        result = solvers.solve(FIXTURES["lp_free"].problem)
        assert result.solver != "test:liar" and result.objective == pytest.approx(1.0)
    finally:
        solvers.unregister("test:liar")


def test_unknown_solver_names_the_problem() -> None:
    with pytest.raises(
        solvers.UnknownSolverError,
        match=r"'nope' is not a registered solver \(problem 'lp free variable'\)",
    ):
        solvers.solve(FIXTURES["lp_free"].problem, "nope")


def test_register_rejects_incomplete_backend() -> None:
    with pytest.raises(TypeError, match="lacks"):
        solvers.register(object(), name="test:broken")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"c": [1.0, 2.0], "lb": [0.0], "ub": [1.0, 1.0]}, r"lb has shape \(1,\)"),
        ({"c": [1.0, np.nan], "lb": [0.0, 0.0], "ub": [1.0, 1.0]}, "c contains NaN"),
        (
            {"c": [1.0, 2.0], "lb": [0.0, 2.0], "ub": [1.0, 1.0]},
            r"lb\[1\] \(2.0\) must be <= ub\[1\]",
        ),
        (
            {
                "c": [1.0, 2.0],
                "lb": [0.0, 0.0],
                "ub": [1.0, 1.0],
                "P": sp.csc_matrix([[1.0, 1.0], [0.0, 1.0]]),
            },
            "symmetric",
        ),
        (
            {
                "c": [1.0, 2.0],
                "lb": [0.0, 0.0],
                "ub": [1.0, 1.0],
                "P": sp.identity(3, format="csc"),
            },
            "P has shape",
        ),
        (
            {
                "c": [1.0, 2.0],
                "lb": [0.0, 0.0],
                "ub": [1.0, 1.0],
                "P": sp.identity(2, format="csc"),
                "integrality": [True, False],
            },
            "MIQP",
        ),
        (
            {
                "c": [1.0, 2.0],
                "lb": [0.0, 0.0],
                "ub": [1.0, 1.0],
                "A": sp.csr_matrix([[1.0, 1.0]]),
                "row_lb": [2.0],
                "row_ub": [1.0],
            },
            r"row_lb\[0\] \(2.0\) must be <= row_ub\[0\]",
        ),
        (
            {
                "c": [1.0, 2.0],
                "lb": [0.0, 0.0],
                "ub": [1.0, 1.0],
                "A": sp.csr_matrix([[1.0, 1.0, 1.0]]),
            },
            "A has shape",
        ),
    ],
)
def test_problem_validation(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        Problem(**kwargs, name="bad")
    assert "'bad'" in str(info.value)


def test_problem_kind_and_immutability() -> None:
    assert FIXTURES["lp3"].problem.kind == "LP"
    assert FIXTURES["qp_row"].problem.kind == "QP"
    assert FIXTURES["milp_knapsack"].problem.kind == "MILP"
    problem = FIXTURES["lp3"].problem
    assert (problem.n, problem.m) == (3, 2)
    with pytest.raises(ValueError):
        problem.c[0] = 5.0


def test_closed_form_infeasible_message_names_the_row() -> None:
    problem = Problem(
        c=np.zeros(3),
        lb=np.zeros(3),
        ub=np.full(3, np.inf),
        P=sp.identity(3, format="csc"),
        A=sp.csr_matrix((np.ones(2), ([0, 0], [0, 1])), shape=(2, 3)),
        row_lb=np.array([1.0, 2.0]),
        row_ub=np.array([1.0, 2.0]),
        row_names=("cell a", "cell b"),
        name="empty row",
    )
    with pytest.raises(
        InfeasibleError, match=r"closed_form on problem 'empty row': infeasible \(cell b"
    ):
        solvers.solve(problem, "closed_form")


def test_closed_form_declines_with_reasons() -> None:
    base = dict(
        c=np.zeros(2), lb=np.zeros(2), ub=np.full(2, np.inf), P=sp.identity(2, format="csc")
    )
    cases = {
        "coefficient": dict(A=_rows([[2, 1]]), row_lb=np.ones(1), row_ub=np.ones(1)),
        "equality": dict(A=_rows([[1, 1]]), row_lb=np.zeros(1), row_ub=np.ones(1)),
        "at most one row": dict(A=_rows([[1, 1], [1, 0]]), row_lb=np.ones(2), row_ub=np.ones(2)),
    }
    for expected, rows in cases.items():
        verdict = solvers.get("closed_form").accepts(Problem(**base, **rows))
        assert isinstance(verdict, str) and expected in verdict
    bounded = Problem(
        c=np.zeros(2),
        lb=np.zeros(2),
        ub=np.ones(2),
        P=sp.identity(2, format="csc"),
        A=_rows([[1, 1]]),
        row_lb=np.ones(1),
        row_ub=np.ones(1),
    )
    assert "ub = +inf" in solvers.get("closed_form").accepts(bounded)
    fractional = Problem(
        c=np.zeros(2),
        lb=np.zeros(2),
        ub=np.ones(2),
        A=_rows([[1, 1]]),
        row_lb=np.full(1, 0.5),
        row_ub=np.full(1, 0.5),
    )
    assert "integer" in solvers.get("closed_form").accepts(fractional)
