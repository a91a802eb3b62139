"""The recoded BLUE's covariance footprint (``topdown.blue.footprint``), known before measuring.

The tree of ``test_blue_leaf_chunks`` (3 states of 4 counties with 1 to 4 leaves each), worked
by hand: one leaf shape; counties with 1, 2, 3 or 4 leaves (4 shapes); states with counties of
(1, 3, 2, 4), (1, 2, 3, 3) and (2, 1, 4, 2) leaves, three distinct multisets; one root. The
same counts are what the BLUE itself holds per level and block (its ``SharedMatrices``), so a
count that merged or split shapes wrongly fails either way.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from test_blue_dhc_like import DOMAIN, QUERIES
from test_blue_leaf_chunks import _inputs, _tree

import topdown.engine as engine
from topdown.blue.blocks import blocks_of
from topdown.blue.estimate import blue
from topdown.blue.footprint import (
    check_blue_fits,
    covariance_bytes,
    node_types,
    streamed_covariance_bytes,
)
from topdown.blue.shared_matrices import SharedMatrices
from topdown.engine import release
from topdown.errors import DataError
from topdown.presets import census2020_dhcp
from topdown.strategy import Query
from topdown.streaming.run import release_streamed


def test_node_types_worked_by_hand() -> None:
    assert node_types(_tree()) == [1, 3, 4, 1]


def test_node_types_are_the_types_the_blue_holds() -> None:
    tree = _tree()
    estimate = blue(tree, DOMAIN, _inputs(np.random.default_rng(0), tree, DOMAIN, QUERIES))
    expected = node_types(tree)
    for level, scales in enumerate(estimate.block_subtree_scale):
        for block, scale in zip(estimate.blocks, scales, strict=True):
            if block.k > 1:
                assert isinstance(scale, SharedMatrices)
                assert len(scale.compact().values) == expected[level], (level, block.k)


QUERY_LIST = [Query.parse(q) for q in QUERIES]


def test_covariance_bytes_counts_each_kind_per_type_and_block() -> None:
    blocks = blocks_of(DOMAIN, QUERY_LIST)
    per_type = sum(b.k**2 for b in blocks if b.k > 1)
    assert per_type > 0
    assert covariance_bytes(_tree(), blocks) == 3 * 8 * per_type * (1 + 3 + 4 + 1)


def test_streamed_bytes_worked_by_hand() -> None:
    """Streamed by state (level 1), sweep 2 dominates: the states' 3 final types and, per
    subtree at a time, 3 kinds for its top and its own types: the first state's counties
    have 4 distinct shapes (1, 3, 2, 4 leaves), the others 3, and the leaves 1, so
    3 x (1 + 5) = 18 a subtree. Streamed by county (level 2), the BLUE above it does: 3 kinds
    for the root's and the 3 state types, the 12 counties' summaries (each block's freed as
    its final covariances are made), and for the block being solved its 12 summaries copied
    and its subtree and final covariances (4 county types; the subtree ones folded, then
    dropped)."""
    blocks = blocks_of(DOMAIN, QUERY_LIST)
    per_type = covariance_bytes(_tree(), blocks) // (3 * 9)
    largest = max(b.k**2 for b in blocks if b.k > 1) * 8
    assert largest < per_type  # more than one block
    assert streamed_covariance_bytes(_tree(), blocks, 1) == per_type * (3 + 18)
    assert streamed_covariance_bytes(_tree(), blocks, 1, 2) == per_type * (3 + 2 * 18)
    above = per_type * (3 * (1 + 3) + 12) + largest * (12 + 2 * 4)
    assert streamed_covariance_bytes(_tree(), blocks, 2) == above


def test_a_streamed_release_is_checked_against_what_it_holds(monkeypatch) -> None:
    """Room for the streamed count (21 types' matrices) but not the whole tree's (27): the
    streamed release is let through, the whole-tree one refused, each naming its count."""
    import topdown.blue.footprint as footprint

    blocks = blocks_of(DOMAIN, QUERY_LIST)
    need = streamed_covariance_bytes(_tree(), blocks, 1)
    assert need < covariance_bytes(_tree(), blocks)
    monkeypatch.setattr(footprint, "physical_memory", lambda: need)
    check_blue_fits(_tree(), DOMAIN, QUERY_LIST, mapped=False, stream=(1, 1))
    with pytest.raises(DataError, match=r"S 3, C 4, T 1 types\), about"):
        check_blue_fits(_tree(), DOMAIN, QUERY_LIST, mapped=False)
    with pytest.raises(
        DataError, match=r"streamed by S: its 3 nodes' summaries, then 2 subtree\(s\) at a time"
    ):
        check_blue_fits(_tree(), DOMAIN, QUERY_LIST, mapped=False, stream=(1, 2))


def test_plain_queries_are_never_refused(monkeypatch) -> None:
    import topdown.blue.footprint as footprint

    monkeypatch.setattr(footprint, "physical_memory", lambda: 1)
    plain = [Query.parse("detailed"), Query.parse("total")]
    check_blue_fits(_tree(), DOMAIN, plain, mapped=False)  # no recode: nothing per type


def test_a_blue_that_cannot_fit_is_refused_naming_topdown(monkeypatch) -> None:
    import topdown.blue.footprint as footprint

    need = covariance_bytes(_tree(), blocks_of(DOMAIN, QUERY_LIST))
    monkeypatch.setattr(footprint, "physical_memory", lambda: need - 1)
    with pytest.raises(DataError, match=r"estimator 'topdown'") as err:
        check_blue_fits(_tree(), DOMAIN, QUERY_LIST, mapped=False)
    assert "S 3, C 4" in str(err.value)
    monkeypatch.setattr(footprint, "physical_memory", lambda: need)
    check_blue_fits(_tree(), DOMAIN, QUERY_LIST, mapped=False)  # exactly enough: accepted


def test_mapped_covariances_count_the_temporary_directory(monkeypatch, tmp_path) -> None:
    import topdown.blue.footprint as footprint

    need = covariance_bytes(_tree(), blocks_of(DOMAIN, QUERY_LIST))
    monkeypatch.setattr(footprint, "physical_memory", lambda: need // 2)
    monkeypatch.setattr(footprint.tempfile, "gettempdir", lambda: str(tmp_path))
    free = need - need // 2
    monkeypatch.setattr(footprint.shutil, "disk_usage", lambda _: SimpleNamespace(free=free))
    check_blue_fits(_tree(), DOMAIN, QUERY_LIST, mapped=True)  # memory + disk: enough
    with pytest.raises(DataError, match="free space"):
        monkeypatch.setattr(
            footprint.shutil,
            "disk_usage",
            lambda _: SimpleNamespace(free=free - 1),
        )
        check_blue_fits(_tree(), DOMAIN, QUERY_LIST, mapped=True)


def _dhc_state() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Twelve persons in 2 counties of 3 tracts each, and the declared tracts."""
    geography = pd.DataFrame({"STATE": 1, "COUNTY": np.repeat([1, 2], 3), "TRACT": np.arange(1, 7)})
    rows = geography.loc[np.repeat(np.arange(6), 2)].reset_index(drop=True)
    records = rows.assign(RELGQ=20, SEX=1, AGE=40, HISPANIC=0, CENRACE=1)
    return records, geography


@pytest.mark.parametrize("streamed", [False, True])
def test_the_dhc_preset_under_blue_is_refused_before_measuring(
    monkeypatch: pytest.MonkeyPatch, tmp_path, streamed: bool
) -> None:
    """The preset over 1 state, 2 counties, 6 tracts: root, state and the 6 tracts one type
    per level, the counties one (3 tracts each); refused with too little memory before any
    query is measured (nothing in the ledger, no folder), under either release."""
    import topdown.blue.footprint as footprint
    import topdown.streaming.run as streaming_run

    schema, strategy = census2020_dhcp(("STATE", "COUNTY", "TRACT"))
    records, geography = _dhc_state()
    measured: list[object] = []
    monkeypatch.setattr(
        streaming_run if streamed else engine, "measure", lambda *a, **k: measured.append(1)
    )
    monkeypatch.setattr(footprint, "physical_memory", lambda: 5 * 10**8)
    monkeypatch.setattr(footprint, "MAPPED", False)  # memory alone holds the stacks
    out = tmp_path / "out"
    with pytest.raises(DataError, match=r"root 1, STATE 1, COUNTY 1, TRACT 1 types") as err:
        if streamed:
            release_streamed(
                records, schema, strategy, stream_by="COUNTY", out=out, geography=geography
            )
        else:
            release(records, schema, strategy, geography=geography)
    assert "1,160 x 1,160" in str(err.value)
    assert ("streamed by COUNTY" in str(err.value)) is streamed
    assert not measured and not out.exists()
