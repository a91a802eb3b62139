"""Forward sampling of synth.graphical matches the model's marginals (statistical test).

Each test compares n = 40,000 sampled records with the model on every clique of its
junction tree and on two marginals no clique holds, by Pearson's chi-square test. The
false-alarm rate is alpha = 1e-6 for the whole test (Bonferroni over the marginals tested);
the power check draws from the model, then tests against a second model whose one cell's
probability is 30% higher, which must be rejected at the same threshold.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from synth.graphical import GraphicalModel, build_junction_tree

SIZES = (3, 2, 4, 2, 3)
CLIQUES = [(0, 1), (1, 2), (0, 2), (2, 3), (3, 4)]
ALPHA = 1e-6
N = 40_000


def _model(potentials) -> GraphicalModel:
    return GraphicalModel(SIZES, build_junction_tree(CLIQUES, SIZES), potentials, float(N))


def _potentials(seed: int):
    rng = np.random.default_rng(seed)
    return {c: rng.normal(0, 0.5, [SIZES[a] for a in c]) for c in CLIQUES}


def _p_values(codes: np.ndarray, model: GraphicalModel) -> list[float]:
    out = []
    marginals = [*model.tree.cliques, (0, 3), (1, 4)]
    for attrs in marginals:
        shape = tuple(SIZES[a] for a in attrs)
        flat = np.ravel_multi_index(tuple(codes[:, a] for a in attrs), shape)
        observed = np.bincount(flat, minlength=int(np.prod(shape)))
        expected = model.probability(attrs).reshape(-1) * len(codes)
        out.append(float(stats.chisquare(observed, expected).pvalue))
    return out


@pytest.mark.slow
def test_samples_match_the_model_marginals():
    model = _model(_potentials(11))
    codes = model.sample(N, np.random.default_rng(12))
    assert codes.shape == (N, len(SIZES))
    p_values = _p_values(codes, model)
    assert min(p_values) > ALPHA / len(p_values), p_values


@pytest.mark.slow
def test_power_a_cell_30_percent_off_is_rejected():
    potentials = _potentials(11)
    model = _model(potentials)
    codes = model.sample(N, np.random.default_rng(13))
    shifted = {c: v.copy() for c, v in potentials.items()}
    shifted[(2, 3)][1, 0] += np.log(1.3)
    p_values = _p_values(codes, _model(shifted))
    assert min(p_values) < ALPHA / len(p_values)
