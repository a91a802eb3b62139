"""Solver choice per pass: one name where it applies (auto elsewhere), a mapping, strict mode,
the config's ``[solver]`` table, and the statistics that say which backend solved what."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from solvers import UnknownSolverError, UnsupportedProblemError
from topdown import Attribute, Query, Schema, Strategy, release
from topdown.errors import OptionsError
from topdown.estimation.estimate import LevelStats, SolverChoice, SolveStats
from topdown.product.config import ConfigError, load_config
from topdown.strategy import LevelStrategy


def _data(n: int = 500, seed: int = 2) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    region = rng.choice(["N", "S"], size=n)
    state = np.where(region == "N", rng.choice(["N1", "N2", "N3"], n), rng.choice(["S1", "S2"], n))
    return pd.DataFrame(
        {
            "REGION": region,
            "STATE": state,
            "AGE": rng.integers(0, 100, n),
            "SEX": rng.integers(1, 3, n),
        }
    )


SCHEMA = Schema(
    (Attribute("AGE", bins=(0, 18, 65, 100)), Attribute("SEX", values=(1, 2))),
    ("REGION", "STATE"),
)
DETAILED = Strategy.from_budgets(["1/2"] * 3)
HALVES = ((Query.parse("detailed"), Fraction(1, 2)), (Query.parse("total"), Fraction(1, 2)))
COUPLED = Strategy(tuple(LevelStrategy(Fraction(1), HALVES) for _ in range(3)), "discrete_gaussian")


def _families(rel) -> list[int]:
    """Families that needed a solver per level: the root, then parents with 2+ children and
    some count (an only child without constraints is copied from its parent; an empty parent
    has empty children)."""
    out = []
    for level in range(rel.tree.n_levels):
        if level == 0:
            out.append(1)
            continue
        parents = rel.tree.levels[level].parent
        sizes = np.bincount(parents, minlength=rel.tree.levels[level - 1].size)
        occupied = rel.counts[level - 1].any(axis=1)
        out.append(int(np.count_nonzero((sizes > 1) & occupied)))
    return out


def test_one_name_is_used_where_it_applies_and_auto_elsewhere() -> None:
    """closed_form declines the coupled L2 problems (a total query ties a child's cells) and
    the root's rounding (its total row is an interval), which go to auto instead of failing;
    it takes the rounding problems below the root (the network-flow path: consistency and
    child-total rows)."""
    rel = release(_data(), SCHEMA, COUPLED, seed=4, solver="closed_form")
    assert rel.check_correctness().ok
    for stats, families in zip(rel.stats, _families(rel), strict=True):
        assert "closed_form" not in stats.solved_in("l2")
        assert sum(stats.solved_in("l2").values()) == families
        if stats.level:
            assert stats.solved_in("rounding") == {"closed_form": families}
    assert "closed_form" not in rel.stats[0].solved_in("rounding")
    table = rel.solver_stats()
    assert list(table["rounding_solved_by"])[1:] == ["closed_form: 1", "closed_form: 2"]
    assert not table["l2_solved_by"].str.contains("closed_form").any()


def test_strict_keeps_the_old_failure() -> None:
    with pytest.raises(
        UnsupportedProblemError,
        match=r"closed_form on problem 'level 0 \(root\) / L2 pass': unsupported \(closed_form needs",
    ):
        release(_data(), SCHEMA, COUPLED, seed=4, solver="closed_form", solver_strict=True)


def test_a_mapping_names_the_backend_of_each_pass() -> None:
    rel = release(
        _data(), SCHEMA, DETAILED, seed=4, solver={"l2": "cvxpy:CLARABEL", "rounding": "scipy"}
    )
    assert rel.check_correctness().ok
    for stats, families in zip(rel.stats, _families(rel), strict=True):
        assert set(stats.solved_in("l2")) == ({"cvxpy:CLARABEL"} if families else set())
        assert set(stats.solved_in("rounding")) == ({"scipy"} if families else set())
        assert sum(stats.solved_in("l2").values()) == families


def test_a_missing_pass_is_auto() -> None:
    rel = release(_data(), SCHEMA, COUPLED, seed=4, solver={"rounding": "highs"})
    assert rel.check_correctness().ok
    assert set(rel.stats[1].solved_in("rounding")) == {"highs"}
    # a coupled L2 problem: auto skips the closed form (it declines) for an interior point
    assert "closed_form" not in rel.stats[1].solved_in("l2")


def test_bad_solver_arguments_are_named() -> None:
    with pytest.raises(
        OptionsError,
        match=r"solver has unknown pass\(es\) \['l1'\]; the passes are \['l2', 'rounding'\]",
    ):
        release(_data(50), SCHEMA, DETAILED, seed=1, solver={"l1": "highs"})
    with pytest.raises(OptionsError, match=r"solver for the l2 pass \(''\) must be a solver name"):
        SolverChoice(l2="")
    with pytest.raises(UnknownSolverError, match=r"solver 'gurobi9' is not a registered solver"):
        release(_data(50), SCHEMA, DETAILED, seed=1, solver={"rounding": "gurobi9"})


def _config(tmp_path: Path, solver_table: str, *, coupled: bool = False) -> Path:
    _data().to_csv(tmp_path / "d.csv", index=False)
    path = tmp_path / "c.toml"
    path.write_text(
        f"""
[data]
path = "d.csv"
[schema]
hierarchy = ["REGION", "STATE"]
[[schema.attributes]]
name = "AGE"
bins = [0, 18, 65, 100]
[[schema.attributes]]
name = "SEX"
values = [1, 2]
[strategy]
budgets = ["1/2", "1/2", "1/2"]
{'queries = {detailed = "1/2", total = "1/2"}' if coupled else ""}
{solver_table}
""",
        encoding="utf-8",
    )
    return path


def test_config_takes_a_name_per_pass_and_strict(tmp_path: Path) -> None:
    cfg = load_config(
        _config(tmp_path, '[solver]\nname = {l2 = "closed_form", rounding = "highs"}')
    )
    assert cfg.solver == SolverChoice(l2="closed_form", rounding="highs", strict=False)
    resolved = cfg.resolved()["solver"]
    assert resolved["name"] == {"l2": "closed_form", "rounding": "highs"}
    assert resolved["strict"] is False
    # "topdown": its detailed-only L2 is separable, which the closed form takes ("blue" adds
    # the BLUE totals, a coupled problem the closed form declines)
    rel = release(
        pd.read_csv(cfg.data.path),
        cfg.schema,
        cfg.strategy,
        seed=3,
        solver=cfg.solver,
        estimator="topdown",
    )
    assert set(rel.stats[2].solved_in("rounding")) == {"highs"}
    assert set(rel.stats[2].solved_in("l2")) == {"closed_form"}

    strict = load_config(
        _config(tmp_path, '[solver]\nname = "closed_form"\nstrict = true', coupled=True)
    )
    assert strict.solver == SolverChoice("closed_form", "closed_form", strict=True)
    assert strict.with_overrides(solver="highs").solver.strict  # --solver keeps strict
    with pytest.raises(UnsupportedProblemError, match="unsupported .closed_form needs"):
        release(
            pd.read_csv(cfg.data.path), cfg.schema, strict.strategy, seed=3, solver=strict.solver
        )


@pytest.mark.parametrize(
    ("table", "key", "rule"),
    [
        (
            'name = {l1 = "highs"}',
            "solver.name.l1",
            "is not a pass; the passes are ['l2', 'rounding']",
        ),
        ('name = {rounding = "gurobi9"}', "solver.name.rounding", "'gurobi9' is unknown"),
        ("strict = 1", "solver.strict", "must be true or false; got 1"),
    ],
)
def test_config_solver_messages(tmp_path: Path, table: str, key: str, rule: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, f"[solver]\n{table}"))
    assert info.value.key == key and rule in info.value.rule, str(info.value)


def test_stats_add_up() -> None:
    """Hand-worked: two families' passes summed, then the level's row."""
    a = SolveStats(families=1, l2_time=0.5) + SolveStats.one_solve("l2", "highs")
    b = (
        SolveStats(families=1, widened=1)
        + SolveStats.one_solve("l2", "highs")
        + SolveStats.one_solve("rounding", "closed_form")
        + SolveStats(failsafe=("note",), failsafe_slack=2.0)
    )
    total = a + b
    assert total == b + a
    assert total.families == 2 and total.problems == 3 and total.widened == 1
    assert total.solved == (("l2", "highs", 2), ("rounding", "closed_form", 1))
    assert total.solvers == ("highs", "closed_form")
    assert total.failsafe == ("note",) and total.failsafe_slack == 2.0
    row = LevelStats.of(3, total).to_dict()
    assert row["level"] == 3 and row["problems_solved"] == 3
    assert "l2_seconds" not in row and "rounding_seconds" not in row  # diagnostics only
    assert LevelStats.of(3, total).to_dict(timings=True)["l2_seconds"] == 0.5
    assert row["l2_solved_by"] == "highs: 2" and row["rounding_solved_by"] == "closed_form: 1"
    assert row["failsafe_families"] == 1 and row["status"] == "failsafe"
    assert sum((a, b), SolveStats()) == total


def test_release_stats_count_every_problem() -> None:
    rel = release(_data(), SCHEMA, DETAILED, seed=4)
    for stats, families in zip(rel.stats, _families(rel), strict=True):
        assert stats.problems == sum(c for _, _, c in stats.solved)
        parents = rel.tree.levels[stats.level - 1].size if stats.level else 1
        assert stats.families == parents  # copied families count too
        assert sum(stats.solved_in("l2").values()) == families
