"""The Dask executor's own LocalCluster: workers forked from a forkserver it starts and stops,
spawned when another forkserver is already running, and results fetched from the workers
without passing through the scheduler."""

from __future__ import annotations

import logging
import multiprocessing
import os

import pytest

pytest.importorskip("distributed", reason="the 'dask' extra is not installed")

from topdown.execution import local_cluster, process_memory
from topdown.execution.executors import DaskExecutor

pytestmark = pytest.mark.skipif(
    "forkserver" not in multiprocessing.get_all_start_methods(),
    reason="this platform has no forkserver",
)


@pytest.fixture(autouse=True)
def no_forkserver():
    """Each test starts with no forkserver in this process: one left by other tests (a process
    pool whose Python starts its workers by forkserver) would make the executor spawn. The
    standard library starts a stopped forkserver again when one is next needed."""
    local_cluster.stop()
    yield


def _parent(_: object = None) -> int:
    return os.getppid()


def _environ(keys: list[str]) -> dict[str, str | None]:
    return {k: os.environ.get(k) for k in keys}


def _sum(n: int) -> int:
    return sum(range(n))


def _quieted() -> bool:
    import logging

    logger = logging.getLogger("distributed.worker")
    return any(isinstance(f, local_cluster.SchedulerGone) for f in logger.filters)


def _record(exc: BaseException | None) -> logging.LogRecord:
    info = (type(exc), exc, None) if exc is not None else None
    return logging.LogRecord("distributed.worker", logging.ERROR, "w.py", 1, "msg", (), info)


def test_a_workers_report_of_its_scheduler_gone_is_dropped_and_others_pass():
    """A closed connection (the parent, which runs the scheduler, is ending) is dropped; a
    heartbeat that timed out, any other error and a record without an exception pass."""
    from distributed.comm.core import CommClosedError
    from tornado.iostream import StreamClosedError

    gone = local_cluster.SchedulerGone()
    assert not gone.filter(_record(CommClosedError("in <TCP (closed) heartbeat_worker>")))
    assert not gone.filter(_record(StreamClosedError()))
    assert gone.filter(_record(TimeoutError("heartbeat")))
    assert gone.filter(_record(OSError("other")))
    assert gone.filter(_record(None))


def test_workers_are_forked_from_a_forkserver_that_is_gone_after_close():
    assert local_cluster.forkserver_free()
    ex = DaskExecutor(workers=2)
    try:
        parents = set(ex.client.run(_parent).values())
        # not this process (whose nannies would have spawned them), one forkserver for both
        assert len(parents) == 1 and os.getpid() not in parents
        assert not local_cluster.forkserver_free()  # it is running, and it is the executor's
        # the forkserver was started with the memory policy the nannies put in the environment
        wanted = process_memory.worker_environ()
        for environ in ex.client.run(_environ, list(wanted)).values():
            assert environ == wanted
        assert ex.map(_sum, [10, 100, 1000]) == [45, 4950, 499500]
        # each worker keeps its reports of the scheduler gone off the terminal
        assert set(ex.client.run(_quieted).values()) == {True}
    finally:
        ex.close()
    assert local_cluster.forkserver_free()  # stopped: nothing of the cluster is left running
    assert not set(process_memory.worker_environ()) & set(os.environ)


def _noop() -> None:
    return None


def test_a_forkserver_started_by_other_code_is_neither_used_nor_stopped():
    """Another user's forkserver may lack the workers' environment: the workers are spawned
    (their parent is this process, where the nannies run) and that forkserver keeps running."""
    context = multiprocessing.get_context("forkserver")
    process = context.Process(target=_noop)
    process.start()
    process.join()
    try:
        assert not local_cluster.forkserver_free()
        ex = DaskExecutor(workers=2)
        try:
            assert set(ex.client.run(_parent).values()) == {os.getpid()}
        finally:
            ex.close()
        assert not local_cluster.forkserver_free()  # still theirs, still running
    finally:
        local_cluster.stop()
    assert local_cluster.forkserver_free()


def test_results_come_from_the_workers_not_through_the_scheduler():
    """The scheduler runs in this process; gathering through it copied every result twice
    more here. Its event log records each gather it serves: none for the executor's tasks."""
    ex = DaskExecutor(workers=2)
    try:
        assert ex.client is not None  # up: tasks would run here while it starts
        assert ex.map(_sum, list(range(40))) == [n * (n - 1) // 2 for n in range(40)]
        events = ex._cluster.scheduler.get_events("all")
        assert not [e for _, e in events if e.get("action") == "gather"]
        # the same client through the scheduler does log it (the check can see a gather)
        ex.client.gather(ex.client.submit(_sum, 7), direct=False)
        events = ex._cluster.scheduler.get_events("all")
        assert [e for _, e in events if e.get("action") == "gather"]
    finally:
        ex.close()
