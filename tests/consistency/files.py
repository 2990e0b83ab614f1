"""The machine-readable surfaces: the ``--save-result`` file (vLLM's shape), ``loadgen
export``'s levels.csv and requests.csv, and matrix.json — each key mapped to its summary field."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.metrics.results import LevelSummary, RunSummary
from loadgen.runinfo import RunInfo


def _total(d: Any) -> int:
    return 0 if d.mean is None else round(d.mean * d.count)


def _whole(key: str) -> Callable[[LevelSummary, RunInfo], float | None]:
    """vLLM's throughput (``completed / duration``): the summary's whole-window rate
    (``throughput.whole``), not the headline's held window (docs/metrics.md)."""
    return lambda lv, run: getattr(lv.throughput.whole_rates(lv.duration_s), key)


# vLLM's latency names -> loadgen's distributions (docs/metrics.md: vLLM's ITL is one sample
# per chunk, loadgen's inter_chunk_ms; loadgen's itl_ms is per token)
_VLLM_LATENCIES = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "inter_chunk_ms", "e2el": "e2e_ms"}
_VLLM_STATS = {
    "mean": "mean",
    "median": "p50",
    "std": "std",
    "p90": "p90",
    "p95": "p95",
    "p99": "p99",
    "p99.9": "p99.9",
}

SaveCheck = Callable[[LevelSummary, RunInfo], Any]


def _stat(key: str, stat: str) -> SaveCheck:
    return lambda lv, run: lv.dist(key).stat(stat)


SAVE_RESULT: dict[str, SaveCheck] = {
    # what ran: from run.json and the level's load, not statistics
    "date": lambda lv, run: ...,
    "backend": lambda lv, run: ...,
    "label": lambda lv, run: run.label or None,
    "model_id": lambda lv, run: None if run.target is None else run.target.model,
    "tokenizer_id": lambda lv, run: run.tokenizer,
    "request_rate": lambda lv, run: "inf" if lv.load.mode == "concurrency" else lv.load.value,
    "burstiness": lambda lv, run: ...,
    "max_concurrency": lambda lv, run: (
        int(lv.load.value) if lv.load.mode == "concurrency" else run.profile.max_in_flight
    ),
    # counts
    "num_prompts": lambda lv, run: lv.requests.total,
    "completed": lambda lv, run: lv.requests.ok,
    "failed": lambda lv, run: lv.requests.failed,
    "duration": lambda lv, run: lv.duration_s,
    "total_input_tokens": lambda lv, run: _total(lv.prompt_tokens),
    "total_output_tokens": lambda lv, run: _total(lv.output_tokens),
    # vLLM's definitions: completed (or tokens) over the level's whole window, and goodput
    # over the same window (never the held window's goodput beside the whole window's rates)
    "request_throughput": _whole("requests_per_s"),
    "output_throughput": _whole("output_tokens_per_s"),
    "total_token_throughput": _whole("total_tokens_per_s"),
    "request_goodput": lambda lv, run: lv.goodput.whole_requests_per_s if lv.goodput.slos else None,
    **{
        f"{word}_{name}_ms": _stat(key, stat)
        for name, key in _VLLM_LATENCIES.items()
        for word, stat in _VLLM_STATS.items()
    },
    "loadgen": lambda lv, run: ...,  # checked key by key below
}
SAVE_RESULT_LOADGEN: dict[str, SaveCheck] = {
    "load": lambda lv, run: lv.load.to_json(),
    "arrival": lambda lv, run: ...,
    "slos": lambda lv, run: list(lv.goodput.slos),
    "slo_attainment": lambda lv, run: lv.goodput.slo_attainment,
    "client": lambda lv, run: lv.client.verdict,
    "run_folder": lambda lv, run: ...,
}


def same(shown: Any, truth: Any) -> bool:
    """Equal, floats to 1e-12 relative (a JSON float is the summary's float, written again)."""
    if isinstance(truth, float) and isinstance(shown, (int, float)) and not isinstance(shown, bool):
        return math.isclose(shown, truth, rel_tol=1e-12, abs_tol=1e-12)
    return bool(shown == truth)


def check_save_result(summary: RunSummary, run: RunInfo, result: list[dict[str, Any]] | dict[str, Any]) -> list[str]:
    """One entry per level (one level: the entry alone, as vLLM writes it)."""
    bad = []
    if isinstance(result, dict):
        result = [result]
    if len(result) != len(summary.levels):
        return [f"--save-result: {len(result)} entries for {len(summary.levels)} levels"]
    for lv, entry in zip(summary.levels, result):
        for table, got in ((SAVE_RESULT, entry), (SAVE_RESULT_LOADGEN, entry.get("loadgen", {}))):
            for key, value in got.items():
                if key not in table:
                    bad.append(f"--save-result {lv.load.label()}: key {key!r} is not in the map")
                    continue
                truth = table[key](lv, run)
                if truth is not ... and not same(value, truth):
                    bad.append(f"--save-result {lv.load.label()} {key}: {value!r} is not {truth!r}")
    return bad


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: obj}


