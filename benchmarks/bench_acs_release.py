"""Accuracy of TopDown on the real ACS excerpt, by level, budget, mechanism and strategy.

Prints one table: for each configuration, the mean over repetitions of the MAE (and bias) of
the release and of the raw noisy measurements, for the detailed cells and the node totals, at
every level. Run from the repository root:

    python benchmarks/bench_acs_release.py [--reps 5] [--budgets 0.5 2] [--quick]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.acs import load_acs  # noqa: E402
from topdown import Strategy, release  # noqa: E402
from topdown.support.progress import Progress  # noqa: E402

STRATEGIES = {
    "detailed": None,
    "detailed+total": [("detailed", "3/4"), ("total", "1/4")],
}


def run(budgets: list[str], mechanisms: list[str], reps: int) -> pd.DataFrame:
    df, schema = load_acs()
    rows = []
    for mechanism in mechanisms:
        for budget in budgets:
            for sname, queries in STRATEGIES.items():
                strategy = Strategy.from_budgets(
                    [budget] * schema.n_levels, mechanism=mechanism, queries=queries
                )
                for rep in range(reps):
                    start = time.perf_counter()
                    rel = release(
                        df, schema, strategy, seed=1000 + rep, progress=Progress(enabled=False)
                    )
                    seconds = time.perf_counter() - start
                    ok = rel.check_correctness().ok
                    table = rel.metrics(df).table
                    table = table[table["query"].isin(["detailed", "total"])]
                    for rec in table.to_dict("records"):
                        rows.append(
                            {
                                "mechanism": mechanism,
                                "budget/level": budget,
                                "strategy": sname,
                                "rep": rep,
                                "seconds": seconds,
                                "correct": ok,
                                **rec,
                            }
                        )
    return pd.DataFrame(rows)


def summarise(raw: pd.DataFrame) -> pd.DataFrame:
    keys = ["mechanism", "budget/level", "strategy", "level", "query"]
    wide = raw.pivot_table(
        index=keys + ["rep"], columns="estimator", values=["mae", "bias"]
    ).reset_index()
    wide.columns = ["_".join(c for c in col if c) for col in wide.columns]
    out = wide.groupby(keys).agg(
        mae_release=("mae_release", "mean"),
        mae_noisy=("mae_noisy", "mean"),
        bias_release=("bias_release", "mean"),
        bias_noisy=("bias_noisy", "mean"),
    )
    return out.round(3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions (seeds) per configuration")
    parser.add_argument(
        "--budgets", nargs="+", default=["0.5", "2"], help="budget per level (rho or epsilon)"
    )
    parser.add_argument(
        "--mechanisms", nargs="+", default=["discrete_gaussian", "discrete_laplace"]
    )
    parser.add_argument("--quick", action="store_true", help="one budget, one mechanism, 2 reps")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    if args.quick:
        args.budgets, args.mechanisms, args.reps = ["0.5"], ["discrete_gaussian"], 2
    raw = run(args.budgets, args.mechanisms, args.reps)
    print(
        "command:",
        "python benchmarks/bench_acs_release.py",
        " ".join(argv if argv is not None else sys.argv[1:]),
    )
    print(
        f"data: ACS national2019 excerpt, {raw['nodes'].max()} PUMAs; mean over {args.reps} "
        "seed(s); "
        "noisy cells clipped at 0, noisy totals = measured total or sum of noisy cells"
    )
    print(
        f"all releases passed check_correctness: {bool(raw['correct'].all())}; "
        "mean seconds per release: "
        f"{raw.groupby(['mechanism', 'strategy'])['seconds'].mean().round(2).to_dict()}"
    )
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(summarise(raw).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
