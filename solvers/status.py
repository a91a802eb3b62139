"""Solve status enum, solve results and the typed solver errors.

Every backend translates its own status codes into :class:`SolveStatus` in one place, and
:func:`raise_for_status` turns every non-optimal status into the matching typed error. The
engine therefore never sees a "the call returned" result that is not a certified optimum: a
failure always carries the status, the backend name and the problem name (which encodes the
node and the pass, e.g. ``"level 2 / parent '06' / L2 pass"``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from mechanisms.errors import TopDownError

__all__ = [
    "SolveStatus",
    "SolveResult",
    "SolverError",
    "InfeasibleError",
    "UnboundedError",
    "SolverLimitError",
    "NumericalError",
    "UnknownSolverError",
    "UnsupportedProblemError",
    "error_for_status",
    "raise_for_status",
]


class SolveStatus(enum.Enum):
    """Outcome of a solve, common to all backends.

    Only ``OPTIMAL`` (and ``OPTIMAL_INACCURATE`` when the caller explicitly accepts it) may
    reach the caller as a result; all others become exceptions.
    """

    OPTIMAL = "optimal"
    OPTIMAL_INACCURATE = "optimal_inaccurate"
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    INFEASIBLE_OR_UNBOUNDED = "infeasible_or_unbounded"
    TIME_LIMIT = "time_limit"
    ITERATION_LIMIT = "iteration_limit"
    NUMERICAL_ERROR = "numerical_error"
    UNSUPPORTED = "unsupported"
    ERROR = "error"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SolveResult:
    """A certified solution returned by :func:`solvers.solve`.

    Attributes:
        status: ``OPTIMAL`` (or ``OPTIMAL_INACCURATE`` when the caller allowed it).
        x: primal solution, shape ``(n,)``.
        objective: objective value at ``x``, including the problem's constant ``offset``.
        time: wall-clock seconds spent in the backend (model building included).
        solver: registry name of the backend that produced it.
        problem: the problem's name, for provenance in logs and reports.
        iterations: backend iteration count when the backend reports one.
    """

    status: SolveStatus
    x: np.ndarray
    objective: float
    time: float
    solver: str
    problem: str
    iterations: int | None = None


class SolverError(TopDownError, RuntimeError):
    """A solve did not produce an optimal solution (a project error: ``TopDownError``).

    Attributes:
        status: the mapped :class:`SolveStatus`.
        solver: the backend's registry name.
        problem: the problem's name (node and pass), so a failure in a level of 10^5 nodes
            can be traced to the one that caused it.
    """

    def __init__(
        self,
        message: str,
        *,
        status: SolveStatus = SolveStatus.ERROR,
        solver: str = "",
        problem: str = "",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.solver = solver
        self.problem = problem


class InfeasibleError(SolverError):
    """The constraints admit no solution (status INFEASIBLE or INFEASIBLE_OR_UNBOUNDED)."""


class UnboundedError(SolverError):
    """The objective is unbounded below on the feasible set."""


class SolverLimitError(SolverError):
    """The backend stopped at a time or iteration limit before proving optimality."""


class NumericalError(SolverError):
    """The backend hit numerical trouble, or returned an inaccurate optimum not accepted."""


class UnknownSolverError(SolverError, ValueError):
    """The requested backend name is not registered or not installed."""


class UnsupportedProblemError(SolverError, ValueError):
    """The named backend cannot take this kind of problem (e.g. closed_form on a coupled QP)."""


_ERROR_FOR_STATUS: dict[SolveStatus, type[SolverError]] = {
    SolveStatus.INFEASIBLE: InfeasibleError,
    SolveStatus.INFEASIBLE_OR_UNBOUNDED: InfeasibleError,
    SolveStatus.UNBOUNDED: UnboundedError,
    SolveStatus.TIME_LIMIT: SolverLimitError,
    SolveStatus.ITERATION_LIMIT: SolverLimitError,
    SolveStatus.NUMERICAL_ERROR: NumericalError,
    SolveStatus.OPTIMAL_INACCURATE: NumericalError,
    SolveStatus.UNSUPPORTED: UnsupportedProblemError,
}


def error_for_status(
    status: SolveStatus, *, solver: str, problem: str, detail: str = ""
) -> SolverError:
    """Build the typed error for a non-optimal status, with the standard message.

    INFEASIBLE_OR_UNBOUNDED maps to :class:`InfeasibleError` because, for this project's
    problems (bounded below objectives: least squares, L1 distances), unboundedness is not
    possible and infeasibility is the actionable diagnosis; the status attribute keeps the
    exact code.
    """
    cls = _ERROR_FOR_STATUS.get(status, SolverError)
    message = f"{solver} on problem {problem!r}: {status}"
    if detail:
        message += f" ({detail})"
    return cls(message, status=status, solver=solver, problem=problem)


def raise_for_status(
    result: SolveResult, *, allow_inaccurate: bool = False, detail: str = ""
) -> SolveResult:
    """Return ``result`` if its status is acceptable, otherwise raise the typed error."""
    if result.status is SolveStatus.OPTIMAL:
        return result
    if result.status is SolveStatus.OPTIMAL_INACCURATE and allow_inaccurate:
        return result
    if result.status is SolveStatus.OPTIMAL_INACCURATE:
        detail = detail or "pass allow_inaccurate=True to accept it"
    raise error_for_status(
        result.status, solver=result.solver, problem=result.problem, detail=detail
    )
