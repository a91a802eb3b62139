"""Measure the residual components of a marginal with exact discrete Gaussian noise.

A marginal on attributes r splits into orthogonal components, one per subset S of r
(ResidualPlanner: Xiao, He, Zhang, Kifer, "An Optimal and Scalable Matrix Mechanism for Noisy
Marginals under Convex Loss Functions", NeurIPS 2023): component S is the S-marginal's part
orthogonal to every marginal on a proper subset of S (the Kronecker product of a contrast basis,
rows orthogonal to the all-ones vector, for each attribute of S). Measuring only the components
not yet known costs only their share of the marginal's sensitivity.

The queries are integers, so the noise stays the exact discrete Gaussian on integer answers:
each attribute's contrast basis (:func:`contrast_basis`) has orthogonal integer rows, and
answer k of component S (the Kronecker row ``q_k``) gets noise of sigma^2 ``tau^2 ||q_k||^2``:
in the orthonormal basis every coordinate then has noise tau^2. The zCDP cost is, exactly,

    rho = max over records x of sum_k q_k[x]^2 / (2 tau^2 ||q_k||^2)
        = prod over a in S of (max_x sum_k F_a[k, x]^2 / ||F_a[k]||^2) / (2 tau^2)

(one record adds e_x to the S-marginal; the discrete Gaussians are independent, so their
Renyi divergences add, Canonne, Kamath, Steinke 2020; the sum over Kronecker rows factorises
by attribute). Each factor is (n_a - 1) / n_a for an orthogonal basis of the contrasts,
computed here in Fractions from the integer matrix rather than assumed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from mechanisms.accounting import ZCDP
from mechanisms.discrete import DiscreteGaussianMechanism
from mechanisms.ledger import Ledger
from synth._domains import SynthError
from synth._estimate import histogram
from synth.graphical.linear import LinearMeasurement, kronecker_apply

__all__ = [
    "basis",
    "component_rows",
    "component_share",
    "contrast_basis",
    "measure_residual",
    "residual_rho",
]


def contrast_basis(n: int) -> np.ndarray:
    """An ``(n - 1) x n`` integer matrix whose rows are orthogonal and sum to 0.

    Built on a balanced binary split of the values: each split of a block A | B gives the row
    ``|B| on A, -|A| on B``. Rows of nested blocks are orthogonal (the inner row sums to 0 where
    the outer is constant), rows of disjoint blocks too. Why not Helmert's basis: its n - 1 row
    norms are all different, and each distinct norm is one call of the noise sampler; a
    balanced split has few distinct norms.

    >>> contrast_basis(3).tolist()
    [[1, 1, -2], [1, -1, 0]]
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise SynthError(f"n ({n!r}) must be an integer >= 1")
    rows: list[np.ndarray] = []
    blocks = [(0, int(n))]
    while blocks:
        lo, hi = blocks.pop(0)
        if hi - lo < 2:
            continue
        mid = (lo + hi + 1) // 2
        row = np.zeros(int(n), dtype=np.int64)
        row[lo:mid] = hi - mid
        row[mid:hi] = -(mid - lo)
        rows.append(row)
        blocks += [(lo, mid), (mid, hi)]
    return np.array(rows, dtype=np.int64).reshape(len(rows), int(n))


def _column_factor(factor: np.ndarray) -> Fraction:
    """max over columns x of sum_k F[k, x]^2 / ||F[k]||^2, exact."""
    norms = [int(v) for v in (factor.astype(object) ** 2).sum(axis=1)]
    best = Fraction(0)
    for x in range(factor.shape[1]):
        total = sum(
            (Fraction(int(factor[k, x]) ** 2, norms[k]) for k in range(factor.shape[0])),
            Fraction(0),
        )
        best = max(best, total)
    return best


#: The noise sampler builds a table for each new sigma^2 from about 1e5 to 1e8 (tens of
#: milliseconds each, and a residual has a few distinct row norms); above 1e8 it needs none.
_FAST_SIGMA2 = 10**8


def _speed_scale(sigma2: Fraction) -> int:
    """The smallest integer m >= 1 with sigma2 m^2 >= :data:`_FAST_SIGMA2` (1 when above)."""
    if sigma2 >= _FAST_SIGMA2:
        return 1
    m = math.isqrt(math.ceil(_FAST_SIGMA2 / sigma2))
    while sigma2 * m * m < _FAST_SIGMA2:
        m += 1
    return max(m, 1)


def residual_rho(factors: Sequence[np.ndarray], tau2: Fraction) -> Fraction:
    """The exact zCDP cost of answering the Kronecker rows q_k of ``factors`` with discrete
    Gaussian noise of sigma^2 ``tau2 ||q_k||^2`` each, under add/remove neighbours (module
    docstring): ``prod_a max_x sum_k F_a[k, x]^2 / ||F_a[k]||^2 / (2 tau2)``."""
    return math.prod((_column_factor(f) for f in factors), start=Fraction(1)) / (2 * tau2)


def component_share(
    component: Sequence[int], marginal: Sequence[int], sizes: Sequence[int]
) -> Fraction:
    """Component S's share of the marginal r's squared sensitivity (they sum to 1 over S):
    ``prod_{a in S} (n_a - 1) / n_a * prod_{a in r - S} 1 / n_a``. Measured within r at
    per-cell noise sigma^2, component S has noise ``sigma^2 prod_{a in r - S} n_a`` per
    orthonormal coordinate of the S-marginal, and costs this share of ``1 / (2 sigma^2)``."""
    share = Fraction(1)
    for a in marginal:
        n = int(sizes[a])
        share *= Fraction(n - 1, n) if a in component else Fraction(1, n)
    return share


