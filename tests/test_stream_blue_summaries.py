"""Sweep 1 of a streamed BLUE stacks each subtree's summary as it arrives
(``topdown.blue.streamed.stacked_summaries``): the stack a list of results made at the end,
number for number, in whatever order the results come, the large ``k x k`` stacks in files."""

from __future__ import annotations

import numpy as np
import pytest

from topdown.blue import mapped_stacks
from topdown.blue.estimate import NodeSummary
from topdown.blue.mapped_stacks import is_mapped
from topdown.blue.streamed import stacked_summaries


def _parts(n: int) -> list[NodeSummary]:
    """One node's summary per stream node: a plain group (variances per node) and a block
    of ``k = 3`` (a matrix per node), as ``subtree_summary`` returns them."""
    rng = np.random.default_rng(5)
    return [
        NodeSummary(
            (rng.normal(size=(1, 4)), rng.normal(size=(1, 2, 3))),
            (rng.normal(size=1), rng.normal(size=(1, 3, 3))),
        )
        for _ in range(n)
    ]


@pytest.mark.parametrize("on_disk", [False, True], ids=["in memory", "in a file"])
def test_stacked_as_they_come_equals_the_stack_of_all(monkeypatch, on_disk) -> None:
    parts = _parts(5)
    if on_disk:  # every k x k stack goes to a file, as the DHC preset's do
        monkeypatch.setattr(mapped_stacks, "MAP_BYTES", 1)
    whole = NodeSummary.stack(parts)
    order = [3, 0, 4, 1, 2]  # a parallel sweep's completion order
    got = stacked_summaries(5, ((i, parts[i]) for i in order))
    # handed over as lists, which a recoded solve empties as it reads them
    assert isinstance(got.est, list) and isinstance(got.var, list)
    for a, b in zip([*got.est, *got.var], [*whole.est, *whole.var], strict=True):
        assert a.shape == b.shape
        assert a.tobytes() == b.tobytes()
    assert is_mapped(got.var[1]) is on_disk
    assert not is_mapped(got.var[0])  # variances per node stay in memory


def test_a_summary_missing_or_twice_is_refused() -> None:
    parts = _parts(3)
    with pytest.raises(ValueError, match=r"stream node 1's summary came twice"):
        stacked_summaries(3, ((i, parts[i]) for i in (0, 1, 1)))
    with pytest.raises(ValueError, match=r"no summary came for stream node\(s\) \[2\]"):
        stacked_summaries(3, ((i, parts[i]) for i in (1, 0)))
