"""The chunked BLUE's covariances above the leaves on disk during the leaf passes
(``topdown.blue.on_disk``): mapped equal to the bit, shared by the estimate and the leaves as
in memory, each chunk estimated from them as from memory, read back equal, and the directory
removed when the block ends, on an exception too (``release()`` around the passes).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from test_blue_dhc_like import DOMAIN, QUERIES
from test_blue_leaf_chunks import _inputs, _masked, _tree

from topdown.blue.leaf_families import blue_by_families
from topdown.blue.on_disk import AboveOnDisk
from topdown.blue.shared_matrices import SharedMatrices


def _shared(estimate, leaves) -> list:
    """Every shared matrices above the leaves, as the estimate and the leaves hold them."""
    rows = list(estimate.block_scale) + list(estimate.block_subtree_scale)
    rows += [leaves.parents_final.var, leaves.parents_final.subtree]
    return [c for row in rows for c in row if isinstance(c, SharedMatrices)]


def test_covariances_on_disk_read_back_equal(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    tree = _tree()
    inputs = _masked(_inputs(np.random.default_rng(17), tree, DOMAIN, QUERIES))
    solved = blue_by_families(tree, DOMAIN, inputs, max_bytes=2 * DOMAIN.size * 8)
    assert solved is not None
    estimate, leaves = solved
    assert len(leaves.chunks) > 1
    before = _shared(estimate, leaves)
    assert before and all(c.k > 1 for c in before)
    copies = [c.values.copy() for c in before]
    cells = [leaves.estimate(i, gather=False)[1].cells_at(1) for i in range(len(leaves.chunks))]
    leaves._last = None
    parents = leaves.parents_final
    assert parents.var[0] is estimate.block_scale[-1][0]  # one object, held twice
    reads = []
    with AboveOnDisk(estimate, leaves) as above:
        assert above.directory is not None and os.listdir(above.directory)
        assert above.bytes_on_disk > 0
        mapped = _shared(above.blue, leaves)
        assert len(mapped) == len(before)
        for m, c, copy in zip(mapped, before, copies, strict=True):
            assert not m.values.flags.writeable  # mapped read-only
            assert not np.shares_memory(m.values, c.values)
            assert m.values.tobytes() == copy.tobytes()
            assert np.array_equal(m.index, c.index)
        # still one object where there was one
        assert leaves.parents_final.var[0] is above.blue.block_scale[-1][0]
        real = above.pages_read
        monkeypatch.setattr(above, "pages_read", lambda: reads.append(1) or real())
        leaves.parents_read = above.pages_read
        for i, expected in enumerate(cells):
            _, chunk = leaves.estimate(i, gather=False)
            assert chunk.cells_at(1).tobytes() == expected.tobytes()
        assert len(reads) == len(leaves.chunks)  # every chunk's pages handed back
        loaded = above.loaded()
        directory = above.directory
    assert loaded is not None
    assert not os.path.exists(directory) and not os.listdir(tmp_path)
    assert leaves.parents_read is None
    back = _shared(loaded, leaves)
    for m, copy in zip(back, copies, strict=True):
        assert m.values.flags.writeable  # in memory again
        assert m.values.tobytes() == copy.tobytes()
    assert leaves.parents_final.var[0] is loaded.block_scale[-1][0]
    for a, b in zip(loaded.block_scale, estimate.block_scale, strict=True):
        for x, y in zip(a, b, strict=True):
            assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


def test_without_leaves_nothing_goes_to_disk(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    tree = _tree()
    inputs = _masked(_inputs(np.random.default_rng(19), tree, DOMAIN, QUERIES))
    solved = blue_by_families(tree, DOMAIN, inputs, max_bytes=2 * DOMAIN.size * 8)
    assert solved is not None
    with AboveOnDisk(solved[0], None) as above:
        assert above.blue is solved[0] and above.directory is None
        assert above.loaded() is solved[0]
    assert not os.listdir(tmp_path)


def test_release_removes_the_directory_also_on_an_exception(monkeypatch, tmp_path) -> None:
    """A chunked release leaves nothing on disk and its ``Blue`` in memory; one whose leaf
    passes raise removes the directory all the same."""
    import pandas as pd

    import topdown.engine as engine
    import topdown.estimation.estimators as estimators
    from topdown import Attribute, Schema, release
    from topdown.strategy import Strategy

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(estimators, "LEAF_CHUNK_BYTES", 8)
    rng = np.random.default_rng(6)
    n = 2000
    county = rng.integers(0, 3, n)
    data = pd.DataFrame(
        {
            "COUNTY": county,
            "TRACT": county * 10 + rng.integers(0, 2, n),
            "HHGQ": rng.choice(8, n, p=[0.86] + [0.02] * 7),
            "VA": rng.integers(0, 2, n),
        }
    )
    schema = Schema(
        (
            Attribute(
                "HHGQ",
                values=tuple(range(8)),
                recodes={"hhinst": {"non": [0, 5, 6, 7], "inst": [1, 2, 3, 4]}},
            ),
            Attribute("VA", values=(0, 1)),
        ),
        ("COUNTY", "TRACT"),
    )
    strategy = Strategy.from_budgets(
        [1, 1, 1], queries=[("detailed", "1/2"), ("hhinst", "1/4"), ("HHGQ:hhinst x VA", "1/4")]
    )
    done = release(data, schema, strategy, estimator="blue", seed=2)
    assert done.blue is not None and done.blue.leaves is not None
    held = [c for lv in done.blue.block_scale for c in lv if isinstance(c, SharedMatrices)]
    assert held and all(c.values.flags.writeable for c in held)
    assert not os.listdir(tmp_path)

    real = engine.estimate
    seen = []

    def failing(*args, **kwargs):
        seen.append([d for d in os.listdir(tmp_path) if os.listdir(tmp_path / d)])
        real(*args, **kwargs)
        raise RuntimeError("the leaf passes failed")

    monkeypatch.setattr(engine, "estimate", failing)
    with pytest.raises(RuntimeError, match="the leaf passes failed"):
        release(data, schema, strategy, estimator="blue", seed=2)
    assert len(seen) == 1 and len(seen[0]) == 1  # the directory, with its files, during
    assert not os.listdir(tmp_path)
