"""What a streamed release reads before any subtree runs: the stream level, the public tree (from
the published geography, or from the data's units: a disclosure), the partitions of the
records by unit, the histograms down to the stream level, and the checks on them.

``topdown.streaming.run`` calls these in the parent process. ``top_histograms`` is the parent's only
read of confidential records (one partition at a time, before anything is measured); the rest
reads the public schema and geography, the units' labels (or, without a geography, the units
present in the data, recorded in the ledger) and, for a unit without records, the data's
column types (``no_records``). Kept apart from the release so that the checks a streamed
input must pass (every partition a listed unit, records under the unit the geography names,
part names that cannot collide, invariants only where streaming supports them) sit in one
place, each raising an error that names the unit or the column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from constraints.attach import ConstraintSet
from constraints.contextual_constraints import SumEqualRealTotal
from mechanisms.ledger import Ledger
from topdown.errors import HierarchyError, StrategyError
from topdown.measurement.read import read_data
from topdown.measurement.tree import ConfidentialHistograms, Tree, geography_tree
from topdown.schema import Schema
from topdown.streaming.measurements import safe_name
from topdown.streaming.partitions import Partition

__all__ = [
    "stream_level_of",
    "split_constraints",
    "public_tree",
    "partitions_by_node",
    "top_histograms",
    "check_part_names",
    "no_records",
]


def stream_level_of(schema: Schema, stream_by: object) -> int:
    """The level whose units are streamed: ``stream_by``'s, checked to be a hierarchy column
    with a level below it."""
    if stream_by not in schema.hierarchy:
        raise HierarchyError(
            f"stream_by ({stream_by!r}) must be one of the hierarchy columns "
            f"{list(schema.hierarchy)}"
        )
    level = schema.hierarchy.index(str(stream_by)) + 1
    if level == schema.n_levels - 1:
        raise HierarchyError(
            f"stream_by ({stream_by!r}) is the leaf level; stream by a column with a level below "
            f"it, one of {list(schema.hierarchy[:-1])}"
        )
    return level


def split_constraints(
    constraints: ConstraintSet | None, stream_level: int
) -> tuple[ConstraintSet | None, ConstraintSet | None]:
    """The attachments of the levels down to the stream level, and of the levels below it.

    Raises:
        StrategyError: an invariant that applies below the stream level (its values and the
            sums they imply above would have to be published before the subtree is read).
    """
    if constraints is None or not len(constraints):
        return None, None
    top, low = ConstraintSet(), ConstraintSet()
    for a in constraints:
        below = a.level is None or a.level > stream_level
        if below and a.constraint.is_invariant:
            raise StrategyError(
                f"invariant {a.constraint.name} ({a.scope}) applies below the stream level "
                f"({stream_level}); streaming supports invariants at or above it: attach it to "
                f"a level <= {stream_level}, or release without stream_by"
            )
        if a.constraint.is_invariant and not isinstance(a.constraint, SumEqualRealTotal):
            raise StrategyError(
                f"invariant {a.constraint.name} aggregates records, which a streamed release "
                "does not keep above the stream level; use SumEqualRealTotal or release without "
                "stream_by"
            )
        if a.level is None or a.level <= stream_level:
            top.add(a.constraint, level=a.level, nodes=a.nodes)
        if below:
            low.add(a.constraint, level=a.level, nodes=a.nodes)
    return (top if len(top) else None), (low if len(low) else None)


def public_tree(
    parts: list[Partition],
    schema: Schema,
    geography: pd.DataFrame | str | Path | None,
    ledger: Ledger,
    stream_level: int,
    max_subtree_cells: int,
) -> tuple[pd.DataFrame, Tree, Tree]:
    """The units (the published geography, or those of the data: a disclosure, recorded), the
    whole tree built from them, and its levels down to the stream level (checked: they are held
    dense for the whole tree)."""
    if geography is None:
        geo = _units_from_data(parts, schema)
        ledger.record_disclosure(
            "units read from data",
            f"the units of {list(schema.hierarchy)} are those with at least one record; pass "
            "geography= (the published list of units; a config's [schema] geography) to avoid "
            "this",
        )
    else:
        geo = (
            geography
            if isinstance(geography, pd.DataFrame)
            else read_data(geography, what="geography")
        )
    tree = geography_tree(geo, schema)
    top_tree = Tree(tree.levels[: stream_level + 1])
    for lv in top_tree.levels:  # the levels held dense for the whole tree
        if lv.size * schema.domain.size > max_subtree_cells:
            raise HierarchyError(
                f"level {lv.number} ({lv.column}) has {lv.size} nodes x "
                f"{schema.domain.size} cells > max_subtree_cells ({max_subtree_cells}); "
                "stream by a higher level"
            )
    return geo, tree, top_tree


def _units_from_data(parts: list[Partition], schema: Schema) -> pd.DataFrame:
    """The leaf units with records (one row each, every hierarchy column), read partition by
    partition."""
    cols = list(schema.hierarchy)
    frames = [p.read()[cols].astype(str).drop_duplicates() for p in parts]
    return pd.concat(frames, ignore_index=True).drop_duplicates(ignore_index=True)


def partitions_by_node(
    parts: list[Partition], labels: np.ndarray, column: str
) -> dict[int, Partition]:
    """Each partition under the index of its unit among the stream level's ``labels`` (checked:
    the geography lists every unit with records)."""
    index = pd.Index(labels.astype(str))
    out = {}
    for p in parts:
        i = index.get_indexer([p.label])[0]
        if i < 0:
            raise HierarchyError(
                f"the data has records in {column} {p.label!r}, which the geography does not list"
            )
        out[int(i)] = p
    return out


def top_histograms(
    top: Tree, parts: list[Partition], by_label: dict[int, Partition], schema: Schema
) -> ConfidentialHistograms:
    """The true histograms of the levels down to the stream level, one partition at a time."""
    size = schema.domain.size
    counts = [np.zeros((lv.size, size), dtype=np.int64) for lv in top.levels]
    stream_level = top.n_levels - 1
    chains = top.ancestors(stream_level)
    for node, part in by_label.items():
        records = part.read()
        cells = schema.encode_cells(records)
        hist = np.bincount(cells, minlength=size)
        for level in range(stream_level + 1):
            if level >= 1:
                _check_chain(records, top, level, int(chains[level][node]), part.label)
            counts[level][chains[level][node]] += hist
    return ConfidentialHistograms(tuple(counts))


def _check_chain(records: pd.DataFrame, top: Tree, level: int, node: int, label: str) -> None:
    lv = top.levels[level]
    assert lv.column is not None
    column = records[lv.column]
    expected = str(lv.labels[node])
    found = sorted({str(v) for v in pd.unique(column)})
    if found and found != [expected]:
        raise HierarchyError(
            f"hierarchy column {lv.column!r}: the records of subtree {label!r} carry {found[:5]}, "
            f"but the geography puts {label!r} under {expected!r}"
        )


def check_part_names(labels: list[str], column: str) -> None:
    """Every subtree writes its parts under ``safe_name(label)``: two labels with one file name
    (``a/b`` and ``a_b``) would overwrite each other's parts, so they are refused."""
    seen: dict[str, str] = {}
    for label in labels:
        other = seen.setdefault(safe_name(label), label)
        if other != label:
            raise HierarchyError(
                f"{column} units {other!r} and {label!r} would write to the same file "
                f"({safe_name(label)!r}.parquet): rename one, or stream by another column"
            )


def no_records(parts: list[Partition]) -> pd.DataFrame:
    """An empty record frame with the columns and types of the data (for a unit of the
    geography that has no records)."""
    first = parts[0]
    if first.frame is not None:
        return first.frame.iloc[:0]
    import pyarrow.parquet as pq

    assert first.path is not None
    source = next(iter(sorted(first.path.glob("*.parquet"))), first.path)
    return pq.read_schema(source).empty_table().to_pandas()
