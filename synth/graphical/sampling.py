"""Forward sampling along the junction tree: i.i.d. records from the model.

Why forward sampling: the root clique's attributes are drawn from its probability table, then
each clique, parent before child, draws the attributes it adds given the values its
separator already has (the junction tree's conditionals), so every record is an independent
draw from the model's joint distribution and no joint table is ever built. Each step is one
vectorised search over the cumulative conditional tables laid end to end (row ``s`` of the
separator's cells shifted by ``s``), so its cost is O(n log cells) for n records.

Sampling is post-processing of the model (no privacy is spent); floats are fine here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from synth.graphical.factor import cells
from synth.graphical.junction_tree import JunctionTree

__all__ = ["sample_codes"]


def _draw(table: np.ndarray, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One column index per entry of ``rows``, from row ``rows[i]`` of ``table`` (weights)."""
    width = table.shape[1]
    cdf = np.cumsum(table, axis=1)
    mass = cdf[:, -1:]
    uniform = np.arange(1, width + 1, dtype=float)[None, :] / width
    cdf = np.where(mass > 0, cdf / np.where(mass > 0, mass, 1.0), uniform)
    laid = (cdf + np.arange(table.shape[0], dtype=float)[:, None]).reshape(-1)
    targets = rows.astype(float) + rng.random(rows.size)
    found = np.searchsorted(laid, targets, side="right")
    return np.clip(found - rows * width, 0, width - 1)


def sample_codes(
    tree: JunctionTree,
    beliefs: Sequence[np.ndarray],
    conds: Sequence[np.ndarray],
    sizes: Sequence[int],
    n: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """``n`` i.i.d. records (codes, ``n x len(sizes)``) from the calibrated model."""
    codes = np.zeros((n, len(sizes)), dtype=np.int64)
    if n == 0:
        return codes
    for c in tree.order:
        clique = tree.cliques[c]
        sep = tree.separators[c] if tree.parent[c] >= 0 else ()
        new = [a for a in clique if a not in sep]
        if not new:
            continue
        table = conds[c] if sep else beliefs[c]
        perm = [clique.index(a) for a in (*sep, *new)]
        flat = np.transpose(table, perm).reshape(cells(sep, sizes), cells(new, sizes))
        if sep:
            rows = np.ravel_multi_index(
                tuple(codes[:, a] for a in sep), tuple(int(sizes[a]) for a in sep)
            )
        else:
            rows = np.zeros(n, dtype=np.int64)
        drawn = _draw(flat, np.asarray(rows, dtype=np.int64), rng)
        values = np.unravel_index(drawn, tuple(int(sizes[a]) for a in new))
        for a, v in zip(new, values, strict=True):
            codes[:, a] = v
    return codes
