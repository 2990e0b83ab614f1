"""Across levels: a run's :class:`~loadgen.metrics.results.RunSummary` from its levels.

The run-wide answers come from the levels of one load mode, in load order: the capacity
at the SLO-attainment target (:func:`~loadgen.metrics.capacity.capacity`) and the
saturation knee (:func:`~loadgen.metrics.capacity.knee`, throughput = output tokens/s,
latency = the profile's ``knee_metric``). A sweep that mixes modes (``sweep-rate``
starts with two closed-loop levels) is judged on its rate levels; a load run twice (the
capacity search's rerun) on its last run (:func:`~loadgen.metrics.capacity.judged_levels`).
Every level is judged once, by :func:`~loadgen.metrics.capacity.level_verdict`: a
non-stationary level (its latencies trend: overloaded) fails with attainment 0, as the
capacity search fails it. ``capacity.interval`` brackets the capacity between the highest
level shown to pass below the lowest shown to fail, and that one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from loadgen.metrics.answers import knee_latency, knee_throughput
from loadgen.metrics.capacity import capacity, capacity_interval, judged_levels, knee, level_verdict
from loadgen.metrics.results import LevelSummary, LoadMode, RunSummary

__all__ = ["DEFAULT_KNEE_METRIC", "summarize_run"]

DEFAULT_KNEE_METRIC = "ttft_ms.p99"


def summarize_run(
    levels: Sequence[LevelSummary],
    *,
    mode: LoadMode = "concurrency",
    mixed_modes: bool = False,
    attainment_target: float = 0.9,
    knee_metric: str = DEFAULT_KNEE_METRIC,
    knee_throughput_gain: float = 0.05,
    knee_latency_growth: float = 0.20,
    stopped: str | None = None,
    interrupted: bool = False,
) -> RunSummary:
    """The run's summary. ``mode`` is the profile's load mode; with ``mixed_modes`` (a
    sweep whose plan changes mode) the rate levels are judged when there are any."""
    if mixed_modes and any(lv.load.mode == "rate" for lv in levels):
        mode = "rate"
    pts = judged_levels(levels, mode)
    if not pts:
        return RunSummary(levels=list(levels), stopped=stopped, interrupted=interrupted)
    verdicts = [level_verdict(lv, attainment_target) for lv in pts]
    cap = capacity(
        [(v.load, v.attainment) for v in verdicts],
        attainment_target,
        mode=mode,
        slos=pts[0].goodput.slos,
    )
    cap = dataclasses.replace(cap, interval=capacity_interval(pts, attainment_target))
    sat = knee(
        [(lv.load.value, knee_throughput(lv), knee_latency(lv, knee_metric)) for lv in pts],
        knee_throughput_gain,
        knee_latency_growth,
        noise=[lv.throughput.output_tokens_per_s_se for lv in pts],
        mode=mode,
        metric=knee_metric,
    )
    return RunSummary(levels=list(levels), capacity=cap, saturation=sat, stopped=stopped, interrupted=interrupted)
