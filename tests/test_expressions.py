"""Hand-worked masks, names and errors of logical expressions on a small domain."""

from __future__ import annotations

import numpy as np
import pytest

from constraints import ConstraintError, Domain, DomainError
from constraints.logical_expressions.atomic import (
    Equal,
    FalseExpression,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    NotEqual,
    TrueExpression,
)
from constraints.logical_expressions.compound import And, Implies, Not, Or

D = Domain({"SEX": [1, 2], "AGE": range(5), "RACE": ["a", "b", "c"]})


def cube(expr) -> np.ndarray:
    return expr.mask(D).reshape(D.shape)


def test_comparisons_select_by_position():
    m = cube(GreaterThan("AGE", 2))
    assert m.shape == (2, 5, 3)
    assert m[:, 3:, :].all() and not m[:, :3, :].any()
    assert cube(GreaterThanOrEqual("AGE", 2))[:, 2:, :].all()
    assert cube(LessThan("AGE", 2)).sum() == 2 * 2 * 3
    assert cube(LessThanOrEqual("AGE", 2)).sum() == 3 * 2 * 3
    assert cube(Equal("SEX", 2))[1].all() and not cube(Equal("SEX", 2))[0].any()
    assert cube(NotEqual("RACE", "b")).sum() == 2 * 5 * 2
    assert cube(In("RACE", ["c", "a", "c"])).sum() == 2 * 5 * 2
    assert TrueExpression().mask(D).all() and not FalseExpression().mask(D).any()
    assert TrueExpression().mask(D).shape == (30,)


def test_declared_order_not_python_order():
    d = Domain({"AGEGRP": ["65+", "0-17", "18-64"]})
    assert GreaterThan("AGEGRP", "0-17").mask(d).tolist() == [False, False, True]
    assert LessThan("AGEGRP", "0-17").mask(d).tolist() == [True, False, False]


def test_flat_index_is_c_order():
    # cell (SEX=2, AGE=0, RACE='c') is 1*15 + 0*3 + 2 = 17
    m = (Equal("SEX", 2) & Equal("AGE", 0) & Equal("RACE", "c")).mask(D)
    assert np.flatnonzero(m).tolist() == [17]


def test_compounds():
    a, b = GreaterThan("AGE", 2), Equal("SEX", 1)
    ma, mb = a.mask(D), b.mask(D)
    assert (And(a, b).mask(D) == (ma & mb)).all()
    assert (Or(a, b, Equal("RACE", "a")).mask(D) == (ma | mb | Equal("RACE", "a").mask(D))).all()
    assert (Not(a).mask(D) == ~ma).all()
    assert (Implies(a, b).mask(D) == (~ma | mb)).all()
    assert (a & b) == And(a, b)
    assert (a | b) == Or(a, b)
    assert ~a == Not(a)
    assert (a & b & Equal("RACE", "a")) == And(a, b, Equal("RACE", "a"))
    assert And().mask(D).all() and not Or().mask(D).any()


def test_immutable_hashable_and_attributes():
    a = GreaterThan("AGE", 2)
    assert hash(a) == hash(GreaterThan("AGE", 2)) and a == GreaterThan("AGE", 2)
    assert a != LessThan("AGE", 2) and a != GreaterThan("AGE", 3)
    assert len({a, GreaterThan("AGE", 2), Equal("AGE", 2)}) == 2
    with pytest.raises(AttributeError):
        a.value = 3
    e = Implies(Equal("SEX", 1), Or(a, In("RACE", ["a"])))
    assert e.attributes == frozenset({"SEX", "AGE", "RACE"})
    assert TrueExpression().attributes == frozenset()
    assert hash(e) == hash(Implies(Equal("SEX", 1), Or(a, In("RACE", ["a"]))))


def test_str_and_repr():
    assert str(GreaterThan("AGE", 99)) == "AGE > 99"
    assert str(Equal("RACE", "a")) == "RACE == 'a'"
    assert str(In("RACE", ["a", "b"])) == "RACE in ['a', 'b']"
    e = (GreaterThan("AGE", 2) & Equal("SEX", 1)) | ~LessThanOrEqual("AGE", 1)
    assert str(e) == "(AGE > 2 and SEX == 1) or not (AGE <= 1)"
    assert str(Implies(Equal("SEX", 1), GreaterThan("AGE", 2))) == "SEX == 1 implies AGE > 2"
    assert repr(GreaterThan("AGE", 99)) == "GreaterThan('AGE', 99)"
    assert repr(And(TrueExpression(), Not(FalseExpression()))) == (
        "And(TrueExpression(), Not(FalseExpression()))"
    )


def test_numpy_scalars_are_plain_values():
    assert GreaterThan("AGE", np.int64(2)) == GreaterThan("AGE", 2)
    assert (GreaterThan("AGE", np.int64(2)).mask(D) == GreaterThan("AGE", 2).mask(D)).all()


def test_unknown_attribute_and_value_errors():
    with pytest.raises(
        DomainError,
        match=r"attribute 'AGES' is not in the domain; its attributes are \['SEX', 'AGE', 'RACE'\]",
    ):
        GreaterThan("AGES", 2).mask(D)
    with pytest.raises(
        DomainError,
        match=r"value 9 is not in the domain of attribute 'AGE'; its values are \[0, 1, 2, 3, 4\]",
    ):
        (Equal("SEX", 1) & GreaterThan("AGE", 9)).mask(D)
    with pytest.raises(DomainError, match=r"value 'd' is not in the domain of attribute 'RACE'"):
        In("RACE", ["a", "d"]).mask(D)


def test_construction_errors():
    with pytest.raises(
        ConstraintError, match=r"GreaterThan: attribute \(''\) must be a non-empty string"
    ):
        GreaterThan("", 1)
    with pytest.raises(
        ConstraintError,
        match=r"Equal\('AGE', \.\.\.\): value \(\[1\]\) must be a single hashable value",
    ):
        Equal("AGE", [1])
    with pytest.raises(
        ConstraintError, match=r"In\('RACE', \.\.\.\): values \('ab'\) must be a list of values"
    ):
        In("RACE", "ab")
    with pytest.raises(
        ConstraintError, match=r"And: operand 1 \('AGE'\) must be a logical expression"
    ):
        And(Equal("SEX", 1), "AGE")
    with pytest.raises(ConstraintError, match=r"Not: operand \(3\) must be a logical expression"):
        Not(3)
    with pytest.raises(ConstraintError, match=r"Implies: consequent \(None\) must be a logical"):
        Implies(Equal("SEX", 1), None)
    with pytest.raises(
        ConstraintError, match=r"operand of & \(True\) must be a logical expression"
    ):
        Equal("SEX", 1) & True


def test_no_python_truth_value():
    with pytest.raises(
        TypeError, match=r"expression SEX == 1 has no truth value; combine expressions with &"
    ):
        Equal("SEX", 1) and Equal("AGE", 2)  # noqa: B018
