"""Chunked measurement: the stream layout, executor independence, and the noise's statistics.

The statistical test (marked slow) checks the two things the chunked layout could break: the
distribution of each noise value (chi-square against the exact pmf) and the independence of
the noise of different nodes, within a chunk and across chunk boundaries (correlation of
paired residuals). Its false-alarm rate is at most ALPHA = 1e-6 (Bonferroni over the tests);
its power is checked on the bug it guards against: streams keyed without the chunk index.
"""

from __future__ import annotations

import pickle
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import topdown.measurement.measure as measure_module
from mechanisms.ledger import Ledger
from mechanisms.rng import child_key, child_rng, new_release_key
from mechanisms.samplers import discrete_gaussian_pmf, sample_discrete_gaussian
from topdown import Attribute, Schema, Strategy
from topdown.execution.executors import Executor, ProcessExecutor
from topdown.measurement.measure import chunk_nodes, measure
from topdown.measurement.tree import build_tree
from topdown.strategy import LevelStrategy, Query
from topdown.support.int_types import smallest_int_type

ALPHA = 1e-6
SCHEMA = Schema(
    (Attribute("A", values=(0, 1, 2, 3)), Attribute("B", values=(0, 1, 2, 3, 4))), ("UNIT",)
)
CELLS = 20


def _data(units: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Records in ``units`` units (some empty) and the declared geography."""
    rng = np.random.default_rng(seed)
    sizes = rng.poisson(3, units)
    unit = np.repeat(np.arange(units), sizes)
    df = pd.DataFrame(
        {
            "UNIT": [f"U{u:05d}" for u in unit],
            "A": rng.integers(0, 4, unit.size),
            "B": rng.integers(0, 5, unit.size),
        }
    )
    geography = pd.DataFrame({"UNIT": [f"U{u:05d}" for u in range(units)]})
    return df, geography


def _strategy(mechanism: str = "discrete_gaussian") -> Strategy:
    queries = ((Query(None), Fraction(3, 4)), (Query(("A",)), Fraction(1, 4)))
    return Strategy(
        (LevelStrategy(Fraction(1), queries), LevelStrategy(Fraction(1, 2), queries)), mechanism
    )


def _measure(units: int, executor: Executor | None = None, key: bytes | None = None, **kw):
    df, geography = _data(units)
    tree, truth = build_tree(df, SCHEMA, geography=geography)
    ledger = Ledger()
    m, _ = measure(
        tree,
        truth,
        SCHEMA.domain,
        _strategy(**kw),
        release_key=key or new_release_key(7),
        ledger=ledger,
        executor=executor,
    )
    return m, truth, ledger


@pytest.fixture
def small_chunks(monkeypatch):
    """13 nodes per chunk (a size that does not divide the levels used here)."""
    monkeypatch.setattr(measure_module, "CHUNK_CELLS", 13 * CELLS)
    assert chunk_nodes(CELLS) == 13


def test_chunk_nodes_depends_on_cells_only():
    assert chunk_nodes(2016) == 2**20 // 2016
    assert chunk_nodes(1) == measure_module.MAX_CHUNK_NODES
    assert chunk_nodes(2**21) == 1
    with pytest.raises(ValueError, match=r"cells \(0\) must be at least 1"):
        chunk_nodes(0)


def test_noise_of_a_chunk_is_one_sampler_call_on_its_keyed_stream(small_chunks):
    """The documented layout: chunk c of (level, query) is one call on its own stream."""
    key = new_release_key(3)
    m, truth, _ = _measure(40, key=key)
    _assert_keyed_chunks(m, truth, key)


def _assert_keyed_chunks(m, truth, key, check=lambda qm: None) -> None:
    """Every chunk of 13 nodes of each (level, query) is one sampler call on its own stream
    (``check`` runs on each query's measurement first)."""
    strategy = _strategy()
    for level in (0, 1):
        for qm, (query, share) in zip(m.at(level), strategy.levels[level].queries, strict=True):
            check(qm)
            sigma2 = Fraction(1) / (2 * strategy.levels[level].budget * share)
            answers = query.answer(truth.counts[level], SCHEMA.domain)
            for c, first in enumerate(range(0, answers.shape[0], 13)):
                rows = answers[first : first + 13]
                rng = child_rng(key, "measure", level, query.name, 13, c)
                expected = rows + sample_discrete_gaussian(sigma2, rows.shape, rng=rng)
                np.testing.assert_array_equal(qm.noisy[first : first + 13], expected)


class Backwards(Executor):
    """Runs a stream's tasks last first: results arrive in reverse order."""

    def stream(self, fn, tasks, total, progress=None, desc=""):
        done = [(i, fn(t)) for i, t in enumerate(tasks)]
        return iter(done[::-1])


def test_same_noise_on_every_executor_and_order(small_chunks):
    serial, _, _ = _measure(300)
    with ProcessExecutor(workers=2, min_tasks=1) as pool:
        two, _, _ = _measure(300, executor=pool)
    with ProcessExecutor(workers=3, min_tasks=1) as three_workers:
        one, _, _ = _measure(300, executor=three_workers)
    backwards, _, _ = _measure(300, executor=Backwards())
    for other in (two, one, backwards):
        for a, b in zip(serial.levels, other.levels, strict=True):
            for x, y in zip(a, b, strict=True):
                np.testing.assert_array_equal(x.noisy, y.noisy)
    other_key, _, _ = _measure(300, key=new_release_key(8))
    assert not np.array_equal(serial.at(1)[0].noisy, other_key.at(1)[0].noisy)


class _Recording(Executor):
    """The serial executor, keeping every task it was sent (what would leave for a worker)."""

    def __init__(self) -> None:
        self.seen: list = []

    def stream(self, fn, tasks, total, progress=None, desc=""):
        tasks = list(tasks)
        self.seen.extend(tasks)
        return super().stream(fn, tasks, total, progress, desc)


def test_tasks_carry_only_their_chunk_rows(small_chunks):
    """A worker receives the confidential rows of its own chunk, nothing else of the truth."""
    recording = _Recording()
    seen = recording.seen

    _, truth, _ = _measure(40, executor=recording)
    level1 = [t for t in seen if t.level == 1]
    assert [t.chunk for t in level1] == [0, 1, 2, 3]
    for t in level1:
        np.testing.assert_array_equal(
            t.histograms, truth.counts[1][t.chunk * 13 : (t.chunk + 1) * 13]
        )
    assert [len(t.histograms) for t in level1] == [13, 13, 13, 1]


def test_tasks_carry_their_own_stream_keys_never_the_release_key(small_chunks):
    """Issue 30 A6: what leaves this process for a worker is each chunk's derived stream key
    (one per query), from which neither the release key nor another chunk's key follows; the
    noise is the same as before (the documented streams, checked by ``_assert_keyed_chunks``)."""
    recording = _Recording()
    seen = recording.seen

    key = new_release_key(5)
    m, truth, _ = _measure(40, executor=recording, key=key)
    _assert_keyed_chunks(m, truth, key)
    assert len(seen) == 5  # 1 chunk at the root, 4 on level 1
    keys = set()
    for t in seen:
        assert key not in pickle.dumps(t)  # the release key is not in what is shipped
        assert not any(isinstance(v, bytes) and v == key for v in vars(t).values())
        assert t.keys == tuple(
            child_key(key, "measure", t.level, q.name, 13, t.chunk) for q in t.queries
        )
        keys.update(t.keys)
    assert len(keys) == 10  # a key per (level, query, chunk), each used once


def test_ledger_has_one_record_per_level_and_query(small_chunks):
    _, _, ledger = _measure(40, mechanism="discrete_laplace")
    records = [(r.query, r.level, r.nodes) for r in ledger.entries]
    assert records == [("detailed", 0, 1), ("A", 0, 1), ("detailed", 1, 40), ("A", 1, 40)]
    assert ledger.total().epsilon == Fraction(3, 2)


def _residual_pvalues(residual: np.ndarray, sigma2: Fraction) -> dict[str, float]:
    """p-values: chi-square fit to the exact pmf; correlation of neighbouring nodes' noise
    (within a chunk: node i and i + 1) and of the same row in consecutive chunks."""
    flat = residual.ravel()
    half = 12
    support = np.arange(-half, half + 1)
    pmf = np.asarray(discrete_gaussian_pmf(support, sigma2))
    clipped = np.clip(flat, -half, half)
    observed = np.bincount(clipped + half, minlength=support.size)
    expected = pmf * flat.size
    expected[0] += (1 - pmf.sum()) / 2 * flat.size
    expected[-1] += (1 - pmf.sum()) / 2 * flat.size
    keep = expected >= 20
    observed_k = np.concatenate([observed[keep], [observed[~keep].sum()]])
    expected_k = np.concatenate([expected[keep], [expected[~keep].sum()]])
    chi2 = stats.chisquare(observed_k, expected_k * observed_k.sum() / expected_k.sum())

    def corr_p(x: np.ndarray, y: np.ndarray) -> float:
        return float(stats.pearsonr(x.ravel(), y.ravel()).pvalue)

    size = 13
    n = residual.shape[0] // size * size
    chunks = residual[:n].reshape(-1, size, residual.shape[1])
    return {
        "fit": float(chi2.pvalue),
        "within": corr_p(residual[:-1], residual[1:]),
        "across": corr_p(chunks[:-1], chunks[1:]),
    }


@pytest.mark.slow
def test_noise_is_calibrated_and_independent_across_nodes_and_chunks(small_chunks, monkeypatch):
    m, truth, _ = _measure(5000)
    detailed = m.at(1)[0]
    sigma2 = Fraction(1) / (2 * Fraction(1, 2) * Fraction(3, 4))
    residual = detailed.noisy - truth.counts[1]
    pvalues = _residual_pvalues(residual, sigma2)
    assert min(pvalues.values()) >= ALPHA / 3, pvalues

    # power: the bug this layout must avoid (every chunk on the same stream) is caught
    real_child_key = child_key
    monkeypatch.setattr(
        measure_module, "child_key", lambda key, *path: real_child_key(key, *path[:-1])
    )
    bad, truth, _ = _measure(5000)
    bad_residual = bad.at(1)[0].noisy - truth.counts[1]
    assert _residual_pvalues(bad_residual, sigma2)["across"] < ALPHA / 3


def test_a_wider_chunk_widens_its_level_without_changing_a_value():
    small = np.array([[1, -2]], dtype=np.int8)
    wide = np.array([[300, 0]], dtype=np.int16)
    out = measure_module._store(None, small, 0, 3)
    assert out.dtype == np.int8
    out = measure_module._store(out, wide, 1, 3)
    out = measure_module._store(out, small, 2, 3)
    assert out.dtype == np.int16
    np.testing.assert_array_equal(out, [[1, -2], [300, 0], [1, -2]])


def test_noisy_answers_are_stored_narrow_with_the_sampler_values(small_chunks):
    """One unit of 400 records in one cell (chunk 2 of level 1): its level needs int16, the
    others' answers fit int8 (a level total fits int16); every value is the sampler's."""
    df, geography = _data(40)
    big = pd.DataFrame({"UNIT": ["U00030"] * 400, "A": [1] * 400, "B": [2] * 400})
    df = pd.concat([df, big], ignore_index=True)
    tree, truth = build_tree(df, SCHEMA, geography=geography)
    key = new_release_key(5)
    m, _ = measure(tree, truth, SCHEMA.domain, _strategy(), release_key=key, ledger=Ledger())

    def narrowest(qm) -> None:
        assert qm.noisy.dtype == smallest_int_type(qm.noisy)

    _assert_keyed_chunks(m, truth, key, narrowest)
    assert m.at(1)[0].noisy.dtype == np.int16 and m.at(0)[0].noisy.dtype == np.int16


def test_narrow_histograms_measure_as_int64_ones():
    """A unit with 100 records in each of two cells of A = 1: every cell fits int8 (127), so
    its level's histograms are int8, but the marginal on A sums to over 200 there, which int8
    arithmetic would wrap round (200 to -56). The noisy answers are those of int64 histograms."""
    df, geography = _data(40)
    big = pd.DataFrame({"UNIT": ["U00007"] * 200, "A": [1] * 200, "B": [0, 1] * 100})
    df = pd.concat([df, big], ignore_index=True)
    tree, narrow = build_tree(df, SCHEMA, geography=geography)
    _, wide = build_tree(df, SCHEMA, geography=geography, dtype=np.int64)
    assert narrow.counts[1].dtype == np.int8 and narrow.counts[1].max() == 100
    assert narrow.counts[0].dtype == np.int8 and narrow.counts[0].max() < 128  # the root's too
    for a, b in zip(narrow.counts, wide.counts, strict=True):
        np.testing.assert_array_equal(a, b)
    key = new_release_key(3)
    got, want = (
        measure(tree, truth, SCHEMA.domain, _strategy(), release_key=key, ledger=Ledger())[0]
        for truth in (narrow, wide)
    )
    unit = 7
    assert Query(("A",)).answer(narrow.counts[1][unit : unit + 1], SCHEMA.domain)[0, 1] >= 200
    assert Query(("A",)).answer(narrow.counts[0], SCHEMA.domain)[0, 1] > 200
    for level in (0, 1):
        for g, w in zip(got.at(level), want.at(level), strict=True):
            np.testing.assert_array_equal(g.noisy, w.noisy)
