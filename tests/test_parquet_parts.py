"""A Parquet dataset is released whole or not at all (issue 30 B3).

Before: with a part listed in ``_metadata`` deleted, the serial executor and ``release()`` read
the parts they found and released part of the records silently (Dask refused); a corrupt,
truncated, empty or schema-mismatched part gave a bare pyarrow message; an empty folder was
"a header but no rows".
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from topdown import Attribute, Schema, Strategy
from topdown.engine import release
from topdown.errors import DataError
from topdown.measurement.read import read_data
from topdown.product.cli import main
from topdown.strategy import LevelStrategy, Query
from topdown.support.progress import Progress

pytestmark = pytest.mark.extra("parquet")

SCHEMA = Schema((Attribute("A", values=(0, 1, 2)),), ("UNIT",))


def _records(n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {"UNIT": [f"U{u}" for u in rng.integers(0, 5, n)], "A": rng.integers(0, 3, n)}
    )


def _dataset(folder: Path, parts: int = 4, metadata: bool = True) -> Path:
    """``parts`` Parquet parts and, as Dask writes it, a ``_metadata`` listing them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir()
    collector: list = []
    frame = _records()
    for i, rows in enumerate(np.array_split(np.arange(len(frame)), parts)):
        table = pa.Table.from_pandas(frame.iloc[rows], preserve_index=False)
        pq.write_table(table, folder / f"part.{i}.parquet", metadata_collector=collector)
        collector[-1].set_file_path(f"part.{i}.parquet")
    if metadata:
        pq.write_metadata(table.schema, folder / "_metadata", metadata_collector=collector)
    return folder


def _strategy() -> Strategy:
    level = LevelStrategy(Fraction(1), ((Query(None), Fraction(1)),))
    return Strategy((level, level))


def _release(folder: Path, executor: str = "serial") -> object:
    return release(
        folder,
        SCHEMA,
        _strategy(),
        seed=1,
        executor=executor,
        workers=1 if executor != "serial" else None,
        progress=Progress(enabled=False),
    )


MISSING = r"data folder '.*ds' is incomplete: part\(s\) \['part\.2\.parquet'\] listed in its "
MISSING += r"_metadata do not exist \(1 missing of 4\)"


def test_a_part_listed_in_metadata_but_deleted_is_refused_by_every_reader(tmp_path: Path) -> None:
    folder = _dataset(tmp_path / "ds")
    assert len(read_data(folder)) == 400
    (folder / "part.2.parquet").unlink()
    with pytest.raises(DataError, match=MISSING):
        read_data(folder)  # was: 300 of the 400 records
    with pytest.raises(DataError, match=MISSING):
        _release(folder)
    with pytest.raises(DataError, match=MISSING):
        _release(folder, "processes")


@pytest.mark.extra("dask")
def test_a_missing_part_is_named_on_dask_too(tmp_path: Path) -> None:
    folder = _dataset(tmp_path / "ds")
    (folder / "part.2.parquet").unlink()
    with pytest.raises(DataError, match=MISSING):
        _release(folder, "dask")


def test_the_command_line_refuses_a_missing_part(tmp_path: Path, capsys) -> None:
    folder = _dataset(tmp_path / "ds")
    (folder / "part.2.parquet").unlink()
    config = tmp_path / "c.toml"
    config.write_text(
        '[data]\npath = "ds"\n[schema]\nhierarchy = ["UNIT"]\n[[schema.attributes]]\nname = "A"\n'
        'values = [0, 1, 2]\n[strategy]\nbudgets = ["1/2", "1/2"]\nqueries = {total = "1"}\n',
        encoding="utf-8",
    )
    assert main(["-q", "run", str(config), "--out", str(tmp_path / "rel")]) == 2
    err = capsys.readouterr().err
    assert "part(s) ['part.2.parquet'] listed in its _metadata do not exist" in err
    assert not (tmp_path / "rel").exists()


def _truncate(part: Path) -> None:
    part.write_bytes(part.read_bytes()[:-40])


def _corrupt(part: Path) -> None:
    part.write_bytes(b"not a parquet file at all" * 10)


def _empty(part: Path) -> None:
    part.write_bytes(b"")


def _other_schema(part: Path) -> None:
    frame = _records(10)
    frame["A"] = frame["A"].astype(str)
    frame.to_parquet(part, index=False)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            _truncate,
            r"part 'part\.1\.parquet' cannot be read as Parquet \(truncated or corrupt\?\)",
        ),
        (_corrupt, r"part 'part\.1\.parquet' cannot be read as Parquet \(truncated or corrupt\?\)"),
        (_empty, r"part 'part\.1\.parquet' is empty \(0 bytes\), not a Parquet file"),
        (
            _other_schema,
            r"part 'part\.1\.parquet' has another schema than part 'part\.0\.parquet' "
            r"\(A: int64 vs string\)",
        ),
    ],
)
def test_a_bad_part_is_named(tmp_path: Path, damage, message: str) -> None:
    folder = _dataset(tmp_path / "ds", metadata=False)
    damage(folder / "part.1.parquet")
    with pytest.raises(DataError, match=message):
        read_data(folder)
    with pytest.raises(DataError, match=message):
        _release(folder)


def test_an_empty_dataset_folder_has_its_own_message(tmp_path: Path) -> None:
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "_common_metadata").write_bytes(b"")
    with pytest.raises(DataError, match=r"holds no Parquet file \(an empty dataset folder\)"):
        read_data(tmp_path / "ds")
