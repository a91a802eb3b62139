"""Tables over sets of attributes: the arithmetic every other module of the model uses.

A table over attributes ``attrs`` (positions into the domain, sorted ascending) is a numpy
array with one axis per attribute, in that order. Keeping every clique, separator and
message sorted means a table over a subset lines up with a table over a superset by inserting
axes of length one, so products and messages are broadcasts, never transposes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["expand", "project", "log_project", "logsumexp", "cells"]


def cells(attrs: Sequence[int], sizes: Sequence[int]) -> int:
    """The number of cells of a table over ``attrs``."""
    return math.prod(int(sizes[a]) for a in attrs)


def expand(values: np.ndarray, attrs: Sequence[int], target: Sequence[int]) -> np.ndarray:
    """``values`` (over sorted ``attrs``) as a broadcastable array over sorted ``target``.

    Every attribute of ``attrs`` must be in ``target``; missing axes get length one.
    """
    position = {a: i for i, a in enumerate(attrs)}
    shape = [values.shape[position[a]] if a in position else 1 for a in target]
    return values.reshape(shape)


def project(values: np.ndarray, attrs: Sequence[int], keep: Sequence[int]) -> np.ndarray:
    """Sum ``values`` (over sorted ``attrs``) down to the sorted subset ``keep``."""
    wanted = set(keep)
    axes = tuple(i for i, a in enumerate(attrs) if a not in wanted)
    return values.sum(axis=axes) if axes else values


def logsumexp(values: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """log(sum(exp(values))) over ``axes``, stable for large and for -inf entries."""
    if not axes:
        return values
    top = np.max(values, axis=axes, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(values - top), axis=axes, keepdims=True)) + top
    return np.squeeze(out, axis=axes)


def log_project(values: np.ndarray, attrs: Sequence[int], keep: Sequence[int]) -> np.ndarray:
    """Log-space :func:`project`: log-sum-exp over the attributes not in ``keep``."""
    wanted = set(keep)
    return logsumexp(values, tuple(i for i, a in enumerate(attrs) if a not in wanted))
