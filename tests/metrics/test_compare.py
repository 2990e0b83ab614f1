"""Bootstrap intervals and verdicts (loadgen.metrics.compare) on synthetic samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.metrics import compare as C


def brute_force(x: np.ndarray, q: float, resamples: int, seed: int) -> np.ndarray:
    idx = np.random.default_rng(seed).integers(0, x.size, size=(resamples, x.size))
    return np.percentile(x[idx], 100 * q, axis=1)


@pytest.mark.parametrize(("n", "q"), [(7, 0.3), (40, 0.5), (41, 0.5), (60, 0.99), (500, 0.9)])
def test_order_statistic_bootstrap_matches_brute_force(n: int, q: float) -> None:
    x = np.sort(np.random.default_rng(n).lognormal(0.0, 1.0, n))
    fast = C.bootstrap_quantile(x, q, 100_000, np.random.default_rng(1))
    slow = brute_force(x, q, 20_000, seed=2)
    probs = [5, 25, 50, 75, 95]
    # the two are the same distribution: quantiles agree up to Monte-Carlo error,
    # measured in ranks of the data (each bootstrap value is one of x or between two)
    rank = lambda v: np.searchsorted(x, np.percentile(v, probs))  # noqa: E731
    assert np.abs(rank(fast) - rank(slow)).max() <= 1
    assert abs(fast.mean() - slow.mean()) < 0.03 * x.std() + 0.02 * abs(slow.mean())
    # every draw lies within the data's range
    assert fast.min() >= x[0] and fast.max() <= x[-1]


def test_bootstrap_of_a_constant_sample_is_constant() -> None:
    draws = C.bootstrap_quantile(np.full(50, 3.5), 0.99, 200, np.random.default_rng(0))
    assert np.all(draws == 3.5)


def test_known_shift_is_covered_and_judged() -> None:
    rng = np.random.default_rng(11)
    a = rng.normal(100.0, 10.0, 4000)
    b = rng.normal(105.0, 10.0, 4000)  # latency 5 ms higher: worse
    d = C.quantile_difference(a, b, 0.5, seed=3)
    assert d.ci is not None and d.ci[0] < 5.0 < d.ci[1]
    assert d.verdict == C.WORSE
    assert d.a == pytest.approx(float(np.percentile(a, 50))) and d.diff == pytest.approx(d.b - d.a)
    # the same shift with higher-is-better reads as better
    assert C.quantile_difference(a, b, 0.5, seed=3, higher_is_better=True).verdict == C.BETTER
    # and the other way round
    assert C.quantile_difference(b, a, 0.5, seed=3).verdict == C.BETTER


def test_p99_shift_is_covered() -> None:
    rng = np.random.default_rng(5)
    a = rng.exponential(20.0, 20_000)
    b = a + 8.0  # every request 8 ms slower: every percentile moves by 8
    b = rng.permutation(b)
    d = C.quantile_difference(a, b, 0.99, seed=1)
    assert d.diff == pytest.approx(8.0)
    assert d.ci is not None and d.ci[0] < 8.0 < d.ci[1]
    assert d.verdict == C.WORSE


def test_identical_samples_are_no_significant_change() -> None:
    x = np.random.default_rng(2).lognormal(3.0, 0.5, 4000)  # n_eff ~ 0.9 n at p99: within 10% either side
    for q in (0.5, 0.99):
        d = C.quantile_difference(x, x.copy(), q, seed=9)
        assert d.diff == 0.0
        assert d.ci is not None and d.ci[0] <= 0.0 <= d.ci[1]
        assert d.verdict == C.NO_CHANGE


def test_same_distribution_false_alarms_near_five_percent() -> None:
    """Calibration: two samples from one distribution, many seeds — the 95% interval
    excludes 0 about 5% of the time, and covers the true shift about 95% of the time."""
    rng = np.random.default_rng(123)
    alarms = covered = 0
    trials = 300
    for k in range(trials):
        a = rng.lognormal(3.0, 0.4, 400)
        b = rng.lognormal(3.0, 0.4, 400)
        if C.quantile_difference(a, b, 0.5, seed=k).verdict in (C.BETTER, C.WORSE):
            alarms += 1
        shifted = C.quantile_difference(a, b + 2.0, 0.5, seed=k)
        covered += shifted.ci is not None and shifted.ci[0] <= 2.0 <= shifted.ci[1]
    assert 0.01 <= alarms / trials <= 0.11
    assert 0.89 <= covered / trials <= 0.99


def test_min_effect_and_min_tail() -> None:
    rng = np.random.default_rng(4)
    a = rng.normal(100.0, 1.0, 50_000)
    b = rng.normal(101.0, 1.0, 50_000)  # +1%: clearly resolved, but small
    assert C.quantile_difference(a, b, 0.5).verdict == C.WORSE
    small = C.quantile_difference(a, b, 0.5, min_effect=0.02)
    assert small.verdict == C.NO_CHANGE and small.ci is not None and small.ci[0] > 0
    # p99 of 40 samples: too thin a tail to rule a change out ...
    alike = C.quantile_difference(a[:40], a[40:80], 0.99)
    assert alike.verdict == C.INCONCLUSIVE and "too few" in alike.note
    # ... but an interval that excludes 0 decides, and says how thin the tail was
    few = C.quantile_difference(a[:40], a[:40] + 50, 0.99)
    assert few.verdict == C.WORSE and "fewer than 5" in few.note and few.diff == pytest.approx(50.0)


def test_empty_side_is_not_available() -> None:
    d = C.quantile_difference([], [1.0, 2.0], 0.5)
    assert d.verdict == C.NOT_AVAILABLE and d.a is None and d.b == 1.5 and d.ci is None
    assert C.quantile_difference([np.nan], [1.0], 0.5).verdict == C.NOT_AVAILABLE


def test_proportions() -> None:
    same = C.proportion_difference((500, 0.9), (500, 0.9), scale_a=100, scale_b=100)
    assert same.diff == 0.0 and same.verdict == C.NO_CHANGE and same.a == pytest.approx(90.0)
    better = C.proportion_difference((2000, 0.80), (2000, 0.90))
    assert better.verdict == C.BETTER and better.ci is not None and better.ci[0] < 0.10 < better.ci[1]
    assert C.proportion_difference((0, None), (10, 0.5)).verdict == C.NOT_AVAILABLE


def test_block_rates_mean_is_the_window_rate() -> None:
    window = (1_000_000_000, 3_000_000_000)  # 2 s
    t = np.array([1.0e9, 1.5e9, 2.0e9, 2.9e9, 3.0e9], dtype=np.int64)
    w = np.array([10, 20, 30, 40, 50])
    rates = C.block_rates(t, window, n_blocks=4, weights=w)
    assert rates.tolist() == [20.0, 40.0, 60.0, 180.0]  # 0.5 s blocks; the end lands in the last
    assert rates.mean() == pytest.approx(w.sum() / 2.0)
    assert C.block_rates(t, (5, 5)).size == 0
    with pytest.raises(ValueError):
        C.block_rates(t, window, n_blocks=0)


def test_rate_difference() -> None:
    rng = np.random.default_rng(8)
    a = rng.normal(1000.0, 30.0, 20)
    b = rng.normal(1200.0, 30.0, 20)
    d = C.rate_difference(a, b, seed=1)
    assert d.verdict == C.BETTER and d.ci is not None and d.ci[0] < 200 < d.ci[1]
    assert C.rate_difference(a, a, seed=1).verdict == C.NO_CHANGE
    assert C.rate_difference([], a).verdict == C.NOT_AVAILABLE


def test_same_seed_same_interval() -> None:
    x = np.arange(100.0)
    assert C.quantile_difference(x, x + 1, 0.5, seed=4) == C.quantile_difference(x, x + 1, 0.5, seed=4)


def test_argument_checks() -> None:
    with pytest.raises(ValueError):
        C.quantile_difference([1.0], [2.0], 0.5, confidence=1.5)
    with pytest.raises(ValueError):
        C.quantile_difference([1.0], [2.0], 0.5, resamples=2)
    with pytest.raises(ValueError):
        C.bootstrap_quantile(np.zeros(0), 0.5, 10, np.random.default_rng(0))
    with pytest.raises(ValueError):
        C.bootstrap_quantile(np.zeros(3), 1.5, 10, np.random.default_rng(0))


def test_verdict_rules() -> None:
    assert C.verdict((1.0, 2.0), higher_is_better=False) == C.WORSE
    assert C.verdict((1.0, 2.0), higher_is_better=True) == C.BETTER
    assert C.verdict((-2.0, -1.0), higher_is_better=False) == C.BETTER
    assert C.verdict((-1.0, 1.0), higher_is_better=False) == C.NO_CHANGE
    assert C.verdict((0.0, 1.0), higher_is_better=False) == C.NO_CHANGE  # touching 0 is not excluding it
    assert C.verdict(None, higher_is_better=False) == C.NOT_AVAILABLE
    assert C.verdict((1.0, 2.0), False, min_effect=0.02, base=200.0) == C.NO_CHANGE  # all within 2%


def test_an_interval_containing_zero_is_no_change_only_when_it_rules_out_a_large_one() -> None:
    # the demo's 16-user ITL p99: 71.2 -> 306 ms, interval of the difference [-29, +250]
    assert C.verdict((-29.3, 249.8), higher_is_better=False, min_effect=0.02, base=71.2) == C.INCONCLUSIVE
    assert C.verdict((-5.0, 7.0), higher_is_better=False, base=71.2) == C.NO_CHANGE  # within 10% either side
    assert C.verdict((-7.2, 1.0), higher_is_better=False, base=71.2) == C.INCONCLUSIVE  # 10.1% below is possible
    # a small but resolved change stays "no significant change" under min_effect
    assert C.verdict((0.1, 0.3), higher_is_better=False, min_effect=0.02, base=20.0) == C.NO_CHANGE


@pytest.mark.parametrize(
    ("ci", "higher_is_better", "base", "expected"),
    [
        # excludes 0: the direction decides, whatever the point estimate (the demo's ITL p99.9)
        ((242.0, 340.0), False, 74.2, C.WORSE),
        ((242.0, 340.0), True, 74.2, C.BETTER),
        ((-340.0, -242.0), False, 74.2, C.BETTER),
        ((-340.0, -242.0), True, 74.2, C.WORSE),
        ((68.0, 511.0), False, 457.0, C.WORSE),  # the matrix's TTFT p99
        # contains 0 within the 10% equivalence margin either side: no change
        ((-3.0, 5.0), False, 74.2, C.NO_CHANGE),
        ((-7.4, 7.4), True, 74.2, C.NO_CHANGE),
        # contains 0 and reaches past the margin (either side): inconclusive
        ((-100.0, 300.0), False, 74.2, C.INCONCLUSIVE),
        ((-7.5, 0.5), True, 74.2, C.INCONCLUSIVE),
        # resolved but all of it within min_effect (2%) of the baseline: too small to matter
        ((0.1, 0.3), False, 20.0, C.NO_CHANGE),
        # resolved and reaching past min_effect: a change, although the point estimate is under 2%
        ((0.1, 0.5), False, 20.0, C.WORSE),
    ],
)
def test_the_category_follows_from_the_interval_alone(
    ci: tuple[float, float], higher_is_better: bool, base: float, expected: str
) -> None:
    assert C.verdict(ci, higher_is_better, min_effect=C.MIN_EFFECT, base=base) == expected


def test_a_resolved_tail_change_is_worse_even_with_few_samples_beyond_it() -> None:
    """The demo at 8 users: ITL p99.9 74 -> ~410 ms, the interval far from 0, yet fewer than
    5 tokens of 3,000 lie beyond p99.9 (the stalls, 3% of tokens, spread over the run). It is worse (it was "inconclusive")."""
    rng = np.random.default_rng(9)
    chunked = rng.normal(70.0, 2.0, 3000)
    unchunked = rng.permutation(np.concatenate([rng.normal(70.0, 2.0, 2910), rng.uniform(380.0, 440.0, 90)]))
    d = C.quantile_difference(chunked, unchunked, 0.999, seed=3, min_effect=C.MIN_EFFECT)
    assert d.ci is not None and d.ci[0] > 0, d
    assert d.verdict == C.WORSE and "fewer than 5" in d.note
    faster = C.quantile_difference(unchunked, chunked, 0.999, seed=3, min_effect=C.MIN_EFFECT)
    assert faster.verdict == C.BETTER


def test_tail_evidence_counts_requests_beyond_every_one_of_the_other_run() -> None:
    rng = np.random.default_rng(5)
    a = rng.normal(70.0, 3.0, 66)  # largest ITL per request: chunked steps
    b = np.concatenate([rng.normal(70.0, 3.0, 26), rng.uniform(300.0, 700.0, 41)])  # 41 requests stalled
    text = C.tail_evidence(a, b, "largest ITL")
    assert text.startswith(
        "per request: 41 of this run's 67 had a higher largest ITL than every one of the baseline's 66"
    )
    chance = float(text.split("alike: ")[1].rstrip(")"))
    want = math.comb(67, 41) / math.comb(133, 41)  # the top 41 of the pooled 133 all from b
    assert chance == pytest.approx(want, rel=0.01)
    assert C.tail_evidence(b, a, "largest ITL").startswith("per request: 41 of the baseline's 67")
    assert C.tail_evidence(a, a + 0.5, "TTFT") == ""  # one or two requests above: a 5% chance or more


def _ar1(rng: np.random.Generator, n: int, phi: float = 0.9) -> np.ndarray:
    """Latencies (ms) in send order whose log is AR(1): neighbours share a queue."""
    e = rng.normal(0.0, 1.0, n)
    x = np.empty(n)
    x[0] = e[0] / math.sqrt(1 - phi**2)
    for i in range(1, n):
        x[i] = phi * x[i - 1] + e[i]
    return 50.0 * np.exp(0.1 * math.sqrt(1 - phi**2) * x)


def test_correlated_runs_of_one_process_are_not_called_different() -> None:
    """Two runs of one AR(1) process (φ = 0.9, τ ≈ 19): the i.i.d. bootstrap calls most pairs
    different; resampling each run on its n_eff keeps false alarms near 5%, and a real 10%
    shift is still found every time."""
    rng = np.random.default_rng(2024)
    trials = 100
    iid = neff = found = 0
    for k in range(trials):
        a, b = _ar1(rng, 2000), _ar1(rng, 2000)
        d = C.quantile_difference(a, b, 0.5, seed=k)
        assert d.method == C.METHOD_NEFF
        neff += d.verdict in (C.BETTER, C.WORSE)
        old = C.quantile_difference(a, b, 0.5, seed=k, independent=True)
        assert old.method == C.METHOD_IID and old.a == d.a and old.b == d.b
        iid += old.verdict in (C.BETTER, C.WORSE)
        found += C.quantile_difference(a, b * 1.10, 0.5, seed=k).verdict == C.WORSE
    assert iid / trials > 0.4  # the old method: a difference in most pairs of identical processes
    assert neff / trials <= 0.10
    assert found == trials


def test_neff_resample_matches_the_iid_bootstrap_on_independent_values() -> None:
    x = np.random.default_rng(6).normal(100.0, 10.0, 5000)
    y = np.random.default_rng(7).normal(100.0, 10.0, 5000)
    d = C.quantile_difference(x, y, 0.5, seed=1, resamples=50_000)
    old = C.quantile_difference(x, y, 0.5, seed=1, resamples=50_000, independent=True)
    assert d.ci is not None and old.ci is not None
    width, old_width = d.ci[1] - d.ci[0], old.ci[1] - old.ci[0]
    assert 1.0 <= width / old_width < 1.15  # n_eff ≈ n (taken one standard error low): barely wider


def test_long_series_n_eff_is_that_of_the_summaries_thinned_series() -> None:
    from loadgen.metrics.bootstrap import effective_size
    from loadgen.metrics.level_intervals import MAX_SERIES
    from loadgen.metrics.uncertainty import quantile_effective_size

    rng = np.random.default_rng(3)
    x = _ar1(rng, 3 * MAX_SERIES + 7)  # like ITL: far more values than the summaries keep
    step = -(-x.size // MAX_SERIES)
    for q in (0.5, 0.99):
        got = effective_size(x, q)
        # every step-th value, as the summaries thin; a tail without the summaries' median cap
        assert got == quantile_effective_size(x[::step], q, median_cap=False)
        assert got <= x.size / step
    short = x[:2000]
    assert effective_size(short, 0.5) == quantile_effective_size(short, 0.5)  # short series: untouched


def test_a_known_n_eff_is_used_and_gives_the_same_interval() -> None:
    from loadgen.metrics.bootstrap import effective_size

    rng = np.random.default_rng(9)
    a, b = _ar1(rng, 3000), _ar1(rng, 3000) * 1.05
    computed = C.quantile_difference(a, b, 0.5, seed=2)
    known = (effective_size(a, 0.5), effective_size(b, 0.5))
    # given n_eff, the order of the values no longer matters: shuffled runs give the same result
    given = C.quantile_difference(rng.permutation(a), rng.permutation(b), 0.5, seed=2, n_eff=known)
    assert given == computed
    # a smaller n_eff (more correlation) widens the interval
    wide = C.quantile_difference(a, b, 0.5, seed=2, n_eff=(known[0] / 4, known[1] / 4))
    assert computed.ci is not None and wide.ci is not None
    assert wide.ci[1] - wide.ci[0] > 1.5 * (computed.ci[1] - computed.ci[0])


def test_a_tails_difference_is_judged_by_the_tail_not_the_medians_correlation() -> None:
    """The demo's lesson: decode steps whose pace wanders slowly (a correlated median) and,
    in one run only, rare long stalls. The summaries' intervals cap a tail's n_eff by the
    median's (a queue's tail cannot vouch for itself); a comparison of two tails resamples
    each on the tail's own n_eff, so a tenfold p99.9 is a change, not 'inconclusive'."""
    from loadgen.metrics.bootstrap import effective_size, quantile_difference
    from loadgen.metrics.uncertainty import quantile_effective_size

    rng = np.random.default_rng(7)
    n = 8000
    pace = np.repeat(rng.lognormal(0.0, 0.3, n // 200), 200)  # the median wanders every 200 tokens
    a = 7.5 * pace * rng.lognormal(0.0, 0.05, n)
    b = a.copy()
    stalls = rng.choice(n, 40, replace=False)  # 0.5% of tokens wait for a long prefill
    b[stalls] = rng.uniform(300.0, 700.0, stalls.size)
    assert effective_size(b, 0.999) > 2 * quantile_effective_size(b, 0.999)  # the cap bites here
    d = quantile_difference(a, b, 0.999)
    assert d.verdict == "worse", d
