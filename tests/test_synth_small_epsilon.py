"""Every accepted budget produces output, down to the generators' MIN_EPSILON (issue 30 D2).

Before: ``ClassConditional`` and ``PrivBayes`` (and ``topdown synth classcond`` /
``privbayes``) accepted epsilon down to 1e-6 but failed between 1e-6 and about 3e-5 with the
L2 pass's solver reporting the problem "unbounded": the noisy answers (about 1/epsilon) were
beyond the solver's tolerances. The L2 pass now solves a scaled problem (exact: its
constraints are homogeneous).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_synth_crosstab_classcond import DOMAINS, _frame

from synth._estimate import L2_SCALE, Measurement, consistent_tables
from synth.class_conditional import ClassConditional
from synth.crosstab import MIN_EPSILON
from synth.privbayes import PrivBayes


@pytest.mark.parametrize("epsilon", [float(MIN_EPSILON), 1e-5, 2e-5])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_class_conditional_at_the_bottom_of_the_range(epsilon: float, seed: int) -> None:
    model = ClassConditional(epsilon, target="cls", domains=DOMAINS, seed=seed).fit(_frame())
    totals = model.class_totals
    assert totals is not None and (totals >= 0).all()
    for table in model.tables.values():
        assert table.sum(axis=0).tolist() == totals.tolist()  # consistent, as at any epsilon
    assert len(model.sample(50)) == 50


@pytest.mark.parametrize("epsilon", [float(MIN_EPSILON), 1e-5])
@pytest.mark.parametrize("seed", [1, 2])
def test_privbayes_at_the_bottom_of_the_range(epsilon: float, seed: int) -> None:
    out = PrivBayes(epsilon, k=1, domains=DOMAINS, seed=seed).fit(_frame()).sample(50)
    assert len(out) == 50 and list(out.columns) == list(DOMAINS)


def test_the_scaled_l2_pass_solves_answers_far_beyond_the_scale() -> None:
    """One table (no shared sub-marginal): the L2 pass is the answers clipped at 0, also for
    answers of 1e7 (scaled by 100 for the solver)."""
    rng = np.random.default_rng(0)
    y = np.round(rng.normal(0, L2_SCALE * 100, size=(3, 4)))
    (table,) = consistent_tables([Measurement((0, 1), y, 2.0)], [3, 4])
    np.testing.assert_allclose(table, np.maximum(y, 0), atol=1.0)
