"""Progress reporting: a bar on a terminal, plain log lines otherwise.

Long phases (measuring, estimating a level) report nodes done / total. On a terminal that is a
tqdm bar on stderr; elsewhere (CI, a log file) it is an INFO line every few seconds, so logs
stay readable. Elapsed time and rate are diagnostics: they are logged at DEBUG (``-v``) only, so
a default run's saved log carries no timings. ``quiet`` turns both off.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

__all__ = ["Progress"]

log = logging.getLogger("topdown.support.progress")
T = TypeVar("T")


class Progress:
    """Factory of progress wrappers, configured once at the edge (CLI or API)."""

    def __init__(self, *, enabled: bool = True, bar: bool | None = None, every: float = 5.0):
        self.enabled = enabled
        self.bar = sys.stderr.isatty() if bar is None else bar
        self.every = every

    def __call__(self, iterable: Iterable[T], total: int, desc: str) -> Iterator[T]:
        if not self.enabled:
            yield from iterable
            return
        if self.bar:
            from tqdm import tqdm

            yield from tqdm(iterable, total=total, desc=desc, unit="node", leave=False)
            return
        start = last = time.perf_counter()
        done = 0
        for item in iterable:
            yield item
            done += 1
            now = time.perf_counter()
            if now - last >= self.every:
                last = now
                log.info("%s: %d/%d nodes", desc, done, total)
                log.debug("%s: %.1f s, %.0f nodes/s", desc, now - start, done / (now - start))
        elapsed = time.perf_counter() - start
        if total:
            log.info("%s: %d/%d nodes", desc, done, total)
            log.debug("%s: %d nodes in %.2f s", desc, done, elapsed)
