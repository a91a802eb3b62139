"""The engine's exception hierarchy, gathered in one place for callers.

Every package owns its own errors (constraints.errors, mechanisms.errors, solvers); this module
adds the engine's and re-exports the others, so ``except topdown.errors.TopDownError`` catches
any bad input the engine reports. Messages name the argument or column, show the value and
state the rule.
"""

from __future__ import annotations

from constraints.errors import ConstraintError, DomainError, InfeasibleConstraintsError
from mechanisms.errors import BudgetError, MechanismError

__all__ = [
    "TopDownError",
    "DataError",
    "HierarchyError",
    "StrategyError",
    "ReleaseError",
    "DomainError",
    "ConstraintError",
    "InfeasibleConstraintsError",
    "BudgetError",
    "MechanismError",
]


class TopDownError(Exception):
    """Base of the engine's own errors."""


class DataError(TopDownError, ValueError):
    """Input data that cannot be read or does not fit the schema (missing columns, NaN, ...)."""


class HierarchyError(DataError):
    """Hierarchy columns that do not describe a tree (missing labels, a child under two parents)."""


class StrategyError(TopDownError, ValueError):
    """A strategy whose levels, queries or shares do not fit the schema."""


class ReleaseError(TopDownError, RuntimeError):
    """A release folder that cannot be written, or fails verification."""
