"""Intervals on processes whose correlation reaches far (issue 38): a queue near saturation,
long memory, a level shorter than its correlation; and i.i.d. data that stays bounded."""

from __future__ import annotations

import math

import numpy as np

from loadgen.metrics.uncertainty import (
    REFUSED,
    correlation_check,
    iid_percentile_interval,
    mean_interval,
    needed_n_eff,
    percentile_interval,
    proportion_interval,
)


def lindley(rho: float, levels: int, n: int, seed: int) -> np.ndarray:
    """M/M/1 sojourn times (service rate 1) in arrival order, started in the stationary law."""
    rng = np.random.default_rng(seed)
    s = rng.exponential(1.0, (levels, n))
    a = rng.exponential(1.0 / rho, (levels, n))
    w = np.where(rng.random(levels) < rho, rng.exponential(1.0 / (1 - rho), levels), 0.0)
    out = np.empty((levels, n))
    for k in range(n):
        out[:, k] = w + s[:, k]
        w = np.maximum(0.0, out[:, k] - a[:, k])
    return out


def fgn(hurst: float, levels: int, n: int, seed: int) -> np.ndarray:
    """Unit-variance fractional Gaussian noise, exact by circulant embedding (Davies–Harte)."""
    k = np.arange(n + 1, dtype=np.float64)
    gamma = 0.5 * ((k + 1) ** (2 * hurst) - 2 * k ** (2 * hurst) + np.abs(k - 1) ** (2 * hurst))
    row = np.concatenate([gamma, gamma[-2:0:-1]])
    lam = np.maximum(np.fft.fft(row).real, 0.0)
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((levels, row.size)) + 1j * rng.standard_normal((levels, row.size))) * np.sqrt(
        lam / row.size
    )
    return np.fft.fft(w, axis=1)[:, :n].real


def test_a_queue_at_90_percent_never_prints_a_p99_that_misses() -> None:
    """The p99 of 10,000 sojourn times of an M/M/1 queue at ρ = 0.9 (true p99 = ln 100 / 0.1):
    the tail is reached by the queue's long busy periods, which a level holds few of, so
    an interval is either refused with its reason or covers the truth. Geyer's n_eff
    printed one in a few levels, every one below the truth."""
    truth = math.log(100) / (1 - 0.9)
    levels = lindley(0.9, 30, 10_000, seed=38)
    for x in levels:
        iv = percentile_interval(x, 0.99)
        if iv.bounded:
            assert iv.low is not None and iv.high is not None and iv.low <= truth <= iv.high
        else:
            assert iv.reason is not None and ("needs n_eff" in iv.reason or iv.reason.startswith(REFUSED))
            assert iv.n_eff < 0.05 * iv.n  # the correlation was seen: 10,000 values hold few independent ones


def test_long_memory_p99_is_not_printed() -> None:
    """exp(0.5 · fGn) with H = 0.9 at 10,000 values: the median's indicator carries the long
    memory, so the p99 takes its small n_eff and is not printed (Geyer's n_eff on the tail
    indicator alone printed it in nearly every level, covering about a third)."""
    for x in np.exp(0.5 * fgn(0.9, 8, 10_000, seed=7)):
        iv = percentile_interval(x, 0.99)
        assert not iv.bounded and iv.reason is not None, iv
        assert iv.n_eff < needed_n_eff(0.99) < 0.05 * iv.n


def test_correlation_that_spans_the_level_is_refused_with_its_reason() -> None:
    """AR(1) levels with φ = 0.999 (τ ≈ 2,000) of 1,000 values: no batch is long enough.
    Where the batch means show it (their lag-1 correlation, or a τ past a batch), every
    interval of the series is refused with the reason, which says what to do. A level whose
    batch means happen to look unrelated still prints (no check within one level can see
    a correlation longer than the level): here three in four of them."""
    refused = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        y = np.empty(1000)
        y[0] = rng.standard_normal()
        e = rng.standard_normal(1000) * math.sqrt(1 - 0.999**2)
        for t in range(1, y.size):
            y[t] = 0.999 * y[t - 1] + e[t]
        x = np.exp(0.5 * y)
        reason = correlation_check((x <= np.median(x)).astype(float))
        if reason is None:
            continue
        refused += 1
        assert reason.startswith(REFUSED) and "--trials" in reason
        for iv in (percentile_interval(x, 0.5), mean_interval(x), proportion_interval(x <= 1.2, scores=x / 1.2)):
            assert not iv.bounded and iv.low is None and iv.high is None and iv.reason == reason
    assert refused >= 4


def test_independent_values_stay_bounded_at_about_the_iid_width() -> None:
    """Lognormal levels of 2,000: the check passes nearly all, p50 stays within 30% of the
    i.i.d. interval's width and p99 (whose n_eff is the smallest of three noisy ones) within
    50%: Student's t on 9 degrees of freedom and the batch variance's own noise are the price
    of not assuming independence (measured 1.25 and 1.40; Geyer's n_eff alone: 1.05, 1.15)."""
    rng = np.random.default_rng(11)
    passed, ratios = 0, {0.5: [], 0.99: []}
    for _ in range(40):
        x = rng.lognormal(0, 0.5, 2000)
        passed += correlation_check((x <= np.median(x)).astype(float)) is None
        for q, r in ratios.items():
            new, iid = percentile_interval(x, q), iid_percentile_interval(x, q)
            assert new.bounded, new
            r.append(new.half_width / iid.half_width)  # type: ignore[operator]
        att = proportion_interval(x <= 1.9, scores=x / 1.9)
        assert att.bounded and att.n_eff > 0.3 * x.size
    assert passed >= 38
    assert 1.0 <= float(np.median(ratios[0.5])) < 1.3, np.median(ratios[0.5])
    assert 1.0 <= float(np.median(ratios[0.99])) < 1.5, np.median(ratios[0.99])
