"""The geographic tree as arrays per level, and the confidential histograms of its nodes.

A level of 10^5 nodes must be cheap, so there is no Python object per node: level ``l`` is a
label array and a parent-index array into level ``l - 1``. The structure (which units exist and
how they nest) is public, as census geography is; the per-node counts are not, so they live in
``ConfidentialHistograms``, which only the measurement step (``topdown.measurement.measure``) reads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from topdown.errors import DataError, HierarchyError
from topdown.schema import Schema
from topdown.support.int_types import int_type_for

__all__ = [
    "Level",
    "Tree",
    "children_of",
    "ConfidentialHistograms",
    "build_tree",
    "geography_tree",
    "geography_frame",
    "structure",
    "codes_in_geography",
    "text_codes",
    "lookup",
]

ROOT_LABEL = "root"


@dataclass(frozen=True)
class Level:
    """One level of the tree.

    Attributes:
        number: 0 for the root.
        column: the hierarchy column the level's labels come from (None for the root).
        labels: node labels (object array), sorted.
        parent: index of each node's parent in the previous level (-1 at the root).
    """

    number: int
    column: str | None
    labels: np.ndarray
    parent: np.ndarray

    @property
    def size(self) -> int:
        return len(self.labels)

    def children_of(self, n_parents: int) -> list[np.ndarray]:
        """For each of the ``n_parents`` nodes of the previous level, its children's indices."""
        return children_of(self.parent, n_parents)


def children_of(parent: np.ndarray, n_parents: int) -> list[np.ndarray]:
    """For each of ``n_parents`` parents, the indices of the nodes whose ``parent`` it is
    (ascending)."""
    order = np.argsort(parent, kind="stable")
    bounds = np.searchsorted(parent[order], np.arange(n_parents + 1))
    return [order[bounds[i] : bounds[i + 1]] for i in range(n_parents)]


@dataclass(frozen=True)
class Tree:
    """The public structure: levels root first."""

    levels: tuple[Level, ...]

    @property
    def n_levels(self) -> int:
        return len(self.levels)

    def ancestors(self, level: int) -> list[np.ndarray]:
        """For each level ``0..level``, the index of every node of ``level``'s ancestor there."""
        chain = [np.arange(self.levels[level].size)]
        for lv in range(level, 0, -1):
            chain.append(self.levels[lv].parent[chain[-1]])
        return chain[::-1]

    def label_of(self, level: int, index: int) -> str:
        return str(self.levels[level].labels[index])


@dataclass(frozen=True)
class ConfidentialHistograms:
    """True contingency vectors of every node, level by level: confidential.

    ``counts[l]`` has shape (nodes of level l, cells), in a signed integer type that may be as
    narrow as int8 (``build_tree``). Only ``topdown.measurement.measure`` and the metrics computed
    against the truth may read it.
    """

    counts: tuple[np.ndarray, ...]
    records: pd.DataFrame | None = None
    node_of_record: tuple[np.ndarray, ...] = ()


def build_tree(
    data: pd.DataFrame,
    schema: Schema,
    *,
    keep_records: bool = False,
    geography: pd.DataFrame | None = None,
    dtype: type[np.signedinteger] | None = None,
) -> tuple[Tree, ConfidentialHistograms]:
    """One pass over the records: node codes per level (pd.factorize), parent links, and the
    histograms of all nodes of a level at once (np.bincount on node * cells + cell).

    Args:
        data: the confidential records.
        schema: query attributes and hierarchy columns.
        keep_records: keep the records for contextual constraints that aggregate them.
        geography: the published list of units, one row per leaf with every hierarchy column
            (units with no records included). Without it the units are those present in the
            data, which discloses that each has at least one record (the engine records it).
        dtype: the histograms' integer type; by default each level's is the narrowest that
            holds its largest count (``topdown.support.int_types``: int16 for most block levels, a
            quarter of int64's memory and of the bytes the measurement tasks carry). The type
            follows the confidential counts but never reaches an output: the mechanisms add
            their noise in int64.

    Raises:
        HierarchyError: a hierarchy column with missing labels, a label under two parents, or
            a record in a unit the geography does not list.
        DataError / DomainError: from the schema's checks of the query columns.
    """
    schema.check_columns(data)
    cells = schema.encode_cells(data)
    size = schema.domain.size
    if geography is None:
        levels, node_codes = structure(data, schema.hierarchy, "data")
    else:
        levels = list(geography_tree(geography, schema).levels)
        node_codes = codes_in_geography(data, levels)
    check_dense_levels(levels, size, schema)  # before the (nodes x cells) arrays exist
    counts = [
        _histograms(codes * size + cells, lv.size, size, dtype)
        for lv, codes in zip(levels, node_codes, strict=True)
    ]
    records = data if keep_records else None
    return Tree(tuple(levels)), ConfidentialHistograms(
        tuple(counts), records, tuple(node_codes) if keep_records else ()
    )


