"""Top-down estimation: the root, then each level's families, from published values only.

For each level this module turns the noisy measurements, the parent level's published counts
and the attached constraints into ``FamilyTask``s (one per parent), runs them on an executor,
and assembles the level's integer counts. It never sees confidential data: invariants arrive
already bound to their published values by ``topdown.measure``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from constraints.attach import ConstraintSet
from constraints.diagnostics import check_children, check_node
from constraints.domain import Domain
from topdown.blue import EstimatorInputs, as_inputs
from topdown.estimators import family_weights
from topdown.executors import Executor
from topdown.family import FamilyResult, FamilyTask, solve_family
from topdown.measure import Measurements
from topdown.node_constraints import NodeConstraints
from topdown.tree import Tree

__all__ = ["EstimateOptions", "LevelStats", "estimate"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EstimateOptions:
    """Options of the estimation passes (parsed at the edge, read here)."""

    solver: str = "auto"
    solver_options: dict[str, Any] = field(default_factory=dict)
    failsafe: bool = True
    multipass_tolerance: float = 1e-6
    controlled_rounding: bool = True


@dataclass
class LevelStats:
    """What estimating one level took: problems, time, solvers, failsafe uses."""

    level: int
    families: int = 0
    problems: int = 0
    l2_time: float = 0.0
    round_time: float = 0.0
    solvers: tuple[str, ...] = ()
    widened: int = 0
    failsafe: list[str] = field(default_factory=list)
    failsafe_slack: float = 0.0

    def add(self, r: FamilyResult) -> None:
        self.families += 1
        self.problems += r.problems
        self.l2_time += r.l2_time
        self.round_time += r.round_time
        self.solvers += tuple(s for s in r.solvers_used if s not in self.solvers)
        self.widened += int(r.widened)
        if r.failsafe_note:
            self.failsafe.append(r.failsafe_note)
            self.failsafe_slack += r.failsafe_slack

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "families": self.families,
            "problems_solved": self.problems,
            "l2_seconds": round(self.l2_time, 4),
            "rounding_seconds": round(self.round_time, 4),
            "solvers": ", ".join(self.solvers) or "none (copied)",
            "widened_roundings": self.widened,
            "failsafe_families": len(self.failsafe),
            "failsafe_slack": self.failsafe_slack,
            "status": "optimal" if not self.failsafe else "failsafe",
        }


def estimate(
    tree: Tree,
    domain: Domain,
    measurements: Measurements | EstimatorInputs,
    *,
    first_pass: dict[int, tuple[str, ...]],
    constraints: ConstraintSet | None = None,
    invariants: dict[int, dict[int, tuple]] | None = None,
    options: EstimateOptions = EstimateOptions(),
    executor: Executor | None = None,
    progress: Callable | None = None,
) -> tuple[list[np.ndarray], list[LevelStats]]:
    """Integer, non-negative, consistent counts for every node of every level.

    Returns:
        counts per level (nodes x cells, int64) and the statistics of each level.
    """
    executor = executor or Executor()
    inputs = as_inputs(measurements)  # float values, per-node variances
    book = NodeConstraints(domain, constraints, invariants)
    counts: list[np.ndarray] = []
    stats: list[LevelStats] = []
    for level in range(tree.n_levels):
        lv = tree.levels[level]
        qms = inputs.at(level)
        matrices = [m.query.matrix(domain) for m in qms]
        fp = tuple(i for i, m in enumerate(qms) if m.query.name in first_pass.get(level, ()))
        if level == 0:
            families = [np.array([0])]
            parents = [None]
        else:
            families = lv.children_of(tree.levels[level - 1].size)
            parents = list(range(tree.levels[level - 1].size))
        tasks = []
        for parent, children in zip(parents, families, strict=True):
            tasks.append(
                _family_task(
                    level,
                    lv.labels,
                    parent,
                    children,
                    counts[-1][parent] if parent is not None else None,
                    tree.levels[level - 1].labels[parent] if parent is not None else None,
                    qms,
                    matrices,
                    fp,
                    book,
                    domain,
                    options,
                )
            )
        results = executor.map(solve_family, tasks, progress, f"estimate level {level}")
        level_counts = np.zeros((lv.size, domain.size), dtype=np.int64)
        level_stats = LevelStats(level)
        for task, children, res in zip(tasks, families, results, strict=True):
            level_counts[np.ix_(children, task.support)] = res.counts
            level_stats.add(res)
        counts.append(level_counts)
        stats.append(level_stats)
        log.info(
            "estimated level %d: %d famil%s, %d problem(s), L2 %.2f s, rounding %.2f s, solvers %s",
            level,
            level_stats.families,
            "y" if level_stats.families == 1 else "ies",
            level_stats.problems,
            level_stats.l2_time,
            level_stats.round_time,
            list(level_stats.solvers),
        )
    return counts, stats


def _family_task(
    level,
    labels,
    parent,
    children,
    parent_counts,
    parent_label,
    qms,
    matrices,
    fp,
    book: NodeConstraints,
    domain: Domain,
    options: EstimateOptions,
) -> FamilyTask:
    all_cells = np.arange(domain.size)
    per_child = [book.of(level, int(c), labels[c]) for c in children]
    if parent_counts is None:
        # the root: every cell that no constraint forces to zero
        zeros = book.zeros(per_child[0])
        support = all_cells if zeros is None else all_cells[~zeros]
        parent_values = None
    else:
        support = np.flatnonzero(parent_counts > 0)
        parent_values = parent_counts[support].astype(float)
    n, k = len(support), len(children)
    child_labels = tuple(str(labels[c]) for c in children)
    # diagnostics before any solver: contradictions are reported with names and numbers.
    # Within a node they always raise; against the parent's values they raise unless the
    # failsafe is on, which then relaxes consistency and reports it.
    for label, cs in zip(child_labels, per_child, strict=True):
        if cs:
            check_node(list(cs), domain, node=label)
    if parent_counts is not None and not options.failsafe and any(per_child):
        check_children(
            [list(cs) for cs in per_child],
            domain,
            parent_counts,
            child_labels,
            parent=str(parent_label),
        )
    ub = None
    if parent_counts is not None and any(book.zeros(cs) is not None for cs in per_child):
        ub = np.full(k * n, np.inf)
        for c, cs in enumerate(per_child):
            z = book.zeros(cs)
            if z is not None:
                ub[c * n : (c + 1) * n][z[support]] = 0.0
    rows = [book.rows(cs, support) for cs in per_child]
    joint = None
    names: tuple[str, ...] = ()
    if any(r is not None for r in rows):
        blocks, lbs, ubs = [], [], []
        for label, r in zip(child_labels, rows, strict=True):
            if r is None:
                blocks.append(sp.csr_matrix((0, n)))
                continue
            blocks.append(r[0])
            lbs.append(r[1])
            ubs.append(r[2])
            names += tuple(f"{label}: {nm}" for nm in r[3])
        joint = (sp.block_diag(blocks, format="csr"), np.concatenate(lbs), np.concatenate(ubs))
    meas = []
    for m, Q, w in zip(qms, matrices, family_weights(qms, children), strict=True):
        if m.query.attributes is None:
            # the detailed query on the support is the identity; the answers of cells known to
            # be zero only add a constant to the objective
            Q_s, Y = sp.identity(n, format="csr"), m.noisy[np.ix_(children, support)].astype(float)
        else:
            Q_s, Y = Q[:, support].tocsr(), m.noisy[children].astype(float)
        meas.append((Q_s, Y, np.broadcast_to(w[:, None], Y.shape).copy()))
    return FamilyTask(
        level=level,
        parent_label=None if parent_label is None else str(parent_label),
        child_labels=child_labels,
        parent_values=parent_values,
        measurements=tuple(meas),
        support=support,
        first_pass=fp,
        rows=joint,
        ub=ub,
        row_names=names,
        solver=options.solver,
        options=dict(options.solver_options),
        failsafe=options.failsafe,
        tolerance=options.multipass_tolerance,
        controlled_rounding=options.controlled_rounding,
    )


def relative_weights(variances: list[float]) -> np.ndarray:
    """Inverse-variance weights scaled so the most precise query weighs 1.

    Only ratios matter to the least-squares answer; scaling keeps the objective well conditioned
    and survives a variance that underflows to 0.0 (a huge budget): exact queries then get
    weight 1 and the others 0.
    """
    v = np.asarray(variances, dtype=float)
    low = v.min()
    if low <= 0.0:
        return (v <= 0.0).astype(float)
    return low / v
