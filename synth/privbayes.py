"""PrivBayes (Zhang, Cormode, Procopiuc, Srivastava, Xiao; SIGMOD 2014, TODS 2017).

1. Structure: the first attribute is drawn uniformly (no data used); then, attribute by
   attribute, a pair (X, Pi) with Pi a set of min(k, added) already-added attributes is chosen
   by the exponential mechanism on its mutual information I(X; Pi) (or the R score). Budget:
   ``structure_share`` of epsilon, split equally over the d - 1 choices.
2. Distributions: the noisy (X, Pi) tables of the attributes from the (k+1)-th on (the
   first k+1 attributes are all in that table, so their own tables are its marginals, as in
   the paper), each with an equal share of the rest of the budget, exact discrete noise.
   The estimator makes them non-negative, integer and consistent on every shared
   sub-marginal.
3. Sampling: node by node in topological order from P(X | Pi).

Neighbouring: replace-one with the number of records n public (the paper's setting; its
score sensitivities divide by n). That assumption is recorded in the ledger as a disclosure
and each table's sensitivity is 2 (L1; L2^2 = 2 for the discrete Gaussian). The output is
not a copy of n: by default :meth:`PrivBayes.sample` draws as many rows as the noisy tables'
total; a size given by the caller is disclosed in the ledger.

Sensitivities of the scores (one record replaced, n records):
- mutual information: Zhang et al., SIGMOD 2014 Lemma 1 (TODS 2017 Lemma 4.1):
  S(I) = (1/n) log n + ((n-1)/n) log(n/(n-1)) if X or Pi is binary, else
  S(I) = (2/n) log((n+1)/2) + ((n-1)/n) log((n+1)/(n-1)) (natural logarithms here, as the
  scores);
- R score: 3/n (TODS 2017): the joint moves by 2/n in L1, the product of the marginals by at
  most 4/n, and R halves their sum.
The scores are computed in floating point (relative error ~1e-15); the sensitivity is rounded
up by a relative 1e-9 to cover it, and the selection itself is exact
(:func:`mechanisms.exponential_mechanism`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from fractions import Fraction

import numpy as np
import pandas as pd

from mechanisms.accounting import Budget, split
from mechanisms.ledger import Ledger, NoiseSource
from mechanisms.rng import make_rng
from mechanisms.selection import exponential_mechanism
from synth._bayesnet import (
    Network,
    greedy_network,
    mutual_information,
    r_score,
    sample_network,
    to_graph,
)
from synth._domains import (
    Domains,
    SynthError,
    check_seed,
    decode,
    encode_records,
)
from synth._estimate import (
    MAX_TABLE_CELLS,
    check_cell_cap,
    check_cells,
    consistent_tables,
    histogram,
    marginalize,
    measure_marginals,
    total_budget,
    unbiased_total,
)
from synth.class_conditional import check_rows, disclose_rows
from synth.crosstab import check_epsilon, check_share

__all__ = ["PrivBayes", "mi_sensitivity"]


_FLOAT_MARGIN = 1 + 1e-9


def mi_sensitivity(n: int, binary: bool) -> float:
    """Zhang et al.'s bound on the change of I(X; Pi) when one of n records is replaced."""
    if n < 2:
        raise SynthError(f"n ({n}) must be at least 2 for the mutual-information bound")
    if binary:
        value = math.log(n) / n + (n - 1) / n * math.log(n / (n - 1))
    else:
        value = 2 / n * math.log((n + 1) / 2) + (n - 1) / n * math.log((n + 1) / (n - 1))
    return value * _FLOAT_MARGIN


