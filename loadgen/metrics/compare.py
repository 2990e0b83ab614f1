"""Is a difference between two runs real or noise? Every metric of two runs' levels, judged.

:func:`compare_level` applies the bootstraps of :mod:`loadgen.metrics.bootstrap` (quantiles
and attainment on each run's effective sample size in send order, rates on time blocks) to
every metric of two runs' levels (the rows of the comparison page), or, when both levels
ran repeated trials, the difference of the trials' means with its Welch interval
(:func:`trial_rows`); each row's :class:`Difference` names the method. The verdict follows
from the interval alone (:func:`~loadgen.metrics.bootstrap.verdict`): one that excludes 0 is
"better" or "worse", one that contains 0 never is; :func:`largest_changes` lists the
significant ones, largest first. :func:`common_levels` pairs the levels two runs
share; :func:`compare_classes` judges the latencies of each request class two levels both
ran (docs/metrics.md, "Comparing runs"); :func:`tail_evidence` says what the requests show
on a tail the bootstrap cannot settle. The primitives are re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import pandas as pd

from loadgen.errors import ConfigError
from loadgen.metrics.bootstrap import (
    BETTER,
    DEFAULT_RESAMPLES,
    EQUIVALENCE,
    F64,
    INCONCLUSIVE,
    METHOD_BLOCKS,
    METHOD_IID,
    METHOD_NEFF,
    METHOD_WELCH,
    NO_CHANGE,
    NOT_AVAILABLE,
    WORSE,
    Difference,
    block_rates,
    bootstrap_quantile,
    proportion_difference,
    quantile_difference,
    rate_difference,
    verdict,
)
from loadgen.metrics.catalog import Metric, metrics, per_request, trial_paths
from loadgen.metrics.per_request import EventArrays
from loadgen.metrics.results import LevelSummary, LoadMode, RunSummary
from loadgen.metrics.slo import parse_slo, slo_attainment
from loadgen.metrics.summary import level_window_ns
from loadgen.metrics.trials import welch_interval

__all__ = [
    "BETTER",
    "CLASS_METRICS",
    "CLASS_QUANTILES",
    "DEFAULT_RESAMPLES",
    "EQUIVALENCE",
    "INCONCLUSIVE",
    "METHOD_BLOCKS",
    "METHOD_IID",
    "METHOD_NEFF",
    "METHOD_WELCH",
    "MIN_EFFECT",
    "NOT_AVAILABLE",
    "NO_CHANGE",
    "WORSE",
    "ClassComparison",
    "ClassRow",
    "Difference",
    "LevelSamples",
    "Row",
    "block_rates",
    "bootstrap_quantile",
    "by_verdict",
    "common_levels",
    "compare_classes",
    "compare_level",
    "compared_metrics",
    "largest_changes",
    "of_class",
    "proportion_difference",
    "quantile_difference",
    "rate_difference",
    "several_classes",
    "tail_evidence",
    "verdict",
]

_QUANTILES = ((0.5, "p50"), (0.99, "p99"), (0.999, "p99.9"))
N_BLOCKS = 20
MIN_EFFECT = 0.02


@dataclass(frozen=True, slots=True)
class LevelSamples:
    """One level of a run as the comparison needs it: the run's per-request ``frame``
    and event arrays ``ev``, the level's ``rows`` (a mask over the frame) and summary."""

    frame: pd.DataFrame
    ev: EventArrays
    rows: npt.NDArray[np.bool_]
    summary: LevelSummary

    @property
    def ok_rows(self) -> npt.NDArray[np.bool_]:
        return np.asarray(self.rows & self.frame["ok"].to_numpy(dtype=bool))


@dataclass(frozen=True, slots=True)
class Row:
    """One cell group of the table: a metric's statistic at one level, run vs baseline."""

    level: int  # position in the common levels
    metric: str
    label: str
    stat: str
    unit: str
    diff: Difference


