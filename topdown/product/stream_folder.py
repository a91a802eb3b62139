"""The release folder of a streamed release: written by ``topdown run`` with ``[executor]
stream_by`` (or ``--stream-by``), verified by ``topdown check`` one subtree at a time.

Layout: the streamed release's own files (``topdown.stream``: ``tables/level_<k>_<column>/``
with one Parquet part for the levels down to the stream level and one per subtree below it,
``microdata/<subtree>.parquet``, ``ledger.json``), plus ``config.json`` (the resolved
configuration), ``hierarchy.parquet`` (level, column, node, parent: the public tree),
``solver_stats.csv`` and ``manifest.json`` (format ``topdown-release-streamed/1``, every file
with its SHA-256, the stream column). The noisy measurements are not written (a large state's
would be billions of rows), nor a report. Checks need no confidential data and hold at most
one subtree in memory.
"""

from __future__ import annotations

import hashlib
import json
import platform
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from mechanisms.ledger import Ledger
from topdown.errors import ReleaseError, TopDownError
from topdown.measure import Measurements
from topdown.product.config import RunConfig, load_config
from topdown.product.release_folder import (
    Verdict,
    hierarchy_frame,
    manifest_failures,
    read_json,
)
from topdown.streamed_release import StreamedRelease, dense_counts, table_dir
from topdown.tree import Level, Tree

__all__ = ["FORMAT", "is_streamed_folder", "write_streamed_extras", "verify_streamed_folder"]

FORMAT = "topdown-release-streamed/1"


def is_streamed_folder(folder: Path) -> bool:
    """Whether ``folder``'s manifest says it holds a streamed release."""
    path = Path(folder) / "manifest.json"
    try:
        return json.loads(path.read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def write_streamed_extras(
    rel: StreamedRelease, cfg: RunConfig, folder: Path, timings: dict[str, float]
) -> None:
    """Add the configuration, the tree, the solver statistics and the manifest to the folder
    ``rel`` was written into (before it is moved into place)."""
    folder = Path(folder)
    (folder / "config.json").write_text(json.dumps(cfg.resolved(), indent=1))
    hierarchy_frame(rel.tree).to_parquet(folder / "hierarchy.parquet", index=False)
    pd.DataFrame([s.to_dict() for s in rel.stats]).to_csv(folder / "solver_stats.csv", index=False)
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
        "timings_seconds": {k: round(v, 3) for k, v in timings.items()},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))


def verify_streamed_folder(folder: Path) -> Verdict:
    """Re-verify a streamed folder: the manifest, then the release itself (non-negative
    integers, children summing to their parent at every level, constraints above the stream
    level, microdata equal to the leaf tables, the ledger's total), one subtree at a time."""
    folder = Path(folder)
    checks: dict[str, bool] = {}
    failures: list[str] = []
    tampered = manifest_failures(folder)
    checks["files match the manifest"] = not tampered
    failures += [f"files match the manifest: {t}" for t in tampered[:20]]
    try:
        rel = _load(folder)
    except (TopDownError, ValueError, OSError, KeyError) as err:
        checks["release folder can be read"] = False
        failures.append(f"release folder can be read: {err}")
        return Verdict(checks, failures, private=False, noise="unknown")
    report = rel.check_correctness()
    checks.update(report.checks)
    failures += list(report.failures)
    noise = rel.ledger.noise.describe() if rel.ledger.noise else "not recorded"
    return Verdict(checks, failures, private=rel.ledger.private, noise=noise)


def _load(folder: Path) -> StreamedRelease:
    cfg = load_config(folder / "config.json")
    manifest = read_json(folder, "manifest.json")
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
    partial.ledger = Ledger.from_dict(read_json(folder, "ledger.json"))
    # invariants' values are not written: the top's attached constraints are checked as rules
    partial.constraints = cfg.constraints if len(cfg.constraints) else None
    return partial


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
