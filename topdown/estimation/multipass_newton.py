"""Multipass with a first pass of marginals, by the Newton iterations: no general solver.

The 2020 DHC persons strategy (``topdown.presets.census2020_dhcp``, ``multipass=True``) fits
nine marginals in a first pass and the detailed histogram in a second that holds the first
pass's answers (``EstimateOptions.multipass_tolerance``). The per-family path
(``topdown.estimation.family``) gives both passes to a general QP solver, which does not finish
at 1.2 million cells a node. The Newton iterations of ``topdown.estimation.root_marginals``
(the root) and ``topdown.estimation.batched.marginals`` (families, children summing to their
parent) solve ``min w ||x - c||^2 + sum_m v_m ||A_m x - z_m||^2`` over ``x >= 0`` (and the
family's consistency, or the root's bounds on its total): strongly convex through the term
centred at ``c``. This module builds both passes out of such solves.

Pass 1: ``f(x) = sum_m v_m ||A_m x - z_m||^2`` over the same feasible set. ``f`` reads ``x``
only through its answers ``u = A x`` and is strictly convex in them, so the optimal answers
``u*`` are unique while ``x`` is not; pass 2 needs only ``u*``. Proximal point (Rockafellar,
"Monotone operators and the proximal point algorithm", SIAM J. Control Optim. 14, 1976):
``x_{j+1} = argmin f(x) + eps_j ||x - x_j||^2``, each step one strongly convex solve of the form
above with the centre ``x_j`` and weight ``eps_j``. The first step is centred at the detailed
answers with their own weight, which is the one-pass fit of the first-pass marginals and the
detailed query: a start close to the answer. ``f(x_j)`` decreases to the minimum and the
answers converge for any positive weights (for a quadratic ``f`` without bounds the error in
every non-zero direction of ``sum_m v_m A_m' A_m``, eigenvalue ``lambda``, shrinks by
``eps / (eps + lambda)`` a step). The weight falls by ``PROX_FALL`` a step from the detailed
one to ``PROX_SHARE`` times the child's smallest first-pass weight (where that is below the
detailed one), and each solve starts from the last one's multipliers (they converge with the
answers). A weight of the first-pass weights' size keeps each solve as well conditioned as
the one-pass fit: on the DHC preset's 20,000-person tract family (11 children, 8,311 cells)
at the detailed weight the answers' move shrank about threefold a step and a warm-started
solve took 2 to 15 Newton steps (14 steps in all), where a tenth of it took 27 CPU s for one
solve (an earlier run's did not settle in 60 Newton steps) on the way down to 1% of it
(``PROX_SHARE`` was 0.01). A family stops
when none of its answers moved by more than ``PROX_TOLERANCE`` times its largest answer (at
least 1) in a step, and is left to the general path when ``PROX_STEPS`` do not get there.

Pass 2: ``min w ||x - y||^2`` (and the soft fit of any marginal not in pass 1) with
``|A_m x - u*_m| <= tol`` over the feasible set. Holding the answers as hard equalities
(``Marginal.hard``, as ``batched.multipass`` holds totals) would make the dual's Hessian
singular: overlapping marginals repeat their shared sub-marginals (``HISPANIC x SEX`` and
``SEX x RELGQ`` both give ``SEX``) and the children's answers add up to the parent's. The
method of multipliers (Hestenes 1969, Powell 1969) keeps every solve strongly convex: the term
``V ||A_m x - u*_m + lam_m / V||^2`` (a marginal with weight ``V`` and shifted targets, the
form the Newton iterations fit), then ``lam_m += V (A_m x - u*_m)``, until every held answer
is within the tolerance. The dependent rows are harmless: ``u*`` are answers of one ``x``, so
they satisfy every linear relation among the rows, and the ridge ``1 / V`` fixes the
multipliers along those relations. ``V`` starts at ``HOLD_LOW`` times the detailed weight and
rises by ``HOLD_RISE`` after each round that settles, up to ``HOLD_WEIGHT`` times it; it falls
back after a round whose Newton iteration does not settle (a large ``V`` left the steps
creeping on degenerate duals: groups whose cells the consistency rows leave no child free to
move; on the DHC tract family ``V`` of 100 times the detailed weight took 39 to 100 Newton
steps a round, and the larger ones the route allowed before (up to 1e4) did not settle). While
``V`` stays the multipliers move with Nesterov's momentum (Nesterov 1983; the augmented
Lagrangian's multiplier step is a proximal step on the dual, Rockafellar 1976, which Guler
1992 accelerates so), restarted where the held answers moved away (O'Donoghue and Candes,
"Adaptive restart for accelerated gradient schemes", 2015): on the DHC tract family the held
answers went 0.041 then 0.0137 at the largest ``V`` with it, 0.041, 0.020, 0.011 without, and
the root's stayed at 0.00993 for three rounds without it.

Production's hold (``Strategy.multipass_tolerance = 0.1``; the DHC preset holds exactly, on
``topdown.estimation.nested_passes``, which ``two_passes`` takes whenever every first-pass
marginal is a sum of one of them's answers). The Census
Bureau's DAS held each first-pass answer as ``|Q x - Q x1| <= tol``, ``x1`` the first pass's
solution and ``tol`` the smallest tolerance those constraints allow (about 0: ``x1`` is
feasible) plus the solver's residual plus ``opt_tol_slack`` (``DAS_2020_DHC_Production_Code``,
``das_decennial/programs/optimization/l2_dataIndep_npass_optimizer_decomp.py``,
``findOptimalTolAndAddConstrs``; ``configs/production/dhc/person_US.ini`` lines 141-161:
``opt_tol``, slack 0.1). Its second pass's objective holds only the queries ordered in that
pass (``buildObjFxnAddQueries_decomp``): the first pass's queries enter as their held
answers. A tolerance above ``HELD_EXACTLY`` is such a box around ``u*``, the answer pass 1
returned (feasible, so the box is never empty), and pass 2 is ADMM (Boyd et al.,
"Distributed optimization and statistical learning via the alternating direction method of
multipliers", 2011, section 5) on ``A_m x = z_m`` with ``z_m`` in the box: the same
strongly convex solve with targets ``z_m - lam_m / V``, then ``z_m`` the box's point nearest
``A_m x + lam_m / V`` (a clip), then ``lam_m += V (A_m x - z_m)``; the momentum restarts as
above on the larger of the two residuals. With the box a point (``HELD_EXACTLY`` and below)
``z_m = u*_m`` and this is the method of multipliers above. The box aimed at is
``1 - HOLD_MARGIN`` of the tolerance wide on each side, so a family stops once its held
answers are within the tolerance of ``u*`` and no ``z_m`` moved by more than ``HOLD_SETTLE``
of the tolerance in a round; the penalty rises only to ``HOLD_WEIGHT_BOX`` times the detailed
weight (a smaller penalty lets the box's targets move). On the tests' families (3 x 4 x 5
cells, tolerance 0.1) that took 16 to 28 rounds and gave cells within 0.031 of the general
path's (Clarabel, the same tolerance). Pass 1 need only be as accurate as the box is wide:
it stops when no answer moved by more than ``PROX_OF_HOLD`` (a hundredth) of the tolerance
in a proximal step (or the relative ``PROX_TOLERANCE``, whichever is larger).

Which first-pass answers pass 2 holds: the queries of the DAS's constrain-to ordering, not
all of pass 1's. The DHC ordering (``programs/strategies/dhcp_strategies.py`` lines 434-453,
``DecompTestStrategyRegularOrderingDHCP_20220811_exp_21_1``) fits nine marginals in pass 0 but
constrains pass 1 to one of them (``L2_CONSTRAIN_TO_QUERY_ORDERING``, line 452). So
``two_passes`` takes ``held``, the positions among ``first`` that pass 2 holds
(``LevelStrategy.held``; None: all): pass 2 runs on a fitter over those marginals and
``second``'s only (``Fitter.only``), the others having shaped pass 1 alone.

A family is given up (the general path) when a round fails at the lowest ``V`` or
``HOLD_ROUNDS`` rounds do not hold it.

The tolerance the answer satisfies, checked on the answer returned: every held answer within
``multipass_tolerance + HOLD_RELATIVE * max(1, the family's largest pass-1 answer)`` of ``u*``
(the Newton iterations stop at a KKT residual of 1e-10 of their terms, so an absolute 1e-6 is
out of reach on answers above about 1e4), where ``u*`` is pass 1's answer as above. The
general path holds an interior-point pass 1 within the tolerance;
``tests/test_multipass_marginals.py`` (held), ``tests/test_multipass_slack.py`` (0.1) and
``tests/test_multipass_held.py`` (a subset held) compare the two on small product domains.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from topdown.estimation.batched.marginals import TOLERANCE as MARGINAL_TOLERANCE
from topdown.estimation.batched.marginals import Marginal, marginal_newton_dual
from topdown.estimation.nested_passes import coarse_map, group_simplex, hold_by_group
from topdown.estimation.passes import MULTIPASS_TOLERANCE
from topdown.estimation.root_marginals import TOLERANCE, RootMarginal, root_marginal_dual

__all__ = [
    "HELD_EXACTLY",
    "MARGINAL_TWO_PASS",
    "ROOT_TWO_PASS",
    "ChunkFitter",
    "RootFitter",
    "chunk_two_passes",
    "root_two_passes",
    "two_passes",
]

log = logging.getLogger(__name__)

#: The default multipass tolerance, and the largest that holding the first pass's answers
#: exactly stands for: ``batched.multipass`` (a first pass of the node total alone) holds them
#: exactly, so a looser tolerance (a strategy's ``multipass_tolerance``) is another problem,
#: which these passes or the general path solve.
HELD_EXACTLY = MULTIPASS_TOLERANCE

#: the routes' names in the solver statistics
ROOT_TWO_PASS = "root_newton_multipass"
MARGINAL_TWO_PASS = "marginal_newton_multipass"

#: the proximal weight eps as a share of the child's smallest first-pass weight
PROX_SHARE = 1.0
#: pass 1 stops when no answer moved by more than this times the family's largest answer...
PROX_TOLERANCE = 1e-9
#: ... or by more than this share of the hold's tolerance (pass 2 holds a box of about that
#: half-width around pass 1's answers: a hundredth of it is noise against the box)
PROX_OF_HOLD = 0.01
PROX_STEPS = 200
#: the proximal weight's fall a step, from the detailed weight down to eps
PROX_FALL = 0.1
#: a step that does not settle halves the fall tried; below this share a family is given up
PROX_MIN_STRIDE = 1 / 16
#: Newton steps a solve may take (a batch of the one-pass iteration allows itself 60)
NEWTON_STEPS = 200
#: pass 2's largest penalty on the held answers, times the detailed weight
HOLD_WEIGHT = 100.0
#: hold rounds a family may take: at the DHC root (20,000 persons) the held answers went from
#: 0.0026 to 0.0006 in eight rounds at the largest penalty (about 0.83 a round), each round a
#: warm-started Newton solve of a few steps; 40 would not have reached 1.2e-5
HOLD_ROUNDS = 200
#: the penalty's rise a round, from HOLD_LOW times the detailed weight up to HOLD_WEIGHT
HOLD_RISE = 10.0
HOLD_LOW = 1.0
#: a held answer may also be this far from pass 1's, times the family's largest answer (at
#: least 1): the Newton iterations stop at a KKT residual of 1e-10 of the size of their terms,
#: so an absolute 1e-6 is out of their reach on answers above about 1e4
HOLD_RELATIVE = 1e-9
#: pass 2 aims the held answers at a box of (1 - HOLD_MARGIN) times the tolerance around pass
#: 1's and stops a family once they are within HOLD_MARGIN times it of that box (and the box's
#: targets moved no more in a round): within the tolerance, near the optimum of the aimed box
HOLD_MARGIN = 0.1
#: ... and the box's targets moved by at most this share of the tolerance in a round
HOLD_SETTLE = 0.05
#: the largest penalty, times the detailed weight, when the answers are held in a box (a
#: tolerance above HELD_EXACTLY): the box's targets then move too, and a smaller penalty lets
#: them (on tests/test_multipass_slack.py's four families, tolerance 0.1, 10 stopped after 16
#: to 28 rounds with cells within 0.031 of the general path's; 100 after 9 to 21 rounds, but
#: 0.038 to 0.084 from them: its targets stopped moving before they reached the optimum)
HOLD_WEIGHT_BOX = 10.0

#: (targets, weights) of one marginal in a fitter's layout
Targets = tuple[np.ndarray, np.ndarray]


class Fitter(Protocol):
    """One layout's strongly convex solve and its marginal answers (root or chunk)."""

    def fit(
        self,
        centre: np.ndarray,
        weight: np.ndarray,
        marginals: Sequence[Targets],
        start: Any = None,
    ) -> tuple[np.ndarray, np.ndarray, Any]:
        """``argmin weight ||x - centre||^2 + sum_m v_m ||A_m x - t_m||^2`` over the feasible
        set, per family whether it settled, and the multipliers (``start`` for the next solve
        on the same marginals: the Newton iteration then starts there, not at zero)."""
        ...

    def answers(self, x: np.ndarray, m: int) -> np.ndarray:
        """``A_m x`` in the layout of marginal ``m``'s targets."""
        ...

    def forget(self, mu: Any, keep: np.ndarray) -> Any:
        """The multipliers ``mu`` as a start with the families not in ``keep`` at zero."""
        ...

    def largest(self, values: np.ndarray) -> np.ndarray:
        """Per family, the largest of ``values`` (a targets-shaped array)."""
        ...

    def only(self, marginals: Sequence[int]) -> Fitter:
        """The same layout over the marginals numbered ``marginals`` only, in that order."""
        ...

    def nested(self, fine: int, coarse: Sequence[int]) -> Fitter | None:
        """The same solve with marginal ``fine``'s groups as its cells (their answers in the
        layout of ``fine``'s targets) and the marginals ``coarse`` as its marginals, or None
        when one of them is not a coarsening of ``fine`` or a group of ``fine`` has no cell
        where this layout cannot hold it at 0 (``topdown.estimation.nested_passes``)."""
        ...

    def hold_exactly(
        self, y: np.ndarray, w: np.ndarray, fine: int, u: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``argmin w ||x - y||^2`` over the feasible set with ``A_fine x = u`` exactly (group
        by group, ``topdown.estimation.nested_passes``) and per family whether it settled."""
        ...


@dataclass(frozen=True)
class RootFitter:
    """The root: ``root_marginal_l2`` with the root's bounds on its total.

    Attributes:
        groups: per marginal, each cell's group.
        lo, hi: bounds on the root's total.
    """

    groups: tuple[np.ndarray, ...]
    lo: float = -np.inf
    hi: float = np.inf

    def fit(
        self,
        centre: np.ndarray,
        weight: np.ndarray,
        marginals: Sequence[Targets],
        start: Any = None,
    ) -> tuple[np.ndarray, np.ndarray, Any]:
        root = [
            RootMarginal(self.groups[m], t, float(v))
            for m, (t, v) in enumerate(marginals)
            if float(v) > 0
        ]
        solved = root_marginal_dual(
            centre,
            float(weight),
            root,
            self.lo,
            self.hi,
            tolerance=TOLERANCE,
            start=start,
        )
        if solved is None:
            return np.zeros_like(centre), np.array(False), None
        return solved[0], np.array(True), solved[1]

    def forget(self, mu: Any, keep: np.ndarray) -> Any:
        return mu if bool(keep) else None

    def answers(self, x: np.ndarray, m: int) -> np.ndarray:
        g = self.groups[m]
        return np.bincount(g, weights=x, minlength=int(g.max(initial=-1)) + 1)

    def largest(self, values: np.ndarray) -> np.ndarray:
        return np.asarray(np.abs(values).max(initial=0.0))

    def only(self, marginals: Sequence[int]) -> RootFitter:
        return replace(self, groups=tuple(self.groups[m] for m in marginals))

    def nested(self, fine: int, coarse: Sequence[int]) -> RootFitter | None:
        g = np.asarray(self.groups[fine])
        n = int(g.max(initial=-1)) + 1
        if n == 0 or np.bincount(g, minlength=n).min() == 0:
            return None  # a group with no cell would be a free answer here
        maps = [coarse_map(g, self.groups[m], n) for m in coarse]
        if any(r is None for r in maps):
            return None
        return replace(self, groups=tuple(r for r in maps if r is not None))

    def hold_exactly(
        self, y: np.ndarray, w: np.ndarray, fine: int, u: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        # the bounds on the total hold: sum x = sum u, which pass 1 kept within them
        x = group_simplex(y, self.groups[fine], np.maximum(np.asarray(u, dtype=float), 0.0))
        return x, np.array(True)


@dataclass(frozen=True)
class ChunkFitter:
    """Q families of k children: ``marginal_newton_chunk`` on their support (padded).

    Attributes:
        groups: per marginal, (Q, W) each position's group (the chunk layout of
            ``batched.marginals.Marginal``; padding at the width).
        widths: per marginal, its number of group slots G (targets (Q, k, G)).
        p: (Q, W) the parents' counts (0 in the padding).
        max_iter: Newton steps a solve may take.
    """

    groups: tuple[np.ndarray, ...]
    widths: tuple[int, ...]
    p: np.ndarray
    max_iter: int = 60

    def fit(
        self,
        centre: np.ndarray,
        weight: np.ndarray,
        marginals: Sequence[Targets],
        start: Any = None,
    ) -> tuple[np.ndarray, np.ndarray, Any]:
        chunk = tuple(Marginal(self.groups[m], t, v) for m, (t, v) in enumerate(marginals))
        return marginal_newton_dual(
            centre,
            self.p,
            weight,
            chunk,
            max_iter=self.max_iter,
            tolerance=MARGINAL_TOLERANCE,
            start=start,
        )

    def forget(self, mu: Any, keep: np.ndarray) -> Any:
        start = np.array(mu, dtype=float)
        start[~keep] = np.nan  # a row that is not finite starts at zero
        return start

    def answers(self, x: np.ndarray, m: int) -> np.ndarray:
        Q, k, W = x.shape
        G = self.widths[m]
        # positions past the width (padding) count in a dummy group, dropped
        flat = (np.arange(Q)[:, None] * (G + 1) + np.minimum(self.groups[m], G)).reshape(-1)
        out = np.empty((Q, k, G))
        for c in range(k):
            sums = np.bincount(flat, weights=x[:, c, :].reshape(-1), minlength=Q * (G + 1))
            out[:, c, :] = sums.reshape(Q, G + 1)[:, :G]
        return out

    def largest(self, values: np.ndarray) -> np.ndarray:
        Q = values.shape[0]
        return np.abs(values).reshape(Q, -1).max(axis=1, initial=0.0)

    def only(self, marginals: Sequence[int]) -> ChunkFitter:
        return replace(
            self,
            groups=tuple(self.groups[m] for m in marginals),
            widths=tuple(self.widths[m] for m in marginals),
        )

    def nested(self, fine: int, coarse: Sequence[int]) -> ChunkFitter | None:
        g = self.groups[fine]
        Q, G = g.shape[0], self.widths[fine]
        # a family's support positions (padding: at the width, or a zero parent cell)
        real = (g < G) & (self.p > 0)
        flat = (np.arange(Q)[:, None] * G + g)[real]
        # the parent's answers of fine's groups: a group with no support cell gets 0, which
        # holds its children's answers at 0 (the solve's padding), as the cells would
        p = np.bincount(flat, weights=self.p[real], minlength=Q * G).reshape(Q, G)
        groups = []
        for m in coarse:
            rep = coarse_map(flat, self.groups[m][real], Q * G)
            if rep is None:
                return None
            groups.append(np.where(rep < 0, self.widths[m], rep).reshape(Q, G))
        return replace(
            self,
            groups=tuple(groups),
            widths=tuple(self.widths[m] for m in coarse),
            p=p,
        )

    def hold_exactly(
        self, y: np.ndarray, w: np.ndarray, fine: int, u: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        return hold_by_group(y, self.p, w, self.groups[fine], u, self.max_iter)


@dataclass(frozen=True)
class TwoPassResult:
    """The second pass's answer, per family whether both passes settled, and their work."""

    x: np.ndarray
    settled: np.ndarray
    prox_steps: int
    hold_rounds: int
    #: the passes ran on the finest first-pass marginal's groups (``nested_passes``)
    nested: bool = False


