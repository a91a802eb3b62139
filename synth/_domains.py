"""Attribute domains of the generators: declared, or read from the data with a disclosure.

A domain lists every value an attribute may take, so that a value absent from the data still
has its cell (and a real zero is protected like any other count). Declared domains
(``domains={"sex": ["F", "M"], ...}``) reveal nothing. When they are omitted, the values that
occur in the data are used: that publishes which values occur (a rare value reveals that
someone has it), so it is logged as a warning and recorded in the ledger as a non-private
disclosure.

Records are carried as integer codes (``codes[:, j]`` indexes ``domains[columns[j]]``) from
the measurement step to sampling; :func:`decode` turns codes back into a DataFrame.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mechanisms.ledger import Ledger, NoiseSource
from topdown.errors import DataError, TopDownError

__all__ = [
    "SynthError",
    "Domains",
    "resolve_domains",
    "encode",
    "decode",
    "check_frame",
    "sizes_of",
    "Encoded",
    "encode_records",
]


Domains = dict[str, list[Hashable]]
"""Domain values by column name, in code order."""


class SynthError(TopDownError, ValueError):
    """A bad argument of a generator (budget, column name, size)."""


def check_seed(seed: object) -> int | None:
    """A seed: None (the secure source) or a non-negative integer (reproducible, not private).

    Raises:
        BudgetError: anything else (a ``TopDownError``), naming the value.
    """
    source = NoiseSource.from_seed(seed)  # type: ignore[arg-type]
    return source.seed


def check_frame(data: object, name: str = "data") -> pd.DataFrame:
    """Refuse anything but a non-empty DataFrame with unique column names."""
    if not isinstance(data, pd.DataFrame):
        raise DataError(f"{name} ({type(data).__name__}) must be a pandas DataFrame")
    if data.empty or data.shape[1] == 0:
        raise DataError(f"{name} (shape {data.shape}) must have at least one row and one column")
    named = [c for c in data.columns if not isinstance(c, str)]
    if named:
        raise DataError(
            f"{name} has column names {named[:5]!r:.200} that are not strings; every column "
            "name must be a string (rename the columns, e.g. df.columns = df.columns.map(str))"
        )
    duplicated = data.columns[data.columns.duplicated()].tolist()
    if duplicated:
        raise DataError(f"{name} has repeated column names {duplicated}; they must be unique")
    return data


def _plain(value: Any) -> Hashable:
    """numpy scalars as Python scalars, so that 3 (int64) and 3 (int) are one domain value."""
    return value.item() if isinstance(value, np.generic) else value


def resolve_domains(
    data: pd.DataFrame,
    domains: Mapping[str, Sequence[Hashable]] | None,
    ledger: Ledger,
    *,
    columns: Sequence[str] | None = None,
) -> Domains:
    """The domain of each column: declared where given, otherwise the sorted observed values.

    Args:
        data: the confidential records.
        domains: declared domains by column name (may cover only some columns), or None.
        ledger: receives one disclosure naming the columns whose domain came from the data.
        columns: the columns to resolve (default: all columns of ``data``).

    Raises:
        DataError: a column is missing, holds missing values, or holds a value outside its
            declared domain.
        SynthError: a declared domain is empty, repeats a value or names an unknown column.
    """
    columns = list(data.columns) if columns is None else list(columns)
    if domains is not None and not isinstance(domains, Mapping):
        raise SynthError(
            f"domains ({domains!r:.200}) must be a mapping {{column: [values, ...]}} or None"
        )
    declared = dict(domains or {})
    for column, values in declared.items():
        _check_declared(column, values, data)
    unknown = sorted(set(declared) - set(data.columns), key=str)
    if unknown:
        raise SynthError(
            f"domains names columns {unknown} that are not in the data; "
            f"the data's columns are {list(data.columns)}"
        )
    result: Domains = {}
    inferred: list[str] = []
    for column in columns:
        if column not in data.columns:
            raise DataError(f"column ({column!r}) is not in the data ({list(data.columns)})")
        series = data[column]
        if series.isna().any():
            raise DataError(
                f"column {column!r} has {int(series.isna().sum())} missing values; "
                "encode them as a value of the domain (e.g. 'N' or '?')"
            )
        if column in declared:
            values = [_plain(v) for v in declared[column]]
            if not values:
                raise SynthError(f"domains[{column!r}] ([]) must list at least one value")
            if len(set(values)) != len(values):
                raise SynthError(f"domains[{column!r}] ({values!r:.200}) repeats a value")
            outside = sorted({_plain(v) for v in series.unique()} - set(values), key=str)
            if outside:
                raise DataError(
                    f"column {column!r} has values {outside[:10]!r} outside its declared domain "
                    f"({values!r:.200})"
                )
            result[column] = values
        else:
            result[column] = sorted((_plain(v) for v in series.unique()), key=_sort_key)
            inferred.append(column)
    if inferred:
        ledger.record_disclosure(
            "domains inferred from the data",
            f"the values occurring in columns {inferred} were read from the confidential data "
            "and are published as their domains (a rare value reveals that someone has it); "
            "declare the domains to avoid this",
        )
    return result


def _check_declared(column: object, values: object, data: pd.DataFrame) -> None:
    """A declared domain is a list of hashable values, not a string (read as characters),
    and holds booleans only for a boolean column (True == 1 and False == 0 in Python, so
    [true, false] would silently stand for 1 and 0)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
        raise SynthError(
            f"domains[{column!r}] ({values!r:.200}) must be a list of values, not "
            f"{type(values).__name__}"
        )
    for value in values:
        try:
            hash(value)
        except TypeError:
            raise SynthError(
                f"domains[{column!r}] holds {value!r:.100}, which is not hashable; values must "
                "be numbers, strings or other hashable scalars"
            ) from None
    if (
        column in data.columns
        and any(isinstance(v, (bool, np.bool_)) for v in values)
        and not pd.api.types.is_bool_dtype(data[column])
    ):
        raise SynthError(
            f"domains[{column!r}] ({list(values)!r:.200}) holds booleans for a column of type "
            f"{data[column].dtype}: True and False would stand for 1 and 0; declare the "
            "column's own values"
        )


