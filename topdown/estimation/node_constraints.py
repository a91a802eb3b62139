"""Which constraints bind each node, and their compiled forms.

Estimation (to build each family's rows) and the release's checks (to verify them) must agree on
exactly which constraints apply to a node: those attached to its level or to it by label, minus the
unbound invariants, plus the invariants ``topdown.measurement.measure`` bound to its published
values. Both read them here. Compiling is cached per distinct tuple of constraints, so a constraint
attached to a level of 10^5 nodes is compiled once.
"""

from __future__ import annotations

import numpy as np

from constraints.attach import ConstraintSet
from constraints.compile import compile_rows, zero_mask
from constraints.constraint import LinearRows
from constraints.domain import Domain

__all__ = ["NodeConstraints"]


class NodeConstraints:
    """Constraints of every node, given the attachments and the bound invariants.

    Args:
        domain: the query domain.
        constraints: the attached constraints (or None).
        invariants: level -> node index -> invariants bound to their published values.
    """

    def __init__(
        self,
        domain: Domain,
        constraints: ConstraintSet | None,
        invariants: dict[int, dict[int, tuple]] | None = None,
    ):
        self.domain = domain
        self.constraints = constraints
        self.invariants = invariants or {}
        self._levels: dict[int, tuple[tuple, dict]] = {}
        self._rows: dict[tuple, LinearRows] = {}
        self._zeros: dict[tuple, np.ndarray | None] = {}

    def of(self, level: int, index: int, label: object) -> tuple:
        """The constraints binding node ``index`` (labelled ``label``) of ``level``."""
        if level not in self._levels:
            if self.constraints is None:
                self._levels[level] = ((), {})
            else:
                general = tuple(c for c in self.constraints.for_level(level) if not c.is_invariant)
                specific = {
                    str(lab): tuple(c for c in cs if not c.is_invariant)
                    for lab, cs in self.constraints.node_specific(level).items()
                }
                self._levels[level] = (general, specific)
        general, specific = self._levels[level]
        return (
            general + specific.get(str(label), ()) + self.invariants.get(level, {}).get(index, ())
        )

    def rows(self, constraints: tuple, cells: np.ndarray | None = None) -> LinearRows:
        """The constraints' rows over ``cells`` (all cells if None); no rows when none apply."""
        n = self.domain.size if cells is None else len(cells)
        if not constraints:
            return LinearRows.empty(n)
        if constraints not in self._rows:
            self._rows[constraints] = compile_rows(list(constraints), self.domain)
        full = self._rows[constraints]
        return full.restrict(cells) if full.n_rows else LinearRows.empty(n)

    def zeros(self, constraints: tuple) -> np.ndarray | None:
        """Cells the constraints force to zero, or None when there are none."""
        if constraints not in self._zeros:
            mask = zero_mask(list(constraints), self.domain) if constraints else None
            self._zeros[constraints] = mask if mask is not None and mask.any() else None
        return self._zeros[constraints]
