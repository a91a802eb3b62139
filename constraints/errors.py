"""Errors of the constraint DSL and of the domain it is written over.

Each message names the argument, shows its value and states the rule. They derive from the
project's root error (``mechanisms.errors.TopDownError``) and from ValueError, so callers that
only know Python's built-ins still catch bad input.
"""

from __future__ import annotations

from mechanisms.errors import TopDownError

__all__ = ["DomainError", "ConstraintError", "InfeasibleConstraintsError"]


class DomainError(TopDownError, ValueError):
    """An attribute, a value or a column that does not fit the declared domain."""


class ConstraintError(TopDownError, ValueError):
    """A constraint that is malformed or cannot be applied where it was attached."""


class InfeasibleConstraintsError(ConstraintError):
    """Constraints that contradict each other (or the parent's values) at one node.

    Attributes:
        node: the node's label (or None at the root / outside a tree).
        constraints: names of the constraints involved.
    """

    def __init__(self, message: str, *, node: object = None, constraints: tuple[str, ...] = ()):
        super().__init__(message)
        self.node = node
        self.constraints = tuple(constraints)
