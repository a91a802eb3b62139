"""Contextual constraints: invariants whose value is computed from each node's confidential data.

``SumEqualRealTotal(expr)`` holds the node's true count of the selected cells;
``ContextualConstraint(expr, aggregate, sense)`` holds any aggregate of the node's records
(e.g. the number of housing units, from another table). Their values are published exactly:
they are *invariants*, outside the differential-privacy guarantee, and a release must say so.

Protocol with the engine (the only code that may call ``evaluate``):

1. the measurement step, which alone reads confidential data, calls
   ``value = c.evaluate(domain, histogram, records)`` for each node the constraint applies to;
2. it records the disclosure with ``ledger.record_invariant(c.name, level)`` (the ledger
   lives in the engine, not here);
3. estimation uses ``c.bind(value)``, an ordinary aggregate constraint carrying the published
   value and the same name.

An unbound contextual constraint has no rows: ``rows`` raises ``ConstraintError`` so it cannot
reach a solver by mistake.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from constraints.aggregate_constraints import (
    AUTO_NAME,
    AggregateConstraint,
    SumEqual,
    SumGreaterEqual,
    SumLessEqual,
    _check_expr,
    _check_name,
    check_number,
)
from constraints.constraint import Constraint, LinearRows
from constraints.domain import Domain
from constraints.errors import ConstraintError
from constraints.logical_expressions.base import Expression

__all__ = ["InvariantConstraint", "SumEqualRealTotal", "ContextualConstraint"]

logger = logging.getLogger(__name__)

_SENSES: dict[str, type[AggregateConstraint]] = {
    "==": SumEqual,
    "<=": SumLessEqual,
    ">=": SumGreaterEqual,
}


class InvariantConstraint(Constraint):
    """A constraint whose value comes from confidential data; must be bound before use."""

    is_invariant: ClassVar[bool] = True
    expr: Expression
    sense: str

    @abstractmethod
    def evaluate(
        self, domain: Domain, histogram: np.ndarray, records: pd.DataFrame | None
    ) -> int | float:
        """The node's confidential value. Only the engine's measurement step calls this."""

    def bind(self, value: int | float) -> AggregateConstraint:
        """The published-value version: e.g. ``SumEqual(expr, value, name=self.name)``."""
        cls = _SENSES[self.sense]
        return cls(self.expr, check_number(f"{self.name}.bind", value), name=self.name)

    def rows(self, domain: Domain, cells: np.ndarray | None = None) -> LinearRows:
        """Never: the value is not known until the engine binds it."""
        raise ConstraintError(
            f"contextual constraint {self.name} must be bound to its measured value "
            "(constraint.bind(value)) before it compiles to rows"
        )

    def zero_mask(self, domain: Domain) -> None:
        """Invariants force no cell to zero by themselves."""
        return None

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class SumEqualRealTotal(InvariantConstraint):
    """The selected cells sum to the node's true count (an invariant).

    ``SumEqualRealTotal(TrueExpression())`` attached to the root publishes the total
    population exactly, as the 2020 Census did for state totals.

    Args:
        expr: the cells whose true total is kept.
        name: keyword-only; defaults to ``SumEqualRealTotal(<expr>)``.
    """

    expr: Expression
    name: str = field(default=AUTO_NAME, kw_only=True)
    sense: str = field(default="==", init=False, repr=False)

    def __post_init__(self) -> None:
        _check_expr("SumEqualRealTotal", self.expr)
        if _check_name("SumEqualRealTotal", self.name):
            object.__setattr__(self, "name", f"SumEqualRealTotal({self.expr})")

    def evaluate(
        self, domain: Domain, histogram: np.ndarray, records: pd.DataFrame | None = None
    ) -> int | float:
        """Sum of the node's histogram over the selected cells (an int for integer counts)."""
        hist = np.asarray(histogram)
        if hist.shape != (domain.size,):
            raise ConstraintError(
                f"{self.name}: histogram has shape {hist.shape}, expected ({domain.size},) "
                "(one count per domain cell)"
            )
        total = hist[self.expr.mask(domain)].sum()
        return total.item() if isinstance(total, np.generic) else total


@dataclass(frozen=True)
class ContextualConstraint(InvariantConstraint):
    """A bound on the selected cells whose value is an aggregate of the node's records.

    Args:
        expr: the cells whose sum is bounded.
        aggregate: function of the node's records (all of them, as a DataFrame with the
            node's rows) returning a finite number; it runs on confidential data.
        sense: ``"=="``, ``"<="`` or ``">="``.
        name: keyword-only; defaults to ``ContextualConstraint(<expr> <sense> <aggregate>)``.
    """

    expr: Expression
    aggregate: Callable[[pd.DataFrame], float]
    sense: str = "=="
    name: str = field(default=AUTO_NAME, kw_only=True)

    def __post_init__(self) -> None:
        _check_expr("ContextualConstraint", self.expr)
        if not callable(self.aggregate):
            raise ConstraintError(
                f"ContextualConstraint({self.expr}): aggregate ({self.aggregate!r}) must be a "
                "function of the node's records (a DataFrame) returning a number"
            )
        if self.sense not in _SENSES:
            raise ConstraintError(
                f"ContextualConstraint({self.expr}): sense ({self.sense!r}) must be one of "
                f"{list(_SENSES)}"
            )
        if _check_name("ContextualConstraint", self.name):
            label = getattr(self.aggregate, "__name__", type(self.aggregate).__name__)
            object.__setattr__(
                self, "name", f"ContextualConstraint({self.expr} {self.sense} {label})"
            )

    def evaluate(
        self, domain: Domain, histogram: np.ndarray | None, records: pd.DataFrame | None
    ) -> int | float:
        """``aggregate(records)``, checked to be a finite number."""
        if records is None:
            raise ConstraintError(
                f"{self.name}: needs the node's records (a DataFrame) to compute its value, "
                "but records is None"
            )
        value = self.aggregate(records)
        logger.debug("evaluated contextual constraint %s", self.name)
        return check_number(f"{self.name}: aggregate result", value)
