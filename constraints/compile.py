"""Compile constraints to the forms the estimators consume: zero masks, sparse rows, CVXPY.

All three targets come from the same expression masks, so they agree by construction (the
property tests in ``tests/test_constraint_properties.py`` check it against a dense reference).

- ``zero_mask``: the union of the cells forced to zero (structural zeros and bare
  expressions); the engine removes them from the problem.
- ``compile_rows``: one node's aggregate constraints as ``LinearRows`` over its vector,
  optionally restricted to the kept ``cells`` (the dropped cells are known to be zero, so the
  bounds are unchanged).
- ``joint_rows``: the rows of a parent's ``k`` children over their joint, child-major vector.
- ``to_cvxpy``: rows and zero cells as CVXPY constraints on a variable (CVXPY is imported
  only here, only when called).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from constraints.aggregate_constraints import as_constraint
from constraints.constraint import Constraint, LinearRows, check_cells
from constraints.domain import Domain
from constraints.errors import ConstraintError
from constraints.logical_expressions.base import Expression

if TYPE_CHECKING:  # pragma: no cover
    import cvxpy as cp

__all__ = ["LinearRows", "compile_rows", "zero_mask", "joint_rows", "to_cvxpy"]

logger = logging.getLogger(__name__)


def _normalise(constraints: Iterable[Constraint | Expression]) -> list[Constraint]:
    if isinstance(constraints, (Constraint, Expression)):
        constraints = [constraints]
    return [as_constraint(c) for c in constraints]


def zero_mask(constraints: Iterable[Constraint | Expression], domain: Domain) -> np.ndarray:
    """Boolean ``(domain.size,)``: the cells some constraint forces to zero (their union)."""
    out = np.zeros(domain.size, dtype=bool)
    for c in _normalise(constraints):
        m = c.zero_mask(domain)
        if m is not None:
            out |= m
    return out


def compile_rows(
    constraints: Iterable[Constraint | Expression],
    domain: Domain,
    *,
    cells: np.ndarray | Sequence[int] | None = None,
) -> LinearRows:
    """The rows of one node's constraints, in the order given.

    Args:
        constraints: aggregate constraints (bound invariants included); structural zeros and
            bare expressions are accepted and add no row (see ``zero_mask``).
        domain: the query domain.
        cells: optional kept cell indices; the result has one column per kept cell, in this
            order. Cells left out are known to be zero.

    Raises:
        ConstraintError: an unbound contextual constraint (naming it), or bad ``cells``.
    """
    kept = check_cells(domain, cells)
    n = domain.size if kept is None else kept.size
    parts = []
    for c in _normalise(constraints):
        if c.is_invariant:
            raise ConstraintError(
                f"contextual constraint {c.name} must be bound to its measured value "
                "(constraint.bind(value)) before it compiles to rows"
            )
        r = c.rows(domain, kept)
        if r is not None:
            parts.append(r)
    rows = LinearRows.stack(parts, n)
    logger.debug("compiled %d rows over %d columns", rows.n_rows, n)
    return rows


def joint_rows(
    per_child: Sequence[LinearRows],
    n: int,
    *,
    labels: Sequence[Hashable] | None = None,
) -> LinearRows:
    """Rows of ``k`` children over their joint vector, child-major.

    Child ``c`` occupies columns ``c * n .. c * n + n - 1``; its rows keep their bounds. Row
    names are prefixed with the child's label (``"06: SumEqual(AGE > 99, 0)"``) when
    ``labels`` is given, so an infeasibility report names the child.

    Raises:
        ConstraintError: a child's rows do not have ``n`` columns, or ``labels`` does not have
            one label per child.
    """
    per_child = list(per_child)
    if labels is not None and len(labels) != len(per_child):
        raise ConstraintError(
            f"labels has {len(labels)} entries but there are {len(per_child)} children"
        )
    for i, r in enumerate(per_child):
        if r.n_cols != n:
            who = labels[i] if labels is not None else i
            raise ConstraintError(
                f"rows of child {who!r} have {r.n_cols} columns, expected n = {n}"
            )
    k = len(per_child)
    if k == 0:
        return LinearRows.empty(0)
    if not any(r.n_rows for r in per_child):  # the common case: no child has rows
        return LinearRows.empty(k * n)
    A = sp.csr_matrix(sp.block_diag([r.A for r in per_child], format="csr"))
    if A.shape[1] != k * n:  # block_diag of empty row blocks keeps the column count
        A = sp.csr_matrix(A, shape=(A.shape[0], k * n))
    names = tuple(
        (f"{labels[i]}: {name}" if labels is not None else name)
        for i, r in enumerate(per_child)
        for name in r.names
    )
    return LinearRows(
        A,
        np.concatenate([r.lb for r in per_child]),
        np.concatenate([r.ub for r in per_child]),
        names,
    )


def to_cvxpy(
    constraints: Iterable[Constraint | Expression],
    domain: Domain,
    x: cp.Variable,
    *,
    cells: np.ndarray | Sequence[int] | None = None,
) -> list[Any]:
    """CVXPY constraints on ``x`` (shape ``(domain.size,)``, or ``(len(cells),)``).

    Equalities become ``A x == b``, one-sided rows ``A x <= ub`` / ``A x >= lb``, and the zero
    cells ``x[zero cells] == 0`` (restricted to ``cells`` when given).

    Raises:
        ConstraintError: ``x`` has the wrong shape, or a contextual constraint is unbound.
    """
    import cvxpy as cp  # noqa: F401  (imported lazily: only this target needs it)

    kept = check_cells(domain, cells)
    n = domain.size if kept is None else kept.size
    if tuple(x.shape) != (n,):
        raise ConstraintError(f"x has shape {tuple(x.shape)}, expected ({n},)")
    cons = (
        list(constraints)
        if not isinstance(constraints, (Constraint, Expression))
        else [constraints]
    )
    rows = compile_rows(cons, domain, cells=kept)
    out: list[Any] = []
    eq = rows.is_equality
    if eq.any():
        out.append(rows.A[eq] @ x == rows.ub[eq])
    up = ~eq & np.isfinite(rows.ub)
    if up.any():
        out.append(rows.A[up] @ x <= rows.ub[up])
    lo = ~eq & np.isfinite(rows.lb)
    if lo.any():
        out.append(rows.A[lo] @ x >= rows.lb[lo])
    zeros = zero_mask(cons, domain)
    if kept is not None:
        zeros = zeros[kept]
    idx = np.flatnonzero(zeros)
    if idx.size:
        out.append(x[idx] == 0)
    return out
