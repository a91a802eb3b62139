"""Controlled rounding of one large family: CPU, augmenting paths and the optimum's L1 distance.

Issue 31's rounding case: 42 children (a DHC tract family) over ``--cells`` parent cells of 1
or 2 persons, each cell's persons spread over the children by ``gamma(0.3 x size)`` shares,
the children's sizes lognormal (``--sigma``; 0 makes them alike). With unequal children the
cell-by-cell start hands the large ones far more units than their totals allow, and the exact
repair (``solvers.backends.transport``) moves them back one augmenting path at a time.

Run from the repository root, once per checkout to compare (the same family from the seed):

    python benchmarks/bench_dhc_rounding.py [--cells 19320 100000] [--sigma 1.0] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import solvers.backends.transport as transport  # noqa: E402
from topdown.estimation.batched.families import round_chunk  # noqa: E402

CHILDREN = 42


def family(cells: int, sigma: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(x (children, cells) summing to p cell by cell, p (cells,) of 1 or 2)."""
    rng = np.random.default_rng(seed)
    p = rng.integers(1, 3, cells)
    size = rng.lognormal(0.0, sigma, CHILDREN)
    share = rng.gamma(0.3 * size[None, :], 1.0, (cells, CHILDREN))
    return (share / share.sum(axis=1, keepdims=True) * p[:, None]).T, p


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, nargs="+", default=[19_320, 100_000])
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    paths = [0]
    real = transport._shortest_paths

    def counted(*a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        out = real(*a)
        paths[0] += int(out[0].sum())
        return out

    transport._shortest_paths = counted  # type: ignore[assignment]
    print(f"{'cells':>8}{'CPU s':>8}{'augmenting paths':>18}{'L1 distance to x':>20}")
    for cells in args.cells:
        x, p = family(cells, args.sigma, args.seed)
        paths[0] = 0
        cpu = time.process_time()
        counts, bad = round_chunk(x[None], p[None], np.arange(cells)[None])
        cpu = time.process_time() - cpu
        total = x.sum(axis=1)
        rows = counts[0].sum(axis=1)
        assert not bad.any() and (counts[0].sum(axis=0) == p).all()
        assert ((rows >= np.floor(total)) & (rows <= np.ceil(total))).all()
        l1 = float(np.abs(counts[0] - x).sum())
        print(f"{cells:>8,}{cpu:>8.2f}{paths[0]:>18,}{l1:>20.6f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
