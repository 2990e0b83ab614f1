"""describe(): the percentile set and its agreement with numpy; JSON cleaning."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.metrics.stats import PERCENTILES, STAT_KEYS, describe, describe_counts, stat_value


def test_keys_and_percentiles():
    assert PERCENTILES == (50, 90, 95, 99, 99.9)
    assert STAT_KEYS == ("count", "mean", "std", "min", "p50", "p90", "p95", "p99", "p99.9", "max")
    assert tuple(describe([1.0])) == STAT_KEYS


def test_exact_values_on_a_small_array():
    d = describe([4, 1, 3, 2])
    assert d["count"] == 4 and isinstance(d["count"], int)
    assert (d["mean"], d["min"], d["max"]) == (2.5, 1.0, 4.0)
    assert d["std"] == pytest.approx(math.sqrt(1.25))  # population std
    assert d["p50"] == 2.5
    assert d["p90"] == pytest.approx(3.7)
    assert d["p99.9"] == pytest.approx(3.997)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_numpy_linear_interpolation(seed):
    x = np.random.default_rng(seed).lognormal(3.0, 1.0, 1001)
    d = describe(x)
    for p in PERCENTILES:
        assert d[f"p{p:g}"] == np.percentile(x, p)
    assert d["mean"] == x.mean() and d["std"] == x.std()
    assert all(type(v) is float for k, v in d.items() if k != "count")


def test_empty_and_nan():
    empty = describe([])
    assert empty["count"] == 0 and all(empty[k] is None for k in STAT_KEYS[1:])
    assert describe(np.array([np.nan, np.nan]))["count"] == 0
    assert describe([1.0, float("nan"), 3.0])["p50"] == 2.0
    assert describe(v for v in (5.0, 7.0))["mean"] == 6.0


def test_stat_value():
    x = [1, 2, 3, 4, 5]
    assert stat_value(x, "p99.9") == np.percentile(x, 99.9)
    assert (stat_value(x, "mean"), stat_value(x, "max"), stat_value(x, "min")) == (3.0, 5.0, 1.0)
    assert stat_value([], "p50") is None
    with pytest.raises(ValueError, match="unknown statistic"):
        stat_value(x, "median")


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_describe_counts_matches_describe_of_the_expanded_samples(seed):
    rng = np.random.default_rng(seed)
    values = rng.choice([0.5, 1.0, 2.0, 3.0, 7.0, 64.0], size=6, replace=False)
    counts = rng.integers(0, 40, size=6)
    counts[0] = max(counts[0], 1)
    got = describe_counts(values, counts)
    want = describe(np.repeat(values, counts))
    assert got["count"] == want["count"]
    for key in STAT_KEYS[1:]:
        assert got[key] == pytest.approx(want[key], rel=1e-12, abs=1e-12), key


def test_describe_counts_edge_cases():
    assert describe_counts([], []) == describe([])
    assert describe_counts([5.0, 9.0], [0, 0])["count"] == 0
    assert describe_counts([4.0], [1]) == describe([4.0])
    assert describe_counts([1, 2, 3, 4], [1, 1, 1, 1])["p90"] == pytest.approx(3.7)


@pytest.mark.parametrize("seed", [3, 4])
def test_percentiles_equal_numpy_on_small_sizes_ties_and_integers(seed):
    # describe sorts instead of partitioning: every size from 1, ties and integer
    # valued samples give numpy.percentile's floats exactly
    rng = np.random.default_rng(seed)
    for n in (*range(1, 40), 999, 1000, 1001, 10_007):
        for x in (rng.gamma(2.0, 3.0, n), rng.integers(0, 4, n).astype(np.float64), rng.lognormal(0, 3, n)):
            d = describe(x)
            want = np.percentile(x, PERCENTILES)
            assert [d[f"p{p:g}"] for p in PERCENTILES] == want.tolist()
            assert d["min"] == x.min() and d["max"] == x.max()
