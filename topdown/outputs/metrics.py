"""Accuracy of a release against the confidential data, beside the raw noisy measurements.

For each level and each query (the total, the detailed cells, and every query of the
strategy) this reports mean absolute error, root mean squared error, mean signed error (bias)
and total variation distance between the node's released and true distributions. The same
figures for the raw noisy measurements show what post-processing did: the noisy detailed
cells are clipped at zero (the obvious fix anyone would apply), while a marginal that was not
measured directly is taken as the sum of the noisy cells (unbiased, possibly negative).

Bias by node size groups a level's nodes by their true count: TopDown's known weakness is that
non-negativity pushes small units up and, since children must sum to their parent, large ones
down.

These figures read the truth: they are for evaluation, and are not differentially private.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from constraints.domain import Domain
from topdown.measurement.measure import Measurements, QueryMeasurement
from topdown.outputs.headline import HEADLINE_COLUMNS, HeadlineFigure, headline_table
from topdown.strategy import Query
from topdown.support.row_blocks import row_blocks

__all__ = ["Metrics", "compute_metrics", "SIZE_BINS", "METRICS_BLOCK_BYTES"]

SIZE_BINS = (0, 10, 100, 1_000, 10_000, 100_000, np.inf)


@dataclass(frozen=True)
class Metrics:
    """``table``: one row per (level, query, estimator); ``bias_by_size``: per size bin;
    ``headline``: the headline figures asked for (``topdown.outputs.headline``), if any."""

    table: pd.DataFrame
    bias_by_size: pd.DataFrame
    headline: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=list(HEADLINE_COLUMNS))
    )

    def summary(self) -> pd.DataFrame:
        """Release vs noisy side by side for the total and the detailed cells."""
        t = self.table[self.table["query"].isin(["total", "detailed"])]
        return t.pivot_table(
            index=["level", "query"], columns="estimator", values=["mae", "rmse"]
        ).round(3)


#: Bytes of one block of a level's answers (float64) that the metrics hold at once: a level's
#: detailed answers are (nodes x cells) floats, 3.9 GB at the tracts of a DHC-shaped state
#: (400 x 1,227,744 cells), and the figures need several such arrays (truth, release, noisy,
#: their difference); by blocks of nodes only a block's worth is alive
METRICS_BLOCK_BYTES = 1 << 25


def compute_metrics(
    domain: Domain,
    release_counts: Sequence[np.ndarray],
    true_counts: Sequence[np.ndarray],
    measurements: Measurements,
    extra_queries: Sequence[Query] = (),
    headline: Sequence[HeadlineFigure] = (),
    level_names: Sequence[str] | None = None,
) -> Metrics:
    """Compare released and noisy answers with the truth, level by level; ``headline``'s
    figures too (``level_names`` name the levels in their table).

    Each level is read a block of nodes at a time (about ``METRICS_BLOCK_BYTES`` of one
    query's float answers), the figures summed over the blocks: memory follows the block, not
    the level. The figures are those of the whole level at once, to floating-point rounding
    (sums in another order)."""
    rows, bias_rows = [], []
    for level, (released, truth) in enumerate(zip(release_counts, true_counts, strict=True)):
        queries = _queries_of_level(measurements, level, extra_queries)
        noisy_detailed = measurements.get(level, "detailed")
        for query in queries:
            width = query.n_answers(domain)
            release_sums, noisy_sums = _ErrorSums(), _ErrorSums()
            # the noisy figures exist when the query or the detailed cells were measured
            direct = measurements.get(level, query.name)
            noisy_seen = noisy_detailed is not None or direct is not None
            for block in row_blocks(truth.shape[0], 8 * max(width, 1), METRICS_BLOCK_BYTES):
                true_ans = query.answer(truth[block], domain).astype(float)
                rel_ans = query.answer(released[block], domain).astype(float)
                release_sums.add(rel_ans, true_ans)
                noisy = _noisy_answers(measurements, level, query, noisy_detailed, domain, block)
                if noisy is not None:
                    noisy_sums.add(noisy, true_ans)
            rows.append(release_sums.row(level, query.name, "release", width))
            if noisy_seen:
                rows.append(noisy_sums.row(level, query.name, "noisy", width))
        true_total = _totals(truth)
        rel_total = _totals(released)
        noisy_total = _noisy_totals(measurements, level, noisy_detailed, domain, truth.shape[0])
        bins = pd.cut(true_total, bins=list(SIZE_BINS), right=False)
        for estimator, est in (
            ("release", rel_total),
            ("noisy", None if noisy_total is None else noisy_total[:, 0]),
        ):
            if est is None:
                continue
            err = pd.Series(est - true_total)
            grouped = err.groupby(bins, observed=True)
            for interval, values in grouped:
                bias_rows.append(
                    {
                        "level": level,
                        "size_bin": _bin_label(interval),
                        "estimator": estimator,
                        "nodes": int(values.size),
                        "mean_error": float(values.mean()),
                        "mean_abs_error": float(values.abs().mean()),
                    }
                )
    figures = headline_table(domain, release_counts, true_counts, headline, level_names)
    return Metrics(pd.DataFrame(rows), pd.DataFrame(bias_rows), figures)


def _noisy_totals(
    measurements: Measurements,
    level: int,
    noisy_detailed: QueryMeasurement | None,
    domain: Domain,
    nodes: int,
) -> np.ndarray | None:
    """The noisy node totals (nodes, 1) as ``_noisy_answers`` gives them, a block at a time."""
    total = Query(())
    blocks = [
        _noisy_answers(measurements, level, total, noisy_detailed, domain, block)
        for block in row_blocks(nodes, 8 * domain.size, METRICS_BLOCK_BYTES)
    ]
    if not blocks:
        return _noisy_answers(measurements, level, total, noisy_detailed, domain)
    if any(b is None for b in blocks):
        return None
    return np.concatenate([b for b in blocks if b is not None])


def _totals(counts: np.ndarray) -> np.ndarray:
    """Each node's total as floats (summed in int64: a narrow count type must not wrap)."""
    return np.asarray(counts).sum(axis=1, dtype=np.int64).astype(float)


@dataclass
class _ErrorSums:
    """One query's error figures summed over blocks of nodes: the sums that make the mean
    absolute error, the root mean squared error, the bias and the mean TVD of the whole level."""

    nodes: int = 0
    answers: int = 0
    abs_error: float = 0.0
    squared_error: float = 0.0
    error: float = 0.0
    tvd: float = 0.0
    tvd_nodes: int = 0

    def add(self, est: np.ndarray, truth: np.ndarray) -> None:
        err = est - truth
        self.nodes += int(truth.shape[0])
        self.answers += int(truth.size)
        self.abs_error += float(np.abs(err).sum())
        self.squared_error += float(np.square(err).sum())
        self.error += float(err.sum())
        tvd, ok = _node_tvd(est, truth)
        self.tvd += tvd
        self.tvd_nodes += ok

    def row(self, level: int, query: str, estimator: str, width: int) -> dict:
        """The metrics table's row; NaN for a figure of no answers (as numpy's mean of none)."""
        n = self.answers
        return {
            "level": level,
            "query": query,
            "estimator": estimator,
            "nodes": self.nodes,
            "answers": n,
            "mae": self.abs_error / n if n else float("nan"),
            "rmse": float(np.sqrt(self.squared_error / n)) if n else float("nan"),
            "bias": self.error / n if n else float("nan"),
            "tvd": self.tvd / self.tvd_nodes if width >= 2 and self.tvd_nodes else float("nan"),
        }


def _queries_of_level(
    measurements: Measurements, level: int, extra: Sequence[Query]
) -> list[Query]:
    seen: dict[str, Query] = {"total": Query(()), "detailed": Query(None)}
    for m in measurements.at(level):
        seen.setdefault(m.query.name, m.query)
    for q in extra:
        seen.setdefault(q.name, q)
    return list(seen.values())


def _noisy_answers(
    measurements: Measurements,
    level: int,
    query: Query,
    noisy_detailed: QueryMeasurement | None,
    domain: Domain,
    block: slice | None = None,
) -> np.ndarray | None:
    """The raw noisy answers of ``query`` at the nodes ``block`` of ``level`` (all by
    default): measured directly (the detailed cells clipped at 0), else summed from the noisy
    cells; None when neither was measured."""
    rows = slice(None) if block is None else block
    direct = measurements.get(level, query.name)
    if direct is not None:
        ans = direct.noisy[rows].astype(float)
        return np.maximum(ans, 0.0) if query.attributes is None else ans
    if noisy_detailed is None:
        return None
    return query.answer(noisy_detailed.noisy[rows], domain).astype(float)


def _node_tvd(est: np.ndarray, truth: np.ndarray) -> tuple[float, int]:
    """The sum over nodes of the total variation distance between normalised answer vectors
    (estimates clipped at zero first), and the number of nodes summed: a node where either
    side is empty is skipped (the mean TVD is their ratio)."""
    if truth.shape[1] < 2:
        return 0.0, 0
    e = np.maximum(est, 0.0)
    es, ts = e.sum(axis=1), truth.sum(axis=1)
    ok = (es > 0) & (ts > 0)
    if not ok.any():
        return 0.0, 0
    p = e[ok] / es[ok, None]
    q = truth[ok] / ts[ok, None]
    return float(0.5 * np.abs(p - q).sum(axis=1).sum()), int(ok.sum())


def _bin_label(interval: pd.Interval) -> str:
    lo, hi = interval.left, interval.right
    return f"{int(lo)}+" if not np.isfinite(hi) else f"{int(lo)}-{int(hi) - 1}"
