"""Recoded queries: an attribute measured through a named grouping of its values.

Worked by hand on an 8-value HHGQ with the Census ``hhinst`` recode (household {0},
institutional {1..4}, non-institutional {5..7}) and a 2-value voting age.
"""

from __future__ import annotations

import importlib
import itertools
import json

import numpy as np
import pandas as pd
import pytest

from constraints.domain import Domain
from mechanisms.ledger import LedgerEntry
from topdown import release
from topdown.errors import StrategyError, TopDownError
from topdown.product.config import ConfigError, load_config
from topdown.query import Query
from topdown.schema import Attribute, Schema
from topdown.strategy import Strategy

HHINST = {"household": [0], "institutional": [1, 2, 3, 4], "other": [5, 6, 7]}


def _domain() -> Domain:
    return Domain({"HHGQ": range(8), "VA": [0, 1]}, {"HHGQ": {"hhinst": HHINST}})


def test_grouping_and_labels() -> None:
    d = _domain()
    assert d.grouping("HHGQ", "hhinst") == (0, 1, 1, 1, 1, 2, 2, 2)
    assert d.group_labels("HHGQ", "hhinst") == ("household", "institutional", "other")
    assert d.recode_names("VA") == ()
    # a projection keeps the recodes of the attributes it keeps
    assert d.project(["HHGQ"]).grouping("HHGQ", "hhinst") == (0, 1, 1, 1, 1, 2, 2, 2)


def test_answers_worked_by_hand() -> None:
    d = _domain()
    h = np.arange(16).reshape(1, 16)  # cell (g, v) holds 2 g + v
    # household: cells (0,0)=0, (0,1)=1; institutional: g=1..4 -> v0 2+4+6+8, v1 3+5+7+9
    # other: g=5..7 -> v0 10+12+14, v1 11+13+15
    assert Query.parse("HHGQ:hhinst x VA").answer(h, d).tolist() == [[0, 1, 20, 24, 36, 39]]
    assert Query.parse("hhinst").answer(h, d).tolist() == [[1, 44, 75]]
    q = Query.parse("hhinst")
    assert q.n_answers(d) == 3
    assert q.kept(d) == ("HHGQ",)
    assert q.recoded(d) == {"HHGQ": "hhinst"}


@pytest.mark.parametrize("spec", ["HHGQ:hhinst x VA", "hhinst", "VA", "total", "detailed"])
def test_answer_matrix_and_groups_agree(spec: str) -> None:
    d = _domain()
    rng = np.random.default_rng(3)
    h = rng.integers(0, 50, size=(4, d.size))
    q = Query.parse(spec)
    by_matrix = (q.matrix(d) @ h.T).T
    np.testing.assert_array_equal(q.answer(h, d), by_matrix)
    by_groups = np.stack(
        [np.bincount(q.groups(d), weights=row, minlength=q.n_answers(d)) for row in h]
    )
    np.testing.assert_array_equal(by_groups, by_matrix)


def test_non_contiguous_groups() -> None:
    d = Domain({"A": range(5)}, {"A": {"parity": {"even": [0, 2, 4], "odd": [1, 3]}}})
    h = np.array([[1, 10, 100, 1000, 10000]])
    assert Query.parse("A:parity").answer(h, d).tolist() == [[10101, 1010]]


@pytest.mark.parametrize(
    ("recodes", "match"),
    [
        ({"HHGQ": {"r": {"a": [0, 1]}}}, "leaves values"),
        ({"HHGQ": {"r": {"a": list(range(8)), "b": [1]}}}, "exactly one group"),
        ({"HHGQ": {"r": {"a": list(range(8)) + [9]}}}, "9"),
        ({"NOPE": {"r": {"a": [0]}}}, "NOPE"),
        ({"HHGQ": {"bad name": {"a": list(range(8))}}}, "recode name"),
    ],
)
def test_recode_must_be_a_partition(recodes: dict, match: str) -> None:
    with pytest.raises(TopDownError, match=match):
        Domain({"HHGQ": range(8), "VA": [0, 1]}, recodes)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("HHGQ:nope", "no recode 'nope'"),
        ("hhinst x HHGQ", "twice"),
        ("XYZ", r"recodes are \['HHGQ:hhinst'\]"),
    ],
)
def test_bad_terms_are_named(spec: str, match: str) -> None:
    with pytest.raises(StrategyError, match=match):
        Query.parse(spec).factors(_domain())


def _data(n: int = 6000) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    county = rng.integers(0, 3, n)
    return pd.DataFrame(
        {
            "COUNTY": county,
            "TRACT": county * 10 + rng.integers(0, 3, n),
            "HHGQ": rng.choice(8, n, p=[0.86, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02]),
            "VA": rng.integers(0, 2, n),
        }
    )


