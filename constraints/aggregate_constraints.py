"""Aggregate constraints: bounds on the sum of the counts of the cells an expression selects.

``SumEqual(expr, v)``, ``SumLessEqual(expr, v)`` and ``SumGreaterEqual(expr, v)`` each add
one row ``lb <= sum(x[expr cells]) <= ub``. ``StructuralZero(expr)`` adds no row: the engine
removes the selected cells from the problem (they hold zero in every node).

A bare expression used as a constraint (``as_constraint(expr)``) keeps the seed's meaning:
it states what must hold, so the cells where it is FALSE hold zero. ``Implies(Equal('GQ',
'nursing'), GreaterThan('AGE', 17))`` therefore zeroes the minors-in-nursing-homes cells;
it is exactly ``StructuralZero(Not(expr))``.

Values must be finite real numbers (checked here). Values that are legal to write but
impossible to meet (a negative ``SumEqual``, a non-integer equality, bounds that contradict
each other) are reported by ``constraints.diagnostics`` with the node they apply to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from numbers import Real
from typing import ClassVar, Final

import numpy as np
import scipy.sparse as sp

from constraints.constraint import Constraint, LinearRows, check_cells
from constraints.domain import Domain
from constraints.errors import ConstraintError
from constraints.logical_expressions.base import Expression
from constraints.logical_expressions.compound import Not

__all__ = [
    "AggregateConstraint",
    "SumEqual",
    "SumLessEqual",
    "SumGreaterEqual",
    "StructuralZero",
    "as_constraint",
    "format_number",
]


def format_number(value: float | int) -> str:
    """``3`` for integral values, the shortest float text otherwise (used in names)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def check_number(owner: str, value: object) -> int | float:
    """A finite real number, as a Python int (integral ints) or float."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (Real, Fraction)):
        raise ConstraintError(f"{owner}: value ({value!r}) must be a finite number")
    if isinstance(value, int):
        return value
    as_float = float(value)
    if not math.isfinite(as_float):
        raise ConstraintError(f"{owner}: value ({value!r}) must be a finite number")
    return as_float


def _check_expr(owner: str, expr: object) -> None:
    if not isinstance(expr, Expression):
        raise ConstraintError(
            f"{owner}: expr ({expr!r}) must be a logical expression such as GreaterThan('AGE', 99)"
        )


#: Default of every constraint's ``name``: ``__post_init__`` replaces it (or ``name=None``) by a
#: readable name built from the arguments. A str, so the field is typed as what it always holds.
AUTO_NAME: Final = "<auto>"


def _check_name(owner: str, name: object) -> bool:
    """Validate a ``name`` argument; True when a readable default name must replace it."""
    if name is None or name == AUTO_NAME:
        return True
    if not isinstance(name, str) or not name:
        raise ConstraintError(f"{owner}: name ({name!r}) must be a non-empty string or None")
    return False


@dataclass(frozen=True)
class AggregateConstraint(Constraint):
    """``sum(x[expr cells]) <sense> value``; the concrete senses are the subclasses.

    Args:
        expr: the cells whose counts are summed.
        value: a finite number.
        name: keyword-only; defaults to e.g. ``SumEqual(AGE > 99, 0)``.
    """

    expr: Expression
    value: int | float
    name: str = field(default=AUTO_NAME, kw_only=True)
    sense: ClassVar[str] = "=="

    def __post_init__(self) -> None:
        owner = type(self).__name__
        _check_expr(owner, self.expr)
        object.__setattr__(self, "value", check_number(f"{owner}({self.expr})", self.value))
        if _check_name(owner, self.name):
            object.__setattr__(self, "name", f"{owner}({self.expr}, {format_number(self.value)})")

    @property
    def bounds(self) -> tuple[float, float]:
        """``(lb, ub)`` of the row; infinite on the open side."""
        v = float(self.value)
        return {"==": (v, v), "<=": (-math.inf, v), ">=": (v, math.inf)}[self.sense]

    def rows(self, domain: Domain, cells: np.ndarray | None = None) -> LinearRows:
        """One row: ones on the selected cells (restricted to ``cells``, in their order)."""
        mask = self.expr.mask(domain)
        kept = check_cells(domain, cells)
        if kept is not None:
            mask = mask[kept]
        cols = np.flatnonzero(mask)
        A = sp.csr_matrix(
            (np.ones(cols.size), cols, np.array([0, cols.size])), shape=(1, mask.size)
        )
        lb, ub = self.bounds
        return LinearRows(A, np.array([lb]), np.array([ub]), (self.name,))

    def zero_mask(self, domain: Domain) -> None:
        """Aggregate bounds force no cell to zero by themselves."""
        return None

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class SumEqual(AggregateConstraint):
    """The selected cells sum to exactly ``value``."""

    sense: ClassVar[str] = "=="


@dataclass(frozen=True)
class SumLessEqual(AggregateConstraint):
    """The selected cells sum to at most ``value``."""

    sense: ClassVar[str] = "<="


@dataclass(frozen=True)
class SumGreaterEqual(AggregateConstraint):
    """The selected cells sum to at least ``value``."""

    sense: ClassVar[str] = ">="


@dataclass(frozen=True)
class StructuralZero(Constraint):
    """No count in the selected cells, at every node it applies to.

    The engine drops these cells from the problem rather than adding ``x == 0`` rows (see
    ``constraints.compile.zero_mask``); CVXPY targets get ``x[mask] == 0``.

    Args:
        expr: the impossible cells, e.g. ``And(Equal('GQ', 'nursing'), LessThan('AGE', 18))``.
        name: keyword-only; defaults to ``StructuralZero(<expr>)``.
    """

    expr: Expression
    name: str = field(default=AUTO_NAME, kw_only=True)

    def __post_init__(self) -> None:
        _check_expr("StructuralZero", self.expr)
        if _check_name("StructuralZero", self.name):
            object.__setattr__(self, "name", f"StructuralZero({self.expr})")

    def rows(self, domain: Domain, cells: np.ndarray | None = None) -> None:
        """No rows: the zero cells are removed from the problem instead."""
        return None

    def zero_mask(self, domain: Domain) -> np.ndarray:
        """The selected cells."""
        return self.expr.mask(domain)

    def __str__(self) -> str:
        return self.name


def as_constraint(obj: Constraint | Expression) -> Constraint:
    """A constraint as is; a bare expression as ``StructuralZero(Not(expr))``.

    A bare expression states a rule every record obeys, so the cells where it is false are
    empty. Its name is ``StructuralZero(not (<expr>))``.

    Raises:
        ConstraintError: ``obj`` is neither a constraint nor an expression.
    """
    if isinstance(obj, Constraint):
        return obj
    if isinstance(obj, Expression):
        return StructuralZero(Not(obj))
    raise ConstraintError(
        f"constraint ({obj!r}) must be a Constraint (SumEqual, StructuralZero, "
        "SumEqualRealTotal, ...) or a logical expression"
    )