def two_passes(
    fitter: Fitter,
    y: np.ndarray,
    w: np.ndarray,
    first: Sequence[Targets],
    second: Sequence[Targets] = (),
    *,
    tolerance: float = HELD_EXACTLY,
    held: Sequence[int] | None = None,
) -> TwoPassResult:
    """Pass 1 by proximal point, pass 2 holding its answers (module docstring).

    Each family stops on its own: once its pass-1 answers stop moving (or its held answers
    are within ``tolerance``) its answer is kept while the chunk's other families go on.

    Args:
        fitter: the layout's solve (``RootFitter`` or ``ChunkFitter``); its marginals are
            numbered ``first``'s then ``second``'s.
        y: the detailed answers (root: (n,); chunk: (Q, k, W)).
        w: their weights (root: a scalar array; chunk: (Q, k)), > 0.
        first: the first-pass marginals' (targets, weights), weights > 0.
        second: the other marginals' (targets, weights): fitted in pass 2 only.
        tolerance: how far a held answer may be from pass 1's (absolute).
        held: the positions in ``first`` of the marginals pass 2 holds (None: all); the
            others shape pass 1 only (``LevelStrategy.held``: the DHC ordering's pass 2
            holds one of its nine first-pass marginals).
    """
    w = np.asarray(w, dtype=float)
    nest = _finest(fitter, first)
    if nest is not None:
        return _nested_passes(fitter, *nest, y, w, first, second, tolerance, held)
    eps = PROX_SHARE * np.minimum.reduce([np.asarray(v, dtype=float) for _, v in first])
    n_first = len(first)
    x, ok, mu = _fit(fitter, y, w, first, False, None)
    settled = np.asarray(ok, dtype=bool).copy()
    u = [fitter.answers(x, m) for m in range(n_first)]
    done = np.zeros_like(settled)
    # per family, the proximal weight is w PROX_FALL^fall, down to eps: a step tries
    # ``good + stride`` falls (good: the last fall that settled, 0 the first solve's), and a
    # step that does not settle halves the stride (a larger weight is a problem closer to the
    # last one); a stride below PROX_MIN_STRIDE gives the family up
    good = np.zeros(settled.shape)
    stride = np.ones(settled.shape)
    need = np.log(eps / w) / np.log(PROX_FALL)  # the falls to eps, per child
    bottom = need.reshape(settled.shape + (-1,)).max(axis=-1) if need.ndim else need
    steps = 0
    while steps < PROX_STEPS and not np.all(done | ~settled):
        fall = np.minimum(good + stride, np.ceil(bottom))
        weight = np.maximum(eps, w * PROX_FALL ** _spread(fall, w))
        new_x, ok, mu = _fit(fitter, x, weight, first, False, mu)
        steps += 1
        live = settled & ~done
        step = live & ok
        failed = live & ~ok
        new = [fitter.answers(new_x, m) for m in range(n_first)]
        moved = np.maximum.reduce([fitter.largest(a - b) for a, b in zip(new, u, strict=True)])
        size = np.maximum.reduce([fitter.largest(a) for a in new])
        x = _pick(step, new_x, x)
        u = [_pick(step, a, b) for a, b in zip(new, u, strict=True)]
        # converged: the answers stopped moving at the smallest weight (to a share of the
        # hold's tolerance: pass 2 holds a box of that half-width around these answers)
        still = np.maximum(PROX_TOLERANCE * np.maximum(size, 1.0), PROX_OF_HOLD * tolerance)
        done |= step & (fall >= bottom) & (moved <= still)
        log.debug(
            "multipass pass 1, step %d: proximal weight %.3g (detailed %.3g), %d settled, "
            "answers moved %.3g of %.3g",
            steps,
            float(np.min(weight)),
            float(np.min(w)),
            int(np.count_nonzero(step)),
            float(np.max(np.where(step, moved, 0.0), initial=0.0)),
            float(np.max(size, initial=0.0)),
        )
        good = np.where(step, fall, good)
        stride = np.where(step, 1.0, np.where(failed, stride / 2, stride))
        settled &= stride >= PROX_MIN_STRIDE
        if np.any(failed):
            mu = fitter.forget(mu, ok)
    settled &= done
    keep = list(range(n_first)) if held is None else list(held)
    u = [u[m] for m in keep]
    size = np.maximum.reduce([fitter.largest(a) for a in u])
    # pass 2's layout: the held marginals, then ``second``'s (the others drop out)
    pass2 = fitter.only([*keep, *range(n_first, n_first + len(second))])
    x, kept, rounds, off = _hold(pass2, x, y, w, u, second, settled, tolerance, size)
    settled &= kept
    log.info(
        "multipass: %d of %d famil(ies) settled; %d proximal step(s), %d hold round(s), "
        "held answers within %.3g",
        int(np.count_nonzero(settled)),
        int(np.size(settled)),
        steps,
        rounds,
        float(np.max(off, initial=0.0)),
    )
    return TwoPassResult(x, settled, steps, rounds)


