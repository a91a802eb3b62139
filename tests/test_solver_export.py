"""MPS export: problems written through HiGHS read back equal, and solve to the same optimum."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import solvers
from solvers import Problem
from solvers.builders import children_l2_problem, rounding_problem
from solvers.export import read_problem, write_problem

pytest.importorskip("highspy")

RTOL = 1e-14  # HiGHS writes 15 significant digits


def _lp() -> Problem:
    # ranged, <=, >= and equality rows; free, boxed and fixed variables; an objective constant
    return Problem(
        c=np.array([1.0 / 3.0, -2.0, 0.5, 0.0]),
        lb=np.array([0.0, -np.inf, -1.0, 2.0]),
        ub=np.array([np.inf, 4.0, 1.5, 2.0]),
        A=sp.csr_matrix(
            np.array([[1.0, 0.1234567890123, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0], [0, 2.0, -1.0, 0]])
        ),
        row_lb=np.array([-1.0, -np.inf, 0.25]),
        row_ub=np.array([5.0, 3.0, 0.25]),
        offset=1.5,
        name="lp",
    )


def _milp() -> Problem:
    rng = np.random.default_rng(3)
    x_tilde = rng.uniform(0, 6, size=(3, 5))
    parent = np.round(x_tilde.sum(axis=0))
    caps = sp.kron(sp.identity(3), np.ones((1, 5)), format="csr")
    totals = x_tilde.sum(axis=1)
    problem, _ = rounding_problem(
        x_tilde,
        parent,
        extra_A=caps,
        extra_lb=np.floor(totals),
        extra_ub=np.ceil(totals),
        width=2,
        name="milp",
    )
    return problem


def _qp(lifted: bool) -> Problem:
    rng = np.random.default_rng(4)
    k, n = 3, 4
    Y = rng.integers(0, 9, size=(k, n)).astype(float)
    tot = Y.sum(axis=1, keepdims=True) + rng.integers(-2, 3, size=(k, 1))
    meas = [(sp.identity(n, format="csr"), Y, np.full((k, n), 1.0))]
    meas.append((sp.csr_matrix(np.ones((1, n))), tot, np.full((k, 1), 1.0 / 3.0)))
    parent = np.round(Y.sum(axis=0) + 1.0)
    return children_l2_problem(parent, meas, k=k, n=n, lifted=lifted, name="qp")


def _assert_same(a: Problem, b: Problem) -> None:
    assert (a.n, a.m, a.kind) == (b.n, b.m, b.kind)
    for field in ("c", "lb", "ub", "row_lb", "row_ub"):
        left, right = getattr(a, field), getattr(b, field)
        if left is None:
            assert right is None, field
            continue
        np.testing.assert_array_equal(np.isinf(left), np.isinf(right), err_msg=field)
        np.testing.assert_allclose(left, right, rtol=RTOL, atol=RTOL, err_msg=field)
    for field in ("A", "P"):
        left, right = getattr(a, field), getattr(b, field)
        if left is None:
            assert right is None, field
            continue
        assert abs(left - right).max() <= RTOL * max(abs(left).max(), 1.0), field
    assert a.offset == pytest.approx(b.offset, rel=RTOL, abs=RTOL)
    if a.integrality is None:
        assert b.integrality is None
    else:
        np.testing.assert_array_equal(a.integrality, b.integrality)


@pytest.mark.parametrize(
    "make",
    [_lp, _milp, lambda: _qp(False), lambda: _qp(True)],
    ids=["lp", "milp", "qp", "qp-lifted"],
)
def test_round_trip_equal_and_same_optimum(make, tmp_path) -> None:
    problem = make()
    path = write_problem(problem, tmp_path / "p.mps")
    back = read_problem(path)
    assert back.name == "p"
    _assert_same(problem, back)
    # the file read into HiGHS gives the in-memory problem's optimum
    direct = solvers.solve(problem, "highs")
    replayed = solvers.solve(back, "highs")
    assert replayed.objective == pytest.approx(direct.objective, rel=1e-9, abs=1e-9)
    np.testing.assert_allclose(replayed.x, direct.x, atol=1e-6)


def test_hand_worked_qp_reads_back_convention(tmp_path) -> None:
    # min 1/2 (2 x0^2 + 2 x0 x1 + 4 x1^2) - x0 + 7 s.t. x0 + x1 = 1, x >= 0: with x1 = 1 - x0
    # the objective is 2 x0^2 - 4 x0 + 9, decreasing on [0, 1], so x = (1, 0) and f = 7
    problem = Problem(
        c=np.array([-1.0, 0.0]),
        lb=np.zeros(2),
        ub=np.full(2, np.inf),
        P=sp.csc_matrix(np.array([[2.0, 1.0], [1.0, 4.0]])),
        A=sp.csr_matrix(np.ones((1, 2))),
        row_lb=np.ones(1),
        row_ub=np.ones(1),
        offset=7.0,
    )
    back = read_problem(write_problem(problem, tmp_path / "q.mps"))
    assert back.P is not None
    np.testing.assert_array_equal(back.P.toarray(), [[2.0, 1.0], [1.0, 4.0]])
    res = solvers.solve(back, "highs")
    np.testing.assert_allclose(res.x, [1.0, 0.0], atol=1e-7)
    assert res.objective == pytest.approx(7.0, abs=1e-7)


def test_bad_paths_are_named(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"must end in \.mps"):
        write_problem(_lp(), tmp_path / "p.lp")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_problem(tmp_path / "missing.mps")
