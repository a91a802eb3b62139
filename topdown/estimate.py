"""Top-down estimation: the root, then each level's families, from published values only.

For each level this module turns the noisy measurements, the parent level's published counts
and the attached constraints into ``FamilyTask``s (one per parent), runs them on an executor,
and assembles the level's integer counts. A level whose families share one separable structure
(detailed query only, or detailed and node totals under ``estimator="blue"``; nothing attached
to any node) is solved by the level-batched passes instead: chunks of families on the
executor (``topdown.chunk_tasks``), no task per family. It never sees
confidential data: invariants arrive already bound to their published values by
``topdown.measure``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

import solvers
from constraints.attach import ConstraintSet
from constraints.compile import joint_rows
from constraints.constraint import LinearRows
from constraints.diagnostics import check_children, check_node
from constraints.domain import Domain
from topdown import capture
from topdown.batched import detailed_only, level_chunks
from topdown.batched_total import DUAL_NEWTON
from topdown.blue import EstimatorInputs, QueryEstimate, as_inputs, precision
from topdown.chunk_tasks import chunk_task, solve_chunk
from topdown.estimators import family_weights
from topdown.executors import Executor
from topdown.family import FamilyTask, Measurement, solve_family
from topdown.measure import Measurements
from topdown.node_constraints import NodeConstraints
from topdown.passes import EstimateOptions, LevelStats, SolverChoice, SolveStats
from topdown.root import root_l2, root_round
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
        batch = _batched(
            inputs, lv.parent, counts[-1] if level else None, families, executor, progress
        )
        total = batch.stats
        level_counts = (
            batch.counts
            if batch.counts is not None
            else np.zeros((lv.size, domain.size), dtype=np.int64)
        )
        # families the batched passes solved get no task; the rest go to the executor
        todo = range(len(families)) if batch.left is None else batch.left.tolist()
        tasks = [
            _family_task(inputs, families[p], _parent(tree, counts, level, p), batch.l2.get(p))
            for p in todo
        ]
        results = (
            executor.map(solve_family, tasks, progress, f"estimate level {level}") if tasks else []
        )
        for task, p, res in zip(tasks, todo, results, strict=True):
            level_counts[np.ix_(families[p], task.support)] = res.counts
            total += res.stats
        del batch, tasks, results
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
    """What the level-batched passes solved (``topdown.chunk_tasks``).

    Attributes:
        counts: the level's integer counts, or None (the level is not batched); the rows of
            the families in ``left`` are zero until their tasks fill them.
        left: the parents whose families still need a task (None: every parent).
        l2: parent -> its family's L2 answer (children x support cells) for the families in
            ``left`` the batch did solve the L2 pass of (the rest solve their own).
        stats: what the batched passes solved, and how long they took.
    """

    counts: np.ndarray | None = None
    left: np.ndarray | None = None
    l2: dict[int, np.ndarray] = field(default_factory=dict)
    stats: SolveStats = SolveStats()


@dataclass(frozen=True)
class _Fit:
    """The arrays a batched L2 pass fits on a level: the detailed answers and weights, and
    (dual Newton) the node totals and their weights."""

    solver: str
    noisy: np.ndarray
    weights: np.ndarray
    totals: np.ndarray | None = None
    total_weights: np.ndarray | None = None


def _batched(
    inputs: _LevelInputs,
    parent_of: np.ndarray,
    parent_counts: np.ndarray | None,
    families: Sequence[np.ndarray],
    executor: Executor,
    progress: Callable | None,
) -> _Batch:
    """The level's families by the level-batched passes, in chunks on the executor, when
    their problems are those of every family: nothing binds any node of the level, the L2 pass
    may use the closed form (or the dual Newton iteration, under ``auto``), and no capture
    was asked for (a capture records each family's problem). The rounding pass runs in the
    same tasks when it may use the closed form; families the chunks leave (a Newton
    iteration that did not settle, a rounding the batch could not make) go to the
    per-family path. Returns an empty batch when the level is not batched."""
    book, options = inputs.book, inputs.options
    if options.solver.l2 not in ("auto", "closed_form") or options.capture is not None:
        return _Batch()
    if parent_counts is None:
        return _root(inputs)
    if not _unconstrained(book, inputs.level):
        return _Batch()
    fit = _batched_fit(inputs)
    if fit is None:
        return _Batch()
    rounding = options.solver.rounding in ("auto", "closed_form")
    plan = level_chunks(parent_of, parent_counts)
    tasks = [
        chunk_task(
            inputs.level,
            chunk,
            parent_counts,
            fit.noisy,
            fit.weights,
            fit.totals,
            fit.total_weights,
            rounding=rounding,
            controlled=options.controlled_rounding,
        )
        for chunk in plan.chunks
    ]
    results = (
        executor.map(solve_chunk, tasks, progress, f"estimate level {inputs.level} (batched)")
        if tasks
        else []
    )
    del tasks
    counts = np.zeros((parent_of.size, parent_counts.shape[1]), dtype=np.int64)
    plan.copy_only_children(counts, parent_counts)
    left: list[int] = []
    l2: dict[int, np.ndarray] = {}
    settled = rounded = unsettled = 0
    stats = SolveStats()
    for chunk, res in zip(plan.chunks, results, strict=True):
        if res.counts is not None:
            chunk.scatter(counts, res.counts, res.rounded)
        for q in np.flatnonzero(~res.rounded):
            p = int(chunk.parents[q])
            left.append(p)
            if res.settled[q] and res.l2 is not None:
                l2[p] = res.l2[q, :, : chunk.sizes[q]]
        settled += int(res.settled.sum())
        rounded += int(res.rounded.sum())
        unsettled += int((~res.settled).sum())
        stats += SolveStats(l2_time=res.l2_seconds, round_time=res.round_seconds)
    stats += SolveStats(
        families=len(families) - len(left),
        problems=settled + rounded,
        solved=_by_closed_form("l2", settled, fit.solver)
        + (_by_closed_form("rounding", rounded) if rounding else ()),
    )
    if unsettled:
        log.warning(
            "level %d: the batched L2 pass did not settle %d famil%s; they go to the "
            "per-family path",
            inputs.level,
            unsettled,
            "y" if unsettled == 1 else "ies",
        )
    if rounding and len(left) > unsettled:
        log.warning(
            "level %d: the batched rounding left %d famil%s to the per-family path",
            inputs.level,
            len(left) - unsettled,
            "y" if len(left) - unsettled == 1 else "ies",
        )
    return _Batch(counts=counts, left=np.sort(np.array(left, dtype=np.int64)), l2=l2, stats=stats)


def _root(inputs: _LevelInputs) -> _Batch:
    """The root's two passes in closed form (``topdown.root``) when they are the general
    path's problems in closed form: the level-batched fits (detailed cells, and the total
    under ``auto``), the closed form allowed for the rounding, and nothing attached to the
    root but bounds on its total (an invariant total). Empty otherwise, or when a pass has no
    one-unit answer (the general path then reports or widens)."""
    if inputs.options.solver.rounding not in ("auto", "closed_form"):
        return _Batch()
    fit = _batched_fit(inputs)
    bounds = _total_bounds(inputs.book, inputs.book.of(0, 0, inputs.labels[0]))
    if fit is None or bounds is None:
        return _Batch()
    start = time.perf_counter()
    x = root_l2(
        np.asarray(fit.noisy[0], dtype=float),
        float(fit.weights[0]),
        0.0 if fit.totals is None else float(fit.totals[0]),
        0.0 if fit.total_weights is None else float(fit.total_weights[0]),
        *bounds,
    )
    middle = time.perf_counter()
    counts = (
        None if x is None else root_round(x, *bounds, controlled=inputs.options.controlled_rounding)
    )
    if counts is None:
        return _Batch()
    stats = SolveStats(
        families=1,
        problems=2,
        l2_time=middle - start,
        round_time=time.perf_counter() - middle,
        solved=(("l2", "closed_form", 1), ("rounding", "closed_form", 1)),
    )
    return _Batch(counts=counts[None, :], left=np.zeros(0, dtype=np.int64), stats=stats)


def _unconstrained(book: NodeConstraints, level: int) -> bool:
    """No node of ``level`` has a constraint of its own: nothing attached to the level or to
    any of its nodes, no invariant bound there (constraints elsewhere in the tree, such as a
    held root total, leave the level's families separable)."""
    if book.invariants.get(level):
        return False
    attached = book.constraints
    if attached is None or len(attached) == 0:
        return True
    per_node = [c for cs in attached.node_specific(level).values() for c in cs]
    return all(c.is_invariant for c in (*attached.for_level(level), *per_node))


def _total_bounds(book: NodeConstraints, constraints: tuple) -> tuple[float, float] | None:
    """Bounds on a node's total when its constraints are only that (rows of ones over every
    cell, no structural zero): (lo, hi), infinite without any; None for anything else."""
    if not constraints:
        return -np.inf, np.inf
    if book.zeros(constraints) is not None:
        return None
    rows = book.rows(constraints)
    if not (np.all(rows.A.getnnz(axis=1) == book.domain.size) and np.all(rows.A.data == 1.0)):
        return None
    return float(rows.lb.max()), float(rows.ub.min())


def _batched_fit(inputs: _LevelInputs) -> _Fit | None:
    """What a batched L2 pass fits on the level, when the level's queries allow one: the
    detailed histogram alone (the closed form), or the detailed histogram and the node
    totals, as ``estimator="blue"`` feeds a detailed-only strategy (the dual Newton iteration
    of ``topdown.batched_total``, under the auto L2 solver only: the closed_form backend
    declines problems with a total row). None (the per-family path) for other queries, a
    first pass, exact or missing detailed answers, or exact totals."""
    queries = [m.query for m in inputs.measurements]
    if detailed_only(queries, inputs.first_pass):
        cells = inputs.measurements[0]
        variance = _per_node(cells.variance, cells.noisy.shape[0])
        if not np.all(np.isfinite(variance) & (variance > 0)):
            return None  # exact or missing answers: the per-family path weighs them
        return _Fit("closed_form", cells.noisy, precision(variance))
    if (
        len(queries) != 2
        or inputs.options.solver.l2 != "auto"
        or inputs.first_pass
        or queries[0].attributes is not None
        or queries[1].attributes != ()
    ):
        return None
    cells, total = inputs.measurements
    v_cells = _per_node(cells.variance, cells.noisy.shape[0])
    v_total = _per_node(total.variance, total.noisy.shape[0])
    if not np.all(np.isfinite(v_cells) & (v_cells > 0)) or not np.all(v_total > 0):
        return None  # an exact answer outweighs the rest: the per-family path weighs it
    # the per-family weights are these inverse variances scaled per family (family_weights);
    # a common factor does not move the minimiser. An infinite variance weighs 0 (precision).
    return _Fit(
        DUAL_NEWTON,
        cells.noisy,
        precision(v_cells),
        np.asarray(total.noisy, dtype=float).reshape(-1),
        precision(v_total),
    )


def _per_node(variance: np.ndarray | float, nodes: int) -> np.ndarray:
    """A query's noise variance per node (a measurement's is one number for its level)."""
    return np.broadcast_to(np.asarray(variance, dtype=float), (nodes,))


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
