"""A run's sweep, level by level: each level run (``trials`` times), summarised, and its
summary fed back to the sweep that chooses the next (docs/metrics.md, "Across levels").

:func:`sweep_levels` drives any :class:`~loadgen.load.executor.LevelExecutor`;
:func:`summarize_result` and :func:`run_summary` are the summaries a run writes, and the
ones ``loadgen report`` rebuilds from a killed run's records (:mod:`loadgen.orchestrate.recover`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
from rich.console import Console

from loadgen.load.executor import LevelExecutor
from loadgen.load.precision import LevelWatch, trials_precision
from loadgen.load.profiles import Profile
from loadgen.load.runner import LevelPlan, LevelResult
from loadgen.load.sweeps import planned_levels, sweep
from loadgen.metrics.gates import level_failures
from loadgen.metrics.results import SCHEMA_VERSION, LevelSummary, RunSummary
from loadgen.metrics.run import summarize_run
from loadgen.metrics.slo import SLO, level_slos
from loadgen.metrics.summary import summarize_level
from loadgen.metrics.trials import between_trials, trial_summary
from loadgen.numfmt import fmt_latency
from loadgen.orchestrate.config import RunConfig
from loadgen.report.console import LiveStats, level_heading, level_line
from loadgen.report.files import RunWriter

__all__ = ["merge_trials", "run_summary", "summarize_result", "sweep_levels"]


def merge_trials(results: Sequence[LevelResult]) -> LevelResult:
    """One level's repeated trials as one result (records and their events, loop lag,
    schedule counts and worker health pooled); a single trial as it is."""
    if len(results) == 1:
        return results[0]
    first = results[0]
    merged = LevelResult(first.plan, start_ns=first.start_ns, end_ns=results[-1].end_ns)
    columns: list[tuple[Any, Any, Any]] = []
    for r in results:
        records, events = r.for_summary()
        merged.records.extend(records)
        if events is not None:
            columns.append(events)
        merged.loop_lag_ms.extend(r.loop_lag_ms)
        merged.loop_lag_t_ns.extend(r.loop_lag_t_ns)
        merged.scheduled += r.scheduled
        merged.dropped += r.dropped
        merged.interrupted |= r.interrupted
        merged.worker_stats.extend(r.worker_stats)
        merged.lost_workers.extend(w for w in r.lost_workers if w not in merged.lost_workers)
        for w, s in r.silent_workers.items():
            merged.silent_workers[w] = max(merged.silent_workers.get(w, 0.0), s)
        if r.clock_uncertainty_ns is not None:
            merged.clock_uncertainty_ns = max(merged.clock_uncertainty_ns or 0, r.clock_uncertainty_ns)
    if columns:  # compact results: their events apart, in record order
        merged.events = tuple(np.concatenate([c[k] for c in columns]) for k in range(3))  # type: ignore[assignment]
    return merged


def summarize_result(result: LevelResult, prof: Profile, slos: Sequence[SLO], anchor_ns: int) -> LevelSummary:
    """One level's summary, as a run writes it (and as ``loadgen report`` rebuilds it)."""
    plan = result.plan
    records, events = result.for_summary()
    return summarize_level(
        records,
        events=events,
        load=plan.load,
        slos=level_slos(slos, plan.mode, prof.slo_latency),
        loop_lag_ms=result.loop_lag_ms,
        loop_lag_t_ns=result.loop_lag_t_ns,
        anchor_ns=anchor_ns,
        scheduled=result.scheduled if plan.mode == "rate" else None,
        dropped=result.dropped,
        interrupted=result.interrupted,
        window_s=prof.window_s if prof.kind in ("soak", "ramp") else None,
        trim=prof.trim,
        workers=result.worker_stats or None,
        lost_workers=result.lost_workers or None,
        silent_workers=result.silent_workers or None,
        clock_uncertainty_ms=None if result.clock_uncertainty_ns is None else result.clock_uncertainty_ns / 1e6,
        confidence=prof.confidence,
        auto_warmup=prof.auto_warmup and plan.warmup_requests == 0,  # --warmup's count overrides the cut
        mlperf=(prof.mlperf_percentile, prof.mlperf_confidence),
    )


