"""Optional dependencies: check that an extra is installed, without importing it.

The base install holds what the main job needs (``topdown run`` on the embedded data, the
report with its plots, every solver). Parts only some users need are extras: ``dask`` (the
cluster executor) and ``parquet`` (Parquet input and output). A caller calls :func:`require`
just before its import, so a missing extra fails at once with one line that names the
``pip install`` command, not with a ``ModuleNotFoundError`` from deep inside pandas or Dask
after the measurement step has already run.

The check uses :func:`importlib.util.find_spec` on top-level module names, which looks the
module up without importing it (importing Dask alone takes about a second).
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "MissingDependencyError", "is_installed", "require"]

#: Distribution name on the package index, for the install command in error messages.
DISTRIBUTION = "topdown-dp"

#: Extra name -> the top-level modules it installs (as declared in pyproject.toml).
EXTRAS: dict[str, tuple[str, ...]] = {
    "dask": ("dask", "distributed"),
    "parquet": ("pyarrow",),
}


class MissingDependencyError(ImportError):
    """An optional part was used without its extra installed; the message names the command."""


def is_installed(module: str) -> bool:
    """Whether a top-level ``module`` can be imported, found without importing it."""
    if "." in module:
        # find_spec imports the parent package of a dotted name, which is what this avoids
        raise ValueError(f"module ({module!r}) must be a top-level module name, without dots")
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # in sys.modules with no spec (e.g. a stand-in module in a test)
        return True


def require(extra: str, purpose: str) -> None:
    """Raise :class:`MissingDependencyError` unless every module of ``extra`` is installed.

    Args:
        extra: a key of :data:`EXTRAS` (``"dask"`` or ``"parquet"``).
        purpose: what needs it, for the message (e.g. ``"the dask executor"``).

    Raises:
        MissingDependencyError: naming the missing modules and ``pip install "topdown-dp[extra]"``.
        ValueError: ``extra`` is not a known extra.

    Example:
        >>> is_installed("numpy"), is_installed("surely_not_a_module_name")
        (True, False)
        >>> require("gpu", "nothing")
        Traceback (most recent call last):
        ...
        ValueError: extra ('gpu') is unknown; known extras are ['dask', 'parquet']
    """
    if extra not in EXTRAS:
        raise ValueError(f"extra ({extra!r}) is unknown; known extras are {sorted(EXTRAS)}")
    missing = [module for module in EXTRAS[extra] if not is_installed(module)]
    if missing:
        raise MissingDependencyError(
            f"{purpose} needs {' and '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed; install the "
            f'{extra!r} extra: pip install "{DISTRIBUTION}[{extra}]"'
        )
