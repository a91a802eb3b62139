"""The inputs of the estimation passes: one query's values and per-node variances per level.

``QueryEstimate`` stands in for a raw ``QueryMeasurement`` wherever the passes read one, so the
passes (``topdown.estimation.estimate``) take either the raw measurements (``as_inputs``) or an
estimator's output (the BLUE's, ``topdown.blue.estimate.blue_inputs``) without knowing which. Kept
apart from the BLUE because both the passes and every estimator read these types, and ``precision``
is the one conversion from a variance to a weight that all of them share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topdown.measurement.measure import ByLevel, Measurements
from topdown.strategy import Query

__all__ = ["QueryEstimate", "EstimatorInputs", "as_inputs", "precision"]

_TINY_VARIANCE = 1e-200  # a variance of 0 (an exact answer) computes as this one


@dataclass(frozen=True)
class QueryEstimate:
    """An input of the estimation passes: one query's values for every node of one level.

    Stands in for a ``QueryMeasurement`` (the passes read ``query``, ``noisy`` and
    ``variance``): a noisy vector, its query and its variance, like private-pgm's
    ``LinearMeasurement``. ``variance`` is per node (``inf`` = no information, weight 0).

    Attributes:
        level: level number (0 = root).
        query: the query.
        noisy: the values fitted by the passes (nodes, answers): raw integer answers, or floats.
        variance: float array (nodes,): the variance of every answer of each node.
    """

    level: int
    query: Query
    noisy: np.ndarray
    variance: np.ndarray

    def __post_init__(self) -> None:
        values = np.asarray(self.noisy)
        if values.dtype.kind not in "iuf":  # raw integer answers stay integers (no copy)
            values = values.astype(float)
        if values.ndim != 2:
            raise ValueError(f"noisy (shape {values.shape}) must be 2-d: (nodes, answers)")
        var = np.broadcast_to(np.asarray(self.variance, dtype=float), (values.shape[0],)).copy()
        if np.isnan(var).any() or (var < 0).any():
            raise ValueError(f"variance ({var[:5]}...) must be >= 0 (inf = no information)")
        object.__setattr__(self, "noisy", values)
        object.__setattr__(self, "variance", var)

    @property
    def name(self) -> str:
        return self.query.name


@dataclass(frozen=True)
class EstimatorInputs(ByLevel[QueryEstimate]):
    """The inputs of the estimation passes, level by level (root first)."""

    levels: tuple[tuple[QueryEstimate, ...], ...]


def as_inputs(measurements: Measurements | EstimatorInputs) -> EstimatorInputs:
    """Raw measurements as estimator inputs with per-node variances (values unchanged: raw
    integer answers stay integers)."""
    if isinstance(measurements, EstimatorInputs):
        return measurements
    return EstimatorInputs(
        tuple(
            tuple(QueryEstimate(m.level, m.query, m.noisy, np.asarray(m.variance)) for m in lv)
            for lv in measurements.levels
        )
    )


def precision(variance: np.ndarray | float) -> np.ndarray:
    """Inverse variances, the one conversion every estimator uses: ``inf`` (no information)
    gives 0, and 0 (an exact answer) a huge but finite precision, so sums and ratios of
    precisions stay finite and an exact answer outweighs any noisy one."""
    v = np.maximum(np.asarray(variance, dtype=float), _TINY_VARIANCE)
    return np.where(np.isinf(v), 0.0, 1.0 / v)
