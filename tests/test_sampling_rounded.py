"""Rounded synthesis of synth.graphical (``method="rounded"``): exact properties, unbiasedness.

Exact properties on worked cases: every count is the floor or the ceiling of its expected
count and each group's counts sum to its size (the controlled rounding's counts, the root
clique's counts of a model's records, and each separator group's counts of a child clique).

Unbiasedness, two statistical tests at a false-alarm rate alpha = 1e-6 each (Bonferroni over
the cells tested; each cell's z is approximately normal by the central limit theorem over
thousands of independent replicates):

- the controlled rounding alone, over 100,000 independent groups (two cases: mixed group
  sizes, and skewed fractional parts): the sum of each cell's counts against its exact
  expectation, with the exact variance (a group's count is its floor plus a Bernoulli of its
  fractional part). Power: a start drawn from the first 90% of its range only (a biased
  systematic sample), and successive sampling without replacement in proportion to the
  fractional parts (whose inclusion probabilities are not the parts: 0.93, not 0.95, on the
  skewed case), must both be rejected at the same threshold.
- whole records, over 3,000 independent syntheses of 60 records: the mean count of marginals
  inside and outside the cliques against n times the model's probability, with the sample
  variance. Power: the same records tested against a model whose one cell's probability is
  30% higher must be rejected.

The i.i.d. path is unchanged: the same records for the same seed as main before the rounded
method was added (commit 6969075), pinned below.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from synth import SynthError
from synth.graphical import GraphicalModel, build_junction_tree
from synth.graphical.sampling import check_sampling, rounded_counts

SIZES = (3, 2, 4, 2, 3)
CLIQUES = [(0, 1), (1, 2), (0, 2), (2, 3), (3, 4)]
ALPHA = 1e-6


def _model(potentials: dict | None = None, total: float = 1000.0) -> GraphicalModel:
    if potentials is None:
        potentials = _potentials(11)
    return GraphicalModel(SIZES, build_junction_tree(CLIQUES, SIZES), potentials, total)


def _potentials(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {c: rng.normal(0, 0.5, [SIZES[a] for a in c]) for c in CLIQUES}


def _counts(codes: np.ndarray, attrs: tuple[int, ...]) -> np.ndarray:
    shape = tuple(SIZES[a] for a in attrs)
    flat = np.ravel_multi_index(tuple(codes[:, a] for a in attrs), shape)
    return np.bincount(flat, minlength=int(np.prod(shape))).reshape(shape)


def _within_floor_ceil(counts: np.ndarray, expected: np.ndarray) -> bool:
    """Each count is the floor or the ceiling of its expected count (a 1e-6 slack: the
    conditionals are rounded to a 2^-40 grid before the exact rounding)."""
    return bool(
        np.all(counts >= np.floor(expected + 1e-6)) and np.all(counts <= np.ceil(expected - 1e-6))
    )


# --- the controlled rounding: worked cases ---


def test_worked_case_counts_are_floor_or_ceiling_and_sum_to_the_group():
    # 7 records, probabilities 1/2, 1/4, 1/8, 1/8: expected 3.5, 1.75, 0.875, 0.875
    sizes = np.full(2000, 7)
    weights = np.tile([4, 2, 1, 1], (2000, 1))
    counts = rounded_counts(sizes, weights, np.random.default_rng(0))
    assert counts.shape == (2000, 4) and (counts.sum(axis=1) == 7).all()
    assert set(map(tuple, counts)) <= {(4, 1, 1, 1), (3, 2, 1, 1), (4, 2, 0, 1), (4, 2, 1, 0)}
    # 3 of the 4 fractional parts (1/2, 3/4, 7/8, 7/8) become ceilings; every pattern occurs
    assert len(set(map(tuple, counts))) == 4


def test_integer_expected_counts_are_exact_and_empty_groups_stay_empty():
    counts = rounded_counts(
        np.array([8, 0, 16]),
        np.array([[4, 2, 1, 1], [1, 1, 1, 1], [4, 2, 1, 1]]),
        np.random.default_rng(1),
    )
    assert counts.tolist() == [[4, 2, 1, 1], [0, 0, 0, 0], [8, 4, 2, 2]]


def test_root_clique_counts_are_floor_or_ceiling_of_n_p():
    model = _model()
    root = model.tree.cliques[model.tree.order[0]]
    for seed in range(5):
        n = 997 + seed
        codes = model.sample(n, np.random.default_rng(seed), method="rounded")
        counts = _counts(codes, root)
        assert counts.sum() == n
        assert _within_floor_ceil(counts, n * model.probability(root))


def test_each_separator_group_is_split_by_floor_or_ceiling_of_its_conditional():
    model = _model()
    tree = model.tree
    codes = model.sample(1003, np.random.default_rng(7), method="rounded")
    checked = 0
    for c in tree.order[1:]:
        clique, sep = tree.cliques[c], tree.separators[c]
        new = tuple(a for a in clique if a not in sep)
        joint = model.probability((*sep, *new))
        conditional = joint / joint.sum(
            axis=tuple(range(len(sep), len(sep) + len(new))), keepdims=True
        )
        counts = _counts(codes, (*sep, *new))
        for state in np.ndindex(*(SIZES[a] for a in sep)):
            m = counts[state].sum()
            assert _within_floor_ceil(counts[state], m * conditional[state]), (clique, state)
            checked += 1
    assert checked >= 4  # the tree has child cliques with several separator states


def test_rounded_records_have_less_error_than_iid_on_every_clique():
    """The point of it: on each clique, the rounded records' L1 distance to n p is below one
    record a cell; i.i.d. draws of 20,000 records are much further (about sqrt(n p) a cell)."""
    model = _model()
    n = 20_000
    rounded = model.sample(n, np.random.default_rng(3), method="rounded")
    iid = model.sample(n, np.random.default_rng(3), method="iid")
    for clique in model.tree.cliques:
        expected = n * model.probability(clique)
        error = np.abs(_counts(rounded, clique) - expected).sum()
        assert error < expected.size
        assert np.abs(_counts(iid, clique) - expected).sum() > 5 * error


# --- the controlled rounding: unbiasedness ---

GROUPS = 100_000


def _rounding_case(case: str, groups: int = GROUPS) -> tuple[np.ndarray, np.ndarray]:
    """``"mixed"``: groups of 0 to 39 records, one table with a zero; ``"skewed"``: 2 records
    over probabilities 0.475, 0.475, 0.025, 0.025 (fractional parts 0.95, 0.95, 0.05, 0.05),
    where successive sampling's inclusion probability of a large part is about 0.93."""
    if case == "skewed":
        return np.full(groups, 2), np.tile([19, 19, 1, 1], (groups, 1))
    rng = np.random.default_rng(21)
    sizes = rng.integers(0, 40, groups)
    weights = np.tile(rng.integers(0, 50, 6), (groups, 1))
    weights[:, 0] = 0
    return sizes, weights


