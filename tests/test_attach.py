"""Scopes of attached constraints: whole tree, one level only, named nodes; validation."""

from __future__ import annotations

import pytest

from constraints import ConstraintError, ConstraintSet, SumEqual, SumEqualRealTotal
from constraints.logical_expressions.atomic import Equal, GreaterThan, TrueExpression

A = SumEqual(GreaterThan("AGE", 99), 0)
B = SumEqualRealTotal(TrueExpression())
C = SumEqual(Equal("SEX", 1), 5, name="C")
RULE = GreaterThan("AGE", 17)


def test_level_k_applies_to_level_k_only():
    cs = ConstraintSet(n_levels=4).add(B, level=2)
    assert cs.for_level(2) == (B,)
    # neither the level above (seed bug 1) nor levels 0..k-1 (seed bug 2)
    for other in (0, 1, 3):
        assert cs.for_level(other) == ()
        assert cs.for_node(other, "x") == ()
    assert cs.for_node(2, "x") == (B,)


def test_whole_tree_and_nodes():
    cs = ConstraintSet()
    cs.add(A).add(C, level=1, nodes=["06", "41"]).add(RULE, level=1, nodes={"06"})
    assert cs.for_level(0) == (A,) and cs.for_level(7) == (A,)
    assert cs.for_level(1) == (A,)
    specific = cs.node_specific(1)
    assert set(specific) == {"06", "41"}
    assert specific["41"] == (C,)
    assert specific["06"][0] == C and specific["06"][1].name == "StructuralZero(not (AGE > 17))"
    assert cs.for_node(1, "06") == cs.for_level(1) + specific["06"]
    assert cs.for_node(1, "01") == (A,)
    assert cs.node_specific(2) == {}
    assert len(cs) == 3 and [a.scope for a in cs] == [
        "all levels",
        "level 1, nodes ['06', '41']",
        "level 1, nodes ['06']",
    ]


def test_invariants_with_scope():
    cs = (
        ConstraintSet([A])
        .add(B, level=0)
        .add(SumEqualRealTotal(Equal("SEX", 1)), level=1, nodes=["06"])
    )
    inv = cs.invariants()
    assert [(a.constraint.name, a.level, a.nodes) for a in inv] == [
        ("SumEqualRealTotal(TRUE)", 0, None),
        ("SumEqualRealTotal(SEX == 1)", 1, frozenset({"06"})),
    ]


def test_validate_levels_and_labels():
    cs = ConstraintSet().add(B, level=3)
    cs.validate(4)
    with pytest.raises(
        ConstraintError,
        match=r"SumEqualRealTotal\(TRUE\) is attached to level 3, but the tree has 3 level\(s\): valid levels are 0\.\.2 \(0 = root\)",
    ):
        cs.validate(3)
    with pytest.raises(
        ConstraintError,
        match=r"is attached to level 5, but the tree has 2 level\(s\): valid levels are 0\.\.1",
    ):
        ConstraintSet(n_levels=2).add(A, level=5)
    with pytest.raises(
        ConstraintError, match=r"level \(2\) is outside the tree: valid levels are 0\.\.1"
    ):
        ConstraintSet(n_levels=2).for_level(2)
    ConstraintSet().add(C, level=1, nodes=["06"]).validate(2, {1: ["06", "41"]})
    cs2 = ConstraintSet().add(C, level=1, nodes=["06", "99"])
    with pytest.raises(
        ConstraintError,
        match=r"C is attached to nodes \['99'\] of level 1, which has no such nodes; its labels are \['06', '41'\]",
    ):
        cs2.validate(2, {0: ["US"], 1: ["06", "41"]})


def test_bad_scopes():
    with pytest.raises(
        ConstraintError,
        match=r"nodes \(\['06'\]\) given for C without a level: node labels are only unique within a level",
    ):
        ConstraintSet().add(C, nodes=["06"])
    with pytest.raises(
        ConstraintError,
        match=r"nodes \('06'\) for C must be a list of node labels \(a single label must be wrapped",
    ):
        ConstraintSet().add(C, level=1, nodes="06")
    with pytest.raises(
        ConstraintError, match=r"nodes for C at level 1 is empty: it would apply nowhere"
    ):
        ConstraintSet().add(C, level=1, nodes=[])
    for bad in (-1, 1.0, True):
        with pytest.raises(
            ConstraintError,
            match=r"level \(.*\) must be a non-negative integer \(0 = root\) or None",
        ):
            ConstraintSet().add(C, level=bad)
    with pytest.raises(ConstraintError, match=r"constraint \('AGE'\) must be a Constraint"):
        ConstraintSet().add("AGE")
    with pytest.raises(ConstraintError, match=r"n_levels \(0\) must be at least 1"):
        ConstraintSet(n_levels=0)
