"""The steady-state and MLPerf verdicts of a level, in words (console and HTML share them).

Reads :class:`~loadgen.metrics.results.LevelSummary` fields only (``steady_state``,
``mlperf``); the numbers come from :mod:`loadgen.metrics.verdicts`.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.metrics.catalog import METRICS
from loadgen.metrics.results import Capacity, LevelSummary, unit_label
from loadgen.report.live import fmt_latency
from loadgen.report.page import fmt

__all__ = ["attainment_confidence", "capacity_interval_line", "capacity_interval_range", "mlperf_line", "steady_line"]

_METRIC_NAMES = {
    "ttft_ms": "TTFT",
    "ttft_queued_ms": "TTFT (queued)",
    "tpot_ms": "TPOT",
    "itl_max_ms": "max ITL",
    "e2e_ms": "E2E",
    "e2e_queued_ms": "E2E (queued)",
}


def _name(key: str) -> str:
    """An MLPerf check's metric (a frame column, or a registered metric's name) in words."""
    entry = METRICS.get(key)
    return _METRIC_NAMES.get(key) or (entry.console if entry is not None and entry.console else key)


def steady_line(level: LevelSummary) -> str:
    """``"non-stationary: …"`` with the trend(s) found, or the warm-up cut of a steady level
    (``""`` when there is nothing to say: no cut, no trend)."""
    ss = level.steady_state
    if ss is None:
        return ""
    if not ss.stationary:
        return (
            f"non-stationary: {'; '.join(ss.reasons)} — a growing queue (overloaded): its numbers "
            "depend on how long it ran, and a capacity search fails it"
        )
    if ss.warmup_cut:
        done = "dropped from its statistics" if ss.warmup_applied else "kept (set auto_warmup = true to drop them)"
        return f"warm-up: MSER-5 cuts the first {ss.warmup_cut:,} requests, {done}"
    return ""


def mlperf_line(level: LevelSummary) -> str:
    """One line with MLPerf's early-stopping verdict per per-request SLO (``""`` without any),
    e.g. ``MLPerf early stopping: TTFT p99 ≤ 500 ms: pass (1,204 ≥ 662 queries needed, 1 over)``."""
    parts = []
    for m in level.mlperf or ():
        name = f"{_name(m.metric)} p{100 * m.percentile:.10g} ≤ {fmt_latency(m.bound_ms)}"
        if m.passed:
            verdict = f"pass ({m.n:,} ≥ {m.min_queries:,} queries needed, {m.overlatency:,} over)"
        else:
            verdict = f"not shown ({m.n:,} < {m.min_queries:,} queries needed, {m.overlatency:,} over)"
        parts.append(f"{name}: {verdict}")
    if not parts:
        return ""
    conf = level.mlperf[0].confidence if level.mlperf else 0.99
    return f"MLPerf early stopping ({100 * conf:.10g}% confidence): " + "; ".join(parts)


def capacity_interval_line(cap: Capacity, confidence: float | None = None) -> str:
    """The capacity as an interval by the levels' attainment intervals ("" without one), at
    their ``confidence`` (:func:`attainment_confidence`; 95% when not known)."""
    if cap.interval is None:
        return ""
    low, high = cap.interval
    unit = unit_label(cap.mode)
    lo = "no level shown to pass" if low is None else f"shown to pass at {fmt(low)} {unit}"
    hi = "none shown to fail above it" if high is None else f"shown to fail at {fmt(high)} {unit}"
    pct = f"{100 * (0.95 if confidence is None else confidence):g}%"
    return f"capacity interval ({pct} attainment intervals; non-stationary levels fail): {lo}, {hi}"


def attainment_confidence(levels: Sequence[LevelSummary]) -> float | None:
    """The confidence of the levels' SLO-attainment intervals (the first level's that has one;
    a run's profile sets one for all), ``None`` when no level carries one."""
    for lv in levels:
        iv = lv.attainment_interval
        if iv is not None:
            return iv.confidence
    return None


def capacity_interval_range(cap: Capacity) -> str | None:
    """The capacity interval as a range: ``"17.2–19.1 users"``, ``"≥ 17.2 users"`` (no level
    shown to fail above it), ``"≤ 19.1 users"`` (none shown to pass), ``""`` when no level
    decided either side; ``None`` when the summary has no interval."""
    if cap.interval is None:
        return None
    low, high = cap.interval
    unit = unit_label(cap.mode)
    if low is not None and high is not None:
        return f"{fmt(low)}–{fmt(high)} {unit}"
    if low is not None:
        return f"≥ {fmt(low)} {unit}"
    if high is not None:
        return f"≤ {fmt(high)} {unit}"
    return ""
