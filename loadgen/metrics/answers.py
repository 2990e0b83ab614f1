"""A level of a non-streamed API (embeddings, rerank, score): what it has instead of tokens.

Such a request answers once (its record has ``inputs`` > 0 and no events), so a level has
no TTFT, ITL or TPOT (their distributions are empty: ``None``), and its output-token rate
means nothing: :func:`non_streamed` leaves ``throughput.output_tokens_per_s`` (and its
steady, whole-window and interval forms) out (``None``) and adds ``non_streamed``: the ok requests'
inputs and input tokens (the server's ``usage``, else the target) per second over the
level's headline window (``throughput.window``, as its requests/s), and the inputs per request. An ok answer whose usage count was invalid
(``token_source`` ``usage_rejected``) counts its target prompt tokens instead; the level's
``client.notes`` say how many did. E2E latency, requests/s, SLO attainment
(``e2e=``), goodput and capacity are the same as any level's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from loadgen.metrics.results import LevelSummary, NonStreamed, WholeRates
from loadgen.metrics.stats import distribution
from loadgen.records import RequestRecord, TokenSource

__all__ = ["knee_latency", "knee_throughput", "non_streamed"]


def non_streamed(level: LevelSummary, measured: Sequence[RequestRecord], ok: npt.NDArray[np.bool_]) -> LevelSummary:
    """``level`` as a non-streamed API's level when its requests sent inputs, else unchanged.
    ``measured`` are the level's records without warm-up, ``ok`` their success mask."""
    inputs = np.fromiter((r.inputs for r in measured), dtype=np.int64, count=len(measured))
    if not (inputs > 0).any():
        return level
    tokens = np.fromiter(
        (r.target_prompt_tokens if r.prompt_tokens is None else r.prompt_tokens for r in measured),
        dtype=np.float64,
        count=len(measured),
    )
    tp = level.throughput
    seconds, counted = level.duration_s, ok
    if tp.window is not None and tp.window.rule != "whole":  # the headline's window, as requests/s
        first = min(r.sent_ns for r in measured if r.sent_ns)
        lo, hi = first + round(tp.window.start_s * 1e9), first + round(tp.window.end_s * 1e9)
        done = np.fromiter((r.done_ns for r in measured), dtype=np.int64, count=len(measured))
        seconds, counted = tp.window.window_s, ok & (done > lo) & (done <= hi)
    rate = (lambda x: x / seconds) if seconds > 0 else (lambda x: None)
    intervals = {k: v for k, v in (tp.intervals or {}).items() if k != "output_tokens_per_s"} or None
    throughput = dataclasses.replace(
        tp,
        output_tokens_per_s=None,
        output_tokens_per_s_se=None,
        steady=dataclasses.replace(tp.steady, output_tokens_per_s=None),
        intervals=intervals,
        whole=None if tp.whole is None else _no_output_rate(tp.whole),
    )
    summary = NonStreamed(
        inputs_per_s=rate(float(inputs[counted].sum())),
        input_tokens_per_s=rate(float(tokens[counted].sum())),
        inputs=distribution(inputs[ok]),
    )
    client = level.client
    rejected = sum(1 for r, good in zip(measured, ok) if good and r.token_source == TokenSource.USAGE_REJECTED)
    if rejected:
        note = (
            f"{rejected} of {int(ok.sum())} ok answers had a usage count that is not a whole number >= 0: "
            "it was dropped and their input tokens are the workload's target lengths"
        )
        client = dataclasses.replace(client, notes=[*(client.notes or []), note])
    return dataclasses.replace(level, throughput=throughput, non_streamed=summary, client=client)


def _no_output_rate(whole: WholeRates) -> WholeRates:
    intervals = {k: v for k, v in (whole.intervals or {}).items() if k != "output_tokens_per_s"} or None
    return dataclasses.replace(whole, output_tokens_per_s=None, intervals=intervals)


def knee_throughput(level: LevelSummary) -> float:
    """What the saturation knee reads as throughput: output tokens/s, or for a non-streamed
    API's level its inputs/s (0 when unknown)."""
    ns = level.non_streamed
    value = level.throughput.output_tokens_per_s if ns is None else ns.inputs_per_s
    return float(value or 0.0)


def knee_latency(level: LevelSummary, metric: str) -> float:
    """The knee's latency ``metric`` (``"ttft_ms.p99"``) of ``level``; a non-streamed API's
    level, which has no TTFT, ITL or TPOT, reads its E2E at the same statistic (0 when unknown)."""
    value = level.metric(metric)
    if value is None and level.non_streamed is not None:
        value = level.metric("e2e_ms." + metric.rsplit(".", 1)[-1])
    return float(value or 0.0)