def compared_metrics() -> list[Metric]:
    """The metrics a comparison judges, in the catalogue's order (each row's seed is its
    position here, so the same runs always give the same intervals)."""
    return [m for m in metrics() if m.compared]


def _clean(values: npt.ArrayLike) -> F64:
    arr = np.asarray(values, dtype=np.float64).ravel()
    return arr[~np.isnan(arr)]


def tail_evidence(a: npt.ArrayLike, b: npt.ArrayLike, what: str) -> str:
    """Per-request evidence on the tail, for a tail statistic the bootstrap cannot settle:
    how many of one run's requests have a larger ``what`` than every request of the other
    (the side with more), and the chance of that many if both runs' requests came from one
    distribution (the top ``k`` of the pooled requests all from that side:
    ``C(n, k) / C(n + m, k)``). Empty when that chance is 5% or more (no evidence)."""
    xa, xb = _clean(a), _clean(b)
    if xa.size == 0 or xb.size == 0:
        return ""
    over_b = int((xb > xa.max()).sum())  # this run's requests above every baseline request
    over_a = int((xa > xb.max()).sum())
    if over_b == over_a == 0:
        return ""
    k, n, m, who, whom = (
        (over_b, xb.size, xa.size, "this run's", "the baseline's")
        if over_b >= over_a
        else (over_a, xa.size, xb.size, "the baseline's", "this run's")
    )
    chance = math.exp(sum(math.log((n - j) / (n + m - j)) for j in range(k)))
    if chance >= 0.05:
        return ""
    return (
        f"per request: {k} of {who} {n} had a higher {what} than every one of {whom} {m} "
        f"(chance if the runs were alike: {chance:.2g})"
    )


def _by_size(rows: Sequence[Row]) -> list[Row]:
    """``rows``, the largest relative changes first, headline metrics first on a tie."""
    # what a serving engineer reads first, in this order when changes are equally large
    order = {m.name: m.headline for m in metrics() if m.headline is not None}
    last = max(order.values(), default=-1) + 1
    return sorted(rows, key=lambda r: (-abs(r.diff.rel or 0.0), order.get(r.metric, last)))


def by_verdict(rows: Sequence[Row]) -> dict[str, list[Row]]:
    """The rows grouped by verdict (better, worse, inconclusive, no significant change,
    n/a), each group the largest relative changes first, headline metrics first on a tie."""
    out: dict[str, list[Row]] = {v: [] for v in (WORSE, BETTER, INCONCLUSIVE, NO_CHANGE, NOT_AVAILABLE)}
    for r in rows:
        out.setdefault(r.diff.verdict, []).append(r)
    return {v: _by_size(group) for v, group in out.items()}


def largest_changes(rows: Sequence[Row]) -> list[Row]:
    """The significant changes (better or worse: their interval excludes 0), both
    directions together, the largest relative changes first: what a comparison leads with."""
    return _by_size([r for r in rows if r.diff.verdict in (BETTER, WORSE)])


def common_levels(summaries: Sequence[RunSummary]) -> list[tuple[LoadMode, float, list[int]]]:
    """Load levels present in every run: ``(mode, value, [level index in each run])``,
    sorted by mode then value (the first level of a run wins when one repeats)."""
    maps = []
    for s in summaries:
        m: dict[tuple[LoadMode, float], int] = {}
        for i, lv in enumerate(s.levels):
            m.setdefault((lv.load.mode, round(float(lv.load.value), 6)), i)
        maps.append(m)
    keys = set(maps[0]).intersection(*maps[1:]) if maps else set()
    return [(mode, value, [m[(mode, value)] for m in maps]) for mode, value in sorted(keys)]


