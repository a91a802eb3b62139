"""Ctrl-C and SIGTERM while a command runs: remembered even where Python cannot raise them.

A signal handler raises its exception in whatever Python code runs at that moment. When that
is a garbage-collector callback or a ``__del__`` (Dask's ``GCDiagnosis``, llvmlite's object
finalizers under numba), Python cannot propagate it: it prints "Exception ignored in ...",
a ``KeyboardInterrupt`` traceback, and carries on. A Ctrl-C during a Dask run was then lost:
the release completed and the command exited 0 after a traceback. And while a local Dask
cluster is torn down after an interrupt, its loggers report the closed connections
(``CommClosedError``) with tracebacks.

``handling_signals`` records every SIGINT and SIGTERM it receives, so the command can say
after the fact that it was interrupted (``received``); swallows the exception Python could not
raise instead of printing it; and ``TeardownFilter`` keeps the cluster's log records off the
terminal once a signal has arrived (and below WARNING, unless ``-v``, at any time).
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["Terminated", "handling_signals", "received", "TeardownFilter", "THIRD_PARTY"]

#: loggers of the libraries a run starts (a local Dask cluster and its event loop): their
#: INFO lines are not the user's business, and after an interrupt nothing they say is
THIRD_PARTY = ("distributed", "tornado", "asyncio", "matplotlib", "PIL", "numexpr")

_received: list[int] = []


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so it unwinds like Ctrl-C: the partial folder is
    removed and the claim on the output is given up."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def received() -> int | None:
    """The first signal (SIGINT or SIGTERM) received within ``handling_signals``, or None."""
    return _received[0] if _received else None


def _unraisable(hook: Any) -> Any:
    def unraisable(info: Any) -> None:
        if isinstance(info.exc_value, KeyboardInterrupt) and _received:
            return  # recorded by the handler; the command reports it when it returns
        hook(info)

    return unraisable


@contextmanager
def handling_signals() -> Iterator[None]:
    """Within the block: SIGINT and SIGTERM raise (``KeyboardInterrupt``, ``Terminated``) and
    are recorded; an interrupt Python cannot raise is not printed. Outside the main thread
    (an embedding application) the signals are left alone."""
    _received.clear()
    try:
        previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread
        previous = {}
    hook = sys.unraisablehook
    sys.unraisablehook = _unraisable(hook)
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class TeardownFilter(logging.Filter):
    """Drops the ``THIRD_PARTY`` loggers' records below WARNING (unless ``verbose``), and all
    of them once a signal has arrived (the teardown of an interrupted cluster)."""

    def __init__(self, verbose: bool) -> None:
        super().__init__()
        self.verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.split(".")[0] not in THIRD_PARTY:
            return True
        if _received:
            return False
        return self.verbose or record.levelno >= logging.WARNING
