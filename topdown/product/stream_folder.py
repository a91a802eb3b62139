"""The release folder of a streamed release: written by ``topdown run`` with ``[executor]
stream_by`` (or ``--stream-by``), verified by ``topdown check`` one subtree at a time.

Contents (``manifest.json`` lists every file with its size and SHA-256)::

    tables/level_<k>_<column>/<part>.parquet        per level, long format (node, attributes,
                                                    count): part ``top`` for the levels down to
                                                    the stream level, one part per subtree below
    measurements/level_<k>_<column>/<part>.parquet  the noisy measurements, parted the same way:
                                                    one row per node and query (node, query,
                                                    variance, the noisy answers as a list;
                                                    ``topdown.streaming.measurements``)
    microdata/<subtree>.parquet | .csv              synthetic records of each subtree's leaves
    ledger.json                                     privacy ledger with its summary, as unstreamed
    invariants.json                                 values published exactly, per node
    config.json                                     the resolved configuration (and the seed)
    hierarchy.parquet                               level, column, node, parent: the public tree
    solver_stats.csv                                estimation statistics per level
    subtrees.csv                                    per subtree: nodes per lower level, records
    report.html                                     the report (``topdown.product.stream_report``)
    manifest.json                                   format ``topdown-release-streamed/2``, files,
                                                    the stream column, versions

No timings: they grow with the true number of records (a side channel); ``topdown run
--diagnostics DIR`` writes them outside the folder.

Everything is written into the run's hidden folder and moved into place when complete (the
subtrees' parts by ``topdown.streaming.run``, the rest here). Checks and the report need no
confidential data and hold at most one subtree's part in memory. No accuracy metrics: a streamed
run keeps no truth.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mechanisms.ledger import Ledger
from topdown.errors import ReleaseError
from topdown.estimation.passes import solve_seconds
from topdown.measurement.measure import Measurements
from topdown.measurement.tree import Level, Tree
from topdown.outputs.microdata import write_table
from topdown.product.config import RunConfig
from topdown.product.release_folder import (
    Loaded,
    Verdict,
    folder_config,
    hierarchy_frame,
    noise_config_value,
    read_invariants,
    verify_folder,
    write_invariants,
)
from topdown.product.stream_report import build_streamed_report
from topdown.streaming.result import StreamedRelease, dense_counts, table_dir
from topdown.support.writing import write_text

__all__ = ["FORMAT", "is_streamed_folder", "write_streamed_extras", "verify_streamed_folder"]

#: 2: measurement parts, invariants.json, the ledger's estimation note (estimator "blue")
FORMAT = "topdown-release-streamed/2"


def is_streamed_folder(folder: Path) -> bool:
    """Whether ``folder``'s manifest says it holds a streamed release (of any format version:
    ``verify_streamed_folder`` refuses an older one with a message that says so)."""
    path = Path(folder) / "manifest.json"
    try:
        found = json.loads(path.read_text()).get("format")
        return isinstance(found, str) and found.startswith(FORMAT.rsplit("/", 1)[0] + "/")
    except (OSError, ValueError, AttributeError):
        return False


def write_streamed_extras(
    rel: StreamedRelease,
    cfg: RunConfig,
    folder: Path,
    timings: dict[str, float],
    *,
    name: str | None = None,
) -> None:
    """Add the configuration, the tree, the ledger's summary, the invariants' values, the
    solver and subtree statistics, the report and the manifest to the folder ``rel`` was
    written into (before it is moved into place; ``name``: the final folder's, for the
    report's title).

    ``timings`` receives the run's and the subtrees' seconds (``subtree LABEL: phase``) and
    the report's; none of them goes into the folder (timings grow with the true number of
    records: a side channel), the caller keeps them as diagnostics."""
    folder = Path(folder)
    top = rel.top_release()
    config = dict(cfg.resolved(), seed=noise_config_value(top))
    # every file through a writer whose errors name it (a full disk, say, as much as a write
    # error reports it, has no file name of its own)
    write_text(folder / "config.json", json.dumps(config, indent=1))
    write_table(hierarchy_frame(rel.tree), folder / "hierarchy.parquet")
    write_table(pd.DataFrame([s.to_dict() for s in rel.stats]), folder / "solver_stats.csv")
    # ledger.json: written complete (with its summary) by topdown.streaming.run
    write_invariants(folder, rel.tree, rel.invariants)
    write_table(_subtree_frame(rel), folder / "subtrees.csv")
    timings.update({k: v for k, v in rel.timings.items() if k not in timings})
    timings.update(solve_seconds(rel.stats))
    for r in rel.subtrees:
        timings.update({f"subtree {r.label}: {k}": v for k, v in sorted(r.timings.items())})
    start = time.perf_counter()
    build_streamed_report(folder, name=name)
    timings["report"] = time.perf_counter() - start
    files = {
        p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
    manifest = {
        "format": FORMAT,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config_file": cfg.file,
        "stream_by": rel.tree.levels[rel.stream_level].column,
        "noise": rel.ledger.noise.describe() if rel.ledger.noise else "not recorded",
        "files": files,
        "versions": {"python": platform.python_version(), "numpy": np.__version__},
    }
    write_text(folder / "manifest.json", json.dumps(manifest, indent=1))


def verify_streamed_folder(folder: Path) -> Verdict:
    """Re-verify a streamed folder: the manifest, then the release itself (non-negative
    integers, children summing to their parent at every level, constraints above the stream
    level, the measurement parts, microdata equal to the leaf tables, the ledger's total and
    its estimation note: the root total recomputed from the published measurements), one
    subtree at a time. The steps every check shares are ``verify_folder``'s."""
    return verify_folder(folder, _load)


