"""The records of a streamed release, one source per subtree (CONFIDENTIAL).

A streamed release (``topdown.streaming.run``) reads the records of one unit of the stream level at
a time: one Parquet file or folder per unit, or one group of a DataFrame. ``partitions`` lists them
from public information only (file names, the stream column's values per partition) and checks that
each holds exactly one unit and no unit is held twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from topdown.errors import DataError
from topdown.measurement.parquet_parts import check_dataset

__all__ = ["Partition", "partitions"]


@dataclass(frozen=True)
class Partition:
    """The records of one subtree: a Parquet file or folder, or a DataFrame (CONFIDENTIAL).

    Attributes:
        label: the subtree's unit at the stream level.
        path: a Parquet file (or folder of files) holding this unit's records only.
        frame: the records themselves (for DataFrame inputs).
    """

    label: str
    path: Path | None = None
    frame: pd.DataFrame | None = None

    def read(self) -> pd.DataFrame:
        if self.frame is not None:
            return self.frame
        assert self.path is not None
        return pd.read_parquet(self.path)


def partitions(data: pd.DataFrame | str | Path, column: str) -> list[Partition]:
    """The subtrees' record sources, sorted by label.

    Args:
        data: a DataFrame (grouped by ``column`` here), or a folder whose ``*.parquet`` files
            (or sub-folders of Parquet files) each hold the records of one unit of ``column``
            (``benchmarks/pl94.py --write`` makes one).
        column: the stream level's hierarchy column.

    Raises:
        DataError: ``column`` missing, a partition with no or several units of ``column``, two
            partitions of one unit, or a folder without Parquet partitions.
    """
    if isinstance(data, pd.DataFrame):
        if column not in data.columns:
            raise DataError(
                f"data has no column {column!r} (stream_by); its columns are {list(data.columns)}"
            )
        groups = data.groupby(data[column].astype(str), sort=True, observed=True).indices
        return [Partition(str(label), frame=data.iloc[rows]) for label, rows in groups.items()]
    folder = Path(data)
    if not folder.is_dir():
        raise DataError(
            f"data ({str(folder)!r}) must be a DataFrame or a folder of Parquet "
            "partitions (one file or sub-folder per unit of the stream level)"
        )
    import pyarrow.parquet as pq

    paths = sorted(p for p in folder.iterdir() if p.suffix == ".parquet" or p.is_dir())
    if not paths:
        raise DataError(f"data folder {str(folder)!r} has no Parquet partitions")
    out: dict[str, Partition] = {}
    for path in paths:
        if path.is_dir():
            check_dataset(path)  # a unit's folder of parts: every part present and readable
        names = pq.read_schema(next(iter(sorted(path.glob("*.parquet"))), path)).names
        if column not in names:
            raise DataError(
                f"partition {str(path)!r} has no column {column!r} (stream_by); its "
                f"columns are {names}"
            )
        values = pq.read_table(path, columns=[column]).column(0).unique().to_pylist()
        units = sorted({str(v) for v in values})
        if len(units) != 1:
            raise DataError(
                f"partition {str(path)!r} holds {len(units)} units of {column!r} "
                f"({units[:5]}); each partition must hold the records of one unit"
            )
        if units[0] in out:
            raise DataError(
                f"partitions {str(out[units[0]].path)!r} and {str(path)!r} both hold "
                f"unit {units[0]!r} of {column!r}; give each unit one partition"
            )
        out[units[0]] = Partition(units[0], path=path)
    return [out[k] for k in sorted(out)]
