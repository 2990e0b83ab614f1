"""The intervals a level's summary carries beside its point values (``summary.json`` 2).

Every series is taken **in time order** before its interval is computed (TTFT, TPOT, E2E
and SLO attainment in send order, ITL in chunk-arrival order). Latency statistics use
:func:`~loadgen.metrics.uncertainty.mean_interval` and
:func:`~loadgen.metrics.uncertainty.percentile_intervals` on ``n_eff``; attainment
:func:`~loadgen.metrics.uncertainty.proportion_interval`; rates batch means over
:data:`RATE_BATCHES` time blocks. A series longer than :data:`MAX_SERIES` is thinned first.

Which series, the thinning rule and the batch means: docs/metrics.md, "Uncertainty".
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import numpy.typing as npt

from loadgen.metrics._dist import t_ppf
from loadgen.metrics.results import Distribution, StatInterval
from loadgen.metrics.uncertainty import Interval, mean_interval, percentile_intervals, proportion_interval

__all__ = [
    "MAX_SERIES",
    "RATE_BATCHES",
    "distribution_intervals",
    "proportion",
    "rate_interval",
    "time_ordered",
    "with_intervals",
]

MAX_SERIES = 50_000
"""Longer series are thinned to every ``ceil(n / MAX_SERIES)``-th value (in time order)."""

RATE_BATCHES = 20
"""Equal time blocks of the level window for the rate intervals (batch means)."""

_QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("p99.9", 0.999))


def _stat(iv: Interval, point: float | None = None) -> StatInterval:
    low, high = iv.low, iv.high
    if point is not None and math.isfinite(point):  # a thinned series' bounds: keep the whole sample's point inside
        low = None if low is None else min(low, point)
        high = None if high is None else max(high, point)
    return StatInterval(low=low, high=high, n_eff=iv.n_eff, confidence=iv.confidence, reason=iv.reason)


def time_ordered(values: npt.ArrayLike, t_ns: npt.ArrayLike) -> tuple[npt.NDArray[np.float64], bool]:
    """``values`` (NaNs dropped) sorted by their times ``t_ns``, and whether they were thinned:
    beyond :data:`MAX_SERIES`, every ``k``-th value in the given order is kept first (a choice
    that does not look at the values, and that keeps the sort small)."""
    x = np.asarray(values, dtype=np.float64).ravel()
    t = np.asarray(t_ns, dtype=np.int64).ravel()
    keep = ~np.isnan(x)
    if not keep.all():
        x, t = x[keep], t[keep]
    step = -(-x.size // MAX_SERIES)
    if step > 1:
        x, t = x[::step], t[::step]
    return x[np.argsort(t, kind="stable")], step > 1


def distribution_intervals(
    series_in_time_order: npt.ArrayLike, confidence: float, points: Distribution | None = None
) -> dict[str, StatInterval] | None:
    """``{"mean", "p50", "p90", "p95", "p99", "p99.9"}`` → interval of a series (``None``
    when empty). ``points`` (the whole sample's :class:`Distribution`, when the series was
    thinned) widens each interval to contain its point."""
    x = np.asarray(series_in_time_order, dtype=np.float64).ravel()
    if x.size == 0:
        return None
    out = {"mean": _stat(mean_interval(x, confidence), None if points is None else points.mean)}
    ivs = percentile_intervals(x, [q for _, q in _QUANTILES], confidence)
    for (key, _), iv in zip(_QUANTILES, ivs, strict=True):
        out[key] = _stat(iv, None if points is None else points.stat(key))
    return out


def with_intervals(dist: Distribution, values: npt.ArrayLike, t_ns: npt.ArrayLike, confidence: float) -> Distribution:
    """``dist`` (the distribution of ``values``) with its :attr:`~Distribution.intervals`,
    computed on the values in the order of their times ``t_ns`` (see :func:`time_ordered`)."""
    series, thinned = time_ordered(values, t_ns)
    ivs = distribution_intervals(series, confidence, dist if thinned else None)
    return dist if ivs is None else dataclasses.replace(dist, intervals=ivs)


def proportion(
    successes_in_time_order: npt.ArrayLike, confidence: float, scores: npt.ArrayLike | None = None
) -> StatInterval | None:
    """Wilson's interval on ``n_eff`` of a success series (``None`` when empty); ``scores``
    as :func:`~loadgen.metrics.uncertainty.proportion_interval` takes them."""
    s = np.asarray(successes_in_time_order, dtype=bool).ravel()
    return None if s.size == 0 else _stat(proportion_interval(s, confidence, scores))


def rate_interval(
    t_ns: npt.ArrayLike,
    weights: npt.ArrayLike | None,
    window: tuple[int, int] | None,
    point: float | None,
    confidence: float,
) -> StatInterval | None:
    """Batch means of a rate: the events at ``t_ns`` (each counting ``weights``, or 1) in
    :data:`RATE_BATCHES` equal blocks of ``window``; the relative half-width ``t · s/√B``
    over the blocks' mean rate, applied to ``point``. ``None`` without a window or a point."""
    if window is None or point is None or window[1] <= window[0]:
        return None
    t = np.asarray(t_ns, dtype=np.int64)
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    span = window[1] - window[0]
    ids = t - window[0]  # a new array: the steps below work in place
    ids *= RATE_BATCHES
    ids //= span
    np.clip(ids, 0, RATE_BATCHES - 1, out=ids)
    rates = np.bincount(ids, weights=w, minlength=RATE_BATCHES) / (span / 1e9 / RATE_BATCHES)
    mean = float(rates.mean())
    if mean <= 0:
        return StatInterval(None, None, float(RATE_BATCHES), confidence, "nothing completed in the level window")
    half = t_ppf(1 - (1 - confidence) / 2, RATE_BATCHES - 1) * float(rates.std(ddof=1)) / math.sqrt(RATE_BATCHES)
    rel = half / mean
    return StatInterval(max(0.0, point * (1 - rel)), point * (1 + rel), float(RATE_BATCHES), confidence)
