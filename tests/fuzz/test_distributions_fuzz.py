"""Fuzz the length specs of ``--prompt-tokens``/``--output-tokens`` and workload tables:
any text or value is a distribution whose samples are whole numbers in [1, MAX_LENGTH],
or a one-line WorkloadError."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from loadgen.errors import WorkloadError
from loadgen.workload.distributions import (
    MAX_LENGTH,
    Distribution,
    kinds,
    parse_distribution,
)
from loadgen.workload.spec import workload_from_flags
from tests.fuzz.strategies import BIG_INTS, DIGITS, NUMBERS, assert_one_line, budget

PARAM_NAMES = st.sampled_from(
    ["value", "min", "max", "mean", "std", "median", "sigma", "values", "weights", "column", "", "x", "MEAN"]
)


def _number_text(v: Any) -> str:
    return repr(v) if isinstance(v, float) else str(v)


NUMBER_TEXT = st.one_of(
    NUMBERS.map(_number_text),
    DIGITS,
    st.from_regex(r"[+-]?(\d{1,4}\.?\d{0,3}|\.\d{1,3})([eE][+-]?\d{1,3})?", fullmatch=True),
    st.lists(NUMBERS.map(_number_text), min_size=0, max_size=4).map(";".join),
    st.builds(lambda v, n: ";".join([v] * n), NUMBERS.map(_number_text), st.integers(1, 4)),
    st.sampled_from(["", " ", "nan", "inf", "-inf", "1_000", "0x10", "１２", "1e400", ";", ";;1"]),
)


@st.composite
def empirical_specs(draw: st.DrawFn) -> str:
    """Values and weights of one length (the hard part for the generator above)."""
    n = draw(st.integers(1, 4))
    values = draw(st.lists(st.one_of(st.integers(1, 2000), NUMBERS), min_size=n, max_size=n))
    weight = st.one_of(
        st.sampled_from(["1e308", "1.7976931348623157e308", "5e-324", "0", "-0.0", "nan", "inf", "1"]),
        NUMBERS.map(_number_text),
    )
    weights = draw(st.one_of(st.lists(weight, min_size=n, max_size=n), st.builds(lambda w: [w] * n, weight)))
    return f"empirical:values={';'.join(map(_number_text, values))},weights={';'.join(weights)}"


SPECS = st.one_of(
    empirical_specs(),
    st.builds(
        lambda kind, params: kind + (":" + ",".join(f"{k}={v}" for k, v in params) if params else ""),
        st.one_of(st.sampled_from(kinds()), st.sampled_from(["Normal", " uniform ", "gamma", ""])),
        st.lists(st.tuples(PARAM_NAMES, NUMBER_TEXT), max_size=5),
    ),
    NUMBER_TEXT,
    st.text(max_size=40),
).filter(lambda s: "csv" not in s)  # no file is read while fuzzing


def _check(dist: Distribution) -> None:
    sample = dist.sample(np.random.default_rng(0), 64)
    assert sample.dtype == np.int64 and sample.shape == (64,)
    assert sample.min() >= 1 and sample.max() <= MAX_LENGTH, dist.describe()
    mean = dist.mean()
    assert math.isfinite(mean) and 1 <= mean <= MAX_LENGTH, (dist.describe(), mean)
    assert "\n" not in dist.describe()


@budget(250)
@given(SPECS)
def test_any_spec_text_is_a_distribution_or_one_line_error(text: str) -> None:
    try:
        dist = parse_distribution(text, source="command line", key="--prompt-tokens")
    except WorkloadError as exc:
        assert_one_line(exc)
        return
    _check(dist)


TABLE_VALUES = st.one_of(
    NUMBERS,
    BIG_INTS,
    DIGITS,
    st.text(max_size=8),
    st.lists(NUMBERS, max_size=4),
    st.none(),
    st.booleans(),
    st.builds(lambda v, n: [v] * n, NUMBERS, st.integers(1, 4)),
)


@budget(200)
@given(
    st.one_of(
        st.fixed_dictionaries(
            {"dist": st.one_of(st.sampled_from(kinds()), st.text(max_size=6), NUMBERS)},
            optional=dict.fromkeys(
                ("value", "min", "max", "mean", "std", "median", "sigma", "values", "weights"), TABLE_VALUES
            ),
        ),
        NUMBERS,
        st.booleans(),
        st.lists(NUMBERS, max_size=2),
    )
)
def test_any_toml_value_is_a_distribution_or_one_line_error(value: Any) -> None:
    try:
        dist = parse_distribution(value, source="w.toml", key="prompt_tokens")
    except WorkloadError as exc:
        assert_one_line(exc)
        return
    _check(dist)


@budget(100)
@given(SPECS, SPECS)
def test_flags_make_a_workload_or_one_line_error(prompt: str, output: str) -> None:
    try:
        workload = workload_from_flags(prompt, output)
    except WorkloadError as exc:
        assert_one_line(exc)
        return
    assert workload.classes and "\n" not in workload.description
