"""The root of every error the project raises on purpose.

Each package owns its errors (``constraints.errors``, ``mechanisms.errors``, ``solvers.status``,
``topdown.errors``); all of them derive from :class:`TopDownError`, so one ``except
TopDownError`` catches anything the project reports, whichever package found it. The root lives
in its own dependency-free package because the other packages do not import each other.

Bad input also subclasses ``ValueError`` and a failed run ``RuntimeError``, so callers that know
only Python's built-ins still catch them.
"""

from __future__ import annotations

__all__ = ["TopDownError"]


class TopDownError(Exception):
    """Base of the project's errors: bad input (also a ValueError) or a failed run."""
