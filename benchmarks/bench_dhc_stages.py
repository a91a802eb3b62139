"""Where the DHC preset's tract error comes from, stage by stage, under each estimator.

Issue 31's question: why ``"blue"`` was worse than ``"topdown"`` at the tracts on two marginals
of ``topdown.presets.census2020_dhcp`` (``benchmarks/bench_dhc.py --compare-estimators``). One
seed's state (``benchmarks/dhc.py``, STATE > COUNTY > TRACT, as ``bench_dhc.py --strategy
preset``), released under both estimators from the same measurements; then the estimation
passes are run again from each release's inputs (``topdown.estimation.estimate``) to read the
L2 answers before the rounding, and:

1. per query, the mean absolute error at the root and at the tracts of the raw measurements,
   the folded raw root (``"topdown"``'s root input: its only children's measurements pooled),
   the BLUE (``Release.blue``), each estimator's L2 answer and its released counts;
2. the tract level of each estimator estimated under the other's published root (``fixed``):
   whether its counts equal the other's (then the two differ at the tracts only through the
   counts above them: tests/test_blue_leaf_families.py);
3. the released root and tracts with the root rounded along its nested marginals
   (``EstimateOptions.nested_root_rounding``) from the same L2 answers.

Run from the repository root (about 8 CPU minutes at 20,000 persons):

    python benchmarks/bench_dhc_stages.py [--persons 20000] [--seed 0]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import topdown.estimation.batched.chunk_tasks as chunk_tasks  # noqa: E402
import topdown.estimation.batched.level as batched_level  # noqa: E402
from benchmarks.bench_dhc import PRESET_HIERARCHY, _preset  # noqa: E402
from benchmarks.dhc import make_dhc_state  # noqa: E402
from topdown import release  # noqa: E402
from topdown.blue.estimate import blue_inputs  # noqa: E402
from topdown.estimation.estimate import estimate  # noqa: E402
from topdown.estimation.estimators import fold_only_children  # noqa: E402
from topdown.estimation.passes import EstimateOptions  # noqa: E402
from topdown.estimation.root_total import decide, with_root_total  # noqa: E402
from topdown.measurement.estimator_inputs import as_inputs  # noqa: E402

ESTIMATORS = ("topdown", "blue")


class _L2Recorder:
    """Records the root's and the tract families' L2 answers as the passes round them."""

    def __init__(self) -> None:
        self.root: np.ndarray | None = None
        self.chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._root_round = batched_level.root_round
        self._round_chunk = chunk_tasks.round_chunk

    def __enter__(self) -> _L2Recorder:
        def root_round(x, *args, **kwargs):  # type: ignore[no-untyped-def]
            self.root = np.array(x)
            return self._root_round(x, *args, **kwargs)

        def round_chunk(x, p, cells, controlled=True):  # type: ignore[no-untyped-def]
            self.chunks.append((np.array(x), np.array(cells), np.array(p)))
            return self._round_chunk(x, p, cells, controlled)

        batched_level.root_round = root_round
        chunk_tasks.round_chunk = round_chunk
        return self

    def __exit__(self, *exc: object) -> None:
        batched_level.root_round = self._root_round
        chunk_tasks.round_chunk = self._round_chunk

    def leaves(self, nodes: int, cells: int) -> np.ndarray:
        """The tract families' L2 answers as (tracts, cells)."""
        out = np.zeros((nodes, cells))
        for x, where, p in self.chunks:
            for q in range(x.shape[0]):
                on = p[q] > 0
                out[:, where[q][on]] = x[q][:, on]
        return out


