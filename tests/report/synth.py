"""Synthetic run folders for the report tests: seeded records, real summaries.

The records are made up (seeded numpy), but ``summary.json`` is computed from them by
the real :func:`loadgen.metrics.summarize_level` and ``summarize_run``, exactly as a run
writes it, so a report drawn from the folder can be checked against the summary.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.load.profiles import Profile
from loadgen.metrics import level_slos, parse_slo, summarize_level, summarize_run
from loadgen.records import ErrorKind, RequestRecord, TokenSource
from loadgen.report.files import RunWriter

EVIL = "<img src=x onerror=alert(1)>"
MS = 1_000_000
ANCHOR = 5 * 10**12


@dataclass
class Spec:
    """What the synthetic run looks like."""

    loads: Sequence[float] = (1, 4, 16)
    mode: str = "concurrency"
    per_level: int = 60
    warmup: int = 2
    seed: int = 0
    ttft_ms: float = 30.0  # at the first level; grows 40% per level
    itl_ms: float = 10.0
    ttft_shift_ms: float = 0.0  # added to every TTFT (a "slower" configuration)
    ttft_ar: float = 0.0  # AR(1) coefficient of the TTFT noise in send order (0: independent requests)
    slos: Sequence[str] = ("ttft=100ms",)
    model: str = "synthetic-model"
    label: str = "synthetic"
    workload: str = "chat"
    url: str = "http://127.0.0.1:8000"
    failures: bool = True
    error_text: str = "HTTP 500: internal error"
    client_bound_level: int | None = 0
    server_metrics: bool = True
    soak_windows_s: float | None = None
    request_class: str = "default"
    long_class: str | None = None  # the long prompts' class (None: request_class like the others)
    coalesce: bool = True  # a few events share a read (same timestamp)
    extra_run: dict[str, Any] = field(default_factory=dict)


def _level_records(spec: Spec, li: int, t0: int, rng: np.random.Generator) -> tuple[list[RequestRecord], int]:
    n = spec.per_level + spec.warmup
    load = spec.loads[li]
    # throughput saturates at 4 users (a knee at the next level); rate levels follow their rate
    gap_ns = int(50 * MS / min(load, 4)) if spec.mode == "concurrency" else int(1e9 / load)
    recs = []
    t_end = t0
    noise = 0.0  # log of the TTFT factor: AR(1) with the same N(0, 0.15²) marginal, no extra draws
    for k in range(n):
        sched = t0 + k * gap_ns
        late = int(rng.exponential(0.05) * MS) if k % 17 else int(25 * MS)  # a few very late sends
        sent = sched + late
        long_prompt = k % 10 == 3
        step = float(np.log(rng.lognormal(0, 0.15)))
        noise = step if k == 0 else spec.ttft_ar * noise + np.sqrt(1 - spec.ttft_ar**2) * step
        ttft = (spec.ttft_ms * (1.4**li) * np.exp(noise) + spec.ttft_shift_ms + (60 if long_prompt else 0)) * MS
        target_out = int(rng.integers(8, 33))
        events: list[list[int]] = []
        t = sent + int(ttft)
        produced = 0
        while produced < target_out:
            tokens = 1 if rng.random() < 0.8 else min(int(rng.integers(2, 4)), target_out - produced)
            events.append([t, tokens])
            produced += tokens
            coalesced = rng.random() < 0.05  # drawn either way: the same seed gives the same run
            if spec.coalesce and coalesced and produced < target_out:  # a coalesced read: same timestamp
                events.append([t, 1])
                produced += 1
            t += int(spec.itl_ms * rng.lognormal(0, 0.2) * MS * tokens)
        status, error, done = ErrorKind.OK, None, (events[-1][0] if events else sent) + MS
        if spec.failures and k % 23 == 7:
            status, error, events, done = ErrorKind.HTTP_ERROR, spec.error_text, [], sent + 5 * MS
        elif spec.failures and k % 29 == 11:
            status, error, done = ErrorKind.TIMEOUT, "no byte within 1 s", done + 200 * MS
            events = events[: len(events) // 2]
        recs.append(
            RequestRecord(
                index=li * 1000 + k,
                level=li,
                request_class=(spec.long_class or spec.request_class) if long_prompt else spec.request_class,
                target_prompt_tokens=1000 if long_prompt else 100,
                target_output_tokens=target_out,
                scheduled_ns=sched,
                sent_ns=sent,
                done_ns=done,
                events=events,
                status=status,
                error=error,
                prompt_tokens=(1000 if long_prompt else 100) if status is ErrorKind.OK else None,
                completion_tokens=sum(e[1] for e in events) if status is ErrorKind.OK else None,
                token_source=TokenSource.EVENTS_CORRECTED,
                warmup=k < spec.warmup,
            )
        )
        t_end = max(t_end, done)
    return recs, t_end


def _run_json(spec: Spec) -> dict[str, Any]:
    return {
        "tool": "loadgen",
        "label": spec.label,
        "command": ["loadgen", "run", "--url", spec.url, "--model", spec.model],
        "started_at": "2025-01-02T03:04:05+0000",
        "clock_anchor": {"unix_s": 1735787045.0, "perf_counter_ns": ANCHOR},
        "target": {"url": spec.url, "api": "chat", "model": spec.model, "max_model_len": 4096},
        "workload": {
            "name": spec.workload,
            "description": f"{spec.workload} workload",
            "source": f"/somewhere/{spec.seed}.toml",
            "classes": [
                {
                    "name": spec.request_class,
                    "weight": 1.0,
                    "prompt_tokens": "100",
                    "output_tokens": "uniform:8..32",
                    "shared_prefix_groups": 0,
                    "shared_prefix_tokens": 0,
                }
            ],
        },
        "profile": {"name": "synthetic", "description": "made-up levels", "kind": "levels", "mode": spec.mode},
        "slos": list(spec.slos),
        "config": {"seed": spec.seed},
        "machine": {"hostname": "test", "platform": "linux", "cpus": 2},
        **spec.extra_run,
    }


def make_run(folder: Path, spec: Spec | None = None) -> Path:
    """Write run.json, records.jsonl, summary.json (and server_metrics.jsonl) to ``folder``."""
    spec = spec or Spec()
    rng = np.random.default_rng(spec.seed)
    slos = [parse_slo(s) for s in spec.slos]
    levels = []
    t = ANCHOR + 100 * MS
    with RunWriter(folder) as writer:
        writer.write_run(_run_json(spec))
        for li, value in enumerate(spec.loads):
            recs, t_end = _level_records(spec, li, t, rng)
            for r in recs:
                writer.append(r)
            lag = rng.exponential(0.3, 400)
            if spec.client_bound_level == li:
                lag[::20] = 30.0
            load = {"mode": spec.mode, "value": int(value) if spec.mode == "concurrency" else float(value)}
            level = summarize_level(
                recs,
                load=load,
                slos=level_slos(slos, spec.mode, "queued"),
                loop_lag_ms=lag.tolist(),
                trim=(0.1, 0.1),
                window_s=spec.soak_windows_s,
                scheduled=len(recs) if spec.mode == "rate" else None,
            )
            levels.append(level)
            t = t_end + 50 * MS
        prof = Profile(mode=spec.mode, levels=[float(v) for v in spec.loads], slos=list(spec.slos))
        summary = summarize_run(
            levels, mode=prof.mode, attainment_target=prof.attainment_target, knee_metric=prof.knee_metric
        )
        writer.write_summary(summary.to_json())
    if spec.server_metrics:
        with open(folder / "server_metrics.jsonl", "w", encoding="utf-8") as fh:
            queries = hits = 0.0
            for k, ts in enumerate(range(ANCHOR, t, 200 * MS)):
                queries += 1000
                hits += 400 + (k % 5) * 50
                raw = {
                    "vllm:num_requests_running": float(k % 7),
                    "vllm:num_requests_waiting": float(k % 3),
                    "vllm:kv_cache_usage_perc": (k % 10) / 10,
                    "vllm:prefix_cache_queries_total": queries,
                    "vllm:prefix_cache_hits_total": hits,
                    "vllm:generation_tokens_total": 150.0 * k,
                }
                line = {
                    "t_ns": ts,
                    "running": raw["vllm:num_requests_running"],
                    "waiting": raw["vllm:num_requests_waiting"],
                    "kv_usage": raw["vllm:kv_cache_usage_perc"],
                    "prefix_hit_rate": None if k == 0 else (400 + (k % 5) * 50) / 1000,
                    "raw": raw,
                }
                fh.write(json.dumps(line) + "\n")
            fh.write('{"t_ns": 12, "torn')  # a torn last line, as a killed run leaves
    return folder
