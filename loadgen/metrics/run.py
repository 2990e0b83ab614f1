"""Across levels: a run's :class:`~loadgen.metrics.results.RunSummary` from its levels.

The run-wide answers come from the levels of one load mode, in load order: the capacity
at the SLO-attainment target (:func:`~loadgen.metrics.capacity.capacity`) and the
saturation knee (:func:`~loadgen.metrics.capacity.knee`, throughput = output tokens/s,
latency = the profile's ``knee_metric``). A sweep that mixes modes (``sweep-rate``
starts with two closed-loop levels) is judged on its rate levels. A non-stationary level
(its latencies trend: overloaded) fails the capacity with attainment 0, as the capacity
search fails it. ``capacity.interval`` brackets the capacity between the highest level
shown to pass and the lowest shown to fail by their attainment intervals
(:func:`~loadgen.metrics.capacity.slo_verdict`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from loadgen.metrics.answers import knee_latency, knee_throughput
from loadgen.metrics.capacity import capacity, capacity_interval, knee
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
    pts = sorted((lv for lv in levels if lv.load.mode == mode), key=lambda lv: lv.load.value)
    if not pts:
        return RunSummary(levels=list(levels), stopped=stopped, interrupted=interrupted)
    cap = capacity(
        [(lv.load.value, lv.goodput.slo_attainment if lv.stationary else None) for lv in pts],
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
