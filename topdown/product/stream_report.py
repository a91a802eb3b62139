"""The report of a streamed release folder: one self-contained HTML file, built part by part.

Built only from the folder's public files (``topdown.product.stream_folder`` lists them), and
never holding more than one subtree's part of one level: so ``topdown report`` can rebuild it
for a state of any size in the memory the release itself needed. It shows what a release
engineer checks after a large run, with no accuracy figures (a streamed release keeps no truth):

- the privacy ledger and the budget by level and query (the pieces of ``report.build_report``),
- the tree: the stream column, nodes per level, and how the subtrees split the lower levels,
- published counts by level: the total, empty nodes, node totals (median, mean, largest),
  non-zero cells, with a plot of the node totals' spread,
- the values of the invariants (published exactly),
- the noisy measurements on disk by level: queries, noise variance, answers and bytes,
- the subtrees: their sizes and published records (the largest), and the solver statistics,
- the folder's size by kind of file (no timings: they are diagnostics, not published).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from topdown.product.report import (
    budget_section,
    figure_html,
    ledger_section,
    solver_section,
    table_html,
    write_page,
)
from topdown.streaming.measurements import level_folder

__all__ = ["build_streamed_report"]

log = logging.getLogger(__name__)


def build_streamed_report(folder: str | Path, *, name: str | None = None) -> Path:
    """Write ``report.html`` into the streamed release folder (atomically); return its path.

    ``name`` is the release's name in the title (default: the folder's name; the writer passes
    the final name while it builds the report in the temporary folder).
    """
    folder = Path(folder)
    ledger = _json(folder / "ledger.json") or {}
    config = _json(folder / "config.json") or {}
    stream_by = config.get("executor", {}).get("stream_by") or "?"
    hierarchy = pd.read_parquet(folder / "hierarchy.parquet", columns=["level", "column"])
    sizes = hierarchy.groupby("level", sort=True)["column"].agg(["first", "size"])
    subtrees = _csv(folder / "subtrees.csv", subtree=str)
    stats = _csv(folder / "solver_stats.csv")
    sections = [
        ("Privacy ledger", ledger_section(ledger, config)),
        ("Budget allocation by level and query", budget_section(ledger)),
        ("The tree", _tree_html(sizes, stream_by, subtrees)),
        ("Published counts by level", _counts_html(folder, sizes)),
    ]
    invariants = _json(folder / "invariants.json")
    if invariants:
        sections.append(("Invariants (published exactly)", _invariants_html(invariants)))
    sections.append(("Noisy measurements on disk", _measurements_html(folder, sizes, config)))
    if subtrees is not None and not subtrees.empty:
        sections.append((f"Subtrees (by {stream_by})", _subtrees_html(subtrees)))
    if stats is not None and not stats.empty:
        sections.append(("Estimation by level", solver_section(stats)))
    sections.append(("Files", table_html(_files(folder))))
    title = f"TopDown streamed release: {name or folder.name}"
    return write_page(folder, title, sections)


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _csv(path: Path, **dtype: type) -> pd.DataFrame | None:
    return pd.read_csv(path, dtype=dtype or None) if path.is_file() else None


def _levels(sizes: pd.DataFrame) -> list[tuple[int, str, int]]:
    """(level, column, nodes) of each level, root first."""
    return [
        (int(lv), str(c), int(n))
        for lv, c, n in zip(sizes.index, sizes["first"], sizes["size"], strict=True)
    ]


def _tree_html(sizes: pd.DataFrame, stream_by: str, subtrees: pd.DataFrame | None) -> str:
    rows = []
    for level, column, nodes in _levels(sizes):
        row: dict[str, Any] = {"level": level, "column": column, "nodes": nodes}
        key = f"nodes_level_{level}"
        per = subtrees[key] if subtrees is not None and key in subtrees else None
        row.update(
            part="one per subtree" if per is not None else "top",
            per_subtree_min="" if per is None else str(int(per.min())),
            per_subtree_median="" if per is None else f"{per.median():g}",
            per_subtree_max="" if per is None else str(int(per.max())),
        )
        rows.append(row)
    n = 0 if subtrees is None else len(subtrees)
    note = (
        f"<p>Streamed by <code>{stream_by}</code>: the levels down to it were released in "
        f"memory (part <code>top</code>), each of its {n} unit(s) below it as a subtree of its "
        "own (one part per subtree in <code>tables/</code>, <code>measurements/</code> and "
        "<code>microdata/</code>). Peak memory follows the largest subtree.</p>"
    )
    return note + table_html(pd.DataFrame(rows))


def _counts_html(folder: Path, sizes: pd.DataFrame) -> str:
    """Per level, read one part at a time (node and count columns only)."""
    rows, spreads = [], []
    for level, column, nodes in _levels(sizes):
        parts = sorted(level_folder(folder, "tables", level, column).glob("*.parquet"))
        totals: list[pd.Series] = []
        cells = 0
        for part in parts:
            frame = pd.read_parquet(part, columns=["node", "count"])
            cells += int((frame["count"] > 0).sum())
            totals.append(frame.groupby("node", sort=False, observed=True)["count"].sum())
        per_node = pd.concat(totals) if totals else pd.Series(dtype=np.int64)
        per_node = per_node[per_node > 0].to_numpy(dtype=np.int64)
        all_nodes = np.concatenate([per_node, np.zeros(nodes - per_node.size, np.int64)])
        spreads.append(all_nodes)
        rows.append(
            {
                "level": level,
                "column": column,
                "nodes": nodes,
                "total": int(all_nodes.sum()),
                "empty_nodes": nodes - per_node.size,
                "node_total_median": float(np.median(all_nodes)) if all_nodes.size else 0.0,
                "node_total_mean": float(all_nodes.mean()) if all_nodes.size else 0.0,
                "node_total_max": int(all_nodes.max()) if all_nodes.size else 0,
                "nonzero_cells": cells,
                "parts": len(parts),
            }
        )
    note = (
        "<p class=note>Every level's total equals the root's (children sum to their parent); "
        "node totals include the empty nodes (no non-zero cell).</p>"
    )
    return note + _spread_plot(spreads, sizes) + table_html(pd.DataFrame(rows))


def _spread_plot(spreads: list[np.ndarray], sizes: pd.DataFrame) -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    ax.boxplot([s + 1 for s in spreads], whis=(1, 99), showfliers=False)
    ax.set_xticks(range(1, len(spreads) + 1))
    ax.set_xticklabels([f"{lv}\n{c}" for lv, c in zip(sizes.index, sizes["first"], strict=True)])
    ax.set_yscale("log")
    ax.set_xlabel("level")
    ax.set_ylabel("published node total + 1 (log)")
    ax.set_title("Node totals by level (box: quartiles, whiskers: 1st-99th percentile)")
    return figure_html(fig, "node totals by level")


def _invariants_html(invariants: list[dict[str, Any]]) -> str:
    frame = pd.DataFrame(invariants)
    shown = frame.head(50)
    more = "" if len(frame) <= 50 else f"<p class=note>... and {len(frame) - 50} more.</p>"
    return table_html(shown) + more


def _measurements_html(folder: Path, sizes: pd.DataFrame, config: dict[str, Any]) -> str:
    """Answers and bytes from the parts' Parquet metadata (no part is read); the queries and
    variances from the ledger's strategy, as ``topdown check`` verifies them."""
    import pyarrow.parquet as pq

    levels = config.get("strategy", {}).get("levels", [])
    rows = []
    for level, column, nodes in _levels(sizes):
        parts = sorted(level_folder(folder, "measurements", level, column).glob("*.parquet"))
        answers = sum(_answers(pq.ParquetFile(p).metadata) for p in parts)
        size = sum(p.stat().st_size for p in parts)
        queries = levels[level].get("queries", {}) if level < len(levels) else {}
        rows.append(
            {
                "level": level,
                "column": column,
                "nodes": nodes,
                "queries": ", ".join(queries) or "?",
                "answers": answers,
                "answers_per_node": answers / max(nodes, 1),
                "MiB": size / 2**20,
                "bytes_per_answer": size / max(answers, 1),
                "parts": len(parts),
            }
        )
    note = (
        "<p class=note>The noisy answers every estimate was computed from, in "
        "<code>measurements/level_&lt;k&gt;_&lt;column&gt;/&lt;part&gt;.parquet</code>, one "
        "row per node and query: node, query, the variance of its noise, and its noisy answers "
        "as a list in the query's answer order.</p>"
    )
    return note + table_html(pd.DataFrame(rows))


