"""The solver registry: an ordered name -> backend map, ``auto`` dispatch and :func:`solve`.

Built-in backends are registered on first use (``closed_form``, ``highs``, one
``cvxpy:<NAME>`` per solver CVXPY reports installed, ``scipy``); a backend whose modules are
missing is simply not available. ``auto`` walks a per-kind preference order, set from the
benchmark in ``benchmarks/solvers`` (see :data:`AUTO_ORDER`), and takes the first installed
backend whose ``accepts`` says yes. :func:`solve` never returns a non-optimal result: every
other status is raised as the typed error from :mod:`solvers.status`.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from typing import Any

import numpy as np

from solvers.backends.base import BackendProtocol, decline_reason, kind_refusal
from solvers.problem import Problem
from solvers.status import (
    InfeasibleError,
    SolverError,
    SolveResult,
    SolverLimitError,
    SolveStatus,
    UnboundedError,
    UnknownSolverError,
    error_for_status,
    raise_for_status,
)

__all__ = [
    "AUTO_ORDER",
    "auto_candidates",
    "available",
    "get",
    "register",
    "registered",
    "solve",
    "unregister",
]

logger = logging.getLogger(__name__)

#: Preference of ``auto`` per problem kind (names not listed follow in registration order).
#: Measured with benchmarks/solvers (one core, 60 s limit): the closed form is exact and takes
#: 0.1 s at 10^6 variables when it applies. For coupled QPs Clarabel (interior point) is first:
#: 0.5 s at 6e4 and 14 s at 10^6 separable variables, 23 s at 1.3e5 lifted coupled variables,
#: always feasible to 1e-10. OSQP is 1-3x faster on coupled problems but its polish can fail
#: silently, leaving row violations up to 2.5e-3 and errors of 0.1 in x under an "optimal"
#: status, so it is the fallback. HiGHS's active-set QP takes 13 s at 6400 variables and hits
#: 60 s at 5e4. For LP/MILP HiGHS called directly: 3 s at 3e5 and 21-25 s at 10^6 variables on
#: the rounding problems; SciPy's milp (HiGHS inside) is comparable, CVXPY adds 2x overhead.
#: Controlled rounding (child-total rows) goes to the closed form's network flow where it is
#: faster (children^2 <= 4 cells): 0.18 s against HiGHS's 2.0 s (MILP) or 0.4 s (its LP
#: relaxation, what the engine asks first) at 30 x 2016.
AUTO_ORDER: dict[str, tuple[str, ...]] = {
    "QP": (
        "closed_form",
        "cvxpy:CLARABEL",
        "cvxpy:OSQP",
        "highs",
        "cvxpy:HIGHS",
        "cvxpy:SCS",
        "scipy",
    ),
    "LP": (
        "closed_form",
        "highs",
        "cvxpy:HIGHS",
        "scipy",
        "cvxpy:CLARABEL",
        "cvxpy:OSQP",
        "cvxpy:SCS",
    ),
    "MILP": ("closed_form", "highs", "cvxpy:HIGHS", "scipy"),
}

_BUILTIN_ORDER = (
    "closed_form",
    "highs",
    "cvxpy:CLARABEL",
    "cvxpy:OSQP",
    "cvxpy:HIGHS",
    "cvxpy:SCS",
)

_lock = threading.RLock()
_backends: dict[str, BackendProtocol] = {}
_builtins_loaded = False
_preferred: set[str] = set()


def _installed(backend: BackendProtocol) -> bool:
    check = getattr(backend, "is_installed", None)
    if callable(check):
        return bool(check())
    return all(importlib.util.find_spec(mod) is not None for mod in backend.REQUIRED_MODULES)


def _load_builtins() -> None:
    """Register the built-in backends once, in the documented preference order."""
    global _builtins_loaded
    with _lock:
        if _builtins_loaded:
            return
        from solvers.backends.closed_form import ClosedFormBackend
        from solvers.backends.cvxpy_backend import CvxpyBackend, cvxpy_solver_names
        from solvers.backends.highs import HighsBackend
        from solvers.backends.scipy_backend import ScipyBackend

        found: dict[str, BackendProtocol] = {}
        for backend in (ClosedFormBackend(), HighsBackend()):
            if backend.is_installed():
                found[backend.name] = backend
        if importlib.util.find_spec("cvxpy") is not None:
            try:
                names = cvxpy_solver_names()
            except ImportError as exc:  # a broken cvxpy install must not break the registry
                logger.warning("cvxpy is present but failed to import: %s", exc)
                names = []
            for solver in names:
                found[f"cvxpy:{solver.upper()}"] = CvxpyBackend(solver)
        scipy_backend = ScipyBackend()
        if scipy_backend.is_installed():
            found[scipy_backend.name] = scipy_backend
        ordered = [nm for nm in _BUILTIN_ORDER if nm in found]
        ordered += [nm for nm in found if nm not in ordered and nm != "scipy"]
        ordered += ["scipy"] if "scipy" in found else []
        user = dict(_backends)
        _backends.clear()
        for nm in ordered:
            _backends[nm] = found[nm]
        _backends.update({nm: b for nm, b in user.items() if nm not in _backends})
        _builtins_loaded = True


def register(
    backend: BackendProtocol | type, name: str | None = None, *, prefer: bool = False
) -> BackendProtocol:
    """Add a backend (instance or zero-argument class) under ``name`` (default its ``name``).

    Args:
        backend: an object with ``name``, ``supports_lp/qp/milp``, ``REQUIRED_MODULES``,
            ``accepts(problem)`` and ``solve(problem, **options)``, or a class building one.
        name: registry name; replaces an existing backend of that name.
        prefer: put it first in ``auto``'s order (e.g. a licensed solver); by default it is
            tried after the built-ins of the same capability.

    Returns:
        The registered instance.
    """
    instance = backend() if isinstance(backend, type) else backend
    key = name or getattr(instance, "name", "")
    missing = [
        a
        for a in ("supports_lp", "supports_qp", "supports_milp", "accepts", "solve")
        if not hasattr(instance, a)
    ]
    if not key or missing:
        raise TypeError(f"backend {instance!r} lacks {missing or ['name']}: see solvers.Backend")
    if not hasattr(instance, "REQUIRED_MODULES"):
        raise TypeError(f"backend {key!r} lacks REQUIRED_MODULES: see solvers.Backend")
    _load_builtins()
    with _lock:
        _backends.pop(key, None)
        if prefer:
            items = [(key, instance), *_backends.items()]
            _backends.clear()
            _backends.update(items)
            _preferred.add(key)
        else:
            _backends[key] = instance
    return instance


def unregister(name: str) -> None:
    """Remove ``name`` from the registry (a no-op when absent); mainly for tests and plugins."""
    _load_builtins()
    with _lock:
        _backends.pop(name, None)
        _preferred.discard(name)


def available() -> list[str]:
    """Names of the installed backends, in preference order."""
    _load_builtins()
    with _lock:
        return [nm for nm, b in _backends.items() if _installed(b)]


def registered() -> list[str]:
    """Every registered name, installed or not (for conformance test parametrisation)."""
    _load_builtins()
    with _lock:
        return list(_backends)


def get(name: str, *, problem: str = "") -> BackendProtocol:
    """The backend registered as ``name`` (``problem``: the name to put in an error).

    Raises:
        UnknownSolverError: the name is not registered or its modules are not installed;
            the message lists the available names.
    """
    _load_builtins()
    with _lock:
        backend = _backends.get(name)
    if backend is None or not _installed(backend):
        why = "is not installed" if backend is not None else "is not a registered solver"
        raise UnknownSolverError(
            f"solver {name!r} {why}"
            + (f" (problem {problem!r})" if problem else "")
            + f"; available: {available()}",
            status=SolveStatus.ERROR,
            solver=name,
            problem=problem,
        )
    return backend


def _refusal(name: str, backend: BackendProtocol, problem: Problem) -> str | None:
    """Why ``backend`` cannot take ``problem``: its capability flags first, then ``accepts``."""
    return kind_refusal(backend, problem, name) or decline_reason(
        backend.accepts(problem), name, problem
    )


def _auto_order(problem: Problem) -> list[str]:
    """Installed backends in ``auto`` preference order for the problem's kind."""
    names = available()
    order = [nm for nm in names if nm in _preferred]
    order += [nm for nm in AUTO_ORDER.get(problem.kind, ()) if nm in names and nm not in order]
    order += [nm for nm in names if nm not in order]
    return order


