"""MSER-5 finds a planted warm-up; the trend test flags a planted trend, not white noise."""

from __future__ import annotations

import numpy as np

from loadgen.metrics.steady import mser5, mser5_truncation, stationarity


def test_mser5_cuts_a_planted_transient() -> None:
    rng = np.random.default_rng(1)
    x = rng.lognormal(0, 0.3, 3000)
    x[:400] += np.linspace(6, 0, 400)  # a cold queue draining
    cut = mser5(x)
    assert 250 <= cut <= 500 and cut % 5 == 0


def test_mser5_keeps_a_steady_series() -> None:
    cuts = [mser5(np.random.default_rng(s).normal(10, 1, 2000)) for s in range(20)]
    assert np.median(cuts) < 200


def test_mser5_flags_a_series_that_never_settles() -> None:
    x = np.linspace(10, 0, 1000) + np.random.default_rng(2).normal(0, 0.1, 1000)
    assert not mser5_truncation(x).steady


def test_stationarity_flags_a_trend() -> None:
    x = np.linspace(1, 1.5, 2000) + np.random.default_rng(3).normal(0, 0.2, 2000)
    v = stationarity(x)
    assert not v.stationary and v.drift > 0.3 and v.reason is not None and "rise" in v.reason


def test_stationarity_passes_white_noise_mostly() -> None:
    flags = [not stationarity(np.random.default_rng(s).lognormal(0, 0.5, 1000)).stationary for s in range(200)]
    assert sum(flags) <= 6  # two 1% tests (medians, spread) that also need a 5% drift: a handful at most


def test_stationarity_of_a_short_series_is_not_tested() -> None:
    v = stationarity([1.0, 2.0, 3.0])
    assert v.stationary and v.batches == 0 and v.reason is not None


def test_mser5_half_cut_stays_in_the_first_half() -> None:
    # a cold start, then a noisy stretch and a quiet one: the overall minimum lies late (MSER's
    # end effect on the quiet tail); the first-half cut still removes the cold start
    rng = np.random.default_rng(4)
    x = np.concatenate([np.linspace(150, 15, 20), 11 + rng.uniform(0, 5, 40), 11.4 + rng.normal(0, 0.1, 40)])
    tr = mser5_truncation(x)
    assert tr.half_cut <= x.size // 2 and tr.half_cut >= 20
    # on i.i.d. noise after the cold start the overall minimum can sit in the last batches
    # (the end effect: two batches left, a small variance by chance); the first-half cut is the cold start
    tail = mser5_truncation(np.concatenate([np.linspace(150, 15, 20), 11 + rng.uniform(0, 5, 200)]))
    assert 20 <= tail.half_cut <= 40


def test_stationarity_sees_a_scale_up_in_the_spread_of_queueing_noise() -> None:
    # a queue at 90% load wanders for thousands of requests: its batch medians cannot show a
    # +50% scale-up across 10,000 requests, the spread between consecutive requests can
    rng = np.random.default_rng(6)
    n = 10_000
    a, s = rng.exponential(1 / 0.9, n), rng.exponential(1.0, n)
    w = np.zeros(n)
    for i in range(1, n):
        w[i] = max(w[i - 1] + s[i - 1] - a[i], 0.0)
    x = (w + s) * np.linspace(1.0, 1.5, n)
    v = stationarity(x, min_drift=0.2)
    assert not v.stationary and v.spread_t > v.spread_critical and v.spread_drift > 0.3
    assert v.reason is not None and "the spread between consecutive requests rises by" in v.reason
    assert stationarity(w + s, min_drift=0.2).stationary


def test_stationarity_sees_a_backlog_added_to_queueing_noise_in_the_low_end() -> None:
    # 50% of the mean added across 10,000 requests of a queue at 90% load: the medians wander
    # with the queue (t 0.9 here), the 10th percentiles (requests that found it nearly empty) do not
    rng = np.random.default_rng(9)
    n = 10_000
    a, s = rng.exponential(1 / 0.9, n), rng.exponential(1.0, n)
    w = np.zeros(n)
    for i in range(1, n):
        w[i] = max(w[i - 1] + s[i - 1] - a[i], 0.0)
    x = w + s
    v = stationarity(x + np.linspace(0.0, 0.5 * x.mean(), n), min_drift=0.2)
    assert not v.stationary and abs(v.t) < v.critical and v.low_t > v.critical and v.low_drift > 1.0
    assert v.reason is not None and v.reason.startswith("batch 10th percentiles rise by")
    assert stationarity(x, min_drift=0.2).stationary
