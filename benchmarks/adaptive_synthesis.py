"""How much error does synthesis add to ``synth.Adaptive``'s model, i.i.d. or rounded (issue 25)?

One fit per data set and seed at (epsilon, 1e-9); then the model's exact mean 3-way TVD to the
data (its own marginals: no synthesis), and the mean 3-way TVD of its records drawn i.i.d.
(``sample(method="iid")``) and by rounded counts (``sample(method="rounded")``), each from a
copy of the generator as the fit left it (so the i.i.d. records are ``bench_synth``'s), as
many as the model's noisy total. The gap between a synthesis's figure and the exact one is
what the synthesis costs; CPU seconds of each synthesis are this process's, side by side.

Run from the repository root (``--data`` as in ``bench_synth``):

    python -m benchmarks.adaptive_synthesis --data acs nltcs adult --seeds 0
"""

from __future__ import annotations

import argparse
import copy
import time

from benchmarks.adaptive_convergence import _exact_tvd3
from benchmarks.bench_synth import DATASETS
from mechanisms.ledger import Ledger
from synth import Adaptive
from synth._domains import encode_records
from synth.metrics import marginal_tvd


def study(name: str, eps: float, seed: int) -> dict[str, float]:
    """The exact and the two syntheses' mean 3-way TVD, and each synthesis's CPU seconds."""
    real, domains, _ = DATASETS[name]()
    generator = Adaptive(eps, delta=1e-9, domains=domains, seed=seed).fit(real)
    assert generator.model is not None
    records = encode_records(real, generator.domains, Ledger())
    out = {"exact": _exact_tvd3(generator.model, records.codes, records.sizes)}
    for method in ("iid", "rounded"):
        cpu = time.process_time()
        synthetic = copy.deepcopy(generator).sample(method=method)
        out[f"{method}_cpu_s"] = time.process_time() - cpu
        out[method] = float(marginal_tvd(real, synthetic, 3).loc[3, "mean"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", nargs="+", default=["acs", "nltcs", "adult"], choices=list(DATASETS)
    )
    parser.add_argument("--eps", type=float, default=1.0)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    args = parser.parse_args(argv)
    print(
        "data seed exact_tvd3 iid_tvd3 rounded_tvd3 rounded_share_of_gap_removed "
        "iid_cpu_s rounded_cpu_s"
    )
    for name in args.data:
        for seed in args.seeds:
            r = study(name, args.eps, seed)
            removed = (r["iid"] - r["rounded"]) / (r["iid"] - r["exact"])
            print(
                f"{name} {seed} {r['exact']:.5f} {r['iid']:.5f} {r['rounded']:.5f} "
                f"{removed:.2f} {r['iid_cpu_s']:.3f} {r['rounded_cpu_s']:.3f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
