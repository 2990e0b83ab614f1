"""MLPerf LoadGen's early-stopping rule, computed exactly as LoadGen computes it.

A latency percentile ``p`` at confidence ``c`` passes for ``n`` queries, ``t`` of them over
the bound, when ``P(Bin(h + t, 1 − p) <= t) = I_p(h, t + 1) < 1 − c``; the minimum query
count is the least such ``h`` plus ``t`` (459, 662, 2,010 at p99 and 99% for ``t`` = 0, 1,
10), and the early-stopping estimate is the ``t``-th largest latency. The mirror rule,
:func:`early_stopping_failed`, says when ``t`` of ``n`` are too many for the percentile to
lie within the bound at that confidence (LoadGen itself only ever asks for more queries).

The rule, its source in mlcommons/inference and its numbers: docs/metrics.md,
"Uncertainty" (MLPerf early stopping).

Example::

    >>> [early_stopping_min_queries(0.99, 0.99, k) for k in (0, 1, 10)]
    [459, 662, 2010]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

__all__ = [
    "EarlyStopping",
    "early_stopping_estimate",
    "early_stopping_failed",
    "early_stopping_min_queries",
    "early_stopping_verdict",
]


EXACT_TERMS = 256
"""Up to this many overlatency queries, :func:`_odds` sums its terms one by one with
``lgamma`` (the counts tests pin exactly); beyond, it sums them vectorised."""


def _odds(h: int, t: int, p: float) -> float:
    """``P(Bin(h + t, 1 − p) <= t)``: at most ``t`` overlatency queries among ``h + t``."""
    n = h + t
    log_p, log_q = math.log(p), math.log1p(-p)
    if t > EXACT_TERMS:  # a level with many requests over the bound: O(t) in numpy, not in Python
        # log pmf(k) by running sums of log(pmf(k) / pmf(k − 1)): within 1e-7 of the lgamma
        # terms below, whose own differences of three lgamma values near n lose about as much
        k = np.arange(1, t + 1, dtype=np.float64)
        steps = np.log((n - k + 1) / k) + (log_q - log_p)
        logs = np.concatenate(([0.0], np.cumsum(steps))) + n * log_p
        top = float(logs.max())
        return math.exp(top) * float(np.exp(logs - top).sum())
    terms = [
        math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_q + (n - k) * log_p
        for k in range(t + 1)
    ]
    top = max(terms)
    return math.exp(top) * math.fsum(math.exp(v - top) for v in terms)


def _check(percentile: float, confidence: float) -> None:
    if not 0.0 < percentile < 1.0 or not 0.0 < confidence < 1.0:
        raise ValueError(
            f"percentile and confidence must be between 0 and 1 (0.99 for p99), got {percentile} and {confidence}"
        )


def early_stopping_min_queries(percentile: float = 0.99, confidence: float = 0.99, overlatency: int = 0) -> int:
    """The fewest queries with which ``overlatency`` queries over the bound still pass."""
    _check(percentile, confidence)
    if overlatency < 0:
        raise ValueError(f"overlatency must be >= 0, got {overlatency}")
    return _min_queries(percentile, confidence, overlatency)


def early_stopping_failed(n: int, overlatency: int, percentile: float = 0.99, confidence: float = 0.99) -> bool:
    """Whether ``overlatency`` of ``n`` queries over the bound show the ``percentile`` above
    it at ``confidence``: were the share over it ``1 − p``, ``overlatency`` or more of ``n``
    would have odds ``P(Bin(n, 1 − p) >= t) < 1 − c`` (early stopping's rule, mirrored)."""
    _check(percentile, confidence)
    if overlatency <= 0 or n <= 0:
        return False
    t = min(overlatency, n)
    return 1.0 - _odds(n - t + 1, t - 1, percentile) < 1 - confidence


@lru_cache(maxsize=4096)
def _min_queries(percentile: float, confidence: float, t: int) -> int:
    """:func:`early_stopping_min_queries`, checked arguments (kept: each level's verdicts
    and estimates ask for the same counts again)."""
    # the odds fall as h grows: double an upper bound, then bisect for the first passing h
    lo, hi = 1, max(1, math.ceil(math.log(1 - confidence) / math.log(percentile)))
    while _odds(hi, t, percentile) >= 1 - confidence:
        lo, hi = hi, 2 * hi
    while lo < hi:
        mid = (lo + hi) // 2
        if _odds(mid, t, percentile) < 1 - confidence:
            hi = mid
        else:
            lo = mid + 1
    return lo + t


@dataclass(frozen=True, slots=True)
class EarlyStopping:
    """LoadGen's verdict on ``n`` latencies against ``bound`` (server scenario).

    ``passed`` when ``n >= min_queries``; ``more_needed`` is LoadGen's "would need to run at
    least … more queries" (0 when passed); ``estimate`` the early-stopping percentile estimate
    (``None`` below ``min_queries(1)`` queries).
    """

    passed: bool
    n: int
    overlatency: int
    min_queries: int
    more_needed: int
    percentile: float
    confidence: float
    estimate: float | None


def early_stopping_estimate(
    latencies: npt.ArrayLike, percentile: float = 0.99, confidence: float = 0.99
) -> float | None:
    """LoadGen's early-stopping estimate of the ``percentile`` latency (``None`` if too few)."""
    _check(percentile, confidence)
    x = np.sort(np.asarray(latencies, dtype=np.float64).ravel())
    n = x.size
    if n < early_stopping_min_queries(percentile, confidence, 1):
        return None
    # the largest t with min_queries(t) <= n (and t <= n). min_queries grows strictly with
    # t (one more overlatency query needs at least as many within the bound), so the count
    # is found by doubling and bisecting: O(log t) counts, not t of them (each costs O(t))
    lo, hi = 1, 2  # min_queries(lo) <= n; hi: not yet known to fail
    while hi <= n and _min_queries(percentile, confidence, hi) <= n:
        lo, hi = hi, 2 * hi
    hi = min(hi, n + 1)  # the first t known to fail (t > n fails)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _min_queries(percentile, confidence, mid) <= n:
            lo = mid
        else:
            hi = mid
    return float(x[n - lo])


def early_stopping_verdict(
    latencies: npt.ArrayLike, bound: float, percentile: float = 0.99, confidence: float = 0.99
) -> EarlyStopping:
    """Whether ``latencies`` show the ``percentile`` below ``bound`` at ``confidence``.

    Overlatency counts values strictly above ``bound``, as LoadGen does.
    """
    _check(percentile, confidence)
    x = np.asarray(latencies, dtype=np.float64).ravel()
    if np.isnan(x).any():
        raise ValueError("latencies must not contain NaN")
    n = int(x.size)
    t = int(np.count_nonzero(x > bound))
    need = early_stopping_min_queries(percentile, confidence, t)
    return EarlyStopping(
        n >= need,
        n,
        t,
        need,
        max(0, need - n),
        percentile,
        confidence,
        early_stopping_estimate(x, percentile, confidence),
    )
