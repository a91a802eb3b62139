"""Top-down estimation: the root, then each level's families, from published values only.

For each level this module turns the noisy measurements, the parent level's published counts and the
attached constraints into ``FamilyTask``s (one per parent), runs them on an executor, and assembles
the level's integer counts. A level whose families share one structure (the detailed query and
marginals, nothing attached to any node) is solved by the level-batched passes instead
(``topdown.estimation.batched.level``): chunks of families on the executor, no task per family. It
never sees confidential data: invariants arrive already bound to their published values by
``topdown.measurement.measure``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import scipy.sparse as sp

import solvers
from constraints.attach import ConstraintSet
from constraints.compile import joint_rows
from constraints.constraint import LinearRows
from constraints.diagnostics import check_children, check_node
from constraints.domain import Domain
from topdown.estimation import capture
from topdown.estimation.batched.level import LevelInputs, batch_level
from topdown.estimation.estimators import family_weights
from topdown.estimation.family import FamilyTask, Measurement, solve_family
from topdown.estimation.node_constraints import NodeConstraints
from topdown.estimation.passes import EstimateOptions, LevelStats, SolverChoice, SolveStats
from topdown.execution.executors import Executor
from topdown.measurement.estimator_inputs import EstimatorInputs, QueryEstimate, as_inputs
from topdown.measurement.measure import Measurements
from topdown.measurement.tree import Tree, children_of
from topdown.support.int_types import child_count_type, holding

__all__ = ["EstimateOptions", "LeafChunks", "LevelStats", "SolveStats", "SolverChoice", "estimate"]

log = logging.getLogger(__name__)


class LeafChunks(Protocol):
    """The leaf level's inputs a chunk of families at a time
    (``topdown.blue.leaf_families.LeafFamilies``)."""

    @property
    def chunks(self) -> Sequence[np.ndarray]:
        """The parents (indices in the level above the leaves) of each chunk."""
        ...

    def fed(self, i: int) -> tuple[np.ndarray, tuple[QueryEstimate, ...]]:
        """Chunk ``i``'s leaves (ascending indices) and the passes' inputs for them."""
        ...


def estimate(
    tree: Tree,
    domain: Domain,
    measurements: Measurements | EstimatorInputs,
    *,
    first_pass: dict[int, tuple[str, ...]],
    constraints: ConstraintSet | None = None,
    invariants: dict[int, dict[int, tuple]] | None = None,
    options: EstimateOptions | None = None,
    executor: Executor | None = None,
    progress: Callable | None = None,
    fixed: Sequence[np.ndarray] = (),
    leaves: LeafChunks | None = None,
) -> tuple[list[np.ndarray], list[LevelStats]]:
    """Integer, non-negative, consistent counts for every node of every level.

    ``fixed`` gives the published counts of the first ``len(fixed)`` levels (nodes x cells
    each), which are then taken as they are, not estimated: ``topdown.streaming.run`` estimates a
    subtree from its top's released counts this way. Statistics cover the estimated levels.

    ``leaves`` gives the leaf level's inputs a chunk of families at a time (the BLUE's leaf
    level, ``topdown.blue.leaf_families``; ``measurements`` then has none there): the level's
    float inputs are never whole.

    Returns:
        counts per level (nodes x cells; the root's int64, the other levels' in the
        narrowest type that holds them: ``topdown.support.int_types.child_count_type``) and the
        statistics of each level.

    Raises:
        UnknownSolverError: a solver named in ``options`` is not installed (before any work).
    """
    options = options or EstimateOptions()
    for name in options.solver.named():
        solvers.get(name)
    if options.capture is not None:
        capture.prepare(options.capture)
    executor = executor or Executor()
    fitted = as_inputs(measurements)  # the raw measurements, or the BLUE's estimates
    book = NodeConstraints(domain, constraints, invariants)
    counts: list[np.ndarray] = []
    stats: list[LevelStats] = []
    for level in range(tree.n_levels):
        if level < len(fixed):
            counts.append(np.asarray(fixed[level]))
            continue
        lv = tree.levels[level]
        if leaves is not None and level == tree.n_levels - 1:
            level_counts, total = _leaves_by_chunks(
                leaves, tree, counts[-1], first_pass, book, options, executor, progress
            )
        else:
            inputs = LevelInputs.of(level, tree, fitted, first_pass, book, options)
            level_counts, total = _solve_level(
                inputs,
                lv.parent,
                counts[-1] if level else None,
                tree.levels[level - 1].labels if level else None,
                executor,
                progress,
            )
            # not held through the next level: its query matrices (sparse, 0.14 GB on the DHC
            # persons domain) would stay beside the leaf chunks' own
            del inputs
        counts.append(level_counts)
        stats.append(LevelStats.of(level, total))
        # timings are diagnostics: on stderr only with -v (DEBUG), never in a default log
        log.info(
            "estimated level %d: %d famil%s, %d problem(s), solved %s",
            level,
            total.families,
            "y" if total.families == 1 else "ies",
            total.problems,
            [f"{p}: {b} x{c}" for p, b, c in total.solved],
        )
        log.debug(
            "estimated level %d: L2 %.2f s, rounding %.2f s", level, total.l2_time, total.round_time
        )
    if options.capture is not None:
        capture.gather(options.capture)
    return counts, stats


def _solve_level(
    inputs: LevelInputs,
    parent_of: np.ndarray,
    parent_counts: np.ndarray | None,
    parent_labels: np.ndarray | None,
    executor: Executor,
    progress: Callable | None,
) -> tuple[np.ndarray, SolveStats]:
    """One level's counts (the nodes of ``inputs``, children of parents with
    ``parent_counts``, the root's when None): the level-batched passes, then a task per
    family they left."""
    if parent_counts is None:
        families: Sequence[np.ndarray] = [np.array([0])]
    else:
        families = children_of(parent_of, parent_counts.shape[0])
    batch = batch_level(inputs, parent_of, parent_counts, families, executor, progress)
    total = batch.stats
    cells = inputs.book.domain.size
    level_counts = (
        batch.counts
        if batch.counts is not None
        else np.zeros(
            (parent_of.size, cells),
            dtype=np.int64 if parent_counts is None else child_count_type(parent_counts),
        )
    )
    # families the batched passes solved get no task; the rest go to the executor
    todo = range(len(families)) if batch.left is None else batch.left.tolist()
    tasks = [
        _family_task(
            inputs,
            families[p],
            None
            if parent_counts is None or parent_labels is None
            else _Parent(str(parent_labels[p]), parent_counts[p]),
            batch.l2.get(p),
        )
        for p in todo
    ]
    results = (
        executor.map(solve_family, tasks, progress, f"estimate level {inputs.level}")
        if tasks
        else []
    )
    for task, p, res in zip(tasks, todo, results, strict=True):
        level_counts = holding(level_counts, res.counts)
        level_counts[np.ix_(families[p], task.support)] = res.counts
        total += res.stats
    return level_counts, total


def _leaves_by_chunks(
    leaves: LeafChunks,
    tree: Tree,
    parent_counts: np.ndarray,
    first_pass: dict[int, tuple[str, ...]],
    book: NodeConstraints,
    options: EstimateOptions,
    executor: Executor,
    progress: Callable | None,
) -> tuple[np.ndarray, SolveStats]:
    """The leaf level's counts a chunk of families at a time: each chunk's inputs are made
    (``leaves.fed``), its families solved as the whole level's would be (each family's
    answer does not depend on the others: ``topdown.estimation.batched.families``), and
    dropped before the next chunk's are made."""
    level = tree.n_levels - 1
    lv, above = tree.levels[level], tree.levels[level - 1]
    counts = np.zeros((lv.size, book.domain.size), dtype=child_count_type(parent_counts))
    total = SolveStats()
    at = np.full(above.size, -1, dtype=np.int64)
    for i, parents in enumerate(leaves.chunks):
        children, fed = leaves.fed(i)
        at[parents] = np.arange(parents.size)
        inputs = LevelInputs.of_queries(level, lv.labels[children], fed, first_pass, book, options)
        chunk_counts, stats = _solve_level(
            inputs,
            at[lv.parent[children]],
            parent_counts[parents],
            above.labels[parents],
            executor,
            progress,
        )
        del inputs, fed
        counts = holding(counts, chunk_counts)
        counts[children] = chunk_counts
        total += stats
        at[parents] = -1
    return counts, total


