"""Top-down estimation: the root, then each level's families, from published values only.

For each level this module turns the noisy measurements, the parent level's published counts
and the attached constraints into ``FamilyTask``s (one per parent), runs them on an executor,
and assembles the level's integer counts. A level whose families share one separable structure
(detailed query only, nothing attached to any node) is solved in the parent process by the
level-batched passes of ``topdown.batched`` instead, with no task per family. It never sees
confidential data: invariants arrive already bound to their published values by
``topdown.measure``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

import solvers
from constraints.attach import ConstraintSet
from constraints.compile import joint_rows
from constraints.constraint import LinearRows
from constraints.diagnostics import check_children, check_node
from constraints.domain import Domain
from topdown import capture
from topdown.batched import batched_l2, batched_round, detailed_only
from topdown.batched_total import DUAL_NEWTON, batched_l2_total
from topdown.blue import EstimatorInputs, QueryEstimate, as_inputs, precision
from topdown.estimators import family_weights
from topdown.executors import Executor
from topdown.family import FamilyTask, Measurement, solve_family
from topdown.measure import Measurements
from topdown.node_constraints import NodeConstraints
from topdown.passes import EstimateOptions, LevelStats, SolverChoice, SolveStats
from topdown.tree import Tree

__all__ = ["EstimateOptions", "LevelStats", "SolveStats", "SolverChoice", "estimate"]

log = logging.getLogger(__name__)


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
) -> tuple[list[np.ndarray], list[LevelStats]]:
    """Integer, non-negative, consistent counts for every node of every level.

    ``fixed`` gives the published counts of the first ``len(fixed)`` levels (nodes x cells
    each), which are then taken as they are, not estimated: ``topdown.stream`` estimates a
    subtree from its top's released counts this way. Statistics cover the estimated levels.

    Returns:
        counts per level (nodes x cells, int64) and the statistics of each level.

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
        inputs = _LevelInputs.of(level, tree, fitted, first_pass, book, options)
        if level == 0:
            families: Sequence[np.ndarray] = [np.array([0])]
        else:
            families = lv.children_of(tree.levels[level - 1].size)
        batch = _batched(inputs, lv.parent, counts[-1] if level else None, families)
        total = batch.stats
        level_counts = (
            batch.counts
            if batch.counts is not None
            else np.zeros((lv.size, domain.size), dtype=np.int64)
        )
        # a family the batched rounding solved gets no task; the rest go to the executor
        todo = range(len(families)) if batch.left is None else batch.left.tolist()
        tasks = [
            _family_task(inputs, families[p], _parent(tree, counts, level, p), batch.l2)
            for p in todo
        ]
        results = (
            executor.map(solve_family, tasks, progress, f"estimate level {level}") if tasks else []
        )
        for task, p, res in zip(tasks, todo, results, strict=True):
            level_counts[np.ix_(families[p], task.support)] = res.counts
            total += res.stats
        del batch, tasks, results  # the level's dense L2 answer is not needed any more
        counts.append(level_counts)
        stats.append(LevelStats.of(level, total))
        log.info(
            "estimated level %d: %d famil%s, %d problem(s), L2 %.2f s, rounding %.2f s, solved %s",
            level,
            total.families,
            "y" if total.families == 1 else "ies",
            total.problems,
            total.l2_time,
            total.round_time,
            [f"{p}: {b} x{c}" for p, b, c in total.solved],
        )
    if options.capture is not None:
        capture.gather(options.capture)
    return counts, stats


@dataclass(frozen=True)
class _Parent:
    """A parent's label and its published counts (every cell)."""

    label: str
    counts: np.ndarray


@dataclass(frozen=True)
class _LevelInputs:
    """What every family of one level shares: its measurements, constraints and options."""

    level: int
    labels: np.ndarray
    measurements: tuple[QueryEstimate, ...]
    matrices: tuple[sp.csr_matrix | None, ...]  # None for the detailed query
    first_pass: tuple[int, ...]
    book: NodeConstraints
    options: EstimateOptions

    @classmethod
    def of(
        cls,
        level: int,
        tree: Tree,
        measurements: EstimatorInputs,
        first_pass: dict[int, tuple[str, ...]],
        book: NodeConstraints,
        options: EstimateOptions,
    ) -> _LevelInputs:
        qms = measurements.at(level)
        return cls(
            level=level,
            labels=tree.levels[level].labels,
            measurements=qms,
            # the detailed query is the identity on each family's support (see _measurements)
            matrices=tuple(
                None if m.query.attributes is None else m.query.matrix(book.domain) for m in qms
            ),
            first_pass=tuple(
                i for i, m in enumerate(qms) if m.query.name in first_pass.get(level, ())
            ),
            book=book,
            options=options,
        )


@dataclass(frozen=True)
class _Batch:
    """What the level-batched passes solved (``topdown.batched``).

    Attributes:
        l2: the level's L2 answer (children x cells), or None (the per-family path solves it).
        counts: the level's integer counts, or None (the rounding is per family); the rows of
            the families in ``left`` are zero until their tasks fill them.
        left: the parents whose families still need a task (None: every parent).
        stats: what the batched passes solved, and how long they took.
    """

    l2: np.ndarray | None = None
    counts: np.ndarray | None = None
    left: np.ndarray | None = None
    stats: SolveStats = SolveStats()


