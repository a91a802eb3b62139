"""Compound expressions: ``And``, ``Or`` (any number of operands), ``Not`` and ``Implies``.

Compounds combine the broadcastable masks of their operands with numpy's logical operators,
so ``And(Equal('SEX', 1), GreaterThan('AGE', 99))`` costs two 1-D masks and one broadcast,
never a loop over cells. ``And()`` with no operand selects every cell and ``Or()`` none (the
identities of the operations), so expressions built from possibly empty lists stay valid.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

import numpy as np

from constraints.domain import Domain
from constraints.errors import ConstraintError
from constraints.logical_expressions.base import Expression, constant_mask

__all__ = ["And", "Or", "Not", "Implies"]


def _check(cls_name: str, position: str, op: object) -> Expression:
    if not isinstance(op, Expression):
        raise ConstraintError(
            f"{cls_name}: {position} ({op!r}) must be a logical expression such as Equal('SEX', 1)"
        )
    return op


def _wrap(op: Expression) -> str:
    """Operand text, parenthesised when it is itself a binary compound."""
    text = str(op)
    return f"({text})" if isinstance(op, (And, Or, Implies)) and len(_operands(op)) > 1 else text


def _operands(op: Expression) -> tuple[Expression, ...]:
    return getattr(op, "operands", (op,))


@dataclass(frozen=True, init=False)
class _Nary(Expression):
    operands: tuple[Expression, ...]

    def __init__(self, *operands: Expression) -> None:
        name = type(self).__name__
        checked = tuple(_check(name, f"operand {i}", op) for i, op in enumerate(operands))
        object.__setattr__(self, "operands", checked)

    @property
    def attributes(self) -> frozenset[str]:
        return frozenset().union(*(op.attributes for op in self.operands))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(repr(op) for op in self.operands)})"


@dataclass(frozen=True, init=False, repr=False)
class And(_Nary):
    """True where every operand is true (``a & b``)."""

    def _broadcast_mask(self, domain: Domain) -> np.ndarray:
        if not self.operands:
            return constant_mask(domain, True)
        return reduce(np.logical_and, (op._broadcast_mask(domain) for op in self.operands))

    def __str__(self) -> str:
        if not self.operands:
            return "TRUE"
        return " and ".join(_wrap(op) for op in self.operands)


@dataclass(frozen=True, init=False, repr=False)
class Or(_Nary):
    """True where at least one operand is true (``a | b``)."""

    def _broadcast_mask(self, domain: Domain) -> np.ndarray:
        if not self.operands:
            return constant_mask(domain, False)
        return reduce(np.logical_or, (op._broadcast_mask(domain) for op in self.operands))

    def __str__(self) -> str:
        if not self.operands:
            return "FALSE"
        return " or ".join(_wrap(op) for op in self.operands)


@dataclass(frozen=True)
class Not(Expression):
    """True where the operand is false (``~a``)."""

    operand: Expression

    def __post_init__(self) -> None:
        _check("Not", "operand", self.operand)

    def _broadcast_mask(self, domain: Domain) -> np.ndarray:
        return np.logical_not(self.operand._broadcast_mask(domain))

    @property
    def attributes(self) -> frozenset[str]:
        return self.operand.attributes

    def __str__(self) -> str:
        return f"not ({self.operand})"

    def __repr__(self) -> str:
        return f"Not({self.operand!r})"


@dataclass(frozen=True)
class Implies(Expression):
    """``antecedent -> consequent``: true unless the antecedent holds and the consequent not.

    As a bare constraint, ``Implies(Equal('GQ', 'nursing'), GreaterThan('AGE', 17))`` is the
    edit rule "no minors in nursing homes": the cells where it is false hold zero.
    """

    antecedent: Expression
    consequent: Expression

    def __post_init__(self) -> None:
        _check("Implies", "antecedent", self.antecedent)
        _check("Implies", "consequent", self.consequent)

    @property
    def operands(self) -> tuple[Expression, Expression]:
        """``(antecedent, consequent)``."""
        return (self.antecedent, self.consequent)

    def _broadcast_mask(self, domain: Domain) -> np.ndarray:
        a = self.antecedent._broadcast_mask(domain)
        return np.logical_or(np.logical_not(a), self.consequent._broadcast_mask(domain))

    @property
    def attributes(self) -> frozenset[str]:
        return self.antecedent.attributes | self.consequent.attributes

    def __str__(self) -> str:
        return f"{_wrap(self.antecedent)} implies {_wrap(self.consequent)}"

    def __repr__(self) -> str:
        return f"Implies({self.antecedent!r}, {self.consequent!r})"


Expression._compounds.update({"&": And, "|": Or, "~": Not})
