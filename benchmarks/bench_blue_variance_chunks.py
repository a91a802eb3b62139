"""The memory of the recoded BLUE's query variances over a level's many ``k x k`` covariances,
contracted whole or a chunk of matrices at a time (``topdown.blue.variance_terms.CHUNK_BYTES``).

Under ``estimator="blue"`` the passes are fed, per level and query, the variance of the
query's answers (``Blue.variance``: ``mean_variance`` over the blocks), read from the level's
covariances: a ``(types, k, k)`` stack per block, in a file (``topdown.blue.mapped_stacks``).
At the stream level of a streamed release every node is nearly its own type (51 tract types
at 100,000 DHC persons to the block; 318 at 750,000), and a streamed run's parent peaked
there. This script makes such stacks for the DHC persons preset's blocks (random symmetric
matrices of the blocks' sizes: the numbers do not change the work) and asks the variances of
every query of the preset, each setting in a fresh process, side by side:

- ``whole``: one chunk (``CHUNK_BYTES`` above every stack: the contraction before chunks);
- ``chunks``: the default ``CHUNK_BYTES``.

It prints the resident memory the variances added to the stacks' (the peak, reset before
them), their CPU seconds, and the largest relative difference of the two settings' variances.

    python benchmarks/bench_blue_variance_chunks.py --types 11 51
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

from topdown.blue import variance_terms
from topdown.blue.blocks import blocks_of
from topdown.blue.mapped_stacks import MadeStack, MappedStacks, hand_back
from topdown.blue.shared_matrices import SharedMatrices
from topdown.blue.variance_terms import mean_variance
from topdown.presets import census2020_dhcp
from topdown.strategy import Query

SETTINGS = {"whole": 1 << 62, "chunks": variance_terms.CHUNK_BYTES}


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _one(types: int, setting: str, seed: int) -> dict:
    """In this process: the stacks made, then every query's variance under ``setting``."""
    variance_terms.CHUNK_BYTES = SETTINGS[setting]
    schema, strategy = census2020_dhcp()
    domain = schema.domain
    queries = list(dict.fromkeys(q for lv in strategy.levels for q, _ in lv.queries))
    blocks = [b for b in blocks_of(domain, queries) if b.k > 1]
    rng = np.random.default_rng(seed)
    out: list[float] = []
    with MappedStacks.opened() as maps:
        terms = []
        for block in blocks:
            stack = MadeStack((types, block.k, block.k), maps=maps)
            for t in range(types):
                a = rng.standard_normal((block.k, block.k)) / block.k
                stack.put(t, a + a.T)
            values = stack.done()
            hand_back(values)
            terms.append((block, SharedMatrices(values, np.arange(types))))
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak resident memory from here
        before = _rss_kib("VmRSS")
        cpu = time.process_time()
        for q in [Query.parse("detailed"), Query.parse("total"), *queries]:
            mean, size = mean_variance(terms, q.factors(domain))
            out.extend(mean.tolist() + size.tolist())
        cpu = time.process_time() - cpu
        peak = _rss_kib("VmHWM")
    return {
        "added_mib": (peak - before) / 1024,
        "stacks_mib": sum(t[1].values.nbytes for t in terms) / 2**20,
        "cpu_s": cpu,
        "values": out,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", type=int, nargs="+", default=[11, 51])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # types, setting: a child
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(_one(int(args.one[0]), args.one[1], args.seed)))
        return 0
    print("# python benchmarks/bench_blue_variance_chunks.py " + " ".join(sys.argv[1:]))
    print(f"{'types':>6} {'setting':<8} {'stacks MiB':>11} {'added MiB':>10} {'CPU s':>7}")
    for types in args.types:
        got = {}
        for setting in SETTINGS:
            run = subprocess.run(
                [sys.executable, __file__, "--one", str(types), setting, "--seed", str(args.seed)],
                check=True,
                capture_output=True,
                text=True,
            )
            got[setting] = json.loads(run.stdout)
            r = got[setting]
            print(
                f"{types:>6} {setting:<8} {r['stacks_mib']:>11,.0f} {r['added_mib']:>10,.0f}"
                f" {r['cpu_s']:>7.1f}",
                flush=True,
            )
        a, b = (np.array(got[s]["values"]) for s in SETTINGS)
        diff = np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-300))
        print(f"{types:>6} largest relative difference of the variances: {diff:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
