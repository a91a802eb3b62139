"""The second pass holds only the first-pass queries a level names (``LevelStrategy.held``), as
the Census Bureau's DHC ordering holds one of its nine first-pass marginals
(``topdown.presets.census2020_dhcp``): a worked case with a different answer from holding all,
the Newton routes against the general path (Clarabel) with a subset held, the checks, the
config round trip and a release whose every level passes the subset on."""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import tests.test_multipass_marginals as tm
from topdown.errors import StrategyError
from topdown.estimation.batched.chunk_tasks import ChunkTask
from topdown.estimation.family import FamilyTask, _l2
from topdown.estimation.multipass_newton import root_two_passes
from topdown.estimation.passes import EstimateOptions, SolverChoice
from topdown.estimation.root_marginals import RootMarginal
from topdown.product.config import ConfigError, load_config, parse_config
from topdown.query import Query
from topdown.strategy import LevelStrategy, Strategy

#: the measurement (tm._task's numbering: 0 is detailed) of A x B, the one held below
HELD = (1,)


#: the per-family path's answer holding a subset (``tm.solve_held``)
_solve = tm.solve_held


# -- a worked case ------------------------------------------------------------------------------
def _worked() -> tuple[np.ndarray, list[RootMarginal]]:
    """Two cells, detailed answers (6, 7), weight 1. Pass 1 fits the total (10) and the cells'
    own marginal (2, 9), weights 1: ``min (x1 + x2 - 10)^2 + (x1 - 2)^2 + (x2 - 9)^2`` gives
    ``x2 = x1 + 7`` and ``3 x1 = 5``: (5/3, 26/3), total 31/3."""
    total = RootMarginal(np.zeros(2, dtype=np.int64), np.array([10.0]), 1.0)
    cells = RootMarginal(np.array([0, 1]), np.array([2.0, 9.0]), 1.0)
    return np.array([6.0, 7.0]), [total, cells]


def test_a_worked_case_holding_the_total_only():
    """Holding both first-pass answers pins the cells at pass 1's (5/3, 26/3); holding the
    total only, pass 2 projects the cells (6, 7) onto ``x1 + x2 = 31/3``: each less 4/3,
    (14/3, 17/3). Ignoring ``held`` gives the first answer and fails."""
    y, marginals = _worked()
    every = root_two_passes(y, 1.0, marginals, (0, 1))
    assert every is not None
    np.testing.assert_allclose(every, [5 / 3, 26 / 3], atol=1e-5)
    total = root_two_passes(y, 1.0, marginals, (0, 1), held=[0])
    assert total is not None
    np.testing.assert_allclose(total, [14 / 3, 17 / 3], atol=1e-5)
    # the general path (Clarabel, the per-family rows) gives the same two answers
    task = FamilyTask(
        level=0,
        parent_label=None,
        child_labels=("root",),
        parent_values=None,
        measurements=(
            (sp.identity(2, format="csr"), np.array([[6.0, 7.0]]), np.ones((1, 2))),
            (sp.csr_matrix(np.ones((1, 2))), np.array([[10.0]]), np.ones((1, 1))),
            (sp.identity(2, format="csr"), np.array([[2.0, 9.0]]), np.ones((1, 2))),
        ),
        support=np.arange(2),
        first_pass=(1, 2),
        options=EstimateOptions(solver=SolverChoice("cvxpy:CLARABEL")),
    )
    for held, expected in ((None, every), ((1,), total)):
        x, _ = _l2(dataclasses.replace(task, held=held), None)
        np.testing.assert_allclose(x[0], expected, atol=2e-4)


# -- the Newton routes against the general path -------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
def test_family_holding_a_subset_equals_the_general_path(seed):
    y, p, w, marginals = tm._inputs(seed, k=2 + seed % 2, second=seed == 1)
    x, solved = _solve(y, p, w, marginals, "auto", HELD)
    assert solved == {"marginal_newton_multipass": 1}
    reference, general = _solve(y, p, w, marginals, "cvxpy:CLARABEL", HELD)
    assert general == {"cvxpy:CLARABEL": 2}
    np.testing.assert_allclose(x, reference, atol=tm.ATOL)
    np.testing.assert_allclose(x.sum(axis=0), p, atol=1e-9)
    # A x B held at pass 1's answers; the other three first-pass answers free: the answer
    # is not the one holding all four
    every, _ = _solve(y, p, w, marginals, "auto")
    first = tm._answers(every)
    np.testing.assert_allclose(tm._answers(x)[0], first[0], atol=tm.ATOL)
    assert np.abs(x - every).max() > 100 * tm.ATOL


