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
  ``multipass=True``: the nine marginals, then ``detailed`` holding production's one exactly;
  ``topdown.estimation.nested_passes``), or in one pass with ``--multipass off`` (the row
  ``preset 1-pass``), or both with ``--multipass both``; ``--multipass slack`` holds within
  production's 0.1 instead (the row ``preset slack 0.1``: the rounds of
  ``topdown.estimation.multipass_newton``), ``--multipass all`` runs the three;
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
        [--estimator blue|topdown] [--multipass on|off|both|slack|all]
        [--to tract|block_group|block] [--only-detailed] [--metrics]
        [--compare-estimators [--seeds 3]] [--executor serial|processes|dask [--workers 2]]
        [--dense-check] [--multipass-check [--seeds 5]]

``--to block_group|block`` releases the preset (and its detailed-only twin) further down
the state's geography, the preset's Block_Group and Block levels below the tract: the tract
MAE table stays and the deepest level's is added (blocks are optional in issue 31; this is
what they cost).

``--executor processes|dask`` runs each release on that executor with ``--workers`` workers
(default 2) instead of serially: CPU seconds are then this process's and its workers' (the
children it waited for), and the table adds the largest worker's peak resident memory (the
largest ``ru_maxrss`` of the children; a Dask worker forked from a forkserver reports at least
the forkserver's size, see ``benchmarks/bench_pl94.py``).

``--dense-check`` releases instead a DHC-shaped state coarsened to a domain the dense solvers
take (``RELGQ // 11``: 4 values, ``SEX``, ``min(AGE // 12, 9)``: 10, ``HISPANIC``,
``min(CENRACE, 7)``: 7; 1,120 cells a node) with the four-query strategy, twice: the L2 pass
under ``auto`` (the matrix-free Newton routes chosen for marginal queries) and under HiGHS's
QP solver named strictly (every L2 problem a dense QP; a problem it declines fails the run).
It prints both releases' figures, the share of cells whose released counts agree, and the
tract level's error on each query side by side: the accuracy of both paths on one domain.

``--multipass-check`` releases that coarsened state with the four queries fitted as
production fits the DHC preset (``multipass``: the three marginals in a first pass, then
``detailed`` holding their answers; at 1,120 cells the general solvers take it) and in one
pass over all four, for ``--seeds`` paired seeds, and prints their tract errors as
``--compare-estimators`` does: what the one pass the preset runs at 1.2 million cells gives
up, measured where both run.

