"""Belief propagation on the junction tree, and marginals of attribute sets outside a clique.

Calibration is the two-pass sum-product algorithm on rescaled tables (so potentials of any
range do not overflow): messages flow from the leaves to the root, then back; each clique's
belief is then the model's exact marginal on it. Its cost is linear in the cells of the
cliques.

A marginal over attributes that no clique holds is computed from the calibrated beliefs:
the smallest subtree whose cliques hold the attributes (leaves that add none of them are
pruned, which marginalises out their private attributes), written as its top clique's belief
times, for every other clique of the subtree, its conditional given its separator. Summing
the non-query attributes out of that product is one ``numpy.einsum`` with a greedy
contraction order. Every factor is a probability or a conditional probability (at most 1),
so the product does not overflow and underflows only where the probability is itself tiny.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from synth.graphical.factor import expand, project
from synth.graphical.junction_tree import JunctionTree

__all__ = ["calibrate", "conditionals", "query_marginal", "steiner_cliques"]


def calibrate(tree: JunctionTree, log_potentials: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The probability table of every clique (each sums to 1) under the potentials.

    Each clique's potential is exponentiated once, shifted so that its largest entry is 1,
    and every message is rescaled so that its largest entry is 1: the products then neither
    overflow nor underflow except for cells whose probability is itself below about 1e-300
    of the clique's largest, which come out as 0 (the sum-product in log space costs an
    exponential and a logarithm per message, about twice the time).

    Args:
        tree: the junction tree.
        log_potentials: one log-potential table per clique of ``tree``, over its attributes.
    """
    cliques, parent, seps = tree.cliques, tree.parent, tree.separators
    up: dict[int, np.ndarray] = {}
    partial = [np.exp(p - np.max(p)) for p in log_potentials]
    for c in reversed(tree.order):  # leaves first
        for k in tree.children[c]:
            partial[c] = partial[c] * expand(up[k], seps[k], cliques[c])
        if parent[c] >= 0:
            up[c] = _rescaled(project(partial[c], cliques[c], seps[c]))
    beliefs = partial
    with np.errstate(divide="ignore", invalid="ignore"):
        for c in tree.order:  # root first: beliefs[c] already has every child's message
            for k in tree.children[c]:
                message = expand(up[k], seps[k], cliques[c])
                without = np.where(message > 0, beliefs[c] / message, 0.0)
                down = _rescaled(project(without, cliques[c], seps[k]))
                beliefs[k] = beliefs[k] * expand(down, seps[k], cliques[k])
    return [b / b.sum() for b in beliefs]


def _rescaled(message: np.ndarray) -> np.ndarray:
    """``message`` divided by its largest entry (unchanged if that is 0)."""
    top = float(np.max(message)) if message.size else 0.0
    return message / top if top > 0 else message


def conditionals(tree: JunctionTree, beliefs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each clique's table divided by its separator's marginal: P(clique | separator).

    The root's (and any clique with an empty separator's) is its own probability table.
    Where the separator's probability is 0 the conditional is uniform (never used).
    """
    out = []
    for c, belief in enumerate(beliefs):
        sep = tree.separators[c]
        if tree.parent[c] < 0 or not sep:
            out.append(belief)
            continue
        marginal = expand(project(belief, tree.cliques[c], sep), sep, tree.cliques[c])
        free = belief.size // max(marginal.size, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            cond = np.where(marginal > 0, belief / marginal, 1.0 / free)
        out.append(cond)
    return out


def steiner_cliques(tree: JunctionTree, attrs: set[int]) -> list[int]:
    """The cliques of the smallest subtree holding every attribute of ``attrs``."""
    kept = set(range(len(tree.cliques)))
    neighbours = {i: set(tree.children[i]) for i in kept}
    for i, p in enumerate(tree.parent):
        if p >= 0:
            neighbours[i].add(p)
    changed = True
    while changed and len(kept) > 1:
        changed = False
        for leaf in list(kept):
            around = neighbours[leaf] & kept
            if len(around) != 1:
                continue
            (other,) = around
            mine = set(tree.cliques[leaf]) & attrs
            if mine <= set(tree.cliques[other]):
                kept.discard(leaf)
                changed = True
    return sorted(kept)


def query_marginal(
    tree: JunctionTree,
    beliefs: Sequence[np.ndarray],
    conds: Sequence[np.ndarray],
    attrs: Sequence[int],
) -> np.ndarray:
    """The probability table over sorted ``attrs`` (sums to 1), by the einsum of module doc."""
    wanted = sorted(set(attrs))
    inside = tree.containing(wanted)
    if inside is not None:
        return project(beliefs[inside], tree.cliques[inside], wanted)
    sub = steiner_cliques(tree, set(wanted))
    members = set(sub)
    # the top of the subtree: the one member whose parent is outside it
    tops = [c for c in sub if tree.parent[c] not in members]
    top = tops[0]
    variables = sorted({a for c in sub for a in tree.cliques[c]})
    label = {a: i for i, a in enumerate(variables)}
    operands: list[object] = [beliefs[top], [label[a] for a in tree.cliques[top]]]
    for c in sub:
        if c != top:
            operands += [conds[c], [label[a] for a in tree.cliques[c]]]
    operands.append([label[a] for a in wanted])
    result = np.einsum(*operands, optimize="greedy")  # type: ignore[call-overload]
    return np.asarray(result, dtype=float)
