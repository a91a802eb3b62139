"""Feasibility diagnostics: each contradiction is found and its message names the numbers."""

from __future__ import annotations

import numpy as np
import pytest

from constraints import (
    ConstraintError,
    Domain,
    InfeasibleConstraintsError,
    StructuralZero,
    SumEqual,
    SumEqualRealTotal,
    SumGreaterEqual,
    SumLessEqual,
    check_children,
    check_node,
)
from constraints.logical_expressions.atomic import Equal, GreaterThan, In, TrueExpression

D = Domain({"SEX": [1, 2], "AGE": range(0, 116)})


def raises(match, *args, **kwargs):
    with pytest.raises(InfeasibleConstraintsError, match=match) as info:
        check_node(*args, domain=D, **kwargs)
    return info.value


def test_feasible_passes():
    check_node(
        [
            SumEqual(GreaterThan("AGE", 99), 0),
            StructuralZero(GreaterThan("AGE", 110)),
            SumEqual(TrueExpression(), 10),
            SumLessEqual(Equal("SEX", 1), 10),
            SumEqualRealTotal(TrueExpression()),
            SumGreaterEqual(TrueExpression(), -1),
        ],
        D,
        parent_values=np.ones(D.size),
    )


def test_structural_zero_against_sum():
    err = raises(
        r"^node '06': SumEqual\(AGE > 99, 3\) contradicts StructuralZero\(AGE > 90\): all 32 "
        r"cells of AGE > 99 are structural zeros but the sum must be 3$",
        [StructuralZero(GreaterThan("AGE", 90)), SumEqual(GreaterThan("AGE", 99), 3)],
        node="06",
    )
    assert err.node == "06"
    assert err.constraints == ("SumEqual(AGE > 99, 3)", "StructuralZero(AGE > 90)")
    raises(
        r"SumGreaterEqual\(AGE > 99, 1\) contradicts StructuralZero\(AGE > 90\): .* must be at least 1",
        [StructuralZero(GreaterThan("AGE", 90)), SumGreaterEqual(GreaterThan("AGE", 99), 1)],
    )


def test_sum_outside_kept_cells():
    raises(
        r"all 2 cells of AGE == 5 are structural zeros or outside the kept cells but the sum must be 1",
        [SumEqual(Equal("AGE", 5), 1)],
        cells=np.arange(5),
    )


def test_two_equalities_on_the_same_cells():
    raises(
        r"SumEqual\(SEX == 1, 3\) contradicts SumEqual\(SEX == 1, 4\)|SumEqual\(SEX == 1, 4\) contradicts SumEqual\(SEX == 1, 3\): on the same 116 cells the sum must be 4 and at most 3",
        [SumEqual(Equal("SEX", 1), 3), SumEqual(Equal("SEX", 1), 4)],
    )
    # different expressions, same cells once structural zeros are removed
    raises(
        r"on the same 1 cells the sum must be 2 and at most 1",
        [
            StructuralZero(GreaterThan("AGE", 0)),
            SumEqual(Equal("SEX", 1), 1),
            SumEqual(Equal("SEX", 1) & Equal("AGE", 0), 2),
        ],
    )


def test_bounds():
    raises(
        r"SumLessEqual\(TRUE, -1\): the sum must be at most -1, but counts are non-negative",
        [SumLessEqual(TrueExpression(), -1)],
    )
    raises(
        r"SumEqual\(TRUE, -2\): the sum must be -2, but counts are non-negative",
        [SumEqual(TrueExpression(), -2)],
    )
    raises(
        r"SumEqual\(TRUE, 2\.5\): the sum must be 2\.5, but counts are integers",
        [SumEqual(TrueExpression(), 2.5)],
    )
    raises(
        r"SumGreaterEqual\(SEX == 2, 5\) contradicts SumLessEqual\(SEX == 2, 4\): on the same 116 cells the sum must be at least 5 and at most 4",
        [SumLessEqual(Equal("SEX", 2), 4), SumGreaterEqual(Equal("SEX", 2), 5)],
    )
    # no integer in [2.2, 2.5]
    raises(
        r"on the same 116 cells the sum must be at least 3 and at most 2",
        [SumLessEqual(Equal("SEX", 2), 2.5), SumGreaterEqual(Equal("SEX", 2), 2.2)],
    )


