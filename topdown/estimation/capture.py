"""Capture of every problem the estimation hands to a solver, for solver benchmarks.

With ``EstimateOptions.capture`` set, ``topdown.estimation.family._solve`` wraps each solve in
:func:`recording`: the problem is written as it was handed to the solver (free MPS through
HiGHS's writer, a QP's Hessian in ``QUADOBJ``: see ``solvers.export``) and one index row
(level, node, pass, kind, size, structure class, the backend that solved it, its status, time
and objective, how many variables sit at a bound) goes to a fragment file of its own. Families
may run in worker processes, so no file is shared while they run: each problem claims its file
name atomically and :func:`gather` joins the fragments into ``index.csv`` once the estimation
is over. With a Dask cluster the folder must be one the workers can write (a shared file
system). ``benchmarks/solvers/replay.py`` reads the folder back.

Privacy: a captured problem holds only noisy measurements, their weights and already
published counts (post-processing), so capturing costs no budget and reveals nothing beyond
``measurements.csv``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from solvers import Problem, SolverError, SolveResult
from solvers.backends.closed_form import ClosedFormBackend
from solvers.export import write_problem
from topdown.errors import OptionsError

__all__ = ["INDEX", "INDEX_COLUMNS", "gather", "prepare", "recording", "structure_class"]

log = logging.getLogger(__name__)

#: The index of a capture folder (one row per problem file).
INDEX = "index.csv"
INDEX_COLUMNS = (
    "file",
    "problem",
    "level",
    "node",
    "pass",
    "kind",
    "variables",
    "rows",
    "nonzeros",
    "hessian_nonzeros",
    "integers",
    "structure",
    "solver",
    "status",
    "seconds",
    "objective",
    "at_bound",
)
_FRAGMENTS = ".index"
_ACTIVE_TOL = 1e-9


def prepare(directory: str | Path) -> Path:
    """Create the capture folder; refuse one that already holds a capture (rows would mix).

    Raises:
        OptionsError: the folder holds an index or problem files, or is a file.
    """
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise OptionsError(f"capture ({str(path)!r}) must be a folder; it is a file")
    if path.is_dir() and (
        (path / INDEX).exists() or any(path.glob("*.mps")) or (path / _FRAGMENTS).exists()
    ):
        raise OptionsError(
            f"capture folder ({str(path)!r}) already holds captured problems; "
            "give a new or empty folder"
        )
    (path / _FRAGMENTS).mkdir(parents=True, exist_ok=True)
    return path


def structure_class(problem: Problem, *, constrained: bool) -> str:
    """``separable`` (independent groups: the closed form applies), ``constrained`` (the
    family has constraint rows of its own) or ``coupled`` (anything else: marginal queries,
    multipass rows, controlled rounding's totals)."""
    if ClosedFormBackend().accepts(problem) is True:
        return "separable"
    return "constrained" if constrained else "coupled"


@contextmanager
def recording(
    directory: str | Path | None,
    problem: Problem,
    pass_name: str,
    *,
    level: int,
    node: str | None,
    constrained: bool,
) -> Iterator[Callable[[SolveResult], None]]:
    """Write ``problem`` and, after the solve, its index row (no-op when ``directory`` is None).

    Use as ``with recording(...) as record: record(solvers.solve(problem, ...))``. A solve
    that raises a ``SolverError`` is indexed with its status and the error goes on.
    """
    if directory is None:
        yield lambda result: None
        return
    folder = Path(directory)
    file = _claim(folder, problem.name)
    write_problem(problem, file)
    row: dict[str, object] = {
        "file": file.name,
        "problem": problem.name,
        "level": level,
        "node": "" if node is None else node,
        "pass": pass_name,
        "kind": problem.kind,
        "variables": problem.n,
        "rows": problem.m,
        "nonzeros": 0 if problem.A is None else int(problem.A.nnz),
        "hessian_nonzeros": 0 if problem.P is None else int(problem.P.nnz),
        "integers": 0 if problem.integrality is None else int(problem.integrality.sum()),
        "structure": structure_class(problem, constrained=constrained),
    }
    start = time.perf_counter()

    def record(result: SolveResult) -> None:
        x = np.asarray(result.x, dtype=float)
        at_bound = np.abs(x - problem.lb) <= _ACTIVE_TOL
        at_bound |= np.abs(x - problem.ub) <= _ACTIVE_TOL
        row.update(
            solver=result.solver,
            status=result.status.value,
            seconds=result.time,
            objective=result.objective,
            at_bound=int(at_bound.sum()),
        )

    try:
        yield record
    except SolverError as err:
        row.update(
            solver=err.solver,
            status=err.status.value,
            seconds=time.perf_counter() - start,
            objective=float("nan"),
            at_bound=-1,
        )
        raise
    finally:
        fragment = folder / _FRAGMENTS / f"{file.stem}.json"
        fragment.write_text(json.dumps(row, default=str))


def _claim(folder: Path, name: str) -> Path:
    """A file name of its own for ``name`` (``-2``, ``-3``... when a family solves the same
    problem name twice, as the failsafe does), created atomically so that worker processes
    never share one."""
    stem = re.sub(r"[^A-Za-z0-9.-]+", "_", name).strip("_.") or "problem"
    for i in range(1, 10_000):
        path = folder / f"{stem}{'' if i == 1 else f'-{i}'}.mps"
        try:
            path.open("x").close()
        except FileExistsError:
            continue
        return path
    raise OptionsError(f"capture folder ({str(folder)!r}) has 10,000 problems named {stem!r}")


def gather(directory: str | Path) -> pd.DataFrame:
    """Join the fragments into ``index.csv`` (sorted by level, node, file) and return it."""
    folder = Path(directory)
    fragments = sorted((folder / _FRAGMENTS).glob("*.json"))
    rows = [json.loads(f.read_text()) for f in fragments]
    index = pd.DataFrame(rows, columns=list(INDEX_COLUMNS))
    index = index.sort_values(["level", "node", "file"], kind="stable").reset_index(drop=True)
    index.to_csv(folder / INDEX, index=False)
    for f in fragments:
        f.unlink()
    (folder / _FRAGMENTS).rmdir()
    log.info("captured %d problem(s) in %s", len(index), folder)
    return index
