"""Replay captured problems on every backend and report them as solver benchmarks do.

Run from the repository root, on a folder written by ``topdown run --capture-problems DIR``
(or ``benchmarks/solvers/make_problem_set.py``), or any folder of ``.mps`` files:

    python benchmarks/solvers/replay.py --problems DIR [--solvers a,b] [--time-limit S]
        [--sample N] [--out O]
    topdown bench solvers --problems DIR [...]

Every problem goes to every backend that accepts its kind and structure (HiGHS directly, each
installed CVXPY solver, SciPy, the closed forms where they apply). Each answer is checked here,
not trusted: bounds, rows and integrality within ``FEAS_TOL`` (relative to the answer's size),
and the objective within ``GAP_TOL`` (relative) of the best objective any feasible answer
reached. An answer that fails a check, a non-optimal status, an error or a time past the limit
is a failure. The table gives, per backend and structure class (from the capture's index),
the problems attempted and solved, and the shifted geometric mean of the time (shift 1 s,
failures counted at the time limit); ``DIR/replay.csv`` has one row per (problem, backend), and
``replay_profile.png`` the performance profile (Dolan and More 2002: the fraction of problems
a backend solves within a factor tau of the fastest; a declined problem counts as unsolved).
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import pandas as pd

import solvers
from solvers.backends.base import decline_reason, kind_refusal
from solvers.export import read_problem
from topdown.estimation.capture import INDEX, structure_class

logger = logging.getLogger("benchmarks.solvers.replay")

FEAS_TOL = 1e-6
GAP_TOL = 1e-6
SHIFT = 1.0


@dataclass
class Attempt:
    """One problem on one backend, after the independent checks."""

    file: str
    structure: str
    kind: str
    variables: int
    backend: str
    status: str
    time: float
    objective: float = math.nan
    violation: float = math.nan
    gap: float = math.nan
    release_gap: float = math.nan
    solved: bool = False


def load_index(folder: Path) -> pd.DataFrame:
    """The capture's index, or one built from the ``.mps`` files (structure from the matrices:
    ``separable`` when the closed form applies, else ``coupled``)."""
    path = folder / INDEX
    if path.exists():
        return pd.read_csv(path, keep_default_na=False, na_values={"objective": [""]})
    rows = []
    for file in sorted(folder.glob("*.mps")):
        p = read_problem(file)
        rows.append(
            {
                "file": file.name,
                "kind": p.kind,
                "variables": p.n,
                "structure": structure_class(p, constrained=False),
                "objective": math.nan,
            }
        )
    if not rows:
        raise SystemExit(f"--problems ({str(folder)!r}) holds neither {INDEX} nor .mps files")
    return pd.DataFrame(rows)


def sample(index: pd.DataFrame, per_group: int) -> pd.DataFrame:
    """At most ``per_group`` problems per (level, pass, kind, structure), spread over their
    sizes (smallest, largest and evenly between), for sets too large to replay whole."""
    keys = [c for c in ("level", "pass", "kind", "structure") if c in index.columns]
    picked = []
    for _, group in index.sort_values("variables", kind="stable").groupby(keys, sort=True):
        at = np.unique(np.linspace(0, len(group) - 1, min(per_group, len(group))).round())
        picked.append(group.iloc[at.astype(int)])
    return pd.concat(picked).sort_index()


def attempt(problem: solvers.Problem, name: str, time_limit: float) -> tuple[str, float, object]:
    """Run one backend; return (status, wall seconds, answer or None). Declines are None time."""
    backend = solvers.get(name)
    reason = kind_refusal(backend, problem, name) or decline_reason(
        backend.accepts(problem), name, problem
    )
    if reason is not None:
        return "declined", math.nan, None
    start = time.perf_counter()
    try:
        result = backend.solve(problem, time_limit=time_limit)
    except MemoryError:
        return "out of memory", time.perf_counter() - start, None
    except Exception as exc:  # a backend's crash is a failure of that backend, not the run
        logger.warning("%s on %r raised %s: %s", name, problem.name, type(exc).__name__, exc)
        return "error", time.perf_counter() - start, None
    elapsed = time.perf_counter() - start
    if elapsed > time_limit:
        return "time limit", elapsed, None
    if result.status is not solvers.SolveStatus.OPTIMAL:
        return result.status.value, elapsed, None
    return "optimal", elapsed, np.asarray(result.x, dtype=float)


def replay_problem(
    row: pd.Series, folder: Path, names: list[str], time_limit: float
) -> list[Attempt]:
    """Every backend on one problem, then the checks against the best feasible objective."""
    problem = read_problem(folder / str(row["file"]))
    out: list[Attempt] = []
    answers: dict[str, np.ndarray] = {}
    for name in names:
        logger.info("%s: %s ...", row["file"], name)
        status, seconds, x = attempt(problem, name, time_limit)
        a = Attempt(
            str(row["file"]),
            str(row["structure"]),
            problem.kind,
            problem.n,
            name,
            status,
            seconds,
        )
        if isinstance(x, np.ndarray):
            a.objective = problem.objective_value(x)
            a.violation = problem.max_violation(x)
            scale = 1.0 + float(np.max(np.abs(x), initial=0.0))
            if a.violation > FEAS_TOL * scale:
                a.status = "infeasible answer"
            else:
                answers[name] = x
        out.append(a)
    if answers:
        best = min(a.objective for a in out if a.backend in answers)
        captured = float(row.get("objective", math.nan) or math.nan)
        for a in out:
            if a.backend not in answers:
                continue
            a.gap = relative_gap(a.objective, best, problem.offset)
            if math.isfinite(captured):
                a.release_gap = relative_gap(a.objective, captured, problem.offset)
            a.solved = a.gap <= GAP_TOL
            if not a.solved:
                a.status = "suboptimal"
    return out


def relative_gap(value: float, reference: float, offset: float) -> float:
    """``|value - reference|`` relative to the objective the solver sees: the constant (a
    least-squares fit's ``sum w y^2``) can dwarf the optimum, which is then a small difference
    of large terms that no solver resolves to 1e-6 of itself."""
    scale = max(1.0, abs(reference), abs(reference - offset))
    return abs(value - reference) / scale


def shifted_geomean(times: np.ndarray, shift: float = SHIFT) -> float:
    """``exp(mean(log(t + shift))) - shift``: the solver benchmarks' mean, which neither the
    easy problems (near zero) nor one slow problem dominate."""
    return float(np.exp(np.mean(np.log(times + shift))) - shift)


def summary(attempts: list[Attempt], time_limit: float) -> pd.DataFrame:
    """Per class (kind and structure) and backend: attempted, solved, shifted geometric mean
    time. Kinds are kept apart: an LP-only backend would otherwise look fast on a mixed set."""
    df = pd.DataFrame([asdict(a) for a in attempts])
    df["class"] = df["kind"] + " " + df["structure"]
    tried = df[df["status"] != "declined"].copy()
    tried["charged"] = np.where(tried["solved"], tried["time"], time_limit)
    rows = []
    for cls in sorted(df["class"].unique()):
        problems = df[df["class"] == cls]["file"].nunique()
        for backend, g in tried[tried["class"] == cls].groupby("backend", sort=False):
            rows.append(
                {
                    "class": cls,
                    "problems": problems,
                    "backend": backend,
                    "attempted": len(g),
                    "solved": int(g["solved"].sum()),
                    "sgm_seconds": shifted_geomean(g["charged"].to_numpy(float)),
                    "max_seconds": float(g["charged"].max()),
                }
            )
    table = pd.DataFrame(rows)
    return table.sort_values(["class", "sgm_seconds"], kind="stable").reset_index(drop=True)


def format_summary(table: pd.DataFrame) -> str:
    head = (
        f"{'class':<18}{'problems':>9}  {'backend':<16}{'tried':>6}{'solved':>7}"
        f"{'sgm s':>10}{'max s':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in table.to_dict("records"):
        lines.append(
            f"{r['class']:<18}{r['problems']:>9}  {r['backend']:<16}{r['attempted']:>6}"
            f"{r['solved']:>7}{r['sgm_seconds']:10.4f}{r['max_seconds']:9.3f}"
        )
    return "\n".join(lines)


def profile_ratios(attempts: list[Attempt]) -> dict[str, np.ndarray]:
    """Per backend, each problem's time over the fastest solved time (inf when unsolved).
    A backend that declined every problem is left out."""
    df = pd.DataFrame([asdict(a) for a in attempts])
    times = df.pivot(index="file", columns="backend", values="time")
    solved = df.pivot(index="file", columns="backend", values="solved").fillna(False).astype(bool)
    tried = df.pivot(index="file", columns="backend", values="status") != "declined"
    times = times.where(solved)
    best = times.min(axis=1)
    ratios = times.div(best, axis=0).fillna(np.inf)
    return {str(b): ratios[b].to_numpy(float) for b in ratios.columns if tried[b].any()}


#: The profile's panels: QPs apart from LPs and MILPs, which only some backends take.
PANELS = (("QP", ("QP",)), ("LP and MILP", ("LP", "MILP")))


def plot_profile(attempts: list[Attempt], path: Path) -> None:
    """Dolan-More performance profiles, one panel per kind: rho_s(tau) = share of the panel's
    problems that backend s solves within tau times the fastest time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(t, [a for a in attempts if a.kind in kinds]) for t, kinds in PANELS]
    panels = [(t, part) for t, part in panels if part]
    backends = list(dict.fromkeys(a.backend for a in attempts))
    colour = {b: plt.get_cmap("tab10")(i % 10) for i, b in enumerate(backends)}
    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 4.2), squeeze=False)
    for ax, (title, part) in zip(axes[0], panels, strict=True):
        ratios = profile_ratios(part)
        finite = np.concatenate([r[np.isfinite(r)] for r in ratios.values()] + [np.ones(1)])
        taus = np.geomspace(1.0, max(2.0, float(finite.max()) * 1.5), 400)
        for backend, r in ratios.items():
            shares = [(r <= t).mean() for t in taus]
            ax.step(taus, shares, where="post", label=backend, color=colour[backend])
        n = len({a.file for a in part})
        ax.set(
            xscale="log",
            xlabel="tau (time / fastest time)",
            ylabel="share of problems solved within tau",
            ylim=(-0.02, 1.02),
            title=f"{title} ({n} problems)",
        )
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("performance profiles on captured problems")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=Path, required=True, help="captured problem folder")
    parser.add_argument(
        "--solvers", help="comma-separated backend names (default: every installed backend)"
    )
    parser.add_argument("--time-limit", type=float, default=20.0, help="seconds per solve")
    parser.add_argument(
        "--sample", type=int, help="at most N problems per level, pass, kind and structure"
    )
    parser.add_argument("--out", type=Path, help="output folder (default: the problem folder)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    names = args.solvers.split(",") if args.solvers else solvers.available()
    for name in names:
        solvers.get(name)  # an unknown or missing backend fails before any work
    out_dir = args.out or args.problems
    out_dir.mkdir(parents=True, exist_ok=True)
    index = load_index(args.problems)
    if args.sample:
        index = sample(index, args.sample)
    command = "python " + " ".join(
        shlex.quote(a) for a in [sys.argv[0], *(argv if argv is not None else sys.argv[1:])]
    )
    total = time.perf_counter()
    attempts: list[Attempt] = []
    for _, row in index.iterrows():
        attempts.extend(replay_problem(row, args.problems, names, args.time_limit))
    table = summary(attempts, args.time_limit)
    classes = (index["kind"] + " " + index["structure"]).value_counts().sort_index()
    sys.stdout.write(
        f"# {command}\n# {len(index)} problems from {args.problems}: "
        + ", ".join(f"{c} {n}" for c, n in classes.items())
        + f"\n# time limit {args.time_limit:g} s; sgm = shifted geometric mean of seconds "
        f"(shift {SHIFT:g} s, failures at the limit); solved = optimal status, violation <= "
        f"{FEAS_TOL:g} x (1 + max|x|), objective within {GAP_TOL:g} (relative) of the best\n"
    )
    sys.stdout.write(format_summary(table) + "\n")
    failures = [a for a in attempts if a.status not in ("optimal", "declined")]
    for a in failures:
        sys.stdout.write(
            f"# failed: {a.backend} on {a.file}: {a.status}"
            + (f" (violation {a.violation:.2g})" if math.isfinite(a.violation) else "")
            + (f" (gap {a.gap:.2g})" if math.isfinite(a.gap) else "")
            + "\n"
        )
    declined: dict[str, int] = {}
    for a in attempts:
        if a.status == "declined":
            declined[a.backend] = declined.get(a.backend, 0) + 1
    if declined:
        sys.stdout.write(
            "# declined (kind or structure not taken): "
            + ", ".join(f"{b} {n}" for b, n in declined.items())
            + "\n"
        )
    agree = [a.release_gap for a in attempts if math.isfinite(a.release_gap)]
    if agree:
        sys.stdout.write(
            f"# largest relative difference from the release's objective: {max(agree):.2g}\n"
        )
    with open(out_dir / "replay.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(asdict(attempts[0])))
        writer.writeheader()
        writer.writerows(asdict(a) for a in attempts)
    table.to_csv(out_dir / "replay_summary.csv", index=False)
    plot_profile(attempts, out_dir / "replay_profile.png")
    sys.stdout.write(
        f"# total wall time {time.perf_counter() - total:.1f} s; wrote replay.csv, "
        f"replay_summary.csv and replay_profile.png in {out_dir}\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
