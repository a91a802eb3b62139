"""Any solver CVXPY has installed, as backend ``cvxpy:<NAME>``.

The problem is rebuilt as a CVXPY model (one vector variable, integer only where the problem
says so, ``0.5 * quad_form(x, psd_wrap(P)) + c @ x``, row bounds on ``A @ x``) and solved with
the named solver. This gives the engine interior-point QP solvers (Clarabel, OSQP, SCS) and
licensed ones (Gurobi, MOSEK) without the engine knowing their APIs. CVXPY's status strings
are mapped into :class:`SolveStatus` here and nowhere else.
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any

import numpy as np

from solvers.backends.base import Backend, failed_result, solved_result
from solvers.backends.highs import new_highs
from solvers.problem import Problem
from solvers.status import SolveResult, SolveStatus

__all__ = ["CvxpyBackend", "cvxpy_solver_names"]

logger = logging.getLogger(__name__)

#: CVXPY status string -> SolveStatus (see ``cvxpy.settings``).
STATUS_MAP: dict[str, SolveStatus] = {
    "optimal": SolveStatus.OPTIMAL,
    "optimal_inaccurate": SolveStatus.OPTIMAL_INACCURATE,
    "infeasible": SolveStatus.INFEASIBLE,
    # an inaccurate certificate is not a proof: let ``auto`` try another backend
    "infeasible_inaccurate": SolveStatus.NUMERICAL_ERROR,
    "unbounded": SolveStatus.UNBOUNDED,
    "unbounded_inaccurate": SolveStatus.NUMERICAL_ERROR,
    "infeasible_or_unbounded": SolveStatus.INFEASIBLE_OR_UNBOUNDED,
    "user_limit": SolveStatus.TIME_LIMIT,
    "solver_error": SolveStatus.NUMERICAL_ERROR,
}

#: Capabilities of the CVXPY solvers this project knows (LP, QP, MILP).
_CAPABILITIES: dict[str, tuple[bool, bool, bool]] = {
    "CLARABEL": (True, True, False),
    "OSQP": (True, True, False),
    "SCS": (True, True, False),
    "ECOS": (True, False, False),
    "HIGHS": (True, True, True),
    "SCIPY": (True, False, True),
    "GLPK": (True, False, False),
    "GLPK_MI": (True, False, True),
    "CBC": (True, False, True),
    "SCIP": (True, True, True),
    "GUROBI": (True, True, True),
    "MOSEK": (True, True, True),
    "CPLEX": (True, True, True),
    "XPRESS": (True, True, True),
    "PIQP": (True, True, False),
    "PROXQP": (True, True, False),
    "DAQP": (True, True, False),
    "QOCO": (True, True, False),
}


def _osqp_polish_key() -> str:
    """OSQP renamed ``polish`` to ``polishing`` in 1.0."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major = int(version("osqp").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return "polish"
    return "polishing" if major >= 1 else "polish"


def _default_options(solver: str, tolerance: float | None, time_limit: float) -> dict[str, Any]:
    """Per-solver tolerance and time-limit options (each solver spells them differently).

    First-order methods (OSQP, SCS) cannot reach 1e-8 in reasonable time, so their default
    tolerance is looser and OSQP polishes its answer (an exact active-set refinement).
    """
    if solver == "CLARABEL":
        # Gap 1e-10 costs one or two iterations more than Clarabel's 1e-8 default and cuts the
        # error in x on the children problem from ~1e-2 to ~1e-3 (benchmarks/solvers).
        gap = 1e-10 if tolerance is None else tolerance
        feas = 1e-9 if tolerance is None else tolerance
        return {
            "tol_gap_abs": gap,
            "tol_gap_rel": gap,
            "tol_feas": feas,
            "time_limit": time_limit,
            "max_iter": 500,
        }
    if solver == "OSQP":
        tol = 1e-7 if tolerance is None else tolerance
        return {
            "eps_abs": tol,
            "eps_rel": tol,
            _osqp_polish_key(): True,
            "max_iter": 200_000,
            "time_limit": time_limit,
        }
    if solver == "SCS":
        tol = 1e-7 if tolerance is None else tolerance
        return {"eps_abs": tol, "eps_rel": tol, "max_iters": 200_000, "time_limit_secs": time_limit}
    if solver == "HIGHS":
        tol = 1e-8 if tolerance is None else tolerance
        return {
            "time_limit": time_limit,
            "primal_feasibility_tolerance": tol,
            "dual_feasibility_tolerance": tol,
            "threads": 1,
            "random_seed": 0,
            "mip_rel_gap": 1e-9,
        }
    if solver == "GUROBI":
        return {"TimeLimit": time_limit, "Threads": 1}
    return {}


def cvxpy_solver_names() -> list[str]:
    """Names of the solvers CVXPY reports installed (imports cvxpy)."""
    import cvxpy

    return list(cvxpy.installed_solvers())


