"""Streamed release: memory that follows the largest subtree, not the whole level.

``release_streamed`` runs the levels down to a stream level (e.g. county) in memory: built and
measured as ``release`` does. Each subtree under the stream level (one county) is a task of its
own, and no task keeps anything of its subtree in memory when it ends. Peak memory is that of
the largest subtree (times the number of workers), never a dense (nodes x cells) array of a
whole lower level.

``estimator="blue"`` (the default), in two sweeps over the subtrees:

1. measure: each subtree's records are read (one Parquet partition, or one group of a
   DataFrame), its lower levels' histograms built from them alone and measured, its
   measurement parts written, and only the bottom-up summary of its top is returned (the
   top's estimate from its descendants' measurements and its variance, per subspace group:
   ``topdown.blue_streamed.subtree_summary``; derived from noisy measurements, so public).
2. the parent completes the upward recursion above the stream level, runs the downward one
   down to it (``topdown.blue_streamed.blue_above``), holds the root total where the
   unstreamed release would (``topdown.root_total``) and runs the passes of the levels down to
   the stream level.
3. estimate: each subtree task reads back its own published measurement parts (not records:
   the task has no partition to read), runs the downward recursion within the subtree from its
   top's whole-tree BLUE (``topdown.blue_streamed.blue_below``), the passes from its top's
   released counts (the fixed parent), and writes its tables and microdata.

Confidential records are read only in sweep 1 (and by the parent's histograms of the levels
down to the stream level, before anything is measured): the measurement step. The BLUE of
every node equals the whole-tree ``topdown.blue.blue`` of the same measurements (the pieces
share the whole tree's subspace groups, ``BluePlan``).

``estimator="topdown"``: one sweep; each subtree task reads, measures, estimates from its
published top and writes.

Why the result does not depend on the executor or the order of the subtrees: a subtree's noise
comes from a key derived from the release key and public data only, ``child_rng(release_key,
"subtree", stream level, label)``; inside the subtree the usual streams (``topdown.measure``:
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

Output folder (moved into place only when complete)::

    tables/level_<k>_<column>/<part>.parquet   per level, long format (node, attributes, count);
                                               one file for the levels down to the stream level
                                               (top.parquet), one per subtree below it
    measurements/level_<k>_<column>/<part>.parquet  the noisy measurements, parted the same way
                                               (``topdown.streamed_measurements``)
    microdata/<subtree>.parquet                the leaf records of each subtree
    ledger.json                                the privacy ledger with its summary (the
                                               estimator and the root total held:
                                               ``topdown.ledger_file``)
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import solvers
from constraints.attach import ConstraintSet
from constraints.contextual_constraints import SumEqualRealTotal
from mechanisms.ledger import Ledger, NoiseSource
from mechanisms.rng import child_rng, new_release_key
from topdown import budget_bounds
from topdown.blue import NodeSummary, blue_inputs
from topdown.blue_plan import BluePlan
from topdown.blue_streamed import blue_below, subtree_summary
from topdown.errors import DataError, HierarchyError, ReleaseError, StrategyError
from topdown.estimate import EstimateOptions, LevelStats, SolverChoice, estimate
from topdown.estimator_inputs import EstimatorInputs
from topdown.estimators import DEFAULT_ESTIMATOR, check_estimator, prepare_inputs
from topdown.executors import Executor, make_executor
from topdown.io import read_data
from topdown.ledger_file import ledger_document
from topdown.measure import Measurements, make_level_mechanisms, measure
from topdown.microdata import expand_microdata, write_table
from topdown.partitions import Partition, partitions
from topdown.progress import Progress
from topdown.release import Release
from topdown.root_total import RootTotal
from topdown.schema import Schema
from topdown.strategy import Strategy
from topdown.streamed_measurements import part_path, read_part, safe_name, write_measurements
from topdown.streamed_release import StreamedRelease, SubtreeResult, streamed_plan, top_blue
from topdown.timing import PhaseClock
from topdown.tree import (
    ConfidentialHistograms,
    Tree,
    build_tree,
    geography_tree,
)

__all__ = ["release_streamed", "MAX_SUBTREE_CELLS"]

log = logging.getLogger(__name__)

#: the largest dense (nodes x cells) array a subtree's level may need: 2^30 cells (4 GiB as
#: int32, 8 GiB as the float L2 answers); a larger subtree asks for a lower stream level
MAX_SUBTREE_CELLS = 2**30


# -- the release ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _SubtreeTask:
    """Everything one subtree's measurement needs; only ``partition`` is confidential.

    Under ``estimator="topdown"`` the task also estimates and writes the subtree (one sweep);
    under ``"blue"`` (``plan`` set) it measures, writes its measurement parts and returns its
    top's BLUE summary (sweep 1), and an ``_EstimateTask`` estimates it later (sweep 2)."""

    label: str
    partition: Partition
    geography: pd.DataFrame
    chain: tuple[np.ndarray, ...]  # released counts (1 x cells) of the root .. the subtree's top
    schema: Schema
    strategy: Strategy
    key: bytes
    options: EstimateOptions
    constraints: ConstraintSet | None
    first_pass: dict[int, tuple[str, ...]]
    folder: Path
    microdata_format: str
    max_cells: int
    plan: BluePlan | None = None


