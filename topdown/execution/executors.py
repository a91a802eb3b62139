"""Executors: where the independent tasks of one level run.

The families of a level (a parent and its children) and the measurement chunks of a level are
independent tasks. They run in this process (``serial``), in a local process pool
(``processes``), or on a Dask cluster (``dask``: a LocalCluster, or a running scheduler given by
its address). Tasks carry only what they need, and results come back in task order (``map``)
or tagged with their task's position (``stream``), so the release is the same whichever runs it
and with any number of workers.

Where the time goes on a parallel executor, and what this module does about it:

* per-task overhead (pickling, a round trip to a worker): ``map`` sends tasks in batches, about
  ``BATCHES_PER_WORKER`` per worker and level; that is enough batches for the workers to finish
  a level together, and few enough that a level of 4,500 small families costs a few dozen round
  trips, not thousands;
* workers waiting for this process: ``stream`` keeps a window of tasks in flight (two per
  worker) and sends the next as soon as one is done, with no barrier; measurement streams
  every chunk of every level this way. ``stream_batches`` streams batches of small tasks (the
  level-batched estimation's chunks), and the caller uses each batch's results while the
  workers run the next; the parallel executors' ``map`` is built on it, so a batch is sent
  while the workers run the ones before it (on Dask, a blocking scatter of a whole level, then
  the work, left the workers idle while this process serialised);
* a pool that costs more than it saves: fewer than ``min_tasks`` tasks (default 2: a lone
  task has nothing to share the workers with) run in this process. The tasks are chunks (of
  nodes to measure, of families to estimate), each worth shipping: with a higher threshold
  the last, partial batch of a level's measurement chunks ran here while the workers idled;
* a Dask task whose confidential rows already sit on the cluster (``RemoteArray``, see
  ``topdown.measurement.dask_input``) is sent to the data: only the public part of the task travels,
  and the rows are resolved on the worker.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import numpy as np

from topdown.errors import TopDownError
from topdown.execution import local_cluster
from topdown.execution.process_memory import prepare_worker
from topdown.execution.worker_life import exit_with_parent
from topdown.support.optional import require

__all__ = [
    "EXECUTORS",
    "BATCHES_PER_WORKER",
    "Executor",
    "ExecutorError",
    "ProcessExecutor",
    "DaskExecutor",
    "RemoteArray",
    "SchedulerUnreachable",
    "address_rule",
    "make_executor",
    "tasks_at_once",
]

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")
EXECUTORS = ("serial", "processes", "dask")
BATCHES_PER_WORKER = 8
Progress = Callable[[Iterable, int, str], Iterable]
_END = object()


class ExecutorError(TopDownError, ValueError):
    """An unknown executor, a bad executor option, or a scheduler that cannot be reached."""


class SchedulerUnreachable(ExecutorError):
    """No Dask scheduler answered at ``address`` (a well-formed one) within ``timeout``."""

    def __init__(self, address: str, timeout: float, reason: str):
        self.address, self.timeout, self.reason = address, timeout, reason
        super().__init__(
            f"address ({address!r}): no Dask scheduler answered within {timeout:g} s ({reason}); "
            f"cannot reach the Dask scheduler at {address}: start one (dask scheduler) or omit "
            "address for a local cluster"
        )


@dataclass(frozen=True)
class RemoteArray:
    """A task field whose array is held on a Dask cluster, not in this process.

    ``future`` is a ``dask.distributed.Future`` whose value converts to the array with
    ``np.asarray`` (``topdown.measurement.dask_input`` keeps confidential rows sparse until then).
    The Dask executor resolves it on the worker that runs the task; other executors cannot.
    """

    future: Any
    shape: tuple[int, ...]


class Executor:
    """Runs ``fn`` over tasks, in order; the serial base class."""

    name = "serial"
    workers = 1

    def map(
        self,
        fn: Callable[[T], R],
        tasks: Sequence[T],
        progress: Progress | None = None,
        desc: str = "",
    ) -> list[R]:
        wrap = progress or _no_progress
        return [fn(t) for t in wrap(tasks, len(tasks), desc)]

    def stream(
        self,
        fn: Callable[[T], R],
        tasks: Iterable[T],
        total: int,
        progress: Progress | None = None,
        desc: str = "",
    ) -> Iterator[tuple[int, R]]:
        """``(position, result)`` of each task as it completes, the tasks read lazily.

        Unlike ``map`` there is no barrier: a parallel executor keeps ``window`` tasks in
        flight, sending the next one as soon as one is done, so the workers never wait for
        this process to send a whole batch or to collect the last one (measurement streams
        every chunk of every level this way). ``total`` is the number of tasks (for the
        progress bar and the lone-task rule).
        """
        wrap = progress or _no_progress
        return iter(wrap(self._results(fn, tasks, total), total, desc))

    def stream_batches(
        self,
        fn: Callable[[T], R],
        tasks: Iterable[T],
        total: int,
        progress: Progress | None = None,
        desc: str = "",
    ) -> Iterator[tuple[int, R]]:
        """``stream`` for many small tasks: ``(position, result)`` of every task, the tasks
        sent in batches (``batches``) and a batch's results yielded together when it is done.

        A round trip per batch, not per task, and still no barrier: the caller uses each
        batch's results while the workers run the next (``progress`` counts batches).
        """
        parts = batches(total, self.workers)
        queue = iter(tasks)
        payloads = (list(itertools.islice(queue, len(r))) for r in parts)
        for j, values in self.stream(partial(run_batch, fn), payloads, len(parts), progress, desc):
            yield from zip(parts[j], values, strict=True)

    def _results(
        self, fn: Callable[[T], R], tasks: Iterable[T], total: int
    ) -> Iterator[tuple[int, R]]:
        """``stream``'s results, unwrapped: here, in task order."""
        return ((i, fn(t)) for i, t in enumerate(tasks))

    @property
    def window(self) -> int:
        """Tasks a parallel ``stream`` keeps in flight: two per worker, so each worker has
        its next task while it runs one."""
        return 2 * self.workers

    def close(self) -> None:
        """Release workers (nothing to do for the serial executor)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _no_progress(it: Iterable, total: int, desc: str) -> Iterable:
    return it


def batches(n_tasks: int, workers: int) -> list[range]:
    """Consecutive task ranges, about ``BATCHES_PER_WORKER`` per worker (fewer for few tasks).

    Depends only on the number of tasks and workers, and results are put back in task order,
    so batching never changes a result.
    """
    n = max(1, min(n_tasks, BATCHES_PER_WORKER * workers))
    edges = np.linspace(0, n_tasks, n + 1).round().astype(int)
    return [range(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def _in_order(done: Iterable[tuple[int, R]], total: int) -> list[R]:
    """``map``'s list: the ``(position, result)`` pairs of a stream, put back in task order."""
    out: list[Any] = [None] * total
    for i, value in done:
        out[i] = value
    return out


