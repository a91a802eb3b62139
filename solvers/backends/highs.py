"""HiGHS through highspy directly: LP (dual simplex / IPM), MILP (branch and cut), QP.

The model is passed in one call with the constraint matrix in CSC form and the Hessian as its
lower triangle, so no modelling layer sits between the engine and the solver. HiGHS's QP
solver is an active-set method: exact, but slow when many bounds are active, which is the
TopDown children problem; the registry's ``auto`` order prefers interior-point QP solvers.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from solvers.backends.base import Backend, failed_result, solved_result
from solvers.problem import Problem
from solvers.status import SolveResult, SolveStatus

__all__ = ["HighsBackend", "new_highs"]

logger = logging.getLogger(__name__)

_MATRIX_COLWISE = 1
_banner_lock = threading.Lock()
_banner_done = False
_HESSIAN_TRIANGULAR = 1
_MINIMIZE = 1


def _status_map(hp: Any) -> dict[Any, SolveStatus]:
    """HighsModelStatus -> SolveStatus; anything absent from the map is ERROR."""
    ms = hp.HighsModelStatus
    return {
        ms.kOptimal: SolveStatus.OPTIMAL,
        ms.kInfeasible: SolveStatus.INFEASIBLE,
        ms.kUnbounded: SolveStatus.UNBOUNDED,
        ms.kUnboundedOrInfeasible: SolveStatus.INFEASIBLE_OR_UNBOUNDED,
        ms.kTimeLimit: SolveStatus.TIME_LIMIT,
        ms.kIterationLimit: SolveStatus.ITERATION_LIMIT,
        ms.kSolutionLimit: SolveStatus.ITERATION_LIMIT,
        ms.kMemoryLimit: SolveStatus.ERROR,
        ms.kModelEmpty: SolveStatus.OPTIMAL,
        ms.kUnknown: SolveStatus.NUMERICAL_ERROR,
        ms.kSolveError: SolveStatus.NUMERICAL_ERROR,
        ms.kPostsolveError: SolveStatus.NUMERICAL_ERROR,
        ms.kModelError: SolveStatus.ERROR,
        ms.kLoadError: SolveStatus.ERROR,
        ms.kPresolveError: SolveStatus.ERROR,
        ms.kObjectiveBound: SolveStatus.ERROR,
        ms.kObjectiveTarget: SolveStatus.ERROR,
        ms.kInterrupt: SolveStatus.ERROR,
        ms.kNotset: SolveStatus.ERROR,
    }


def new_highs() -> Any:
    """A ``highspy.Highs`` instance; HiGHS's banner never reaches standard output.

    HiGHS prints a copyright banner to the process's standard output the first time a ``Highs``
    is built in a process, before any option can turn its output off; a release's stdout is
    the release path alone, at every verbosity (scripts read it). The first construction (the
    only one that prints) runs with file descriptor 1 pointed at a temporary file, and what it
    printed is logged at DEBUG, so ``-v`` shows it on stderr with the other diagnostics. Every
    HiGHS user in the project (this backend, CVXPY's HIGHS, the MPS export) makes its first
    instance here.
    """
    global _banner_done
    import highspy

    with _banner_lock:
        if _banner_done:
            return highspy.Highs()
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            with tempfile.TemporaryFile() as banner:
                os.dup2(banner.fileno(), 1)
                try:
                    h = highspy.Highs()
                finally:
                    os.dup2(saved, 1)
                banner.seek(0)
                text = banner.read().decode("utf-8", "replace").strip()
        finally:
            os.close(saved)
        _banner_done = True
        if text:
            logger.debug("HiGHS banner (kept off stdout): %s", " | ".join(text.splitlines()))
        return h


class HighsBackend(Backend):
    """HiGHS via highspy: deterministic (one thread, fixed seed), silent, time-limited."""

    name = "highs"
    supports_lp = True
    supports_qp = True
    supports_milp = True
    REQUIRED_MODULES = ("highspy",)

    def solve(
        self,
        problem: Problem,
        *,
        time_limit: float = 60.0,
        tolerance: float | None = None,
        **options: Any,
    ) -> SolveResult:
        """Solve with HiGHS; ``options`` are passed to ``Highs.setOptionValue`` verbatim."""
        import highspy

        start = time.perf_counter()
        tol = 1e-8 if tolerance is None else float(tolerance)
        h = new_highs()
        settings: dict[str, Any] = {
            "output_flag": False,
            "threads": 1,
            "random_seed": 0,
            "time_limit": float(time_limit),
            "primal_feasibility_tolerance": tol,
            "dual_feasibility_tolerance": tol,
            "mip_feasibility_tolerance": max(tol, 1e-9),
            "mip_rel_gap": 1e-9,
            "mip_abs_gap": 1e-9,
        }
        settings.update(options)
        for key, value in settings.items():
            h.setOptionValue(key, value)
        self._pass_model(h, problem)
        h.run()
        elapsed = time.perf_counter() - start
        model_status = h.getModelStatus()
        status = _status_map(highspy).get(model_status, SolveStatus.ERROR)
        info = h.getInfo()
        iterations = int(
            info.simplex_iteration_count
            + max(info.ipm_iteration_count, 0)
            + max(info.qp_iteration_count, 0)
        )
        if status is SolveStatus.OPTIMAL and problem.n:
            x = np.asarray(h.getSolution().col_value, dtype=float)
        elif status is SolveStatus.OPTIMAL:
            x = np.zeros(0)
        else:
            logger.debug(
                "highs on %r: model status %s", problem.name, h.modelStatusToString(model_status)
            )
            return failed_result(problem, status, self.name, elapsed, iterations)
        return solved_result(problem, x, self.name, elapsed, iterations, status=status)

    @staticmethod
    def _pass_model(h: Any, problem: Problem) -> None:
        """Hand the whole model to HiGHS in one ``passModel`` call (CSC matrices)."""
        n, m = problem.n, problem.m
        if problem.A is not None and m:
            A = sp.csc_matrix(problem.A)
            a_start = A.indptr.astype(np.int32)
            a_index = A.indices.astype(np.int32)
            a_value = A.data.astype(float)
            row_lb, row_ub = problem.row_lb, problem.row_ub
        else:
            m = 0
            a_start = np.zeros(n + 1, dtype=np.int32)
            a_index = np.zeros(0, dtype=np.int32)
            a_value = np.zeros(0)
            row_lb = row_ub = np.zeros(0)
        integrality = (
            np.zeros(n, dtype=np.int32)
            if problem.integrality is None
            else problem.integrality.astype(np.int32)
        )
        # HiGHS wants +-kHighsInf; numpy inf is accepted and mapped to it.
        common = (
            np.ascontiguousarray(problem.c),
            np.ascontiguousarray(problem.lb),
            np.ascontiguousarray(problem.ub),
            np.ascontiguousarray(row_lb),
            np.ascontiguousarray(row_ub),
            a_start,
            a_index,
            a_value,
        )
        if problem.P is None:
            h.passModel(
                n, m, int(a_value.size), _MATRIX_COLWISE, _MINIMIZE, 0.0, *common, integrality
            )
            return
        Q = sp.tril(problem.P, format="csc")
        Q.sort_indices()
        h.passModel(
            n,
            m,
            int(a_value.size),
            int(Q.nnz),
            _MATRIX_COLWISE,
            _HESSIAN_TRIANGULAR,
            _MINIMIZE,
            0.0,
            *common,
            Q.indptr.astype(np.int32),
            Q.indices.astype(np.int32),
            Q.data.astype(float),
            integrality,
        )
