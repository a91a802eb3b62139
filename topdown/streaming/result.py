"""A streamed release's result: the levels down to the stream level in memory, the rest on disk.

``StreamedRelease`` reads the folder ``topdown.streaming.run`` wrote
(``tables/level_<k>_<column>/``, ``measurements/level_<k>_<column>/``, ``microdata/``), one subtree
or one level at a time, and checks the whole release one subtree at a time (counts, noisy
measurements, microdata), so reading and checking follow the largest subtree's memory too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from constraints.attach import ConstraintSet
from constraints.domain import Domain
from mechanisms.ledger import Ledger
from topdown.blue.estimate import NodeSummary, blue_inputs
from topdown.blue.fed_terms import FedTerms, fed_names
from topdown.blue.plan import BluePlan
from topdown.blue.streamed import blue_above, subtree_summary
from topdown.errors import ReleaseError
from topdown.estimation.estimate import LevelStats
from topdown.estimation.estimators import exact_totals
from topdown.estimation.root_total import RootTotal, decide, with_root_total
from topdown.measurement.estimator_inputs import EstimatorInputs
from topdown.measurement.measure import Measurements
from topdown.measurement.tree import Level, Tree, lookup
from topdown.release import CorrectnessReport, Release
from topdown.schema import Schema
from topdown.strategy import Strategy
from topdown.streaming.measurements import (
    level_dir,
    measurement_failures,
    part_path,
    read_measurements,
    read_part,
    safe_name,
)

__all__ = [
    "StreamedRelease",
    "SubtreeResult",
    "TopBlue",
    "dense_counts",
    "streamed_plan",
    "table_dir",
    "top_blue",
]


@dataclass(frozen=True)
class SubtreeResult:
    """What a subtree task reports back (public: sizes, statistics, seconds)."""

    label: str
    nodes: tuple[int, ...]  # nodes per level below the stream level
    records_out: int
    stats: tuple[LevelStats, ...]
    timings: dict[str, float]
    pid: int


def table_dir(folder: Path, tree: Tree, level: int) -> Path:
    return level_dir(folder, "tables", tree, level)


@dataclass
class StreamedRelease:
    """A streamed release: the levels down to the stream level in memory, the rest on disk.

    ``table(level)`` and ``microdata()`` read the folder (the subtrees' parts concatenated);
    ``subtree_counts`` gives one subtree's dense counts of one level; ``check_correctness``
    verifies the whole release one subtree at a time.
    """

    schema: Schema
    tree: Tree
    strategy: Strategy
    stream_level: int
    folder: Path
    top_counts: list[np.ndarray]
    measurements: Measurements
    ledger: Ledger
    stats: list[LevelStats]
    invariants: dict[int, dict[int, tuple]] = field(default_factory=dict)
    constraints: ConstraintSet | None = None
    subtrees: tuple[SubtreeResult, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    estimator: str = "topdown"
    # : under ``estimator="blue"``: whether the passes held the root's total at the rounded :
    # whole-tree BLUE total (``topdown.estimation.root_total``), as the unstreamed release records
    # it
    root_total: RootTotal | None = None
    #: per level below the stream level: each subtree's node indices (``nodes_of``), built once
    _members: dict[int, dict[str, np.ndarray]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def table_dir(self, level: int) -> Path:
        return table_dir(self.folder, self.tree, level)

    def table(self, level: int, part: str | None = None) -> pd.DataFrame:
        """Level ``level`` in long format (node, attributes, count), all parts or one subtree's."""
        files = (
            [part_path(self.folder, "tables", self.tree, level, part)]
            if part
            else sorted(self.table_dir(level).glob("*.parquet"))
        )
        frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
        return frame.sort_values("node", kind="stable", ignore_index=True)

    def microdata(self, part: str | None = None) -> pd.DataFrame:
        files = sorted((self.folder / "microdata").glob("*.*"))
        if part is not None:
            files = [f for f in files if f.stem == safe_name(part)]
        # CSV read as text, as written: a label such as "0100" must not become the number 100
        return pd.concat(
            [
                pd.read_parquet(f)
                if f.suffix == ".parquet"
                else pd.read_csv(f, dtype=str, keep_default_na=False)
                for f in files
            ],
            ignore_index=True,
        )

    def nodes_of(self, level: int, label: str | None = None) -> np.ndarray:
        """Indices of ``level``'s nodes, all of them or those of one subtree."""
        if label is None or level <= self.stream_level:
            return np.arange(self.tree.levels[level].size)
        members = self._members.get(level)
        if members is None:  # one pass over the level for every subtree, not one per call
            owner = self.tree.ancestors(level)[self.stream_level]
            labels = self.tree.levels[self.stream_level].labels.astype(str).tolist()
            order = np.argsort(owner, kind="stable")  # by subtree, node order within each
            edges = np.searchsorted(owner[order], np.arange(len(labels) + 1))
            members = {lab: order[edges[i] : edges[i + 1]] for i, lab in enumerate(labels)}
            self._members[level] = members
        if label not in members:
            raise ValueError(f"label ({label!r}) is not a unit of the stream level")
        return members[label]

    def counts(self, level: int, label: str | None = None) -> np.ndarray:
        """Dense counts (nodes x cells, in node order) of a level, or of one subtree's part."""
        if level <= self.stream_level:
            return self.top_counts[level]
        nodes = self.nodes_of(level, label)
        labels = self.tree.levels[level].labels.astype(str)[nodes]
        where = f"level {level}" + ("" if label is None else f", subtree {label!r}")
        return dense_counts(self.table(level, label), labels, self.schema, where)

    def top_release(self) -> Release:
        """The levels down to the stream level as a ``Release`` (with the whole ledger)."""
        return Release(
            self.schema,
            Tree(self.tree.levels[: self.stream_level + 1]),
            self.strategy,
            self.top_counts,
            self.measurements,
            self.ledger,
            self.stats[: self.stream_level + 1],
            self.constraints,
            self.invariants,
            estimator=self.estimator,
            root_total=self.root_total,
        )

    @cached_property
    def _stream_index(self) -> pd.Index:
        """The stream level's labels as text (``subtree_tree`` looks each subtree up here)."""
        return pd.Index(self.tree.levels[self.stream_level].labels.astype(str))

    @cached_property
    def _stream_chain(self) -> list[np.ndarray]:
        """Each stream node's ancestor on every level above (built once, not per subtree)."""
        return self.tree.ancestors(self.stream_level)

    def subtree_tree(self, label: str) -> Tree:
        """The tree of one subtree (the chain from the root to its top, then its own nodes),
        in the node order its task used (labels sorted within each level)."""
        node = int(self._stream_index.get_indexer(pd.Index([label]))[0])
        if node < 0:
            raise ValueError(f"label ({label!r}) is not a unit of the stream level")
        chain = self._stream_chain
        levels = []
        previous = np.array([-1])
        for lv in self.tree.levels:
            if lv.number <= self.stream_level:
                nodes = np.array([chain[lv.number][node]])
            else:
                nodes = self.nodes_of(lv.number, label)
            parent = (
                np.full(len(nodes), -1, dtype=np.int64)
                if lv.number == 0
                else pd.Index(previous).get_indexer(lv.parent[nodes]).astype(np.int64)
            )
            levels.append(Level(lv.number, lv.column, lv.labels[nodes], parent))
            previous = nodes
        return Tree(tuple(levels))

    def blue_root_total(self) -> RootTotal:
        """The root total decision recomputed from the published measurement parts (sweep 1's
        summaries from each subtree's part, then ``top_blue``): what ``topdown check``
        compares with the ledger's estimation note. One subtree's part in memory at a time."""
        top_tree = Tree(self.tree.levels[: self.stream_level + 1])
        domain = self.schema.domain
        top = read_part(
            self.folder, top_tree, range(self.stream_level + 1), "top", self.strategy, domain
        )
        plan = streamed_plan(domain, self.strategy, top, self.tree.n_levels, self.invariants)
        lower = range(self.stream_level + 1, self.tree.n_levels)
        labels = self.tree.levels[self.stream_level].labels.astype(str).tolist()

        def summaries() -> Iterator[tuple[int, NodeSummary]]:
            for i, label in enumerate(labels):
                sub = self.subtree_tree(label)
                part = read_part(self.folder, sub, lower, label, self.strategy, domain)
                below = Tree(sub.levels[self.stream_level :])
                levels = Measurements(part.levels[self.stream_level :])
                yield i, subtree_summary(below, domain, levels, plan)

        constraints = self.constraints
        return top_blue(
            top_tree,
            domain,
            top,
            NodeSummary.stacked(len(labels), summaries()),
            plan,
            self.invariants,
            constraints,
        ).root_total

    def measurements_dir(self, level: int) -> Path:
        return level_dir(self.folder, "measurements", self.tree, level)

    def measurement_table(self, level: int, part: str | None = None) -> pd.DataFrame:
        """Level ``level``'s noisy measurements (node, query, answer, noisy, variance), all
        parts or one subtree's (``"top"`` for the levels down to the stream level)."""
        files = (
            [part_path(self.folder, "measurements", self.tree, level, part)]
            if part
            else sorted(self.measurements_dir(level).glob("*.parquet"))
        )
        return pd.concat([read_measurements(f) for f in files], ignore_index=True)

    def check_correctness(
        self, *, microdata: bool = True, measurements: bool = True
    ) -> CorrectnessReport:
        """Non-negative integers, children summing to their parent at every level (each
        subtree's first level to its released top), every lower node present once, the
        microdata equal to the leaf tables, every node's noisy measurements written once with
        their mechanism's variance, and the ledger's total equal to the strategy's."""
        report = self.top_release().check_correctness()
        checks, failures = dict(report.checks), list(report.failures)
        if measurements:
            noisy = self._measurement_failures()
            checks["noisy measurements: every node's answers once, with their variance"] = not noisy
            failures += noisy[:20]
        problems: list[str] = []
        stream = self.tree.levels[self.stream_level]
        leaf = self.tree.n_levels - 1
        for node, label in enumerate(stream.labels.astype(str).tolist()):
            parent = self.top_counts[self.stream_level][node][None, :]
            parent_nodes = np.array([node])
            for level in range(self.stream_level + 1, self.tree.n_levels):
                try:
                    dense = self.counts(level, label)
                except (OSError, ValueError, ReleaseError) as exc:
                    problems.append(f"subtree {label!r}, level {level}: {exc}")
                    break
                if (dense < 0).any():
                    problems.append(f"subtree {label!r}, level {level}: negative counts")
                nodes = self.nodes_of(level, label)
                up = pd.Index(parent_nodes).get_indexer(self.tree.levels[level].parent[nodes])
                sums = np.zeros_like(parent)
                np.add.at(sums, up, dense)
                bad = np.flatnonzero((sums != parent).any(axis=1))
                for p in bad[:3]:
                    problems.append(
                        f"subtree {label!r}, level {level}: children of "
                        f"{self.tree.label_of(level - 1, int(parent_nodes[p]))!r} differ from it"
                    )
                if microdata and level == leaf and not problems:
                    problems += self._microdata_failures(label, dense)
                parent, parent_nodes = dense, nodes
        checks["subtrees: children sum to parent, microdata equal the leaf"] = not problems
        failures += problems[:20]
        return CorrectnessReport(checks, tuple(failures))

    def _measurement_failures(self) -> list[str]:
        """The measurement parts, one at a time: the top part for the levels down to the
        stream level, one part per subtree below it, and no other part."""
        out: list[str] = []
        stream = self.tree.levels[self.stream_level].labels.astype(str).tolist()
        domain = self.schema.domain
        for level in range(self.tree.n_levels):
            parts = ["top"] if level <= self.stream_level else stream
            folder = self.measurements_dir(level)
            for part in parts:
                labels = self.tree.levels[level].labels[self.nodes_of(level, part)]
                path = part_path(self.folder, "measurements", self.tree, level, part)
                out += measurement_failures(path, level, labels, self.strategy, domain)
            expected = {
                part_path(self.folder, "measurements", self.tree, level, p).name for p in parts
            }
            extra = sorted(p.name for p in folder.glob("*") if p.name not in expected)
            if extra:
                out.append(f"{folder.name}: parts of no subtree: {extra[:5]}")
        return out

    def _microdata_failures(self, label: str, leaf: np.ndarray) -> list[str]:
        micro = self.microdata(label)
        leaf_level = self.tree.levels[-1]
        assert leaf_level.column is not None
        nodes = self.nodes_of(self.tree.n_levels - 1, label)
        row = lookup(pd.Index(leaf_level.labels.astype(str)[nodes]), micro[leaf_level.column])
        if (row < 0).any():
            return [f"subtree {label!r}: microdata rows in units outside it"]
        found = np.zeros_like(leaf)
        np.add.at(found, (row, self.schema.published_cells(micro, f"microdata of {label!r}")), 1)
        if not np.array_equal(found, leaf):
            return [f"subtree {label!r}: the microdata differ from the leaf table"]
        return []


def streamed_plan(
    domain: Domain,
    strategy: Strategy,
    top: Measurements,
    n_levels: int,
    invariants: Mapping[int, Mapping[int, tuple]] | None,
) -> BluePlan:
    """The whole tree's BLUE plan of a streamed release: the measured queries of the levels
    down to the stream level (``top``), the strategy's below, and the totals invariants publish
    (public: known before any subtree is read)."""
    queries = [[m.query for m in lv] for lv in top.levels] + [
        [q for q, _ in strategy.levels[lv].queries] for lv in range(len(top.levels), n_levels)
    ]
    return BluePlan.of(domain, queries, exact_totals(invariants, domain))


@dataclass(frozen=True)
class TopBlue:
    """The whole-tree BLUE above a streamed release's stream level (``top_blue``).

    Attributes:
        inputs: the passes' inputs of the levels down to the stream level.
        stream: each stream node's final BLUE, per group (``blue_below`` continues from it):
            estimates and covariances, without the subtree covariances (sweep 2 takes the
            stream nodes' counts as published, so it never reads them; under recodes they
            are a ``k x k`` matrix per block and stream node type, which the parent would
            otherwise keep, and send with each task, through sweep 2).
        root_total: whether (and at which value) the passes hold the root's total.
        bounds: the bound constraints the passes hold (invariants and the held total).
    """

    inputs: EstimatorInputs
    stream: NodeSummary
    root_total: RootTotal
    bounds: dict[int, dict[int, tuple]]


def top_blue(
    top_tree: Tree,
    domain: Domain,
    measurements: Measurements,
    below: NodeSummary,
    plan: BluePlan,
    invariants: Mapping[int, Mapping[int, tuple]] | None,
    constraints: ConstraintSet | None,
) -> TopBlue:
    """The upward recursion completed above the stream level from the subtrees' summaries
    (``below``, in stream node order), the downward one to the stream level, and the root
    total held as the unstreamed release holds it (``topdown.estimation.root_total``). Used by the
    release and by ``topdown check``, which recomputes it from the published parts."""
    exact = exact_totals(invariants, domain)
    # the stream level's subtree covariances, one k x k matrix per node and block under
    # recodes, are read only for its passes' weights: folded block by block, not kept
    last = top_tree.n_levels - 1
    fold = (
        FedTerms(domain, fed_names([m.query for m in measurements.levels[last]], True))
        if plan.blocks
        else None
    )
    estimate, stream = blue_above(
        top_tree, domain, measurements, below, plan, exact_totals=exact, fold=fold
    )
    held = decide("blue", top_tree, domain, estimate, constraints, invariants)
    return TopBlue(
        blue_inputs(measurements, estimate, exact),
        NodeSummary(stream.est, stream.var),
        held,
        with_root_total(invariants, held),
    )


def dense_counts(frame: pd.DataFrame, labels: np.ndarray, schema: Schema, where: str) -> np.ndarray:
    """A long table (node, attributes, count) as dense counts (len(labels) x cells).

    Raises:
        ReleaseError: a node not in ``labels``, a value outside its domain, or a count that is
            not a non-negative integer.
    """
    row = lookup(pd.Index(labels), frame["node"])
    if (row < 0).any():
        raise ReleaseError(f"{where}: the table has nodes outside it")
    values = frame["count"].to_numpy()
    if not np.issubdtype(values.dtype, np.integer) or (values < 0).any():
        raise ReleaseError(f"{where}: counts must be non-negative integers")
    dense = np.zeros((len(labels), schema.domain.size), dtype=np.int64)
    np.add.at(dense, (row, schema.published_cells(frame, where)), values)
    return dense
