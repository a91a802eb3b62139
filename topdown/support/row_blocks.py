"""Level-wide element-wise passes run a block of nodes at a time.

The BLUE's largest arrays are a level's (nodes, cells) floats: about a gigabyte for the leaf
level of a 3-million-person state with 2,016 cells. A chain of numpy steps over such an array
(subtract, subtract, scale) reads and writes it once per step; done a block of rows at a time,
the block stays in a core's cache and the array is read and written once.

The same holds for the kernel's work: a level-sized temporary is fresh memory, whose pages
the kernel maps and zeroes on first touch (measured at about 3 microseconds per 4 KiB page on
the benchmark machine, as much as the arithmetic); a block-sized one is reused from the heap.
Measured on the 3-million-person state's production BLUE (its saved measurements, 3 runs
each): 6.4 to 11.9 s before, 4.7 to 6.9 s by blocks. Running the blocks on two threads did not
shorten it (5.0 to 6.1 s): what remains is mostly the kernel's and numpy's per-call work.
Single steps that make no level-sized temporary (an in-place broadcast sum, a mean) gain
nothing from blocks and are left whole. ``topdown.blue.error_estimates`` reads the BLUE by larger
blocks of rows (``block_bytes``): there each block is one more Python-level step.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["BLOCK_BYTES", "row_blocks", "for_row_blocks"]

#: Bytes of one row block: within a core's cache (the benchmark machine's L2 is 512 KiB), so
#: a chain of element-wise steps on a block reads and writes it once.
BLOCK_BYTES = 1 << 19


def row_blocks(rows: int, row_bytes: int, block_bytes: int | None = None) -> list[slice]:
    """Consecutive slices covering ``rows`` rows of ``row_bytes`` each, each slice about
    ``block_bytes`` (default ``BLOCK_BYTES``; at least one row)."""
    size = BLOCK_BYTES if block_bytes is None else block_bytes
    step = max(1, size // max(1, row_bytes))
    return [slice(a, min(a + step, rows)) for a in range(0, rows, step)]


def for_row_blocks(work: Callable[[slice], None], rows: int, row_bytes: int) -> None:
    """``work(block)`` for every block of ``row_blocks(rows, row_bytes)``, in order."""
    for block in row_blocks(rows, row_bytes):
        work(block)
