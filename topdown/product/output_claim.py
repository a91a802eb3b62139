"""Claiming an output folder for one run: exclusive, released on exit, never deleting others' files.

A release folder is written into a hidden sibling (``.NAME.partial-*``) and moved into place at
the end. Between the start of a run and that move, the output path must stay the run's: a
second run of the same path is refused (one of the two releases would otherwise be lost
silently), and a folder that appears at the path meanwhile is not the run's to replace or
delete. ``OutputClaim`` holds an exclusive ``flock`` on ``.NAME.lock`` beside the output for the
whole run; the kernel drops it when the process dies, so a killed run never leaves a stale
claim, and the next run of the same path removes the killed run's leftovers.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from topdown.errors import TopDownError
from topdown.support.leftovers import owner_tag, remove_leftovers

__all__ = ["OutputExistsError", "OutputClaim", "FileClaim", "check_output", "claim_output"]

log = logging.getLogger(__name__)

_Claim = TypeVar("_Claim", bound="FileClaim")


class OutputExistsError(TopDownError, ValueError):
    """The output folder cannot be claimed: it exists (and ``overwrite`` was not asked for),
    another run is writing it, it holds an input, or its parent cannot be written."""


def check_output(out: Path, overwrite: bool, *, inputs: Sequence[Path] = ()) -> None:
    """Fail early (before any work) if ``out`` cannot be written.

    ``inputs`` (the config, the data, the truth) must not be inside ``out`` (by path, through
    a symbolic link, or as a hard link under it): replacing the folder would delete them; and
    ``out`` must not be inside an input (a Parquet dataset folder would gain the release).
    """
    out = Path(out).absolute()
    linked = _identities(out) if out.is_dir() else {}
    for item in inputs:
        resolved = Path(item).absolute().resolve()
        if resolved == out.resolve() or out.resolve() in resolved.parents:
            raise OutputExistsError(
                f"output folder {str(out)!r} holds the input {str(item)!r}; writing the release "
                "there would replace it: choose another --out"
            )
        if resolved in out.resolve().parents:
            raise OutputExistsError(
                f"output folder {str(out)!r} is inside the input {str(item)!r}; writing the "
                "release there would change it: choose another --out"
            )
        held = linked.get(_identity_followed(resolved) or (-1, -1))
        if held is not None:
            raise OutputExistsError(
                f"output folder {str(out)!r} holds {str(held)!r}, a hard link to the input "
                f"{str(item)!r}; writing the release there would replace it: choose another --out"
            )
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"output path {str(out)!r} exists and is not a folder")
    if out.exists() and not overwrite:
        raise OutputExistsError(
            f"output folder {str(out)!r} already exists; pass --overwrite to replace it"
        )
    if not out.parent.is_dir():
        raise OutputExistsError(
            f"the parent folder of the output {str(out.parent)!r} does not exist"
        )
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise OutputExistsError(
            f"the parent folder of the output {str(out.parent)!r} is not writable"
        )


def _identity_followed(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file ``path`` names (a symlink followed), or None if absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _identities(folder: Path) -> dict[tuple[int, int], Path]:
    """(device, inode) -> path of every regular file under ``folder`` (links not followed)."""
    out: dict[tuple[int, int], Path] = {}
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                out[(st.st_dev, st.st_ino)] = path
    return out


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path`` itself (a symlink is not followed), or None if absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


class FileClaim:
    """The right to write one output (``topdown synth``'s table, ledger and report), held
    from the start of a run to its end: an exclusive ``flock`` on ``.NAME.lock`` beside it. A
    second run of the same output is refused, naming the first run's process; the kernel drops
    the claim when the process dies. ``OutputClaim`` adds what a release folder needs."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out).absolute()
        self.lock_path = self.out.parent / f".{self.out.name}.lock"
        self._fd: int | None = _lock(self.lock_path, self.out)

    def release(self) -> None:
        """Give the claim up (the lock file is removed while still held, then closed)."""
        _unlock(self.lock_path, self._fd)
        self._fd = None

    def __enter__(self: _Claim) -> _Claim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class OutputClaim(FileClaim):
    """The right to write one output folder, held from the start of a run to its end.

    Why: two runs writing the same ``--out`` must not both succeed (one release would be lost
    silently), and a folder that appears at the output path while a run computes is not the
    run's to delete. The claim is an exclusive ``flock`` on a hidden lock file beside the
    output (``.NAME.lock``): the kernel drops it when the process dies, so a killed run never
    leaves a stale claim. Holding it, the run knows that any ``.NAME.partial-*`` or
    ``.NAME.old-*`` folder is left over from a killed run, and removes it. At the end,
    ``install`` moves the finished folder into place only if the output path is as it was
    when claimed (absent, or the same folder when ``overwrite``).
    """

    def __init__(self, out: Path, overwrite: bool, *, inputs: Sequence[Path] = ()):
        self.out = Path(out).absolute()
        self.overwrite = overwrite
        self.installed = False  # True once the finished folder is in place (``install``)
        check_output(self.out, overwrite, inputs=inputs)
        super().__init__(self.out)
        try:
            check_output(self.out, overwrite, inputs=inputs)  # again, now that it is ours
            self._remove_leftovers()
        except BaseException:
            self.release()
            raise
        self.existed = _identity(self.out)

    def _remove_leftovers(self) -> None:
        # the run's folder, the replaced release's trash and a streamed run's working folder
        # (named after the run's folder): under the claim, no other run writes these names
        name = self.out.name
        prefixes = (f".{name}.partial-", f".{name}.old-", f"..{name}.partial-")
        remove_leftovers(self.out.parent, prefixes, claimed=True)

    def new_partial(self) -> Path:
        """A fresh hidden folder beside the output, for the run to write into (named after
        this process, so that a later run can tell it is a leftover once the process is gone)."""
        prefix = f".{self.out.name}.partial-{owner_tag()}-"
        return Path(tempfile.mkdtemp(prefix=prefix, dir=self.out.parent))

    def install(self, tmp: Path) -> None:
        """Move the finished folder ``tmp`` to the output path, re-checking that path first."""
        out, now = self.out, _identity(self.out)
        if now is not None and (not self.overwrite or now != self.existed):
            raise OutputExistsError(
                f"{str(out)!r} appeared (or was replaced) while this run computed; it was left "
                "as it is and nothing was written"
            )
        trash: Path | None = None
        try:
            if now is not None:
                prefix = f".{out.name}.old-{owner_tag()}-"
                trash = Path(tempfile.mkdtemp(prefix=prefix, dir=out.parent))
                os.replace(out, trash / out.name)
            os.replace(tmp, out)  # fails if a non-empty folder appeared at ``out`` meanwhile
            self.installed = True
        except BaseException:
            if trash is not None and not out.exists() and (trash / out.name).exists():
                os.replace(trash / out.name, out)  # the swap failed: put the old release back
            if trash is not None and (trash / out.name).exists():
                log.error("the previous %s could not be put back; it is kept in %s", out, trash)
            elif trash is not None:
                trash.rmdir()
            raise
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)


