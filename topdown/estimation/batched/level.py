"""The level-batched passes of a level: when they apply, and the level's chunks on the executor.

``topdown.estimation.estimate`` asks ``batch_level`` first for every level. A level qualifies when
its families share one separable structure: nothing attached to any node of the level, a multipass
first pass (if any) of marginals only, and its queries a detailed histogram (positive finite
weights) plus partitions of the cells (marginals, the node total). It is then
cut into chunks of families (``topdown.estimation.batched.families.level_chunks``) solved on the
executor (``topdown.estimation.batched.chunk_tasks``) by

- the closed form (``batched.families``): the detailed query alone;
- the dual Newton iteration (``batched.total``): the detailed query and the total;
- the marginal Newton iteration (``batched.marginals``): the detailed query and any
  marginals (a production-shaped strategy), after a first pass of the total alone
  (``batched.multipass``) holding its totals;
- the Newton passes of ``topdown.estimation.multipass_newton`` (``marginal_newton_multipass``):
  a first pass of other marginals (the 2020 DHC's nine) by proximal point, then the rest
  holding their answers,

and the rounding pass in the same tasks. Families a chunk cannot settle go back to the per-family
path. The root is solved in closed form here (``topdown.estimation.root``) when it can be, or by
the Newton iterations (``root_newton``, ``root_newton_multipass``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from topdown.estimation.batched.chunk_tasks import chunk_task, held_positions, solve_chunk
from topdown.estimation.batched.families import detailed_only, level_chunks
from topdown.estimation.batched.marginals import MARGINAL_NEWTON, LevelMarginal
from topdown.estimation.batched.total import DUAL_NEWTON
from topdown.estimation.multipass_newton import (
    HELD_EXACTLY,
    MARGINAL_TWO_PASS,
    ROOT_TWO_PASS,
    root_two_passes,
)
from topdown.estimation.nested_rounding import refinement_chain
from topdown.estimation.node_constraints import NodeConstraints
from topdown.estimation.passes import EstimateOptions, SolveStats
from topdown.estimation.root import root_l2, root_round
from topdown.estimation.root_marginals import ROOT_NEWTON, RootMarginal, root_marginal_l2
from topdown.execution.executors import Executor
from topdown.measurement.estimator_inputs import EstimatorInputs, QueryEstimate, precision
from topdown.measurement.tree import Tree
from topdown.support.int_types import child_count_type, holding

__all__ = ["Batch", "LevelInputs", "batch_level"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LevelInputs:
    """What every family of one level shares: its measurements, constraints and options."""

    level: int
    labels: np.ndarray
    measurements: tuple[QueryEstimate, ...]
    matrices: tuple[sp.csr_matrix | None, ...]  # None for the detailed query
    first_pass: tuple[int, ...]
    book: NodeConstraints
    options: EstimateOptions

    @property
    def held(self) -> tuple[int, ...]:
        """The indices of the first-pass measurements the second pass holds
        (``LevelStrategy.held``; all of ``first_pass`` unless the strategy names some)."""
        first = tuple(self.measurements[i].query.name for i in self.first_pass)
        names = self.options.held(self.level, first)
        return tuple(i for i in self.first_pass if self.measurements[i].query.name in names)

    @classmethod
    def of(
        cls,
        level: int,
        tree: Tree,
        measurements: EstimatorInputs,
        first_pass: dict[int, tuple[str, ...]],
        book: NodeConstraints,
        options: EstimateOptions,
    ) -> LevelInputs:
        return cls.of_queries(
            level, tree.levels[level].labels, measurements.at(level), first_pass, book, options
        )

    @classmethod
    def of_queries(
        cls,
        level: int,
        labels: np.ndarray,
        qms: tuple[QueryEstimate, ...],
        first_pass: dict[int, tuple[str, ...]],
        book: NodeConstraints,
        options: EstimateOptions,
    ) -> LevelInputs:
        """The inputs of some nodes of ``level`` (``labels``), from their queries' inputs."""
        return cls(
            level=level,
            labels=labels,
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
class Batch:
    """What the level-batched passes solved (``topdown.estimation.batched.chunk_tasks``).

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
    (dual Newton) the node totals and their weights, or (marginal Newton) the marginals."""

    solver: str
    noisy: np.ndarray
    weights: np.ndarray
    totals: np.ndarray | None = None
    total_weights: np.ndarray | None = None
    marginals: tuple[LevelMarginal, ...] = ()
    first_total: int | None = None  # the marginal a multipass first pass fits alone
    held_marginals: tuple[int, ...] | None = None  # those of first_marginals pass 2 holds
    first_marginals: tuple[int, ...] = ()  # the marginals of another first pass


def batch_level(
    inputs: LevelInputs,
    parent_of: np.ndarray,
    parent_counts: np.ndarray | None,
    families: Sequence[np.ndarray],
    executor: Executor,
    progress: Callable | None,
) -> Batch:
    """The level's families by the level-batched passes, in chunks on the executor, when
    their problems are those of every family: nothing binds any node of the level, the L2 pass
    may use the closed form (or a Newton iteration, under ``auto``: ``_batched_fit``), and no
    capture was asked for (a capture records each family's problem). The rounding pass runs in the
    same tasks when it may use the closed form; families the chunks leave (a Newton
    iteration that did not settle, a rounding the batch could not make) go to the
    per-family path. Returns an empty batch when the level is not batched."""
    book, options = inputs.book, inputs.options
    if options.solver.l2 not in ("auto", "closed_form") or options.capture is not None:
        return Batch()
    if parent_counts is None:
        return _root(inputs)
    if not _unconstrained(book, inputs.level):
        return Batch()
    fit = _batched_fit(inputs)
    if fit is None:
        return Batch()
    rounding = options.solver.rounding in ("auto", "closed_form")
    plan = level_chunks(parent_of, parent_counts)
    tasks = (
        chunk_task(
            inputs.level,
            chunk,
            parent_counts,
            fit.noisy,
            fit.weights,
            fit.totals,
            fit.total_weights,
            marginals=fit.marginals,
            first_total=fit.first_total,
            first_marginals=fit.first_marginals,
            hold_tolerance=options.multipass_tolerance,
            held_marginals=fit.held_marginals,
            rounding=rounding,
            controlled=options.controlled_rounding,
        )
        for chunk in plan.chunks
    )
    counts = np.zeros(
        (parent_of.size, parent_counts.shape[1]), dtype=child_count_type(parent_counts)
    )
    plan.copy_only_children(counts, parent_counts)
    left: list[int] = []
    l2: dict[int, np.ndarray] = {}
    settled = rounded = unsettled = 0
    stats = SolveStats()
    # each batch of chunks is written as soon as it is back, while the workers run the next
    # (and a batch's tasks are built only when a worker is about to be free): writing a
    # level's counts is the first touch of most of its array's pages, and at the block level
    # of the 3-million-person state the page faults took 2 s here (``ChunkShape.scatter``),
    # which after a barrier (all results, then all writes) the workers spent waiting
    desc = f"estimate level {inputs.level} (batched)"
    for i, res in executor.stream_batches(solve_chunk, tasks, len(plan.chunks), progress, desc):
        chunk = plan.chunks[i]
        if res.counts is not None:
            counts = holding(counts, res.counts)
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
        solved=_solved_entry("l2", settled, fit.solver)
        + (_solved_entry("rounding", rounded) if rounding else ()),
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
    return Batch(counts=counts, left=np.sort(np.array(left, dtype=np.int64)), l2=l2, stats=stats)


def _root(inputs: LevelInputs) -> Batch:
    """The root's two passes without a general solver when they are the level-batched fits:
    the detailed cells, and the total, in closed form (``topdown.estimation.root``); the
    detailed cells and marginals (the total among them or not) by the root's Newton iteration
    (``topdown.estimation.root_marginals``, under ``auto``), in two passes
    (``topdown.estimation.multipass_newton``) after a multipass first pass of marginals other
    than the total alone. The rounding in closed form in all,
    and nothing attached to the root but bounds on its total (an invariant total). Empty
    otherwise, or when a pass has no one-unit answer or the iteration does not settle (the
    general path then solves, reports or widens)."""
    if inputs.options.solver.rounding not in ("auto", "closed_form"):
        return Batch()
    fit = _batched_fit(inputs)
    bounds = _total_bounds(inputs.book, inputs.book.of(0, 0, inputs.labels[0]))
    if fit is None or bounds is None or fit.first_total is not None:
        return Batch()  # a root's first pass of the total alone: the per-family path
    start = time.perf_counter()
    y, w = np.asarray(fit.noisy[0], dtype=float), float(fit.weights[0])
    chain: list[np.ndarray] = []  # the nested marginals the rounding holds (none: cell by cell)
    if fit.first_marginals:
        solver = ROOT_TWO_PASS
        marginals = [
            RootMarginal(m.groups, np.asarray(m.answers[0], dtype=float), float(m.weights[0]))
            for m in fit.marginals
        ]
        x = root_two_passes(
            y,
            w,
            marginals,
            fit.first_marginals,
            *bounds,
            tolerance=inputs.options.multipass_tolerance,
            held=held_positions(fit.first_marginals, fit.held_marginals),
        )
    elif fit.marginals:
        solver = ROOT_NEWTON
        marginals = [
            RootMarginal(m.groups, np.asarray(m.answers[0], dtype=float), float(m.weights[0]))
            for m in fit.marginals
            if m.weights[0] > 0  # a weight of 0: the marginal does not count
        ]
        x = root_marginal_l2(y, w, marginals, *bounds)
    else:
        solver = "closed_form"
        x = root_l2(
            y,
            w,
            0.0 if fit.totals is None else float(fit.totals[0]),
            0.0 if fit.total_weights is None else float(fit.total_weights[0]),
            *bounds,
        )
    if fit.marginals and inputs.options.nested_root_rounding:
        groups = [np.asarray(m.groups).reshape(-1) for m in marginals if m.weight > 0]
        chain = [groups[i] for i in refinement_chain(groups)]
    middle = time.perf_counter()
    counts = (
        None
        if x is None
        else root_round(x, *bounds, controlled=inputs.options.controlled_rounding, chain=chain)
    )
    if counts is None:
        return Batch()
    stats = SolveStats(
        families=1,
        problems=2,
        l2_time=middle - start,
        round_time=time.perf_counter() - middle,
        solved=(("l2", solver, 1), ("rounding", "closed_form", 1)),
    )
    return Batch(counts=counts[None, :], left=np.zeros(0, dtype=np.int64), stats=stats)


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


def _batched_fit(inputs: LevelInputs) -> _Fit | None:
    """What a batched L2 pass fits on the level, when the level's queries allow one: the
    detailed histogram alone (the closed form); the detailed histogram and the node totals
    (the dual Newton iteration of ``topdown.estimation.batched.total``); the detailed histogram and
    other marginals, the total among them or not (the marginal Newton iteration of
    ``topdown.estimation.batched.marginals``), after the closed-form first pass of
    ``topdown.estimation.batched.multipass`` when the level's multipass first pass is the node
    total alone. The iterations run under the auto L2 solver only (the closed_form backend
    declines problems with other rows). None (the per-family path) for any other first pass,
    no detailed query or more than one, exact or missing detailed answers, or
    an exact answer of another query (it outweighs the rest: the per-family path weighs it).

    The per-family weights are these inverse variances scaled per family
    (``topdown.estimation.estimators.family_weights``); a common factor does not move the minimiser.
    An
    infinite variance weighs 0 (``precision``)."""
    queries = [m.query for m in inputs.measurements]
    if detailed_only(queries, inputs.first_pass):
        cells = inputs.measurements[0]
        variance = _per_node(cells.variance, cells.noisy.shape[0])
        if not np.all(np.isfinite(variance) & (variance > 0)):
            return None  # exact or missing answers: the per-family path weighs them
        return _Fit("closed_form", cells.noisy, precision(variance))
    detailed = [i for i, q in enumerate(queries) if q.attributes is None]
    first_names = _first_pass_names(inputs)
    if inputs.options.solver.l2 != "auto" or first_names is False or len(detailed) != 1:
        return None
    cells = inputs.measurements[detailed[0]]
    v_cells = _per_node(cells.variance, cells.noisy.shape[0])
    if not np.all(np.isfinite(v_cells) & (v_cells > 0)):
        return None
    others = [
        (m, M) for m, M in zip(inputs.measurements, inputs.matrices, strict=True) if M is not None
    ]
    variances = [_per_node(m.variance, m.noisy.shape[0]) for m, _ in others]
    # an answer of infinite variance everywhere weighs nothing: the level is its cells alone
    kept = [i for i, v in enumerate(variances) if not np.all(np.isinf(v))]
    others, variances = [others[i] for i in kept], [variances[i] for i in kept]
    first: tuple[int, ...] = ()  # the first pass's positions among the marginals fitted
    held: tuple[int, ...] = ()  # those the second pass holds
    if isinstance(first_names, tuple):
        names = [m.query.name for m, _ in others]
        if not all(name in names for name in first_names):
            return None  # a first pass of no weight: the per-family path decides
        first = tuple(names.index(name) for name in first_names)
        holds = inputs.options.held(inputs.level, first_names)
        held = tuple(names.index(name) for name in first_names if name in holds)
    if not others:
        return _Fit("closed_form", cells.noisy, precision(v_cells))
    if not all(np.all(v > 0) for v in variances):
        return None
    if not first and len(others) == 1 and others[0][0].query.attributes == ():
        return _Fit(
            DUAL_NEWTON,
            cells.noisy,
            precision(v_cells),
            np.asarray(others[0][0].noisy, dtype=float).reshape(-1),
            precision(variances[0]),
        )
    marginals = tuple(
        LevelMarginal(m.query.groups(inputs.book.domain), m.noisy, precision(v))
        for (m, _), v in zip(others, variances, strict=True)
    )
    total_alone = len(first) == 1 and others[first[0]][0].query.attributes == ()
    return _Fit(
        MARGINAL_TWO_PASS if first and not total_alone else MARGINAL_NEWTON,
        cells.noisy,
        precision(v_cells),
        marginals=marginals,
        first_total=first[0] if total_alone else None,
        first_marginals=() if total_alone else first,
        held_marginals=None if total_alone or held == first else held,
    )


def _first_pass_names(inputs: LevelInputs) -> tuple[str, ...] | None | bool:
    """The names of the level's multipass first-pass queries when they are marginals (the
    node total alone: ``topdown.estimation.batched.multipass``'s closed form; others:
    ``topdown.estimation.multipass_newton``); None without a first pass; False when the
    detailed query is in it or it is the total alone under a tolerance looser than
    ``batched.multipass``'s exact hold (the per-family path)."""
    if not inputs.first_pass:
        return None
    queries = [inputs.measurements[i].query for i in inputs.first_pass]
    if any(q.attributes is None for q in queries):
        return False
    total_alone = len(queries) == 1 and queries[0].attributes == ()
    if total_alone and inputs.options.multipass_tolerance > HELD_EXACTLY:
        # batched.multipass holds the total exactly; a looser hold is another problem, which
        # the per-family path solves (its Newton passes or the general solvers)
        return False
    return tuple(q.name for q in queries)


def _per_node(variance: np.ndarray | float, nodes: int) -> np.ndarray:
    """A query's noise variance per node (a measurement's is one number for its level)."""
    return np.broadcast_to(np.asarray(variance, dtype=float), (nodes,))


def _solved_entry(
    pass_name: str, problems: int, solver: str = "closed_form"
) -> tuple[tuple[str, str, int], ...]:
    """The ``solved`` entry of a batched pass: ``solver`` (the closed form, the dual Newton
    iteration of ``topdown.estimation.batched.total`` or the marginal Newton iteration of
    ``topdown.estimation.batched.marginals``) solved ``problems`` families' problems (no entry
    when there were none, as when a level only copies its parents)."""
    return ((pass_name, solver, problems),) if problems else ()