def _passes(rel, estimator: str, fixed=(), nested: bool = False):  # type: ignore[no-untyped-def]
    """The passes again from ``rel``'s measurements (and BLUE): counts, root L2, tracts' L2."""
    tree, domain = rel.tree, rel.schema.domain
    if estimator == "topdown":
        inputs = fold_only_children(tree, as_inputs(rel.measurements))
    else:
        inputs = blue_inputs(rel.measurements, rel.blue, {})
    held = decide(estimator, tree, domain, rel.blue, None, {})
    first = {i: ls.first_pass for i, ls in enumerate(rel.strategy.levels)}
    with _L2Recorder() as seen:
        counts, _ = estimate(
            tree,
            domain,
            inputs,
            first_pass=first,
            invariants=with_root_total({}, held),
            options=EstimateOptions(nested_root_rounding=nested),
            fixed=fixed,
        )
    return counts, seen.root, seen.leaves(tree.levels[-1].size, domain.size)


def _mae(values: np.ndarray, truth: np.ndarray) -> float:
    return float(np.abs(np.asarray(values, dtype=float) - truth).mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    state = make_dhc_state(args.persons, args.seed)
    schema, strategy = _preset("preset")
    domain = schema.domain
    geography = state.geography[list(PRESET_HIERARCHY)].drop_duplicates().reset_index(drop=True)
    rels = {}
    for name in ESTIMATORS:
        cpu = time.process_time()
        rels[name] = release(
            state.records, schema, strategy, seed=args.seed, geography=geography, estimator=name
        )
        print(f"{name}: released, {time.process_time() - cpu:.1f} CPU s", flush=True)
    tree = rels["blue"].tree
    last = tree.n_levels - 1
    truth = []
    cells = schema.encode_cells(state.records)
    for level, lv in enumerate(tree.levels):
        node = np.zeros(cells.size, dtype=np.int64)
        if level:
            column = state.records[PRESET_HIERARCHY[level - 1]].astype(str).to_numpy()
            node = np.searchsorted(lv.labels.astype(str), column)
        counts = np.zeros((lv.size, domain.size), dtype=np.int64)
        np.add.at(counts, (node, cells), 1)
        truth.append(counts)
    runs = {name: _passes(rels[name], name) for name in ESTIMATORS}
    nested = {name: _passes(rels[name], name, nested=True) for name in ESTIMATORS}
    for name in ESTIMATORS:
        pairs = zip(runs[name][0], rels[name].counts, strict=True)
        same = all(np.array_equal(a, b) for a, b in pairs)
        print(f"{name}: the passes run again give the released counts: {same}")
    for name, other in (("topdown", "blue"), ("blue", "topdown")):
        swapped = _passes(rels[name], name, fixed=rels[other].counts[:last])[0][last]
        same = np.array_equal(swapped, rels[other].counts[last])
        print(f"{name}'s tracts under {other}'s published counts above equal {other}'s: {same}")
    folded = fold_only_children(tree, as_inputs(rels["topdown"].measurements))
    queries = [q for q, _ in strategy.levels[-1].queries]
    for level in (0, last):
        print(f"\nlevel {level} ({tree.levels[level].size} nodes): mean absolute error")
        head = ["raw", "folded", "BLUE"] + [
            f"{s} {e[:2]}" for s in ("L2", "released", "nested") for e in ESTIMATORS
        ]
        print(f"{'query':<44}" + "".join(f"{h:>9}" for h in head))
        blue_cells = rels["blue"].blue.cells_at(level)
        for q in queries:
            true = q.answer(truth[level], domain)
            pooled = folded.get(level, q.name)
            row = [
                rels["topdown"].measurements.get(level, q.name).noisy,
                pooled.noisy if pooled is not None else np.full(true.shape, np.nan),
                q.answer(blue_cells, domain),
            ]
            for e in ESTIMATORS:
                l2 = runs[e][1][None, :] if level == 0 else runs[e][2]
                row.append(q.answer(l2, domain))
            row += [q.answer(runs[e][0][level].astype(np.int64), domain) for e in ESTIMATORS]
            row += [q.answer(nested[e][0][level].astype(np.int64), domain) for e in ESTIMATORS]
            print(f"{q.name[:44]:<44}" + "".join(f"{_mae(v, true):>9.3f}" for v in row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
