"""The privacy ledger: every measurement, invariant and disclosure of one release.

A release is only as private as its accounting is complete. The ledger records each noisy
measurement with its budget, each value published exactly outside differential privacy
(invariants such as state totals used by contextual constraints), and each non-private fact
(for example a domain inferred from the data). It serialises to JSON-friendly dicts with
budgets as exact ``"p/q"`` strings next to a rounded-up float for reading.

Composition rule used by :meth:`Ledger.total`: one entry stands for one query asked of every
node of one level. The nodes of a level hold disjoint sets of people, so they compose in
parallel and the entry costs its budget once whatever the number of nodes (``nodes`` is
informational). Different queries and different levels see the same people, so entries
compose sequentially. An entry whose sensitivity is 0 (the root's total under replace-one
neighbours: replacing one record never changes the number of records) has the same answer on
every pair of neighbours, so its output, noisy or not, says nothing about any one person: it is
charged nothing, and :meth:`Ledger.total` composes the charged entries only.
:meth:`Ledger.calibrated_total` composes every entry's budget, the one its noise was drawn with.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, SupportsIndex

from mechanisms.accounting import (
    ZCDP,
    Budget,
    PureDP,
    float_up,
    make_budget,
    sequential,
    zcdp_to_approx_dp,
)
from mechanisms.errors import BudgetError
from mechanisms.exact import as_fraction

__all__ = ["Ledger", "LedgerEntry", "Invariant", "Disclosure", "NoiseSource", "SEEDED_DISCLOSURE"]

logger = logging.getLogger(__name__)


def _check_name(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BudgetError(f"{name} ({value!r}) must be a non-empty string")
    return value


def _check_level(level: object) -> int:
    if isinstance(level, bool) or not isinstance(level, int) or level < 0:
        raise BudgetError(f"level ({level!r}) must be an integer >= 0")
    return int(level)


def _exact_str(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


@dataclass(frozen=True)
class LedgerEntry:
    """One query measured at every node of one level, with its budget.

    Attributes:
        query: the query's name (e.g. ``"detailed"``, ``"total"``, ``"age x sex"``).
        level: depth in the hierarchy (0 = root).
        mechanism: the mechanism's name (e.g. ``"discrete_gaussian"``).
        budget: the budget spent by this query at this level.
        sensitivity: the sensitivity the noise was calibrated to, exact: L1 for pure DP, the
            SQUARED L2 for zCDP (sigma^2 = L2^2 / (2 rho); L2 itself is irrational under
            replace-one neighbours, sqrt(2), so its square is what can be recorded exactly).
        nodes: how many nodes of the level were measured (informational: they compose in
            parallel).
        note: free text.

    An entry of sensitivity 0 is not charged (see ``charged``): ``budget`` is then the budget
    its noise was calibrated with, not a cost.
    """

    query: str
    level: int
    mechanism: str
    budget: Budget
    sensitivity: Fraction = Fraction(1)
    nodes: int = 1
    note: str = ""

    def __post_init__(self) -> None:
        _check_name(self.query, "query")
        _check_level(self.level)
        _check_name(self.mechanism, "mechanism")
        if not isinstance(self.budget, (PureDP, ZCDP)):
            raise BudgetError(f"budget ({self.budget!r}) must be a PureDP or ZCDP budget")
        object.__setattr__(
            self,
            "sensitivity",
            as_fraction(self.sensitivity, "sensitivity", error=BudgetError, allow_zero=True),
        )
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or self.nodes < 1:
            raise BudgetError(f"nodes ({self.nodes!r}) must be an integer >= 1")
        if not isinstance(self.note, str):
            raise BudgetError(f"note ({self.note!r}) must be a string")

    @property
    def charged(self) -> bool:
        """Whether the entry costs its budget: a query of sensitivity 0 is the same on every
        pair of neighbouring data sets, so its release is independent of any one person
        (Dwork & Roth 2014, Definition 2.4 holds with any epsilon, including 0)."""
        return self.sensitivity != 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form: exact ``"p/q"`` strings plus floats rounded up; ``charged``
        is derived from the sensitivity (not read back)."""
        return {
            "query": self.query,
            "level": self.level,
            "mechanism": self.mechanism,
            "kind": self.budget.kind,
            "budget": _exact_str(self.budget.value),
            "budget_float": float_up(self.budget.value),
            "sensitivity": _exact_str(self.sensitivity),
            "nodes": self.nodes,
            "charged": self.charged,
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LedgerEntry:
        """Inverse of :meth:`to_dict` (the exact strings are read, the floats ignored)."""
        return cls(
            query=data["query"],
            level=data["level"],
            mechanism=data["mechanism"],
            budget=make_budget(data["kind"], data["budget"]),
            sensitivity=Fraction(data["sensitivity"]),
            nodes=data.get("nodes", 1),
            note=data.get("note", ""),
        )


@dataclass(frozen=True)
class Invariant:
    """A value published exactly, outside differential privacy (e.g. state population)."""

    name: str
    level: int
    description: str = ""

    def __post_init__(self) -> None:
        _check_name(self.name, "name")
        _check_level(self.level)


@dataclass(frozen=True)
class Disclosure:
    """A non-private fact revealed by the release (e.g. a domain inferred from the data)."""

    name: str
    description: str = ""

    def __post_init__(self) -> None:
        _check_name(self.name, "name")


@dataclass(frozen=True)
class NoiseSource:
    """Where the noise of a release came from: a secure random source, or a seed.

    Why it is recorded: a seeded release is reproducible by anyone who knows the seed, and a
    release folder publishes its seed, so every true answer can be recovered by regenerating
    the noise. The ledger states which source was used, so no writer (``config.json``, the
    report, ``topdown check``) has to guess it from a configuration.

    Attributes:
        kind: ``"secure"`` (a key from the operating system) or ``"seeded"``.
        seed: the seed of a seeded source (a non-negative integer); None when secure.
    """

    kind: str
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("secure", "seeded"):
            raise BudgetError(f"noise source kind ({self.kind!r}) must be 'secure' or 'seeded'")
        if self.kind == "secure" and self.seed is not None:
            raise BudgetError(f"a secure noise source has no seed; got seed {self.seed!r}")
        if self.kind == "seeded" and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0
        ):
            raise BudgetError(
                f"a seeded noise source needs a non-negative integer seed; got {self.seed!r}"
            )

    @classmethod
    def from_seed(cls, seed: SupportsIndex | None) -> NoiseSource:
        """``None`` is the secure source; an integer (numpy integers too) is a seeded one."""
        if seed is None:
            return cls("secure")
        if isinstance(seed, bool):
            raise BudgetError(f"seed ({seed!r}) must be a non-negative integer or None, not a bool")
        try:
            value = operator.index(seed)
        except TypeError:
            raise BudgetError(f"seed ({seed!r}) must be a non-negative integer or None") from None
        return cls("seeded", value)

    @property
    def private(self) -> bool:
        """Whether the noise protects anything (a published seed protects nothing)."""
        return self.kind == "secure"

    def describe(self) -> str:
        """One line for people: the report, the manifest, ``topdown check``."""
        if self.private:
            return "secure random source"
        return (
            f"seed {self.seed}: reproducible, NOT PRIVATE (anyone with the seed regenerates the "
            "noise and recovers every true answer)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "seed": self.seed}

    @classmethod
    def from_dict(cls, data: Any) -> NoiseSource:
        if not isinstance(data, Mapping):
            raise BudgetError(f"noise ({data!r}) must be a table {{kind, seed}}")
        return cls(str(data.get("kind")), data.get("seed"))


#: The name of the disclosure a seeded release records.
SEEDED_DISCLOSURE = "seeded noise"


class Ledger:
    """Append-only record of the privacy cost of one release.

    Why mutable: measurements are recorded as they happen; the entries themselves are frozen.
    """

    def __init__(self, noise: NoiseSource | None = None) -> None:
        self._entries: list[LedgerEntry] = []
        self._invariants: list[Invariant] = []
        self._disclosures: list[Disclosure] = []
        self._noise: NoiseSource | None = None
        if noise is not None:
            self.set_noise(noise)

    @property
    def noise(self) -> NoiseSource | None:
        """The noise source of the release (None: not recorded, e.g. a bare ledger)."""
        return self._noise

    def set_noise(self, noise: NoiseSource) -> None:
        """Record the noise source, once; a seeded one is recorded as a disclosure too.

        Raises:
            BudgetError: a different source was already recorded.
        """
        if not isinstance(noise, NoiseSource):
            raise BudgetError(f"noise ({noise!r}) must be a NoiseSource")
        if self._noise is not None:
            if self._noise != noise:
                raise BudgetError(
                    f"the ledger already records noise {self._noise}; cannot record {noise}"
                )
            return
        self._noise = noise
        if not noise.private:
            self.record_disclosure(
                SEEDED_DISCLOSURE,
                f"the noise was drawn from seed {noise.seed}, which the release publishes: anyone "
                "can regenerate the noise and recover every true answer exactly. No privacy "
                "guarantee holds (the budgets below are nominal); for tests and experiments only",
            )

    @property
    def private(self) -> bool:
        """Whether the budgets mean anything: the noise source is recorded and secure."""
        return self._noise is not None and self._noise.private

    def record(
        self,
        query: str,
        level: int,
        mechanism: str,
        budget: Budget,
        *,
        sensitivity: object,
        nodes: int = 1,
        note: str = "",
    ) -> LedgerEntry:
        """Record one query measured at every node of ``level``.

        Raises:
            BudgetError: invalid fields, or the (level, query) pair was already recorded
                (measuring it again would be a second, sequentially composed, cost that
                must get its own name).
        """
        entry = LedgerEntry(query, level, mechanism, budget, sensitivity, nodes, note)  # type: ignore[arg-type]
        for existing in self._entries:
            if existing.level == entry.level and existing.query == entry.query:
                raise BudgetError(
                    f"query ({query!r}) at level ({level!r}) is already recorded; "
                    "each (level, query) is measured once"
                )
        self._entries.append(entry)
        logger.debug("ledger: level %d query %r %s", level, query, budget)
        return entry

    def record_invariant(self, name: str, level: int, description: str = "") -> Invariant:
        """Record a value published exactly (no noise); it is not covered by the DP total."""
        invariant = Invariant(name, level, description)
        self._invariants.append(invariant)
        logger.info("ledger: invariant %r at level %d published exactly", name, level)
        return invariant

    def record_disclosure(self, name: str, description: str = "") -> Disclosure:
        """Record a non-private fact revealed by the release (e.g. an inferred domain).

        Recording the same disclosure (same name and description) again returns the first one:
        rebuilding a report twice must not list a disclosure twice.
        """
        disclosure = Disclosure(name, description)
        if disclosure in self._disclosures:
            return disclosure
        self._disclosures.append(disclosure)
        logger.warning("ledger: non-private disclosure %r: %s", name, description)
        return disclosure

    @property
    def entries(self) -> tuple[LedgerEntry, ...]:
        """The measurements, in recording order."""
        return tuple(self._entries)

    @property
    def invariants(self) -> tuple[Invariant, ...]:
        """The values published exactly."""
        return tuple(self._invariants)

    @property
    def disclosures(self) -> tuple[Disclosure, ...]:
        """The non-private facts."""
        return tuple(self._disclosures)

    def total(self) -> Budget:
        """The privacy cost: sequential composition of the charged entries (mixed kinds give
        zCDP); an entry of sensitivity 0 costs nothing (``LedgerEntry.charged``).

        Raises:
            BudgetError: the ledger has no entries, or none is charged.
        """
        if not self._entries:
            raise BudgetError("the ledger has no entries, so no total budget")
        charged = [e.budget for e in self._entries if e.charged]
        if not charged:
            raise BudgetError(
                "every entry of the ledger has sensitivity 0: the release costs nothing and "
                "has no total budget"
            )
        return sequential(charged)

    def calibrated_total(self) -> Budget:
        """Sequential composition of every entry's budget, charged or not: the budgets the
        noise was drawn with, which add up to the strategy's total.

        Raises:
            BudgetError: the ledger has no entries.
        """
        if not self._entries:
            raise BudgetError("the ledger has no entries, so no total budget")
        return sequential(e.budget for e in self._entries)

    def epsilon_delta(self, delta: float) -> float:
        """The epsilon of the total at ``delta``: the tight CKS20 conversion for a zCDP total,
        and the pure epsilon itself (rounded up) for a pure-DP total.

        Nominal when the noise was seeded (see ``private``): a writer states it only when
        ``private`` is true.
        """
        total = self.total()
        if isinstance(total, PureDP):
            return float_up(total.epsilon)
        return zcdp_to_approx_dp(total, delta)

    def by_level(self) -> dict[int, Budget]:
        """Cost per level (sequential over that level's charged queries), sorted by level; a
        level whose entries are all uncharged costs nothing and is left out."""
        charged = [e for e in self._entries if e.charged]
        levels = sorted({e.level for e in charged})
        return {
            level: sequential(e.budget for e in charged if e.level == level) for level in levels
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary: entries, invariants, disclosures and the total."""
        data: dict[str, Any] = {
            "noise": self._noise.to_dict() if self._noise is not None else None,
            "entries": [e.to_dict() for e in self._entries],
            "invariants": [
                {"name": i.name, "level": i.level, "description": i.description}
                for i in self._invariants
            ],
            "disclosures": [
                {"name": d.name, "description": d.description} for d in self._disclosures
            ],
        }
        if self._entries:
            total = self.total()
            data["total"] = {
                "kind": total.kind,
                "budget": _exact_str(total.value),
                "budget_float": float_up(total.value),
            }
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ledger:
        """Rebuild a ledger from :meth:`to_dict` output (the total is recomputed, not read)."""
        ledger = cls()
        if data.get("noise") is not None:
            ledger._noise = NoiseSource.from_dict(data["noise"])  # its disclosure is read below
        for item in data.get("entries", []):
            entry = LedgerEntry.from_dict(item)
            ledger.record(
                entry.query,
                entry.level,
                entry.mechanism,
                entry.budget,
                sensitivity=entry.sensitivity,
                nodes=entry.nodes,
                note=entry.note,
            )
        for item in data.get("invariants", []):
            ledger._invariants.append(
                Invariant(item["name"], item["level"], item.get("description", ""))
            )
        for item in data.get("disclosures", []):
            ledger._disclosures.append(Disclosure(item["name"], item.get("description", "")))
        return ledger

    def to_frame(self) -> Any:
        """The entries as a pandas DataFrame (one row per entry; budget as Fraction)."""
        import pandas as pd

        rows = [
            {
                "level": e.level,
                "query": e.query,
                "mechanism": e.mechanism,
                "kind": e.budget.kind,
                "budget": e.budget.value,
                "budget_float": float_up(e.budget.value),
                "sensitivity": e.sensitivity,
                "nodes": e.nodes,
                "note": e.note,
            }
            for e in self._entries
        ]
        columns = [
            "level",
            "query",
            "mechanism",
            "kind",
            "budget",
            "budget_float",
            "sensitivity",
            "nodes",
            "note",
        ]
        return pd.DataFrame(rows, columns=columns)

    def __len__(self) -> int:
        return len(self._entries)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ledger):
            return NotImplemented
        return (self._noise, self._entries, self._invariants, self._disclosures) == (
            other._noise,
            other._entries,
            other._invariants,
            other._disclosures,
        )

    __hash__ = None  # type: ignore[assignment]