def _samples(lv: LevelSamples, metric: Metric, ordered: bool = True) -> F64:
    """The ok requests' values in send order (ITL: the per-token samples in arrival order);
    in record order when not ``ordered`` (the bootstrap sorts them by value)."""
    ok = lv.ok_rows
    if not ordered:
        return np.asarray(lv.ev.itl_ms(ok) if metric.per_token else per_request(metric, lv.frame)[ok])
    if metric.per_token:
        x, t = lv.ev.itl_ms(ok), lv.ev.like_itl(lv.ev.ch_t, ok)
    else:
        x, t = per_request(metric, lv.frame)[ok], lv.frame["sent_ns"].to_numpy()[ok]
    return np.asarray(x[np.argsort(t, kind="stable")], dtype=np.float64)


def _summary_n_eff(lv: LevelSamples, key: str, stat: str, values: F64) -> float | None:
    """The level summary's ``n_eff`` of ``key``'s ``stat`` (its interval's), when the summary's
    series is these ``values`` (as many non-NaN ones); None otherwise (or without intervals).
    A tail's (any percentile but the median) is computed again without the median's cap
    (:func:`~loadgen.metrics.bootstrap.effective_size`): None."""
    if stat != "p50":
        return None
    try:
        dist = lv.summary.dist(key)
    except KeyError:  # a metric registered after the summary was written
        return None
    iv = (dist.intervals or {}).get(stat)
    return iv.n_eff if iv is not None and dist.count == int((~np.isnan(values)).sum()) else None


def _per_request(lv: LevelSamples, metric: Metric) -> F64:
    """One value per ok request: its largest ITL for ITL, else the metric itself."""
    if metric.per_token:
        return np.asarray(lv.ev.itl_max_ms()[lv.ok_rows], dtype=np.float64)
    return _samples(lv, metric)


def _attained(lv: LevelSamples) -> npt.NDArray[np.bool_] | None:
    """Mask over the frame: the level's requests meeting its SLOs (as its summary
    names them), None when an SLO cannot be read back."""
    slos = []
    for text in lv.summary.goodput.slos:
        try:
            slos.append(parse_slo(text))
        except ConfigError:
            return None
    mask = np.zeros(lv.rows.size, dtype=bool)
    mask[lv.rows] = slo_attainment(lv.frame[lv.rows], slos)[0]
    return mask


def _headline_window(lv: LevelSamples) -> tuple[tuple[int, int], bool] | None:
    """The level's headline window in ns (``throughput.window``; the whole window in a
    summary without one) and whether it is a part of the whole window."""
    whole = level_window_ns(lv.frame[lv.rows])
    win = lv.summary.throughput.window
    if whole is None or win is None or win.rule == "whole":
        return None if whole is None else (whole, False)
    return (whole[0] + round(win.start_s * 1e9), whole[0] + round(win.end_s * 1e9)), True


def _blocks(lv: LevelSamples, key: str) -> F64:
    """Block rates over the level's headline window (docs/metrics.md, "Throughput
    windows"): output tokens, ok requests or requests meeting the SLOs (goodput) per
    second; their mean is the summary's number."""
    found = _headline_window(lv)
    if found is None:
        return np.zeros(0)
    window, part = found
    ok = lv.ok_rows
    if key == "output_tokens_per_s":
        mask = lv.ev.chunk_mask(ok)  # a chunk's events share its time: its tokens count at once
        t, n = lv.ev.ch_t[mask], lv.ev.ch_n[mask]
        inside = (t > window[0]) & (t <= window[1]) if part else slice(None)
        return block_rates(t[inside], window, N_BLOCKS, weights=n[inside])
    if key == "goodput":
        attained = _attained(lv)
        if attained is None:
            return np.zeros(0)
        ok = attained
    done = lv.frame["done_ns"].to_numpy()[ok]
    return block_rates(done[(done > window[0]) & (done <= window[1])] if part else done, window, N_BLOCKS)


def _proportion(level: LevelSummary) -> tuple[float, float | None]:
    """``(n_eff, p)`` of the level's attainment: the summary's ``n_eff`` (of the success
    series in send order), the request count for a summary without intervals."""
    iv = (level.goodput.intervals or {}).get("slo_attainment")
    return (level.requests.total if iv is None else iv.n_eff), level.goodput.slo_attainment


