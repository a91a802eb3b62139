"""The Dask path: a LocalCluster of two workers, a partitioned Parquet dataset read on it, and
the same seeded release on every executor (every count, every noisy answer)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("distributed", reason="the 'dask' extra is not installed")
pytest.importorskip("pyarrow", reason="the 'parquet' extra is not installed")

from benchmarks.pl94 import detailed_strategy, make_state, pl94_schema, state_total_invariant
from topdown.engine import release
from topdown.errors import DataError, DomainError, HierarchyError
from topdown.execution import process_memory
from topdown.execution.executors import DaskExecutor, ExecutorError, RemoteArray, make_executor
from topdown.measurement import measure as measure_module
from topdown.measurement.dask_input import RemoteLevel, SparseCounts, dataset_tree, is_dataset
from topdown.support.progress import Progress

QUIET = Progress(enabled=False)


@pytest.fixture(scope="module")
def state():
    return make_state(4_000, seed=11)


@pytest.fixture
def small_chunks(monkeypatch):
    """Measurement chunks of 20 nodes (the block level then has several, so chunk slicing and
    the order of results are exercised); the size is read in this process only."""
    monkeypatch.setattr(measure_module, "CHUNK_CELLS", 20 * pl94_schema().domain.size)


def _dataset(frame: pd.DataFrame, folder, parts: int = 3):
    folder.mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(frame)), parts)):
        frame.iloc[rows].to_parquet(folder / f"part-{i}.parquet", index=False)
    return folder


def _assert_same_release(a, b) -> None:
    assert len(a.counts) == len(b.counts)
    for x, y in zip(a.counts, b.counts, strict=True):
        np.testing.assert_array_equal(x, y)
    for la, lb in zip(a.measurements.levels, b.measurements.levels, strict=True):
        assert [m.query.name for m in la] == [m.query.name for m in lb]
        for ma, mb in zip(la, lb, strict=True):
            np.testing.assert_array_equal(ma.noisy, mb.noisy)
    assert [(e.query, e.level) for e in a.ledger.entries] == [
        (e.query, e.level) for e in b.ledger.entries
    ]


def _fail_on_seven(x: int) -> int:
    if x == 7:
        raise ValueError("task seven")
    return -x


def test_dask_stream_every_task_once(cluster):
    ex = DaskExecutor(cluster.scheduler_address)
    try:
        assert dict(ex.stream(abs, iter(range(-25, 0)), 25)) == {i: 25 - i for i in range(25)}
        with pytest.raises(ValueError, match="task seven"):
            list(ex.stream(_fail_on_seven, range(20), 20))
    finally:
        ex.close()


def test_tasks_go_anywhere_when_the_scheduler_lists_no_worker_yet(cluster, monkeypatch):
    """The window is laid out from the workers the scheduler lists; just after a cluster
    starts it may list none, and Dask refuses ``allow_other_workers=`` without ``workers=``
    (a streamed CI release failed so): every task still runs once."""
    from distributed import Client

    real = Client.scheduler_info

    def no_workers(self, *args, **kwargs):
        info = dict(real(self, *args, **kwargs))
        info["workers"] = {}
        return info

    monkeypatch.setattr(Client, "scheduler_info", no_workers)
    ex = DaskExecutor(cluster.scheduler_address)
    try:
        assert dict(ex.stream(abs, iter(range(-6, 0)), 6)) == {i: 6 - i for i in range(6)}
    finally:
        ex.close()


def _pid_of(_: object) -> int:
    import os

    return os.getpid()


def _memory_policy(keys: list[str]) -> tuple[bool | None, dict[str, str | None]]:
    """numpy's huge-page advice and the variables ``keys``, in a worker."""
    switch = process_memory.numpy_switch()
    current = None if switch is None else bool(switch(True))
    if switch is not None:
        switch(bool(current))
    return current, {k: os.environ.get(k) for k in keys}


