"""The stream level's subtree covariances folded block by block (``topdown.blue.fed_terms``):
the passes are fed the same inputs, bit for bit, as from the kept covariances, each block's
``k x k`` matrices are gone once the next block is solved, and asking for them says why they
are not there."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from test_blue_recodes_streamed import released as release_recoded
from test_stream_blue import _assembled, streamed_pieces

from topdown.blue import fed_terms, mapped_stacks
from topdown.blue.block_solve import _child_summary
from topdown.blue.estimate import blue_inputs
from topdown.blue.fed_terms import FedTerms, fed_names
from topdown.blue.mapped_stacks import MadeStack, MappedStacks, is_mapped
from topdown.blue.shared_matrices import SharedMatrices
from topdown.estimation.estimators import exact_totals
from topdown.measurement.measure import Measurements

pytestmark = pytest.mark.extra("parquet")


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    rel = release_recoded(tmp_path_factory.mktemp("fed") / "rel")
    measurements = _assembled(rel)
    return rel, measurements, exact_totals(rel.invariants, rel.schema.domain)


def _folder(rel, measurements):
    """``streamed_pieces``' ``fold``: the stream level's terms, as ``top_blue`` makes them."""
    s = rel.stream_level

    def make(plan):
        names = fed_names([m.query for m in measurements.levels[s]], True)
        return FedTerms(rel.schema.domain, names)

    return make


def test_the_passes_are_fed_the_same_inputs_bit_for_bit(released) -> None:
    rel, measurements, exact = released
    s = rel.stream_level
    top = Measurements(measurements.levels[: s + 1])
    *_, kept, kept_stream = streamed_pieces(rel, measurements, exact)
    *_, folded, folded_stream = streamed_pieces(
        rel, measurements, exact, fold=_folder(rel, measurements)
    )
    assert kept.blocks and any(b.k > 1 for b in kept.blocks)
    assert set(folded.fed) == {s} and folded.fed[s].blocks == len(folded.blocks)
    # the stream level keeps its final covariances (sweep 2 starts from them), not its subtree ones
    assert folded.block_subtree_scale[s] == () and len(kept.block_subtree_scale[s]) > 0
    assert folded_stream.subtree == () and kept_stream.subtree != ()
    for level in range(s):
        assert len(folded.block_subtree_scale[level]) == len(kept.blocks)
    want = blue_inputs(top, kept, exact)
    got = blue_inputs(top, folded, exact)
    for level, (a, b) in enumerate(zip(want.levels, got.levels, strict=True)):
        assert [m.query.name for m in a] == [m.query.name for m in b]
        if level == s:
            assert [m.query.name for m in b] == list(folded.fed[s].names)
        for m, n in zip(a, b, strict=True):
            np.testing.assert_array_equal(n.noisy, m.noisy)
            np.testing.assert_array_equal(n.variance, m.variance)
    for e, f in zip(kept_stream.est, folded_stream.est, strict=True):
        np.testing.assert_array_equal(f, e)
    for v, w in zip(kept_stream.var, folded_stream.var, strict=True):
        v, w = (x.values[x.index] if isinstance(x, SharedMatrices) else x for x in (v, w))
        np.testing.assert_array_equal(w, v)


def test_asking_for_folded_covariances_says_why_they_are_not_there(released) -> None:
    rel, measurements, exact = released
    s = rel.stream_level
    top = Measurements(measurements.levels[: s + 1])
    *_, folded, _ = streamed_pieces(rel, measurements, exact, fold=_folder(rel, measurements))
    with pytest.raises(ValueError, match=f"level {s}'s subtree covariances were folded"):
        folded.variance(s, "total", subtree=True)
    # the final covariances are kept: the stream level's own answers' variances are there
    assert np.all(folded.variance(s, "total") > 0)
    # fed other queries than were folded (the marginals left out): refused, naming both
    with pytest.raises(ValueError, match=r"folded for the queries \['detailed', 'total', "):
        blue_inputs(top, folded, exact, marginals=False)


def test_each_block_is_dropped_once_the_next_is_solved(released, monkeypatch) -> None:
    rel, measurements, exact = released
    seen: list[weakref.ref] = []
    alive_at_add: list[int] = []
    real_add = fed_terms.FedTerms.add

    def add(self, block, subtree):
        gc.collect()
        alive_at_add.append(sum(r() is not None for r in seen))
        real_add(self, block, subtree)
        if isinstance(subtree, SharedMatrices):
            seen.append(weakref.ref(subtree.values))

    monkeypatch.setattr(fed_terms.FedTerms, "add", add)
    *_, folded, _ = streamed_pieces(rel, measurements, exact, fold=_folder(rel, measurements))
    gc.collect()
    assert seen, "no k x k block was folded"
    # when each block is folded, no earlier block's k x k matrices are held any more
    assert alive_at_add == [0] * len(folded.blocks)
    assert all(r() is None for r in seen)


def test_from_files_the_folded_pieces_are_the_same(released, monkeypatch) -> None:
    """Every ``k x k`` stack in a file, as the DHC preset's are (read-only maps, the stream
    level's summaries solved from where sweep 1 stacked them): the same passes' inputs as in
    memory."""
    rel, measurements, exact = released
    s = rel.stream_level
    top = Measurements(measurements.levels[: s + 1])
    *_, in_memory, _ = streamed_pieces(rel, measurements, exact, fold=_folder(rel, measurements))
    monkeypatch.setattr(mapped_stacks, "MAP_BYTES", 1)
    *_, from_files, _ = streamed_pieces(rel, measurements, exact, fold=_folder(rel, measurements))
    assert any(is_mapped(v.values) for v in from_files.block_scale[s] if hasattr(v, "values"))
    want, got = blue_inputs(top, in_memory, exact), blue_inputs(top, from_files, exact)
    for a, b in zip(want.levels, got.levels, strict=True):
        for m, n in zip(a, b, strict=True):
            np.testing.assert_array_equal(n.noisy, m.noisy)
            np.testing.assert_array_equal(n.variance, m.variance)


@pytest.mark.parametrize("repeated", [False, True], ids=["all distinct", "one repeated"])
def test_mapped_summaries_are_read_in_place_when_all_distinct(tmp_path, repeated) -> None:
    """A block's stream summaries from sweep 1's file: all distinct (every subtree its own
    type, as tracts are) they are solved from in place, not copied (4.3 GB a block for 400
    DHC tracts); with repeats, the distinct ones are copied to a file of their own."""
    rng = np.random.default_rng(1)
    values = rng.normal(size=(4, 3, 3))
    if repeated:
        values[3] = values[0]
    maps = MappedStacks(str(tmp_path), min_bytes=1)
    stack = MadeStack(values.shape, maps=maps)
    stack.put(0, values)
    held = stack.done()
    assert is_mapped(held)
    first = np.zeros((4, 3))
    est, var = [first], [held]
    got_est, got = _child_summary((est, var), 0, maps)  # type: ignore[arg-type]
    assert isinstance(got, SharedMatrices) and is_mapped(got.values)
    assert (got.values is held) is not repeated
    np.testing.assert_array_equal(got.values[got.index], values)
    assert got.index.tolist() == ([0, 1, 2, 0] if repeated else [0, 1, 2, 3])
    assert got_est is first and est[0].size == var[0].size == 0  # taken from the lists


def test_distinct_matrices_are_shared_without_a_copy_only_when_asked() -> None:
    a = np.arange(2 * 4, dtype=float).reshape(2, 2, 2)
    assert SharedMatrices.of(a, copy=False).values is a
    assert SharedMatrices.of(a).values is not a
    twice = np.concatenate([a, a[:1]])
    shared = SharedMatrices.of(twice, copy=False)  # a repeat: held once, so copied
    assert shared.values.shape == (2, 2, 2) and shared.index.tolist() == [0, 1, 0]
