"""The verdicts in words, shared by the console and the HTML report: a level's steady state
and MLPerf early stopping, each level's SLO verdict and the capacity over the levels.

Reads summaries only; the numbers come from :mod:`loadgen.metrics.verdicts` and
:mod:`loadgen.metrics.capacity`. Every level's SLO verdict comes from
:func:`~loadgen.metrics.capacity.level_verdict`, the same function the capacity and its
interval are computed with, so a sentence can name the levels it judged (docs/metrics.md,
"Across levels").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loadgen.metrics.capacity import LevelVerdict, judged_levels, level_verdict
from loadgen.metrics.catalog import METRICS
from loadgen.metrics.results import Capacity, LevelSummary, RunSummary, unit_label
from loadgen.numfmt import fmt_share
from loadgen.report.live import fmt_latency
from loadgen.report.page import fmt

__all__ = [
    "CapacityWords",
    "attainment_confidence",
    "capacity_interval_line",
    "capacity_interval_range",
    "capacity_words",
    "level_verdict_cells",
    "mlperf_line",
    "mlperf_undecided_line",
    "steady_line",
]

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
    """One line with MLPerf's early-stopping verdicts that decide something (met or failed)
    per per-request SLO, ``""`` when none does (:func:`mlperf_undecided_line` says so once
    for the run), e.g. ``MLPerf early stopping (99% confidence): TTFT p99 ≤ 500 ms: met
    (1,204 ≥ 662 queries needed, 1 over)``."""
    parts = []
    for m in level.mlperf or ():
        name = f"{_name(m.metric)} p{100 * m.percentile:.10g} ≤ {fmt_latency(m.bound_ms)}"
        outcome = m.outcome
        if outcome == "met":
            parts.append(f"{name}: met ({m.n:,} ≥ {m.min_queries:,} queries needed, {m.overlatency:,} over)")
        elif outcome == "failed":
            parts.append(f"{name}: failed ({m.overlatency:,} of {m.n:,} queries over: shown above the bound)")
    if not parts or not level.mlperf:
        return ""
    return f"MLPerf early stopping ({100 * level.mlperf[0].confidence:.10g}% confidence): " + "; ".join(parts)


def mlperf_undecided_line(levels: Sequence[LevelSummary]) -> str:
    """One line for the MLPerf early-stopping checks that decide nothing (too few queries
    either way), e.g. ``MLPerf early stopping: undecided at every level (needs ≥ 459 queries
    at p99)``; ``""`` when every check decided."""
    with_checks = [lv for lv in levels if lv.mlperf]
    open_ = [(lv, [m for m in lv.mlperf or () if m.outcome == "undecided"]) for lv in with_checks]
    open_ = [(lv, ms) for lv, ms in open_ if ms]
    if not open_:
        return ""
    checks = [m for _, ms in open_ for m in ms]
    need = min(m.min_queries for m in checks)
    pcts = ", ".join(dict.fromkeys(f"p{100 * m.percentile:.10g}" for m in checks))
    if len(open_) == len(with_checks) and all(len(ms) == len(lv.mlperf or ()) for lv, ms in open_):
        where = "at every level" if len(with_checks) > 1 else "at its level"
    else:
        decided = [lv.load.label() for lv in with_checks if all(lv is not o for o, _ in open_)]
        some = any(len(ms) < len(lv.mlperf or ()) for lv, ms in open_)
        if len(decided) < len(open_) and decided and not some:
            where = "at every level but " + ", ".join(decided)
        elif some:  # a level with a decided check: name its open ones
            whole = [lv.load.label() for lv, ms in open_ if len(ms) == len(lv.mlperf or ())]
            part = [
                f"{', '.join(f'{_name(m.metric)} p{100 * m.percentile:.10g}' for m in ms)} at {lv.load.label()}"
                for lv, ms in open_
                if len(ms) < len(lv.mlperf or ())
            ]
            where = "; ".join(([f"at {', '.join(whole)}"] if whole else []) + part)
        else:
            where = "at " + ", ".join(lv.load.label() for lv, _ in open_)
    return f"MLPerf early stopping: undecided {where} (needs ≥ {need:,} queries at {pcts})"


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


def _judged(summary: RunSummary) -> list[LevelSummary]:
    cap = summary.capacity
    return [] if cap is None or not cap.slos else judged_levels(summary.levels, cap.mode)


def level_verdict_cells(summary: RunSummary) -> list[str]:
    """Each level's SLO verdict for the level tables, in ``summary.levels`` order: ``pass``,
    ``fail`` or ``undecided``; in parentheses for a level the capacity does not judge (another
    load mode, or a load run again); ``""`` for every level without a capacity at SLOs."""
    cap = summary.capacity
    if cap is None or not cap.slos:
        return ["" for _ in summary.levels]
    judged = {id(lv) for lv in _judged(summary)}
    cells = []
    for lv in summary.levels:
        verdict = level_verdict(lv, cap.target).verdict
        cells.append(verdict if id(lv) in judged else f"({verdict})")
    return cells


@dataclass(frozen=True, slots=True)
class CapacityWords:
    """The capacity in words: ``value`` (``"11.3 req/s"``, ``"≥ 17.2 req/s"``, ``"never
    met"``), ``verdict`` (why, naming the levels it rests on) and ``notes`` (which levels
    were judged, which were undecided, which met the target again above the first miss)."""

    value: str
    verdict: str
    notes: list[str]


def capacity_words(summary: RunSummary) -> CapacityWords | None:
    """The capacity of ``summary`` in words (``None`` without a capacity at SLOs)."""
    cap = summary.capacity
    judged = _judged(summary)
    if cap is None or not cap.slos or not judged:
        return None
    unit, tgt = unit_label(cap.mode), fmt_share(cap.target)  # as the capacity line heads it
    verdicts = [level_verdict(lv, cap.target) for lv in judged]
    kind = f"{cap.mode} " if cap.mode else ""
    scope = f"{len(judged)} {kind}level{'s' if len(judged) != 1 else ''}"
    missed = next((i for i, v in enumerate(verdicts) if not v.meets), None)
    if cap.status == "ok" and cap.value is not None and missed is not None and missed > 0:
        value = f"{fmt(cap.value)} {unit}"
        verdict = (
            f"{judged[missed - 1].load.label()} met {tgt}; {judged[missed].load.label()} is the first "
            f"of the {scope} to miss it ({_why(judged[missed], verdicts[missed])})"
        )
    elif cap.status == "not_reached" and cap.value is not None:
        value = f"≥ {fmt(cap.value)} {unit}"
        verdict = f"not reached: each of the {scope} met {tgt} attainment"
    else:
        value = "never met"
        verdict = (
            f"the lowest of the {scope}, {judged[0].load.label()}, missed {tgt} attainment "
            f"({_why(judged[0], verdicts[0])})"
        )
    notes = [f"judged: {scope}, {judged[0].load.label()} to {judged[-1].load.label()}"]
    others = [lv.load.label() for lv in summary.levels if all(lv is not j for j in judged)]
    if others:
        notes.append(f"not judged: {', '.join(others)} (another load mode or a load run again)")
    undecided = [lv.load.label() for lv, v in zip(judged, verdicts) if v.verdict == "undecided"]
    if undecided:
        notes.append(f"undecided (attainment interval on both sides of {tgt}, or no requests): {', '.join(undecided)}")
    if missed is not None:
        again = [lv.load.label() for lv, v in zip(judged[missed + 1 :], verdicts[missed + 1 :]) if v.meets]
        if again:
            notes.append(
                f"met {tgt} again above the first miss: {', '.join(again)} (not monotone in load: "
                "the capacity stays below the first miss)"
            )
    return CapacityWords(value, verdict, notes)


def _why(level: LevelSummary, v: LevelVerdict) -> str:
    """Why a level missed, as the level table shows it: its attainment and verdict."""
    if v.reason in ("non-stationary", "no requests"):
        return f"{v.reason}: {v.verdict}"
    return f"attainment {fmt_share(level.goodput.slo_attainment)}, {v.verdict}"  # as the level table's
