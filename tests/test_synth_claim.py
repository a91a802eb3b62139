"""Two ``topdown synth`` runs to one ``--out``: the second is refused (issue 30 B2).

Both used to exit 0 and print the same path, one result silently replaced. The output is
claimed for the whole run, as ``topdown run`` claims its folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import synth_files

from synth.cli import main
from topdown.product.output_claim import FileClaim


@pytest.fixture()
def argv(tmp_path: Path) -> list[str]:
    data, domains = synth_files(tmp_path)
    return ["classcond", str(data), "--epsilon", "1", "--domains", str(domains), "--seed", "1"]


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_second_run_while_the_first_holds_the_output_is_refused(
    argv, tmp_path, capsys, overwrite
) -> None:
    out = tmp_path / "synthetic.csv"
    with FileClaim(out):  # the first run, still computing
        extra = ["--overwrite"] if overwrite else []
        assert main([*argv, "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert f"another topdown run (process {os.getpid()}) is writing {str(out)!r}" in err
    assert not out.exists() and not (tmp_path / "synthetic.ledger.json").exists()
    # the claim given up, a run goes through and leaves no lock behind
    assert main([*argv, "--out", str(out)]) == 0
    assert out.is_file() and not list(tmp_path.glob(".synthetic.csv.*"))
    capsys.readouterr()


def test_a_claim_held_by_another_process_names_it(argv, tmp_path, capsys) -> None:
    out = tmp_path / "synthetic.csv"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from topdown.product.output_claim import FileClaim\n"
            f"c = FileClaim({str(out)!r}); print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert main([*argv, "--out", str(out), "--overwrite"]) == 2
        assert f"another topdown run (process {holder.pid})" in capsys.readouterr().err
    finally:
        holder.communicate("", timeout=60)
    # the holder exited: the kernel dropped its lock, and the next run claims the output
    assert main([*argv, "--out", str(out)]) == 0
    capsys.readouterr()


def test_the_claim_is_rechecked_once_held(argv, tmp_path, capsys, monkeypatch) -> None:
    """A run that checked --out before another run wrote it finds the output there once it
    holds the claim, and is refused without --overwrite instead of replacing it."""
    import synth.cli as cli

    out = tmp_path / "synthetic.csv"
    real = cli.FileClaim

    def slow_claim(path):
        out.write_text("written by another run meanwhile\n")
        return real(path)

    monkeypatch.setattr(cli, "FileClaim", slow_claim)
    assert main([*argv, "--out", str(out)]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert out.read_text() == "written by another run meanwhile\n"