def _answers(metadata: Any) -> int:
    """The noisy answers of a part, from its Parquet metadata: the values of its ``noisy``
    lists, summed over the row groups."""
    total = 0
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for c in range(group.num_columns):
            if group.column(c).path_in_schema.split(".")[0] == "noisy":
                total += group.column(c).num_values
    return total


def _subtrees_html(subtrees: pd.DataFrame) -> str:
    """The subtrees' sizes and published records (no seconds: they are diagnostics)."""
    nodes = subtrees.filter(like="nodes_level_").sum(axis=1)
    frame = subtrees.assign(nodes=nodes)
    largest = frame.sort_values("nodes", ascending=False).head(10)[["subtree", "nodes", "records"]]
    text = (
        f"<p>{len(frame)} subtree(s); the largest has {int(nodes.max())} node(s); "
        f"{int(frame['records'].sum())} microdata record(s) in all. The ten largest:</p>"
    )
    return text + table_html(largest)


def _files(folder: Path) -> pd.DataFrame:
    sizes: dict[str, list[int]] = {}
    for path in folder.rglob("*"):
        if path.is_file() and not path.name.startswith("."):
            rel = path.relative_to(folder)
            kind = rel.parts[0] + "/" if len(rel.parts) > 1 else rel.name
            sizes.setdefault(kind, []).append(path.stat().st_size)
    rows = [{"files": k, "count": len(v), "MiB": sum(v) / 2**20} for k, v in sorted(sizes.items())]
    return pd.DataFrame(rows)
