"""Continuous (floating-point) Laplace and Gaussian mechanisms, for compatibility only.

These add numpy's float Laplace or normal noise to real-valued answers.
They are NOT floating-point safe: the set of doubles a float sampler can output depends on the
true value, so the low-order bits of a release can reveal it and void the guarantee (Mironov, "On
significance of the least significant bits for differential privacy", CCS 2012). They exist
for comparison with published code and quick experiments. Releases use the exact integer
mechanisms of :mod:`mechanisms.discrete` (``DiscreteLaplaceMechanism``,
``DiscreteGaussianMechanism``).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from mechanisms.errors import BudgetError, MechanismError
from mechanisms.exact import as_fraction
from mechanisms.rng import make_rng

__all__ = ["laplace_mechanism", "gaussian_mechanism"]

logger = logging.getLogger(__name__)


def _as_float_array(values: Any) -> np.ndarray:
    """Values as a finite float array, refusing NaN, infinities and non-numbers."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise MechanismError(f"values ({values!r:.80}) must be numeric") from None
    if not np.all(np.isfinite(array)):
        bad = float(array[~np.isfinite(array)].flat[0])
        raise MechanismError(f"values must be finite, got entry {bad!r}")
    return array


def laplace_mechanism(
    values: Any,
    epsilon: object,
    sensitivity: object = 1,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Add float Laplace noise of scale sensitivity / epsilon (epsilon-DP in exact arithmetic).

    NOT floating-point safe (Mironov 2012, least-significant-bits attack): use
    :class:`mechanisms.discrete.DiscreteLaplaceMechanism` for releases.

    Args:
        values: real-valued answers.
        epsilon: privacy parameter > 0.
        sensitivity: L1 sensitivity > 0.
        rng: random source; the secure default of :func:`mechanisms.rng.make_rng` if None.

    Returns:
        A float64 array of the shape of ``values``.
    """
    eps = as_fraction(epsilon, "epsilon", error=BudgetError)
    sens = as_fraction(sensitivity, "sensitivity")
    array = _as_float_array(values)
    generator = rng if rng is not None else make_rng()
    logger.debug("float Laplace mechanism (not floating-point safe), scale %s", sens / eps)
    return array + generator.laplace(0.0, float(sens / eps), size=array.shape)


def gaussian_mechanism(
    values: Any,
    rho: object = None,
    sigma: object = None,
    sensitivity: object = 1,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Add float normal noise: sigma = sensitivity / sqrt(2 rho) when ``rho`` is given
    (rho-zCDP in exact arithmetic, Bun & Steinke 2016), or the given ``sigma``.

    NOT floating-point safe (Mironov 2012, least-significant-bits attack): use
    :class:`mechanisms.discrete.DiscreteGaussianMechanism` for releases.

    Args:
        values: real-valued answers.
        rho: zCDP parameter > 0; exactly one of ``rho`` and ``sigma``.
        sigma: noise standard deviation > 0; exactly one of ``rho`` and ``sigma``.
        sensitivity: L2 sensitivity > 0 (used with ``rho``).
        rng: random source; the secure default of :func:`mechanisms.rng.make_rng` if None.

    Raises:
        MechanismError: both or neither of ``rho`` and ``sigma``, or bad values.
        BudgetError: a bad ``rho``.
    """
    if (rho is None) == (sigma is None):
        raise MechanismError(f"give exactly one of rho ({rho!r}) and sigma ({sigma!r})")
    sens = as_fraction(sensitivity, "sensitivity")
    if rho is not None:
        rho_f = as_fraction(rho, "rho", error=BudgetError)
        std = float(sens) / math.sqrt(2.0 * float(rho_f))
    else:
        std = float(as_fraction(sigma, "sigma"))
    array = _as_float_array(values)
    generator = rng if rng is not None else make_rng()
    logger.debug("float Gaussian mechanism (not floating-point safe), sigma %r", std)
    return array + generator.normal(0.0, std, size=array.shape)