def _accepting(problem: Problem):
    """Backends that accept ``problem``, lazily: ``solve`` asks only until one succeeds."""
    for nm in _auto_order(problem):
        with _lock:
            backend = _backends[nm]
        if _refusal(nm, backend, problem) is None:
            yield nm, backend


def auto_candidates(problem: Problem) -> list[str]:
    """Installed backends accepting ``problem``, in ``auto`` order (for logs and benchmarks)."""
    return [nm for nm, _ in _accepting(problem)]


def _checked(result: SolveResult, problem: Problem, allow_inaccurate: bool) -> SolveResult:
    result = raise_for_status(result, allow_inaccurate=allow_inaccurate)
    x = np.asarray(result.x, dtype=float)
    if x.shape != (problem.n,) or not np.isfinite(x).all():
        raise error_for_status(
            SolveStatus.NUMERICAL_ERROR,
            solver=result.solver,
            problem=problem.name,
            detail=f"solution has shape {x.shape} or non-finite entries",
        )
    violation = problem.max_violation(x)
    scale = 1.0 + float(np.max(np.abs(x), initial=0.0))
    if violation > 1e-5 * scale:
        # "optimal" with rows broken is not an optimum (OSQP's polish can do this): raise, so
        # that ``auto`` moves on and a named solver's caller hears of it
        raise error_for_status(
            SolveStatus.NUMERICAL_ERROR,
            solver=result.solver,
            problem=problem.name,
            detail=f"reported optimal, but the solution violates the constraints by "
            f"{violation:.3g}",
        )
    return result


