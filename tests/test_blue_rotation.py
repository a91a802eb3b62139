"""The rotated basis of the recoded BLUE (topdown.blue.rotation, block_terms, answers) against
dense references: the rotation is the orthonormal basis it claims, each block's gathered terms
are the block's projection of ``sum_q w_q Q_q'y_q`` (what each block computed for itself before
the rotation was shared), and the shared answers are ``Query.answer``'s."""

from __future__ import annotations

import numpy as np
import pytest
import test_blue as tb
from test_blue_recodes import ASKED, DOMAIN, STRATEGIES

from constraints.domain import Domain
from topdown.blue.answers import shared_answers
from topdown.blue.block_recursions import NodeInfo
from topdown.blue.block_terms import GATHER_BYTES, ScalarTerms, level_terms
from topdown.blue.blocks import AxisSplit, Block, blocks_of
from topdown.blue.rotation import (
    box,
    rotate_answers,
    rotate_axis,
    to_block,
    unrotate,
    unrotate_axis,
)
from topdown.measurement.estimator_inputs import precision
from topdown.strategy import Query

SPLITS = {
    "one group": (0, 0, 0, 0, 0, 0, 0),
    "hhgq-like, consecutive": (0, 1, 1, 1, 1, 2, 2, 2),
    "interleaved groups": (0, 1, 0, 2, 1, 1, 2, 0),
    "every value its own group": (0, 1, 2),
}


@pytest.fixture(autouse=True)
def _domain(monkeypatch) -> None:
    """``test_blue``'s random inputs read its module's DOMAIN: the recoded one."""
    monkeypatch.setattr(tb, "DOMAIN", DOMAIN)


def _split(groups: tuple[int, ...]) -> AxisSplit:
    return AxisSplit(groups, tuple(int(c) for c in np.bincount(groups)))


def _domain_of(shape: list[int]) -> Domain:
    return Domain({f"X{i}": list(range(n)) for i, n in enumerate(shape)})


def _is_basis(w: np.ndarray, split: AxisSplit) -> None:
    """``w``'s columns: orthonormal, the first ``g`` the span basis, the others within-group
    contrasts (each sums to 0 over every finest group)."""
    np.testing.assert_allclose(w.T @ w, np.eye(split.n), atol=1e-12)
    np.testing.assert_allclose(w[:, : split.g], split.basis(), atol=1e-12)
    labels = np.asarray(split.groups)
    for k in range(split.g):
        np.testing.assert_allclose(w[labels == k, split.g :].sum(axis=0), 0.0, atol=1e-12)


@pytest.mark.parametrize("name", sorted(SPLITS))
@pytest.mark.parametrize("axis", [1, 2, 3])
def test_rotation_is_an_orthonormal_basis_of_span_then_contrasts(name: str, axis: int) -> None:
    """Rotating the unit vectors gives the basis (read off as a dense matrix ``W'``), which
    must be orthonormal with the span first; every axis position, int and float input, and
    ``unrotate`` its inverse."""
    split = _split(SPLITS[name])
    n = split.n
    shape = [n, 2, 3, 2]
    shape[axis] = n
    units = np.zeros(shape)
    np.moveaxis(units, axis, 1)[:, :, 0, 0] = np.eye(n)
    w_t = np.moveaxis(rotate_axis(units, split, axis), axis, 1)[:, :, 0, 0].T  # W'
    _is_basis(w_t.T, split)
    rng = np.random.default_rng(len(name) + axis)
    x = rng.integers(-9, 9, size=shape)
    rotated = rotate_axis(x, split, axis)
    want = np.moveaxis(np.moveaxis(x, axis, -1) @ w_t.T, -1, axis)
    np.testing.assert_allclose(rotated, want, atol=1e-12)
    np.testing.assert_array_equal(rotated, rotate_axis(x.astype(float), split, axis))
    np.testing.assert_allclose(unrotate_axis(rotated, split, axis), x, atol=1e-12)
    # every axis at once: the detailed query's rotation, and back
    splits = [_split((0,) * s) for s in shape[1:]]
    splits[axis - 1] = split
    factors = Query(None).factors(_domain_of(shape[1:]))
    whole, scale = rotate_answers(x, factors, splits)
    assert scale == 1.0
    np.testing.assert_allclose(unrotate(whole, splits), x, atol=1e-12)


def _dense_basis(split: AxisSplit) -> np.ndarray:
    """The axis's rotated basis as columns ``W`` (n, n), read off ``rotate_axis``: rotating
    the unit vectors (columns of the identity) gives ``W'``."""
    return rotate_axis(np.eye(split.n)[None], split, 1)[0].T


