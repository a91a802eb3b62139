"""Hand-worked rows, zero masks, joint rows and CVXPY constraints; the seed README example."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pandas as pd
import pytest

from constraints import (
    ConstraintError,
    ConstraintSet,
    ContextualConstraint,
    Domain,
    LinearRows,
    StructuralZero,
    SumEqual,
    SumEqualRealTotal,
    SumGreaterEqual,
    SumLessEqual,
    as_constraint,
    compile_rows,
    joint_rows,
    to_cvxpy,
    zero_mask,
)
from constraints.logical_expressions.atomic import Equal, GreaterThan, LessThan, TrueExpression
from constraints.logical_expressions.compound import Implies, Not

D = Domain({"SEX": [1, 2], "AGE": range(5), "RACE": ["a", "b", "c"]})


def test_rows_hand_worked():
    rows = compile_rows(
        [
            SumEqual(Equal("SEX", 2) & Equal("AGE", 0), 4),
            SumLessEqual(LessThan("AGE", 1), 7),
            SumGreaterEqual(TrueExpression(), 2.5),
        ],
        D,
    )
    assert rows.A.shape == (3, 30)
    assert np.flatnonzero(rows.A[0].toarray()).tolist() == [15, 16, 17]
    assert np.flatnonzero(rows.A[1].toarray()).tolist() == [0, 1, 2, 15, 16, 17]
    assert rows.A[2].sum() == 30
    assert rows.lb.tolist() == [4, -np.inf, 2.5] and rows.ub.tolist() == [4, 7, np.inf]
    assert rows.names == (
        "SumEqual(SEX == 2 and AGE == 0, 4)",
        "SumLessEqual(AGE < 1, 7)",
        "SumGreaterEqual(TRUE, 2.5)",
    )
    assert rows.is_equality.tolist() == [True, False, False]


def test_rows_with_kept_cells():
    cells = np.array([17, 0, 15, 29])
    rows = compile_rows([SumEqual(Equal("SEX", 2) & Equal("AGE", 0), 4)], D, cells=cells)
    assert rows.A.toarray().tolist() == [[1, 0, 1, 0]]
    assert rows.lb.tolist() == [4]


def test_structural_zeros_and_bare_expressions_add_no_rows():
    rule = Implies(Equal("SEX", 1), GreaterThan("AGE", 0))  # no SEX=1 at AGE 0
    c = as_constraint(rule)
    assert (
        c == StructuralZero(Not(rule))
        and c.name == "StructuralZero(not (SEX == 1 implies AGE > 0))"
    )
    rows = compile_rows([rule, StructuralZero(Equal("RACE", "c"))], D)
    assert rows.n_rows == 0 and rows.n_cols == 30
    z = zero_mask([rule, StructuralZero(Equal("RACE", "c"))], D)
    assert np.flatnonzero(z).tolist() == sorted({0, 1, 2} | set(range(2, 30, 3)))


def test_default_and_custom_names():
    assert SumEqual(GreaterThan("AGE", 3), 0).name == "SumEqual(AGE > 3, 0)"
    assert SumEqual(GreaterThan("AGE", 3), 2.0).name == "SumEqual(AGE > 3, 2)"
    assert SumLessEqual(TrueExpression(), 5, name="cap").name == "cap"
    assert SumEqualRealTotal(TrueExpression()).name == "SumEqualRealTotal(TRUE)"

    def housing_units(df):
        return len(df)

    assert ContextualConstraint(TrueExpression(), housing_units, ">=").name == (
        "ContextualConstraint(TRUE >= housing_units)"
    )


def test_value_validation():
    for bad in (float("nan"), float("inf"), "3", None, True):
        with pytest.raises(
            ConstraintError, match=r"SumEqual\(AGE > 3\): value \(.*\) must be a finite number"
        ):
            SumEqual(GreaterThan("AGE", 3), bad)
    with pytest.raises(
        ConstraintError, match=r"SumLessEqual: expr \('AGE'\) must be a logical expression"
    ):
        SumLessEqual("AGE", 3)
    with pytest.raises(
        ConstraintError, match=r"StructuralZero: name \(''\) must be a non-empty string or None"
    ):
        StructuralZero(TrueExpression(), name="")
    assert SumGreaterEqual(TrueExpression(), -2).value == -2  # legal; diagnostics judge it
    assert SumEqual(TrueExpression(), np.int64(3)).value == 3
    with pytest.raises(ConstraintError, match=r"constraint \(42\) must be a Constraint"):
        as_constraint(42)


def test_contextual_evaluate_and_bind():
    hist = np.arange(30)
    c = SumEqualRealTotal(GreaterThan("AGE", 3))
    assert c.is_invariant
    value = c.evaluate(D, hist, None)
    assert value == hist.reshape(D.shape)[:, 4, :].sum() and isinstance(value, int)
    bound = c.bind(value)
    assert bound == SumEqual(GreaterThan("AGE", 3), value, name=c.name)
    assert not bound.is_invariant
    with pytest.raises(
        ConstraintError,
        match=r"SumEqualRealTotal\(AGE > 3\): histogram has shape \(5,\), expected \(30,\)",
    ):
        c.evaluate(D, np.zeros(5), None)

    records = pd.DataFrame({"SEX": [1, 2, 2], "UNITS": [2, 1, 4]})
    g = ContextualConstraint(TrueExpression(), lambda df: df["UNITS"].sum(), "<=", name="units")
    assert g.evaluate(D, hist, records) == 7
    assert g.bind(7) == SumLessEqual(TrueExpression(), 7, name="units")
    with pytest.raises(
        ConstraintError,
        match=r"units: needs the node's records \(a DataFrame\) to compute its value, but records is None",
    ):
        g.evaluate(D, hist, None)
    bad = ContextualConstraint(TrueExpression(), lambda df: float("nan"), name="nan")
    with pytest.raises(
        ConstraintError, match=r"nan: aggregate result: value \(nan\) must be a finite number"
    ):
        bad.evaluate(D, hist, records)
    with pytest.raises(ConstraintError, match=r"sense \('<'\) must be one of \['==', '<=', '>='\]"):
        ContextualConstraint(TrueExpression(), len, "<")
    with pytest.raises(ConstraintError, match=r"aggregate \(3\) must be a function"):
        ContextualConstraint(TrueExpression(), 3)


def test_unbound_contextual_cannot_compile():
    with pytest.raises(
        ConstraintError,
        match=r"contextual constraint SumEqualRealTotal\(TRUE\) must be bound to its measured value",
    ):
        compile_rows([SumEqual(TrueExpression(), 1), SumEqualRealTotal(TrueExpression())], D)
    with pytest.raises(ConstraintError, match=r"must be bound"):
        SumEqualRealTotal(TrueExpression()).rows(D)


def test_bad_cells():
    with pytest.raises(ConstraintError, match=r"cells must lie in \[0, 30\)"):
        compile_rows([], D, cells=[0, 30])
    with pytest.raises(ConstraintError, match=r"cells must not repeat a cell index"):
        compile_rows([], D, cells=[1, 1])
    with pytest.raises(ConstraintError, match=r"must be a 1-D array of integer cell indices"):
        compile_rows([], D, cells=[0.5])


def test_linear_rows_validation():
    with pytest.raises(
        ConstraintError, match=r"LinearRows: A has 1 rows but lb has 2, ub 1 and names 1"
    ):
        LinearRows(np.ones((1, 3)), [0, 1], [1], ("r",))
    with pytest.raises(ConstraintError, match=r"bounds \(lb, ub\) must not be NaN"):
        LinearRows(np.ones((1, 3)), [np.nan], [1], ("r",))
    r = LinearRows(np.ones((1, 3)), [1], [2], ("r",))
    assert r.satisfied([1, 0, 0]) and not r.satisfied([1, 1, 1])
    assert r.violation([1, 1, 1]).tolist() == [1.0]


def test_joint_rows_child_major():
    n = D.size
    r1 = compile_rows([SumEqual(Equal("SEX", 1), 3)], D)
    r2 = compile_rows([SumLessEqual(GreaterThan("AGE", 3), 1), SumEqual(TrueExpression(), 9)], D)
    j = joint_rows([r1, r2], n, labels=["01", "02"])
    assert j.A.shape == (3, 2 * n)
    dense = j.A.toarray()
    assert (dense[0, :n] == r1.A.toarray()[0]).all() and not dense[0, n:].any()
    assert (dense[1:, n:] == r2.A.toarray()).all() and not dense[1:, :n].any()
    assert j.names == (
        "01: SumEqual(SEX == 1, 3)",
        "02: SumLessEqual(AGE > 3, 1)",
        "02: SumEqual(TRUE, 9)",
    )
    assert j.lb.tolist() == [3, -np.inf, 9]
    assert joint_rows([LinearRows.empty(n), r1], n).A.shape == (1, 2 * n)
    with pytest.raises(
        ConstraintError, match=r"rows of child '02' have 30 columns, expected n = 4"
    ):
        joint_rows([LinearRows.empty(4), r2], 4, labels=["01", "02"])
    with pytest.raises(ConstraintError, match=r"labels has 1 entries but there are 2 children"):
        joint_rows([r1, r2], n, labels=["01"])


def test_to_cvxpy_solves_projection():
    cons = [
        SumEqual(Equal("SEX", 1), 10),
        SumLessEqual(GreaterThan("AGE", 2), 4),
        SumGreaterEqual(Equal("RACE", "a"), 6),
        StructuralZero(Equal("AGE", 0)),
    ]
    x = cp.Variable(D.size)
    target = np.full(D.size, 1.0)
    prob = cp.Problem(cp.Minimize(cp.sum_squares(x - target)), to_cvxpy(cons, D, x) + [x >= 0])
    prob.solve(solver=cp.CLARABEL)
    assert prob.status == "optimal"
    rows = compile_rows(cons, D)
    assert rows.satisfied(x.value, tol=1e-6)
    assert np.abs(x.value[zero_mask(cons, D)]).max() < 1e-6
    with pytest.raises(ConstraintError, match=r"x has shape \(5,\), expected \(30,\)"):
        to_cvxpy(cons, D, cp.Variable(5))


def test_seed_readme_example():
    domain = Domain({"SEX": [1, 2], "AGE": range(0, 116)})
    cs = ConstraintSet(n_levels=3)
    cs.add(SumEqual(GreaterThan("AGE", 99), 0))
    cs.add(SumEqualRealTotal(TrueExpression()), level=0)
    rng = np.random.default_rng(0)
    hist = rng.integers(0, 5, size=domain.size)
    hist.reshape(domain.shape)[:, 100:] = 0
    root = cs.for_node(0, "US")
    assert [c.name for c in root] == ["SumEqual(AGE > 99, 0)", "SumEqualRealTotal(TRUE)"]
    assert [a.constraint.name for a in cs.invariants()] == ["SumEqualRealTotal(TRUE)"]
    bound = [c.bind(c.evaluate(domain, hist, None)) if c.is_invariant else c for c in root]
    rows = compile_rows(bound, domain)
    assert rows.n_rows == 2
    assert rows.satisfied(hist)
    assert rows.lb[1] == hist.sum()
    assert [c.name for c in cs.for_node(1, "06")] == ["SumEqual(AGE > 99, 0)"]
