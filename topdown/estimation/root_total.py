"""The root's total held at the rounded BLUE total (``estimator="blue"``, no invariant there).

Why. Children sum to their parent, so every level's total errors add up to the root's error
and each level's mean total error is the root's error divided by its number of nodes. The
root's L2 pass clips its negative cells at zero, which pushes its total up (on the ACS excerpt,
detailed only, rho 0.5: +4.3 persons on average): every level below inherits that bias. The
BLUE's root total is unbiased. Holding the root's published total at it, rounded to an integer
(and at least 0), makes every level's totals unbiased on average, the way a published total
invariant does, at no privacy cost: it reads only the BLUE, which reads only the noisy
measurements (post-processing). The held total is a bound of the estimation passes, not an
invariant of the data: ``Release.invariants`` and the ledger's invariants do not list it; the
release's estimation note (``RootTotal.to_dict``) does.

When. Only where it cannot make the root's problem infeasible, and where it is needed:

- the estimator is ``"blue"`` (``"topdown"``, the Census Bureau's method, is left as it was);
- no invariant is bound anywhere in the tree: one at the root already publishes its total,
  and one below could contradict the held total (a child's published total above it);
- the root has no constraint with rows (a bound on some of its cells could contradict the
  total); constraints that only force cells to zero are fine while a cell remains free;
- the BLUE identifies the root's total (finite variance).

Otherwise the passes run as before and the reason is logged and recorded.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from constraints.aggregate_constraints import SumEqual
from constraints.attach import ConstraintSet
from constraints.domain import Domain
from constraints.logical_expressions.atomic import TrueExpression
from topdown.blue.estimate import Blue
from topdown.estimation.node_constraints import NodeConstraints
from topdown.measurement.tree import Tree

__all__ = ["HELD_NAME", "RootTotal", "decide", "with_root_total"]

log = logging.getLogger(__name__)

#: The name of the bound the passes hold (in solver messages and captured problems).
HELD_NAME = "root total held at the rounded BLUE total"


@dataclass(frozen=True)
class RootTotal:
    """What the rule decided for the root's total.

    Attributes:
        held: whether the passes hold the root's total.
        value: the held total (the BLUE's root total, rounded, at least 0), or None.
        blue_total: the BLUE's root total before rounding, or None when not held.
        stderr: its standard error, or None when not held.
        reason: why it is held or not (one sentence).
    """

    held: bool
    reason: str
    value: int | None = None
    blue_total: float | None = None
    stderr: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The release's estimation note (JSON-ready). ``topdown check`` recomputes it from the
        published measurements, so the floats are rounded to 2 decimals (the last bits of a
        float sum may differ between machines)."""
        out: dict[str, Any] = {"held": self.held, "reason": self.reason}
        if self.held:
            out["value"] = self.value
            out["blue_total"] = None if self.blue_total is None else round(self.blue_total, 2)
            out["stderr"] = None if self.stderr is None else round(self.stderr, 2)
        return out


def decide(
    estimator: str,
    tree: Tree,
    domain: Domain,
    estimate: Blue | None,
    constraints: ConstraintSet | None = None,
    invariants: Mapping[int, Mapping[int, tuple]] | None = None,
) -> RootTotal:
    """Whether to hold the root's total, and at which value (see the module docstring)."""
    if estimator != "blue" or estimate is None:
        return RootTotal(False, f"estimator {estimator!r}: the passes fit the root as before")
    if tree.levels[0].size != 1:
        return RootTotal(False, f"the top level has {tree.levels[0].size} nodes, not one root")
    bound = sorted(level for level, nodes in (invariants or {}).items() if nodes)
    if bound:
        return RootTotal(
            False,
            f"invariants are bound at level(s) {bound}: they publish or constrain the totals",
        )
    book = NodeConstraints(domain, constraints, None)
    attached = book.of(0, 0, tree.levels[0].labels[0])
    if attached:
        rows = book.rows(attached)
        zeros = book.zeros(attached)
        if rows.n_rows:
            return RootTotal(
                False,
                f"the root has constraint(s) {list(rows.names)} that a held total could contradict",
            )
        if zeros is not None and bool(zeros.all()):
            return RootTotal(False, "the root's constraints force every cell to zero")
    answer = estimate.answer(0, "total")
    total = float(np.asarray(answer.noisy)[0, 0])
    variance = float(np.asarray(answer.variance)[0])
    if not (math.isfinite(total) and math.isfinite(variance)):
        return RootTotal(False, f"the BLUE does not identify the root's total ({total})")
    value = max(0, int(np.rint(total)))
    return RootTotal(
        True,
        "estimator 'blue' with no invariant: the root's total is held at the BLUE's "
        "(unbiased) total, rounded, so no level's totals inherit the clipping bias",
        value=value,
        blue_total=total,
        stderr=math.sqrt(variance),
    )


def with_root_total(
    invariants: Mapping[int, Mapping[int, tuple]] | None, decision: RootTotal
) -> dict[int, dict[int, tuple]]:
    """The bound constraints the passes hold (``estimation.estimate.estimate``'s ``invariants``):
    ``invariants`` plus, when the decision holds it, the root's total as one more bound equality
    (the shape of a bound total invariant, see ``topdown.estimation.estimators.exact_totals``).
    ``invariants`` itself is not changed. Logs the decision."""
    out = {level: dict(nodes) for level, nodes in (invariants or {}).items()}
    if not decision.held:
        log.info("root total not held: %s", decision.reason)
    else:
        log.info(
            "root total held at %s (BLUE %.2f, standard error %.2f)",
            decision.value,
            decision.blue_total,
            decision.stderr,
        )
    if decision.held and decision.value is not None:
        held = SumEqual(TrueExpression(), decision.value, name=HELD_NAME)
        root = out.setdefault(0, {})
        root[0] = tuple(root.get(0, ())) + (held,)
    return out
