"""Confidential input on a Dask cluster: histograms built where the records are.

A release's input can be a partitioned Parquet dataset (a folder). With the ``dask`` executor
it is read with ``dask.dataframe`` on the workers and the records never come to the client:

1. The tree's structure comes from the declared geography (public, on the client), or, without
   one, from the distinct hierarchy paths computed on the workers (the engine records in the
   ledger that the units were read from the data, as for a DataFrame).
2. Each partition's records become, per level, the sparse counts of the flat index
   ``node * cells + cell`` (sorted keys and their counts: at most one entry per record, where
   a dense array would hold nodes x cells); the same code as ``topdown.measurement.tree.build_tree``
   checks the domains and the geography.
3. The partitions' counts are summed on the workers in a tree reduction (``SPLIT_EVERY``
   parts per step), one result per level, which stays on the cluster as a future.
4. Measurement asks for row ranges of a level (its chunks, ``topdown.measurement.measure``); each
range is
   cut out on the worker that holds the level and handed, still sparse, to the measurement
   task, which densifies it there (``topdown.execution.executors.RemoteArray``).

So the client receives only noisy answers, and, where a declared invariant is published
exactly, that invariant's value: the invariant is evaluated on the worker holding the level
(``RemoteLevel.evaluate_rows``), and no histogram row comes to the client.
Keeping the histograms on the workers (rather than gathering them and sending the chunks back
out) saves two transfers of the whole level and keeps the client's memory to the public tree
and the noisy answers; the sparse form keeps the cluster's memory to about 16 bytes per
non-empty (node, cell) instead of 8 bytes per cell.

Without the ``dask`` executor a dataset folder is read whole with pandas
(``topdown.measurement.read``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import pandas as pd

from topdown.errors import DataError
from topdown.execution.executors import DaskExecutor, Executor, RemoteArray
from topdown.measurement.parquet_parts import check_dataset
from topdown.measurement.read import read_data
from topdown.measurement.tree import (
    ConfidentialHistograms,
    Level,
    Tree,
    build_tree,
    codes_in_geography,
    geography_tree,
    structure,
)
from topdown.schema import Schema
from topdown.support.optional import require

__all__ = [
    "SPLIT_EVERY",
    "SparseCounts",
    "RemoteLevel",
    "is_dataset",
    "load_input",
    "dataset_tree",
]

log = logging.getLogger(__name__)

SPLIT_EVERY = 8  # partial sums merged per reduction step

R = TypeVar("R")


def is_dataset(data: object) -> bool:
    """True for a path to a folder (a partitioned Parquet dataset)."""
    return isinstance(data, str | os.PathLike) and Path(data).is_dir()


def load_input(
    data: pd.DataFrame | str | os.PathLike,
    schema: Schema,
    *,
    executor: Executor,
    keep_records: bool = False,
    geography: pd.DataFrame | None = None,
) -> tuple[Tree, ConfidentialHistograms]:
    """The tree and the confidential histograms of a release's input.

    A DataFrame (or a file) is encoded here (``topdown.measurement.tree.build_tree``). A dataset
    folder is read on the cluster when ``executor`` is a Dask executor (see the module docstring),
    and with pandas otherwise.

    Raises:
        DataError: ``keep_records`` (a contextual constraint aggregating records) with a dataset
            on the cluster: the records stay on the workers.
    """
    if not is_dataset(data):
        frame = read_data(cast(Any, data))
        return build_tree(frame, schema, keep_records=keep_records, geography=geography)
    if not isinstance(executor, DaskExecutor):
        frame = read_data(cast(Any, data))
        return build_tree(frame, schema, keep_records=keep_records, geography=geography)
    if keep_records:
        raise DataError(
            f"data ({str(data)!r}, a Parquet dataset on the dask executor): a contextual "
            "constraint that aggregates records needs the records in this process, but a dataset "
            "read on the cluster keeps them on the workers; use a histogram invariant "
            "(SumEqualRealTotal) or pass the data as a DataFrame"
        )
    return dataset_tree(Path(cast(Any, data)), schema, executor=executor, geography=geography)


@dataclass(frozen=True)
class SparseCounts:
    """Counts of a set of (node, cell) positions: ``keys`` = node * cells + cell, sorted and
    distinct, ``counts`` > 0 (int64 both)."""

    keys: np.ndarray
    counts: np.ndarray

    @classmethod
    def of_keys(cls, keys: np.ndarray) -> SparseCounts:
        """Counts of each distinct key among ``keys`` (one per record)."""
        unique, counts = np.unique(keys, return_counts=True)
        return cls(unique.astype(np.int64), counts.astype(np.int64))

    @classmethod
    def merge(cls, parts: Sequence[SparseCounts]) -> SparseCounts:
        """The sum of several sparse counts (exact integer sums)."""
        keys = np.concatenate([p.keys for p in parts])
        counts = np.concatenate([p.counts for p in parts])
        if len(keys) == 0:
            return cls(keys.astype(np.int64), counts.astype(np.int64))
        order = np.argsort(keys, kind="stable")
        keys, counts = keys[order], counts[order]
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        return cls(keys[starts], np.add.reduceat(counts, starts))

    def rows(self, start: int, stop: int, cells: int) -> SparseRows:
        """The entries of nodes ``start..stop-1``."""
        lo, hi = np.searchsorted(self.keys, [start * cells, stop * cells])
        return SparseRows(self.keys[lo:hi] - start * cells, self.counts[lo:hi], stop - start, cells)


@dataclass(frozen=True)
class SparseRows:
    """A block of histogram rows, sparse until ``np.asarray`` makes it a dense int64 array."""

    keys: np.ndarray
    counts: np.ndarray
    n_rows: int
    cells: int

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        flat = np.zeros(self.n_rows * self.cells, dtype=np.int64)
        flat[self.keys] = self.counts
        dense = flat.reshape(self.n_rows, self.cells)
        return dense if dtype is None else dense.astype(dtype)


class RemoteLevel:
    """The confidential histograms of one level, held on the cluster.

    Slicing rows (``level[a:b]``) returns a ``RemoteArray`` for a task field: the rows are cut
    out on the worker holding the level and resolved on the worker running the task. A node's
    histogram never comes to the client: indexing one row is refused, and a declared invariant
    is evaluated where the level is (``evaluate_rows``), only its values coming back.
    """

    def __init__(self, client: Any, counts: Any, n_nodes: int, cells: int):
        self._client = client
        self._counts = counts  # a Future of SparseCounts
        self.shape = (n_nodes, cells)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: slice | int) -> Any:
        n, cells = self.shape
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step != 1:
                raise IndexError(f"rows of a remote level are sliced with step 1, not {step}")
            stop = max(start, stop)
            rows = self._client.submit(_cut_rows, self._counts, start, stop, cells, pure=False)
            return RemoteArray(rows, (stop - start, cells))
        raise TypeError(
            f"a remote level's rows are sliced (level[a:b]), not indexed (level[{key!r}]): a "
            "node's confidential histogram does not come to the client; evaluate a function of "
            "it on the cluster with evaluate_rows"
        )

    def evaluate_rows(
        self, nodes: Sequence[int], function: Callable[[int, np.ndarray], R]
    ) -> list[R]:
        """``function(node, histogram)`` of each of ``nodes``, run on the worker holding the
        level: only the results come here (e.g. a declared invariant's published values)."""
        n, cells = self.shape
        for index in nodes:
            if not 0 <= index < n:
                raise IndexError(f"node {index} is out of range for a level of {n} node(s)")
        values = self._client.submit(
            _evaluate_rows, self._counts, list(nodes), cells, function, pure=False
        )
        return cast(list[R], values.result())


def dataset_tree(
    path: Path,
    schema: Schema,
    *,
    executor: DaskExecutor,
    geography: pd.DataFrame | None = None,
) -> tuple[Tree, ConfidentialHistograms]:
    """The public tree (here) and the histograms (on the cluster) of a Parquet dataset."""
    require("dask", "reading a Parquet dataset on the cluster")
    require("parquet", "reading a Parquet dataset")
    import dask
    import dask.dataframe as dd

    columns = list(dict.fromkeys([a.source for a in schema.attributes] + list(schema.hierarchy)))
    check_dataset(path)  # every part present, readable, one schema (named here, not on a worker)
    try:
        ddf = dd.read_parquet(str(path))
    except Exception as err:  # dask/pyarrow raise many types for a folder that is not a dataset
        raise DataError(
            f"data ({str(path)!r}) cannot be read as a Parquet dataset: {err}; it must be a "
            "folder of Parquet files with the schema's columns"
        ) from None
    missing = [c for c in columns if c not in ddf.columns]
    if missing:
        raise DataError(
            f"data ({str(path)!r}, a Parquet dataset) lacks the column(s) {missing} the schema "
            f"needs; its columns are {list(ddf.columns)}; every query attribute and hierarchy "
            "column must be a column of the dataset"
        )
    ddf = ddf[columns]
    client = executor.client
    hierarchy = list(schema.hierarchy)
    if geography is None:
        # the units present in the data (the engine records the disclosure); only the distinct
        # hierarchy paths come here, never a record
        units = ddf[hierarchy].drop_duplicates() if hierarchy else None
        frame = (
            client.compute(units).result().reset_index(drop=True)
            if units is not None
            else pd.DataFrame()
        )
        levels, _ = structure(frame, schema.hierarchy, "data")
    else:
        levels = list(geography_tree(geography, schema).levels)
    shared = client.scatter((schema, levels), broadcast=True, hash=False)
    parts = [
        dask.delayed(_partition_counts)(p, shared) for p in ddf.to_delayed(optimize_graph=True)
    ]
    futures = client.compute(parts)
    while len(futures) > 1:
        futures = [
            client.submit(_merge_parts, *futures[i : i + SPLIT_EVERY], pure=False)
            for i in range(0, len(futures), SPLIT_EVERY)
        ]
    total = futures[0]
    _raise_first_error(total)  # bad domain values, units outside the geography
    cells = schema.domain.size
    counts = tuple(
        RemoteLevel(client, client.submit(_level_of, total, i, pure=False), lv.size, cells)
        for i, lv in enumerate(levels)
    )
    log.info(
        "histograms of %s built on the cluster from %d partition(s), %d level(s)",
        path,
        ddf.npartitions,
        len(levels),
    )
    return Tree(tuple(levels)), ConfidentialHistograms(cast(tuple[np.ndarray, ...], counts))


def _partition_counts(frame: pd.DataFrame, shared: tuple[Schema, list[Level]]) -> list:
    """On a worker: one partition's sparse counts per level (the checks of ``build_tree``)."""
    schema, levels = shared
    frame = frame.reset_index(drop=True)
    size = schema.domain.size
    if len(frame) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return [SparseCounts(empty, empty) for _ in levels]
    cells = schema.encode_cells(frame)
    return [
        SparseCounts.of_keys(codes * size + cells) for codes in codes_in_geography(frame, levels)
    ]


def _merge_parts(*parts: list[SparseCounts]) -> list[SparseCounts]:
    """On a worker: the level-by-level sum of several partial results."""
    return [SparseCounts.merge(level) for level in zip(*parts, strict=True)]


def _level_of(total: list[SparseCounts], level: int) -> SparseCounts:
    return total[level]


def _cut_rows(counts: SparseCounts, start: int, stop: int, cells: int) -> SparseRows:
    return counts.rows(start, stop, cells)


def _evaluate_rows(
    counts: SparseCounts, nodes: list[int], cells: int, function: Callable[[int, np.ndarray], R]
) -> list[R]:
    """On a worker: ``function`` of each node and its dense histogram row."""
    return [function(i, np.asarray(counts.rows(i, i + 1, cells))[0]) for i in nodes]


def _raise_first_error(future: Any) -> None:
    """Wait for the histograms and raise a worker's error here (the message, as ``build_tree``
    would raise it, not a distributed traceback)."""
    from dask.distributed import wait

    wait(future)
    if future.status == "error":
        raise future.exception()
