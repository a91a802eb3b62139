"""Tests for the noisy crosstab and the class-conditional (naive-Bayes) synthesizer."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from synth._domains import SynthError
from synth.class_conditional import ClassConditional, generate
from synth.crosstab import NoisyCrosstab, crosstab_errors
from synth.metrics import marginal_tvds, tvd

DOMAINS = {"sex": ["F", "M"], "own": ["n", "y"], "cls": [0, 1, 2]}


def _frame(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    cls = rng.choice(3, n, p=[0.5, 0.3, 0.2])
    sex = np.where(rng.random(n) < 0.2 + 0.3 * cls, "M", "F")
    own = np.where(rng.random(n) < 0.7, "y", "n")
    return pd.DataFrame({"sex": sex, "own": own, "cls": cls})


def test_crosstab_covers_declared_zero_cells_and_errors_by_hand():
    data = pd.DataFrame({"sex": ["F", "F", "M"], "own": ["y", "y", "y"]})
    ct = NoisyCrosstab(2, domains={"sex": ["F", "M"], "own": ["n", "y"]}, seed=5).fit(data)
    released = ct.release()
    assert released.shape == (2, 2) and list(released.index) == ["F", "M"]
    assert (released.to_numpy() >= 0).all()
    assert [d.name for d in ct.ledger.disclosures] == ["seeded noise"]  # domains declared
    assert ct.ledger.total().value == 2
    true = np.array([[0, 2], [0, 1]])
    frame, summary = crosstab_errors(true, np.array([[1, 1], [0, 3]]), ct.domains, ["sex", "own"])
    assert frame["abs_error"].tolist() == [1, 1, 0, 2]
    assert frame["rel_error"].tolist()[1] == 0.5 and np.isnan(frame["rel_error"].tolist()[0])
    assert summary == {"total_l1": 4.0, "relative_l1": pytest.approx(4 / 3)}


def test_crosstab_margins_consistent_and_close_at_large_epsilon():
    data = _frame()
    ct = NoisyCrosstab(200, ["sex", "own", "cls"], domains=DOMAINS, margins=True, seed=1).fit(data)
    table = ct.table
    assert table is not None
    for j, margin in enumerate(ct.margin_tables):
        axes = tuple(a for a in range(3) if a != j)
        assert table.sum(axis=axes).tolist() == margin.tolist()
    frame, summary = ct.errors(data)
    # eps 200 split 1/2 table, 1/6 each margin: noise scale 1/100 on the table; rounding keeps
    # errors tiny
    assert summary["relative_l1"] < 0.03
    assert len(frame) == 12
    budgets = [e.budget.value for e in ct.ledger.entries]
    assert budgets == [100] + [Fraction(100, 3)] * 3
    assert sum(budgets) == 200


def test_crosstab_bad_input():
    with pytest.raises(SynthError, match=r"epsilon \(0\) must be > 0"):
        NoisyCrosstab(0)
    with pytest.raises(SynthError, match=r"columns \(\['sex'\]\) must name at least 2 columns"):
        NoisyCrosstab(1, ["sex"]).fit(_frame())
    with pytest.raises(SynthError, match=r"the crosstab is not fitted"):
        NoisyCrosstab(1).release()


def test_class_totals_agree_across_tables():
    model = ClassConditional(1, target="cls", domains=DOMAINS, seed=3).fit(_frame())
    totals = model.class_totals
    assert totals is not None
    for table in model.tables.values():
        assert table.sum(axis=0).tolist() == totals.tolist()
        assert table.dtype == np.int64 and (table >= 0).all()
    assert len(model.ledger) == 2 and model.ledger.total().value == 1
    assert [e.budget.value for e in model.ledger.entries] == [Fraction(1, 2)] * 2


def test_total_is_unbiased_on_a_wide_class_column():
    """300 records, a 5,000-value class: the non-negative tables' class totals keep the positive
    noise of ~5,000 empty cells per table and sum to >10x the records; the model's total (the
    default sample size) is the tables' raw sums combined, unbiased. Its standard deviation,
    worked by hand: each of the two tables (3 x 5,000 and 2 x 5,000 cells) gets epsilon 1, so
    every cell has two-sided geometric noise of variance 2a/(1-a)^2 with a = e^-1 (1.8413);
    inverse-variance weighting of the two sums gives sd = (1/(15,000 v) + 1/(10,000 v))^-1/2
    = 105.1. Each seed is checked at 4 sd (a false alarm about 6e-5 per seed)."""
    rng = np.random.default_rng(0)
    n = 300
    data = pd.DataFrame(
        {"a": rng.integers(0, 3, n), "b": rng.integers(0, 2, n), "cls": rng.integers(0, 5000, n)}
    )
    domains = {"a": [0, 1, 2], "b": [0, 1], "cls": list(range(5000))}
    a = math.exp(-1)
    v = 2 * a / (1 - a) ** 2
    sd = (1 / (15_000 * v) + 1 / (10_000 * v)) ** -0.5
    for seed in range(4):
        model = ClassConditional(2, domains=domains, seed=seed).fit(data)
        assert model.class_totals is not None and model.class_totals.sum() > 10 * n
        assert abs(model.total - n) < 4 * sd
        sample = model.sample()
        assert len(sample) == model.total
        # the classes keep the tables' proportions
        per_class = sample.groupby("cls").size()
        assert set(per_class.index) <= {c for c, t in enumerate(model.class_totals) if t > 0}


def test_sampled_counts_follow_the_tables_exactly():
    model = ClassConditional(1, target="cls", domains=DOMAINS, seed=4).fit(_frame())
    totals = model.class_totals
    assert totals is not None
    n = int(totals.sum())
    sample = model.sample(n)
    assert list(sample.columns) == ["sex", "own", "cls"]
    # with n equal to the estimated total, the per-class and per-value counts are the tables
    counts = sample.groupby("cls").size().reindex(DOMAINS["cls"], fill_value=0)
    assert counts.tolist() == totals.tolist()
    sex = pd.crosstab(sample["sex"], sample["cls"]).reindex(
        index=DOMAINS["sex"], columns=DOMAINS["cls"], fill_value=0
    )
    assert sex.to_numpy().tolist() == model.tables["sex"].tolist()
    assert len(model.sample(7)) == 7 and len(model.sample(0)) == 0


def test_large_epsilon_lands_close_to_the_truth():
    data = _frame(2000, seed=1)
    synthetic = ClassConditional(500, target="cls", domains=DOMAINS, seed=2).fit(data).sample(2000)
    assert tvd(data, synthetic) < 0.01
    # (sex, cls) is modelled; its 2-way marginal is close too
    assert marginal_tvds(data, synthetic, 2)[("sex", "cls")] < 0.01


def test_generate_seed_signature():
    data = _frame(300)
    out = generate(data, epsilon=50, random_state=42)
    # the size is the model's noisy total (issue 30 A1), the same model as a seeded fit
    total = ClassConditional(50, seed=42).fit(data).total
    assert list(out.columns) == list(data.columns) and len(out) == total
    assert generate(data, numTuples=50, numClass=0, epsilon=50).shape == (50, 3)
    # same random_state, same output (the default is now the secure source: issue 30 A3)
    assert generate(data, epsilon=1, random_state=42).equals(
        generate(data, epsilon=1, random_state=42)
    )
    with pytest.raises(SynthError, match=r"numTuples \(-1\) must be an integer >= 0"):
        generate(data, numTuples=-1)
    with pytest.raises(SynthError, match=r"target \('nope'\) is not a column of the data"):
        generate(data, numClass="nope")
