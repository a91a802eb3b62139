"""Write errors that name the file being written.

An ``OSError`` raised while data is written (ENOSPC, "No space left on device", EIO, EDQUOT)
often carries no file name: pandas, pyarrow and ``Path.write_text`` report the errno of a
``write`` or ``close``. :func:`naming` re-raises it (the same ``OSError`` subclass and errno)
with the path, so the message a user sees says which file could not be written.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["naming", "write_text"]


@contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """Within the block, an ``OSError`` without the file's name gets ``path`` as its name."""
    try:
        yield
    except OSError as err:
        if err.filename is not None and str(err.filename) == str(path):
            raise
        raise OSError(err.errno, err.strerror or str(err), str(path)) from err


def write_text(path: Path, text: str) -> None:
    """``path.write_text(text)`` (UTF-8) whose errors name ``path`` (see ``naming``)."""
    with naming(path):
        path.write_text(text, encoding="utf-8")
