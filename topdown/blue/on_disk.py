"""The BLUE's covariances above the leaf level, on disk while the passes read the leaf chunks.

A release whose leaf level the BLUE takes a chunk of families at a time
(``topdown.blue.leaf_families``) holds the levels above's covariances for the whole release:
``Release.blue`` publishes their variances, and each chunk of leaves is estimated from its
parents' final BLUE (``LeafFamilies.parents_final``). With recoded queries they are ``(k, k)``
matrices per node type and block (``topdown.blue.shared_matrices``): 82 MiB a DHC county type,
final and subtree, 2.3 GB for the 14 county types of 750,000 persons, beside 0.25 GB for the
state and the root. During the leaf level's passes, the bulk of a release's time and its peak
memory, only the chunks read them, each its own parents' rows.

So while the passes run (``AboveOnDisk``) every such matrix stack is written to a ``.npy`` file
of a private temporary directory (``tempfile.mkdtemp``, under ``TMPDIR``: on a disk, not a
``tmpfs``, for the memory to be given back) and mapped read-only in place of the array; the
``Blue`` and the ``LeafFamilies`` hold the mapped stacks. A chunk copies its parents' matrices
out (``SharedMatrices.copy``, as it did from memory), then the pages it read are handed back to
the kernel (``madvise(MADV_DONTNEED)``: the file keeps the bytes), so the process holds only
the chunk's. When the passes end the stacks are read back into memory, equal bit for bit, the
``Blue`` and the ``LeafFamilies`` sharing them as before, and the directory is removed (also
when the passes raise). Readers after the release see the arrays they saw before.

Kept apart from ``topdown.blue.leaf_families`` (the chunked BLUE itself): this module only
moves arrays between memory and disk, around the passes.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from types import TracebackType

import numpy as np

from topdown.blue.estimate import Blue, NodeSummary
from topdown.blue.leaf_families import LeafFamilies
from topdown.blue.shared_matrices import Covariance, SharedMatrices

__all__ = ["AboveOnDisk"]

log = logging.getLogger(__name__)


class AboveOnDisk:
    """The covariances of a chunked BLUE's levels above the leaves (every block's shared
    matrices, final and subtree), on disk and mapped for the life of a ``with`` block: the
    passes of the leaf level run inside it (see the module docstring).

    ``blue`` is the estimate reading the mapped stacks, to hold in the given one's place inside
    the block (the given one, kept, would keep them in memory); ``loaded()`` the estimate with
    them read back into memory (the ``LeafFamilies``' too), equal to the given one. Leaving the
    block removes the directory. Without leaves (``leaves`` None) nothing is written and
    ``blue`` and ``loaded()`` are the given estimate.
    """

    def __init__(self, estimate: Blue | None, leaves: LeafFamilies | None) -> None:
        self.directory: str | None = None
        self.blue = estimate
        self._leaves = leaves
        self._maps: list[mmap.mmap] = []

    @property
    def bytes_on_disk(self) -> int:
        """The bytes of the stacks written (each distinct stack once)."""
        return sum(len(m) for m in self._maps)

    def __enter__(self) -> AboveOnDisk:
        if self.blue is None or self._leaves is None:
            return self
        self.directory = tempfile.mkdtemp(prefix="topdown-blue-")
        try:
            self.blue = self._swap(self._write)
            self._leaves.parents_read = self.pages_read
        except BaseException:
            self._remove()
            raise
        log.debug(
            "BLUE: %d covariance stack(s) above the leaves on disk (%.0f MiB)",
            len(self._maps),
            self.bytes_on_disk / 2**20,
        )
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._remove()

    def loaded(self) -> Blue | None:
        """The estimate with the mapped stacks read back into memory, and the
        ``LeafFamilies``' parents' covariances too (sharing them, as before the block)."""
        if self._maps and self.blue is not None:
            self.blue = self._swap(np.array)
        return self.blue

    def pages_read(self) -> None:
        """Hands the pages read from the mapped stacks back to the kernel (the file keeps
        the bytes): called when a chunk has copied its parents' matrices out."""
        for m in self._maps:
            if not m.closed:
                m.madvise(mmap.MADV_DONTNEED)

    def _swap(self, move: Callable[[np.ndarray], np.ndarray]) -> Blue:
        """The estimate with every shared matrices' values above the leaves replaced by
        ``move`` of them, and the ``LeafFamilies``' parents' covariances likewise: each
        distinct array moved once, each distinct ``SharedMatrices`` remade once (the estimate
        and the leaves hold the same ones, and so do the root's final and subtree)."""
        assert self.blue is not None and self._leaves is not None
        # id -> (the old, the new): the old held so that no id is reused meanwhile
        arrays: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        held: dict[int, tuple[Covariance, Covariance]] = {}

        def one(c: Covariance) -> Covariance:
            if not isinstance(c, SharedMatrices) or c.values.size == 0:
                return c
            if id(c) not in held:
                if id(c.values) not in arrays:
                    arrays[id(c.values)] = (c.values, move(c.values))
                held[id(c)] = (c, SharedMatrices(arrays[id(c.values)][1], c.index))
            return held[id(c)][1]

        def level(row: Sequence[Covariance]) -> tuple[Covariance, ...]:
            return tuple(one(c) for c in row)

        blue = replace(
            self.blue,
            block_scale=tuple(level(lv) for lv in self.blue.block_scale),
            block_subtree_scale=tuple(level(lv) for lv in self.blue.block_subtree_scale),
        )
        top = self._leaves.parents_final
        self._leaves.parents_final = NodeSummary(top.est, level(top.var), level(top.subtree))
        return blue

    def _write(self, a: np.ndarray) -> np.ndarray:
        """``a`` written to a new file of the directory and mapped read-only in its place."""
        assert self.directory is not None
        path = os.path.join(self.directory, f"{len(self._maps)}.bin")
        with open(path, "wb+") as f:
            np.ascontiguousarray(a).tofile(f)
            f.flush()
            self._maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        return np.frombuffer(self._maps[-1], dtype=a.dtype).reshape(a.shape)

    def _remove(self) -> None:
        """Removes the directory. A map still read (the mapped estimate held elsewhere, as
        on an exception) is unmapped when its last array goes, the file's blocks then."""
        if self._leaves is not None:
            self._leaves.parents_read = None
        for m in self._maps:
            with contextlib.suppress(BufferError):
                m.close()
        self._maps = [m for m in self._maps if not m.closed]
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
