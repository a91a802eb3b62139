"""The engine on the real ACS excerpt (27,253 records, 16 states, 20 PUMAs).

Figures are means over two seeds; the margins are wide (the benchmark
``benchmarks/bench_acs_release.py`` gives the full table over more seeds).
"""

from __future__ import annotations

import numpy as np
import pytest

from topdown import Strategy, release
from topdown.support.progress import Progress

PUMA = 2


def _puma_mae(acs, strategy: Strategy, seeds=(1, 2)):
    df, schema = acs
    out = {}
    for seed in seeds:
        rel = release(df, schema, strategy, seed=seed, progress=Progress(enabled=False))
        report = rel.check_correctness()
        assert report.ok, str(report)
        t = rel.metrics(df).table
        t = t[t["level"] == PUMA].set_index(["query", "estimator"])["mae"]
        for key, value in t.items():
            out.setdefault(key, []).append(value)
    return {k: float(np.mean(v)) for k, v in out.items()}


@pytest.mark.parametrize(
    "mechanism,budget", [("discrete_gaussian", "1/2"), ("discrete_laplace", "1")]
)
def test_release_beats_clipped_noise_on_cells(acs, mechanism, budget):
    """TopDown's cells are more accurate than the noisy cells clipped at zero (consistency
    pools the children's noise); its totals, with no total measured, are no better than
    summing the noisy cells (non-negativity's bias)."""
    mae = _puma_mae(acs, Strategy.from_budgets([budget] * 3, mechanism=mechanism))
    assert mae[("detailed", "release")] < 0.9 * mae[("detailed", "noisy")]
    assert mae[("total", "release")] > 0.5 * mae[("total", "noisy")]


def test_measuring_the_total_fixes_the_totals(acs):
    detailed = _puma_mae(acs, Strategy.from_budgets(["1/2"] * 3))
    with_total = _puma_mae(
        acs, Strategy.from_budgets(["1/2"] * 3, queries=[("detailed", "3/4"), ("total", "1/4")])
    )
    assert with_total[("total", "release")] < 0.4 * detailed[("total", "release")]
    # the cells pay for it with a quarter of the budget, but stay better than clipped noise
    assert with_total[("detailed", "release")] < with_total[("detailed", "noisy")]