def solve(
    problem: Problem,
    solver: str = "auto",
    *,
    strict: bool = True,
    time_limit: float = 60.0,
    tolerance: float | None = None,
    allow_inaccurate: bool = False,
    **options: Any,
) -> SolveResult:
    """Solve ``problem`` and return a certified optimum, or raise the typed error.

    Args:
        problem: the model.
        solver: a registry name or ``"auto"`` (first accepting backend in :data:`AUTO_ORDER`).
        strict: with a named ``solver``, raise when it declines the problem; with
            ``strict=False`` a declined problem goes to ``auto`` instead (``result.solver``
            says which backend solved it). A named backend that accepts and then fails still
            raises: only its refusal is handed on.
        time_limit: seconds allowed to the backend; hitting it raises ``SolverLimitError``.
        tolerance: feasibility/optimality tolerance; None uses each backend's default
            (1e-8 for HiGHS and Clarabel, 1e-7 for the first-order OSQP and SCS).
        allow_inaccurate: accept OPTIMAL_INACCURATE instead of raising ``NumericalError``.
        **options: passed to the backend verbatim (e.g. HiGHS option names).

    Raises:
        InfeasibleError, UnboundedError, SolverLimitError, NumericalError: the mapped status.
        UnknownSolverError: unknown or uninstalled ``solver``.
        UnsupportedProblemError: the named backend declines the problem (when ``strict``),
            or no backend accepts it under ``auto``.
    """
    kwargs = dict(options, time_limit=time_limit, tolerance=tolerance)
    if solver != "auto":
        backend = get(solver, problem=problem.name)
        reason = _refusal(solver, backend, problem)
        if reason is None:
            return _checked(backend.solve(problem, **kwargs), problem, allow_inaccurate)
        if strict:
            raise error_for_status(
                SolveStatus.UNSUPPORTED, solver=solver, problem=problem.name, detail=reason
            )
        logger.debug("%s; auto solves %r instead", reason, problem.name)
    last_error: SolverError | None = None
    for name, backend in _accepting(problem):
        try:
            result = _checked(backend.solve(problem, **kwargs), problem, allow_inaccurate)
        except (InfeasibleError, UnboundedError, SolverLimitError):
            raise  # a property of the problem (or of the time given), not of this backend
        except SolverError as exc:
            logger.warning("%s; trying the next backend", exc)
            last_error = exc
            continue
        logger.debug("auto chose %s for %r (%.3f s)", name, problem.name, result.time)
        return result
    if last_error is not None:
        raise last_error
    raise error_for_status(
        SolveStatus.UNSUPPORTED,
        solver="auto",
        problem=problem.name,
        detail=f"no installed backend accepts a {problem.kind}; available: {available()}",
    )
