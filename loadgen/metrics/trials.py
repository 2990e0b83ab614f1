"""Repeated trials: between-trial statistics of a level, and comparisons that use them.

One run's resampling (:mod:`loadgen.metrics.compare`) sees the noise inside a run, not
from one run to the next (a server's warm caches, a neighbour on the machine). With
``--trials N`` each level runs ``N`` times; for each headline metric (those with ``trials``
in :mod:`loadgen.metrics.catalog`) the level keeps every trial's value, their mean and the
95% interval of the mean (Student t with ``N - 1`` degrees of freedom). Two runs with trials are compared on the
difference of the means with Welch's t-interval (unequal variances), the verdict rule
being the comparison's own (:func:`~loadgen.metrics.compare.verdict`).

With three trials or more the level's own intervals are between trials too
(:func:`between_trials`): the pooled value ± Student's t on ``N − 1`` degrees of freedom
times the trials' standard error, no within-level correlation model needed; when to run
trials, and where even trials fall short: docs/metrics.md, "Trials".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from loadgen.metrics._dist import t_ppf
from loadgen.metrics.catalog import trial_paths
from loadgen.metrics.results import Distribution, LevelSummary, StatInterval, Trials, TrialStat
from loadgen.metrics.uncertainty import RARE_EVENTS

__all__ = [
    "MIN_TRIALS",
    "between_trials",
    "level_trials",
    "t_quantile",
    "trial_interval",
    "trial_stat",
    "trial_summary",
    "welch_interval",
]

MIN_TRIALS = 3
"""Trials from which a level's intervals are between trials (two give t on one degree of
freedom: 12.7 standard errors wide at 95%)."""

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


def _quantile_of(stat: str) -> float | None:
    return None if stat == "mean" else float(stat[1:]) / 100


def trial_interval(
    point: float | None,
    values: Sequence[float | None],
    confidence: float,
    within: StatInterval | None,
    *,
    beyond: Sequence[float] | None = None,
    own: Sequence[StatInterval | None] | None = None,
    label: str = "",
) -> StatInterval | None:
    """The interval of ``point`` (the pooled value) between trials whose own values are
    ``values``: ``point ± t_{N−1} · sd / √N``, widened to contain ``within`` (the pooled
    series' own interval) where that one is bounded, so neither method's blind spot is
    printed alone. ``None`` (the caller keeps ``within``) with fewer than
    :data:`MIN_TRIALS` values or when the trials agree exactly (no spread to judge).

    A tail (``beyond``: each trial's count of values past the quantile; ``own``: each
    trial's own interval of it) is refused, with its reason, where a trial has fewer than
    :data:`~loadgen.metrics.uncertainty.RARE_EVENTS` values past it or cannot bound it on
    its own: a trial's tail quantile from a handful of values, or from a few clustered
    excursions, is biased, and the trials' mean with it (the coverage study:
    docs/metrics.md, "Trials")."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    n = len(vals)
    if point is None or not math.isfinite(point) or n < MIN_TRIALS or len(vals) < len(values):
        return None
    n_eff = within.n_eff if within is not None else float(n)
    name = f"{label} " if label else ""
    if beyond is not None and min(beyond) < RARE_EVENTS:
        why = (
            f"{name}between {n} trials needs {RARE_EVENTS} values past it in each trial "
            f"(fewest {min(beyond):.0f}): run longer trials"
        )
        return StatInterval(None, None, n_eff, confidence, why, trials=n)
    unbounded = 0 if own is None else sum(iv is None or not iv.bounded for iv in own)
    if unbounded:
        why = (
            f"{name}between {n} trials needs each trial to bound it on its own ({unbounded} of {n} cannot: "
            "its excursions cluster): run longer trials"
        )
        return StatInterval(None, None, n_eff, confidence, why, trials=n)
    mean = sum(vals) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
    if sd == 0.0:
        return None
    half = t_ppf(1 - (1 - confidence) / 2, n - 1) * sd / math.sqrt(n)
    low, high = point - half, point + half
    if within is not None and within.low is not None and within.high is not None:
        low, high = min(low, within.low), max(high, within.high)
    return StatInterval(low, high, n_eff, confidence, trials=n)


def _replaced(
    ivs: dict[str, StatInterval] | None,
    point: Callable[[str], float | None],
    values: Callable[[str], list[float | None]],
    confidence: float,
    beyond: Callable[[str], list[float] | None] = lambda _k: None,
    own: Callable[[str], list[StatInterval | None] | None] = lambda _k: None,
) -> dict[str, StatInterval] | None:
    if not ivs:
        return ivs
    out = dict(ivs)
    for k, iv in ivs.items():
        got = trial_interval(point(k), values(k), confidence, iv, beyond=beyond(k), own=own(k), label=k)
        if got is not None:
            out[k] = got
    return out


def between_trials(level: LevelSummary, per_trial: Sequence[LevelSummary], confidence: float) -> LevelSummary:
    """``level`` (the trials pooled) with each interval it carries replaced, where
    :func:`trial_interval` can judge it, by the interval between its ``per_trial``
    summaries (each trial summarised on its own): the latency distributions' statistics,
    SLO attainment, goodput and throughput rates. Fewer than :data:`MIN_TRIALS` trials:
    ``level`` as it is."""
    if len(per_trial) < MIN_TRIALS:
        return level
    changes: dict[str, object] = {}
    for f in dataclasses.fields(level):
        dist = getattr(level, f.name)
        if not isinstance(dist, Distribution) or not dist.intervals:
            continue
        trial_dists = [t.dist(f.name) for t in per_trial]

        def beyond(k: str, ds: list[Distribution] = trial_dists) -> list[float] | None:
            q = _quantile_of(k)
            return None if q is None or q == 0.5 else [d.count * min(q, 1 - q) for d in ds]

        def own(k: str, ds: list[Distribution] = trial_dists) -> list[StatInterval | None] | None:
            q = _quantile_of(k)
            return None if q is None or q == 0.5 else [(d.intervals or {}).get(k) for d in ds]

        changes[f.name] = dataclasses.replace(
            dist,
            intervals=_replaced(
                dist.intervals,
                dist.stat,
                lambda k, ds=trial_dists: [d.stat(k) for d in ds],  # type: ignore[misc]
                confidence,
                beyond,
                own,
            ),
        )
    gp = level.goodput
    goodput_values = {
        "slo_attainment": [t.goodput.slo_attainment for t in per_trial],
        "requests_per_s": [t.goodput.requests_per_s for t in per_trial],
    }
    changes["goodput"] = dataclasses.replace(
        gp,
        intervals=_replaced(
            gp.intervals,
            lambda k: getattr(gp, k, None),
            lambda k: goodput_values.get(k, []),
            confidence,
        ),
    )
    tp = level.throughput
    changes["throughput"] = dataclasses.replace(
        tp,
        intervals=_replaced(
            tp.intervals,
            lambda k: getattr(tp, k, None),
            lambda k: [getattr(t.throughput, k, None) for t in per_trial],
            confidence,
        ),
    )
    return dataclasses.replace(level, **changes)  # type: ignore[arg-type]


def level_trials(level: LevelSummary) -> int | None:
    """How many trials the level's intervals are between (:func:`between_trials`), ``None``
    where none is: the latency distributions', goodput's and throughput's, as it replaces them."""
    ivs = [*(level.goodput.intervals or {}).values(), *(level.throughput.intervals or {}).values()]
    for f in dataclasses.fields(level):
        dist = getattr(level, f.name)
        if isinstance(dist, Distribution):
            ivs.extend((dist.intervals or {}).values())
    return next((iv.trials for iv in ivs if iv.trials is not None), None)
