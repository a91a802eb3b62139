"""Synthetic microdata: the leaf histograms expanded into records.

Each leaf node's cell counts become that many rows carrying the decoded attribute values (bin
labels for binned attributes) and the label of every hierarchy level above it. Files are written
to a temporary name and moved into place only when complete.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from topdown.errors import ReleaseError
from topdown.execution.process_memory import hugepage_advice_off
from topdown.measurement.tree import Tree
from topdown.outputs.csv_writer import write_frame_csv
from topdown.schema import Schema
from topdown.support.optional import require
from topdown.support.writing import naming

__all__ = ["expand_microdata", "write_table", "write_csv_parts"]


@hugepage_advice_off()  # it runs after the release (Release.microdata, a release folder)
def expand_microdata(
    tree: Tree, schema: Schema, leaf_counts: np.ndarray, *, categorical: bool = False
) -> pd.DataFrame:
    """Rows of the leaf level: hierarchy columns first, then the query attributes.

    ``categorical`` keeps the hierarchy columns as categoricals (no string per record: the
    streamed release writes millions of rows per subtree this way).
    """
    leaf = tree.n_levels - 1
    size = schema.domain.size
    flat = np.asarray(leaf_counts).ravel()  # in its own integer type: no int64 copy
    if flat.dtype.kind not in "iu" or (flat.size and flat.min() < 0):
        raise ReleaseError(
            f"leaf counts must be non-negative integers to expand into records; got dtype "
            f"{flat.dtype}" + (f", minimum {flat.min()}" if flat.size else "")
        )
    occupied = np.flatnonzero(flat)  # a few percent of a block level's cells
    positions = np.repeat(occupied, flat[occupied])
    node, cell = np.divmod(positions, size)
    columns: dict[str, object] = {}
    ancestors = tree.ancestors(leaf)
    for lv in range(1, tree.n_levels):
        labels, column = tree.levels[lv].labels, tree.levels[lv].column
        assert column is not None  # only the root (level 0) has no column
        columns[column] = _labels_column(labels, ancestors[lv][node], categorical)
    codes = schema.domain.unravel(cell)
    for attr, code in zip(schema.attributes, codes, strict=True):
        values = attr.domain_values
        if attr.values is not None and all(isinstance(v, (int, np.integer)) for v in attr.values):
            columns[attr.name] = np.asarray(values, dtype=np.int64)[code]
        else:
            columns[attr.name] = np.asarray(values, dtype=object)[code]
    return pd.DataFrame(columns)


def _labels_column(labels: np.ndarray, codes: np.ndarray, categorical: bool) -> object:
    """A hierarchy column: each record's unit label, as a categorical or as strings.

    The strings are taken from the labels in Arrow when pandas stores strings there (one
    ``take`` over the records' codes, several times faster than converting a categorical
    record by record); the column is the same as ``Categorical.astype(str)``'s."""
    names = pd.Index(labels.astype(str))
    units = pd.Categorical.from_codes(codes, categories=names)
    if categorical:
        return units
    dtype = names.dtype
    if isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow":
        import pyarrow as pa

        return pd.array(pa.array(names.to_numpy()).take(pa.array(codes)), dtype=dtype)
    return units.astype(str)


def write_table(
    frame: pd.DataFrame, path: str | Path, *, fmt: str | None = None, index: bool = False
) -> Path:
    """Write CSV or Parquet (by ``fmt`` or the suffix) atomically: temp file, then rename."""
    path = Path(path)
    fmt = (fmt or path.suffix.lstrip(".") or "csv").lower()
    if fmt not in ("csv", "parquet"):
        raise ReleaseError(f"format ({fmt!r}) is unknown; it must be 'csv' or 'parquet'")
    if fmt == "parquet":
        require("parquet", "writing Parquet output")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        with naming(path):  # a full disk names the file, not a bare errno
            if fmt == "csv":
                frame.to_csv(tmp, index=index)
            else:
                frame.to_parquet(tmp, index=index)
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_csv_parts(frames: Iterable[pd.DataFrame], path: str | Path) -> Path:
    """Write frames of the same columns as one CSV file, one after another (the header once),
    atomically as ``write_table``: a file too large to hold as one frame (the noisy
    measurements of a DHC-sized level) is written part by part. The file is the one
    ``write_table`` writes for the frames' concatenation."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        with naming(path), open(tmp, "wb") as out:
            header = True
            for frame in frames:
                write_frame_csv(frame, out, header=header)  # pandas' bytes, by Arrow's writer
                header = False
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
