"""Benchmark every installed solver backend on TopDown-like problems of growing size.

Run from the repository root:

    python benchmarks/solvers/bench_solvers.py [--quick] [--time-limit S] [--out DIR]
    python -m benchmarks.solvers [...]
    python -m benchmarks.solvers --problems DIR [--solvers a,b] [--time-limit S] [--out O]

With ``--problems`` the captured problems of a real release are replayed instead (see
``benchmarks/solvers/replay.py``); the random instances below stay as the scaling study.

Families: the L2 children problem (detailed-only = separable; coupled = detailed + total +
marginals, lifted form) and the rounding problem (consistency only = TU; with per-child caps =
MILP; controlled = consistency and child-total rows, TU, the engine's default), for k children
x n cells. Each accepting backend solves each instance under the time
limit; the table reports time, objective, the largest disagreement (max |x - x_best|) with
the best answer (the closed form when it applies, else the lowest objective among the
feasible answers) and the answer's largest constraint violation. Combinations known to blow up
are skipped with a note (see ``SKIP``). Results go to stdout, ``DIR/solver_bench.csv`` and
``DIR/solver_bench.png``.
"""

from __future__ import annotations

import argparse
import csv
import logging
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

import solvers
from benchmarks.solvers.instances import Instance, children_instance, rounding_instance

logger = logging.getLogger("benchmarks.solvers")

QP_BACKENDS = ("closed_form", "cvxpy:CLARABEL", "cvxpy:OSQP", "highs", "cvxpy:HIGHS", "cvxpy:SCS")
MILP_BACKENDS = ("closed_form", "highs", "cvxpy:HIGHS", "scipy", "cvxpy:SCIPY")

#: (family prefix, backend) -> largest number of variables attempted, with the reason.
SKIP: dict[tuple[str, str], tuple[int, str]] = {
    # Runs up to 30 x 2016 on purpose: that row shows the time limit (36 s at 10^4 variables).
    ("L2 separable", "highs"): (
        61_000,
        "HiGHS active-set QP: past the time limit at 6e4 variables",
    ),
    ("L2 coupled", "highs"): (15_000, "HiGHS active-set QP: 20 s at 6400 variables"),
    ("L2", "cvxpy:HIGHS"): (5_000, "HiGHS active-set QP through CVXPY"),
    ("L2 separable", "cvxpy:SCS"): (70_000, "SCS first-order: 5 s at 6e4 variables already"),
    ("L2 coupled", "cvxpy:SCS"): (25_000, "SCS first-order: slow to 1e-7"),
    ("L2 separable", "cvxpy:CLARABEL"): (1_100_000, "memory"),
    ("L2 separable", "cvxpy:OSQP"): (1_100_000, "memory"),
    ("L2 coupled", "cvxpy:CLARABEL"): (
        200_000,
        "IPM factorisation: 25 s at 1.3e5 lifted variables",
    ),
    ("L2 coupled", "cvxpy:OSQP"): (200_000, "10 s at 1.3e5 lifted variables"),
    ("round", "cvxpy:HIGHS"): (400_000, "CVXPY modelling overhead"),
    ("round", "cvxpy:SCIPY"): (400_000, "CVXPY modelling overhead"),
}


@dataclass
class Row:
    family: str
    k: int
    n: int
    variables: int
    rows: int
    backend: str
    status: str
    time: float = float("nan")
    objective: float = float("nan")
    disagreement: float = float("nan")
    violation: float = float("nan")
    x: np.ndarray | None = None


def _limit(family: str, backend: str) -> tuple[int, str] | None:
    return SKIP.get((family, backend)) or SKIP.get((family.split()[0], backend))


def run_instance(inst: Instance, time_limit: float, notes: list[str]) -> list[Row]:
    """Solve ``inst`` with every installed backend that accepts it; mark the best answer."""
    problem = inst.problem
    names = QP_BACKENDS if problem.kind == "QP" else MILP_BACKENDS
    rows: list[Row] = []
    for name in names:
        if name not in solvers.available():
            continue
        if solvers.get(name).accepts(problem) is not True:
            continue
        row = Row(inst.family, inst.k, inst.n, problem.n, problem.m, name, "")
        cap = _limit(inst.family, name)
        if cap is not None and problem.n > cap[0]:
            notes.append(
                f"skipped {name} on {problem.name} ({problem.n} vars > {cap[0]}: {cap[1]})"
            )
            continue
        logger.info("%s: %s ...", problem.name, name)
        start = time.perf_counter()
        try:
            result = solvers.solve(problem, name, time_limit=time_limit)
        except solvers.SolverLimitError:
            row.status, row.time = "time limit", time.perf_counter() - start
        except solvers.SolverError as exc:
            row.status, row.time = exc.status.value, time.perf_counter() - start
        except MemoryError:
            row.status, row.time = "out of memory", time.perf_counter() - start
        else:
            row.status, row.time, row.objective, row.x = (
                "optimal",
                result.time,
                result.objective,
                result.x,
            )
            row.violation = problem.max_violation(result.x)
        rows.append(row)
    solved = [r for r in rows if r.x is not None]
    if solved:
        # The reference is the exact closed form when it applies, else the lowest objective
        # among (nearly) feasible answers: a first-order solver that violates the rows by
        # 1e-4 can report a lower objective than the true optimum (feasible: violation <= 1e-6).
        exact = [r for r in solved if r.backend == "closed_form"]
        feasible = [r for r in solved if r.violation <= 1e-6] or solved
        best_x = (exact or [min(feasible, key=lambda r: r.objective)])[0].x
        for r in solved:
            r.disagreement = float(np.abs(r.x - best_x).max())
        for r in solved:
            r.x = None
    return rows


