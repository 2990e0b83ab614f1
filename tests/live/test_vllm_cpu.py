"""The live tier: loadgen against the real vLLM V1 engine (its CPU build serving
SmolLM2-135M-Instruct on 127.0.0.1), checked against vLLM's own ``/metrics``.

Skipped unless ``LOADGEN_LIVE_VLLM`` names the folder ``benchmarks/live/vllm_cpu.sh`` built
(``.ci/run`` sets it after the setup succeeds). One server for the module (start-up 72-160 s
on this machine); every run small and bounded (tens of requests, ~50 output tokens/s here,
a 300 s timeout each). Each run's counters and histograms are read from ``/metrics`` just
before and just after it, so the differences are that run's requests only (the counts are
checked to be).

- Token counts: every request gets exactly the output tokens asked for; the prompt and
  output tokens loadgen records are exactly what vLLM counted (its ``prompt_tokens_total``
  and ``generation_tokens_total``, less the calibration's two requests, whose lengths
  ``run.json`` records). Prompt lengths without a tokenizer come from the words-per-token
  calibration (their mean is the target, each within 3 tokens); with the model's own
  ``tokenizer.json`` they are counted (at most 2 under the target, a word's length).
- TTFT: the client's mean minus the mean of vLLM's ``time_to_first_token_seconds``
  histogram, over the same requests, at 1 and 4 users. vLLM starts its clock when its API
  server has the request and stops it when the first token leaves the engine; what is
  left is the client's share (the HTTP request and response on loopback, the SSE parsing,
  the event loop) plus the three processes' contention for 2 shared cores. Measured 3.5 /
  11.5 ms (issue 39); the bound is 60 ms, wide enough for a busy shared machine (a
  scheduler time slice is ~4-10 ms, several may queue at 4 users) and far below what a
  client that queues or stamps late would add (one decode step here is ~17 ms per token,
  one prefill ~80 ms). Calibration is off for these runs, so vLLM's histogram holds
  exactly the measured requests.
- ``--scrape-metrics``: the run folder's ``server_metrics.jsonl`` holds vLLM's gauges,
  counters and latency histograms (sums and counts), read during the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loadgen.client.scrape import parse_prometheus
from tests.live.vllm_server import VllmServer, serve

LIVE = os.environ.get("LOADGEN_LIVE_VLLM", "")

pytestmark = pytest.mark.skipif(
    not LIVE,
    reason="live tier: set LOADGEN_LIVE_VLLM to the folder benchmarks/live/vllm_cpu.sh prints (.ci/run does)",
)

TTFT_MARGIN_MS = 60.0
RUN_TIMEOUT_S = 300
HISTOGRAMS = ("time_to_first_token", "inter_token_latency", "e2e_request_latency", "request_queue_time")
# vLLM's names (their _sum and _count samples are plain series in the text format)
COUNTERS = dict.fromkeys(
    (
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_sum",
        *(f"vllm:{name}_seconds_count" for name in HISTOGRAMS),
    ),
    "sum",
)


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    with serve(Path(LIVE), log, start_timeout_s=300) as srv:
        yield srv


def scrape(srv: VllmServer) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(srv.url + "/metrics", timeout=10) as r:
        return parse_prometheus(r.read().decode(), COUNTERS)


@dataclass(frozen=True, slots=True)
class LiveRun:
    folder: Path
    records: list[dict[str, Any]]
    summary: dict[str, Any]
    run_json: dict[str, Any]
    after: dict[str, float]  # each of COUNTERS after the run
    delta: dict[str, float]  # each of COUNTERS, after the run minus before


def run_loadgen(srv: VllmServer, folder: Path, *args: str) -> LiveRun:
    """``loadgen run`` as a user types it, with vLLM's counters read before and after."""
    before = scrape(srv)
    cmd = [sys.executable, "-m", "loadgen", "run", "--url", srv.url, "--out", str(folder), "--quiet", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )
    after = scrape(srv)
    records = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines() if line.strip()]
    return LiveRun(
        folder=folder,
        records=records,
        summary=json.loads((folder / "summary.json").read_text()),
        run_json=json.loads((folder / "run.json").read_text()),
        after=after,
        delta={k: after.get(k, 0.0) - before.get(k, 0.0) for k in COUNTERS},
    )