def _batched(
    inputs: _LevelInputs,
    parent_of: np.ndarray,
    parent_counts: np.ndarray | None,
    families: Sequence[np.ndarray],
) -> _Batch:
    """The whole level's L2 answer in one vectorised closed form (``topdown.batched``), when it
    is that of every family: the level measures the detailed histogram only, nothing is
    attached to any node, the L2 pass may use the closed form, and no capture was asked for
    (a capture records each family's problem). Then, when the rounding pass may use the
    closed form too, the level's rounding in one batch as well; families it leaves (none
    when the L2 answer is consistent) go to the per-family path. Returns an empty batch when
    the level is not batched."""
    book, options = inputs.book, inputs.options
    if (
        parent_counts is None
        or (book.constraints is not None and len(book.constraints) > 0)
        or book.invariants.get(inputs.level)  # bounds of this level's nodes (not above)
        or options.solver.l2 not in ("auto", "closed_form")
        or options.capture is not None
    ):
        return _Batch()
    start = time.perf_counter()
    solved_l2 = _batched_l2(inputs, parent_of, parent_counts)
    if solved_l2 is None:
        return _Batch()
    x, solver = solved_l2
    # what the per-family path solves: a parent with several children and some count
    solving = (np.bincount(parent_of, minlength=len(families)) > 1) & parent_counts.any(axis=1)
    solved = int(solving.sum())
    l2 = SolveStats(
        problems=solved,
        l2_time=time.perf_counter() - start,
        solved=_by_closed_form("l2", solved, solver),
    )
    if options.solver.rounding not in ("auto", "closed_form"):
        return _Batch(l2=x, stats=l2)
    start = time.perf_counter()
    counts, left = batched_round(
        x, parent_counts, parent_of, controlled=options.controlled_rounding
    )
    rounded = solved - int(solving[left].sum())
    rounding = SolveStats(
        families=len(families) - left.size,
        problems=rounded,
        round_time=time.perf_counter() - start,
        solved=_by_closed_form("rounding", rounded),
    )
    if left.size:
        log.warning(
            "level %d: the batched rounding left %d famil%s to the per-family path",
            inputs.level,
            left.size,
            "y" if left.size == 1 else "ies",
        )
    return _Batch(l2=x, counts=counts, left=left, stats=l2 + rounding)


def _batched_l2(
    inputs: _LevelInputs, parent_of: np.ndarray, parent_counts: np.ndarray
) -> tuple[np.ndarray, str] | None:
    """The level's L2 answer by a batched solver and that solver's name in the statistics,
    when the level's queries allow one: the detailed histogram alone (``batched_l2``, the
    closed form), or the detailed histogram and the node totals, as ``estimator="blue"`` feeds
    a detailed-only strategy (``batched_l2_total``, the dual Newton iteration, under the auto
    L2 solver only: the closed_form backend declines problems with a total row). None (the
    per-family path) for other queries, a first pass, exact or missing detailed answers, exact
    totals, or a family the Newton iteration did not settle."""
    queries = [m.query for m in inputs.measurements]
    if detailed_only(queries, inputs.first_pass):
        variance = inputs.measurements[0].variance  # float (nodes,), as QueryEstimate stores it
        if not np.all(np.isfinite(variance) & (variance > 0)):
            return None  # exact or missing answers: the per-family path weighs them
        x = batched_l2(
            inputs.measurements[0].noisy, parent_counts, parent_of, weights=1.0 / variance
        )
        return x, "closed_form"
    if (
        len(queries) != 2
        or inputs.options.solver.l2 != "auto"
        or inputs.first_pass
        or queries[0].attributes is not None
        or queries[1].attributes != ()
    ):
        return None
    cells, total = inputs.measurements
    v_cells = np.broadcast_to(np.asarray(cells.variance, dtype=float), (cells.noisy.shape[0],))
    v_total = np.broadcast_to(np.asarray(total.variance, dtype=float), (total.noisy.shape[0],))
    if not np.all(np.isfinite(v_cells) & (v_cells > 0)) or not np.all(v_total > 0):
        return None  # an exact answer outweighs the rest: the per-family path weighs it
    # the per-family weights are these inverse variances scaled per family (family_weights);
    # a common factor does not move the minimiser. An infinite variance weighs 0 (precision).
    x, failed = batched_l2_total(
        cells.noisy,
        np.asarray(total.noisy, dtype=float).reshape(-1),
        parent_counts,
        parent_of,
        weights=precision(v_cells),
        total_weights=precision(v_total),
    )
    if failed.size:
        log.warning(
            "level %d: the batched L2 pass did not settle %d famil%s; the level goes to the "
            "per-family path",
            inputs.level,
            failed.size,
            "y" if failed.size == 1 else "ies",
        )
        return None
    return x, DUAL_NEWTON


def _by_closed_form(
    pass_name: str, problems: int, solver: str = "closed_form"
) -> tuple[tuple[str, str, int], ...]:
    """The ``solved`` entry of a batched pass: ``solver`` (the closed form, or the dual Newton
    iteration of ``topdown.batched_total``) solved ``problems`` families' problems (no entry
    when there were none, as when a level only copies its parents)."""
    return ((pass_name, solver, problems),) if problems else ()


def _parent(tree: Tree, counts: list[np.ndarray], level: int, p: int) -> _Parent | None:
    """Parent ``p`` of a level's families (None for the root's task)."""
    if level == 0:
        return None
    return _Parent(str(tree.levels[level - 1].labels[p]), counts[-1][p])


def _family_task(
    inputs: _LevelInputs,
    children: np.ndarray,
    parent: _Parent | None,
    batch: np.ndarray | None = None,
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
        measurements=() if batch is not None else _measurements(inputs, children, support),
        support=support,
        first_pass=inputs.first_pass,
        rows=_joint_rows(inputs.book, per_child, labels, support),
        ub=None if parent is None else _structural_zeros(inputs.book, per_child, support),
        options=inputs.options,
        l2=None if batch is None else batch[np.ix_(children, support)],
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
    inputs: _LevelInputs, per_child: list[tuple], labels: tuple[str, ...], parent: _Parent | None
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
    inputs: _LevelInputs, children: np.ndarray, support: np.ndarray
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