def test_local_cluster_stream_spreads_tasks_over_its_workers():
    """The executor's own LocalCluster (data scattered straight to a chosen worker): every task
    once, on both workers, and ``map`` in task order."""
    ex = DaskExecutor(workers=2)
    try:
        assert ex.client is not None  # up: tasks would run here while it starts
        pids = dict(ex.stream(_pid_of, iter(range(24)), 24))
        assert sorted(pids) == list(range(24))
        assert len(set(pids.values())) == 2  # both workers ran tasks
        assert ex.map(abs, list(range(-30, 0))) == list(range(30, 0, -1))
        # the workers started with the engine's memory policy; this process's environment is
        # as it was (the nannies write theirs into it)
        wanted = process_memory.worker_environ()
        has_switch = process_memory.numpy_switch() is not None
        for advice, environ in ex.client.run(_memory_policy, list(wanted)).values():
            assert environ == wanted
            if process_memory.ENV in wanted and has_switch:
                assert advice is False
        assert not set(wanted) & set(os.environ)
    finally:
        ex.close()


def test_tasks_run_here_while_the_local_cluster_starts(monkeypatch):
    """Until the local cluster is up, ``stream`` runs tasks in this process; then on the
    workers. The cluster is held back until the fourth task is drawn, and the fifth is drawn
    only once it is up (its check came before): tasks 0-4 run here, the rest on the workers,
    each once, in place."""
    gate = threading.Event()
    real = DaskExecutor._start_local

    def held(self, *args):
        assert gate.wait(60)
        return real(self, *args)

    monkeypatch.setattr(DaskExecutor, "_start_local", held)
    ex = DaskExecutor(workers=2)

    def tasks():
        for i in range(12):
            if i == 3:
                gate.set()
            if i == 4:
                assert ex.client is not None  # waits for the cluster
            yield i

    try:
        pids = dict(ex.stream(_pid_of, tasks(), 12))
        assert sorted(pids) == list(range(12))
        here = os.getpid()
        assert [pids[i] for i in range(5)] == [here] * 5
        assert here not in {pids[i] for i in range(5, 12)}
    finally:
        ex.close()


def test_same_release_on_serial_processes_and_dask(cluster, state, small_chunks):
    schema, strategy = pl94_schema(), detailed_strategy()
    runs = {
        name: release(
            state.records,
            schema,
            strategy,
            seed=7,
            geography=state.geography,
            progress=QUIET,
            **kwargs,
        )
        for name, kwargs in {
            "serial": {},
            "processes": {"executor": "processes", "workers": 2},
            "dask": {"executor": "dask", "address": cluster.scheduler_address},
        }.items()
    }
    blocks = runs["serial"].tree.levels[-1].size
    assert blocks > 2 * 20  # several measurement chunks on the block level
    _assert_same_release(runs["serial"], runs["processes"])
    _assert_same_release(runs["serial"], runs["dask"])
    other = release(state.records, schema, strategy, seed=8, geography=state.geography)
    assert not np.array_equal(other.counts[-1], runs["serial"].counts[-1])


def test_parquet_dataset_gives_the_release_of_the_same_dataframe(
    cluster, state, small_chunks, tmp_path
):
    schema, strategy = pl94_schema(), detailed_strategy()
    folder = _dataset(state.records, tmp_path / "persons")
    assert is_dataset(folder) and not is_dataset(folder / "part-0.parquet")
    common = dict(seed=3, geography=state.geography, progress=QUIET)
    on_cluster = release(
        str(folder),
        schema,
        strategy,
        constraints=state_total_invariant(),
        executor="dask",
        address=cluster.scheduler_address,
        **common,
    )
    with_invariant = release(
        state.records, schema, strategy, constraints=state_total_invariant(), **common
    )
    _assert_same_release(with_invariant, on_cluster)
    assert on_cluster.counts[1].sum() == len(state.records)  # the invariant, read on a worker
    # without a geography the units come from the distinct labels on the workers, recorded
    # as a disclosure, and the release is that of the DataFrame read the same way
    a = release(state.records, schema, strategy, seed=3, progress=QUIET)
    b = release(
        folder, schema, strategy, seed=3, progress=QUIET, executor="dask",
        address=cluster.scheduler_address,
    )  # fmt: skip
    _assert_same_release(a, b)
    assert "units read from data" in [d.name for d in b.ledger.disclosures]
    # a dataset folder on another executor is read whole with pandas: same release again
    c = release(folder, schema, strategy, seed=3, progress=QUIET)
    _assert_same_release(a, c)