def _histograms(
    flat: np.ndarray, nodes: int, cells: int, dtype: type[np.signedinteger] | None
) -> np.ndarray:
    """A level's (nodes, cells) histograms from each record's flat index (node * cells +
    cell): the occupied cells and their counts first (a sort of the records), then the level's
    array in its narrow type, written at those cells only. ``np.bincount`` over the level
    made an int64 array of every cell before narrowing it: at 400 DHC tracts (491 million
    cells) the pages its scattered records touched were about 3 GB, beside the 491 MB kept."""
    occupied, count = np.unique(flat, return_counts=True)
    level_type = dtype or int_type_for(0, int(count.max(initial=0)))
    out = np.zeros((nodes, cells), dtype=level_type)
    out.reshape(-1)[occupied] = count
    return out


#: Bytes per (node, cell) of a level while its histograms are built and measured: the
#: narrow histograms and the noisy answers, and the release holds a few more such arrays.
DENSE_BYTES_PER_CELL = 16


def physical_memory() -> int | None:
    """This machine's physical memory in bytes (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def check_dense_levels(levels: Sequence[Level], cells: int, schema: Schema) -> None:
    """Refuse a level whose dense histograms (nodes x cells) would not fit in this machine's
    memory, before they are allocated.

    Raises:
        DataError: naming the level's column, its nodes, the domain's attributes and cells,
            and the memory needed and present.
    """
    memory = physical_memory()
    if memory is None:
        return
    for lv in levels:
        need = lv.size * cells * DENSE_BYTES_PER_CELL
        if need > memory:
            domain = schema.domain
            attrs = " x ".join(
                f"{n} ({k})" for n, k in zip(domain.names, domain.shape, strict=True)
            )
            raise DataError(
                f"level {lv.number} ({lv.column or 'root'}) has {lv.size:,} nodes x {cells:,} "
                f"cells ({attrs}) = {lv.size * cells:,} cells, about {_bytes(need)} to build "
                f"its histograms, more than this machine's {_bytes(memory)}; declare coarser "
                "domains (bins) or fewer query attributes, or stream the release (stream_by) "
                "so that each subtree's levels are held alone"
            )


def _bytes(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e9 else f"{n / 1e6:,.0f} MB"


def geography_tree(geography: pd.DataFrame, schema: Schema) -> Tree:
    """The tree of a declared geography (one row per leaf, every hierarchy column).

    Raises:
        HierarchyError: a hierarchy column missing, a missing label, or a label under two
            parents.
    """
    missing = [c for c in schema.hierarchy if c not in geography.columns]
    if missing:
        raise HierarchyError(
            f"geography lacks hierarchy column(s) {missing}; its columns are "
            f"{list(geography.columns)}"
        )
    levels, _ = structure(geography, schema.hierarchy, "geography")
    return Tree(tuple(levels))


def geography_frame(tree: Tree) -> pd.DataFrame:
    """The tree as a declared geography: one row per leaf, every hierarchy column's label.

    The inverse of ``geography_tree``: ``geography_tree(geography_frame(t), schema)`` has
    ``t``'s levels. Public (labels and nesting only).

    Example:
        >>> lv1 = Level(1, "STATE", np.array(["A", "B"], dtype=object), np.array([0, 0]))
        >>> counties = np.array(["A1", "A2", "B1"], dtype=object)
        >>> lv2 = Level(2, "COUNTY", counties, np.array([0, 0, 1]))
        >>> root = Level(0, None, np.array([ROOT_LABEL], dtype=object), np.array([-1]))
        >>> geography_frame(Tree((root, lv1, lv2))).to_dict("list")
        {'STATE': ['A', 'A', 'B'], 'COUNTY': ['A1', 'A2', 'B1']}
    """
    leaf = tree.n_levels - 1
    chain = tree.ancestors(leaf)
    return pd.DataFrame(
        {str(lv.column): lv.labels.astype(str)[chain[lv.number]] for lv in tree.levels[1:]}
    )


def structure(
    frame: pd.DataFrame, hierarchy: tuple[str, ...], source: str
) -> tuple[list[Level], list[np.ndarray]]:
    """Levels (sorted labels, parent indices) and each row's node code per level."""
    levels = [Level(0, None, np.array([ROOT_LABEL], dtype=object), np.array([-1], dtype=np.int64))]
    node_codes = [np.zeros(len(frame), dtype=np.int64)]
    for number, column in enumerate(hierarchy, start=1):
        raw_codes, texts = text_codes(frame[column])
        missing = _is_missing(texts)[raw_codes]
        if missing.any():
            raise HierarchyError(
                f"hierarchy column {column!r} of the {source} has {int(missing.sum())} row(s) with "
                f"a missing label, first at row(s) {np.flatnonzero(missing)[:5].tolist()}; every "
                "record needs a unit at every level"
            )
        unique, inverse = np.unique(texts.astype(str), return_inverse=True)
        labels = unique.astype(object)
        codes = inverse.astype(np.int64)[raw_codes]
        parent_codes = node_codes[-1]
        parent = np.full(len(labels), -1, dtype=np.int64)
        parent[codes] = parent_codes
        # a label with two parents: some row disagrees with the parent stored last
        clash = parent[codes] != parent_codes
        if clash.any():
            bad = np.unique(codes[clash])
            prev_labels = levels[-1].labels
            examples = []
            for code in bad[:3]:
                parents = np.unique(parent_codes[codes == code])
                examples.append(f"{labels[code]!r} under {[str(prev_labels[p]) for p in parents]}")
            raise HierarchyError(
                f"hierarchy column {column!r} is not a tree: {len(bad)} label(s) appear under "
                f"more than one parent ({'; '.join(examples)}); make labels unique per parent "
                "(e.g. prefix them with the parent's code)"
            )
        levels.append(Level(number, column, np.asarray(labels, dtype=object), parent))
        node_codes.append(codes)
    return levels, node_codes


