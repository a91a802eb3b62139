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
from topdown.measurement.measure import Measurements
from topdown.outputs.headline import HEADLINE_COLUMNS, HeadlineFigure, headline_table
from topdown.strategy import Query

__all__ = ["Metrics", "compute_metrics", "SIZE_BINS"]

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
    figures too (``level_names`` name the levels in their table)."""
    rows, bias_rows = [], []
    for level, (released, truth) in enumerate(zip(release_counts, true_counts, strict=True)):
        queries = _queries_of_level(measurements, level, extra_queries)
        noisy_detailed = measurements.get(level, "detailed")
        for query in queries:
            true_ans = query.answer(truth, domain).astype(float)
            rel_ans = query.answer(released, domain).astype(float)
            rows.append(_row(level, query.name, "release", rel_ans, true_ans))
            noisy = _noisy_answers(measurements, level, query, noisy_detailed, domain)
            if noisy is not None:
                rows.append(_row(level, query.name, "noisy", noisy, true_ans))
        true_total = truth.sum(axis=1).astype(float)
        rel_total = released.sum(axis=1).astype(float)
        noisy_total = _noisy_answers(measurements, level, Query(()), noisy_detailed, domain)
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


def _queries_of_level(
    measurements: Measurements, level: int, extra: Sequence[Query]
) -> list[Query]:
    seen: dict[str, Query] = {"total": Query(()), "detailed": Query(None)}
    for m in measurements.at(level):
        seen.setdefault(m.query.name, m.query)
    for q in extra:
        seen.setdefault(q.name, q)
    return list(seen.values())


def _noisy_answers(measurements, level, query, noisy_detailed, domain) -> np.ndarray | None:
    direct = measurements.get(level, query.name)
    if direct is not None:
        ans = direct.noisy.astype(float)
        return np.maximum(ans, 0.0) if query.attributes is None else ans
    if noisy_detailed is None:
        return None
    return query.answer(noisy_detailed.noisy, domain).astype(float)


def _row(level: int, query: str, estimator: str, est: np.ndarray, truth: np.ndarray) -> dict:
    err = est - truth
    return {
        "level": level,
        "query": query,
        "estimator": estimator,
        "nodes": int(truth.shape[0]),
        "answers": int(truth.size),
        "mae": float(np.abs(err).mean()),
        "rmse": float(np.sqrt((err**2).mean())),
        "bias": float(err.mean()),
        "tvd": _mean_tvd(est, truth),
    }


def _mean_tvd(est: np.ndarray, truth: np.ndarray) -> float:
    """Mean over nodes of the total variation distance between normalised answer vectors
    (estimates clipped at zero first; nodes where either side is empty are skipped)."""
    if truth.shape[1] < 2:
        return float("nan")
    e = np.maximum(est, 0.0)
    es, ts = e.sum(axis=1), truth.sum(axis=1)
    ok = (es > 0) & (ts > 0)
    if not ok.any():
        return float("nan")
    p = e[ok] / es[ok, None]
    q = truth[ok] / ts[ok, None]
    return float(0.5 * np.abs(p - q).sum(axis=1).mean())


def _bin_label(interval: pd.Interval) -> str:
    lo, hi = interval.left, interval.right
    return f"{int(lo)}+" if not np.isfinite(hi) else f"{int(lo)}-{int(hi) - 1}"
