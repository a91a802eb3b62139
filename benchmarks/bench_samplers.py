"""Throughput of the exact samplers, side by side with numpy's inexact ones and the sources.

One invocation prints two tables. The samplers: samples per second for the discrete Laplace
(scale t) and the discrete Gaussian (sigma = t, i.e. sigma2 = t**2) at t = 1, 10, 1000:

* ``numpy-inexact``: numpy's float ``Generator.laplace`` / ``Generator.normal`` (PCG64), the
  yardstick of the ratio column (not floating-point safe: Mironov 2012);
* ``compiled/secure``: :mod:`mechanisms.samplers` (the numba kernels) with the default secure
  ChaCha12 source; ``compiled/seeded``: the same with a seeded source;
* ``numpy-oracle/secure``: the vectorised numpy samplers the kernels replaced
  (:mod:`mechanisms._oracle`);
* ``opendp``: OpenDP's exact integer ``make_laplace`` / ``make_gaussian`` on an i64 vector
  (skipped with a message if ``opendp`` is not importable);
* ``scalar-reference``: CKS20 one sample at a time on Python ints (``mechanisms._bigint``).

The ratio column divides a row's CPU rate by numpy-inexact's CPU rate for the same sampler and
scale, measured in the same run (CPU rather than wall time: the machine may be shared). For the
compiled rows, ``words/sample`` is how many raw 64-bit words of the source a sample took, and
``source limit`` the rate at which the default ChaCha12 alone delivers that many words.

The sources: raw 64-bit words per second (``BitGenerator.random_raw``, bulk) of ChaCha20 (the
default before issue 27), ChaCha12 (the default), ChaCha8, AES-CTR and PCG64 (numpy's default,
not secure).
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

from fractions import Fraction  # noqa: E402

import numpy as np  # noqa: E402
import randomgen  # noqa: E402

from mechanisms import _bigint, _oracle  # noqa: E402
from mechanisms._warmup import warm_up  # noqa: E402
from mechanisms.rng import make_rng  # noqa: E402
from mechanisms.samplers import sample_discrete_gaussian, sample_discrete_laplace  # noqa: E402

SCALES = (1, 10, 1000)


Rate = tuple[float, float]
# (sampler, scale, implementation, draws, (wall, cpu) rate, words per sample or None)
Row = tuple[str, int, str, int, Rate, float | None]


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


def _words_per_sample(draw: Callable[[int, np.random.Generator], object], draws: int) -> float:
    """Raw 64-bit words a fresh default (ChaCha12) stream gave for ``draws`` samples, per sample."""
    rng = make_rng()
    draw(draws, rng)
    outputs_32 = int(rng.bit_generator.state["state"]["ctr"][0])  # ChaCha counts 32-bit outputs
    return outputs_32 / 2 / draws


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


SOURCES: dict[str, Callable[[], object]] = {
    "ChaCha20": lambda: randomgen.ChaCha(key=2**200 + 1, counter=0, rounds=20),
    "ChaCha12 (default)": lambda: randomgen.ChaCha(key=2**200 + 1, counter=0, rounds=12),
    "ChaCha8": lambda: randomgen.ChaCha(key=2**200 + 1, counter=0, rounds=8),
    "AES-CTR": lambda: randomgen.AESCounter(key=2**100 + 1),
    "PCG64 (not secure)": lambda: np.random.PCG64(2026),
}


def run_sources(words: int, repeats: int) -> dict[str, Rate]:
    """Raw 64-bit words per second of each source (bulk ``random_raw``)."""
    out = {}
    for name, make in SOURCES.items():
        bit_gen = make()
        out[name] = _rate(lambda n, g=bit_gen: g.random_raw(n), words, repeats)  # type: ignore[attr-defined]
    return out


def run(draws: int, small_draws: int, repeats: int) -> list[Row]:
    """Measure every (sampler, scale, implementation); returns rows of the table."""
    warm_up()
    rows: list[Row] = []
    opendp = _opendp_samplers()
    secure, seeded = make_rng(), make_rng(2026)
    inexact = np.random.default_rng(2026)
    for scale in SCALES:
        sigma2 = scale * scale
        cases = {
            "laplace": (
                lambda n, g, scale=scale: sample_discrete_laplace(scale, n, g),
                lambda n, g, scale=scale: _oracle.discrete_laplace(Fraction(scale), n, g),
                lambda n, scale=scale: inexact.laplace(0.0, scale, n),
                lambda n, g, scale=scale: [
                    _bigint.discrete_laplace_scalar(scale, 1, g) for _ in range(n)
                ],
            ),
            "gaussian": (
                lambda n, g, sigma2=sigma2: sample_discrete_gaussian(sigma2, n, g),
                lambda n, g, sigma2=sigma2: _oracle.discrete_gaussian(Fraction(sigma2), n, g),
                lambda n, scale=scale: inexact.normal(0.0, scale, n),
                lambda n, g, sigma2=sigma2: [
                    _bigint.discrete_gaussian_scalar(sigma2, 1, g) for _ in range(n)
                ],
            ),
        }
        for name, (compiled, oracle, float_draw, scalar) in cases.items():
            rows.append(
                (name, scale, "numpy-inexact", draws, _rate(float_draw, draws, repeats), None)
            )
            words = _words_per_sample(compiled, draws)
            for label, rng in (("compiled/secure", secure), ("compiled/seeded", seeded)):
                rate = _rate(lambda n, c=compiled, g=rng: c(n, g), draws, repeats)
                rows.append((name, scale, label, draws, rate, words))
            rate = _rate(lambda n, o=oracle: o(n, secure), draws, repeats)
            rows.append((name, scale, "numpy-oracle/secure", draws, rate, None))
            if opendp is not None:
                rate = _rate(opendp[name](scale), small_draws, 1)
                rows.append((name, scale, "opendp", small_draws, rate, None))
            rate = _rate(lambda n, s=scalar: s(n, secure), small_draws, 1)
            rows.append((name, scale, "scalar-reference", small_draws, rate, None))
    return rows


def format_table(rows: list[Row], sources: dict[str, Rate]) -> str:
    """Markdown tables: the samplers (ratio to numpy-inexact, CPU) and the raw sources."""
    yardstick = {(r[0], r[1]): r[4][1] for r in rows if r[2] == "numpy-inexact"}
    chacha = sources["ChaCha12 (default)"][1]
    lines = [
        "| sampler | scale | implementation | draws | samples/s (wall) | samples/s (CPU) "
        "| ratio to numpy-inexact (CPU) | words/sample | source limit (samples/s) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, scale, impl, n, (wall, cpu), words in rows:
        ratio = cpu / yardstick[(name, scale)]
        extra = f"{words:.3f} | {chacha / words:,.0f}" if words else " | "
        lines.append(
            f"| {name} | {scale} | {impl} | {n:,} | {wall:,.0f} | {cpu:,.0f} | {ratio:.3f}x "
            f"| {extra} |"
        )
    lines += ["", "| source | 64-bit words/s (wall) | words/s (CPU) |", "|---|---:|---:|"]
    lines += [f"| {name} | {wall:,.0f} | {cpu:,.0f} |" for name, (wall, cpu) in sources.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse options, run the benchmark, print the command and the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--draws",
        type=int,
        default=1_000_000,
        help="draws per measurement (default 10**6)",
    )
    parser.add_argument("--quick", action="store_true", help="10x fewer draws and a single repeat")
    args = parser.parse_args(argv)
    draws = args.draws // 10 if args.quick else args.draws
    small = max(1000, draws // 50)
    repeats = 1 if args.quick else 3
    print("command: python " + shlex.join(["benchmarks/bench_samplers.py", *sys.argv[1:]]))
    print(f"draws: {draws:,} (best of {repeats}); opendp and scalar draws: {small:,}")
    rows = run(draws, small, repeats)
    sources = run_sources(4 * draws, repeats)
    print(format_table(rows, sources))


if __name__ == "__main__":
    main()
