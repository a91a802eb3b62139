"""Headline accuracy figures: a few named counts per node, and their mean absolute error.

A statistical agency judges a release first by a handful of figures it publishes for every
release, not by every cell: the Census Bureau's accuracy metrics for the 2020 redistricting
data, for example, are the mean absolute error of total population by geographic level, of
the voting-age population, and of each race alone by tract. A ``HeadlineFigure`` names one such
count (an expression of the constraint DSL selects the cells it sums: ``TrueExpression()`` for
the total, ``Equal("VOTINGAGE", 1)`` for the voting-age population) and the levels it is
reported at; ``headline_table`` computes, for each figure and level, the mean over the level's
nodes of ``|released count - true count|``. A preset supplies its agency's figures
(``topdown.presets.headline_figures``); the release folder writes them to ``headline.csv`` and the
report shows them as a table.

These figures read the truth: they are for evaluation, and are not differentially private.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from constraints.domain import Domain
from constraints.logical_expressions import Expression
from topdown.errors import OptionsError
from topdown.support.row_blocks import row_blocks

__all__ = ["HeadlineFigure", "headline_table", "masked_sums", "HEADLINE_COLUMNS"]

#: The columns of ``headline_table`` (and of a release folder's ``headline.csv``).
HEADLINE_COLUMNS = ("figure", "level", "geolevel", "nodes", "mae", "mean_true")


@dataclass(frozen=True)
class HeadlineFigure:
    """One named count per node and the levels it is reported at.

    Attributes:
        name: the figure's published name (``"Total population"``).
        cells: the cells whose counts it sums.
        levels: the level numbers it is reported at (0 = root); ``None``: every level.
    """

    name: str
    cells: Expression
    levels: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise OptionsError(f"HeadlineFigure name ({self.name!r}) must be a non-empty string")
        if not isinstance(self.cells, Expression):
            raise OptionsError(
                f"HeadlineFigure {self.name!r}: cells ({self.cells!r}) must be an expression "
                "of the constraint DSL, e.g. Equal('VOTINGAGE', 1)"
            )
        if self.levels is not None:
            levels = tuple(self.levels)
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in levels):
                raise OptionsError(
                    f"HeadlineFigure {self.name!r}: levels ({self.levels!r}) must be level "
                    "numbers >= 0 (0 = root), or None for every level"
                )
            object.__setattr__(self, "levels", levels)


#: Bytes of the int64 copy of one block of nodes' masked cells in ``masked_sums``
MASKED_BLOCK_BYTES = 1 << 25


def masked_sums(counts: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Each node's count over the cells ``mask`` selects, in int64 (nodes,): the masked cells
    copied a block of nodes at a time, so a mask over most of a DHC-sized domain never makes a
    level-sized int64 copy (3.9 GB at 400 tracts of 1,227,744 cells)."""
    counts = np.asarray(counts)
    out = np.zeros(counts.shape[0], dtype=np.int64)
    width = max(1, int(np.count_nonzero(mask)))
    for rows in row_blocks(counts.shape[0], 8 * width, MASKED_BLOCK_BYTES):
        out[rows] = counts[rows][:, mask].sum(axis=1, dtype=np.int64)
    return out


def headline_table(
    domain: Domain,
    release_counts: Sequence[np.ndarray],
    true_counts: Sequence[np.ndarray],
    figures: Sequence[HeadlineFigure],
    level_names: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Per figure and level: the mean absolute error over the level's nodes (``mae``) and the
    mean true count (``mean_true``, the scale the error is read against).

    Args:
        domain: the release's domain (the figures' expressions are evaluated on it).
        release_counts: per level, the released ``(nodes, cells)`` histogram.
        true_counts: per level, the true one.
        figures: the figures; a level a figure names beyond the release's is refused.
        level_names: a name per level for the ``geolevel`` column (default ``"level N"``).

    Raises:
        OptionsError: a figure at a level the release does not have.
        DomainError: a figure's expression names an attribute or value not in ``domain``.
    """
    n_levels = len(release_counts)
    names = (
        list(level_names) if level_names is not None else [f"level {i}" for i in range(n_levels)]
    )
    rows = []
    for fig in figures:
        levels = range(n_levels) if fig.levels is None else fig.levels
        beyond = [v for v in levels if v >= n_levels]
        if beyond:
            raise OptionsError(
                f"headline figure {fig.name!r}: levels {beyond} are beyond the release's "
                f"{n_levels} levels (0..{n_levels - 1})"
            )
        mask = fig.cells.mask(domain)
        for level in levels:
            est = masked_sums(release_counts[level], mask)
            true = masked_sums(true_counts[level], mask)
            rows.append(
                {
                    "figure": fig.name,
                    "level": int(level),
                    "geolevel": names[level],
                    "nodes": int(true.size),
                    "mae": float(np.abs(est - true).mean()),
                    "mean_true": float(true.mean()),
                }
            )
    return pd.DataFrame(rows, columns=list(HEADLINE_COLUMNS))
