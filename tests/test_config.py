"""Config files parsed into typed objects: formats, defaults, resolution and messages."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from constraints import (
    And,
    Equal,
    GreaterThan,
    In,
    Not,
    StructuralZero,
    SumEqual,
    SumEqualRealTotal,
)
from topdown.product.config import DEFAULT_CONFIG, ConfigError, load_config
from topdown.schema import Attribute

BASE = """
[data]
path = "d.csv"
[schema]
hierarchy = ["STATE"]
[[schema.attributes]]
name = "SEX"
values = [1, 2]
[[schema.attributes]]
name = "AGE"
range = [0, 3]
[strategy]
budgets = ["1/2", 0.3]
"""


def load(tmp_path: Path, text: str):
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path)


def test_default_config() -> None:
    cfg = load_config(DEFAULT_CONFIG)
    assert cfg.schema.hierarchy == ("STATE", "PUMA")
    assert [a.name for a in cfg.schema.attributes] == ["SEX", "AGE", "RAC1P"]
    assert cfg.schema.attribute("SEX").values == (1, 2)
    assert cfg.schema.attribute("RAC1P").values == tuple(range(1, 10))
    assert cfg.schema.attribute("AGE").labels[-1] == "75+"
    assert cfg.seed is None and cfg.truth is True
    assert cfg.strategy.total() == Fraction(3, 2)
    assert [(q.name, s) for q, s in cfg.strategy.levels[1].queries] == [
        ("detailed", Fraction(3, 4)),
        ("total", Fraction(1, 4)),
    ]
    assert cfg.data.path == DEFAULT_CONFIG.parent / "acs_national2019.csv"
    (att,) = cfg.constraints.attachments
    assert isinstance(att.constraint, SumEqualRealTotal) and att.level == 0


def test_budgets_strings_and_floats_are_exact(tmp_path: Path) -> None:
    cfg = load(tmp_path, BASE)
    assert [ls.budget for ls in cfg.strategy.levels] == [Fraction(1, 2), Fraction(3, 10)]
    assert cfg.schema.attribute("AGE") == Attribute.integer_range("AGE", 0, 3)
    assert cfg.data.path == tmp_path / "d.csv"


def test_levels_form_and_derive(tmp_path: Path) -> None:
    text = (
        BASE.replace('budgets = ["1/2", 0.3]', "")
        + """
[[strategy.levels]]
budget = 1
queries = {total = 1}
[[strategy.levels]]
budget = "1/4"
queries = {detailed = "1/2", "SEX x AGE" = 0.25, SEX = 0.25}
first_pass = ["SEX"]
[data.derive]
STATE = {from = "PUMA", slice = [0, 2]}
"""
    )
    cfg = load(tmp_path, text)
    lv = cfg.strategy.levels[1]
    assert [q.name for q, _ in lv.queries] == ["detailed", "SEX x AGE", "SEX"]
    assert lv.first_pass == ("SEX",)
    d = cfg.data.derive["STATE"]
    assert (d.source, d.start, d.stop) == ("PUMA", 0, 2)


def test_constraint_tables_compile_to_the_dsl(tmp_path: Path) -> None:
    text = (
        BASE
        + """
[[constraints]]
structural_zero = {expr = {and = [{equal = ["SEX", 1]}, {greater_than = ["AGE", 2]}]}}
level = 1
nodes = ["06"]
[[constraints]]
sum_equal = {expr = {not = {in = ["AGE", [0, 1]]}}, value = 4, name = "old"}
"""
    )
    cfg = load(tmp_path, text)
    a, b = cfg.constraints.attachments
    assert a.constraint == StructuralZero(And(Equal("SEX", 1), GreaterThan("AGE", 2)))
    assert (a.level, a.nodes) == (1, frozenset({"06"}))
    assert b.constraint == SumEqual(Not(In("AGE", (0, 1))), 4, name="old") and b.level is None
    mask = a.constraint.zero_mask(cfg.schema.domain)
    assert mask.sum() == 1 and mask.reshape(2, 4)[0, 3]


def test_resolved_config_round_trips(tmp_path: Path) -> None:
    cfg = load_config(DEFAULT_CONFIG)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg.resolved()))
    again = load_config(path)
    assert again.schema == cfg.schema and again.strategy == cfg.strategy
    assert [a.constraint for a in again.constraints] == [a.constraint for a in cfg.constraints]
    assert again.resolved() == cfg.resolved()
    assert "dictionary" not in json.dumps(cfg.resolved()["schema"])  # domains are listed


@pytest.mark.parametrize(
    "old,new,key,rule",
    [
        (
            'budgets = ["1/2", 0.3]',
            'budgets = ["1/2", "x"]',
            "strategy.budgets[1]",
            "finite number",
        ),
        (
            'budgets = ["1/2", 0.3]',
            'budgets = ["1/2", "0.3"]\nqueries = {total = "1/2"}',
            "strategy.queries",
            "sum to 1/2",
        ),
        (
            'budgets = ["1/2", 0.3]',
            'budgets = [1, 1]\nqueries = {"SEX x RACE" = 1}',
            "strategy.queries.'SEX x RACE'",
            "RACE",
        ),
        ("range = [0, 3]", "range = [3, 0]", "schema.attributes[1].range", ">= low"),
        ("range = [0, 3]", "bins = [0, 5, 2]", "schema.attributes[1].bins", "strictly increasing"),
        (
            "range = [0, 3]",
            'values = "dictionary"',
            "schema.attributes[1].values",
            "data.dictionary",
        ),
        ('hierarchy = ["STATE"]', 'hierarchy = ["SEX"]', "schema", "also query attributes"),
        ('path = "d.csv"', 'path = "d.csv"\nformat = "xlsx"', "data.format", "csv"),
        ("[data]", "seed = -1\n[data]", "seed", "non-negative integer"),
    ],
)
def test_messages_name_file_key_rule(
    tmp_path: Path, old: str, new: str, key: str, rule: str
) -> None:
    assert old in BASE
    with pytest.raises(ConfigError) as info:
        load(tmp_path, BASE.replace(old, new))
    err = info.value
    assert err.file.endswith("c.toml") and err.key == key, str(err)
    assert rule in err.rule, str(err)
    assert str(err).startswith(f"{err.file}: {key}: ")


def test_overrides_are_validated() -> None:
    cfg = load_config(DEFAULT_CONFIG)
    assert cfg.with_overrides(seed=5, solver="highs", executor="processes").seed == 5
    with pytest.raises(ConfigError, match="--solver"):
        cfg.with_overrides(solver="nope")
    with pytest.raises(ConfigError, match="--executor"):
        cfg.with_overrides(executor="nope")


def test_default_constraint_holds_in_the_data() -> None:
    """The default run's invariant is bound to the data's true total: any data satisfies it, and
    the default domain covers every record of the embedded data."""
    from topdown.product.cli import load_data

    cfg = load_config(DEFAULT_CONFIG)
    data = load_data(cfg)
    cells = cfg.schema.encode_cells(data)
    assert len(cells) == 27_253 and np.all(cells >= 0)
    assert set(data["STATE"]) == {p[:2] for p in data["PUMA"]}
