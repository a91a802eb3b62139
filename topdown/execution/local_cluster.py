"""The Dask executor's own LocalCluster: how its workers start, and what they leave behind.

A LocalCluster's workers are new processes. Dask spawns them by default: each one starts a
fresh interpreter and imports ``distributed``, numpy, pandas, scipy and the engine before its
first task, 1.5-1.6 CPU-seconds apiece on the project's 2-core machine. Here they are forked
from a forkserver instead: one process imports all that once (1.1-1.2 CPU-s) and each worker is
a fork of it (0.05-0.07 CPU-s). On the 3-million-person PL94 state (detailed strategy, two
workers, four runs of each in turn) a release took 38.7-40.8 s and 72-76 CPU-s this way, against
42.0-45.4 s and 77-83 CPU-s with spawned workers (more than the 1.8 CPU-s of imports saved; the
rest was not broken down).

The forkserver is started for this cluster and stopped with it, so that

* the workers get the memory policy of ``execution.process_memory``: the nannies put it in this
  process's environment just before the first worker starts, and a forkserver started then
  inherits it (a forkserver started earlier, by other code, would not have it: then the
  workers are spawned, as Dask does by default);
* nothing is left running after the release, and a process that waits for its children (a
  benchmark counting their CPU) also counts the workers', which the forkserver waited for.

The standard library has no public call to ask whether its forkserver is running or to stop
it; ``_forkserver_pid`` and ``_stop`` (as in CPython 3.11) are used where they exist, and
without them the workers are spawned.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from dataclasses import dataclass
from typing import Any

from topdown.execution.process_memory import worker_environ

__all__ = [
    "PRELOAD",
    "LocalStart",
    "SchedulerGone",
    "forkserver_free",
    "quiet_lost_scheduler",
    "start",
    "stop",
]

log = logging.getLogger(__name__)

# imported once by the forkserver, so that a forked worker has them; a module the forkserver
# cannot import (an engine run from a source tree on Python 3.11, whose forkserver ignores the
# parent's sys.path) is skipped there and imported by each worker instead
PRELOAD = (
    "distributed",
    "numpy",
    "scipy.sparse",
    "pandas",
    "topdown.estimation.family",
    "topdown.measurement.measure",
)


def forkserver_free() -> bool:
    """Whether this process can start its own forkserver now: the platform has the method,
    and none is running (one started by other code would not have the workers' environment)."""
    server = _server()
    if server is None or not hasattr(server, "_stop"):
        return False
    return getattr(server, "_forkserver_pid", 0) is None


def _server() -> Any:
    """The standard library's forkserver handle (None where the platform has none)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return None
    from multiprocessing import forkserver

    return getattr(forkserver, "_forkserver", None)


@dataclass(frozen=True)
class LocalStart:
    """A started LocalCluster, and whether its workers came from a forkserver it started
    (which ``stop`` then ends, once the cluster is closed)."""

    cluster: Any
    forkserver: bool


def _settings(method: str, environ: dict[str, str]) -> dict[str, Any]:
    """Dask configuration for the cluster's processes, ``environ`` the workers' memory policy
    (why each value: see ``start``)."""
    settings: dict[str, Any] = {
        "distributed.worker.multiprocessing-method": method,
        "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
        "distributed.worker.profile.enabled": False,
        "distributed.admin.tick.interval": "1s",
        "distributed.admin.system-monitor.interval": "5s",
        "distributed.worker.memory.monitor-interval": "1s",
    }
    for key, value in environ.items():
        settings[f"distributed.nanny.pre-spawn-environ.{key}"] = value
    return settings


def start(cluster_cls: Any, workers: int) -> LocalStart:
    """A LocalCluster of ``workers`` single-threaded processes with the engine's settings.

    * Dask's nannies set MALLOC_TRIM_THRESHOLD_ in their workers, which also switches off
      glibc's adaptive mmap threshold: every large temporary array of the samplers is then
      mapped and unmapped afresh (measured: twice the system time of the same chunk in this
      process). The workers get the engine's own memory policy instead
      (``topdown.execution.process_memory.worker_environ``).
    * The workers do not sample their own stacks every 10 ms (the profiler behind the
      dashboard): the tasks are long array work, and the engine times them itself.
    * Every process of the cluster (this one runs the scheduler and the nannies) wakes its
      event loop for the admin ticks and monitors; at their defaults (20 ms, 0.5 s, 0.1 s) the
      wake-ups took the GIL from the worker's task often enough that a chunk's thread got
      84-86% of a core instead of 89-93% (per-chunk timing at 1M persons, measurement phase).
    * The workers are forked from a forkserver that this call starts (module docstring).

    The nannies write their pre-spawn environment into this process's ``os.environ`` for good;
    what they added is removed once the workers are up.
    """
    import dask

    method = "forkserver" if forkserver_free() else "spawn"
    environ = worker_environ()
    leaked = [key for key in environ if key not in os.environ]
    try:
        with dask.config.set(_settings(method, environ)):
            if method == "forkserver":
                from distributed.utils import get_mp_context

                # distributed sets its own preload list on first use; this one replaces it
                get_mp_context().set_forkserver_preload(list(PRELOAD))
            try:
                cluster = cluster_cls(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=":0",  # any free port: 8787 may be taken by another run
                )
            except BaseException:
                if method == "forkserver":
                    stop()
                raise
    finally:
        for key in leaked:
            os.environ.pop(key, None)
    log.info("local cluster: %d workers, started by %s", workers, method)
    return LocalStart(cluster, forkserver=method == "forkserver")


def stop() -> None:
    """Stop this process's forkserver and wait for it (after the cluster's workers are gone)."""
    halt = getattr(_server(), "_stop", None)
    if halt is not None:
        halt()


#: the exceptions a worker logs when its connection to the scheduler has closed
_CLOSED = ("CommClosedError", "StreamClosedError")


class SchedulerGone(logging.Filter):
    """Drops a local worker's reports that its connection to the scheduler closed.

    A local cluster's scheduler runs in the process that started it, so a closed connection
    means that process is ending: after a Ctrl-C (the cluster torn down at once) a worker's
    next heartbeat failed and the worker printed "Failed to communicate with scheduler during
    heartbeat" with a 30-line ``CommClosedError`` traceback on the terminal, after the
    command's one line (``tests/test_interrupt_dask.py``, now and then under load). The
    worker's stderr is the terminal's, out of reach of the parent's ``TeardownFilter``.
    Other records, a heartbeat that timed out among them, pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return exc is None or type(exc).__name__ not in _CLOSED


def quiet_lost_scheduler() -> None:
    """In a local cluster's worker: ``SchedulerGone`` on the worker's logger (once)."""
    logger = logging.getLogger("distributed.worker")
    if not any(isinstance(f, SchedulerGone) for f in logger.filters):
        logger.addFilter(SchedulerGone())
