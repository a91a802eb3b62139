"""Executors: where the independent tasks of one level run.

The families of a level (a parent and its children) are independent estimation problems. They
run in this process (``serial``), in a local process pool (``processes``), or on a Dask cluster
(``dask``: a LocalCluster, or a running scheduler given by its address). Tasks carry only
public data and results come back in task order, so the release is the same whichever runs it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

from topdown._optional import require
from topdown.errors import TopDownError

__all__ = ["EXECUTORS", "Executor", "make_executor"]

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")
EXECUTORS = ("serial", "processes", "dask")


class ExecutorError(TopDownError, ValueError):
    """An unknown executor or bad executor option."""


class Executor:
    """Runs ``fn`` over tasks, in order; the serial base class."""

    name = "serial"

    def map(
        self,
        fn: Callable[[T], R],
        tasks: Sequence[T],
        progress: Callable | None = None,
        desc: str = "",
    ) -> list[R]:
        wrap = progress or (lambda it, total, d: it)
        return [fn(t) for t in wrap(tasks, len(tasks), desc)]

    def close(self) -> None:
        """Release workers (nothing to do for the serial executor)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ProcessExecutor(Executor):
    """A local process pool; small levels run serially (a pool costs more than it saves)."""

    name = "processes"

    def __init__(self, workers: int | None = None, min_tasks: int = 8):
        self.workers = workers or os.cpu_count() or 1
        self.min_tasks = min_tasks
        self._pool: ProcessPoolExecutor | None = None

    def map(self, fn, tasks, progress=None, desc=""):
        if len(tasks) < self.min_tasks or self.workers == 1:
            return super().map(fn, tasks, progress, desc)
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers)
        chunk = max(1, len(tasks) // (4 * self.workers))
        wrap = progress or (lambda it, total, d: it)
        return list(wrap(self._pool.map(fn, tasks, chunksize=chunk), len(tasks), desc))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


class DaskExecutor(Executor):
    """Tasks on a Dask cluster: ``address`` of a scheduler, or a LocalCluster of ``workers``."""

    name = "dask"

    def __init__(self, address: str | None = None, workers: int | None = None):
        require("dask", "the dask executor")
        from dask.distributed import Client, LocalCluster

        self._cluster = None
        if address:
            self.client = Client(address)
        else:
            self._cluster = LocalCluster(
                n_workers=workers or os.cpu_count() or 1,
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",  # any free port: 8787 may be taken by another run
            )
            self.client = Client(self._cluster)
        log.info("dask executor: %s", self.client)

    def map(self, fn, tasks, progress=None, desc=""):
        from dask.distributed import as_completed

        futures = self.client.map(fn, tasks, pure=False)
        wrap = progress or (lambda it, total, d: it)
        for _ in wrap(as_completed(futures), len(futures), desc):
            pass
        return self.client.gather(futures)

    def close(self) -> None:
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()


def make_executor(
    name: str = "serial", *, workers: int | None = None, address: str | None = None
) -> Executor:
    """An executor by name: ``serial``, ``processes`` or ``dask``."""
    if name == "serial":
        return Executor()
    if name == "processes":
        return ProcessExecutor(workers)
    if name == "dask":
        return DaskExecutor(address, workers)
    raise ExecutorError(f"executor ({name!r}) is unknown; known executors are {list(EXECUTORS)}")
