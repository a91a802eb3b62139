"""Temporary outputs named for the process that writes them, and their removal once it is gone.

Every output is written under a hidden temporary name beside its final one and renamed into
place at the end (a release folder, a streamed release's working folder, ``topdown synth``'s
table, ledger and report). A run killed with SIGKILL (or by a power cut) cannot remove its
temporaries; left alone they would survive every later run. So each temporary name carries its
owner, ``PID-START`` (the process id and the process's start time in clock ticks since boot,
read from ``/proc``), and the next run of the same output removes those whose owner is gone.

Why the start time: process ids are reused. An id alone would make a long-dead run's leftover
look alive whenever another process happens to have its id (leaving it forever), or, the other
way round, a check by id alone could not tell a reused id from the owner. With the start time, a
process with the recorded id but another start time is not the owner. Where ``/proc`` is not
available the start time is recorded as 0 and an owner whose id is alive is taken as alive: a
leftover may then stay, but nothing a running process writes is ever removed.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

__all__ = ["owner_tag", "owner_gone", "remove_leftovers"]

log = logging.getLogger(__name__)

#: ``PID-START`` at the start of what follows a temporary name's prefix
_TAG = re.compile(r"(\d+)-(\d+)(?=$|[-.])")


def _start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot, field 22 of
    ``/proc/PID/stat``); None if the process does not exist or is a zombie (a killed process
    its parent has not reaped writes nothing); 0 where ``/proc`` cannot tell."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None  # /proc works and has no such process
        return 0 if _pid_exists(pid) else None
    except OSError:
        return 0 if _pid_exists(pid) else None
    # the command name (field 2) is in parentheses and may hold spaces or parentheses itself
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def owner_tag() -> str:
    """This process's ``PID-START``, for the names of the temporaries it writes."""
    pid = os.getpid()
    return f"{pid}-{_start_time(pid) or 0}"


def owner_gone(tail: str) -> bool | None:
    """Whether the owner named at the start of ``tail`` (``PID-START...``) has ended: True if
    no process has that id, or the one that has it started at another time; False if it runs;
    None if ``tail`` names no owner."""
    match = _TAG.match(tail)
    if match is None:
        return None
    pid, start = int(match[1]), int(match[2])
    now = _start_time(pid)
    if now is None:
        return True
    return start != 0 and now != 0 and now != start


def remove_leftovers(
    folder: Path, prefixes: tuple[str, ...], *, claimed: bool = False
) -> list[Path]:
    """Remove the entries of ``folder`` whose names start with one of ``prefixes`` and whose
    owner (named right after the prefix) has ended; log one line naming them.

    Args:
        folder: where the temporaries are (the output's parent folder).
        prefixes: the temporary names' prefixes, each followed by the owner's ``PID-START``.
        claimed: the caller holds the output's exclusive claim (``FileClaim``), so nothing
            else writes these names: an entry naming no owner (written by an older version)
            is a leftover too. An entry whose owner runs is left alone either way.

    Returns:
        The paths removed.
    """
    removed: list[Path] = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return removed
    for name in names:
        prefix = next((p for p in prefixes if name.startswith(p)), None)
        if prefix is None:
            continue
        gone = owner_gone(name[len(prefix) :])
        if not (gone or (gone is None and claimed)):
            continue
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        if not os.path.lexists(path):
            removed.append(path)
    if removed:
        log.warning(
            "removed %s, left over by an interrupted run whose process is gone",
            ", ".join(str(p) for p in removed),
        )
    return removed
