"""Capturing a release's problems: one MPS file and one index row per solve, read back exactly."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import solvers
from solvers.export import read_problem
from topdown import Attribute, Query, Schema, Strategy, release
from topdown.errors import OptionsError
from topdown.estimation.capture import INDEX, INDEX_COLUMNS, prepare, structure_class
from topdown.strategy import LevelStrategy

pytest.importorskip("highspy")


def _data(n: int = 600, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    states = {"N": ["N1", "N2", "N3"], "S": ["S1", "S2"]}
    region = rng.choice(["N", "S"], size=n, p=[0.6, 0.4])
    return pd.DataFrame(
        {
            "REGION": region,
            "STATE": [rng.choice(states[r]) for r in region],
            "AGE": rng.integers(0, 100, size=n),
            "SEX": rng.choice([1, 2], size=n),
        }
    )


SCHEMA = Schema(
    (Attribute("AGE", bins=(0, 18, 65, 116)), Attribute("SEX", values=(1, 2))),
    ("REGION", "STATE"),
)


def _multipass() -> Strategy:
    queries = ((Query.parse("detailed"), Fraction(1, 2)), (Query.parse("total"), Fraction(1, 2)))
    return Strategy(
        tuple(LevelStrategy(Fraction(1), queries, ("total",)) for _ in range(3)),
        "discrete_gaussian",
    )


def test_every_solve_is_captured_and_replays_to_the_release_answer(tmp_path) -> None:
    folder = tmp_path / "capture"
    rel = release(_data(), SCHEMA, _multipass(), seed=3, capture=folder)
    index = pd.read_csv(folder / INDEX, keep_default_na=False)
    assert list(index.columns) == list(INDEX_COLUMNS)
    # one row per solver call, as the release's statistics count them
    assert len(index) == sum(s.problems for s in rel.stats)
    assert sorted(p.name for p in folder.iterdir()) == sorted([INDEX, *index["file"]])
    # multipass: two L2 problems (pass 1, pass 2) and one rounding problem per family; the
    # families are the root and the parents REGION (root), N and S
    assert index["problem"].str.endswith("L2 pass 1").sum() == 4
    assert index["problem"].str.endswith("L2 pass 2").sum() == 4
    assert (index["pass"] == "rounding").sum() == 4
    assert set(index["node"]) == {"", "root", "N", "S"}
    assert set(index["status"]) == {"optimal"}
    for row in index.itertuples():
        problem = read_problem(folder / row.file)
        assert (problem.n, problem.m, problem.kind) == (row.variables, row.rows, row.kind)
        # the same backend on the file gives the release's optimum (to its tolerance)
        again = solvers.solve(problem, str(row.solver))
        assert again.objective == pytest.approx(row.objective, rel=1e-6, abs=1e-6), row.file


def test_worker_processes_capture_every_problem_once(tmp_path) -> None:
    folder = tmp_path / "capture"
    strategy = Strategy.from_budgets([1, 1, 1])
    rel = release(
        _data(), SCHEMA, strategy, seed=5, executor="processes", workers=2, capture=folder
    )
    index = pd.read_csv(folder / INDEX, keep_default_na=False)
    assert len(index) == sum(s.problems for s in rel.stats) == len(set(index["file"]))
    assert sorted(p.name for p in folder.iterdir()) == sorted([INDEX, *index["file"]])


def test_a_used_capture_folder_is_refused(tmp_path) -> None:
    (tmp_path / "old.mps").write_text("NAME\n")
    with pytest.raises(OptionsError, match=r"already holds captured problems"):
        prepare(tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(OptionsError, match=r"must be a folder"):
        prepare(afile)


def test_structure_classes() -> None:
    import scipy.sparse as sp

    from solvers.builders import children_l2_problem

    Y = np.array([[3.0, 1.0], [2.0, 0.0]])
    parent = np.array([5.0, 1.0])
    detailed = (sp.identity(2, format="csr"), Y, np.ones((2, 2)))
    total = (sp.csr_matrix(np.ones((1, 2))), np.array([[4.0], [2.0]]), np.ones((2, 1)))
    separable = children_l2_problem(parent, [detailed], k=2, n=2)
    coupled = children_l2_problem(parent, [detailed, total], k=2, n=2, lifted=True)
    assert structure_class(separable, constrained=False) == "separable"
    assert structure_class(coupled, constrained=False) == "coupled"
    assert structure_class(coupled, constrained=True) == "constrained"


def test_config_key_and_command_line_flag(tmp_path) -> None:
    import tomllib

    from topdown.product.cli import build_parser
    from topdown.product.config import DEFAULT_CONFIG, ConfigError, load_config, parse_config

    raw = tomllib.loads(DEFAULT_CONFIG.read_text())
    raw["solver"]["capture"] = "problems"
    base = DEFAULT_CONFIG.parent  # the dictionary's folder; relative paths resolve there
    cfg = parse_config(raw, "c.toml", base=base)
    assert cfg.capture == (base / "problems").resolve()
    # a run's side output, not part of the release: the resolved config leaves it out
    assert "capture" not in cfg.resolved()["solver"]
    raw["solver"]["capture"] = 3
    with pytest.raises(ConfigError, match=r"solver\.capture.*must be a folder path"):
        parse_config(raw, "c.toml", base=base)
    assert load_config(DEFAULT_CONFIG).capture is None
    args = build_parser().parse_args(["run", "--capture-problems", str(tmp_path / "p")])
    assert args.capture_problems == tmp_path / "p"
