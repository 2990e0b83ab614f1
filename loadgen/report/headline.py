"""``--save-result FILE``: a run's headline numbers in the shape of ``vllm bench serve``'s
result JSON, so scripts written for vLLM's files read loadgen's.

One level gives one object; a sweep gives a list of them, one per level, in order. Each
object has vLLM's keys (``completed``, ``request_throughput``, ``mean_ttft_ms``,
``p99_itl_ms``…; the mapping and its caveats are in docs/metrics.md) and one key of its
own, ``loadgen``, that names the level and the run folder. vLLM's per-request lists
(``--save-detailed``) are left out: they are in the run folder's records.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from loadgen.errors import ConfigError
from loadgen.metrics.results import Distribution, LevelSummary, RunSummary
from loadgen.runinfo import RunInfo

__all__ = ["check_result_path", "vllm_result", "write_result"]

# vLLM's name for each latency, and the loadgen distribution with its definition
_LATENCIES = (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("itl", "inter_chunk_ms"), ("e2el", "e2e_ms"))
_PERCENTILES = (("90", "p90"), ("95", "p95"), ("99", "p99"), ("99.9", "p99.9"))
_BACKENDS = {"chat": "openai-chat", "completions": "openai"}  # vLLM's --backend for the same API


def _total(d: Distribution) -> int:
    """The sum of the samples (count × mean; exact up to the mean's rounding)."""
    return 0 if d.mean is None else round(d.mean * d.count)


def vllm_result(level: LevelSummary, run: RunInfo, folder: Path | None = None) -> dict[str, Any]:
    """One level as ``vllm bench serve`` writes its result (``run`` is the run's run.json)."""
    target, profile = run.target, run.profile
    closed = level.load.mode == "concurrency"
    arrival = profile.arrival
    burstiness = {"poisson": 1.0, "gamma": profile.burstiness}.get(arrival)
    started = run.started_at
    try:
        date = time.strftime("%Y%m%d-%H%M%S", time.strptime(started, "%Y-%m-%dT%H:%M:%S%z")) if started else None
    except ValueError:
        date = None
    out: dict[str, Any] = {
        "date": date,
        "backend": None if target is None else _BACKENDS.get(target.api, target.api),
        "label": run.label or None,
        "model_id": None if target is None else target.model,
        "tokenizer_id": run.tokenizer,
        "num_prompts": level.requests.total,
        # a closed loop of N users is vLLM's rate inf with N requests in flight
        "request_rate": "inf" if closed else level.load.value,
        "burstiness": None if closed else burstiness,
        "max_concurrency": int(level.load.value) if closed else profile.max_in_flight,
        "duration": level.duration_s,
        "completed": level.requests.ok,
        "failed": level.requests.failed,
        "total_input_tokens": _total(level.prompt_tokens),
        "total_output_tokens": _total(level.output_tokens),
        "request_throughput": level.throughput.requests_per_s,
        "request_goodput": level.goodput.requests_per_s if level.goodput.slos else None,
        "output_throughput": level.throughput.output_tokens_per_s,
        "total_token_throughput": level.throughput.total_tokens_per_s,
    }
    for name, key in _LATENCIES:
        d = level.dist(key)
        out[f"mean_{name}_ms"], out[f"median_{name}_ms"], out[f"std_{name}_ms"] = d.mean, d.p50, d.std
        for word, stat in _PERCENTILES:
            out[f"p{word}_{name}_ms"] = d.stat(stat)
    out["loadgen"] = {
        "load": level.load.to_json(),
        "arrival": None if closed else arrival,
        "slos": list(level.goodput.slos),
        "slo_attainment": level.goodput.slo_attainment,
        "client": level.client.verdict,
        **({} if folder is None else {"run_folder": str(folder)}),
    }
    return out


def check_result_path(path: Path) -> None:
    """Refuse, before the run, a ``--save-result`` path that cannot be a file."""
    if path.is_dir():
        raise ConfigError(f"{path} is a folder; give the JSON file's path", key="--save-result")
    if path.parent.exists() and not path.parent.is_dir():
        raise ConfigError(f"{path.parent} is not a folder", key="--save-result")


def write_result(path: Path, summary: RunSummary, run: RunInfo | dict[str, Any], folder: Path | None = None) -> None:
    """Write ``--save-result``: an object for one level, a list of them for several
    (``run``: the run's record, or its ``run.json`` as read)."""
    info = run if isinstance(run, RunInfo) else RunInfo.from_json(run)
    doc = [vllm_result(lv, info, folder) for lv in summary.levels]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc[0] if len(doc) == 1 else doc, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write: {exc.strerror or exc}", source=str(path), key="--save-result") from None
