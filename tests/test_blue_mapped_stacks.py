"""The recoded BLUE's large covariance stacks written to files as the recursions make them
(``topdown.blue.mapped_stacks``): equal to the bit to the stacks held in memory, on both the
stacked and the per-type paths, with exact totals and several bands of rows per sum; nothing
left on disk (each file unlinked as made, the directory removed, even when the solve raises);
a failed write falls back to memory with one warning; below the threshold nothing is mapped.
"""

from __future__ import annotations

import logging
import os
import tempfile

import numpy as np
import pytest
import test_blue as tb
from test_blue_dhc_like import DOMAIN, QUERIES, _two_or_three_children
from test_blue_dhc_like import leaf_marginals_every_other_node as masked

import topdown.blue.mapped_stacks as mapped_stacks
from topdown.blue import block_recursions
from topdown.blue.estimate import blue
from topdown.blue.mapped_stacks import MadeStack, MappedStacks, hand_back, is_mapped
from topdown.blue.shared_matrices import SharedMatrices


@pytest.fixture(autouse=True)
def _domain(monkeypatch, tmp_path) -> None:
    """``test_blue``'s inputs read its module's DOMAIN: this one's; the files under
    ``tmp_path``, to see that nothing is left there."""
    monkeypatch.setattr(tb, "DOMAIN", DOMAIN)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def _solved():
    rng = np.random.default_rng(23)
    tree = _two_or_three_children()
    inputs = masked(tb.random_inputs(rng, tree, [QUERIES] * 3, per_node=False))
    last = tree.levels[2].size - 1
    exact = {0: {0: 600.0}, 1: {0: 210.0}, 2: {0: 60.0, last: 70.0}}
    return blue(tree, DOMAIN, inputs, exact_totals=exact)


def _stacks(estimate) -> list[SharedMatrices]:
    rows = list(estimate.block_scale) + list(estimate.block_subtree_scale)
    return [c for row in rows for c in row if isinstance(c, SharedMatrices)]


def _held_in_memory(monkeypatch):
    """The solve with every stack in memory (the reference), then every stack made from
    here on large enough for a file."""
    monkeypatch.setattr(mapped_stacks, "MAP_BYTES", 1 << 62)
    held = _solved()
    monkeypatch.setattr(mapped_stacks, "MAP_BYTES", 1)
    return held


def _assert_same(got, held) -> None:
    """The same stacks bit for bit (and type index) and the same cells at every level."""
    assert len(_stacks(got)) == len(_stacks(held))
    for a, b in zip(_stacks(got), _stacks(held), strict=True):
        assert np.array_equal(a.index, b.index)
        assert a.values.tobytes() == b.values.tobytes()
    for level in range(got.n_levels):
        assert np.array_equal(got.cells_at(level), held.cells_at(level))


@pytest.mark.parametrize("by_type", [False, True])
def test_stacks_made_on_disk_equal_those_in_memory(monkeypatch, tmp_path, by_type) -> None:
    if by_type:
        monkeypatch.setattr(block_recursions, "GATHER_BYTES", 0)
    held = _held_in_memory(monkeypatch)
    made = []
    real = MappedStacks._new

    def spy(self, shape, dtype):
        out = real(self, shape, dtype)
        made.append(shape)
        assert not os.listdir(self.directory)  # unlinked as soon as made
        return out

    monkeypatch.setattr(MappedStacks, "_new", spy)
    mapped = _solved()
    assert made and not os.listdir(tmp_path)  # the directory removed
    _assert_same(mapped, held)
    for a, b in zip(_stacks(mapped), _stacks(held), strict=True):
        assert is_mapped(a.values) and not a.values.flags.writeable
        assert not is_mapped(b.values)
    for level in range(mapped.n_levels):
        for name in ("detailed", "total", "G:adult x R:r3"):
            assert np.array_equal(mapped.variance(level, name), held.variance(level, name))


