"""The subtree tasks of a streamed release: what each holds, how the parent builds them, and
what a worker runs for each sweep.

One task per unit of the stream level (``topdown.streaming.run``): ``SubtreeTask`` carries the
unit's partition of the records (the only confidential part) and is run by ``run_subtree``
(``estimator="topdown"``: read, measure, estimate, write) or by ``measure_summarise`` (sweep 1 of
the streamed BLUE: read, measure, write the measurement parts, return the top's summary,
``Measured``). ``EstimateTask`` holds no records: ``estimate_subtree`` (sweep 2) reads the subtree's
published measurement parts back, runs the BLUE below its top and the passes, and writes its tables
and microdata. Each worker function takes one task and returns a public result, so any executor
(``topdown.execution.executors``) can run them, in any order.

Kept apart from the release's orchestration: these functions run in the workers (another
process, or a Dask worker), and what crosses to them is exactly the task types here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from constraints.attach import ConstraintSet
from mechanisms.ledger import Ledger
from mechanisms.rng import child_rng
from topdown.blue.estimate import NodeSummary, blue_inputs
from topdown.blue.plan import BluePlan
from topdown.blue.streamed import blue_below, subtree_summary
from topdown.errors import HierarchyError
from topdown.estimation.estimate import EstimateOptions, LevelStats, estimate
from topdown.estimation.estimators import prepare_blue_by_families, prepare_inputs
from topdown.measurement.estimator_inputs import EstimatorInputs
from topdown.measurement.measure import Measurements, measure
from topdown.measurement.tree import Tree, build_tree, geography_tree
from topdown.outputs.microdata import expand_microdata, write_table
from topdown.release import Release
from topdown.schema import Schema
from topdown.strategy import Strategy
from topdown.streaming.inputs import check_part_names, no_records
from topdown.streaming.measurements import part_path, read_part, safe_name, write_measurements
from topdown.streaming.partitions import Partition
from topdown.streaming.result import SubtreeResult
from topdown.support.int_types import smallest_int_type
from topdown.support.timing import PhaseClock

__all__ = [
    "TaskCommon",
    "SubtreeTask",
    "Measured",
    "EstimateTask",
    "subtree_tasks",
    "estimate_tasks",
    "run_subtree",
    "measure_summarise",
    "estimate_subtree",
    "write_part",
    "count_type",
]


@dataclass(frozen=True)
class TaskCommon:
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


@dataclass(frozen=True)
class SubtreeTask:
    """Everything one subtree's measurement needs; only ``partition`` is confidential.

    Under ``estimator="topdown"`` the task also estimates and writes the subtree (one sweep);
    under ``"blue"`` (``plan`` set) it measures, writes its measurement parts and returns its
    top's BLUE summary (sweep 1), and an ``EstimateTask`` estimates it later (sweep 2)."""

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
class Measured:
    """What sweep 1 of a streamed BLUE returns for a subtree (public: sizes, seconds, and its
    top's summary, derived from noisy measurements only)."""

    label: str
    nodes: tuple[int, ...]
    summary: NodeSummary
    timings: dict[str, float]


@dataclass(frozen=True)
class EstimateTask:
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


