"""Membership in a group of an attribute's recode: ``InGroup('HHGQ', 'hhinst', 'Institutional')``.

A recode (``Domain.recodes``) partitions an attribute's values into labelled groups, the same
groups a recoded query (``HHGQ:hhinst``) measures. A constraint over a group is a constraint
over the group's values: ``InGroup`` selects exactly the cells ``In`` selects with the group's
values, so the two give the same release. The group is looked up when the expression is
evaluated against a domain; an unknown recode or group label is an error then
(``DomainError`` names the argument, shows its value and lists the valid ones), never an empty
selection.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from constraints.domain import Domain, _plain
from constraints.errors import ConstraintError
from constraints.logical_expressions.base import Expression, axis_mask

__all__ = ["InGroup"]


@dataclass(frozen=True)
class InGroup(Expression):
    """``attribute`` in the group labelled ``group`` of its recode ``recode``.

    Args:
        attribute: a domain attribute.
        recode: the name of one of its recodes (``Domain(..., recodes=...)``).
        group: the label of one of that recode's groups.

    Example:
        >>> d = Domain({"HHGQ": range(8)}, recodes={"HHGQ": {"hhinst": {
        ...     "household": [0], "institutional": [1, 2, 3, 4], "other": [5, 6, 7]}}})
        >>> InGroup("HHGQ", "hhinst", "institutional").cells(d).tolist()
        [1, 2, 3, 4]
    """

    attribute: str
    recode: str
    group: Hashable

    def __post_init__(self) -> None:
        for arg in ("attribute", "recode"):
            value = getattr(self, arg)
            if not isinstance(value, str) or not value:
                raise ConstraintError(
                    f"InGroup: {arg} ({value!r}) must be a non-empty string naming a domain "
                    f"{'attribute' if arg == 'attribute' else 'recode of the attribute'}"
                )
        group = _plain(self.group)
        try:
            hash(group)
        except TypeError:
            raise ConstraintError(
                f"InGroup({self.attribute!r}, {self.recode!r}, ...): group ({group!r}) must be "
                "a single group label of the recode"
            ) from None
        object.__setattr__(self, "group", group)

    def values(self, domain: Domain) -> tuple:
        """The attribute's values in the group (raises ``DomainError`` for an unknown one)."""
        return domain.group_members(self.attribute, self.recode, self.group)

    def _broadcast_mask(self, domain: Domain) -> np.ndarray:
        members = self.values(domain)
        m = np.zeros(len(domain.values(self.attribute)), dtype=bool)
        m[[domain.index_of(self.attribute, v) for v in members]] = True
        return axis_mask(domain, self.attribute, m)

    @property
    def attributes(self) -> frozenset[str]:
        return frozenset({self.attribute})

    def __str__(self) -> str:
        return f"{self.attribute}:{self.recode} == {self.group!r}"

    def __repr__(self) -> str:
        return f"InGroup({self.attribute!r}, {self.recode!r}, {self.group!r})"
