"""The streamed table writer keeps counts exact at the limits of int32 (issue 30 A8).

``write_part`` cast the count column to int32: a count of 2^31 came back as -2^31. Counts
that fit stay int32 (the parts' size); larger ones are written as int64.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from topdown.streaming.tasks import count_type, write_part

pytestmark = pytest.mark.extra("parquet")

I32 = 2**31 - 1


@pytest.mark.parametrize(
    ("counts", "dtype"),
    [
        ([0, 1], np.int32),
        ([0, I32], np.int32),
        ([I32 + 1], np.int64),
        ([3, 2**40, I32 + 1], np.int64),
        ([2**63 - 1], np.int64),
    ],
)
def test_write_part_keeps_counts_exact(tmp_path, counts, dtype) -> None:
    tree = SimpleNamespace(levels=[SimpleNamespace(column="root"), SimpleNamespace(column="S")])
    frame = pd.DataFrame({"node": [f"n{i}" for i in range(len(counts))], "count": counts})
    write_part(frame, tmp_path, tree, 1, "top")  # type: ignore[arg-type]
    (path,) = tmp_path.rglob("*.parquet")
    back = pd.read_parquet(path)
    assert back["count"].tolist() == counts
    assert back["count"].dtype == dtype


def test_count_type_at_the_limits() -> None:
    assert count_type(np.array([I32], dtype=np.int64)) is np.int32
    assert count_type(np.array([I32 + 1], dtype=np.int64)) is np.int64
    assert count_type(np.array([0], dtype=np.int8)) is np.int32  # never narrower than int32