@dataclass(frozen=True)
class _RowsTask:
    rows: RemoteArray


def _slow_pid(task: _RowsTask) -> int:
    time.sleep(0.2)
    return os.getpid()


def test_invariants_of_a_dataset_on_the_cluster_send_only_their_values(
    cluster, state, tmp_path, monkeypatch
):
    """Issue 30 A6: a declared invariant is evaluated on the worker holding the level; the
    client receives its value, never the node's histogram row (before: ``level[i]`` fetched
    the whole row of each invariant node)."""
    folder = _dataset(state.records, tmp_path / "persons")
    indexed = []
    getitem = RemoteLevel.__getitem__

    def recording(self, key):
        indexed.append(key)
        return getitem(self, key)

    monkeypatch.setattr(RemoteLevel, "__getitem__", recording)
    on_cluster = release(
        str(folder),
        pl94_schema(),
        detailed_strategy(),
        constraints=state_total_invariant(),
        executor="dask",
        address=cluster.scheduler_address,
        seed=3,
        geography=state.geography,
        progress=QUIET,
    )
    assert indexed and all(isinstance(k, slice) for k in indexed)  # chunks only, no row
    (bound,) = on_cluster.invariants[1].values()
    assert bound[0].value == len(state.records)
    with make_executor("dask", address=cluster.scheduler_address) as ex:
        _, truth = dataset_tree(folder, pl94_schema(), executor=ex, geography=state.geography)
        level = truth.counts[1]
        assert level.evaluate_rows([0], lambda node, row: int(row.sum())) == [len(state.records)]
        with pytest.raises(TypeError, match=r"sliced \(level\[a:b\]\), not indexed"):
            level[0]


def test_tasks_whose_rows_one_worker_holds_run_on_both(cluster):
    """A dataset's level is held by one worker, so every chunk's rows are cut there. The
    tasks still take turns over the workers, their rows following them; left to run where
    their rows were, 10 to 12 of these 12 ran on the holding worker (four runs)."""
    with DaskExecutor(address=cluster.scheduler_address) as ex:
        holder = sorted(ex.client.scheduler_info()["workers"])[0]
        rows = ex.client.scatter(
            [np.full(100_000, i, dtype=np.uint8) for i in range(12)], workers=[holder], hash=False
        )
        tasks = [_RowsTask(RemoteArray(f, (100_000,))) for f in rows]
        pids = [pid for _, pid in ex.stream(_slow_pid, iter(tasks), len(tasks))]
    assert len(pids) == 12
    assert len(set(pids)) == 2 and min(pids.count(p) for p in set(pids)) >= 4, pids


def test_parquet_dataset_bad_input_names_the_argument(cluster, state, tmp_path):
    schema, strategy = pl94_schema(), detailed_strategy()
    folder = _dataset(state.records.drop(columns=["RACE"]), tmp_path / "no_race")
    with pytest.raises(DataError) as err:
        release(folder, schema, strategy, seed=1, executor="dask",
                address=cluster.scheduler_address)  # fmt: skip
    message = str(err.value)
    assert f"data ({str(folder)!r}, a Parquet dataset) lacks the column(s) ['RACE']" in message
    assert "must be a column of the dataset" in message
    # a record outside the declared domain is found on a worker and raised here as itself
    bad = state.records.copy()
    bad["RACE"] = bad["RACE"].astype(np.int64)
    bad.loc[5, "RACE"] = 99
    folder = _dataset(bad, tmp_path / "bad_race")
    with pytest.raises(DomainError, match=r"column 'RACE' has 1 row\(s\) with values outside"):
        release(folder, schema, strategy, seed=1, executor="dask",
                address=cluster.scheduler_address, geography=state.geography)  # fmt: skip
    # a record in a unit the geography does not list
    geography = state.geography[state.geography["BLOCK"] != state.records["BLOCK"].iloc[0]]
    folder = _dataset(state.records, tmp_path / "units")
    with pytest.raises(HierarchyError, match=r"'BLOCK' has \d+ record\(s\) in units the geog"):
        release(folder, schema, strategy, seed=1, executor="dask",
                address=cluster.scheduler_address, geography=geography)  # fmt: skip