def _cell_is(text: str, value: Any) -> bool:
    if value is None:
        return text == ""
    if isinstance(value, bool):
        return text == str(value)
    if isinstance(value, (int, float)):
        return text != "" and math.isclose(float(text), value, rel_tol=1e-12, abs_tol=1e-12)
    return text in (str(value), json.dumps(value), ";".join(map(str, value)) if isinstance(value, list) else "")


def check_levels_csv(summary_json: dict[str, Any], path: Path) -> list[str]:
    """Each column of levels.csv is a summary.json path of the level (``ttft_ms.p99``)."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if len(rows) != len(summary_json["levels"]):
        return [f"levels.csv: {len(rows)} rows for {len(summary_json['levels'])} levels"]
    bad = []
    for i, (row, level) in enumerate(zip(rows, summary_json["levels"])):
        flat = flatten(level)
        for col, text in row.items():
            if col == "level":
                ok = text == str(i)
            elif col not in flat:
                if text == "" and any(col in flatten(other) for other in summary_json["levels"]):
                    continue  # another level's field (an interval's reason)
                bad.append(f"levels.csv: column {col!r} is not a summary field")
                continue
            else:
                ok = _cell_is(text, flat[col])
            if not ok:
                bad.append(f"levels.csv level {i} {col}: {text!r} is not {flat.get(col)!r}")
    return bad


def check_requests_csv(summary: RunSummary, path: Path) -> list[str]:
    """requests.csv holds the requests the summary was computed from: per level, the count of
    measured requests, of successful ones, and the mean and maximum TTFT and E2E over them."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    bad = []
    for i, lv in enumerate(summary.levels):
        mine = [r for r in rows if r["level"] == str(i)]
        ok = [r for r in mine if r["ok"] == "True"]
        if (len(mine), len(ok)) != (lv.requests.total, lv.requests.ok):
            bad.append(f"requests.csv level {i}: {len(mine)} rows, {len(ok)} ok vs {lv.requests}")
            continue
        for col, dist in (("ttft_ms", lv.ttft_ms), ("e2e_ms", lv.e2e_ms), ("tpot_ms", lv.tpot_ms)):
            values = np.array([float(r[col]) for r in ok if r[col] != ""])
            if len(values) != dist.count:
                bad.append(f"requests.csv level {i} {col}: {len(values)} values, the summary counts {dist.count}")
            elif (
                len(values)
                and dist.mean is not None
                and dist.max is not None
                and not (
                    np.isclose(values.mean(), dist.mean, rtol=1e-9) and np.isclose(values.max(), dist.max, rtol=1e-9)
                )
            ):
                bad.append(f"requests.csv level {i} {col}: mean {values.mean()} max {values.max()} vs {dist}")
    return bad


MATRIX_HEADLINE: dict[str, Callable[[LevelSummary], Any]] = {
    "load": lambda lv: lv.load.to_json(),
    "ok": lambda lv: lv.requests.ok,
    "failed": lambda lv: lv.requests.failed,
    "ttft_ms_p50": lambda lv: lv.ttft_ms.p50,
    "ttft_ms_p99": lambda lv: lv.ttft_ms.p99,
    "itl_ms_p99": lambda lv: lv.itl_ms.p99,
    "tpot_ms_p50": lambda lv: lv.tpot_ms.p50,
    "output_tokens_per_s": lambda lv: lv.throughput.output_tokens_per_s,
    "slo_attainment": lambda lv: lv.goodput.slo_attainment,
    "goodput_rps": lambda lv: lv.goodput.requests_per_s,
}


def check_matrix_entry(summary: RunSummary, entry: dict[str, Any]) -> list[str]:
    """One configuration of matrix.json: its headline is its run's summary.json."""
    bad = []
    head = entry["summary"]
    if set(head) != {"levels", "capacity"}:
        bad.append(f"matrix.json {entry['name']}: keys {sorted(head)} are not in the map")
    want_cap = None if summary.capacity is None else summary.capacity.to_json()
    if head.get("capacity") != want_cap:
        bad.append(f"matrix.json {entry['name']}: capacity {head.get('capacity')} is not {want_cap}")
    if len(head["levels"]) != len(summary.levels):
        return [*bad, f"matrix.json {entry['name']}: {len(head['levels'])} levels for {len(summary.levels)}"]
    for lv, got in zip(summary.levels, head["levels"]):
        for key, value in got.items():
            if key not in MATRIX_HEADLINE:
                bad.append(f"matrix.json {entry['name']} {lv.load.label()}: key {key!r} is not in the map")
            elif not same(value, MATRIX_HEADLINE[key](lv)):
                bad.append(
                    f"matrix.json {entry['name']} {lv.load.label()} {key}: {value!r} vs {MATRIX_HEADLINE[key](lv)!r}"
                )
    return bad
