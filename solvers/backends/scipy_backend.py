"""SciPy's optimisers: ``linprog`` (LP), ``milp`` (MILP) and ``lsq_linear`` (bound-only QP).

Both ``linprog`` and ``milp`` run HiGHS inside SciPy, so this backend is a fallback for
installs without highspy. A QP is accepted only in the form ``lsq_linear`` solves exactly:
no constraint rows and a positive definite Hessian small enough for a dense Cholesky factor
``P = R'R``, which turns ``1/2 x'Px + c'x`` into ``1/2 ||R x + R^-T c||^2`` plus a constant.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from solvers.backends.base import Backend, failed_result, solved_result
from solvers.problem import Problem
from solvers.status import SolveResult, SolveStatus

__all__ = ["ScipyBackend"]

logger = logging.getLogger(__name__)

#: Largest QP (variables) factored densely for ``lsq_linear``.
MAX_DENSE_QP = 3000

#: ``linprog``/``milp`` status ints -> SolveStatus (0 optimal, 1 limit, 2 infeasible,
#: 3 unbounded, 4 numerical difficulties).
_LP_STATUS = {
    0: SolveStatus.OPTIMAL,
    1: SolveStatus.ITERATION_LIMIT,
    2: SolveStatus.INFEASIBLE,
    3: SolveStatus.UNBOUNDED,
    4: SolveStatus.NUMERICAL_ERROR,
}

#: ``lsq_linear`` status ints -> SolveStatus (1-3 converged, 0 iteration limit, -1 failure).
_LSQ_STATUS = {
    1: SolveStatus.OPTIMAL,
    2: SolveStatus.OPTIMAL,
    3: SolveStatus.OPTIMAL,
    0: SolveStatus.ITERATION_LIMIT,
    -1: SolveStatus.NUMERICAL_ERROR,
}


class ScipyBackend(Backend):
    """``scipy.optimize`` backend; declines QPs with rows or large/singular Hessians."""

    name = "scipy"
    supports_lp = True
    supports_qp = True
    supports_milp = True
    REQUIRED_MODULES = ("scipy",)

    def accepts(self, problem: Problem) -> bool | str:
        """Accept LP and MILP; a QP only without rows and with a small Hessian."""
        if problem.kind != "QP":
            return True
        if problem.m:
            return "scipy declines QP with constraint rows (lsq_linear takes bounds only)"
        if problem.n > MAX_DENSE_QP:
            return f"scipy declines QP with {problem.n} variables (> {MAX_DENSE_QP}, dense factor)"
        return True

    def solve(
        self,
        problem: Problem,
        *,
        time_limit: float = 60.0,
        tolerance: float | None = None,
        **options: Any,
    ) -> SolveResult:
        """Dispatch by kind and map SciPy's integer status codes."""
        start = time.perf_counter()
        if problem.kind == "QP":
            return self._solve_qp(problem, start, tolerance, options)
        from scipy.optimize import Bounds, LinearConstraint, milp

        constraints = []
        A, row_lb, row_ub = problem.A, problem.row_lb, problem.row_ub
        if A is not None and row_lb is not None and row_ub is not None and problem.m:
            constraints.append(LinearConstraint(A, row_lb, row_ub))
        integrality = (
            np.zeros(problem.n, dtype=np.int64)
            if problem.integrality is None
            else problem.integrality.astype(np.int64)
        )
        settings: dict[str, Any] = {"time_limit": float(time_limit), "disp": False}
        if problem.kind == "MILP":
            settings["mip_rel_gap"] = 1e-9
        settings.update(options)
        # milp solves LPs too (all-continuous integrality) and has one status convention.
        res = milp(
            problem.c,
            integrality=integrality,
            bounds=Bounds(problem.lb, problem.ub),
            constraints=constraints,
            # scipy-stubs types options as a closed TypedDict; callers' solver options pass
            # through unchanged (SciPy itself warns on an unknown key)
            options=settings,  # type: ignore[arg-type]
        )
        elapsed = time.perf_counter() - start
        status = _LP_STATUS.get(int(res.status), SolveStatus.ERROR)
        if status is SolveStatus.ITERATION_LIMIT and elapsed >= 0.95 * time_limit:
            status = SolveStatus.TIME_LIMIT
        if status is not SolveStatus.OPTIMAL or res.x is None:
            logger.debug("scipy on %r: %s", problem.name, res.message)
            return failed_result(
                problem,
                status if status is not SolveStatus.OPTIMAL else SolveStatus.NUMERICAL_ERROR,
                self.name,
                elapsed,
            )
        x = np.asarray(res.x, dtype=float)
        if problem.integrality is not None:
            x = np.where(problem.integrality, np.round(x), x)
        return solved_result(problem, x, self.name, elapsed, status=status)

    def _solve_qp(
        self, problem: Problem, start: float, tolerance: float | None, options: dict[str, Any]
    ) -> SolveResult:
        from scipy.linalg import cholesky, solve_triangular
        from scipy.optimize import lsq_linear

        assert problem.P is not None
        dense = problem.P.toarray() if sp.issparse(problem.P) else np.asarray(problem.P)
        try:
            R = cholesky(dense, lower=False)
        except np.linalg.LinAlgError:
            return failed_result(
                problem, SolveStatus.UNSUPPORTED, self.name, time.perf_counter() - start
            )
        rhs = -solve_triangular(R, problem.c, trans="T", lower=False)
        tol = 1e-12 if tolerance is None else tolerance
        settings: dict[str, Any] = {"method": "bvls", "tol": tol, "lsmr_tol": None}
        settings.update(options)
        settings.pop("lsmr_tol")
        res = lsq_linear(R, rhs, bounds=(problem.lb, problem.ub), **settings)
        elapsed = time.perf_counter() - start
        status = _LSQ_STATUS.get(int(res.status), SolveStatus.ERROR)
        if status is not SolveStatus.OPTIMAL:
            return failed_result(problem, status, self.name, elapsed, int(res.nit))
        x = np.asarray(res.x, dtype=float)
        return solved_result(problem, x, self.name, elapsed, int(res.nit), status=status)
