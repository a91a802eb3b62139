"""Logical expressions over the attributes of a query domain (the predicates of constraints).

Atomic comparisons follow the declared order of each attribute's values; ``InGroup`` selects
the values of one group of an attribute's recode; compounds combine them. Every expression
compiles to a boolean cell mask with ``expr.mask(domain)``.
"""

from constraints.logical_expressions.atomic import (
    Comparison,
    Equal,
    FalseExpression,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    NotEqual,
    TrueExpression,
)
from constraints.logical_expressions.base import Expression
from constraints.logical_expressions.compound import And, Implies, Not, Or
from constraints.logical_expressions.recoded import InGroup

__all__ = [
    "Expression",
    "Comparison",
    "Equal",
    "NotEqual",
    "GreaterThan",
    "GreaterThanOrEqual",
    "LessThan",
    "LessThanOrEqual",
    "In",
    "InGroup",
    "TrueExpression",
    "FalseExpression",
    "And",
    "Or",
    "Not",
    "Implies",
]