def _rounding_z(counts: np.ndarray, sizes: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Each cell's z: summed counts minus their exact expectation, over the exact standard
    deviation (each group's count is its floor plus a Bernoulli of its fractional part)."""
    total = weights.sum(axis=1, keepdims=True)
    product = sizes[:, None] * weights
    fraction = (product % total) / total
    expected = (product / total).sum(axis=0)
    variance = (fraction * (1 - fraction)).sum(axis=0)
    deviation = counts.sum(axis=0) - expected
    positive = variance > 0
    assert np.all(deviation[~positive] == 0)  # no fractional part: the count is exact
    return np.abs(deviation[positive]) / np.sqrt(variance[positive])


def _threshold(cells: int) -> float:
    return float(stats.norm.isf(ALPHA / (2 * cells)))


@pytest.mark.slow
@pytest.mark.parametrize("case", ["mixed", "skewed"])
def test_rounding_is_unbiased(case):
    sizes, weights = _rounding_case(case)
    counts = rounded_counts(sizes, weights, np.random.default_rng(22))
    assert (counts.sum(axis=1) == sizes).all()
    z = _rounding_z(counts, sizes, weights)
    assert z.max() < _threshold(z.size), z


class _BiasedStart:
    """A random source whose systematic-sampling start comes from the first 90% of its range."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def integers(self, low: int, high: np.ndarray) -> np.ndarray:
        return self._rng.integers(low, low + (high - low) * 9 // 10)


def _successive(sizes: np.ndarray, weights: np.ndarray, seed: int) -> np.ndarray:
    """Floors, then the cells owed a ceiling drawn without replacement in proportion to the
    fractional parts (one group at a time): the inclusion probabilities are not the parts."""
    rng = np.random.default_rng(seed)
    total = weights.sum(axis=1, keepdims=True)
    product = sizes[:, None] * weights
    counts = product // total
    fraction = (product % total) / total
    for g in range(len(sizes)):
        owed = int(sizes[g] - counts[g].sum())
        if owed:
            p = fraction[g] / fraction[g].sum()
            counts[g, rng.choice(len(p), owed, replace=False, p=p)] += 1
    return counts


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variant", "case"), [("biased start", "mixed"), ("successive sampling", "skewed")]
)
def test_power_a_biased_rounding_is_rejected(variant, case):
    # successive sampling runs one group at a time: 20,000 groups (its bias is 15 sigma)
    sizes, weights = _rounding_case(case, GROUPS if variant == "biased start" else 20_000)
    if variant == "biased start":
        counts = rounded_counts(sizes, weights, _BiasedStart(23))  # type: ignore[arg-type]
    else:
        counts = _successive(sizes, weights, 23)
    assert (counts.sum(axis=1) == sizes).all()  # the totals alone do not reveal the bias
    z = _rounding_z(counts, sizes, weights)
    assert z.max() > _threshold(z.size), z


# --- whole records: unbiased on every marginal, inside the cliques or not ---

REPEATS, RECORDS = 3_000, 60
MARGINALS = [(0, 1, 2), (2, 3), (0, 3), (1, 4), (0, 4)]


def _mean_counts(model: GraphicalModel, seed: int) -> dict[tuple[int, ...], np.ndarray]:
    rng = np.random.default_rng(seed)
    draws: dict[tuple[int, ...], list[np.ndarray]] = {m: [] for m in MARGINALS}
    for _ in range(REPEATS):
        codes = model.sample(RECORDS, rng, method="rounded")
        for m in MARGINALS:
            draws[m].append(_counts(codes, m).reshape(-1))
    return {m: np.array(v) for m, v in draws.items()}


def _record_z(draws: dict[tuple[int, ...], np.ndarray], model: GraphicalModel) -> np.ndarray:
    out = []
    for m, counts in draws.items():
        expected = RECORDS * model.probability(m).reshape(-1)
        spread = counts.std(axis=0, ddof=1) / np.sqrt(REPEATS)
        deviation = counts.mean(axis=0) - expected
        varied = spread > 0
        out.append(np.abs(deviation[varied]) / spread[varied])
    return np.concatenate(out)


@pytest.mark.slow
def test_records_are_unbiased_on_every_marginal():
    model = _model()
    z = _record_z(_mean_counts(model, 31), model)
    assert z.max() < _threshold(z.size), z


@pytest.mark.slow
def test_power_records_against_a_cell_30_percent_off_are_rejected():
    potentials = _potentials(11)
    model = _model(potentials)
    draws = _mean_counts(model, 32)
    shifted = {c: v.copy() for c, v in potentials.items()}
    shifted[(2, 3)][1, 0] += np.log(1.3)
    z = _record_z(draws, _model(shifted))
    assert z.max() > _threshold(z.size)


# --- the i.i.d. path and the method argument ---

#: ``_model().sample(8, np.random.default_rng(5))`` on main at commit 6969075 (before the
#: rounded method): the default i.i.d. records must not change.
MAIN_IID = [
    [1, 1, 2, 0, 0],
    [1, 1, 2, 1, 0],
    [0, 1, 3, 1, 1],
    [0, 1, 1, 0, 0],
    [0, 0, 1, 1, 1],
    [0, 1, 2, 1, 0],
    [0, 1, 2, 1, 2],
    [0, 0, 1, 1, 0],
]


def test_iid_records_are_main_s_for_the_same_seed():
    model = _model()
    assert model.sample(8, np.random.default_rng(5)).tolist() == MAIN_IID
    assert model.sample(8, np.random.default_rng(5), method="iid").tolist() == MAIN_IID
    default = model.sample(500, np.random.default_rng(6))
    np.testing.assert_array_equal(default, model.sample(500, np.random.default_rng(6), "iid"))


def test_zero_records_and_reproducible_with_a_seed():
    model = _model()
    assert model.sample(0, np.random.default_rng(1), method="rounded").shape == (0, len(SIZES))
    first = model.sample(300, np.random.default_rng(9), method="rounded")
    np.testing.assert_array_equal(first, model.sample(300, np.random.default_rng(9), "rounded"))


@pytest.mark.parametrize("method", ["round", "IID", "", None, 1])
def test_an_unknown_method_is_refused_naming_the_choices(method):
    message = rf"method \({method!r}\) must be one of 'iid', 'rounded'"
    with pytest.raises(SynthError, match=message):
        _model().sample(5, np.random.default_rng(0), method=method)  # type: ignore[arg-type]
    with pytest.raises(SynthError, match=r"--sampling \('x'\) must be one of 'iid', 'rounded'"):
        check_sampling("x", "--sampling")
