"""Hand-written Prometheus exposition: histograms, traces, the request log."""

from __future__ import annotations

from loadgen.server.engine.interface import EngineStats, TokenOutput
from loadgen.server.prometheus import Histogram, RequestLog, RequestTrace, ServerMetrics, format_value
from tests.server.helpers import MODEL, parse_prometheus, sample


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    h = Histogram("x_seconds", "help text", (0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 2.0):
        h.observe(v)
    assert h.render((("model_name", "m"),)) == [
        "# HELP x_seconds help text",
        "# TYPE x_seconds histogram",
        'x_seconds_bucket{model_name="m",le="0.1"} 2.0',
        'x_seconds_bucket{model_name="m",le="1.0"} 3.0',
        'x_seconds_bucket{model_name="m",le="+Inf"} 4.0',
        'x_seconds_sum{model_name="m"} 2.65',
        'x_seconds_count{model_name="m"} 4.0',
    ]


def test_format_value() -> None:
    assert [format_value(v) for v in (1, 0.25, float("inf"), float("-inf"), float("nan"))] == [
        "1.0",
        "0.25",
        "+Inf",
        "-Inf",
        "NaN",
    ]


def _trace(i: int = 0, **kw: object) -> RequestTrace:
    ms = 1_000_000
    trace = RequestTrace(
        id=f"r{i}",
        endpoint="completions",
        stream=True,
        arrival_ns=0,
        prompt_tokens=3,
        output_tokens=5,
        finish_reason="length",
        done_ns=50 * ms,
        events=[(20 * ms, 1), (30 * ms, 1), (42 * ms, 3)],
        engine={"queue_s": 0.001, "prefill_s": 0.002, "decode_s": 0.03},
        outputs=[18 * ms, 29 * ms, 41 * ms],  # the engine's outputs: 1, 1, then 3 tokens
        final_ns=41 * ms,
    )
    for k, v in kw.items():
        setattr(trace, k, v)
    return trace


def test_trace_timings() -> None:
    t = _trace()
    assert t.ttft_s == 0.02 and t.e2e_s == 0.05
    assert [round(x, 9) for x in t.itl_s()] == [0.01, 0.004, 0.004, 0.004]
    assert _trace(events=[]).ttft_s is None and len(_trace(events=[]).itl_s()) == 0
    # vLLM's semantics: one gap per engine output, the 3-token output's whole; (41 - 18) / 4
    assert [round(x, 9) for x in t.output_gaps_s()] == [0.011, 0.012]
    assert round(t.request_tpot_s, 9) == 0.00575
    assert _trace(output_tokens=1).request_tpot_s == 0.0


def test_output_arrivals_skip_empty_outputs_and_note_the_finish() -> None:
    t = _trace(outputs=[], final_ns=0)
    t.output_arrived(TokenOutput("r", [1]), 5)
    t.output_arrived(TokenOutput("r", [2, 3]), 9)
    t.output_arrived(TokenOutput("r", [], finish_reason="abort"), 12)
    assert (t.outputs, t.final_ns) == ([5, 9], 12)


def test_server_metrics_render_parses_with_vllm_names() -> None:
    metrics = ServerMetrics(MODEL)
    metrics.record(_trace(0))
    metrics.record(_trace(1, finish_reason="abort", events=[], engine=None, outputs=[], final_ns=0))
    metrics.reject(429)
    stats = EngineStats(
        running=2,
        waiting=1,
        kv_usage=0.5,
        prefix_cache_queries=10,
        prefix_cache_hits=4,
        preemptions=1,
        prompt_tokens=6,
        generation_tokens=9,
        steps=7,
    )
    samples, types = parse_prometheus(metrics.render(stats))
    assert types["vllm:num_requests_running"] == "gauge"
    assert types["vllm:prompt_tokens_total"] == "counter"
    assert types["vllm:time_to_first_token_seconds"] == "histogram"
    expected = {
        "vllm:num_requests_running": 2,
        "vllm:num_requests_waiting": 1,
        "vllm:gpu_cache_usage_perc": 0.5,
        "vllm:kv_cache_usage_perc": 0.5,
        "vllm:prefix_cache_queries_total": 10,
        "vllm:prefix_cache_hits_total": 4,
        "vllm:num_preemptions_total": 1,
        "vllm:prompt_tokens_total": 6,
        "vllm:generation_tokens_total": 9,
        "vllm:time_to_first_token_seconds_count": 1,
        "vllm:e2e_request_latency_seconds_count": 2,
        "vllm:inter_token_latency_seconds_count": 2,
        "vllm:time_per_output_token_seconds_count": 2,
        "vllm:request_time_per_output_token_seconds_count": 1,
        "vllm:request_inference_time_seconds_count": 1,
        "vllm:request_queue_time_seconds_count": 1,
        "vllm:request_prefill_time_seconds_count": 1,
        "vllm:request_decode_time_seconds_count": 1,
    }
    for name, value in expected.items():
        assert sample(samples, name) == value, name
    assert sample(samples, "vllm:request_success_total", finished_reason="length") == 1
    assert sample(samples, "vllm:request_success_total", finished_reason="abort") == 1
    assert sample(samples, "vllm:request_success_total", finished_reason="stop") == 0
    assert sample(samples, "loadgen:requests_rejected_total", status="429") == 1
    assert sample(samples, "vllm:time_to_first_token_seconds_bucket", le="0.02") == 1
    assert sample(samples, "vllm:time_to_first_token_seconds_bucket", le="0.01") == 0
    # e2e ends at the finishing output (41 ms), or when the API was done without one (50 ms)
    assert round(sample(samples, "vllm:e2e_request_latency_seconds_sum"), 9) == 0.091
    assert sample(samples, "vllm:inter_token_latency_seconds_bucket", le="0.01") == 0
    assert sample(samples, "vllm:inter_token_latency_seconds_bucket", le="0.025") == 2
    assert "vllm:spec_decode_num_drafts_total" not in types  # not speculating
    assert all(dict(labels).get("model_name") == MODEL and dict(labels).get("engine") == "0" for _, labels in samples)


def test_spec_decode_counters_per_position() -> None:
    stats = EngineStats(
        spec_drafts=10, spec_draft_tokens=30, spec_accepted_tokens=17, spec_accepted_per_position=(8, 6, 3)
    )
    samples, types = parse_prometheus(ServerMetrics(MODEL).render(stats))
    assert types["vllm:spec_decode_num_accepted_tokens_per_pos_total"] == "counter"
    assert sample(samples, "vllm:spec_decode_num_drafts_total") == 10
    assert sample(samples, "vllm:spec_decode_num_draft_tokens_total") == 30
    assert sample(samples, "vllm:spec_decode_num_accepted_tokens_total") == 17
    per_pos = [sample(samples, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(p)) for p in range(3)]
    assert per_pos == [8, 6, 3]


def test_label_values_are_escaped() -> None:
    text = ServerMetrics('a"b\\c').render(EngineStats())
    assert 'vllm:num_requests_running{model_name="a\\"b\\\\c",engine="0"} 0.0' in text.splitlines()


def test_request_log_keeps_the_last_n() -> None:
    log = RequestLog(capacity=3)
    for i in range(5):
        trace = _trace(i)
        log.append(trace, trace.itl_s())
    assert len(log) == 3
    assert [e["id"] for e in log.to_json()] == ["r2", "r3", "r4"]
    assert [e["id"] for e in log.to_json(limit=2)] == ["r3", "r4"]
    assert log.to_json(limit=0) == []
    entry = log.to_json()[0]
    assert (entry["ttft_s"], entry["e2e_s"], entry["events"]) == (0.02, 0.05, 3)
    assert entry["first_token_ns"] == 20_000_000 and len(entry["itl_s"]) == 4
