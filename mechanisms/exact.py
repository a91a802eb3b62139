"""Exact conversion of user parameters to Fractions.

Privacy outcomes are decided with integers and Fractions only. A float given by a user is
converted with ``Fraction(float)``, which is exact (the float's binary value, not its decimal
spelling); a string such as ``"0.3"`` is read as the decimal it spells (3/10).
"""

from __future__ import annotations

import math
import operator
from fractions import Fraction
from numbers import Rational
from typing import SupportsIndex

from mechanisms.errors import MechanismError

__all__ = ["Exact", "as_fraction"]

Exact = int | Fraction | float | str


def as_fraction(
    value: object,
    name: str,
    *,
    allow_zero: bool = False,
    error: type[ValueError] = MechanismError,
) -> Fraction:
    """Convert ``value`` to a Fraction exactly, refusing anything that is not a finite number
    greater than zero (or >= 0 with ``allow_zero``).

    Args:
        value: int, Fraction, float (converted exactly), or decimal string.
        name: the argument's name, for the error message.
        allow_zero: accept 0.
        error: exception class to raise (``BudgetError`` for budgets).

    Raises:
        error: naming ``name``, showing the value and stating the rule.

    Example: a decimal string is the number it reads as; a float is the binary number it holds.

        >>> as_fraction("0.1", "epsilon"), as_fraction(0.1, "epsilon")
        (Fraction(1, 10), Fraction(3602879701896397, 36028797018963968))
        >>> as_fraction(-1, "epsilon")
        Traceback (most recent call last):
        ...
        mechanisms.errors.MechanismError: epsilon (-1) must be > 0
    """
    rule = ">= 0" if allow_zero else "> 0"
    if isinstance(value, bool):
        raise error(f"{name} ({value!r}) must be a finite number {rule}, not a bool")
    if isinstance(value, Fraction):
        frac = value
    elif isinstance(value, (int, Rational)):
        frac = Fraction(int(value.numerator), int(value.denominator))
    elif isinstance(value, float) or hasattr(value, "__float__") and not isinstance(value, str):
        f = float(value)  # numpy floats
        if math.isnan(f) or math.isinf(f):
            raise error(f"{name} ({value!r}) must be a finite number {rule}")
        integer_dtype = hasattr(value, "dtype") and getattr(value.dtype, "kind", "f") in "iu"
        if integer_dtype and isinstance(value, SupportsIndex):  # 0-d integer arrays
            frac = Fraction(operator.index(value))
        else:
            frac = Fraction(f)
    elif isinstance(value, str):
        try:
            frac = Fraction(value.strip())
        except (ValueError, ZeroDivisionError):
            raise error(f"{name} ({value!r}) must be a finite number {rule}") from None
    else:
        raise error(f"{name} ({value!r}) must be a finite number {rule}")
    if frac < 0 or (frac == 0 and not allow_zero):
        raise error(f"{name} ({value!r}) must be {rule}")
    return frac