def with_causes(level: LevelSummary, causes: Sequence[Callable[[], str | None]]) -> LevelSummary:
    """``level`` with what else in this process may have held the loop (each of ``causes``,
    asked once per level) among its client-bound reasons; unchanged when it kept up."""
    named = [why for why in (cause() for cause in causes) if why is not None]
    if not named or not level.client.client_bound:
        return level
    client = dataclasses.replace(level.client, reasons=[*level.client.reasons, *named])
    return dataclasses.replace(level, client=client)


def run_summary(levels: list[LevelSummary], prof: Profile, stopped: str | None, interrupted: bool) -> RunSummary:
    """The whole run's summary over its level summaries."""
    return summarize_run(
        levels,
        mode=prof.mode,
        mixed_modes=prof.kind != "levels",
        attainment_target=prof.attainment_target,
        knee_metric=prof.knee_metric,
        knee_throughput_gain=prof.knee_throughput_gain,
        knee_latency_growth=prof.knee_latency_growth,
        stopped=stopped,
        interrupted=interrupted,
    )


async def sweep_levels(
    cfg: RunConfig,
    runner: LevelExecutor,
    writer: RunWriter,
    stats: LiveStats,
    console: Console,
    anchor_ns: int,
    after_level: Callable[[], None] = lambda: None,
    level_end: Callable[[], Awaitable[object]] | None = None,
) -> RunSummary:
    """Drive the profile's sweep: run each level, summarise it, feed the summary back.
    ``level_end`` is awaited when a level's requests have all ended (``--scrape-metrics``:
    a last scrape of the server's counters after the level's last answer)."""
    prof = cfg.profile
    levels: list[LevelSummary] = []
    plan: LevelPlan | None
    if cfg.resume is not None:  # the finished levels' summaries are in the sweep already
        gen, plan, levels = cfg.resume.gen, cfg.resume.plan, list(cfg.resume.levels)
    else:
        offsets = replay_offsets(cfg)
        gen = sweep(prof, cfg.seed) if offsets is None else trace_levels(sweep(prof, cfg.seed), offsets)
        plan = next(gen)
    stopped: str | None = None
    while plan is not None:
        results = []
        reasons: list[str] = []
        for t in range(cfg.trials):
            trial = dataclasses.replace(
                plan if t == 0 else dataclasses.replace(plan, trial=t, seed=plan.seed + t),
                warm_connections=cfg.warm_connections,
                ramp_up_s=cfg.ramp_up_s,
            )
            stats.start_level(
                level_heading(plan.index, planned_levels(prof), t, cfg.trials),
                plan.load.label(),
                level=plan.index,
                trial=t,
                requests=plan.requests,
                warmup=plan.warmup_requests,
                duration_s=plan.duration_s,
                sends_s=trial.last_send_s(),
            )
            watch = None
            if prof.precision:
                watch = LevelWatch(
                    prof.precision,
                    prof.confidence,
                    prof.min_duration_s,
                    max_duration_s=plan.duration_s,
                    max_requests=plan.requests,
                )
            results.append(await (runner.run_level(trial) if watch is None else runner.run_level(trial, watch)))
            if watch is not None:
                reasons.append(watch.reason(_end(results[-1])))
            if runner.interrupted:
                break
        if level_end is not None:
            await level_end()
        result = merge_trials(results)
        level = with_causes(summarize_result(result, cfg.profile, cfg.slos, anchor_ns), stats.causes)
        if reasons:
            level = dataclasses.replace(level, stopped=_reasons(reasons))
        if stats.skipped:  # Skip level: it ended as at its duration, earlier than planned
            level = dataclasses.replace(level, stopped="skipped from the dashboard")
        elif level.stopped is None and (empty := no_measured_reason(level, result)):
            level = dataclasses.replace(level, stopped=empty)
        if len(results) > 1:
            per_trial = [summarize_result(r, cfg.profile, cfg.slos, anchor_ns) for r in results]
            level = between_trials(
                dataclasses.replace(level, trials=trial_summary(per_trial)), per_trial, prof.confidence
            )
            if prof.precision and (judged := trials_precision(prof.precision, level)) is not None:
                level = dataclasses.replace(
                    level, stopped=judged if level.stopped is None else f"{level.stopped}; {judged}"
                )
        levels.append(level)
        if stats.taps:
            stats.level_done(level.to_json())
        writer.write_summary({"schema_version": SCHEMA_VERSION, "levels": [lv.to_json() for lv in levels]})
        after_level()
        if not cfg.live:
            console.print(level_line(level), highlight=False, markup=False, soft_wrap=True)
        if level.connect is not None and level.connect.new:
            console.print(connect_line(level), highlight=False, markup=False, soft_wrap=True)
        elif level.stopped is not None:
            console.print(f"level {level.load.label()} stopped: {level.stopped}", highlight=False, markup=False)
        if runner.interrupted:
            return run_summary(levels, prof, None, True)
        failed = level_failures(level, len(levels) - 1, cfg.gates) if cfg.abort_on_fail else []
        if failed:
            stopped = f"--abort-on-fail: {failed[0].message}"
            break
        try:
            plan = gen.send(level)
        except StopIteration as stop:
            stopped, plan = stop.value, None
    return run_summary(levels, prof, stopped, False)


