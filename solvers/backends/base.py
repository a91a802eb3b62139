"""The extension point every solver backend implements.

A backend is one class with a ``name``, capability flags, the modules it needs and two
methods. Subclassing :class:`Backend` is the short way (it supplies the capability check and
the install check); any object with the same attributes can also be registered, which keeps
third-party backends (e.g. a licensed commercial solver) free of a dependency on this base.
"""

from __future__ import annotations

import importlib.util
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from solvers.problem import Problem
from solvers.status import SolveResult, SolveStatus

__all__ = [
    "Backend",
    "BackendProtocol",
    "decline_reason",
    "failed_result",
    "kind_refusal",
    "solved_result",
]


@runtime_checkable
class BackendProtocol(Protocol):
    """What the registry needs from a backend (structural: no inheritance required)."""

    @property
    def name(self) -> str: ...

    @property
    def supports_lp(self) -> bool: ...

    @property
    def supports_qp(self) -> bool: ...

    @property
    def supports_milp(self) -> bool: ...

    @property
    def REQUIRED_MODULES(self) -> tuple[str, ...]: ...  # noqa: N802 - CVXPY's spelling

    def accepts(self, problem: Problem) -> bool | str:
        """True to accept; False or a non-empty reason string to decline."""

    def solve(self, problem: Problem, **options: Any) -> SolveResult:
        """Solve and return a result whose status is mapped to :class:`SolveStatus`."""


class Backend:
    """Convenience base class: capability flags, install check and a kind-based ``accepts``.

    Subclasses set the class attributes and implement :meth:`solve`; they override
    :meth:`accepts` only to decline structures they cannot take beyond the problem kind.
    ``solve`` receives ``time_limit`` (seconds) and ``tolerance`` (None = backend default)
    as keyword options, plus any backend-specific options passed through by the caller.
    """

    name: str = ""
    supports_lp: bool = False
    supports_qp: bool = False
    supports_milp: bool = False
    REQUIRED_MODULES: ClassVar[tuple[str, ...]] = ()

    def is_installed(self) -> bool:
        """True when every required module can be imported (checked without importing)."""
        return all(importlib.util.find_spec(mod) is not None for mod in self.REQUIRED_MODULES)

    def accepts(self, problem: Problem) -> bool | str:
        """Accept by problem kind; the registry reads this before ``auto`` dispatch."""
        return kind_refusal(self, problem, self.name) or True

    def solve(self, problem: Problem, **options: Any) -> SolveResult:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<backend {self.name}>"


_KIND_FLAG = {"LP": "supports_lp", "QP": "supports_qp", "MILP": "supports_milp"}


def kind_refusal(backend: object, problem: Problem, name: str) -> str | None:
    """The capability check: None when ``backend``'s flags cover the problem's kind.

    The registry asks it before ``accepts`` (a third-party backend may not check its own
    flags) and :meth:`Backend.accepts` uses it as its default verdict.
    """
    if getattr(backend, _KIND_FLAG[problem.kind], False):
        return None
    return f"{name} does not support {problem.kind} problems"


def decline_reason(verdict: bool | str, backend_name: str, problem: Problem) -> str | None:
    """Normalise an ``accepts`` verdict: None when accepted, else a reason string.

    A bare ``False`` gets a generic reason; a string is always a refusal, even though it is
    truthy, because backends explain their refusals with it.
    """
    if verdict is True:
        return None
    if isinstance(verdict, str) and verdict:
        return verdict
    if verdict:
        return None
    return f"{backend_name} declines {problem.kind} problem {problem.name!r}"


def solved_result(
    problem: Problem,
    x: np.ndarray,
    solver: str,
    elapsed: float,
    iterations: int | None = None,
    status: SolveStatus = SolveStatus.OPTIMAL,
) -> SolveResult:
    """A result carrying an answer: the objective is computed from ``problem`` itself, the
    same way for every backend (the registry then checks the answer's rows and bounds)."""
    return SolveResult(
        status=status,
        x=x,
        objective=problem.objective_value(x),
        time=elapsed,
        solver=solver,
        problem=problem.name,
        iterations=iterations,
    )


def failed_result(
    problem: Problem,
    status: SolveStatus,
    solver: str,
    elapsed: float,
    iterations: int | None = None,
) -> SolveResult:
    """A result carrying a failure status (x is NaN) for the registry to turn into an error."""
    return SolveResult(
        status=status,
        x=np.full(problem.n, np.nan),
        objective=float("nan"),
        time=elapsed,
        solver=solver,
        problem=problem.name,
        iterations=iterations,
    )
