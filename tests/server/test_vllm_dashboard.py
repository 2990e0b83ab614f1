"""The reference server's ``/metrics`` read the way vLLM's own Grafana dashboard reads vLLM's.

The queries are those of vLLM's ``examples/online_serving/prometheus_grafana/grafana.json``
(``$model_name`` filled in). A tiny evaluator runs exactly their two shapes on two scrapes
(before and after the requests: ``rate`` over that interval; ``histogram_quantile`` does not
depend on the rate's scale):

- ``histogram_quantile(q, sum by(le) (rate(X_bucket{model_name="m"}[i])))``, by Prometheus's
  rule: the bucket where rank ``q * total`` falls, linear interpolation inside it (from 0
  for the first bucket), the highest finite bound if it falls in ``+Inf``;
- ``rate(X_sum{model_name="m"}[i]) / rate(X_count{model_name="m"}[i])``.

The answers are checked against the server's own per-request timings (``/loadgen/requests``).
"""

from __future__ import annotations

import asyncio
import math
import re
from typing import Any

import aiohttp

from loadgen.server.config import ServeConfig, SimOptions
from loadgen.server.sim.build import sim_engine
from tests.server.helpers import MODEL, Samples, make_engine, parse_prometheus, serve

# vLLM V1's bucket boundaries (vllm/v1/metrics/loggers.py, v0.11 and later)
VLLM_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
VLLM_TTFT += [20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
VLLM_TOKEN = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0]
VLLM_TOKEN += [40.0, 80.0]
VLLM_REQUEST = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0]
VLLM_REQUEST += [240.0, 480.0, 960.0, 1920.0, 7680.0]
VLLM_BOUNDS = {
    "vllm:time_to_first_token_seconds": VLLM_TTFT,
    "vllm:inter_token_latency_seconds": VLLM_TOKEN,
    "vllm:time_per_output_token_seconds": VLLM_TOKEN,
    "vllm:request_time_per_output_token_seconds": VLLM_TOKEN,
    "vllm:e2e_request_latency_seconds": VLLM_REQUEST,
    "vllm:request_queue_time_seconds": VLLM_REQUEST,
    "vllm:request_inference_time_seconds": VLLM_REQUEST,
    "vllm:request_prefill_time_seconds": VLLM_REQUEST,
    "vllm:request_decode_time_seconds": VLLM_REQUEST,
}


def dashboard_queries(model: str) -> list[str]:
    """The latency panels' queries of vLLM's grafana.json, ``$model_name`` = ``model``."""
    out = []
    for metric in (
        "vllm:e2e_request_latency_seconds",
        "vllm:time_per_output_token_seconds",
        "vllm:time_to_first_token_seconds",
    ):
        for q in ("0.99", "0.95", "0.9", "0.5"):
            out.append(
                f'histogram_quantile({q}, sum by(le) (rate({metric}_bucket{{model_name="{model}"}}[$__rate_interval])))'
            )
        out.append(
            f'rate({metric}_sum{{model_name="{model}"}}[$__rate_interval])\n/\n'
            f'rate({metric}_count{{model_name="{model}"}}[$__rate_interval])'
        )
    return out


_QUANTILE = re.compile(
    r'^histogram_quantile\(([0-9.]+), sum by\(le\) \(rate\(([a-z0-9_:]+)_bucket\{model_name="([^"]*)"\}'
    r"\[\$__rate_interval\]\)\)\)$"
)
_MEAN = re.compile(
    r'^rate\(([a-z0-9_:]+)_sum\{model_name="([^"]*)"\}\[\$__rate_interval\]\)\n/\n'
    r'rate\(\1_count\{model_name="\2"\}\[\$__rate_interval\]\)$'
)


def _increase(before: Samples, after: Samples, name: str, model: str) -> dict[float, float]:
    """``sum by(le)`` of ``name``'s increase over the series of ``model`` (``le`` -> count)."""
    out: dict[float, float] = {}
    for (sample_name, labels), value in after.items():
        lab = dict(labels)
        if sample_name != name or lab.get("model_name") != model:
            continue
        le = float(lab["le"]) if "le" in lab else math.nan
        out[le] = out.get(le, 0.0) + value - before.get((sample_name, labels), 0.0)
    return out


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """Prometheus's ``histogram_quantile`` on cumulative ``le`` buckets."""
    bounds = sorted(buckets)
    if not bounds or bounds[-1] != math.inf:
        return math.nan
    total = buckets[math.inf]
    if total == 0:
        return math.nan
    rank = q * total
    i = next(k for k, b in enumerate(bounds) if buckets[b] >= rank)
    if bounds[i] == math.inf:
        return bounds[-2]
    lower, below = (0.0, 0.0) if i == 0 else (bounds[i - 1], buckets[bounds[i - 1]])
    return lower + (bounds[i] - lower) * (rank - below) / (buckets[bounds[i]] - below)


def evaluate(query: str, before: Samples, after: Samples) -> float:
    """The value of one dashboard query over the interval between the two scrapes."""
    m = _QUANTILE.match(query)
    if m:
        return histogram_quantile(float(m.group(1)), _increase(before, after, m.group(2) + "_bucket", m.group(3)))
    m = _MEAN.match(query)
    assert m, f"not a query shape of the dashboard: {query!r}"
    (total,) = _increase(before, after, m.group(1) + "_sum", m.group(2)).values()
    (count,) = _increase(before, after, m.group(1) + "_count", m.group(2)).values()
    return total / count if count else math.nan


