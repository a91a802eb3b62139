"""Defects the input property tests (``test_input_properties.py``) found, one worked case each:
an input that raised another exception type than ``TopDownError``."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from cli_helpers import data_config, embedded_subset

from constraints.domain import Domain
from constraints.errors import ConstraintError, DomainError
from topdown.product.config import ConfigError, parse_config


def test_an_unhashable_domain_value_is_a_domain_error() -> None:
    """Before: ``TypeError: unhashable type: 'list'`` from the value lookup."""
    with pytest.raises(DomainError, match=r"values of attribute 'a' hold \[\], which is not hash"):
        Domain({"a": [[], 1]})


def test_a_list_inside_a_configs_values_is_a_config_error(tmp_path: Path) -> None:
    raw = tomllib.loads(data_config(4, ("STATE", "PUMA")))
    raw["schema"]["attributes"][0]["values"][0] = []
    with pytest.raises(ConfigError, match=r"schema.*\[\], which is not hashable"):
        parse_config(raw, "c.toml", base=tmp_path)


def test_a_list_of_constraints_is_a_constraint_error(tmp_path: Path) -> None:
    """Before: ``AttributeError: 'list' object has no attribute 'validate'``."""
    import topdown
    from topdown.product.cli import load_data
    from topdown.product.config import load_config

    (tmp_path / "c.toml").write_text(data_config(4, ("STATE", "PUMA")), encoding="utf-8")
    embedded_subset(("01",), 20).to_csv(tmp_path / "data.csv", index=False)
    cfg = load_config(tmp_path / "c.toml")
    rule = r"constraints \(\[\]\) must be a ConstraintSet or None"
    with pytest.raises(ConstraintError, match=rule):
        topdown.release(load_data(cfg), cfg.schema, cfg.strategy, constraints=[])


@pytest.mark.parametrize("options", [True, [[]], {1: 2}])
def test_solver_options_that_are_not_a_table_are_an_options_error(options, tmp_path) -> None:
    """Before: ``TypeError: 'bool' object is not iterable``, ``ValueError: dictionary update
    sequence element #0 has length 0`` or ``TypeError: keywords must be strings``."""
    import topdown
    from topdown.errors import OptionsError
    from topdown.product.cli import load_data
    from topdown.product.config import load_config

    (tmp_path / "c.toml").write_text(data_config(4, ("STATE", "PUMA")), encoding="utf-8")
    embedded_subset(("01",), 20).to_csv(tmp_path / "data.csv", index=False)
    cfg = load_config(tmp_path / "c.toml")
    rule = r"solver_options \(.*\) must be None or a mapping option name -> value"
    with pytest.raises(OptionsError, match=rule):
        topdown.release(load_data(cfg), cfg.schema, cfg.strategy, solver_options=options)


@pytest.mark.parametrize("fraction", [None, "0.1", True])
def test_dp2pubs_structure_fraction_must_be_a_number(fraction) -> None:
    """Before: ``TypeError: '<' not supported between instances of 'int' and 'NoneType'``."""
    from synth import DP2Pub
    from synth._domains import SynthError

    with pytest.raises(SynthError, match=r"structure_fraction \(.*\) must be in \(0, 1\)"):
        DP2Pub(1, structure_fraction=fraction)


@pytest.mark.parametrize("seed", [False, [], "3"])
def test_adaptives_seed_is_checked(seed) -> None:
    """Before: ``TypeError: seed (False) must be an int, not a bool`` from the generator."""
    from synth import Adaptive
    from topdown.errors import TopDownError

    with pytest.raises(TopDownError, match=r"seed \(.*\) must be a non-negative integer or None"):
        Adaptive(1, seed=seed)


@pytest.mark.parametrize("workload", [5, "ab", [["a", 1]], [("a",), 2]])
def test_adaptives_workload_must_be_lists_of_column_names(workload) -> None:
    """Before: ``TypeError: 'int' object is not iterable``; a string was read as characters."""
    from synth import Adaptive
    from synth._domains import SynthError

    with pytest.raises(SynthError, match=r"workload \(.*\) must be a list of marginals"):
        Adaptive(1, workload=workload)


def test_crosstab_columns_must_be_names() -> None:
    """Before: ``TypeError: unhashable type: 'list'`` from the fit."""
    from synth import NoisyCrosstab
    from synth._domains import SynthError

    with pytest.raises(SynthError, match=r"columns \(\[\[\], None\]\) must be column names"):
        NoisyCrosstab(1, columns=[[], None])
