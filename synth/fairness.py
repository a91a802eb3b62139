"""Fairness of private selection: how the exponential mechanism reports a rare value for a
small group and for a large one at the same epsilon.

For each group of a protected column, a value of an attribute is reported by the
exponential mechanism whose score is each value's count in the group (sensitivity 1). With
the budget split by group size, a small group gets a small epsilon and a nearly uniform
report: its rare values are reported far more often than they occur. A large group gets a
sharply peaked report: its rare values are almost never reported. The table puts the report
probabilities of the exponential mechanism and of permute-and-flip (McKenna & Sheldon 2020)
beside the true rates; :func:`plot_disparity` draws it.

Probabilities are the mechanisms' exact selection probabilities
(:func:`mechanisms.exponential_probabilities`, and
:func:`mechanisms.permute_and_flip_probabilities` by enumeration up to 8 values); above 8
values permute-and-flip's are estimated from ``draws`` exact samples. The counts are the
confidential data: this is an analysis of the mechanisms, not a release.
"""

from __future__ import annotations

import logging
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from mechanisms.rng import make_rng
from mechanisms.selection import (
    exponential_probabilities,
    permute_and_flip,
    permute_and_flip_probabilities,
)
from synth._domains import SynthError, check_frame, check_seed
from synth.crosstab import check_epsilon

__all__ = ["exponential_disparity", "group_epsilons", "plot_disparity"]

logger = logging.getLogger(__name__)

SPLITS = ("size", "equal", "full")


def group_epsilons(sizes: dict[Any, int], epsilon: Fraction, split: str) -> dict[Any, Fraction]:
    """Each group's epsilon: proportional to its size (``"size"``), equal shares
    (``"equal"``), or the whole budget each (``"full"``: groups are disjoint, so parallel
    composition allows it)."""
    if split not in SPLITS:
        raise SynthError(f"split ({split!r}) must be one of {SPLITS}")
    total = sum(sizes.values())
    if split == "size":
        return {g: epsilon * Fraction(s, total) for g, s in sizes.items()}
    if split == "equal":
        return {g: epsilon / len(sizes) for g in sizes}
    return {g: epsilon for g in sizes}


def exponential_disparity(
    data: pd.DataFrame,
    group: str,
    attribute: str,
    epsilon: object,
    *,
    split: str = "size",
    monotonic: bool = False,
    draws: int = 20_000,
    seed: int | None = None,
) -> pd.DataFrame:
    """Report probabilities of each value for each group, beside the true rates.

    Args:
        data: records with the protected ``group`` column and the ``attribute``.
        epsilon: total budget, divided between groups by ``split`` (see
            :func:`group_epsilons`).
        monotonic: use the factor epsilon / Delta (counts are monotonic under add/remove);
            default False, the general epsilon / (2 Delta).
        draws: Monte Carlo draws for permute-and-flip above 8 values (exact sampler).
        seed: the seed of those draws: None (the default) is the secure source, an integer
            is reproducible.

    Returns:
        One row per (group, value): ``n_group``, ``epsilon_group``, ``count``, ``true_rate``,
        ``p_exponential``, ``p_permute_flip``, and the ratios of each to the true rate.
    """
    data = check_frame(data)
    for name, column in (("group", group), ("attribute", attribute)):
        if column not in data.columns:
            raise SynthError(f"{name} ({column!r}) is not a column of the data")
    eps = check_epsilon(epsilon)
    values = sorted(data[attribute].unique().tolist(), key=str)
    counts = pd.crosstab(data[group], data[attribute]).reindex(columns=values, fill_value=0)
    sizes = {g: int(counts.loc[g].sum()) for g in counts.index}
    epsilons = group_epsilons(sizes, eps, split)
    rng = make_rng(check_seed(seed))
    rows = []
    for g in counts.index:
        scores = [int(c) for c in counts.loc[g]]
        p_em = exponential_probabilities(scores, epsilons[g], 1, monotonic)
        if len(scores) <= 8:
            p_pf = permute_and_flip_probabilities(scores, epsilons[g], 1, monotonic)
        else:
            picks = [permute_and_flip(scores, epsilons[g], 1, monotonic, rng) for _ in range(draws)]
            p_pf = np.bincount(picks, minlength=len(scores)) / draws
        for j, value in enumerate(values):
            rate = scores[j] / sizes[g]
            rows.append(
                {
                    "group": g,
                    "value": value,
                    "n_group": sizes[g],
                    "epsilon_group": float(epsilons[g]),
                    "count": scores[j],
                    "true_rate": rate,
                    "p_exponential": float(p_em[j]),
                    "p_permute_flip": float(p_pf[j]),
                    "ratio_exponential": float(p_em[j]) / rate if rate > 0 else np.inf,
                    "ratio_permute_flip": float(p_pf[j]) / rate if rate > 0 else np.inf,
                }
            )
    return pd.DataFrame(rows)


def plot_disparity(table: pd.DataFrame, value: Any, path: str | None = None) -> Any:
    """Bars per group of the true rate of ``value`` and its report probabilities under the
    exponential mechanism and permute-and-flip; saved to ``path`` if given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = table[table["value"] == value]
    if rows.empty:
        raise SynthError(f"value ({value!r}) is not in the table")
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(4, 1.5 * len(rows)), 3.5))
    for offset, column, label in (
        (-0.27, "true_rate", "true rate"),
        (0.0, "p_exponential", "exponential mechanism"),
        (0.27, "p_permute_flip", "permute-and-flip"),
    ):
        ax.bar(x + offset, rows[column], width=0.27, label=label)
    ax.set_xticks(x, [f"{g}\n(n={n})" for g, n in zip(rows["group"], rows["n_group"], strict=True)])
    ax.set_ylabel(f"P(report {value!r})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig
