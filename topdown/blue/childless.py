"""The inverses of childless nodes' precisions, checked and inverted once per process.

The upward recursion of a recoded block (``topdown.blue.block_recursions``) starts at nodes
without children: their estimate is their own measurements', so it checks each such node
type's ``k x k`` precision positive definite (``eigvalsh``) and inverts it. Every leaf of a
level measured alike has the same precision, and the recursion meets them again and again:
once per subtree in a streamed release's first sweep, once per chunk of leaf families in its
second and in ``release()``'s leaf chunks (``topdown.blue.leaf_families``). For the DHC
persons preset that is eight matrices with ``k = 1,160`` each time, about 0.8 CPU s each
(check and inverse). Sampled each second through a streamed release of a 20,000-person
state to the block (``--stream-by TRACT``), 376 of the second sweep's 1,370 samples and 103 of
the first sweep's 500 were in this check and inverse.

Here each matrix is keyed by its bytes (its shape and a 16-byte BLAKE2b digest: about 16 ms
for a 10.8 MB matrix), so a hit is the same input and gives the same numbers: ``eigvalsh``
and ``inv`` of one matrix equal those of a stack holding it, bit for bit (LAPACK runs per
matrix), so the recursion's results do not depend on whether the cache was hit. The
precisions are public (they come from the budgets), so holding them is no disclosure. At most
``HELD_BYTES`` of inverses are kept, the least recently used dropped first; matrices under
``SMALL_BYTES`` are not kept (their check costs less than the digest's bookkeeping): they are
checked and inverted together, one stacked call, as before.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np

__all__ = ["childless_inverses", "HELD_BYTES", "SMALL_BYTES", "clear"]

#: Smallest eigenvalue, relative to the largest, of a childless node's precision accepted as
#: positive definite: below it the node's estimate is not identified by its measurements.
PD_TOLERANCE = 1e-12

#: The most bytes of inverses kept (the DHC preset's eight largest blocks: 86 MB).
HELD_BYTES = 1 << 28
#: Matrices smaller than this are checked and inverted each time, not kept.
SMALL_BYTES = 1 << 20

_held: OrderedDict[tuple, np.ndarray | None] = OrderedDict()
_lock = threading.Lock()  # the recoded blocks are solved on threads (``solve_blocks``)


def _key(one: np.ndarray) -> tuple:
    data = np.ascontiguousarray(one)
    return (data.shape, data.dtype.str, hashlib.blake2b(data.data, digest_size=16).digest())


def _checked(pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The inverses of a stack of precisions (zeros where not positive definite) and
    which are not."""
    eig = np.linalg.eigvalsh(pi)
    bad = eig[:, 0] <= PD_TOLERANCE * np.maximum(eig[:, -1], 1e-300)
    out = np.zeros(pi.shape)
    if (~bad).any():
        out[~bad] = np.linalg.inv(pi[~bad])
    return out, bad


def _checked_inverse(one: np.ndarray) -> np.ndarray | None:
    """The inverse of one precision, or None where it is not positive definite."""
    inverse, bad = _checked(one[None])
    return None if bad[0] else inverse[0]


def _kept(key: tuple) -> tuple[bool, np.ndarray | None]:
    with _lock:
        if key not in _held:
            return False, None
        _held.move_to_end(key)
        return True, _held[key]


def _keep(key: tuple, inverse: np.ndarray | None) -> None:
    if inverse is not None:
        inverse.flags.writeable = False  # shared by every later hit
    with _lock:
        _held[key] = inverse
        _held.move_to_end(key)
        while sum(v.nbytes for v in _held.values() if v is not None) > HELD_BYTES:
            _held.popitem(last=False)


def childless_inverses(pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per precision of ``pi`` (types, k, k): its inverse and whether it is not positive
    definite (the node's cells not identified by its own measurements; that inverse is
    left as zeros). The same numbers as ``np.linalg.inv`` and ``eigvalsh`` of the stack."""
    if pi[:1].nbytes < SMALL_BYTES:
        return _checked(pi)
    out = np.zeros(pi.shape)
    bad = np.zeros(len(pi), dtype=bool)
    for i, one in enumerate(pi):
        key = _key(one)
        found, inverse = _kept(key)
        if not found:
            inverse = _checked_inverse(one)
            _keep(key, inverse)
        if inverse is None:
            bad[i] = True
        else:
            out[i] = inverse
    return out, bad


def clear() -> None:
    """Drop every kept inverse (tests; a process that has finished with its release)."""
    with _lock:
        _held.clear()
