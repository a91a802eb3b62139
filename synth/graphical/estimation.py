"""Fit a graphical model to noisy marginals: mirror descent with belief propagation.

The problem (McKenna, Sheldon, Miklau, ICML 2019, "Private-PGM"): over the distributions
with the given total N, minimise

    L(mu) = sum_r (1 / (2 var_r)) || mu_r - y_r ||^2,

mu_r the distribution's marginal (times N) on measured clique r, y_r the noisy table. The
minimiser over *all* distributions is attained by a Markov random field on the measured
cliques, so the search runs over its log-potentials theta_r: mirror descent in the marginal
polytope's natural geometry is the update theta_r <- theta_r - alpha * dL/dmu_r, with mu
computed by belief propagation. The step alpha is chosen by backtracking (a step is kept when
the loss falls by at least half of what its linearisation predicts) and doubled after each
kept step, so no step size needs tuning. Warm starts reuse the previous fit's potentials for
the cliques it had (a new clique starts at zero), which is what makes the adaptive
generator's refits cheap.

The total is given, or estimated from the measurements (each table's noisy sum, combined by
inverse variance) when it is not: the estimate never reads the true number of records.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from synth._domains import SynthError
from synth._estimate import Measurement
from synth.graphical.inference import calibrate
from synth.graphical.junction_tree import build_junction_tree
from synth.graphical.model import GraphicalModel

__all__ = ["fit_model", "estimate_total"]

logger = logging.getLogger(__name__)


def _sorted(m: Measurement, sizes: Sequence[int]) -> tuple[tuple[int, ...], np.ndarray, float]:
    """A measurement with its attributes sorted (its table transposed to match), checked."""
    attrs = tuple(int(a) for a in m.attrs)
    if len(set(attrs)) != len(attrs) or any(not 0 <= a < len(sizes) for a in attrs):
        raise SynthError(
            f"measurement attrs ({attrs}) must be distinct positions in [0, {len(sizes)})"
        )
    shape = tuple(int(sizes[a]) for a in attrs)
    noisy = np.asarray(m.noisy, dtype=float)
    if noisy.shape != shape:
        raise SynthError(
            f"measurement on {attrs} has shape {noisy.shape}; the domain gives {shape}"
        )
    if not (np.isfinite(m.variance) and m.variance > 0):
        raise SynthError(f"measurement on {attrs} has variance ({m.variance!r}); it must be > 0")
    order = sorted(range(len(attrs)), key=lambda i: attrs[i])
    return tuple(attrs[i] for i in order), np.transpose(noisy, order), float(m.variance)


def estimate_total(measurements: Sequence[Measurement]) -> float:
    """The inverse-variance weighted mean of the measurements' sums (at least 1).

    A table of c cells with noise variance v has a sum with variance c v.
    """
    if not measurements:
        raise SynthError("measurements must not be empty: there is nothing to estimate from")
    sums = np.array([float(np.sum(m.noisy)) for m in measurements])
    variances = np.array([float(m.variance) * max(np.size(m.noisy), 1) for m in measurements])
    weights = 1.0 / variances
    return max(1.0, float(np.sum(weights * sums) / np.sum(weights)))


def fit_model(
    measurements: Sequence[Measurement],
    sizes: Sequence[int],
    *,
    total: float | None = None,
    iters: int = 500,
    max_cells: int | None = None,
    warm_start: GraphicalModel | None = None,
    cliques: Sequence[Sequence[int]] = (),
) -> GraphicalModel:
    """Fit the model of the module docstring.

    Args:
        measurements: noisy marginals (attribute positions into ``sizes``, any order).
        sizes: domain size of every attribute.
        total: the model's total; None estimates it (:func:`estimate_total`).
        iters: mirror-descent iterations (each one belief propagation, plus backtracking).
        max_cells: the cap on the largest clique table (None: no cap).
        warm_start: a previous fit whose potentials start this one.
        cliques: extra cliques to keep in the model unmeasured (e.g. to fix its structure).

    Raises:
        SynthError: a bad measurement, size or total; ModelSizeError over the cap.
    """
    sizes = tuple(int(s) for s in sizes)
    if not sizes or any(s < 1 for s in sizes):
        raise SynthError(f"sizes ({sizes}) must be a non-empty list of domain sizes >= 1")
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 0:
        raise SynthError(f"iters ({iters!r}) must be an integer >= 0")
    data = [_sorted(m, sizes) for m in measurements]
    if total is None:
        total = estimate_total(measurements)
    if not (np.isfinite(total) and total > 0):
        raise SynthError(f"total ({total!r}) must be a finite number > 0")
    keys = sorted({attrs for attrs, _, _ in data} | {tuple(sorted(c)) for c in cliques})
    tree = build_junction_tree(keys, sizes, max_cells=max_cells)
    theta: dict[tuple[int, ...], np.ndarray] = {}
    for key in keys:
        old = warm_start.potentials.get(key) if warm_start is not None else None
        theta[key] = np.array(old) if old is not None else np.zeros([sizes[a] for a in key])
    if not data:
        return GraphicalModel(sizes, tree, theta, float(total))
    # the loss grouped by clique: 0.5 sum_r w_r ||mu - y_r||^2
    #   = 0.5 W ||mu||^2 - <mu, b> + c,  W = sum w_r, b = sum w_r y_r
    weight: dict[tuple[int, ...], float] = {}
    target: dict[tuple[int, ...], np.ndarray] = {}
    constant = 0.0
    for attrs, y, var in data:
        weight[attrs] = weight.get(attrs, 0.0) + 1.0 / var
        target[attrs] = target.get(attrs, 0.0) + y / var
        constant += 0.5 * float(np.sum(y * y)) / var
    home: dict[tuple[int, ...], int] = {}
    for key in keys:
        found = tree.containing(key)
        assert found is not None  # the tree was built to cover every key
        home[key] = found
    shapes = {key: tuple(sizes[a] for a in tree.cliques[home[key]]) for key in keys}
    expanded = {key: [sizes[a] if a in key else 1 for a in tree.cliques[home[key]]] for key in keys}
    summed = {
        key: tuple(i for i, a in enumerate(tree.cliques[home[key]]) if a not in key)
        for key in weight
    }
    scale = float(total)

    def evaluate(params: dict[tuple[int, ...], np.ndarray]):
        tables = [np.zeros(0)] * len(tree.cliques)
        filled = [False] * len(tree.cliques)
        for key, values in params.items():
            c = home[key]
            part = values.reshape(expanded[key])
            if filled[c]:
                tables[c] = tables[c] + part
            else:
                tables[c] = np.broadcast_to(part, shapes[key]).copy()
                filled[c] = True
        for c, clique in enumerate(tree.cliques):
            if not filled[c]:
                tables[c] = np.zeros([sizes[a] for a in clique])
        beliefs = calibrate(tree, tables)
        loss = constant
        mus: dict[tuple[int, ...], np.ndarray] = {}
        grads: dict[tuple[int, ...], np.ndarray] = {}
        for key, w in weight.items():
            belief = beliefs[home[key]]
            mu = scale * (belief.sum(axis=summed[key]) if summed[key] else belief)
            mus[key] = mu
            loss += 0.5 * w * float(np.sum(mu * mu)) - float(np.sum(mu * target[key]))
            grads[key] = w * mu - target[key]
        return loss, mus, grads

    loss, mus, grads = evaluate(theta)
    max_weight = max(weight.values())
    alpha = 1.0 / (scale * max_weight)
    for step in range(iters):
        kept = False
        for _ in range(30):
            trial = dict(theta)
            for k, g in grads.items():
                trial[k] = theta[k] - alpha * g
            t_loss, t_mus, t_grads = evaluate(trial)
            predicted = sum(float(np.sum(grads[k] * (mus[k] - t_mus[k]))) for k in mus)
            if loss - t_loss >= 0.5 * predicted and np.isfinite(t_loss):
                kept = True
                break
            alpha *= 0.5
        if not kept:
            logger.debug("fit_model: no decrease at iteration %d (loss %.6g); stopped", step, loss)
            break
        theta, loss, mus, grads = trial, t_loss, t_mus, t_grads
        alpha *= 1.5
        logger.debug("fit_model: iteration %d, loss %.12g, step %.3g", step, loss, alpha)
    model = GraphicalModel(sizes, tree, theta, scale)
    logger.debug("fit_model: %d cliques, loss %.6g, total %.1f", len(keys), loss, total)
    return model
