"""Measurement: the one step that reads confidential data.

Every query of every node is answered on the node's true histogram and noised with an exact
discrete mechanism. Declared invariants (contextual constraints) are also evaluated here,
published exactly, and recorded in the ledger as outside the DP guarantee.

The output, ``Measurements``, is what the Census calls the noisy measurement file: the query,
its noisy answers and the noise variance, per level. Everything after this step is
post-processing and costs no privacy.

How the noise is drawn (speed without changing the distribution):

* The nodes of a level are cut into chunks of a fixed number of nodes by node index,
  ``chunk_nodes(cells)``: a function of the (public) domain size only, never of the executor or
  its number of workers. Node indices are the positions of the sorted labels of the public
  geography, so a node's chunk and its row in the chunk are fixed by public data.
* Each (level, query, chunk) has its own stream, ``child_rng(release_key, "measure", level,
  query, chunk_nodes, chunk)``, and gets its noise from ONE call of the exact sampler for the
  whole (nodes of the chunk x answers) block. The mechanisms and samplers are those of
  :mod:`mechanisms.discrete` and :mod:`mechanisms.samplers`, unchanged.
* A measurement task carries only its chunk's confidential histogram rows, the public
  mechanism parameters and the keys of its own streams (``child_key``, derived here: the
  release key never leaves this process, so a worker cannot draw any other chunk's noise);
  tasks run on the release's executor and their results are put back in node order. So the
  noisy answers are the same on every executor and for every number of workers.

Why every noise value is still independent of every other, with the right distribution: the
samplers return i.i.d. draws. Each output is an accepted candidate of CKS20's rejection
samplers; the candidates are i.i.d., each is accepted by coins of its own, and the sampler
keeps the first ``size`` accepted ones (a stopping rule on their number, not their values), so
the kept values are i.i.d. from the target distribution. Within one stream, the noise of
different nodes and answers are therefore independent draws; across streams, the ChaCha12 keys
are HMAC-SHA256 of distinct paths under the secret release key, hence computationally
independent. This is the same guarantee the per-node streams gave: each node's answers get
independent noise of the calibrated distribution, which is all the parallel composition over
the disjoint nodes of a level (and the sequential composition over queries and levels
recorded in the ledger) needs. What changed is only which stream a value comes from; a seeded
run's numbers differ from those of the per-node layout.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
import pandas as pd

from constraints.attach import ConstraintSet
from constraints.contextual_constraints import SumEqualRealTotal
from constraints.domain import Domain
from mechanisms.accounting import ZCDP, PureDP
from mechanisms.discrete import DiscreteGaussianMechanism, DiscreteLaplaceMechanism, sensitivity
from mechanisms.ledger import Ledger
from mechanisms.rng import child_key, rng_from_key
from topdown.execution.executors import Executor
from topdown.measurement.tree import ConfidentialHistograms, Tree
from topdown.strategy import Query, Strategy
from topdown.support.int_types import holding, narrowed

__all__ = [
    "QueryMeasurement",
    "Measurements",
    "ByLevel",
    "MeasureTask",
    "measure",
    "measure_chunk",
    "make_level_mechanisms",
    "record_level",
    "chunk_nodes",
    "CHUNK_CELLS",
    "FRAME_ROWS",
    "MAX_CHUNK_NODES",
]

log = logging.getLogger(__name__)

CHUNK_CELLS = 2**20  # histogram cells per measurement chunk (about; see chunk_nodes)
FRAME_ROWS = 2**22  # rows per part of the long measurement file (``Measurements.frames``)
MAX_CHUNK_NODES = 4096


@dataclass(frozen=True)
class QueryMeasurement:
    """Noisy answers of one query for every node of one level.

    Attributes:
        level: level number (0 = root).
        query: the query measured.
        share: its share of the level's budget.
        mechanism: mechanism name.
        budget: the privacy cost of this query on this level (nodes compose in parallel).
        variance: variance of the noise added to each answer.
        noisy: integer array (nodes of the level, answers of the query), of the smallest
            signed integer type that holds every answer (``topdown.support.int_types``): int8 or
            int16 for most levels. Code doing integer arithmetic on it widens first.
    """

    level: int
    query: Query
    share: Fraction
    mechanism: str
    budget: PureDP | ZCDP
    variance: float
    noisy: np.ndarray

    @classmethod
    def of(
        cls, level: int, query: Query, share: Fraction, mech: Any, noisy: np.ndarray
    ) -> QueryMeasurement:
        """The answers ``noisy`` of ``query`` at ``level``, drawn by ``mech`` (whose name,
        budget and variance are recorded with them)."""
        return cls(level, query, share, mech.name, mech.budget, float(mech.variance), noisy)


class _Named(Protocol):
    @property
    def query(self) -> Query: ...


_Q = TypeVar("_Q", bound=_Named)


class ByLevel(Generic[_Q]):
    """Per-query values of every level, root first: the shape shared by the raw measurements
    and the estimator's inputs (``topdown.measurement.estimator_inputs.EstimatorInputs``)."""

    levels: tuple[tuple[_Q, ...], ...]

    def at(self, level: int) -> tuple[_Q, ...]:
        return self.levels[level]

    def get(self, level: int, query: str) -> _Q | None:
        for m in self.levels[level]:
            if m.query.name == query:
                return m
        return None


