"""Simpler generators run as flat, one-level trees of the engine's framework.

Each generator measures noisy marginals of the root with the project's exact mechanisms,
makes them non-negative, integer and mutually consistent with the solvers' estimator
(:mod:`synth._estimate`), and samples records or releases tables; each keeps a
:class:`mechanisms.Ledger`. The design note behind them is ``shared/DESIGN.md`` (beside the
repository, not shipped with the package), section "The simpler generators as flat trees".

- :class:`ClassConditional` and :func:`generate`: the DP naive-Bayes synthesizer.
- :class:`NoisyCrosstab`: a noisy k-way crosstab with its error table.
- :class:`PrivBayes`: Bayesian-network synthesizer (Zhang et al.).
- :class:`DP2Pub`: local-DP publication with invariant post-randomization.
- :class:`Adaptive`: workload-adaptive (AIM-style) synthesizer on the graphical-model
  estimator of :mod:`synth.graphical` (a Markov random field over the measured marginals).
- :mod:`synth.metrics` (TVD, marginal TVD, TSTR) and :mod:`synth.fairness`.
"""

from synth._domains import SynthError
from synth.adaptive import Adaptive
from synth.class_conditional import ClassConditional, generate
from synth.crosstab import NoisyCrosstab, crosstab_errors
from synth.dp2pub import DP2Pub
from synth.privbayes import PrivBayes

__all__ = [
    "Adaptive",
    "ClassConditional",
    "DP2Pub",
    "NoisyCrosstab",
    "PrivBayes",
    "SynthError",
    "crosstab_errors",
    "generate",
]