def _block_basis(block: Block) -> np.ndarray:
    """The block's columns of the rotated basis, Kronecker over the axes in axis order:
    (cells, box coordinates in axis order)."""
    out = np.ones((1, 1))
    for i, split in enumerate(block.splits):
        w = _dense_basis(split)
        out = np.kron(out, w[:, split.g :] if i in block.contrast else w[:, : split.g])
    return out


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@pytest.mark.parametrize("gather_bytes", [GATHER_BYTES, 64])
def test_each_block_gathers_its_projection_of_the_weighted_answers(
    name: str, gather_bytes: int, monkeypatch
) -> None:
    """Per level and block: ``B'(sum_q w_q Q_q'y_q)`` with ``B`` the block's basis columns and
    ``w_q`` the query's precision (over the block's ``pi`` when ``k = 1``), computed densely
    cell by cell; a block's precision ``sum_q w_q B'Q_q'Q_qB``. Per-node variances, with some
    nodes not measured by a query (precision 0). Small row blocks (64 bytes: one node at a
    time) on 2 threads must give the same as one block."""
    monkeypatch.setattr("topdown.blue.block_terms.GATHER_BYTES", gather_bytes)
    rng = np.random.default_rng(len(name))
    tree = tb.random_tree(rng, (3,), only_child=False)
    inputs = tb.random_inputs(rng, tree, STRATEGIES[name][:2], per_node=True)
    every = [m.query for lv in inputs.levels for m in lv]
    blocks = blocks_of(DOMAIN, every)
    for level, lv in enumerate(inputs.levels):
        nodes = tree.levels[level].size
        lv = tuple(
            type(m)(m.level, m.query, m.noisy, np.where(np.arange(nodes) % 3 == 1, np.inf, 1.0))
            if m.query.name != "detailed"
            else m
            for m in lv
        )
        got = level_terms(blocks, lv, DOMAIN, nodes, "here", threads=2)
        for block, terms in zip(blocks, got, strict=True):
            b = _block_basis(block)
            # the block's own layout (contrast axes, then span axes): its columns reordered
            index = np.arange(b.shape[1]).reshape((1,) + _box_shape(block))
            b = b[:, to_block(index, block).reshape(-1)]
            pi = np.zeros((nodes, b.shape[1], b.shape[1]))
            info = np.zeros((nodes, b.shape[1]))
            for m in lv:
                q = m.query.matrix(DOMAIN).toarray()
                if not block.sees(m.query.factors(DOMAIN)):
                    np.testing.assert_allclose(b.T @ q.T @ q @ b, 0.0, atol=1e-12)
                    continue
                prec = np.broadcast_to(precision(m.variance), (nodes,))
                pi += prec[:, None, None] * (b.T @ q.T @ q @ b)[None]
                info += prec[:, None] * (m.noisy @ q @ b)
            if isinstance(terms, ScalarTerms):
                per_copy = terms.precision[:, None, None]
                values = terms.z * terms.precision[:, None]
            else:
                assert isinstance(terms, NodeInfo)
                per_copy = np.asarray(terms.precision)  # per node, from its shared types
                values = terms.info.reshape(nodes, -1)
            copies = b.shape[1] // block.k
            want_pi = np.stack([np.kron(np.eye(copies), p) for p in per_copy])
            np.testing.assert_allclose(pi, want_pi, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(values, info, rtol=1e-10, atol=1e-9)


def _box_shape(block: Block) -> tuple[int, ...]:
    """The box's size per axis, in axis order."""
    return tuple(s.n - s.g if i in block.contrast else s.g for i, s in enumerate(block.splits))


def test_rotated_answers_are_q_transposed_y_in_the_rotated_basis() -> None:
    """``rotate_answers`` of any asked query: ``W'Q'y`` restricted to the coordinates it can
    be non-zero on (the kept-whole axes' all, the others' span), times its scale."""
    rng = np.random.default_rng(3)
    blocks = blocks_of(DOMAIN, [Query.parse(q) for q in ASKED])
    splits = blocks[0].splits
    w = np.ones((1, 1))
    for split in splits:
        w = np.kron(w, _dense_basis(split))
    for name in ASKED:
        q = Query.parse(name)
        factors = q.factors(DOMAIN)
        y = rng.normal(size=(4, q.n_answers(DOMAIN)))
        full = (y @ q.matrix(DOMAIN).toarray() @ w).reshape((4,) + DOMAIN.shape)
        rotated, scale = rotate_answers(
            y.reshape((4,) + tuple(f.n_out for f in factors)), factors, splits
        )
        sub = (slice(None),) + tuple(
            slice(None) if f.identity else slice(0, s.g)
            for f, s in zip(factors, splits, strict=True)
        )
        np.testing.assert_allclose(rotated * scale, full[sub], atol=1e-10)
        rest = np.array(full)
        rest[sub] = 0.0
        np.testing.assert_allclose(rest, 0.0, atol=1e-10)
    assert all(box(b)[0] == slice(None) for b in blocks)


@pytest.mark.parametrize("seed", [0, 1])
def test_shared_answers_equal_each_querys_own(seed: int) -> None:
    """Every asked query (recoded, summed, detailed, a recode through another's answers) read
    through ``shared_answers`` equals ``Query.answer`` on the cells; the detailed answers are
    the cells themselves."""
    rng = np.random.default_rng(seed)
    cells = rng.normal(size=(5, DOMAIN.size))
    queries = [Query.parse(q) for q in ASKED]
    got = shared_answers(cells, queries, DOMAIN)
    for q, values in zip(queries, got, strict=True):
        np.testing.assert_allclose(values, q.answer(cells, DOMAIN), rtol=1e-12, atol=1e-12)
    assert np.shares_memory(got[ASKED.index("detailed")], cells)
