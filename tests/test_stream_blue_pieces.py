"""What a streamed BLUE holds at once. Sweep 1 stacks each subtree's summary as it arrives
(``NodeSummary.stacked``): the stack of all the results, number for number, in whatever
order they come, the large ``k x k`` stacks in files.
Sweep 2 takes a subtree's leaves a chunk of families at a time when they outgrow one chunk,
with the same counts as the whole subtree's solve."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_blue_recodes_streamed import SCHEMA as RECODED
from test_blue_recodes_streamed import _strategy as _recoded
from test_stream import QUIET, SCHEMA, _geography, _records, _state_total, _strategy

import topdown.estimation.estimators as estimators
import topdown.streaming.tasks as stream_tasks
from topdown.blue import mapped_stacks
from topdown.blue.estimate import NodeSummary
from topdown.blue.mapped_stacks import is_mapped
from topdown.streaming.run import release_streamed


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
    whole = [
        np.concatenate([p.est[g] if kind == "est" else p.var[g] for p in parts])
        for kind in ("est", "var")
        for g in range(2)
    ]
    order = [3, 0, 4, 1, 2]  # a parallel sweep's completion order
    got = NodeSummary.stacked(5, ((i, parts[i]) for i in order))
    # handed over as lists, which a recoded solve empties as it reads them
    assert isinstance(got.est, list) and isinstance(got.var, list)
    for a, b in zip([*got.est, *got.var], whole, strict=True):
        assert a.shape == b.shape
        assert a.tobytes() == b.tobytes()
    assert is_mapped(got.var[1]) is on_disk
    assert not is_mapped(got.var[0])  # variances per node stay in memory


def test_a_summary_missing_or_twice_is_refused() -> None:
    parts = _parts(3)
    with pytest.raises(ValueError, match=r"a summary of rows 1-1 came twice"):
        NodeSummary.stacked(3, ((i, parts[i]) for i in (0, 1, 1)))
    with pytest.raises(ValueError, match=r"no summary came for row\(s\) \[2\]"):
        NodeSummary.stacked(3, ((i, parts[i]) for i in (1, 0)))


@pytest.mark.extra("parquet")
@pytest.mark.parametrize("recoded", [False, True], ids=["plain", "recoded"])
def test_subtree_leaves_by_chunks_release_the_same_counts(tmp_path, monkeypatch, recoded) -> None:
    """With ``LEAF_CHUNK_BYTES`` below one family's leaves, each county's blocks go a tract's
    families at a time in sweep 2 (every subtree takes the chunked path, in more than one
    chunk where it has more than one tract), and the tables are the whole subtree solve's."""
    schema, strategy = (RECODED, _recoded()) if recoded else (SCHEMA, _strategy())
    geo = _geography()
    kwargs = dict(
        stream_by="COUNTY",
        geography=geo,
        constraints=_state_total(),
        seed=3,
        progress=QUIET,
    )
    whole = release_streamed(_records(geo), schema, strategy, out=tmp_path / "whole", **kwargs)
    chunks: list[int] = []
    real = stream_tasks.prepare_blue_by_families

    def spying(*args, **kw):
        out = real(*args, **kw)
        chunks.append(0 if out is None else len(out[2].chunks))
        return out

    monkeypatch.setattr(stream_tasks, "prepare_blue_by_families", spying)
    monkeypatch.setattr(estimators, "LEAF_CHUNK_BYTES", 8)
    chunked = release_streamed(_records(geo), schema, strategy, out=tmp_path / "chunked", **kwargs)
    s = chunked.stream_level
    labels = chunked.tree.levels[s].labels.astype(str)
    n_tracts = [len(chunked.nodes_of(s + 1, label)) for label in labels]
    assert chunks == n_tracts and max(chunks) > 1
    assert chunked.check_correctness().ok
    for level in range(whole.tree.n_levels):
        pd.testing.assert_frame_equal(chunked.table(level), whole.table(level))