@pytest.mark.parametrize("seed", range(2))
def test_root_holding_a_subset_equals_the_general_path(seed):
    y, _, w, marginals = tm._inputs(10 + seed, k=1, second=seed == 1)
    x, solved = _solve(y, None, w, marginals, "auto", HELD)
    assert solved == {"root_newton_multipass": 1}
    reference, _ = _solve(y, None, w, marginals, "cvxpy:CLARABEL", HELD)
    np.testing.assert_allclose(x, reference, atol=tm.ATOL)
    every, _ = _solve(y, None, w, marginals, "auto")
    assert np.abs(x - every).max() > 100 * tm.ATOL


def test_family_holding_a_subset_within_the_slack_as_the_general_path():
    """Production's hold (0.1) on the one held marginal: both paths agree to the slack
    tests' tolerance (``tests/test_multipass_slack.py``: the Newton pass 2 stops within
    about 0.03 of the optimum's cells)."""
    y, p, w, marginals = tm._inputs(5, k=3)
    x, _ = _solve(y, p, w, marginals, "auto", HELD, tolerance=0.1)
    reference, _ = _solve(y, p, w, marginals, "cvxpy:CLARABEL", HELD, tolerance=0.1)
    np.testing.assert_allclose(x, reference, atol=0.05)


def test_a_chunk_task_holds_its_subset_and_checks_it():
    """The level-batched route (one chunk of one family) with A x B held equals the general
    path; ``held_marginals`` outside ``first_marginals`` is refused."""
    from topdown.estimation.batched.chunk_tasks import solve_chunk
    from topdown.estimation.batched.families import ChunkShape
    from topdown.estimation.batched.marginals import LevelMarginal

    y, p, w, marginals = tm._inputs(40, k=3)
    support = np.flatnonzero(p > 0)
    chunk = ChunkShape(
        np.arange(1), np.arange(3).reshape(1, 3), support[None], np.array([support.size])
    )
    level = tuple(LevelMarginal(g, z, v) for g, z, v in marginals)
    task = ChunkTask(
        level=1,
        cells=chunk.cells,
        parent_values=chunk.gather_parents(p[None]),
        noisy=chunk.gather(y),
        weights=w[chunk.children],
        marginals=tuple(m.of_chunk(chunk) for m in level),
        first_marginals=(0, 1, 2, 3),
        held_marginals=(0,),
        rounding=False,
    )
    res = solve_chunk(task)
    assert res.settled.all() and res.l2 is not None
    x = np.zeros((3, tm.N))
    x[:, support] = res.l2[0, :, : support.size]
    reference, _ = _solve(y, p, w, marginals, "cvxpy:CLARABEL", HELD)
    np.testing.assert_allclose(x, reference, atol=tm.ATOL)
    with pytest.raises(ValueError, match=r"held_marginals \(\(5,\)\) must be among"):
        dataclasses.replace(task, held_marginals=(5,))


# -- the strategy, the config and a release -----------------------------------------------------
_FIRST = ("SEX x AGE", "SEX")
_QUERIES = ((Query.parse("detailed"), Fraction(1, 3)),) + tuple(
    (Query.parse(q), Fraction(1, 3)) for q in _FIRST
)


def test_the_strategy_checks_held():
    def level(held):
        return LevelStrategy(Fraction(1), _QUERIES, _FIRST, held)

    assert level(None).holds == _FIRST and level(None).held is None  # the default: all
    assert level(["SEX", "SEX x AGE"]).held is None  # all of it, named: the default
    assert level(("SEX",)).held == level(("SEX",)).holds == ("SEX",)
    # a first pass replaced: the default holds all of the new one
    assert dataclasses.replace(level(None), first_pass=("SEX",)).holds == ("SEX",)
    assert dataclasses.replace(level(None), first_pass=()).holds == ()
    with pytest.raises(StrategyError, match=r"held names \['AGE'\] that are not in first_pass"):
        level(("AGE",))
    with pytest.raises(StrategyError, match=r"held \(\[\]\) must name at least one"):
        level(())
    with pytest.raises(StrategyError, match="repeats a name"):
        level(("SEX", "SEX"))
    with pytest.raises(StrategyError, match=r"held \('SEX'\) must be a list"):
        level("SEX")
    with pytest.raises(StrategyError, match="not in first_pass"):
        LevelStrategy(Fraction(1), _QUERIES, (), ("SEX",))  # no first pass to hold
    strategy = Strategy((level(("SEX",)), level(None)))
    d = strategy.to_dict()
    assert d["levels"][0]["held"] == ["SEX"] and "held" not in d["levels"][1]
    assert Strategy.from_dict(d) == strategy


