"""One frame's CSV rows, byte for byte what ``DataFrame.to_csv(index=False)`` writes, fast.

The noisy measurement file of a DHC persons release holds 1,903,289 rows a node (every answer
of its ten queries), 26.6 million at a 20,000-person state to the tract. pandas formats them
in Python at about 4.5 microseconds a row (11.2 CPU s for 2.5 million rows); Arrow's C++ CSV
writer takes 0.8 CPU s for the same rows (measured side by side, ``docs/benchmarks.md``). So a
frame goes through ``pyarrow.csv.write_csv`` when pyarrow (the ``parquet`` extra) is installed
and the frame is of the kinds whose text both write alike:

- integer columns: the same decimal digits;
- floats: each distinct value formatted once by Python's ``repr`` (pandas' format: ``2.0``,
  ``1e-07``, where Arrow writes ``2`` and ``1e-7``) and written as text, so a constant column
  (a query's variance) costs one ``repr``;
- text: written unquoted, which is what pandas does when no value is empty or holds a comma,
  a quote or a line break;
- the header: the column names joined by commas.

Anything else (a value that needs quoting, NaN, booleans, categoricals, no pyarrow) goes to
``DataFrame.to_csv`` itself, so the file never depends on which writer ran.
"""

from __future__ import annotations

from typing import Any, BinaryIO

import numpy as np
import pandas as pd

from topdown.support.optional import is_installed

__all__ = ["write_frame_csv"]

_NEEDS_QUOTES = (",", '"', "\n", "\r")


def write_frame_csv(frame: pd.DataFrame, out: BinaryIO, *, header: bool) -> None:
    """Append ``frame``'s rows (and its header when ``header``) to the binary file ``out``."""
    table = _arrow_table(frame) if is_installed("pyarrow") else None
    if table is None:
        frame.to_csv(out, index=False, header=header, encoding="utf-8")
        return
    import pyarrow.csv as pcsv

    if header:
        out.write((",".join(map(str, frame.columns)) + "\n").encode("utf-8"))
    if len(frame):
        options = pcsv.WriteOptions(include_header=False, quoting_style="none")
        pcsv.write_csv(table, out, options)


def _arrow_table(frame: pd.DataFrame) -> Any:
    """The frame as an Arrow table whose CSV is pandas', or None when one cannot be."""
    import pyarrow as pa

    if any(_quoted(str(c)) for c in frame.columns):
        return None
    arrays = []
    for name in frame.columns:
        values = frame[name].to_numpy()
        kind = values.dtype.kind
        if kind in "iu":
            arrays.append(pa.array(values))
        elif values.dtype == np.float64:
            if np.isnan(values).any():
                return None  # pandas writes NaN as an empty field
            distinct, where = np.unique(values, return_inverse=True)
            text = pa.array([repr(float(v)) for v in distinct], type=pa.string())
            arrays.append(text.take(pa.array(where.reshape(-1))))
        elif kind == "O":
            distinct = pd.unique(values)
            if not all(isinstance(v, str) and v and not _quoted(v) for v in distinct):
                return None
            arrays.append(pa.array(values, type=pa.string()))
        else:
            return None
    return pa.Table.from_arrays(arrays, names=[str(c) for c in frame.columns])


def _quoted(text: str) -> bool:
    """pandas quotes a field (csv.QUOTE_MINIMAL) that holds a separator, quote or newline."""
    return any(ch in text for ch in _NEEDS_QUOTES)
