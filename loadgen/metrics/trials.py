"""Repeated trials: between-trial statistics of a level, and comparisons that use them.

One run's resampling (:mod:`loadgen.metrics.compare`) sees the noise inside a run, not
from one run to the next (a server's warm caches, a neighbour on the machine). With
``--trials N`` each level runs ``N`` times; for each headline metric (those with ``trials``
in :mod:`loadgen.metrics.catalog`) the level keeps every trial's value, their mean and the
95% interval of the mean (Student t with ``N - 1`` degrees of freedom). Two runs with trials are compared on the
difference of the means with Welch's t-interval (unequal variances), the verdict rule
being the comparison's own (:func:`~loadgen.metrics.compare.verdict`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from loadgen.metrics.catalog import trial_paths
from loadgen.metrics.results import LevelSummary, Trials, TrialStat

__all__ = ["t_quantile", "trial_stat", "trial_summary", "welch_interval"]

# two-sided 95%: the 0.975 quantile of Student's t for 1..30 degrees of freedom
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t_quantile(df: float) -> float:
    """Student t's 0.975 quantile for ``df`` degrees of freedom (linear between table
    entries; the normal 1.96 asymptote with a 1/df correction beyond 30)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df!r}")
    if df >= 30:
        return 1.96 + (_T975[-1] - 1.96) * 30 / df
    lo = math.floor(df)
    frac = df - lo
    hi = min(lo + 1, 30)
    return _T975[lo - 1] + frac * (_T975[hi - 1] - _T975[lo - 1])


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var)


def trial_stat(values: Sequence[float | None]) -> TrialStat:
    """Mean and 95% t-interval of the trials' values (missing ones left out)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return TrialStat(list(values))
    mean, sd = _mean_sd(vals)
    if len(vals) < 2:
        return TrialStat(list(values), mean)
    half = t_quantile(len(vals) - 1) * sd / math.sqrt(len(vals))
    return TrialStat(list(values), mean, mean - half, mean + half)


def trial_summary(trials: Sequence[LevelSummary]) -> Trials:
    """The between-trial statistics of one level's trials (each summarised on its own)."""
    metrics = {}
    for path, metric, _ in trial_paths():
        values = [t.metric(path) for t in trials]
        if metric.scale != 1.0:  # a share, kept in %
            values = [None if v is None else metric.scale * v for v in values]
        metrics[path] = trial_stat(values)
    return Trials(len(trials), metrics)


def welch_interval(a: Sequence[float | None], b: Sequence[float | None]) -> tuple[float, float] | None:
    """95% interval of ``mean(b) - mean(a)`` (Welch), or None with fewer than two
    values on a side."""
    va = [v for v in a if v is not None and math.isfinite(v)]
    vb = [v for v in b if v is not None and math.isfinite(v)]
    if len(va) < 2 or len(vb) < 2:
        return None
    ma, sa = _mean_sd(va)
    mb, sb = _mean_sd(vb)
    qa, qb = sa * sa / len(va), sb * sb / len(vb)
    se = math.sqrt(qa + qb)
    diff = mb - ma
    if se == 0:
        return (diff, diff)
    df = (qa + qb) ** 2 / (qa * qa / (len(va) - 1) + qb * qb / (len(vb) - 1))
    half = t_quantile(max(1.0, df)) * se
    return (diff - half, diff + half)
