"""Reading confidential input: CSV (any separator) or Parquet, with clear errors.

Columns are read as they are; the schema decides what they mean. A missing file, an empty or
unreadable one gets a message with the path and the reason, never a pandas traceback.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from topdown._optional import require
from topdown.errors import DataError

__all__ = ["read_data"]


def read_data(
    source: str | Path | pd.DataFrame,
    *,
    sep: str | None = None,
    fmt: str | None = None,
    dtype: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """A DataFrame from a DataFrame, a CSV file (separator given or sniffed) or a Parquet file.

    ``dtype`` is passed to the CSV reader (e.g. ``{"STATE": str}`` keeps leading zeros).

    Raises:
        DataError: the file is missing, empty, unreadable, or has no rows.
    """
    if isinstance(source, pd.DataFrame):
        if source.empty:
            raise DataError("data (a DataFrame) has no rows")
        return source
    path = Path(source)
    if not path.exists():
        raise DataError(f"data file {str(path)!r} does not exist")
    if not path.is_file():
        raise DataError(f"data path {str(path)!r} is not a file")
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
        raise DataError(f"data file {str(path)!r} is empty") from None
    except Exception as err:  # pandas/pyarrow raise many types for a corrupt file
        raise DataError(f"data file {str(path)!r} cannot be read as {fmt}: {err}") from None
    if frame.empty:
        raise DataError(f"data file {str(path)!r} has a header but no rows")
    return frame


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
