"""Schema: the declared query attributes (ordered domains) and the hierarchy columns.

A release is defined over a domain the publisher declares: a list of values, an integer range,
or bins over a numeric column. Reading the domain from the data is an explicit opt-in
(``infer_domain=True``) because which values occur is itself confidential; the engine warns and
records that disclosure in the ledger.

The schema turns a DataFrame of confidential records into integer codes (one cell index per
record) and reports every way the data can fail to fit: a missing column, NaN, a value outside
the declared domain, a missing hierarchy label. Each message names the column, shows offending
values and says how many rows hold them.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from constraints.domain import Domain
from topdown.errors import DataError, DomainError, ReleaseError

__all__ = ["Attribute", "Schema", "attributes_from_dictionary"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Attribute:
    """One query attribute with its declared, ordered domain.

    Exactly one of ``values`` or ``bins`` describes the domain:

    - ``values``: the ordered list of values the column may hold (categorical or integer);
    - ``bins``: increasing edges ``[e0, e1, ..., em]`` over a numeric column; bin i holds
      ``e_i <= v < e_{i+1}`` and its label is ``"e_i-(e_{i+1}-1)"`` for integer edges (or the
      given ``labels``). A value outside ``[e0, em)`` is an error, never clipped silently.

    Args:
        name: attribute name (used in queries, constraints and the output microdata).
        values: declared values, in the order comparisons follow.
        bins: bin edges for a numeric column.
        labels: labels of the bins (default derived from the edges).
        column: the data column it is read from (default: ``name``).
        recodes: named groupings of the values a query may measure instead of the values
            themselves: recode name -> {group label: values}, each a partition of the values
            (``{"hhinst": {"household": [0], "institutional": [1, 2, 3, 4], "other": [5, 6,
            7]}}``); a query names one as ``"HHGQ:hhinst"`` (see ``topdown.query``).
    """

    name: str
    values: tuple | None = None
    bins: tuple | None = None
    labels: tuple | None = None
    column: str | None = None
    recodes: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise DomainError(f"attribute name ({self.name!r}) must be a non-empty string")
        if (self.values is None) == (self.bins is None):
            raise DomainError(
                f"attribute {self.name!r}: exactly one of values= or bins= must be given "
                f"(values={self.values!r}, bins={self.bins!r})"
            )
        if self.values is not None:
            vals = tuple(v.item() if isinstance(v, np.generic) else v for v in self.values)
            if not vals:
                raise DomainError(f"attribute {self.name!r}: values (empty) must not be empty")
            object.__setattr__(self, "values", vals)
        elif self.bins is not None:
            edges = tuple(self.bins)
            if len(edges) < 2:
                raise DomainError(
                    f"attribute {self.name!r}: bins ({list(edges)}) need at least two edges"
                )
            bad = [
                e
                for e in edges
                if not isinstance(e, (int, float))
                or isinstance(e, bool)
                or (isinstance(e, float) and not math.isfinite(e) and e != math.inf)
            ]
            if bad or any(b <= a for a, b in pairwise(edges)):
                raise DomainError(
                    f"attribute {self.name!r}: bins ({list(edges)}) must be strictly "
                    "increasing numbers"
                )
            object.__setattr__(self, "bins", edges)
            labels = self.labels if self.labels is not None else _bin_labels(edges)
            labels = tuple(labels)
            if len(labels) != len(edges) - 1:
                raise DomainError(
                    f"attribute {self.name!r}: labels ({list(labels)}) must number "
                    f"{len(edges) - 1}, one per bin"
                )
            object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "recodes", self._frozen_recodes())

    def _frozen_recodes(self) -> tuple | None:
        """The recodes as ((name, ((label, values), ...)), ...): hashable, checked by the
        domain (each a partition of this attribute's values)."""
        if self.recodes is None:
            return None
        given = self.recodes if isinstance(self.recodes, Mapping) else None
        if given is None:
            raise DomainError(
                f"attribute {self.name!r}: recodes ({self.recodes!r}) must be a mapping recode "
                "name -> {group label: values}"
            )
        domain = Domain({self.name: self.domain_values}, {self.name: given})
        return tuple(
            (name, tuple((label, tuple(vals)) for label, vals in parts))
            for name, parts in domain.recodes.get(self.name, {}).items()
        )

    @property
    def recode_map(self) -> dict[str, dict[Any, tuple]]:
        """The recodes as recode name -> {group label: values} (empty when there are none)."""
        return {name: dict(parts) for name, parts in (self.recodes or ())}

    @classmethod
    def integer_range(
        cls, name: str, low: int, high: int, *, column: str | None = None
    ) -> Attribute:
        """Integer values ``low..high`` inclusive."""
        if int(high) < int(low):
            raise DomainError(f"attribute {name!r}: range high ({high}) must be >= low ({low})")
        return cls(name, values=tuple(range(int(low), int(high) + 1)), column=column)

    @property
    def source(self) -> str:
        """The data column this attribute is read from."""
        return self.column or self.name

    @property
    def domain_values(self) -> tuple:
        """The ordered values of the domain (bin labels for binned attributes)."""
        values = self.values if self.values is not None else self.labels
        if values is None:  # __post_init__ sets values, or the labels of the bins
            raise DomainError(f"attribute {self.name!r} has neither values nor bin labels")
        return values

    def encode(self, column: pd.Series) -> np.ndarray:
        """Codes (positions in the domain) of a column of confidential values."""
        if self.bins is not None:
            return self._encode_bins(column)
        domain = Domain({self.name: self.domain_values})
        try:
            return domain.encode(self.name, column.to_numpy())
        except DomainError:
            # data read from CSV may carry ints where the dictionary declared strings (or the
            # reverse); match on the text of both before reporting the values that truly differ
            lookup = {str(v): i for i, v in enumerate(self.domain_values)}
            codes = _as_text(column).map(lookup)
            if codes.isna().any():
                bad = codes.isna().to_numpy()
                raise DomainError(
                    f"column {self.source!r} has {int(bad.sum())} row(s) with values outside "
                    f"the declared domain of {self.name!r}: {_preview(pd.unique(column[bad]))}, "
                    f"first at row(s) {np.flatnonzero(bad)[:5].tolist()}; declared values are "
                    f"{_preview(self.values)}"
                ) from None
            return codes.to_numpy(dtype=np.int64)

    def _encode_bins(self, column: pd.Series) -> np.ndarray:
        numeric = pd.to_numeric(column, errors="coerce")
        not_numeric = numeric.isna().to_numpy()
        if not_numeric.any():
            raise DomainError(
                f"column {self.source!r} has {int(not_numeric.sum())} row(s) that are not "
                f"numbers, needed by the bins of {self.name!r}: "
                f"{_preview(pd.unique(column[not_numeric]))}"
            )
        vals = numeric.to_numpy(dtype=float)
        edges = np.asarray(self.bins, dtype=float)
        outside = (vals < edges[0]) | (vals >= edges[-1])
        if outside.any():
            raise DomainError(
                f"column {self.source!r} has {int(outside.sum())} row(s) outside the bins of "
                f"{self.name!r} [{edges[0]:g}, {edges[-1]:g}): "
                f"{_preview(np.unique(vals[outside]))}"
            )
        return (np.searchsorted(edges, vals, side="right") - 1).astype(np.int64)


@dataclass(frozen=True)
class Schema:
    """Query attributes (the histogram's axes, in order) and hierarchy columns (root first).

    The root of the hierarchy is implicit: ``hierarchy=("STATE", "PUMA")`` gives three levels,
    0 = the whole data set, 1 = states, 2 = PUMAs.
    """

    attributes: tuple[Attribute, ...]
    hierarchy: tuple[str, ...]
    domain: Domain = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        attrs = tuple(self.attributes)
        if not attrs:
            raise DomainError("attributes (empty) must list at least one query attribute")
        names = [a.name for a in attrs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise DomainError(f"attributes repeat ({dup}): each query attribute must appear once")
        hierarchy = tuple(self.hierarchy)
        if len(set(hierarchy)) != len(hierarchy):
            raise DomainError(f"hierarchy ({list(hierarchy)}) must not repeat a column")
        clash = sorted(set(hierarchy) & set(names))
        if clash:
            raise DomainError(
                f"hierarchy columns {clash} are also query attributes: a column is one or the other"
            )
        object.__setattr__(self, "attributes", attrs)
        object.__setattr__(self, "hierarchy", hierarchy)
        object.__setattr__(
            self,
            "domain",
            Domain(
                {a.name: a.domain_values for a in attrs},
                {a.name: a.recode_map for a in attrs if a.recodes},
            ),
        )

    @property
    def n_levels(self) -> int:
        """Number of levels including the implicit root."""
        return len(self.hierarchy) + 1

    def attribute(self, name: str) -> Attribute:
        for a in self.attributes:
            if a.name == name:
                return a
        raise DomainError(
            f"attribute {name!r} is not in the schema; its attributes are "
            f"{[a.name for a in self.attributes]}"
        )

    def required_columns(self) -> list[str]:
        return list(self.hierarchy) + [a.source for a in self.attributes]

    def check_columns(self, data: pd.DataFrame, *, source: str = "data") -> None:
        """Raise DataError listing the schema's columns the data lacks."""
        missing = [c for c in self.required_columns() if c not in data.columns]
        if missing:
            raise DataError(
                f"{source} lacks column(s) {missing} named in the schema; its columns are "
                f"{list(data.columns)}"
            )

    def encode_cells(self, data: pd.DataFrame) -> np.ndarray:
        """Flat cell index of every record (int64), checking NaN and domains column by column."""
        self.check_columns(data)
        codes = []
        for a in self.attributes:
            col = data[a.source]
            nan = col.isna().to_numpy()
            if nan.any():
                rows = np.flatnonzero(nan)
                raise DataError(
                    f"column {a.source!r} has {int(nan.sum())} missing (NaN) value(s), first at "
                    f"row(s) {rows[:5].tolist()}; query attributes must be complete (a value "
                    "such as 'N' for not applicable is a value, declare it in the domain)"
                )
            codes.append(a.encode(col))
        return self.domain.ravel(codes)

    def published_cells(self, frame: pd.DataFrame, where: str) -> np.ndarray:
        """Flat cell index of each row of a published table or microdata file, from its
        attribute columns (by name) compared as text: a CSV read as text and a Parquet file
        read with its types give the same cells.

        Raises:
            ReleaseError: a value outside its attribute's domain (``where`` names the file).
        """
        codes = []
        for a in self.attributes:
            code = frame[a.name].astype(str).map({str(v): i for i, v in enumerate(a.domain_values)})
            if code.isna().any():
                raise ReleaseError(f"{where}: column {a.name!r} has values outside its domain")
            codes.append(code.to_numpy(dtype=np.int64))
        return self.domain.ravel(codes)

    @classmethod
    def infer(
        cls, data: pd.DataFrame, attributes: Sequence[str], hierarchy: Sequence[str]
    ) -> Schema:
        """A schema whose domains are read from the data: NOT private, warns.

        The caller must record the disclosure in the release's ledger (the engine does).
        """
        log.warning(
            "inferring the domain of %s from the data: which values occur is disclosed, outside "
            "the differential privacy guarantee; declare the domain to avoid this",
            list(attributes),
        )
        missing = [c for c in list(attributes) + list(hierarchy) if c not in data.columns]
        if missing:
            raise DataError(f"data lacks column(s) {missing}; its columns are {list(data.columns)}")
        attrs = []
        for name in attributes:
            col = data[name]
            if col.isna().any():
                raise DataError(
                    f"column {name!r} has {int(col.isna().sum())} missing (NaN) value(s); query "
                    "attributes must be complete"
                )
            unique = pd.unique(col)
            try:
                vals = sorted(unique)
            except TypeError:
                vals = sorted(unique, key=str)
            attrs.append(Attribute(name, values=tuple(vals)))
        return cls(tuple(attrs), tuple(hierarchy))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly description (for the release folder)."""
        out = []
        for a in self.attributes:
            entry: dict[str, Any] = {"name": a.name, "column": a.source}
            if a.bins is not None:
                entry["bins"] = list(a.bins)
                entry["labels"] = list(a.domain_values)
            else:
                entry["values"] = list(a.domain_values)
            if a.recodes:
                entry["recodes"] = {
                    name: [[label, list(vals)] for label, vals in groups.items()]
                    for name, groups in a.recode_map.items()
                }
            out.append(entry)
        return {"attributes": out, "hierarchy": list(self.hierarchy)}


def attributes_from_dictionary(path: str | Path, names: Sequence[str]) -> dict[str, tuple]:
    """Declared values of some columns from a data dictionary JSON (NIST CRC format).

    The dictionary maps a column to ``{"values": {code: description}}`` or
    ``{"values": {"min": a, "max": b}}``. Codes that are digit strings become ints, so that
    constraints can be written ``Equal("RAC1P", 1)`` against integer data.
    """
    with open(path, encoding="utf-8") as fh:
        spec = json.load(fh)
    out: dict[str, tuple] = {}
    for name in names:
        if name not in spec:
            raise DomainError(
                f"column {name!r} is not in the data dictionary {str(path)!r}; it describes "
                f"{list(spec)}"
            )
        values = spec[name].get("values")
        if isinstance(values, Mapping) and set(values) == {"min", "max"}:
            out[name] = tuple(range(int(values["min"]), int(values["max"]) + 1))
        elif isinstance(values, Mapping):
            out[name] = tuple(int(k) if str(k).lstrip("-").isdigit() else k for k in values)
        else:
            raise DomainError(f"data dictionary entry {name!r} has no usable 'values' ({values!r})")
    return out


def _bin_labels(edges: Sequence[float]) -> tuple[str, ...]:
    labels = []
    for lo, hi in pairwise(edges):
        if isinstance(lo, int) and isinstance(hi, int):
            labels.append(f"{lo}-{hi - 1}" if hi - lo > 1 else f"{lo}")
        elif hi == math.inf:
            labels.append(f"{lo}+")
        else:
            labels.append(f"[{lo}, {hi})")
    return tuple(labels)


def _as_text(column: pd.Series) -> pd.Series:
    """The text of each value, a whole float written as the integer it is (one value 1.5 in a
    column of codes makes pandas read every code as a float: 1.0 must still match 1)."""
    if pd.api.types.is_float_dtype(column):
        whole = column.notna() & (column == np.round(column))
        text = column.astype(str)
        text[whole] = column[whole].astype(np.int64).astype(str)
        return text
    return column.astype(str)


def _preview(values: Any, limit: int = 10) -> str:
    vals = list(values)
    shown = ", ".join(repr(v.item() if isinstance(v, np.generic) else v) for v in vals[:limit])
    more = f", ... ({len(vals)} distinct)" if len(vals) > limit else ""
    return f"[{shown}{more}]"
