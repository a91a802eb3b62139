"""``topdown check`` and ``topdown report --truth`` verify the root-total note without the whole BLUE.

Under the estimator ``"blue"`` with no invariant the passes hold the root's total at the BLUE's,
and the ledger says so (``summary.estimation.root_total``). The check recomputes that note from
the published measurements; it now reads the BLUE's root total from its own block
(``topdown.blue.root_total``) instead of the whole-tree BLUE, which at the DHC persons preset
cost what the release's BLUE did. The verdicts must not change: the same pass, and the same
failure for a note that does not match.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import data_config, embedded_subset

from topdown.blue.estimate import blue
from topdown.product import release_folder
from topdown.product.cli import main
from topdown.product.release_folder import (
    load_release,
    refresh_manifest,
    verify_release_folder,
)


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A release (estimator "blue", the default; no invariant) whose root total is held."""
    base = tmp_path_factory.mktemp("held")
    embedded_subset(("01", "08"), rows_per_state=300).to_csv(base / "data.csv", index=False)
    (base / "c.toml").write_text(data_config(4, ("STATE", "PUMA")), encoding="utf-8")
    assert main(["-q", "run", str(base / "c.toml"), "--out", str(base / "rel")]) == 0
    return base / "rel"


def _no_whole_blue(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the whole-tree BLUE was computed")

    monkeypatch.setattr(release_folder, "blue", refuse)


def _whole_blue_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """The note recomputed from the whole BLUE, as the check did before."""

    def whole(tree, domain, measurements, *, exact_totals=None):
        return blue(tree, domain, measurements, exact_totals=exact_totals)

    monkeypatch.setattr(release_folder, "root_total_blue", whole)


def _note(folder: Path) -> dict:
    ledger = json.loads((folder / "ledger.json").read_text(encoding="utf-8"))
    return ledger["summary"]["estimation"]["root_total"]


def test_the_check_passes_without_the_whole_blue(
    held: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _note(held)["held"] is True
    with monkeypatch.context() as m:
        _whole_blue_note(m)
        before = verify_release_folder(held)
    _no_whole_blue(monkeypatch)
    after = verify_release_folder(held)
    assert after.ok and after == before
    rel, _ = load_release(held, whole_blue=False)
    assert rel.blue is None
    assert rel.root_total is not None and rel.root_total.to_dict() == _note(held)


def test_a_changed_note_fails_the_same_way(
    held: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note whose BLUE total is off by 0.01 (the manifest re-signed, so only the note is
    wrong): the same failure from the whole BLUE and from the total's block."""
    copy = tmp_path / "copy"
    shutil.copytree(held, copy)
    path = copy / "ledger.json"
    ledger = json.loads(path.read_text(encoding="utf-8"))
    note = ledger["summary"]["estimation"]["root_total"]
    note["blue_total"] = round(note["blue_total"] + 0.01, 2)
    path.write_text(json.dumps(ledger, indent=2) + "\n", encoding="utf-8")
    refresh_manifest(copy, ("ledger.json",))
    with monkeypatch.context() as m:
        _whole_blue_note(m)
        before = verify_release_folder(copy)
    _no_whole_blue(monkeypatch)
    after = verify_release_folder(copy)
    assert not after.ok and after == before
    assert after.checks["ledger.json totals match its entries"] is False
    assert any(
        f.startswith("ledger.json totals match its entries: summary is") for f in after.failures
    )


def test_report_with_truth_without_the_whole_blue(
    held: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(held, copy)
    data = held.parent / "data.csv"
    _no_whole_blue(monkeypatch)
    assert main(["-q", "report", str(copy), "--truth", str(data)]) == 0
    assert (copy / "metrics.csv").is_file()
    assert _note(copy) == _note(held)
    assert main(["-q", "check", str(copy)]) == 0