@dataclass(frozen=True)
class _Measured:
    """What sweep 1 of a streamed BLUE returns for a subtree (public: sizes, seconds, and its
    top's summary, derived from noisy measurements only)."""

    label: str
    nodes: tuple[int, ...]
    summary: NodeSummary
    timings: dict[str, float]


@dataclass(frozen=True)
class _EstimateTask:
    """Sweep 2 of a streamed BLUE: everything one subtree's estimation needs. It holds no
    records and no partition: the subtree's tree comes from the published geography and its
    measurements from its own published parts (``read_part``)."""

    label: str
    geography: pd.DataFrame
    chain: tuple[np.ndarray, ...]  # released counts (1 x cells) of the root .. the subtree's top
    top: NodeSummary  # the top's whole-tree BLUE (one row per group)
    plan: BluePlan
    schema: Schema
    strategy: Strategy
    options: EstimateOptions
    constraints: ConstraintSet | None
    first_pass: dict[int, tuple[str, ...]]
    folder: Path
    microdata_format: str


def _measure_subtree(task: _SubtreeTask, clock: PhaseClock) -> tuple[Tree, Measurements, range]:
    """Read one subtree's records (the only step that does), build and measure its levels
    below the top."""
    schema, top = task.schema, len(task.chain) - 1
    with clock("tree"):
        records = task.partition.read()
        tree, truth = build_tree(records, schema, geography=task.geography, dtype=np.int32)
        del records
        _check_subtree(tree, top, task.label, schema.domain.size, task.max_cells)
    lower = range(top + 1, tree.n_levels)
    with clock("measure"):
        # the ledger of the release records each lower level once for all subtrees
        measurements, _ = measure(
            tree,
            truth,
            schema.domain,
            task.strategy,
            release_key=task.key,
            ledger=Ledger(),
            levels=lower,
        )
        del truth
    return tree, _narrow_measurements(measurements), lower


def _run_subtree(task: _SubtreeTask) -> SubtreeResult:
    """``estimator="topdown"``: build, measure, estimate and write one subtree; nothing of it
    stays in memory."""
    timings: dict[str, float] = {}
    clock = PhaseClock(timings)
    tree, measurements, lower = _measure_subtree(task, clock)
    with clock("estimate"):
        inputs, _, _ = prepare_inputs("topdown", tree, task.schema.domain, measurements)
        counts, stats = estimate(
            tree,
            task.schema.domain,
            inputs,
            first_pass=task.first_pass,
            constraints=task.constraints,
            options=task.options,
            fixed=task.chain,
        )
        del inputs
    with clock("write"):
        write_measurements(measurements, tree, lower, task.folder, task.label)
    return _write_subtree(task, tree, counts, measurements, stats, clock, timings)


def _measure_summarise(task: _SubtreeTask) -> _Measured:
    """Sweep 1 of a streamed BLUE: build and measure one subtree, write its measurement parts
    and return its top's summary (the upward recursion over its measurements)."""
    assert task.plan is not None
    timings: dict[str, float] = {}
    clock = PhaseClock(timings)
    tree, measurements, lower = _measure_subtree(task, clock)
    top = len(task.chain) - 1
    with clock("write"):
        write_measurements(measurements, tree, lower, task.folder, task.label)
    with clock("summary"):
        summary = subtree_summary(
            Tree(tree.levels[top:]),
            task.schema.domain,
            Measurements(measurements.levels[top:]),
            task.plan,
        )
    nodes = tuple(tree.levels[lv].size for lv in lower)
    return _Measured(task.label, nodes, summary, timings)


