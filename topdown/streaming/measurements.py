"""The noisy measurements of a streamed release, on disk: one Parquet part per level and subtree.

The unstreamed release folder writes them as one ``measurements.csv``; a streamed release of a
large state would make that billions of rows. Here each subtree task writes its own levels'
measurements before the next subtree starts (``topdown.streaming.run``), and the levels down to the
stream level go into one part (``top``)::

    measurements/level_<k>_<column>/<part>.parquet, one row per node and query:
        node     the node's label (dictionary-encoded)
        query    the query's name (dictionary-encoded)
        variance the variance of its noise (one value per level and query)
        noisy    the noisy answers, a list in the query's answer order (as ``Query.answer``)

``read_measurements`` gives a part in the long format of ``measurements.csv`` (node, query,
answer, noisy, variance). One row per node and query rather than per answer: the noisy answers
are the only per-answer data written (dictionary-encoded small integers, zstd), so a part takes
about half a byte per answer at the production budgets, and writing it costs a few percent of
the subtree's time. Written and checked in row groups of at most ``ROW_GROUP`` answers, so
neither holds more than one row group beside the subtree's own arrays.

These are public (the output of the only step that read the confidential data, and what every
estimate was computed from): an analyst can re-estimate from them, or compare the release with
them, without any confidential data.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import DTypeLike

from constraints.domain import Domain
from topdown.errors import ReleaseError
from topdown.measurement.measure import Measurements, QueryMeasurement, make_level_mechanisms
from topdown.measurement.tree import ROOT_LABEL, Tree, lookup
from topdown.strategy import Strategy
from topdown.support.writing import naming

__all__ = [
    "ROW_GROUP",
    "safe_name",
    "level_dir",
    "level_folder",
    "part_path",
    "write_measurements",
    "write_row_groups",
    "answer_rows",
    "read_measurements",
    "read_part",
    "measurement_failures",
]

#: answers per Parquet row group (4 x 2^20: about 60 MB of arrays while one is written)
ROW_GROUP = 1 << 22


def safe_name(label: str) -> str:
    """A file name for a label (labels are public; path separators are not allowed in one)."""
    return label.replace(os.sep, "_").replace("/", "_") or "_"


def level_folder(folder: Path, kind: str, level: int, column: str | None) -> Path:
    """The folder of one level's parts: ``<folder>/<kind>/level_<k>_<column>`` (``kind``:
    ``tables`` or ``measurements``; the root's column is ``ROOT_LABEL``). The one place a
    streamed folder's part paths are made."""
    return Path(folder) / kind / f"level_{level}_{column or ROOT_LABEL}"


def level_dir(folder: Path, kind: str, tree: Tree, level: int) -> Path:
    """``level_folder`` of ``tree``'s level ``level``."""
    return level_folder(folder, kind, level, tree.levels[level].column)


def part_path(folder: Path, kind: str, tree: Tree, level: int, part: str) -> Path:
    """One part's file: ``level_dir(...)/<safe_name(part)>.parquet``."""
    return level_dir(folder, kind, tree, level) / f"{safe_name(part)}.parquet"


def write_measurements(
    measurements: Measurements, tree: Tree, levels: Iterable[int], folder: Path, part: str
) -> None:
    """Write ``levels``' measurements (of all of ``tree``'s nodes on each) as the part ``part``.

    ``tree`` is the tree the measurements were taken on (a subtree's, or the levels down to the
    stream level): node ``i`` of its level is the measurements' row ``i``.
    """
    for level in levels:
        path = part_path(folder, "measurements", tree, level, part)
        path.parent.mkdir(parents=True, exist_ok=True)
        queries = measurements.at(level)
        # one integer type per file: each query's answers are stored in the smallest type that
        # holds them (topdown.measurement.measure), which may differ between the level's queries
        dtype = np.result_type(*(m.noisy.dtype for m in queries)) if queries else np.int64
        write_row_groups(path, answer_rows(measurements, tree, level, dtype))


