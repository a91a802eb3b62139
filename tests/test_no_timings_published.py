"""No timing, and no exact record count, in a release folder (issue 30 A4).

The read, release and write seconds, the streamed total and the per-subtree seconds grow
with the true number of records (a 40-record and a 400,000-record subtree of one structure
were told apart at p = 10^-9). They, and the exact count the "read N records" line printed
at INFO, are diagnostics: ``topdown run --diagnostics DIR`` writes them to
DIR/diagnostics.json, outside the folder; without it they are logged at debug level (-v).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import data_config, embedded_subset
from test_cli import small_project

from topdown.product.cli import main
from topdown.support.progress import Progress


def _timing_keys(folder: Path) -> list[str]:
    """Files named for timings, and manifest keys about them."""
    manifest = json.loads((folder / "manifest.json").read_text())
    named = [p.name for p in folder.rglob("*") if "timing" in p.name]
    return named + [k for k in manifest if "timing" in k or "seconds" in k]


def test_the_release_folder_holds_no_timing_and_diagnostics_go_outside(tmp_path, capsys):
    config = small_project(tmp_path)
    out, diagnostics = tmp_path / "rel", tmp_path / "diag"
    assert main(["run", str(config), "--out", str(out), "--diagnostics", str(diagnostics)]) == 0
    err = capsys.readouterr().err
    n = len(pd.read_csv(tmp_path / "small.csv"))
    assert _timing_keys(out) == []
    # the exact count is not logged at the default verbosity
    assert f"read {n} records" not in err
    document = json.loads((diagnostics / "diagnostics.json").read_text())
    assert document["records_read"] == n and document["release"] == str(out)
    assert {"read", "release", "write"} <= set(document["timings_seconds"])
    # the passes' solve times too: out of solver_stats.csv, into the diagnostics
    assert {"level 0: L2 pass", "level 1: rounding pass"} <= set(document["timings_seconds"])
    assert not any("second" in c for c in pd.read_csv(out / "solver_stats.csv").columns)
    assert "NOT for publication" in document["note"]
    assert main(["check", str(out)]) == 0
    capsys.readouterr()


def test_diagnostics_inside_the_release_folder_are_refused(tmp_path, capsys):
    config = small_project(tmp_path)
    out = tmp_path / "rel"
    argv = ["-q", "run", str(config), "--out", str(out), "--diagnostics", str(out / "diag")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--diagnostics ({str(out / 'diag')!r}) is inside the release folder" in err
    assert not out.exists()


@pytest.mark.extra("parquet")
def test_a_streamed_folder_holds_no_timing(tmp_path, capsys):
    embedded_subset(("06", "17"), rows_per_state=300).to_csv(tmp_path / "data.csv", index=False)
    (tmp_path / "run.toml").write_text(data_config(5, ("STATE", "PUMA"), ""), encoding="utf-8")
    out, diagnostics = tmp_path / "rel", tmp_path / "diag"
    argv = ["-q", "run", str(tmp_path / "run.toml"), "--out", str(out), "--stream-by", "STATE"]
    assert main([*argv, "--diagnostics", str(diagnostics)]) == 0
    assert _timing_keys(out) == []
    subtrees = pd.read_csv(out / "subtrees.csv", dtype={"subtree": str})
    assert not [c for c in subtrees.columns if c.endswith(("_wall", "_cpu"))]
    assert "Timings" not in (out / "report.html").read_text()
    timings = json.loads((diagnostics / "diagnostics.json").read_text())["timings_seconds"]
    assert "total" in timings and any(k.startswith("subtree 06: ") for k in timings)
    assert "level 1: L2 pass" in timings
    assert not any("second" in c for c in pd.read_csv(out / "solver_stats.csv").columns)
    assert main(["check", str(out)]) == 0
    capsys.readouterr()


#: a duration in a log line: "0.81 s", "2s", or a rate "nodes/s"
SECONDS = re.compile(r"\d(\.\d+)? ?s\b|/s\b")


def test_a_default_run_logs_no_seconds_and_verbose_does(tmp_path, capsys):
    """The progress and pass lines at INFO carry counts only; their seconds are DEBUG (-v)."""
    config = small_project(tmp_path)
    assert main(["run", str(config), "--out", str(tmp_path / "rel")]) == 0
    err = capsys.readouterr().err
    assert "nodes" in err and "estimated level 1" in err  # the progress lines are there
    assert [line for line in err.splitlines() if SECONDS.search(line)] == []
    assert main(["-v", "run", str(config), "--out", str(tmp_path / "rel2")]) == 0
    err = capsys.readouterr().err
    assert re.search(r"nodes in \d+\.\d\d s", err) and re.search(r"L2 \d+\.\d\d s", err)


def test_periodic_progress_lines_carry_seconds_at_debug_only(caplog):
    progress = Progress(enabled=True, bar=False, every=0.0)
    with caplog.at_level(logging.DEBUG, logger="topdown.support.progress"):
        assert list(progress(range(3), 3, "measure")) == [0, 1, 2]
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    # one line per item (every=0), then the closing line
    assert info == [f"measure: {k}/3 nodes" for k in (1, 2, 3, 3)]
    assert len(debug) == 4 and all(SECONDS.search(m) for m in debug)
