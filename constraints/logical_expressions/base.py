"""The base class of logical expressions over the attributes of a query domain.

An expression is a predicate on the cells of a ``Domain``: ``AGE > 99``, ``SEX == 1 and
RACE in ['a', 'b']``. It is written once and compiled to every target the engine needs (a
boolean cell mask here; sparse rows and CVXPY constraints in ``constraints.compile``), so the
targets cannot disagree.

Masks are built without looping over cells: each node of the tree returns an array that
*broadcasts* to ``domain.shape`` (an atomic comparison is a 1-D mask along its attribute's
axis with length-1 axes elsewhere) and compounds combine them with numpy's logical
operators. The full ``domain.size`` vector is materialised once, at the top.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from constraints.domain import Domain
from constraints.errors import ConstraintError

__all__ = ["Expression"]


class Expression(ABC):
    """A predicate on the cells of a domain; immutable and hashable.

    Subclasses are frozen dataclasses and implement ``_broadcast_mask`` and ``__str__``.
    ``&``, ``|`` and ``~`` build ``And``, ``Or`` and ``Not``.
    """

    __slots__ = ()

    #: the compounds that ``&``, ``|`` and ``~`` build, by operator: ``compound`` registers
    #: ``And``, ``Or`` and ``Not`` as it is imported (the package imports it), so the base class
    #: never imports the module built on it
    _compounds: ClassVar[dict[str, type[Any]]] = {}

    @abstractmethod
    def _broadcast_mask(self, domain: Domain) -> np.ndarray:
        """A boolean array that broadcasts to ``domain.shape`` (same number of dimensions)."""

    @property
    @abstractmethod
    def attributes(self) -> frozenset[str]:
        """The attributes this expression mentions."""

    @abstractmethod
    def __str__(self) -> str:
        """Readable form, e.g. ``AGE > 99``; used in constraint names, errors and the ledger."""

    def mask(self, domain: Domain) -> np.ndarray:
        """Boolean vector of shape ``(domain.size,)``: True on the cells the expression selects.

        Raises:
            DomainError: an attribute or a value is not in ``domain`` (the message names it and
                lists what exists).
        """
        m = np.broadcast_to(self._broadcast_mask(domain), domain.shape)
        return np.ascontiguousarray(m).reshape(-1)

    def cells(self, domain: Domain) -> np.ndarray:
        """Flat indices (int64, increasing) of the selected cells."""
        return np.flatnonzero(self.mask(domain)).astype(np.int64, copy=False)

    # -- operators ---------------------------------------------------------------------------
    def __and__(self, other: Expression) -> Expression:
        return self._flattened("&", other)

    def __or__(self, other: Expression) -> Expression:
        return self._flattened("|", other)

    def __invert__(self) -> Expression:
        return self._compounds["~"](self)

    def _flattened(self, op: str, other: object) -> Expression:
        """``self op other`` as one compound: ``a & b & c`` is ``And(a, b, c)``."""
        _check_operand(other, op)
        compound = self._compounds[op]
        left = getattr(self, "operands", ()) if isinstance(self, compound) else (self,)
        return compound(*left, other)

    def __bool__(self) -> bool:
        # ``a and b`` / ``if expr`` would silently use Python truthiness; steer to & and |.
        raise TypeError(
            f"expression {self} has no truth value; combine expressions with &, |, ~ "
            "(or And, Or, Not), not with Python's and/or/not"
        )


def _check_operand(other: object, op: str) -> None:
    if not isinstance(other, Expression):
        raise ConstraintError(
            f"operand of {op} ({other!r}) must be a logical expression such as Equal('SEX', 1)"
        )


def axis_mask(domain: Domain, attribute: str, mask_1d: np.ndarray) -> np.ndarray:
    """Reshape a 1-D mask over one attribute's values so it broadcasts to ``domain.shape``."""
    shape = [1] * len(domain.shape)
    shape[domain.axis(attribute)] = len(mask_1d)
    return np.asarray(mask_1d, dtype=bool).reshape(shape)


def constant_mask(domain: Domain, value: bool) -> np.ndarray:
    """An all-``value`` array with one element per axis, broadcastable to ``domain.shape``."""
    return np.full((1,) * len(domain.shape), value, dtype=bool)
