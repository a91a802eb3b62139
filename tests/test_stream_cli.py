"""``topdown run --stream-by`` / ``[executor] stream_by``: a streamed release folder that
``topdown check`` verifies, from a CSV file or a folder of Parquet partitions."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import data_config, embedded_subset

from topdown.product.cli import main
from topdown.product.release_folder import refresh_manifest

#: a streamed release writes its parts as Parquet
pytestmark = pytest.mark.extra("parquet")


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


def test_streamed_run_uses_blue_and_check_recomputes_the_root_total_note(
    streamed: Path, tmp_path: Path, capsys
):
    import json
    import shutil

    ledger = json.loads((streamed / "ledger.json").read_text())
    estimation = ledger["summary"]["estimation"]
    assert estimation["estimator"] == "blue"  # no [estimation] method: the default
    held = dict(estimation["root_total"])
    assert held["held"] is True
    root = pd.read_parquet(streamed / "tables" / "level_0_root")
    assert root["count"].sum() == held["value"]
    assert json.loads((streamed / "config.json").read_text())["estimation"]["method"] == "blue"
    copy = tmp_path / "copy"
    shutil.copytree(streamed, copy)
    ledger["summary"]["estimation"]["root_total"]["value"] = held["value"] + 1
    (copy / "ledger.json").write_text(json.dumps(ledger, indent=1))
    refresh_manifest(copy, ("ledger.json",))
    capsys.readouterr()
    assert main(["check", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "FAIL ledger.json totals match its entries" in err and "'root_total'" in err
    # the root's table changed by one person (and re-signed): not the held total any more
    shutil.copy(streamed / "ledger.json", copy / "ledger.json")
    refresh_manifest(copy, ("ledger.json",))
    path = "tables/level_0_root/top.parquet"
    table = pd.read_parquet(copy / path)
    table.loc[table["count"].idxmax(), "count"] += 1
    table.to_parquet(copy / path, index=False)
    refresh_manifest(copy, (path,))
    assert main(["check", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "FAIL root total at the held value" in err
    assert f"the root's released total is {held['value'] + 1}" in err


def test_estimation_method_in_a_streamed_config(project: Path, tmp_path: Path):
    import json

    for method in ("blue", "topdown"):
        config = data_config(
            5,
            ("STATE", "PUMA"),
            f'[executor]\nstream_by = "STATE"\n[estimation]\nmethod = "{method}"\n',
        )
        run = tmp_path / f"{method}.toml"
        run.write_text(config.replace('"data.csv"', f'"{project / "data.csv"}"'), "utf-8")
        out = tmp_path / method
        assert main(["-q", "run", str(run), "--out", str(out)]) == 0
        assert main(["check", str(out)]) == 0
        summary = json.loads((out / "ledger.json").read_text())["summary"]
        assert summary["estimation"]["estimator"] == method
        assert ("root_total" in summary["estimation"]) == (method == "blue")


def test_check_refuses_a_streamed_folder_of_format_1(streamed: Path, tmp_path: Path, capsys):
    import json
    import shutil

    copy = tmp_path / "old"
    shutil.copytree(streamed, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    assert manifest["format"] == "topdown-release-streamed/2"
    manifest["format"] = "topdown-release-streamed/1"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(["check", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "written by an older version of topdown" in err and "rerun the release" in err
    assert "missing" not in err