def _estimate_subtree(task: _EstimateTask) -> SubtreeResult:
    """Sweep 2 of a streamed BLUE: the subtree's BLUE from its top's, the passes from its
    top's released counts, then its tables and microdata. Reads its published measurement
    parts, never records (the task has none to read)."""
    timings: dict[str, float] = {}
    clock = PhaseClock(timings)
    schema, top = task.schema, len(task.chain) - 1
    with clock("read"):
        tree = geography_tree(task.geography, schema)
        lower = range(top + 1, tree.n_levels)
        measurements = read_part(task.folder, tree, lower, task.label, task.strategy, schema.domain)
    with clock("estimate"):
        below = Measurements(measurements.levels[top:])
        sub = blue_below(Tree(tree.levels[top:]), schema.domain, below, task.top, task.plan)
        fed = blue_inputs(below, sub)
        del sub
        inputs = EstimatorInputs(((),) * top + fed.levels)  # the levels above are fixed
        counts, stats = estimate(
            tree,
            schema.domain,
            inputs,
            first_pass=task.first_pass,
            constraints=task.constraints,
            options=task.options,
            fixed=task.chain,
        )
        del inputs, fed
    return _write_subtree(task, tree, counts, measurements, stats, clock, timings)


def _write_subtree(
    task: _SubtreeTask | _EstimateTask,
    tree: Tree,
    counts: list[np.ndarray],
    measurements: Measurements,
    stats: list[LevelStats],
    clock: PhaseClock,
    timings: dict[str, float],
) -> SubtreeResult:
    """A subtree's tables (one part per lower level) and microdata."""
    lower = range(len(task.chain), tree.n_levels)
    with clock("write"):
        counts = [_narrow(c) for c in counts]
        rel = Release(task.schema, tree, task.strategy, counts, measurements, Ledger(), stats)
        for level in lower:
            _write_part(rel.long_table(level), task.folder, tree, level, task.label)
        micro = expand_microdata(tree, task.schema, counts[-1], categorical=True)
        records_out = len(micro)
        write_table(
            micro,
            task.folder / "microdata" / f"{safe_name(task.label)}.{task.microdata_format}",
        )
    return SubtreeResult(
        task.label,
        tuple(tree.levels[lv].size for lv in lower),
        records_out,
        tuple(stats),
        timings,
        os.getpid(),
    )


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
        schema, strategy, constraints, seed, solver, solver_options, failsafe, progress: as in
            ``topdown.release``.
        stream_by: the hierarchy column whose units are streamed (e.g. ``"COUNTY"``); it must
            have a level below it.
        out: a new (or empty) folder for the tables, measurements, microdata and ledger
            (written into a hidden sibling and renamed into place when complete).
        geography: the published units (a DataFrame, or a CSV / Parquet path), one row per leaf;
            None reads them from the data (a disclosure, recorded in the ledger).
        executor, workers, address: where the subtrees run (``serial``, ``processes``,
            ``dask``); each subtree is one task, so peak memory is about workers x the largest
            subtree. The workers write their subtrees' parts themselves: on a Dask cluster,
            ``out`` must be on a filesystem every worker sees at the same path.
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
    stream_level = _stream_level(schema, stream_by)
    if microdata_format not in ("parquet", "csv"):
        raise DataError(f"microdata_format ({microdata_format!r}) must be 'parquet' or 'csv'")
    if max_subtree_cells < 1:
        raise DataError(f"max_subtree_cells ({max_subtree_cells}) must be at least 1")
    progress = progress or Progress()
    strategy.check(schema.domain, schema.n_levels)
    budget_bounds.check(strategy)
    choice = SolverChoice.of(solver)
    for name in choice.named():
        solvers.get(name, problem="release_streamed(solver=...)")
    if constraints is not None:
        constraints.validate(schema.n_levels)
    top_constraints, low_constraints = _split_constraints(constraints, stream_level)
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
        if geography is None:
            geo = _units_from_data(parts, schema)
            ledger.record_disclosure(
                "units read from data",
                f"the units of {list(schema.hierarchy)} are those with at least one record; pass "
                "geography= (the published list of units) to avoid this",
            )
        else:
            geo = geography if isinstance(geography, pd.DataFrame) else read_data(geography)
        tree = geography_tree(geo, schema)
        top_tree = Tree(tree.levels[: stream_level + 1])
        for lv in top_tree.levels:  # the levels held dense for the whole tree
            if lv.size * schema.domain.size > max_subtree_cells:
                raise HierarchyError(
                    f"level {lv.number} ({lv.column}) has {lv.size} nodes x "
                    f"{schema.domain.size} cells > max_subtree_cells ({max_subtree_cells}); "
                    "stream by a higher level"
                )
        by_label = _partitions_by_node(parts, tree.levels[stream_level].labels, stream_by)
        truth = _top_histograms(top_tree, parts, by_label, schema)
    release_key = new_release_key(seed)
    options = EstimateOptions(
        solver=choice, solver_options=dict(solver_options or {}), failsafe=failsafe
    )
    first_pass = {i: ls.first_pass for i, ls in enumerate(strategy.levels)}
    tmp = final.parent / f".{final.name}.streaming-{os.getpid()}"
    tmp.mkdir(parents=True)
    common = _Common(
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
    root_total: RootTotal | None = None
    try:
        with make_executor(executor, workers=workers, address=address) as ex:
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
            if estimator == "topdown":
                with clock("top"):
                    inputs, _, _ = prepare_inputs("topdown", top_tree, schema.domain, measurements)
                    bounds = invariants
                top_counts, top_stats = _estimate_top(
                    common, top_tree, inputs, top_constraints, bounds, ex, clock
                )
                tasks = _subtree_tasks(common, tree, top_counts, by_label, release_key, None)
                with clock("subtrees"):
                    results = ex.map(_run_subtree, tasks, progress, f"subtrees by {stream_by}")
            else:
                plan = streamed_plan(
                    schema.domain, strategy, measurements, tree.n_levels, invariants
                )
                tasks = _subtree_tasks(common, tree, None, by_label, release_key, plan)
                with clock("subtrees_measure"):  # sweep 1: the only step that reads records
                    measured = ex.map(
                        _measure_summarise, tasks, progress, f"subtrees by {stream_by}: measure"
                    )
                del tasks
                with clock("top"):
                    # the root's total held as the unstreamed release holds it
                    above = top_blue(
                        top_tree,
                        schema.domain,
                        measurements,
                        NodeSummary.stack([m.summary for m in measured]),
                        plan,
                        invariants,
                        top_constraints,
                    )
                    inputs, bounds, root_total = above.inputs, above.bounds, above.root_total
                    stream_blue = above.stream
                    del above
                top_counts, top_stats = _estimate_top(
                    common, top_tree, inputs, top_constraints, bounds, ex, clock
                )
                second = _estimate_tasks(common, tree, top_counts, stream_blue, plan)
                with clock("subtrees_estimate"):  # sweep 2: published values only
                    estimated = ex.map(
                        _estimate_subtree, second, progress, f"subtrees by {stream_by}: estimate"
                    )
                results = [_merged(m, r) for m, r in zip(measured, estimated, strict=True)]
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
        (tmp / "ledger.json").write_text(
            json.dumps(ledger_document(streamed.top_release()), indent=1, default=str)
        )
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for phase in ("tree", "measure", "summary", "read", "estimate", "write"):
        timings[f"subtree_{phase}_cpu"] = sum(r.timings.get(f"{phase}_cpu", 0.0) for r in results)
    log.info("streamed release of %d subtree(s) written to %s", len(results), final)
    return streamed


@dataclass(frozen=True)
class _Common:
    """What every subtree task of one release shares."""

    geography: pd.DataFrame
    stream_level: int
    schema: Schema
    strategy: Strategy
    options: EstimateOptions
    constraints: ConstraintSet | None  # those of the levels below the stream level
    first_pass: dict[int, tuple[str, ...]]
    folder: Path
    microdata_format: str
    max_cells: int


def _estimate_top(
    common: _Common,
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
        top_counts = [_narrow(c) for c in top_counts]
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
            _write_part(top_rel.long_table(level), common.folder, top_tree, level, "top")
    return top_counts, top_stats


def _merged(measured: _Measured, result: SubtreeResult) -> SubtreeResult:
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


def _stream_level(schema: Schema, stream_by: object) -> int:
    if stream_by not in schema.hierarchy:
        raise HierarchyError(
            f"stream_by ({stream_by!r}) must be one of the hierarchy columns "
            f"{list(schema.hierarchy)}"
        )
    level = schema.hierarchy.index(str(stream_by)) + 1
    if level == schema.n_levels - 1:
        raise HierarchyError(
            f"stream_by ({stream_by!r}) is the leaf level; stream by a column with a level below "
            f"it, one of {list(schema.hierarchy[:-1])}"
        )
    return level


def _split_constraints(
    constraints: ConstraintSet | None, stream_level: int
) -> tuple[ConstraintSet | None, ConstraintSet | None]:
    """The attachments of the levels down to the stream level, and of the levels below it.

    Raises:
        StrategyError: an invariant that applies below the stream level (its values and the
            sums they imply above would have to be published before the subtree is read).
    """
    if constraints is None or not len(constraints):
        return None, None
    top, low = ConstraintSet(), ConstraintSet()
    for a in constraints:
        below = a.level is None or a.level > stream_level
        if below and a.constraint.is_invariant:
            raise StrategyError(
                f"invariant {a.constraint.name} ({a.scope}) applies below the stream level "
                f"({stream_level}); streaming supports invariants at or above it: attach it to "
                f"a level <= {stream_level}, or release without stream_by"
            )
        if a.constraint.is_invariant and not isinstance(a.constraint, SumEqualRealTotal):
            raise StrategyError(
                f"invariant {a.constraint.name} aggregates records, which a streamed release "
                "does not keep above the stream level; use SumEqualRealTotal or release without "
                "stream_by"
            )
        if a.level is None or a.level <= stream_level:
            top.add(a.constraint, level=a.level, nodes=a.nodes)
        if below:
            low.add(a.constraint, level=a.level, nodes=a.nodes)
    return (top if len(top) else None), (low if len(low) else None)


def _units_from_data(parts: list[Partition], schema: Schema) -> pd.DataFrame:
    """The leaf units with records (one row each, every hierarchy column), read partition by
    partition."""
    cols = list(schema.hierarchy)
    frames = [p.read()[cols].astype(str).drop_duplicates() for p in parts]
    return pd.concat(frames, ignore_index=True).drop_duplicates(ignore_index=True)


def _partitions_by_node(
    parts: list[Partition], labels: np.ndarray, column: str
) -> dict[int, Partition]:
    index = pd.Index(labels.astype(str))
    out = {}
    for p in parts:
        i = index.get_indexer([p.label])[0]
        if i < 0:
            raise HierarchyError(
                f"the data has records in {column} {p.label!r}, which the geography does not list"
            )
        out[int(i)] = p
    return out


def _top_histograms(
    top: Tree, parts: list[Partition], by_label: dict[int, Partition], schema: Schema
) -> ConfidentialHistograms:
    """The true histograms of the levels down to the stream level, one partition at a time."""
    size = schema.domain.size
    counts = [np.zeros((lv.size, size), dtype=np.int64) for lv in top.levels]
    stream_level = top.n_levels - 1
    chains = top.ancestors(stream_level)
    for node, part in by_label.items():
        records = part.read()
        cells = schema.encode_cells(records)
        hist = np.bincount(cells, minlength=size)
        for level in range(stream_level + 1):
            if level >= 1:
                _check_chain(records, top, level, int(chains[level][node]), part.label)
            counts[level][chains[level][node]] += hist
    return ConfidentialHistograms(tuple(counts))


def _check_chain(records: pd.DataFrame, top: Tree, level: int, node: int, label: str) -> None:
    lv = top.levels[level]
    assert lv.column is not None
    column = records[lv.column]
    expected = str(lv.labels[node])
    found = sorted({str(v) for v in pd.unique(column)})
    if found and found != [expected]:
        raise HierarchyError(
            f"hierarchy column {lv.column!r}: the records of subtree {label!r} carry {found[:5]}, "
            f"but the geography puts {label!r} under {expected!r}"
        )


def _check_part_names(labels: list[str], column: str) -> None:
    """Every subtree writes its parts under ``safe_name(label)``: two labels with one file name
    (``a/b`` and ``a_b``) would overwrite each other's parts, so they are refused."""
    seen: dict[str, str] = {}
    for label in labels:
        other = seen.setdefault(safe_name(label), label)
        if other != label:
            raise HierarchyError(
                f"{column} units {other!r} and {label!r} would write to the same file "
                f"({safe_name(label)!r}.parquet): rename one, or stream by another column"
            )


def _subtree_tasks(
    common: _Common,
    tree: Tree,
    top_counts: list[np.ndarray] | None,
    by_label: dict[int, Partition],
    release_key: bytes,
    plan: BluePlan | None,
) -> list[_SubtreeTask]:
    """One measurement task per stream unit. ``top_counts`` (the released counts above) under
    ``topdown``; None in the BLUE's sweep 1, which estimates nothing (the chain is then the
    right length, of zeros: only its length is read)."""
    stream_level = common.stream_level
    stream = tree.levels[stream_level]
    assert stream.column is not None
    _check_part_names(stream.labels.astype(str).tolist(), stream.column)
    empty = _no_records(list(by_label.values()))
    rows = _geography_rows(common, tree)
    zero = np.zeros((1, common.schema.domain.size), dtype=np.int32)
    tasks = []
    for node, label in enumerate(stream.labels.astype(str).tolist()):
        tasks.append(
            _SubtreeTask(
                label=label,
                partition=by_label.get(node) or Partition(label, frame=empty),
                geography=common.geography.iloc[rows[label]],
                chain=_chain(tree, stream_level, node, top_counts)
                if top_counts is not None
                else (zero,) * (stream_level + 1),
                schema=common.schema,
                strategy=common.strategy,
                # public path: the stream level and the subtree's label
                key=child_rng(release_key, "subtree", stream_level, label).bytes(32),
                options=common.options,
                constraints=common.constraints,
                first_pass=common.first_pass,
                folder=common.folder,
                microdata_format=common.microdata_format,
                max_cells=common.max_cells,
                plan=plan,
            )
        )
    return tasks


def _estimate_tasks(
    common: _Common,
    tree: Tree,
    top_counts: list[np.ndarray],
    stream_blue: NodeSummary,
    plan: BluePlan,
) -> list[_EstimateTask]:
    """Sweep 2 of a streamed BLUE: one estimation task per stream unit (no records)."""
    stream_level = common.stream_level
    rows = _geography_rows(common, tree)
    return [
        _EstimateTask(
            label=label,
            geography=common.geography.iloc[rows[label]],
            chain=_chain(tree, stream_level, node, top_counts),
            top=stream_blue.row(node),
            plan=plan,
            schema=common.schema,
            strategy=common.strategy,
            options=common.options,
            constraints=common.constraints,
            first_pass=common.first_pass,
            folder=common.folder,
            microdata_format=common.microdata_format,
        )
        for node, label in enumerate(tree.levels[stream_level].labels.astype(str).tolist())
    ]


def _geography_rows(common: _Common, tree: Tree) -> dict[str, np.ndarray]:
    column = tree.levels[common.stream_level].column
    geo = common.geography
    groups = geo.groupby(geo[column].astype(str), sort=False).indices
    return {str(k): np.asarray(v) for k, v in groups.items()}


def _chain(
    tree: Tree, stream_level: int, node: int, top_counts: list[np.ndarray]
) -> tuple[np.ndarray, ...]:
    """The released counts (1 x cells) of a stream node and its ancestors, root first."""
    chains = tree.ancestors(stream_level)
    return tuple(top_counts[lv][chains[lv][node]][None, :] for lv in range(stream_level + 1))


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
    from topdown.measure import record_level

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


def _check_subtree(tree: Tree, top: int, label: str, cells: int, max_cells: int) -> None:
    if tree.levels[top].labels.astype(str).tolist() != [label]:
        raise HierarchyError(f"subtree {label!r}: its geography rows are not one unit")
    for lv in tree.levels[top + 1 :]:
        if lv.size * cells > max_cells:
            raise HierarchyError(
                f"subtree {label!r}: level {lv.number} ({lv.column}) has {lv.size} nodes x {cells} "
                f"cells > max_subtree_cells ({max_cells}); stream by a lower level"
            )


def _no_records(parts: list[Partition]) -> pd.DataFrame:
    """An empty record frame with the columns and types of the data (for a unit of the
    geography that has no records)."""
    first = parts[0]
    if first.frame is not None:
        return first.frame.iloc[:0]
    import pyarrow.parquet as pq

    assert first.path is not None
    source = next(iter(sorted(first.path.glob("*.parquet"))), first.path)
    return pq.read_schema(source).empty_table().to_pandas()


def _narrow(a: np.ndarray) -> np.ndarray:
    """int32 when the values fit (they cross process boundaries and sit on disk), else as is."""
    if a.dtype.kind in "iu" and a.dtype.itemsize > 4:
        info = np.iinfo(np.int32)
        if a.size == 0 or (a.min() >= info.min and a.max() <= info.max):
            return a.astype(np.int32)
    return a


def _narrow_measurements(m: Measurements) -> Measurements:
    return Measurements(
        tuple(tuple(replace(q, noisy=_narrow(q.noisy)) for q in lv) for lv in m.levels)
    )


def _write_part(frame: pd.DataFrame, folder: Path, tree: Tree, level: int, part: str) -> None:
    path = part_path(folder, "tables", tree, level, part)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = frame.astype({"count": np.int32}) if len(frame) else frame
    write_table(frame, path)
