"""How the engine's processes get memory from the kernel: numpy's huge-page advice and glibc's
trimming, tuned where they cost a release time.

Both costs are the kernel's work on freshly mapped memory (system time), paid again every time
a large array is allocated in memory the process gave back. A release allocates many large
arrays (a level's histograms, the noisy answers, the published counts; a chunk's samples).

* **numpy's huge-page advice.** numpy asks for transparent huge pages on every large array
  (``madvise(MADV_HUGEPAGE)``). Where the kernel honours that with direct compaction (the common
  ``defrag=madvise`` setting), a first touch can stall while the kernel assembles 2 MiB pages.
  Measured on the PL94-shaped medium state (3 million persons, detailed query,
  ``benchmarks/bench_pl94.py``, serial, one run each): system time 12.1 s with the advice,
  4.6 s without; wall 80.0 and 73.8 s; the user time did not grow. So ``release`` and
  ``release_streamed`` run with the advice off (``hugepage_advice_off``) and put it back as it
  was when they return, and so do what runs after a release on its results: expanding the
  microdata (``expand_microdata``; the same state's 3 million records, 3 runs each: 1.1-1.3 s
  without the advice, 1.1-2.8 s with it, of which 0.3-1.9 s in the kernel) and writing a
  release folder.
* **glibc's trimming in a worker.** A Dask worker runs its tasks on a thread other than its
  main one, which glibc serves from a separate arena that gives whole heaps back to the kernel
  between chunks; each chunk then faults its pages in again. Sampled from ``/proc`` on the same
  state with a 2-worker local cluster during measurement: 20,000 to 65,000 page faults per
  second per worker and 6.5 to 10.7 s of the workers' system time per release at glibc's
  defaults (and with only the thresholds below set by ``mallopt`` after start-up); with one
  arena and fixed thresholds from start-up, under 1,000 faults per second and 1.3 s. The
  workers of a local Dask cluster start with these variables (``worker_environ``): one arena,
  a trim threshold of 256 MiB and an mmap threshold of 32 MiB (the largest an arena serves),
  and the huge-page advice off. A process pool's workers run their tasks on their main thread
  and set the thresholds and the advice when they start (``prepare_worker``). A worker keeps
  at most the trim threshold of freed memory for reuse.

A user who sets ``NUMPY_MADVISE_HUGEPAGE`` (numpy's own switch, read when numpy is imported) or
one of glibc's ``MALLOC_*`` variables keeps that choice. The engine tunes nothing in the workers
of a Dask cluster it did not start: set the variables of ``worker_environ`` in their
environment. glibc's settings are left alone in the user's own process.

numpy exposes its switch at run time only as ``_set_madvise_hugepage`` (numpy 1.x:
``numpy.core.multiarray``, 2.x: ``numpy._core.multiarray``), and ``mallopt`` exists only in
glibc; where either is missing this module does nothing, and only speed is at stake.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = [
    "ENV",
    "hugepage_advice_off",
    "prepare_worker",
    "worker_environ",
    "TRIM_THRESHOLD",
    "MMAP_THRESHOLD",
]

log = logging.getLogger(__name__)

#: numpy's environment switch for its huge-page advice.
ENV = "NUMPY_MADVISE_HUGEPAGE"
#: glibc's ``mallopt`` parameters (malloc.h) and the values a worker sets.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
TRIM_THRESHOLD = 256 << 20
MMAP_THRESHOLD = 32 << 20


def _setter() -> Callable[[bool], bool] | None:
    """numpy's run-time switch, or None if the user chose a setting through ``ENV``."""
    return None if os.environ.get(ENV) is not None else numpy_switch()


def numpy_switch() -> Callable[[bool], bool] | None:
    """numpy's run-time switch (returns the previous setting), or None if this numpy has none."""
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            found = getattr(importlib.import_module(module), "_set_madvise_hugepage", None)
        except ImportError:
            continue
        if callable(found):
            return found
    return None


@contextmanager
def hugepage_advice_off() -> Iterator[None]:
    """numpy's huge-page advice off inside the block (also a decorator), as before after it."""
    setter = _setter()
    if setter is None:
        yield
        return
    previous = bool(setter(False))
    try:
        yield
    finally:
        setter(previous)


def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt``, or None elsewhere (another C library, another system)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version"):  # musl has mallopt but ignores it
        return None
    mallopt: Callable[[int, int], int] = libc.mallopt
    return mallopt


def worker_environ() -> dict[str, str]:
    """The same settings as environment variables, for worker processes about to start (numpy
    and glibc read them at start-up), plus one arena: a Dask worker's task thread then shares
    the main arena, whose trimming the threshold governs (a thread's own arena gives whole
    heaps back regardless). A variable the user set is left out."""
    wanted = {
        ENV: "0",
        "MALLOC_ARENA_MAX": "1",
        "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD),
        "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
    }
    return {k: v for k, v in wanted.items() if os.environ.get(k) is None}


def prepare_worker() -> None:
    """In one of the engine's worker processes, for the process's life: numpy's huge-page
    advice off, glibc's trim and mmap thresholds fixed (see the module docstring), each unless
    the user's environment sets it."""
    setter = _setter()
    if setter is not None:
        setter(False)
    mallopt = _mallopt()
    if mallopt is None:
        return
    for variable, param, value in (
        ("MALLOC_TRIM_THRESHOLD_", _M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        ("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, MMAP_THRESHOLD),
    ):
        if os.environ.get(variable) is None and not mallopt(param, value):
            log.debug("mallopt refused %s = %d; glibc's default stays", variable, value)
