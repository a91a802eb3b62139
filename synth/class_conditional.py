"""The class-conditional (DP naive-Bayes) synthesizer and the seed's ``generate`` function.

For each attribute A other than the class, a noisy (A, class) histogram is measured with an
equal share of the budget. The estimator (:func:`synth._estimate.consistent_tables`) makes
the tables non-negative, integer and consistent: every table has the same class totals,
which a plain implementation (normalising each noisy table on its own) does not give. Rows
are then generated per class (as many as the model's unbiased noisy total by default, see
:attr:`ClassConditional.total`): the class counts follow the class totals and, within a class,
each attribute's value counts follow P(A | class), both by largest-remainder rounding; each
attribute's column is shuffled within the class, so attributes are independent given the
class, as in naive Bayes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Hashable, Mapping, Sequence
from fractions import Fraction

import numpy as np
import pandas as pd

from mechanisms.ledger import Ledger, NoiseSource
from mechanisms.rng import make_rng
from synth._domains import (
    Domains,
    SynthError,
    check_frame,
    check_seed,
    decode,
    encode_records,
)
from synth._estimate import (
    consistent_tables,
    largest_remainder,
    measure_marginals,
    split_budget,
    unbiased_total,
)
from synth.crosstab import check_epsilon

__all__ = [
    "ClassConditional",
    "generate",
    "check_rows",
    "max_rows",
    "CELL_BYTES",
    "disclose_rows",
    "ROWS_DISCLOSURE",
]

logger = logging.getLogger(__name__)


#: Bytes one synthetic cell costs while it is sampled: its int64 code, then its value in the
#: output frame (an upper estimate for the integer and category columns the generators make).
CELL_BYTES = 16


def max_rows(columns: int = 1) -> int:
    """The most synthetic rows of ``columns`` columns that fit in half of this machine's
    physical memory, at ``CELL_BYTES`` a cell (16 GiB is assumed where it cannot be read)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        memory = 16 << 30
    return max(1, memory // 2 // (CELL_BYTES * max(1, columns)))


def check_rows(n: object, name: str = "n", *, columns: int = 1, least: int = 0) -> int:
    """A number of rows: an integer >= ``least`` (bools refused) that fits in memory.

    Why the bound: a size is the caller's, not the data's, and an absurd one (10**11) ended in
    numpy's allocation error (or the machine's swap) after the whole fit; it is refused before
    anything is fitted or allocated, naming the limit (``max_rows``).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < least:
        raise SynthError(f"{name} ({n!r}) must be an integer >= {least}")
    limit = max_rows(columns)
    if n > limit:
        raise SynthError(
            f"{name} ({n}) is more rows than this machine holds: at most {limit:,} rows of "
            f"{columns} column(s) (about {CELL_BYTES} bytes a cell in half of its memory)"
        )
    return int(n)


#: The disclosure a generator records when the caller sets the output size.
ROWS_DISCLOSURE = "output size"


def disclose_rows(ledger: Ledger, rows: int) -> None:
    """Record that the caller set the output size (not derived from the noisy measurements).

    The ledger cannot tell whether ``rows`` came from the confidential data; it says what
    follows if it did, without comparing it with the true count (that would disclose n).
    """
    ledger.record_disclosure(
        ROWS_DISCLOSURE,
        f"{rows} rows, as the caller asked (not from the noisy measurements): if this is the "
        "true number of records, it is published exactly and is not private",
    )


class ClassConditional:
    """DP naive-Bayes synthesizer: noisy (attribute, class) tables with shared class totals.

    Args:
        epsilon: total budget (> 0, exact), split equally over the (A, class) tables.
        target: the class column (default: the last column of the data).
        domains: declared domain per column; omitted ones are read from the data (disclosed
            in the ledger).
        seed: integer for reproducible noise and sampling (tests only); None is secure.
        mechanism: ``"discrete_laplace"`` (epsilon-DP, default) or ``"discrete_gaussian"``
            (rho = epsilon^2 / 2 zCDP); the guarantee holds for the default output size, not
            for a size given to :meth:`sample` that is the true count.

    Attributes:
        ledger: the measurements and disclosures.
        tables: the estimated (A, class) tables, by attribute name (integer counts).
        class_totals: the class totals every table agrees on.
        total: the fitted model's total: a noisy count (unbiased, unlike the sum of
            ``class_totals``), the default output size of :meth:`sample`.
    """

    def __init__(
        self,
        epsilon: object,
        target: str | None = None,
        domains: Mapping[str, Sequence[Hashable]] | None = None,
        seed: int | None = None,
        *,
        mechanism: str = "discrete_laplace",
    ) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.target = target
        self.domains_declared = domains
        self.seed = check_seed(seed)
        self.mechanism = mechanism
        self.ledger = Ledger()
        self.domains: Domains = {}
        self.columns: list[str] = []
        self.tables: dict[str, np.ndarray] = {}
        self.class_totals: np.ndarray | None = None
        self._total: int | None = None
        self._rng = make_rng(seed)

    def fit(self, data: pd.DataFrame) -> ClassConditional:
        """Measure the (A, class) tables and estimate consistent integer tables."""
        columns = list(check_frame(data).columns)
        target = columns[-1] if self.target is None else self.target
        if target not in columns:
            raise SynthError(f"target ({target!r}) is not a column of the data ({columns})")
        self.target = target
        self.ledger = Ledger(NoiseSource.from_seed(self.seed))
        records = encode_records(data, self.domains_declared, self.ledger)
        self.columns, self.domains = records.columns, records.domains
        sizes, codes = records.sizes, records.codes
        t = self.columns.index(target)
        features = [j for j in range(len(self.columns)) if j != t]
        marginals: list[tuple[int, ...]] = [(j, t) for j in features] or [(t,)]
        names = [f"{self.columns[j]} x {target}" for j in features] or [target]
        budgets = split_budget(
            self.epsilon, self.mechanism, [Fraction(1, len(marginals))] * len(marginals)
        )
        measured = measure_marginals(
            codes,
            sizes,
            marginals,
            budgets,
            names=names,
            ledger=self.ledger,
            rng=self._rng,
            mechanism=self.mechanism,
        )
        tables = consistent_tables(measured, sizes, name="class-conditional")
        self.class_totals = tables[0].sum(axis=0) if features else tables[0]
        self.tables = {self.columns[j]: tables[i] for i, j in enumerate(features)}
        self._total = unbiased_total(measured)
        return self

    @property
    def total(self) -> int:
        """The fitted model's total: the noisy tables' raw sums combined (``unbiased_total``).

        Not the sum of :attr:`class_totals`: the non-negative tables keep every positive noise
        of a wide class column's empty cells and clip every negative one, so their sum grows
        with the column's width (300 records with a 5,000-value class column at epsilon 2
        gave class totals summing to about 3,900). ``sample`` spreads this total over the
        classes in :attr:`class_totals`' proportions.
        """
        if self._total is None:
            raise SynthError("the generator is not fitted: call fit(data) first")
        return self._total

    def sample(self, n: int | None = None) -> pd.DataFrame:
        """Synthetic rows with the data's columns (see the module docstring).

        Args:
            n: rows to generate; default (None) the fitted model's noisy :attr:`total`. A
                given ``n`` is disclosed in the ledger (it is not from the measurements).
        """
        if self.class_totals is None:
            raise SynthError("the generator is not fitted: call fit(data) first")
        if n is None:
            n = self.total
        else:
            n = check_rows(n, columns=len(self.columns))
            disclose_rows(self.ledger, n)
        per_class = largest_remainder(self.class_totals, n)
        t = self.columns.index(str(self.target))
        codes = np.empty((n, len(self.columns)), dtype=np.int64)
        codes[:, t] = np.repeat(np.arange(per_class.size), per_class)
        starts = np.concatenate([[0], np.cumsum(per_class)])
        for name, table in self.tables.items():
            j = self.columns.index(name)
            for c, count in enumerate(per_class):
                if count == 0:
                    continue
                values = np.repeat(np.arange(table.shape[0]), largest_remainder(table[:, c], count))
                codes[starts[c] : starts[c + 1], j] = self._rng.permutation(values)
        codes = codes[self._rng.permutation(n)]
        return decode(codes, self.domains, self.columns)


def generate(
    df: pd.DataFrame,
    numTuples: int | None = None,  # noqa: N803 (the seed's signature)
    numClass: str | int | None = None,  # noqa: N803
    epsilon: float = 1.0,
    random_state: int | None = None,
) -> pd.DataFrame:
    """The seed's entry point: a DP naive-Bayes synthetic copy of ``df``.

    Args:
        df: the confidential records (domains are read from it, which is disclosed).
        numTuples: rows to generate (default: the fitted model's noisy total, never
            ``len(df)``, which would publish the true count; ``numTuples=len(df)`` publishes
            it exactly, not privately).
        numClass: the class column, by name or position (default: the last column).
        epsilon: total budget.
        random_state: seed of the noise and the sampling. Default None: the secure random
            source (the seed code's default was 42, which made the output a function of the
            data alone). An integer gives a reproducible run for tests and experiments, NOT a
            private release: it is disclosed in the ledger and warned about on stderr.

    Returns:
        A DataFrame with ``df``'s columns.
    """
    df = check_frame(df, "df")
    if numClass is None:
        target = str(df.columns[-1])
    elif isinstance(numClass, (int, np.integer)) and not isinstance(numClass, bool):
        if not -df.shape[1] <= numClass < df.shape[1]:
            raise SynthError(f"numClass ({numClass}) must be a column position of df")
        target = str(df.columns[int(numClass)])
    else:
        target = str(numClass)
    n = None if numTuples is None else check_rows(numTuples, "numTuples", columns=df.shape[1])
    model = ClassConditional(epsilon, target=target, seed=random_state).fit(df)
    return model.sample(n)
