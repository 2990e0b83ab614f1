"""Steady state: cut the warm-up transient, then test what is left for a trend.

- :func:`mser5` — the MSER-5 truncation rule (White 1997, "An effective truncation heuristic
  for bias reduction in simulation output", *Simulation* 69(6); Franklin & White 2008, WSC):
  average the series in batches of 5, and cut the ``d`` batches that minimise
  ``MSER(d) = Σ_{j>d} (z_j − z̄_d)² / (k − d)²`` over ``d`` in the first half of the ``k``
  batches. A minimum in the second half means no steady state was reached.
- :func:`stationarity` — three trend tests that hold up under correlation: the least-squares
  slope against the batch index, with its t on ``b − 2`` degrees of freedom, of the log
  medians and log 10th percentiles of ``b = 10`` batches, and of the log spread
  ``(mean √|x[i+1] − x[i]|)²`` of ``b`` = 10 to 20 batches of at least 50 values (batch
  statistics are nearly independent and normal when batches are long: Schmeiser 1982,
  *Operations Research* 30(3); the regression test of Law & Kelton, §9.5). Quantiles keep
  bursts from hiding a trend; the 10th percentile rises when every request waits longer (a
  growing backlog); the spread sees latencies scale up under queueing noise, whose level
  wanders for thousands of requests while its consecutive differences do not. Each flags at
  ``level`` (two-sided) *and* a fitted change over ``min_drift``. The study behind the
  choice: ``benchmarks/steady_detection.py``; docs/metrics.md, "Steady state and MLPerf verdicts".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadgen.metrics._dist import t_ppf

__all__ = ["Stationarity", "Truncation", "mser5", "mser5_truncation", "stationarity"]

BATCH = 5
TREND_BATCHES = 10
SPREAD_BATCHES = 20
SPREAD_BATCH_MIN = 50
LOW_QUANTILE = 0.1


@dataclass(frozen=True, slots=True)
class Truncation:
    """MSER-5's cut: drop the first ``cut`` values; ``steady`` is false when the best cut fell
    in the second half of the series (no steady state within the run). ``half_cut`` is the
    best cut within the first half (White's rule: equal to ``cut`` when ``steady``), the one
    to use when the second-half minimum is MSER's end effect on a nearly constant tail."""

    cut: int
    n: int
    steady: bool
    half_cut: int = 0


def _values(values: npt.ArrayLike) -> npt.NDArray[np.float64]:
    x = np.asarray(values, dtype=np.float64).ravel()
    if np.isnan(x).any():
        raise ValueError("values must not contain NaN (drop missing values first, keeping time order)")
    return x


def mser5_truncation(values_in_time_order: npt.ArrayLike) -> Truncation:
    """MSER-5 on the whole series: where to cut, and whether the cut is believable."""
    x = _values(values_in_time_order)
    k = x.size // BATCH
    if k < 4:
        return Truncation(0, x.size, True)
    z = x[: k * BATCH].reshape(k, BATCH).mean(axis=1)
    # MSER(d) for every d from suffix sums: Σ (z - z̄)² = Σ z² − (Σ z)² / m
    s1 = np.cumsum(z[::-1])[::-1]
    s2 = np.cumsum((z * z)[::-1])[::-1]
    m = np.arange(k, 0, -1, dtype=np.float64)  # batches kept after cutting d = 0..k-1
    mser = (s2 - s1 * s1 / m) / (m * m)
    best = int(np.argmin(mser[: k - 1]))  # keep at least two batches
    half = int(np.argmin(mser[: k // 2 + 1]))
    return Truncation(best * BATCH, x.size, best <= k // 2, half * BATCH)


def mser5(values_in_time_order: npt.ArrayLike) -> int:
    """How many leading values MSER-5 cuts as warm-up (0 when none)."""
    return mser5_truncation(values_in_time_order).cut


@dataclass(frozen=True, slots=True)
class Stationarity:
    """The trend tests' verdict. ``drift`` is the fitted change of the batch medians from the
    first to the last batch (0.2 = rose by 20%); ``t`` the slope's t statistic; ``batches``
    the number of batches used (0 when the series was too short to test). ``low_drift`` and
    ``low_t`` are the same for the batches' 10th percentiles (against ``critical``; 0 when not
    tested: a batch whose 10th percentile is not positive); ``spread_drift``, ``spread_t`` and
    ``spread_critical`` for the spread between consecutive values (drift and t 0 when not
    tested: a batch without spread)."""

    stationary: bool
    drift: float
    t: float
    critical: float
    batches: int
    reason: str | None = None
    spread_drift: float = 0.0
    spread_t: float = 0.0
    spread_critical: float = 0.0
    low_drift: float = 0.0
    low_t: float = 0.0


def _trend(z: npt.NDArray[np.float64], log: bool) -> tuple[float, float]:
    """The least-squares slope of ``z`` against its index as the fitted change across it
    (``log``: ``z`` are logs and the change a ratio − 1; else over the mean), and its t."""
    b = z.size
    i = np.arange(b, dtype=np.float64) - (b - 1) / 2
    zc = z - z.mean()
    slope = float((i * zc).sum() / (i * i).sum())
    resid = zc - slope * i
    se = math.sqrt(float((resid * resid).sum()) / (b - 2) / float((i * i).sum()))
    t = slope / se if se > 0.0 else (0.0 if slope == 0.0 else math.copysign(math.inf, slope))
    if log:
        return math.expm1(slope * (b - 1)), t
    mean = float(z.mean())
    drift = slope * (b - 1) / mean if mean != 0.0 else (0.0 if slope == 0.0 else math.copysign(math.inf, slope))
    return drift, t


def _batch_quantiles(
    x: npt.NDArray[np.float64], b: int
) -> tuple[npt.NDArray[np.float64], bool, npt.NDArray[np.float64] | None]:
    """The medians of ``b`` equal consecutive batches of ``x`` (as logs when all are positive),
    whether they are logs, and the log 10th percentiles (``None`` unless all are positive)."""
    size = x.size // b
    low, med = np.quantile(x[: b * size].reshape(b, size), [LOW_QUANTILE, 0.5], axis=1)
    low_log = np.log(low) if (low > 0).all() else None
    if (med > 0).all():
        return np.log(med), True, low_log
    return med, False, low_log


def stationarity(values_in_time_order: npt.ArrayLike, *, level: float = 0.01, min_drift: float = 0.05) -> Stationarity:
    """Test the series (after any warm-up cut) for a trend in its batch medians and in the
    spread between consecutive values (module docstring)."""
    x = _values(values_in_time_order)
    b = TREND_BATCHES
    critical = t_ppf(1 - level / 2, b - 2)
    if x.size < 2 * b:
        return Stationarity(True, 0.0, 0.0, critical, 0, f"too short to test ({x.size} values < {2 * b})")
    z, log, zlow = _batch_quantiles(x, b)
    drift, t = _trend(z, log)
    low_drift, low_t = _trend(zlow, True) if zlow is not None else (0.0, 0.0)
    spread_drift = spread_t = 0.0
    root = np.sqrt(np.abs(np.diff(x)))
    sb = min(SPREAD_BATCHES, max(b, root.size // SPREAD_BATCH_MIN))
    spread_critical = t_ppf(1 - level / 2, sb - 2)
    size = root.size // sb
    dz = root[: sb * size].reshape(sb, size).mean(axis=1)
    if size and (dz > 0).all():  # a constant stretch has no spread: its trend is in the medians
        spread_drift, spread_t = _trend(2 * np.log(dz), True)
    reasons = []
    if abs(t) > critical and abs(drift) > min_drift:
        word = "rise" if t > 0 else "fall"
        reasons.append(f"batch medians {word} by {100 * abs(drift):.0f}% across the level (t = {t:.1f})")
    if abs(low_t) > critical and abs(low_drift) > min_drift:
        word = "rise" if low_t > 0 else "fall"
        reasons.append(
            f"batch 10th percentiles {word} by {100 * abs(low_drift):.0f}% across the level (t = {low_t:.1f})"
        )
    if abs(spread_t) > spread_critical and abs(spread_drift) > min_drift:
        word = "rises" if spread_t > 0 else "falls"
        reasons.append(
            f"the spread between consecutive requests {word} by {100 * abs(spread_drift):.0f}% "
            f"across the level (t = {spread_t:.1f})"
        )
    reason = "; ".join(reasons) or None
    return Stationarity(
        reason is None, drift, t, critical, b, reason, spread_drift, spread_t, spread_critical, low_drift, low_t
    )