def basis(n: int) -> np.ndarray:
    """The ``n x n`` integer basis of one attribute: the all-ones row, then
    :func:`contrast_basis` (orthogonal rows)."""
    return np.vstack([np.ones((1, n), dtype=np.int64), contrast_basis(n)])


def component_rows(
    component: Sequence[int], attrs: Sequence[int], sizes: Sequence[int]
) -> tuple[slice, ...]:
    """The rows of ``kron(basis(n_a) for a in attrs)`` that span ``component`` (a subset of
    ``attrs``): the contrast rows on its attributes, the all-ones row on the others."""
    return tuple(slice(1, int(sizes[a])) if a in component else slice(0, 1) for a in attrs)


def measure_residual(
    codes: np.ndarray,
    sizes: Sequence[int],
    attrs: Sequence[int],
    components: Sequence[Sequence[int]],
    sigma2: Fraction | Sequence[Fraction],
    *,
    name: str,
    ledger: Ledger,
    rng: np.random.Generator | None,
    note: str = "",
) -> tuple[LinearMeasurement, Fraction]:
    """Answer the residual ``components`` (distinct subsets) of the marginal on ``attrs``
    (sorted) with noise sigma^2 per orthonormal coordinate of that marginal (one for all, or
    one per component; module docstring); record their exact cost in ``ledger`` as one entry.

    The queries are the rows of ``kron(basis(n_a))`` spanning the components; the other rows
    are not measured (variance infinite). Component S then costs
    ``prod_{a in S} (n_a - 1) / n_a * prod_{a not in S} 1 / n_a / (2 sigma^2)``
    (:func:`component_share`), computed here from the integer matrices.

    The noise of a small sigma^2 is drawn for the answers times an integer m, at sigma^2 m^2,
    and divided by m (:func:`_speed_scale`): the same privacy loss (CKS20: the Renyi
    divergence of discrete Gaussians shifted by m d at sigma^2 m^2 is that of a shift d at
    sigma^2), without the sampler's table for each new scale.

    Returns:
        The measurement (the integer bases, the noisy answers on a 1 / m grid, each answer's
        variance, infinite where not measured) and its zCDP cost rho.
    """
    attrs = tuple(int(a) for a in attrs)
    if not attrs or list(attrs) != sorted(set(attrs)):
        raise SynthError(f"attrs ({attrs!r}) must be sorted distinct attribute positions")
    keys = [frozenset(int(a) for a in c) for c in components]
    if not keys or len(set(keys)) != len(keys) or any(not k <= set(attrs) for k in keys):
        raise SynthError(f"components ({components!r}) must be distinct subsets of {attrs}")
    scales = (
        [Fraction(sigma2)] * len(keys)
        if isinstance(sigma2, (int, Fraction))
        else [Fraction(v) for v in sigma2]
    )
    if len(scales) != len(keys) or any(v <= 0 for v in scales):
        raise SynthError(f"sigma2 ({sigma2}) must be > 0, one or one per component")
    factors = tuple(basis(int(sizes[a])) for a in attrs)
    row_norms = np.ones((), dtype=np.int64)
    for f in factors:
        row_norms = np.multiply.outer(row_norms, (f * f).sum(axis=1))
    true = kronecker_apply(factors, histogram(codes, sizes, attrs))
    noisy = np.zeros(true.shape)
    variance = np.full(true.shape, np.inf)
    rho = Fraction(0)
    for key, scale2 in zip(keys, scales, strict=True):
        block = component_rows(sorted(key), attrs, sizes)
        if any(r.stop <= r.start for r in block):
            raise SynthError(f"component {sorted(key)} includes a column of one value")
        rho += residual_rho([f[r] for f, r in zip(factors, block, strict=True)], scale2)
        measured = np.zeros(row_norms.shape, dtype=bool)
        measured[block] = True
        for norm in np.unique(row_norms[measured]):  # one sampler call per distinct row norm
            _draw(true, noisy, variance, measured & (row_norms == norm), scale2 * int(norm), rng)
    ledger.record(
        name,
        0,
        DiscreteGaussianMechanism.name,
        ZCDP(rho),
        sensitivity=2 * scales[0] * rho,
        note=(f"{note}; " if note else "")
        + "residual components "
        + ", ".join(
            "{" + ", ".join(str(a) for a in sorted(k)) + "}" + f" at sigma^2 {float(v):.6g}"
            for k, v in zip(keys, scales, strict=True)
        )
        + ": answer k has sigma^2 x ||q_k||^2; the sensitivity is that of the queries "
        "whitened by the first component's sigma^2",
    )
    return LinearMeasurement(attrs, factors, noisy, variance), rho


def _draw(
    true: np.ndarray,
    noisy: np.ndarray,
    variance: np.ndarray,
    rows: np.ndarray,
    row_sigma2: Fraction,
    rng: np.random.Generator | None,
) -> None:
    """Fill ``noisy`` and ``variance`` at ``rows`` with discrete Gaussian answers of sigma^2
    ``row_sigma2`` (drawn scaled, :func:`_speed_scale`)."""
    scale = _speed_scale(row_sigma2)
    # answers scale * q x with noise sigma^2 scale^2: the same privacy loss (the shift and the
    # noise's scale both grow by ``scale``), then divided by ``scale``
    noise = DiscreteGaussianMechanism(1 / (2 * row_sigma2 * scale * scale))
    noisy[rows] = noise.release(scale * true[rows], rng) / scale
    variance[rows] = noise.variance / (scale * scale)