def _lock(lock_path: Path, out: Path) -> int:
    """An exclusive ``flock`` on ``lock_path`` (created if absent) holding our process id;
    refused, naming the holder's process id, if another run holds it."""
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as err:
            raise OutputExistsError(
                f"cannot create the lock {str(lock_path)!r} beside the output: {err.strerror}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise OutputExistsError(
                f"another topdown run (process {owner}) is writing {str(out)!r}; wait "
                "for it or choose another --out"
            ) from None
        # the file may have been unlinked by the previous holder between open and flock
        if _identity(lock_path) == (os.fstat(fd).st_dev, os.fstat(fd).st_ino):
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
            return fd
        os.close(fd)


def _unlock(lock_path: Path, fd: int | None) -> None:
    """Remove the lock file while still holding it (if it is still ours), then close it."""
    if fd is None:
        return
    with contextlib.suppress(FileNotFoundError):
        if _identity(lock_path) == (os.fstat(fd).st_dev, os.fstat(fd).st_ino):
            lock_path.unlink()
    os.close(fd)


def claim_output(out: Path, overwrite: bool, *, inputs: Sequence[Path] = ()) -> OutputClaim:
    """Claim ``out`` for one run (see ``OutputClaim``); use it as a context manager."""
    return OutputClaim(out, overwrite, inputs=inputs)