def _finest(fitter: Fitter, first: Sequence[Targets]) -> tuple[int, Fitter] | None:
    """The first-pass marginal every other one coarsens (the one with the most groups that
    does) and the fitter on its groups, or None (``topdown.estimation.nested_passes``)."""
    n_first = len(first)
    if n_first < 2:
        return None
    for fine in sorted(range(n_first), key=lambda m: -np.shape(first[m][0])[-1]):
        small = fitter.nested(fine, [m for m in range(n_first) if m != fine])
        if small is not None:
            return fine, small
    return None


def _nested_passes(
    fitter: Fitter,
    fine: int,
    small: Fitter,
    y: np.ndarray,
    w: np.ndarray,
    first: Sequence[Targets],
    second: Sequence[Targets],
    tolerance: float,
    held: Sequence[int] | None,
) -> TwoPassResult:
    """Both passes when every first-pass marginal coarsens ``first[fine]`` (``small``: the
    solve on its groups): pass 1 one solve on those groups, centred at ``fine``'s
    measurement; pass 2 holding one held marginal's answers exactly, group by group
    (``Fitter.hold_exactly``), when the tolerance is ``HELD_EXACTLY`` and every other held
    answer and every marginal pass 2 fits is a sum of them (then a constant; ``_held_at``:
    ``fine`` when it is held); else the rounds of ``_hold`` from pass 1's answers
    (``topdown.estimation.nested_passes``)."""
    n_first = len(first)
    coarse = [m for m in range(n_first) if m != fine]
    centre, weight = first[fine]
    u, ok, _ = _fit(
        small,
        np.asarray(centre, dtype=float),
        np.asarray(weight, dtype=float),
        [first[m] for m in coarse],
        False,
        None,
    )
    settled = np.asarray(ok, dtype=bool).copy()
    keep = list(range(n_first)) if held is None else list(held)
    # a pass-2 marginal that is a sum of fine's answers is a constant once they are held
    # exactly (the node total the BLUE estimates under "blue"): it drops out. Any other
    # couples the groups: the rounds of ``_hold`` then
    rest = range(n_first, n_first + len(second))

    def answers(m: int) -> np.ndarray:
        """Pass 1's answers of first-pass marginal ``m`` (``fine``'s are ``u`` itself)."""
        return u if m == fine else small.answers(u, coarse.index(m))

    at = _held_at(fitter, fine, keep, rest) if tolerance <= HELD_EXACTLY else None
    if at is not None:
        x, kept = fitter.hold_exactly(y, w, at, answers(at))
        log.info(
            "multipass on the finest marginal's groups: %d of %d famil(ies) settled, its "
            "answers held exactly",
            int(np.count_nonzero(settled & kept)),
            int(np.size(settled)),
        )
        return TwoPassResult(x, settled & kept, 1, 1, nested=True)
    us = [answers(m) for m in keep]
    size = np.maximum.reduce([fitter.largest(a) for a in us])
    pass2 = fitter.only([*keep, *rest])
    x, kept, rounds, off = _hold(
        pass2, np.zeros_like(y, dtype=float), y, w, us, second, settled, tolerance, size
    )
    log.info(
        "multipass on the finest marginal's groups: %d of %d famil(ies) settled; %d hold "
        "round(s), held answers within %.3g",
        int(np.count_nonzero(settled & kept)),
        int(np.size(settled)),
        rounds,
        float(np.max(off, initial=0.0)),
    )
    return TwoPassResult(x, settled & kept, 1, rounds, nested=True)


