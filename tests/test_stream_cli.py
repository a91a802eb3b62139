"""``topdown run --stream-by`` / ``[executor] stream_by``: a streamed release folder that
``topdown check`` verifies, from a CSV file or a folder of Parquet partitions."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import data_config, embedded_subset

from topdown.product.cli import main


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("stream_cli")
    embedded_subset(("06", "17", "36"), rows_per_state=600).to_csv(base / "data.csv", index=False)
    (base / "run.toml").write_text(data_config(5, ("STATE", "PUMA")), encoding="utf-8")
    return base


@pytest.fixture(scope="module")
def streamed(project: Path) -> Path:
    out = project / "rel"
    assert (
        main(["-q", "run", str(project / "run.toml"), "--out", str(out), "--stream-by", "STATE"])
        == 0
    )
    return out


def test_streamed_folder_passes_check_and_holds_every_unit(streamed: Path, project: Path, capsys):
    capsys.readouterr()
    assert main(["check", str(streamed)]) == 0
    assert "passed" in capsys.readouterr().out
    data = pd.read_csv(project / "data.csv", dtype={"STATE": str, "PUMA": str})
    pumas = pd.read_parquet(streamed / "tables" / "level_2_PUMA")
    assert sorted(pumas["node"].unique()) == sorted(data["PUMA"].unique())
    assert sorted(p.stem for p in (streamed / "microdata").iterdir()) == ["06", "17", "36"]
    micro = pd.concat(pd.read_csv(p) for p in (streamed / "microdata").iterdir())  # [output]
    assert len(micro) == pumas["count"].sum()
    assert not list(project.glob(".rel*"))  # the temporary folders are gone


def test_check_fails_after_tampering(streamed: Path, tmp_path: Path, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(streamed, copy)
    part = copy / "tables" / "level_2_PUMA" / "17.parquet"
    frame = pd.read_parquet(part)
    frame.loc[0, "count"] += 1
    frame.to_parquet(part, index=False)
    assert main(["check", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "17.parquet: content differs" in err and "children of '17' differ from it" in err


def test_parquet_partitions_give_the_same_release(streamed: Path, project: Path, tmp_path: Path):
    folder = tmp_path / "parts"
    folder.mkdir()
    data = pd.read_csv(project / "data.csv", dtype={"STATE": str, "PUMA": str})
    for state, rows in data.groupby("STATE"):
        rows.to_parquet(folder / f"{state}.parquet", index=False)
    config = data_config(5, ("STATE", "PUMA"), '[executor]\nstream_by = "STATE"\n')
    (tmp_path / "run.toml").write_text(config.replace('"data.csv"', f'"{folder}"'), "utf-8")
    out = tmp_path / "rel"
    assert main(["-q", "run", str(tmp_path / "run.toml"), "--out", str(out)]) == 0
    for level in ("level_1_STATE", "level_2_PUMA"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(out / "tables" / level), pd.read_parquet(streamed / "tables" / level)
        )


def test_bad_stream_options(project: Path, tmp_path: Path, capsys):
    config = str(project / "run.toml")
    assert main(["run", config, "--out", str(tmp_path / "a"), "--stream-by", "PUMA"]) == 2
    assert "--stream-by: 'PUMA' must be a hierarchy column with a level below it" in (
        capsys.readouterr().err
    )
    bad = data_config(5, ("STATE", "PUMA"), '[executor]\nstream_by = "AGE"\n')
    (tmp_path / "bad.toml").write_text(bad, "utf-8")
    assert main(["run", str(tmp_path / "bad.toml"), "--out", str(tmp_path / "c")]) == 2
    assert "executor.stream_by" in capsys.readouterr().err
    assert not any(tmp_path.glob("[abc]"))