@dataclass(frozen=True)
class _Parent:
    """A parent's label and its published counts (every cell)."""

    label: str
    counts: np.ndarray


def _family_task(
    inputs: LevelInputs,
    children: np.ndarray,
    parent: _Parent | None,
    l2: np.ndarray | None = None,
) -> FamilyTask:
    """The estimation task of one parent's children (of the root when ``parent`` is None).

    Runs the constraint diagnostics first, so contradictions are reported with names and
    numbers before any solver is asked.
    """
    per_child = [inputs.book.of(inputs.level, int(c), inputs.labels[c]) for c in children]
    labels = tuple(str(inputs.labels[c]) for c in children)
    support = _support(inputs.book, per_child, parent)
    _diagnose(inputs, per_child, labels, parent)
    return FamilyTask(
        level=inputs.level,
        parent_label=None if parent is None else parent.label,
        child_labels=labels,
        parent_values=None if parent is None else parent.counts[support].astype(float),
        # a level-batched L2 answer leaves the measurements unused: do not build or ship them
        measurements=() if l2 is not None else _measurements(inputs, children, support),
        support=support,
        first_pass=inputs.first_pass,
        held=inputs.held,
        rows=_joint_rows(inputs.book, per_child, labels, support),
        ub=None if parent is None else _structural_zeros(inputs.book, per_child, support),
        options=inputs.options,
        l2=l2,
    )