def test_negative_lower_bound_is_vacuous(caplog):
    check_node([SumGreaterEqual(TrueExpression(), -3)], D)
    assert "has a negative lower bound: it always holds" in caplog.text


def test_subset_exceeds_superset():
    raises(
        r"SumEqual\(AGE > 99, 5\) contradicts SumEqual\(AGE > 90, 3\): the 32 cells of AGE > 99 are among the 50 cells of AGE > 90, so its sum \(5\) cannot exceed AGE > 90's \(at most 3\)",
        [SumEqual(GreaterThan("AGE", 90), 3), SumEqual(GreaterThan("AGE", 99), 5)],
    )
    raises(
        r"SumGreaterEqual\(SEX == 1, 2\), SumGreaterEqual\(SEX == 2, 2\) contradict SumLessEqual\(TRUE, 3\): these 2 disjoint subsets of the 232 cells of TRUE must hold at least 4 in all, but TRUE holds at most 3",
        [
            SumLessEqual(TrueExpression(), 3),
            SumGreaterEqual(Equal("SEX", 1), 2),
            SumGreaterEqual(Equal("SEX", 2), 2),
        ],
    )


def test_parent_values_and_total():
    pv = np.zeros(D.size)
    pv[D.ravel([np.array([0, 1]), np.array([100, 101])])] = 1
    raises(
        r"node 'c': SumEqual\(AGE > 99, 3\) exceeds the parent: the parent holds 2 on the 32 cells of AGE > 99 but the sum must be 3",
        [SumEqual(GreaterThan("AGE", 99), 3)],
        node="c",
        parent_values=pv,
    )
    check_node([SumEqual(GreaterThan("AGE", 99), 2)], D, parent_values=pv)
    raises(
        r"SumGreaterEqual\(TRUE, 11\) exceeds the parent: the sum must be at least 11 but the parent's total is 10",
        [SumGreaterEqual(TrueExpression(), 11)],
        parent_total=10,
    )
    with pytest.raises(ConstraintError, match=r"parent_values has 3 entries, expected 232"):
        check_node([SumEqual(TrueExpression(), 1)], D, parent_values=np.ones(3))


def test_several_problems_in_one_message():
    err = raises(
        r"counts are integers; .*counts are non-negative",
        [SumEqual(TrueExpression(), 0.5), SumLessEqual(Equal("SEX", 1), -1)],
        node=1,
    )
    assert set(err.constraints) == {"SumEqual(TRUE, 0.5)", "SumLessEqual(SEX == 1, -1)"}


def test_check_children():
    pv = np.zeros(D.size)
    pv[:5] = 2  # parent: 10 people, SEX 1, ages 0..4
    young = In("AGE", [0, 1, 2, 3, 4])
    check_children([[SumEqual(young, 4)], [SumEqual(young, 6)]], D, pv, ["a", "b"])
    with pytest.raises(
        InfeasibleConstraintsError,
        match=r"^node 'P': the children's sums on the 232 cells of TRUE can be at most 9 in all \('a': 4, 'b': 5\) but the parent holds 10 there$",
    ):
        check_children(
            [[SumEqual(TrueExpression(), 4)], [SumEqual(TrueExpression(), 5)]],
            D,
            pv,
            ["a", "b"],
            parent="P",
        )
    with pytest.raises(
        InfeasibleConstraintsError,
        match=r"the children's sums on the 10 cells of AGE in \[0, 1, 2, 3, 4\] must be at least 11 in all \('a': 6, 'b': 5\) but the parent holds 10 there",
    ):
        check_children([[SumEqual(young, 6)], [SumGreaterEqual(young, 5)]], D, pv, ["a", "b"])
    with pytest.raises(
        InfeasibleConstraintsError,
        match=r"5 cell\(s\) are structural zeros in every child but the parent holds 10 there",
    ) as info:
        check_children([[StructuralZero(young)], [StructuralZero(young)]], D, pv, ["a", "b"])
    assert info.value.constraints == ("StructuralZero(AGE in [0, 1, 2, 3, 4])",)
    with pytest.raises(
        InfeasibleConstraintsError, match=r"^node 'b': SumEqual\(TRUE, 11\) exceeds the parent"
    ):
        check_children([[], [SumEqual(TrueExpression(), 11)]], D, pv, ["a", "b"])
    with pytest.raises(ConstraintError, match=r"labels has 1 entries but there are 2 children"):
        check_children([[], []], D, pv, ["a"])