def codes_in_geography(data: pd.DataFrame, levels: list[Level]) -> list[np.ndarray]:
    """Each record's node per level, looked up in a declared geography."""
    node_codes = [np.zeros(len(data), dtype=np.int64)]
    for lv in levels[1:]:
        column = lv.column
        assert column is not None
        raw_codes, texts = text_codes(data[column])
        known = pd.Index(lv.labels.astype(str)).get_indexer(texts.astype(str)).astype(np.int64)
        codes = known[raw_codes]
        unknown = codes < 0
        if unknown.any():
            raise HierarchyError(
                f"hierarchy column {column!r} has {int(unknown.sum())} record(s) in units the "
                f"geography does not list: {sorted(str(t) for t in texts[known < 0])[:10]}"
            )
        wrong = lv.parent[codes] != node_codes[-1]
        if wrong.any():
            first = int(np.flatnonzero(wrong)[0])
            raise HierarchyError(
                f"hierarchy column {column!r}: {int(wrong.sum())} record(s) sit under a different "
                f"parent than the geography says, e.g. row {first} "
                f"({str(texts[raw_codes[first]])!r})"
            )
        node_codes.append(codes)
    return node_codes


def text_codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Each row's position among the column's distinct values, and those values as text.

    The same labels as ``column.astype(str)`` row by row, but the text conversion runs on the
    distinct values only (a few thousand units), not on millions of records.
    """
    codes, uniques = pd.factorize(column, use_na_sentinel=False)
    texts = np.asarray(pd.Index(uniques).astype(str), dtype=object)
    return codes.astype(np.int64, copy=False), texts


def lookup(index: pd.Index, column: pd.Series) -> np.ndarray:
    """Position of each row's label (as text) in ``index``, -1 if absent; the text conversion
    and the search run once per distinct label (``text_codes``)."""
    raw_codes, texts = text_codes(column)
    return index.get_indexer(pd.Index(texts.astype(str))).astype(np.int64)[raw_codes]


def _is_missing(texts: np.ndarray) -> np.ndarray:
    """True for a missing label (NaN/None, or blank text)."""
    return np.array([t is None or t != t or not str(t).strip() for t in texts], dtype=bool)
