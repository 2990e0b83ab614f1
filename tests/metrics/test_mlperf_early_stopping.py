"""MLPerf LoadGen's early-stopping counts, reproduced exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.metrics.mlperf import (
    early_stopping_estimate,
    early_stopping_failed,
    early_stopping_min_queries,
    early_stopping_verdict,
)


def passes(n: int, t: int, p: float, c: float) -> bool:
    """LoadGen's test by direct summation: P(Bin(n, 1 − p) <= t) < 1 − c."""
    return sum(math.comb(n, k) * (1 - p) ** k * p ** (n - k) for k in range(t + 1)) < 1 - c


@pytest.mark.parametrize(("t", "expected"), [(0, 459), (1, 662), (10, 2010)])
def test_published_counts_at_p99_99(t: int, expected: int) -> None:
    assert early_stopping_min_queries(0.99, 0.99, t) == expected


@pytest.mark.parametrize(
    ("p", "c", "t"),
    [(0.99, 0.99, 2), (0.99, 0.99, 37), (0.9, 0.99, 0), (0.9, 0.99, 1), (0.97, 0.95, 5), (0.999, 0.99, 3)],
)
def test_counts_are_the_first_passing_ones(p: float, c: float, t: int) -> None:
    n = early_stopping_min_queries(p, c, t)
    assert passes(n, t, p, c) and not passes(n - 1, t, p, c)


def test_p90_single_stream_minimum_is_64() -> None:
    # LoadGen's single-stream report: "Processed at least 64 queries" for the 90th percentile
    assert early_stopping_min_queries(0.9, 0.99, 1) == 64


def test_verdict_counts_overlatency_strictly_above_the_bound() -> None:
    x = np.concatenate([np.full(661, 1.0), [2.0]])
    ok = early_stopping_verdict(x, bound=1.5)
    assert ok.passed and ok.overlatency == 1 and ok.min_queries == 662 and ok.more_needed == 0
    short = early_stopping_verdict(x[1:], bound=1.5)
    assert not short.passed and short.more_needed == 1
    assert early_stopping_verdict(x, bound=2.0).overlatency == 0


def test_estimate_is_the_t_th_largest() -> None:
    x = np.random.default_rng(0).permutation(np.arange(1.0, 2011.0))
    # t = 10 is the largest overlatency count whose minimum (2,010) fits in 2,010 queries
    assert early_stopping_estimate(x) == 2010 - 10 + 1
    assert early_stopping_estimate(x[:600]) is None  # fewer than min_queries(1) = 662


@pytest.mark.parametrize(("p", "c"), [(0.99, 0.99), (0.9, 0.99), (0.9, 0.5), (0.999, 0.95)])
def test_estimate_is_the_largest_t_that_fits_as_a_count_up_finds_it(p: float, c: float) -> None:
    # the estimate bisects over t; counting t up one at a time (LoadGen's loop) gives the same
    for n in (64, 65, 458, 459, 661, 662, 663, 1000, 2009, 2010, 2011, 3333):
        x = np.arange(float(n))
        t = 0
        while t + 1 <= n and early_stopping_min_queries(p, c, t + 1) <= n:
            t += 1
        assert early_stopping_estimate(x, p, c) == (None if t == 0 else x[n - t])


def test_many_overlatency_queries_sum_vectorised_to_the_term_by_term_odds() -> None:
    """Beyond EXACT_TERMS the odds are summed in numpy; they agree with the lgamma terms to
    the precision those carry, and give the same minimum counts."""
    from loadgen.metrics import mlperf

    def by_terms(h: int, t: int, p: float) -> float:
        n = h + t
        lp, lq = math.log(p), math.log1p(-p)
        v = [
            math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lq + (n - k) * lp
            for k in range(t + 1)
        ]
        top = max(v)
        return math.exp(top) * math.fsum(math.exp(x - top) for x in v)

    for p in (0.9, 0.99):
        for t in (mlperf.EXACT_TERMS + 1, 1000, 4000):
            for h in (int(t * p / (1 - p) * f) for f in (0.95, 1.0, 1.05)):
                assert mlperf._odds(h, t, p) == pytest.approx(by_terms(h, t, p), rel=1e-7)


def test_failed_mirrors_the_rule() -> None:
    """p99 at 99%: with 100 queries, 5 over has odds P(Bin(100, 0.01) >= 5) = 0.0034 < 0.01
    (p99 shown above the bound), 4 over has 0.018 (not shown); none over never fails."""
    assert early_stopping_failed(100, 5) and not early_stopping_failed(100, 4)
    assert not early_stopping_failed(100, 0) and not early_stopping_failed(0, 0)
    assert early_stopping_failed(393, 211)  # the 256-user level of issue 37's run
    # a count that passes never fails: both need the odds on opposite sides of 1 - c
    for n in (459, 662, 2010):
        t = max(k for k in range(11) if early_stopping_min_queries(0.99, 0.99, k) <= n)
        assert not early_stopping_failed(n, t)
