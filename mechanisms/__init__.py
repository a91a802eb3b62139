"""Exact samplers, noise mechanisms, selection mechanisms and privacy accounting.

Everything a release needs to turn confidential counts into noisy measurements and to account
for what that cost: random sources (:mod:`mechanisms.rng`), exact samplers
(:mod:`mechanisms.samplers`), integer noise mechanisms (:mod:`mechanisms.discrete`), float
compatibility mechanisms (:mod:`mechanisms.continuous`), private selection
(:mod:`mechanisms.selection`), randomized response (:mod:`mechanisms.randomized_response`),
budgets and the ledger (:mod:`mechanisms.accounting`, :mod:`mechanisms.ledger`).
"""

from mechanisms.accounting import (
    ZCDP,
    Budget,
    PureDP,
    float_up,
    make_budget,
    parallel,
    pure_to_zcdp,
    scale,
    sequential,
    split,
    zcdp_to_approx_dp,
    zcdp_to_approx_dp_simple,
)
from mechanisms.continuous import gaussian_mechanism, laplace_mechanism
from mechanisms.discrete import (
    MECHANISMS,
    NEIGHBOURING,
    DiscreteGaussianMechanism,
    DiscreteLaplaceMechanism,
    NoiseMechanism,
    as_integer_array,
    discrete_gaussian_variance,
    geometric_mechanism,
    make_mechanism,
    sensitivity,
)
from mechanisms.errors import BudgetError, MechanismError
from mechanisms.exact import Exact, as_fraction
from mechanisms.ledger import Disclosure, Invariant, Ledger, LedgerEntry
from mechanisms.randomized_response import (
    estimate_frequencies,
    randomized_response,
    rr_probabilities,
    transition_matrix,
)
from mechanisms.rng import child_rng, make_rng, new_release_key
from mechanisms.samplers import (
    discrete_gaussian_pmf,
    discrete_laplace_pmf,
    sample_bernoulli_exp,
    sample_discrete_gaussian,
    sample_discrete_laplace,
)
from mechanisms.selection import (
    exponential_mechanism,
    exponential_probabilities,
    permute_and_flip,
    permute_and_flip_probabilities,
    report_noisy_max,
    selection_factor,
)

__all__ = [
    # errors and exact conversion
    "MechanismError",
    "BudgetError",
    "Exact",
    "as_fraction",
    # random sources
    "make_rng",
    "new_release_key",
    "child_rng",
    # exact samplers
    "sample_bernoulli_exp",
    "sample_discrete_laplace",
    "sample_discrete_gaussian",
    "discrete_laplace_pmf",
    "discrete_gaussian_pmf",
    # accounting
    "Budget",
    "PureDP",
    "ZCDP",
    "make_budget",
    "parallel",
    "sequential",
    "pure_to_zcdp",
    "split",
    "scale",
    "float_up",
    "zcdp_to_approx_dp",
    "zcdp_to_approx_dp_simple",
    "Ledger",
    "LedgerEntry",
    "Invariant",
    "Disclosure",
    # integer noise mechanisms
    "NoiseMechanism",
    "DiscreteLaplaceMechanism",
    "DiscreteGaussianMechanism",
    "discrete_gaussian_variance",
    "geometric_mechanism",
    "make_mechanism",
    "MECHANISMS",
    "NEIGHBOURING",
    "sensitivity",
    "as_integer_array",
    # float compatibility mechanisms
    "laplace_mechanism",
    "gaussian_mechanism",
    # selection
    "selection_factor",
    "exponential_probabilities",
    "exponential_mechanism",
    "permute_and_flip",
    "permute_and_flip_probabilities",
    "report_noisy_max",
    # randomized response
    "randomized_response",
    "estimate_frequencies",
    "rr_probabilities",
    "transition_matrix",
]
