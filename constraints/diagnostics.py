"""Feasibility diagnostics: contradictions found before a solver is asked.

A solver that fails says "infeasible"; it does not say which constraints disagree or by how
much. These checks find the common contradictions directly from the constraints' masks and
values and raise ``InfeasibleConstraintsError`` naming the node, the constraints and the
numbers. They are sound (every report is a real contradiction for non-negative integer
counts) but not complete: a problem that passes may still be infeasible, and the engine's
failsafe then reports it.

Checked at one node (``check_node``): sums over cells that are all structural zeros (or
outside the kept ``cells``); non-integer equalities; bounds below zero; conflicting bounds on
the same cells; a subset whose sum must exceed its superset's (alone, or several disjoint
subsets together); sums larger than the parent's values on the selected cells. Across the
children of one parent (``check_children``): equal-expression sums that cannot add up to the
parent's, and cells that are zero in every child but not in the parent.

Unbound contextual constraints carry no value yet and are skipped.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from constraints.aggregate_constraints import AggregateConstraint, format_number
from constraints.compile import _normalise
from constraints.constraint import Constraint, check_cells
from constraints.domain import Domain
from constraints.errors import ConstraintError, InfeasibleConstraintsError
from constraints.logical_expressions.base import Expression

__all__ = ["check_node", "check_children"]

logger = logging.getLogger(__name__)
_TOL = 1e-9


@dataclass
class _Group:
    """The constraints of one node that sum the same (effective) cells, and their bounds."""

    mask: np.ndarray
    expr: str
    lo: float = 0.0
    hi: float = math.inf
    lo_name: str | None = None
    hi_name: str | None = None
    lo_exact: bool = False

    def amount(self) -> str:
        return _num(self.lo) if self.lo_exact else f"at least {_num(self.lo)}"

    def need(self) -> str:
        return f"must be {self.amount()}"


def _num(v: float) -> str:
    return format_number(float(v)) if not isinstance(v, int) else str(v)


def _raise(problems: list[tuple[str, tuple[str, ...]]], node: object) -> None:
    if not problems:
        return
    prefix = f"node {node!r}: " if node is not None else ""
    names = tuple(dict.fromkeys(n for _, ns in problems for n in ns))
    message = prefix + "; ".join(msg for msg, _ in problems)
    logger.info("infeasible constraints: %s", message)
    raise InfeasibleConstraintsError(message, node=node, constraints=names)


def _parent_full(domain: Domain, values: np.ndarray, kept: np.ndarray | None) -> np.ndarray:
    pv = np.asarray(values, dtype=np.float64).reshape(-1)
    if pv.size == domain.size:
        return pv
    if kept is not None and pv.size == kept.size:
        full = np.zeros(domain.size)
        full[kept] = pv
        return full
    expected = f"{domain.size}" + (f" or len(cells) = {kept.size}" if kept is not None else "")
    raise ConstraintError(f"parent_values has {pv.size} entries, expected {expected}")


def _bounds(c: AggregateConstraint, problems: list) -> tuple[float, float] | None:
    """Integer-tightened ``(lo, hi)`` of one constraint, or None after reporting a problem."""
    v = float(c.value)
    if c.sense == "==" and not v.is_integer():
        problems.append(
            (f"{c.name}: the sum must be {_num(v)}, but counts are integers", (c.name,))
        )
        return None
    if c.sense in ("==", "<=") and v < 0:
        need = "must be" if c.sense == "==" else "must be at most"
        problems.append(
            (f"{c.name}: the sum {need} {_num(v)}, but counts are non-negative", (c.name,))
        )
        return None
    if c.sense == ">=" and v <= 0:
        if v < 0:
            logger.warning("%s has a negative lower bound: it always holds", c.name)
        return 0.0, math.inf
    lo = math.ceil(v) if c.sense in ("==", ">=") else 0.0
    hi = math.floor(v) if c.sense in ("==", "<=") else math.inf
    return float(lo), float(hi)


def check_node(
    constraints: Iterable[Constraint | Expression],
    domain: Domain,
    *,
    node: Hashable | None = None,
    parent_total: float | None = None,
    parent_values: np.ndarray | None = None,
    cells: np.ndarray | Sequence[int] | None = None,
) -> None:
    """Raise if one node's constraints contradict each other or its parent.

    Args:
        constraints: the node's constraints (bound invariants; bare expressions allowed).
        domain: the query domain.
        node: the node's label, quoted in the message.
        parent_total: the parent's total; no sum of the child may exceed it.
        parent_values: the parent's value per cell (length ``domain.size``, or
            ``len(cells)`` in the order of ``cells``); the child's sum over any cell set is
            at most the parent's sum there.
        cells: kept cells; the others are known to be zero (e.g. the parent's zero cells).

    Raises:
        InfeasibleConstraintsError: every contradiction found, in one message, with
            ``.node`` and ``.constraints`` (the names involved).
    """
    cons = _normalise(constraints)
    kept = check_cells(domain, cells)
    problems: list[tuple[str, tuple[str, ...]]] = []
    known_zero = _KnownZero.of(cons, domain, kept)
    glist = _groups(cons, domain, known_zero, problems)
    _check_conflicts(glist, problems)
    _check_nesting(glist, problems)
    if parent_values is not None or parent_total is not None:
        pv = None if parent_values is None else _parent_full(domain, parent_values, kept)
        _check_parent(glist, pv, parent_total, problems)
    _raise(problems, node)


@dataclass(frozen=True)
class _KnownZero:
    """Cells known to be zero at a node: structural zeros (and who set them), dropped cells."""

    parts: tuple[tuple[str, np.ndarray], ...]
    zeros: np.ndarray
    dropped: np.ndarray

    @classmethod
    def of(cls, cons: list[Constraint], domain: Domain, kept: np.ndarray | None) -> _KnownZero:
        parts = tuple((c.name, m) for c in cons if (m := c.zero_mask(domain)) is not None)
        zeros = np.zeros(domain.size, dtype=bool)
        for _, m in parts:
            zeros |= m
        dropped = np.zeros(domain.size, dtype=bool)
        if kept is not None:
            dropped[:] = True
            dropped[kept] = False
        return cls(parts, zeros, dropped)


def _groups(
    cons: list[Constraint], domain: Domain, known_zero: _KnownZero, problems: list
) -> list[_Group]:
    """The aggregate constraints grouped by the cells they effectively sum, bounds tightened;
    a positive sum over cells that are all known to be zero is reported here."""
    groups: dict[bytes, _Group] = {}
    for c in cons:
        if c.is_invariant:
            logger.debug("skipping unbound contextual constraint %s", c.name)
            continue
        if not isinstance(c, AggregateConstraint):
            continue
        b = _bounds(c, problems)
        if b is None:
            continue
        lo, hi = b
        raw = c.expr.mask(domain)
        eff = raw & ~known_zero.zeros & ~known_zero.dropped
        if not eff.any() and lo > 0:
            problems.append(_all_zero(c, raw, lo, known_zero))
            continue
        g = groups.setdefault(eff.tobytes(), _Group(eff, str(c.expr)))
        if lo > g.lo or g.lo_name is None and lo == g.lo and c.sense == "==":
            g.lo, g.lo_name, g.lo_exact = lo, c.name, c.sense == "=="
        if hi < g.hi or g.hi_name is None and hi == g.hi:
            g.hi, g.hi_name = hi, c.name
    return list(groups.values())


def _all_zero(
    c: AggregateConstraint, raw: np.ndarray, lo: float, known_zero: _KnownZero
) -> tuple[str, tuple[str, ...]]:
    culprits = tuple(n for n, m in known_zero.parts if (m & raw).any())
    where = (
        "structural zeros"
        if not (raw & known_zero.dropped & ~known_zero.zeros).any()
        else "structural zeros or outside the kept cells"
    )
    need = f"must be {_num(lo)}" if c.sense == "==" else f"must be at least {_num(lo)}"
    against = f" contradicts {', '.join(culprits)}" if culprits else ""
    return (
        f"{c.name}{against}: all {int(raw.sum())} cells of {c.expr} are {where} but the sum {need}",
        (c.name, *culprits),
    )


def _check_conflicts(glist: list[_Group], problems: list) -> None:
    """Bounds on the same cells that contradict each other."""
    for g in glist:
        if g.lo > g.hi:
            k = int(g.mask.sum())
            problems.append(
                (
                    f"{g.lo_name} contradicts {g.hi_name}: on the same {k} cells the sum "
                    f"{g.need()} and at most {_num(g.hi)}",
                    _names(g.lo_name, g.hi_name),
                )
            )


def _check_parent(
    glist: list[_Group], pv: np.ndarray | None, parent_total: float | None, problems: list
) -> None:
    """Sums the child must hold that the parent's values (or total) cannot cover."""
    for g in glist:
        if g.lo_name is None or g.lo <= 0:
            continue
        if pv is not None:
            p = float(pv[g.mask].sum())
            if g.lo > p + _TOL:
                problems.append(
                    (
                        f"{g.lo_name} exceeds the parent: the parent holds {_num(p)} on the "
                        f"{int(g.mask.sum())} cells of {g.expr} but the sum {g.need()}",
                        (g.lo_name,),
                    )
                )
                continue
        if parent_total is not None and g.lo > float(parent_total) + _TOL:
            problems.append(
                (
                    f"{g.lo_name} exceeds the parent: the sum {g.need()} but the parent's "
                    f"total is {_num(parent_total)}",
                    (g.lo_name,),
                )
            )


def _names(*names: str | None) -> tuple[str, ...]:
    """The constraint names involved (a group's bound may have no name: the default 0 / inf)."""
    return tuple(n for n in names if n is not None)


def _check_nesting(glist: list[_Group], problems: list) -> None:
    """Subsets whose required sum exceeds what their superset allows."""
    if len(glist) < 2:
        return
    M = np.array([g.mask for g in glist], dtype=np.int64)
    inter = M @ M.T
    sizes = M.sum(axis=1)
    for j, big in enumerate(glist):
        if not math.isfinite(big.hi):
            continue
        subs = [
            i
            for i in range(len(glist))
            if i != j and inter[i, j] == sizes[i] and sizes[i] < sizes[j] and glist[i].lo > 0
        ]
        for i in subs:
            small = glist[i]
            if small.lo > big.hi:
                problems.append(
                    (
                        f"{small.lo_name} contradicts {big.hi_name}: the {sizes[i]} cells of "
                        f"{small.expr} are among the {sizes[j]} cells of {big.expr}, so its sum "
                        f"({small.amount()}) cannot exceed {big.expr}'s (at most {_num(big.hi)})",
                        _names(small.lo_name, big.hi_name),
                    )
                )
        # Greedy packing of disjoint subsets (largest lower bound first): a sound certificate.
        chosen: list[int] = []
        for i in sorted(subs, key=lambda i: -glist[i].lo):
            if all(inter[i, c] == 0 for c in chosen):
                chosen.append(i)
        total = sum(glist[i].lo for i in chosen)
        if len(chosen) > 1 and total > big.hi and all(glist[i].lo <= big.hi for i in chosen):
            names = _names(*(glist[i].lo_name for i in chosen))
            problems.append(
                (
                    f"{', '.join(names)} contradict {big.hi_name}: these {len(chosen)} disjoint "
                    f"subsets of the {sizes[j]} cells of {big.expr} must hold at least "
                    f"{_num(total)} in all, but {big.expr} holds at most {_num(big.hi)}",
                    _names(*names, big.hi_name),
                )
            )


def check_children(
    per_child_constraints: Sequence[Iterable[Constraint | Expression]],
    domain: Domain,
    parent_values: np.ndarray,
    labels: Sequence[Hashable] | None = None,
    *,
    parent: Hashable | None = None,
) -> None:
    """Raise if the children of one parent cannot be made consistent with it.

    Each child is first checked with ``check_node`` against ``parent_values``. Then, for every
    expression constrained in some child, the children's lower bounds must not add up to more
    than the parent's sum on those cells, and, when every child bounds it from above, their
    upper bounds must reach it (for ``SumEqual`` in every child: the values must add up to the
    parent's exactly). Finally a cell that is a structural zero in every child must be zero in
    the parent.

    Args:
        per_child_constraints: each child's constraints, in child order.
        domain: the query domain.
        parent_values: the parent's value per cell (length ``domain.size``).
        labels: child labels (for messages); defaults to positions.
        parent: the parent's label, quoted in cross-child messages.

    Raises:
        InfeasibleConstraintsError: naming the child (per-child problems) or the parent.
    """
    children = [_normalise(cs) for cs in per_child_constraints]
    labels = list(labels) if labels is not None else list(range(len(children)))
    if len(labels) != len(children):
        raise ConstraintError(
            f"labels has {len(labels)} entries but there are {len(children)} children"
        )
    pv = _parent_full(domain, parent_values, None)
    for cons, label in zip(children, labels, strict=True):
        check_node(cons, domain, node=label, parent_values=pv)

    problems: list[tuple[str, tuple[str, ...]]] = []
    all_zero = np.ones(domain.size, dtype=bool)
    for cons in children:
        z = np.zeros(domain.size, dtype=bool)
        for c in cons:
            m = c.zero_mask(domain)
            if m is not None:
                z |= m
        all_zero &= z
    bad = all_zero & (pv > _TOL)
    if children and bad.any():
        names = tuple(
            dict.fromkeys(
                c.name for cons in children for c in cons if c.zero_mask(domain) is not None
            )
        )
        problems.append(
            (
                f"{int(bad.sum())} cell(s) are structural zeros in every child but the parent "
                f"holds {_num(float(pv[bad].sum()))} there",
                names,
            )
        )

    # per raw mask: each child's interval [lo, hi] and the names that set it
    table: dict[bytes, dict] = {}
    for ci, cons in enumerate(children):
        for c in cons:
            if c.is_invariant or not isinstance(c, AggregateConstraint):
                continue
            b = _bounds(c, [])
            if b is None:
                continue
            mask = c.expr.mask(domain)
            entry = table.setdefault(mask.tobytes(), {"mask": mask, "expr": str(c.expr), "per": {}})
            lo, hi, names = entry["per"].get(ci, (0.0, math.inf, ()))
            entry["per"][ci] = (max(lo, b[0]), min(hi, b[1]), names + (c.name,))
    for entry in table.values():
        p = float(pv[entry["mask"]].sum())
        per = entry["per"]
        k = int(entry["mask"].sum())
        names = tuple(n for _, _, ns in per.values() for n in ns)
        detail = ", ".join(f"{labels[ci]!r}: {_num(lo)}" for ci, (lo, _, _) in per.items())
        sum_lo = sum(lo for lo, _, _ in per.values())
        if sum_lo > p + _TOL:
            problems.append(
                (
                    f"the children's sums on the {k} cells of {entry['expr']} must be at least "
                    f"{_num(sum_lo)} in all ({detail}) but the parent holds {_num(p)} there",
                    names,
                )
            )
        elif len(per) == len(children):
            sum_hi = sum(hi for _, hi, _ in per.values())
            if sum_hi < p - _TOL:
                detail_hi = ", ".join(
                    f"{labels[ci]!r}: {_num(hi)}" for ci, (_, hi, _) in per.items()
                )
                problems.append(
                    (
                        f"the children's sums on the {k} cells of {entry['expr']} can be at most "
                        f"{_num(sum_hi)} in all ({detail_hi}) but the parent holds {_num(p)} there",
                        names,
                    )
                )
    _raise(problems, parent)
