"""The parts of a partitioned Parquet dataset, checked whole before any record is read.

A dataset folder is released whole or not at all. Readers differ on an incomplete one: pandas
(pyarrow's dataset discovery) reads the files it finds, so a part listed in ``_metadata`` but
deleted was silently left out of the release, while Dask trusts ``_metadata`` and fails. So
every reader (``topdown.measurement.read`` for the serial and processes executors and the API,
``topdown.measurement.dask_input`` on a cluster, the streamed release's partitions) calls
:func:`check_dataset` first, which refuses, naming the part:

* a folder with no Parquet part (an empty dataset folder);
* a part listed in ``_metadata`` that does not exist;
* a part that is empty (0 bytes), truncated or corrupt (its footer cannot be read);
* a part whose columns or column types differ from the first part's (a column of nulls only,
  which pyarrow casts, matches any type).

Only footers are read (the schema and row counts: public metadata of the files, not records).
"""

from __future__ import annotations

from pathlib import Path

from topdown.errors import DataError
from topdown.support.optional import require

__all__ = ["check_dataset", "dataset_parts"]

_IGNORED = (".", "_")  # pyarrow's dataset discovery skips files and folders named so


def dataset_parts(folder: Path) -> list[Path]:
    """The data files of a dataset folder (recursively, hive sub-folders included), as pyarrow
    discovers them: every file whose path below ``folder`` has no part starting with ``.``
    or ``_``."""
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and not any(s.startswith(_IGNORED) for s in p.relative_to(folder).parts)
    )


def check_dataset(folder: Path) -> list[Path]:
    """The parts of a dataset folder, every one present and readable, with one schema.

    Raises:
        DataError: naming the folder and the part: no part at all, a part listed in
            ``_metadata`` missing, an empty, truncated or corrupt part, a part whose schema
            differs from the first part's.
    """
    require("parquet", "reading a Parquet dataset")
    import pyarrow.parquet as pq

    where = f"data folder {str(folder)!r}"
    parts = dataset_parts(folder)
    if not parts:
        raise DataError(
            f"{where} holds no Parquet file (an empty dataset folder); a dataset folder must "
            "hold the Parquet parts of the data"
        )
    listed = folder / "_metadata"
    if listed.is_file():
        try:
            meta = pq.read_metadata(listed)
        except Exception as err:  # pyarrow raises OSError / ArrowInvalid for a bad footer
            raise DataError(f"{where}: its _metadata cannot be read: {err}") from None
        names = {meta.row_group(i).column(0).file_path for i in range(meta.num_row_groups)}
        present = {p.relative_to(folder).as_posix() for p in parts}
        missing = sorted(n for n in names if n and n not in present)
        if missing:
            raise DataError(
                f"{where} is incomplete: part(s) {missing[:10]} listed in its _metadata do not "
                f"exist ({len(missing)} missing of {len(names)}); a dataset is released whole or "
                "not at all: restore the part(s) or rewrite the dataset"
            )
    first = None
    for part in parts:
        name = part.relative_to(folder).as_posix()
        if part.stat().st_size == 0:
            raise DataError(f"{where}: part {name!r} is empty (0 bytes), not a Parquet file")
        try:
            schema = pq.read_schema(part)
        except Exception as err:  # a truncated or corrupt footer
            raise DataError(
                f"{where}: part {name!r} cannot be read as Parquet (truncated or corrupt?): {err}"
            ) from None
        fields = {  # large_string and string (etc.) hold the same values: pyarrow casts them
            f.name: str(f.type).replace("large_", "")
            for f in schema
            if not f.name.startswith("__index_level_")
        }
        if first is None:
            first = (name, fields)
            continue
        differ = sorted(
            c
            for c in set(fields) | set(first[1])
            if fields.get(c) != first[1].get(c) and "null" not in (fields.get(c), first[1].get(c))
        )
        if differ:
            detail = ", ".join(
                f"{c}: {first[1].get(c, 'absent')} vs {fields.get(c, 'absent')}" for c in differ[:5]
            )
            raise DataError(
                f"{where}: part {name!r} has another schema than part {first[0]!r} ({detail}); "
                "every part of a dataset must have the same columns and types"
            )
    return parts
