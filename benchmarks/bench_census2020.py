"""Accuracy of ``"blue"`` against ``"topdown"`` on the Census Bureau's 2020 production PL94
strategy, run as written (``topdown.presets.census2020_pl94``, the ``hhinst`` recode measured),
with the state's total population invariant, on a PL94-shaped state (``pl94.py``).

Each seed's noise is drawn once per estimator from the same seeded key, so the two estimators
see the same measurements (paired). Printed per geolevel, mean over seeds with the standard
error of the paired difference ``blue - topdown``, the figures the Census Bureau publishes for
its 2020 PL94 releases: mean absolute error of total population, of the voting-age population,
and (tract) of each race alone; plus every measured query's mean absolute error (all answers
pooled), and the 90% coverage of the BLUE's published standard errors (``Release.blue``'s cells
and totals, before the passes). ``pl94.py`` codes race in the Census's CENRACE order, so the
races alone are codes 1..6 (``RACE_ALONE`` of the preset).

    python benchmarks/bench_census2020.py [--persons 750000] [--state-seed 7] [--seeds 10]
        [--multipass] [--out DIR]

``--state-seed`` builds a different state (``pl94.make_state``'s seed: another geography,
block sizes, race and Hispanic mix by tract, group quarters): the held-out check of a bar
tuned on the default one.

Without ``--multipass`` the L2 pass is one pass per family; with it, as production did, the
total alone is fitted first at State..Block_Group. Both are level-batched
(``topdown.estimation.batched.multipass`` solves the first pass in closed form and holds its
totals in the marginal Newton iteration).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.pl94 import GEOGRAPHY, make_state, state_total_invariant  # noqa: E402
from topdown import release  # noqa: E402
from topdown.measurement.tree import build_tree  # noqa: E402
from topdown.presets import census2020_pl94  # noqa: E402
from topdown.presets.census2020_pl94 import RACE_ALONE as PRESET_RACE_ALONE  # noqa: E402
from topdown.query import Query  # noqa: E402

ESTIMATORS = ("topdown", "blue")
RACE_ALONE = tuple(PRESET_RACE_ALONE.values())
Z90 = 1.6448536269514722


def census_figures(
    level: int, counts: np.ndarray, truth: np.ndarray, schema, queries
) -> list[dict]:
    """The level's error figures: totals, voting age, race alone, every measured query
    (``bench_estimators.py --strategy census2020`` prints them too)."""
    domain = schema.domain
    est, true = counts.astype(np.int64), truth.astype(np.int64)
    rows = []

    def add(what: str, a: np.ndarray, b: np.ndarray) -> None:
        rows.append({"level": level, "what": what, "mae": float(np.abs(a - b).mean())})

    add("total", est.sum(axis=1), true.sum(axis=1))
    va = Query.parse("VOTINGAGE")
    add("voting age 18+", va.answer(est, domain)[:, 1], va.answer(true, domain)[:, 1])
    race = Query.parse("CENRACE")
    alone = [domain.values("CENRACE").index(v) for v in RACE_ALONE]
    add("race alone", race.answer(est, domain)[:, alone], race.answer(true, domain)[:, alone])
    for q in queries:
        if q.name not in ("total", "detailed"):
            add(f"query {q.name}", q.answer(est, domain), q.answer(true, domain))
    add("cell", est, true)
    return rows


def _coverage(rel, truth) -> list[dict]:
    """Share of cells and totals inside the BLUE's 90% intervals, per level (before passes)."""
    out = []
    blue = rel.blue
    for level in range(rel.tree.n_levels):
        cells = blue.cells_at(level)
        se = np.sqrt(blue.variance(level, "detailed"))
        t_se = np.sqrt(blue.variance(level, "total"))
        err = cells - truth.counts[level]
        t_err = cells.sum(axis=1) - truth.counts[level].sum(axis=1)
        inside = np.abs(err) <= Z90 * se[:, None]
        informed = t_se > 0  # an invariant's total has no error to cover
        out.append(
            {
                "level": level,
                "cells": float(inside.mean()),
                "totals": float((np.abs(t_err[informed]) <= Z90 * t_se[informed]).mean())
                if informed.any()
                else np.nan,
            }
        )
    return out


