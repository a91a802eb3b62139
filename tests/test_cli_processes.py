"""The output folder under concurrency and signals, driven as a user would: real processes.

Two runs of the same ``--out`` at once, SIGTERM while computing and while writing, a folder that
appears at the output path while a run computes, and leftovers of a killed run. The command is
``python -m topdown`` with the repository on ``PYTHONPATH``, so the tests work from a checkout
and from an installed package alike.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import child_env, data_config, embedded_subset, hidden_files, start_topdown

from topdown.product.cli import main

CONFIG = data_config(4, ("STATE", "PUMA"))

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="POSIX signals and flock (the platforms topdown supports)"
)


def _project(folder: Path, rows_per_state: int | None = 400) -> Path:
    embedded_subset(("01", "08", "13"), rows_per_state).to_csv(folder / "data.csv", index=False)
    (folder / "c.toml").write_text(CONFIG, encoding="utf-8")
    return folder / "c.toml"


def test_two_runs_of_the_same_output_at_once(tmp_path: Path) -> None:
    """Exactly one succeeds; the other says why and exits 2; no release is lost silently."""
    config = _project(tmp_path)
    out = tmp_path / "rel"
    procs = [start_topdown(["run", str(config), "--out", str(out)], cwd=tmp_path) for _ in range(2)]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, _, err in results if code == 2)
    assert "another topdown run" in loser or "already exists" in loser, loser
    assert main(["check", str(out)]) == 0
    assert hidden_files(tmp_path) == [], "no lock or partial folder is left"


def test_sigterm_while_computing_leaves_nothing(tmp_path: Path) -> None:
    config = _project(tmp_path)
    proc = start_topdown(["run", str(config), "--out", str(tmp_path / "rel")], cwd=tmp_path)
    lock = tmp_path / ".rel.lock"
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:  # claimed: its pid is written
        if lock.exists() and lock.read_text():
            break
        time.sleep(0.02)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)
    err = proc.communicate()[1]
    assert code == 128 + signal.SIGTERM, err
    assert "terminated (SIGTERM); nothing was written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml", "data.csv"]


def test_sigterm_while_writing_removes_the_partial_folder(tmp_path: Path) -> None:
    """The signal arrives while microdata and metrics sit in the hidden partial folder."""
    config = _project(tmp_path)
    script = (
        "import os, signal, sys, time\n"
        "import topdown.product.release_folder as rf\n"
        "def slow(folder, *args):\n"
        "    assert any(folder.iterdir())\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)\n"
        "rf._write_manifest = slow\n"
        "from topdown.product.cli import main\n"
        f"sys.exit(main(['-q', 'run', {str(config)!r}, '--out', 'rel']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml", "data.csv"]


def test_leftovers_of_a_killed_run_are_removed(tmp_path: Path, caplog) -> None:
    config = _project(tmp_path)
    partial = tmp_path / ".rel.partial-abc123"
    (partial / "tables").mkdir(parents=True)
    (partial / "microdata.csv").write_text("SEX,AGE\n1,0-17\n")
    (tmp_path / ".rel.lock").write_text("99999999")  # a lock file nobody holds
    unrelated = tmp_path / ".other.partial-x"
    unrelated.mkdir()
    assert main(["-q", "run", str(config), "--out", str(tmp_path / "rel")]) == 0
    assert not partial.exists()
    assert any("left over by an interrupted run" in r.message for r in caplog.records)
    assert hidden_files(tmp_path) == [".other.partial-x"], "only leftovers of this output path"


def test_a_folder_appearing_during_the_run_is_left_alone(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    import topdown.engine as engine

    config = _project(tmp_path)
    out = tmp_path / "rel"
    real = engine.release

    def meanwhile(*args, **kwargs):
        out.mkdir()
        (out / "user.txt").write_text("mine")
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "release", meanwhile)
    assert main(["-q", "run", str(config), "--out", str(out)]) == 2
    assert "appeared (or was replaced) while this run computed" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["user.txt"]
    assert hidden_files(tmp_path) == []

    # with --overwrite the run replaces the folder it was asked to replace, not another one
    def replaced(*args, **kwargs):
        out.rename(tmp_path / "moved")  # kept, so the new folder cannot reuse its inode
        out.mkdir()
        (out / "user2.txt").write_text("mine too")
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "release", replaced)
    assert main(["-q", "run", str(config), "--out", str(out), "--overwrite"]) == 2
    assert sorted(p.name for p in out.iterdir()) == ["user2.txt"]
