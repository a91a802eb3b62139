"""DP2-Pub: high-dimensional publication under local DP with invariant post-randomization.

After Jiang, Yu, Cheng, Pei, Pless, Yu, "DP2-Pub: Differentially private high-dimensional
data publication with invariant post randomization" (IEEE TKDE 2023). Every step is a
function that can be tested on its own; :class:`DP2Pub` chains them.

1. Client side, structure group (a ``structure_fraction`` of the records, drawn by the
   server uniformly at random): each attribute reported by generalized randomized response
   with epsilon / d (:func:`mechanisms.randomized_response`, exact).
2. Server: from those reports, the joint distribution of each candidate (X, parents) is
   estimated by inverting the randomization (:func:`synth._pram.estimate_distribution`) and
   a Bayesian network is learned greedily on mutual information with k parents
   (:func:`synth._bayesnet.greedy_network`, argmax: the reports are already private).
3. Attributes clustered by Markov blankets (parents, children, children's other parents),
   each cluster's compound domain at most ``max_cluster_cells`` (:func:`cluster_attributes`).
4. A budget coefficient per cluster from the entropy of the privately estimated marginals:
   clusters of lower total entropy get more (:func:`entropy_coefficients`). The public
   code computes "entropy" from the domain size alone; this uses the estimated distribution.
5. Client side, publication group (the other records): with ``split="budget"`` (the
   paper's allocation) every person reports every cluster, each with epsilon times its
   coefficient; with ``split="users"`` the server assigns each person one cluster (the
   coefficients as shares of the people) and the person reports it with the whole epsilon;
   ``split="auto"`` (the default) takes the one whose cluster tables have the smaller
   predicted variance (:func:`split_variances`).
   Either way a report is either one generalized randomized response over the
   cluster's compound domain (``randomizer="joint"``, the default: far less noise for a
   joint distribution) or attribute by attribute with an equal split of the cluster's budget
   (``randomizer="attribute"``, the paper's per-attribute Q, compound Q their Kronecker
   product).
6. Server: per cluster, the true distribution pi estimated from the reports by inverting Q
   constrained to the simplex: by likelihood (``estimator="mle"``, the default) or by
   Euclidean projection of the plain inverse (``"projection"``); the post-randomization
   matrix Q' built from pi and Q, and every record's cluster value (both groups, each with
   its own Q) post-randomized with Q'. A person who reported nothing about a cluster
   (``split="users"``) holds a report made with epsilon 0, whose row of Q' is pi itself: the
   value is drawn from pi.

Why two splits: the variance of a randomized-response frequency is about
1 / (n (p - q)^2), and p - q is about epsilon / K for a small budget on K cells. Splitting
the budget over m clusters divides each cluster's p - q by m (variance x m^2); splitting the
people divides n by m (variance x m). At small budgets the people split is the better one
(benchmarks/bench_synth.py measures both against per-attribute post-randomization); at
large budgets the budget split keeps every person's values of every cluster, and with them
some of the dependence between clusters.

Output size: publishing every record's post-randomized copy would publish the number of
records n exactly (an unbounded loss under add/remove neighbours), so by default a
``total_share`` of epsilon buys a noisy total m (discrete Laplace, sensitivity 1, its own
ledger entry) and the reports are made by m records: a uniform random subset of the
records when m <= n, else all of them and m - n dummy records drawn uniformly from the
declared domains (independent of the data, then randomized like everyone's). A size given
by the caller (``rows``) replaces the noisy total, spends nothing on it, and is disclosed in
the ledger (if it is n, n is published exactly: not private).

Privacy: for a given m, each person answers at most once, in one group, with the reports'
budget in total (in the publication group with ``split="users"``: one cluster with it), so
the reports are local-DP with that budget; a neighbour's extra record replaces a subset
member or a dummy, whose report is just as likely up to that factor, so the release is DP
with the reports' budget given m, and epsilon-DP (add/remove) with the noisy total
(sequential composition). The two groups are disjoint, which the ledger records as one
entry over two parts. Everything after the reports is post-processing, and the rows come
out in an order unrelated to the input's.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from fractions import Fraction

import numpy as np
import pandas as pd

from mechanisms.ledger import Ledger, NoiseSource
from mechanisms.randomized_response import randomized_response
from mechanisms.rng import make_rng
from synth._bayesnet import Network, greedy_network, markov_blanket, mutual_information, to_graph
from synth._domains import (
    Domains,
    SynthError,
    check_seed,
    decode,
    encode_records,
)
from synth._estimate import histogram, measure_marginals
from synth._pram import ESTIMATORS, estimate_distribution, post_randomize
from synth.class_conditional import check_rows, disclose_rows
from synth.crosstab import check_epsilon, check_share

__all__ = [
    "DP2Pub",
    "cluster_attributes",
    "entropy",
    "entropy_coefficients",
    "grr_pram_baseline",
    "noisy_total",
    "resize_records",
    "split_variances",
]


SPLITS = ("auto", "budget", "users")
"""How the publication group's budget meets the clusters (see :class:`DP2Pub`)."""


