"""Intervals that account for correlation between a level's requests.

Requests of one level share batches and queues, so neighbours in time order have
correlated latencies and an i.i.d. interval is too narrow. Every function here takes
values *in time order* and returns a frozen :class:`Interval` carrying ``n`` and the
effective sample size ``n_eff`` it was computed on: :func:`effective_sample_size` (Geyer's
initial monotone sequence), :func:`percentile_interval` (order statistics on ``n_eff``;
:func:`quantile_effective_size` gives that ``n_eff`` alone), :func:`proportion_interval`
(Wilson), :func:`mean_interval` (Student's t), :func:`iid_percentile_interval` (``n_eff =
n``, the naive interval, kept for comparison). The estimators, their references and the
coverage study: docs/metrics.md, "Uncertainty".

Example::

    >>> import numpy as np
    >>> x = np.random.default_rng(1).lognormal(0, 0.5, 2000)
    >>> percentile_interval(x[:300], 0.999).reason
    'p99.9 needs n_eff >= 3688 for a 95% interval (n_eff = 265)'
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadgen.metrics._dist import binom_cdf, norm_ppf, t_ppf

__all__ = [
    "Interval",
    "autocorrelation_time",
    "effective_sample_size",
    "iid_percentile_interval",
    "mean_interval",
    "min_bounded_n",
    "percentile_interval",
    "proportion_interval",
    "quantile_effective_size",
]

Array = npt.NDArray[np.float64]

RARE_EVENTS = 50
"""A tail quantile with fewer values beyond it takes ``n_eff`` at most that of the level with this many."""


@dataclass(frozen=True, slots=True)
class Interval:
    """A point estimate with its ``confidence`` interval ``[low, high]``.

    ``low``/``high`` are ``None`` on a side the data cannot bound (then ``bounded`` is
    false and ``reason`` says why); ``n`` is the sample size and ``n_eff`` the effective
    sample size the interval was computed on (``n_eff <= n``; equal for i.i.d. data).
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
    """``n / τ`` (at most ``n``), with ``τ`` from :func:`autocorrelation_time`.

    A float, since ``τ`` is. Constant series (every request met the SLO, say) carry no
    information about their correlation and get ``n``.
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


def _critical(confidence: float, n_eff: float) -> float:
    """Student's t on ``n_eff − 1`` degrees of freedom (the normal's z beyond 200)."""
    if n_eff > 200:
        return norm_ppf(1 - (1 - confidence) / 2)
    return t_ppf(1 - (1 - confidence) / 2, max(n_eff - 1, 1.0))


def _label(q: float) -> str:
    return f"p{100 * q:.10g}"


def _percentile_from_ranks(x: Array, q: float, confidence: float, n_eff: float) -> Interval:
    n = x.size
    srt = np.sort(x)
    point = float(np.percentile(srt, 100 * q))
    m = max(1, min(n, math.floor(n_eff + 1e-9)))
    l_m, u_m = order_statistic_ranks(m, q, confidence)
    # rank r of m effective values covers the fraction r/m of the sample: scale, rounding outward
    low = None if l_m is None else float(srt[max(1, math.floor(l_m * n / m + 1e-9)) - 1])
    high = None if u_m is None else float(srt[min(n, math.ceil((u_m - 1) * n / m - 1e-9) + 1) - 1])
    bounded = low is not None and high is not None
    reason = None
    if not bounded:
        need = min_bounded_n(q, confidence)
        reason = f"{_label(q)} needs n_eff >= {need} for a {100 * confidence:g}% interval (n_eff = {n_eff:.0f})"
    return Interval(point, low, high, n, n_eff, confidence, bounded, reason)


def _empty(confidence: float) -> Interval:
    return Interval(math.nan, None, None, 0, 0.0, confidence, False, "no values")


def percentile_interval(values: npt.ArrayLike, q: float, confidence: float = 0.95) -> Interval:
    """The ``q``-quantile (0 < q < 1; ``numpy.percentile``'s point) with distribution-free
    bounds on ``n_eff`` of the indicator series ``1{x <= q̂}`` (values in time order)."""
    _check_confidence(confidence)
    if not 0.0 < q < 1.0:
        raise ValueError(f"q must be between 0 and 1 (0.99 for p99), got {q}")
    x = _array(values)
    if x.size == 0:
        return _empty(confidence)
    return _percentile_from_ranks(x, q, confidence, quantile_effective_size(x, q))


def quantile_effective_size(values: npt.ArrayLike, q: float) -> float:
    """``n_eff`` for the ``q``-quantile of ``values`` (in time order): that of the indicator
    series ``1{x <= q̂}`` (Vehtari et al. 2021, *Bayesian Analysis* 16(2), for quantiles),
    and in a tail with fewer than :data:`RARE_EVENTS` values beyond ``q̂`` at most that of
    the level with that many (a handful of exceedances cannot show their own clustering)."""
    x = _array(values)
    if x.size == 0:
        return 0.0
    point = float(np.percentile(x, 100 * q))
    return _rare_capped(x, x <= point, q)


def _rare_capped(x: Array, below: npt.NDArray[np.bool_], share: float) -> float:
    """``n_eff`` of the indicator ``below`` (``x`` at or under a level, ``share`` of them),
    capped, when fewer than :data:`RARE_EVENTS` values lie on the rarer side, by that of
    the indicator at the level of ``x`` with :data:`RARE_EVENTS` values on that side."""
    n = x.size
    n_eff = effective_sample_size(below.astype(np.float64))
    if min(share, 1 - share) * n < RARE_EVENTS:
        near = RARE_EVENTS / n if share < 0.5 else 1 - RARE_EVENTS / n
        if 0.0 < near < 1.0:
            ref = float(np.percentile(x, 100 * near))
            n_eff = min(n_eff, effective_sample_size((x <= ref).astype(np.float64)))
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
    """The success fraction with Wilson's score interval on the series' ``n_eff``.

    ``scores`` (optional, same order and length): a continuous value per trial, a success
    being a low score, such as a request's largest latency-to-limit ratio over its SLOs
    (failed requests ``inf``). With it, when fewer than :data:`RARE_EVENTS` trials lie on
    the rarer side (a few SLO misses), ``n_eff`` is at most that of ``1{score <= s_k}`` at
    the score ``s_k`` with :data:`RARE_EVENTS` trials on that side, as for a tail quantile:
    a handful of misses cannot show how they cluster (without it, three misses in 200
    requests look independent, and the interval is too narrow under correlation).
    """
    _check_confidence(confidence)
    s = _array(np.asarray(successes_in_time_order, dtype=bool))
    n = s.size
    if n == 0:
        return _empty(confidence)
    p = float(s.mean())
    if scores is None:
        m = effective_sample_size(s)
    else:
        x = np.asarray(scores, dtype=np.float64).ravel()
        if x.size != n:
            raise ValueError(f"scores has {x.size} values for {n} trials")
        finite = x[np.isfinite(x)]
        top = float(np.nextafter(finite.max(), np.inf)) if finite.size else 1.0
        m = _rare_capped(np.where(np.isfinite(x), x, top), s.astype(bool), p)  # inf and NaN: past every score
    z = _critical(confidence, m)
    z2m = z * z / m
    centre = (p + z2m / 2) / (1 + z2m)
    half = z / (1 + z2m) * math.sqrt(p * (1 - p) / m + z2m / (4 * m))
    low = 0.0 if p == 0.0 else max(0.0, centre - half)  # Wilson's bound is exactly 0 (1) there
    high = 1.0 if p == 1.0 else min(1.0, centre + half)
    return Interval(p, low, high, n, m, confidence, True)


def mean_interval(values: npt.ArrayLike, confidence: float = 0.95) -> Interval:
    """The mean with ``mean ± t(n_eff − 1) · s / √n_eff`` (not bounded below 2 effective values)."""
    _check_confidence(confidence)
    x = _array(values)
    n = x.size
    if n == 0:
        return _empty(confidence)
    mean = float(x.mean())
    m = effective_sample_size(x)
    if n < 2 or m < 2:
        return Interval(
            mean, None, None, n, m, confidence, False, f"a mean interval needs n_eff >= 2 (n_eff = {m:.1f})"
        )
    half = t_ppf(1 - (1 - confidence) / 2, m - 1) * float(x.std(ddof=1)) / math.sqrt(m)
    return Interval(mean, mean - half, mean + half, n, m, confidence, True)