``--only-detailed`` runs the detailed-only release alone (issue 31's memory case: 750,000
persons, 400 tracts of 1,227,744 cells); ``--metrics`` adds each release's accuracy metrics
against the records (``Release.metrics``, a level's answers a block of nodes at a time) in
the same process, with its CPU seconds and the peak memory before and with them.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.dhc import dhc_schema, make_dhc_state  # noqa: E402
from topdown import Attribute, Release, Schema, Strategy, release  # noqa: E402
from topdown.presets import census2020_dhcp  # noqa: E402
from topdown.strategy import LevelStrategy, Query  # noqa: E402

log = logging.getLogger("bench_dhc")

HIERARCHY = ("COUNTY", "TRACT")
#: ``--dense-check``: each column's coarsening and its values (1,120 cells a node)
SMALL = {
    "RELGQ": (lambda v: v // 11, tuple(range(4))),
    "SEX": (lambda v: v, (1, 2)),
    "AGE": (lambda v: np.minimum(v // 12, 9), tuple(range(10))),
    "HISPANIC": (lambda v: v, (0, 1)),
    "CENRACE": (lambda v: np.minimum(v, 7), tuple(range(1, 8))),
}
#: ``--dense-check``'s two L2 solver choices: the automatic route and the dense QP, strictly
DENSE_CHECK = {"auto": "auto", "highs": {"l2": "highs"}}
PRESET_HIERARCHY = ("STATE", "COUNTY", "TRACT")
#: ``--to``: the preset's hierarchy down to that level (the preset's Block_Group and Block)
PRESET_DEPTHS = {
    "tract": PRESET_HIERARCHY,
    "block_group": PRESET_HIERARCHY + ("BLOCK_GROUP",),
    "block": PRESET_HIERARCHY + ("BLOCK_GROUP", "BLOCK"),
}
FOUR = ("detailed", "total", "SEX x AGE", "HISPANIC x CENRACE")
#: ``--multipass``'s choices: the preset's rows they run (two passes as production, or one)
PRESET_ROWS = {
    "on": ("preset",),
    "off": ("preset 1-pass",),
    "both": ("preset", "preset 1-pass"),
    "slack": ("preset slack 0.1",),
    "all": ("preset", "preset slack 0.1", "preset 1-pass"),
}
#: production's hold (person_US.ini's opt_tol_slack): ``preset slack 0.1``'s tolerance
SLACK = 0.1


def _preset(name: str, hierarchy: tuple[str, ...] = PRESET_HIERARCHY) -> tuple[Schema, Strategy]:
    """``census2020_dhcp`` over ``hierarchy`` (``preset``: two passes, the held marginal's
    answers held exactly, the preset's default; ``preset slack 0.1``: two, held within
    production's 0.1; ``preset 1-pass``: one), or detailed-only with the same rho at every
    level."""
    schema, preset = census2020_dhcp(hierarchy, multipass=name != "preset 1-pass")
    if name == "preset slack 0.1":
        return schema, dataclasses.replace(preset, multipass_tolerance=SLACK)
    if name.startswith("preset"):
        return schema, preset
    detailed = tuple(LevelStrategy(ls.budget) for ls in preset.levels)
    return schema, Strategy(detailed, preset.mechanism, preset.neighbouring)


def _strategy(name: str, levels: int, multipass: bool = False) -> Strategy:
    """``detailed`` alone or the four queries, rho 1 a level; ``multipass``: the three
    marginals in a first pass (``FOUR[1:]``), ``detailed`` in the second."""
    if name == "detailed":
        queries: tuple = ((Query(None), Fraction(1)),)
    else:
        queries = tuple((Query.parse(q), Fraction(1, 4)) for q in FOUR)
    first = FOUR[1:] if multipass else ()
    return Strategy(
        tuple(LevelStrategy(Fraction(1), queries, first) for _ in range(levels)),
        mechanism="discrete_gaussian",
    )


def _tract_mae(
    rel: Release, records: pd.DataFrame, queries: list[Query], column: str = "TRACT"
) -> dict[str, float]:
    """Each query's mean absolute error at ``column``'s level (the tract), over its nodes
    and answers.

    Released and true answers are summed from the nonzero cells (by ``Query.groups``) and
    compared on the answers either side has: memory follows the records and nonzero cells,
    never (tracts x answers), which for ``detailed`` is 491 million at 400 tracts (four float
    arrays of 3.9 GB when this summed whole tables)."""
    schema = rel.schema
    tract = schema.hierarchy.index(column) + 1
    counts = rel.counts[tract]
    node, cell = np.nonzero(counts)
    value = counts[node, cell].astype(np.int64)
    labels = rel.tree.levels[tract].labels.astype(str)
    true_node = np.searchsorted(labels, records[column].astype(str).to_numpy())
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


def _small_state(persons: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame, Schema]:
    """``--dense-check``'s state: the DHC-shaped records coarsened by ``SMALL`` (1,120 cells)."""
    state = make_dhc_state(persons, seed)
    records = state.records.copy()
    for column, (coarsen, _) in SMALL.items():
        records[column] = coarsen(records[column].to_numpy())
    schema = Schema(tuple(Attribute(c, values=v) for c, (_, v) in SMALL.items()), HIERARCHY)
    return records, state.geography, schema


def _cpu() -> float:
    """CPU seconds of this process and of the children it has waited for (a parallel
    executor's workers, once it is closed)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _run(
    name: str,
    persons: int,
    seed: int,
    *,
    preset: bool = False,
    estimator: str | None = None,
    metrics: bool = False,
    executor: str = "serial",
    workers: int = 2,
    small: bool = False,
    solver: str | dict[str, str] = "auto",
    multipass: bool = False,
    depth: str = "tract",
) -> dict:
    """One release in this (child) process: its figures; with ``metrics``, then its accuracy
    metrics against the records (``Release.metrics``), timed apart and inside the peak."""
    # the release's progress (each level's solvers) on this child process's stderr
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if small:
        records, geography, schema = _small_state(persons, seed)
        strategy = _strategy("four queries", len(HIERARCHY) + 1, multipass)
        hierarchy = HIERARCHY
        queries = [q for q, _ in strategy.levels[-1].queries]
        nearest = "SEX x AGE"
    else:
        state = make_dhc_state(persons, seed)
        records, geography = state.records, state.geography
        if preset:
            hierarchy = PRESET_DEPTHS[depth]
            schema, strategy = _preset(name, hierarchy)
            queries = [q for q, _ in strategy_queries()]
            nearest = "AGE:age_18_64_116 x SEX"
        else:
            schema, strategy = dhc_schema(HIERARCHY), _strategy(name, len(HIERARCHY) + 1)
            hierarchy = HIERARCHY
            queries = [Query.parse("SEX x AGE")]
            nearest = "SEX x AGE"
    geography = geography[list(hierarchy)].drop_duplicates().reset_index(drop=True)
    log.info("%s: %d persons, %d tracts", name, persons, geography["TRACT"].nunique())
    wall, cpu = time.perf_counter(), _cpu()
    options: dict = {} if estimator is None else {"estimator": estimator}
    if executor != "serial":
        options |= {"executor": executor, "workers": workers}
    if solver != "auto":
        options |= {"solver": solver, "solver_strict": True}
    rel = release(records, schema, strategy, seed=seed, geography=geography, **options)
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    peak_release = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    metrics_cpu = float("nan")
    if metrics:
        metrics_cpu = time.process_time()
        rel.metrics(records)
        metrics_cpu = time.process_time() - metrics_cpu
    peak_metrics = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    mae = _tract_mae(rel, records, queries)
    leaf = hierarchy[-1]
    leaf_mae = _tract_mae(rel, records, queries, leaf) if leaf != "TRACT" else None
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
        "peak_worker_MiB": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "cells_per_cpu_s": cells / cpu,
        "l2": " / ".join(",".join(sorted(s.solved_in("l2"))) for s in rel.stats),
        "tract_sex_age_mae": mae[nearest],
        "tract_mae": mae,
        "tracts": int(geography["TRACT"].nunique()),
        "leaf": (leaf, int(rel.counts[-1].shape[0])),
        "leaf_mae": leaf_mae,
        "counts": [np.asarray(c) for c in rel.counts] if small else None,
    }


def strategy_queries() -> tuple[tuple[Query, Fraction], ...]:
    """The preset's tract-level queries and shares (every level has the same ten)."""
    return census2020_dhcp(PRESET_HIERARCHY, multipass=False)[1].levels[-1].queries


def _in_process(name: str, persons: int, seed: int, **options: Any) -> dict | None:
    """``_run`` in a process of its own (its peak memory its own); None, said, if the kernel
    killed it (out of memory breaks the executor; a Pool would wait on its result for ever)."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        try:
            row: dict = pool.submit(_run, name, persons, seed, **options).result()
        except BrokenProcessPool:
            print(f"{name}: the release's process died (killed: out of memory?)")
            return None
    print(f"{name}: done, {row['wall_s']:.1f} s wall", flush=True)
    return row


def _compare_estimators(persons: int, seeds: range) -> int:
    """The preset in one pass (``preset 1-pass``) under ``"blue"`` and ``"topdown"`` for each
    seed, back to back."""
    runs = {e: {"preset": True, "estimator": e} for e in ("blue", "topdown")}
    return _paired("preset 1-pass", runs, persons, seeds)


def _paired(name: str, runs: dict[str, dict], persons: int, seeds: range) -> int:
    """Each of ``runs`` (a label: ``_run``'s options) for each seed, back to back; prints each
    run, then per query the two runs' tract MAE averaged over the seeds and their paired
    difference (mean and standard error over the seeds)."""
    rows: dict[str, list[dict]] = {label: [] for label in runs}
    print(
        f"{'seed':>4} {'run':<9}{'wall s':>8}{'cpu s':>8}{'blue s':>8}{'peak MiB':>10}"
        "  L2 solver by level",
        flush=True,
    )
    for seed in seeds:
        for label, options in runs.items():
            row = _in_process(name, persons, seed, **options)
            if row is None:
                return 1
            rows[label].append(row)
            print(
                f"{seed:>4} {label:<9}{row['wall_s']:>8.1f}{row['cpu_s']:>8.1f}"
                f"{row['blue_s']:>8.1f}{row['peak_MiB']:>10.0f}  {row['l2']}",
                flush=True,
            )
    (a_label, a), (b_label, b) = rows.items()
    cpu = sum(r["cpu_s"] for r in a) / sum(r["cpu_s"] for r in b)
    peak = max(r["peak_MiB"] for r in a) / max(r["peak_MiB"] for r in b)
    print(
        f"{a_label} / {b_label}: CPU {cpu:.2f}x, peak memory {peak:.2f}x "
        f"({a[0]['tracts']} tracts, {len(seeds)} seed(s))"
    )
    print(
        f"\n{'tract-level MAE by query':<82}{a_label:>10}{b_label:>10}  {a_label} - {b_label} (se)"
    )
    for q in a[0]["tract_mae"]:
        x = np.array([r["tract_mae"][q] for r in a])
        y = np.array([r["tract_mae"][q] for r in b])
        diff = x - y
        se = diff.std(ddof=1) / np.sqrt(diff.size) if diff.size > 1 else float("nan")
        print(f"{q:<82}{x.mean():>10.3f}{y.mean():>10.3f}{diff.mean():>+14.4f} ({se:.4f})")
    return 0


def _table(rows: list[dict], workers: bool = False) -> None:
    """The releases' figures, a row each (with the largest worker's peak on an executor)."""
    print(
        f"{'strategy':<15}{'wall s':>8}{'cpu s':>8}{'blue s':>8}{'peak MiB':>10}"
        + (f"{'worker MiB':>12}" if workers else "")
        + f"{'cells/cpu-s':>13}{'tract SEXxAGE MAE':>19}  L2 solver by level"
    )
    for r in rows:
        print(
            f"{r['strategy']:<15}{r['wall_s']:>8.1f}{r['cpu_s']:>8.1f}{r['blue_s']:>8.1f}"
            f"{r['peak_MiB']:>10.0f}"
            + (f"{r['peak_worker_MiB']:>12.0f}" if workers else "")
            + f"{r['cells_per_cpu_s']:>13,.0f}{r['tract_sex_age_mae']:>19.3f}  {r['l2']}"
        )


def _multipass_check(persons: int, seeds: range, estimator: str | None) -> int:
    """The coarsened domain's four-query release fitted as production fits the DHC preset
    (``total``, ``SEX x AGE`` and ``HISPANIC x CENRACE`` in a first pass, ``detailed`` holding
    their answers in a second: the general solvers take it at 1,120 cells) against one pass
    over all four (the Newton routes), paired seeds."""
    runs = {
        "one pass": {"small": True, "estimator": estimator},
        "two pass": {"small": True, "estimator": estimator, "multipass": True},
    }
    return _paired("four queries", runs, persons, seeds)


def _dense_check(persons: int, seed: int, estimator: str | None) -> int:
    """The coarsened domain's four-query release with the L2 pass under ``auto`` and under
    HiGHS strictly, each in its own process: both rows, the cells whose counts agree, and
    each query's tract error side by side."""
    rows = []
    for name, solver in DENSE_CHECK.items():
        row = _in_process(name, persons, seed, estimator=estimator, small=True, solver=solver)
        if row is None:
            return 1
        rows.append(row)
    _table(rows)
    auto, dense = rows
    pairs = zip(auto["counts"], dense["counts"], strict=True)
    same = sum(int(np.count_nonzero(a == d)) for a, d in pairs)
    cells = sum(a.size for a in auto["counts"])
    print(
        f"released counts equal in {same:,} of {cells:,} cells ({same / cells:.4%}); "
        f"auto / highs: CPU {auto['cpu_s'] / dense['cpu_s']:.2f}x"
    )
    print(f"\ntract-level MAE by query{'auto':>26}{'highs':>10}{'auto - highs':>14}")
    for q, a in auto["tract_mae"].items():
        d = dense["tract_mae"][q]
        print(f"{q:<50}{a:>10.4f}{d:>10.4f}{a - d:>+14.5f}")
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
        help="with --strategy preset: fit it in two passes as production did, the held "
        "answers held exactly (on, the preset's default), in one (off), both, two holding "
        "within production's 0.1 (slack), or all three",
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
        "--seeds",
        type=int,
        default=1,
        help="with --compare-estimators or --multipass-check: seeds --seed, ...",
    )
    parser.add_argument(
        "--executor",
        choices=("serial", "processes", "dask"),
        default="serial",
        help="release()'s executor for each release",
    )
    parser.add_argument("--workers", type=int, default=2, help="a parallel executor's workers")
    parser.add_argument(
        "--to",
        choices=tuple(PRESET_DEPTHS),
        default="tract",
        help="with --strategy preset: release down to this level (the preset's Block_Group "
        "and Block below the tract); the tract MAE stays, the leaves' is added",
    )
    parser.add_argument(
        "--multipass-check",
        action="store_true",
        help="the coarsened domain: production's two passes against one, paired --seeds",
    )
    parser.add_argument(
        "--dense-check",
        action="store_true",
        help="a coarsened domain (1,120 cells): the L2 pass under auto against HiGHS's dense QP",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    print("$ python benchmarks/bench_dhc.py " + shlex.join(argv or sys.argv[1:]))
    preset = args.strategy == "preset"
    if args.to != "tract" and (not preset or args.compare_estimators or args.multipass_check):
        parser.error("--to needs --strategy preset, without --compare-estimators or checks")
    if args.dense_check:
        if preset or args.compare_estimators or args.only_detailed:
            parser.error("--dense-check runs the four-query strategy on its own domain")
        return _dense_check(args.persons, args.seed, args.estimator)
    if args.multipass_check:
        seeds = range(args.seed, args.seed + args.seeds)
        return _multipass_check(args.persons, seeds, args.estimator)
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
                f"{n}: {'one pass' if n == 'preset 1-pass' else 'two passes (multipass=True)'}"
                for n in others
            )
        )
    for name in names:
        row = _in_process(
            name,
            args.persons,
            args.seed,
            preset=preset,
            estimator=args.estimator,
            metrics=args.metrics,
            executor=args.executor,
            workers=args.workers,
            depth=args.to,
        )
        if row is None:
            return 1
        rows.append(row)
    _table(rows, workers=args.executor != "serial")
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
            f"CPU {other['cpu_s'] / detailed['cpu_s']:.2f}x ({other['tracts']} tracts, "
            f"{other['leaf'][1]} {other['leaf'][0]} nodes)"
        )
    if preset:
        _mae_table("tract-level MAE by query", rows, "tract_mae")
        if detailed["leaf_mae"] is not None:
            _mae_table(f"{detailed['leaf'][0]}-level MAE by query", rows, "leaf_mae")
    return 0


def _mae_table(title: str, rows: list[dict], key: str) -> None:
    """Each query's MAE (``key``: a row's ``_tract_mae`` figures), one column a row."""
    heads = "".join(f"{r['strategy']:>15}" for r in rows)
    print(f"\n{title:<77}{heads}")
    for q in rows[0][key]:
        figures = "".join(f"{r[key][q]:>15.3f}" for r in rows)
        print(f"{q:<77}{figures}")


if __name__ == "__main__":
    raise SystemExit(main())