def _sort_key(value: Hashable) -> tuple[int, Any]:
    """Numbers before text, each in natural order (mixed types do not compare in Python)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value)
    return (1, str(value))


def encode(data: pd.DataFrame, domains: Domains, columns: Sequence[str]) -> np.ndarray:
    """Integer codes (rows x columns) of the records in their domains."""
    codes = np.empty((len(data), len(columns)), dtype=np.int64)
    for j, column in enumerate(columns):
        index = {value: code for code, value in enumerate(domains[column])}
        array = data[column].map(index).fillna(-1).to_numpy(dtype=np.int64)
        if (array < 0).any():
            bad = data[column][array < 0].iloc[0]
            raise DataError(f"column {column!r} has the value {bad!r}, which is not in its domain")
        codes[:, j] = array
    return codes


def decode(codes: np.ndarray, domains: Domains, columns: Sequence[str]) -> pd.DataFrame:
    """The DataFrame whose records have these codes (column dtypes follow the domain values)."""
    out: dict[str, Any] = {}
    for j, column in enumerate(columns):
        values = pd.Series(domains[column], dtype=object)
        decoded = values.iloc[codes[:, j]].reset_index(drop=True)
        out[column] = pd.Series(decoded.tolist()).infer_objects()
    return pd.DataFrame(out, columns=list(columns))


def sizes_of(domains: Domains, columns: Sequence[str]) -> tuple[int, ...]:
    """The domain size of each column, in order."""
    return tuple(len(domains[c]) for c in columns)


@dataclass(frozen=True)
class Encoded:
    """Records as every generator takes them: columns, their domains, sizes and codes."""

    columns: list[str]
    domains: Domains
    sizes: tuple[int, ...]
    codes: np.ndarray


def encode_records(
    data: object,
    declared: Mapping[str, Sequence[Hashable]] | None,
    ledger: Ledger,
    *,
    columns: Sequence[str] | None = None,
) -> Encoded:
    """Check the frame, resolve the domains of ``columns`` (default: every column; inferred
    ones recorded in ``ledger``) and encode the records: the preamble of every ``fit``."""
    frame = check_frame(data)
    names = list(frame.columns) if columns is None else list(columns)
    domains = resolve_domains(frame, declared, ledger, columns=columns)
    return Encoded(names, domains, sizes_of(domains, names), encode(frame, domains, names))
