"""Solver backends: one adapter per solver library, each mapping its own statuses.

Backend modules import their solver library lazily (inside ``solve``), so importing this
package never fails because an optional solver is missing.
"""

from solvers.backends.base import Backend, BackendProtocol
from solvers.backends.closed_form import ClosedFormBackend
from solvers.backends.cvxpy_backend import CvxpyBackend
from solvers.backends.highs import HighsBackend
from solvers.backends.scipy_backend import ScipyBackend

__all__ = [
    "Backend",
    "BackendProtocol",
    "ClosedFormBackend",
    "CvxpyBackend",
    "HighsBackend",
    "ScipyBackend",
]
