"""Wall and CPU seconds per phase of a release, for logs, the release folder and benchmarks."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["PhaseClock"]


class PhaseClock:
    """Adds the wall and CPU (this process) seconds of each phase into ``timings`` as
    ``<phase>_wall`` and ``<phase>_cpu``; a phase entered several times (one per subtree of a
    streamed release) accumulates."""

    def __init__(self, timings: dict[str, float]):
        self.timings = timings

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            for key, took in (
                (f"{phase}_wall", time.perf_counter() - wall),
                (f"{phase}_cpu", time.process_time() - cpu),
            ):
                self.timings[key] = self.timings.get(key, 0.0) + took
