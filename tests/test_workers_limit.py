"""Worker counts this machine runs, and workers that end with their parent (issue 30 C1).

Before: ``--executor dask --workers 10**30`` grew to 24 GB until the kernel killed it, and
``--executor processes --workers 1000`` forked workers that outlived the parent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import data_config, embedded_subset

from topdown.execution import executors
from topdown.execution.executors import ExecutorError, ProcessExecutor, worker_limit
from topdown.product.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def two_cpus(monkeypatch):
    monkeypatch.setattr(executors.os, "cpu_count", lambda: 2)
    assert worker_limit() == 8


def _project(folder: Path, tail: str = "") -> Path:
    embedded_subset(("01",), 50).to_csv(folder / "data.csv", index=False)
    (folder / "c.toml").write_text(data_config(4, ("STATE",), tail), encoding="utf-8")
    return folder / "c.toml"


@pytest.mark.parametrize(
    ("executor", "workers", "shown"),
    [("dask", str(10**30), "100000...(31 digits)"), ("processes", "1000", "1000")],
)
def test_too_many_workers_is_a_usage_error(
    tmp_path: Path, capsys, two_cpus, executor: str, workers: str, shown: str
) -> None:
    config = _project(tmp_path)
    argv = ["-q", "run", str(config), "--executor", executor, "--workers", workers]
    assert main([*argv, "--out", str(tmp_path / "rel")]) == 2
    err = capsys.readouterr().err
    assert (
        f"command line: --workers: {shown} is more than this machine runs: at most 8 "
        "(4 per CPU, 2 CPU(s), never more than 1024)"
    ) in err
    assert not (tmp_path / "rel").exists()
    assert main(["-q", "run", str(config), "--workers", "8", "--out", str(tmp_path / "ok")]) == 0


def test_too_many_workers_in_a_config_and_the_api(tmp_path: Path, capsys, two_cpus) -> None:
    config = _project(tmp_path, '[executor]\nname = "processes"\nworkers = 9\n')
    assert main(["-q", "run", str(config), "--out", str(tmp_path / "rel")]) == 2
    assert "executor.workers: 9 is more than this machine runs: at most 8" in (
        capsys.readouterr().err
    )
    with pytest.raises(ExecutorError, match=r"workers \(2000\) is more than this machine runs"):
        ProcessExecutor(workers=2000)
    with pytest.raises(ExecutorError, match=r"workers \(100000...\(31 digits\)\) is more than"):
        executors.make_executor("processes", workers=10**30)
    assert executors.MAX_WORKERS == 1024


_ORPHAN_SCRIPT = """
import os, signal
from topdown.execution.executors import ProcessExecutor
ex = ProcessExecutor(workers=2)
assert ex.map(abs, [-1, -2, -3, -4]) == [1, 2, 3, 4]
print(" ".join(str(p) for p in ex._pool._processes), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by init) is gone for this purpose
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_pool_workers_end_when_their_parent_is_killed(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # output to files, not pipes: a surviving worker would hold a pipe open
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        done = subprocess.run(
            [sys.executable, "-c", _ORPHAN_SCRIPT], env=env, stdout=out, stderr=err, timeout=60
        )
    assert done.returncode == -signal.SIGKILL, (tmp_path / "err").read_text()
    pids = [int(p) for p in (tmp_path / "out").read_text().split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    survivors = [p for p in pids if _alive(p)]
    for p in survivors:  # leave nothing behind, then fail
        os.kill(p, signal.SIGKILL)
    assert not survivors, f"worker(s) {survivors} outlived their parent"
