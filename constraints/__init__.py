"""The constraint DSL: logical expressions over attributes, aggregate and contextual constraints."""

from constraints.domain import Domain
from constraints.errors import ConstraintError, DomainError, InfeasibleConstraintsError

__all__ = ["Domain", "DomainError", "ConstraintError", "InfeasibleConstraintsError"]
