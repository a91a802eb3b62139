"""Tests for privacy budgets, composition, conversions and the ledger."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from mechanisms.accounting import (
    ZCDP,
    PureDP,
    float_up,
    parallel,
    pure_to_zcdp,
    scale,
    sequential,
    split,
    zcdp_to_approx_dp,
    zcdp_to_approx_dp_simple,
)
from mechanisms.errors import BudgetError
from mechanisms.ledger import Ledger

# --- construction -------------------------------------------------------------------------


def test_budgets_hold_exact_fractions():
    assert PureDP("0.1").epsilon == Fraction(1, 10)
    assert PureDP(0.5).epsilon == Fraction(1, 2)
    assert ZCDP(Fraction(2, 7)).rho == Fraction(2, 7)
    assert PureDP(0.1).epsilon == Fraction(0.1)  # the float's exact binary value
    assert PureDP("1/3") == PureDP(Fraction(1, 3))


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "abc", None, True])
def test_pure_refuses_bad_epsilon(bad):
    with pytest.raises(BudgetError, match=r"epsilon \("):
        PureDP(bad)


@pytest.mark.parametrize("bad", [0, -0.5, float("nan"), float("-inf"), [1]])
def test_zcdp_refuses_bad_rho(bad):
    with pytest.raises(BudgetError, match=r"rho \("):
        ZCDP(bad)


def test_budget_error_message_shows_value_and_rule():
    with pytest.raises(BudgetError, match=r"epsilon \(-2\) must be > 0"):
        PureDP(-2)


def test_budgets_are_frozen():
    budget = PureDP(1)
    with pytest.raises(AttributeError):
        budget.epsilon = Fraction(2)


# --- composition and conversion -------------------------------------------------------------


def test_sequential_composition_same_kind():
    assert PureDP("1/3") + PureDP("1/6") == PureDP("1/2")
    assert ZCDP(1) + ZCDP("1/4") == ZCDP("5/4")
    assert sum([PureDP(1), PureDP(2)]) == PureDP(3)


def test_mixed_composition_converts_pure_to_zcdp():
    # eps = 1 -> rho = 1/2; plus rho 1/4 -> 3/4, in either order.
    assert PureDP(1) + ZCDP("1/4") == ZCDP("3/4")
    assert ZCDP("1/4") + PureDP(1) == ZCDP("3/4")
    assert sequential([PureDP(2), ZCDP(1)]) == ZCDP(3)


def test_pure_to_zcdp_hand_values():
    assert pure_to_zcdp(1) == ZCDP("1/2")
    assert pure_to_zcdp("0.2") == ZCDP("1/50")
    assert PureDP(3).to_zcdp() == ZCDP("9/2")
    assert ZCDP(1).to_zcdp() == ZCDP(1)


def test_parallel_is_max():
    assert parallel(PureDP(1), PureDP(3), PureDP(2)) == PureDP(3)
    assert parallel(ZCDP("1/2")) == ZCDP("1/2")
    # Mixed: eps 1 -> rho 1/2, larger than rho 1/4.
    assert parallel(PureDP(1), ZCDP("1/4")) == ZCDP("1/2")
    with pytest.raises(BudgetError, match="at least one budget"):
        parallel()
    with pytest.raises(BudgetError, match=r"budgets\[1\] \(3\) must be a PureDP or ZCDP"):
        parallel(PureDP(1), 3)


def test_split_thirds_is_exact_and_sums_back():
    parts = split(ZCDP(1), ["1/3", "1/3", "1/3"])
    assert parts == (ZCDP("1/3"),) * 3
    assert sum(parts) == ZCDP(1)
    pure_parts = split(PureDP(2), [Fraction(1, 4), Fraction(3, 4)])
    assert pure_parts == (PureDP("1/2"), PureDP("3/2"))


def test_split_refuses_bad_shares():
    with pytest.raises(BudgetError, match=r"shares must sum to exactly 1, got sum 9/10"):
        split(PureDP(1), ["0.5", "0.4"])
    # Floats that look like thirds do not sum to exactly 1.
    with pytest.raises(BudgetError, match="shares must sum to exactly 1"):
        split(PureDP(1), [0.1, 0.2, 0.7])
    with pytest.raises(BudgetError, match=r"shares\[1\] \(0\) must be > 0"):
        split(PureDP(1), [1, 0])
    with pytest.raises(BudgetError, match=r"shares\[0\] \(-1\) must be > 0"):
        split(PureDP(1), [-1, 2])
    with pytest.raises(BudgetError, match="must not be empty"):
        split(PureDP(1), [])
    with pytest.raises(BudgetError, match=r"budget \(1\) must be a PureDP or ZCDP"):
        split(1, [1])


def test_scale():
    assert scale(ZCDP(2), "1/4") == ZCDP("1/2")
    assert scale(PureDP(1), 3) == PureDP(3)
    with pytest.raises(BudgetError, match=r"fraction \(0\) must be > 0"):
        scale(PureDP(1), 0)


def test_float_up_never_below_exact():
    third = Fraction(1, 3)
    assert Fraction(float_up(third)) >= third
    assert float_up(Fraction(1, 2)) == 0.5


# --- zCDP -> (eps, delta) -----------------------------------------------------------------


def test_cks_conversion_2020_census_hand_check():
    # 2020 Census redistricting data: rho = 2.556 at delta = 1e-10 is published as eps 17.14.
    eps = zcdp_to_approx_dp(ZCDP("2.556"), 1e-10)
    assert eps == pytest.approx(17.14, abs=0.01)
    simple = zcdp_to_approx_dp_simple("2.556", 1e-10)
    assert simple > eps
    # simple bound by hand: 2.556 + 2 sqrt(2.556 * ln 1e10)
    assert simple == pytest.approx(2.556 + 2 * math.sqrt(2.556 * math.log(1e10)), rel=1e-9)


def test_cks_conversion_is_conservative_at_the_optimum():
    # Evaluate the CKS bound on a fine grid: the returned epsilon is never below its minimum.
    rho, delta = 0.5, 1e-6
    eps = zcdp_to_approx_dp(rho, delta)
    grid = [1 + i / 1000 for i in range(1, 20000)]
    best = min(
        a * rho + (math.log(1 / delta) + (a - 1) * math.log(1 - 1 / a) - math.log(a)) / (a - 1)
        for a in grid
    )
    # The minimiser does at least as well as the grid, and the grid is within 1e-5 of it.
    assert best - 1e-5 <= eps <= best + 1e-9
    assert eps < zcdp_to_approx_dp_simple(rho, delta)


def test_cks_conversion_monotone_in_rho_and_delta():
    assert zcdp_to_approx_dp(0.1, 1e-6) < zcdp_to_approx_dp(0.2, 1e-6)
    assert zcdp_to_approx_dp(0.1, 1e-9) > zcdp_to_approx_dp(0.1, 1e-6)
    assert zcdp_to_approx_dp(1e-6, 1e-10) > 0


@pytest.mark.parametrize("delta", [0, 1, -0.1, 1.5, float("nan")])
def test_conversion_refuses_bad_delta(delta):
    with pytest.raises(BudgetError, match=r"delta \("):
        zcdp_to_approx_dp(1, delta)
    with pytest.raises(BudgetError, match=r"delta \("):
        zcdp_to_approx_dp_simple(1, delta)


def test_conversion_refuses_bad_rho():
    with pytest.raises(BudgetError, match=r"rho \(0\) must be > 0"):
        zcdp_to_approx_dp(0, 1e-6)


# --- ledger -------------------------------------------------------------------------------


def _ledger() -> Ledger:
    ledger = Ledger()
    ledger.record("total", 0, "discrete_gaussian", ZCDP("1/10"), sensitivity=1)
    ledger.record("detailed", 0, "discrete_gaussian", ZCDP("2/5"), sensitivity=1)
    ledger.record("detailed", 1, "discrete_gaussian", ZCDP("1/2"), sensitivity=1, nodes=51)
    return ledger


def test_ledger_total_by_level_and_epsilon():
    ledger = _ledger()
    assert ledger.total() == ZCDP(1)
    assert ledger.by_level() == {0: ZCDP("1/2"), 1: ZCDP("1/2")}
    # independently of the conversion's optimiser: the CKS20 bound minimised over a fine grid
    # of alpha for the ledger's total rho = 1 (the grid minimum is within 1e-3 of the infimum)
    alpha = np.linspace(1.01, 40, 400_000)
    bound = alpha + (np.log(1e10) + (alpha - 1) * np.log1p(-1 / alpha) - np.log(alpha)) / (
        alpha - 1
    )
    assert abs(ledger.epsilon_delta(1e-10) - bound.min()) < 1e-3
    assert len(ledger) == 3


def test_ledger_nodes_compose_in_parallel():
    # 51 nodes at one level cost the entry's budget once.
    ledger = Ledger()
    ledger.record("detailed", 1, "discrete_laplace", PureDP(1), sensitivity=1, nodes=51)
    assert ledger.total() == PureDP(1)
    assert ledger.epsilon_delta(1e-10) == 1.0


def test_ledger_mixed_kinds_total_is_zcdp():
    ledger = Ledger()
    ledger.record("total", 0, "discrete_laplace", PureDP(1), sensitivity=1)
    ledger.record("detailed", 0, "discrete_gaussian", ZCDP("1/2"), sensitivity=1)
    assert ledger.total() == ZCDP(1)


def test_ledger_refuses_duplicates_and_bad_fields():
    ledger = _ledger()
    with pytest.raises(BudgetError, match=r"query \('total'\) at level \(0\) is already"):
        ledger.record("total", 0, "discrete_gaussian", ZCDP(1), sensitivity=1)
    with pytest.raises(BudgetError, match=r"level \(-1\) must be an integer >= 0"):
        ledger.record("x", -1, "discrete_gaussian", ZCDP(1), sensitivity=1)
    with pytest.raises(BudgetError, match=r"nodes \(0\) must be an integer >= 1"):
        ledger.record("x", 2, "discrete_gaussian", ZCDP(1), sensitivity=1, nodes=0)
    with pytest.raises(BudgetError, match=r"budget \(0.5\) must be a PureDP or ZCDP"):
        ledger.record("x", 2, "discrete_gaussian", 0.5, sensitivity=1)
    with pytest.raises(BudgetError, match=r"sensitivity \(-1\) must be >= 0"):
        ledger.record("x", 2, "discrete_gaussian", ZCDP(1), sensitivity=-1)
    with pytest.raises(BudgetError, match=r"query \(''\) must be a non-empty string"):
        ledger.record("", 2, "discrete_gaussian", ZCDP(1), sensitivity=1)
    with pytest.raises(BudgetError, match="no entries"):
        Ledger().total()


def test_an_entry_of_sensitivity_0_is_not_charged():
    """Sensitivity 0 (the same answer on all neighbours) costs nothing: the total composes the
    other entries, the calibrated total all of them; a ledger of free entries has no total."""
    ledger = _ledger()
    before = ledger.total()
    free = ledger.record("root total", 0, "discrete_gaussian", ZCDP(3), sensitivity=0)
    assert not free.charged and free.to_dict()["charged"] is False
    assert ledger.total() == before
    assert ledger.calibrated_total() == sequential([before, ZCDP(3)])
    assert Ledger.from_dict(ledger.to_dict()).total() == before
    alone = Ledger()
    alone.record("root total", 0, "discrete_gaussian", ZCDP(3), sensitivity=0)
    with pytest.raises(BudgetError, match="every entry of the ledger has sensitivity 0"):
        alone.total()
    assert alone.by_level() == {}


def test_ledger_invariants_and_disclosures():
    ledger = _ledger()
    ledger.record_invariant("state_total", 1, "state populations published exactly")
    ledger.record_disclosure("domain:age", "age domain inferred from data")
    assert [i.name for i in ledger.invariants] == ["state_total"]
    assert [d.name for d in ledger.disclosures] == ["domain:age"]
    assert ledger.total() == ZCDP(1)  # invariants cost no DP budget: they are outside DP


def test_ledger_dict_round_trip_is_json_and_exact():
    ledger = _ledger()
    ledger.record_invariant("state_total", 1)
    ledger.record_disclosure("domain:age", "inferred")
    data = ledger.to_dict()
    text = json.dumps(data)
    assert data["entries"][0]["budget"] == "1/10"
    assert data["entries"][0]["budget_float"] >= 0.1
    assert data["total"] == {"kind": "zcdp", "budget": "1/1", "budget_float": 1.0}
    again = Ledger.from_dict(json.loads(text))
    assert again == ledger
    assert again.total() == ZCDP(1)


def test_ledger_to_frame():
    frame = _ledger().to_frame()
    assert list(frame["query"]) == ["total", "detailed", "detailed"]
    assert list(frame["nodes"]) == [1, 1, 51]
    assert frame["budget"].iloc[0] == Fraction(1, 10)
    assert set(frame.columns) >= {"level", "mechanism", "kind", "budget_float", "sensitivity"}
