"""Quiet means quiet: no solver banner reaches standard output, at any verbosity.

HiGHS prints a copyright banner on the first ``Highs`` a process builds, before any option can
turn it off. A release's stdout under ``-q`` is the release path alone, which scripts read.
Each check runs in a new process: the banner is printed once per process, so an earlier test
that built a ``Highs`` here would hide it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("highspy")

ROOT = Path(__file__).resolve().parents[1]

#: both routes to HiGHS solve a one-variable LP in a new process: nothing may reach stdout
SOLVE_TWICE = """
import numpy as np
from solvers import solve
from solvers.problem import Problem
p = Problem(c=np.array([1.0]), lb=np.array([2.0]), ub=np.array([5.0]), name="quiet")
for solver in ("highs", "cvxpy:HIGHS"):
    assert abs(solve(p, solver).x[0] - 2.0) < 1e-9
"""


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_highs_prints_nothing_through_either_backend() -> None:
    out = _run(["-c", SOLVE_TWICE])
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""


@pytest.mark.parametrize("verbosity", [["-q"], [], ["-v"]], ids=["quiet", "default", "verbose"])
def test_a_release_prints_its_path_alone_at_every_verbosity(
    tmp_path: Path, verbosity: list[str]
) -> None:
    target = tmp_path / "release"
    out = _run(
        ["-m", "topdown", *verbosity, "run", "--seed", "3", "--solver", "highs"]
        + ["--out", str(target)]
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"{target}\n"
    if verbosity == ["-v"]:
        # the banner is a diagnostic: with -v it is logged, on stderr
        assert "HiGHS" in out.stderr


#: ``topdown -v``'s logging, then one function compiled by numba (as the batched passes' kernels
#: are, on a first run or a new checkout)
COMPILE_VERBOSE = """
from topdown.product.cli import _setup_logging
_setup_logging(quiet=False, verbose=True)
import logging, numba
logging.getLogger("topdown.test").debug("topdown debug line")
assert numba.njit(lambda x: x * 2 + 1)(3) == 7
"""


def test_verbose_keeps_numba_compiler_debug_out() -> None:
    """``-v`` is the engine's debug log, not numba's: its compiler logs every SSA rewrite at
    DEBUG (a DHC run under ``-v`` wrote 74 MB of them in its first minute)."""
    out = _run(["-c", COMPILE_VERBOSE])
    assert out.returncode == 0, out.stderr
    assert "topdown debug line" in out.stderr
    assert "numba" not in out.stderr, out.stderr[:500]