def _width(data: object) -> int:
    """The number of columns of ``data`` (1 when it is not a table: refused later)."""
    return len(getattr(data, "columns", ())) or 1


def entropy(distribution: np.ndarray) -> float:
    """Shannon entropy in nats of a distribution (zeros add nothing)."""
    p = np.asarray(distribution, dtype=float).reshape(-1)
    p = p[p > 0] / p.sum()
    return float(-(p * np.log(p)).sum())


def entropy_coefficients(cluster_entropies: Sequence[float]) -> list[Fraction]:
    """Budget coefficients, larger for clusters of lower total entropy, summing to exactly 1.

    With m clusters of entropies H_c and H = sum H_c, coefficient_c =
    1 / (2m) + (H - H_c) / (2 (m - 1) H): half the budget split equally, half by how much of
    the total entropy the cluster does NOT hold. Why not 1 / H_c: entropies estimated from
    noisy reports are often near 0 for a small cluster, and 1 / H_c then hands it nearly the
    whole budget. The coefficients are exact Fractions: all but the last rounded down to a
    multiple of 1/10^4, the last taking the rest. One cluster gets 1; all-zero entropies give
    equal shares.
    """
    m = len(cluster_entropies)
    if m == 0:
        raise SynthError("cluster_entropies ([]) must not be empty")
    if any(not math.isfinite(h) or h < 0 for h in cluster_entropies):
        raise SynthError(f"cluster_entropies ({list(cluster_entropies)}) must be finite and >= 0")
    if m == 1:
        return [Fraction(1)]
    total = float(sum(cluster_entropies))
    if total == 0:
        raw = [1.0 / m] * m
    else:
        raw = [1 / (2 * m) + (total - h) / (2 * (m - 1) * total) for h in cluster_entropies]
    # exact and readable: all but the last rounded down to 1/10^4, the last takes the rest
    head = [Fraction(math.floor(c * 10**4), 10**4) for c in raw[:-1]]
    return [*head, 1 - sum(head, Fraction(0))]


def cluster_attributes(
    network: Network, sizes: Sequence[int], max_cluster_cells: int = 1024
) -> list[list[int]]:
    """Clusters from Markov blankets: in the network's order, each attribute not yet placed
    starts a cluster and takes the unplaced members of its Markov blanket (in the network's
    order) while the cluster's compound domain stays within ``max_cluster_cells``."""
    graph = to_graph(network)
    order = [node for node, _ in network]
    position = {node: i for i, node in enumerate(order)}
    placed: set[int] = set()
    clusters: list[list[int]] = []
    for node in order:
        if node in placed:
            continue
        cluster, cells = [node], sizes[node]
        for other in sorted(markov_blanket(graph, node), key=position.__getitem__):
            if (
                other not in placed
                and other not in cluster
                and cells * sizes[other] <= max_cluster_cells
            ):
                cluster.append(other)
                cells *= sizes[other]
        placed.update(cluster)
        clusters.append(cluster)
    return clusters


def _randomize_columns(
    codes: np.ndarray, sizes: Sequence[int], epsilons: Sequence[Fraction], rng: np.random.Generator
) -> np.ndarray:
    """Each column reported by k-ary randomized response with its own epsilon."""
    out = np.empty_like(codes)
    for j, (k, eps) in enumerate(zip(sizes, epsilons, strict=True)):
        out[:, j] = randomized_response(codes[:, j], range(k), eps, rng)
    return out


