"""Is ``synth.Adaptive``'s model fit converged, and does more fitting help (issue 25)?

One fit per data set at (epsilon, 1e-9) and a seed with ``final_iters=0`` (the rounds only;
the same seed makes the same selections whatever the final fit does), then final fits of K
mirror-descent iterations warm-started from the last round's model, as ``fit`` runs them. For
each K it prints the objective (``fit_model``'s loss, in units of the noise variance) and the
model's exact mean 3-way TVD to the data (its marginals, not a sample's: no sampling noise).
The per-round fits' convergence is summarised by the objective's relative fall over their
last 10 iterations, read from ``fit_model``'s debug log.

Run from the repository root (``--data`` as in ``bench_synth``):

    python -m benchmarks.adaptive_convergence --data acs adult --iters 100 --final 500 1000
"""

from __future__ import annotations

import argparse
import itertools
import logging
import time
from collections.abc import Sequence

import numpy as np

import synth.adaptive as adaptive_module
from benchmarks.bench_synth import DATASETS
from synth._domains import encode_records
from synth._estimate import histogram
from synth.graphical import GraphicalModel, estimation

_ITERATION = "fit_model: iteration"


class _Losses(logging.Handler):
    """Collects the loss ``fit_model`` logs after each kept step."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.values: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, str) and record.msg.startswith(_ITERATION):
            self.values.append(float(record.args[1]))  # type: ignore[index]


def _exact_tvd3(model: GraphicalModel, codes: np.ndarray, sizes: Sequence[int]) -> float:
    """Mean over all 3-way marginals of the total variation between model and data."""
    n = codes.shape[0]
    return float(
        np.mean(
            [
                0.5 * np.abs(model.probability(t) - histogram(codes, sizes, t) / n).sum()
                for t in itertools.combinations(range(len(sizes)), 3)
            ]
        )
    )


def study(name: str, eps: float, seed: int, iters: int, finals: Sequence[int]) -> None:
    """Print the rounds' convergence and, for each K in ``finals``, the final fit's figures."""
    losses = _Losses()
    estimation.logger.addHandler(losses)
    previous_level = estimation.logger.level
    estimation.logger.setLevel(logging.DEBUG)
    fits: list[tuple[list, tuple[int, ...], GraphicalModel, list[float]]] = []
    original = adaptive_module.fit_model

    def recording(measurements, sizes, **kwargs):  # type: ignore[no-untyped-def]
        losses.values.clear()
        model = original(measurements, sizes, **kwargs)
        fits.append((list(measurements), tuple(sizes), model, list(losses.values)))
        return model

    adaptive_module.fit_model = recording  # type: ignore[assignment]
    try:
        df, domains, _ = DATASETS[name]()
        cpu = time.process_time()
        generator = adaptive_module.Adaptive(
            eps, delta=1e-9, domains=domains, seed=seed, iters=iters, final_iters=0
        ).fit(df)
        cpu = time.process_time() - cpu
    finally:
        adaptive_module.fit_model = original
    codes = encode_records(df, domains, generator.ledger).codes
    falls = [(v[-11] - v[-1]) / abs(v[-1]) for _, _, _, v in fits[1:] if len(v) > 10]
    measurements, sizes, last, _ = fits[-1]
    print(
        f"{name} eps {eps} seed {seed} iters {iters}: {len(fits)} fits, {cpu:.1f} CPU s; "
        f"round fits' loss fall over their last 10 iterations: median {np.median(falls):.2e}, "
        f"max {np.max(falls):.2e}; rounds' model tvd3 {_exact_tvd3(last, codes, sizes):.5f}"
    )
    try:
        for k in finals:
            losses.values.clear()
            cpu = time.process_time()
            model = estimation.fit_model(measurements, sizes, iters=k, warm_start=last)
            cpu = time.process_time() - cpu
            loss = losses.values[-1] if losses.values else float("nan")
            tvd3 = _exact_tvd3(model, codes, sizes)
            print(f"  final_iters {k:5d}: loss {loss:.6g}, model tvd3 {tvd3:.5f}, {cpu:.1f} CPU s")
    finally:
        estimation.logger.removeHandler(losses)
        estimation.logger.setLevel(previous_level)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=["acs", "adult"], choices=list(DATASETS))
    parser.add_argument("--eps", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--iters", type=int, default=100, help="per-round iterations")
    parser.add_argument("--final", nargs="+", type=int, default=[500, 1000, 2000, 4000])
    args = parser.parse_args(argv)
    for name in args.data:
        study(name, args.eps, args.seed, args.iters, args.final)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