def subtree_tasks(
    common: TaskCommon,
    tree: Tree,
    top_counts: list[np.ndarray] | None,
    by_label: dict[int, Partition],
    release_key: bytes,
    plan: BluePlan | None,
) -> list[SubtreeTask]:
    """One measurement task per stream unit. ``top_counts`` (the released counts above) under
    ``topdown``; None in the BLUE's sweep 1, which estimates nothing (the chain is then the
    right length, of zeros: only its length is read)."""
    stream_level = common.stream_level
    stream = tree.levels[stream_level]
    assert stream.column is not None
    check_part_names(stream.labels.astype(str).tolist(), stream.column)
    empty = no_records(list(by_label.values()))
    rows = _geography_rows(common, tree)
    chains = tree.ancestors(stream_level)
    zero = np.zeros((1, common.schema.domain.size), dtype=np.int32)
    tasks = []
    for node, label in enumerate(stream.labels.astype(str).tolist()):
        tasks.append(
            SubtreeTask(
                label=label,
                partition=by_label.get(node) or Partition(label, frame=empty),
                geography=common.geography.iloc[rows[label]],
                chain=_chain(chains, node, top_counts)
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


def estimate_tasks(
    common: TaskCommon,
    tree: Tree,
    top_counts: list[np.ndarray],
    stream_blue: NodeSummary,
    plan: BluePlan,
) -> Iterator[EstimateTask]:
    """Sweep 2 of a streamed BLUE: one estimation task per stream unit (no records), in
    stream node order, each made when it is taken: a task copies its top's summary (under
    recodes ``k x k`` per block: 86 MB and more a DHC node), so the executor's window of them
    is held, not the level's."""
    stream_level = common.stream_level
    rows = _geography_rows(common, tree)
    chains = tree.ancestors(stream_level)
    return (
        EstimateTask(
            label=label,
            geography=common.geography.iloc[rows[label]],
            chain=_chain(chains, node, top_counts),
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
    )


def _geography_rows(common: TaskCommon, tree: Tree) -> dict[str, np.ndarray]:
    column = tree.levels[common.stream_level].column
    geo = common.geography
    groups = geo.groupby(geo[column].astype(str), sort=False).indices
    return {str(k): np.asarray(v) for k, v in groups.items()}


def _chain(
    chains: list[np.ndarray], node: int, top_counts: list[np.ndarray]
) -> tuple[np.ndarray, ...]:
    """The released counts (1 x cells) of a stream node and its ancestors, root first
    (``chains``: the tree's ``ancestors`` of the stream level, computed once per task list)."""
    return tuple(top_counts[lv][chain[node]][None, :] for lv, chain in enumerate(chains))


def _measure_subtree(task: SubtreeTask, clock: PhaseClock) -> tuple[Tree, Measurements, range]:
    """Read one subtree's records (the only step that does), build and measure its levels
    below the top."""
    schema, top = task.schema, len(task.chain) - 1
    with clock("tree"):
        records = task.partition.read()
        tree, truth = build_tree(records, schema, geography=task.geography)
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
    return tree, measurements, lower  # in their narrowest types (measure)


def run_subtree(task: SubtreeTask) -> SubtreeResult:
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


def measure_summarise(task: SubtreeTask) -> Measured:
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
    return Measured(task.label, nodes, summary, timings)


def estimate_subtree(task: EstimateTask) -> SubtreeResult:
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
        subtree = Tree(tree.levels[top:])
        # a subtree whose leaves outgrow one chunk (``LEAF_CHUNK_BYTES``) takes them a chunk
        # of families at a time, as the unstreamed release does: its peak is then a chunk's
        # work, not the subtree's (a DHC tract's 40 nodes of 1,227,744 cells: 390 MB a float
        # array over them)
        chunked = prepare_blue_by_families(subtree, schema.domain, below, top=(task.top, task.plan))
        leaves = None
        if chunked is not None:
            fed, _, leaves, _ = chunked
        else:
            sub = blue_below(subtree, schema.domain, below, task.top, task.plan)
            fed = blue_inputs(below, sub, fixed=1)  # the top's counts are published
            del sub
        del chunked
        inputs = EstimatorInputs(((),) * top + fed.levels)  # the levels above are fixed
        counts, stats = estimate(
            tree,
            schema.domain,
            inputs,
            first_pass=task.first_pass,
            constraints=task.constraints,
            options=task.options,
            fixed=task.chain,
            leaves=leaves,
        )
        del inputs, fed, leaves
    return _write_subtree(task, tree, counts, measurements, stats, clock, timings)


def _write_subtree(
    task: SubtreeTask | EstimateTask,
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
        rel = Release(task.schema, tree, task.strategy, counts, measurements, Ledger(), stats)
        for level in lower:
            write_part(rel.long_table(level), task.folder, tree, level, task.label)
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


def _check_subtree(tree: Tree, top: int, label: str, cells: int, max_cells: int) -> None:
    if tree.levels[top].labels.astype(str).tolist() != [label]:
        raise HierarchyError(f"subtree {label!r}: its geography rows are not one unit")
    for lv in tree.levels[top + 1 :]:
        if lv.size * cells > max_cells:
            raise HierarchyError(
                f"subtree {label!r}: level {lv.number} ({lv.column}) has {lv.size} nodes x {cells} "
                f"cells > max_subtree_cells ({max_cells}); stream by a lower level"
            )


def write_part(frame: pd.DataFrame, folder: Path, tree: Tree, level: int, part: str) -> None:
    """One part (``top``, or a subtree's label) of a level's long table, counts as int32, or
    int64 when a count does not fit int32 (a plain int32 cast wrapped 2^31 to -2^31)."""
    path = part_path(folder, "tables", tree, level, part)
    path.parent.mkdir(parents=True, exist_ok=True)
    if len(frame):
        frame = frame.astype({"count": count_type(frame["count"].to_numpy())})
    write_table(frame, path)


def count_type(counts: np.ndarray) -> type[np.signedinteger]:
    """int32 for counts it holds, else int64 (the parts are read back with pandas, which
    concatenates int32 and int64 parts as int64)."""
    return np.int32 if smallest_int_type(counts) in (np.int8, np.int16, np.int32) else np.int64
