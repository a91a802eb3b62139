"""Problems to and from MPS files, so other solvers (and their authors' tools) can read them.

The writer hands the model to HiGHS exactly as the ``highs`` backend does
(``HighsBackend._pass_model``) and lets HiGHS's own MPS writer save it: columns, rows (ranged
rows in a RANGES section), bounds, integer markers, the objective constant (as the negated
right-hand side of the objective row) and, for a QP, the Hessian's lower triangle in a
``QUADOBJ`` section. HiGHS and :class:`Problem` both minimise ``1/2 x'Px + c'x + offset``, so
the Hessian is written and read without rescaling.

HiGHS writes numbers with 15 significant digits, so a problem read back equals the original to
about 1e-15 relative (a ranged row's lower bound is rebuilt as ``ub - range``), which is far
below any solver's tolerance; integers (counts, bounds, window widths) come back exactly.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from solvers.backends.highs import HighsBackend, new_highs
from solvers.problem import Problem

__all__ = ["read_problem", "write_problem"]

logger = logging.getLogger(__name__)

_SUFFIXES = (".mps",)


def _highs() -> Any:
    h = new_highs()
    h.setOptionValue("output_flag", False)
    return h


def _check_suffix(path: Path) -> None:
    if path.suffix.lower() not in _SUFFIXES:
        raise ValueError(
            f"path ({str(path)!r}) must end in .mps (free MPS; a QP's Hessian goes in QUADOBJ)"
        )


def write_problem(problem: Problem, path: str | Path) -> Path:
    """Write ``problem`` to ``path`` (``.mps``) through HiGHS's model writer.

    Returns:
        The path written.

    Raises:
        ValueError: ``path`` does not end in ``.mps``.
        OSError: HiGHS could not write the file.
    """
    import highspy

    path = Path(path)
    _check_suffix(path)
    h = _highs()
    HighsBackend._pass_model(h, problem)
    if problem.offset:
        h.changeObjectiveOffset(problem.offset)
    status = h.writeModel(str(path))
    if status == highspy.HighsStatus.kError or not path.exists():
        raise OSError(f"HiGHS could not write problem {problem.name!r} to {str(path)!r}")
    return path


def read_problem(path: str | Path, *, name: str | None = None) -> Problem:
    """Read an MPS file (LP, MILP, or QP with ``QUADOBJ``/``QMATRIX``) into a :class:`Problem`.

    A maximisation is turned into the equivalent minimisation (objective, Hessian and constant
    negated), so :attr:`Problem.objective_value` of the answer is the negated maximum.

    Args:
        path: the file.
        name: the problem's name (default: the file name without its suffix).

    Raises:
        FileNotFoundError: no such file.
        ValueError: HiGHS could not read it.
    """
    import highspy

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"problem file ({str(path)!r}) does not exist")
    h = _highs()
    if h.readModel(str(path)) == highspy.HighsStatus.kError:
        raise ValueError(f"problem file ({str(path)!r}) is not a model HiGHS can read")
    model = h.getModel()
    lp = model.lp_
    n, m = int(lp.num_col_), int(lp.num_row_)
    sign = -1.0 if lp.sense_ == highspy.ObjSense.kMaximize else 1.0
    a = lp.a_matrix_
    shape = (m, n)
    if a.format_ == highspy.MatrixFormat.kRowwise:
        A = sp.csr_matrix((a.value_, a.index_, a.start_), shape=shape)
    else:
        A = sp.csc_matrix((a.value_, a.index_, a.start_), shape=shape).tocsr()
    integrality = None
    if len(lp.integrality_):
        kinds = np.array([int(t) for t in lp.integrality_])
        if np.any((kinds != 0) & (kinds != 1)):
            raise ValueError(
                f"problem file ({str(path)!r}) has semi-continuous or semi-integer columns, "
                "which Problem does not represent"
            )
        integrality = kinds == 1
    return Problem(
        c=sign * np.asarray(lp.col_cost_, dtype=float),
        lb=np.asarray(lp.col_lower_, dtype=float),
        ub=np.asarray(lp.col_upper_, dtype=float),
        P=_hessian(model.hessian_, n, sign),
        A=A if m else None,
        row_lb=np.asarray(lp.row_lower_, dtype=float) if m else None,
        row_ub=np.asarray(lp.row_upper_, dtype=float) if m else None,
        integrality=integrality,
        offset=sign * float(lp.offset_),
        name=path.stem if name is None else name,
    )


def _hessian(hessian: Any, n: int, sign: float) -> sp.csc_matrix | None:
    """HiGHS's Hessian (its lower triangle, or the full square) as the symmetric ``P``."""
    import highspy

    if int(hessian.dim_) == 0 or not len(hessian.value_):
        return None
    Q = sp.csc_matrix(
        (np.asarray(hessian.value_, dtype=float), hessian.index_, hessian.start_), shape=(n, n)
    )
    if hessian.format_ == highspy.HessianFormat.kTriangular:
        lower = sp.tril(Q, format="csc")
        Q = (lower + sp.tril(lower, k=-1, format="csc").T).tocsc()
    return sign * Q