def run_batch(fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
    """One batch of tasks in a worker, in order."""
    return [fn(t) for t in tasks]


class ProcessExecutor(Executor):
    """A local process pool; a lone task runs in this process (see the module docstring)."""

    name = "processes"

    def __init__(
        self, workers: int | None = None, min_tasks: int = 2, preload: tuple[str, ...] = ()
    ):
        self.workers = _check_workers(workers)
        self.min_tasks = min_tasks
        self._pool: ProcessPoolExecutor | None = None
        if self.workers > 1:
            # start the workers now, before this process holds the histograms (a smaller
            # process to fork), and let them import the engine while the tree is built
            self._pool = ProcessPoolExecutor(max_workers=self.workers, initializer=_start_worker)
            for _ in range(self.workers):
                self._pool.submit(_warm_up, preload)

    def map(self, fn, tasks, progress=None, desc=""):
        if len(tasks) < self.min_tasks or self._pool is None:
            return super().map(fn, tasks, progress, desc)
        return _in_order(self.stream_batches(fn, tasks, len(tasks), progress, desc), len(tasks))

    def _results(self, fn, tasks, total):
        if total < self.min_tasks or self._pool is None:
            return super()._results(fn, tasks, total)
        pool = self._pool
        return _windowed(lambda t, _: pool.submit(fn, t), _first_done, tasks, self.window)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


class DaskExecutor(Executor):
    """Tasks on a Dask cluster: ``address`` of a scheduler, or a LocalCluster of ``workers``
    processes with one thread each."""

    name = "dask"

    def __init__(
        self,
        address: str | None = None,
        workers: int | None = None,
        timeout: float = 10.0,
        preload: tuple[str, ...] = (),
    ):
        require("dask", "the dask executor")
        from dask.distributed import Client, LocalCluster

        self._cluster: Any = None
        self._forkserver = False
        self._preload = preload
        if address:
            rule = address_rule(address)
            if rule:
                raise ExecutorError(f"address ({shown(address)}) {rule}")
            try:
                client = Client(address, timeout=timeout)
            except (OSError, TimeoutError) as err:
                raise SchedulerUnreachable(address, timeout, type(err).__name__) from None
            self.workers = max(1, len(client.scheduler_info().get("workers", {})))
            self._client: Future[Any] = Future()
            self._client.set_result(client)
        else:
            # a local cluster starts in the background (its workers start and import the
            # engine) while this process builds the tree; the first use of ``client`` waits
            self.workers = _check_workers(workers)
            starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dask-start")
            self._client = starter.submit(self._start_local, Client, LocalCluster)
            starter.shutdown(wait=False)

    def _start_local(self, client_cls: Any, cluster_cls: Any) -> Any:
        started = local_cluster.start(cluster_cls, self.workers)
        self._cluster = started.cluster
        self._forkserver = started.forkserver
        # results come straight from the workers: through the scheduler (Dask's default) each
        # one crossed this process twice more (worker to scheduler to client, both here);
        # measured: 1.6 GB of results took 3.1-3.9 CPU-s here that way, 1.4-1.6 s direct
        client = client_cls(self._cluster, direct_to_workers=True)
        # the workers import the task modules and set their memory policy
        client.run(_warm_up, self._preload)
        log.info("dask executor: %s", client)
        return client

    @property
    def client(self) -> Any:
        """The ``dask.distributed.Client`` (waits for a local cluster still starting)."""
        return self._client.result()

    def map(self, fn, tasks, progress=None, desc=""):
        if any(_remote_fields(t) for t in tasks):
            # tasks whose rows are on the cluster: one each, the rows sent to the task's worker
            return _in_order(self.stream(fn, tasks, len(tasks), progress, desc), len(tasks))
        # the rest in batches, streamed: the next batch is scattered while the workers run
        return _in_order(self.stream_batches(fn, tasks, len(tasks), progress, desc), len(tasks))

    def _results(self, fn, tasks, total):
        queue = iter(tasks)
        here = 0
        # while a local cluster is still starting (its workers start and import the engine,
        # 1.2-1.5 s for two workers on the project's machine), run the first tasks here
        # instead of waiting for it; where a task runs never changes its result
        while not self._client.done():
            task = next(queue, _END)
            if task is _END:
                return
            if _remote_fields(task):  # rows on the cluster: only the cluster can run it
                queue = itertools.chain([task], queue)
                break
            yield here, fn(task)
            here += 1
        for i, result in self._on_cluster(fn, queue):
            yield here + i, result

    def _on_cluster(
        self, fn: Callable[[Any], Any], tasks: Iterator[Any]
    ) -> Iterator[tuple[int, Any]]:
        from dask.distributed import as_completed

        client = self.client
        done = as_completed()
        # a local cluster's workers are reachable from here: the data goes straight to one
        # (not through the scheduler, which runs in this process and would copy it twice);
        # a remote cluster's workers may not be, so there the scheduler relays it
        direct = self._cluster is not None

        # each worker gets its share of the window and, when one of its tasks is done, the next
        # task: scattering blindly (Dask places scattered data round-robin) queued tasks
        # behind a busy worker while the other one idled or fetched their data
        addresses = sorted(client.scheduler_info().get("workers", {})) or [None]
        slots = iter([addresses[i % len(addresses)] for i in range(self.window)])
        owner: dict[str, Any] = {}

        def submit(task: Any, freed: Any) -> Any:
            worker = owner.pop(freed.key) if freed is not None else next(slots)
            # no worker known yet (the scheduler listed none when the window was laid out):
            # Dask refuses allow_other_workers= without workers=, so the task goes anywhere
            to = [worker] if worker is not None else None
            remote = _remote_fields(task)
            if remote:
                # the rows held on the cluster come to the task's worker: left to run where
                # they were, a level's chunks crowded onto the one worker holding the level
                # (3M persons: measurement 31-33 s wall for 37-38 CPU-s of the workers)
                public = dataclasses.replace(task, **{k: None for k in remote})
                arrays = {k: a.future for k, a in remote.items()}
                future = client.submit(
                    _with_arrays,
                    fn,
                    public,
                    arrays,
                    workers=to,
                    allow_other_workers=to is not None,
                    pure=False,
                )
            else:
                # scattered while the workers run the tasks already in flight
                [data] = client.scatter([task], hash=False, direct=direct, workers=to)
                future = client.submit(
                    fn, data, workers=to, allow_other_workers=to is not None, pure=False
                )
            owner[future.key] = worker
            done.add(future)
            return future

        return _windowed(submit, lambda pending: next(done), tasks, self.window)

    def close(self) -> None:
        try:
            client = self.client
        except Exception:  # the cluster never started: nothing to close but what it left
            client = None
        if client is not None:
            client.close()
        if self._cluster is not None:
            self._cluster.close()
        if self._forkserver:  # its workers are gone: nothing of the cluster is left running
            local_cluster.stop()
            self._forkserver = False


def _first_done(pending: dict[Any, int]) -> Any:
    """One finished future of ``pending`` (a process pool's)."""
    finished, _ = wait(pending, return_when=FIRST_COMPLETED)
    return next(iter(finished))


def _windowed(
    submit: Callable[[Any, Any], Any],
    next_done: Callable[[dict[Any, int]], Any],
    tasks: Iterable[Any],
    window: int,
) -> Iterator[tuple[int, Any]]:
    """Keep ``window`` futures in flight: yield ``(position, result)`` as each completes and
    submit the next task, ``submit(task, freed)`` with the future whose slot it takes (None
    while the window fills). A future is dropped once its result is yielded (a Dask cluster
    then forgets it and its scattered inputs). When a task fails, the futures still pending
    are cancelled; a caller that stops iterating early cancels them by closing the iterator
    (otherwise they finish, and their results are dropped)."""
    pending: dict[Any, int] = {}
    queue = enumerate(tasks)
    try:
        for i, task in queue:
            pending[submit(task, None)] = i
            if len(pending) >= window:
                break
        while pending:
            future = next_done(pending)
            i = pending.pop(future)
            result = future.result()
            for j, task in queue:
                pending[submit(task, future)] = j
                break
            yield i, result
    finally:
        for future in pending:
            future.cancel()


def _remote_fields(task: object) -> dict[str, RemoteArray]:
    """The fields of a dataclass task that hold a ``RemoteArray``."""
    if not dataclasses.is_dataclass(task) or isinstance(task, type):
        return {}
    return {
        f.name: v
        for f in dataclasses.fields(task)
        if isinstance(v := getattr(task, f.name), RemoteArray)
    }


def _with_arrays(fn: Callable[[Any], R], task: Any, values: dict[str, Any]) -> R:
    """On the worker: put the resolved arrays into the task and run it."""
    return fn(dataclasses.replace(task, **{k: np.asarray(v) for k, v in values.items()}))


def _warm_up(preload: tuple[str, ...]) -> None:
    """Import the modules the tasks run (a new worker process would import them on its first
    task), set the worker's memory policy for the process's life (``process_memory``), and
    keep its reports of a scheduler gone off the terminal (``local_cluster.SchedulerGone``).

    The caller names the modules (``preload``): the executors run whatever they are given and
    import nothing of the layers above them."""
    prepare_worker()
    local_cluster.quiet_lost_scheduler()
    for name in preload:
        importlib.import_module(name)


#: The most workers a local executor starts: WORKERS_PER_CPU per CPU, never more than
#: MAX_WORKERS (each is a process with the engine imported, ~100 MB; more only thrash).
WORKERS_PER_CPU = 4
MAX_WORKERS = 1024


def worker_limit() -> int:
    """The most workers this machine runs: ``min(MAX_WORKERS, WORKERS_PER_CPU x CPUs)``."""
    return min(MAX_WORKERS, WORKERS_PER_CPU * (os.cpu_count() or 1))


def shown(value: object) -> str:
    """A value for a message, a huge integer abbreviated (``10**30`` is not printed whole)."""
    text = repr(value)
    if isinstance(value, int) and len(text) > 20:
        return f"{text[:6]}...({len(text)} digits)"
    return text if len(text) <= 60 else text[:57] + "..."


def workers_rule(workers: int) -> str:
    """Why a positive worker count is more than this machine runs ("" when it is not)."""
    limit = worker_limit()
    if workers <= limit:
        return ""
    return (
        f"is more than this machine runs: at most {limit} ({WORKERS_PER_CPU} per CPU, "
        f"{os.cpu_count() or 1} CPU(s), never more than {MAX_WORKERS})"
    )


#: The protocols a scheduler is reached by (``inproc://`` is within one process only).
ADDRESS_PROTOCOLS = ("tcp", "tls", "ws", "wss", "ucx")
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?)$")


