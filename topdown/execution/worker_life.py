"""How long a worker process lives: never longer than the process that started it.

A process pool's workers wait on a queue whose pipe they also hold open, so when the parent
dies without closing the pool (SIGKILL, the kernel's OOM killer, a crash) they wait forever:
``--executor processes --workers 1000`` left its workers running after the parent was killed.
Each worker of the engine's pools therefore watches its parent: :func:`exit_with_parent` starts
a daemon thread that ends the worker as soon as its parent process is gone (its parent id
changes: the orphan was adopted). The parent is whatever process forked the worker (this
process under ``fork``, the forkserver under ``forkserver``, which itself exits when the main
process is gone), so the chain ends either way.

Dask's workers need no watch: ``distributed`` ends a worker process when its nanny's pipe closes.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["exit_with_parent", "ORPHAN_EXIT", "POLL_SECONDS"]

ORPHAN_EXIT = 70  # the worker's exit status when its parent is gone (EX_SOFTWARE)
POLL_SECONDS = 0.25


def exit_with_parent(poll: float = POLL_SECONDS) -> threading.Thread:
    """In a worker: end this process (``os._exit``: no cleanup, nothing to save) within
    ``poll`` seconds of its parent's death. Returns the watching (daemon) thread."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll)
        os._exit(ORPHAN_EXIT)

    thread = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    thread.start()
    return thread
