"""The narrowest signed integer type for a level's arrays, and widening when a value needs more.

A block level of the 3-million-person state is 60,000 nodes x 2,016 cells: 968 MB in int64,
242 MB in int16, which is what its counts need (a block's cell rarely exceeds a few hundred).
The confidential histograms, the noisy answers and the estimated counts are all stored this
way. Code doing integer arithmetic on them widens first (numpy's ``sum`` does on its own: it
accumulates small integer types in the platform integer; ``-``, ``@`` and ``np.diff`` do not).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "INT_TYPES",
    "int_type_for",
    "smallest_int_type",
    "narrowed",
    "holding",
    "child_count_type",
]

INT_TYPES: tuple[type[np.signedinteger], ...] = (np.int8, np.int16, np.int32, np.int64)


def int_type_for(lo: int, hi: int) -> type[np.signedinteger]:
    """The narrowest signed integer type holding every integer from ``lo`` to ``hi``.

    Raises:
        OverflowError: the range exceeds int64.
    """
    for t in INT_TYPES:
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return t
    raise OverflowError(f"integers from {lo} to {hi} do not fit int64")


def smallest_int_type(values: np.ndarray) -> type[np.signedinteger]:
    """The narrowest signed integer type holding every value of ``values`` (int8 if empty)."""
    if values.size == 0:
        return np.int8
    return int_type_for(int(values.min()), int(values.max()))


def narrowed(values: np.ndarray) -> np.ndarray:
    """``values`` in ``smallest_int_type`` (no copy when they already are)."""
    return values.astype(smallest_int_type(values), copy=False)


def holding(array: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``array`` itself when its type holds every value of ``values``, else a copy of it in
    the narrowest type that holds both (to be written into: numpy's assignment of a value
    out of an integer type's range wraps it round without a word). Values already in a type
    ``array``'s holds (narrowed where they were made) are not scanned."""
    if np.promote_types(array.dtype, values.dtype) == array.dtype:
        return array
    needed = np.promote_types(array.dtype, smallest_int_type(values))
    return array if needed == array.dtype else array.astype(needed)


def child_count_type(parent_counts: np.ndarray) -> type[np.signedinteger]:
    """The type of a level's estimated counts, chosen before any is known: a child's cell is
    at most its parent's (the counts are non-negative and the children sum to their parent),
    so the narrowest type holding the parent level's largest count holds them. A pass that
    relaxes consistency (the failsafe) may exceed it: writers widen with ``holding``. The type
    follows published counts only."""
    return int_type_for(0, int(np.max(parent_counts, initial=0)))
