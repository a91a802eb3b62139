"""A workload-adaptive synthesizer on the graphical-model estimator (AIM-style).

Algorithm (McKenna, Mullins, Sheldon, Miklau, "AIM: an adaptive and iterative mechanism for
differentially private synthetic data", VLDB 2022, Algorithm 1), on the project's exact
mechanisms and ledger:

1. Budget: ``(epsilon, delta)`` becomes the largest rho (an exact binary fraction) whose
   zCDP guarantee converts to at most epsilon at delta by the ledger's own conversion
   (Canonne, Kamath, Steinke 2020). With T rounds planned (default 16 d) and a share
   ``measure_share`` (alpha, 0.9) for measurements, a measurement costs rho_m = alpha rho / T
   (the discrete Gaussian, sigma^2 = 1 / (2 rho_m), L2 sensitivity 1 under add/remove) and a
   selection rho_s = eps_s^2 / 8 with eps_s the largest rational below sqrt(8 (1 - alpha) rho / T)
   on a 1e-15 grid: the exponential mechanism with parameter eps_s is eps_s-bounded-range, hence
   (eps_s^2 / 8)-zCDP (Cesar, Rogers, ALT 2021).
2. Every 1-way marginal is measured first; the model is fitted to them.
3. Each round: the candidates are the workload's downward closure (every non-empty subset of a
   workload marginal) whose addition keeps the model under its size caps (the largest clique,
   and the model's cells growing with the share of the budget spent, as AIM: data-independent
   filters). Candidate r scores w_r (||x_r - m_r||_1 - sqrt(2/pi) sigma n_r): x_r the true
   marginal, m_r the model's, n_r its cells, w_r = sum over workload marginals q of |r & q|.
   One record moves ||x_r - m_r||_1 by at most 1, so the sensitivity is max w_r. The model's
   marginal is rounded to a multiple of 2^-20 (post-processing of the model) so every score is
   an exact rational and :func:`mechanisms.exponential_mechanism` decides exactly. The chosen
   marginal is measured, the model refitted warm-started, and if the model moved less on it
   than the noise would explain (L1 change <= sqrt(2/pi) sigma n_r) the per-round budget is
   raised (sigma halved, eps_s doubled: AIM's annealing). When what remains would not pay for
   two more rounds, the last round spends exactly what remains.
4. A final fit with more iterations; records are the model's counts rounded along the
   junction tree (or, with ``sample(method="iid")``, i.i.d. draws from it), and their
   default number is the model's total (estimated from the noisy measurements), never the
   true count.

Every selection and measurement is a ledger entry; the ledger's total is rho, exactly.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Hashable, Mapping, Sequence
from fractions import Fraction

import numpy as np
import pandas as pd

from mechanisms.accounting import ZCDP, zcdp_to_approx_dp
from mechanisms.ledger import Ledger, NoiseSource
from mechanisms.rng import make_rng
from mechanisms.selection import exponential_mechanism
from synth._domains import Domains, SynthError, check_seed, decode, encode_records
from synth._estimate import check_cell_cap, check_cells, histogram, measure_marginals
from synth.class_conditional import check_rows, disclose_rows
from synth.crosstab import check_epsilon, check_share
from synth.graphical import GraphicalModel, build_junction_tree, fit_model
from synth.graphical.factor import cells
from synth.graphical.inference import steiner_cliques
from synth.graphical.junction_tree import triangulated_cliques
from synth.graphical.sampling import check_sampling

__all__ = ["Adaptive", "rho_for"]

logger = logging.getLogger(__name__)

_GRID = 2**20  # the model's marginals are rounded to multiples of 1 / _GRID in the scores
_EPS_GRID = 10**15  # the selection epsilons are multiples of 1 / _EPS_GRID
_NOISE_L1 = math.sqrt(2 / math.pi)  # E|Z| for Z ~ N(0, 1)


def rho_for(epsilon: Fraction, delta: float) -> Fraction:
    """The largest rho (a binary fraction) whose (epsilon, delta) view is at most epsilon.

    Uses :func:`mechanisms.accounting.zcdp_to_approx_dp`, the conversion the ledger states.

    >>> rho = rho_for(Fraction(1), 1e-9)
    >>> 0.01 < float(rho) < 0.02 and zcdp_to_approx_dp(rho, 1e-9) <= 1
    True
    """
    eps = float(epsilon)
    lo, hi = 0.0, max(eps * eps / 2, 1e-300)
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid <= lo or mid >= hi:
            break
        if zcdp_to_approx_dp(Fraction(mid), delta) <= eps:
            lo = mid
        else:
            hi = mid
    rho = Fraction(lo)
    if lo <= 0 or zcdp_to_approx_dp(rho, delta) > eps:
        raise SynthError(f"epsilon ({epsilon}) at delta ({delta}) leaves no zCDP budget")
    return rho


def _sqrt_down(value: Fraction) -> Fraction:
    """The largest multiple of 1 / _EPS_GRID whose square is at most ``value``."""
    scaled = value * _EPS_GRID * _EPS_GRID
    return Fraction(math.isqrt(scaled.numerator // scaled.denominator), _EPS_GRID)


def _check_delta(delta: object) -> float:
    if isinstance(delta, bool) or not isinstance(delta, (int, float)):
        raise SynthError(f"delta ({delta!r}) must be a number in (0, 1)")
    value = float(delta)
    if not 0 < value < 1 or not math.isfinite(value):
        raise SynthError(f"delta ({delta!r}) must be in (0, 1)")
    return value


def _check_int(value: object, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise SynthError(f"{name} ({value!r}) must be an integer >= {low}")
    return int(value)


class Adaptive:
    """Workload-adaptive DP synthesizer (AIM-style) on a graphical model; see the module doc.

    Args:
        epsilon: the (epsilon, delta)-DP target (> 0, exact); spent as the rho of
            :func:`rho_for`.
        delta: the delta of the target, in (0, 1).
        workload: marginals (lists of column names) the synthetic data should preserve;
            default: every ``degree``-way marginal of the columns.
        degree: the default workload's marginal size (3).
        domains: declared domains; omitted ones are read from the data (disclosed).
        seed: integer for reproducible runs (tests only); None is secure.
        rounds: planned rounds T (default 16 d); fewer rounds mean more budget per round.
        measure_share: the share alpha of each round's budget spent on the measurement (0.9).
        max_cells: the cap on the largest clique table of the model (cells).
        max_model_cells: the cap on the cells of all clique tables; the share of it available
            grows with the share of the budget spent.
        iters: mirror-descent iterations per refit (warm-started).
        final_iters: iterations of the final fit.

    Attributes:
        model: the fitted :class:`synth.graphical.GraphicalModel`.
        measured: the measured marginals as column-name tuples, in order.
        ledger: every selection and measurement, and the disclosures.
        rho: the zCDP budget spent (exactly the ledger's total).
    """

    def __init__(
        self,
        epsilon: object,
        *,
        delta: float = 1e-9,
        workload: Sequence[Sequence[str]] | None = None,
        degree: int = 3,
        domains: Mapping[str, Sequence[Hashable]] | None = None,
        seed: int | None = None,
        rounds: int | None = None,
        measure_share: object = Fraction(9, 10),
        max_cells: int = 100_000,
        max_model_cells: int = 1_000_000,
        iters: int = 100,
        final_iters: int = 500,
    ) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = _check_delta(delta)
        self.degree = _check_int(degree, "degree", 1)
        if workload is not None:
            workload = _check_workload(workload)
            if not workload:
                raise SynthError("workload ([]) must list at least one marginal")
            for i, w in enumerate(workload):
                if not w or len(set(w)) != len(w):
                    raise SynthError(
                        f"workload[{i}] ({w!r}) must name at least one column, each once"
                    )
        self.workload_declared = workload
        self.domains_declared = domains
        self.seed = check_seed(seed)
        self.rounds = None if rounds is None else _check_int(rounds, "rounds", 1)
        self.measure_share = check_share(measure_share, "measure_share")
        self.max_cells = check_cell_cap(_check_int(max_cells, "max_cells", 1), "max_cells")
        self.max_model_cells = check_cell_cap(
            _check_int(max_model_cells, "max_model_cells", 1), "max_model_cells"
        )
        self.iters = _check_int(iters, "iters", 1)
        self.final_iters = _check_int(final_iters, "final_iters", 0)
        self.rho = rho_for(self.epsilon, self.delta)
        self.ledger = Ledger()
        self.domains: Domains = {}
        self.columns: list[str] = []
        self.measured: list[tuple[str, ...]] = []
        self.model: GraphicalModel | None = None
        self._rng = make_rng(self.seed)

    def _workload(self, columns: list[str]) -> list[tuple[int, ...]]:
        """The workload as sorted position tuples (unknown columns refused)."""
        position = {c: j for j, c in enumerate(columns)}
        if self.workload_declared is None:
            size = min(self.degree, len(columns))
            return list(itertools.combinations(range(len(columns)), size))
        out = []
        for i, marginal in enumerate(self.workload_declared):
            unknown = [c for c in marginal if c not in position]
            if unknown:
                raise SynthError(
                    f"workload[{i}] names columns {unknown!r} that are not in the data "
                    f"({columns!r:.200})"
                )
            out.append(tuple(sorted(position[c] for c in marginal)))
        return sorted(set(out))

    def fit(self, data: pd.DataFrame) -> Adaptive:
        """Measure, select and refit until the budget is spent (module docstring)."""
        start = time.perf_counter()
        self.ledger = Ledger(NoiseSource.from_seed(self.seed))
        records = encode_records(data, self.domains_declared, self.ledger)
        self.columns, self.domains = records.columns, records.domains
        sizes, codes = records.sizes, records.codes
        d = len(sizes)
        self._grown: dict[frozenset[tuple[int, int]], tuple[int, int]] = {}
        workload = self._workload(self.columns)
        closure = sorted(
            {
                s
                for w in workload
                for k in range(1, len(w) + 1)
                for s in itertools.combinations(w, k)
            }
        )
        # w_r = sum_q |r & q| = sum over a in r of the number of workload marginals holding a
        holding = [sum(1 for q in workload if a in q) for a in range(d)]
        weights = {r: sum(holding[a] for a in r) for r in closure}
        # the tables fitting allocates: every 1-way marginal (measured first) and the true
        # marginal of each candidate a round can choose (one within max_cells), refused before
        # any is built when they would not fit; a workload marginal over max_cells is never
        # measured (the model could not hold it), so its table is never built
        reachable = [r for r in closure if len(r) == 1 or cells(r, sizes) <= self.max_cells]
        check_cells(
            sizes,
            reachable,
            [f"adaptive {' x '.join(self.columns[a] for a in r)}" for r in reachable],
        )
        too_wide = [w for w in workload if cells(w, sizes) > self.max_cells]
        if too_wide:
            logger.warning(
                "%d workload marginal(s) exceed max_cells (%d cells) and cannot be measured, "
                "e.g. %s (%d cells): declare coarser domains to preserve them",
                len(too_wide),
                self.max_cells,
                " x ".join(self.columns[a] for a in too_wide[0]),
                cells(too_wide[0], sizes),
            )
        rounds = 16 * d if self.rounds is None else self.rounds
        if rounds <= d:
            raise SynthError(
                f"rounds ({rounds}) must exceed the number of columns ({d}): the 1-way "
                "marginals take one round's measurement budget each"
            )
        alpha, rho = self.measure_share, self.rho
        rho_m = alpha * rho / rounds
        eps_s = _sqrt_down(8 * (1 - alpha) * rho / rounds)
        measurements = measure_marginals(
            codes,
            sizes,
            [(j,) for j in range(d)],
            [ZCDP(rho_m)] * d,
            names=[f"1-way {c}" for c in self.columns],
            ledger=self.ledger,
            rng=self._rng,
            mechanism="discrete_gaussian",
            note="AIM initialisation: every 1-way marginal",
        )
        used = rho_m * d
        self.measured = [(c,) for c in self.columns]
        model = fit_model(measurements, sizes, iters=self.iters, max_cells=self.max_cells)
        truth = _TrueMarginals(codes, sizes)  # built when a round first scores a candidate
        step = 0
        final = False
        while not final:
            remaining = rho - used
            if remaining <= 0:
                break
            if remaining < 2 * (rho_m + eps_s * eps_s / 8):
                final = True
                eps_s = _sqrt_down(8 * (1 - alpha) * remaining)
                rho_m = remaining - eps_s * eps_s / 8
            step += 1
            cliques = [m.attrs for m in measurements]
            candidates = self._allowed(closure, cliques, sizes, float(used / rho))
            sigma = math.sqrt(1 / (2 * float(rho_m)))
            chosen = self._select(model, candidates, truth, weights, sizes, sigma, eps_s, step)
            names = tuple(self.columns[a] for a in chosen)
            new = measure_marginals(
                codes,
                sizes,
                [chosen],
                [ZCDP(rho_m)],
                names=[f"round {step}: measure {' x '.join(names)}"],
                ledger=self.ledger,
                rng=self._rng,
                mechanism="discrete_gaussian",
                note=f"AIM round {step}, sigma {sigma:.4g}",
            )
            measurements.extend(new)
            self.measured.append(names)
            used += rho_m + eps_s * eps_s / 8
            before = model.marginal(chosen)
            model = fit_model(measurements, sizes, iters=self.iters, warm_start=model)
            biggest = max(cells(c, sizes) for c in model.tree.cliques)
            if biggest > self.max_cells:
                logger.warning(
                    "round %d: the greedy triangulation made a clique of %d cells, over "
                    "max_cells (%d), where the merge bound allowed it",
                    step,
                    biggest,
                    self.max_cells,
                )
            moved = float(np.abs(model.marginal(chosen) - before).sum())
            expected = _NOISE_L1 * sigma * cells(chosen, sizes)
            logger.info(
                "round %d: measured %s (sigma %.3g), model moved %.1f (noise %.1f); "
                "%.1f%% of rho spent, %.1f s",
                step,
                " x ".join(names),
                sigma,
                moved,
                expected,
                100 * float(used / rho),
                time.perf_counter() - start,
            )
            if moved <= expected and not final:
                rho_m, eps_s = 4 * rho_m, 2 * eps_s
        if self.final_iters:
            model = fit_model(
                measurements,
                sizes,
                iters=self.final_iters,
                warm_start=model,
            )
        self.model = model
        logger.info(
            "adaptive: %d rounds, %d marginals, model of %d cells, total %.1f, %.1f s",
            step,
            len(measurements),
            model.cells,
            model.total,
            time.perf_counter() - start,
        )
        return self

    def _allowed(
        self,
        closure: Sequence[tuple[int, ...]],
        cliques: Sequence[tuple[int, ...]],
        sizes: Sequence[int],
        spent: float,
    ) -> list[tuple[int, ...]]:
        """The candidates within the size caps (depends on public facts only).

        A candidate inside a clique of the model changes nothing. Otherwise a cheap bound is
        tried first: merging the smallest subtree of the junction tree that holds the
        candidate's attributes into one clique (with the candidate) is a valid junction tree,
        so its sizes bound the best triangulation; only when the bound breaks a cap is the
        greedy triangulation itself computed.
        """
        tree = build_junction_tree(cliques, sizes)
        sizes_now = [cells(c, sizes) for c in tree.cliques]
        total_now = sum(sizes_now)
        limit = self.max_model_cells * spent
        # the triangulation depends on the graph only: remembered across rounds by edge set
        edges = {(a, b) for c in cliques for a, b in itertools.combinations(sorted(c), 2)}
        out = []
        for r in closure:
            if tree.containing(r) is not None:
                out.append(r)
                continue
            if cells(r, sizes) > self.max_cells:
                continue
            subtree = steiner_cliques(tree, set(r))
            merged = cells(sorted({a for c in subtree for a in tree.cliques[c]} | set(r)), sizes)
            bound_total = total_now - sum(sizes_now[c] for c in subtree) + merged
            if merged <= self.max_cells and bound_total <= limit:
                out.append(r)
                continue
            graph = edges | {(a, b) for a, b in itertools.combinations(r, 2)}
            key = frozenset(graph)
            if key not in self._grown:
                grown = [cells(c, sizes) for c in triangulated_cliques([*cliques, r], sizes)]
                self._grown[key] = (max(grown), sum(grown))
            biggest, total = self._grown[key]
            if biggest <= self.max_cells and total <= limit:
                out.append(r)
        return out

    def _select(
        self,
        model: GraphicalModel,
        candidates: Sequence[tuple[int, ...]],
        truth: Mapping[tuple[int, ...], np.ndarray],
        weights: Mapping[tuple[int, ...], int],
        sizes: Sequence[int],
        sigma: float,
        eps_s: Fraction,
        step: int,
    ) -> tuple[int, ...]:
        """One exact exponential-mechanism choice among ``candidates`` (module docstring)."""
        if eps_s <= 0:
            raise SynthError(
                f"the selection budget of round {step} rounds to 0 (rho {self.rho}); "
                "raise epsilon or lower rounds"
            )
        scores = []
        for r in candidates:
            fitted = np.rint(model.marginal(r) * _GRID).astype(np.int64)
            l1 = int(np.abs(truth[r].astype(np.int64) * _GRID - fitted).sum())
            penalty = Fraction(_NOISE_L1 * sigma * cells(r, sizes))
            scores.append(weights[r] * (Fraction(l1, _GRID) - penalty))
        sensitivity = max(weights[r] for r in candidates)
        index = exponential_mechanism(scores, eps_s, sensitivity, rng=self._rng)
        chosen = candidates[index]
        self.ledger.record(
            f"round {step}: select {' x '.join(self.columns[a] for a in chosen)}",
            0,
            "exponential_mechanism",
            ZCDP(eps_s * eps_s / 8),
            sensitivity=sensitivity,
            note=f"chose {[self.columns[a] for a in chosen]} of {len(candidates)} candidates "
            f"(epsilon {float(eps_s):.6g}, bounded range: rho = epsilon^2 / 8)",
        )
        return chosen

    def sample(self, n: int | None = None, *, method: str = "rounded") -> pd.DataFrame:
        """``n`` synthetic records (default: the model's noisy total, rounded); a given ``n``
        is disclosed in the ledger, as by the other generators.

        Args:
            n: the number of records, or None for the model's noisy total.
            method: ``"rounded"`` (default): along the junction tree, each clique's counts
                are rounded from their expected values (floor or ceiling, unbiased), so the
                records carry less sampling noise on the measured marginals but are not
                independent (:mod:`synth.graphical.sampling`); or ``"iid"``: independent
                draws from the model. Both are post-processing of the model. Why rounded by
                default: at epsilon 1 its mean 3-way TVD was lower on every seed of NLTCS,
                Adult and ACS (three each) and on the mean of two held-out ACS states: 4-7%
                lower, 23% on NLTCS (``docs/benchmarks.md``), and private-pgm's
                synthesis defaults to rounding too. ``"iid"`` is for uses that need
                independent records (resampling the synthetic table, for one).

        Raises:
            SynthError: not fitted, a bad ``n``, or ``method`` not one of them.
        """
        method = check_sampling(method)
        if self.model is None:
            raise SynthError("the generator is not fitted: call fit(data) first")
        if n is None:
            rows = int(round(self.model.total))
        else:
            rows = check_rows(n, columns=len(self.columns))
            disclose_rows(self.ledger, rows)
        codes = self.model.sample(rows, self._rng, method)
        return decode(codes, self.domains, self.columns)


class _TrueMarginals(dict[tuple[int, ...], np.ndarray]):
    """The true marginals the selection scores, each built the first time it is asked for:
    only candidates are (within max_cells, or inside a clique the model already holds)."""

    def __init__(self, codes: np.ndarray, sizes: Sequence[int]) -> None:
        super().__init__()
        self._codes, self._sizes = codes, sizes

    def __missing__(self, attrs: tuple[int, ...]) -> np.ndarray:
        table = histogram(self._codes, self._sizes, attrs)
        self[attrs] = table
        return table


def _check_workload(workload: object) -> list[list[str]]:
    """A workload as lists of column names: a list (or tuple) of lists (or tuples) of strings.

    Why: a number raised ``TypeError`` from ``list()``, and a string was read as its characters.
    """
    sequence = (list, tuple)
    if not isinstance(workload, sequence) or not all(
        isinstance(w, sequence) and all(isinstance(c, str) for c in w) for w in workload
    ):
        shown = repr(workload)
        shown = shown if len(shown) <= 60 else f"{shown[:57]}..."
        raise SynthError(
            f"workload ({shown}) must be a list of marginals, each a list of column names, "
            "such as [['age', 'sex'], ['race']]"
        )
    return [list(w) for w in workload]