def instances(quick: bool):
    """Yield instances family by family, smallest first."""
    ks, ns = ((5, 30), (64, 2016)) if quick else ((5, 30, 100), (64, 2016, 10_000))
    for builder, label, flag in (
        (children_instance, "coupled", False),
        (children_instance, "coupled", True),
        (rounding_instance, "capped", False),
        (rounding_instance, "capped", True),
        (rounding_instance, "controlled", True),
    ):
        for n in ns:
            for k in ks:
                yield builder(k, n, **{label: flag})


def format_table(rows: list[Row]) -> str:
    head = (
        f"{'family':<13}{'k':>4}{'n':>7}{'vars':>9}{'rows':>9}  {'backend':<15}{'status':<12}"
        f"{'time s':>9}{'objective':>17}{'max|dx|':>10}{'viol':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        obj = f"{r.objective:17.6f}" if np.isfinite(r.objective) else f"{'-':>17}"
        dis = f"{r.disagreement:10.1e}" if np.isfinite(r.disagreement) else f"{'-':>10}"
        vio = f"{r.violation:9.1e}" if np.isfinite(r.violation) else f"{'-':>9}"
        lines.append(
            f"{r.family:<13}{r.k:>4}{r.n:>7}{r.variables:>9}{r.rows:>9}  {r.backend:<15}"
            f"{r.status:<12}{r.time:9.3f}{obj}{dis}{vio}"
        )
    return "\n".join(lines)


def plot(rows: list[Row], path: Path, time_limit: float) -> None:
    """Time against number of variables, one panel per family, one line per backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = list(dict.fromkeys(r.family for r in rows))
    fig, axes = plt.subplots(1, len(families), figsize=(4.2 * len(families), 3.8), squeeze=False)
    for ax, fam in zip(axes[0], families, strict=True):
        for backend in dict.fromkeys(r.backend for r in rows if r.family == fam):
            pts = sorted(
                (r.variables, r.time, r.status)
                for r in rows
                if r.family == fam and r.backend == backend
            )
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=backend)
            lim = [p for p in pts if p[2] != "optimal"]
            ax.scatter([p[0] for p in lim], [p[1] for p in lim], marker="x", color="k", zorder=5)
        ax.axhline(time_limit, color="grey", linestyle=":", linewidth=1)
        ax.set(xscale="log", yscale="log", title=fam, xlabel="variables", ylabel="seconds")
        ax.legend(fontsize=7)
    fig.suptitle("solver backends on TopDown problems (x = not optimal)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if any(a == "--problems" or a.startswith("--problems=") for a in args_in):
        from benchmarks.solvers.replay import main as replay

        return replay(args_in)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="k in (5, 30), n in (64, 2016)")
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="seconds per solve (default 60; 10 with --quick)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/solvers/results"), help="output folder"
    )
    args = parser.parse_args(argv)
    if args.time_limit is None:
        args.time_limit = 10.0 if args.quick else 60.0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python " + " ".join(
        shlex.quote(a) for a in [sys.argv[0], *(argv if argv is not None else sys.argv[1:])]
    )
    out = sys.stdout
    out.write(
        f"# {command}\n# backends installed: {', '.join(solvers.available())}\n"
        f"# time limit {args.time_limit:g} s per solve; max|dx| = max |x - x_best| over variables\n"
    )
    rows: list[Row] = []
    notes: list[str] = []
    total = time.perf_counter()
    for inst in instances(args.quick):
        rows.extend(run_instance(inst, args.time_limit, notes))
    out.write(format_table(rows) + "\n")
    for note in notes:
        out.write(f"# note: {note}\n")
    out.write(f"# total wall time {time.perf_counter() - total:.1f} s\n")
    with open(args.out / "solver_bench.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            [
                "family",
                "k",
                "n",
                "variables",
                "rows",
                "backend",
                "status",
                "time",
                "objective",
                "disagreement",
                "violation",
            ]
        )
        for r in rows:
            writer.writerow(
                [
                    r.family,
                    r.k,
                    r.n,
                    r.variables,
                    r.rows,
                    r.backend,
                    r.status,
                    f"{r.time:.4f}",
                    r.objective,
                    r.disagreement,
                    r.violation,
                ]
            )
    plot(rows, args.out / "solver_bench.png", args.time_limit)
    out.write(f"# wrote {args.out / 'solver_bench.csv'} and {args.out / 'solver_bench.png'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