def split_variances(
    epsilon: Fraction, cells: Sequence[int], coefficients: Sequence[Fraction]
) -> tuple[float, float]:
    """The summed variance (times n) of every cluster's estimated cell frequencies under
    each split, for joint randomized response, at the uniform distribution:
    ``(budget, users)``.

    A K-cell table reported by n people with p - q = (e^eps - 1) / (e^eps + K - 1) has
    cell variances lambda (1 - lambda) / (n (p - q)^2), summing to (1 - 1/K) / (n (p - q)^2)
    when lambda is uniform. The budget split reports cluster c with epsilon x c_c by
    everyone; the people split with epsilon by a share c_c of the people. Only public
    figures (epsilon, the domains) and the already private clusters enter, so choosing the
    smaller costs nothing.
    """

    def term(eps: float, k: int) -> float:
        if k == 1:
            return 0.0
        # p - q = (e^eps - 1) / (e^eps + k - 1), written to stay finite for a large eps
        gap = -math.expm1(-eps) / (1 + (k - 1) * math.exp(-eps))
        return (1 - 1 / k) / gap**2

    budget = sum(term(float(epsilon * c), k) for k, c in zip(cells, coefficients, strict=True))
    users = sum(
        term(float(epsilon), k) / float(c) for k, c in zip(cells, coefficients, strict=True)
    )
    return budget, users


def _shares(coefficients: Sequence[Fraction]) -> np.ndarray:
    """The coefficients as float probabilities summing to 1 (the server's public draw)."""
    shares = np.array([float(c) for c in coefficients])
    return shares / shares.sum()


def _round_down(epsilon: Fraction, denominator: int = 10**6) -> Fraction:
    """epsilon rounded down to a multiple of 1 / denominator, so the exact randomized-response
    coins run on the samplers' compiled int64 path (coefficients built from entropies have huge
    denominators, which fall back to per-draw big integers). Never above ``epsilon``: a budget
    below 1 / denominator is kept exact (slower coins) rather than raised, which would spend
    more than the ledger records."""
    rounded = Fraction(math.floor(epsilon * denominator), denominator)
    return rounded if rounded > 0 else epsilon


