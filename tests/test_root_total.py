"""The root's total held at the rounded BLUE total (topdown.estimation.root_total): a hand-worked case,
the rule's refusals (today's behaviour kept where a held total could contradict something),
the release and its folder (recorded as estimation, not as an invariant; ``topdown check``
passes), and a seeded statistical test that the held total removes the clipping bias."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_helpers import data_config, embedded_subset

from constraints.aggregate_constraints import StructuralZero, SumLessEqual
from constraints.attach import ConstraintSet
from constraints.contextual_constraints import SumEqualRealTotal
from constraints.domain import Domain
from constraints.logical_expressions.atomic import Equal, TrueExpression
from mechanisms.ledger import Ledger
from mechanisms.rng import new_release_key
from topdown import Attribute, Schema, Strategy, release
from topdown.blue.estimate import blue, blue_inputs
from topdown.estimation.estimate import estimate
from topdown.estimation.root_total import HELD_NAME, decide, with_root_total
from topdown.measurement.estimator_inputs import EstimatorInputs, QueryEstimate
from topdown.measurement.measure import measure
from topdown.measurement.tree import Level, Tree, build_tree
from topdown.product.cli import main
from topdown.product.release_folder import refresh_manifest, table_name, verify_release_folder
from topdown.strategy import Query

DOMAIN = Domain({"A": [0, 1]})
TREE = Tree(
    (
        Level(0, None, np.array(["root"], dtype=object), np.array([-1])),
        Level(1, "S", np.array(["a", "b"], dtype=object), np.array([0, 0])),
    )
)


def _hand_inputs() -> EstimatorInputs:
    """Detailed query only, variance 1 everywhere: root (-3, 5), children (1, 2) and (0, 4)."""
    q = Query.parse("detailed")
    return EstimatorInputs(
        (
            (QueryEstimate(0, q, np.array([[-3, 5]]), np.array([1.0])),),
            (QueryEstimate(1, q, np.array([[1, 2], [0, 4]]), np.array([1.0, 1.0])),),
        )
    )


def test_hand_worked_case() -> None:
    """Per cell the root's BLUE pools its own answer (variance 1) with its children's sum
    (variance 2): (2 y_root + y_a + y_b) / 3, i.e. (-5/3, 16/3), total 11/3 with variance
    2 x 2/3 = 4/3. Held at round(11/3) = 4, the root's L2 pass projects (-5/3, 16/3) onto
    {x >= 0, sum 4}: (0, 4). The children's BLUE of cell 1, (5/3, 11/3), is shifted by
    (16/3 - 4) / 2 = 2/3 each: (1, 3)."""
    estimate_ = blue(TREE, DOMAIN, _hand_inputs())
    decision = decide("blue", TREE, DOMAIN, estimate_)
    bounds = with_root_total(None, decision)
    assert decision.held
    assert decision.value == 4
    assert decision.blue_total == pytest.approx(11 / 3, abs=1e-12)
    assert decision.stderr == pytest.approx(math.sqrt(4 / 3), abs=1e-12)
    (held,) = bounds[0][0]
    assert held.name == HELD_NAME and held.sense == "==" and held.value == 4
    counts, _ = estimate(
        TREE, DOMAIN, blue_inputs(_hand_inputs(), estimate_), first_pass={}, invariants=bounds
    )
    np.testing.assert_array_equal(counts[0], [[0, 4]])
    np.testing.assert_array_equal(counts[1], [[0, 1], [0, 3]])
    # without the bound the clipped root keeps its positive cell: total 5, one person too many
    free, _ = estimate(TREE, DOMAIN, blue_inputs(_hand_inputs(), estimate_), first_pass={})
    assert int(free[0].sum()) == 5


def test_held_total_is_never_negative() -> None:
    q = Query.parse("detailed")
    inputs = EstimatorInputs(
        (
            (QueryEstimate(0, q, np.array([[-9, -4]]), np.array([1.0])),),
            (QueryEstimate(1, q, np.array([[-2, 0], [-1, -3]]), np.array([1.0, 1.0])),),
        )
    )
    decision = decide("blue", TREE, DOMAIN, blue(TREE, DOMAIN, inputs))
    assert decision.held and decision.blue_total is not None and decision.blue_total < 0
    assert decision.value == 0


@pytest.mark.parametrize(
    ("estimator", "constraints", "invariants", "reason"),
    [
        ("topdown", None, None, "estimator 'topdown'"),
        ("blue", None, {1: {0: (SumLessEqual(TrueExpression(), 3),)}}, "level(s) [1]"),
        ("blue", "bound", None, "could contradict"),
        ("blue", "all zero", None, "every cell to zero"),
    ],
)
def test_refusals_keep_todays_behaviour(estimator, constraints, invariants, reason) -> None:
    """Where a held total could contradict an invariant or a constraint of the root, nothing
    is added: the passes get exactly the invariants they got before."""
    cs = ConstraintSet()
    if constraints == "bound":
        cs.add(SumLessEqual(Equal("A", 0), 2), level=0)
    elif constraints == "all zero":
        cs.add(StructuralZero(TrueExpression()), level=0)
    estimate_ = blue(TREE, DOMAIN, _hand_inputs()) if estimator == "blue" else None
    decision = decide(estimator, TREE, DOMAIN, estimate_, cs, invariants)
    bounds = with_root_total(invariants, decision)
    assert not decision.held and reason in decision.reason
    assert bounds == (invariants or {})
    assert decision.to_dict() == {"held": False, "reason": decision.reason}


def test_structural_zeros_alone_do_not_block() -> None:
    cs = ConstraintSet()
    cs.add(StructuralZero(Equal("A", 0)), level=0)
    decision = decide("blue", TREE, DOMAIN, blue(TREE, DOMAIN, _hand_inputs()), cs)
    assert decision.held and decision.value == 4


def test_with_root_total_does_not_change_its_argument() -> None:
    decision = decide("blue", TREE, DOMAIN, blue(TREE, DOMAIN, _hand_inputs()))
    given: dict[int, dict[int, tuple]] = {}
    out = with_root_total(given, decision)
    assert given == {} and [c.value for c in out[0][0]] == [4]


# -- the release ------------------------------------------------------------------------------

SCHEMA = Schema(
    (Attribute("SEX", values=(1, 2)), Attribute("AGE", column="AGEP", bins=(0, 18, 65, 100))),
    ("STATE",),
)


def _records() -> pd.DataFrame:
    return embedded_subset(("01", "08"), rows_per_state=300)


def test_release_holds_the_total_as_estimation_not_as_invariant() -> None:
    strategy = Strategy.from_budgets([Fraction(1, 20)] * 2, mechanism="discrete_gaussian")
    rel = release(_records(), SCHEMA, strategy, seed=3)
    assert rel.root_total is not None and rel.root_total.held
    assert rel.blue is not None
    assert int(rel.counts[0].sum()) == max(0, round(float(rel.blue.answer(0, "total").noisy[0, 0])))
    assert int(rel.counts[0].sum()) == rel.root_total.value
    assert rel.invariants == {} and rel.ledger.invariants == ()
    assert rel.check_correctness().ok
    # a published root total is an invariant: nothing is held on top of it
    cs = ConstraintSet()
    cs.add(SumEqualRealTotal(TrueExpression()), level=0)
    pinned = release(_records(), SCHEMA, strategy, seed=3, constraints=cs)
    assert pinned.root_total is not None and not pinned.root_total.held
    assert int(pinned.counts[0].sum()) == len(_records())
    plain = release(_records(), SCHEMA, strategy, seed=3, estimator="topdown")
    assert plain.root_total is not None and not plain.root_total.held


def test_release_folder_records_it_and_check_recomputes_it(tmp_path: Path) -> None:
    """The ledger's estimation note says the total was held and at what; ``topdown check``
    recomputes the note from the published measurements and passes; a note that names another
    value fails it."""
    _records().to_csv(tmp_path / "data.csv", index=False)
    config = data_config(5, ("STATE",), '[estimation]\nmethod = "blue"\n')
    (tmp_path / "c.toml").write_text(config, encoding="utf-8")
    out = tmp_path / "rel"
    assert main(["-q", "run", str(tmp_path / "c.toml"), "--out", str(out)]) == 0
    ledger = json.loads((out / "ledger.json").read_text(encoding="utf-8"))
    note = ledger["summary"]["estimation"]["root_total"]
    assert note["held"] is True and ledger["invariants"] == []
    root = pd.read_csv(out / table_name(0, None))
    assert int(root["count"].sum()) == note["value"]
    report = (out / "report.html").read_text(encoding="utf-8")
    assert f"the root&#x27;s total held at {note['value']}" in report
    assert main(["check", str(out)]) == 0
    note["value"] += 1
    (out / "ledger.json").write_text(json.dumps(ledger), encoding="utf-8")
    refresh_manifest(out, ("ledger.json",))  # the manifest agrees: only the recompute can fail
    verdict = verify_release_folder(out)
    assert not verdict.ok
    assert [name for name, ok in verdict.checks.items() if not ok] == [
        "ledger.json totals match its entries"
    ]


# -- the bias it removes ----------------------------------------------------------------------


@pytest.mark.slow
def test_held_root_total_is_unbiased_and_the_free_one_is_not() -> None:
    """Seeded, 40 releases of a sparse root (32 cells, 200 persons, rho 0.1 per level): the
    mean error of the root's total over its standard error across seeds is a t statistic with
    39 degrees of freedom when unbiased (the held total is round(BLUE), symmetric about the
    integer truth). False alarm: P(|t_39| > 6) < 1e-6. Power: without the bound the clipped
    root's total is biased up by about 14 persons, t about 12 on these seeds (> 6 asserted)."""
    rng = np.random.default_rng(0)
    n = 200
    df = pd.DataFrame(
        {
            "S": rng.choice(["a", "b", "c"], n),
            "A": rng.choice([0, 1], n),
            "B": rng.choice([0, 1], n),
        }
    )
    schema = Schema(
        (Attribute("A", values=tuple(range(16))), Attribute("B", values=(0, 1))), ("S",)
    )
    tree, truth = build_tree(df, schema)
    strategy = Strategy.from_budgets([Fraction(1, 10)] * 2, mechanism="discrete_gaussian")
    errors: dict[str, list[int]] = {"held": [], "free": []}
    for seed in range(40):
        m, _ = measure(
            tree, truth, schema.domain, strategy, release_key=new_release_key(seed), ledger=Ledger()
        )
        b = blue(tree, schema.domain, m)
        fed = blue_inputs(m, b)
        bounds = with_root_total(None, decide("blue", tree, schema.domain, b))
        for name, bound in (("free", None), ("held", bounds)):
            counts, _ = estimate(tree, schema.domain, fed, first_pass={}, invariants=bound)
            assert (counts[1].sum(axis=0) == counts[0][0]).all()
            errors[name].append(int(counts[0].sum()) - n)

    def t(values: list[int]) -> float:
        e = np.asarray(values, dtype=float)
        return float(e.mean() / (e.std(ddof=1) / np.sqrt(len(e))))

    assert abs(t(errors["held"])) < 6
    assert t(errors["free"]) > 6
