"""A graphical-model estimator for noisy marginals: the flat tree for any domain size.

Given noisy marginal measurements (:class:`synth._estimate.Measurement`: attribute positions,
a noisy table, its noise variance), :func:`fit_model` fits a Markov random field over the
measured cliques that minimises the inverse-variance weighted squared error to them over the
set of consistent distributions (McKenna, Sheldon, Miklau, ICML 2019: mirror descent whose
gradient comes from belief propagation on a junction tree). The fitted
:class:`GraphicalModel` answers any marginal, its total, and synthesises records (i.i.d.
draws, or counts rounded clique by clique), without ever holding the joint table.

One module per concept, so a reader finds each in one file:

- :mod:`.factor`: tables over attribute sets (expand, project, log-sum-exp).
- :mod:`.junction_tree`: triangulation, maximal cliques, the junction tree, the size cap.
- :mod:`.inference`: belief propagation (calibration) and marginals outside the cliques.
- :mod:`.estimation`: the fit (mirror descent with a line search), warm-started.
- :mod:`.model`: the fitted model, its answers.
- :mod:`.sampling`: forward synthesis along the junction tree (i.i.d. or rounded).
"""

from synth.graphical.estimation import estimate_total, fit_model
from synth.graphical.junction_tree import (
    JunctionTree,
    ModelSizeError,
    build_junction_tree,
    largest_clique_cells,
    too_large,
)
from synth.graphical.model import GraphicalModel

__all__ = [
    "GraphicalModel",
    "JunctionTree",
    "ModelSizeError",
    "build_junction_tree",
    "estimate_total",
    "fit_model",
    "largest_clique_cells",
    "too_large",
]
