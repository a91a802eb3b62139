"""The constraint DSL: logical expressions over attributes, aggregate and contextual constraints.

Expressions (``GreaterThan('AGE', 99)``) select cells of a ``Domain``; constraints bound the
sums of the selected counts (``SumEqual``), force them to zero (``StructuralZero``) or keep
their confidential value (``SumEqualRealTotal``, an invariant). A ``ConstraintSet`` says where
each applies in the hierarchy; ``compile_rows``, ``zero_mask`` and ``to_cvxpy`` turn them into
what the estimators consume, and ``check_node`` reports contradictions before solving.
"""

from constraints.aggregate_constraints import (
    AggregateConstraint,
    StructuralZero,
    SumEqual,
    SumGreaterEqual,
    SumLessEqual,
    as_constraint,
)
from constraints.attach import Attachment, ConstraintSet
from constraints.compile import compile_rows, joint_rows, to_cvxpy, zero_mask
from constraints.constraint import Constraint, LinearRows
from constraints.contextual_constraints import (
    ContextualConstraint,
    InvariantConstraint,
    SumEqualRealTotal,
)
from constraints.diagnostics import check_children, check_node
from constraints.domain import Domain
from constraints.errors import ConstraintError, DomainError, InfeasibleConstraintsError
from constraints.logical_expressions import (
    And,
    Comparison,
    Equal,
    Expression,
    FalseExpression,
    GreaterThan,
    GreaterThanOrEqual,
    Implies,
    In,
    InGroup,
    LessThan,
    LessThanOrEqual,
    Not,
    NotEqual,
    Or,
    TrueExpression,
)

__all__ = [
    "Domain",
    "DomainError",
    "ConstraintError",
    "InfeasibleConstraintsError",
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
    "Constraint",
    "LinearRows",
    "AggregateConstraint",
    "SumEqual",
    "SumLessEqual",
    "SumGreaterEqual",
    "StructuralZero",
    "as_constraint",
    "InvariantConstraint",
    "SumEqualRealTotal",
    "ContextualConstraint",
    "Attachment",
    "ConstraintSet",
    "compile_rows",
    "zero_mask",
    "joint_rows",
    "to_cvxpy",
    "check_node",
    "check_children",
]