def address_rule(address: object) -> str:
    """Why ``address`` is not a Dask scheduler address this process can reach ("" when it is):
    ``[PROTOCOL://]HOST:PORT``, a network protocol, a port in 1..65535, TLS configured for
    ``tls://`` and ``wss://``."""
    head = "must be a Dask scheduler address such as 'tcp://host:8786' ([PROTOCOL://]HOST:PORT)"
    if not isinstance(address, str):
        return f"{head}, a string"
    if any(c.isspace() or not c.isprintable() for c in address):
        return f"{head}: it holds a space or a control character"
    protocol, sep, rest = address.partition("://")
    if not sep:
        protocol, rest = "tcp", address
    if protocol not in ADDRESS_PROTOCOLS:
        return (
            f"{head}: the protocol {protocol + '://'!r} does not reach a scheduler in another "
            f"process; use one of {[p + '://' for p in ADDRESS_PROTOCOLS]}"
        )
    host, colon, port = rest.rpartition(":")
    if not colon or not _HOST.match(host) or not port.isdigit() or not 0 < int(port) < 65536:
        return f"{head}: HOST:PORT is missing or malformed (the port is a number in 1..65535)"
    if protocol in ("tls", "wss") and not _tls_configured():
        return (
            f"{head}: {protocol}:// needs TLS certificates, and none are configured (dask's "
            "distributed.comm.tls.client.cert / .key / .ca-file settings)"
        )
    return ""


