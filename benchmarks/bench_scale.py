"""How the engine scales with the number of geographic units.

Synthetic census-like data: a root, ``states`` states, ``counties`` counties per state and
``tracts`` tracts per county, ~``people`` records per tract over SEX(2) x AGE(8 bins) x RACE(9)
= 144 cells. Prints one row per size: nodes per level, records, seconds (in all, and in the solver
passes), problems solved and the process's peak resident memory. Run from the repository root:

    python benchmarks/bench_scale.py [--sizes 100 1000 10000] [--executor serial|processes]
"""

from __future__ import annotations

import argparse
import logging
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from topdown import Attribute, Schema, Strategy, release  # noqa: E402
from topdown.progress import Progress  # noqa: E402


def synthetic(n_tracts: int, people: int = 60, seed: int = 0) -> tuple[pd.DataFrame, Schema]:
    """About ``n_tracts`` tracts in a state > county > tract hierarchy."""
    rng = np.random.default_rng(seed)
    counties = max(1, n_tracts // 10)
    states = max(1, counties // 20)
    tract = np.repeat(np.arange(n_tracts), rng.poisson(people, n_tracts))
    county = tract % counties
    state = county % states
    n = len(tract)
    race_p = np.array([0.6, 0.13, 0.01, 0.005, 0.005, 0.06, 0.002, 0.08, 0.108])
    df = pd.DataFrame(
        {
            "STATE": np.char.add("S", state.astype(str)),
            "COUNTY": np.char.add(
                np.char.add("S", state.astype(str)), np.char.add("C", county.astype(str))
            ),
            "TRACT": np.char.add("T", tract.astype(str)),
            "SEX": rng.integers(1, 3, n),
            "AGE": rng.integers(0, 100, n),
            "RACE": rng.choice(np.arange(1, 10), n, p=race_p / race_p.sum()),
        }
    )
    df["COUNTY"] = df["STATE"] + df["COUNTY"].str.split("C").str[-1].radd("C")
    df["TRACT"] = df["COUNTY"] + df["TRACT"]
    schema = Schema(
        (
            Attribute("SEX", values=(1, 2)),
            Attribute("AGE", bins=(0, 18, 25, 35, 45, 55, 65, 75, 100)),
            Attribute("RACE", values=tuple(range(1, 10))),
        ),
        ("STATE", "COUNTY", "TRACT"),
    )
    return df, schema


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", nargs="+", type=int, default=[100, 1000, 10000], help="number of tracts"
    )
    parser.add_argument("--executor", default="serial", choices=["serial", "processes", "dask"])
    parser.add_argument("--solver", default="auto")
    parser.add_argument("--quick", action="store_true", help="sizes 100 and 1000 only")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes = [100, 1000]
    logging.basicConfig(level=logging.ERROR)
    print(
        "command: python benchmarks/bench_scale.py",
        " ".join(argv if argv is not None else sys.argv[1:]),
    )
    rows = []
    for size in args.sizes:
        df, schema = synthetic(size)
        strategy = Strategy.from_budgets(["1/2"] * 4)
        start = time.perf_counter()
        rel = release(
            df,
            schema,
            strategy,
            seed=1,
            executor=args.executor,
            solver=args.solver,
            progress=Progress(enabled=False),
        )
        total = time.perf_counter() - start
        # the OS's peak resident size of this process (sizes run in increasing order, so it is
        # this size's peak); tracemalloc would tax every allocation and distort the seconds
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        ok = rel.check_correctness().ok
        rows.append(
            {
                "tracts": size,
                "nodes": "/".join(str(lv.size) for lv in rel.tree.levels),
                "records": len(df),
                "seconds": round(total, 2),
                "estimate_s": round(sum(s.l2_time + s.round_time for s in rel.stats), 2),
                "problems": sum(s.problems for s in rel.stats),
                "tracts_per_s": round(size / total, 1),
                "peak_rss_MiB": round(peak_mib, 1),
                "correct": ok,
            }
        )
        print(pd.DataFrame(rows[-1:]).to_string(index=False, header=len(rows) == 1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
