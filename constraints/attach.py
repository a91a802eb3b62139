"""Attaching constraints to the levels and nodes of a hierarchy.

A ``ConstraintSet`` is a mutable builder: ``add`` records where a constraint applies and
returns the set itself, so calls chain. (Mutable on purpose: with an immutable set,
``cs.add(c)`` without reassignment would silently drop the constraint.) Each entry is a frozen
``Attachment``; the queries return tuples, so what the engine reads cannot change under it.

Scopes, with levels numbered from 0 (the root):

- ``add(c)``: every node of every level;
- ``add(c, level=k)``: every node of level ``k`` and *only* level ``k`` (the seed attached
  it to level ``k - 1`` too, and elsewhere read "level k" as "levels 0..k"; both are wrong);
- ``add(c, level=k, nodes=[...])``: the named nodes of level ``k``.

For a node, ``for_node(level, label) == for_level(level) + node_specific(level)[label]``.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from constraints.aggregate_constraints import as_constraint
from constraints.constraint import Constraint
from constraints.errors import ConstraintError
from constraints.logical_expressions.base import Expression

__all__ = ["Attachment", "ConstraintSet", "check_constraint_set"]


def _check_level(level: object, what: str = "level") -> int:
    if isinstance(level, bool) or not isinstance(level, int) or level < 0:
        raise ConstraintError(
            f"{what} ({level!r}) must be a non-negative integer (0 = root) or None"
        )
    return level


def _node_labels(nodes: object, level: int | None, name: str) -> frozenset | None:
    """``nodes`` as a frozenset of labels (None stays None), checked against ``level``."""
    if nodes is None:
        return None
    if level is None:
        shown = _preview(nodes) if isinstance(nodes, Iterable) else repr(nodes)
        raise ConstraintError(
            f"nodes ({shown}) given for {name} without a "
            "level: node labels are only unique within a level, pass level= too"
        )
    if isinstance(nodes, (str, bytes)) or not isinstance(nodes, Iterable):
        raise ConstraintError(
            f"nodes ({nodes!r}) for {name} must be a list of node "
            "labels (a single label must be wrapped: nodes=['06'])"
        )
    labels = frozenset(nodes)
    if not labels:
        raise ConstraintError(
            f"nodes for {name} at level {level} is empty: it "
            "would apply nowhere; omit nodes= to apply to the whole level"
        )
    return labels


@dataclass(frozen=True)
class Attachment:
    """One constraint and its scope.

    Args:
        constraint: the constraint (bare expressions are converted with ``as_constraint``).
        level: the level it applies to, or None for every level.
        nodes: labels of the nodes of ``level`` it applies to, or None for all of them.
    """

    constraint: Constraint
    level: int | None = None
    nodes: frozenset | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "constraint", as_constraint(self.constraint))
        if self.level is not None:
            _check_level(self.level)
        object.__setattr__(
            self, "nodes", _node_labels(self.nodes, self.level, self.constraint.name)
        )

    @property
    def scope(self) -> str:
        """Readable scope: ``all levels``, ``level 2`` or ``level 2, nodes ['06', '41']``."""
        if self.level is None:
            return "all levels"
        if self.nodes is None:
            return f"level {self.level}"
        return f"level {self.level}, nodes {_preview(self.nodes)}"


class ConstraintSet:
    """The constraints of a release and where each applies.

    Args:
        constraints: optional initial constraints, attached to the whole tree.
        n_levels: if given, every ``add`` and query checks its level against it.

    Example:
        >>> from constraints import Equal, SumEqualRealTotal, SumLessEqual, TrueExpression
        >>> cs = ConstraintSet(n_levels=3)
        >>> cs = cs.add(SumEqualRealTotal(TrueExpression()), level=0)
        >>> cs = cs.add(SumLessEqual(Equal("SEX", 1), 40), level=2, nodes=["06"])
        >>> [c.name for c in cs.for_level(0)], cs.for_level(1)
        (['SumEqualRealTotal(TRUE)'], ())
        >>> [c.name for c in cs.for_node(2, "06")], cs.for_node(2, "41")
        (['SumLessEqual(SEX == 1, 40)'], ())
        >>> cs.add(SumLessEqual(Equal("SEX", 2), 9), level=3)
        Traceback (most recent call last):
        ...
        constraints.errors.ConstraintError: SumLessEqual(SEX == 2, 9) is attached to level 3, ...
    """

    def __init__(
        self, constraints: Iterable[Constraint | Expression] = (), *, n_levels: int | None = None
    ) -> None:
        if n_levels is not None and (_check_level(n_levels, "n_levels") < 1):
            raise ConstraintError(f"n_levels ({n_levels}) must be at least 1")
        self._n_levels = n_levels
        self._attachments: list[Attachment] = []
        for c in constraints:
            self.add(c)

    @property
    def n_levels(self) -> int | None:
        """Number of levels the set was declared for, if any."""
        return self._n_levels

    @property
    def attachments(self) -> tuple[Attachment, ...]:
        """Every attachment, in the order added."""
        return tuple(self._attachments)

    def __len__(self) -> int:
        return len(self._attachments)

    def __iter__(self) -> Iterator[Attachment]:
        return iter(self.attachments)

    def __repr__(self) -> str:
        body = ", ".join(f"{a.constraint.name} @ {a.scope}" for a in self._attachments)
        return f"ConstraintSet([{body}])"

    def add(
        self,
        constraint: Constraint | Expression,
        *,
        level: int | None = None,
        nodes: Iterable[Hashable] | None = None,
    ) -> ConstraintSet:
        """Attach ``constraint`` (see the module docstring for scopes); returns ``self``.

        Raises:
            ConstraintError: ``nodes`` without ``level``, a bad level, a level outside
                ``n_levels``, or an object that is not a constraint or expression.
        """
        checked = as_constraint(constraint)
        att = Attachment(checked, level, _node_labels(nodes, level, checked.name))
        if self._n_levels is not None and att.level is not None:
            self._check_range(att.level, att.constraint.name)
        self._attachments.append(att)
        return self

    # -- queries -----------------------------------------------------------------------------
    def for_level(self, level: int) -> tuple[Constraint, ...]:
        """Constraints that apply to every node of ``level`` (whole-tree and level-wide)."""
        self._check_query(level)
        return tuple(
            a.constraint
            for a in self._attachments
            if a.level is None or (a.level == level and a.nodes is None)
        )

    def node_specific(self, level: int) -> dict[Hashable, tuple[Constraint, ...]]:
        """Per node label of ``level``, the constraints attached to that node by name."""
        self._check_query(level)
        out: dict[Hashable, list[Constraint]] = {}
        for a in self._attachments:
            if a.level == level and a.nodes is not None:
                for label in sorted(a.nodes, key=repr):
                    out.setdefault(label, []).append(a.constraint)
        return {label: tuple(cs) for label, cs in out.items()}

    def for_node(self, level: int, label: Hashable) -> tuple[Constraint, ...]:
        """All constraints of one node: ``for_level(level)`` then its node-specific ones."""
        self._check_query(level)
        specific = tuple(
            a.constraint
            for a in self._attachments
            if a.level == level and a.nodes is not None and label in a.nodes
        )
        return self.for_level(level) + specific

    def invariants(self) -> tuple[Attachment, ...]:
        """Attachments of contextual constraints (invariants), with their scope."""
        return tuple(a for a in self._attachments if a.constraint.is_invariant)

    def validate(
        self,
        n_levels: int,
        labels_by_level: Mapping[int, Collection[Hashable]] | None = None,
    ) -> None:
        """Check every attachment against a tree of ``n_levels`` levels.

        Args:
            n_levels: number of levels of the tree (levels are ``0 .. n_levels - 1``).
            labels_by_level: optional node labels of each level; if given, a node label that
                does not exist at its level is an error (a typo would otherwise make the
                constraint apply nowhere, silently).

        Raises:
            ConstraintError: naming the constraint, the level and the valid range, or the
                unknown labels.
        """
        _check_level(n_levels, "n_levels")
        for a in self._attachments:
            if a.level is None:
                continue
            self._check_range(a.level, a.constraint.name, n_levels)
            if labels_by_level is not None and a.nodes is not None:
                known = labels_by_level.get(a.level)
                if known is None:
                    continue
                known_set = set(known)
                missing = a.nodes - known_set
                if missing:
                    raise ConstraintError(
                        f"{a.constraint.name} is attached to nodes {_preview(missing)} of "
                        f"level {a.level}, which has no such nodes; its labels are "
                        f"{_preview(known_set)}"
                    )

    # -- helpers -----------------------------------------------------------------------------
    def _check_range(self, level: int, name: str, n_levels: int | None = None) -> None:
        n = self._n_levels if n_levels is None else n_levels
        if n is not None and level >= n:
            raise ConstraintError(
                f"{name} is attached to level {level}, but the tree has {n} level(s): valid "
                f"levels are 0..{n - 1} (0 = root)"
            )

    def _check_query(self, level: int) -> None:
        _check_level(level)
        if self._n_levels is not None and level >= self._n_levels:
            raise ConstraintError(
                f"level ({level}) is outside the tree: valid levels are "
                f"0..{self._n_levels - 1} (0 = root)"
            )


def _preview(labels: Iterable[Hashable], limit: int = 10) -> str:
    vals = sorted(labels, key=repr)
    shown = ", ".join(repr(v) for v in vals[:limit])
    more = f", ... ({len(vals)} in all)" if len(vals) > limit else ""
    return f"[{shown}{more}]"


def check_constraint_set(constraints: object, n_levels: int) -> ConstraintSet | None:
    """``constraints`` checked as a release's argument: None, or a ``ConstraintSet`` valid on
    a tree of ``n_levels`` levels (``ConstraintSet.validate``).

    Why: a list of constraints (what a caller may well pass) had no ``validate`` and ended in
    an ``AttributeError`` from inside the release.

    Raises:
        ConstraintError: ``constraints`` is not a ``ConstraintSet``, or does not fit the tree.
    """
    if constraints is None:
        return None
    if not isinstance(constraints, ConstraintSet):
        raise ConstraintError(
            f"constraints ({_shown(constraints)}) must be a ConstraintSet or None; build one "
            "with ConstraintSet().add(constraint, level=...)"
        )
    constraints.validate(n_levels)
    return constraints


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
