"""Errors raised by samplers, mechanisms and the privacy accountant.

Messages name the argument, show its value and state the rule (``scale (-1) must be > 0``).
"""

from __future__ import annotations

__all__ = ["MechanismError", "BudgetError"]


class MechanismError(ValueError):
    """Bad input to a sampler or mechanism: a scale, a vector, a domain, an unknown name."""


class BudgetError(ValueError):
    """A privacy budget that is zero, negative, NaN, infinite, or of the wrong kind."""