class DP2Pub:
    """Local-DP publication with Markov-blanket clusters and invariant PRAM.

    Args:
        epsilon: each person's local budget (> 0, exact).
        k: parents per attribute in the learned network.
        domains: declared domains; omitted ones are read from the data (disclosed).
        seed: integer for reproducible runs (tests only); None is secure.
        structure_fraction: share of the records in the structure group (step 1).
        randomizer: ``"joint"`` or ``"attribute"`` (step 5).
        split: ``"budget"`` (the paper), ``"users"`` or ``"auto"`` (step 5): the one of
            smaller predicted variance (:func:`split_variances`, public figures only); the
            choice is ``split_used`` and in the ledger.
        estimator: ``"mle"`` or ``"projection"`` (step 6 and the entropies; the network's
            candidate tables always use the projection, for speed).
        max_cluster_cells: largest compound domain of a cluster. A cluster of K cells
            reported jointly has per-cell variance about (e^eps_c + K - 2) /
            (n (e^eps_c - 1)^2), so large clusters need large budgets (on NLTCS, one seed:
            4 cells did better than 16 at epsilon 1 and worse at epsilon 4).
        total_share: share of epsilon spent on the noisy total that sets the output size
            (module docstring, "Output size"); unused when ``fit_transform`` is given rows.
        max_cluster_cells: largest compound domain of a cluster (16: on NLTCS this beat
            per-attribute post-randomization at epsilon 0.5-16 except 1 in
            benchmarks/bench_synth.py; a cluster of K cells reported jointly has per-cell
            variance (e^eps_c + K - 2) / (n (e^eps_c - 1)^2), so large clusters need large
            budgets).

    Attributes:
        network, clusters, coefficients: the learned structure (attribute names) and the
            budget coefficient of each cluster.
        ledger: the noisy total's entry (unless the caller set the size), one
            randomized-response entry over the two disjoint groups, and disclosures.
    """

    def __init__(
        self,
        epsilon: object,
        k: int = 3,
        domains: Mapping[str, Sequence[Hashable]] | None = None,
        seed: int | None = None,
        *,
        structure_fraction: float = 0.1,
        randomizer: str = "joint",
        max_cluster_cells: int = 16,
        split: str = "auto",
        estimator: str = "mle",
        total_share: object = Fraction(1, 20),
    ) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.total_share = check_share(total_share, "total_share")
        self._report_epsilon = self.epsilon
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise SynthError(f"k ({k!r}) must be an integer >= 0")
        if (
            isinstance(structure_fraction, bool)
            or not isinstance(structure_fraction, (int, float, Fraction))
            or not 0 < structure_fraction < 1
        ):
            raise SynthError(f"structure_fraction ({structure_fraction!r}) must be in (0, 1)")
        if randomizer not in ("joint", "attribute"):
            raise SynthError(f"randomizer ({randomizer!r}) must be 'joint' or 'attribute'")
        if split not in SPLITS:
            raise SynthError(f"split ({split!r}) must be one of {SPLITS}")
        if estimator not in ESTIMATORS:
            raise SynthError(f"estimator ({estimator!r}) must be one of {ESTIMATORS}")
        self.split = split
        self.split_used = split
        self.estimator = estimator
        self.k = k
        self.domains_declared = domains
        self.seed = check_seed(seed)
        self.structure_fraction = structure_fraction
        self.randomizer = randomizer
        if (
            isinstance(max_cluster_cells, bool)
            or not isinstance(max_cluster_cells, int)
            or max_cluster_cells < 1
        ):
            raise SynthError(f"max_cluster_cells ({max_cluster_cells!r}) must be an integer >= 1")
        self.max_cluster_cells = max_cluster_cells
        self.ledger = Ledger()
        self.domains: Domains = {}
        self.columns: list[str] = []
        self.network: list[tuple[str, tuple[str, ...]]] = []
        self.clusters: list[list[str]] = []
        self.coefficients: list[Fraction] = []
        self._rng = make_rng(seed)

    def fit_transform(self, data: pd.DataFrame, rows: int | None = None) -> pd.DataFrame:
        """The post-randomized records of ``rows`` people (default: a noisy total), in an
        order unrelated to the input's, with the data's columns (module docstring)."""
        rows = None if rows is None else check_rows(rows, "rows", columns=_width(data))
        self.ledger = Ledger(NoiseSource.from_seed(self.seed))
        records = encode_records(data, self.domains_declared, self.ledger)
        self.columns, self.domains = records.columns, records.domains
        sizes, codes = list(records.sizes), records.codes
        rng = self._rng
        if rows is None:
            eps_total = self._report_epsilon * self.total_share
            self._report_epsilon = self._report_epsilon - eps_total
            rows = noisy_total(codes, sizes, eps_total, self.ledger, rng)
        else:
            self._report_epsilon = self._report_epsilon
            disclose_rows(self.ledger, rows)
        codes = resize_records(codes, rows, sizes, rng)
        n, d = codes.shape
        if n < 2:  # too few reports to learn anything: each value drawn uniformly
            self._record(
                [(j, ()) for j in range(d)], [[j] for j in range(d)], [Fraction(1)] * d, 0, n
            )
            return decode(resize_records(codes[:0], n, sizes, rng), self.domains, self.columns)
        in_structure = np.zeros(n, dtype=bool)
        n_structure = max(1, min(n - 1, int(round(self.structure_fraction * n)))) if n > 1 else 0
        in_structure[rng.choice(n, size=n_structure, replace=False)] = True
        # step 1: the structure group's reports (the only read of its confidential values)
        per_attribute = [self._report_epsilon / d] * d
        structure_reports = _randomize_columns(codes[in_structure], sizes, per_attribute, rng)
        # steps 2-4: post-processing of those reports
        network = self._learn_network(structure_reports, sizes, per_attribute)
        clusters = cluster_attributes(network, sizes, self.max_cluster_cells)
        entropies = [
            sum(
                entropy(
                    estimate_distribution(
                        histogram(structure_reports, sizes, (a,)),
                        [(sizes[a], per_attribute[a])],
                        self.estimator,
                    )
                )
                for a in cluster
            )
            for cluster in clusters
        ]
        coefficients = entropy_coefficients(entropies)
        # step 5: the publication group's reports, cluster by cluster
        publication = codes[~in_structure]
        released = codes.copy()
        self.split_used = self.split
        if self.split == "auto":
            cells_of = [int(np.prod([sizes[a] for a in cluster])) for cluster in clusters]
            budget_var, users_var = split_variances(self._report_epsilon, cells_of, coefficients)
            self.split_used = "budget" if budget_var <= users_var else "users"
        if self.split_used == "budget":
            cluster_budgets = [_round_down(self._report_epsilon * c) for c in coefficients]
            if sum(cluster_budgets, Fraction(0)) > self._report_epsilon:  # sequential
                raise SynthError(
                    f"cluster budgets ({sum(cluster_budgets)}) exceed the reports' epsilon "
                    f"({self._report_epsilon})"
                )
            reporter = np.zeros(len(publication), dtype=np.int64)  # unused: all report all
        else:
            cluster_budgets = [self._report_epsilon] * len(clusters)
            # the server assigns each person one cluster, with the coefficients as shares
            reporter = rng.choice(len(clusters), size=len(publication), p=_shares(coefficients))
        for c, (cluster, cluster_eps) in enumerate(zip(clusters, cluster_budgets, strict=True)):
            csizes = [sizes[a] for a in cluster]
            cells = int(np.prod(csizes))
            asked = (
                np.ones(len(publication), dtype=bool)
                if self.split_used == "budget"
                else reporter == c
            )
            reports_flat, factors = self._report_cluster(
                publication[asked][:, cluster], csizes, cluster_eps, rng
            )
            # one axis per factor of Q: the flat compound for the joint randomizer
            counts = np.bincount(reports_flat, minlength=cells).reshape([k for k, _ in factors])
            # step 6: estimate pi, post-randomize every report with its own Q; a person not
            # asked about this cluster reported nothing (epsilon 0), whose row of Q' is pi
            pi = estimate_distribution(counts, factors, self.estimator).reshape(-1)
            out_pub = np.empty(len(publication), dtype=np.int64)
            out_pub[asked] = post_randomize(reports_flat, pi, factors, rng)
            out_pub[~asked] = rng.choice(cells, size=int((~asked).sum()), p=pi / pi.sum())
            s_flat = np.ravel_multi_index(tuple(structure_reports[:, a] for a in cluster), csizes)
            s_factors = [(sizes[a], per_attribute[a]) for a in cluster]
            out_str = post_randomize(s_flat, pi, s_factors, rng)
            released_cluster = np.empty(n, dtype=np.int64)
            released_cluster[~in_structure] = out_pub
            released_cluster[in_structure] = out_str
            unravelled = np.unravel_index(released_cluster, csizes)
            for a, values in zip(cluster, unravelled, strict=True):
                released[:, a] = values
        self._record(network, clusters, coefficients, n_structure, n)
        return decode(released, self.domains, self.columns)

    def _report_cluster(
        self, values: np.ndarray, csizes: list[int], cluster_eps: Fraction, rng: np.random.Generator
    ) -> tuple[np.ndarray, list[tuple[int, object]]]:
        """The flat compound reports of one cluster's values (one row per person, one column
        per attribute) and the (size, epsilon) factors of its Q."""
        cells = int(np.prod(csizes))
        if self.randomizer == "joint":
            flat = np.ravel_multi_index(tuple(values.T), csizes)
            return randomized_response(flat, range(cells), cluster_eps, rng), [(cells, cluster_eps)]
        eps_each = [cluster_eps / len(csizes)] * len(csizes)
        rep = _randomize_columns(values, csizes, eps_each, rng)
        return np.ravel_multi_index(tuple(rep.T), csizes), list(zip(csizes, eps_each, strict=True))

    def _learn_network(
        self, reports: np.ndarray, sizes: Sequence[int], epsilons: Sequence[Fraction]
    ) -> Network:
        """Greedy MI network on joint distributions estimated from the reports."""
        cache: dict[tuple[int, tuple[int, ...]], float] = {}

        def score(x: int, parents: tuple[int, ...]) -> float:
            if (x, parents) not in cache:
                attrs = (x, *parents)
                counts = histogram(reports, sizes, attrs)
                factors = [(sizes[a], epsilons[a]) for a in attrs]
                # the plain inverse projected: the search scores thousands of candidate
                # tables, and EM on reports this noisy needs thousands of steps for each
                pi = estimate_distribution(counts, factors, "projection")
                cache[(x, parents)] = mutual_information(pi)
            return cache[(x, parents)]

        d = len(sizes)
        first = int(self._rng.integers(0, d))
        return greedy_network(
            sizes,
            self.k,
            score,
            lambda scores: int(np.argmax(scores)),
            first=first,
            max_cells=4096,
        )

    def _record(
        self,
        network: Network,
        clusters: list[list[int]],
        coefficients: list[Fraction],
        n_structure: int,
        n: int,
    ) -> None:
        c = self.columns
        self.network = [(c[x], tuple(c[p] for p in parents)) for x, parents in network]
        self.clusters = [[c[a] for a in cluster] for cluster in clusters]
        self.coefficients = coefficients
        from mechanisms.accounting import PureDP

        self.ledger.record(
            "generalized randomized response",
            0,
            "randomized_response",
            PureDP(self._report_epsilon),
            sensitivity=1,
            nodes=2,
            note=(
                f"local DP: {n_structure} records report each attribute with epsilon/{len(c)}; "
                f"the other {n - n_structure} "
                + (
                    "report each cluster with epsilon x coefficient"
                    if self.split_used == "budget"
                    else "report one cluster each (coefficient = share of people) with epsilon"
                )
                + f" ({self.randomizer}); clusters {self.clusters}, coefficients "
                f"{[str(x) for x in coefficients]}"
            ),
        )