@pytest.fixture(scope="module")
def token_run(vllm: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> LiveRun:
    """loadgen's defaults (calibration on), 16 requests of 128 + 32 tokens by 2 users."""
    folder = tmp_path_factory.mktemp("tokens") / "run"
    return run_loadgen(
        vllm, folder, "--concurrency", "2", "--requests", "16", "--prompt-tokens", "128", "--output-tokens", "32",
        "--seed", "3901", "--scrape-metrics",
    )  # fmt: skip


def test_every_request_gets_the_output_tokens_asked_for(token_run: LiveRun) -> None:
    assert len(token_run.records) == 16
    assert {r["status"] for r in token_run.records} == {"ok"}
    assert [r["completion_tokens"] for r in token_run.records] == [32] * 16
    assert token_run.summary["levels"][0]["output_tokens"]["mean"] == 32


def test_token_counts_are_vllms_own(token_run: LiveRun) -> None:
    samples = token_run.run_json["calibration"]["samples"]  # [words, prompt tokens] of each request
    assert token_run.run_json["calibration"]["calibrated"] is True
    prompt = sum(r["prompt_tokens"] for r in token_run.records)
    output = sum(r["completion_tokens"] for r in token_run.records)
    # the calibration's requests ask for one output token each
    assert token_run.delta["vllm:prompt_tokens_total"] == prompt + sum(t for _, t in samples)
    assert token_run.delta["vllm:generation_tokens_total"] == output + len(samples)
    assert token_run.delta["vllm:e2e_request_latency_seconds_count"] == 16 + len(samples)


def test_prompt_lengths_without_a_tokenizer_are_the_fits(token_run: LiveRun) -> None:
    # the server's count of each prompt; the word-to-token calibration is a fit, not a count
    # (workloads/README.md, "Prompt text and calibration"): its mean is the target, and each
    # prompt's common words are mostly one token each (measured here: 127-130 for 128)
    assert all(r["target_prompt_tokens"] == 128 for r in token_run.records)
    got = [r["prompt_tokens"] for r in token_run.records]
    assert abs(sum(got) / len(got) - 128) <= 1.0 and all(abs(t - 128) <= 3 for t in got), got


def test_with_the_models_tokenizer_prompt_lengths_are_counted(vllm: VllmServer, tmp_path: Path) -> None:
    """``--tokenizer`` with the served model's own ``tokenizer.json``: each prompt is searched
    word by word until the tokenizer counts the target, and the template overhead is counted
    (the server's count of a calibration prompt less the tokenizer's), so vLLM counts the
    target or, where the last word is longer than the gap, at most 2 tokens under it."""
    pytest.importorskip("tokenizers", reason="optional extra loadgen[tokenizer] is not installed")
    tok = Path(LIVE) / "model" / "tokenizer.json"
    run = run_loadgen(
        vllm, tmp_path / "tok", "--concurrency", "2", "--requests", "8", "--prompt-tokens", "128",
        "--output-tokens", "8", "--seed", "3902", "--tokenizer", str(tok),
    )  # fmt: skip
    got = [r["prompt_tokens"] for r in run.records]
    assert all(126 <= t <= 128 for t in got), got
    assert sum(t == 128 for t in got) >= len(got) // 2, got


def test_scraped_metrics_are_vllms(token_run: LiveRun) -> None:
    lines = [json.loads(x) for x in (token_run.folder / "server_metrics.jsonl").read_text().splitlines() if x.strip()]
    assert len(lines) >= 2
    assert max(ln["running"] for ln in lines) >= 1  # a request in vLLM's batch while we ran
    assert all(0.0 <= ln["kv_usage"] <= 1.0 for ln in lines)
    generated = [ln["raw"]["vllm:generation_tokens_total"] for ln in lines]
    assert generated == sorted(generated) and generated[-1] > generated[0]
    # vLLM's latency histograms (sums and counts), as /metrics has them: never more requests
    # than vLLM had counted when the run ended, and requests counted during it
    for name in HISTOGRAMS:
        counts = [ln["raw"][f"vllm:{name}_seconds_count"] for ln in lines]
        sums = [ln["raw"][f"vllm:{name}_seconds_sum"] for ln in lines]
        assert counts == sorted(counts) and sums == sorted(sums), name
        assert counts[-1] > counts[0] and counts[-1] <= token_run.after[f"vllm:{name}_seconds_count"], name


@pytest.mark.parametrize("users", [1, 4])
def test_ttft_within_margin_of_vllms_histogram(vllm: VllmServer, tmp_path: Path, users: int) -> None:
    requests = 12 * users
    run = run_loadgen(
        vllm, tmp_path / "run", "--concurrency", str(users), "--requests", str(requests),
        "--prompt-tokens", "128", "--output-tokens", "32", "--seed", str(3910 + users), "--no-calibrate",
    )  # fmt: skip
    assert {r["status"] for r in run.records} == {"ok"}
    # vLLM's histogram holds these requests and no others
    assert run.delta["vllm:time_to_first_token_seconds_count"] == requests
    server_ms = 1000 * run.delta["vllm:time_to_first_token_seconds_sum"] / requests
    client_ms = run.summary["levels"][0]["ttft_ms"]["mean"]
    added = client_ms - server_ms
    print(f"TTFT at {users} users: client {client_ms:.1f} ms, vLLM {server_ms:.1f} ms, added {added:+.1f} ms")
    assert 0.0 <= added < TTFT_MARGIN_MS, (client_ms, server_ms)
