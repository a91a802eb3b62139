"""The program's entry point (``topdown``, ``python -m topdown``), light enough to start first.

It imports nothing heavy itself: the command line (numpy, pandas, the engine) is imported
inside :func:`run`, so a Ctrl-C or SIGTERM that lands while those imports run prints one line
and exits with the documented code (130, 143) instead of a traceback.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import NoReturn

__all__ = ["run"]

_STARTING = "while starting; nothing was written"


class _TerminatedWhileStarting(KeyboardInterrupt):
    pass


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _TerminatedWhileStarting


def run() -> NoReturn:
    """Import the command line and run it (``topdown.product.cli.run``)."""
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread
        previous = None
    try:
        from topdown.product.cli import run as run_cli
    except _TerminatedWhileStarting:
        print(f"topdown: terminated (SIGTERM) {_STARTING}", file=sys.stderr)
        raise SystemExit(128 + signal.SIGTERM) from None
    except KeyboardInterrupt:
        print(f"topdown: interrupted {_STARTING}", file=sys.stderr)
        raise SystemExit(130) from None
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)
    run_cli()
