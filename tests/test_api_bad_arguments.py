"""The API raises TopDownError (or a subclass) for every bad argument (issue 30 D5).

Integer or MultiIndex column names, lists of lists, ``domains`` as a list, an unhashable
domain value, ``theta=nan``, ``seed='abc'`` gave ValueError, TypeError or AttributeError
from deep inside, or nothing at all; a string where a list is expected was read as
characters; ``release_streamed(geography='missing.csv')`` blamed a "data file"; booleans
declared for a 0/1 column silently stood for 1 and 0. Each message names the argument,
shows the value and states the rule.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest
from test_engine import AGE_DOMAIN, seed_data

from mechanisms.errors import TopDownError
from synth import ClassConditional, DP2Pub, NoisyCrosstab, PrivBayes, generate
from synth.fairness import exponential_disparity
from topdown import TopDown

DF = pd.DataFrame({"sex": ["M", "F"] * 20, "own": ["y", "n", "n", "y"] * 10})
SEED = r"seed \('abc'\) must be a non-negative integer or None"

SYNTH_CASES = {
    "integer column names": (
        lambda: ClassConditional(1).fit(pd.DataFrame({0: [1, 2], 1: [3, 4]})),
        r"data has column names \[0, 1\] that are not strings",
    ),
    "MultiIndex column names": (
        lambda: PrivBayes(1).fit(
            pd.DataFrame([[1, 2]], columns=pd.MultiIndex.from_tuples([("a", "b"), ("c", "d")]))
        ),
        r"data has column names \[\('a', 'b'\), \('c', 'd'\)\] that are not strings",
    ),
    "list of lists": (
        lambda: ClassConditional(1).fit([[1, 2], [3, 4]]),
        r"data \(list\) must be a pandas DataFrame",
    ),
    "domains as a list": (
        lambda: ClassConditional(1, domains=["sex"]).fit(DF),
        r"domains \(\['sex'\]\) must be a mapping \{column: \[values, ...\]\} or None",
    ),
    "unhashable domain value": (
        lambda: ClassConditional(1, domains={"sex": [["M"], "F"], "own": ["y", "n"]}).fit(DF),
        r"domains\['sex'\] holds \['M'\], which is not hashable",
    ),
    "domain as a string": (
        lambda: ClassConditional(1, domains={"sex": "Male", "own": ["y", "n"]}).fit(DF),
        r"domains\['sex'\] \('Male'\) must be a list of values, not str",
    ),
    "columns as a string": (
        lambda: NoisyCrosstab(1, columns="sex"),
        r"columns \('sex'\) must be a list of column names, not str",
    ),
    "booleans for a 0/1 column": (
        lambda: ClassConditional(1, domains={"b": [True, False]}).fit(pd.DataFrame({"b": [0, 1]})),
        r"domains\['b'\] \(\[True, False\]\) holds booleans for a column of type int64",
    ),
    "theta nan": (lambda: PrivBayes(1, theta=float("nan")), r"theta \(nan\) must be a finite"),
    "seed abc ClassConditional": (lambda: ClassConditional(1, seed="abc"), SEED),
    "seed abc PrivBayes": (lambda: PrivBayes(1, seed="abc"), SEED),
    "seed abc DP2Pub": (lambda: DP2Pub(1, seed="abc"), SEED),
    "seed abc NoisyCrosstab": (lambda: NoisyCrosstab(1, seed="abc"), SEED),
    "seed abc generate": (lambda: generate(DF, random_state="abc"), SEED),
    "seed abc exponential_disparity": (
        lambda: exponential_disparity(DF, "sex", "own", 1, seed="abc"),
        SEED,
    ),
}


@pytest.mark.parametrize("case", list(SYNTH_CASES))
def test_synth_api_raises_topdown_errors(case: str) -> None:
    call, message = SYNTH_CASES[case]
    with pytest.raises(TopDownError) as caught:
        call()
    assert re.search(message, str(caught.value)), str(caught.value)


def _topdown(**kwargs):
    td = TopDown(seed_data(100), ["REGION", "STATE"], ["AGE", "SEX"], **kwargs)
    td.set_privacy_parameters([1, 1, 1])
    return td.run()


TOPDOWN_CASES = {
    "seed abc": (lambda: TopDown(seed_data(50), ["REGION"], ["SEX"], seed="abc"), SEED),
    "domain as a list": (
        lambda: _topdown(domain=["AGE", "SEX"], seed=1),
        r"domain \(\['AGE', 'SEX'\]\) must be a Schema, a dict column -> values or a list of "
        r"Attributes; 'AGE' is a str",
    ),
    "domain value as a string": (
        lambda: _topdown(domain={"AGE": AGE_DOMAIN["AGE"], "SEX": "12"}, seed=1),
        r"domain\['SEX'\] \('12'\) must be a list of values or an Attribute, not str",
    ),
    "unhashable domain value": (
        lambda: _topdown(domain={"AGE": AGE_DOMAIN["AGE"], "SEX": [[1], 2]}, seed=1),
        r"domain\['SEX'\] holds \[1\], which is not hashable",
    ),
}


@pytest.mark.parametrize("case", list(TOPDOWN_CASES))
def test_topdown_api_raises_topdown_errors(case: str) -> None:
    call, message = TOPDOWN_CASES[case]
    with pytest.raises(TopDownError) as caught:
        call()
    assert re.search(message, str(caught.value)), str(caught.value)


@pytest.mark.extra("parquet")
def test_release_streamed_names_the_missing_geography_file(tmp_path) -> None:
    from test_stream import SCHEMA, _geography, _records, _strategy

    from topdown.streaming.run import release_streamed

    geo = _geography()
    parts = tmp_path / "parts"
    parts.mkdir()
    for county, frame in _records(geo).groupby("COUNTY"):
        frame.to_parquet(parts / f"{county}.parquet", index=False)
    missing = tmp_path / "missing.csv"
    with pytest.raises(TopDownError, match=r"geography file '.*missing\.csv' does not exist"):
        release_streamed(
            parts, SCHEMA, _strategy(), stream_by="COUNTY", out=tmp_path / "o", geography=missing
        )