def test_nothing_left_on_disk_when_the_solve_raises(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(mapped_stacks, "MAP_BYTES", 1)
    calls = []
    real = block_recursions._pinv_sum

    def failing(*args):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("interrupted")
        return real(*args)

    monkeypatch.setattr(block_recursions, "_pinv_sum", failing)
    with pytest.raises(RuntimeError, match="interrupted"):
        _solved()
    assert not os.listdir(tmp_path)


def test_a_failed_write_falls_back_to_memory(monkeypatch, tmp_path, caplog) -> None:
    monkeypatch.setattr(block_recursions, "GATHER_BYTES", 0)
    held = _held_in_memory(monkeypatch)
    writes = []
    real = mapped_stacks._write

    def failing(fd, offset, a):
        writes.append(1)
        if len(writes) > 3:
            raise OSError("no space left on device")
        real(fd, offset, a)

    monkeypatch.setattr(mapped_stacks, "_write", failing)
    with caplog.at_level(logging.WARNING, logger="topdown.blue.mapped_stacks"):
        kept = _solved()
    # said once per solve of the blocks, every stack after in memory, nothing on disk
    assert caplog.text.count("stay in memory") == 1 and "no space left" in caplog.text
    assert not os.listdir(tmp_path)
    assert not all(is_mapped(s.values) for s in _stacks(kept))
    _assert_same(kept, held)


def test_small_stacks_stay_in_memory(monkeypatch) -> None:
    """Below ``MAP_BYTES`` (8 MiB: here ``k <= 25``, a few types) no file is made."""
    monkeypatch.setattr(block_recursions, "GATHER_BYTES", 0)
    made = []
    monkeypatch.setattr(MappedStacks, "_new", lambda self, *a: made.append(a))
    estimate = _solved()
    assert not made
    assert all(s.values.flags.writeable and not is_mapped(s.values) for s in _stacks(estimate))


def test_chunked_leaves_with_summaries_on_disk_equal_those_in_memory(monkeypatch, tmp_path):
    """The leaf level by chunks of families (``blue_by_families``): the chunks' summaries,
    their stack and each block's summary below the levels above in files too; the same
    estimate and covariances bit for bit, nothing left on disk."""
    from test_blue_leaf_chunks import _inputs, _tree
    from test_blue_leaf_chunks import _masked as masked_leaves

    from topdown.blue.leaf_families import blue_by_families

    def solved():
        tree = _tree()
        inputs = masked_leaves(_inputs(np.random.default_rng(17), tree, DOMAIN, QUERIES))
        out = blue_by_families(tree, DOMAIN, inputs, max_bytes=2 * DOMAIN.size * 8)
        assert out is not None and len(out[1].chunks) > 1
        return out

    monkeypatch.setattr(mapped_stacks, "MAP_BYTES", 1 << 62)
    held, held_leaves = solved()
    monkeypatch.setattr(mapped_stacks, "MAP_BYTES", 1)
    mapped, leaves = solved()
    assert not os.listdir(tmp_path)
    assert _stacks(mapped) and all(is_mapped(s.values) for s in _stacks(mapped))
    for a, b in zip(_stacks(mapped), _stacks(held), strict=True):
        assert np.array_equal(a.index, b.index)
        assert a.values.tobytes() == b.values.tobytes()
    for level in range(mapped.n_levels):
        assert np.array_equal(mapped.cells_at(level), held.cells_at(level))
        assert np.array_equal(mapped.variance(level, "detailed"), held.variance(level, "detailed"))


def test_children_sums_in_bands_equal_the_whole_product(monkeypatch, tmp_path) -> None:
    """``_summed`` into a file a band of rows at a time: the whole product's numbers (bands
    of at least ``SUM_BAND_MIN`` multiply-adds), its pages handed back."""
    import scipy.sparse as sp

    rng = np.random.default_rng(3)
    k, n_types, parents = 200, 10, 40
    child = SharedMatrices(rng.standard_normal((n_types, k, k)), rng.integers(0, n_types, 120))
    S = sp.csr_matrix((np.ones(120), (rng.integers(0, parents, 120), np.arange(120))))
    whole = block_recursions._summed(S, child)
    monkeypatch.setattr(block_recursions, "SUM_BAND_BYTES", 1)
    # bands of SUM_BAND_MIN: 4 of 53 rows (40 parent types, 10 child types)
    assert len(whole.values) * k * n_types * k > 3 * block_recursions.SUM_BAND_MIN
    maps = MappedStacks(str(tmp_path), min_bytes=1)
    banded = block_recursions._summed(S, child, maps)
    assert maps.files == 1 and is_mapped(banded.values)
    assert np.array_equal(banded.index, whole.index)
    assert banded.values.tobytes() == whole.values.tobytes()


def test_made_stack_in_rows_and_pages_handed_back(tmp_path) -> None:
    rng = np.random.default_rng(0)
    want = rng.standard_normal((3, 4, 4))
    maps = MappedStacks(str(tmp_path), min_bytes=1)
    stack = maps.stack(want.shape)
    assert stack.on_disk
    for t in (2, 0, 1):
        stack.put(t, want[t, :3])
        stack.put(t, want[t, 3:], 3)
    got = stack.done()
    assert got.tobytes() == want.tobytes() and not got.flags.writeable
    assert maps.files == 1 and maps.nbytes == want.nbytes and not os.listdir(tmp_path)
    hand_back(got, want)  # the map's pages dropped, the array in memory left alone
    assert got.tobytes() == want.tobytes()
    small = MadeStack(want.shape, maps=MappedStacks(str(tmp_path), min_bytes=want.nbytes + 1))
    assert not small.on_disk
    for t in range(3):
        small.put(t, want[t])
    assert np.array_equal(small.done(), want)