def noisy_total(
    codes: np.ndarray,
    sizes: Sequence[int],
    epsilon: Fraction,
    ledger: Ledger,
    rng: np.random.Generator,
) -> int:
    """The number of records plus discrete Laplace noise (sensitivity 1, add/remove), clipped
    at 0 and recorded in the ledger as the query ``total``."""
    from mechanisms.accounting import PureDP

    (measured,) = measure_marginals(
        codes,
        sizes,
        [()],
        [PureDP(epsilon)],
        names=["total"],
        ledger=ledger,
        rng=rng,
        note="the output size: the number of records, noisy",
    )
    return max(0, int(measured.noisy))


def resize_records(
    codes: np.ndarray, rows: int, sizes: Sequence[int], rng: np.random.Generator
) -> np.ndarray:
    """``rows`` records in a random order: a uniform random subset of ``codes`` when
    ``rows <= len(codes)``, else all of them and dummy records drawn uniformly from the
    domains (independent of the data).

    The order matters: the reports keep it, so without the shuffle (``choice`` without
    replacement returns its draws in a random order) a row's position in the output would
    tell its value on a sorted input."""
    n = codes.shape[0]
    if rows <= n:
        return codes[rng.choice(n, size=rows, replace=False)]
    dummies = np.column_stack([rng.integers(0, k, size=rows - n) for k in sizes])
    return np.concatenate([codes, dummies.astype(codes.dtype)])[rng.permutation(rows)]