def test_held_in_the_config_and_config_json(tmp_path: Path):
    from topdown.presets import census2020_dhcp
    from topdown.presets.census2020_dhcp import PRODUCTION_HELD_NAME

    raw = {
        "data": {"path": str(tmp_path / "persons.csv")},
        "schema": {"hierarchy": ["STATE"]},
        "strategy": {"preset": "census2020_dhcp"},
    }
    config = parse_config(raw, "run.toml", base=tmp_path)
    _, preset = census2020_dhcp(("STATE",))
    assert config.strategy == preset
    resolved = config.resolved()
    # the preset holds production's one at each level; written out, it loads back
    assert [lv["held"] for lv in resolved["strategy"]["levels"]] == [[PRODUCTION_HELD_NAME]] * 2
    path = tmp_path / "config.json"
    path.write_text(json.dumps(resolved))
    loaded = load_config(path).strategy
    assert [lv.held for lv in loaded.levels] == [(PRODUCTION_HELD_NAME,)] * 2
    assert loaded.levels[0].first_pass == preset.levels[0].first_pass
    # all nine held (no key) loads back as such
    for lv in resolved["strategy"]["levels"]:
        del lv["held"]
    path.write_text(json.dumps(resolved))
    assert all(lv.held is None for lv in load_config(path).strategy.levels)
    resolved["strategy"]["levels"][1]["held"] = ["SEX"]
    path.write_text(json.dumps(resolved))
    with pytest.raises(ConfigError, match=r"strategy.levels\[1\].held.*'SEX'.*not in first_pass"):
        load_config(path)


def test_a_release_passes_each_level_its_subset(monkeypatch):
    """Every level of a release (the root, the per-family and batched levels) calls the
    Newton passes holding the one named marginal: the position of ``SEX`` among the first
    pass, not all of it; the default holds all."""
    from benchmarks.synthetic import synthetic
    from topdown import release

    seen = tm.record_two_passes(monkeypatch, "held")
    df, schema = synthetic(30, people=5, seed=2)
    levels = tuple(LevelStrategy(Fraction(1, 4), _QUERIES, _FIRST, ("SEX",)) for _ in range(4))
    rel = release(df, schema, Strategy(levels), seed=1, estimator="topdown")
    assert rel.check_correctness().ok
    assert len(seen) >= 4 and all(list(h) == [1] for h in seen), seen
    seen.clear()
    every = tuple(LevelStrategy(Fraction(1, 4), _QUERIES, _FIRST) for _ in range(4))
    release(df, schema, Strategy(every), seed=1, estimator="topdown")
    assert seen and all(h is None or list(h) == [0, 1] for h in seen), seen


@pytest.mark.extra("parquet")
def test_a_streamed_release_passes_each_level_its_subset(monkeypatch, tmp_path: Path):
    """The streamed release (``topdown.streaming.run``) builds its own estimation options:
    they carry the subset too (ignoring it there fails this)."""
    from tests.test_stream import QUIET, SCHEMA, _geography, _records
    from topdown.streaming.run import release_streamed

    seen = tm.record_two_passes(monkeypatch, "held")
    queries = tuple((Query.parse(q), Fraction(1, 3)) for q in ("detailed", "AGE", "SEX"))
    levels = tuple(
        LevelStrategy(Fraction(1, 2), queries, ("AGE", "SEX"), ("SEX",)) for _ in range(5)
    )
    geo = _geography()
    rel = release_streamed(
        _records(geo, n=600),
        SCHEMA,
        Strategy(levels),
        stream_by="COUNTY",
        out=tmp_path / "release",
        geography=geo,
        seed=3,
        estimator="topdown",
        progress=QUIET,
    )
    assert rel.check_correctness().ok
    assert seen and all(list(h) == [1] for h in seen), seen