def _schema_and_strategy() -> tuple[Schema, Strategy]:
    """HHGQ with its hhinst recode and a voting age, county > tract; detailed 1/2, hhinst and
    hhinst x VA 1/4 each, rho 1 per level."""
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
    return schema, strategy


def test_release_with_recoded_queries_is_consistent() -> None:
    schema, strategy = _schema_and_strategy()
    rel = release(_data(), schema, strategy, estimator="topdown", seed=5)
    report = rel.check_correctness()
    assert report.ok, str(report)
    measured = {(e.query, e.level) for e in rel.ledger.entries if isinstance(e, LedgerEntry)}
    assert {("hhinst", 2), ("HHGQ:hhinst x VA", 2)} <= measured
    # the published tract counts answer the recoded query close to the truth (rho 1/4 per level)
    tract = rel.counts[2].astype(np.int64)
    true = np.zeros_like(tract)
    data = _data()
    cells = schema.encode_cells(data)
    node = {str(label): i for i, label in enumerate(rel.tree.levels[2].labels)}
    np.add.at(true, ([node[str(t)] for t in data["TRACT"]], cells), 1)
    q = Query.parse("hhinst")
    err = np.abs(q.answer(tract, schema.domain) - q.answer(true, schema.domain))
    assert err.mean() < 5


@pytest.mark.parametrize("block_bytes", [None, 1])
def test_blue_release_with_recoded_queries(monkeypatch, block_bytes: int | None) -> None:
    """``estimator="blue"`` takes recoded queries: a consistent release whose per-cell
    standard errors differ between a household cell (a group of 1) and an institutional one
    (a group of 4) of the same node, and equal the BLUE's own cell variances (read by the long
    table a node at a time with ``block_bytes`` 1)."""
    if block_bytes is not None:
        monkeypatch.setattr(importlib.import_module("topdown.release"), "LONG_BLOCK_BYTES", 1)
    schema, strategy = _schema_and_strategy()
    rel = release(_data(2000), schema, strategy, estimator="blue", seed=5)
    assert rel.check_correctness().ok
    assert rel.blue is not None and rel.blue.blocks
    cell_se = np.sqrt(rel.blue.cell_variance(2))
    by_value = cell_se.reshape(-1, 8, 2)  # (tracts, HHGQ, VA)
    np.testing.assert_allclose(by_value[:, 1], by_value[:, 4])  # one group, one stderr
    assert np.all(np.abs(by_value[:, 0] - by_value[:, 1]) > 0.01)  # groups of 1 and 4 differ
    table = rel.long_table(2)
    np.testing.assert_allclose(table["stderr"], np.round(cell_se[rel.counts[2] > 0], 4))


def test_schema_round_trip_names_recodes() -> None:
    a = Attribute("HHGQ", values=tuple(range(8)), recodes={"hhinst": HHINST})
    assert hash(a) == hash(Attribute("HHGQ", values=tuple(range(8)), recodes={"hhinst": HHINST}))
    entry = Schema((a,), ("C",)).to_dict()["attributes"][0]
    assert entry["recodes"] == {"hhinst": [[k, v] for k, v in HHINST.items()]}
    assert list(itertools.chain(*(v for _, v in entry["recodes"]["hhinst"]))) == list(range(8))


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
queries = { detailed = "1/2", "HHGQ:hhinst x VA" = "1/4", hhinst = "1/4" }
"""


def test_toml_recodes_load_and_round_trip(tmp_path) -> None:
    (tmp_path / "d.csv").write_text("STATE,HHGQ,VA\n1,0,1\n", encoding="utf-8")
    path = tmp_path / "c.toml"
    path.write_text(TOML, encoding="utf-8")
    cfg = load_config(path)
    assert cfg.schema.domain.grouping("HHGQ", "hhinst") == (0, 1, 1, 1, 1, 2, 2, 2)
    names = [q.name for q, _ in cfg.strategy.levels[0].queries]
    assert names == ["detailed", "HHGQ:hhinst x VA", "hhinst"]
    again = tmp_path / "resolved.json"
    again.write_text(json.dumps(cfg.resolved()), encoding="utf-8")
    assert load_config(again).schema == cfg.schema


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("recodes = { hhinst = { household = [0] } }", "leaves values"),
        ("recodes = [1]", "schema.attributes.0..recodes|recodes"),
    ],
)
def test_toml_bad_recodes_name_the_key(tmp_path, line: str, match: str) -> None:
    (tmp_path / "d.csv").write_text("STATE,HHGQ,VA\n1,0,1\n", encoding="utf-8")
    path = tmp_path / "c.toml"
    text = TOML.replace(TOML.splitlines()[8], line)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=match) as info:
        load_config(path)
    assert "schema.attributes[0].recodes" in str(info.value)
