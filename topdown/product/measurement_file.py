"""``measurements.csv`` read back: every noisy answer of a release folder, per (level, query).

``topdown check`` and ``topdown report --truth`` rebuild the release's measurements from this
file. At the DHC persons preset it holds 1,903,289 rows a node (26.6 million at a
20,000-person state to the tract, 1.8 GB). pandas reads it as strings and converts them with
``to_numeric``: more than 66 CPU s there without finishing (``docs/benchmarks.md``). So the
file goes through Arrow's C++ CSV reader when pyarrow (the ``parquet`` extra) is installed,
typed as it reads (``noisy`` int64, ``variance`` float64, ``level`` and ``query`` as
dictionaries), a block of rows at a time; only the columns the check reads are converted.

One rule decides what the file holds, pandas': a file that Arrow cannot read as it expects
(a value that is not an int64 or a finite float, a missing column, an empty field) is read
again by the pandas path, which either accepts it (``3.0`` is an integer there) or raises its
error naming the line and the value. So the verdict and the messages never depend on which
reader ran; only the time does.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from topdown.errors import ReleaseError
from topdown.support.int_types import narrowed
from topdown.support.optional import is_installed

__all__ = ["MEASUREMENT_ROWS", "MEASUREMENT_BYTES", "measurement_answers", "numbers", "integers"]

log = logging.getLogger(__name__)

#: Rows of measurements.csv the pandas path reads at once: a DHC tract level's detailed
#: answers are 491 million rows, far too many to hold as one frame of strings
MEASUREMENT_ROWS = 1 << 22

#: Bytes of measurements.csv Arrow's reader converts at once (about a million rows)
MEASUREMENT_BYTES = 1 << 26

#: The columns the check reads (``node`` and ``answer`` are for readers of the file: a
#: node's answers are in the query's answer order, as written)
_COLUMNS = ("level", "query", "noisy", "variance")

#: Per (level, query) as written: the noisy answers in file order, and the first variance.
Answers = tuple[dict[tuple[str, str], np.ndarray], dict[tuple[str, str], float]]


class _NotArrowReadable(Exception):
    """The file is not what Arrow's typed read expects: the pandas path reads it again."""


def measurement_answers(folder: Path) -> Answers:
    """measurements.csv per (level, query) as written: the noisy answers in file order (each
    part in the narrowest integer type) and the first row's variance. Arrow's reader when
    pyarrow is installed, else (and for a file it cannot read as expected) pandas'.

    Raises:
        ReleaseError: the file is missing, lacks a column, or holds a value that is not a
            number (naming the line and the value).
    """
    path = Path(folder) / "measurements.csv"
    if not path.is_file():
        raise ReleaseError(f"release folder {str(folder)!r} lacks measurements.csv")
    if is_installed("pyarrow"):
        try:
            return _arrow_answers(path)
        except _NotArrowReadable as why:
            log.info("measurements.csv read again by pandas (%s)", why)
    return _pandas_answers(path)


def _arrow_answers(path: Path) -> Answers:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    words = pa.dictionary(pa.int32(), pa.string())
    convert = pcsv.ConvertOptions(
        include_columns=list(_COLUMNS),
        column_types={
            "level": words,
            "query": words,
            "noisy": pa.int64(),
            "variance": pa.float64(),
        },
        # pandas' path (keep_default_na=False) reads every field as written: no null markers
        null_values=[],
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    read = pcsv.ReadOptions(block_size=MEASUREMENT_BYTES)
    parts: dict[tuple[str, str], list[np.ndarray]] = {}
    variances: dict[tuple[str, str], float] = {}
    try:
        with pcsv.open_csv(path, read_options=read, convert_options=convert) as reader:
            for batch in reader:
                _add_batch(batch, parts, variances)
    except (pa.ArrowInvalid, pa.ArrowKeyError, pa.ArrowTypeError) as err:
        raise _NotArrowReadable(str(err).splitlines()[0]) from None
    return {key: np.concatenate(values) for key, values in parts.items()}, variances


def _add_batch(
    batch: Any,
    parts: dict[tuple[str, str], list[np.ndarray]],
    variances: dict[tuple[str, str], float],
) -> None:
    """One record batch's rows added to their (level, query)'s parts, in file order."""
    if batch.num_rows == 0:
        return
    level, query = batch.column("level"), batch.column("query")
    noisy = batch.column("noisy").to_numpy()
    variance = batch.column("variance").to_numpy()
    if not np.isfinite(variance).all():
        raise _NotArrowReadable("a variance that is not a finite number")
    names = [
        (str(a), str(b)) for a in level.dictionary.to_pylist() for b in query.dictionary.to_pylist()
    ]
    code = level.indices.to_numpy().astype(np.int64) * len(query.dictionary) + (
        query.indices.to_numpy()
    )
    # a stable sort keeps file order within each (level, query); a file written by the
    # release is in runs of one key, which the sort takes in linear time
    order = np.argsort(code, kind="stable")
    ordered = code[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], ordered.size]
    # keys in the order the batch first names them (pandas' groupby(sort=False) order)
    for start, end in sorted(zip(starts, ends, strict=True), key=lambda se: order[se[0]]):
        key = names[int(ordered[start])]
        rows = order[start:end]
        parts.setdefault(key, []).append(narrowed(noisy[rows]))
        variances.setdefault(key, float(variance[rows[0]]))


def _pandas_answers(path: Path) -> Answers:
    parts: dict[tuple[str, str], list[np.ndarray]] = {}
    variances: dict[tuple[str, str], float] = {}
    with pd.read_csv(path, dtype=str, keep_default_na=False, chunksize=MEASUREMENT_ROWS) as chunks:
        for chunk in chunks:
            missing = sorted({"level", "query"} - set(chunk.columns))
            if missing:
                raise ReleaseError(f"measurements.csv: has no column {missing[0]!r}")
            for key, rows in chunk.groupby(["level", "query"], sort=False):
                where = "measurements.csv"
                parts.setdefault(key, []).append(narrowed(integers(rows, "noisy", where)))
                variances.setdefault(key, float(numbers(rows, "variance", where)[0]))
    return {key: np.concatenate(values) for key, values in parts.items()}, variances


def numbers(frame: pd.DataFrame, column: str, where: str) -> np.ndarray:
    """A column of a release file as finite floats; a cell that is not one is an error naming
    the file, the line and the value (never a NaN that turns into 9.2e18 later)."""
    if column not in frame.columns:
        raise ReleaseError(f"{where}: has no column {column!r}")
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        i = int(bad[0])
        raise ReleaseError(
            f"{where}: column {column!r} at line {int(frame.index[i]) + 2} holds "
            f"{frame[column].iloc[i]!r}, not a number ({bad.size} such value(s))"
        )
    return values


def integers(frame: pd.DataFrame, column: str, where: str) -> np.ndarray:
    """A column of a release file as int64 (``numbers``, and each a 64-bit integer)."""
    values = numbers(frame, column, where)
    bad = np.flatnonzero((values != np.round(values)) | (np.abs(values) >= 2.0**63))
    if bad.size:
        i = int(bad[0])
        raise ReleaseError(
            f"{where}: column {column!r} at line {int(frame.index[i]) + 2} holds "
            f"{frame[column].iloc[i]!r}, not a 64-bit integer"
        )
    return pd.to_numeric(frame[column]).astype(np.int64).to_numpy()
