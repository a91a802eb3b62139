"""The noisy measurement file of a release folder: written, and read back per (level, query).

Two layouts. ``measurements.csv`` (the default, ``[output] format = "csv"``): one row per
answer, ``level, node, query, answer, noisy, variance``, readable by anything. At the DHC
persons preset that is 1,903,289 rows a node, about 69 bytes each (the query's name and the
variance's 17 digits repeated on every row): 1.8 GB at a 20,000-person state to the tract.
``measurements.parquet`` (``[output] format = "parquet"``): one row per node and query, the
layout of a streamed release's parts (``topdown.streaming.measurements``) with a ``level``
column: ``level``, ``node`` and ``query`` (dictionary-encoded), ``variance``, and ``noisy``, the
answers as a list of integers in the query's answer order (zstd): the answers are the only
per-answer data. Either file holds the same numbers; a folder has one of them (an older
folder written as Parquet holds ``measurements.csv``, read as before).

``topdown check`` and ``topdown report --truth`` rebuild the release's measurements from it.
pandas reads the CSV as strings and converts them with ``to_numeric``: about half of the 189
CPU s ``topdown check`` took at the 20,000-person DHC state, where Arrow's reader takes 6-10
(``docs/benchmarks.md``). So the CSV goes
through Arrow's C++ CSV reader when pyarrow (the ``parquet`` extra) is installed, typed as it
reads (``noisy`` int64, ``variance`` float64, ``level`` and ``query`` as dictionaries), a
block of rows at a time; only the columns the check reads are converted.

One rule decides what the CSV holds, pandas': a file that Arrow cannot read as it expects
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
from topdown.measurement.measure import Measurements
from topdown.measurement.tree import Tree
from topdown.outputs.microdata import write_csv_parts
from topdown.streaming.measurements import answer_rows, write_row_groups
from topdown.support.int_types import narrowed
from topdown.support.optional import is_installed, require

__all__ = [
    "MEASUREMENT_ROWS",
    "MEASUREMENT_BYTES",
    "measurement_answers",
    "numbers",
    "integers",
    "write_measurement_file",
    "measurement_file_name",
    "measurement_file_in",
]

log = logging.getLogger(__name__)

#: Rows of measurements.csv the pandas path reads at once: a DHC tract level's detailed
#: answers are 491 million rows, far too many to hold as one frame of strings
MEASUREMENT_ROWS = 1 << 22

#: Bytes of measurements.csv Arrow's reader converts at once (about 60,000 rows). The
#: reader's peak memory grows with it: on the 20,000-person DHC file (1.8 GB) a process peaked
#: at 1,982 MiB with 64 MB blocks, 845 with 16, 385 with 4 and 270 with 1, for about the same
#: CPU (6-9 s; ``docs/benchmarks.md``)
MEASUREMENT_BYTES = 1 << 22

#: The columns the check reads (``node`` and ``answer`` are for readers of the file: a
#: node's answers are in the query's answer order, as written)
_COLUMNS = ("level", "query", "noisy", "variance")

#: Per (level, query) as written: the noisy answers in file order, and the first variance.
Answers = tuple[dict[tuple[str, str], np.ndarray], dict[tuple[str, str], float]]


class _NotArrowReadable(Exception):
    """The file is not what Arrow's typed read expects: the pandas path reads it again."""


def measurement_file_name(fmt: str) -> str:
    """The measurement file of a folder written in output format ``fmt``."""
    return "measurements.parquet" if fmt == "parquet" else "measurements.csv"


def write_measurement_file(measurements: Measurements, tree: Tree, folder: Path, fmt: str) -> Path:
    """Write ``measurement_file_name(fmt)`` into ``folder`` and return its path: the CSV part
    by part (``write_csv_parts``), the Parquet file one row group of at most ``ROW_GROUP``
    answers at a time (one integer type for the whole file)."""
    path = Path(folder) / measurement_file_name(fmt)
    if fmt != "parquet":
        return write_csv_parts(measurements.frames(tree), path)
    import pyarrow as pa
    import pyarrow.parquet as pq

    every = [m.noisy.dtype for lv in measurements.levels for m in lv]
    dtype = np.result_type(*every) if every else np.dtype(np.int64)
    groups = (
        rows.add_column(0, "level", pa.array(np.full(rows.num_rows, level, dtype=np.int16)))
        for level in range(len(measurements.levels))
        for rows in answer_rows(measurements, tree, level, dtype)
    )
    if not write_row_groups(path, groups):  # no measurement: an empty file of the same columns
        words = pa.dictionary(pa.int32(), pa.string())
        pq.write_table(
            pa.table(
                {
                    "level": pa.array([], pa.int16()),
                    "node": pa.array([], words),
                    "query": pa.array([], words),
                    "variance": pa.array([], pa.float64()),
                    "noisy": pa.array([], pa.list_(pa.from_numpy_dtype(dtype))),
                }
            ),
            path,
        )
    return path


