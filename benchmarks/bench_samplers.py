"""Throughput of the exact samplers, side by side with OpenDP and a scalar reference.

Prints a table of samples per second for the discrete Laplace (scale t) and the discrete
Gaussian (sigma = t, i.e. sigma2 = t**2) at t = 1, 10, 1000:

* ``vectorised/secure``: :mod:`mechanisms.samplers` with the default ChaCha20 source;
* ``vectorised/seeded``: the same with a seeded (reproducible) source;
* ``opendp``: OpenDP's exact integer ``make_laplace`` / ``make_gaussian`` on an i64 vector
  (skipped with a message if ``opendp`` is not importable);
* ``scalar-reference``: CKS20 one sample at a time on Python ints (``mechanisms._bigint``).

The ratio column is the rate divided by the scalar reference's rate for the same row.
Run: ``python benchmarks/bench_samplers.py [--draws N] [--quick]``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mechanisms import _bigint  # noqa: E402
from mechanisms.rng import make_rng  # noqa: E402
from mechanisms.samplers import sample_discrete_gaussian, sample_discrete_laplace  # noqa: E402

SCALES = (1, 10, 1000)


Rate = tuple[float, float]
Row = tuple[str, int, str, int, Rate]


def _rate(draw: Callable[[int], object], draws: int, repeats: int = 3) -> Rate:
    """Best-of-``repeats`` samples per second of ``draw(draws)``: (wall clock, process CPU).

    Both are reported because a shared machine slows the wall clock; CPU time shows the
    cost on one core (all the samplers here are single-threaded).
    """
    wall = cpu = float("inf")
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        draw(draws)
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, max(time.process_time() - start_cpu, 1e-9))
    return draws / wall, draws / cpu


def _opendp_samplers() -> dict[str, Callable[[int], Callable[[int], object]]] | None:
    """Factories scale -> (n -> noisy zero vector) for OpenDP, or None if unavailable."""
    try:
        import opendp.prelude as dp
    except ImportError as exc:  # pragma: no cover - depends on the environment
        print(f"opendp not importable ({exc}); skipping its rows")
        return None
    dp.enable_features("contrib")
    l1 = (dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.l1_distance(T=dp.i64))
    l2 = (dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.l2_distance(T=dp.i64))

    def laplace(scale: int) -> Callable[[int], object]:
        meas = dp.m.make_laplace(*l1, scale=float(scale))
        return lambda n: meas([0] * n)

    def gaussian(scale: int) -> Callable[[int], object]:
        meas = dp.m.make_gaussian(*l2, scale=float(scale))
        return lambda n: meas([0] * n)

    return {"laplace": laplace, "gaussian": gaussian}


def run(draws: int, small_draws: int, repeats: int) -> list[Row]:
    """Measure every (sampler, scale, implementation); returns rows of the table."""
    rows: list[Row] = []
    opendp = _opendp_samplers()
    secure, seeded = make_rng(), make_rng(2026)
    for scale in SCALES:
        sigma2 = scale * scale
        cases = {
            "laplace": (
                lambda n, g, scale=scale: sample_discrete_laplace(scale, n, g),
                lambda n, g, scale=scale: [
                    _bigint.discrete_laplace_scalar(scale, 1, g) for _ in range(n)
                ],
            ),
            "gaussian": (
                lambda n, g, sigma2=sigma2: sample_discrete_gaussian(sigma2, n, g),
                lambda n, g, sigma2=sigma2: [
                    _bigint.discrete_gaussian_scalar(sigma2, 1, g) for _ in range(n)
                ],
            ),
        }
        for name, (vectorised, scalar) in cases.items():
            rows.append(
                (
                    name,
                    scale,
                    "vectorised/secure",
                    draws,
                    _rate(lambda n, v=vectorised: v(n, secure), draws, repeats),
                )
            )
            rows.append(
                (
                    name,
                    scale,
                    "vectorised/seeded",
                    draws,
                    _rate(lambda n, v=vectorised: v(n, seeded), draws, repeats),
                )
            )
            if opendp is not None:
                rows.append(
                    (name, scale, "opendp", small_draws, _rate(opendp[name](scale), small_draws, 1))
                )
            rows.append(
                (
                    name,
                    scale,
                    "scalar-reference",
                    small_draws,
                    _rate(lambda n, s=scalar: s(n, secure), small_draws, 1),
                )
            )
    return rows


def format_table(rows: list[Row]) -> str:
    """Markdown table with a ratio column against the scalar reference of the same row."""
    reference = {(r[0], r[1]): r[4][0] for r in rows if r[2] == "scalar-reference"}
    lines = [
        "| sampler | scale | implementation | draws | samples/s (wall) | samples/s (CPU) "
        "| ratio vs scalar (wall) |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for name, scale, impl, n, (wall, cpu) in rows:
        ratio = wall / reference[(name, scale)]
        lines.append(
            f"| {name} | {scale} | {impl} | {n:,} | {wall:,.0f} | {cpu:,.0f} | {ratio:.1f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse options, run the benchmark, print the command and the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--draws",
        type=int,
        default=1_000_000,
        help="draws per vectorised measurement (default 10**6)",
    )
    parser.add_argument("--quick", action="store_true", help="10x fewer draws and a single repeat")
    args = parser.parse_args(argv)
    draws = args.draws // 10 if args.quick else args.draws
    small = max(1000, draws // 50)
    repeats = 1 if args.quick else 3
    print("command: python " + shlex.join(["benchmarks/bench_samplers.py", *sys.argv[1:]]))
    print(f"vectorised draws: {draws:,} (best of {repeats}); opendp and scalar draws: {small:,}")
    print(format_table(run(draws, small, repeats)))


if __name__ == "__main__":
    main()
