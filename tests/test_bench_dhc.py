"""``benchmarks/bench_dhc.py``'s coarsened domain for ``--dense-check`` and its argument rules."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.bench_dhc import SMALL, _small_state, main
from benchmarks.dhc import make_dhc_state


def test_the_coarsened_state_fits_its_1120_cell_schema() -> None:
    records, geography, schema = _small_state(2000, 3)
    assert schema.domain.size == 4 * 2 * 10 * 2 * 7 == 1120
    assert len(records) == 2000
    for column, (_, values) in SMALL.items():
        assert set(np.unique(records[column])) <= set(values), column
    # every record lands in a cell of the schema, and every tract is in the geography
    cells = schema.encode_cells(records)
    assert cells.min() >= 0 and cells.max() < 1120
    assert set(records["TRACT"]) <= set(geography["TRACT"])
    # each column is the DHC record's value coarsened as documented, row by row
    full = make_dhc_state(2000, 3).records
    assert np.array_equal(records["RELGQ"], full["RELGQ"] // 11)
    assert np.array_equal(records["AGE"], np.minimum(full["AGE"] // 12, 9))
    assert np.array_equal(records["CENRACE"], np.minimum(full["CENRACE"], 7))
    assert np.array_equal(records["SEX"], full["SEX"])


@pytest.mark.parametrize(
    "argv", [["--dense-check", "--strategy", "preset"], ["--dense-check", "--only-detailed"]]
)
def test_dense_check_refuses_other_modes(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    assert "--dense-check runs the four-query strategy" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [["--to", "block"], ["--to", "block", "--strategy", "preset", "--compare-estimators"]],
)
def test_to_refuses_what_it_does_not_apply_to(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    assert "--to needs --strategy preset" in capsys.readouterr().err
