"""Reading confidential input: CSV (any separator) or Parquet, with clear errors.

Columns are read as they are; the schema decides what they mean. A missing file, an empty or
unreadable one gets a message with the path and the reason, never a pandas traceback.
"""

from __future__ import annotations

import csv
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from topdown.errors import DataError
from topdown.measurement.parquet_parts import check_dataset
from topdown.support.optional import require

__all__ = ["read_data"]


def read_data(
    source: str | Path | pd.DataFrame,
    *,
    sep: str | None = None,
    fmt: str | None = None,
    dtype: Mapping[str, Any] | None = None,
    what: str = "data",
) -> pd.DataFrame:
    """A DataFrame from a DataFrame, a CSV file (separator given or sniffed), a Parquet file or
    a partitioned Parquet dataset (a folder; ``topdown.measurement.dask_input`` reads one on a
    cluster).

    ``dtype`` is passed to the CSV reader (e.g. ``{"STATE": str}`` keeps leading zeros).
    ``what`` names the input in the messages (``"data"``, ``"geography"``).

    Raises:
        DataError: the file is missing, empty, unreadable, or has no rows.
    """
    if isinstance(source, pd.DataFrame):
        if source.empty:
            raise DataError(f"{what} (a DataFrame) has no rows")
        _check_unique_columns(list(source.columns), f"{what} (a DataFrame)")
        return source
    if not isinstance(source, str | os.PathLike):
        raise DataError(
            f"{what} ({_short(source)}, a {type(source).__name__}) must be a path to a CSV or "
            "Parquet file, or a pandas DataFrame"
        )
    path = Path(source)
    if not path.exists():
        raise DataError(f"{what} file {str(path)!r} does not exist")
    if path.is_dir():  # a partitioned Parquet dataset, read whole
        if (fmt or "parquet").lower() != "parquet":
            raise DataError(
                f"{what} path {str(path)!r} is a folder, read as a Parquet dataset, but format "
                f"{fmt!r} was asked; a folder must hold Parquet files"
            )
        fmt = "parquet"
        check_dataset(path)  # every part present, readable, one schema: whole or not at all
    elif not path.is_file():
        raise DataError(f"{what} path {str(path)!r} is not a file")
    fmt = (fmt or ("parquet" if path.suffix.lower() in (".parquet", ".pq") else "csv")).lower()
    if fmt == "parquet":
        require("parquet", "reading Parquet data")
    try:
        if fmt == "parquet":
            frame = pd.read_parquet(path)
        elif fmt == "csv":
            frame = pd.read_csv(
                path, sep=sep or _sniff(path), keep_default_na=False, na_values=[""], dtype=dtype
            )
        else:
            raise DataError(
                f"format ({fmt!r}) of {str(path)!r} is unknown; it must be 'csv' or 'parquet'"
            )
    except DataError:
        raise
    except pd.errors.EmptyDataError:
        raise DataError(f"{what} file {str(path)!r} is empty") from None
    except Exception as err:  # pandas/pyarrow raise many types for a corrupt file
        raise DataError(f"{what} file {str(path)!r} cannot be read as {fmt}: {err}") from None
    if frame.empty:
        raise DataError(f"{what} file {str(path)!r} has a header but no rows")
    if fmt == "csv":
        _check_unique_columns(_header(path, sep or _sniff(path)), f"{what} file {str(path)!r}")
    else:
        _check_unique_columns(list(frame.columns), f"{what} file {str(path)!r}")
    return frame


def _check_unique_columns(columns: list, where: str) -> None:
    """A repeated column name is refused (pandas would rename the second ``SEX.1`` and the
    schema would silently read the first)."""
    repeated = sorted(str(c) for c, n in Counter(columns).items() if n > 1)
    if repeated:
        raise DataError(
            f"{where} has the column name(s) {repeated} more than once; every column needs its "
            "own name"
        )


def _header(path: Path, sep: str) -> list[str]:
    """The column names of a CSV file as written (before pandas renames duplicates)."""
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        return next(csv.reader(fh, delimiter=sep), [])


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _sniff(path: Path) -> str:
    """The separator of a CSV file, from its first lines (comma if unsure)."""
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        sample = fh.read(64 * 1024)
    if not sample.strip():
        raise DataError(f"data file {str(path)!r} is empty")
    try:
        return csv.Sniffer().sniff(sample.splitlines()[0], delimiters=",;\t|").delimiter
    except csv.Error:
        return ","
