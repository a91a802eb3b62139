"""Hay et al. (2010)'s tree recursions in matrix form, for a block of the recoded split.

In a block with ``k > 1`` (``topdown.blue.blocks``) each node's own measurements give a
``k x k`` precision ``Pi_v`` and an information vector ``r_v`` (one per copy); the tree GLS is
the scalar recursion with matrices:

- upward (each node's estimate from its own subtree): with the children's summed subtree
  estimates ``m`` and summed covariances ``M``, ``V = (M^-1 + Pi)^-1 = (I + M Pi)^-1 M`` and
  ``u = (I + M Pi)^-1 (m + M r)``; written without ``M^-1`` and ``Pi^-1``, so a node that
  measures nothing in a direction (``Pi`` singular) and children whose sum is exact in one
  (``M`` singular) are exact. A node without children needs ``Pi`` positive definite (its
  estimate must exist); otherwise the solve is refused with the level named.
- an exact node total (an invariant, variance 0) is a constraint ``w'u = T``, not a huge
  precision (it would swamp every other entry of a matrix): the node's estimate is
  conditioned on it, ``u += V w (T - w'u) / w'Vw``, ``V -= V w w'V / w'Vw``, and the exact
  direction projected out of ``V`` (``w`` is known, so this is exact, not a float threshold).
- downward (each child's subtree estimate corrected by its share of the gap to its parent's
  final estimate): ``u_c += V_c M^+ (u_p - m)`` and ``F_c = V_c - V_c M^+ V_c + K F_p K'``
  with ``K = V_c M^+``, the Gaussian conditioning on the children's sum (``M^+`` the inverse
  off the exact direction when every child's total is exact).

Kept apart from ``topdown.blue.recursions`` (the scalar kernels, which every plain strategy
runs and which stream the leaf level without copies) because only recoded strategies take it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from topdown.blue.childless import childless_inverses
from topdown.blue.mapped_stacks import MadeStack, MappedStacks, hand_back
from topdown.blue.shared_matrices import SharedMatrices, dense, type_index, type_rows
from topdown.errors import StrategyError

__all__ = ["MatrixUp", "matrix_upward", "matrix_downward", "NodeInfo"]


@dataclass(frozen=True)
class NodeInfo:
    """One level's own measurements in a block: ``Pi`` (nodes, k, k, held per distinct
    value), ``r`` (nodes, copies, k), and the exact totals (``exact``: bool (nodes,),
    ``total``: float (nodes,)), if any."""

    precision: SharedMatrices
    info: np.ndarray
    exact: np.ndarray | None = None
    total: np.ndarray | None = None


@dataclass
class MatrixUp:
    """The upward recursion's results per level: subtree estimates (nodes, copies, k) and
    covariances (nodes, k, k, per type), the children's sums of both (parents' levels), and
    whether each node's subtree estimate has an exact total (``exact``) or all its children's
    have (``children_exact``)."""

    est: list[np.ndarray]
    var: list[SharedMatrices]
    child_sum: list[np.ndarray]
    child_var: list[SharedMatrices]
    exact: list[np.ndarray]
    children_exact: list[np.ndarray]


def _sym(a: np.ndarray) -> np.ndarray:
    return 0.5 * (a + np.swapaxes(a, -1, -2))


def _off_direction(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Each of the matrices ``a`` (..., k, k) with ``w`` projected out (an exact direction)."""
    p = np.eye(len(w)) - np.outer(w, w) / (w @ w)
    return _sym(p @ a @ p)


#: Bytes of per-node ``k x k`` matrices gathered at once (``_apply``): below it a level's
#: nodes are multiplied in one batched product (the PL94 preset: k <= 8, thousands of node
#: types); above it, a product per type (the DHC preset: 10.8 MB a matrix, few types).
GATHER_BYTES = 1 << 26


def _by_type(types: np.ndarray, k: int) -> bool:
    """Whether a level's ``k x k`` steps run a type at a time (``_apply``'s product per type):
    its nodes' matrices would exceed ``GATHER_BYTES`` gathered. Then the recursions also make
    each type's matrices one type at a time, so a level's transient matrices are a few
    ``k x k`` ones, not several stacks over its types (the 14 county types of a
    750,000-person DHC state: about 150 MB a stack and block, ten stacks at once in the
    upward step)."""
    return len(types) * k * k * 8 > GATHER_BYTES


