"""Property tests: arbitrary inputs give a result or a ``TopDownError``, never another exception
(issue 30, Tests).

Three edges take input from people: the config loader (a file's text, or its parsed table),
the command line (``topdown run`` and ``topdown synth``, whose exit code is 2 for a
``TopDownError`` and 1 for anything else) and the API's arguments (``topdown.release``, the
``synth`` generators). Hypothesis draws each input either from the valid values or from
arbitrary ones (numbers of any size, NaN, text, bytes, nested lists and tables), so most draws
are refused at once and the few accepted ones run a release on tiny data; ``max_examples`` is
kept small so each test takes seconds.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import tomllib
from cli_helpers import data_config, embedded_subset, synth_files
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import topdown
from synth import Adaptive, ClassConditional, DP2Pub, NoisyCrosstab, PrivBayes, generate
from topdown.errors import TopDownError
from topdown.product.cli import load_data, main
from topdown.product.config import load_config, parse_config

#: examples per property: small, so the suite stays quick; a deeper hunt sets
#: TOPDOWN_PROPERTY_EXAMPLES (the defects listed in test_input_property_findings.py were found
#: at 30 to 200)
EXAMPLES = int(os.environ.get("TOPDOWN_PROPERTY_EXAMPLES", "30"))
FAST = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(),
    st.text(max_size=8),
    st.fractions(max_denominator=100),
    st.binary(max_size=4),
)
#: anything a caller might pass: scalars, and lists, tuples and tables of them
ANY = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
#: anything a TOML file can hold (no None, bytes, tuples or Fractions)
TOML_SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.text(max_size=8),
)
TOML_ANY = st.recursive(
    TOML_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
#: command-line tokens: valid-looking and arbitrary ones
TOKENS = st.one_of(
    st.sampled_from(["0", "1", "2", "-1", "0.5", "1/2", "nan", "inf", "1e-400", "1e400", "10"]),
    st.sampled_from(["a", "b", "a b", "", "auto", "blue", "topdown", "serial", "STATE", "PUMA"]),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=6),
)


def _either(valid: list[Any]) -> st.SearchStrategy[Any]:
    """A valid value, or anything."""
    return st.one_of(st.sampled_from(valid), ANY)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("properties")
    embedded_subset(("01", "08"), 60).to_csv(folder / "data.csv", index=False)
    (folder / "c.toml").write_text(data_config(4, ("STATE", "PUMA")), encoding="utf-8")
    (folder / "synth").mkdir()
    synth_files(folder / "synth", n=40)
    return folder


def _result_or_topdown_error(call: Callable[[], object]) -> None:
    try:
        call()
    except TopDownError:
        event("TopDownError")  # --hypothesis-show-statistics: how many draws were refused
    else:
        event("a result")


# -- the config loader -----------------------------------------------------------------------


@FAST
@given(text=st.text(max_size=200))
def test_any_config_text_loads_or_is_a_config_error(project: Path, text: str) -> None:
    path = project / "any.toml"
    path.write_text(text, encoding="utf-8")
    _result_or_topdown_error(lambda: load_config(path))


def _paths(table: dict, prefix: tuple = ()) -> list[tuple]:
    out = []
    for key, value in table.items():
        out.append((*prefix, key))
        if isinstance(value, dict):
            out += _paths(value, (*prefix, key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                out.append((*prefix, key, i))
                if isinstance(item, dict):
                    out += _paths(item, (*prefix, key, i))
    return out


BASE = tomllib.loads(data_config(4, ("STATE", "PUMA")))
PATHS = _paths(BASE)


def _mutated(path: tuple, value: object, delete: bool) -> dict:
    import copy

    raw = copy.deepcopy(BASE)
    node: Any = raw
    for step in path[:-1]:
        node = node[step]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return raw


@FAST
@given(path=st.sampled_from(PATHS), value=TOML_ANY, delete=st.booleans())
def test_any_value_anywhere_in_a_config_parses_or_is_a_config_error(
    project: Path, path: tuple, value: object, delete: bool
) -> None:
    raw = _mutated(path, value, delete)
    _result_or_topdown_error(lambda: parse_config(raw, "c.toml", base=project))


@FAST
@given(line=st.integers(min_value=0, max_value=20), text=st.text(max_size=40))
def test_a_config_with_one_line_replaced_loads_or_is_a_config_error(
    project: Path, line: int, text: str
) -> None:
    lines = data_config(4, ("STATE", "PUMA")).splitlines()
    lines[line % len(lines)] = text
    path = project / "edited.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    _result_or_topdown_error(lambda: load_config(path))


# -- the command line ------------------------------------------------------------------------

_OUTS = itertools.count()

RUN_OPTIONS = ["--seed", "--solver", "--workers", "--estimator", "--stream-by", "--executor"]
SYNTH_OPTIONS = ["--epsilon", "--rows", "--k", "--target", "--delta", "--seed", "--columns"]


def _options(names: list[str]) -> st.SearchStrategy[list[str]]:
    pair = st.tuples(st.sampled_from(names), TOKENS).map(list)
    return st.lists(pair, max_size=3).map(lambda pairs: [t for p in pairs for t in p])


def _exit_is_0_or_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(argv)
    finally:  # the command's log handler writes to this test's captured stderr: remove it
        root = logging.getLogger()
        for handler in [h for h in root.handlers if getattr(h, "_topdown_cli", False)]:
            root.removeHandler(handler)
    err = capsys.readouterr().err
    event(f"exit {code}")
    assert code in (0, 2), f"{argv}: exit {code}: {err}"


@FAST
@given(options=_options(RUN_OPTIONS))
def test_run_options_give_a_release_or_a_usage_error(
    project: Path, capsys: pytest.CaptureFixture[str], options: list[str]
) -> None:
    # executors other than serial are tested in their own modules (they start processes)
    if "--executor" in options and options[options.index("--executor") + 1] != "serial":
        options = options[: options.index("--executor")]
    out = project / f"rel{next(_OUTS)}"
    _exit_is_0_or_2(["-q", "run", str(project / "c.toml"), "--out", str(out), *options], capsys)


@FAST
@given(
    method=st.sampled_from(["classcond", "privbayes", "dp2pub", "crosstab", "adaptive", "x"]),
    options=_options(SYNTH_OPTIONS),
)
def test_synth_options_give_a_table_or_a_usage_error(
    project: Path, capsys: pytest.CaptureFixture[str], method: str, options: list[str]
) -> None:
    out = project / f"s{next(_OUTS)}.csv"
    data, domains = project / "synth" / "data.csv", project / "synth" / "domains.json"
    if "--epsilon" not in options:
        options = [*options, "--epsilon", "1"]
    argv = ["-q", "synth", method, str(data), "--domains", str(domains), "--out", str(out)]
    _exit_is_0_or_2([*argv, *options], capsys)


# -- the API ---------------------------------------------------------------------------------


def _arguments(data: st.DataObject, valid: dict[str, list[Any]]) -> dict[str, Any]:
    """Keyword arguments: each a valid value, except one or two drawn from anything (so that
    the draws reach past the first check, and the accepted ones run)."""
    kwargs = {
        name: data.draw(st.sampled_from(values), label=name) for name, values in valid.items()
    }
    arbitrary = data.draw(st.lists(st.sampled_from(sorted(valid)), max_size=2, unique=True))
    for name in arbitrary:
        kwargs[name] = data.draw(ANY, label=name)
    return kwargs


RELEASE_ARGUMENTS: dict[str, list[Any]] = {
    "seed": [None, 0, 7],
    "solver": ["auto", "highs", "fast"],
    "solver_strict": [False, True],
    "solver_options": [None, {}],
    "executor": ["serial"],
    "workers": [None, 1],
    "failsafe": [True, False],
    "estimator": ["blue", "topdown"],
    "constraints": [None],
}


@settings(FAST, max_examples=max(5, EXAMPLES // 3))
@given(data=st.data())
def test_release_arguments_give_a_release_or_a_topdown_error(
    project: Path, data: st.DataObject
) -> None:
    kwargs = _arguments(data, RELEASE_ARGUMENTS)
    if kwargs["executor"] in ("processes", "dask"):
        kwargs["executor"] = "serial"  # they start processes: tested in their own modules
    cfg = load_config(project / "c.toml")
    frame = load_data(cfg)
    _result_or_topdown_error(lambda: topdown.release(frame, cfg.schema, cfg.strategy, **kwargs))


FRAME = pd.DataFrame({"a": [0, 1] * 20, "b": [0, 1, 2, 2] * 10})
DOMAINS = {"a": [0, 1], "b": [0, 1, 2]}
EPSILON = [1, 0.5, Fraction(1, 2), "1/2"]
SIZE = [None, 10]

#: each generator: how it is called with the drawn arguments, and their valid values
GENERATORS: dict[str, tuple[Callable[[dict[str, Any]], object], dict[str, list[Any]]]] = {
    "generate": (
        lambda a: generate(FRAME, **a),
        {"numTuples": SIZE, "numClass": [None, "a", 0], "epsilon": EPSILON, "random_state": [3]},
    ),
    "ClassConditional": (
        lambda a: ClassConditional(**a["init"]).fit(FRAME).sample(a["n"]),
        {"epsilon": EPSILON, "target": [None, "a"], "domains": [None, DOMAINS], "seed": [3]},
    ),
    "NoisyCrosstab": (
        lambda a: NoisyCrosstab(**a["init"]).fit(FRAME),
        {
            "epsilon": EPSILON,
            "columns": [None, ["a"], ["a", "b"]],
            "domains": [None, DOMAINS],
            "margins": [False, True],
            "seed": [3],
            "estimator": ["auto", "least_squares"],
        },
    ),
    "PrivBayes": (
        lambda a: PrivBayes(**a["init"]).fit(FRAME).sample(a["n"]),
        {"epsilon": EPSILON, "k": [1, 2], "domains": [None, DOMAINS], "seed": [3]},
    ),
    "DP2Pub": (
        lambda a: DP2Pub(**a["init"]).fit_transform(FRAME, rows=a["n"]),
        {
            "epsilon": EPSILON,
            "k": [1, 3],
            "domains": [None, DOMAINS],
            "seed": [3],
            "structure_fraction": [0.1, 0.5],
            "total_share": [Fraction(1, 20)],
        },
    ),
    "Adaptive": (
        lambda a: Adaptive(**a["init"]).fit(FRAME).sample(a["n"]),
        {
            "epsilon": EPSILON,
            "delta": [1e-9, 1e-6],
            "workload": [None, [["a", "b"]]],
            "degree": [1, 2],
            "domains": [None, DOMAINS],
            "seed": [3],
            "iters": [5],
            "final_iters": [5],
        },
    ),
}


@pytest.mark.parametrize("name", sorted(GENERATORS))
@FAST
@given(data=st.data())
def test_generator_arguments_give_output_or_a_topdown_error(name: str, data: st.DataObject) -> None:
    call, valid = GENERATORS[name]
    if name == "generate":
        arguments: dict[str, Any] = _arguments(data, valid)
    else:
        arguments = _arguments(data, {**valid, "n": SIZE})
        arguments = {"n": arguments.pop("n"), "init": arguments}
    _result_or_topdown_error(lambda: call(arguments))