def bucket_around(value: float, bounds: list[float]) -> tuple[float, float]:
    """The ``(lower, upper]`` bucket of ``bounds`` that holds ``value``."""
    lower = 0.0
    for b in bounds:
        if value <= b:
            return lower, b
        lower = b
    return lower, math.inf


async def _scrape_text(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url + "/metrics") as resp:
        assert resp.status == 200
        return await resp.text()


async def _run(engine: Any, n: int, max_tokens: int) -> tuple[Samples, Samples, str, list[dict[str, Any]]]:
    """``n`` concurrent requests (half streamed) between two scrapes; the log of them."""
    async with serve(engine) as url, aiohttp.ClientSession() as session:
        before = parse_prometheus(await _scrape_text(session, url))[0]

        async def one(i: int) -> None:
            body = {"model": MODEL, "prompt": [7 + i] * (40 + 13 * i), "max_tokens": max_tokens}
            body |= {"ignore_eos": True, "stream": bool(i % 2)}
            async with session.post(url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
                await resp.read()

        await asyncio.gather(*(one(i) for i in range(n)))
        text = await _scrape_text(session, url)
        async with session.get(url + f"/loadgen/requests?limit={n}") as resp:
            log = (await resp.json())["data"]
    return before, parse_prometheus(text)[0], text, log


async def test_dashboard_queries_agree_with_the_servers_own_timings() -> None:
    n, max_tokens = 12, 24
    before, after, text, log = await _run(make_engine(time_scale=1.0), n, max_tokens)
    assert len(log) == n
    # every sample is labelled as vLLM labels it (DCGM_*: the simulated GPUs, as DCGM's exporter)
    ours = [dict(labels) for name, labels in after if not name.startswith("DCGM_")]
    assert len(ours) > 100 and all(lab.get("model_name") == MODEL and lab.get("engine") == "0" for lab in ours)
    # vLLM's bucket boundaries, series by series
    for name, bounds in VLLM_BOUNDS.items():
        les = sorted(float(dict(lab)["le"]) for s, lab in after if s == name + "_bucket")
        assert les == [*bounds, math.inf], name
    # one ITL sample per engine output after the first
    outputs = sum(e["outputs"] for e in log)
    itl_count = "vllm:inter_token_latency_seconds_count"
    assert after[(itl_count, frozenset({("model_name", MODEL), ("engine", "0")}))] == outputs - n
    assert outputs == n * max_tokens  # no speculation: one token per output

    ttft = sorted((e["first_output_ns"] - e["arrival_ns"]) / 1e9 for e in log)
    e2e = sorted((e["final_ns"] - e["arrival_ns"]) / 1e9 for e in log)
    gaps_s = sum((e["last_output_ns"] - e["first_output_ns"]) / 1e9 for e in log)
    truth = {
        "vllm:time_to_first_token_seconds": ttft,
        "vllm:e2e_request_latency_seconds": e2e,
    }
    queries = dashboard_queries(MODEL)
    assert len(queries) == 15
    for query in queries:
        value = evaluate(query, before, after)
        assert math.isfinite(value) and value > 0, query
        metric = re.search(r"(vllm:[a-z0-9_]+?)_(bucket|sum)", query)
        assert metric
        name = metric.group(1)
        quantile = _QUANTILE.match(query)
        if name == "vllm:time_per_output_token_seconds":
            if quantile is None:  # the mean gap: the requests' decode spans over their gaps
                assert math.isclose(value, gaps_s / (outputs - n), rel_tol=1e-6), query
            continue
        samples = truth[name]
        if quantile is None:
            assert math.isclose(value, sum(samples) / n, rel_tol=1e-6), query
            continue
        # the answer lies in the bucket that holds the true quantile (the ceil(q n)-th sample)
        q = float(quantile.group(1))
        rank_sample = samples[math.ceil(q * n) - 1]
        lower, upper = bucket_around(rank_sample, VLLM_BOUNDS[name])
        assert lower <= value <= upper, (query, value, rank_sample)

    # vllm:request_time_per_output_token_seconds: per request, decode span over tokens - 1
    tpot = sum((e["last_output_ns"] - e["first_output_ns"]) / 1e9 / (e["output_tokens"] - 1) for e in log)
    labels = frozenset({("model_name", MODEL), ("engine", "0")})
    assert after[("vllm:request_time_per_output_token_seconds_count", labels)] == n
    assert math.isclose(after[("vllm:request_time_per_output_token_seconds_sum", labels)], tpot, rel_tol=1e-6)
    assert "vllm:spec_decode_num_drafts_total" not in text  # the engine does not speculate


async def test_speculative_outputs_are_one_itl_sample_each() -> None:
    engine = sim_engine(ServeConfig(sim=SimOptions(time_scale=0.01, speculative_tokens=3, acceptance_rate=0.8)))
    n, max_tokens = 6, 40
    _, after, _, log = await _run(engine, n, max_tokens)
    outputs = sum(e["outputs"] for e in log)
    tokens = sum(e["output_tokens"] for e in log)
    assert tokens == n * max_tokens and outputs < tokens  # several tokens per output
    labels = frozenset({("model_name", MODEL), ("engine", "0")})
    assert after[("vllm:inter_token_latency_seconds_count", labels)] == outputs - n
    assert after[("vllm:time_per_output_token_seconds_count", labels)] == outputs - n