def write_row_groups(path: Path, tables: Iterable[Any]) -> bool:
    """Write the Arrow ``tables`` (one schema) to ``path`` as one Parquet file, zstd, one row
    group each, so that no more than one table is held at a time. Returns whether any was
    written: with none, no file is created. A failure names the file (``naming``)."""
    import pyarrow.parquet as pq

    with naming(path):  # a full disk names the file being written
        writer: pq.ParquetWriter | None = None
        try:
            for table in tables:
                if writer is None:
                    writer = pq.ParquetWriter(path, table.schema, compression="zstd")
                writer.write_table(table, row_group_size=max(table.num_rows, 1))
        finally:
            if writer is not None:
                writer.close()
    return writer is not None


def answer_rows(
    measurements: Measurements, tree: Tree, level: int, dtype: DTypeLike
) -> Iterator[Any]:
    """Level ``level``'s measurements as Arrow tables of at most ``ROW_GROUP`` answers (at
    least one node's), one row per node and query: node and query dictionary-encoded, the
    variance, the noisy answers as a list of ``dtype`` integers in the query's answer order."""
    import pyarrow as pa

    labels = pa.array(tree.levels[level].labels.astype(str).tolist(), type=pa.string())
    queries = measurements.at(level)
    names = pa.array([m.query.name for m in queries], type=pa.string())
    for j, m in enumerate(queries):
        nodes, answers = m.noisy.shape
        step = max(1, ROW_GROUP // max(answers, 1))
        for first in range(0, nodes, step):
            rows = np.ascontiguousarray(m.noisy[first : first + step], dtype=dtype)
            n = rows.shape[0]
            offsets = pa.array(np.arange(n + 1, dtype=np.int32) * answers)
            yield pa.table(
                {
                    "node": pa.DictionaryArray.from_arrays(
                        np.arange(first, first + n, dtype=np.int32), labels
                    ),
                    "query": pa.DictionaryArray.from_arrays(np.full(n, j, dtype=np.int16), names),
                    "variance": np.full(n, m.variance),
                    "noisy": pa.ListArray.from_arrays(offsets, pa.array(rows.ravel())),
                }
            )


def read_measurements(path: Path) -> pd.DataFrame:
    """One part in the long format of ``measurements.csv`` (node, query, answer, noisy,
    variance; one row per answer, labels as text)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    rows = table.drop_columns(["noisy"]).to_pandas().astype({"node": str, "query": str})
    noisy = table["noisy"].combine_chunks()
    lengths = noisy.value_lengths().to_numpy(zero_copy_only=False)
    values = noisy.flatten().to_numpy(zero_copy_only=False)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return pd.DataFrame(
        {
            "node": np.repeat(rows["node"].to_numpy(dtype=object), lengths),
            "query": np.repeat(rows["query"].to_numpy(dtype=object), lengths),
            "answer": np.arange(values.size) - starts,
            "noisy": values,
            "variance": np.repeat(rows["variance"].to_numpy(dtype=float), lengths),
        }
    )


def read_part(
    folder: Path, tree: Tree, levels: Iterable[int], part: str, strategy: Strategy, domain: Domain
) -> Measurements:
    """The measurements of part ``part`` back as ``Measurements`` (the inverse of
    ``write_measurements``): row ``i`` of a level is ``tree``'s node ``i``, every query of the
    strategy in its order, with its mechanism's share, budget and variance. The other levels
    of ``tree`` get none. Reads only the published part (no confidential data).

    Raises:
        ReleaseError: a part missing, or a node or query not answered exactly once.
    """
    import pyarrow.parquet as pq

    wanted = set(levels)
    out: list[tuple[QueryMeasurement, ...]] = []
    for level in range(tree.n_levels):
        if level not in wanted:
            out.append(())
            continue
        path = part_path(folder, "measurements", tree, level, part)
        if not path.is_file():
            raise ReleaseError(f"{path.parent.name}/{path.name}: missing")
        table = pq.read_table(path)
        node = lookup(pd.Index(tree.levels[level].labels.astype(str)), table["node"].to_pandas())
        names = table["query"].to_pandas().astype(str).to_numpy()
        noisy = table["noisy"].combine_chunks()
        values = noisy.flatten().to_numpy(zero_copy_only=False)
        offsets = noisy.offsets.to_numpy()
        row = []
        n_nodes = tree.levels[level].size
        for query, share, mech in make_level_mechanisms(strategy, level):
            answers = query.n_answers(domain)
            mine = np.flatnonzero(names == query.name)
            where = f"{path.parent.name}/{path.name}: query {query.name!r}"
            if len(mine) != n_nodes or (node[mine] < 0).any():
                raise ReleaseError(f"{where}: {len(mine)} row(s) for {n_nodes} node(s)")
            dense = np.zeros((n_nodes, answers), dtype=values.dtype)
            seen = np.zeros(n_nodes, dtype=np.int64)
            np.add.at(seen, node[mine], 1)
            if (seen != 1).any() or (np.diff(offsets)[mine] != answers).any():
                raise ReleaseError(f"{where}: not one row of {answers} answers per node")
            # a row at a time: one index array over the part's answers (nodes x answers of
            # int64) would be as large as ``dense`` (1.1 GB for a DHC tract of 113 blocks)
            for at, start in zip(node[mine].tolist(), offsets[mine].tolist(), strict=True):
                dense[at] = values[start : start + answers]
            row.append(QueryMeasurement.of(level, query, share, mech, dense))
        out.append(tuple(row))
    return Measurements(tuple(out))


def measurement_failures(
    path: Path, level: int, labels: np.ndarray, strategy: Strategy, domain: Domain
) -> list[str]:
    """What is wrong with one part: every query of the level's strategy must give each of
    ``labels`` (the part's nodes on ``level``) one row of its answers, all integers, with the
    variance its mechanism was calibrated to; no other query or node. Read one row group at a
    time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    where = f"{path.parent.name}/{path.name}"
    if not path.is_file():
        return [f"{where}: missing"]
    expected = {
        q.name: (q.n_answers(domain), float(m.variance))
        for q, _, m in make_level_mechanisms(strategy, level)
    }
    index = pd.Index(labels.astype(str))
    seen = {name: np.zeros(len(labels), dtype=np.int64) for name in expected}
    try:
        source = pq.ParquetFile(path)
    except (OSError, ValueError) as err:
        return [f"{where}: not a Parquet file ({err})"]
    missing = sorted({"node", "query", "variance", "noisy"} - set(source.schema_arrow.names))
    if missing:
        return [f"{where}: has no column(s) {missing}"]
    for g in range(source.num_row_groups):
        table = source.read_row_group(g)
        noisy = table["noisy"].combine_chunks()
        kind = noisy.type
        if not (pa.types.is_list(kind) and pa.types.is_integer(kind.value_type)):
            return [f"{where}: noisy answers must be lists of integers (found {kind})"]
        if noisy.null_count or noisy.flatten().null_count:
            return [f"{where}: noisy answers missing (null)"]
        frame = table.drop_columns(["noisy"]).to_pandas()
        frame["answers"] = noisy.value_lengths().to_numpy(zero_copy_only=False)
        for name, rows in frame.groupby(frame["query"].astype(str), sort=False, observed=True):
            if name not in expected:
                return [f"{where}: query {name!r} is not measured on level {level}"]
            answers, variance = expected[name]
            if (rows["variance"].to_numpy(dtype=float) != variance).any():
                return [f"{where}: query {name!r}: variance differs from its mechanism's"]
            if (rows["answers"].to_numpy() != answers).any():
                return [f"{where}: query {name!r}: a node has not {answers} answers"]
            node = lookup(index, rows["node"])
            if (node < 0).any():
                return [f"{where}: query {name!r}: answers of nodes outside the part"]
            np.add.at(seen[name], node, 1)
    out = []
    for name, count in seen.items():
        for bad in np.flatnonzero(count != 1)[:3]:
            out.append(
                f"{where}: query {name!r}: node {str(labels[bad])!r} has "
                f"{int(count[bad])} rows of answers, not one"
            )
    return out