def grr_pram_baseline(
    data: pd.DataFrame,
    epsilon: object,
    domains: Mapping[str, Sequence[Hashable]] | None = None,
    seed: int | None = None,
    *,
    rows: int | None = None,
    total_share: object = Fraction(1, 20),
) -> tuple[pd.DataFrame, Ledger]:
    """The local-DP floor: each attribute by randomized response with epsilon / d, then each
    attribute post-randomized on its own by invariant PRAM with the plain inverse of Q
    projected onto the simplex (no clusters, no network).

    The output size is chosen as :class:`DP2Pub` chooses it: a noisy total bought with
    ``total_share`` of epsilon, or ``rows`` when given (disclosed in the ledger).

    Returns the post-randomized records and their ledger (the noisy total's entry, the
    reports' entry and what reading the domains from the data disclosed).
    """
    from mechanisms.accounting import PureDP

    eps = check_epsilon(epsilon)
    share = check_share(total_share, "total_share")
    rows = None if rows is None else check_rows(rows, "rows", columns=_width(data))
    ledger = Ledger(NoiseSource.from_seed(seed))
    records = encode_records(data, domains, ledger)
    columns, resolved = records.columns, records.domains
    sizes, codes = list(records.sizes), records.codes
    rng = make_rng(seed)
    if rows is None:
        rows = noisy_total(codes, sizes, eps * share, ledger, rng)
        eps = eps - eps * share
    else:
        disclose_rows(ledger, rows)
    codes = resize_records(codes, rows, sizes, rng)
    per = [eps / len(columns)] * len(columns)
    reports = _randomize_columns(codes, sizes, per, rng)
    out = np.empty_like(reports)
    for j, (k, e) in enumerate(zip(sizes, per, strict=True)):
        pi = estimate_distribution(np.bincount(reports[:, j], minlength=k), [(k, e)])
        out[:, j] = post_randomize(reports[:, j], pi, [(k, e)], rng)
    ledger.record(
        "generalized randomized response",
        0,
        "randomized_response",
        PureDP(eps),
        sensitivity=1,
        nodes=1,
        note=f"local DP: every record reports each attribute with epsilon/{len(columns)}",
    )
    return decode(out, resolved, columns), ledger
