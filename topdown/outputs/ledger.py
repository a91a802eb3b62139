"""ledger.json: the privacy ledger's entries with the summary a reader wants beside them.

One writer for every release folder (the unstreamed product folder, ``topdown.streaming.run``'s
folder with or without the product layer) and for ``topdown check``, which recomputes the document
from the ledger's entries and the release and compares.
"""

from __future__ import annotations

from typing import Any, Protocol

from mechanisms.ledger import Ledger, NoiseSource
from topdown.estimation.root_total import RootTotal
from topdown.strategy import Strategy

__all__ = [
    "DELTA",
    "METRICS_DISCLOSURE",
    "TRUTH_FILES",
    "ledger_document",
    "ledger_summary",
    "not_publishable",
]

#: the delta of the (epsilon, delta) equivalent the summary states
DELTA = 1e-10

#: The disclosure a folder holding accuracy figures against the truth records.
METRICS_DISCLOSURE = "evaluation metrics"

#: The files a folder with truth metrics holds that are computed from the confidential data
#: (the report shows the same figures): not differentially private, not publishable as is.
TRUTH_FILES = ("metrics.csv", "bias_by_size.csv", "headline.csv", "report.html")


def not_publishable(ledger: Ledger) -> list[str]:
    """The folder's files that hold non-private figures, by the ledger's disclosures."""
    names = [d.name for d in ledger.disclosures]
    return list(TRUTH_FILES) if METRICS_DISCLOSURE in names else []


class Release(Protocol):
    """What the ledger document reads of a release (``topdown.release.Release`` has it, and so
    has a streamed release's top): a protocol, so this layer need not import the release."""

    @property
    def strategy(self) -> Strategy: ...
    @property
    def ledger(self) -> Ledger: ...
    @property
    def noise(self) -> NoiseSource | None: ...
    @property
    def estimator(self) -> str: ...
    @property
    def root_total(self) -> RootTotal | None: ...


def ledger_document(rel: Release) -> dict[str, Any]:
    """ledger.json's content: the ledger (``Ledger.to_dict``) and its ``summary``."""
    return dict(rel.ledger.to_dict(), summary=ledger_summary(rel))


def ledger_summary(rel: Release) -> dict[str, Any]:
    """What a reader wants beside the entries (the total itself is in ``Ledger.to_dict``).

    A seeded release states no epsilon: none holds. A folder holding figures computed from
    the confidential data (truth metrics) is not private as a whole: ``private`` is false and
    ``not_publishable`` names those files (the epsilon still holds for the other files).
    """
    private = rel.ledger.private
    truth = not_publishable(rel.ledger)
    return {
        "mechanism": rel.strategy.mechanism,
        "budget_kind": rel.strategy.budget_name,
        "strategy_total": str(rel.strategy.total()),
        "noise": rel.noise.describe() if rel.noise is not None else "not recorded",
        "private": private and not truth,
        **({"not_publishable": truth} if truth else {}),
        "delta": DELTA,
        "epsilon_at_delta": rel.ledger.epsilon_delta(DELTA) if private else None,
        "by_level": {str(k): str(v.value) for k, v in rel.ledger.by_level().items()},
        "estimation": {
            "estimator": rel.estimator,
            "note": "post-processing of the noisy measurements and their public variances only: "
            "no privacy cost"
            + (
                "; the BLUE pass pools every measurement of the tree and its standard errors "
                "follow from the noise variances"
                if rel.estimator == "blue"
                else ""
            ),
            # recomputed by topdown check from the published measurements (load_release)
            **(
                {"root_total": rel.root_total.to_dict()}
                if rel.estimator == "blue" and rel.root_total is not None
                else {}
            ),
        },
    }
