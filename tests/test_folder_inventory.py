"""Every file of a release folder is one the README's privacy table says may be published, or
one the ledger names as not publishable; none holds a timing (issue 30, Tests: privacy
regressions).

``test_no_timings_published`` and ``test_publishable`` check the files known when issue 30 was
filed; this inventory fails for a file added to the folder later that nobody classified, and
for a timing column or key in any file (JSON keys, CSV and Parquet columns).
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from cli_helpers import data_config, embedded_subset
from test_cli import SMALL_CONFIG, small_project

from topdown.product.cli import main

#: the README's "Privacy: which files to publish" table, the rows that say yes
PUBLISHABLE = (
    "microdata.*",
    "microdata/*",
    "tables/*",
    "measurements.*",
    "measurements/*",
    "ledger.json",
    "config.json",
    "hierarchy.*",
    "manifest.json",
    "solver_stats.csv",
    "error_*.csv",
    "subtrees.csv",
    "invariants.json",
    "report.html",
)
TIMING = re.compile(r"second|_wall\b|_cpu\b|elapsed|timing|duration", re.IGNORECASE)
SECURE = SMALL_CONFIG.replace("seed = 7\n", "")


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def _keys(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [str(k) for k in value] + [k for v in value.values() for k in _keys(v)]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v)]
    return []


def _names(path: Path) -> list[str]:
    """The keys (JSON) or columns (CSV, Parquet) of a file."""
    if path.suffix == ".json":
        return _keys(json.loads(path.read_text()))
    if path.suffix == ".csv":
        return list(pd.read_csv(path, nrows=0).columns)
    if path.suffix == ".parquet" or path.parent.name.startswith("level_"):
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names) if path.suffix == ".parquet" else []
    return []


def _summary(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "ledger.json").read_text())["summary"]


def _check(folder: Path) -> None:
    ledger = json.loads((folder / "ledger.json").read_text())
    withheld = ledger["summary"].get("not_publishable", [])
    for name in _files(folder):
        listed = any(fnmatch.fnmatch(name, p) for p in PUBLISHABLE)
        assert listed or name in withheld, f"{name}: neither publishable nor declared"
        # none at all, the solve times included: on a parallel run another worker's
        # measurement (which reads the records) can slow a pass
        timings = [k for k in _names(folder / name) if TIMING.search(k)]
        assert not timings, f"{name} holds timings {timings}"
    if withheld:
        assert ledger["summary"]["private"] is False
    assert "Timings" not in (folder / "report.html").read_text()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("inventory")


def test_a_release_folders_files_are_classified(base: Path, capsys) -> None:
    folder = base / "plain"
    folder.mkdir()
    path = small_project(folder, SECURE.replace("[metrics]\ntruth = true\n", ""))
    assert main(["-q", "run", str(path), "--out", str(folder / "rel")]) == 0
    _check(folder / "rel")
    assert _summary(folder / "rel")["private"] is True


def test_a_folder_with_truth_declares_its_truth_files(base: Path) -> None:
    folder = base / "truth"
    folder.mkdir()
    path = small_project(folder, SECURE)
    assert main(["-q", "run", str(path), "--out", str(folder / "rel")]) == 0
    assert (folder / "rel" / "metrics.csv").exists()
    _check(folder / "rel")


@pytest.mark.extra("parquet")
def test_a_streamed_folders_files_are_classified(base: Path) -> None:
    folder = base / "streamed"
    folder.mkdir()
    embedded_subset(("06", "17"), rows_per_state=300).to_csv(folder / "data.csv", index=False)
    config = data_config(5, ("STATE", "PUMA")).replace("seed = 5\n", "")  # the secure source
    (folder / "run.toml").write_text(config, encoding="utf-8")
    argv = ["-q", "run", str(folder / "run.toml"), "--out", str(folder / "rel")]
    assert main([*argv, "--stream-by", "STATE"]) == 0
    _check(folder / "rel")
    assert _summary(folder / "rel")["private"] is True


def test_an_unclassified_file_is_caught(base: Path) -> None:
    """The inventory can fail: a diagnostics file dropped into a folder is reported."""
    folder = base / "plain" / "rel"
    (folder / "timings.json").write_text(json.dumps({"read_seconds": 1.5}))
    try:
        with pytest.raises(AssertionError, match="timings.json: neither publishable"):
            _check(folder)
    finally:
        (folder / "timings.json").unlink()
