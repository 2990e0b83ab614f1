"""Intervals with n_eff: ranks against a brute-force binomial, unbounded tails, correlation."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from loadgen.metrics._dist import binom_cdf, norm_ppf, t_ppf
from loadgen.metrics.uncertainty import (
    autocorrelation_time,
    batch_effective_size,
    effective_sample_size,
    iid_percentile_interval,
    mean_interval,
    min_bounded_n,
    needed_n_eff,
    order_statistic_ranks,
    percentile_interval,
    proportion_interval,
)


def brute_ranks(n: int, q: float, confidence: float) -> tuple[int | None, int | None]:
    """The ranks by exact rational binomial sums (no floating point in the comparisons)."""
    qf = Fraction(q).limit_denominator(10**6)
    a2 = (1 - Fraction(confidence).limit_denominator(10**6)) / 2
    pmf = [math.comb(n, k) * qf**k * (1 - qf) ** (n - k) for k in range(n + 1)]
    cdf = [sum(pmf[: k + 1]) for k in range(n + 1)]
    low = max((k + 1 for k in range(n) if cdf[k] <= a2), default=None)
    high = min((u for u in range(1, n + 1) if 1 - cdf[u - 1] <= a2), default=None)
    return low, high


@pytest.mark.parametrize(
    ("n", "q", "conf"),
    [
        (20, 0.5, 0.95),
        (50, 0.9, 0.95),
        (100, 0.99, 0.95),
        (300, 0.99, 0.95),
        (120, 0.25, 0.9),
        (400, 0.99, 0.99),
        (73, 0.5, 0.99),
    ],
)
def test_order_statistic_ranks_match_brute_force(n: int, q: float, conf: float) -> None:
    assert order_statistic_ranks(n, q, conf) == brute_ranks(n, q, conf)


def test_ranks_cover_by_their_exact_probability() -> None:
    low, high = order_statistic_ranks(100, 0.5, 0.95)
    assert low is not None and high is not None
    cdf = binom_cdf(100, 0.5)
    assert cdf[high - 1] - cdf[low - 1] >= 0.95  # P(l <= B <= u - 1)


def test_binom_cdf_matches_exact_sums() -> None:
    for n, p in ((30, 0.3), (200, 0.99), (7, 0.5)):
        exact = np.cumsum([math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)])
        assert np.allclose(binom_cdf(n, p), exact, rtol=1e-10, atol=1e-14)


def test_normal_and_t_quantiles() -> None:
    assert norm_ppf(0.975) == pytest.approx(1.959963984540054, abs=1e-12)
    assert norm_ppf(0.005) == pytest.approx(-2.575829303548901, abs=1e-12)
    assert t_ppf(0.975, 8) == pytest.approx(2.306004, abs=1e-3)
    assert t_ppf(0.995, 19) == pytest.approx(2.860935, abs=1e-3)
    assert t_ppf(0.975, 1) == pytest.approx(12.7062, abs=1e-3)


def test_p999_of_300_requests_cannot_be_bounded() -> None:
    x = np.random.default_rng(3).lognormal(0, 0.5, 300)
    iv = percentile_interval(x, 0.999)
    assert not iv.bounded and iv.high is None and iv.half_width is None
    assert iv.reason is not None and "p99.9" in iv.reason and str(needed_n_eff(0.999)) in iv.reason
    assert not iid_percentile_interval(x, 0.999).bounded  # 0.999^300 = 0.74 > 0.025 even i.i.d.
    assert min_bounded_n(0.999) == math.ceil(math.log(0.025) / math.log(0.999))


def test_iid_interval_uses_the_sample_order_statistics() -> None:
    x = np.random.default_rng(4).permutation(np.arange(1.0, 101.0))  # values 1..100: x_(r) = r
    iv = iid_percentile_interval(x, 0.5)
    low, high = order_statistic_ranks(100, 0.5, 0.95)
    assert (iv.low, iv.high) == (float(low), float(high))  # type: ignore[arg-type]
    assert iv.n == iv.n_eff == 100 and iv.point == 50.5


def ar1(n: int, phi: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    e = rng.standard_normal(n) * math.sqrt(1 - phi * phi)
    y = np.empty(n)
    y[0] = rng.standard_normal()
    for t in range(1, n):
        y[t] = phi * y[t - 1] + e[t]
    return y


def test_ess_of_independent_values_is_close_to_n() -> None:
    x = np.random.default_rng(5).standard_normal(5000)
    assert 0.85 * 5000 < effective_sample_size(x) <= 5000


def test_ess_of_ar1_recovers_its_autocorrelation_time() -> None:
    # τ of an AR(1) is (1 + φ) / (1 − φ) = 19 at φ = 0.9; the estimate sits a standard error above
    tau = autocorrelation_time(ar1(100_000, 0.9, 6))
    assert 19 * 0.9 < tau < 19 * 1.35


def test_correlation_widens_the_interval() -> None:
    y = np.exp(0.5 * ar1(4000, 0.9, 7))
    new, old = percentile_interval(y, 0.5), iid_percentile_interval(y, 0.5)
    assert new.n_eff < 0.2 * new.n
    assert new.half_width is not None and old.half_width is not None
    assert new.half_width > 2 * old.half_width


def test_proportion_interval_is_wilson_on_n_eff_for_independent_successes() -> None:
    s = np.zeros(1000, dtype=bool)
    s[np.random.default_rng(8).permutation(1000)[:900]] = True
    iv = proportion_interval(s)
    assert iv.point == 0.9 and iv.low is not None and iv.high is not None
    assert iv.low < 0.9 < iv.high and iv.high - iv.low < 0.06
    assert proportion_interval(np.ones(50, dtype=bool)).high == 1.0


def test_mean_interval_and_errors() -> None:
    x = np.random.default_rng(9).normal(10, 1, 2000)
    iv = mean_interval(x)
    assert iv.low is not None and iv.high is not None and iv.low < 10 < iv.high
    with pytest.raises(ValueError, match="confidence"):
        percentile_interval(x, 0.5, confidence=1.5)
    with pytest.raises(ValueError, match="NaN"):
        percentile_interval([1.0, math.nan], 0.5)
    assert not percentile_interval([], 0.5).bounded


def test_few_misses_take_n_eff_from_the_scores_as_a_tail_quantile_does() -> None:
    """Three misses in 200 correlated requests cannot show how misses cluster: with the
    scores, n_eff is capped by the indicator with 50 requests on the rarer side."""
    y = ar1(200, 0.9, 3)
    bound = float(np.sort(y)[-4])  # 3 requests above it
    met = y <= bound
    plain = proportion_interval(met)
    scored = proportion_interval(met, scores=y / bound)

    def n_eff(ind: np.ndarray) -> float:  # the smaller of batch means' and Geyer's
        return min(batch_effective_size(ind.astype(float)), effective_sample_size(ind.astype(float)))

    ref = n_eff(y <= np.percentile(y, 75))
    mid = n_eff(y <= np.median(y))  # correlated: it caps
    assert mid < 100 and scored.point == plain.point == 197 / 200
    assert scored.n_eff == pytest.approx(min(plain.n_eff, ref, mid))
    assert scored.n_eff < plain.n_eff / 3  # the handful of misses looked nearly independent
    assert scored.low is not None and plain.low is not None and scored.low < plain.low
    # many misses: the scores change nothing (the median's indicator is the series itself)
    half = y <= np.median(y)
    assert proportion_interval(half, scores=y).n_eff == proportion_interval(half).n_eff


def test_scores_may_be_infinite_and_must_match_the_trials() -> None:
    y = ar1(300, 0.8, 4)
    scores = np.where(np.arange(300) % 97 == 0, np.inf, y)  # failed requests
    met = scores <= 1.5
    iv = proportion_interval(met, scores=scores)
    assert iv.bounded and 0 < iv.n_eff <= 300 and iv.point == met.mean()
    with pytest.raises(ValueError, match="299 values for 300 trials"):
        proportion_interval(met, scores=scores[:-1])
