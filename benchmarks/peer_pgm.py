"""Run private-pgm's own AIM (McKenna et al., VLDB 2022) on a CSV and write the synthetic CSV:
the AIM peer of benchmarks/bench_synth.py.

This script imports nothing from the project and copies nothing from private-pgm: it runs under
the peer interpreter (/work/venv-peer/bin/python, which has ``mbi`` 1.1.0, the JAX rewrite of
private-pgm) and imports the mechanism from a checkout of private-pgm's ``mechanisms`` folder
(``aim.py``, ``mechanism.py``, ``cdp2adp.py``; the package does not ship them), given by
``--mechanisms``. smartnoise-synth 1.0.8's AIM is its own port on the same ``mbi`` (it took
more than 21 minutes for one NLTCS fit); this is the authors' own mechanism, unchanged.

Settings (the published ones): the workload is every 3-way marginal with at most
``--max-cells`` (10,000, the script's default) cells, each weighted 1; delta 1e-9 (passed by
the caller); ``max_model_size`` 80 MB and ``max_iters`` 1000 (the defaults of aim.py, which
its docstring asks to keep "for any official comparisons"); rounds 16 d (AIM's default).
Records are i.i.d. draws from the fitted model (``synthetic_data(method="sample")``), as many
as the real data's rows (what the smartnoise peer did); ``--round-target`` also writes the
same model's records by private-pgm's default synthesis (``method="round"``). Every column's
values come from the domain file (declared values in order), coded 0..k-1 for mbi and decoded
back.

Two versions of private-pgm run here, the same AIM algorithm: the JAX rewrite (``mbi`` 1.1.0,
``mechanisms`` at commit 4d2b3c5) and the numpy version before it (the repository at commit
514dea3, Nov 2024, installed with its ``mechanisms`` folder beside ``src``; its environment
needs pandas < 2.2 for ``synthetic_data``'s ``groupby``, numpy < 2 and autodp). On this
2-core machine the JAX version spends most of a fit compiling (a new XLA program for each new
clique and array shape): the NLTCS fit took 2,478 CPU-s and a 5,949 MiB peak there, against
1,288 CPU-s and 158 MiB in the numpy version. The numpy version measures with hdmm's
``Identity``; hdmm is not on the package index, so a stand-in gives the same identity map
(below).

aim.py and cdp2adp.py print progress; it goes to stderr so stdout's last line is the JSON of
this fit's wall seconds, CPU seconds (all threads of this process) and peak resident memory.

    /work/venv-peer/bin/python benchmarks/peer_pgm.py aim 1.0 1e-9 in.csv domains.json out.csv \\
        --seed 0 --mechanisms /work/peer-src/private-pgm/mechanisms
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import json
import math
import resource
import sys
import time
import types
from pathlib import Path

import numpy as np
import pandas as pd


def _decode(synthetic: pd.DataFrame, values: dict, columns: list) -> pd.DataFrame:
    """mbi's codes 0..k-1 back to the domain file's values."""
    return pd.DataFrame(
        {c: np.asarray(values[c], dtype=object)[synthetic[c].to_numpy()] for c in columns}
    )


def _import_aim(mechanisms: str) -> type:
    """private-pgm's AIM class from its ``mechanisms`` folder.

    cdp2adp.py imports matplotlib.pyplot at module level but only uses it in plotting helpers
    that AIM never calls; the peer environment has no matplotlib, so an empty stand-in module
    satisfies the import (AIM's accounting, ``cdp_rho``, is pure ``math``).
    """
    sys.path.insert(0, mechanisms)
    # the numpy private-pgm's mechanism.py imports ``mechanisms.cdp2adp`` as a package
    sys.path.insert(1, str(Path(mechanisms).resolve().parent))
    try:
        import hdmm.matrix  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        # the numpy private-pgm's aim.py measures with hdmm's ``Identity(n)``, an n x n
        # identity operator; mbi itself uses ``scipy.sparse.eye(n)`` when a measurement's
        # matrix is None, so that is the stand-in (the same linear map)
        from scipy import sparse

        hdmm = types.ModuleType("hdmm")
        matrix = types.ModuleType("hdmm.matrix")
        matrix.Identity = lambda n: sparse.eye(n, format="csr")  # type: ignore[attr-defined]
        hdmm.matrix = matrix  # type: ignore[attr-defined]
        sys.modules["hdmm"], sys.modules["hdmm.matrix"] = hdmm, matrix
    if "matplotlib" not in sys.modules:
        stand_in = types.ModuleType("matplotlib")
        stand_in.pyplot = types.ModuleType("matplotlib.pyplot")  # type: ignore[attr-defined]
        sys.modules["matplotlib"] = stand_in
        sys.modules["matplotlib.pyplot"] = stand_in.pyplot  # type: ignore[attr-defined]
    from aim import AIM  # type: ignore[import-not-found]

    return AIM


def _log_rounds() -> None:
    """Progress for the numpy mbi, whose aim.py prints nothing per round: one stderr line per
    model fit (AIM fits once after the one-way marginals, then once per round). It wraps
    ``FactoredInference.estimate`` and changes nothing it computes."""
    from mbi import FactoredInference

    fit = FactoredInference.estimate
    count = itertools.count()
    start = time.process_time()

    def logged(self: object, measurements: list, *args: object, **kwargs: object) -> object:
        n = next(count)
        cliques = len({m[3] for m in measurements})
        print(
            f"Measuring fit {n}: {len(measurements)} measurements, {cliques} cliques, "
            f"{time.process_time() - start:.1f} CPU-s",
            file=sys.stderr,
            flush=True,
        )
        return fit(self, measurements, *args, **kwargs)

    FactoredInference.estimate = logged  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method", choices=["aim"])
    parser.add_argument("epsilon", type=float)
    parser.add_argument("delta", type=float)
    parser.add_argument("source")
    parser.add_argument("domains", help="JSON: column -> list of its values (as strings)")
    parser.add_argument("target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mechanisms", required=True, help="private-pgm's mechanisms folder")
    parser.add_argument("--degree", type=int, default=3)
    parser.add_argument("--max-cells", type=int, default=10_000)
    parser.add_argument("--max-model-size", type=float, default=80.0)
    parser.add_argument("--max-iters", type=int, default=1000)
    parser.add_argument(
        "--round-target",
        help="also write the model's records by private-pgm's default synthesis "
        "(method='round': each conditional's counts rounded, not drawn) to this CSV",
    )
    args = parser.parse_args(argv)

    aim_class = _import_aim(args.mechanisms)
    from mbi import Dataset, Domain

    frame = pd.read_csv(args.source, dtype=str, keep_default_na=False)
    with open(args.domains, encoding="utf-8") as handle:
        values: dict[str, list[str]] = json.load(handle)
    columns = list(frame.columns)
    codes = {}
    for column in columns:
        index = {v: i for i, v in enumerate(values[column])}
        codes[column] = frame[column].map(index).to_numpy()
        if np.isnan(codes[column].astype(float)).any():
            raise ValueError(f"column {column!r} has values outside its domain file's list")
        codes[column] = codes[column].astype(np.int64)
    domain = Domain(columns, [len(values[c]) for c in columns])
    # mbi 1.1.0 (JAX) takes a dict of code arrays; the numpy mbi (before the JAX rewrite,
    # which has ``FactoredInference``) a DataFrame
    numpy_mbi = hasattr(importlib.import_module("mbi"), "FactoredInference")
    data = Dataset(pd.DataFrame(codes) if numpy_mbi else codes, domain)
    workload = [
        (cl, 1.0)
        for cl in itertools.combinations(columns, args.degree)
        if math.prod(domain.size(c) for c in cl) <= args.max_cells
    ]

    if numpy_mbi:
        _log_rounds()
    np.random.seed(args.seed)  # aim.py and mbi draw from NumPy's global generator
    start, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(sys.stderr):
        mechanism = aim_class(
            args.epsilon,
            args.delta,
            max_model_size=args.max_model_size,
            max_iters=args.max_iters,
        )
        model, _ = mechanism.run(data, workload, num_synth_rows=1)
        synthetic = model.synthetic_data(rows=len(frame), method="sample").df
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    _decode(synthetic, values, columns).to_csv(args.target, index=False)
    if args.round_target:
        # after the i.i.d. draw, so the i.i.d. records are those a run without it writes
        rounded = model.synthetic_data(rows=len(frame), method="round").df
        _decode(rounded, values, columns).to_csv(args.round_target, index=False)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report = {
        "seconds": seconds,
        "cpu_s": cpu,
        "peak_mib": peak,
        "workload": len(workload),
        "epsilon": args.epsilon,
        "delta": args.delta,
        "seed": args.seed,
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
