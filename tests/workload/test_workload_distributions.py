"""Length distributions: statistics for a fixed seed, determinism, parsing and its errors.

Statistical tolerances: N = 200,000 draws per check; means are compared within 5
standard errors (sd / sqrt(N)), medians and spreads within 1-2%, frequencies within
5 binomial standard deviations. The seed is fixed, so these either always pass or
always fail.
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from loadgen.errors import WorkloadError
from loadgen.workload.distributions import (
    Empirical,
    Fixed,
    LogNormal,
    Normal,
    Uniform,
    kinds,
    parse_distribution,
)

N = 200_000
KINDS_TEXT = "fixed, uniform, normal, lognormal, empirical"


def draw(spec: str | int | dict, seed: int = 7, n: int = N) -> np.ndarray:
    return parse_distribution(spec).sample(np.random.default_rng(seed), n)


def test_registry_lists_all_kinds() -> None:
    assert kinds() == ["fixed", "uniform", "normal", "lognormal", "empirical"]


@pytest.mark.parametrize("spec", [256, "256", " 256 ", "fixed:value=256", {"dist": "fixed", "value": 256}, "256.0"])
def test_fixed_forms(spec: str | int | dict) -> None:
    d = parse_distribution(spec)
    assert d == Fixed(256)
    x = d.sample(np.random.default_rng(0), 10)
    assert x.dtype == np.int64 and x.tolist() == [256] * 10
    assert d.mean() == 256.0 and d.describe() == "256"


def test_uniform_bounds_mean_and_flatness() -> None:
    x = draw("uniform:min=10,max=29")
    assert x.dtype == np.int64 and x.min() == 10 and x.max() == 29
    sd = math.sqrt((20**2 - 1) / 12)
    assert abs(x.mean() - 19.5) < 5 * sd / math.sqrt(N)
    counts = np.bincount(x - 10, minlength=20)
    p = 1 / 20
    assert np.all(np.abs(counts - N * p) < 5 * math.sqrt(N * p * (1 - p)))
    assert parse_distribution("uniform:min=10,max=29").mean() == 19.5


def test_normal_untruncated_moments() -> None:
    d = parse_distribution("normal:mean=512,std=128,min=16")
    x = d.sample(np.random.default_rng(1), N)
    assert x.min() >= 16
    assert d.mean() == pytest.approx(512.0, abs=0.1)  # min is 3.9 sd away: almost no effect
    assert abs(x.mean() - 512) < 5 * 128 / math.sqrt(N)
    assert x.std() == pytest.approx(128, rel=0.01)
    assert np.median(x) == pytest.approx(512, abs=2)


def test_normal_truncated_is_resampled_not_clipped() -> None:
    # Half-normal above the mean: E = mu + sd * sqrt(2/pi).
    d = parse_distribution("normal:mean=100,std=50,min=100")
    assert d.mean() == pytest.approx(100 + 50 * math.sqrt(2 / math.pi), rel=1e-9)
    x = d.sample(np.random.default_rng(2), N)
    assert x.min() == 100
    sd = 50 * math.sqrt(1 - 2 / math.pi)
    assert abs(x.mean() - d.mean()) < 5 * sd / math.sqrt(N) + 0.5  # + rounding to integers
    # A narrow window: clipping would put P(X > 120) = 34% on 120; resampling puts ~1/20 of
    # half a bin there.
    y = draw("normal:mean=100,std=50,min=100,max=120")
    assert y.min() == 100 and y.max() == 120
    assert (y == 120).mean() < 0.05
    assert (y == 100).mean() < 0.05


def test_normal_far_right_tail_window() -> None:
    # The window holds ~3e-7 of the law; inverse-CDF sampling still fills it evenly-ish.
    d = parse_distribution("normal:mean=0,std=10,min=50,max=60")
    x = d.sample(np.random.default_rng(3), 10_000)
    assert x.min() >= 50 and x.max() <= 60
    assert 50 < d.mean() < 53  # exponential-like decay inside the window
    assert abs(x.mean() - d.mean()) < 0.2


def test_normal_zero_std_is_constant() -> None:
    assert draw("normal:mean=300,std=0", n=5).tolist() == [300] * 5


def test_lognormal_median_mean_and_cap() -> None:
    d = parse_distribution("lognormal:median=800,sigma=0.9,max=8000")
    x = d.sample(np.random.default_rng(4), N)
    assert x.min() >= 1 and x.max() <= 8000
    assert np.median(x) == pytest.approx(800, rel=0.01)
    # mean() is the truncated law's mean: check it against a numerical integral.
    z = np.linspace(math.log(1), math.log(8000), 400_001)  # in log space
    dens = np.exp(-0.5 * ((z - math.log(800)) / 0.9) ** 2)
    assert d.mean() == pytest.approx(float((np.exp(z) * dens).sum() / dens.sum()), rel=1e-5)
    assert d.mean() < 800 * math.exp(0.9**2 / 2)  # the cap removes part of the tail
    assert x.mean() == pytest.approx(d.mean(), rel=0.01)
    # p90 of the truncated law: the 0.9 * F(8000) quantile of the untruncated one.
    law = NormalDist(math.log(800), 0.9)
    q90 = math.exp(law.inv_cdf(0.9 * law.cdf(math.log(8000))))
    assert np.quantile(x, 0.9) == pytest.approx(q90, rel=0.01)


def test_lognormal_truncation_has_no_spike_at_max() -> None:
    # P(X > 1000) is 40% untruncated; clipping would pile that onto 1000.
    x = draw("lognormal:median=800,sigma=0.9,max=1000")
    assert x.max() == 1000
    assert (x == 1000).mean() < 0.005


def test_lognormal_min_bound() -> None:
    x = draw("lognormal:median=50,sigma=1.5,min=20,max=500")
    assert x.min() == 20 and x.max() <= 500


def test_empirical_weights_respected() -> None:
    d = parse_distribution({"dist": "empirical", "values": [12, 40, 77], "weights": [1, 1, 2]})
    x = d.sample(np.random.default_rng(5), N)
    assert set(np.unique(x).tolist()) == {12, 40, 77}
    for value, p in ((12, 0.25), (40, 0.25), (77, 0.5)):
        assert abs((x == value).mean() - p) < 5 * math.sqrt(p * (1 - p) / N)
    assert d.mean() == pytest.approx(0.25 * 12 + 0.25 * 40 + 0.5 * 77)


def test_empirical_unweighted_text_form() -> None:
    d = parse_distribution("empirical:values=5;6;7;8")
    assert d == Empirical((5, 6, 7, 8))
    x = d.sample(np.random.default_rng(6), N)
    assert abs(x.mean() - 6.5) < 5 * math.sqrt(1.25) / math.sqrt(N)


def test_empirical_from_csv_relative_to_base_dir(tmp_path: Path) -> None:
    (tmp_path / "lens.csv").write_text("prompt_len,output_len\n100,5\n100,6\n300,7\n", encoding="utf-8")
    d = parse_distribution({"dist": "empirical", "csv": "lens.csv", "column": "prompt_len"}, base_dir=tmp_path)
    assert isinstance(d, Empirical)
    assert d.values == (100, 300) and d.weights == (2.0, 1.0)
    assert d.mean() == pytest.approx(500 / 3)
    x = d.sample(np.random.default_rng(0), N)
    assert abs((x == 100).mean() - 2 / 3) < 5 * math.sqrt(2 / 9 / N)
    again = parse_distribution(d.describe())  # absolute path: works from anywhere
    assert again == d


def test_csv_errors_name_column_and_line(tmp_path: Path) -> None:
    (tmp_path / "lens.csv").write_text("a,b\n1,2\nx,3\n", encoding="utf-8")
    with pytest.raises(WorkloadError, match=r"no column 'c'; columns: a, b"):
        parse_distribution({"dist": "empirical", "csv": "lens.csv", "column": "c"}, base_dir=tmp_path)
    with pytest.raises(WorkloadError, match=r"line 3: a='x' is not a whole number >= 1"):
        parse_distribution({"dist": "empirical", "csv": "lens.csv", "column": "a"}, base_dir=tmp_path)
    with pytest.raises(WorkloadError, match=r"cannot read csv .*missing\.csv"):
        parse_distribution("empirical:csv=missing.csv,column=a", base_dir=tmp_path)


SPECS = [
    "uniform:min=1,max=1000",
    "normal:mean=512,std=128,min=16",
    "normal:mean=512,std=128,min=16,max=900",
    "lognormal:median=800,sigma=0.9,max=8000",
    "lognormal:median=20,sigma=2,min=3",
    "empirical:values=12;40;77",
    "empirical:values=12;40;77,weights=0.5;0.25;0.25",
]


@pytest.mark.parametrize("spec", SPECS)
def test_same_seed_same_samples_and_round_trip(spec: str) -> None:
    d = parse_distribution(spec)
    a = d.sample(np.random.default_rng(42), 1000)
    b = d.sample(np.random.default_rng(42), 1000)
    c = d.sample(np.random.default_rng(43), 1000)
    assert a.dtype == np.int64 and (a >= 1).all()
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert d.describe() == spec
    assert parse_distribution(d.describe()) == d


def test_table_and_text_forms_are_equal() -> None:
    assert parse_distribution({"dist": "lognormal", "median": 800, "sigma": 0.9, "max": 8000}) == LogNormal(
        800.0, 0.9, 1, 8000
    )
    assert parse_distribution({"dist": "Normal", "mean": 512, "std": 128.0}) == Normal(512.0, 128.0)
    assert parse_distribution("UNIFORM: min = 3 , max = 4") == Uniform(3, 4)


# Every error names the source and key and what is allowed.
ERRORS = [
    ("gauss:mean=1", ["unknown distribution kind 'gauss'", f"valid kinds: {KINDS_TEXT}", "lognormal:median=800"]),
    ("", ["empty distribution", KINDS_TEXT]),
    (
        "normal:mean=512,sd=128",
        ["normal: unknown parameter 'sd'", "normal takes mean, std (required), min, max (optional)"],
    ),
    ("normal:mean=512", ["normal: missing required parameter 'std'", "mean, std (required)"]),
    ("normal:mean=512,std=-1", ["normal: std must be >= 0, got -1", "normal takes mean, std"]),
    ("normal:mean=512,std=abc", ["parameter 'std' must be a number, got 'abc'", "normal takes"]),
    ("normal:mean=1,std=1,min=500", ["window [500, None] holds no probability", "normal takes"]),
    ("uniform:min=10,max=5", ["uniform: min (10) is greater than max (5)", "uniform takes min, max (required)"]),
    ("uniform:min=0,max=5", ["uniform: min must be >= 1, got 0", "uniform takes"]),
    ("uniform:min=1.5,max=5", ["parameter 'min' must be a whole number, got '1.5'", "uniform takes"]),
    ("uniform:min=1,min=2,max=5", ["parameter 'min' given twice"]),
    ("uniform:min", ["expected PARAM=VALUE, got 'min'", "uniform takes"]),
    ("fixed", ["fixed: missing required parameter 'value'", "fixed takes value (required)"]),
    ("2.5", ["parameter 'value' must be a whole number, got '2.5'", "fixed takes value"]),
    ("0", ["fixed: value must be >= 1, got 0"]),
    ("lognormal:median=0,sigma=1", ["lognormal: median must be > 0", "lognormal takes median, sigma (required)"]),
    ("lognormal:median=10,sigma=-0.5", ["lognormal: sigma must be >= 0, got -0.5"]),
    ("lognormal:median=10,sigma=1,min=20,max=10", ["min (20) is greater than max (10)"]),
    ("lognormal:median=10,sigma=nan", ["parameter 'sigma' must be a number, got 'nan'"]),
    ("empirical:values=1;x;3", ["parameter 'values' must be a list of whole numbers, got '1;x;3'", "empirical takes"]),
    ("empirical:values=1;0", ["every value must be >= 1, got 0"]),
    ("empirical:values=1;2,weights=1", ["1 weights for 2 values"]),
    ("empirical:values=1;2,weights=0;0", ["weights must be finite, >= 0 and not all 0"]),
    ("empirical:column=a", ["give either values or csv", "values, weights, csv, column (optional)"]),
    ({"dist": "normal", "mean": True, "std": 1}, ["parameter 'mean' must be a number, got True"]),
    ({"dist": "empirical", "values": 5}, ["parameter 'values' must be a list of whole numbers, got 5"]),
    ({"mean": 5}, ["needs dist = one of " + KINDS_TEXT]),
    ({"dist": "poisson"}, ["unknown distribution kind 'poisson'", KINDS_TEXT]),
    (True, ["unknown distribution kind 'True'", KINDS_TEXT]),
    ([1, 2], ["got list", KINDS_TEXT]),
]


@pytest.mark.parametrize(("spec", "parts"), ERRORS, ids=[str(s) for s, _ in ERRORS])
def test_parse_errors_name_key_and_allowed_values(spec: object, parts: list[str]) -> None:
    with pytest.raises(WorkloadError) as info:
        parse_distribution(spec, source="wl.toml", key="classes[0].prompt_tokens")  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith("wl.toml: classes[0].prompt_tokens: ")
    assert info.value.source == "wl.toml" and info.value.key == "classes[0].prompt_tokens"
    for part in parts:
        assert part in message


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("9" * 5000, "whole number"),  # int() refuses over 4,300 digits: was a ValueError
        ("uniform:min=1,max=" + "9" * 400, "at most 9,007,199,254,740,992"),  # was an OverflowError
        ({"dist": "fixed", "value": 10**5000}, "over 4,300 digits"),  # repr() itself fails
        ({"dist": "normal", "mean": 10**400, "std": 1}, "at most"),
        ("empirical:values=9.223372036854776e+18", "whole numbers"),  # past int64: was OverflowError
    ],
    ids=["5000-digits", "max-of-400-digits", "toml-int-of-5000-digits", "toml-mean-1e400", "past-int64"],
)
def test_numbers_too_large_for_arithmetic_are_one_line_errors(spec: object, needle: str) -> None:
    """Found by tests/fuzz: these raised ValueError/OverflowError tracebacks."""
    with pytest.raises(WorkloadError, match=needle) as info:
        parse_distribution(spec)  # type: ignore[arg-type]
    assert "\n" not in str(info.value) and len(str(info.value)) < 400


def test_empirical_weights_near_the_float_limit_still_sample() -> None:
    """Found by tests/fuzz: weights of 1e308 summed to inf, so sampling raised ValueError."""
    dist = parse_distribution("empirical:values=10;20,weights=1e308;1e308")
    counts = np.bincount(dist.sample(np.random.default_rng(0), 10_000))
    assert counts[10] > 0 and counts[20] > 0 and counts.sum() == 10_000