@dataclass(frozen=True)
class Measurements(ByLevel[QueryMeasurement]):
    """All noisy measurements of a release, level by level (root first)."""

    levels: tuple[tuple[QueryMeasurement, ...], ...]

    def to_frame(self, tree: Tree) -> pd.DataFrame:
        """Long format: level, node, query, answer index, noisy answer, variance (the whole
        file in memory: ``frames`` gives it in parts)."""
        return pd.concat(list(self.frames(tree)), ignore_index=True)

    def frames(self, tree: Tree, max_rows: int | None = None) -> Iterator[pd.DataFrame]:
        """``to_frame``'s rows in order, as frames of at most ``max_rows`` (default
        ``FRAME_ROWS``) rows, at least one node's answers: blocks of nodes of one query of one
        level. A DHC tract level's detailed answers are 491 million rows, tens of GB as one
        frame; the release folder writes them part by part."""
        for lv in self.levels:
            for m in lv:
                nodes, answers = m.noisy.shape
                labels = tree.levels[m.level].labels.astype(str)
                step = max(1, (max_rows or FRAME_ROWS) // max(1, answers))
                for start in range(0, max(nodes, 1), step):
                    rows = slice(start, min(start + step, nodes))
                    n = rows.stop - rows.start
                    yield pd.DataFrame(
                        {
                            "level": m.level,
                            "node": np.repeat(labels[rows], answers),
                            "query": m.query.name,
                            "answer": np.tile(np.arange(answers), n),
                            "noisy": m.noisy[rows].ravel(),
                            "variance": m.variance,
                        }
                    )


def make_level_mechanisms(strategy: Strategy, level: int) -> list[tuple[Query, Fraction, Any]]:
    """The mechanism of each query of a level, calibrated to its share of the budget."""
    l1, l2_squared = (Fraction(s) for s in sensitivity(strategy.neighbouring))
    out: list[tuple[Query, Fraction, Any]] = []
    ls = strategy.levels[level]
    for query, share in ls.queries:
        amount = ls.budget * share
        mech: DiscreteLaplaceMechanism | DiscreteGaussianMechanism
        if strategy.mechanism == "discrete_laplace":
            mech = DiscreteLaplaceMechanism(amount, l1_sensitivity=l1)
        else:
            mech = DiscreteGaussianMechanism(amount, l2_sensitivity_squared=l2_squared)
        out.append((query, share, mech))
    return out


def chunk_nodes(cells: int) -> int:
    """Nodes per measurement chunk: about ``CHUNK_CELLS`` histogram cells, at most
    ``MAX_CHUNK_NODES`` nodes.

    A function of the domain size only (public, fixed by the schema), so the streams do not
    depend on the executor. About 10^6 cells keeps one sampler call's working arrays to about
    100 MB (measured for the discrete Gaussian at sigma^2 = 4.9) while its per-call overhead
    (about 5 ms) stays under 1% of its time.
    """
    if cells < 1:
        raise ValueError(f"cells ({cells}) must be at least 1")
    return max(1, min(MAX_CHUNK_NODES, CHUNK_CELLS // cells))


def _store(
    level_array: np.ndarray | None, values: np.ndarray, first: int, n_nodes: int
) -> np.ndarray:
    """Put a chunk's answers in rows ``first:`` of its level's array, allocated on the first
    chunk in the chunk's type and widened (one copy) when a later chunk needs a wider one."""
    if level_array is None:
        level_array = np.empty((n_nodes, values.shape[1]), dtype=values.dtype)
    level_array = holding(level_array, values)
    level_array[first : first + len(values)] = values
    return level_array


@dataclass(frozen=True)
class MeasureTask:
    """One chunk of one level: what a worker needs to measure it, and nothing more.

    Attributes:
        level: the level number.
        chunk: the chunk's index in the level (its nodes are ``chunk * size`` onwards).
        size: nodes per chunk on this level (``chunk_nodes``), part of the stream's path.
        histograms: CONFIDENTIAL: the true histograms of the chunk's nodes (rows, cells).
        domain: the query domain (public).
        queries: the level's queries (public).
        mechanisms: their calibrated mechanisms (public parameters).
        keys: SECRET: the key of each query's stream for this chunk,
            ``child_key(release_key, "measure", level, query, size, chunk)``; never the
            release key itself.
    """

    level: int
    chunk: int
    size: int
    histograms: np.ndarray
    domain: Domain
    queries: tuple[Query, ...]
    mechanisms: tuple[Any, ...]
    keys: tuple[bytes, ...]


@dataclass(frozen=True)
class ChunkResult:
    """The noisy answers of one chunk (one array per query), the CPU seconds it took and the
    process that ran it."""

    noisy: tuple[np.ndarray, ...]
    cpu_seconds: float
    pid: int


def measure_chunk(task: MeasureTask) -> ChunkResult:
    """Answer the chunk's queries and add noise: one sampler call per query."""
    start = time.process_time()
    out = []
    for query, mech, key in zip(task.queries, task.mechanisms, task.keys, strict=True):
        answers = query.answer(task.histograms, task.domain)
        rng = rng_from_key(key)
        # the type is a function of the noisy answers, which are published: post-processing
        out.append(narrowed(mech.release(answers, rng=rng)))
    return ChunkResult(tuple(out), time.process_time() - start, os.getpid())


def measure(
    tree: Tree,
    truth: ConfidentialHistograms,
    domain: Domain,
    strategy: Strategy,
    *,
    release_key: bytes,
    ledger: Ledger,
    constraints: ConstraintSet | None = None,
    progress: Callable[[Iterable, int, str], Iterable] | None = None,
    executor: Executor | None = None,
    stats: dict[str, float] | None = None,
    levels: Collection[int] | None = None,
) -> tuple[Measurements, dict[int, dict[int, tuple]]]:
    """Answer and noise every query of every node; evaluate declared invariants.

    Args:
        tree: the public structure.
        truth: the confidential histograms (read here and nowhere else in a release).
        domain: the query domain.
        strategy: queries, shares and budgets per level.
        release_key: key of the release's random streams (``mechanisms.rng``).
        ledger: receives one entry per (level, query) and one per invariant.
        constraints: attached constraints; contextual ones are evaluated on the truth.
        progress: wraps an iterable to show progress (chunks done / total).
        executor: runs the chunks (default: in this process); the noise does not depend on it.
        stats: if given, receives ``measure_worker_cpu``: the CPU seconds of the chunks that
            ran in other processes (for benchmarks; this process's own time is its own).
        levels: measure only these levels (default all); the others get no measurements and
            no ledger entries (``topdown.streaming.tasks`` measures a subtree's lower levels this
            way and ``topdown.streaming.run`` records their cost once, with ``record_level``).

    Returns:
        The measurements, and the bound invariants: level -> node index -> constraints with
        their published values.
    """
    executor = executor or Executor()
    size = chunk_nodes(domain.size)
    measured = [lv for lv in range(tree.n_levels) if levels is None or lv in levels]
    mechanisms = {lv: make_level_mechanisms(strategy, lv) for lv in measured}
    n_chunks = {lv: -(-tree.levels[lv].size // size) for lv in measured}
    # every chunk of every level in one stream: no barrier between batches or levels, so the
    # workers never wait for this process. Leaves first: the levels of few nodes come last, so
    # no large chunk is left to run alone at the end while the other workers idle. The streams
    # are keyed by (level, query, chunk), so the order in which chunks run (or where) does not
    # change the noise.
    keys = [(lv, c) for lv in measured[::-1] for c in range(n_chunks[lv])]

    def task(key: tuple[int, int]) -> MeasureTask:
        lv, c = key
        queries = tuple(q for q, _, _ in mechanisms[lv])
        return MeasureTask(
            lv,
            c,
            size,
            truth.counts[lv][c * size : (c + 1) * size],
            domain,
            queries,
            tuple(m for _, _, m in mechanisms[lv]),
            tuple(child_key(release_key, "measure", lv, q.name, size, c) for q in queries),
        )

    noisy: dict[int, list[np.ndarray | None]] = {
        lv: [None] * len(mechanisms[lv]) for lv in measured
    }
    worker_cpu = 0.0
    chunks = executor.stream(
        measure_chunk, map(task, keys), len(keys), progress, f"measure ({size}-node chunks)"
    )
    for i, res in chunks:
        lv, c = keys[i]
        if res.pid != os.getpid():
            worker_cpu += res.cpu_seconds
        for j, values in enumerate(res.noisy):
            noisy[lv][j] = _store(noisy[lv][j], values, c * size, tree.levels[lv].size)
    levels_out: list[tuple[QueryMeasurement, ...]] = []
    for level in range(tree.n_levels):
        if level not in noisy:
            levels_out.append(())
            continue
        record_level(ledger, strategy, level, mechanisms[level], tree.levels[level].size)
        row = [
            QueryMeasurement.of(
                level,
                query,
                share,
                mech,
                np.empty((0, query.n_answers(domain)), dtype=np.int8) if v is None else v,
            )
            for (query, share, mech), v in zip(mechanisms[level], noisy[level], strict=True)
        ]
        levels_out.append(tuple(row))
        log.info(
            "measured level %d: %d node(s) in %d chunk(s), queries %s",
            level,
            tree.levels[level].size,
            n_chunks[level],
            [q.name for q, _, _ in mechanisms[level]],
        )
    if stats is not None:
        stats["measure_worker_cpu"] = worker_cpu
    invariants = _evaluate_invariants(tree, truth, domain, constraints, ledger)
    return Measurements(tuple(levels_out)), invariants


def record_level(
    ledger: Ledger,
    strategy: Strategy,
    level: int,
    mechanisms: list[tuple[Query, Fraction, Any]],
    n_nodes: int,
) -> None:
    """Record one level's queries in the ledger: each query once for the level's ``n_nodes``
    disjoint nodes (parallel composition), with the sensitivity its mechanism was calibrated
    with (not a second derivation), except the root's total under replace_one: its true
    sensitivity, 0, is recorded, so the ledger charges it nothing (``LedgerEntry.charged``)."""
    for query, share, mech in mechanisms:
        laplace = isinstance(mech, DiscreteLaplaceMechanism)
        note = f"{strategy.neighbouring} neighbours; share {share} of the level's budget; " + (
            "L1 sensitivity" if laplace else "L2 sensitivity squared"
        )
        calibrated = mech.l1_sensitivity if laplace else mech.l2_sensitivity_squared
        recorded = calibrated
        if (
            level == 0
            and query.attributes == ()
            and sensitivity(strategy.neighbouring, whole_total=True) == (0, 0)
        ):
            recorded = 0
            note += (
                "; the root's total never changes when one record is replaced: its sensitivity "
                "is 0 (the total is public under replace_one), so this entry is charged nothing "
                f"and the ledger's total leaves it out; its noise is still drawn as configured "
                f"(calibrated at sensitivity {calibrated} with share {share}), so the value is "
                "noisy although it protects no one: declare the total as an invariant instead"
            )
            log.warning(
                "strategy: level 0 measures the root's total under replace_one neighbours, where "
                "its sensitivity is 0 (it is public): it is charged nothing, and its noise (share "
                "%s of the budget) protects no one; declare the total as an invariant instead",
                share,
            )
        ledger.record(
            query.name,
            level,
            mech.name,
            mech.budget,
            sensitivity=recorded,
            nodes=n_nodes,
            note=note,
        )


def _evaluate_invariants(
    tree: Tree,
    truth: ConfidentialHistograms,
    domain: Domain,
    constraints: ConstraintSet | None,
    ledger: Ledger,
) -> dict[int, dict[int, tuple]]:
    """Bind every contextual constraint to its node's true value: published exactly.

    A ``SumEqualRealTotal`` attached to every node of level k also fixes the same sum on every
    level above (a parent's value is the sum of its children's), so it is bound there too and
    recorded as implied: without that, a noisy parent could contradict its children's exact
    values and no consistent release would exist.
    """
    bound: dict[int, dict[int, tuple]] = {}
    if constraints is None:
        return bound
    implied: dict[int, list] = {}
    for level in range(tree.n_levels - 1, -1, -1):
        general = [c for c in constraints.for_level(level) if c.is_invariant]
        for c in general:
            if isinstance(c, SumEqualRealTotal):
                for above in range(level):
                    implied.setdefault(above, []).append((c, level))
    for level in range(tree.n_levels):
        labels = tree.levels[level].labels
        records_of = _records_by_node(truth, level)
        general = [c for c in constraints.for_level(level) if c.is_invariant]
        extra = [c for c, _ in implied.get(level, []) if c not in general]
        extra = list(dict.fromkeys(extra))
        specific = {
            str(label): [c for c in cs if c.is_invariant]
            for label, cs in constraints.node_specific(level).items()
        }
        if not general and not extra and not any(specific.values()):
            continue
        applies = {
            i: tuple(general + extra + specific.get(str(label), []))
            for i, label in enumerate(labels)
        }
        nodes = [i for i, cs in applies.items() if cs]
        values = _invariant_values(truth, level, domain, nodes, applies, records_of)
        bound[level] = {
            i: tuple(c.bind(v) for c, v in zip(applies[i], vs, strict=True))
            for i, vs in zip(nodes, values, strict=True)
        }
        names = sorted({c.name for c in general} | {c.name for cs in specific.values() for c in cs})
        for name in names:
            ledger.record_invariant(name, level, description="published exactly, outside DP")
        for c in extra:
            source = min(lv for cc, lv in implied[level] if cc == c)
            ledger.record_invariant(
                c.name,
                level,
                description=f"implied by the same invariant on level {source} (sum of its values)",
            )
    return bound


def _invariant_values(
    truth: ConfidentialHistograms,
    level: int,
    domain: Domain,
    nodes: list[int],
    applies: Mapping[int, tuple],
    records_of: Callable[[int], pd.DataFrame | None],
) -> list[list[int | float]]:
    """The true values of each node's invariants (published exactly, nothing more).

    A level held on a cluster (``topdown.measurement.dask_input.RemoteLevel``, it has
    ``evaluate_rows``) evaluates them on the worker holding it: the values come here, never
    the node's histogram row.
    """
    counts = truth.counts[level]
    remote = getattr(counts, "evaluate_rows", None)
    if remote is not None:
        by_node = {i: applies[i] for i in nodes}
        return [
            list(vs)
            for vs in remote(
                nodes, functools.partial(_evaluate_node, domain=domain, by_node=by_node)
            )
        ]
    return [[c.evaluate(domain, counts[i], records_of(i)) for c in applies[i]] for i in nodes]


def _evaluate_node(
    node: int, row: np.ndarray, *, domain: Domain, by_node: Mapping[int, tuple]
) -> list[int | float]:
    """On the worker holding a level: the values of one node's histogram invariants."""
    return [c.evaluate(domain, row, None) for c in by_node[node]]


def _records_by_node(
    truth: ConfidentialHistograms, level: int
) -> Callable[[int], pd.DataFrame | None]:
    """A lookup node -> its records, grouped once per level (not a scan per node)."""
    records = truth.records
    if records is None or not truth.node_of_record:
        return lambda node: None
    codes = truth.node_of_record[level]
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(codes.max() + 2))
    return lambda node: records.iloc[order[bounds[node] : bounds[node + 1]]]
