"""The BLUE pass alone (``estimator="blue"``'s first pass and the inputs it feeds the passes) on
a PL94-shaped state under the 2020 production strategy, for before/after comparisons.

The state (``benchmarks/pl94.py``) is measured once with the preset ``census2020_pl94`` and the
state total invariant (seeded: every run measures the same), saved to a temporary file; then
each checkout named by ``--repo`` (default this one) runs the pass on it as ``release()`` does
(``prepare_inputs``, or where the checkout has them and the leaves are large, the leaf level by
chunks: ``prepare_blue_by_families`` and every chunk's fed inputs) in its own process, in turn,
``--repeat`` times (so each pair runs side by side under the same load).
Printed per run: wall and CPU seconds of the pass, the process's peak resident memory, and,
from the second checkout on, the largest difference of its BLUE cells from the first's
(relative to the largest cell of the level).

    python benchmarks/bench_blue.py --persons 750000 --threads 1 --repo /work/main .
    python benchmarks/bench_blue.py --persons 3000000 --threads 2 --repo /work/main .
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _measure(persons: int, out: Path) -> None:
    """Measure the state with the preset and pickle what the BLUE reads (this checkout's
    engine: the measurement step is the same in every checkout compared)."""
    sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("pl94", ROOT / "benchmarks" / "pl94.py")
    assert spec is not None and spec.loader is not None
    pl94 = importlib.util.module_from_spec(spec)
    sys.modules["pl94"] = pl94
    spec.loader.exec_module(pl94)
    from mechanisms.ledger import Ledger
    from mechanisms.rng import new_release_key
    from topdown.measurement.measure import measure
    from topdown.measurement.tree import build_tree
    from topdown.presets import census2020_pl94

    state = pl94.make_state(persons, 0)
    hierarchy = tuple(c for c in pl94.GEOGRAPHY if c != "TRACT_GROUP")
    schema, strategy = census2020_pl94(hierarchy)
    tree, truth = build_tree(state.records, schema, geography=state.geography)
    measurements, invariants = measure(
        tree,
        truth,
        schema.domain,
        strategy,
        release_key=new_release_key(1),
        ledger=Ledger(),
        constraints=pl94.state_total_invariant(),
    )
    with out.open("wb") as f:
        pickle.dump((tree, schema.domain, measurements, invariants), f, protocol=5)


def _run(saved: Path, threads: int, cells_out: Path) -> None:
    """In a child process whose ``sys.path`` starts with the checkout: time the pass as
    ``release()`` runs it: with the leaf level by chunks of families where the checkout has
    them (``prepare_blue_by_families``) and the leaves are over its bytes, then every chunk's
    fed inputs (``LeafFamilies.fed``, which the leaf level's passes read one after another;
    the passes themselves are not run), else the whole-tree ``prepare_inputs``."""
    import topdown.estimation.estimators as estimators

    _reset_peak()
    with saved.open("rb") as f:
        tree, domain, measurements, invariants = pickle.load(f)
    cpu, wall = time.process_time(), time.perf_counter()
    by_families = getattr(estimators, "prepare_blue_by_families", None)
    chunked = by_families(tree, domain, measurements, invariants) if by_families else None
    if chunked is not None:
        _, estimate, leaves, _ = chunked
        for i in range(len(leaves.chunks)):
            leaves.fed(i)
    else:
        _, estimate, _ = estimators.prepare_inputs(
            "blue", tree, domain, measurements, invariants, threads=threads
        )
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    peak = _peak_mib()
    assert estimate is not None
    np.savez(cells_out, *[estimate.cells_at(level) for level in range(estimate.n_levels)])
    print(f"{wall:.2f} {cpu:.2f} {peak:.0f}")


def _reset_peak() -> None:
    """Start this process's peak resident size afresh (Linux: ``clear_refs`` 5). A child
    started by fork and exec otherwise reports at least its parent's size at the fork, and
    the parent grows as it reads the runs' cells (3.1 GB at 3,000,000 persons)."""
    # not Linux, or not allowed: ``_peak_mib`` reads ru_maxrss, which may include the parent's
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _peak_mib() -> float:
    """This process's peak resident size since ``_reset_peak`` (``VmHWM``), in MiB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _difference(a: Path, b: Path) -> float:
    """The largest difference of two runs' cells, relative to each level's largest cell."""
    x, y = np.load(a), np.load(b)
    return max(
        float(np.abs(x[k] - y[k]).max() / max(1.0, float(np.abs(x[k]).max()))) for k in x.files
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=750_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--repo", nargs="+", default=[str(ROOT)], help="checkouts, in turn")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.path.insert(0, str(Path(args.child[0]).resolve()))
        _run(Path(args.child[1]), args.threads, Path(args.child[2]))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench_blue_") as tmp:
        saved = Path(tmp) / "measured.pkl"
        _measure(args.persons, saved)
        print(f"# {args.persons} persons, threads {args.threads}")
        print("round repo wall_s cpu_s peak_MiB max_rel_diff_vs_first load")
        for round_ in range(args.repeat):
            first: Path | None = None
            for i, repo in enumerate(args.repo):
                cells = Path(tmp) / f"cells{i}.npz"
                child = [sys.executable, __file__, "--threads", str(args.threads)]
                child += ["--child", repo, str(saved), str(cells)]
                env = {**os.environ, "PYTHONPATH": str(Path(repo).resolve())}
                out = subprocess.run(child, capture_output=True, text=True, env=env, check=True)
                wall, cpu, peak = out.stdout.split()[-3:]
                diff = "" if first is None else f"{_difference(first, cells):.1e}"
                first = first or cells
                load = os.getloadavg()[0]
                print(f"{round_} {repo} {wall} {cpu} {peak} {diff or '-'} {load:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
