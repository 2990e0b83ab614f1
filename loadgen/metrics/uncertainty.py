"""Intervals that account for correlation between a level's requests.

Requests of one level share batches and queues, so neighbours in time order have
correlated latencies and an i.i.d. interval is too narrow. Every function here takes
values *in time order* and returns a frozen :class:`Interval` carrying ``n`` and the
effective sample size ``n_eff``: the smaller of the batch-means one over :data:`BATCHES`
batches (Schmeiser 1982, *Operations Research* 30(3); :func:`batch_effective_size`) and
Geyer's (:func:`effective_sample_size`), with Student's t on ``BATCHES − 1`` degrees of
freedom. :func:`percentile_interval` (order statistics; :func:`quantile_effective_size`
gives its ``n_eff``), :func:`proportion_interval` (Wilson), :func:`mean_interval`. Before
any is printed the correlation must be resolved within a batch (:func:`correlation_check`);
where it spans the level the interval is refused with that reason.
:func:`iid_percentile_interval` stays for comparison. Estimators, references and the
coverage study: docs/metrics.md, "Uncertainty".

    >>> import numpy as np
    >>> x = np.random.default_rng(1).lognormal(0, 0.5, 2000)
    >>> percentile_interval(x[:300], 0.999).reason
    'p99.9 needs n_eff >= 4913 for a 95% interval from 10 batch means (n_eff = 265)'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadgen.metrics._dist import binom_cdf, norm_ppf, t_ppf

__all__ = [
    "BATCHES",
    "Interval",
    "autocorrelation_time",
    "batch_effective_size",
    "correlation_check",
    "effective_sample_size",
    "iid_percentile_interval",
    "mean_interval",
    "min_bounded_n",
    "needed_n_eff",
    "percentile_interval",
    "percentile_intervals",
    "proportion_interval",
    "quantile_effective_size",
]

Array = npt.NDArray[np.float64]

RARE_EVENTS = 50
"""A tail quantile with fewer values beyond it takes ``n_eff`` at most that of the level with this many."""

BATCHES = 10
"""Batches of the batch-means variance: few and long, so that a batch outlasts the
correlation (Schmeiser 1982 advises 10 to 30; the coverage study chose 10)."""

MEDIAN_TAU = 2.0
"""A quantile's or attainment's ``n_eff`` is capped by the median indicator's when that
indicator's batch-means ``τ`` reaches this (chance alone gives it in ~3% of i.i.d. levels)."""

REFUSED = "correlation spans the level: run longer, or use --trials"
"""The start of the ``reason`` of an interval refused by :func:`correlation_check`."""


@dataclass(frozen=True, slots=True)
class Interval:
    """A point estimate with its ``confidence`` interval ``[low, high]``.

    ``low``/``high`` are ``None`` on a side the data cannot bound (then ``bounded`` is
    false and ``reason`` says why); ``n`` is the sample size and ``n_eff`` the effective
    sample size: the i.i.d. variance of the statistic over its variance under correlation,
    times ``n`` (batch means' or Geyer's, the smaller; ``n_eff <= n``, close to ``n`` for
    i.i.d. data). The interval stands on ``n_eff`` discounted for the batches' degrees of
    freedom.
    """

    point: float
    low: float | None
    high: float | None
    n: int
    n_eff: float
    confidence: float
    bounded: bool
    reason: str | None = None

    @property
    def half_width(self) -> float | None:
        """``(high − low) / 2``, or ``None`` when not bounded."""
        if self.low is None or self.high is None:
            return None
        return (self.high - self.low) / 2


def _array(values: npt.ArrayLike) -> Array:
    arr = np.asarray(values, dtype=np.float64).ravel()
    if np.isnan(arr).any():
        raise ValueError("values must not contain NaN (drop missing values first, keeping time order)")
    return arr


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")


def _autocorrelation(x: Array) -> Array:
    """The sample autocorrelation ``ρ(0..n-1)`` (biased autocovariance, by FFT)."""
    n = x.size
    d = x - x.mean()
    size = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(d, size)
    acov = np.fft.irfft(f * np.conj(f), size)[:n]
    return np.asarray(acov / acov[0], dtype=np.float64)


