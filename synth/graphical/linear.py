"""A measurement of a linear map of a clique's marginal: y = Q mu_r + noise, Q a Kronecker product.

Why: a marginal measurement re-measures what earlier ones already fixed (its total, its 1-way
and 2-way sub-marginals). Measuring only the new part of a marginal (its residual components,
:mod:`synth._residual`) needs the estimator to take a measurement of ``Q mu_r`` instead of
``mu_r``. Q is a Kronecker product of one matrix per attribute of r (rows x that attribute's
values), so it is applied one axis at a time and never built: a residual query of 10,000
cells would be a 10,000 x 10,000 matrix.

The fit (:func:`synth.graphical.fit_model`) adds ``0.5 sum_k (Q mu - y)_k^2 / var_k`` to its
loss, with gradient ``Q' ((Q mu - y) / var)`` on the clique's marginal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from synth._domains import SynthError

__all__ = ["LinearMeasurement", "kronecker_apply"]


def kronecker_apply(factors: Sequence[np.ndarray], table: np.ndarray) -> np.ndarray:
    """``(F_1 x ... x F_m) table``: each factor applied along its own axis of ``table``.

    One batched matrix product per axis (the axes before it as the batch), which costs a few
    microseconds of overhead, not ``tensordot``'s tens: the fit applies it every iteration.

    >>> kronecker_apply([np.array([[1, 1]]), np.eye(2)], np.array([[1, 2], [3, 4]]))
    array([[4., 6.]])
    """
    out = np.asarray(table)
    for axis, factor in enumerate(factors):
        shape = out.shape
        front, back = math.prod(shape[:axis]), math.prod(shape[axis + 1 :])
        out = np.matmul(factor, out.reshape(front, shape[axis], back)).reshape(
            (*shape[:axis], factor.shape[0], *shape[axis + 1 :])
        )
    return out


@dataclass(frozen=True)
class LinearMeasurement:
    """Noisy answers ``noisy = (F_1 x ... x F_m) mu_attrs + noise``, noise variance per answer.

    Attributes:
        attrs: the clique, as sorted distinct attribute positions.
        factors: one matrix per attribute of ``attrs`` (its rows x the attribute's values).
        noisy: the answers, shape ``(rows of F_1, ..., rows of F_m)``.
        variance: each answer's noise variance (> 0), the shape of ``noisy``; infinite for
            an answer not measured (weight 0: a subset of the rows is measured).
    """

    attrs: tuple[int, ...]
    factors: tuple[np.ndarray, ...]
    noisy: np.ndarray
    variance: np.ndarray
    precision: np.ndarray = field(init=False, repr=False, compare=False)
    _dense: tuple[np.ndarray, ...] = field(init=False, repr=False, compare=False)
    _dense_t: tuple[np.ndarray, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        attrs = tuple(int(a) for a in self.attrs)
        if not attrs or list(attrs) != sorted(set(attrs)) or attrs[0] < 0:
            raise SynthError(f"attrs ({self.attrs!r}) must be sorted distinct positions >= 0")
        if len(self.factors) != len(attrs) or any(np.ndim(f) != 2 for f in self.factors):
            raise SynthError(
                f"factors ({len(self.factors)}) must be one matrix per attribute of {attrs}"
            )
        rows = tuple(int(np.shape(f)[0]) for f in self.factors)
        if np.shape(self.noisy) != rows:
            raise SynthError(
                f"noisy has shape {np.shape(self.noisy)}; the factors' rows give {rows}"
            )
        variance = np.asarray(self.variance, dtype=float)
        if (
            variance.shape != rows
            or not np.all(variance > 0)
            or np.isnan(variance).any()
            or not np.isfinite(variance).any()
        ):
            raise SynthError(
                f"variance (shape {variance.shape}) must be > 0 (infinite: not measured, not "
                f"all), shape {rows}"
            )
        if not np.all(np.isfinite(np.asarray(self.noisy, dtype=float))):
            raise SynthError("noisy must be finite (0 where not measured)")
        object.__setattr__(self, "attrs", attrs)
        object.__setattr__(self, "variance", variance)
        object.__setattr__(self, "precision", 1.0 / variance)
        dense = tuple(np.asarray(f, dtype=float) for f in self.factors)
        object.__setattr__(self, "_dense", dense)
        object.__setattr__(self, "_dense_t", tuple(np.ascontiguousarray(f.T) for f in dense))

    def check(self, sizes: Sequence[int]) -> None:
        """Refuse a measurement whose factors do not match the attributes' domain sizes."""
        for a, factor in zip(self.attrs, self.factors, strict=True):
            if a >= len(sizes) or factor.shape[1] != sizes[a]:
                raise SynthError(
                    f"measurement on {self.attrs}: attribute {a}'s factor has "
                    f"{factor.shape[1]} columns; the domain gives "
                    f"{sizes[a] if a < len(sizes) else 'no such attribute'}"
                )

    def query(self, marginal: np.ndarray) -> np.ndarray:
        """``Q marginal`` (the noise-free answers for a table over ``attrs``)."""
        return kronecker_apply(self._dense, marginal)

    def adjoint(self, values: np.ndarray) -> np.ndarray:
        """``Q' values``: a table over ``attrs``."""
        return kronecker_apply(self._dense_t, values)

    def curvature(self) -> float:
        """An upper bound on the largest eigenvalue of ``Q' diag(1 / var) Q`` (the loss's
        curvature on the clique), from the factors' spectral norms: the fit's first step."""
        norms = [float(np.linalg.norm(f, 2)) ** 2 for f in self._dense]
        return float(np.prod(norms)) * float(np.max(self.precision))
