"""Score ``synth.Adaptive`` settings by the model's own 3-way TVD, without sampling (issue 25).

For each data set, seed and setting (``Adaptive`` keyword arguments, e.g. ``rounds=80`` or
``measure_share=4/5``), one fit at (epsilon, 1e-9); the line printed holds the model's exact
mean 3-way TVD to the data (its marginals, as ``adaptive_convergence`` scores them: no
sampling noise, so a setting's effect on the model is seen with 3 seeds), the rounds, the
fit's CPU seconds, and whether the ledger's total is rho exactly. A setting is tuned on
``acs nltcs adult`` and checked on the held-out ``acs-ma2019 acs-tx2019``.

Run from the repository root (``--data`` as in ``bench_synth``):

    python -m benchmarks.adaptive_settings --data acs acs-ma2019 --seeds 0 1 2 \\
        --set "" "rounds=80" "measure_share=4/5"
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from fractions import Fraction

from benchmarks.adaptive_convergence import _exact_tvd3
from benchmarks.bench_synth import DATASETS
from synth import Adaptive
from synth._domains import encode_records


def parse_setting(text: str) -> dict[str, object]:
    """``"rounds=80 measure_share=4/5"`` as keyword arguments (integers, else Fractions, else
    strings); ``""`` is the defaults.

    >>> parse_setting("rounds=80 measure_share=4/5")
    {'rounds': 80, 'measure_share': Fraction(4, 5)}
    """
    out: dict[str, object] = {}
    for item in text.split():
        name, _, value = item.partition("=")
        if not value:
            raise SystemExit(f"setting {item!r} must be name=value")
        try:
            out[name] = int(value)
        except ValueError:
            try:
                out[name] = Fraction(value)
            except ValueError:
                out[name] = value
    return out


def study(name: str, eps: float, seeds: Sequence[int], settings: Sequence[str]) -> None:
    """Print one line per (setting, seed) and the setting's mean over the seeds."""
    df, domains, _ = DATASETS[name]()
    for text in settings:
        kwargs = parse_setting(text)
        scores = []
        for seed in seeds:
            cpu = time.process_time()
            generator = Adaptive(eps, delta=1e-9, domains=domains, seed=seed, **kwargs).fit(df)  # type: ignore[arg-type]
            cpu = time.process_time() - cpu
            assert generator.model is not None
            codes = encode_records(df, domains, generator.ledger).codes
            tvd3 = _exact_tvd3(generator.model, codes, generator.model.sizes)
            scores.append(tvd3)
            exact = generator.ledger.total().rho == generator.rho  # type: ignore[union-attr]
            print(
                f"{name} [{text or 'defaults'}] seed {seed}: model tvd3 {tvd3:.5f}, "
                f"{len(generator.measured) - len(generator.columns)} rounds, {cpu:.1f} CPU s, "
                f"ledger total {'= rho' if exact else '!= rho'}",
                flush=True,
            )
        print(f"{name} [{text or 'defaults'}] mean model tvd3 {sum(scores) / len(scores):.5f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=["acs"], choices=list(DATASETS))
    parser.add_argument("--eps", type=float, default=1.0)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--set", nargs="+", default=[""], dest="settings")
    args = parser.parse_args(argv)
    for name in args.data:
        study(name, args.eps, args.seeds, args.settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
