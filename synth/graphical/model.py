"""The fitted graphical model: its junction tree, potentials and total, and what it answers.

Why a separate value type: the estimator produces it, the generators query and sample it, and
a later fit warm-starts from its potentials. It is immutable; its calibrated beliefs are
computed once, on construction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from synth._domains import SynthError
from synth.graphical.factor import cells, expand, project
from synth.graphical.inference import calibrate, conditionals, query_marginal
from synth.graphical.junction_tree import JunctionTree
from synth.graphical.sampling import check_sampling, sample_codes

__all__ = ["GraphicalModel"]


@dataclass(frozen=True)
class GraphicalModel:
    """A Markov random field over ``sizes`` with one log-potential per parameter clique.

    Attributes:
        sizes: domain size of each attribute.
        tree: the junction tree covering every parameter clique.
        potentials: log-potential tables keyed by sorted clique (the fitted parameters).
        total: the model's number of records (a float: the estimate's total).
        beliefs: each tree clique's probability table (computed on construction).
    """

    sizes: tuple[int, ...]
    tree: JunctionTree
    potentials: Mapping[tuple[int, ...], np.ndarray]
    total: float
    beliefs: list[np.ndarray] = field(init=False, repr=False)
    _conds: list[np.ndarray] | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if not np.isfinite(self.total) or self.total < 0:
            raise SynthError(f"total ({self.total!r}) must be a finite number >= 0")
        tables = [np.zeros(tuple(self.sizes[a] for a in c)) for c in self.tree.cliques]
        for clique, values in self.potentials.items():
            if tuple(sorted(clique)) != tuple(clique):
                raise SynthError(f"potential clique ({clique}) must be sorted")
            shape = tuple(self.sizes[a] for a in clique)
            if values.shape != shape:
                raise SynthError(
                    f"potential on {clique} has shape {values.shape}; the domain gives {shape}"
                )
            home = self.tree.containing(clique)
            if home is None:
                raise SynthError(f"potential clique ({clique}) is in no clique of the tree")
            tables[home] = tables[home] + expand(values, clique, self.tree.cliques[home])
        beliefs = calibrate(self.tree, tables)
        object.__setattr__(self, "beliefs", beliefs)

    def _conditionals(self) -> list[np.ndarray]:
        """The tree's conditionals, computed on first use (the fit's loop never needs them)."""
        if self._conds is None:
            object.__setattr__(self, "_conds", conditionals(self.tree, self.beliefs))
        assert self._conds is not None
        return self._conds

    @property
    def cells(self) -> int:
        """The cells of all clique tables (the model's memory, in table entries)."""
        return sum(cells(c, self.sizes) for c in self.tree.cliques)

    def probability(self, attrs: Sequence[int]) -> np.ndarray:
        """The model's probability table over ``attrs`` (axes in the given order)."""
        attrs = [int(a) for a in attrs]
        if len(set(attrs)) != len(attrs) or any(not 0 <= a < len(self.sizes) for a in attrs):
            raise SynthError(
                f"attrs ({attrs}) must be distinct attribute positions in [0, {len(self.sizes)})"
            )
        if not attrs:
            return np.array(1.0)
        ordered = sorted(attrs)
        home = self.tree.containing(ordered)
        if home is not None:
            table = project(self.beliefs[home], self.tree.cliques[home], ordered)
        else:
            table = query_marginal(self.tree, self.beliefs, self._conditionals(), ordered)
        return np.transpose(table, [ordered.index(a) for a in attrs])

    def marginal(self, attrs: Sequence[int]) -> np.ndarray:
        """The model's counts over ``attrs``: total times :meth:`probability`."""
        return self.total * self.probability(attrs)

    def sample(self, n: int, rng: np.random.Generator, method: str = "iid") -> np.ndarray:
        """``n`` records from the model, as codes (``n x len(sizes)``).

        Args:
            n: the number of records.
            rng: the random source.
            method: ``"iid"`` (independent draws from the model) or ``"rounded"`` (each
                clique's counts rounded from their expected values, unbiased, lower
                variance; records not independent): :mod:`synth.graphical.sampling`.

        Raises:
            SynthError: ``method`` is not one of them.
        """
        method = check_sampling(method)
        conds = self._conditionals()
        return sample_codes(self.tree, self.beliefs, conds, self.sizes, n, rng, method)
