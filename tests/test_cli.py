"""The ``topdown`` command line: run, check, report, bench, help, overwrite and atomicity."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import SEX_AGE, embedded_subset

import topdown.product.release_folder as release_folder
from topdown.product.cli import main

SMALL_CONFIG = (
    """
seed = 7
[data]
path = "small.csv"
[data.derive]
STATE = {from = "PUMA", slice = [0, 2]}
[schema]
hierarchy = ["STATE", "PUMA"]
"""
    + SEX_AGE
    + """[strategy]
mechanism = "discrete_gaussian"
budgets = ["1/2", 0.5, "1/2"]
queries = {detailed = "3/4", total = "1/4"}
[[constraints]]
sum_equal_real_total = {expr = {true = {}}}
level = 0
[[constraints]]
sum_less_equal = {expr = {greater_than = ["AGE", "0-17"]}, value = 100000}
[metrics]
truth = true
"""
)


def small_project(folder: Path, config: str = SMALL_CONFIG) -> Path:
    """Two states of the embedded data (about 5,000 rows, no STATE column) and a config."""
    embedded_subset(("06", "17")).drop(columns=["STATE"]).to_csv(folder / "small.csv", index=False)
    path = folder / "small.toml"
    path.write_text(config, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("cli")
    config = small_project(base)
    out = base / "rel"
    assert main(["-q", "run", str(config), "--out", str(out)]) == 0
    return out


def test_run_writes_every_file_of_the_manifest(released: Path) -> None:
    manifest = json.loads((released / "manifest.json").read_text())
    on_disk = {p.relative_to(released).as_posix() for p in released.rglob("*") if p.is_file()}
    assert set(manifest["files"]) | {"manifest.json"} == on_disk
    expected = {
        "microdata.csv",
        "tables/level_0_root.csv",
        "tables/level_1_STATE.csv",
        "tables/level_2_PUMA.csv",
        "measurements.csv",
        "ledger.json",
        "config.json",
        "solver_stats.csv",
        "metrics.csv",
        "bias_by_size.csv",
        "report.html",
        "hierarchy.csv",
        "invariants.json",
    }
    assert expected <= set(manifest["files"])
    assert not list(released.parent.glob(".rel.*")), (
        "no temporary folder is left next to the release"
    )


def test_release_content(released: Path) -> None:
    ledger = json.loads((released / "ledger.json").read_text())
    assert ledger["total"]["budget"] == "3/2" and ledger["summary"]["strategy_total"] == "3/2"
    # seeded (seed = 7): the ledger says so and states no epsilon as if it held
    assert ledger["noise"] == {"kind": "seeded", "seed": 7}
    assert ledger["summary"]["epsilon_at_delta"] is None
    assert ledger["summary"]["private"] is False
    assert "seeded noise" in [d["name"] for d in ledger["disclosures"]]
    assert ledger["invariants"][0]["name"] == "SumEqualRealTotal(TRUE)"
    states = pd.read_csv(released / "tables" / "level_1_STATE.csv", dtype={"node": str})
    assert set(states["node"]) == {"06", "17"}
    # the default estimator ("blue") publishes each cell's standard error
    assert list(states.columns) == ["node", "SEX", "AGE", "count", "stderr"]
    root = pd.read_csv(released / "tables" / "level_0_root.csv")
    micro = pd.read_csv(released / "microdata.csv")
    assert root["count"].sum() == len(micro) == ledger_total_records(released)
    config = json.loads((released / "config.json").read_text())
    assert config["schema"]["attributes"][1]["labels"] == ["0-17", "18-64", "65-99"]
    assert config["seed"] == 7


def test_a_loaded_release_recomputes_the_published_error_estimates(released: Path) -> None:
    """``load_release`` recomputes the BLUE from the published measurements with the root
    total invariant as an exact total, as the release did: the same error table (the root
    total's stderr is 0 in both)."""
    from topdown.blue.error_estimates import node_error_table

    rel, _ = release_folder.load_release(released)
    assert rel.blue is not None
    written = pd.read_csv(released / "error_estimates.csv", dtype={"node": str})
    again = node_error_table(rel.tree, rel.counts, rel.blue)
    assert written.loc[written["level"] == 0, "total_stderr"].tolist() == [0.0]
    for column in ("blue_total", "total_stderr", "cell_stderr"):
        pd.testing.assert_series_equal(again[column], written[column], check_dtype=False)


def ledger_total_records(folder: Path) -> int:
    """The invariant root total: the number of input records (published exactly)."""
    return json.loads((folder / "invariants.json").read_text())[0]["value"]


def test_check_passes_then_fails_after_tampering(released: Path, tmp_path: Path, capsys) -> None:
    assert main(["check", str(released)]) == 0
    assert "passed" in capsys.readouterr().out
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(released, copy)
    table = copy / "tables" / "level_2_PUMA.csv"
    frame = pd.read_csv(table, dtype=str)
    frame.loc[0, "count"] = str(int(frame.loc[0, "count"]) + 1)
    frame.to_csv(table, index=False)
    assert main(["check", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "FAIL children sum to parent" in err
    assert "tables/level_2_PUMA.csv" in err  # the manifest hash names the modified file


def test_check_catches_negative_and_fractional_counts(
    released: Path, tmp_path: Path, capsys
) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(released, copy)
    table = copy / "tables" / "level_0_root.csv"
    frame = pd.read_csv(table, dtype=str)
    for bad in ("-1", "-1.5", "2.5"):  # negative, negative and fractional, fractional
        frame.loc[0, "count"] = bad
        frame.to_csv(table, index=False)
        assert main(["check", str(copy)]) == 1, bad
        assert "FAIL non-negative integers" in capsys.readouterr().err, bad


def test_report_rebuild_with_truth(released: Path, tmp_path: Path, capsys) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(released, copy)
    (copy / "metrics.csv").unlink()
    (copy / "report.html").unlink()
    assert main(["-q", "report", str(copy), "--truth", str(released.parent / "small.csv")]) == 0
    assert (copy / "report.html").is_file()
    metrics = pd.read_csv(copy / "metrics.csv")
    assert set(metrics["estimator"]) == {"release", "noisy"}
    assert main(["check", str(copy)]) == 0  # the manifest was refreshed


def test_overwrite_and_interrupted_run(tmp_path: Path, monkeypatch, capsys) -> None:
    config = small_project(tmp_path)
    out = tmp_path / "rel"
    out.mkdir()
    (out / "old.txt").write_text("old")
    assert main(["-q", "run", str(config), "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(release_folder, "_write_manifest", interrupted)
    assert main(["-q", "run", str(config), "--out", str(out), "--overwrite"]) == 130
    assert (out / "old.txt").is_file(), "an interrupted run leaves the old folder as it was"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rel", "small.csv", "small.toml"]
    monkeypatch.undo()
    assert (
        main(["-q", "run", str(config), "--out", str(out), "--overwrite", "--solver", "highs"]) == 0
    )
    assert not (out / "old.txt").exists() and (out / "manifest.json").is_file()
    assert json.loads((out / "config.json").read_text())["solver"]["name"] == "highs"


def test_failed_swap_puts_the_old_release_back(tmp_path: Path, monkeypatch) -> None:
    """If moving the new folder into place fails after the old one was moved aside, the old
    release is restored (not left in a hidden folder) and nothing else is left behind."""
    config = small_project(tmp_path)
    out = tmp_path / "rel"
    out.mkdir()
    (out / "old.txt").write_text("old")
    real_replace = os.replace

    def failing_replace(src, dst):
        if Path(src).name.startswith(".rel.partial-"):
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(release_folder.os, "replace", failing_replace)
    assert main(["-q", "run", str(config), "--out", str(out), "--overwrite"]) != 0
    assert (out / "old.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rel", "small.csv", "small.toml"]


def test_release_folder_is_readable_and_declares_its_metrics(released: Path) -> None:
    mode = released.stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o777 & ~umask  # not mkdtemp's owner-only 0o700
    ledger = json.loads((released / "ledger.json").read_text())
    assert "evaluation metrics" in [d["name"] for d in ledger["disclosures"]]


def test_report_refuses_a_tampered_release(released: Path, tmp_path: Path, capsys) -> None:
    """Rebuilding the report must not re-sign a changed file (it would hide it from check)."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(released, copy)
    path = copy / "measurements.csv"
    frame = pd.read_csv(path, dtype=str)
    frame.loc[0, "noisy"] = str(int(frame.loc[0, "noisy"]) + 5)
    frame.to_csv(path, index=False)
    assert main(["-q", "report", str(copy)]) == 1
    assert "measurements.csv: content differs" in capsys.readouterr().err
    assert main(["check", str(copy)]) == 1


def test_default_run_without_config(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["-q", "run", "--seed", "1"]) == 0
    out = Path(capsys.readouterr().out.strip())
    assert out.parent == tmp_path and out.name.startswith("release-")
    assert len(pd.read_csv(out / "microdata.csv")) == 27_253  # the root total invariant
    assert main(["check", str(out)]) == 0


@pytest.mark.parametrize("command", [[], ["run"], ["check"], ["report"], ["bench"]])
def test_help(command: list[str], capsys) -> None:
    assert main(command + ["--help"]) == 0
    assert "usage: topdown" in capsys.readouterr().out


def test_usage_errors(capsys) -> None:
    assert main([]) == 2
    assert main(["frobnicate"]) == 2
    assert "invalid choice" in capsys.readouterr().err
    assert main(["check", "/no/such/release"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_bench_without_the_repository(tmp_path: Path, monkeypatch, capsys) -> None:
    import topdown.product.cli as cli

    monkeypatch.setattr(cli, "_repo_root", lambda: tmp_path)
    assert main(["bench", "samplers"]) == 2
    assert "benchmarks folder is not there" in capsys.readouterr().err
    (tmp_path / "benchmarks").mkdir()
    assert main(["bench", "scale"]) == 2
    assert "bench_pl94.py" in capsys.readouterr().err


def test_a_query_missing_from_measurements_is_an_error(released: Path, tmp_path: Path) -> None:
    import shutil

    from topdown.errors import ReleaseError

    copy = tmp_path / "copy"
    shutil.copytree(released, copy)
    frame = pd.read_csv(copy / "measurements.csv", dtype=str)
    frame[~((frame["level"] == "1") & (frame["query"] == "total"))].to_csv(
        copy / "measurements.csv", index=False
    )
    with pytest.raises(ReleaseError, match=r"level 1 query 'total' has 0 answers"):
        release_folder.load_release(copy)
