"""synth.Adaptive (AIM-style generator on the graphical model): ledger, budget, workload,
output size and order, quality against the independent baseline, bad input, and the
``topdown synth adaptive`` command end to end."""

from __future__ import annotations

import json
import re
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from mechanisms.accounting import ZCDP, zcdp_to_approx_dp
from synth import Adaptive, SynthError
from synth.adaptive import rho_for
from synth.cli import main
from synth.metrics import marginal_tvd
from topdown.errors import DataError

FAST = {"iters": 15, "final_iters": 60}


def _frame(n: int = 1500, seed: int = 0) -> pd.DataFrame:
    """Four columns: a -> b strongly, c independent, d = a xor c with noise."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = np.where(rng.random(n) < 0.8, a, rng.integers(0, 3, n))
    c = rng.integers(0, 2, n)
    d = np.where(rng.random(n) < 0.9, (a + c) % 2, 1 - (a + c) % 2)
    return pd.DataFrame({"a": a, "b": [f"v{x}" for x in b], "c": c, "d": d})


DOMAINS = {"a": [0, 1, 2], "b": ["v0", "v1", "v2", "v9"], "c": [0, 1], "d": [0, 1]}


def test_ledger_adds_up_to_the_budget_and_records_every_round():
    gen = Adaptive(1, delta=1e-6, domains=DOMAINS, seed=3, **FAST).fit(_frame())
    ledger = gen.ledger
    assert ledger.total() == ZCDP(gen.rho)  # exact: the last round spends what remains
    assert gen.rho == rho_for(Fraction(1), 1e-6)
    assert ledger.epsilon_delta(1e-6) <= 1.0
    names = [e.query for e in ledger.entries]
    assert names[:4] == ["1-way a", "1-way b", "1-way c", "1-way d"]
    rounds = len(names[4:]) // 2
    assert rounds >= 1 and len(names) == 4 + 2 * rounds
    for step in range(1, rounds + 1):  # each round: a selection, then its measurement
        chosen = " x ".join(gen.measured[3 + step])
        assert names[4 + 2 * (step - 1)] == f"round {step}: select {chosen}"
        assert names[4 + 2 * (step - 1) + 1] == f"round {step}: measure {chosen}"
    selections = [e for e in ledger.entries if e.mechanism == "exponential_mechanism"]
    measures = [e for e in ledger.entries if e.mechanism == "discrete_gaussian"]
    assert len(selections) == rounds and len(measures) == 4 + rounds
    assert len(gen.measured) == 4 + rounds
    # declared domains: the only disclosure is the seed
    assert [d.name for d in ledger.disclosures] == ["seeded noise"]


def test_sample_size_comes_from_the_noisy_total_and_rows_are_iid():
    data = _frame()
    gen = Adaptive(2, domains=DOMAINS, seed=4, **FAST).fit(data)
    assert gen.model is not None
    synthetic = gen.sample()
    assert len(synthetic) == round(gen.model.total)
    assert list(synthetic.columns) == list(data.columns)
    assert set(synthetic["b"]) <= set(DOMAINS["b"])
    assert len(gen.sample(17)) == 17 and len(gen.sample(0)) == 0
    # the input's order does not reach the output: shuffled input, same seed, same records
    shuffled = data.sample(frac=1, random_state=1).reset_index(drop=True)
    again = Adaptive(2, domains=DOMAINS, seed=4, **FAST).fit(shuffled).sample()
    pd.testing.assert_frame_equal(synthetic, again)


def test_better_than_independent_columns_on_the_workload():
    data = _frame(3000)
    synthetic = Adaptive(4, domains=DOMAINS, seed=5, **FAST).fit(data).sample(3000)
    rng = np.random.default_rng(0)
    indep = pd.DataFrame({c: rng.permutation(data[c].to_numpy()) for c in data.columns})
    ours = marginal_tvd(data, synthetic, (2,)).loc[2, "mean"]
    baseline = marginal_tvd(data, indep, (2,)).loc[2, "mean"]
    assert ours < 0.5 * baseline


def test_a_declared_workload_limits_the_candidates():
    gen = Adaptive(1, workload=[["a", "b"], ["c"]], domains=DOMAINS, seed=6, **FAST).fit(_frame())
    allowed = {("a",), ("b",), ("c",), ("d",), ("a", "b")}
    assert set(gen.measured) <= allowed


def test_inferred_domains_are_disclosed():
    gen = Adaptive(1, seed=7, **FAST).fit(_frame())
    assert "domains inferred from the data" in [d.name for d in gen.ledger.disclosures]
    assert gen.domains["b"] == ["v0", "v1", "v2"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epsilon": 0}, r"epsilon \(0\) must be > 0"),
        ({"epsilon": 1, "delta": 1.5}, r"delta \(1.5\) must be in \(0, 1\)"),
        ({"epsilon": 1, "delta": "x"}, r"delta \('x'\) must be a number in \(0, 1\)"),
        ({"epsilon": 1, "workload": []}, r"workload \(\[\]\) must list at least one marginal"),
        ({"epsilon": 1, "workload": [["a", "a"]]}, r"workload\[0\] \(\['a', 'a'\]\) must name"),
        ({"epsilon": 1, "max_cells": 0}, r"max_cells \(0\) must be an integer >= 1"),
        ({"epsilon": 1, "measure_share": 1}, r"measure_share \(1\) must be in \(0, 1\)"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(SynthError, match=message):
        Adaptive(**kwargs)


def test_bad_data_and_calls():
    with pytest.raises(SynthError, match=r"workload\[0\] names columns \['zz'\] that are not"):
        Adaptive(1, workload=[["zz"]], domains=DOMAINS, seed=1).fit(_frame(50))
    with pytest.raises(SynthError, match=r"rounds \(3\) must exceed the number of columns \(4\)"):
        Adaptive(1, rounds=3, domains=DOMAINS, seed=1).fit(_frame(50))
    with pytest.raises(DataError, match=r"must be a pandas DataFrame"):
        Adaptive(1).fit([[1, 2]])  # type: ignore[arg-type]
    with pytest.raises(SynthError, match=r"not fitted: call fit\(data\) first"):
        Adaptive(1).sample(3)
    gen = Adaptive(1, domains=DOMAINS, seed=1, **FAST).fit(_frame(200))
    with pytest.raises(SynthError, match=r"n \(-1\) must be an integer >= 0"):
        gen.sample(-1)


def test_rho_for_is_the_largest_budget_within_epsilon():
    rho = rho_for(Fraction(1), 1e-9)
    assert zcdp_to_approx_dp(rho, 1e-9) <= 1.0
    assert zcdp_to_approx_dp(rho * Fraction(1001, 1000), 1e-9) > 1.0


def test_cli_adaptive_end_to_end(tmp_path, capsys):
    data = tmp_path / "data.csv"
    _frame(600).to_csv(data, index=False)
    domains = tmp_path / "domains.json"
    domains.write_text(json.dumps(DOMAINS))
    workload = tmp_path / "workload.json"
    workload.write_text(json.dumps([["a", "b", "d"], ["c", "d"]]))
    out = tmp_path / "syn.csv"
    argv = ["adaptive", str(data), "--epsilon", "2", "--delta", "1e-7", "--domains", str(domains)]
    argv += ["--workload", str(workload), "--out", str(out), "--seed", "2"]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == str(out)
    table = pd.read_csv(out)
    assert list(table.columns) == ["a", "b", "c", "d"] and len(table) > 0
    ledger = json.loads((tmp_path / "syn.ledger.json").read_text())
    assert ledger["entries"][0]["query"] == "1-way a"
    report = (tmp_path / "syn.report.html").read_text()
    assert "(epsilon, delta) view: epsilon" in report and "at delta 1e-07" in report
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--delta", "2"], r"--delta \('2'\) must be a number in \(0, 1\)"),
        (["--delta", "abc"], r"--delta \('abc'\) must be a number in \(0, 1\)"),
        (["--workload", "missing.json"], r"workload file '.*missing.json' does not exist"),
        (["--workload", "bad.json"], r"must hold a non-empty list of marginals"),
    ],
)
def test_cli_adaptive_bad_input_exit_2_and_nothing_written(
    tmp_path, capsys, monkeypatch, extra, message
):
    monkeypatch.chdir(tmp_path)
    _frame(100).to_csv(tmp_path / "data.csv", index=False)
    (tmp_path / "bad.json").write_text(json.dumps([["a"], []]))
    before = set(tmp_path.iterdir())
    assert main(["adaptive", "data.csv", "--epsilon", "1", *extra]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert set(tmp_path.iterdir()) == before


def test_cli_refuses_adaptive_options_for_other_methods(tmp_path, capsys):
    _frame(100).to_csv(tmp_path / "data.csv", index=False)
    out = tmp_path / "x.csv"
    argv = ["privbayes", str(tmp_path / "data.csv"), "--epsilon", "1", "--delta", "1e-9"]
    assert main([*argv, "--out", str(out)]) == 2
    assert (
        "--delta ('1e-9') does not apply to method 'privbayes' (its options: --rows, --k); "
        "it is an option of adaptive" in capsys.readouterr().err
    )
    assert not out.exists()


def test_sample_method_rounded_by_default_and_iid():
    gen = Adaptive(2, domains=DOMAINS, seed=4, **FAST).fit(_frame())
    state = gen._rng.bit_generator.state
    default = gen.sample()
    gen._rng.bit_generator.state = state
    iid = gen.sample(method="iid")
    gen._rng.bit_generator.state = state
    rounded = gen.sample(method="rounded")
    pd.testing.assert_frame_equal(default, rounded)
    assert not default.equals(iid)
    assert gen.model is not None and len(rounded) == round(gen.model.total)
    # the root clique's counts are within one record of the model's (floor or ceiling)
    root = gen.model.tree.cliques[gen.model.tree.order[0]]
    names = [gen.columns[a] for a in root]
    codes = np.stack([rounded[c].map({v: i for i, v in enumerate(gen.domains[c])}) for c in names])
    shape = tuple(len(gen.domains[c]) for c in names)
    counts = np.bincount(np.ravel_multi_index(tuple(codes), shape), minlength=int(np.prod(shape)))
    expected = len(rounded) * gen.model.probability(root).reshape(-1)
    assert np.all(np.abs(counts - expected) < 1 + 1e-6)
    with pytest.raises(SynthError, match=r"method \('sample'\) must be one of 'iid', 'rounded'"):
        gen.sample(10, method="sample")


def test_cli_adaptive_sampling_option(tmp_path, capsys):
    data = tmp_path / "data.csv"
    _frame(600).to_csv(data, index=False)
    domains = tmp_path / "domains.json"
    domains.write_text(json.dumps(DOMAINS))
    argv = ["adaptive", str(data), "--epsilon", "2", "--domains", str(domains), "--seed", "2"]
    assert main([*argv, "--sampling", "rounded", "--out", str(tmp_path / "r.csv")]) == 0
    rounded = pd.read_csv(tmp_path / "r.csv")
    assert len(rounded) > 0
    # the default is the rounded synthesis: the same records for the same seed, not iid's
    assert main([*argv, "--out", str(tmp_path / "d.csv")]) == 0
    assert main([*argv, "--sampling", "iid", "--out", str(tmp_path / "i.csv")]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "d.csv"), rounded)
    assert not pd.read_csv(tmp_path / "i.csv").equals(rounded)
    capsys.readouterr()
    assert main([*argv, "--sampling", "sample", "--out", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert "--sampling ('sample') must be one of 'iid', 'rounded'" in err
    assert not (tmp_path / "x.csv").exists()
    bad = ["privbayes", str(data), "--epsilon", "1", "--sampling", "rounded"]
    assert main([*bad, "--out", str(tmp_path / "p.csv")]) == 2
    assert "--sampling ('rounded') does not apply to method 'privbayes'" in capsys.readouterr().err
