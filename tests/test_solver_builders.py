"""The problem builders on a 2-children x 3-cell example computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import solvers
from solvers import children_l2_problem, rounding_problem, rounding_solution

K, N = 2, 3
PARENT = np.array([4.0, 1.0, 3.0])
Y_DETAILED = np.array([[3.0, 0.5, 1.0], [2.0, 0.0, 2.5]])
W_DETAILED = np.array([1.0, 2.0])  # per child
TOTAL = sp.csr_matrix(np.ones((1, N)))
Y_TOTAL = np.array([[5.0], [4.0]])
W_TOTAL = np.array([[0.5], [0.25]])  # per child and answer


def _detailed_only(parent=PARENT) -> solvers.Problem:
    return children_l2_problem(
        parent, [(sp.identity(N, format="csr"), Y_DETAILED, W_DETAILED)], k=K, n=N, name="hand"
    )


def test_detailed_only_matrices() -> None:
    problem = _detailed_only()
    assert problem.kind == "QP" and (problem.n, problem.m) == (6, 3)
    np.testing.assert_allclose(problem.P.toarray(), np.diag([2, 2, 2, 4, 4, 4]))
    np.testing.assert_allclose(problem.c, [-6, -1, -2, -8, 0, -10])
    assert problem.offset == pytest.approx(1 * (9 + 0.25 + 1) + 2 * (4 + 0 + 6.25))
    np.testing.assert_allclose(
        problem.A.toarray(), [[1, 0, 0, 1, 0, 0], [0, 1, 0, 0, 1, 0], [0, 0, 1, 0, 0, 1]]
    )
    np.testing.assert_array_equal(problem.row_lb, PARENT)
    np.testing.assert_array_equal(problem.row_ub, PARENT)
    np.testing.assert_array_equal(problem.lb, 0.0)
    assert np.isposinf(problem.ub).all()
    assert solvers.get("closed_form").accepts(problem) is True


def test_objective_is_hand_weighted_sum_of_squares() -> None:
    x = np.array([[2.0, 1.0, 0.0], [2.0, 0.0, 3.0]])
    problem = children_l2_problem(
        PARENT,
        [(sp.identity(N, format="csr"), Y_DETAILED, W_DETAILED), (TOTAL, Y_TOTAL, W_TOTAL)],
        k=K,
        n=N,
    )
    # detailed: child 0: 1*((2-3)^2 + (1-.5)^2 + (0-1)^2) = 2.25; child 1: 2*(0 + 0 + .25) = 0.5
    # total: child 0: 0.5*(3-5)^2 = 2; child 1: 0.25*(5-4)^2 = 0.25
    assert problem.objective_value(x.reshape(-1)) == pytest.approx(2.25 + 0.5 + 2.0 + 0.25)
    assert isinstance(solvers.get("closed_form").accepts(problem), str)
    expected_block0 = 2 * (np.eye(N) * 1.0 + 0.5 * np.ones((N, N)))
    np.testing.assert_allclose(problem.P.toarray()[:N, :N], expected_block0)
    np.testing.assert_allclose(problem.P.toarray()[:N, N:], 0.0)


def test_detailed_only_solution_by_hand() -> None:
    # cell 0: w=(1,2), y=(3,2), sum 4: x = y - lam/w, 3 - lam + 2 - lam/2 = 4 -> lam = 2/3
    result = solvers.solve(_detailed_only(), "closed_form")
    np.testing.assert_allclose(result.x[[0, 3]], [3 - 2 / 3, 2 - 1 / 3])
    np.testing.assert_allclose(result.x.reshape(K, N).sum(axis=0), PARENT)


def test_root_and_extra_rows_and_upper_bounds() -> None:
    extra = sp.kron(sp.identity(K), TOTAL, format="csr")
    problem = children_l2_problem(
        None,
        [(sp.identity(N, format="csr"), Y_DETAILED, W_DETAILED)],
        k=K,
        n=N,
        extra_A=extra,
        extra_ub=[4.0, 4.0],
        ub=np.full((K, N), 3.0),
    )
    assert problem.m == 2 and np.isneginf(problem.row_lb).all()
    np.testing.assert_array_equal(problem.row_ub, [4.0, 4.0])
    np.testing.assert_array_equal(problem.ub, 3.0)
    with pytest.raises(ValueError, match=r"parent has shape \(2,\)"):
        children_l2_problem(np.ones(2), [], k=K, n=N, name="bad")


def test_rounding_problem_width_one() -> None:
    x_tilde = np.array([[1.2, 0.7, 0.0], [2.8, 0.3, 3.0]])
    problem, floor = rounding_problem(x_tilde, PARENT, name="round")
    np.testing.assert_array_equal(floor, [1, 0, 0, 2, 0, 3])
    np.testing.assert_allclose(problem.c, 1 - 2 * np.array([0.2, 0.7, 0, 0.8, 0.3, 0]))
    np.testing.assert_allclose(problem.row_lb, [1.0, 1.0, 0.0])
    assert problem.kind == "MILP" and solvers.get("closed_form").accepts(problem) is True
    result = solvers.solve(problem)
    counts = rounding_solution(result.x, floor).reshape(K, N)
    np.testing.assert_array_equal(counts, [[1, 1, 0], [3, 0, 3]])
    assert result.objective == pytest.approx(0.2 + 0.3 + 0.2 + 0.3)


def test_rounding_problem_extra_rows_are_shifted() -> None:
    x_tilde = np.array([[1.2, 0.7, 0.0], [2.8, 0.3, 3.0]])
    cap = sp.csr_matrix(np.array([[0, 0, 0, 1, 0, 0]], dtype=float))  # child 1, cell 0 <= 2
    problem, floor = rounding_problem(x_tilde, PARENT, extra_A=cap, extra_ub=[2.0])
    assert problem.row_ub[-1] == pytest.approx(0.0)
    counts = rounding_solution(solvers.solve(problem).x, floor).reshape(K, N)
    np.testing.assert_array_equal(counts, [[2, 1, 0], [2, 0, 3]])


def test_rounding_problem_rejects_bad_inputs() -> None:
    with pytest.raises(ValueError, match="integer-valued"):
        rounding_problem(np.ones((K, N)), np.array([1.5, 1, 1]), name="r")
    with pytest.raises(ValueError, match=">= 0"):
        rounding_problem(-np.ones((K, N)), None, name="r")
    with pytest.raises(ValueError, match=r"width \(0\)"):
        rounding_problem(np.ones((K, N)), None, width=0, name="r")


def test_lifted_form_has_same_optimum() -> None:
    measurements = [
        (sp.identity(N, format="csr"), Y_DETAILED, W_DETAILED),
        (TOTAL, Y_TOTAL, W_TOTAL),
    ]
    plain = children_l2_problem(PARENT, measurements, k=K, n=N)
    lifted = children_l2_problem(PARENT, measurements, k=K, n=N, lifted=True)
    # the detailed (identity) query stays on x; only the total is lifted, one answer per child
    assert lifted.n == K * N + K and lifted.m == N + K
    a = solvers.solve(plain, "highs")
    b = solvers.solve(lifted, "highs")
    np.testing.assert_allclose(b.x[: K * N], a.x, atol=1e-6)
    assert b.objective == pytest.approx(a.objective, rel=1e-7)


def test_a_square_marginal_is_not_mistaken_for_the_detailed_query() -> None:
    """Restricted to a node's support, a marginal can be square with an empty row
    ([[1, 1], [0, 0]]); it must be lifted, not treated as the identity."""
    from solvers.builders import is_identity

    Q = sp.csr_matrix(np.array([[1.0, 1.0], [0.0, 0.0]]))
    assert not is_identity(Q) and is_identity(sp.identity(2, format="csr"))
    assert not is_identity(sp.csr_matrix(np.array([[0.0, 1.0], [1.0, 0.0]])))
    measurements = [
        (sp.identity(2, format="csr"), np.array([[1.0, 2.0], [0.5, 0.5]]), np.ones((2, 2))),
        (Q, np.array([[4.0, 0.0], [1.0, 0.0]]), np.ones((2, 2))),
    ]
    parent = np.array([3.0, 2.0])
    plain = solvers.solve(children_l2_problem(parent, measurements, k=2, n=2), "highs")
    lifted = solvers.solve(
        children_l2_problem(parent, measurements, k=2, n=2, lifted=True), "highs"
    )
    np.testing.assert_allclose(lifted.x[:4], plain.x, atol=1e-6)
    assert lifted.objective == pytest.approx(plain.objective, rel=1e-7)
