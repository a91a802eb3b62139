"""DHC-persons-shaped releases (1,227,744 cells a node): marginal strategies against detailed-only.

Issue 31's first case, on the DHC-shaped state of ``benchmarks/dhc.py`` (state > county >
tract): the same records released with

* ``detailed``: the detailed histogram alone, rho 1 per level (discrete Gaussian);
* ``four queries``: ``detailed``, ``total``, ``SEX x AGE`` and ``HISPANIC x CENRACE``, 1/4 of
  rho 1 per level each.

Each release runs in its own process (serial executor, default estimator), so its peak
resident memory is its own. The table gives wall and CPU seconds, peak memory, output cells
(nodes x cells over every level) per CPU-second, the L2 solver of each level, and the tract
level's error on ``SEX x AGE`` (mean absolute error of the released marginal against the
truth, over tracts and answers); then the four-query release's wall and CPU against
detailed-only's, the ratio the issue's target reads (at most 2.5x wall).

Run from the repository root:

    python benchmarks/bench_dhc.py [--persons 100000] [--seed 0]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import shlex
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.dhc import dhc_schema, make_dhc_state  # noqa: E402
from topdown import Strategy, release  # noqa: E402
from topdown.strategy import LevelStrategy, Query  # noqa: E402

HIERARCHY = ("COUNTY", "TRACT")
FOUR = ("detailed", "total", "SEX x AGE", "HISPANIC x CENRACE")


def _strategy(name: str, levels: int) -> Strategy:
    if name == "detailed":
        queries: tuple = ((Query(None), Fraction(1)),)
    else:
        queries = tuple((Query.parse(q), Fraction(1, 4)) for q in FOUR)
    return Strategy(
        tuple(LevelStrategy(Fraction(1), queries) for _ in range(levels)),
        mechanism="discrete_gaussian",
    )


def _run(name: str, persons: int, seed: int) -> dict:
    """One release in this (child) process: its figures."""
    state = make_dhc_state(persons, seed)
    schema = dhc_schema(HIERARCHY)
    geography = state.geography[list(HIERARCHY)].drop_duplicates().reset_index(drop=True)
    wall, cpu = time.perf_counter(), time.process_time()
    rel = release(
        state.records, schema, _strategy(name, len(HIERARCHY) + 1), seed=seed, geography=geography
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    tract = len(HIERARCHY)
    query = Query.parse("SEX x AGE")
    released = query.answer(rel.counts[tract], schema.domain)
    labels = rel.tree.levels[tract].labels.astype(str)
    truth = np.zeros_like(released, dtype=np.int64)
    rec = state.records
    node = np.searchsorted(labels, rec["TRACT"].astype(str).to_numpy())
    answer = (rec["SEX"].to_numpy().astype(np.int64) - 1) * 116 + rec["AGE"].to_numpy()
    np.add.at(truth, (node, answer), 1)
    cells = sum(c.size for c in rel.counts)
    return {
        "strategy": name,
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cells_per_cpu_s": cells / cpu,
        "l2": " / ".join(",".join(sorted(s.solved_in("l2"))) for s in rel.stats),
        "tract_sex_age_mae": float(np.abs(released - truth).mean()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print("$ python benchmarks/bench_dhc.py " + shlex.join(argv or sys.argv[1:]))
    context = multiprocessing.get_context("spawn")
    rows = []
    for name in ("detailed", "four queries"):
        with context.Pool(1) as pool:
            rows.append(pool.apply(_run, (name, args.persons, args.seed)))
    print(
        f"{'strategy':<14}{'wall s':>8}{'cpu s':>8}{'peak MiB':>10}{'cells/cpu-s':>13}"
        f"{'tract SEXxAGE MAE':>19}  L2 solver by level"
    )
    for r in rows:
        print(
            f"{r['strategy']:<14}{r['wall_s']:>8.1f}{r['cpu_s']:>8.1f}{r['peak_MiB']:>10.0f}"
            f"{r['cells_per_cpu_s']:>13,.0f}{r['tract_sex_age_mae']:>19.3f}  {r['l2']}"
        )
    detailed, four = rows
    print(
        f"four queries / detailed: wall {four['wall_s'] / detailed['wall_s']:.2f}x, "
        f"CPU {four['cpu_s'] / detailed['cpu_s']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