def _held_at(fitter: Fitter, fine: int, keep: Sequence[int], rest: Sequence[int]) -> int | None:
    """The held marginal whose answers, held exactly, hold every other held one and every
    pass-2 marginal (``rest``) too, each a sum of them: ``fine`` when it is held, else one of
    ``keep`` (None: there is none, and pass 2 takes the rounds of ``_hold``). On a family's
    support two first-pass marginals can split its cells alike (a DHC block family: the two
    five-way marginals), and ``_finest`` may then pick the one pass 2 does not hold."""
    order = [fine] if fine in keep else []
    for at in order + [m for m in keep if m != fine]:
        # the held ones coarsen ``fine`` (``_finest``): only the others need checking
        others = [*([] if at == fine else [m for m in keep if m != at]), *rest]
        if not others or fitter.nested(at, others) is not None:
            return at
    return None


def _hold(
    fitter: Fitter,
    x: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    u: list[np.ndarray],
    second: Sequence[Targets],
    settled: np.ndarray,
    tolerance: float,
    size: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """Pass 2: ``min w ||x - y||^2`` (and ``second``'s soft fit) with every held answer
    ``A_m x`` in the box ``u_m +- (1 - HOLD_MARGIN) tolerance`` (``u_m`` itself up to
    ``HELD_EXACTLY``), by ADMM on ``A_m x = z_m``, ``z_m`` in the box (module docstring);
    per family, stopped once every held answer is within ``tolerance`` (plus
    ``HOLD_RELATIVE`` of ``size``) of ``u_m`` and no ``z_m`` moved more than ``HOLD_MARGIN``
    times the tolerance (plus that share) in the round.

    Returns:
        x (for the families not held: the ``x`` given), per family whether it was held, the
        rounds taken and per family the held answers' largest distance from ``u``.
    """
    # the penalty per family rises by HOLD_RISE a round that settles and falls a round that
    # does not (a large penalty from the start left the Newton steps creeping on degenerate
    # duals: groups whose cells no child can move), from HOLD_LOW to HOLD_WEIGHT times w
    # up to HELD_EXACTLY the answers are held at u (a box that narrow is a point to the
    # Newton iterations' precision); a looser tolerance aims at a box inside it
    reach = (1.0 - HOLD_MARGIN) * tolerance if tolerance > HELD_EXACTLY else 0.0
    relative = HOLD_RELATIVE * np.maximum(size, 1.0)
    low = [a - reach for a in u]
    high = [a + reach for a in u]
    lam = [np.zeros_like(a) for a in u]
    z = [a.copy() for a in u]
    last_lam, last_z = lam, z  # a round before (momentum: lam - last_lam, z - last_z)
    t = np.ones(settled.shape)  # the momentum's sequence (Nesterov), 1: none
    level = np.zeros(settled.shape)
    largest = HOLD_WEIGHT_BOX if reach > 0 else HOLD_WEIGHT
    top = np.log(largest / HOLD_LOW) / np.log(HOLD_RISE)
    rounds = 0
    residual = np.full(settled.shape, np.inf)
    off = np.full(settled.shape, np.inf)
    held = np.zeros_like(settled)
    mu = None
    while rounds < HOLD_ROUNDS and not np.all(held | ~settled):
        hold = w * HOLD_LOW * HOLD_RISE ** _spread(level, w)
        t_next = (1 + np.sqrt(1 + 4 * t**2)) / 2
        beta = (t - 1) / t_next
        hat_lam = [b + _spread(beta, b) * (b - c) for b, c in zip(lam, last_lam, strict=True)]
        hat_z = [b + _spread(beta, b) * (b - c) for b, c in zip(z, last_z, strict=True)]
        targets = [c - h / _spread(hold, h) for c, h in zip(hat_z, hat_lam, strict=True)]
        held_fit = [*((t_, hold) for t_ in targets), *second]
        new_x, ok, mu = _fit(fitter, y, w, held_fit, True, mu)
        rounds += 1
        live = settled & ~held
        step = live & ok
        failed = live & ~ok
        answers = [fitter.answers(new_x, m) for m in range(len(u))]
        new_z = [
            np.clip(a + h / _spread(hold, h), lo, hi)
            for a, h, lo, hi in zip(answers, hat_lam, low, high, strict=True)
        ]
        apart = np.maximum.reduce(
            [fitter.largest(a - c) for a, c in zip(answers, new_z, strict=True)]
        )
        moved = np.maximum.reduce(
            [fitter.largest(c - d) for c, d in zip(new_z, hat_z, strict=True)]
        )
        new_residual = np.maximum(apart, moved)
        # momentum restarts (O'Donoghue and Candes 2015) where the residuals grew
        grew = step & (new_residual > residual)
        residual = np.where(step, new_residual, residual)
        distance = np.maximum.reduce(
            [fitter.largest(a - b) for a, b in zip(answers, u, strict=True)]
        )
        off = np.where(step, distance, off)
        x = _pick(step, new_x, x)
        # within the tolerance of pass 1's answers, and the box's targets settled
        settle = HOLD_SETTLE * tolerance + relative
        held |= step & (off <= tolerance + relative) & (moved <= settle)
        log.debug(
            "multipass pass 2, round %d: penalty %.3g x the detailed weight, %d of %d live "
            "settled, held answers within %.3g of pass 1's (residual %.3g, %d famil(ies) held)",
            rounds,
            float(np.max(HOLD_LOW * HOLD_RISE ** np.where(live, level, 0.0), initial=0.0)),
            int(np.count_nonzero(step)),
            int(np.count_nonzero(live)),
            float(np.max(np.where(step, off, 0.0), initial=0.0)),
            float(np.max(np.where(step, residual, 0.0), initial=0.0)),
            int(np.count_nonzero(held)),
        )
        new_lam = [
            h + _spread(hold, h) * (a - c) for h, a, c in zip(hat_lam, answers, new_z, strict=True)
        ]
        last_lam = [_pick(step, b, c) for b, c in zip(lam, last_lam, strict=True)]
        last_z = [_pick(step, b, c) for b, c in zip(z, last_z, strict=True)]
        lam = [_pick(step, a, b) for a, b in zip(new_lam, lam, strict=True)]
        z = [_pick(step, a, b) for a, b in zip(new_z, z, strict=True)]
        settled = settled & ~(failed & (level <= 0))  # no lower penalty left to try
        new_level = np.where(step, np.minimum(level + 1, top), np.where(failed, level - 1, level))
        # momentum only while the penalty stays: a new penalty (or a failed round) starts it
        # again
        still = step & ~grew & (new_level == level)
        t = np.where(still, t_next, 1.0)
        last_lam = [_pick(still, c, b) for b, c in zip(lam, last_lam, strict=True)]
        last_z = [_pick(still, c, b) for b, c in zip(z, last_z, strict=True)]
        level = new_level
        if np.any(failed):
            mu = fitter.forget(mu, ok)
    return x, held & settled, rounds, off


def _spread(per_family: np.ndarray, like: np.ndarray) -> np.ndarray:
    """A value per family (or per child) shaped to broadcast against ``like``."""
    return per_family.reshape(per_family.shape + (1,) * (like.ndim - per_family.ndim))


def _pick(mask: np.ndarray, new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """Per family (``mask``: one value per family, or one at the root), ``new`` or ``old``."""
    return np.where(mask.reshape(mask.shape + (1,) * (new.ndim - mask.ndim)), new, old)


def _fit(
    fitter: Fitter,
    centre: np.ndarray,
    weight: np.ndarray,
    marginals: Sequence[Targets],
    second_pass: bool,
    start: Any,
) -> tuple[np.ndarray, np.ndarray, Any]:
    """One solve from the last multipliers; the families that do not settle from there
    solved again from zero (a start next to the answer can stall the line search:
    ``marginal_newton_dual``), the others from their answer's multipliers."""
    x, ok, mu = fitter.fit(centre, weight, marginals, start)
    if start is not None and not np.all(ok):
        x, ok, mu = fitter.fit(centre, weight, marginals, fitter.forget(mu, ok))
    if not np.all(ok):
        log.info(
            "multipass: a solve (weight %s, %s) did not settle %d famil(ies)",
            np.min(weight),
            "pass 2" if second_pass else "pass 1",
            int(np.size(ok) - np.count_nonzero(ok)),
        )
    return x, np.asarray(ok, dtype=bool), mu


def chunk_two_passes(
    y: np.ndarray,
    p: np.ndarray,
    w: np.ndarray,
    marginals: Sequence[Marginal],
    first: Sequence[int],
    *,
    tolerance: float = HELD_EXACTLY,
    max_iter: int = NEWTON_STEPS,
    held: Sequence[int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Both passes for a chunk's Q families (``batched.marginals``' layout).

    Args:
        y: (Q, k, W) the detailed answers; p: (Q, W) the parents' counts; w: (Q, k) weights.
        marginals: the chunk's marginals; ``first``: the indices of those pass 1 fits (each
            with positive weights; a family with a zero one is reported unsettled).
        tolerance: how far a held answer may be from pass 1's.
        max_iter: Newton steps a solve may take.
        held: the positions in ``first`` of the marginals pass 2 holds (None: all).

    Returns:
        x (Q, k, W) and per family whether both passes settled.
    """
    order = [*first, *(m for m in range(len(marginals)) if m not in first)]
    ordered = [marginals[m] for m in order]
    fitter = ChunkFitter(
        tuple(m.groups for m in ordered),
        tuple(m.targets.shape[2] for m in ordered),
        np.asarray(p, dtype=float),
        max_iter=max_iter,
    )
    targets = [(m.targets, np.asarray(m.weights, dtype=float)) for m in ordered]
    positive = np.all([v > 0 for _, v in targets[: len(first)]], axis=(0, 2))
    res = two_passes(
        fitter,
        np.asarray(y, dtype=float),
        w,
        targets[: len(first)],
        targets[len(first) :],
        tolerance=tolerance,
        held=held,
    )
    return res.x, res.settled & positive


def root_two_passes(
    y: np.ndarray,
    w: float,
    marginals: Sequence[RootMarginal],
    first: Sequence[int],
    lo: float = -np.inf,
    hi: float = np.inf,
    *,
    tolerance: float = HELD_EXACTLY,
    held: Sequence[int] | None = None,
) -> np.ndarray | None:
    """Both passes at the root (bounds ``lo <= sum x <= hi`` on its total), or None when a
    first-pass weight is not positive or they do not settle (the general path then solves);
    ``held``: the positions in ``first`` of the marginals pass 2 holds (None: all)."""
    if any(marginals[m].weight <= 0 for m in first):
        return None
    order = [*first, *(m for m in range(len(marginals)) if m not in first)]
    ordered = [marginals[m] for m in order]
    fitter = RootFitter(tuple(m.groups for m in ordered), lo, hi)
    targets = [(np.asarray(m.answers, dtype=float), np.asarray(m.weight)) for m in ordered]
    res = two_passes(
        fitter,
        np.asarray(y, dtype=float),
        np.asarray(w),
        targets[: len(first)],
        targets[len(first) :],
        tolerance=tolerance,
        held=held,
    )
    return res.x if bool(res.settled) else None
