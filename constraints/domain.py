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
        recodes: optional mapping attribute -> recode name -> {group label: values}: named
            partitions of an attribute's values into labelled groups (``HHGQ`` ->
            ``hhinst``: household {0}, institutional {1..4}, non-institutional {5..7}; ages
            into bands). A query may measure an attribute through one of its recodes
            (``topdown.query``). Every value falls in exactly one group; groups keep the
            declared label order.

    Example:
        >>> d = Domain({"SEX": [1, 2], "AGE": range(0, 3)})
        >>> d.shape, d.size
        ((2, 3), 6)
    """

    attributes: Mapping[str, Sequence[Hashable]]
    recodes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
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
        object.__setattr__(self, "recodes", self._checked_recodes())

    def _checked_recodes(self) -> dict[str, dict[str, tuple[tuple[Hashable, tuple], ...]]]:
        """The recodes as attribute -> name -> ((label, values), ...), each a partition."""
        given = self.recodes
        if given is None:
            return {}
        if not isinstance(given, Mapping):
            raise DomainError(
                f"recodes ({given!r}) must be a mapping attribute -> recode name -> "
                "{label: values}"
            )
        out: dict[str, dict[str, tuple[tuple[Hashable, tuple], ...]]] = {}
        for attribute, named in given.items():
            if attribute not in self.attributes:
                raise DomainError(
                    f"recodes name attribute {attribute!r}, which is not in the domain; its "
                    f"attributes are {list(self.attributes)}"
                )
            if not isinstance(named, Mapping):
                raise DomainError(
                    f"recodes of {attribute!r} ({named!r}) must be a mapping recode name -> "
                    "{label: values}"
                )
            out[attribute] = {
                name: self._partition(attribute, name, groups) for name, groups in named.items()
            }
        return out

    def _partition(
        self, attribute: str, name: Any, groups: Any
    ) -> tuple[tuple[Hashable, tuple], ...]:
        where = f"recode {name!r} of attribute {attribute!r}"
        if not isinstance(name, str) or not name or ":" in name or " " in name:
            raise DomainError(
                f"{where}: a recode name must be a non-empty string without ':' or spaces"
            )
        if not isinstance(groups, Mapping) or not groups:
            raise DomainError(
                f"{where} ({groups!r}) must be a non-empty mapping group label -> list of values"
            )
        seen: dict[Hashable, Hashable] = {}
        parts = []
        for label, values in groups.items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                raise DomainError(f"{where}: group {label!r} ({values!r}) must be a list of values")
            members = tuple(_plain(v) for v in values)
            if not members:
                raise DomainError(f"{where}: group {label!r} must hold at least one value")
            for v in members:
                self.index_of(attribute, v)  # names the value and the domain when it is not in it
                if v in seen:
                    raise DomainError(
                        f"{where}: value {v!r} is in groups {seen[v]!r} and {label!r}; a recode "
                        "puts each value in exactly one group"
                    )
                seen[v] = label
            parts.append((_plain(label), members))
        missing = [v for v in self.attributes[attribute] if v not in seen]
        if missing:
            raise DomainError(
                f"{where} leaves values {_preview(missing)} in no group; a recode puts each "
                "value in exactly one group"
            )
        return tuple(parts)

    # -- recodes -----------------------------------------------------------------------------
    def recode_names(self, attribute: str) -> tuple[str, ...]:
        """The names of an attribute's recodes, in declared order."""
        self._check_attribute(attribute)
        return tuple(self.recodes.get(attribute, {}))

    def grouping(self, attribute: str, recode: str) -> tuple[int, ...]:
        """The group (its position among the recode's labels) of each of the attribute's
        values, in the attribute's value order."""
        groups = self._recode(attribute, recode)
        out = [0] * len(self.attributes[attribute])
        for g, (_, members) in enumerate(groups):
            for v in members:
                out[self._index[attribute][v]] = g
        return tuple(out)

    def group_labels(self, attribute: str, recode: str) -> tuple[Hashable, ...]:
        """The labels of a recode's groups, in declared order."""
        return tuple(label for label, _ in self._recode(attribute, recode))

    def group_members(self, attribute: str, recode: str, group: Any) -> tuple:
        """The values of ``attribute`` in group ``group`` of its recode ``recode``.

        Raises:
            DomainError: an unknown attribute or recode (listing the recodes), or a group label
                the recode does not have (listing its labels).
        """
        groups = self._recode(attribute, recode)
        label = _plain(group)
        for known, members in groups:
            if known == label and type(known) is type(label):
                return tuple(members)
        raise DomainError(
            f"group ({group!r}) is not a group of recode {recode!r} of attribute {attribute!r}; "
            f"its groups are {[g for g, _ in groups]!r}"
        )

    def _recode(self, attribute: str, recode: str) -> tuple[tuple[Hashable, tuple], ...]:
        self._check_attribute(attribute)
        named = self.recodes.get(attribute, {})
        if recode not in named:
            raise DomainError(
                f"recode ({recode!r}) is not a recode of attribute {attribute!r}; its recodes are "
                f"{list(named)}"
            )
        return named[recode]

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
        return Domain(
            {a: self.attributes[a] for a in keep},
            {a: self._plain_recodes(a) for a in keep if a in self.recodes},
        )

    def _plain_recodes(self, attribute: str) -> dict[str, dict[Hashable, tuple]]:
        """One attribute's recodes in the form ``Domain`` takes (for a projection)."""
        return {name: dict(parts) for name, parts in self.recodes[attribute].items()}

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
        return hash(
            (
                tuple((k, v) for k, v in self.attributes.items()),
                tuple((a, tuple(r.items())) for a, r in self.recodes.items()),
            )
        )


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
