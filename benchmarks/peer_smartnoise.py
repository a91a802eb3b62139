"""Run smartnoise-synth's MST or AIM on a CSV and write the synthetic CSV (the peer for
benchmarks/bench_synth.py).

This script imports nothing from the project: it runs under the interpreter that has
smartnoise-synth (a separate virtual environment, so the project's dependencies do not
change), called by bench_synth.py with ``--peer-python``. Every column is treated as
categorical (as strings). Records are drawn i.i.d. from the fitted model (Private-PGM's
``synthetic_data(method="sample")``): the installed smartnoise-synth's ``sample()`` has no
``method`` argument and always uses the rounding sampler, which inflates joint errors, so
:func:`_sample` repeats its three decoding steps with the i.i.d. sampler (the peer's
attributes, read-only).

AIM runs with the 3-way workload of the AIM paper (``degree=3``; smartnoise-synth's default is
2-way), so it targets the benchmark's 3-way TVD as the project's Adaptive does; its other
settings (delta 1e-9, max_model_size 80 MB, max_cells 10,000) are the package's defaults.

The optional fifth argument seeds NumPy's global generator (which the peer's noise and
sampling draw from). The last line of stdout is the JSON of this fit's wall seconds, CPU
seconds (all threads of this process) and peak resident memory in MiB.

    /work/venv-peer/bin/python benchmarks/peer_smartnoise.py mst 1.0 in.csv out.csv [SEED]
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any

import numpy as np
import pandas as pd
from snsynth import Synthesizer


def _sample(synth: Any, method: str, rows: int, columns: list[str]) -> pd.DataFrame:
    """``rows`` records drawn i.i.d. from the peer's fitted model, decoded as its sample()."""
    data = synth.synthesizer.synthetic_data(rows=rows, method="sample")
    if method == "mst":
        data = synth.undo_compress_fn(data)
        frame = data.df
    else:
        width = synth._transformer.output_width
        frame = data.df[["col" + str(i) for i in range(width)]]
    records = [tuple(t[1:]) for t in frame.itertuples()]
    return pd.DataFrame(
        synth._transformer.inverse_transform(records),
        columns=columns,
    )


def main(argv: list[str]) -> int:
    method, eps, source, target = argv[:4]
    if len(argv) > 4:
        np.random.seed(int(argv[4]))
    df = pd.read_csv(source, dtype=str, keep_default_na=False)
    start, cpu = time.perf_counter(), time.process_time()
    options = {"degree": 3} if method == "aim" else {}
    synth = Synthesizer.create(method, epsilon=float(eps), **options)
    synth.fit(df, preprocessor_eps=0.0, categorical_columns=list(df.columns))
    out = _sample(synth, method, len(df), list(df.columns))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    out.to_csv(target, index=False)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "cpu_s": cpu, "peak_mib": peak}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
