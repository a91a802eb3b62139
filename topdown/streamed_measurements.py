"""The noisy measurements of a streamed release, on disk: one Parquet part per level and subtree.

The unstreamed release folder writes them as one ``measurements.csv``; a streamed release of a
large state would make that billions of rows. Here each subtree task writes its own levels'
measurements before the next subtree starts (``topdown.stream``), and the levels down to the
stream level go into one part (``top``)::

    measurements/level_<k>_<column>/<part>.parquet
        node     the node's label (dictionary-encoded)
        query    the query's name (dictionary-encoded)
        answer   the answer's index within the query (0 .. answers - 1)
        noisy    the noisy answer (the smallest integer type that holds it)
        variance the variance of its noise (one value per level and query)

the columns of ``measurements.csv`` but ``level`` (in the folder's name). Compact because every
column but ``noisy`` repeats (dictionary and run-length encoded) and ``noisy`` is small integers
(zstd): about one byte per answer for the noise of census-sized budgets. Written and checked in
row groups of at most ``ROW_GROUP`` answers, so neither holds more than one row group beside the
subtree's own arrays.

These are public (the output of the only step that read the confidential data, and what every
estimate was computed from): an analyst can re-estimate from them, or compare the release with
them, without any confidential data.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from constraints.domain import Domain
from topdown.measure import Measurements, make_level_mechanisms
from topdown.strategy import Strategy
from topdown.tree import ROOT_LABEL, Tree, lookup

__all__ = [
    "ROW_GROUP",
    "safe_name",
    "measurements_dir",
    "write_measurements",
    "read_measurements",
    "measurement_failures",
]

#: answers per Parquet row group (about 4 x 2^20: 16-48 MB of arrays while one is written)
ROW_GROUP = 1 << 22


def measurements_dir(folder: Path, tree: Tree, level: int) -> Path:
    column = tree.levels[level].column or ROOT_LABEL
    return Path(folder) / "measurements" / f"level_{level}_{column}"


def safe_name(label: str) -> str:
    """A file name for a label (labels are public; path separators are not allowed in one)."""
    return label.replace(os.sep, "_").replace("/", "_") or "_"


def _part_path(folder: Path, tree: Tree, level: int, part: str) -> Path:
    return measurements_dir(folder, tree, level) / f"{safe_name(part)}.parquet"


def write_measurements(
    measurements: Measurements, tree: Tree, levels: Iterable[int], folder: Path, part: str
) -> None:
    """Write ``levels``' measurements (of all of ``tree``'s nodes on each) as the part ``part``.

    ``tree`` is the tree the measurements were taken on (a subtree's, or the levels down to the
    stream level): node ``i`` of its level is the measurements' row ``i``.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    for level in levels:
        labels = pa.array(tree.levels[level].labels.astype(str).tolist(), type=pa.string())
        path = _part_path(folder, tree, level, part)
        path.parent.mkdir(parents=True, exist_ok=True)
        queries = measurements.at(level)
        names = pa.array([m.query.name for m in queries], type=pa.string())
        writer: pq.ParquetWriter | None = None
        try:
            for j, m in enumerate(queries):
                nodes, answers = m.noisy.shape
                step = max(1, ROW_GROUP // max(answers, 1))
                for first in range(0, nodes, step):
                    rows = m.noisy[first : first + step]
                    n = rows.shape[0]
                    node = np.repeat(np.arange(first, first + n, dtype=np.int32), answers)
                    batch = pa.table(
                        {
                            "node": pa.DictionaryArray.from_arrays(node, labels),
                            "query": pa.DictionaryArray.from_arrays(
                                np.zeros(node.size, dtype=np.int32) + j, names
                            ),
                            "answer": np.tile(np.arange(answers, dtype=np.int32), n),
                            "noisy": rows.ravel(),
                            "variance": np.full(node.size, m.variance),
                        }
                    )
                    if writer is None:
                        writer = pq.ParquetWriter(path, batch.schema, compression="zstd")
                    writer.write_table(batch, row_group_size=max(node.size, 1))
        finally:
            if writer is not None:
                writer.close()


def read_measurements(path: Path) -> pd.DataFrame:
    """One part as a long frame (node, query, answer, noisy, variance; labels as text)."""
    frame = pd.read_parquet(path)
    return frame.astype({"node": str, "query": str})


def measurement_failures(
    path: Path, level: int, labels: np.ndarray, strategy: Strategy, domain: Domain
) -> list[str]:
    """What is wrong with one part: every query of the level's strategy must give each of
    ``labels`` (the part's nodes on ``level``) its answers once, as integers, with the variance
    its mechanism was calibrated to; no other query or node. Read one row group at a time."""
    import pyarrow.parquet as pq

    where = f"{path.parent.name}/{path.name}"
    if not path.is_file():
        return [f"{where}: missing"]
    expected = {
        q.name: (q.n_answers(domain), float(m.variance))
        for q, _, m in make_level_mechanisms(strategy, level)
    }
    index = pd.Index(labels.astype(str))
    seen = {name: np.zeros(len(labels) * n, dtype=np.uint8) for name, (n, _) in expected.items()}
    out: list[str] = []
    source = pq.ParquetFile(path)
    for g in range(source.num_row_groups):
        frame = source.read_row_group(g).to_pandas()
        if not np.issubdtype(frame["noisy"].dtype, np.integer):
            return [f"{where}: noisy answers must be integers (found {frame['noisy'].dtype})"]
        for name, rows in frame.groupby(frame["query"].astype(str), sort=False, observed=True):
            if name not in expected:
                return [f"{where}: query {name!r} is not measured on level {level}"]
            answers, variance = expected[name]
            if (rows["variance"].to_numpy() != variance).any():
                return [f"{where}: query {name!r}: variance differs from its mechanism's"]
            node = lookup(index, rows["node"])
            answer = rows["answer"].to_numpy()
            if (node < 0).any() or (answer < 0).any() or (answer >= answers).any():
                return [f"{where}: query {name!r}: answers of nodes or indices outside the part"]
            _count(seen[name], node * answers + answer)
    for name, count in seen.items():
        if count.size and (count != 1).any():
            bad = int(np.flatnonzero(count != 1)[0]) // expected[name][0]
            out.append(
                f"{where}: query {name!r}: node {str(labels[bad])!r} has its answers missing or "
                "repeated"
            )
    return out


def _count(seen: np.ndarray, flat: np.ndarray) -> None:
    """``seen[flat] += 1`` (repeats counted), over the span of ``flat`` only: a row group's
    answers are one run of a node range, so this stays the size of the row group."""
    if not flat.size:
        return
    low, high = int(flat.min()), int(flat.max())
    counts = np.bincount(flat - low, minlength=high - low + 1)
    seen[low : high + 1] = np.minimum(seen[low : high + 1] + counts, 2)
