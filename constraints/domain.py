"""The query domain: ordered attributes, each with a finite ordered list of values.

The domain is the coordinate system every other part shares: a histogram is a flat vector
over its cells (mixed radix, C order, as ``np.ravel_multi_index``), a query is a marginal over
some of its attributes, and a constraint's expression evaluates to a mask over its cells. It
lives in ``constraints`` because the DSL is the lowest layer that needs it; the engine
(``topdown.schema``) builds one from declared column domains and re-exports it.

A domain is data the publisher declares, never something read silently from confidential
records: which values occur is itself private information.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from constraints.errors import DomainError

__all__ = ["Domain"]


@dataclass(frozen=True)
class Domain:
    """Ordered attributes with ordered, finite value lists.

    Args:
        attributes: mapping attribute name -> sequence of its values, in the declared order
            (comparisons such as ``GreaterThan`` follow this order). Insertion order of the
            mapping is the axis order of the histogram.

    Example:
        >>> d = Domain({"SEX": [1, 2], "AGE": range(0, 3)})
        >>> d.shape, d.size
        ((2, 3), 6)
    """

    attributes: Mapping[str, Sequence[Hashable]]
    _index: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.attributes, Mapping):
            raise DomainError(
                f"attributes ({self.attributes!r}) must be a mapping attribute -> list of values"
            )
        if len(self.attributes) == 0:
            raise DomainError("attributes ({}) must name at least one attribute")
        frozen: dict[str, tuple] = {}
        index: dict[str, dict] = {}
        for name, values in self.attributes.items():
            if not isinstance(name, str) or not name:
                raise DomainError(f"attribute name ({name!r}) must be a non-empty string")
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                raise DomainError(
                    f"values of attribute {name!r} ({values!r}) must be a list of values"
                )
            vals = tuple(_plain(v) for v in values)
            for v in vals:  # a value is a key of the lookup below: a list would raise TypeError
                try:
                    hash(v)
                except TypeError:
                    raise DomainError(
                        f"values of attribute {name!r} hold {v!r}, which is not hashable: a "
                        "value must be a number, a string or another hashable value"
                    ) from None
            if len(vals) == 0:
                raise DomainError(f"values of attribute {name!r} (empty) must not be empty")
            lookup = {v: i for i, v in enumerate(vals)}
            if len(lookup) != len(vals):
                dup = sorted({repr(v) for v in vals if vals.count(v) > 1})
                raise DomainError(
                    f"values of attribute {name!r} repeat ({', '.join(dup)}): each value must "
                    "appear once"
                )
            frozen[name] = vals
            index[name] = lookup
        object.__setattr__(self, "attributes", frozen)
        object.__setattr__(self, "_index", index)

    # -- shape -----------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        """Attribute names in axis order."""
        return tuple(self.attributes)

    @property
    def shape(self) -> tuple[int, ...]:
        """Number of values of each attribute, in axis order."""
        return tuple(len(v) for v in self.attributes.values())

    @property
    def size(self) -> int:
        """Number of cells (product of the shape)."""
        return int(np.prod(self.shape, dtype=np.int64))

    def values(self, attribute: str) -> tuple[Hashable, ...]:
        """The ordered values of one attribute."""
        self._check_attribute(attribute)
        return tuple(self.attributes[attribute])  # already a tuple: no copy

    def axis(self, attribute: str) -> int:
        """Axis number of an attribute in the histogram."""
        self._check_attribute(attribute)
        return self.names.index(attribute)

    def project(self, attributes: Sequence[str]) -> Domain:
        """The sub-domain over some attributes, kept in this domain's axis order."""
        for a in attributes:
            self._check_attribute(a)
        keep = [a for a in self.names if a in set(attributes)]
        if not keep:
            raise DomainError(f"attributes ({list(attributes)!r}) must name at least one attribute")
        return Domain({a: self.attributes[a] for a in keep})

    # -- values <-> codes --------------------------------------------------------------------
    def index_of(self, attribute: str, value: Any) -> int:
        """Position of ``value`` in the declared order of ``attribute``.

        Raises:
            DomainError: naming the attribute and the value, listing the values that exist.
        """
        self._check_attribute(attribute)
        key = _plain(value)
        try:
            return self._index[attribute][key]
        except (KeyError, TypeError):
            raise DomainError(
                f"value {value!r} is not in the domain of attribute {attribute!r}; its values "
                f"are {_preview(self.attributes[attribute])}"
            ) from None

    def encode(self, attribute: str, column: Sequence[Any] | np.ndarray) -> np.ndarray:
        """Codes (int64 positions) of a column of values; every value must be in the domain.

        Raises:
            DomainError: naming the column, the offending values and how many rows hold them.
        """
        self._check_attribute(attribute)
        series = pd.Series(
            np.asarray(column, dtype=object) if not isinstance(column, pd.Series) else column
        )
        codes = series.map(self._index[attribute])
        bad = codes.isna().to_numpy()
        if bad.any():
            missing = pd.unique(series[bad])
            raise DomainError(
                f"column {attribute!r} has {int(bad.sum())} row(s) with values outside its "
                f"declared domain: {_preview(list(missing))}; declared values are "
                f"{_preview(self.attributes[attribute])}"
            )
        return codes.to_numpy(dtype=np.int64)

    def ravel(self, codes: Sequence[np.ndarray]) -> np.ndarray:
        """Flat cell indices (C order) from per-attribute codes."""
        return np.ravel_multi_index(tuple(codes), self.shape).astype(np.int64, copy=False)

    def unravel(self, cells: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per-attribute codes from flat cell indices."""
        return np.unravel_index(np.asarray(cells, dtype=np.int64), self.shape)

    def cell_labels(self) -> list[tuple]:
        """One tuple of attribute values per cell, in cell order."""
        grids = self.unravel(np.arange(self.size))
        cols = [
            np.asarray(self.attributes[a], dtype=object)[g]
            for a, g in zip(self.names, grids, strict=True)
        ]
        return list(zip(*cols, strict=True))

    # -- helpers -----------------------------------------------------------------------------
    def _check_attribute(self, attribute: str) -> None:
        if attribute not in self.attributes:
            raise DomainError(
                f"attribute {attribute!r} is not in the domain; its attributes are "
                f"{list(self.attributes)}"
            )

    def __contains__(self, attribute: object) -> bool:
        return attribute in self.attributes

    def __hash__(self) -> int:
        return hash(tuple((k, v) for k, v in self.attributes.items()))


def _plain(value: Any) -> Any:
    """numpy scalars -> Python scalars, so np.int64(3) and 3 name the same value."""
    if isinstance(value, np.generic):
        return value.item()
    return value


def _preview(values: Sequence[Any], limit: int = 12) -> str:
    vals = list(values)
    shown = ", ".join(repr(v) for v in vals[:limit])
    more = f", ... ({len(vals)} in all)" if len(vals) > limit else ""
    return f"[{shown}{more}]"