def connect_line(level: LevelSummary) -> str:
    """The level's measured requests that waited for a connection to be opened."""
    c = level.connect
    assert c is not None
    ms = c.connect_ms
    took = f" (connect p50 {fmt_latency(ms.p50)}, max {fmt_latency(ms.max)})" if ms.count else ""
    return (
        f"level {level.load.label()}: {c.new} of {c.known} measured requests opened a new connection{took}; "
        "their TTFT includes the connect"
    )


def no_measured_reason(level: LevelSummary, result: LevelResult) -> str | None:
    """Why a level that ran out its duration has no measured request: its warm-up used it
    all (None when it has measured requests, or none was warm-up)."""
    plan = result.plan
    if level.requests.total or plan.duration_s is None or result.interrupted:
        return None
    warm = sum(1 for r in result.for_summary()[0] if r.warmup)
    if not warm:
        return None
    return (
        f"no measured request: the {plan.duration_s:g} s went to warm-up ({warm} requests); "
        "raise --duration or lower --warmup"
    )


def _end(result: LevelResult) -> str:
    """What ended a level that ran until precise without meeting its targets."""
    plan = result.plan
    if result.interrupted:
        return "interrupted"
    if plan.duration_s is not None and result.end_ns - result.start_ns >= plan.duration_s * 1e9:
        return "max-duration"
    return "end of trace" if plan.offsets is not None else "requests"


def _reasons(reasons: Sequence[str]) -> str:
    """One level's reason to stop; its trials' each, when they differ."""
    if len(set(reasons)) == 1:
        return reasons[0]
    return "; ".join(f"trial {t + 1}: {r}" for t, r in enumerate(reasons))


def replay_offsets(cfg: RunConfig) -> np.ndarray | None:
    """An open-loop replay's recorded send offsets (a trace's rows, an agent trace's task
    starts); None for any other run (a closed-loop agent-trace replay too)."""
    if cfg.trace is not None:
        return cfg.trace.offsets
    if cfg.agent_trace is not None and cfg.profile.mode == "rate":
        return cfg.agent_trace.offsets
    return None


def trace_levels(gen: Any, offsets: np.ndarray) -> Any:
    """The sweep's levels with a trace's recorded send times."""
    plan = next(gen)
    while True:
        summary = yield dataclasses.replace(plan, offsets=offsets)
        try:
            plan = gen.send(summary)
        except StopIteration as stop:
            return stop.value
