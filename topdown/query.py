"""Queries: marginals over the query attributes, each attribute kept, recoded or summed.

A query names, per attribute, the attribute itself (kept: one answer per value), one of its
recodes (grouped: one answer per group of values, ``HHGQ:hhinst``), or nothing (summed). As a
matrix it is the Kronecker product of one factor per axis: an identity, a 0/1 grouping matrix
(one 1 per column) or a row of ones; so every query is a partition of the cells into answers,
answered by reshaping a histogram and summing axes (and groups), and its matrix is built only
sparse, for the estimators.

Kept apart from ``topdown.strategy`` (which queries each level measures, and their budgets)
because every part that reads answers (measurement, the estimators, metrics) needs the query
and nothing of the strategy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from constraints.domain import Domain
from topdown.errors import StrategyError

__all__ = ["Query", "Factor"]


@dataclass(frozen=True)
class Factor:
    """One axis of a query: the attribute kept whole, grouped by a recode, or summed.

    Attributes:
        attribute: the axis's attribute.
        size: how many values the attribute has.
        groups: the answer each value counts in (``range(size)`` when kept, all 0 when summed).
        recode: the recode's name when grouped, else None.
        kept: whether the axis is kept (whole or grouped) rather than summed.
    """

    attribute: str
    size: int
    groups: tuple[int, ...]
    recode: str | None
    kept: bool

    @property
    def n_out(self) -> int:
        """The answers along this axis: values, groups, or 1 when summed."""
        return max(self.groups) + 1

    @property
    def identity(self) -> bool:
        """Whether the axis is kept whole (no recode)."""
        return self.kept and self.recode is None

    def matrix(self) -> sp.csr_matrix:
        """The axis factor as a sparse (answers x values) 0/1 matrix, one 1 per column."""
        cols = np.arange(self.size)
        return sp.csr_matrix(
            (np.ones(self.size), (np.asarray(self.groups), cols)), shape=(self.n_out, self.size)
        )

    def reduce(self, array: np.ndarray, axis: int) -> np.ndarray:
        """Sum ``array``'s ``axis`` (of length ``size``) into this factor's answers."""
        if self.identity:
            return array
        if not self.kept:
            return array.sum(axis=axis, keepdims=True)
        groups = np.asarray(self.groups)
        if np.all(np.diff(groups) >= 0):  # contiguous groups (bands): one pass
            starts = np.flatnonzero(np.r_[True, np.diff(groups) > 0])
            return np.add.reduceat(array, starts, axis=axis)
        out_shape = list(array.shape)
        out_shape[axis] = self.n_out
        out = np.zeros(out_shape, dtype=array.dtype)
        for g in range(self.n_out):
            idx = np.flatnonzero(groups == g)
            sl = [slice(None)] * array.ndim
            sl[axis] = slice(g, g + 1)
            out[tuple(sl)] = np.take(array, idx, axis=axis).sum(axis=axis, keepdims=True)
        return out


@dataclass(frozen=True)
class Query:
    """A marginal query over named attributes; ``None`` means the detailed histogram.

    Build with ``Query.parse``: ``"detailed"``, ``"total"``, ``"SEX"``, ``"SEX x AGE"``,
    ``"HHGQ:hhinst x VOTING"`` (an attribute through one of its recodes), a recode's bare name
    when one attribute has it (``"hhinst"``), or a sequence of such terms.
    """

    attributes: tuple[str, ...] | None

    @classmethod
    def parse(cls, spec: Query | str | Sequence[str]) -> Query:
        if isinstance(spec, Query):
            return spec
        if isinstance(spec, str):
            text = spec.strip()
            if text == "detailed":
                return cls(None)
            if text == "total":
                return cls(())
            parts = [p.strip() for p in text.replace("*", " x ").split(" x ")]
            return cls(tuple(p for p in parts if p))
        if isinstance(spec, Iterable):
            return cls(tuple(str(a) for a in spec))
        raise StrategyError(
            f"query ({spec!r}) must be 'detailed', 'total', an attribute name, 'A x B' or a list "
            "of attribute names"
        )

    @property
    def name(self) -> str:
        if self.attributes is None:
            return "detailed"
        if not self.attributes:
            return "total"
        return " x ".join(self.attributes)

    def factors(self, domain: Domain) -> tuple[Factor, ...]:
        """One factor per axis of ``domain``, in axis order (the terms validated)."""
        chosen = self._resolved(domain)
        out = []
        for a, n in zip(domain.names, domain.shape, strict=True):
            if self.attributes is None or (a in chosen and chosen[a] is None):
                out.append(Factor(a, n, tuple(range(n)), None, True))
            elif a in chosen:
                recode = chosen[a]
                assert recode is not None
                out.append(Factor(a, n, domain.grouping(a, recode), recode, True))
            else:
                out.append(Factor(a, n, (0,) * n, None, False))
        return tuple(out)

    def _resolved(self, domain: Domain) -> dict[str, str | None]:
        """Each named attribute -> its recode (None: kept whole)."""
        chosen: dict[str, str | None] = {}
        for term in self.attributes or ():
            attribute, recode = _term(term, domain, self.name)
            if attribute in chosen:
                raise StrategyError(
                    f"query {self.name!r} names attribute {attribute!r} twice; name each "
                    "attribute once, whole or through one recode"
                )
            chosen[attribute] = recode
        return chosen

    def kept(self, domain: Domain) -> tuple[str, ...]:
        """The attributes this query keeps (whole or recoded), in the domain's axis order."""
        return tuple(f.attribute for f in self.factors(domain) if f.kept)

    def recoded(self, domain: Domain) -> dict[str, str]:
        """The attributes this query measures through a recode -> the recode's name."""
        return {f.attribute: f.recode for f in self.factors(domain) if f.recode is not None}

    def n_answers(self, domain: Domain) -> int:
        """How many answers the query has (the product of the factors' answers)."""
        return int(np.prod([f.n_out for f in self.factors(domain)], dtype=np.int64))

    def answer(self, histograms: np.ndarray, domain: Domain) -> np.ndarray:
        """Answers for a stack of histograms: shape (nodes, cells) -> (nodes, answers)."""
        h = np.asarray(histograms)
        stacked = h.reshape((h.shape[0],) + domain.shape)
        factors = self.factors(domain)
        if all(f.identity or not f.kept for f in factors):  # a plain marginal: one sum
            axes = tuple(1 + i for i, f in enumerate(factors) if not f.kept)
            summed = stacked.sum(axis=axes) if axes else stacked
            return summed.reshape(h.shape[0], -1)
        for i, f in enumerate(factors):
            stacked = f.reduce(stacked, 1 + i)
        return stacked.reshape(h.shape[0], -1)

    def groups(self, domain: Domain) -> np.ndarray:
        """The answer each cell counts in (cells,): the query as a partition of the cells."""
        index = np.zeros(1, dtype=np.int64)
        for f in self.factors(domain):
            index = (index[:, None] * f.n_out + np.asarray(f.groups, dtype=np.int64)).reshape(-1)
        return index

    def matrix(self, domain: Domain) -> sp.csr_matrix:
        """The query as a sparse (answers x cells) 0/1 matrix: a Kronecker product."""
        mat = sp.identity(1, format="csr", dtype=np.float64)
        for f in self.factors(domain):
            mat = sp.kron(mat, f.matrix(), format="csr")
        return mat


