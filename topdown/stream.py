"""Streamed release: memory that follows the largest subtree, not the whole level.

``release_streamed`` runs the levels down to a stream level (e.g. county) as ``release`` does,
in memory: built, measured and estimated. Then each subtree under the stream level (one
county) is a task of its own: its records are read (one Parquet partition, or one group of a
DataFrame), its lower levels' histograms built from them alone, measured, estimated from its
published top (the county's released counts are the fixed parent), and its per-level tables and
microdata written to disk before the next one starts. Peak memory is that of the largest
subtree (times the number of workers), never a dense (nodes x cells) array of a whole lower
level.

Why the result does not depend on the executor or the order of the subtrees: a subtree's noise
comes from a key derived from the release key and public data only, ``child_rng(release_key,
"subtree", stream level, label)``; inside the subtree the usual streams (``topdown.measure``:
level, query, chunk) derive from that key. A subtree task reads only its own records and public
values (the released counts of its top and ancestors), so where and when it runs changes
nothing.

Privacy: every node of a lower level is in exactly one subtree, so the subtrees' measurements of
one (level, query) are over disjoint nodes and compose in parallel: the ledger records each
(level, query) once, for all the level's nodes, exactly as the unstreamed release does
(``measure.record_level``). The release checks that the subtrees partition each lower level.

What differs from ``release``: the noise (other streams, same distributions), and the only-child
folding of ``estimator="topdown"`` across the stream level: a unit that is its county's only
child cannot lend its measurements to the county, which is estimated before it is measured.
``estimator="blue"`` pools every measurement of the tree and is refused here. Invariants
(contextual constraints) are supported at and above the stream level.

Output folder (moved into place only when complete)::

    tables/level_<k>_<column>/<part>.parquet   per level, long format (node, attributes, count);
                                               one file for the levels down to the stream level
                                               (top.parquet), one per subtree below it
    measurements/level_<k>_<column>/<part>.parquet  the noisy measurements, parted the same way
                                               (``topdown.streamed_measurements``)
    microdata/<subtree>.parquet                the leaf records of each subtree
    ledger.json                                the privacy ledger
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
from topdown.errors import DataError, HierarchyError, ReleaseError, StrategyError
from topdown.estimate import EstimateOptions, LevelStats, SolverChoice, estimate
from topdown.estimators import check_estimator, prepare_inputs
from topdown.executors import make_executor
from topdown.io import read_data
from topdown.measure import Measurements, make_level_mechanisms, measure
from topdown.microdata import expand_microdata, write_table
from topdown.partitions import Partition, partitions
from topdown.progress import Progress
from topdown.release import Release
from topdown.schema import Schema
from topdown.strategy import Strategy
from topdown.streamed_measurements import write_measurements
from topdown.streamed_release import StreamedRelease, SubtreeResult, safe_name, table_dir
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
    """Everything one subtree needs; only ``partition`` is confidential."""

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


def _run_subtree(task: _SubtreeTask) -> SubtreeResult:
    """Build, measure, estimate and write one subtree; nothing of it stays in memory."""
    timings: dict[str, float] = {}
    clock = PhaseClock(timings)
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
        measurements = _narrow_measurements(measurements)
    with clock("estimate"):
        inputs, _, _ = prepare_inputs("topdown", tree, schema.domain, measurements)
        counts, stats = estimate(
            tree,
            schema.domain,
            inputs,
            first_pass=task.first_pass,
            constraints=task.constraints,
            options=task.options,
            fixed=task.chain,
        )
        del inputs
    with clock("write"):
        counts = [_narrow(c) for c in counts]
        rel = Release(task.schema, tree, task.strategy, counts, measurements, Ledger(), stats)
        for level in lower:
            _write_part(rel.long_table(level), table_dir(task.folder, tree, level), task.label)
        write_measurements(measurements, tree, lower, task.folder, task.label)
        micro = expand_microdata(tree, schema, counts[-1], categorical=True)
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
    estimator: str = "topdown",
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
        estimator: ``"topdown"`` only (``"blue"`` pools the whole tree and cannot stream).
        microdata_format: ``parquet`` or ``csv``.
        max_subtree_cells: the largest dense (nodes x cells) array of one level that may be
            held: of a subtree's level, or of a level down to the stream level (refused
            before any data is measured).

    Raises:
        StrategyError: ``estimator="blue"``, or an invariant below the stream level.
        HierarchyError: ``stream_by`` is not a hierarchy column with a level below it, a
            partition of a unit the geography does not list, or a subtree over the bound.
        ReleaseError: ``out`` exists and is not an empty folder.
    """
    check_estimator(estimator)
    if estimator != "topdown":
        raise StrategyError(
            f"estimator ({estimator!r}) cannot stream: the BLUE pools every measurement of the "
            "whole tree before any estimate; use estimator='topdown' with stream_by, or release "
            "without stream_by"
        )
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
                inputs, _, _ = prepare_inputs("topdown", top_tree, schema.domain, measurements)
                top_counts, top_stats = estimate(
                    top_tree,
                    schema.domain,
                    inputs,
                    first_pass=first_pass,
                    constraints=top_constraints,
                    invariants=invariants,
                    options=options,
                    executor=ex,
                )
                top_counts = [_narrow(c) for c in top_counts]
                top_rel = Release(
                    schema, top_tree, strategy, top_counts, measurements, Ledger(), top_stats
                )
                for level in range(stream_level + 1):
                    _write_part(top_rel.long_table(level), table_dir(tmp, tree, level), "top")
                write_measurements(measurements, top_tree, range(stream_level + 1), tmp, "top")
            tasks = _subtree_tasks(
                tree,
                geo,
                stream_level,
                top_counts,
                by_label,
                schema,
                strategy,
                release_key,
                options,
                low_constraints,
                first_pass,
                tmp,
                microdata_format,
                max_subtree_cells,
            )
            with clock("subtrees"):
                results = ex.map(_run_subtree, tasks, progress, f"subtrees by {stream_by}")
        _record_lower_levels(ledger, strategy, tree, stream_level, results)
        (tmp / "ledger.json").write_text(json.dumps(ledger.to_dict(), indent=1, default=str))
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    stats = list(top_stats) + _sum_stats(results, stream_level, tree.n_levels)
    for phase in ("tree", "measure", "estimate", "write"):
        timings[f"subtree_{phase}_cpu"] = sum(r.timings.get(f"{phase}_cpu", 0.0) for r in results)
    log.info("streamed release of %d subtree(s) written to %s", len(results), final)
    return StreamedRelease(
        schema=schema,
        tree=tree,
        strategy=strategy,
        stream_level=stream_level,
        folder=final,
        top_counts=top_counts,
        measurements=measurements,
        ledger=ledger,
        stats=stats,
        invariants=invariants,
        constraints=constraints,
        subtrees=tuple(results),
        timings=timings,
    )


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
    tree: Tree,
    geography: pd.DataFrame,
    stream_level: int,
    top_counts: list[np.ndarray],
    by_label: dict[int, Partition],
    schema: Schema,
    strategy: Strategy,
    release_key: bytes,
    options: EstimateOptions,
    constraints: ConstraintSet | None,
    first_pass: dict[int, tuple[str, ...]],
    folder: Path,
    microdata_format: str,
    max_cells: int,
) -> list[_SubtreeTask]:
    stream = tree.levels[stream_level]
    assert stream.column is not None
    chains = tree.ancestors(stream_level)
    rows = geography.groupby(geography[stream.column].astype(str), sort=False).indices
    _check_part_names(stream.labels.astype(str).tolist(), stream.column)
    empty = _no_records(list(by_label.values()))
    tasks = []
    for node, label in enumerate(stream.labels.astype(str).tolist()):
        tasks.append(
            _SubtreeTask(
                label=label,
                partition=by_label.get(node) or Partition(label, frame=empty),
                geography=geography.iloc[rows[label]],
                chain=tuple(
                    top_counts[lv][chains[lv][node]][None, :] for lv in range(stream_level + 1)
                ),
                schema=schema,
                strategy=strategy,
                # public path: the stream level and the subtree's label
                key=child_rng(release_key, "subtree", stream_level, label).bytes(32),
                options=options,
                constraints=constraints,
                first_pass=first_pass,
                folder=folder,
                microdata_format=microdata_format,
                max_cells=max_cells,
            )
        )
    return tasks


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


def _write_part(frame: pd.DataFrame, folder: Path, part: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    frame = frame.astype({"count": np.int32}) if len(frame) else frame
    write_table(frame, folder / f"{safe_name(part)}.parquet")