class CvxpyBackend(Backend):
    """One installed CVXPY solver; the registry creates one instance per solver name."""

    REQUIRED_MODULES = ("cvxpy",)

    def __init__(self, solver: str) -> None:
        self.solver = solver.upper()
        self.name = f"cvxpy:{self.solver}"
        lp, qp, milp = _CAPABILITIES.get(self.solver, (True, False, False))
        self.supports_lp, self.supports_qp, self.supports_milp = lp, qp, milp

    def solve(
        self,
        problem: Problem,
        *,
        time_limit: float = 60.0,
        tolerance: float | None = None,
        **options: Any,
    ) -> SolveResult:
        """Build the CVXPY model, solve with this backend's solver, map the status."""
        import cvxpy as cp

        start = time.perf_counter()
        ints = (
            np.flatnonzero(problem.integrality)
            if problem.integrality is not None
            else np.empty(0, int)
        )
        if ints.size == problem.n:
            x = cp.Variable(problem.n, integer=True)
        elif ints.size:
            x = cp.Variable(
                problem.n, integer=[(int(i),) for i in ints]
            )  # CVXPY wants index tuples
        else:
            x = cp.Variable(problem.n)
        objective = problem.c @ x
        if problem.P is not None:
            objective = objective + 0.5 * cp.quad_form(x, cp.psd_wrap(problem.P))
        constraints = []
        for bound, sign in ((problem.lb, 1), (problem.ub, -1)):
            finite = np.isfinite(bound)
            if finite.all():
                constraints.append(x >= bound if sign == 1 else x <= bound)
            elif finite.any():
                idx = np.flatnonzero(finite)
                constraints.append(x[idx] >= bound[idx] if sign == 1 else x[idx] <= bound[idx])
        if problem.A is not None and problem.m:
            constraints.extend(self._row_constraints(cp, problem, x))
        model = cp.Problem(cp.Minimize(objective), constraints)
        settings = _default_options(self.solver, tolerance, float(time_limit))
        settings.update(options)
        if self.solver == "HIGHS":
            new_highs()  # the process's first Highs, the one that prints a banner, made silent
        try:
            with warnings.catch_warnings():
                # The status is mapped below; CVXPY's "may be inaccurate" warning adds nothing.
                warnings.simplefilter("ignore", UserWarning)
                model.solve(solver=self.solver, **settings)
        except cp.error.SolverError as exc:
            logger.debug("%s on %r raised %s", self.name, problem.name, exc)
            return failed_result(
                problem, SolveStatus.NUMERICAL_ERROR, self.name, time.perf_counter() - start
            )
        elapsed = time.perf_counter() - start
        status = STATUS_MAP.get(str(model.status), SolveStatus.ERROR)
        if status is SolveStatus.TIME_LIMIT and self._hit_iterations(model):
            status = SolveStatus.ITERATION_LIMIT
        if (
            status in (SolveStatus.OPTIMAL_INACCURATE, SolveStatus.NUMERICAL_ERROR)
            and elapsed >= 0.98 * time_limit
        ):
            # Clarabel and OSQP report a stop at their time limit as an inaccurate solution.
            status = SolveStatus.TIME_LIMIT
        iterations = getattr(model.solver_stats, "num_iters", None)
        if status not in (SolveStatus.OPTIMAL, SolveStatus.OPTIMAL_INACCURATE) or x.value is None:
            if status in (SolveStatus.OPTIMAL, SolveStatus.OPTIMAL_INACCURATE):
                status = SolveStatus.NUMERICAL_ERROR
            return failed_result(problem, status, self.name, elapsed, iterations)
        xv = np.asarray(x.value, dtype=float).reshape(-1)
        if problem.integrality is not None:
            xv = np.where(problem.integrality, np.round(xv), xv)
        its = None if iterations is None else int(iterations)
        return solved_result(problem, xv, self.name, elapsed, its, status=status)

    @staticmethod
    def _row_constraints(cp: Any, problem: Problem, x: Any) -> list[Any]:
        """Equality rows as one ``==`` block, the rest as one-sided blocks (no infinite bounds)."""
        assert problem.A is not None and problem.row_lb is not None and problem.row_ub is not None
        A, lo, hi = problem.A, problem.row_lb, problem.row_ub
        eq = lo == hi
        out = []
        if eq.any():
            out.append(A[np.flatnonzero(eq)] @ x == lo[eq])
        lower = ~eq & np.isfinite(lo)
        upper = ~eq & np.isfinite(hi)
        if lower.any():
            out.append(A[np.flatnonzero(lower)] @ x >= lo[lower])
        if upper.any():
            out.append(A[np.flatnonzero(upper)] @ x <= hi[upper])
        return out

    @staticmethod
    def _hit_iterations(model: Any) -> bool:
        """CVXPY reports both limits as ``user_limit``; guess which from the solver's stats."""
        extra = getattr(model.solver_stats, "extra_stats", None)
        text = str(getattr(extra, "status", extra)).lower() if extra is not None else ""
        return "iter" in text
