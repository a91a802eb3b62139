"""The chunked BLUE's covariances above the leaves mapped from disk (``topdown.blue.on_disk``):
equal to the bit, read-only, one object where there was one (the estimate's and the leaves'),
each chunk estimated from them as from memory and its pages handed back, nothing left on disk
(when writing fails, the covariances stay in memory), and a release's counts and variances
unchanged.
"""

from __future__ import annotations

import logging
import os
import tempfile

import numpy as np
from test_blue_dhc_like import DOMAIN, QUERIES
from test_blue_leaf_chunks import _inputs, _masked, _tree, hhinst_release

import topdown.blue.on_disk as on_disk
from topdown.blue.leaf_families import blue_by_families
from topdown.blue.shared_matrices import SharedMatrices


def _shared(estimate, leaves) -> list:
    """Every shared matrices above the leaves, as the estimate and the leaves hold them."""
    rows = list(estimate.block_scale) + list(estimate.block_subtree_scale)
    rows += [leaves.parents_final.var, leaves.parents_final.subtree]
    return [c for row in rows for c in row if isinstance(c, SharedMatrices)]


def _solved(seed: int):
    tree = _tree()
    inputs = _masked(_inputs(np.random.default_rng(seed), tree, DOMAIN, QUERIES))
    solved = blue_by_families(tree, DOMAIN, inputs, max_bytes=2 * DOMAIN.size * 8)
    assert solved is not None
    assert len(solved[1].chunks) > 1
    return solved


def test_covariances_mapped_from_disk_equal_to_the_bit(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    estimate, leaves = _solved(17)
    before = _shared(estimate, leaves)
    assert before and all(c.k > 1 for c in before)
    copies = [c.values.copy() for c in before]
    cells = [leaves.estimate(i, gather=False)[1].cells_at(1) for i in range(len(leaves.chunks))]
    leaves._last = None
    assert leaves.parents_final.var[0] is estimate.block_scale[-1][0]  # one object, held twice
    reads = []
    real = on_disk.hand_back
    monkeypatch.setattr(on_disk, "hand_back", lambda *a: reads.append(1) or real(*a))

    mapped = on_disk.above_on_disk(estimate, leaves)

    assert not os.listdir(tmp_path)  # files unlinked, directory removed: nothing on disk
    after = _shared(mapped, leaves)
    assert len(after) == len(before)
    for m, c, copy in zip(after, before, copies, strict=True):
        assert not m.values.flags.writeable  # mapped read-only
        assert not np.shares_memory(m.values, c.values)
        assert m.values.tobytes() == copy.tobytes()
        assert np.array_equal(m.index, c.index)
    assert leaves.parents_final.var[0] is mapped.block_scale[-1][0]  # still one object
    for i, expected in enumerate(cells):
        _, chunk = leaves.estimate(i, gather=False)
        assert chunk.cells_at(1).tobytes() == expected.tobytes()
    assert len(reads) == len(leaves.chunks)  # every chunk's pages handed back
    for level in range(len(mapped.block_scale)):
        for name in QUERIES:
            assert np.array_equal(mapped.variance(level, name), estimate.variance(level, name))


def test_nothing_left_on_disk_when_writing_fails(monkeypatch, tmp_path, caplog) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    estimate, leaves = _solved(19)
    parents = leaves.parents_final
    real = on_disk.MappedStacks.map

    def failing(self, a):
        if self.files:
            raise OSError("no space left on device")
        return real(self, a)

    monkeypatch.setattr(on_disk.MappedStacks, "map", failing)
    with caplog.at_level(logging.WARNING, logger="topdown.blue.mapped_stacks"):
        kept = on_disk.above_on_disk(estimate, leaves)
    # the release goes on with the covariances in memory, said once
    assert kept is estimate
    assert "stay in memory" in caplog.text and "no space left" in caplog.text
    assert not os.listdir(tmp_path)
    assert leaves.parents_final is parents and leaves.parents_read is None


def test_release_counts_and_variances_unchanged(monkeypatch, tmp_path) -> None:
    """A chunked release with the covariances above mapped from disk: the same counts and
    variances at every level as one that holds them in memory, nothing left on disk."""
    import pandas as pd

    import topdown.estimation.estimators as estimators
    from topdown import release

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
    schema, strategy = hhinst_release()
    mapped = release(data, schema, strategy, estimator="blue", seed=2)
    assert not os.listdir(tmp_path)
    monkeypatch.setattr(estimators, "above_on_disk", lambda estimate, leaves: estimate)
    held = release(data, schema, strategy, estimator="blue", seed=2)
    assert mapped.blue is not None and held.blue is not None and mapped.blue.leaves is not None
    on = [c for lv in mapped.blue.block_scale for c in lv if isinstance(c, SharedMatrices)]
    off = [c for lv in held.blue.block_scale for c in lv if isinstance(c, SharedMatrices)]
    assert on and not any(c.values.flags.writeable for c in on)
    assert all(c.values.flags.writeable for c in off)
    for a, b in zip(on, off, strict=True):
        assert a.values.tobytes() == b.values.tobytes()
    for a, b in zip(mapped.counts, held.counts, strict=True):
        assert np.array_equal(a, b)
    for level in range(len(mapped.counts)):
        assert np.array_equal(mapped.blue.stderr(level), held.blue.stderr(level))
