"""The one problem representation every backend takes.

A :class:`Problem` is an LP, a convex QP or a MILP in the form

    minimise    1/2 x'Px + c'x + offset
    subject to  row_lb <= A x <= row_ub,   lb <= x <= ub,   x_i integer where integrality[i]

It is an immutable value validated on construction, so a malformed model (wrong shapes, NaN
from an upstream bug, crossed bounds, a non-symmetric Hessian) fails at the point where it was
built, with the problem's name, rather than deep inside a solver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike

__all__ = ["Problem", "ProblemKind", "SparseMatrix"]

ProblemKind = Literal["LP", "QP", "MILP"]

#: The sparse formats the builders and :class:`Problem` accept (converted to CSR/CSC inside).
SparseMatrix: TypeAlias = (
    sp.csr_matrix | sp.csr_array | sp.csc_matrix | sp.csc_array | sp.coo_matrix | sp.coo_array
)

_SYMMETRY_RTOL = 1e-10


def _vector(value: ArrayLike, size: int, field: str, name: str) -> np.ndarray:
    """Convert ``value`` to a read-only float vector of length ``size`` without NaN."""
    if np.ndim(value) == 0:
        arr = np.full(size, value, dtype=float)
    else:
        arr = np.array(value, dtype=float).reshape(-1)
    if arr.shape != (size,):
        raise ValueError(f"problem {name!r}: {field} has shape {arr.shape}, expected ({size},)")
    if np.isnan(arr).any():
        first = int(np.flatnonzero(np.isnan(arr))[0])
        raise ValueError(f"problem {name!r}: {field} contains NaN at index {first}")
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class Problem:
    """A linear, quadratic or mixed-integer linear program.

    Attributes:
        c: linear objective, shape ``(n,)``.
        lb: variable lower bounds (``-inf`` allowed), shape ``(n,)``.
        ub: variable upper bounds (``+inf`` allowed), shape ``(n,)``.
        P: positive semidefinite Hessian ``(n, n)`` (CSC) or None for an LP/MILP.
        A: constraint matrix ``(m, n)`` (CSR) or None when there are no rows.
        row_lb: row lower bounds ``(m,)`` (``-inf`` allowed).
        row_ub: row upper bounds ``(m,)``; an equality row has ``row_lb == row_ub``.
        integrality: boolean ``(n,)``, True marks an integer variable; None means continuous.
        offset: constant added to the objective (e.g. ``sum w y^2`` of a least squares fit),
            so that reported objectives are the real weighted sums of squares.
        name: human-readable provenance (node and pass), copied into every error message.
        row_names: optional labels of the rows, for infeasibility reports.

    Raises:
        ValueError: on wrong shapes, NaN, ``lb > ub``, ``row_lb > row_ub``, a non-square or
            non-symmetric ``P``, or integer variables together with a quadratic objective
            (MIQP is not supported by the registered backends).
    """

    c: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    P: sp.csc_matrix | None = None
    A: sp.csr_matrix | sp.csr_array | None = None
    row_lb: np.ndarray | None = None
    row_ub: np.ndarray | None = None
    integrality: np.ndarray | None = None
    offset: float = 0.0
    name: str = ""
    row_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        name = self.name
        c = np.array(self.c, dtype=float).reshape(-1)
        n = c.shape[0]
        setattr_ = object.__setattr__
        setattr_(self, "c", _vector(c, n, "c", name))
        if np.isinf(self.c).any():
            raise ValueError(f"problem {name!r}: c must be finite")
        setattr_(self, "lb", _vector(self.lb, n, "lb", name))
        setattr_(self, "ub", _vector(self.ub, n, "ub", name))
        bad = np.flatnonzero(self.lb > self.ub)
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"problem {name!r}: lb[{i}] ({self.lb[i]}) must be <= ub[{i}] ({self.ub[i]})"
            )
        if self.P is not None:
            P = sp.csc_matrix(self.P, dtype=float)
            if P.shape != (n, n):
                raise ValueError(f"problem {name!r}: P has shape {P.shape}, expected ({n}, {n})")
            if np.isnan(P.data).any() or np.isinf(P.data).any():
                raise ValueError(f"problem {name!r}: P contains NaN or inf")
            P.eliminate_zeros()
            P.sort_indices()
            asym = abs(P - P.T)
            scale = max(abs(P).max() if P.nnz else 0.0, 1.0)
            if asym.nnz and asym.max() > _SYMMETRY_RTOL * scale:
                raise ValueError(
                    f"problem {name!r}: P must be symmetric (max |P - P'| = {asym.max():.3g})"
                )
            setattr_(self, "P", P if P.nnz else None)
        self._validate_rows(n, name)
        if self.integrality is not None:
            integ = np.asarray(self.integrality, dtype=bool).reshape(-1)
            if integ.shape != (n,):
                raise ValueError(
                    f"problem {name!r}: integrality has shape {integ.shape}, expected ({n},)"
                )
            integ = integ.copy()
            integ.setflags(write=False)
            setattr_(self, "integrality", integ if integ.any() else None)
        if self.integrality is not None and self.P is not None:
            raise ValueError(
                f"problem {name!r}: integer variables with a quadratic objective (MIQP) are not "
                "supported"
            )
        setattr_(self, "offset", float(self.offset))
        if not np.isfinite(self.offset):
            raise ValueError(f"problem {name!r}: offset ({self.offset}) must be finite")

    def _validate_rows(self, n: int, name: str) -> None:
        setattr_ = object.__setattr__
        if self.A is None:
            has_lb = self.row_lb is not None and np.size(self.row_lb) > 0
            has_ub = self.row_ub is not None and np.size(self.row_ub) > 0
            if has_lb or has_ub:
                raise ValueError(f"problem {name!r}: row bounds given without A")
            setattr_(self, "row_lb", None)
            setattr_(self, "row_ub", None)
            if self.row_names:
                raise ValueError(f"problem {name!r}: row_names given without A")
            return
        A = sp.csr_matrix(self.A, dtype=float)
        if A.ndim != 2 or A.shape[1] != n:
            raise ValueError(f"problem {name!r}: A has shape {A.shape}, expected (m, {n})")
        if np.isnan(A.data).any() or np.isinf(A.data).any():
            raise ValueError(f"problem {name!r}: A contains NaN or inf")
        A.sort_indices()
        m = A.shape[0]
        row_lb = _vector(
            np.full(m, -np.inf) if self.row_lb is None else self.row_lb, m, "row_lb", name
        )
        row_ub = _vector(
            np.full(m, np.inf) if self.row_ub is None else self.row_ub, m, "row_ub", name
        )
        setattr_(self, "A", A)
        setattr_(self, "row_lb", row_lb)
        setattr_(self, "row_ub", row_ub)
        bad = np.flatnonzero(row_lb > row_ub)
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"problem {name!r}: row_lb[{i}] ({row_lb[i]}) must be <= row_ub[{i}] ({row_ub[i]})"
            )
        if self.row_names is not None:
            names = tuple(str(s) for s in self.row_names)
            if len(names) != m:
                raise ValueError(
                    f"problem {name!r}: row_names has {len(names)} entries, expected {m}"
                )
            setattr_(self, "row_names", names)

    @property
    def n(self) -> int:
        """Number of variables."""
        return int(self.c.shape[0])

    @property
    def m(self) -> int:
        """Number of constraint rows (0 without A)."""
        return 0 if self.A is None else int(self.A.shape[0])

    @property
    def kind(self) -> ProblemKind:
        """``"MILP"`` if any variable is integer, ``"QP"`` if there is a Hessian, else ``"LP"``."""
        if self.integrality is not None:
            return "MILP"
        if self.P is not None:
            return "QP"
        return "LP"

    def objective_value(self, x: np.ndarray) -> float:
        """Objective ``1/2 x'Px + c'x + offset`` at ``x``; backends use it so all report alike."""
        x = np.asarray(x, dtype=float)
        value = float(self.c @ x) + self.offset
        if self.P is not None:
            value += 0.5 * float(x @ (self.P @ x))
        return value

    def max_violation(self, x: np.ndarray) -> float:
        """Largest violation of bounds, rows and integrality at ``x`` (0 when feasible)."""
        x = np.asarray(x, dtype=float)
        worst = float(np.max(np.maximum(self.lb - x, 0.0), initial=0.0))
        worst = max(worst, float(np.max(np.maximum(x - self.ub, 0.0), initial=0.0)))
        if self.A is not None and self.m:
            ax = self.A @ x
            worst = max(worst, float(np.max(np.maximum(self.row_lb - ax, 0.0), initial=0.0)))
            worst = max(worst, float(np.max(np.maximum(ax - self.row_ub, 0.0), initial=0.0)))
        if self.integrality is not None:
            xi = x[self.integrality]
            worst = max(worst, float(np.max(np.abs(xi - np.round(xi)), initial=0.0)))
        return worst

    def __repr__(self) -> str:
        return f"Problem(name={self.name!r}, kind={self.kind}, n={self.n}, m={self.m})"
