"""The published unit list of a config, ``[schema] geography``: what the API's ``geography=`` is.

A release whose units are read from the data publishes which units have a record (the ledger
records that disclosure). Declaring the units instead (every leaf, empty ones included) avoids
it. The key takes either form::

    [schema]
    hierarchy = ["STATE", "PUMA"]
    geography = "units.csv"            # a CSV (or .parquet) file, one row per leaf unit
    # or inline, one table per leaf unit:
    geography = [{STATE = "01", PUMA = "00100"}, {STATE = "01", PUMA = "00200"}]

The file's hierarchy columns are read as text (``01`` keeps its leading zero), as the data's are.
Every problem is a ``ConfigError`` naming the config file and ``schema.geography``; a record in a
unit the list does not hold is reported by the run under the same key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pandas as pd

__all__ = ["GeographySpec", "GEOGRAPHY_KEY"]

GEOGRAPHY_KEY = "schema.geography"


@dataclass(frozen=True)
class GeographySpec:
    """The declared units: a file (``path``) or inline rows (``rows``, label text per column).

    Attributes:
        path: a CSV or Parquet file, one row per leaf unit with every hierarchy column.
        rows: the inline units, one tuple of labels per leaf (hierarchy order).
        hierarchy: the hierarchy columns, top level first.
    """

    hierarchy: tuple[str, ...]
    path: Path | None = None
    rows: tuple[tuple[str, ...], ...] = ()

    @classmethod
    def parse(
        cls,
        value: object,
        hierarchy: tuple[str, ...],
        base: Path,
        bad: Callable[[str, str], NoReturn],
    ) -> GeographySpec | None:
        """The spec of ``[schema] geography`` (None when absent); ``bad(key, rule)`` raises."""
        if value is None or value == "":
            return None
        if not hierarchy:
            bad(GEOGRAPHY_KEY, "needs schema.hierarchy: a release without a hierarchy has no units")
        if isinstance(value, str):
            p = Path(value).expanduser()
            return cls(hierarchy, path=p if p.is_absolute() else (base / p).resolve())
        rule = (
            f"must be a file path (a CSV of the units, one row per leaf) or a list of tables with "
            f"the hierarchy columns {list(hierarchy)}, one per leaf unit"
        )
        if not isinstance(value, list) or not value:
            bad(GEOGRAPHY_KEY, f"{rule}; got {value!r}"[:400])
        rows = []
        for i, row in enumerate(value):
            key = f"{GEOGRAPHY_KEY}[{i}]"
            if not isinstance(row, Mapping) or set(row) != set(hierarchy):
                bad(key, f"must be a table with exactly the keys {list(hierarchy)}; got {row!r}")
            labels = []
            for col in hierarchy:
                label = row[col]
                if isinstance(label, bool) or not isinstance(label, str | int) or not str(label):
                    bad(f"{key}.{col}", f"must be a non-empty string or an integer; got {label!r}")
                labels.append(str(label))
            rows.append(tuple(labels))
        return cls(hierarchy, rows=tuple(rows))

    def to_config(self) -> str | list[dict[str, str]]:
        """The value as a config holds it (a path, or the inline tables)."""
        if self.path is not None:
            return str(self.path)
        return [dict(zip(self.hierarchy, r, strict=True)) for r in self.rows]

    def frame(self, file: str) -> pd.DataFrame:
        """The units as the engine's ``geography=`` takes them: one row per leaf, labels as text.

        Raises:
            ConfigError: (``topdown.product.config``) naming ``file`` and ``schema.geography``:
                an unreadable file, a hierarchy column missing, an empty label, a unit listed
                twice.
        """
        from topdown.product.config import ConfigError

        def bad(rule: str) -> NoReturn:
            raise ConfigError(file, GEOGRAPHY_KEY, rule)

        if self.path is None:
            frame = pd.DataFrame(list(self.rows), columns=list(self.hierarchy), dtype=str)
            where = "the inline list"
        else:
            where = repr(str(self.path))
            frame = _read(self.path, self.hierarchy, bad)
            missing = [c for c in self.hierarchy if c not in frame.columns]
            if missing:
                bad(
                    f"{where} lacks the hierarchy column(s) {missing}; its columns are "
                    f"{list(frame.columns)}; it must list every leaf unit with every hierarchy "
                    "column"
                )
            frame = frame[list(self.hierarchy)]
        if frame.empty:
            bad(f"{where} lists no unit; it must list every leaf unit (one row each)")
        for col in self.hierarchy:
            empty = frame[col].isna() | (frame[col].astype(str).str.strip() == "")
            if empty.any():
                rows = empty.to_numpy().nonzero()[0][:5].tolist()
                bad(f"{where}: column {col!r} has {int(empty.sum())} empty label(s), rows {rows}")
        twice = frame.duplicated()
        if twice.any():
            first = frame[twice].iloc[0].tolist()
            bad(f"{where} lists {int(twice.sum())} unit(s) twice, first {first}")
        return frame.reset_index(drop=True)


def _read(path: Path, hierarchy: tuple[str, ...], bad: Callable[[str], NoReturn]) -> pd.DataFrame:
    """The units file, hierarchy columns as text."""
    if not path.is_file():
        bad(f"file {str(path)!r} " + ("is not a file" if path.exists() else "does not exist"))
    try:
        if path.suffix.lower() == ".parquet":
            frame = pd.read_parquet(path)
            return frame.astype({c: str for c in hierarchy if c in frame.columns})
        return pd.read_csv(path, dtype={c: str for c in hierarchy}, keep_default_na=False)
    except (OSError, ValueError, ImportError, pd.errors.ParserError) as err:
        bad(f"file {str(path)!r} cannot be read as a table of units: {err}")
