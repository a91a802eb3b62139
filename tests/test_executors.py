"""The executors' batching and options, and the executor options of the config and CLI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli_helpers import data_config, embedded_subset
from topdown.execution.executors import (
    BATCHES_PER_WORKER,
    ExecutorError,
    batches,
    make_executor,
    tasks_at_once,
)
from topdown.product.config import ConfigError, load_config


def test_batches_cover_the_tasks_in_order():
    for n_tasks in (1, 7, 8, 100, 4500):
        for workers in (1, 2, 3):
            parts = batches(n_tasks, workers)
            assert [i for r in parts for i in r] == list(range(n_tasks))
            assert len(parts) == min(n_tasks, BATCHES_PER_WORKER * workers)
            sizes = [len(r) for r in parts]
            assert max(sizes) - min(sizes) <= 1  # even batches: the workers finish together


def _pid(_: object) -> int:
    return os.getpid()


def test_processes_give_results_in_task_order():
    with make_executor("processes", workers=2) as ex:
        # the pool runs them, in batches, and the order is the tasks'
        assert ex.map(abs, list(range(-40, 0))) == list(range(40, 0, -1))
        assert ex.map(_pid, [None]) == [os.getpid()]  # a lone task: in this process
        assert os.getpid() not in ex.map(_pid, [None, None])  # two: on the workers


def _fail_on_seven(x: int) -> int:
    if x == 7:
        raise ValueError("task seven")
    return -x


def test_processes_stream_every_task_once_within_the_window():
    pulled = []

    def tasks():
        for x in range(30):
            pulled.append(x)
            yield x

    with make_executor("processes", workers=2) as ex:
        assert ex.window == 4
        seen = {}
        for i, result in ex.stream(abs, tasks(), 30):
            # a task is read only when one in flight is done: never more than the window
            assert len(pulled) <= len(seen) + 1 + ex.window
            seen[i] = result
        assert seen == {i: i for i in range(30)}
        # a lone task runs here; an error reaches the caller
        assert list(ex.stream(_pid, [None], 1)) == [(0, os.getpid())]
        with pytest.raises(ValueError, match="task seven"):
            list(ex.stream(_fail_on_seven, range(20), 20))


@pytest.mark.parametrize("name", ["serial", "processes"])
def test_stream_batches_yield_every_task_once_a_batch_at_a_time(name):
    pulled = []

    def tasks():
        for x in range(-40, 0):
            pulled.append(x)
            yield x

    with make_executor(name, workers=2) as ex:
        parts = batches(40, ex.workers)
        widest = max(len(r) for r in parts)
        got = []
        for item in ex.stream_batches(abs, tasks(), 40):
            # tasks are read a batch at a time, as the window frees: never far ahead
            assert len(pulled) <= len(got) + (ex.window + 1) * widest
            got.append(item)
        assert dict(got) == {i: 40 - i for i in range(40)}
        # the batches in the order they finish, each one's results together and in task order
        positions = [i for i, _ in got]
        by_start = {r.start: r for r in parts}
        k = 0
        while k < len(positions):
            run = by_start[positions[k]]
            assert positions[k : k + len(run)] == list(run)
            k += len(run)
        assert len(pulled) == 40
    if name == "processes":
        with make_executor(name, workers=2) as ex:
            pids = dict(ex.stream_batches(_pid, [None] * 8, 8))
            assert os.getpid() not in pids.values()
            with pytest.raises(ValueError, match="task seven"):
                list(ex.stream_batches(_fail_on_seven, range(20), 20))


def test_serial_stream_runs_in_order():
    ex = make_executor("serial")
    assert list(ex.stream(abs, iter([-2, 3, -1]), 3)) == [(0, 2), (1, 3), (2, 1)]


@pytest.mark.parametrize("workers", [0, -1, 1.5, True])
def test_bad_workers_name_the_argument(workers):
    with pytest.raises(ExecutorError, match=rf"workers \({workers!r}\) must be a positive integer"):
        make_executor("processes", workers=workers)


def test_tasks_at_once_is_what_the_executor_runs():
    assert tasks_at_once("serial", 4) == 1
    assert tasks_at_once("processes", 3) == 3
    with make_executor("processes") as ex:
        assert tasks_at_once("processes") == ex.workers == (os.cpu_count() or 1)
    with pytest.raises(ExecutorError, match=r"workers \(0\) must be a positive integer"):
        tasks_at_once("dask", 0)


def test_unknown_executor():
    with pytest.raises(ExecutorError, match=r"executor \('spark'\) is unknown; known executors"):
        make_executor("spark")


def _config(tmp_path: Path, executor: str) -> Path:
    embedded_subset(("01",), rows_per_state=50).to_csv(tmp_path / "data.csv", index=False)
    path = tmp_path / "run.toml"
    path.write_text(data_config(1, ("STATE",), executor), encoding="utf-8")
    return path


def test_config_executor_options(tmp_path):
    path = _config(tmp_path, '[executor]\nname = "dask"\nworkers = 3\naddress = "tcp://h:8786"\n')
    cfg = load_config(path)
    assert (cfg.executor, cfg.workers, cfg.address) == ("dask", 3, "tcp://h:8786")
    cfg = cfg.with_overrides(workers=2, address="tcp://other:8786")
    assert (cfg.workers, cfg.address) == (2, "tcp://other:8786")
    with pytest.raises(ConfigError, match=r"--workers: must be a positive integer; got 0"):
        cfg.with_overrides(workers=0)
    with pytest.raises(ConfigError, match=r"--address: must be a Dask scheduler address .*'h'"):
        cfg.with_overrides(address="h")
    bad = _config(tmp_path, '[executor]\nname = "dask"\naddress = 8786\n')
    with pytest.raises(ConfigError, match=r"executor.address: must be a Dask scheduler address"):
        load_config(bad)


def test_config_accepts_a_dataset_folder_and_refuses_other_folders(tmp_path):
    path = _config(tmp_path, "")
    (tmp_path / "persons").mkdir()
    text = path.read_text(encoding="utf-8").replace('path = "data.csv"', 'path = "persons"')
    path.write_text(text, encoding="utf-8")
    load_config(path).check_inputs()  # a folder is a Parquet dataset
    path.write_text(text.replace("[data]\n", '[data]\nformat = "csv"\n'), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"data.path: .* is not a file \(a folder is read as"):
        load_config(path).check_inputs()
