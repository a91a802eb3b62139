"""Stacks of ``(k, k)`` matrices kept in unlinked temporary files and mapped read-only.

The recoded BLUE's covariances (``topdown.blue.shared_matrices``) are a ``(types, k, k)``
stack per level, block and kind (subtree, children's sum, final): with the DHC preset's
``k = 1,160`` a matrix is 10.8 MB, and a level's types grow with its nodes (a parent's type is
the multiset of its children's), so held in memory the stacks of every level and block made
the BLUE's peak (10 GB for 20,000 persons to the block). ``MappedStacks`` keeps such stacks
in files instead, for both of its users:

- as they are made (``MappedStacks.stack``): the recursions (``topdown.blue.block_recursions``)
  write each type's matrix to its place in a file (``os.pwrite``: the bytes go to the
  kernel's page cache, which writes them back to disk and may drop them; they are never this
  process's resident memory) and read it back through a read-only map of the file;
- after the fact (``MappedStacks.map``): a stack made in memory written whole
  (``topdown.blue.on_disk``, and a small stack of a level solved at once).

Reading a map brings its pages into the process's resident memory; ``hand_back`` returns
them to the kernel (``madvise(MADV_DONTNEED)``; the file keeps the bytes and a later read
reads them in again), which the recursions call after each type's step and the chunked leaf
passes after each chunk's copy of its parents' matrices.

Only stacks of at least ``MAP_BYTES`` go to files (the DHC preset's: every ``k = 1,160``
matrix); small ones (the PL94 preset's ``k <= 8``, even thousands of types) stay in memory.

Each file is created in a private directory (``tempfile.mkdtemp``, under ``TMPDIR``) and
unlinked at once (the open descriptor, then the map, keep its bytes), and the directory is
removed when the ``MappedStacks.opened`` block ends, whatever happens: nothing is left on disk,
even if the process is killed, and the kernel frees the space when the last array of a map
goes. On a ``tmpfs`` the files are memory still (not counted in the process's resident
memory until read). A write that fails (a full ``TMPDIR``) falls back to memory with a
warning, once: the stack being written is read back into memory and every later stack stays
there. On Windows, where an open file cannot be unlinked, nothing is mapped.
"""

from __future__ import annotations

import itertools
import logging
import mmap
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

__all__ = ["MAP_BYTES", "MadeStack", "MappedStacks", "hand_back", "is_mapped"]

log = logging.getLogger(__name__)

#: The bytes from which a stack goes to a file: a DHC block's single ``k = 1,160`` matrix
#: (10.8 MB) does; PL94's stacks (``k <= 8``: 16,384 types of 512 bytes) do not.
MAP_BYTES = 1 << 23


