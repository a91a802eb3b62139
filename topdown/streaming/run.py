"""Streamed release: memory that follows the largest subtree, not the whole level.

``release_streamed`` runs the levels down to a stream level (e.g. county) in memory: built and
measured as ``release`` does. Each subtree under the stream level (one county) is a task of its
own, and no task keeps anything of its subtree in memory when it ends. Peak memory is that of
the largest subtree (times the number of workers), never a dense (nodes x cells) array of a
whole lower level.

``estimator="blue"`` (the default), in two sweeps over the subtrees (1 and 3) with the
parent's step between them (2):

1. measure: each subtree's records are read (one Parquet partition, or one group of a
   DataFrame), its lower levels' histograms built from them alone and measured, its
   measurement parts written, and only the bottom-up summary of its top is returned (the
   top's estimate from its descendants' measurements and its variance, per subspace group:
   ``topdown.blue.streamed.subtree_summary``; derived from noisy measurements, so public).
2. the parent completes the upward recursion above the stream level, runs the downward one
   down to it (``topdown.blue.streamed.blue_above``), holds the root total where the unstreamed
   release would (``topdown.estimation.root_total``) and runs the passes of the levels down to the
   stream level.
3. estimate: each subtree task reads back its own published measurement parts (not records:
   the task has no partition to read), runs the downward recursion within the subtree from its
   top's whole-tree BLUE (``topdown.blue.streamed.blue_below``), the passes from its top's
   released counts (the fixed parent), and writes its tables and microdata.

Confidential records are read only in sweep 1 (and by the parent's histograms of the levels
down to the stream level, before anything is measured): the measurement step. The BLUE of
every node equals the whole-tree ``topdown.blue.estimate.blue`` of the same measurements (the pieces
share the whole tree's subspace groups, ``BluePlan``).

``estimator="topdown"``: one sweep; each subtree task reads, measures, estimates from its
published top and writes.

Why the result does not depend on the executor or the order of the subtrees: a subtree's noise
comes from a key derived from the release key and public data only, ``child_rng(release_key,
"subtree", stream level, label)``; inside the subtree the usual streams (``measurement.measure``:
level, query, chunk) derive from that key (the same under either estimator). A subtree task
reads only its own records (or, in sweep 2, its own parts) and public values, so where and when
it runs changes nothing.

Privacy: every node of a lower level is in exactly one subtree, so the subtrees' measurements of
one (level, query) are over disjoint nodes and compose in parallel: the ledger records each
(level, query) once, for all the level's nodes, exactly as the unstreamed release does
(``measure.record_level``). The release checks that the subtrees partition each lower level.
Everything after sweep 1 is post-processing of the noisy measurements.

What differs from ``release``: the noise (other streams, same distributions), and under
``estimator="topdown"`` the only-child folding across the stream level: a unit that is its
county's only child cannot lend its measurements to the county, which is estimated before it
is measured. Invariants (contextual constraints) are supported at and above the stream level.

This module holds the orchestration (``release_streamed``, its sweeps and the ledger); the
subtree tasks and what a worker runs for each sweep are in ``topdown.streaming.tasks``, what the
parent reads and checks before any subtree runs in ``topdown.streaming.inputs``.

Output folder (moved into place only when complete)::

    tables/level_<k>_<column>/<part>.parquet   per level, long format (node, attributes, count);
                                               one file for the levels down to the stream level
                                               (top.parquet), one per subtree below it
    measurements/level_<k>_<column>/<part>.parquet  the noisy measurements, parted the same way
                                               (``topdown.streaming.measurements``)
    microdata/<subtree>.parquet                the leaf records of each subtree
    ledger.json                                the privacy ledger with its summary (the
                                               estimator and the root total held:
                                               ``topdown.outputs.ledger``)
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import solvers
from constraints.attach import ConstraintSet, check_constraint_set
from mechanisms.ledger import Ledger, NoiseSource
from mechanisms.rng import new_release_key
from topdown.blue.estimate import NodeSummary
from topdown.blue.footprint import check_release_blue
from topdown.errors import DataError, ReleaseError
from topdown.estimation.estimate import EstimateOptions, LevelStats, SolverChoice, estimate
from topdown.estimation.estimators import DEFAULT_ESTIMATOR, check_estimator, prepare_inputs
from topdown.estimation.first_pass_limit import (
    check_root_first_pass,
    first_pass_answers,
    newton_takes_root_first_pass,
)
from topdown.estimation.passes import check_solver_options, multipass_options
from topdown.estimation.root_total import RootTotal
from topdown.execution.executors import Executor, make_executor, tasks_at_once
from topdown.execution.process_memory import hugepage_advice_off
from topdown.measurement import budget_bounds
from topdown.measurement.estimator_inputs import EstimatorInputs
from topdown.measurement.measure import Measurements, make_level_mechanisms, measure
from topdown.measurement.tree import Tree
from topdown.outputs.ledger import ledger_document
from topdown.release import Release
from topdown.schema import Schema
from topdown.strategy import Strategy
from topdown.streaming.inputs import (
    partitions_by_node,
    public_tree,
    split_constraints,
    stream_level_of,
    top_histograms,
)
from topdown.streaming.measurements import write_measurements
from topdown.streaming.partitions import Partition, partitions
from topdown.streaming.result import StreamedRelease, SubtreeResult, streamed_plan, top_blue
from topdown.streaming.tasks import (
    Measured,
    TaskCommon,
    estimate_subtree,
    estimate_tasks,
    measure_summarise,
    run_subtree,
    subtree_tasks,
    write_part,
)
from topdown.support.leftovers import owner_tag, remove_leftovers
from topdown.support.progress import Progress
from topdown.support.timing import PhaseClock
from topdown.support.writing import write_text

__all__ = ["release_streamed", "MAX_SUBTREE_CELLS"]

log = logging.getLogger(__name__)

#: the modules whose functions a streamed release runs as tasks (its subtree tasks run the
#: whole engine below the stream level): a parallel executor's workers import them as they start
TASK_MODULES = ("topdown.streaming.tasks",)

#: the largest dense (nodes x cells) array a subtree's level may need: 2^30 cells (4 GiB as
#: int32, 8 GiB as the float L2 answers); a larger subtree asks for a lower stream level
MAX_SUBTREE_CELLS = 2**30


@hugepage_advice_off()
def release_streamed(
    data: pd.DataFrame | str | Path,
    schema: Schema,
    strategy: Strategy,
    *,
    stream_by: str,
    out: str | Path,
    geography: pd.DataFrame | str | Path | None = None,
    constraints: ConstraintSet | None = None,
    seed: int | None = None,
    solver: str | Mapping[str, str] | SolverChoice = "auto",
    solver_options: Mapping[str, Any] | None = None,
    executor: str = "serial",
    workers: int | None = None,
    address: str | None = None,
    failsafe: bool = True,
    progress: Progress | None = None,
    estimator: str = DEFAULT_ESTIMATOR,
    microdata_format: str = "parquet",
    max_subtree_cells: int = MAX_SUBTREE_CELLS,
) -> StreamedRelease:
    """A TopDown release streamed by the subtrees under ``stream_by`` (see the module docstring).

    Args:
        data: the confidential records: a DataFrame, or a folder of Parquet partitions, one per
            unit of ``stream_by`` (see ``partitions``), read one at a time.
        schema: as in ``topdown.release``.
        strategy: as in ``topdown.release``.
        constraints: as in ``topdown.release``.
        seed: as in ``topdown.release``.
        solver: as in ``topdown.release``.
        solver_options: as in ``topdown.release``.
        failsafe: as in ``topdown.release``.
        progress: as in ``topdown.release``.
        stream_by: the hierarchy column whose units are streamed (e.g. ``"COUNTY"``); it must
            have a level below it.
        out: a new (or empty) folder for the tables, measurements, microdata and ledger
            (written into a hidden sibling and renamed into place when complete).
        geography: the published units (a DataFrame, or a CSV / Parquet path), one row per leaf;
            None reads them from the data (a disclosure, recorded in the ledger).
        executor: where the subtrees run (``serial``, ``processes``, ``dask``); each subtree
            is one task, so peak memory is about workers x the largest subtree. The workers
            write their subtrees' parts themselves: on a Dask cluster, ``out`` must be on a
            filesystem every worker sees at the same path.
        workers: worker processes of ``processes`` or of a local Dask cluster.
        address: a running Dask scheduler (``tcp://host:8786``); None starts a local cluster.
        estimator: ``"blue"`` (the default: two sweeps over the subtrees, see the module
            docstring) or ``"topdown"`` (one sweep).
        microdata_format: ``parquet`` or ``csv``.
        max_subtree_cells: the largest dense (nodes x cells) array of one level that may be
            held: of a subtree's level, or of a level down to the stream level (refused
            before any data is measured).

    Raises:
        StrategyError: an unknown estimator, or an invariant below the stream level.
        HierarchyError: ``stream_by`` is not a hierarchy column with a level below it, a
            partition of a unit the geography does not list, or a subtree over the bound.
        ReleaseError: ``out`` exists and is not an empty folder.
    """
    check_estimator(estimator)
    stream_level = stream_level_of(schema, stream_by)
    if microdata_format not in ("parquet", "csv"):
        raise DataError(f"microdata_format ({microdata_format!r}) must be 'parquet' or 'csv'")
    if max_subtree_cells < 1:
        raise DataError(f"max_subtree_cells ({max_subtree_cells}) must be at least 1")
    progress = progress or Progress()
    strategy.check(schema.domain, schema.n_levels)
    budget_bounds.check(strategy)
    choice = SolverChoice.of(solver)
    solver_options = check_solver_options(solver_options)  # before any data is read
    for name in choice.named():
        solvers.get(name, problem="release_streamed(solver=...)")
    constraints = check_constraint_set(constraints, schema.n_levels)
    # a root first pass the Newton passes do not take is a general QP over every cell: too
    # large is an error now, not after the measurement and the BLUE (first_pass_limit)
    check_root_first_pass(
        strategy.levels[0].first_pass,
        schema.domain.size,
        first_pass_answers(strategy.levels[0], schema.domain),
        l2_solver=choice.l2,
        newton=newton_takes_root_first_pass(
            strategy.levels[0], schema.domain, constraints, l2_solver=choice.l2
        ),
    )
    top_constraints, low_constraints = split_constraints(constraints, stream_level)
    final = Path(out)
    if final.exists() and (not final.is_dir() or any(final.iterdir())):
        raise ReleaseError(f"out ({str(final)!r}) exists; give a new (or empty) folder")
    noise = NoiseSource.from_seed(seed)
    ledger = Ledger(noise)
    timings: dict[str, float] = {}
    clock = PhaseClock(timings)
    parts = partitions(data, stream_by)
    if not parts:
        raise DataError("data has no records: a streamed release needs at least one partition")
    with clock("tree"):
        geo, tree, top_tree = public_tree(
            parts, schema, geography, ledger, stream_level, max_subtree_cells
        )
        # a BLUE whose covariances cannot be held is refused before any record is read
        at_once = tasks_at_once(executor, workers)
        check_release_blue(estimator, tree, schema.domain, strategy, (stream_level, at_once))
        by_label = partitions_by_node(parts, tree.levels[stream_level].labels, stream_by)
        truth = top_histograms(top_tree, parts, by_label, schema)
    release_key = new_release_key(seed)
    options = EstimateOptions(
        solver=choice,
        solver_options=dict(solver_options),
        failsafe=failsafe,
        **multipass_options(strategy),
    )
    first_pass = {i: ls.first_pass for i, ls in enumerate(strategy.levels)}
    # the working folder is named after this process: a run killed with SIGKILL cannot
    # remove it, and the next run of the same ``out`` removes it once its process is gone
    remove_leftovers(final.parent, (f".{final.name}.streaming-",))
    tmp = final.parent / f".{final.name}.streaming-{owner_tag()}"
    tmp.mkdir(parents=True)
    common = TaskCommon(
        geo,
        stream_level,
        schema,
        strategy,
        options,
        low_constraints,
        first_pass,
        tmp,
        microdata_format,
        max_subtree_cells,
    )
    try:
        with make_executor(executor, workers=workers, address=address, preload=TASK_MODULES) as ex:
            with clock("top"):
                measurements, invariants = measure(
                    top_tree,
                    truth,
                    schema.domain,
                    strategy,
                    release_key=release_key,
                    ledger=ledger,
                    constraints=top_constraints,
                    executor=ex,
                )
                del truth
                write_measurements(measurements, top_tree, range(stream_level + 1), tmp, "top")
            sweeps = _Sweeps(
                common,
                tree,
                top_tree,
                measurements,
                invariants,
                top_constraints,
                by_label,
                release_key,
                ex,
                clock,
                progress,
                stream_by,
            )
            swept = sweeps.topdown() if estimator == "topdown" else sweeps.blue()
            del sweeps
        top_counts, top_stats, results, root_total = swept
        _record_lower_levels(ledger, strategy, tree, stream_level, results)
        streamed = StreamedRelease(
            schema=schema,
            tree=tree,
            strategy=strategy,
            stream_level=stream_level,
            folder=final,
            top_counts=top_counts,
            measurements=measurements,
            ledger=ledger,
            stats=list(top_stats) + _sum_stats(results, stream_level, tree.n_levels),
            invariants=invariants,
            constraints=constraints,
            subtrees=tuple(results),
            timings=timings,
            estimator=estimator,
            root_total=root_total,
        )
        # the ledger with its summary (estimator, the root total held), as every release folder
        write_text(
            tmp / "ledger.json",
            json.dumps(ledger_document(streamed.top_release()), indent=1, default=str),
        )
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for phase in ("tree", "measure", "summary", "read", "estimate", "write"):
        timings[f"subtree_{phase}_cpu"] = sum(r.timings.get(f"{phase}_cpu", 0.0) for r in results)
    log.info("streamed release of %d subtree(s) written to %s", len(results), final)
    return streamed


#: what the sweeps return: the released counts and statistics of the levels down to the stream
#: level, the subtrees' results (in stream node order) and the root total held (BLUE only)
_Swept = tuple[list[np.ndarray], list[LevelStats], list[SubtreeResult], RootTotal | None]


@dataclass(frozen=True)
class _Sweeps:
    """The subtree sweeps of one release, from the measured levels down to the stream level:
    what they share (the tasks' common part, the public tree, the top's measurements and
    invariants, the records' partitions by stream node, the release key) and where and how they
    run (the executor, the clock, the progress)."""

    common: TaskCommon
    tree: Tree
    top_tree: Tree
    measurements: Measurements
    invariants: dict[int, dict[int, tuple]]
    top_constraints: ConstraintSet | None
    by_label: dict[int, Partition]
    release_key: bytes
    ex: Executor
    clock: PhaseClock
    progress: Progress
    stream_by: str

    def topdown(self) -> _Swept:
        """``estimator="topdown"``: the top estimated from its own measurements, then one sweep
        in which each subtree reads, measures, estimates from its published top and writes."""
        common, clock, top_tree = self.common, self.clock, self.top_tree
        with clock("top"):
            inputs, _, _ = prepare_inputs(
                "topdown", top_tree, common.schema.domain, self.measurements
            )
            bounds = self.invariants
        top_counts, top_stats = _estimate_top(
            common, top_tree, inputs, self.top_constraints, bounds, self.ex, clock
        )
        tasks = subtree_tasks(common, self.tree, top_counts, self.by_label, self.release_key, None)
        with clock("subtrees"):
            results = self.ex.map(
                run_subtree, tasks, self.progress, f"subtrees by {self.stream_by}"
            )
        return top_counts, top_stats, results, None

    def blue(self) -> _Swept:
        """``estimator="blue"``: sweep 1 measures the subtrees and returns their tops'
        summaries, the top's BLUE and passes run from them (the root's total held), sweep 2
        estimates each subtree from its top's BLUE (see the module docstring)."""
        common, clock, top_tree, tree = self.common, self.clock, self.top_tree, self.tree
        schema, stream_by = common.schema, self.stream_by
        plan = streamed_plan(
            schema.domain, common.strategy, self.measurements, tree.n_levels, self.invariants
        )
        tasks = subtree_tasks(common, tree, None, self.by_label, self.release_key, plan)
        n_units = tree.levels[common.stream_level].size
        by_unit: dict[int, Measured] = {}

        def summaries(done: Iterator[tuple[int, Measured]]) -> Iterator[tuple[int, NodeSummary]]:
            """Sweep 1's results as they complete, each summary (``k x k`` per block under
            recodes) handed to the stack and dropped from the result kept."""
            for i, m in done:
                by_unit[i] = replace(m, summary=NodeSummary((), ()))
                yield i, m.summary

        with clock("subtrees_measure"):  # sweep 1: the only step that reads records
            desc = f"subtrees by {stream_by}: measure"
            arriving = self.ex.stream(measure_summarise, tasks, n_units, self.progress, desc)
            below = NodeSummary.stacked(n_units, summaries(arriving))
        del tasks, arriving
        measured = [by_unit.pop(i) for i in range(n_units)]
        with clock("top"):
            # the root's total held as the unstreamed release holds it
            above = top_blue(
                top_tree,
                schema.domain,
                self.measurements,
                below,
                plan,
                self.invariants,
                self.top_constraints,
            )
            del below
            inputs, bounds, root_total = above.inputs, above.bounds, above.root_total
            stream_blue = above.stream
            del above
        top_counts, top_stats = _estimate_top(
            common, top_tree, inputs, self.top_constraints, bounds, self.ex, clock
        )
        # made as the executor takes them: each holds a copy of its top's covariances
        # (k x k per block under recodes), so a list of all would hold the stream level's twice
        second = estimate_tasks(common, tree, top_counts, stream_blue, plan)
        with clock("subtrees_estimate"):  # sweep 2: published values only
            done = self.ex.stream(
                estimate_subtree,
                second,
                n_units,
                self.progress,
                f"subtrees by {stream_by}: estimate",
            )
            by_position = dict(done)
        estimated = [by_position[i] for i in range(n_units)]
        results = [_merged(m, r) for m, r in zip(measured, estimated, strict=True)]
        return top_counts, top_stats, results, root_total