def _subtree_frame(rel: StreamedRelease) -> pd.DataFrame:
    """subtrees.csv: one row per subtree (public: sizes and published records).

    No seconds: every phase's time grows with the subtree's true number of records (reading
    and counting them directly, the others through the counts that follow them closely), a
    timing side channel; they are diagnostics (``topdown run --diagnostics DIR``)."""
    lower = range(rel.stream_level + 1, rel.tree.n_levels)
    rows = []
    for r in rel.subtrees:
        row: dict[str, object] = {"subtree": r.label}
        row.update({f"nodes_level_{lv}": n for lv, n in zip(lower, r.nodes, strict=True)})
        row["records"] = r.records_out
        rows.append(row)
    return pd.DataFrame(rows)


def _load(folder: Path, docs: dict[str, Any]) -> Loaded:
    """The streamed release of a folder (the levels down to the stream level in memory), for
    ``verify_folder``."""
    manifest = docs["manifest.json"]
    found = manifest.get("format") if isinstance(manifest, dict) else None
    if found != FORMAT:
        raise ReleaseError(
            f"manifest.json: format {found!r}, this version reads {FORMAT!r}: the folder was "
            "written by an older version of topdown (before the measurement parts, "
            "invariants.json and the estimation note it checks); rerun the release"
        )
    cfg = folder_config(folder, docs["config.json"])
    stream_by = manifest.get("stream_by")
    if stream_by not in cfg.schema.hierarchy:
        raise ReleaseError(f"manifest.json: stream_by ({stream_by!r}) is not a hierarchy column")
    stream_level = cfg.schema.hierarchy.index(stream_by) + 1
    tree = _read_tree(folder, cfg)
    top_counts = []
    partial = StreamedRelease(
        cfg.schema, tree, cfg.strategy, stream_level, folder, [], Measurements(()), Ledger(), []
    )
    for level in range(stream_level + 1):
        frame = pd.read_parquet(table_dir(folder, tree, level))
        labels = tree.levels[level].labels.astype(str)
        top_counts.append(dense_counts(frame, labels, cfg.schema, f"level {level}"))
    partial.top_counts = top_counts
    partial.ledger = Ledger.from_dict(docs["ledger.json"])
    partial.constraints = cfg.constraints if len(cfg.constraints) else None
    partial.invariants = read_invariants(folder, tree, cfg)
    partial.estimator = cfg.effective_estimator
    if partial.estimator == "blue":  # recomputed from the published measurement parts
        partial.root_total = partial.blue_root_total()
    return Loaded(
        partial,
        partial.top_release(),
        lambda: [("root total at the held value", _held_failures(partial))],
    )


def _held_failures(rel: StreamedRelease) -> list[str]:
    """The root's released total against the total the passes held (recomputed from the
    published measurements; none held: nothing to compare)."""
    held = rel.root_total
    if held is None or not held.held:
        return []
    total = int(rel.top_counts[0].sum())
    if total != held.value:
        return [f"the root's released total is {total}, the held BLUE total {held.value}"]
    return []


def _read_tree(folder: Path, cfg: RunConfig) -> Tree:
    frame = pd.read_parquet(folder / "hierarchy.parquet")
    levels: list[Level] = []
    for number in range(cfg.schema.n_levels):
        rows = frame[frame["level"] == number]
        labels = rows["node"].astype(str).to_numpy(dtype=object)
        if number == 0:
            levels.append(Level(0, None, labels, np.array([-1], dtype=np.int64)))
            continue
        up = pd.Index(levels[-1].labels.astype(str))
        parent = up.get_indexer(rows["parent"].astype(str)).astype(np.int64)
        if (parent < 0).any() or not len(labels):
            raise ReleaseError(f"hierarchy.parquet: level {number} has nodes without a parent")
        levels.append(Level(number, cfg.schema.hierarchy[number - 1], labels, parent))
    return Tree(tuple(levels))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
