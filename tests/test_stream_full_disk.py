"""A full disk while a streamed release folder is written names the file (issue 30 D4).

Before: the streamed folder's JSON and CSV files (``config.json``, ``manifest.json``,
``ledger.json``, ``solver_stats.csv``, ``subtrees.csv``), its tree and its measurement parts
were written with ``Path.write_text``, ``DataFrame.to_csv`` and pyarrow directly; a write error
such as ENOSPC carries no file name, so the user read "[Errno 28] No space left on device" and
nothing else. Each writer below is made to fail as a full disk does (an ``OSError`` with the
errno and no file name) for one file of the folder; the run fails with the path named, and
leaves nothing behind.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import data_config, embedded_subset

from topdown.product.cli import main

pytestmark = pytest.mark.extra("parquet")


def _full(target: str):
    def check(path: object) -> None:
        if target in Path(str(path)).as_posix():
            raise OSError(errno.ENOSPC, "No space left on device")  # as write() reports it

    return check


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch):
    """``full_disk(NAME)``: every writer fails on a path holding NAME, as a full disk does."""
    import pyarrow.parquet as pq

    def install(target: str) -> None:
        check = _full(target)
        text, csv, parquet = Path.write_text, pd.DataFrame.to_csv, pd.DataFrame.to_parquet
        writer = pq.ParquetWriter.__init__

        def write_text(self, *args, **kwargs):
            check(self)
            return text(self, *args, **kwargs)

        def to_csv(self, path=None, *args, **kwargs):
            check(path)
            return csv(self, path, *args, **kwargs)

        def to_parquet(self, path=None, *args, **kwargs):
            check(path)
            return parquet(self, path, *args, **kwargs)

        def parquet_writer(self, where, *args, **kwargs):
            check(where)
            return writer(self, where, *args, **kwargs)

        monkeypatch.setattr(Path, "write_text", write_text)
        monkeypatch.setattr(pd.DataFrame, "to_csv", to_csv)
        monkeypatch.setattr(pd.DataFrame, "to_parquet", to_parquet)
        monkeypatch.setattr(pq.ParquetWriter, "__init__", parquet_writer)

    return install


@pytest.mark.parametrize(
    "target",
    [
        "config.json",
        "manifest.json",
        "ledger.json",
        "invariants.json",
        "solver_stats.csv",
        "subtrees.csv",
        "hierarchy.parquet",
        "measurements/",
        "tables/",
        "microdata/",
    ],
)
def test_a_full_disk_names_the_streamed_file(tmp_path: Path, capsys, full_disk, target) -> None:
    embedded_subset(("01", "08"), 100).to_csv(tmp_path / "data.csv", index=False)
    config = tmp_path / "c.toml"
    config.write_text(data_config(4, ("STATE", "PUMA")), encoding="utf-8")
    out = tmp_path / "rel"
    full_disk(target)
    code = main(["-q", "run", str(config), "--out", str(out), "--stream-by", "STATE"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "No space left on device" in err
    named = err.split("No space left on device")[1]
    assert target in named and str(tmp_path) in named, err  # "...: '/path/of/the/file'"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml", "data.csv"]
