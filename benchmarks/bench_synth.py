"""Benchmark of the synth generators on Adult, NLTCS and the ACS excerpt.

For each data set and epsilon: each generator's mean 1-, 2- and 3-way marginal TVD, the
train-on-synthetic / test-on-real AUC where the data set has a class, and the wall time; beside
them the bootstrap floor (a resample of the real data, what sampling noise alone costs), the
independent-columns baseline (each column shuffled on its own: perfect 1-way marginals, no
dependence) and, for the local-DP DP2-Pub, the GRR + per-attribute PRAM floor. A published
peer (smartnoise-synth's MST and AIM, sampled with ``method="sample"``) runs when the package
is installed; otherwise a message says it was skipped.

Run from the repository root:

    /work/venv/bin/python -m benchmarks.bench_synth [--data adult nltcs acs] [--eps 0.1 1 5]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.acs import AGE_BINS, shared_data
from synth import ClassConditional, DP2Pub, PrivBayes
from synth.dp2pub import grr_pram_baseline
from synth.metrics import marginal_tvd, tstr_accuracy

ACS_COLUMNS = [
    "PUMA",
    "AGEP",
    "SEX",
    "MSP",
    "HISP",
    "RAC1P",
    "HOUSING_TYPE",
    "OWN_RENT",
    "EDU",
    "DPHY",
]


def load_adult() -> tuple[pd.DataFrame, dict, str | None]:
    """Adult with fnlwgt and education-num dropped, ages and hours in 10-year/10-hour bins,
    capital gain and loss as zero / non-zero; class ``income``."""
    df = pd.read_csv(shared_data() / "adult" / "adult.csv", skipinitialspace=True)
    df = df.drop(columns=["fnlwgt", "education-num"])
    df["age"] = (df["age"].clip(upper=89) // 10 * 10).astype(int)
    df["hours-per-week"] = (df["hours-per-week"].clip(upper=99) // 10 * 10).astype(int)
    df["capital-gain"] = (df["capital-gain"] > 0).astype(int)
    df["capital-loss"] = (df["capital-loss"] > 0).astype(int)
    domains = {
        "age": list(range(10, 100, 10)),
        "hours-per-week": list(range(0, 100, 10)),
        "capital-gain": [0, 1],
        "capital-loss": [0, 1],
        "income": ["<=50K", ">50K"],
        "sex": ["Female", "Male"],
    }
    return df, domains, "income"


def load_nltcs() -> tuple[pd.DataFrame, dict, str | None]:
    """NLTCS: 16 binary attributes, no class."""
    df = pd.read_csv(shared_data() / "nltcs" / "nltcs.csv")
    return df, {c: [0, 1] for c in df.columns}, None


def load_acs_excerpt() -> tuple[pd.DataFrame, dict, str | None]:
    """Ten ACS columns (age in the engine's bins), domains from the data dictionary."""
    folder = shared_data() / "acs_excerpts"
    df = pd.read_csv(folder / "national2019.csv", dtype=str, keep_default_na=False)[ACS_COLUMNS]
    ages = df["AGEP"].astype(int)
    edges = list(AGE_BINS)
    df["AGEP"] = pd.cut(ages, edges + [200], right=False, labels=[str(e) for e in edges]).astype(
        str
    )
    schema = json.loads((folder / "national2019.json").read_text())["schema"]
    domains = {"AGEP": [str(e) for e in edges]}
    for column in ACS_COLUMNS:
        values = schema.get(column, {}).get("values")
        if column != "AGEP" and values is not None:
            domains[column] = [str(v) for v in values]
    for column, values in domains.items():  # keep only declared domains that cover the data
        if not set(df[column]) <= set(values):
            domains[column] = sorted(set(values) | set(df[column]))
    return df, domains, None


DATASETS: dict[str, Callable[[], tuple[pd.DataFrame, dict, str | None]]] = {
    "adult": load_adult,
    "nltcs": load_nltcs,
    "acs": load_acs_excerpt,
}


def _peers() -> dict[str, Callable[[pd.DataFrame, float], pd.DataFrame]]:
    try:
        from snsynth import Synthesizer  # type: ignore[import-not-found]
    except ImportError:
        print("smartnoise-synth is not installed: MST / AIM peer runs skipped")
        return {}

    def make(name: str) -> Callable[[pd.DataFrame, float], pd.DataFrame]:
        def run(df: pd.DataFrame, eps: float) -> pd.DataFrame:
            synth = Synthesizer.create(name, epsilon=eps)
            synth.fit(df.astype(str), preprocessor_eps=0.0, categorical_columns=list(df.columns))
            out = synth.sample(len(df), method="sample")
            return out.astype(df.dtypes.to_dict(), errors="ignore")

        return run

    return {"MST (smartnoise)": make("mst"), "AIM (smartnoise)": make("aim")}


def _row(
    name: str,
    eps: object,
    real: pd.DataFrame,
    synthetic: pd.DataFrame,
    seconds: float,
    target: str | None,
) -> dict:
    table = marginal_tvd(real, synthetic, (1, 2, 3))
    row = {
        "method": name,
        "eps": eps,
        "tvd1": table.loc[1, "mean"],
        "tvd2": table.loc[2, "mean"],
        "tvd3": table.loc[3, "mean"],
        "tvd2_max": table.loc[2, "max"],
        "seconds": seconds,
    }
    if target is not None:
        scores = tstr_accuracy(synthetic, real, target)
        row["tstr_auc"] = scores["tstr_auc"]
        row["trtr_auc"] = scores["trtr_auc"]
    return row


def _generators(
    real: pd.DataFrame,
    domains: dict,
    target: str | None,
    eps: float,
    seed: int,
    peers: dict[str, Callable[[pd.DataFrame, float], pd.DataFrame]],
) -> dict[str, Callable[[], pd.DataFrame]]:
    """The runs at one epsilon, each a no-argument callable returning the synthetic data."""
    n = len(real)
    out: dict[str, Callable[[], pd.DataFrame]] = {
        "PrivBayes k=2": lambda: (
            PrivBayes(eps, k=2, domains=domains, seed=seed).fit(real).sample(n)
        ),
        "PrivBayes k=3": lambda: (
            PrivBayes(eps, k=3, domains=domains, seed=seed).fit(real).sample(n)
        ),
        "DP2-Pub (local DP)": lambda: DP2Pub(eps, domains=domains, seed=seed).fit_transform(real),
        "GRR+PRAM floor (local DP)": lambda: grr_pram_baseline(
            real, eps, domains=domains, seed=seed
        ),
    }
    if target is not None:
        out["ClassConditional"] = lambda: (
            ClassConditional(eps, target=target, domains=domains, seed=seed).fit(real).sample(n)
        )
    for label, peer in peers.items():
        out[label] = lambda peer=peer: peer(real, eps)
    return out


def run(datasets: list[str], epsilons: list[float], seed: int) -> pd.DataFrame:
    rows = []
    peers = _peers()
    for name in datasets:
        real, domains, target = DATASETS[name]()
        n = len(real)
        print(f"\n## {name}: {n} rows, {real.shape[1]} columns", flush=True)
        rng = np.random.default_rng(seed)  # baselines only: not a privacy-relevant draw
        start = time.perf_counter()
        boot = real.iloc[rng.integers(0, n, n)].reset_index(drop=True)
        rows.append(_row("bootstrap floor", "-", real, boot, time.perf_counter() - start, target))
        indep = pd.DataFrame({c: rng.permutation(real[c].to_numpy()) for c in real.columns})
        rows.append(_row("independent columns", "-", real, indep, 0.0, target))
        for eps in epsilons:
            generators = _generators(real, domains, target, eps, seed, peers)
            for label, make in generators.items():
                start = time.perf_counter()
                try:
                    synthetic = make()
                except Exception as err:  # a peer's failure is reported, not fatal
                    print(f"{label} at eps {eps} failed: {err}", flush=True)
                    continue
                rows.append(_row(label, eps, real, synthetic, time.perf_counter() - start, target))
                print(pd.DataFrame([rows[-1]]).to_string(index=False, header=False), flush=True)
        for r in rows:
            r.setdefault("data", name)
        frame = pd.DataFrame([r for r in rows if r["data"] == name])
        print(frame.round(4).to_string(index=False), flush=True)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--eps", nargs="+", type=float, default=[0.1, 0.5, 1, 2, 5])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="also write the table as CSV")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    print("command:", " ".join(["python -m benchmarks.bench_synth", *(argv or sys.argv[1:])]))
    table = run(args.data, args.eps, args.seed)
    print("\n# all results")
    print(table.round(4).to_string(index=False))
    if args.out is not None:
        table.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