def autocorrelation_time(values: npt.ArrayLike) -> float:
    """The integrated autocorrelation time ``τ = 1 + 2 Σ ρ(k)``, estimated by Geyer's initial
    monotone sequence and taken at one standard error above the estimate.

    The sum runs over lags ``0 .. W−1`` (``W = 2m``, ``m`` the first pair ``ρ(2m) + ρ(2m+1)``
    that is not positive). Its standard error is ``τ · √(2(2W−1)/n)`` (Madras & Sokal 1988,
    *J. Stat. Phys.* 50, eq. 2.22, for a window of ``2W − 1`` lags): a short, strongly
    correlated series underestimates ``τ``, and the upper value keeps its intervals honest
    (the coverage study's choice). 1 for a constant or too short series.
    """
    x = _array(values)
    n = x.size
    if n < 4 or float(np.ptp(x)) == 0.0:
        return 1.0
    rho = _autocorrelation(x)
    pairs = rho[: 2 * (n // 2)].reshape(-1, 2).sum(axis=1)  # Γ(m) = ρ(2m) + ρ(2m+1)
    negative = np.flatnonzero(pairs <= 0)
    stop = int(negative[0]) if negative.size else pairs.size
    if stop == 0:
        return 1.0
    monotone = np.minimum.accumulate(pairs[:stop])
    tau = max(-1.0 + 2.0 * float(monotone.sum()), 1.0 / n)  # Γ(0) = 1 + ρ(1) counts ρ(0) once
    window = 2 * stop
    return tau * (1.0 + math.sqrt(2.0 * (2 * window - 1) / n))


def effective_sample_size(values_in_time_order: npt.ArrayLike) -> float:
    """``n / τ`` (at most ``n``), with ``τ`` from :func:`autocorrelation_time` (Geyer's).

    Alone it misses correlation that is small per lag but reaches far (it stops at the
    first noisy pair of lags: docs/metrics.md, "Uncertainty"), so the intervals take the
    smaller of it and :func:`batch_effective_size`. Constant series get ``n``.
    """
    x = _array(values_in_time_order)
    if x.size == 0:
        return 0.0
    return float(min(x.size, x.size / autocorrelation_time(x)))


def min_bounded_n(q: float, confidence: float = 0.95) -> int:
    """The smallest (effective) sample size whose order statistics can bound the
    ``q``-quantile on both sides: ``max(q, 1 − q)^n <= (1 − confidence) / 2``."""
    _check_confidence(confidence)
    return math.ceil(math.log((1 - confidence) / 2) / math.log(max(q, 1 - q)))


def order_statistic_ranks(n: int, q: float, confidence: float) -> tuple[int | None, int | None]:
    """1-based ranks ``(l, u)`` with ``P(X_(l) <= ξ_q < X_(u)) >= confidence`` for ``n``
    i.i.d. continuous values, each tail at most ``(1 − confidence) / 2``: ``l`` is the
    largest rank with ``P(B <= l − 1) <= α/2`` and ``u`` the smallest with
    ``P(B >= u) <= α/2``, ``B ~ Bin(n, q)``. ``None`` where no rank of the sample does."""
    alpha2 = (1 - confidence) / 2
    cdf = binom_cdf(n, q)  # cdf[k] = P(B <= k)
    ok_low = np.flatnonzero(cdf[:n] <= alpha2)  # l - 1 = k  -> l = k + 1 in 1..n
    low = int(ok_low[-1]) + 1 if ok_low.size else None
    ok_high = np.flatnonzero(1 - cdf[:n] <= alpha2)  # P(B >= u) = 1 - cdf[u - 1], u - 1 in 0..n-1
    high = int(ok_high[0]) + 1 if ok_high.size else None
    return low, high


def _t(confidence: float, df: float) -> float:
    return t_ppf(1 - (1 - confidence) / 2, max(df, 1.0))


def _batches(n: int) -> int:
    """The batch count for ``n`` values: :data:`BATCHES`, fewer (of 2 values) below ``2·BATCHES``."""
    return min(BATCHES, n // 2)


def _batch_means(x: Array, b: int) -> Array:
    """Means of ``b`` consecutive equal batches (the first ``n mod b`` values left out)."""
    m = x.size // b
    return np.asarray(x[x.size - b * m :].reshape(b, m).mean(axis=1), dtype=np.float64)


def batch_effective_size(values_in_time_order: npt.ArrayLike) -> float:
    """``n · Var_iid / Var_bm`` (at most ``n``): the sample variance over ``n`` against the
    variance of the mean from :data:`BATCHES` batch means (``S_b² / b``). ``n`` for a
    constant series, or one too short for two batches of two."""
    x = _array(values_in_time_order)
    n = x.size
    b = _batches(n)
    if b < 2:
        return float(n)
    s2 = float(x.var(ddof=1))
    var_bm = float(_batch_means(x, b).var(ddof=1)) / b
    if s2 <= 0.0 or var_bm <= 0.0:
        return float(n)
    return float(min(n, s2 / var_bm))


def _n_eff(y: Array) -> float:
    """The smaller of the batch-means and Geyer's ``n_eff``: each overestimates it where the
    other does not (batch means where ``τ`` nears a batch's length, Geyer's where the
    correlation is small per lag but reaches far)."""
    return min(batch_effective_size(y), effective_sample_size(y))


def _discount(n: int, confidence: float) -> float:
    """``(z / t_{b−1})²``: the batch variance's ``b − 1`` degrees of freedom as a smaller
    count of independent values (1 for a series too short for batches)."""
    b = _batches(n)
    if b < 2:
        return 1.0
    z = norm_ppf(1 - (1 - confidence) / 2)
    return (z / _t(confidence, b - 1)) ** 2


def needed_n_eff(q: float, confidence: float = 0.95) -> int:
    """The ``n_eff`` a level of at least ``2·BATCHES`` values needs for its ``q``-quantile to
    be bounded on both sides: :func:`min_bounded_n` over the batches' discount."""
    return math.ceil(min_bounded_n(q, confidence) / _discount(2 * BATCHES, confidence) - 1e-9)


def correlation_check(values_in_time_order: npt.ArrayLike) -> str | None:
    """``None`` when the correlation of the series is resolved within a batch, else the
    reason (starting with :data:`REFUSED`). Two signs that it is not, on the
    :data:`BATCHES` batch means: the batch-means ``τ = n / n_eff`` exceeds a batch's length
    (the level holds fewer effective values than batches), or the lag-1 correlation of the
    batch means exceeds its one-sided 1% critical value under independence, ``−1/b +
    2.326/√b`` (0.64 for 10 batches; the von Neumann ratio's test, Young 1941, *Ann. Math.
    Statist.* 12, as Fishman's LBATCH applies it, Fishman 1978, *Management Sci.* 24(5)).
    A batch-means interval from correlated batches is too narrow; no batch count of one
    level can resolve a correlation that spans it."""
    x = _array(values_in_time_order)
    n = x.size
    b = _batches(n)
    if b < BATCHES or float(np.ptp(x)) == 0.0:  # under 20 values: too few to judge (and wide anyway)
        return None
    size = n // b
    tau = n / batch_effective_size(x)
    means = _batch_means(x, b)
    d = means - means.mean()
    den = float(d @ d)
    r1 = float(d[1:] @ d[:-1]) / den if den > 0 else 0.0
    if tau > size or r1 > -1 / b + 2.326 / math.sqrt(b):
        return (
            f"{REFUSED} (τ ≈ {tau:.0f} values against batches of {size}; lag-1 correlation of {b} batch means {r1:.2f})"
        )
    return None


def _label(q: float) -> str:
    return f"p{100 * q:.10g}"


def _percentile_from_ranks(
    x: Array, q: float, confidence: float, n_eff: float, discount: float = 1.0, srt: Array | None = None
) -> Interval:
    """The order-statistic interval on ``m = ⌊n_eff · discount⌋`` effective values (``srt``:
    ``x`` sorted, when the caller has it)."""
    n = x.size
    srt = np.sort(x) if srt is None else srt
    point = float(np.percentile(srt, 100 * q))
    m = max(1, min(n, math.floor(n_eff * discount + 1e-9)))
    l_m, u_m = order_statistic_ranks(m, q, confidence)
    # rank r of m effective values covers the fraction r/m of the sample: scale, rounding outward
    low = None if l_m is None else float(srt[max(1, math.floor(l_m * n / m + 1e-9)) - 1])
    high = None if u_m is None else float(srt[min(n, math.ceil((u_m - 1) * n / m - 1e-9) + 1) - 1])
    bounded = low is not None and high is not None
    reason = None
    if not bounded:
        need = math.ceil(min_bounded_n(q, confidence) / discount - 1e-9)
        src = f" from {_batches(n)} batch means" if discount < 1.0 else ""
        reason = f"{_label(q)} needs n_eff >= {need} for a {100 * confidence:g}% interval{src} (n_eff = {n_eff:.0f})"
    return Interval(point, low, high, n, n_eff, confidence, bounded, reason)


def _empty(confidence: float) -> Interval:
    return Interval(math.nan, None, None, 0, 0.0, confidence, False, "no values")


def _refused(point: float, n: int, n_eff: float, confidence: float, reason: str) -> Interval:
    return Interval(point, None, None, n, n_eff, confidence, False, reason)


def _median_indicator(x: Array) -> Array:
    return (x <= float(np.median(x))).astype(np.float64)


def percentile_interval(values: npt.ArrayLike, q: float, confidence: float = 0.95) -> Interval:
    """The ``q``-quantile (0 < q < 1; ``numpy.percentile``'s point) with distribution-free
    bounds on ``n_eff`` (:func:`quantile_effective_size`, values in time order), discounted
    for the batches' degrees of freedom; refused where :func:`correlation_check` fails on
    the indicator at the median."""
    return percentile_intervals(values, (q,), confidence)[0]


def percentile_intervals(values: npt.ArrayLike, qs: Sequence[float], confidence: float = 0.95) -> list[Interval]:
    """:func:`percentile_interval` for each of ``qs``, sorting and judging the series' median
    indicator once for all of them."""
    _check_confidence(confidence)
    for q in qs:
        if not 0.0 < q < 1.0:
            raise ValueError(f"q must be between 0 and 1 (0.99 for p99), got {q}")
    x = _array(values)
    if x.size == 0:
        return [_empty(confidence) for _ in qs]
    mid = _median_indicator(x)
    refused = correlation_check(mid)
    mid_n_eff = _n_eff(mid) if any(q != 0.5 for q in qs) else float(x.size)
    srt = np.sort(x)
    out = []
    for q in qs:
        point = float(np.percentile(srt, 100 * q))
        n_eff = _rare_capped(x, x <= point, q)
        if q != 0.5 and mid_n_eff * MEDIAN_TAU <= x.size:
            n_eff = min(n_eff, mid_n_eff)
        if refused is not None:
            out.append(_refused(point, x.size, n_eff, confidence, refused))
        else:
            out.append(_percentile_from_ranks(x, q, confidence, n_eff, _discount(x.size, confidence), srt))
    return out


def quantile_effective_size(values: npt.ArrayLike, q: float, *, median_cap: bool = True) -> float:
    """``n_eff`` for the ``q``-quantile of ``values`` (in time order): that of the
    indicator series ``1{x <= q̂}`` (the smaller of batch means' and Geyer's; as
    Vehtari et al. 2021, *Bayesian Analysis* 16(2), take the indicator for quantiles), at
    most that of the indicator at the median where that one is correlated (in a queue or a
    burst the tail is reached by the bulk's long excursions, which the few tail values cannot
    show; :data:`MEDIAN_TAU`), and in a tail with
    fewer than :data:`RARE_EVENTS` values beyond ``q̂`` at most that of the level with that
    many (a handful of exceedances cannot show their own clustering). ``median_cap=False``
    leaves out the median's cap: the comparison's resampling of a tail (docs/metrics.md,
    "Comparing runs") judges a difference between two runs' tails by their own exceedances."""
    x = _array(values)
    if x.size == 0:
        return 0.0
    point = float(np.percentile(x, 100 * q))
    n_eff = _rare_capped(x, x <= point, q)
    return n_eff if q == 0.5 or not median_cap else _median_capped(x, n_eff)


def _median_capped(x: Array, n_eff: float) -> float:
    """``n_eff`` at most that of the indicator at the median of ``x`` where that one shows
    correlation (``τ ≥ MEDIAN_TAU``); below, the two differ by the batches' noise alone, and
    the smaller of two noisy values would only widen i.i.d. intervals."""
    mid = _n_eff(_median_indicator(x))
    return min(n_eff, mid) if mid * MEDIAN_TAU <= x.size else n_eff


def _rare_capped(x: Array, below: npt.NDArray[np.bool_], share: float) -> float:
    """``n_eff`` of the indicator ``below`` (``x`` at or under a level, ``share`` of them),
    capped, when fewer than :data:`RARE_EVENTS` values lie on the rarer side, by that of
    the indicator at the level of ``x`` with :data:`RARE_EVENTS` values on that side."""
    n = x.size
    n_eff = _n_eff(below.astype(np.float64))
    if min(share, 1 - share) * n < RARE_EVENTS:
        near = RARE_EVENTS / n if share < 0.5 else 1 - RARE_EVENTS / n
        if 0.0 < near < 1.0:
            ref = float(np.percentile(x, 100 * near))
            n_eff = min(n_eff, _n_eff((x <= ref).astype(np.float64)))
    return n_eff


def iid_percentile_interval(values: npt.ArrayLike, q: float, confidence: float = 0.95) -> Interval:
    """The order-statistic interval assuming independent values (``n_eff = n``)."""
    _check_confidence(confidence)
    x = _array(values)
    if x.size == 0:
        return _empty(confidence)
    return _percentile_from_ranks(x, q, confidence, float(x.size))


def proportion_interval(
    successes_in_time_order: npt.ArrayLike, confidence: float = 0.95, scores: npt.ArrayLike | None = None
) -> Interval:
    """The success fraction with Wilson's score interval on the series' ``n_eff``,
    Student's t on the batches' degrees of freedom in place of z.

    ``scores`` (optional, same order and length): a continuous value per trial, a success
    being a low score, such as a request's largest latency-to-limit ratio over its SLOs
    (failed requests ``inf``). With it, ``n_eff`` is at most that of the indicator at the
    median score where that one is correlated (as for a quantile) and, when fewer than :data:`RARE_EVENTS` trials lie on the rarer side (a
    few SLO misses), that of ``1{score <= s_k}`` at the score ``s_k`` with
    :data:`RARE_EVENTS` trials on that side, as for a tail quantile; the correlation check
    runs on the median score's indicator (without scores, on the successes).
    """
    _check_confidence(confidence)
    s = _array(np.asarray(successes_in_time_order, dtype=bool))
    n = s.size
    if n == 0:
        return _empty(confidence)
    p = float(s.mean())
    if scores is None:
        m = _n_eff(s)
        refused = correlation_check(s)
    else:
        x = np.asarray(scores, dtype=np.float64).ravel()
        if x.size != n:
            raise ValueError(f"scores has {x.size} values for {n} trials")
        finite = x[np.isfinite(x)]
        top = float(np.nextafter(finite.max(), np.inf)) if finite.size else 1.0
        x = np.where(np.isfinite(x), x, top)  # inf and NaN: past every score
        m = _median_capped(x, _rare_capped(x, s.astype(bool), p))
        refused = correlation_check(_median_indicator(x))
    if refused is not None:
        return _refused(p, n, m, confidence, refused)
    b = _batches(n)
    z = _t(confidence, b - 1) if b >= 2 else norm_ppf(1 - (1 - confidence) / 2)
    z2m = z * z / m
    centre = (p + z2m / 2) / (1 + z2m)
    half = z / (1 + z2m) * math.sqrt(p * (1 - p) / m + z2m / (4 * m))
    low = 0.0 if p == 0.0 else max(0.0, centre - half)  # Wilson's bound is exactly 0 (1) there
    high = 1.0 if p == 1.0 else min(1.0, centre + half)
    return Interval(p, low, high, n, m, confidence, True)


def mean_interval(values: npt.ArrayLike, confidence: float = 0.95) -> Interval:
    """The mean with ``mean ± t(b − 1) · s / √n_eff``, refused as :func:`percentile_interval` is."""
    _check_confidence(confidence)
    x = _array(values)
    n = x.size
    if n == 0:
        return _empty(confidence)
    mean = float(x.mean())
    m = _n_eff(x)
    b = _batches(n)
    if b < 2:
        return Interval(mean, None, None, n, m, confidence, False, f"a mean interval needs 4 values (n = {n})")
    refused = correlation_check(_median_indicator(x))
    if refused is not None:
        return _refused(mean, n, m, confidence, refused)
    half = _t(confidence, b - 1) * float(x.std(ddof=1)) / math.sqrt(m)
    return Interval(mean, mean - half, mean + half, n, m, confidence, True)
