"""Row blocks (topdown.support.row_blocks): every row in exactly one block, in order, each block about
``BLOCK_BYTES`` and at least one row."""

from __future__ import annotations

import numpy as np

from topdown.support import row_blocks
from topdown.support.row_blocks import for_row_blocks


def test_blocks_cover_every_row_once_in_order(monkeypatch):
    monkeypatch.setattr(row_blocks, "BLOCK_BYTES", 100)
    blocks = row_blocks.row_blocks(23, 30)  # 3 rows of 30 bytes fit in 100
    assert blocks[0] == slice(0, 3)
    assert blocks[-1] == slice(21, 23)
    assert np.concatenate([np.arange(23)[b] for b in blocks]).tolist() == list(range(23))
    assert row_blocks.row_blocks(4, 1000) == [slice(i, i + 1) for i in range(4)]  # a row each
    assert row_blocks.row_blocks(0, 30) == []
    assert row_blocks.row_blocks(10, 30, block_bytes=120) == [
        slice(0, 4),
        slice(4, 8),
        slice(8, 10),
    ]


def test_every_block_runs_once_and_writes_its_rows(monkeypatch):
    monkeypatch.setattr(row_blocks, "BLOCK_BYTES", 16)
    out = np.zeros(37)
    seen: list[slice] = []

    def work(rows: slice) -> None:
        out[rows] += np.arange(37)[rows] + 1
        seen.append(rows)

    for_row_blocks(work, 37, 8)
    np.testing.assert_array_equal(out, np.arange(37) + 1)  # every row written exactly once
    assert seen == row_blocks.row_blocks(37, 8)
    assert all(s.stop - s.start == 2 for s in seen[:-1])
