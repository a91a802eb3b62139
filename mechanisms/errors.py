"""Errors raised by samplers, mechanisms and the privacy accountant.

Messages name the argument, show its value and state the rule (``scale (-1) must be > 0``).
Both derive from the project's root error (``tderrors.TopDownError``) and from ValueError.
"""

from __future__ import annotations

from tderrors import TopDownError

__all__ = ["MechanismError", "BudgetError"]


class MechanismError(TopDownError, ValueError):
    """Bad input to a sampler or mechanism: a scale, a vector, a domain, an unknown name."""


class BudgetError(TopDownError, ValueError):
    """A privacy budget that is zero, negative, NaN, infinite, or of the wrong kind."""
