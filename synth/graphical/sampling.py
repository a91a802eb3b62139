"""Forward synthesis along the junction tree: i.i.d. records, or rounded counts.

Why forward synthesis: the root clique's attributes are set from its probability table, then
each clique, parent before child, sets the attributes it adds given the values its separator
already has (the junction tree's conditionals), so no joint table is ever built. Two ways to
set them, chosen by ``method``:

- ``"iid"``: each record draws its values independently (one vectorised search over the
  cumulative conditional tables laid end to end, row ``s`` of the separator's cells shifted by
  ``s``): the records are i.i.d. draws from the model's joint distribution. O(n log cells).
- ``"rounded"``: the records sharing a separator state ``s`` (a group of m) are split among
  the new attributes' cells by controlled rounding of the expected counts m p(x | s): each
  cell gets the floor or the ceiling of its expected count, the group's counts sum to exactly
  m, and each count is unbiased (its expectation is m p(x | s)). The cells that get the
  ceiling are chosen by systematic sampling with one uniform start over the fractional parts
  laid end to end (Madow, "On the theory of systematic sampling, II", Ann. Math. Statist. 20,
  1949): a cell is chosen with probability exactly its fractional part. The values are then
  dealt to the group's records in a uniformly random order. The rounding removes the
  multinomial noise of i.i.d. draws from every clique's counts (the root clique's counts are
  within one record of n p), which is what the marginal TVD measures. O(n log n) (one sort),
  vectorised over the groups.

With ``"rounded"`` the records are not independent (a group's counts are fixed up to
rounding), but each record, taken alone, is a draw from the model's joint distribution: the
random order makes a record's new values independent of its other attributes given the
separator, with probabilities E[count] / m = p(x | s). So every marginal's expected count is
n times the model's probability, inside a clique or not.

Synthesis is post-processing of the model (no privacy is spent); floats are fine for the
probabilities. The rounding itself is exact integer arithmetic: the conditional is rounded
to integer weights first (a multiple of 2^-40 of each probability for up to a million
records; the grid is coarser for more records, so that no product overflows 64 bits), and
the counts are exactly unbiased for those weights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from synth._domains import SynthError
from synth.graphical.factor import cells
from synth.graphical.junction_tree import JunctionTree

__all__ = ["SAMPLING_METHODS", "check_sampling", "rounded_counts", "sample_codes"]

#: The ways to synthesise records from the model (module docstring).
SAMPLING_METHODS = ("iid", "rounded")

Assign = Callable[[np.ndarray, np.ndarray, np.random.Generator], np.ndarray]
"""(weights table, row of each record, rng) -> the column chosen for each record."""

_MAX_GRID_BITS = 40  # the conditionals' weights are multiples of 2^-40 when n allows it
_MIN_GRID_BITS = 20  # below this the weights' rounding would be visible: n is refused


def check_sampling(method: object, name: str = "method") -> str:
    """``method`` if it is one of :data:`SAMPLING_METHODS`; else a :class:`SynthError`
    naming the argument ``name``, showing the value and listing the choices."""
    if not isinstance(method, str) or method not in SAMPLING_METHODS:
        choices = ", ".join(repr(m) for m in SAMPLING_METHODS)
        raise SynthError(f"{name} ({method!r}) must be one of {choices}")
    return method


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


def _grid_bits(n: int, width: int) -> int:
    """Bits of the weights' grid for groups of at most ``n`` records and ``width`` cells:
    every product ``m * weight`` and every running sum of remainders (at most
    (n + 1) * (2^bits + width) <= (n + 1) * 2^(bits + 1)) stays below 2^61."""
    bits = min(_MAX_GRID_BITS, 60 - (n + 1).bit_length())
    if bits < _MIN_GRID_BITS or width > 2**bits:
        raise SynthError(
            f"n ({n}) records over {width} cells is too large for rounded synthesis (at most "
            f"{2 ** (60 - _MIN_GRID_BITS) - 2} records and {2**_MIN_GRID_BITS} cells); "
            "use method 'iid'"
        )
    return bits


def _weights(probs: np.ndarray, bits: int) -> np.ndarray:
    """Each row of ``probs`` (non-negative) as integer weights on a 2^bits grid, in
    proportion; a row of no mass (or not finite) becomes uniform weights."""
    mass = probs.sum(axis=1, keepdims=True)
    ok = (mass > 0) & np.isfinite(mass)
    share = np.where(ok, probs / np.where(ok, mass, 1.0), 1.0 / probs.shape[1])
    weights = np.rint(share * float(2**bits)).astype(np.int64)
    empty = weights.sum(axis=1) == 0
    weights[empty] = 1
    return weights


def rounded_counts(sizes: np.ndarray, weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Controlled rounding of ``sizes[g] * weights[g] / weights[g].sum()``, one row a group.

    Each count is the floor or the ceiling of its expected count, each row sums to exactly
    ``sizes[g]``, and each count's expectation is exactly the expected count: the cells that
    get the ceiling are chosen by systematic sampling (Madow 1949) over the remainders laid
    end to end, with one uniform integer start a group, so cell j is chosen with probability
    exactly its fractional part. All integer arithmetic.

    Args:
        sizes: the records of each group (non-negative integers, shape ``(G,)``).
        weights: non-negative integer weights (shape ``(G, K)``), each row's sum positive;
            ``sizes[g] * weights[g].sum()`` times 2 must stay below 2^63.
        rng: the random source (one ``integers`` call: each group's start).

    Returns:
        The counts, integers of shape ``(G, K)``.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.int64)
    total = weights.sum(axis=1)[:, None]  # W_g: the expected count of cell j is m w_j / W_g
    product = sizes[:, None] * weights
    floor = product // total
    # the remainders sum to k_g W_g, k_g = m - sum(floor): the cells owed a ceiling
    ends = np.cumsum(product - floor * total, axis=1)
    # the points start + t W_g (t = 0, 1, ...), start uniform on 1..W_g: cell j holds one iff
    # a point falls in (ends[j-1], ends[j]], a span shorter than W_g: probability span / W_g
    start = rng.integers(1, total[:, 0] + 1)[:, None]
    reached = (ends - start + total) // total  # the points at or below each end
    extra = np.diff(reached, axis=1, prepend=0)
    return floor + extra


def _rounded(table: np.ndarray, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One column index per entry of ``rows``: each group of equal rows gets the rounded
    counts of its row of ``table``, dealt to its records in a random order."""
    groups, inverse = np.unique(rows, return_inverse=True)
    inverse = inverse.reshape(-1)
    sizes = np.bincount(inverse, minlength=groups.size)
    weights = _weights(table[groups], _grid_bits(int(rows.size), table.shape[1]))
    counts = rounded_counts(sizes, weights, rng)
    width = table.shape[1]
    values = np.repeat(np.tile(np.arange(width, dtype=np.int64), groups.size), counts.ravel())
    shuffled = rng.permutation(rows.size)
    slots = shuffled[np.argsort(inverse[shuffled], kind="stable")]  # by group, random within
    out = np.empty(rows.size, dtype=np.int64)
    out[slots] = values
    return out


def sample_codes(
    tree: JunctionTree,
    beliefs: Sequence[np.ndarray],
    conds: Sequence[np.ndarray],
    sizes: Sequence[int],
    n: int,
    rng: np.random.Generator,
    method: str = "iid",
) -> np.ndarray:
    """``n`` records (codes, ``n x len(sizes)``) from the calibrated model, by ``method``
    (``"iid"`` or ``"rounded"``: module docstring)."""
    assign: Assign = _draw if check_sampling(method) == "iid" else _rounded
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
        drawn = assign(flat, np.asarray(rows, dtype=np.int64), rng)
        values = np.unravel_index(drawn, tuple(int(sizes[a]) for a in new))
        for a, v in zip(new, values, strict=True):
            codes[:, a] = v
    return codes