def _support(book: NodeConstraints, per_child: list[tuple], parent: _Parent | None) -> np.ndarray:
    """The cells solved for: the parent's non-zero cells; at the root, every cell that no
    constraint forces to zero."""
    if parent is not None:
        return np.flatnonzero(parent.counts > 0)
    all_cells = np.arange(book.domain.size)
    zeros = book.zeros(per_child[0])
    return all_cells if zeros is None else all_cells[~zeros]


def _diagnose(
    inputs: LevelInputs, per_child: list[tuple], labels: tuple[str, ...], parent: _Parent | None
) -> None:
    """Within a node contradictions always raise; against the parent's values they raise
    unless the failsafe is on, which then relaxes consistency and reports it."""
    domain = inputs.book.domain
    for label, cs in zip(labels, per_child, strict=True):
        if cs:
            check_node(list(cs), domain, node=label)
    if parent is not None and not inputs.options.failsafe and any(per_child):
        check_children(
            [list(cs) for cs in per_child], domain, parent.counts, labels, parent=parent.label
        )


def _structural_zeros(
    book: NodeConstraints, per_child: list[tuple], support: np.ndarray
) -> np.ndarray | None:
    """Upper bounds of the joint vector: 0 on each child's structural zeros (None if none)."""
    zeros = [book.zeros(cs) for cs in per_child]
    if all(z is None for z in zeros):
        return None
    n = len(support)
    ub = np.full(len(per_child) * n, np.inf)
    for c, z in enumerate(zeros):
        if z is not None:
            ub[c * n : (c + 1) * n][z[support]] = 0.0
    return ub


def _joint_rows(
    book: NodeConstraints, per_child: list[tuple], labels: tuple[str, ...], support: np.ndarray
) -> LinearRows | None:
    """The children's constraint rows over their joint vector, or None when they have none."""
    rows = joint_rows([book.rows(cs, support) for cs in per_child], len(support), labels=labels)
    return rows if rows.n_rows else None


def _measurements(
    inputs: LevelInputs, children: np.ndarray, support: np.ndarray
) -> tuple[Measurement, ...]:
    """Each query restricted to the support, the children's answers and their weights."""
    out = []
    weights = family_weights(inputs.measurements, children)
    for m, Q, w in zip(inputs.measurements, inputs.matrices, weights, strict=True):
        if Q is None:
            # the detailed query on the support is the identity; the answers of cells known to
            # be zero only add a constant to the objective
            Q_s = sp.identity(len(support), format="csr")
            Y = m.noisy[np.ix_(children, support)].astype(float)
        else:
            Q_s, Y = Q[:, support].tocsr(), m.noisy[children].astype(float)
        out.append((Q_s, Y, np.broadcast_to(w[:, None], Y.shape).copy()))
    return tuple(out)
