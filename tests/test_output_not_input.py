"""An output never resolves to an input (issue 30 B1).

``topdown synth classcond data.csv --out data.csv --overwrite`` replaced the input data;
``--out`` could also name the ``--domains`` file, or its ledger (``NAME.ledger.json``) be it.
Same path, symbolic link or hard link: refused before any work, exit 2, the input intact.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_helpers import synth_files
from test_cli import small_project

from synth.cli import main as synth_main
from topdown.product.cli import main


@pytest.fixture()
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    return synth_files(tmp_path)


def _out_cases(tmp_path: Path, data: Path, domains: Path) -> dict[str, tuple[Path, Path]]:
    """case -> (--out, the input it resolves to)."""
    link = tmp_path / "link.csv"
    link.symlink_to(data)
    hard = tmp_path / "hard.csv"
    os.link(data, hard)
    # --out domains.csv writes its ledger as domains.ledger.json: make that the domains file
    ledger_domains = tmp_path / "meta.ledger.json"
    ledger_domains.write_text(domains.read_text())
    return {
        "same path": (data, data),
        "relative path": (Path(os.path.relpath(data)), data),
        "symbolic link": (link, data),
        "hard link": (hard, data),
        "ledger is --domains": (tmp_path / "meta.csv", ledger_domains),
    }


@pytest.mark.parametrize(
    "case", ["same path", "relative path", "symbolic link", "hard link", "ledger is --domains"]
)
def test_synth_refuses_an_output_that_is_an_input(inputs, tmp_path, capsys, case) -> None:
    data, domains = inputs
    out, victim = _out_cases(tmp_path, data, domains)[case]
    if case == "ledger is --domains":
        domains = victim
    before = victim.read_bytes()
    argv = ["classcond", str(data), "--epsilon", "1", "--domains", str(domains)]
    assert synth_main([*argv, "--out", str(out), "--overwrite", "--seed", "1"]) == 2
    err = capsys.readouterr().err
    name = "--domains" if case == "ledger is --domains" else "data"
    assert f"is the input {name} ({str(victim)!r}" in err and "--out" in err
    assert "would destroy the input: choose another --out" in err
    assert victim.read_bytes() == before


def test_synth_to_another_file_still_works(inputs, tmp_path, capsys) -> None:
    data, domains = inputs
    out = tmp_path / "synthetic.csv"
    argv = ["classcond", str(data), "--epsilon", "1", "--domains", str(domains)]
    assert synth_main([*argv, "--out", str(out), "--seed", "1"]) == 0
    assert out.is_file()
    capsys.readouterr()


def test_run_refuses_an_output_holding_or_inside_an_input(tmp_path, capsys) -> None:
    config = small_project(tmp_path)
    data = tmp_path / "small.csv"
    before = data.read_bytes()
    # a symbolic link to the folder holding the data
    link = tmp_path / "linked"
    link.symlink_to(tmp_path)
    assert main(["-q", "run", str(config), "--out", str(link), "--overwrite"]) == 2
    assert "holds the input" in capsys.readouterr().err
    # a folder holding a hard link to the data
    held = tmp_path / "held"
    held.mkdir()
    os.link(data, held / "copy.csv")
    assert main(["-q", "run", str(config), "--out", str(held), "--overwrite"]) == 2
    assert "a hard link to the input" in capsys.readouterr().err
    assert (held / "copy.csv").is_file() and data.read_bytes() == before


def test_check_output_refuses_a_folder_inside_an_input_folder(tmp_path) -> None:
    from topdown.product.output_claim import OutputExistsError, check_output

    dataset = tmp_path / "dataset"  # a Parquet dataset folder
    dataset.mkdir()
    with pytest.raises(OutputExistsError, match=r"is inside the input .*dataset"):
        check_output(dataset / "rel", False, inputs=[dataset])
