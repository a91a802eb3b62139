"""An interrupt says what state the output is in, in one line (issue 30 B5).

Before: an interrupt that landed after the release folder was in place said "nothing was
written" (or, after ``main`` returned, killed the process with no message), although the
release was complete.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import data_config, embedded_subset

from topdown.product import cli
from topdown.product.cli import main
from topdown.product.output_claim import OutputClaim


def _config(folder: Path) -> Path:
    embedded_subset(("01",), 60).to_csv(folder / "data.csv", index=False)
    (folder / "c.toml").write_text(data_config(4, ("STATE",)), encoding="utf-8")
    return folder / "c.toml"


def _wait_until_numpy_is_loading(proc: subprocess.Popen[str]) -> None:
    """Return once numpy's compiled core is mapped into ``proc``: the entry point has installed
    its handlers (numpy is first imported after it) and the command line's imports are running
    (pandas and the engine follow numpy). A fixed sleep signalled before the interpreter had
    started under load (the test then saw Python's own exit 1, or -15)."""
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if "_multiarray_umath" in maps.read_text():
                return
        except (FileNotFoundError, ProcessLookupError):
            pass
        assert proc.poll() is None, "the program ended before it imported numpy"
        time.sleep(0.005)
    raise AssertionError("numpy was not loaded within 120 s")


@pytest.mark.parametrize(
    ("signal_exc", "code", "what"),
    [(KeyboardInterrupt, 130, "interrupted"), (cli._Terminated, 143, "terminated (SIGTERM)")],
)
def test_an_interrupt_after_the_folder_is_in_place_says_it_is_complete(
    tmp_path: Path, capsys, monkeypatch, signal_exc, code: int, what: str
) -> None:
    real = OutputClaim.install

    def install_then_signal(self, tmp):
        real(self, tmp)
        raise signal_exc  # the signal lands right after the rename

    monkeypatch.setattr(OutputClaim, "install", install_then_signal)
    out = tmp_path / "rel"
    assert main(["-q", "run", str(_config(tmp_path)), "--out", str(out)]) == code
    err = capsys.readouterr().err
    assert (
        f"topdown: {what} after the output was complete: {str(out)!r} is in place and whole"
    ) in err
    assert "nothing was written" not in err
    monkeypatch.setattr(OutputClaim, "install", real)
    assert main(["-q", "check", str(out)]) == 0  # it is indeed complete


def test_an_interrupt_before_the_folder_is_in_place_says_nothing_was_written(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    def interrupted(self, tmp):
        raise KeyboardInterrupt

    monkeypatch.setattr(OutputClaim, "install", interrupted)
    out = tmp_path / "rel"
    assert main(["-q", "run", str(_config(tmp_path)), "--out", str(out)]) == 130
    assert "topdown: interrupted; nothing was written" in capsys.readouterr().err
    assert not out.exists()


def test_the_line_after_main_returned(tmp_path: Path) -> None:
    """``run``'s late handler prints the same line (the claim of the finished run)."""
    cli._CLAIMS.clear()
    assert cli.interrupted_line("interrupted") == "topdown: interrupted; nothing was written"
    claim = OutputClaim(tmp_path / "x", False)
    try:
        claim.installed = True
        cli._CLAIMS.append(claim)
        assert cli.interrupted_line("terminated (SIGTERM)").startswith(
            f"topdown: terminated (SIGTERM) after the output was complete: {str(tmp_path / 'x')!r}"
        )
    finally:
        cli._CLAIMS.clear()
        claim.release()


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(
    not Path("/proc/self/maps").exists(), reason="POSIX signals; /proc shows the imports"
)
@pytest.mark.parametrize(
    ("signum", "code", "line"),
    [
        (signal.SIGINT, 130, "topdown: interrupted"),
        (signal.SIGTERM, 143, "topdown: terminated (SIGTERM)"),
    ],
)
def test_an_interrupt_while_the_program_starts_is_one_line(
    tmp_path: Path, signum: int, code: int, line: str
) -> None:
    """Ctrl-C while numpy, pandas and the engine are imported: one line, no traceback."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "topdown", "-q", "run", "--out", str(tmp_path / "rel")]
    # started as from a terminal: SIGINT at its default. A non-interactive shell's background
    # job (`cmd &`, no job control) starts with SIGINT ignored, a child inherits that, and
    # Python then installs no KeyboardInterrupt handler: run that way, the test suite saw
    # this case's run complete (exit 0). The test must not depend on how pytest was started.
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _wait_until_numpy_is_loading(proc)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, (
        err,
        "parent's SIGINT handler",
        signal.getsignal(signal.SIGINT),
    )
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(line) and "nothing was written" in err, err
    assert not (tmp_path / "rel").exists()