class MappedStacks:
    """The read-only maps of the files written in ``directory`` (see the module docstring).

    Attributes:
        directory: the private directory the files are created (and at once unlinked) in.
        min_bytes: stacks smaller than this stay in memory.
        files: how many stacks were given a file.
        nbytes: their bytes.
        failed: the write error after which every stack stays in memory, if any.
    """

    def __init__(self, directory: str, min_bytes: int | None = None) -> None:
        self.directory = directory
        self.min_bytes = MAP_BYTES if min_bytes is None else min_bytes
        self.files = 0
        self.nbytes = 0
        self.failed: OSError | None = None
        self._names = itertools.count()
        self._lock = threading.Lock()  # blocks solved on threads share one

    @classmethod
    @contextmanager
    def opened(cls, min_bytes: int | None = None) -> Iterator[MappedStacks | None]:
        """A ``MappedStacks`` over a new private directory, removed when the block ends (the
        maps made stay valid: their files were unlinked as made); ``min_bytes``: default
        ``MAP_BYTES``. None on Windows, or with
        a warning when the directory cannot be made: the stacks then stay in memory."""
        if os.name == "nt":
            yield None
            return
        try:
            directory = tempfile.mkdtemp(prefix="topdown-blue-")
        except OSError as err:
            log.warning("BLUE: the covariances stay in memory (no temporary directory: %s)", err)
            yield None
            return
        try:
            yield cls(directory, min_bytes)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def stack(self, shape: tuple[int, ...], dtype: np.dtype | type = float) -> MadeStack:
        """A stack ``shape`` to write a matrix at a time: in a file when it has at least
        ``min_bytes`` (and no write failed), else in memory."""
        return MadeStack(shape, dtype, self)

    def map(self, a: np.ndarray) -> np.ndarray:
        """``a`` written to a new file, mapped read-only: the array to hold in ``a``'s place.
        Raises the ``OSError`` when writing fails (nothing is left on disk)."""
        fd, out = self._new(a.shape, a.dtype)
        try:
            _write(fd, 0, a)
        finally:
            os.close(fd)
        return out

    def held(self, a: np.ndarray) -> np.ndarray:
        """A stack made in memory, mapped in its place when it has at least ``min_bytes``
        (else, or when writing fails, with a warning once, ``a`` itself)."""
        if a.nbytes < self.min_bytes or self.failed is not None:
            return a
        try:
            return self.map(a)
        except OSError as err:
            self.fail(err)
            return a

    def fail(self, err: OSError) -> None:
        """Writing failed: every later stack stays in memory (said once)."""
        if self.failed is None:
            log.warning(
                "BLUE: the covariances stay in memory (writing them to %s failed: %s)",
                self.directory,
                err,
            )
            self.failed = err

    def _new(self, shape: tuple[int, ...], dtype: np.dtype | type) -> tuple[int, np.ndarray]:
        """A new file of the stack's size, unlinked at once, its descriptor (open for writing)
        and the read-only map over it as an array ``shape``."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        path = os.path.join(self.directory, f"{next(self._names)}.bin")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.remove(path)
            os.ftruncate(fd, nbytes)
            m = mmap.mmap(fd, nbytes, access=mmap.ACCESS_READ)
        except BaseException:
            os.close(fd)
            raise
        with self._lock:  # the maps are not held here: each goes with its last array
            self.files += 1
            self.nbytes += nbytes
        return fd, np.frombuffer(m, dtype=dtype).reshape(shape)


class MadeStack:
    """A ``(types, k, k)`` stack written a matrix at a time (``put``), then read (``done``):
    in a file of ``maps`` (``MappedStacks.stack``) or in memory."""

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: np.dtype | type = float,
        maps: MappedStacks | None = None,
    ) -> None:
        self._maps = maps
        self._fd: int | None = None
        self._array: np.ndarray | None = None
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if maps is not None and maps.failed is None and nbytes >= maps.min_bytes:
            try:
                self._fd, self._array = maps._new(shape, dtype)
            except OSError as err:
                maps.fail(err)
        if self._array is None:
            self._array = np.empty(shape, dtype=dtype)

    @property
    def on_disk(self) -> bool:
        """Whether the matrices are written to a file (not held in memory)."""
        return self._fd is not None

    def put(self, t: int, matrix: np.ndarray, row: int = 0) -> None:
        """``matrix`` as type ``t``'s matrix, or as its rows from ``row`` on; several
        matrices (one axis more) as types ``t``, ``t + 1``, ... (one write)."""
        assert self._array is not None, "put after done"
        one = self._array[0]
        if self._fd is not None:
            offset = t * one.nbytes + row * one[0].nbytes
            try:
                _write(self._fd, offset, np.asarray(matrix, dtype=self._array.dtype))
                return
            except OSError as err:
                assert self._maps is not None
                self._maps.fail(err)
                self._array = np.array(self._array)  # what was written, into memory
                self._close()
        if np.ndim(matrix) == self._array.ndim:
            self._array[t : t + len(matrix)] = matrix
        else:
            self._array[t, row : row + np.shape(matrix)[0]] = matrix

    def done(self) -> np.ndarray:
        """The stack (read-only when mapped); no ``put`` after."""
        self._close()
        out, self._array = self._array, None
        assert out is not None, "done twice"
        return out

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _write(fd: int, offset: int, a: np.ndarray) -> None:
    """``a``'s bytes written at ``offset`` of the file ``fd`` (to the page cache)."""
    data = np.ascontiguousarray(a).data.cast("B")
    while data:
        done = os.pwrite(fd, data, offset)
        data, offset = data[done:], offset + done


def _map_of(a: np.ndarray) -> mmap.mmap | None:
    """The map ``a`` is a view of, if any."""
    base: object = a
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return base if isinstance(base, mmap.mmap) else None


def is_mapped(a: np.ndarray) -> bool:
    """Whether ``a`` is read from a map (``MappedStacks``), not held in memory."""
    return _map_of(a) is not None


def hand_back(*arrays: np.ndarray) -> None:
    """The pages read from the maps ``arrays`` view handed back to the kernel (the file keeps
    the bytes); arrays in memory are left alone."""
    for a in arrays:
        m = _map_of(a)
        if m is not None:
            m.madvise(mmap.MADV_DONTNEED)
