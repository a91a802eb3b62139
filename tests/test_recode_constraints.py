"""Constraints over a group of a recode (issue 26): ``InGroup('HHGQ', 'hhinst', 'institutional')``
in Python and ``{in_group = ["HHGQ", "hhinst", "institutional"]}`` in TOML.

A constraint over a group must be the same constraint as the one written with the group's
values: the same cells, and so, on the same seed, exactly the same release.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from constraints import (
    ConstraintSet,
    Domain,
    DomainError,
    Equal,
    In,
    InGroup,
    StructuralZero,
    SumEqualRealTotal,
)
from constraints.errors import ConstraintError
from topdown import release
from topdown.product.config import ConfigError, load_config
from topdown.schema import Attribute, Schema
from topdown.strategy import Strategy

HHINST = {"household": [0], "institutional": [1, 2, 3, 4], "other": [5, 6, 7]}


def _domain() -> Domain:
    return Domain({"HHGQ": range(8), "VA": [0, 1]}, {"HHGQ": {"hhinst": HHINST}})


def test_group_selects_its_values_worked_by_hand() -> None:
    d = _domain()  # cell (g, v) is 2 g + v
    assert InGroup("HHGQ", "hhinst", "institutional").cells(d).tolist() == list(range(2, 10))
    assert InGroup("HHGQ", "hhinst", "household").cells(d).tolist() == [0, 1]
    both = InGroup("HHGQ", "hhinst", "other") & Equal("VA", 0)
    assert both.cells(d).tolist() == [10, 12, 14]
    assert str(InGroup("HHGQ", "hhinst", "other")) == "HHGQ:hhinst == 'other'"


@pytest.mark.parametrize("label", list(HHINST))
def test_group_mask_equals_values_mask(label: str) -> None:
    d = _domain()
    np.testing.assert_array_equal(
        InGroup("HHGQ", "hhinst", label).mask(d), In("HHGQ", HHINST[label]).mask(d)
    )


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (
            ("HHGQ", "hhinstlevels", "household"),
            r"recode \('hhinstlevels'\) is not a recode of attribute 'HHGQ'; "
            r"its recodes are \['hhinst'\]",
        ),
        (
            ("HHGQ", "hhinst", "Institutional"),
            r"group \('Institutional'\) is not a group of recode 'hhinst' of attribute 'HHGQ'; "
            r"its groups are \['household', 'institutional', 'other'\]",
        ),
        (("VA", "hhinst", "household"), r"recode \('hhinst'\).*'VA'; its recodes are \[\]"),
        (("AGE", "hhinst", "household"), "AGE"),
    ],
)
def test_unknown_recode_or_group_is_named(args: tuple, pattern: str) -> None:
    with pytest.raises(DomainError, match=pattern):
        InGroup(*args).mask(_domain())


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (("", "hhinst", "household"), r"attribute \(''\) must be a non-empty string"),
        (("HHGQ", 3, "household"), r"recode \(3\) must be a non-empty string"),
        (("HHGQ", "hhinst", ["household"]), r"group \(\['household'\]\) must be a single"),
    ],
)
def test_malformed_arguments_are_named(args: tuple, pattern: str) -> None:
    with pytest.raises(ConstraintError, match=pattern):
        InGroup(*args)


def _data(n: int = 4000) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    county = rng.integers(0, 3, n)
    hhgq = rng.choice(8, n, p=[0.86, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02])
    va = rng.integers(0, 2, n)
    va[(hhgq >= 1) & (hhgq <= 4)] = 1  # no minors in institutions: the zero below holds
    return pd.DataFrame(
        {"COUNTY": county, "TRACT": county * 10 + rng.integers(0, 3, n), "HHGQ": hhgq, "VA": va}
    )


def _release(group: bool, estimator: str):
    schema = Schema(
        (
            Attribute("HHGQ", values=tuple(range(8)), recodes={"hhinst": HHINST}),
            Attribute("VA", values=(0, 1)),
        ),
        ("COUNTY", "TRACT"),
    )
    strategy = Strategy.from_budgets(
        [1, 1, 1], queries=[("detailed", "1/2"), ("hhinst", "1/4"), ("HHGQ:hhinst x VA", "1/4")]
    )
    inst = InGroup("HHGQ", "hhinst", "institutional") if group else In("HHGQ", [1, 2, 3, 4])
    other = InGroup("HHGQ", "hhinst", "other") if group else In("HHGQ", [5, 6, 7])
    cs = ConstraintSet(n_levels=3)
    cs.add(StructuralZero(inst & Equal("VA", 0), name="no minors in institutions"))
    cs.add(SumEqualRealTotal(other, name="non-institutional population"), level=1)
    return release(_data(), schema, strategy, constraints=cs, seed=11, estimator=estimator)


@pytest.mark.parametrize("estimator", ["topdown", "blue"])
def test_release_over_group_equals_release_over_values(estimator: str) -> None:
    by_group, by_values = _release(True, estimator), _release(False, estimator)
    for a, b in zip(by_group.counts, by_values.counts, strict=True):
        np.testing.assert_array_equal(a, b)
    # the constraints took effect: the zero cells are zero and the invariant holds exactly
    d = by_group.schema.domain
    zero = (InGroup("HHGQ", "hhinst", "institutional") & Equal("VA", 0)).mask(d)
    assert all(not c[:, zero].any() for c in by_group.counts)
    data = _data()
    other = data[data["HHGQ"] >= 5].groupby("COUNTY").size()
    got = by_group.counts[1][:, In("HHGQ", [5, 6, 7]).mask(d)].sum(axis=1)
    labels = [int(v) for v in by_group.tree.levels[1].labels]
    assert got.tolist() == [int(other.get(c, 0)) for c in labels]


TOML = """
[data]
path = "d.csv"
[schema]
hierarchy = ["STATE"]
[[schema.attributes]]
name = "HHGQ"
range = [0, 7]
recodes = { hhinst = { household = [0], institutional = [1, 2, 3, 4], other = [5, 6, 7] } }
[[schema.attributes]]
name = "VA"
values = [0, 1]
[strategy]
budgets = ["1/2", "1/2"]
queries = { detailed = "1/2", hhinst = "1/2" }
[[constraints]]
structural_zero = { expr = { and = [EXPR, { equal = ["VA", 0] }] } }
"""


def _config(tmp_path, expr: str):
    (tmp_path / "d.csv").write_text("STATE,HHGQ,VA\n1,0,1\n", encoding="utf-8")
    path = tmp_path / "c.toml"
    path.write_text(TOML.replace("EXPR", expr), encoding="utf-8")
    return load_config(path)


def test_toml_group_is_the_same_constraint_as_its_values(tmp_path) -> None:
    d = _domain()
    by_group = _config(tmp_path, '{ in_group = ["HHGQ", "hhinst", "institutional"] }')
    by_values = _config(tmp_path, '{ in = ["HHGQ", [1, 2, 3, 4]] }')
    (a,) = by_group.constraints.for_level(1)
    (b,) = by_values.constraints.for_level(1)
    np.testing.assert_array_equal(a.zero_mask(d), b.zero_mask(d))
    assert np.flatnonzero(a.zero_mask(d)).tolist() == [2, 4, 6, 8]
    # a release folder's config.json keeps the group and loads back to the same constraint
    again = tmp_path / "resolved.json"
    again.write_text(json.dumps(by_group.resolved()), encoding="utf-8")
    (c,) = load_config(again).constraints.for_level(1)
    assert c == a


@pytest.mark.parametrize(
    ("expr", "pattern"),
    [
        (
            '{ in_group = ["HHGQ", "hhinst", "inst"] }',
            r"in_group: group \('inst'\) is not a group of recode 'hhinst'.*"
            r"\['household', 'institutional', 'other'\]",
        ),
        (
            '{ in_group = ["HHGQ", "levels", "household"] }',
            r"in_group: recode \('levels'\) is not a recode.*\['hhinst'\]",
        ),
        ('{ in_group = ["HHGQ", "hhinst"] }', r"in_group: must be a three-element list"),
        ('{ in_group = ["AGE", "hhinst", "household"] }', r"in_group: .*AGE"),
    ],
)
def test_toml_bad_group_names_the_key(tmp_path, expr: str, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern) as info:
        _config(tmp_path, expr)
    assert "constraints[0].structural_zero.expr.and[0].in_group" in str(info.value)