def _estimate_top(
    common: TaskCommon,
    top_tree: Tree,
    inputs: EstimatorInputs,
    constraints: ConstraintSet | None,
    bounds: dict[int, dict[int, tuple]],
    ex: Executor,
    clock: PhaseClock,
) -> tuple[list[np.ndarray], list[LevelStats]]:
    """The levels down to the stream level estimated and their tables written (part ``top``)."""
    with clock("top"):
        top_counts, top_stats = estimate(
            top_tree,
            common.schema.domain,
            inputs,
            first_pass=common.first_pass,
            constraints=constraints,
            invariants=bounds,
            options=common.options,
            executor=ex,
        )
        top_rel = Release(
            common.schema,
            top_tree,
            common.strategy,
            top_counts,
            Measurements(()),
            Ledger(),
            top_stats,
        )
        for level in range(top_tree.n_levels):
            write_part(top_rel.long_table(level), common.folder, top_tree, level, "top")
    return top_counts, top_stats


def _merged(measured: Measured, result: SubtreeResult) -> SubtreeResult:
    """One subtree's result of both sweeps: sizes and statistics of the second, the seconds
    of both."""
    if measured.label != result.label or measured.nodes != result.nodes:
        raise ReleaseError(
            f"subtree {result.label!r}: the estimate sweep saw {result.nodes} node(s) per level, "
            f"the measurement sweep {measured.nodes} (subtree {measured.label!r})"
        )
    timings = dict(result.timings)
    for key, value in measured.timings.items():
        timings[key] = timings.get(key, 0.0) + value
    return replace(result, timings=timings)


def _record_lower_levels(
    ledger: Ledger,
    strategy: Strategy,
    tree: Tree,
    stream_level: int,
    results: Sequence[SubtreeResult],
) -> None:
    """One ledger entry per (lower level, query), for all the level's nodes: the subtrees are
    disjoint, so their measurements compose in parallel. Checked: the subtrees' nodes of each
    level add up to the level (no node measured twice or left out)."""
    from topdown.measurement.measure import record_level

    for level in range(stream_level + 1, tree.n_levels):
        measured = sum(r.nodes[level - stream_level - 1] for r in results)
        if measured != tree.levels[level].size:
            raise ReleaseError(
                f"level {level}: the subtrees measured {measured} node(s), the level has "
                f"{tree.levels[level].size}; the subtrees must partition every lower level"
            )
        record_level(ledger, strategy, level, make_level_mechanisms(strategy, level), measured)


def _sum_stats(
    results: Sequence[SubtreeResult], stream_level: int, n_levels: int
) -> list[LevelStats]:
    out = []
    for i, level in enumerate(range(stream_level + 1, n_levels)):
        total = LevelStats.of(level, LevelStats())
        for r in results:
            total = LevelStats.of(level, total + r.stats[i])
        out.append(total)
    return out