def measurement_file_in(folder: Path) -> str:
    """The name of a folder's measurement file: ``measurements.parquet`` when it has one,
    else ``measurements.csv`` (whether or not it exists)."""
    parquet = measurement_file_name("parquet")
    return parquet if (Path(folder) / parquet).is_file() else measurement_file_name("csv")


def measurement_answers(folder: Path) -> Answers:
    """The measurement file per (level, query) as written: the noisy answers in file order
    (each part in the narrowest integer type) and the first row's variance.
    ``measurements.parquet`` if the folder has it, else ``measurements.csv``: Arrow's reader
    when pyarrow is installed, else (and for a file it cannot read as expected) pandas'.

    Raises:
        ReleaseError: the file is missing, lacks a column, or holds a value that is not a
            number (naming the line and the value), or a Parquet column of the wrong type.
    """
    name = measurement_file_in(folder)
    path = Path(folder) / name
    if name == measurement_file_name("parquet"):
        return _parquet_answers(path)
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


def _parquet_answers(path: Path) -> Answers:
    """measurements.parquet, a row group at a time: each row's answers go to its (level,
    query), in file order (a node's rows in the order written)."""
    require("parquet", "reading measurements.parquet")
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        source = pq.ParquetFile(path)
    except (OSError, ValueError) as err:
        raise ReleaseError(f"measurements.parquet: not a Parquet file ({err})") from None
    schema = source.schema_arrow
    for name, ok, rule in (
        ("level", pa.types.is_integer, "integers"),
        ("query", _is_text, "text"),
        ("variance", pa.types.is_floating, "floats"),
        ("noisy", _is_integer_list, "lists of integers"),
    ):
        if name not in schema.names:
            raise ReleaseError(f"measurements.parquet: has no column {name!r}")
        if not ok(schema.field(name).type):
            raise ReleaseError(
                f"measurements.parquet: column {name!r} holds {schema.field(name).type}, not {rule}"
            )
    parts: dict[tuple[str, str], list[np.ndarray]] = {}
    variances: dict[tuple[str, str], float] = {}
    for batch in source.iter_batches(columns=list(_COLUMNS)):
        if batch.num_rows == 0:
            continue
        if (
            any(batch.column(c).null_count for c in _COLUMNS)
            or batch.column("noisy").flatten().null_count
        ):
            raise ReleaseError("measurements.parquet: a value is missing (null)")
        variance = batch.column("variance").to_numpy(zero_copy_only=False).astype(float)
        if not np.isfinite(variance).all():
            raise ReleaseError("measurements.parquet: a variance is not a finite number")
        level = batch.column("level").to_numpy(zero_copy_only=False)
        query = batch.column("query")
        if pa.types.is_dictionary(query.type):
            query = query.cast(pa.string())
        names = np.asarray(query.to_pylist(), dtype=object)
        noisy = batch.column("noisy")
        values = noisy.flatten().to_numpy(zero_copy_only=False)
        offsets = noisy.offsets.to_numpy()
        offsets = offsets - offsets[0]  # a slice's offsets start where it does in the values
        # runs of one (level, query): a written file has a few per row group
        change = np.flatnonzero((level[1:] != level[:-1]) | (names[1:] != names[:-1])) + 1
        starts = np.r_[0, change]
        ends = np.r_[change, level.size]
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            key = (str(int(level[start])), str(names[start]))
            parts.setdefault(key, []).append(narrowed(values[offsets[start] : offsets[end]]))
            variances.setdefault(key, float(variance[start]))
    return {key: np.concatenate(values) for key, values in parts.items()}, variances


def _is_text(kind: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _is_integer_list(kind: Any) -> bool:
    import pyarrow as pa

    return bool(
        (pa.types.is_list(kind) or pa.types.is_large_list(kind))
        and pa.types.is_integer(kind.value_type)
    )


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