class PrivBayes:
    """Differentially private Bayesian-network synthesizer.

    Args:
        epsilon: total budget (> 0, exact).
        k: number of parents per attribute (degree of the network).
        domains: declared domains; omitted ones are read from the data (disclosed).
        seed: integer for reproducible runs (tests only); None is secure.
        structure_share: fraction of epsilon spent on the structure (the paper's beta, 0.3).
        score: ``"mi"`` (mutual information) or ``"r"`` (the R score).
        mechanism: ``"discrete_laplace"`` (default) or ``"discrete_gaussian"``.
        max_cells: largest (X, Pi) table considered, or ``"auto"``: the paper's
            theta-usefulness, cells <= n eps_2 / (S d theta) with eps_2 the tables' budget
            and S = 2 their sensitivity, i.e. the average count per cell stays theta times the
            noise scale (computed from public n, epsilon and domain sizes only).
        theta: the usefulness threshold for ``max_cells="auto"`` (the paper uses 4).

    Attributes:
        network: (node, parents) by attribute name, in the order they were added.
        graph: the network as a networkx DiGraph over attribute names.
        ledger: the selections, the tables and the disclosures.
    """

    def __init__(
        self,
        epsilon: object,
        k: int = 2,
        domains: Mapping[str, Sequence[Hashable]] | None = None,
        seed: int | None = None,
        *,
        structure_share: object = Fraction(3, 10),
        score: str = "mi",
        mechanism: str = "discrete_laplace",
        max_cells: int | str = "auto",
        theta: float = 4.0,
    ) -> None:
        self.epsilon = check_epsilon(epsilon)
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise SynthError(f"k ({k!r}) must be an integer >= 0")
        if score not in ("mi", "r"):
            raise SynthError(f"score ({score!r}) must be 'mi' or 'r'")
        share = check_share(structure_share, "structure_share")
        self.k = k
        self.domains_declared = domains
        self.seed = check_seed(seed)
        self.structure_share = share
        self.score = score
        self.mechanism = mechanism
        if max_cells != "auto" and (
            isinstance(max_cells, bool) or not isinstance(max_cells, int) or max_cells < 1
        ):
            raise SynthError(f"max_cells ({max_cells!r}) must be 'auto' or an integer >= 1")
        if isinstance(max_cells, int):
            check_cell_cap(max_cells, "max_cells")
        self.max_cells = max_cells
        if (
            isinstance(theta, bool)
            or not isinstance(theta, (int, float))
            or not math.isfinite(theta)
            or theta <= 0
        ):
            raise SynthError(f"theta ({theta!r}) must be a finite number > 0")
        self.theta = float(theta)
        self.ledger = Ledger()
        self.domains: Domains = {}
        self.columns: list[str] = []
        self._network: Network = []
        self._conditionals: dict[int, np.ndarray] = {}
        self._total: int | None = None
        self._rng = make_rng(seed)

    @property
    def network(self) -> list[tuple[str, tuple[str, ...]]]:
        """The learned network with attribute names."""
        c = self.columns
        return [(c[x], tuple(c[p] for p in parents)) for x, parents in self._network]

    @property
    def graph(self):  # -> nx.DiGraph (networkx has no type stubs)
        """The network as a networkx DiGraph over attribute names."""
        import networkx as nx

        return nx.relabel_nodes(to_graph(self._network), dict(enumerate(self.columns)))

    def fit(self, data: pd.DataFrame) -> PrivBayes:
        """Learn the structure, measure the tables and derive the conditionals."""
        self.ledger = Ledger(NoiseSource.from_seed(self.seed))
        records = encode_records(data, self.domains_declared, self.ledger)
        self.columns, self.domains = records.columns, records.domains
        sizes, codes = list(records.sizes), records.codes
        n, d = codes.shape
        self.ledger.record_disclosure(
            "number of records",
            "the structure scores' sensitivities use the number of records, taken as public "
            "(PrivBayes's replace-one neighbours); the output size is the noisy tables' total, "
            "not the number of records",
        )
        # each column's own table is the least PrivBayes allocates (a node may have no
        # parents); the (X, Pi) tables are within max_cells (itself within the bound) and
        # measure_marginals checks the measured ones: refused here before any work
        check_cells(
            sizes, [(j,) for j in range(d)], [f"privbayes column {c}" for c in self.columns]
        )
        total = total_budget(self.epsilon, self.mechanism)
        if d == 1:
            structure, tables_budget = None, total
        else:
            structure, tables_budget = split(
                total, [self.structure_share, 1 - self.structure_share]
            )
        self._network = self._structure(codes, sizes, structure)
        # a node whose (X, Pi) lies inside another node's table is that table's marginal (as
        # the first k nodes are marginals of the (k+1)-th in the paper): measure only the
        # maximal tables
        sets = [frozenset((x, *parents)) for x, parents in self._network]
        container = {
            i: max((j for j in range(d) if sets[i] < sets[j]), key=lambda j: len(sets[j]))
            for i in range(d)
            if any(sets[i] < other for other in sets)
        }
        while any(j in container for j in container.values()):
            container = {i: container.get(j, j) for i, j in container.items()}
        measured_ids = [i for i in range(d) if i not in container]
        marginals = [(self._network[i][0], *self._network[i][1]) for i in measured_ids]
        budgets = split(tables_budget, [Fraction(1, len(marginals))] * len(marginals))
        names = [
            "table " + " | ".join([c[0], ", ".join(c[1:])])
            for c in ([self.columns[a] for a in m] for m in marginals)
        ]
        measured = measure_marginals(
            codes,
            sizes,
            marginals,
            budgets,
            names=names,
            ledger=self.ledger,
            rng=self._rng,
            mechanism=self.mechanism,
            neighbouring="replace_one",
        )
        tables = consistent_tables(measured, sizes, name="privbayes")
        self._total = unbiased_total(measured)
        by_node = dict(zip(measured_ids, range(len(measured_ids)), strict=True))
        self._conditionals = {}
        for i, (x, parents) in enumerate(self._network):
            source = by_node[container.get(i, i)]
            self._conditionals[x] = marginalize(tables[source], marginals[source], (x, *parents))
        return self

    def _structure(self, codes: np.ndarray, sizes: Sequence[int], budget: Budget | None) -> Network:
        """The greedy network, each choice by the exponential mechanism (see module doc)."""
        n, d = codes.shape
        first = int(self._rng.integers(0, d))
        if d == 1 or budget is None:
            return [(first, ())]
        per_choice = split(budget, [Fraction(1, d - 1)] * (d - 1))[0]
        if per_choice.kind == "pure":
            epsilon = per_choice.value
        else:  # an eps-DP choice is (eps^2/2)-zCDP: eps = sqrt(2 rho), rounded down
            epsilon = Fraction(math.isqrt(int(2 * per_choice.value * 10**12)), 10**6)
        # the candidates' sensitivities differ (binary or not); the largest bounds them all
        if self.score == "mi":
            sens = Fraction(mi_sensitivity(n, binary=all(s <= 2 for s in sizes)))
        else:
            sens = Fraction(3 / n * _FLOAT_MARGIN)
        cache: dict[tuple[int, tuple[int, ...]], float] = {}

        def score(x: int, parents: tuple[int, ...]) -> float:
            if (x, parents) not in cache:
                joint = histogram(codes, sizes, (x, *parents))
                value = mutual_information(joint) if self.score == "mi" else r_score(joint)
                cache[(x, parents)] = value
            return cache[(x, parents)]

        def choose(scores: list[float]) -> int:
            return exponential_mechanism(scores, epsilon, sens, rng=self._rng)

        if self.max_cells == "auto":
            eps2 = float(self.epsilon * (1 - self.structure_share))
            max_cells = min(MAX_TABLE_CELLS, max(2, int(n * eps2 / (2 * d * self.theta))))
        else:
            max_cells = int(self.max_cells)
        network = greedy_network(sizes, self.k, score, choose, first=first, max_cells=max_cells)
        for step, (x, parents) in enumerate(network[1:], start=1):
            self.ledger.record(
                f"structure choice {step}",
                0,
                "exponential_mechanism",
                per_choice,
                sensitivity=sens,
                note=f"chose {self.columns[x]} | {[self.columns[p] for p in parents]} by "
                f"{self.score} score (epsilon {epsilon})",
            )
        return network

    @property
    def total(self) -> int:
        """The fitted model's total: the noisy tables' raw sums combined (``unbiased_total``),
        not the sum of the non-negative tables, which clipping inflates."""
        if self._total is None:
            raise SynthError("the generator is not fitted: call fit(data) first")
        return self._total

    def sample(self, n: int | None = None) -> pd.DataFrame:
        """Synthetic records with the data's columns.

        Args:
            n: rows to generate; default (None) the noisy tables' :attr:`total`. A given
                ``n`` is disclosed in the ledger (it is not from the measurements).
        """
        if not self._conditionals:
            raise SynthError("the generator is not fitted: call fit(data) first")
        if n is None:
            n = self.total
        else:
            n = check_rows(n, columns=len(self.columns))
            disclose_rows(self.ledger, n)
        codes = sample_network(self._network, self._conditionals, n, self._rng)
        return decode(codes, self.domains, self.columns)
