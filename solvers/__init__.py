"""Solver registry and backends for the estimation passes of TopDown.

One problem type (:class:`Problem`: LP, QP or MILP with sparse matrices), one status enum
(:class:`SolveStatus`), typed errors, and backends for HiGHS, any CVXPY solver, SciPy and the
exact closed-form fast paths. :func:`solve` with ``solver="auto"`` picks the fastest backend
that accepts the problem and never returns a non-optimal answer.

Example: minimise x0 + 2 x1 over [0, 1]^2 subject to x0 + x1 >= 1; the cheaper variable
takes the whole unit.

    >>> import numpy as np, scipy.sparse as sp, solvers
    >>> p = solvers.Problem(
    ...     c=np.array([1.0, 2.0]), lb=np.zeros(2), ub=np.ones(2),
    ...     A=sp.csr_matrix([[1.0, 1.0]]), row_lb=np.array([1.0]), row_ub=np.array([np.inf]),
    ... )
    >>> result = solvers.solve(p)
    >>> result.status.value, result.x.round(6).tolist(), round(result.objective, 6)
    ('optimal', [1.0, 0.0], 1.0)
"""

from solvers.backends.base import Backend, BackendProtocol
from solvers.builders import children_l2_problem, rounding_problem, rounding_solution
from solvers.problem import Problem
from solvers.registry import (
    AUTO_ORDER,
    auto_candidates,
    available,
    get,
    register,
    registered,
    solve,
    unregister,
)
from solvers.status import (
    InfeasibleError,
    NumericalError,
    SolverError,
    SolveResult,
    SolverLimitError,
    SolveStatus,
    UnboundedError,
    UnknownSolverError,
    UnsupportedProblemError,
)

__all__ = [
    "AUTO_ORDER",
    "Backend",
    "BackendProtocol",
    "InfeasibleError",
    "NumericalError",
    "Problem",
    "SolveResult",
    "SolveStatus",
    "SolverError",
    "SolverLimitError",
    "UnboundedError",
    "UnknownSolverError",
    "UnsupportedProblemError",
    "auto_candidates",
    "available",
    "children_l2_problem",
    "get",
    "register",
    "registered",
    "rounding_problem",
    "rounding_solution",
    "solve",
    "unregister",
]
