"""The BLUE's covariances above the leaf level, mapped from disk rather than held in memory.

A release whose leaf level the BLUE takes a chunk of families at a time
(``topdown.blue.leaf_families``) keeps the levels above's covariances: ``Release.blue``
publishes their variances, and each chunk of leaves is estimated from its parents' final BLUE
(``LeafFamilies.parents_final``). With recoded queries they are ``(k, k)`` matrices per node
type and block (``topdown.blue.shared_matrices``): 82 MiB a DHC county type, final and
subtree, 2.3 GB for the 14 county types of 750,000 persons, and 0.25 GB for the state and the
root. Held in memory they were the largest part of the leaf passes' resident memory (the bulk
of a release's time and its peak), where only the chunks read them, each its own parents'.

So once the levels above are solved, ``above_on_disk`` writes every such matrix stack not
mapped yet (those of ``topdown.blue.mapped_stacks.MAP_BYTES`` or more are mapped as the
recursions make them) to a file of a private temporary directory and maps it read-only in
place of the array (``topdown.blue.mapped_stacks.MappedStacks``, which both use): the
``Blue`` and the ``LeafFamilies`` hold the mapped stacks (one object where there was one),
equal bit for bit. Pages are read in when used: a chunk
copies its parents' matrices out (``SharedMatrices.copy``, as it did from memory), then the
pages it read are handed back to the kernel (``madvise(MADV_DONTNEED)``; the file keeps the
bytes), so the process holds only the chunk's. Readers after the release (the variances of
``Release.blue``) read the pages they need the same way, as the kernel's cache of the file,
which it can drop under memory pressure (anonymous memory it could not: without swap).

Each file is unlinked as soon as it is made and the directory removed before returning:
nothing is left on disk whatever happens to the process, and the space is the kernel's to free
when the last array of a map goes (with the ``Blue``). On Windows, where a mapped file cannot
be unlinked, the arrays stay in memory.

Kept apart from ``topdown.blue.leaf_families`` (the chunked BLUE itself): this module only
moves arrays from memory to disk.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from topdown.blue.estimate import Blue, NodeSummary
from topdown.blue.leaf_families import LeafFamilies
from topdown.blue.mapped_stacks import MappedStacks, hand_back, is_mapped
from topdown.blue.shared_matrices import Covariance, SharedMatrices

__all__ = ["above_on_disk"]

log = logging.getLogger(__name__)


def above_on_disk(estimate: Blue, leaves: LeafFamilies) -> Blue:
    """``estimate`` with every shared matrices' stack above the leaves mapped from disk, and
    ``leaves.parents_final``'s likewise, sharing them (see the module docstring); each chunk
    ``leaves`` estimates then hands the pages it read back (``LeafFamilies.parents_read``).
    The caller drops ``estimate``: held, it would keep the stacks in memory. Unchanged on
    Windows (a mapped file cannot be unlinked there) and, with a warning, when writing fails
    (a full ``TMPDIR``): the release goes on with the stacks in memory (but those mapped as
    they were made)."""
    with MappedStacks.opened(min_bytes=1) as stacks:
        if stacks is None:
            return estimate
        # id -> (the old, the new): the old held so that no id is reused meanwhile
        arrays: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        held: dict[int, tuple[Covariance, Covariance]] = {}

        def one(c: Covariance) -> Covariance:
            if not isinstance(c, SharedMatrices) or c.values.size == 0:
                return c
            if id(c) not in held:
                if id(c.values) not in arrays:
                    mapped = c.values if is_mapped(c.values) else stacks.map(c.values)
                    arrays[id(c.values)] = (c.values, mapped)
                held[id(c)] = (c, SharedMatrices(arrays[id(c.values)][1], c.index))
            return held[id(c)][1]

        def level(row: Sequence[Covariance]) -> tuple[Covariance, ...]:
            return tuple(one(c) for c in row)

        try:
            blue = _replaced(estimate, level)
            top = leaves.parents_final
            final = NodeSummary(top.est, level(top.var), level(top.subtree))
        except OSError as err:
            # a full or unwritable TMPDIR costs memory, not the release: the arrays stay
            stacks.fail(err)
            return estimate
    mapped = [new for _, new in arrays.values()]
    leaves.parents_final = final
    leaves.parents_read = lambda: hand_back(*mapped)
    log.debug(
        "BLUE: %d covariance stack(s) above the leaves mapped from disk (%.0f MiB written now)",
        len(mapped),
        stacks.nbytes / 2**20,
    )
    return blue


def _replaced(
    estimate: Blue, level: Callable[[Sequence[Covariance]], tuple[Covariance, ...]]
) -> Blue:
    """``estimate`` with every level's block covariances (final and subtree) passed through
    ``level``."""
    return replace(
        estimate,
        block_scale=tuple(level(lv) for lv in estimate.block_scale),
        block_subtree_scale=tuple(level(lv) for lv in estimate.block_subtree_scale),
    )