def _apply(g: np.ndarray, types: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per node ``v``, ``g[types[v]]`` (k, k) times each copy of ``x[v]`` (nodes, copies, k):
    ``x g'`` as a new array, by node type."""
    if not _by_type(types, g.shape[-1]):
        return np.matmul(x, np.swapaxes(g[types], 1, 2))
    out = np.empty(x.shape)
    for t in range(len(g)):
        rows = type_rows(types, t)
        out[rows] = np.matmul(x[rows], g[t].T)
    return out


def _summed(
    S: sp.csr_matrix, child: SharedMatrices, maps: MappedStacks | None = None
) -> SharedMatrices:
    """Each parent's sum of its children's matrices: a parent's type is how many children of
    each type it has (``S``: the parents' sum matrix over the children). With ``maps`` a
    stack large enough is made in a file, a band of rows of every matrix at a time (the
    same product on fewer columns: the same numbers), the child pages read handed back."""
    n_types = len(child.values)
    onehot = sp.csr_matrix(
        (np.ones(len(child)), (np.arange(len(child)), child.index)),
        shape=(len(child), n_types),
    )
    counts = np.asarray((S @ onehot).toarray())
    types, first = type_index([counts])
    k = child.k
    flat = child.values.reshape(n_types, k * k)
    stack = MadeStack((first.size, k, k), maps=maps)
    if not stack.on_disk:
        stack.done()
        return SharedMatrices((counts[first] @ flat).reshape(-1, k, k), types)
    # rows per band: at most SUM_BAND_BYTES of each, but products of at least SUM_BAND_MIN
    # multiply-adds (smaller ones OpenBLAS takes through other kernels, whose round-off
    # differs: the same band split of larger ones gives the whole product's numbers)
    band = max(
        SUM_BAND_BYTES // (8 * k * max(n_types, first.size)),
        -(-SUM_BAND_MIN // (first.size * k * n_types)),
    )
    for row in range(0, k, band):
        end = min(k, row + band)
        part = counts[first] @ flat[:, row * k : end * k]
        hand_back(child.values)
        for t in range(first.size):
            stack.put(t, part[t].reshape(end - row, k), row)
    return SharedMatrices(stack.done(), types)


#: Bytes of the band of rows ``_summed`` makes at once (of its children's matrices and of the
#: sums) when the sums go to a file.
SUM_BAND_BYTES = 1 << 24
#: The fewest multiply-adds of a band's product (``_summed``): OpenBLAS computes products of
#: up to 100^3 with small-matrix kernels, so a band that small could round otherwise than the
#: whole product (measured: k = 9 and 25 differ in the last bit, k = 100 and 1,160 do not).
SUM_BAND_MIN = 1 << 22


def _childless(pi: np.ndarray, types: np.ndarray, kinds: np.ndarray, where: str) -> np.ndarray:
    """The inverses of childless node types' precisions ``pi`` (those types ``kinds``, of
    ``types`` per node), refused (naming how many nodes) where the measurements do not
    identify a node's cells. Each is checked and inverted once per process
    (``topdown.blue.childless``: a level's leaves meet this step in every chunk)."""
    inverse, bad = childless_inverses(pi)
    if bad.any():
        nodes = int(np.isin(types, kinds[bad]).sum())
        raise StrategyError(
            "the BLUE of recoded queries needs every node without children to "
            "identify, by its own measurements, how its cells split between the "
            "recodes' groups within every combination of the other attributes' values; "
            f"{nodes} node(s) of {where} do not. Measure 'detailed' "
            "there (as the Census strategies do), or use estimator 'topdown'"
        )
    return inverse


def _children(
    level: int,
    n_levels: int,
    sums: list[sp.csr_matrix],
    up: MatrixUp,
    n: int,
    k: int,
    below: tuple[np.ndarray, np.ndarray | SharedMatrices] | None,
    maps: MappedStacks | None,
) -> tuple[np.ndarray | None, SharedMatrices, np.ndarray, np.ndarray]:
    """The children's summed subtree estimates (None: no node has children) and covariances
    of ``level``'s nodes, which nodes have children and which have only exact ones."""
    if level == n_levels - 1 and below is None:
        none = np.zeros(n, dtype=bool)
        return None, SharedMatrices.constant(np.zeros((k, k)), n), none, none
    if level == n_levels - 1:
        assert below is not None
        return below[0], SharedMatrices.of(below[1]), np.ones(n, dtype=bool), np.zeros(n, bool)
    S = sums[level]
    c = up.est[level + 1]
    m = (S @ c.reshape(c.shape[0], -1)).reshape((n,) + c.shape[1:])
    has = S.getnnz(axis=1) > 0
    n_exact = S @ up.exact[level + 1].astype(float)
    return m, _summed(S, up.var[level + 1], maps), has, has & (n_exact == S.getnnz(axis=1))


def matrix_upward(
    own: Callable[[int], NodeInfo],
    n_levels: int,
    sums: list[sp.csr_matrix],
    w: np.ndarray,
    where: Callable[[int], str],
    below: tuple[np.ndarray, np.ndarray | SharedMatrices] | None = None,
    maps: MappedStacks | None = None,
) -> MatrixUp:
    """The upward recursion of one block (see the module docstring). ``w``: the block's node
    total direction (its exact totals' constraint); ``where(level)``: how to name a level in
    an error; ``below``: the last level's children's summed estimates and covariances when
    its nodes are not leaves (a streamed release's subtrees, summarised); ``maps``: where
    large covariance stacks go as they are made (``topdown.blue.mapped_stacks``; else memory).

    Each ``k x k`` step runs once per node type (``topdown.blue.shared_matrices``: same
    precision, same children's covariance, same exact total flags), batched over the types;
    the estimates, per node, are products with their type's matrices (``_apply``)."""
    empty: list = [np.empty(0)] * n_levels
    up = MatrixUp(*(list(empty) for _ in range(6)))
    for level in range(n_levels - 1, -1, -1):
        node = own(level)
        pi, r = node.precision, node.info
        n, k = len(pi), pi.k
        m, M, has, child_exact = _children(level, n_levels, sums, up, n, k, below, maps)
        given = node.exact if node.exact is not None and node.total is not None else None
        fresh = np.zeros(n, dtype=bool) if given is None else given & ~child_exact
        exact = child_exact if given is None else child_exact | given
        types, first = type_index([pi.index, M.index, has, fresh, exact])
        flags = (~has[first], fresh[first], exact[first])
        if _by_type(types, k):
            values, est, shift = _up_by_type(
                pi, M, types, first, flags, r, m, w, where(level), maps
            )
        else:
            values, est, shift = _up_stacked(pi, M, types, first, flags, r, m, w, where(level))
            if maps is not None:
                values = maps.held(values)
        if shift is not None:
            assert node.total is not None
            rows = fresh
            gap = node.total[rows] - est[rows, 0, :] @ w
            est[rows, 0, :] += shift[types[rows]] * gap[:, None]
        up.est[level], up.var[level], up.exact[level] = est, SharedMatrices(values, types), exact
        if level < n_levels - 1 or below is not None:
            assert m is not None
            up.child_sum[level], up.child_var[level] = m, M
            up.children_exact[level] = child_exact
    return up


def _conditioned(values: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Covariances (types, k, k) of estimates conditioned on their exact total ``w'u``: the
    estimates' shift per unit of gap (``V w / w'Vw``, (types, k)) and the new covariances."""
    vw = values @ w  # (types, k)
    q = vw @ w
    return vw / q[:, None], values - np.einsum("tk,tl->tkl", vw, vw) / q[:, None, None]


def _gains(cov: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per type (types, k, k), the upward step's ``(I + M Pi)^-1`` and ``(I + M Pi)^-1 M``
    from its children's summed covariance ``cov`` and its own precision ``p``. Where ``Pi``
    is zero (a node measured elsewhere: a streamed subtree's top, a chunk's parents, each met
    once per subtree or chunk) they are ``I`` and ``M`` without the product and the inverse
    (0.2 to 0.5 CPU s a DHC block of ``k = 1,160``, measured): the same numbers, since
    ``I + M 0`` is ``I``, which LAPACK inverts exactly, and ``I M`` adds only zeros to each
    entry of ``M``."""
    k = cov.shape[-1]
    measured = p.reshape(len(p), -1).any(axis=1)
    if measured.all():  # the common case: no stacks of I and M copied, to be overwritten
        a_inv = np.linalg.inv(np.eye(k) + cov @ p)
        return a_inv, a_inv @ cov
    a_inv = np.broadcast_to(np.eye(k), cov.shape).copy()
    of_r = cov.copy()
    if measured.any():
        a_inv[measured] = np.linalg.inv(np.eye(k) + cov[measured] @ p[measured])
        of_r[measured] = a_inv[measured] @ cov[measured]
    return a_inv, of_r


def _up_stacked(
    pi: SharedMatrices,
    M: SharedMatrices,
    types: np.ndarray,
    first: np.ndarray,
    flags: tuple[np.ndarray, np.ndarray, np.ndarray],
    r: np.ndarray,
    m: np.ndarray | None,
    w: np.ndarray,
    where: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The upward step's covariances per type (types, k, k), estimates per node and, where a
    type's exact total is new (``flags``: per type, whether it is a leaf, has a new exact
    total, is exact), the estimates' shift per unit of gap (types, k); every type's matrices
    stacked at once (small ``k x k``: thousands of PL94 types)."""
    leaf, changed, held = flags
    k = pi.k
    p = pi.values[pi.index[first]]
    # per type: est = of_m m + of_r r (of_m = 0 without children), values = covariance
    of_m, of_r = np.zeros_like(p), np.empty_like(p)
    values = np.empty_like(p)
    if leaf.any():
        inv = _childless(p[leaf], types, np.flatnonzero(leaf), where)
        of_r[leaf], values[leaf] = inv, _sym(inv)
    if (~leaf).any():
        cov = M.values[M.index[first[~leaf]]]
        hand_back(M.values)
        of_m[~leaf], of_r[~leaf] = _gains(cov, p[~leaf])
        values[~leaf] = _sym(of_r[~leaf])
    est = _apply(of_r, types, r)
    if m is not None and (~leaf).any():
        est += _apply(of_m, types, m)
    shift = None
    if changed.any():
        shift = np.zeros((first.size, k))
        shift[changed], values[changed] = _conditioned(values[changed], w)
    values[held] = _off_direction(values[held], w)
    return values, est, shift


def _up_by_type(
    pi: SharedMatrices,
    M: SharedMatrices,
    types: np.ndarray,
    first: np.ndarray,
    flags: tuple[np.ndarray, np.ndarray, np.ndarray],
    r: np.ndarray,
    m: np.ndarray | None,
    w: np.ndarray,
    where: str,
    maps: MappedStacks | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``_up_stacked`` one type at a time: the same products on each type's matrices (the
    same numbers), a type's ``k x k`` temporaries dropped before the next type's are made,
    and its covariance written to its place in the stack (a file of ``maps`` when large
    enough) as soon as it is final, the pages read of the children's sums handed back. The
    types with a new exact total (few: the invariants' nodes) are kept until every one is
    made, then conditioned together as stacked."""
    leaf, changed, held = flags
    k = pi.k
    stack = MadeStack((first.size, k, k), maps=maps)
    est = np.empty(r.shape)
    inv = None
    if leaf.any():  # few types (a level's leaves are one): checked together, as stacked
        inv = _childless(pi.values[pi.index[first[leaf]]], types, np.flatnonzero(leaf), where)
    at_leaf = np.cumsum(leaf) - 1
    kept: list[np.ndarray] = []
    for t in range(first.size):
        rows = type_rows(types, t)
        if leaf[t]:
            assert inv is not None
            of_r, of_m = inv[at_leaf[t]], np.zeros((k, k))
            one = _sym(of_r)
        else:
            cov = M.values[M.index[first[t]]]
            of_m, of_r = (g[0] for g in _gains(cov[None], pi.values[pi.index[first[t]]][None]))
            one = _sym(of_r)
            del cov
            hand_back(M.values)
        est[rows] = np.matmul(r[rows], of_r.T)
        if m is not None and not leaf.all():
            # as ``_apply``: the product is made, then added (the same sums as stacked)
            est[rows] += np.matmul(m[rows], of_m.T)
        if changed[t]:
            kept.append(one)
        else:
            stack.put(t, _off_direction(one[None], w)[0] if held[t] else one)
    shift = None
    if kept:
        shift = np.zeros((first.size, k))
        shift[changed], conditioned = _conditioned(np.stack(kept), w)
        for c, one in zip(np.flatnonzero(changed), conditioned, strict=True):
            stack.put(int(c), _off_direction(one[None], w)[0] if held[c] else one)
    return stack.done(), est, shift


def _pinv_sum(M: np.ndarray, exact: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``M^+`` of summed covariances (types, k, k): the inverse, or where every child is
    exact in ``w``, the inverse off that direction (``P (P M P + w w'/|w|^2)^-1 P``)."""
    out = np.empty_like(M)
    plain = ~exact
    if plain.any():
        out[plain] = np.linalg.inv(M[plain])
    if exact.any():
        unit = w / np.sqrt(w @ w)
        p = np.eye(len(w)) - np.outer(unit, unit)
        out[exact] = p @ np.linalg.inv(p @ M[exact] @ p + np.outer(unit, unit)) @ p
    return _sym(out)


def _exact_rows(var: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Whether each given covariance is exact in ``w`` (a streamed subtree's top, whose
    covariance comes projected from the levels above): ``w'Vw`` is rounding only."""
    scale = np.abs(var).sum(axis=(1, 2)) * (w @ w)
    return np.einsum("k,nkl,l->n", w, var, w) <= 1e-20 * np.maximum(scale, 1e-300)


def matrix_downward(
    up: MatrixUp,
    parents: list[np.ndarray],
    sums: list[sp.csr_matrix],
    w: np.ndarray,
    top: tuple[np.ndarray, np.ndarray | SharedMatrices] | None = None,
    maps: MappedStacks | None = None,
) -> tuple[list[np.ndarray], list[SharedMatrices]]:
    """The downward recursion of one block: each level's final estimates (nodes, copies, k)
    and covariances (nodes, k, k, per type). ``top``: the first level's final estimates and
    covariances when it is not the root (a streamed release's subtree); ``maps``: where large
    covariance stacks go as they are made (``topdown.blue.mapped_stacks``; else memory).

    Each ``k x k`` step runs once per child type (its subtree covariance, its parent's summed
    children's and final covariances, its exact flag), batched over the types. The estimates
    are corrected in place: ``up.est`` below the first level is the final estimate
    afterwards."""
    n_levels = len(up.est)
    u = [up.est[0] if top is None else top[0]]
    f = [up.var[0] if top is None else SharedMatrices.of(top[1])]
    exact = [up.exact[0] if top is None else _exact_rows(dense(top[1]), w)]
    for level in range(1, n_levels):
        par = parents[level]
        V = up.var[level]
        M, children_exact = up.child_var[level - 1], up.children_exact[level - 1]
        # exact in w: its own subtree's total is, or its parent's final total is and every
        # sibling's subtree total is (an only child of an exact parent, say)
        S = sums[level - 1]
        n_exact = (S @ up.exact[level].astype(float))[par]
        n_children = S.getnnz(axis=1)[par]
        known = exact[level - 1][par] & (n_exact - up.exact[level] == n_children - 1)
        exact.append(up.exact[level] | known)
        fp = f[level - 1]
        keys = [V.index, M.index[par], children_exact[par], fp.index[par], exact[level]]
        types, first = type_index(keys)
        parent = par[first]
        held = exact[level][first]
        gap = u[level - 1] - up.child_sum[level - 1]  # per parent
        est = up.est[level]
        if _by_type(types, V.k):
            structure = (types, first, parent, held)
            values = _down_by_type(V, M, children_exact, fp, structure, w, est, gap[par], maps)
        else:
            v = V.values[V.index[first]]
            gain = v @ _pinv_sum(M.values[M.index[parent]], children_exact[parent], w)
            fp_t = fp.values[fp.index[parent]]
            hand_back(V.values, M.values, fp.values)
            values = _sym(v - gain @ v + gain @ fp_t @ np.swapaxes(gain, 1, 2))
            values[held] = _off_direction(values[held], w)
            est += _apply(gain, types, gap[par])
            if maps is not None:
                values = maps.held(values)
        u.append(est)
        f.append(SharedMatrices(values, types))
    return u, f


def _down_by_type(
    V: SharedMatrices,
    M: SharedMatrices,
    children_exact: np.ndarray,
    fp: SharedMatrices,
    structure: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    w: np.ndarray,
    est: np.ndarray,
    gap: np.ndarray,
    maps: MappedStacks | None = None,
) -> np.ndarray:
    """``matrix_downward``'s stacked step one child type at a time (the same products on
    each type's matrices, so the same numbers): the final covariances per type (types, k, k),
    returned, and each node's estimate corrected in place by ``gap`` (per node: its parent's).
    ``structure``: the child types per node, each type's first node and its parent, and
    whether the type is exact. ``M^+`` is made once per parent type: the child types are
    taken a parent type at a time, so one is held. Each type's covariance is written to its
    place in the stack (a file of ``maps`` when large enough) as soon as it is made, and the
    pages read of the stacks above handed back."""
    types, first, parent, held = structure
    k = V.k
    stack = MadeStack((first.size, k, k), maps=maps)
    keys = [(int(M.index[parent[t]]), bool(children_exact[parent[t]])) for t in range(first.size)]
    for key in dict.fromkeys(keys):
        pinv = _pinv_sum(M.values[key[0]][None], np.array([key[1]]), w)[0]
        hand_back(M.values)
        for t in (t for t in range(first.size) if keys[t] == key):
            v = V.values[V.index[first[t]]]
            gain = v @ pinv
            fp_t = fp.values[fp.index[parent[t]]]
            one = _sym(v - gain @ v + gain @ fp_t @ gain.T)
            del v, fp_t
            hand_back(V.values, fp.values)
            stack.put(t, _off_direction(one[None], w)[0] if held[t] else one)
            rows = type_rows(types, t)
            # as ``_apply``: the product is made, then added (the same sums as stacked)
            est[rows] += np.matmul(gap[rows], gain.T)
    return stack.done()
