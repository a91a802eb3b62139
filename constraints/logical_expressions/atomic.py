"""Atomic expressions: comparisons of one attribute with values of its domain, and constants.

Comparisons follow the *declared order* of the attribute's values (their positions in the
``Domain``), not Python's ordering of the values themselves: with ``AGE`` declared as
``['0-17', '18-64', '65+']``, ``GreaterThan('AGE', '18-64')`` selects ``'65+'``, and with
string codes ``'10' < '9'`` in Python but not in a declared order. A value that is not in the
domain is an error when the expression is evaluated (``DomainError`` names it and lists the
values), never an empty selection: a typo must not silently select nothing.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from constraints.domain import Domain, _plain
from constraints.errors import ConstraintError
from constraints.logical_expressions.base import Expression, axis_mask, constant_mask

__all__ = [
    "Comparison",
    "Equal",
    "NotEqual",
    "GreaterThan",
    "GreaterThanOrEqual",
    "LessThan",
    "LessThanOrEqual",
    "In",
    "TrueExpression",
    "FalseExpression",
]


def _check_attribute_name(cls_name: str, attribute: object) -> None:
    if not isinstance(attribute, str) or not attribute:
        raise ConstraintError(
            f"{cls_name}: attribute ({attribute!r}) must be a non-empty string naming a domain "
            "attribute"
        )


def _check_value(cls_name: str, attribute: str, value: object) -> Any:
    value = _plain(value)
    try:
        hash(value)
    except TypeError:
        raise ConstraintError(
            f"{cls_name}({attribute!r}, ...): value ({value!r}) must be a single hashable value "
            "of the attribute's domain"
        ) from None
    return value


@dataclass(frozen=True)
class Comparison(Expression):
    """``attribute <op> value``, with the order of the attribute's declared values.

    Args:
        attribute: a domain attribute.
        value: one of its declared values.
    """

    attribute: str
    value: Hashable
    symbol: ClassVar[str] = "?"

    def __post_init__(self) -> None:
        _check_attribute_name(type(self).__name__, self.attribute)
        object.__setattr__(
            self, "value", _check_value(type(self).__name__, self.attribute, self.value)
        )

    @staticmethod
    def _compare(positions: np.ndarray, pos: int) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def _broadcast_mask(self, domain: Domain) -> np.ndarray:
        pos = domain.index_of(self.attribute, self.value)
        positions = np.arange(len(domain.values(self.attribute)))
        return axis_mask(domain, self.attribute, self._compare(positions, pos))

    @property
    def attributes(self) -> frozenset[str]:
        return frozenset({self.attribute})

    def __str__(self) -> str:
        return f"{self.attribute} {self.symbol} {self.value!r}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.attribute!r}, {self.value!r})"


@dataclass(frozen=True, repr=False)
class Equal(Comparison):
    """``attribute == value``."""

    symbol: ClassVar[str] = "=="

    @staticmethod
    def _compare(positions: np.ndarray, pos: int) -> np.ndarray:
        return positions == pos


@dataclass(frozen=True, repr=False)
class NotEqual(Comparison):
    """``attribute != value``."""

    symbol: ClassVar[str] = "!="

    @staticmethod
    def _compare(positions: np.ndarray, pos: int) -> np.ndarray:
        return positions != pos


@dataclass(frozen=True, repr=False)
class GreaterThan(Comparison):
    """``attribute > value``: values declared after ``value``."""

    symbol: ClassVar[str] = ">"

    @staticmethod
    def _compare(positions: np.ndarray, pos: int) -> np.ndarray:
        return positions > pos


@dataclass(frozen=True, repr=False)
class GreaterThanOrEqual(Comparison):
    """``attribute >= value``: ``value`` and the values declared after it."""

    symbol: ClassVar[str] = ">="

    @staticmethod
    def _compare(positions: np.ndarray, pos: int) -> np.ndarray:
        return positions >= pos


@dataclass(frozen=True, repr=False)
class LessThan(Comparison):
    """``attribute < value``: values declared before ``value``."""

    symbol: ClassVar[str] = "<"

    @staticmethod
    def _compare(positions: np.ndarray, pos: int) -> np.ndarray:
        return positions < pos


@dataclass(frozen=True, repr=False)
class LessThanOrEqual(Comparison):
    """``attribute <= value``: ``value`` and the values declared before it."""

    symbol: ClassVar[str] = "<="

    @staticmethod
    def _compare(positions: np.ndarray, pos: int) -> np.ndarray:
        return positions <= pos


@dataclass(frozen=True)
class In(Expression):
    """``attribute in values``: membership in a set of declared values.

    Args:
        attribute: a domain attribute.
        values: a list (not a string) of its declared values; duplicates are dropped, order
            kept. An empty list selects nothing.
    """

    attribute: str
    values: tuple

    def __post_init__(self) -> None:
        _check_attribute_name("In", self.attribute)
        vals = self.values
        if isinstance(vals, (str, bytes)) or not isinstance(vals, Iterable):
            raise ConstraintError(
                f"In({self.attribute!r}, ...): values ({vals!r}) must be a list of values, "
                "not a single value"
            )
        checked = tuple(_check_value("In", self.attribute, v) for v in vals)
        object.__setattr__(self, "values", tuple(dict.fromkeys(checked)))

    def _broadcast_mask(self, domain: Domain) -> np.ndarray:
        m = np.zeros(len(domain.values(self.attribute)), dtype=bool)
        for v in self.values:
            m[domain.index_of(self.attribute, v)] = True
        return axis_mask(domain, self.attribute, m)

    @property
    def attributes(self) -> frozenset[str]:
        return frozenset({self.attribute})

    def __str__(self) -> str:
        return f"{self.attribute} in [{', '.join(repr(v) for v in self.values)}]"

    def __repr__(self) -> str:
        return f"In({self.attribute!r}, {list(self.values)!r})"


@dataclass(frozen=True)
class TrueExpression(Expression):
    """Selects every cell (e.g. ``SumEqualRealTotal(TrueExpression())`` is the node total)."""

    def _broadcast_mask(self, domain: Domain) -> np.ndarray:
        return constant_mask(domain, True)

    @property
    def attributes(self) -> frozenset[str]:
        return frozenset()

    def __str__(self) -> str:
        return "TRUE"

    def __repr__(self) -> str:
        return "TrueExpression()"


@dataclass(frozen=True)
class FalseExpression(Expression):
    """Selects no cell."""

    def _broadcast_mask(self, domain: Domain) -> np.ndarray:
        return constant_mask(domain, False)

    @property
    def attributes(self) -> frozenset[str]:
        return frozenset()

    def __str__(self) -> str:
        return "FALSE"

    def __repr__(self) -> str:
        return "FalseExpression()"