def _quantile_rows(
    a: LevelSamples,
    b: LevelSamples,
    metric: Metric,
    quantiles: Sequence[tuple[float, str]],
    position: int,
    seed: int,
    resamples: int,
    min_effect: float,
) -> list[Row]:
    """``metric``'s ``quantiles`` of ``a`` (the baseline) against ``b``, bootstrapped on n_eff
    (the j-th seeded ``seed + j``); an inconclusive tail gets the requests' tail evidence."""
    key, label, higher = metric.name, metric.label, metric.higher_is_better
    xa, xb = _samples(a, metric, ordered=False), _samples(b, metric, ordered=False)
    known = [(_summary_n_eff(a, key, stat, xa), _summary_n_eff(b, key, stat, xb)) for _, stat in quantiles]
    if any(None in pair for pair in known):  # n_eff to compute: it needs the values in time order
        xa, xb = _samples(a, metric), _samples(b, metric)
    rows = []
    for j, (q, stat) in enumerate(quantiles):
        d = quantile_difference(
            xa,
            xb,
            q,
            higher_is_better=higher,
            seed=seed + j,
            resamples=resamples,
            min_effect=min_effect,
            n_eff=known[j],
        )
        if d.verdict == INCONCLUSIVE and q >= 0.99:  # the tail: what the requests themselves say
            what = f"largest {label}" if metric.per_token else label
            evidence = tail_evidence(_per_request(a, metric), _per_request(b, metric), what)
            if evidence:
                d = replace(d, note="; ".join(x for x in (d.note, evidence) if x))
        rows.append(Row(position, key, label, stat, metric.unit, d))
    return rows


def trial_rows(
    a: LevelSummary, b: LevelSummary, position: int = 0, *, min_effect: float = MIN_EFFECT, confidence: float = 0.95
) -> list[Row]:
    """The rows of two levels that both ran repeated trials: each headline metric's
    mean over trials, the difference of the means and its Welch interval (the note
    says so and how many trials each side had)."""
    assert a.trials is not None and b.trials is not None
    rows = []
    for path, metric, stat in trial_paths():
        sa, sb = a.trials.metrics.get(path), b.trials.metrics.get(path)
        if sa is None or sb is None:
            continue
        note = f"between trials: {a.trials.n} vs {b.trials.n}"
        ci = welch_interval(sa.values, sb.values)
        if sa.mean is None or sb.mean is None or ci is None:
            d = Difference(sa.mean, sb.mean, None, None, None, NOT_AVAILABLE, confidence, note, METHOD_WELCH)
        else:
            diff = sb.mean - sa.mean
            rel = diff / sa.mean if sa.mean != 0 else None
            d = Difference(
                sa.mean,
                sb.mean,
                diff,
                rel,
                ci,
                verdict(ci, metric.higher_is_better, min_effect=min_effect, base=sa.mean),
                confidence,
                note,
                METHOD_WELCH,
            )
        rows.append(Row(position, metric.name, metric.label, stat, metric.unit, d))
    return rows


def compare_level(
    a: LevelSamples,
    b: LevelSamples,
    position: int = 0,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    min_effect: float = MIN_EFFECT,
) -> list[Row]:
    """Every metric of level ``a`` (the baseline) against level ``b`` (seeded by
    ``position``, so the same runs always give the same intervals)."""
    if a.summary.trials is not None and b.summary.trials is not None:
        return trial_rows(a.summary, b.summary, position, min_effect=min_effect)
    rows: list[Row] = []
    rate_mode = a.summary.load.mode == "rate"
    answered = a.summary.non_streamed is not None or b.summary.non_streamed is not None
    queued = {m.queued for m in metrics() if m.queued}  # measured from the scheduled time: open loops only
    for i, metric in enumerate(compared_metrics()):
        seed = 7919 * position + 101 * i
        key, label, unit, higher = metric.name, metric.label, metric.unit, metric.higher_is_better
        if key in queued and not rate_mode:
            continue
        if answered and metric.streamed_only:  # one JSON answer: no first token, no tokens out
            continue
        if metric.kind == "latency":
            rows += _quantile_rows(a, b, metric, _QUANTILES, position, seed, resamples, min_effect)
        elif metric.kind == "rate":
            d = rate_difference(
                _blocks(a, key),
                _blocks(b, key),
                higher_is_better=higher,
                seed=seed,
                resamples=resamples,
                min_effect=min_effect,
            )
            rows.append(Row(position, key, label, "rate", unit, d))
        else:
            d = proportion_difference(
                _proportion(a.summary),
                _proportion(b.summary),
                scale_a=100.0,
                scale_b=100.0,
                higher_is_better=higher,
                seed=seed,
                resamples=resamples,
                min_effect=min_effect,
            )
            rows.append(Row(position, key, label, "value", unit, d))
    return rows


