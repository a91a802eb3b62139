"""The engine's exception hierarchy, gathered in one place for callers.

Every package owns its own errors (constraints.errors, mechanisms.errors, solvers.status) and
all of them derive from the one root, ``TopDownError`` (defined in ``mechanisms.errors``,
re-exported here); this module adds the engine's and re-exports the others, so
``except TopDownError`` catches any error the project reports: bad input (also a ValueError)
and failed runs (also a RuntimeError, e.g. ``SolverError``). Messages name the argument or
column, show the value and state the rule.
"""

from __future__ import annotations

from constraints.errors import ConstraintError, DomainError, InfeasibleConstraintsError
from mechanisms.errors import BudgetError, MechanismError, TopDownError
from solvers.status import InfeasibleError, SolverError

__all__ = [
    "TopDownError",
    "DataError",
    "HierarchyError",
    "StrategyError",
    "ReleaseError",
    "OptionsError",
    "DomainError",
    "ConstraintError",
    "InfeasibleConstraintsError",
    "BudgetError",
    "MechanismError",
    "SolverError",
    "InfeasibleError",
]


class DataError(TopDownError, ValueError):
    """Input data that cannot be read or does not fit the schema (missing columns, NaN, ...)."""


class HierarchyError(DataError):
    """Hierarchy columns that do not describe a tree (missing labels, a child under two parents)."""


class StrategyError(TopDownError, ValueError):
    """A strategy whose levels, queries or shares do not fit the schema."""


class ReleaseError(TopDownError, RuntimeError):
    """A release folder that cannot be written, or fails verification."""


class OptionsError(TopDownError, ValueError):
    """An estimation option (a solver choice, a tolerance) that is unknown or out of range."""
