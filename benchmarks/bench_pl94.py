"""Census scale: TopDown on PL94-shaped states, by size and executor.

For each size (persons) and executor, one release runs in its own process (so peak memory and
CPU time are that run's): a state from ``benchmarks/pl94.py`` (declared geography, 2,016
cells), the production-shaped strategy by default (rho 2.56 split by the 2020 geolevel shares,
detailed plus marginals per level, the state's total population invariant). Printed per run:
wall and CPU seconds in all and by phase (tree, measurement, estimation with its per-level
task seconds, microdata), output cells (nodes x cells over all levels) per CPU-second, peak
resident memory of the main process and of the largest worker, correctness, and accuracy
(mean absolute error of the released total and detailed cells by level, beside the noisy
measurements'). A PNG plots seconds and memory against size.

The worker figure is the largest ``ru_maxrss`` of this process's children, and a child
started by fork and exec reports at least this process's resident size at that moment (1,050
MiB for a child of a process holding 1 GiB, checked). The process pool forks its workers
when the executor is made, before the histograms are built, so its figure is the larger of
a worker's peak and this process's size then; the Dask executor's forkserver (its workers
are forked from it) starts in the background while the tree and its histograms are built, so
on Dask the figure is this process's size at that moment, not a worker's (at 3 million
persons it read 723-1,145 MiB from run to run, where the process pool's read 281-307).

Run from the repository root, e.g.:

    python benchmarks/bench_pl94.py --sizes 10000 100000 --executors serial processes
    python benchmarks/bench_pl94.py --sizes 100000 --measure-only --repo /work/main
    python benchmarks/bench_pl94.py --sizes 3000000 --executors serial processes dask \
        --strategy detailed --workers 2
    python benchmarks/bench_pl94.py --sizes 3000000 --executors serial processes --workers 2 \
        --strategy census2020

``--strategy census2020`` is the 2020 production PL94 strategy as written
(``topdown.presets.census2020_pl94``: the ``hhinst`` recode measured, exact shares, the total
fitted first at State..Block_Group unless ``--no-multipass``) with the preset's schema and the
state total invariant; ``production`` is the folded production-shaped strategy of ``pl94.py``.

``--repeat N`` runs the executors in turn N times (serial dask serial dask ...) and prints each
round's speed-up and their median: on a shared machine one pair can be far off.
``--measure-only`` times the tree and the measurement step alone; ``--repo`` runs another
checkout's engine on the same data (before/after comparisons).

``--stream-by none COUNTY`` runs each size unstreamed and streamed by county
(``topdown.streaming.run``: peak memory follows the largest county); ``--state-dir DIR`` streams a
state written by ``python benchmarks/pl94.py --write DIR`` (Parquet by county) instead of
generating one in memory, e.g. the California-sized state:

    python benchmarks/pl94.py --persons 39000000 --units california --write /tmp/ca
    python benchmarks/bench_pl94.py --state-dir /tmp/ca --stream-by COUNTY --strategy detailed
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024.0  # ru_maxrss is in KiB on Linux


def _cpu() -> tuple[float, float]:
    """CPU seconds of this process, and of its finished (waited-for) children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def _load_pl94():
    """The generator module, loaded by path (so ``--repo`` changes only the engine)."""
    spec = importlib.util.spec_from_file_location("pl94", ROOT / "benchmarks" / "pl94.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["pl94"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def run_one(persons: int, executor: str, args: argparse.Namespace, stream: str = "none"):
    """One release (or one measurement) in this process; returns the row of figures."""
    sys.path.insert(0, str(Path(args.repo).resolve()))
    if stream != "none":
        return run_streamed(persons, executor, stream, args)
    from topdown import release
    from topdown.measurement.tree import build_tree
    from topdown.outputs.metrics import compute_metrics
    from topdown.support.progress import Progress

    pl94 = _load_pl94()
    state = pl94.make_state(persons, args.seed)
    schema, strategy, constraints = _setup(pl94, args)
    row: dict[str, Any] = {"persons": state.persons, "executor": executor, "stream": "none"}
    data: Any = state.records
    if executor == "dask-parquet":  # the records as a partitioned dataset, read on the workers
        data = Path(tempfile.mkdtemp(prefix="pl94_dataset_"))
        for i, rows in enumerate(_partitions(len(state.records), args.partitions)):
            state.records.iloc[rows].to_parquet(data / f"part-{i:04d}.parquet", index=False)
        executor = "dask"
    own0, kids0 = _cpu()
    wall0 = time.perf_counter()
    if args.measure_only:
        return row | _measure_only(state, schema, strategy, executor, args, own0, kids0, wall0)
    rel = release(
        data,
        schema,
        strategy,
        constraints=constraints,
        seed=args.seed + 1,
        executor=executor,
        workers=args.workers,
        geography=state.geography,
        progress=Progress(enabled=False),
        # the engine's default estimator unless one is named
        **({"estimator": args.estimator} if args.estimator else {}),
    )
    cpu_micro = time.process_time()
    wall_micro = time.perf_counter()
    micro_rows = len(rel.microdata)
    micro_cpu = time.process_time() - cpu_micro
    micro_wall = time.perf_counter() - wall_micro
    wall = time.perf_counter() - wall0
    own1, kids1 = _cpu()
    cpu = (own1 - own0) + (kids1 - kids0)
    peak_main = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / MIB
    peak_worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / MIB
    cells = sum(lv.size for lv in rel.tree.levels) * schema.domain.size
    t = getattr(rel, "timings", {})
    measure_cpu = t.get("measure_cpu", float("nan")) + t.get("measure_worker_cpu", 0.0)
    tree_cpu = t.get("tree_cpu", float("nan"))
    row |= {
        "nodes": "/".join(str(lv.size) for lv in rel.tree.levels),
        "wall_s": wall,
        "cpu_s": cpu,
        # the main process's own CPU (tree, task building, level-wide passes, assembly) and
        # the workers': on an idle machine the wall time is at least main + workers / N
        "main_cpu": own1 - own0,
        "workers_cpu": kids1 - kids0,
        "tree_cpu": tree_cpu,
        "measure_cpu": measure_cpu,
        "measure_wall": t.get("measure_wall", float("nan")),
        # on a parallel executor the workers' share of estimation is only known in total
        "estimate_cpu": (
            t.get("estimate_cpu", float("nan"))
            if executor == "serial"
            else cpu - tree_cpu - measure_cpu - micro_cpu
        ),
        "estimate_wall": t.get("estimate_wall", float("nan")),
        # the whole-tree BLUE (estimator "blue"), in the main process: part of estimate_wall
        "blue_s": float(getattr(rel, "blue_seconds", 0.0)),
        "level_task_s": [round(s.l2_time + s.round_time, 2) for s in rel.stats],
        "microdata_cpu": micro_cpu,
        "microdata_wall": micro_wall,
        "records_out": micro_rows,
        "cells": cells,
        "cells_per_cpu_s": cells / cpu,
        "peak_main_MiB": peak_main,
        "peak_worker_MiB": peak_worker,
    }
    start = time.perf_counter()
    row["correct"] = bool(rel.check_correctness().ok)
    row["check_s"] = time.perf_counter() - start
    _, truth = build_tree(state.records, schema, geography=state.geography)
    del state
    accuracy = _accuracy(rel, truth.counts, compute_metrics)
    row["accuracy"] = accuracy
    row["load"] = os.getloadavg()[0]  # the machine may be shared: its 1-minute load at the end
    if isinstance(data, Path):
        shutil.rmtree(data, ignore_errors=True)
    return row


def _setup(pl94, args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(schema, strategy, constraints) of ``--strategy``.

    ``census2020`` is the preset ``topdown.presets.census2020_pl94`` as written (the ``hhinst``
    recode measured, exact Fraction shares, production's total-first ``multipass`` unless
    ``--no-multipass``) over ``pl94.py``'s hierarchy, with the state total invariant; its schema
    is the preset's (CENRACE 1..63), whose columns default to ``pl94.py``'s names.
    """
    if args.strategy == "census2020":
        from topdown.presets import census2020_pl94

        hierarchy = tuple(c for c in pl94.GEOGRAPHY if args.tract_groups or c != "TRACT_GROUP")
        if args.tract_groups:
            raise SystemExit("--strategy census2020 maps no tract-group level")
        schema, strategy = census2020_pl94(hierarchy, multipass=args.multipass)
        return schema, strategy, pl94.state_total_invariant()
    schema = pl94.pl94_schema(args.tract_groups)
    if args.strategy == "production":
        return schema, pl94.production_strategy(args.tract_groups), pl94.state_total_invariant()
    return schema, pl94.detailed_strategy(args.tract_groups), None


def _partitions(n: int, parts: int) -> list[slice]:
    edges = [round(i * n / parts) for i in range(parts + 1)]
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def run_streamed(persons: int, executor: str, stream_by: str, args: argparse.Namespace):
    """One streamed release (``topdown.streaming.run``) in this process: a generated state, or the
    Parquet state of ``--state-dir``; the output folder is removed afterwards unless
    ``--keep``."""
    import shutil

    import pandas as pd

    from topdown.streaming.partitions import partitions
    from topdown.streaming.run import release_streamed
    from topdown.support.progress import Progress

    pl94 = _load_pl94()
    schema, strategy, constraints = _setup(pl94, args)
    own0, kids0 = _cpu()
    wall0 = time.perf_counter()
    if args.state_dir:
        data: Any = Path(args.state_dir) / "records"
        geography = pd.read_parquet(Path(args.state_dir) / "geography.parquet")
    else:
        state = pl94.make_state(persons, args.seed)
        data, geography = state.records, state.geography
        del state
    out = Path(args.out or tempfile.mkdtemp(prefix="pl94_stream_")) / f"{persons}_{executor}"
    rel = release_streamed(
        data,
        schema,
        strategy,
        stream_by=stream_by,
        out=out,
        constraints=constraints,
        seed=args.seed + 1,
        executor=executor,
        workers=args.workers,
        geography=geography,
        progress=Progress(enabled=False),
        # the engine's default estimator unless one is named
        **({"estimator": args.estimator} if args.estimator else {}),
    )
    wall = time.perf_counter() - wall0
    own1, kids1 = _cpu()
    cpu = (own1 - own0) + (kids1 - kids0)
    t = rel.timings
    cells = sum(lv.size for lv in rel.tree.levels) * schema.domain.size
    row: dict[str, Any] = {
        "persons": persons,
        "executor": executor,
        "stream": stream_by,
        "nodes": "/".join(str(lv.size) for lv in rel.tree.levels),
        "wall_s": wall,
        "cpu_s": cpu,
        "main_cpu": own1 - own0,
        "workers_cpu": kids1 - kids0,
        "tree_cpu": t["tree_cpu"] + t["subtree_tree_cpu"],
        "measure_cpu": t["subtree_measure_cpu"],
        # the streamed BLUE's sweep 1 summaries and sweep 2 reading of the parts count here
        "estimate_cpu": t["subtree_estimate_cpu"]
        + t.get("subtree_summary_cpu", 0.0)
        + t.get("subtree_read_cpu", 0.0),
        "top_cpu": t["top_cpu"],
        "microdata_cpu": t["subtree_write_cpu"],
        "level_task_s": [round(s.l2_time + s.round_time, 2) for s in rel.stats],
        "records_out": sum(r.records_out for r in rel.subtrees),
        "cells": cells,
        "cells_per_cpu_s": cells / cpu,
        "peak_main_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / MIB,
        "peak_worker_MiB": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / MIB,
        "largest_subtree_nodes": max(sum(r.nodes) for r in rel.subtrees),
    }
    start = time.perf_counter()
    report = rel.check_correctness()
    row["correct"] = bool(report.ok)
    if not report.ok:
        row["failures"] = list(report.failures)[:5]
    row["check_s"] = time.perf_counter() - start
    row["accuracy"] = _stream_accuracy(rel, partitions(data, stream_by))
    row["peak_after_check_MiB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / MIB
    row["load"] = os.getloadavg()[0]  # the machine may be shared: its 1-minute load at the end
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    return row


def _stream_accuracy(rel, parts) -> dict[str, float]:
    """Mean absolute error of the released node totals by level, one subtree at a time."""
    import numpy as np
    import pandas as pd

    errors: dict[int, list[float]] = {}
    by_label = {p.label: p for p in parts}
    stream = rel.tree.levels[rel.stream_level]
    for level in range(rel.stream_level + 1):
        true = np.zeros(rel.tree.levels[level].size)
        column = rel.tree.levels[level].column
        labels = pd.Index(rel.tree.levels[level].labels.astype(str))
        for p in parts:
            records = p.read()
            node = 0 if column is None else labels.get_loc(str(records[column].iloc[0]))
            true[node] += len(records)
        released = rel.counts(level).sum(axis=1)
        errors[level] = [float(np.abs(released - true).sum()), float(true.size)]
    for label in stream.labels.astype(str):
        records = by_label[label].read() if label in by_label else None
        for level in range(rel.stream_level + 1, rel.tree.n_levels):
            lv = rel.tree.levels[level]
            nodes = rel.nodes_of(level, label)
            released = rel.counts(level, label).sum(axis=1)
            true = np.zeros(len(nodes))
            if records is not None and len(records):
                sizes = records[lv.column].value_counts()
                sizes = sizes[sizes > 0]  # a categorical lists its unused categories too
                idx = pd.Index(lv.labels.astype(str)[nodes]).get_indexer(sizes.index.astype(str))
                if (idx < 0).any():
                    raise ValueError(f"subtree {label!r}: records outside its units")
                true[idx] = sizes.to_numpy()
            entry = errors.setdefault(level, [0.0, 0.0])
            entry[0] += float(np.abs(released - true).sum())
            entry[1] += len(nodes)
    return {f"L{lv} total released": round(e / n, 3) for lv, (e, n) in errors.items()}


def _accuracy(rel, truth_counts, compute_metrics, nodes_per_slice: int = 2000) -> dict[str, float]:
    """Mean absolute error of the released and noisy total and detailed cells, by level.

    ``topdown.outputs.metrics.compute_metrics`` on slices of at most ``nodes_per_slice`` nodes (its
    float temporaries for a whole block level of a large state would take several GB), the
    slices' errors combined weighted by their number of answers.
    """
    import dataclasses

    from topdown.measurement.measure import Measurements

    sums: dict[str, list[float]] = {}
    for level, (released, truth) in enumerate(zip(rel.counts, truth_counts, strict=True)):
        for first in range(0, released.shape[0], nodes_per_slice):
            cut = slice(first, first + nodes_per_slice)
            qms = tuple(
                dataclasses.replace(m, noisy=m.noisy[cut]) for m in rel.measurements.at(level)
            )
            table = compute_metrics(
                rel.schema.domain, [released[cut]], [truth[cut]], Measurements((qms,))
            ).table
            for r in table[table["query"].isin(["total", "detailed"])].itertuples():
                entry = sums.setdefault(f"L{level} {r.query} {r.estimator}", [0.0, 0.0])
                entry[0] += r.mae * r.answers
                entry[1] += r.answers
    return {name: round(total / count, 3) for name, (total, count) in sums.items()}


def _measure_only(state, schema, strategy, executor, args, own0, kids0, wall0) -> dict[str, Any]:
    """Tree and measurement only (for before/after comparisons of the measurement step)."""
    import inspect

    from mechanisms.ledger import Ledger
    from mechanisms.rng import new_release_key
    from topdown.execution.executors import make_executor
    from topdown.measurement.measure import measure
    from topdown.measurement.tree import build_tree

    tree, truth = build_tree(state.records, schema, geography=state.geography)
    own_t, kids_t = _cpu()
    kwargs: dict[str, Any] = {"release_key": new_release_key(args.seed + 1), "ledger": Ledger()}
    with make_executor(executor, workers=args.workers) as ex:
        if "executor" in inspect.signature(measure).parameters:
            kwargs["executor"] = ex
        elif executor != "serial":
            logging.warning("this checkout's measure() runs in the main process only")
        start = time.perf_counter()
        measure(tree, truth, schema.domain, strategy, **kwargs)
        measure_wall = time.perf_counter() - start
    own1, kids1 = _cpu()
    measure_cpu = (own1 - own_t) + (kids1 - kids_t)
    cells = sum(lv.size for lv in tree.levels) * schema.domain.size
    return {
        "nodes": "/".join(str(lv.size) for lv in tree.levels),
        "measure_wall": measure_wall,
        "tree_cpu": (own_t - own0) + (kids_t - kids0),
        "measure_cpu": measure_cpu,
        "cells": cells,
        "measured_cells_per_cpu_s": cells / measure_cpu,
        "peak_main_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / MIB,
        "peak_worker_MiB": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / MIB,
    }


def _child(persons: int, executor: str, argv: list[str], stream: str = "none") -> dict[str, Any]:
    """Run one (size, executor, stream) in a fresh process and read its JSON row."""
    cmd = [sys.executable, __file__, *argv, "--one", str(persons), executor, stream]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        return {
            "persons": persons,
            "executor": executor,
            "stream": stream,
            "error": out.stderr.strip()[-400:],
        }
    return json.loads(out.stdout.strip().splitlines()[-1])


def _print_tables(rows: list[dict[str, Any]], measure_only: bool) -> None:
    import pandas as pd

    frame = pd.DataFrame(rows)
    if "error" in frame:
        for r in rows:
            if "error" in r:
                print(f"FAILED {r['persons']} {r['executor']}: {r['error']}")
        frame = frame[frame["error"].isna()].drop(columns="error")
    if frame.empty:
        return
    if measure_only:
        cols = ["persons", "executor", "nodes", "tree_cpu", "measure_wall", "measure_cpu"]
        cols += ["cells", "measured_cells_per_cpu_s", "peak_main_MiB", "peak_worker_MiB"]
        print(frame[cols].round(2).to_string(index=False))
        return
    cols = ["persons", "executor", "stream", "round", "nodes", "wall_s", "cpu_s", "main_cpu"]
    cols += ["workers_cpu", "tree_cpu", "measure_cpu", "measure_wall"]
    cols += ["estimate_cpu", "estimate_wall", "blue_s", "microdata_cpu", "cells_per_cpu_s"]
    cols += ["peak_main_MiB", "peak_worker_MiB", "correct", "load"]
    shown = frame.reindex(columns=cols)  # a streamed row has no measure / estimate split
    shown["cells_per_cpu_s"] = shown["cells_per_cpu_s"].round(-3).astype(int)
    print(shown.round(2).to_string(index=False))
    _print_speedups(frame)
    rows = [r for r in rows if r["round"] == 0]  # the first round's details
    frame = frame[frame["round"] == 0]
    print("\nestimation task seconds by level (L2 + rounding, root first):")
    for r in rows:
        if "error" not in r:
            print(f"  {r['persons']:>9} {r['executor']:<10} {r['stream']:<8} {r['level_task_s']}")
    print("\naccuracy: mean absolute error by level, released vs noisy (total, detailed cells):")
    acc = pd.DataFrame(
        [
            r["accuracy"]
            | {"persons": r["persons"], "executor": r["executor"], "stream": r["stream"]}
            for r in rows
            if "error" not in r
        ]
    ).set_index(["persons", "executor", "stream"])
    print(acc.T.to_string())
    _print_ratios(frame)


def _print_speedups(frame) -> None:
    """Wall-clock speed-up of each executor over serial, paired by size, stream mode and round
    (a streamed run is compared with streamed serial); with several rounds, their median."""
    serial = frame[frame["executor"] == "serial"].set_index(["persons", "stream", "round"])
    if not len(serial) or len(frame) == len(serial):
        return
    print("\nwall-clock speed-up over serial (same size, stream mode and round):")
    paired: dict[tuple[int, str, str], list[float]] = {}
    for r in frame.itertuples():
        key = (r.persons, r.stream, r.round)
        if r.executor != "serial" and key in serial.index:
            speedup = float(serial.loc[key, "wall_s"]) / r.wall_s
            paired.setdefault((r.persons, r.executor, r.stream), []).append(speedup)
            print(
                f"  {r.persons:>9} {r.executor:<10} {r.stream:<8} round {r.round}: {speedup:.2f}x"
            )
    for (persons, executor, stream), values in paired.items():
        if len(values) > 1:
            median = statistics.median(values)
            print(
                f"  {persons:>9} {executor:<10} {stream:<8} median of {len(values)}: {median:.2f}x "
                f"(min {min(values):.2f}x, max {max(values):.2f}x)"
            )


def _print_ratios(frame) -> None:
    """Streamed / unstreamed peak memory and wall time, per size and executor."""
    if "stream" not in frame or frame["stream"].nunique() < 2:
        return
    print("\nstreamed / unstreamed (same size and executor):")
    for (persons, executor), group in frame.groupby(["persons", "executor"]):
        base = group[group["stream"] == "none"]
        for r in group[group["stream"] != "none"].itertuples():
            if len(base):
                b = base.iloc[0]
                print(
                    f"  {persons} {executor} by {r.stream}: peak memory "
                    f"{r.peak_main_MiB / b['peak_main_MiB']:.2f}x, "
                    f"wall {r.wall_s / b['wall_s']:.2f}x, CPU {r.cpu_s / b['cpu_s']:.2f}x"
                )


def _plot(rows: list[dict[str, Any]], path: Path, measure_only: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    runs = sorted({(r["executor"], r.get("stream", "none")) for r in rows if "error" not in r})
    for executor, stream in runs:
        ex = executor if stream == "none" else f"{executor} by {stream}"
        sub = sorted(
            (
                r
                for r in rows
                if (r["executor"], r.get("stream", "none")) == (executor, stream)
                and "error" not in r
            ),
            key=_size,
        )
        x = [r["persons"] for r in sub]
        if measure_only:
            ax_t.plot(x, [r["measure_wall"] for r in sub], "o-", label=f"{ex} measure wall")
            ax_t.plot(x, [r["measure_cpu"] for r in sub], "s--", label=f"{ex} measure CPU")
        else:
            ax_t.plot(x, [r["wall_s"] for r in sub], "o-", label=f"{ex} wall")
            ax_t.plot(x, [r["cpu_s"] for r in sub], "s--", label=f"{ex} CPU")
        ax_m.plot(x, [r["peak_main_MiB"] for r in sub], "o-", label=f"{ex} main")
        if any(r["peak_worker_MiB"] > 0 for r in sub):
            ax_m.plot(x, [r["peak_worker_MiB"] for r in sub], "s--", label=f"{ex} worker")
    for ax, label in ((ax_t, "seconds"), (ax_m, "peak resident memory (MiB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("persons")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("TopDown on PL94-shaped states (2,016 cells per node)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _persons_in(folder: Path) -> int:
    """Persons of a state written by ``pl94.py --write`` (from the Parquet footers)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in (folder / "records").glob("*.parquet"))


def _size(row: dict[str, Any]) -> int:
    return int(row["persons"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=int, default=[10_000, 100_000])
    parser.add_argument(
        "--executors",
        nargs="+",
        default=["serial"],
        choices=["serial", "processes", "dask", "dask-parquet"],
        help="dask-parquet: the records written as a partitioned Parquet dataset (not timed) "
        "and read on the Dask workers",
    )
    parser.add_argument("--workers", type=int, default=2, help="processes / local Dask workers")
    parser.add_argument("--partitions", type=int, default=8, help="files of a dask-parquet run")
    parser.add_argument(
        "--strategy",
        choices=["production", "detailed", "census2020"],
        default="production",
        help="production: the folded production-shaped strategy; census2020: the preset "
        "topdown.presets.census2020_pl94 as written",
    )
    parser.add_argument(
        "--multipass",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="census2020: production's total-first pass at State..Block_Group (default on)",
    )
    parser.add_argument("--tract-groups", action="store_true", help="add the tract-group level")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--measure-only", action="store_true")
    parser.add_argument("--repo", default=str(ROOT), help="checkout whose engine runs")
    parser.add_argument(
        "--estimator",
        choices=["blue", "topdown"],
        default=None,
        help="the passes' estimator (default: the engine's default)",
    )
    parser.add_argument(
        "--plot",
        default=str(Path(tempfile.gettempdir()) / "pl94_scale.png"),
        help="PNG to write ('' for none)",
    )
    parser.add_argument(
        "--stream-by",
        nargs="+",
        default=["none"],
        help="'none' (unstreamed) and/or hierarchy columns to stream by (e.g. COUNTY)",
    )
    parser.add_argument("--state-dir", help="stream the Parquet state written to DIR by pl94.py")
    parser.add_argument("--out", help="folder for the streamed releases (default a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the streamed release folders")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of the executors in turn (serial dask serial dask ...): the speed-ups are "
        "paired round by round and their median printed, for a noisy machine",
    )
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(raw)
    if args.repeat < 1:
        parser.error(f"--repeat ({args.repeat}) must be at least 1")
    if len(set(args.executors)) < len(args.executors):
        parser.error(f"--executors {args.executors} names one twice; use --repeat for rounds")
    logging.basicConfig(level=logging.ERROR)
    if args.one:
        row = run_one(int(args.one[0]), args.one[1], args, args.one[2])
        print(json.dumps(row))
        return 0
    if args.state_dir:
        if args.stream_by == ["none"] or "none" in args.stream_by:
            parser.error("--state-dir needs --stream-by COLUMN (a Parquet state is streamed)")
        args.sizes = [_persons_in(Path(args.state_dir))]
    print("command: python benchmarks/bench_pl94.py", shlex.join(raw))
    print(f"machine: {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    rows = []
    for persons in args.sizes:
        for round_ in range(args.repeat):  # the executors in turn, round after round
            for executor in args.executors:
                for stream in args.stream_by:
                    rows.append(_child(persons, executor, raw, stream) | {"round": round_})
                    # each row as soon as it is known (a long run may be stopped first)
                    print(f"  row: {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
    _print_tables(rows, args.measure_only)
    first = [r for r in rows if r["round"] == 0]
    if args.plot and any("error" not in r for r in first):
        _plot(first, Path(args.plot), args.measure_only)
        print(f"\nplot: {args.plot}")
    return 0 if all("error" not in r and r.get("correct", True) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