def run(
    persons: int, seeds: int, multipass: bool, state_seed: int = 7
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    state = make_state(persons, seed=state_seed)
    hierarchy = tuple(c for c in GEOGRAPHY if c != "TRACT_GROUP")
    schema, strategy = census2020_pl94(hierarchy, multipass=multipass)
    tree, truth = build_tree(state.records, schema, geography=state.geography)
    rows, cover, timing = [], [], []
    for seed in range(seeds):
        for estimator in ESTIMATORS:
            start, cpu = time.perf_counter(), time.process_time()
            rel = release(
                state.records,
                schema,
                strategy,
                constraints=state_total_invariant(),
                seed=1000 + seed,
                geography=state.geography,
                estimator=estimator,
            )
            timing.append(
                {
                    "seed": seed,
                    "estimator": estimator,
                    "wall": time.perf_counter() - start,
                    "cpu": time.process_time() - cpu,
                }
            )
            for level in range(tree.n_levels):
                queries = [q for q, _ in strategy.levels[level].queries]
                counts = rel.counts[level]
                for r in census_figures(level, counts, truth.counts[level], schema, queries):
                    rows.append({"seed": seed, "estimator": estimator, **r})
            if estimator == "blue" and rel.blue is not None:
                cover.extend({"seed": seed, **c} for c in _coverage(rel, truth))
        logging.info("seed %d done", seed)
    return pd.DataFrame(rows), pd.DataFrame(cover), pd.DataFrame(timing)


def table(raw: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """Per level and figure: both estimators' MAE and the paired difference with its SE."""
    wide = raw.pivot_table(index=["level", "what", "seed"], columns="estimator", values="mae")
    diff = (wide["blue"] - wide["topdown"]).groupby(level=["level", "what"])
    out = pd.DataFrame(
        {
            "topdown": wide["topdown"].groupby(level=["level", "what"]).mean(),
            "blue": wide["blue"].groupby(level=["level", "what"]).mean(),
            "blue-topdown": diff.mean(),
            "se": diff.std(ddof=1) / np.sqrt(diff.size()),
        }
    )
    out["worse"] = out["blue-topdown"] > 2 * out["se"]
    out = out.reset_index()
    out["level"] = [names[lv] for lv in out["level"]]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=750_000)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument(
        "--state-seed",
        type=int,
        default=7,
        help="the seed of the PL94-shaped state (pl94.make_state); another one is held out",
    )
    parser.add_argument(
        "--multipass",
        action="store_true",
        help="fit the total first at State..Block_Group, as production did",
    )
    parser.add_argument("--out", type=Path, help="write the raw figures as CSV here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("topdown").setLevel(logging.ERROR)
    logging.getLogger("mechanisms").setLevel(logging.ERROR)
    print("command: python benchmarks/bench_census2020.py " + " ".join(argv or sys.argv[1:]))
    raw, cover, timing = run(args.persons, args.seeds, args.multipass, args.state_seed)
    names = ["US (root)", "State", "County", "Tract", "Block_Group", "Block"]
    pd.set_option("display.width", 200)
    print(
        f"\n{args.persons:,} persons (state seed {args.state_seed}), {args.seeds} paired seeds; "
        "MAE (mean over seeds)\n"
    )
    print(table(raw, names).round(4).to_string(index=False))
    if not cover.empty:
        cov = cover.groupby("level")[["cells", "totals"]].mean()
        cov.index = [names[i] for i in cov.index]
        print("\nBLUE 90% interval coverage (before the passes)\n")
        print(cov.round(4).to_string())
    print("\nseconds per release (mean)\n")
    print(timing.groupby("estimator")[["wall", "cpu"]].mean().round(1).to_string())
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        raw.to_csv(args.out / "census2020_accuracy.csv", index=False)
        cover.to_csv(args.out / "census2020_coverage.csv", index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
