"""Steady state: cut the warm-up transient, then test what is left for a trend.

- :func:`mser5` — the MSER-5 truncation rule (White 1997, "An effective truncation heuristic
  for bias reduction in simulation output", *Simulation* 69(6); Franklin & White 2008, WSC):
  average the series in batches of 5, and cut the ``d`` batches that minimise
  ``MSER(d) = Σ_{j>d} (z_j − z̄_d)² / (k − d)²`` over ``d`` in the first half of the ``k``
  batches. A minimum in the second half means no steady state was reached.
- :func:`stationarity` — a trend test that holds up under correlation: the series in
  ``10`` non-overlapping batches, the least-squares slope of the batch means against the
  batch index, and its t statistic on 8 degrees of freedom (batch means of long enough
  batches are nearly independent and normal: Schmeiser 1982, "Batch size effects in the
  analysis of simulation output", *Operations Research* 30(3); the regression test is
  that of Law & Kelton, *Simulation Modeling and Analysis*, §9.5). ``stationary`` is false
  when the slope is significant at 1% *and* the fitted drift across the sample exceeds
  ``min_drift`` of the mean (a statistically visible 1% drift on a long run is no
  queue building up).
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
    """The trend test's verdict. ``drift`` is the fitted change from the first to the last
    batch over the mean (0.2 = rose by 20%); ``t`` the slope's t statistic; ``batches``
    the number of batch means used (0 when the series was too short to test)."""

    stationary: bool
    drift: float
    t: float
    critical: float
    batches: int
    reason: str | None = None


def stationarity(values_in_time_order: npt.ArrayLike, *, level: float = 0.01, min_drift: float = 0.05) -> Stationarity:
    """Test the series (after any warm-up cut) for a trend in its batch means."""
    x = _values(values_in_time_order)
    b = TREND_BATCHES
    critical = t_ppf(1 - level / 2, b - 2)
    if x.size < 2 * b:
        return Stationarity(True, 0.0, 0.0, critical, 0, f"too short to test ({x.size} values < {2 * b})")
    size = x.size // b
    z = x[: b * size].reshape(b, size).mean(axis=1)
    i = np.arange(b, dtype=np.float64) - (b - 1) / 2
    slope = float((i * (z - z.mean())).sum() / (i * i).sum())
    resid = z - z.mean() - slope * i
    se = math.sqrt(float((resid * resid).sum()) / (b - 2) / float((i * i).sum()))
    t = math.inf if se == 0.0 and slope != 0.0 else (0.0 if se == 0.0 else slope / se)
    mean = float(z.mean())
    drift = slope * (b - 1) / mean if mean != 0.0 else (0.0 if slope == 0.0 else math.copysign(math.inf, slope))
    trending = abs(t) > critical and abs(drift) > min_drift
    reason = None
    if trending:
        reason = (
            f"batch means {'rise' if slope > 0 else 'fall'} by {100 * abs(drift):.0f}% across the level (t = {t:.1f})"
        )
    return Stationarity(not trending, drift, t, critical, b, reason)
