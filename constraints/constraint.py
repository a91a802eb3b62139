"""The constraint interface and the sparse-row form constraints compile to.

Every constraint the engine sees answers three questions about one node's histogram vector
``x`` (length ``domain.size``, or ``len(cells)`` when only some cells are kept):

- ``rows(domain, cells)``: linear rows ``lb <= A x <= ub`` (``None`` if it adds none);
- ``zero_mask(domain)``: the cells it forces to zero (``None`` if none). The engine removes
  those cells from the problem instead of adding rows: fewer variables, and no equality rows
  that would break the total unimodularity of the rounding LP;
- ``is_invariant``: whether its value is computed from confidential data (a contextual
  constraint, published exactly, outside the DP guarantee, recorded in the ledger).

``LinearRows`` is the one representation of linear rows: ``compile_rows`` and ``joint_rows`` build
it, ``topdown.estimation.node_constraints`` hands it to the estimation tasks (``FamilyTask.rows``),
the passes stack it with their own rows and the release checks it with ``violation``.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from constraints.domain import Domain
from constraints.errors import ConstraintError

__all__ = ["Constraint", "LinearRows"]


@dataclass(frozen=True)
class LinearRows:
    """Sparse linear rows ``lb <= A @ x <= ub`` over one vector, one name per row.

    Args:
        A: ``(r, n)`` matrix; converted to ``scipy.sparse.csr_matrix`` (float64).
        lb: ``(r,)`` lower bounds (``-inf`` for none).
        ub: ``(r,)`` upper bounds (``+inf`` for none); ``lb == ub`` is an equality.
        names: ``r`` row names (the constraint names), used in infeasibility reports.
    """

    A: sp.csr_matrix
    lb: np.ndarray
    ub: np.ndarray
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        A = self.A
        if not sp.issparse(A):
            A = np.atleast_2d(np.asarray(A, dtype=np.float64))
        A = sp.csr_matrix(A, dtype=np.float64)
        lb = np.asarray(self.lb, dtype=np.float64).reshape(-1)
        ub = np.asarray(self.ub, dtype=np.float64).reshape(-1)
        names = tuple(str(n) for n in self.names)
        r = A.shape[0]
        if lb.shape != (r,) or ub.shape != (r,) or len(names) != r:
            raise ConstraintError(
                f"LinearRows: A has {r} rows but lb has {lb.size}, ub {ub.size} and names "
                f"{len(names)}; all must match"
            )
        if np.isnan(lb).any() or np.isnan(ub).any():
            raise ConstraintError("LinearRows: bounds (lb, ub) must not be NaN")
        for arr in (lb, ub):
            arr.setflags(write=False)
        object.__setattr__(self, "A", A)
        object.__setattr__(self, "lb", lb)
        object.__setattr__(self, "ub", ub)
        object.__setattr__(self, "names", names)

    @property
    def n_rows(self) -> int:
        """Number of rows."""
        return int(self.A.shape[0])

    @property
    def n_cols(self) -> int:
        """Length of the vector the rows apply to."""
        return int(self.A.shape[1])

    @property
    def is_equality(self) -> np.ndarray:
        """Boolean per row: ``lb == ub``."""
        return self.lb == self.ub

    @classmethod
    def empty(cls, n: int) -> LinearRows:
        """No rows over a vector of length ``n``.

        One shared (read-only) value per ``n`` and class: a level of 10^5 nodes without
        constraints asks for it once per node, and building a sparse matrix costs ~0.1 ms.
        """
        return _empty_rows(int(n)) if cls is LinearRows else cls(*_empty_parts(int(n)))

    @classmethod
    def stack(cls, parts: Sequence[LinearRows], n: int) -> LinearRows:
        """Rows of several ``LinearRows`` over the same vector of length ``n``, in order."""
        parts = list(parts)
        for p in parts:
            if p.n_cols != n:
                raise ConstraintError(
                    f"LinearRows.stack: rows {p.names} have {p.n_cols} columns, expected {n}"
                )
        if not parts:
            return cls.empty(n)
        return cls(
            sp.vstack([p.A for p in parts], format="csr"),
            np.concatenate([p.lb for p in parts]),
            np.concatenate([p.ub for p in parts]),
            tuple(name for p in parts for name in p.names),
        )

    def restrict(self, cells: np.ndarray | None) -> LinearRows:
        """The same rows over the kept ``cells`` only (the others are known to be zero)."""
        if cells is None:
            return self
        return LinearRows(self.A[:, cells], self.lb, self.ub, self.names)

    def violation(self, x: np.ndarray) -> np.ndarray:
        """Per row, how far ``A @ x`` lies outside ``[lb, ub]`` (0 where satisfied)."""
        ax = self.A @ np.asarray(x, dtype=np.float64)
        return np.maximum(self.lb - ax, 0.0) + np.maximum(ax - self.ub, 0.0)

    def satisfied(self, x: np.ndarray, *, tol: float = 1e-9) -> bool:
        """Whether every row holds at ``x`` to within ``tol``."""
        return bool(np.all(self.violation(x) <= tol))


class Constraint(ABC):
    """The interface every constraint implements (aggregate and contextual).

    Attributes:
        name: readable, unique enough to identify it in errors and the ledger.
        is_invariant: True for contextual constraints (their value comes from confidential
            data and is published exactly); such constraints must be bound (``bind``) to
            their measured value before they compile to rows.
    """

    name: str
    is_invariant: ClassVar[bool] = False

    @abstractmethod
    def rows(self, domain: Domain, cells: np.ndarray | None = None) -> LinearRows | None:
        """Linear rows over one node's vector (columns = ``cells`` if given), or None."""

    @abstractmethod
    def zero_mask(self, domain: Domain) -> np.ndarray | None:
        """Boolean ``(domain.size,)`` mask of the cells forced to zero, or None."""


def check_cells(domain: Domain, cells: np.ndarray | Sequence[int] | None) -> np.ndarray | None:
    """Validate kept-cell indices: 1-D integers in ``[0, domain.size)``, no repeats."""
    if cells is None:
        return None
    arr = np.asarray(cells)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ConstraintError(
            f"cells (dtype {arr.dtype}, shape {arr.shape}) must be a 1-D array of integer "
            "cell indices"
        )
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= domain.size):
        raise ConstraintError(
            f"cells must lie in [0, {domain.size}) (the domain's cells); got min {arr.min()}, "
            f"max {arr.max()}"
        )
    if np.unique(arr).size != arr.size:
        raise ConstraintError("cells must not repeat a cell index")
    return arr


@functools.lru_cache(maxsize=4096)
def _empty_rows(n: int) -> LinearRows:
    A, lb, ub, names = _empty_parts(n)
    for part in (A.data, A.indices, A.indptr, lb, ub):
        part.flags.writeable = False
    return LinearRows(A, lb, ub, names)


def _empty_parts(n: int) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray, tuple[str, ...]]:
    return sp.csr_matrix((0, n)), np.zeros(0), np.zeros(0), ()
