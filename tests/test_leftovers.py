"""Leftovers of a killed run are removed by the next run of the same output (issue 30 B4).

Before: ``topdown synth``'s ``.NAME.partial-*`` files and a streamed run's
``..NAME.partial-*.streaming-PID`` folder (``.NAME.streaming-PID`` from ``release_streamed``)
survived every later run. Now every temporary name carries its owner (process id and start
time) and the next run removes those whose owner is gone, saying so in one line; those of a
process that still runs are left alone.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import data_config, embedded_subset, synth_files

from topdown.product.cli import main
from topdown.support.leftovers import _start_time, owner_gone, owner_tag, remove_leftovers

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="process start times are read from /proc"
)

MESSAGE = "left over by an interrupted run whose process is gone"


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def _tag(proc: subprocess.Popen) -> str:
    return f"{proc.pid}-{_start_time(proc.pid)}"


@pytest.fixture
def dead_tag() -> str:
    """The owner tag of a process that has ended (and was reaped)."""
    proc = _sleeper()
    tag = _tag(proc)
    proc.kill()
    proc.wait()
    return tag


@pytest.fixture
def live_tag() -> Iterator[str]:
    """The owner tag of a process that runs for the length of the test."""
    proc = _sleeper()
    yield _tag(proc)
    proc.kill()
    proc.wait()


def test_owners_are_told_apart(dead_tag: str, live_tag: str) -> None:
    assert owner_gone(f"{owner_tag()}-abc") is False
    assert owner_gone(f"{live_tag}-abc") is False
    assert owner_gone(f"{dead_tag}-abc") is True
    pid, start = live_tag.split("-")
    assert owner_gone(f"{pid}-{int(start) + 1}.x") is True, "a reused process id is not the owner"
    assert owner_gone("abc123") is None


def test_only_dead_owners_entries_are_removed(tmp_path: Path, dead_tag: str, live_tag: str) -> None:
    dead = tmp_path / f".x.partial-{dead_tag}-q"
    (dead / "sub").mkdir(parents=True)
    dead_file = tmp_path / f".x.partial-{dead_tag}-r"
    dead_file.write_text("partial")
    alive = tmp_path / f".x.partial-{live_tag}-s"
    alive.mkdir()
    legacy = tmp_path / ".x.partial-abc"
    legacy.mkdir()
    assert remove_leftovers(tmp_path, (".x.partial-",)) == [dead, dead_file]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, legacy.name])
    # a claimed output's entries that name no owner were written by an older version: gone too
    assert remove_leftovers(tmp_path, (".x.partial-",), claimed=True) == [legacy]
    assert alive.exists()


def _run_project(folder: Path) -> Path:
    embedded_subset(("01", "08"), 200).to_csv(folder / "data.csv", index=False)
    (folder / "c.toml").write_text(data_config(4, ("STATE", "PUMA")), encoding="utf-8")
    return folder / "c.toml"


@pytest.mark.extra("parquet")
def test_a_streamed_runs_leftovers_are_removed_by_the_next_run(
    tmp_path: Path, dead_tag: str, live_tag: str, capsys
) -> None:
    config = _run_project(tmp_path)
    stale = [
        tmp_path / f".rel.partial-{dead_tag}-a1",  # the run's folder
        tmp_path / f"..rel.partial-{dead_tag}-a1.streaming-{dead_tag}",  # its streamed folder
    ]
    for path in stale:
        (path / "tables").mkdir(parents=True)
    alive = tmp_path / f"..rel.partial-{live_tag}-b2.streaming-{live_tag}"
    alive.mkdir()
    args = ["run", str(config), "--out", str(tmp_path / "rel"), "--stream-by", "STATE"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert not any(p.exists() for p in stale)
    assert alive.exists(), "a running process's folder is left alone"
    lines = [line for line in err.splitlines() if MESSAGE in line]
    assert len(lines) == 1 and all(str(p) in lines[0] for p in stale), err
    assert main(["check", str(tmp_path / "rel")]) == 0


@pytest.mark.extra("parquet")
def test_release_streamed_removes_its_own_leftovers(
    tmp_path: Path, dead_tag: str, live_tag: str, caplog
) -> None:
    from topdown.product.cli import load_data
    from topdown.product.config import load_config
    from topdown.streaming.run import release_streamed

    cfg = load_config(_run_project(tmp_path))
    stale = tmp_path / f".rel.streaming-{dead_tag}"
    (stale / "tables").mkdir(parents=True)
    alive = tmp_path / f".rel.streaming-{live_tag}"
    alive.mkdir()
    data = load_data(cfg)
    release_streamed(
        data, cfg.schema, cfg.strategy, stream_by="STATE", out=tmp_path / "rel", seed=1
    )
    assert not stale.exists()
    assert alive.exists()
    assert any(MESSAGE in r.message and str(stale) in r.message for r in caplog.records)


def test_synths_leftovers_are_removed_by_the_next_run(
    tmp_path: Path, dead_tag: str, live_tag: str, capsys
) -> None:
    data, domains = synth_files(tmp_path)
    out = tmp_path / "out.csv"
    stale = [
        tmp_path / f".out.csv.partial-{dead_tag}-x1",
        tmp_path / f"..out.csv.partial-{dead_tag}-x1.y2",  # the table writer's own temporary
        tmp_path / f".out.ledger.json.partial-{dead_tag}-x3",
        tmp_path / f".out.report.html.partial-{dead_tag}-x4",
    ]
    for path in stale:
        path.write_text("half")
    alive = tmp_path / f".out.csv.partial-{live_tag}-x5"
    alive.write_text("being written")
    cmd = ["synth", "crosstab", str(data), "--domains", str(domains), "--epsilon", "1"]
    assert main([*cmd, "--columns", "a", "b", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert not any(p.exists() for p in stale)
    assert alive.read_text() == "being written"
    lines = [line for line in err.splitlines() if MESSAGE in line]
    assert len(lines) == 1 and all(str(p) in lines[0] for p in stale), err
    assert out.exists()
