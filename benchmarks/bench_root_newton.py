"""The root's L2 pass with marginal queries: the Newton iteration against CVXPY, one run.

The issue-31 case: the DHC persons histogram (relationship/GQ 42 x sex 2 x single year of age
116 x Hispanic 2 x CENRACE 63 = 1,227,744 cells) measured as ``detailed``, ``total``,
``SEX x AGE`` and ``HISP x CENRACE``, rho 1/4 each (discrete Gaussian variances), 100,000
persons spread over the cells. The same problem on smaller domains (relationship folded to
``--small`` values) also goes to the general path's solver (``cvxpy:CLARABEL`` on the lifted
problem ``solvers.builders.children_l2_problem`` builds), side by side: wall and CPU seconds,
the ratio, the largest difference between the two answers and each one's objective less the
smaller of the two (relative): the better answer shows 0.

Run from the repository root:

    python benchmarks/bench_root_newton.py [--persons 100000] [--small 1 2] [--no-full]
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import solvers  # noqa: E402
from solvers.builders import children_l2_problem  # noqa: E402
from topdown.estimation.root_marginals import RootMarginal, root_marginal_l2  # noqa: E402

#: relationship/GQ, sex, age, Hispanic, CENRACE
DHC_SHAPE = (42, 2, 116, 2, 63)
#: the kept axes of the marginal queries (the total, SEX x AGE, HISP x CENRACE)
MARGINALS = ((), (1, 2), (3, 4))
RHO = 0.25  # per query


def _groups(shape: tuple[int, ...], kept: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """Each cell's answer in the marginal keeping ``kept``, and the number of answers."""
    kshape = [n if i in kept else 1 for i, n in enumerate(shape)]
    axes = [np.arange(n) if i in kept else np.zeros(n, dtype=np.int64) for i, n in enumerate(shape)]
    codes = np.ravel_multi_index(np.ix_(*axes), kshape).reshape(-1)
    return codes.astype(np.int64), int(np.prod(kshape))


def _problem(shape: tuple[int, ...], persons: int, seed: int):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    truth = np.bincount(rng.integers(0, n, persons), minlength=n).astype(float)
    sigma = np.sqrt(1 / (2 * RHO))
    y = truth + rng.normal(0, sigma, n)
    marginals = []
    for kept in MARGINALS:
        g, k = _groups(shape, kept)
        z = np.bincount(g, weights=truth, minlength=k) + rng.normal(0, sigma, k)
        marginals.append(RootMarginal(g, z, 1 / sigma**2))
    return y, 1 / sigma**2, marginals


def _timed(fn, *args):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - wall, time.process_time() - cpu


def _objective(x: np.ndarray, y: np.ndarray, w: float, marginals: list[RootMarginal]) -> float:
    value = w * float(((x - y) ** 2).sum())
    for m in marginals:
        fitted = np.bincount(m.groups, weights=x, minlength=m.answers.size)
        value += m.weight * float(((fitted - m.answers) ** 2).sum())
    return value


def _general(y: np.ndarray, w: float, marginals: list[RootMarginal]) -> np.ndarray:
    n = y.size
    ms = [(sp.identity(n, format="csr"), y[None, :], np.full((1, n), w))]
    for m in marginals:
        k = m.answers.size
        Q = sp.csr_matrix((np.ones(n), (m.groups, np.arange(n))), shape=(k, n))
        ms.append((Q, m.answers[None, :], np.full((1, k), m.weight)))
    problem = children_l2_problem(None, ms, k=1, n=n, lifted=True, name="root")
    return np.maximum(solvers.solve(problem, solver="cvxpy:CLARABEL", time_limit=600).x[:n], 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=100_000)
    parser.add_argument(
        "--small", type=int, nargs="*", default=[1, 2], help="relationship sizes for the pairs"
    )
    parser.add_argument("--no-full", action="store_true", help="skip the 1.2M-cell problem")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print("$ python benchmarks/bench_root_newton.py " + shlex.join(argv or sys.argv[1:]))
    header = (
        f"{'cells':>10} {'solver':>16} {'wall s':>8} {'cpu s':>8} {'ratio':>7} {'max |diff|':>11} "
        f"{'objective excess':>17}"
    )
    print(header)
    for rel in args.small:
        shape = (rel, *DHC_SHAPE[1:])
        y, w, marginals = _problem(shape, args.persons, args.seed)
        x, wall, cpu = _timed(root_marginal_l2, y, w, marginals)
        ref, rwall, rcpu = _timed(_general, y, w, marginals)
        assert x is not None
        diff = float(np.abs(x - ref).max())
        mine, theirs = _objective(x, y, w, marginals), _objective(ref, y, w, marginals)
        best = min(mine, theirs)
        print(
            f"{y.size:>10,} {'root_newton':>16} {wall:>8.2f} {cpu:>8.2f} {'':>7} {diff:>11.2e} "
            f"{(mine - best) / best:>17.2e}"
        )
        print(
            f"{y.size:>10,} {'cvxpy:CLARABEL':>16} {rwall:>8.2f} {rcpu:>8.2f} "
            f"{rwall / wall:>6.1f}x {'':>11} {(theirs - best) / best:>17.2e}"
        )
    if not args.no_full:
        y, w, marginals = _problem(DHC_SHAPE, args.persons, args.seed)
        x, wall, cpu = _timed(root_marginal_l2, y, w, marginals)
        assert x is not None
        print(f"{y.size:>10,} {'root_newton':>16} {wall:>8.2f} {cpu:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