def _term(term: str, domain: Domain, query: str) -> tuple[str, str | None]:
    """A query term -> (attribute, recode or None), naming what exists when it is unknown."""
    if ":" in term:
        attribute, _, recode = (p.strip() for p in term.partition(":"))
        if attribute not in domain:
            raise StrategyError(
                f"query {query!r} names attribute {attribute!r} (in {term!r}), which is not a "
                f"query attribute; they are {list(domain.names)}"
            )
        if recode not in domain.recode_names(attribute):
            raise StrategyError(
                f"query {query!r}: attribute {attribute!r} has no recode {recode!r}; its recodes "
                f"are {list(domain.recode_names(attribute))}"
            )
        return attribute, recode
    if term in domain:
        return term, None
    owners = [a for a in domain.names if term in domain.recode_names(a)]
    if len(owners) == 1:
        return owners[0], term
    if len(owners) > 1:
        raise StrategyError(
            f"query {query!r}: recode {term!r} belongs to attributes {owners}; write "
            f"'ATTRIBUTE:{term}' to say which"
        )
    recodes = [f"{a}:{r}" for a in domain.names for r in domain.recode_names(a)]
    raise StrategyError(
        f"query {query!r} names attribute(s) [{term!r}] that are not query attributes; they "
        f"are {list(domain.names)}" + (f", and the recodes are {recodes}" if recodes else "")
    )
