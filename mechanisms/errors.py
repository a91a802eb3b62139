"""Errors raised by samplers, mechanisms and the privacy accountant.

Messages name the argument, show its value and state the rule (``scale (-1) must be > 0``).
This module also holds the project's root error, ``TopDownError``: every package's errors
(``constraints.errors``, ``solvers.status``, ``topdown.errors``, ``synth``) derive from it, so one
``except TopDownError`` catches anything the project reports, whichever package found it. It
lives here because ``mechanisms`` is the foundation the other packages build on (randomness and
accounting), and this module imports nothing. Bad input also subclasses ``ValueError`` and a
failed run ``RuntimeError``, so callers that know only Python's built-ins still catch them.
"""

from __future__ import annotations

__all__ = ["TopDownError", "MechanismError", "BudgetError"]


class TopDownError(Exception):
    """Base of the project's errors: bad input (also a ValueError) or a failed run."""


class MechanismError(TopDownError, ValueError):
    """Bad input to a sampler or mechanism: a scale, a vector, a domain, an unknown name."""


class BudgetError(TopDownError, ValueError):
    """A privacy budget that is zero, negative, NaN, infinite, or of the wrong kind."""
