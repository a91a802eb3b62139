"""Compile the sampler kernels ahead of the first real draw (tests, benchmarks, workers).

numba compiles a kernel on its first call and keeps the machine code in an on-disk cache
(``cache=True``: ``__pycache__`` beside :mod:`mechanisms._kernels`), so later processes only
load it. :func:`warm_up` makes that first call on a few draws of each sampler, so the compile
(seconds, once per installation) or the cache load (milliseconds, once per process) is not
counted in a timed section.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

__all__ = ["warm_up"]


def warm_up() -> None:
    """Call each compiled kernel once on a throwaway PCG64 stream (no secret randomness).

    Also builds the exact tables of scale 7/3 (milliseconds); other scales build theirs on
    first use.
    """
    from mechanisms.samplers import (
        sample_bernoulli_exp,
        sample_discrete_gaussian,
        sample_discrete_laplace,
    )

    rng = np.random.Generator(np.random.PCG64(0))
    sample_bernoulli_exp(Fraction(1, 3), 4, rng)
    # the table kernels (small scales) and the CKS20 kernels (scales past the tables' cap)
    for scale in (Fraction(7, 3), Fraction(2**20)):
        sample_discrete_laplace(scale, 4, rng)
        sample_discrete_gaussian(scale * scale, 4, rng)
    # the CKS20 Gaussian kernel itself: at the variance 2**40 above 2 a b t^2 passes 2**62 and
    # the draw takes the Python-integer path, and small variances take the tables, so without
    # this draw (sigma 3000: past the tables, within int64) the kernel compiled inside the
    # first test or timed section that drew at such a scale
    sample_discrete_gaussian(Fraction(3000**2), 4, rng)
