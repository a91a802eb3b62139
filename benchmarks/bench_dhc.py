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

``--strategy preset`` compares instead (issue 31's second target):

* ``preset``: ``topdown.presets.census2020_dhcp`` over STATE > COUNTY > TRACT (the root stands
  for the US, with its one child the state: the production budgets of US, State, County and
  Tract_Subset), ten queries a level, fitted as production did in two passes (the preset's
  ``multipass=True``: the nine marginals, then ``detailed`` holding their answers; the Newton
  passes of ``topdown.estimation.multipass_newton``), or in one pass with ``--multipass off``
  (the row ``preset 1-pass``), or both with ``--multipass both``;
* ``detailed``: the detailed histogram alone with each level's rho the preset's (the same
  total), discrete Gaussian, ``replace_one`` neighbours as the preset;

with the estimator ``--estimator`` names, and reports, besides the figures above, the tract
level's mean absolute error on each of the preset's ten queries for both (the ``SEX x AGE``
column then reads ``AGE:age_18_64_116 x SEX``, the preset's nearest query).

``--strategy preset --compare-estimators`` releases the preset instead under ``"blue"`` and
``"topdown"``, each in its own process, for ``--seeds`` paired seeds (the same records and
noise seed for both), and prints each run's figures (with the BLUE pass's own seconds,
``Release.blue_seconds``), then per query the two estimators' tract MAE averaged over the
seeds and their paired difference (mean and standard error over the seeds).

Run from the repository root:

    python benchmarks/bench_dhc.py [--persons 100000] [--seed 0] [--strategy four|preset]
        [--estimator blue|topdown] [--multipass on|off|both] [--only-detailed] [--metrics]
        [--compare-estimators [--seeds 3]]

``--only-detailed`` runs the detailed-only release alone (issue 31's memory case: 750,000
persons, 400 tracts of 1,227,744 cells); ``--metrics`` adds each release's accuracy metrics
against the records (``Release.metrics``, a level's answers a block of nodes at a time) in
the same process, with its CPU seconds and the peak memory before and with them.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import resource
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.dhc import dhc_schema, make_dhc_state  # noqa: E402
from topdown import Release, Schema, Strategy, release  # noqa: E402
from topdown.presets import census2020_dhcp  # noqa: E402
from topdown.strategy import LevelStrategy, Query  # noqa: E402

log = logging.getLogger("bench_dhc")

HIERARCHY = ("COUNTY", "TRACT")
PRESET_HIERARCHY = ("STATE", "COUNTY", "TRACT")
FOUR = ("detailed", "total", "SEX x AGE", "HISPANIC x CENRACE")


#: ``--multipass``'s choices: the preset's rows they run (two passes as production, or one)
PRESET_ROWS = {"on": ("preset",), "off": ("preset 1-pass",), "both": ("preset", "preset 1-pass")}


def _preset(name: str) -> tuple[Schema, Strategy]:
    """``census2020_dhcp`` to the tract (``preset``: two passes, the preset's default;
    ``preset 1-pass``: one), or detailed-only with the same rho at every level."""
    schema, preset = census2020_dhcp(PRESET_HIERARCHY, multipass=name != "preset 1-pass")
    if name.startswith("preset"):
        return schema, preset
    detailed = tuple(LevelStrategy(ls.budget) for ls in preset.levels)
    return schema, Strategy(detailed, preset.mechanism, preset.neighbouring)


def _strategy(name: str, levels: int) -> Strategy:
    if name == "detailed":
        queries: tuple = ((Query(None), Fraction(1)),)
    else:
        queries = tuple((Query.parse(q), Fraction(1, 4)) for q in FOUR)
    return Strategy(
        tuple(LevelStrategy(Fraction(1), queries) for _ in range(levels)),
        mechanism="discrete_gaussian",
    )


def _tract_mae(rel: Release, records: pd.DataFrame, queries: list[Query]) -> dict[str, float]:
    """Each query's mean absolute error at the tract level, over tracts and answers.

    Released and true answers are summed from the nonzero cells (by ``Query.groups``) and
    compared on the answers either side has: memory follows the records and nonzero cells,
    never (tracts x answers), which for ``detailed`` is 491 million at 400 tracts (four float
    arrays of 3.9 GB when this summed whole tables)."""
    schema, tract = rel.schema, rel.schema.n_levels - 1
    counts = rel.counts[tract]
    node, cell = np.nonzero(counts)
    value = counts[node, cell].astype(np.int64)
    labels = rel.tree.levels[tract].labels.astype(str)
    true_node = np.searchsorted(labels, records["TRACT"].astype(str).to_numpy())
    true_cell = schema.encode_cells(records)
    out = {}
    for q in queries:
        groups, width = q.groups(schema.domain), q.n_answers(schema.domain)
        keys = np.concatenate([node * width + groups[cell], true_node * width + groups[true_cell]])
        signed = np.concatenate([value, -np.ones(true_cell.size, dtype=np.int64)])
        _, where = np.unique(keys, return_inverse=True)
        error = np.abs(np.bincount(where.reshape(-1), signed)).sum()
        out[q.name] = float(error / (counts.shape[0] * width))
    return out


def _run(
    name: str,
    persons: int,
    seed: int,
    preset: bool = False,
    estimator: str | None = None,
    metrics: bool = False,
) -> dict:
    """One release in this (child) process: its figures; with ``metrics``, then its accuracy
    metrics against the records (``Release.metrics``), timed apart and inside the peak."""
    # the release's progress (each level's solvers) on this child process's stderr
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    state = make_dhc_state(persons, seed)
    if preset:
        schema, strategy = _preset(name)
        hierarchy = PRESET_HIERARCHY
        queries = [q for q, _ in strategy_queries()]
        nearest = "AGE:age_18_64_116 x SEX"
    else:
        schema, strategy = dhc_schema(HIERARCHY), _strategy(name, len(HIERARCHY) + 1)
        hierarchy = HIERARCHY
        queries = [Query.parse("SEX x AGE")]
        nearest = "SEX x AGE"
    geography = state.geography[list(hierarchy)].drop_duplicates().reset_index(drop=True)
    log.info("%s: %d persons, %d tracts", name, persons, geography["TRACT"].nunique())
    wall, cpu = time.perf_counter(), time.process_time()
    options = {} if estimator is None else {"estimator": estimator}
    rel = release(state.records, schema, strategy, seed=seed, geography=geography, **options)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak_release = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    metrics_cpu = float("nan")
    if metrics:
        metrics_cpu = time.process_time()
        rel.metrics(state.records)
        metrics_cpu = time.process_time() - metrics_cpu
    peak_metrics = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    mae = _tract_mae(rel, state.records, queries)
    cells = sum(c.size for c in rel.counts)
    return {
        "peak_release_MiB": peak_release,
        "peak_metrics_MiB": peak_metrics,
        "metrics_cpu_s": metrics_cpu,
        "strategy": name,
        "wall_s": wall,
        "cpu_s": cpu,
        "blue_s": rel.blue_seconds,
        "seed": seed,
        "peak_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cells_per_cpu_s": cells / cpu,
        "l2": " / ".join(",".join(sorted(s.solved_in("l2"))) for s in rel.stats),
        "tract_sex_age_mae": mae[nearest],
        "tract_mae": mae,
        "tracts": int(rel.counts[-1].shape[0]),
    }


def strategy_queries() -> tuple[tuple[Query, Fraction], ...]:
    """The preset's tract-level queries and shares (every level has the same ten)."""
    return census2020_dhcp(PRESET_HIERARCHY)[1].levels[-1].queries


def _in_process(name: str, persons: int, seed: int, *args: object) -> dict | None:
    """``_run`` in a process of its own (its peak memory its own); None, said, if the kernel
    killed it (out of memory breaks the executor; a Pool would wait on its result for ever)."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        try:
            row: dict = pool.submit(_run, name, persons, seed, *args).result()
        except BrokenProcessPool:
            print(f"{name}: the release's process died (killed: out of memory?)")
            return None
    print(f"{name}: done, {row['wall_s']:.1f} s wall", flush=True)
    return row


def _compare_estimators(persons: int, seeds: range) -> int:
    """The preset in one pass (``preset 1-pass``, as on main) under ``"blue"`` and
    ``"topdown"`` for each seed, back to back; prints each run, then per query the mean tract
    MAE of each and their paired difference."""
    rows: dict[str, list[dict]] = {"blue": [], "topdown": []}
    print(
        f"{'seed':>4} {'estimator':<9}{'wall s':>8}{'cpu s':>8}{'blue s':>8}{'peak MiB':>10}"
        "  L2 solver by level",
        flush=True,
    )
    for seed in seeds:
        for estimator, runs in rows.items():
            row = _in_process("preset 1-pass", persons, seed, True, estimator, False)
            if row is None:
                return 1
            runs.append(row)
            print(
                f"{seed:>4} {estimator:<9}{row['wall_s']:>8.1f}{row['cpu_s']:>8.1f}"
                f"{row['blue_s']:>8.1f}{row['peak_MiB']:>10.0f}  {row['l2']}",
                flush=True,
            )
    blue, topdown = rows["blue"], rows["topdown"]
    cpu = sum(r["cpu_s"] for r in blue) / sum(r["cpu_s"] for r in topdown)
    peak = max(r["peak_MiB"] for r in blue) / max(r["peak_MiB"] for r in topdown)
    print(
        f"blue / topdown: CPU {cpu:.2f}x, peak memory {peak:.2f}x "
        f"({blue[0]['tracts']} tracts, {len(seeds)} seed(s))"
    )
    print(f"\ntract-level MAE by query{'blue':>58}{'topdown':>10}{'blue - topdown (se)':>24}")
    for q in blue[0]["tract_mae"]:
        b = np.array([r["tract_mae"][q] for r in blue])
        t = np.array([r["tract_mae"][q] for r in topdown])
        diff = b - t
        se = diff.std(ddof=1) / np.sqrt(diff.size) if diff.size > 1 else float("nan")
        print(f"{q:<82}{b.mean():>10.3f}{t.mean():>10.3f}{diff.mean():>+14.4f} ({se:.4f})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strategy", choices=("four", "preset"), default="four")
    parser.add_argument(
        "--estimator", choices=("blue", "topdown"), help="release()'s estimator (its default)"
    )
    parser.add_argument(
        "--multipass",
        choices=tuple(PRESET_ROWS),
        default="on",
        help="with --strategy preset: fit it in two passes as production did (on, the "
        "preset's default), in one (off), or release both",
    )
    parser.add_argument(
        "--only-detailed",
        action="store_true",
        help="run the detailed-only release alone (no second strategy, no ratio)",
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="after each release, its accuracy metrics against the records (Release.metrics) "
        "in the same process: CPU seconds, and the peak memory with them",
    )
    parser.add_argument(
        "--compare-estimators",
        action="store_true",
        help="with --strategy preset: the preset under 'blue' and 'topdown', paired seeds",
    )
    parser.add_argument(
        "--seeds", type=int, default=1, help="with --compare-estimators: seeds --seed, ..."
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    print("$ python benchmarks/bench_dhc.py " + shlex.join(argv or sys.argv[1:]))
    preset = args.strategy == "preset"
    if args.compare_estimators:
        if not preset:
            parser.error("--compare-estimators needs --strategy preset")
        return _compare_estimators(args.persons, range(args.seed, args.seed + args.seeds))
    rows = []
    others = list(PRESET_ROWS[args.multipass]) if preset else ["four queries"]
    names = ["detailed"] + ([] if args.only_detailed else others)
    if preset and not args.only_detailed:
        print(
            "preset estimation: "
            + ", ".join(
                f"{n}: {'two passes (multipass=True)' if n == 'preset' else 'one pass'}"
                for n in others
            )
        )
    for name in names:
        row = _in_process(name, args.persons, args.seed, preset, args.estimator, args.metrics)
        if row is None:
            return 1
        rows.append(row)
    print(
        f"{'strategy':<15}{'wall s':>8}{'cpu s':>8}{'blue s':>8}{'peak MiB':>10}{'cells/cpu-s':>13}"
        f"{'tract SEXxAGE MAE':>19}  L2 solver by level"
    )
    for r in rows:
        print(
            f"{r['strategy']:<15}{r['wall_s']:>8.1f}{r['cpu_s']:>8.1f}{r['blue_s']:>8.1f}"
            f"{r['peak_MiB']:>10.0f}"
            f"{r['cells_per_cpu_s']:>13,.0f}{r['tract_sex_age_mae']:>19.3f}  {r['l2']}"
        )
    if args.metrics:
        for r in rows:
            print(
                f"{r['strategy']}: peak {r['peak_release_MiB']:.0f} MiB after the release, "
                f"{r['peak_metrics_MiB']:.0f} MiB with its metrics ({r['metrics_cpu_s']:.1f} "
                f"CPU s), {r['peak_MiB']:.0f} MiB with the tract MAE"
            )
    if args.only_detailed:
        return 0
    detailed = rows[0]
    for other in rows[1:]:
        print(
            f"{other['strategy']} / detailed: wall {other['wall_s'] / detailed['wall_s']:.2f}x, "
            f"CPU {other['cpu_s'] / detailed['cpu_s']:.2f}x ({other['tracts']} tracts)"
        )
    if preset:
        heads = "".join(f"{r['strategy']:>15}" for r in rows)
        print(f"\n{'tract-level MAE by query':<77}{heads}")
        for q in detailed["tract_mae"]:
            figures = "".join(f"{r['tract_mae'][q]:>15.3f}" for r in rows)
            print(f"{q:<77}{figures}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