CLASS_METRICS = ("ttft_ms", "itl_ms", "e2e_ms")
"""The metrics a per-class comparison judges, at :data:`CLASS_QUANTILES`."""
CLASS_QUANTILES = ((0.5, "p50"), (0.99, "p99"))


@dataclass(frozen=True, slots=True)
class ClassRow:
    """One row of the per-class comparison: ``row`` restricted to the requests of class
    ``request_class`` on both sides."""

    request_class: str
    row: Row


@dataclass(frozen=True, slots=True)
class ClassComparison:
    """Two levels' request classes compared: a :class:`ClassRow` per class both levels ran
    (in name order), and the classes only the baseline (``only_a``) or only the other
    level (``only_b``) ran."""

    rows: list[ClassRow]
    only_a: list[str]
    only_b: list[str]


def _classes(lv: LevelSamples) -> list[str]:
    """The level's request classes: its summary's ``by_class``, else its records'."""
    if lv.summary.by_class:
        return sorted(lv.summary.by_class)
    return sorted({str(c) for c in lv.frame["request_class"].to_numpy(dtype=str)[lv.rows]})


def several_classes(a: LevelSamples, b: LevelSamples) -> bool:
    """Did two levels run more than one request class between them (so that a per-class
    view says more than the level's own rows)?"""
    return len(set(_classes(a)) | set(_classes(b))) > 1


def of_class(lv: LevelSamples, name: str) -> LevelSamples:
    """The level restricted to its requests of class ``name`` (its summary kept: a class's
    ``n_eff`` is computed on the class's own series)."""
    mask = lv.frame["request_class"].to_numpy(dtype=str) == name
    return replace(lv, rows=np.asarray(lv.rows & mask))


def compare_classes(
    a: LevelSamples,
    b: LevelSamples,
    position: int = 0,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    min_effect: float = MIN_EFFECT,
) -> ClassComparison:
    """Level ``a`` (the baseline) against level ``b``, class by class: for each class both
    ran, :data:`CLASS_METRICS` at :data:`CLASS_QUANTILES` on that class's requests alone,
    bootstrapped on n_eff as :func:`compare_level` does (also when the levels ran trials:
    the trials keep no per-class means). Streamed-only metrics are left out when either
    side's answers were not streamed."""
    names_a, names_b = _classes(a), _classes(b)
    common = [n for n in names_a if n in names_b]
    answered = a.summary.non_streamed is not None or b.summary.non_streamed is not None
    chosen = [m for m in metrics() if m.name in CLASS_METRICS and not (answered and m.streamed_only)]
    rows = []
    for c, name in enumerate(common):
        ca, cb = of_class(a, name), of_class(b, name)
        for i, metric in enumerate(chosen):
            seed = 7919 * position + 1009 * (c + 1) + 101 * i
            for row in _quantile_rows(ca, cb, metric, CLASS_QUANTILES, position, seed, resamples, min_effect):
                rows.append(ClassRow(name, row))
    return ClassComparison(rows, [n for n in names_a if n not in names_b], [n for n in names_b if n not in names_a])
