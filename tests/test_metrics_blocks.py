"""The accuracy metrics read a level a block of nodes at a time, with the figures of the whole.

``compute_metrics`` and the headline figures hold one block of a level's answers at once (a
DHC tract level's detailed answers are 3.9 GB of floats); these tests cut small levels into
blocks of one or two nodes and check every figure against a reference computed here on the
whole arrays with numpy.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from constraints import Domain
from mechanisms.accounting import ZCDP
from topdown.measurement.measure import Measurements, QueryMeasurement
from topdown.outputs import headline, metrics
from topdown.outputs.headline import masked_sums
from topdown.outputs.metrics import compute_metrics
from topdown.strategy import Query

DOMAIN = Domain({"A": range(3), "B": range(4)})


def _measured(level: int, query: Query, noisy: np.ndarray) -> QueryMeasurement:
    return QueryMeasurement(level, query, Fraction(1), "discrete_gaussian", ZCDP(1), 0.5, noisy)


def _case(seed: int) -> tuple[list[np.ndarray], list[np.ndarray], Measurements]:
    """Two levels (1 and 7 nodes, 12 cells); the child level measures the detailed cells and
    the A marginal, the root the detailed cells only."""
    rng = np.random.default_rng(seed)
    truth = [rng.integers(0, 6, (1, 12)), rng.integers(0, 3, (7, 12))]
    truth[1][2] = 0  # an empty node: skipped by the TVD
    released = [t + rng.integers(-1, 2, t.shape).clip(-t) for t in truth]
    detailed = [t + rng.integers(-3, 4, t.shape) for t in truth]
    marginal = Query.parse("A")
    m = Measurements(
        (
            (_measured(0, Query(None), detailed[0]),),
            (
                _measured(1, Query(None), detailed[1]),
                _measured(1, marginal, marginal.answer(truth[1], DOMAIN) + 1),
            ),
        )
    )
    return [r.astype(np.int8) for r in released], [t.astype(np.int16) for t in truth], m


def _reference(est: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """The figures on the whole arrays, as the metrics module documents them."""
    err = est - truth
    e = np.maximum(est, 0.0)
    ok = (e.sum(1) > 0) & (truth.sum(1) > 0)
    p, q = e[ok] / e[ok].sum(1, keepdims=True), truth[ok] / truth[ok].sum(1, keepdims=True)
    return {
        "mae": np.abs(err).mean(),
        "rmse": np.sqrt((err**2).mean()),
        "bias": err.mean(),
        "tvd": 0.5 * np.abs(p - q).sum(1).mean() if truth.shape[1] > 1 else np.nan,
    }


@pytest.mark.parametrize("block_bytes", [1, 8 * 12 * 2, 1 << 25])
def test_metrics_by_blocks_equal_the_whole_level(monkeypatch, block_bytes: int) -> None:
    released, truth, measured = _case(3)
    monkeypatch.setattr(metrics, "METRICS_BLOCK_BYTES", block_bytes)
    table = compute_metrics(DOMAIN, released, truth, measured).table.set_index(
        ["level", "query", "estimator"]
    )
    marginal = Query.parse("A")
    for level in (0, 1):
        t = truth[level].astype(float)
        cases = {
            ("detailed", "release"): (released[level].astype(float), t),
            ("detailed", "noisy"): (np.maximum(measured.at(level)[0].noisy, 0.0), t),
            ("total", "release"): (
                released[level].sum(1, keepdims=True).astype(float),
                t.sum(1, keepdims=True),
            ),
            ("total", "noisy"): (
                measured.at(level)[0].noisy.sum(1, keepdims=True),
                t.sum(1, keepdims=True),
            ),
        }
        if level == 1:
            cases[("A", "release")] = (
                marginal.answer(released[1], DOMAIN),
                marginal.answer(t, DOMAIN),
            )
            cases[("A", "noisy")] = (measured.at(1)[1].noisy, marginal.answer(t, DOMAIN))
        for (query, estimator), (est, true) in cases.items():
            row = table.loc[(level, query, estimator)]
            expected = _reference(np.asarray(est, dtype=float), true)
            assert row["nodes"] == true.shape[0] and row["answers"] == true.size
            for name, value in expected.items():
                assert row[name] == pytest.approx(value, rel=1e-12, nan_ok=True), (
                    level,
                    query,
                    name,
                )


def test_metrics_hold_one_block_of_answers_at_a_time(monkeypatch) -> None:
    """With blocks of one node, no array of more than one node's answers is converted: the
    queries' answers are asked for one row at a time."""
    released, truth, measured = _case(4)
    monkeypatch.setattr(metrics, "METRICS_BLOCK_BYTES", 1)
    seen: list[int] = []
    original = Query.answer

    def spy(self: Query, counts: np.ndarray, domain: Domain) -> np.ndarray:
        seen.append(np.asarray(counts).shape[0])
        return original(self, counts, domain)

    monkeypatch.setattr(Query, "answer", spy)
    compute_metrics(DOMAIN, released, truth, measured)
    assert seen and max(seen) == 1


@pytest.mark.parametrize("block_bytes", [1, 16, 1 << 25])
def test_masked_sums_by_blocks(monkeypatch, block_bytes: int) -> None:
    rng = np.random.default_rng(5)
    counts = rng.integers(0, 120, (9, 12)).astype(np.int8)  # int8: the sums must not wrap
    mask = rng.random(12) < 0.7
    monkeypatch.setattr(headline, "MASKED_BLOCK_BYTES", block_bytes)
    expected = counts.astype(np.int64)[:, mask].sum(axis=1)
    assert masked_sums(counts, mask).tolist() == expected.tolist()
    assert expected.max() > 127