def test_unknown_scheduler_address_is_a_clear_error():
    with pytest.raises(ExecutorError) as err:
        DaskExecutor("tcp://127.0.0.1:9", timeout=1)
    assert "address ('tcp://127.0.0.1:9'): no Dask scheduler answered within 1 s" in str(err.value)
    with pytest.raises(ExecutorError, match=r"address \('localhost'\) must be a Dask scheduler"):
        DaskExecutor("localhost")
    with pytest.raises(ExecutorError, match=r"workers \(0\) must be a positive integer"):
        make_executor("processes", workers=0)


def test_sparse_counts_sum_exactly_and_cut_rows():
    # two partitions' counts of (node, cell) keys over 2 nodes x 3 cells
    a = SparseCounts.of_keys(np.array([0, 4, 4, 5]))
    b = SparseCounts.of_keys(np.array([4, 1, 0, 0]))
    total = SparseCounts.merge([a, b])
    assert total.keys.tolist() == [0, 1, 4, 5]
    assert total.counts.tolist() == [3, 1, 3, 1]
    np.testing.assert_array_equal(np.asarray(total.rows(0, 2, 3)), [[3, 1, 0], [0, 3, 1]])
    np.testing.assert_array_equal(np.asarray(total.rows(1, 2, 3)), [[0, 3, 1]])
    empty = np.zeros(0, dtype=np.int64)
    assert SparseCounts.merge([SparseCounts(empty, empty)]).keys.size == 0


def test_cli_runs_a_parquet_dataset_on_a_running_scheduler(cluster, tmp_path, capsys):
    """``topdown run --executor dask --address ...`` over a dataset folder gives the release the
    same data gives as one CSV file on the serial executor (the same seed)."""
    from tests.cli_helpers import data_config, embedded_subset
    from topdown.product.cli import main

    frame = embedded_subset(("01", "02"), rows_per_state=300)
    frame.to_csv(tmp_path / "data.csv", index=False)
    _dataset(frame, tmp_path / "persons", parts=2)
    text = data_config(4, ("STATE", "PUMA"))
    (tmp_path / "csv.toml").write_text(text, encoding="utf-8")
    (tmp_path / "dataset.toml").write_text(
        text.replace('path = "data.csv"', 'path = "persons"'), encoding="utf-8"
    )
    assert main(["-q", "run", str(tmp_path / "csv.toml"), "--out", str(tmp_path / "a")]) == 0
    args = ["--executor", "dask", "--address", cluster.scheduler_address, "--workers", "2"]
    assert (
        main(["-q", "run", str(tmp_path / "dataset.toml"), "--out", str(tmp_path / "b"), *args])
        == 0
    )
    names = ["measurements.csv", "microdata.csv", "hierarchy.csv"]
    names += [f"tables/{p.name}" for p in (tmp_path / "a" / "tables").glob("*.csv")]
    assert len(names) == 6
    for name in names:
        pd.testing.assert_frame_equal(
            pd.read_csv(tmp_path / "a" / name), pd.read_csv(tmp_path / "b" / name)
        )
    # a bad address on the command line names the option and states the rule
    capsys.readouterr()
    assert main(["-q", "run", str(tmp_path / "csv.toml"), "--address", "nowhere"]) == 2
    err = capsys.readouterr().err
    assert "--address" in err and "must be a Dask scheduler address" in err and "'nowhere'" in err