def _tls_configured() -> bool:
    """Whether dask's configuration names a client certificate (what ``tls://`` needs)."""
    try:
        import dask.config
    except ImportError:
        return False
    return bool(dask.config.get("distributed.comm.tls.client.cert", None))


def _check_workers(workers: int | None) -> int:
    if workers is None:
        return os.cpu_count() or 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ExecutorError(
            f"workers ({shown(workers)}) must be a positive integer (or None for one per CPU)"
        )
    rule = workers_rule(workers)
    if rule:
        raise ExecutorError(f"workers ({shown(workers)}) {rule}")
    return workers


def _start_worker() -> None:
    """A pool worker's start: the memory settings, and its end with its parent."""
    prepare_worker()
    exit_with_parent()


def tasks_at_once(name: str, workers: int | None = None) -> int:
    """How many tasks ``make_executor(name, workers=workers)`` runs at once: one serially,
    else its workers (by default one per CPU of this machine; a Dask cluster given by
    address may have others), known before the executor is made."""
    return 1 if name == "serial" else _check_workers(workers)


def make_executor(
    name: str = "serial",
    *,
    workers: int | None = None,
    address: str | None = None,
    preload: tuple[str, ...] = (),
) -> Executor:
    """An executor by name: ``serial``, ``processes`` or ``dask``; ``preload`` names the modules
    its tasks run, which a parallel executor's workers import as they start."""
    if name == "serial":
        return Executor()
    if name == "processes":
        return ProcessExecutor(workers, preload=preload)
    if name == "dask":
        return DaskExecutor(address, workers, preload=preload)
    raise ExecutorError(f"executor ({name!r}) is unknown; known executors are {list(EXECUTORS)}")
