"""--scrape-metrics: MetricsScraper against a real aiohttp server on loopback."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from loadgen.client.scrape import MetricsScraper, parse_prometheus

VLLM = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="m",engine="0"}} {running}
vllm:num_requests_running{{model_name="m",engine="1"}} 1.0
vllm:num_requests_waiting{{model_name="m"}} {waiting}
vllm:gpu_cache_usage_perc{{model_name="m"}} 0.5
vllm:kv_cache_usage_perc{{model_name="m",engine="0"}} {kv}
vllm:kv_cache_usage_perc{{model_name="m",engine="1"}} {kv}
vllm:prefix_cache_queries_total{{model_name="m"}} {queries}
vllm:prefix_cache_hits_total{{model_name="m"}} {hits}
vllm:generation_tokens_total{{model_name="m"}} 1234.0
vllm:time_to_first_token_seconds_bucket{{model_name="m",le="0.1"}} 3.0
vllm:e2e_request_latency_seconds_sum{{model_name="m"}} 12.5
vllm:time_to_first_token_seconds_sum{{model_name="m",engine="0"}} 1.5
vllm:time_to_first_token_seconds_sum{{model_name="m",engine="1"}} 0.5
vllm:time_to_first_token_seconds_count{{model_name="m",engine="0"}} 30.0
vllm:time_to_first_token_seconds_count{{model_name="m",engine="1"}} 10.0
"""

SGLANG = """sglang:num_running_reqs{model_name="s"} 7
sglang:num_queue_reqs{model_name="s"} 2
sglang:token_usage{model_name="s"} 0.25
sglang:cache_hit_rate{model_name="s"} 0.75
"""


def test_parse_prometheus_labels_sums_and_oddities() -> None:
    text = (
        '# HELP x\nvllm:num_requests_running{a="}",b="q\\"{x}"} 3\n'  # braces and quotes inside labels
        "vllm:num_requests_running 2 1700000000000\n"  # no labels, with a timestamp
        "vllm:num_requests_waiting NaN\n"  # NaN is not a value
        'vllm:kv_cache_usage_perc{x="1"} 0.2\nvllm:kv_cache_usage_perc{x="2"} 0.4\n'
        "vllm:prompt_tokens_total +Inf\n"
        "vllm:num_preemptions_total{broken 1\n"  # malformed: skipped
        "other_metric 5\nsglang:token_usage 0.3\n"
    )
    got = parse_prometheus(text)
    assert got == {
        "vllm:num_requests_running": 5.0,
        "vllm:kv_cache_usage_perc": pytest.approx(0.3),
        "sglang:token_usage": 0.3,
    }


class MetricsServer:
    """Serves the queued answers of /metrics in order (the last one repeats)."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, str]] = []
        self.hits = 0
        self.auth: list[str | None] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.auth.append(request.headers.get("Authorization"))
        status, body = self.answers[min(self.hits, len(self.answers) - 1)]
        self.hits += 1
        return web.Response(status=status, text=body, content_type="text/plain")


@pytest.fixture
async def metrics_server() -> AsyncIterator[tuple[str, MetricsServer]]:
    srv = MetricsServer()
    app = web.Application()
    app.router.add_get("/metrics", srv.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", srv
    await runner.cleanup()


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_scrapes_vllm_names_and_counts_failures(
    metrics_server: tuple[str, MetricsServer], tmp_path: Path
) -> None:
    url, srv = metrics_server
    srv.answers = [
        (200, VLLM.format(running=4.0, waiting=2.0, kv=0.25, queries=1000.0, hits=400.0)),
        (500, "boom"),
        (200, "no metrics here\n"),
        (200, VLLM.format(running=6.0, waiting=0.0, kv=0.5, queries=1500.0, hits=700.0)),
    ]
    out = tmp_path / "run" / "server_metrics.jsonl"
    scraper = MetricsScraper(url + "/", out, interval_s=3600.0, headers={"Authorization": "Bearer secret"})
    await scraper.start()
    try:
        assert srv.hits == 1 and scraper.scrapes == 1  # the first scrape is done when start() returns
        assert await scraper.scrape_once() is None  # HTTP 500
        assert await scraper.scrape_once() is None  # nothing known in the answer
        last = await scraper.scrape_once()
    finally:
        await scraper.stop()
        await scraper.stop()  # twice is fine
    # start() scrapes before it returns, stop() once more: the last answer twice
    assert scraper.scrapes == 3 and scraper.failures == 2
    assert scraper.last_error is not None and scraper.last_error.startswith("no known metric in the answer")
    lines = _lines(out)
    assert len(lines) == 3 and lines[1] == last and lines[2]["raw"] == last["raw"]
    first, second, _ = lines
    assert first["running"] == 5.0 and first["waiting"] == 2.0  # two engines' running summed
    assert first["kv_usage"] == 0.25  # kv_cache_usage_perc preferred, engines averaged
    assert first["prefix_hit_rate"] is None  # no earlier scrape to difference against
    assert second["prefix_hit_rate"] == pytest.approx(300 / 500)  # (700-400) / (1500-1000)
    assert second["raw"]["vllm:generation_tokens_total"] == 1234.0
    assert "vllm:time_to_first_token_seconds_bucket" not in second["raw"]
    # the latency histograms' sums and counts, engines summed: vLLM's own means between scrapes
    assert second["raw"]["vllm:e2e_request_latency_seconds_sum"] == 12.5
    assert second["raw"]["vllm:time_to_first_token_seconds_sum"] == 2.0
    assert second["raw"]["vllm:time_to_first_token_seconds_count"] == 40.0
    assert first["t_ns"] < second["t_ns"]
    assert srv.auth[0] == "Bearer secret"
    assert "secret" not in out.read_text()


async def test_sglang_names(metrics_server: tuple[str, MetricsServer], tmp_path: Path) -> None:
    url, srv = metrics_server
    srv.answers = [(200, SGLANG)]
    scraper = MetricsScraper(url, tmp_path / "m.jsonl", interval_s=3600.0)
    await scraper.start()
    try:
        line = await scraper.scrape_once()
    finally:
        await scraper.stop()
    assert line is not None
    assert (line["running"], line["waiting"], line["kv_usage"], line["prefix_hit_rate"]) == (7.0, 2.0, 0.25, 0.75)


async def test_polls_until_stopped(metrics_server: tuple[str, MetricsServer], tmp_path: Path) -> None:
    url, srv = metrics_server
    srv.answers = [(200, VLLM.format(running=1.0, waiting=0.0, kv=0.1, queries=0.0, hits=0.0))]
    out = tmp_path / "m.jsonl"
    async with MetricsScraper(url, out, interval_s=0.02) as scraper:
        for _ in range(500):
            if scraper.scrapes >= 3:
                break
            await asyncio.sleep(0.01)
    n = scraper.scrapes
    assert n >= 3 and len(_lines(out)) == n
    ts = [line["t_ns"] for line in _lines(out)]
    assert ts == sorted(ts)
    await asyncio.sleep(0.05)
    assert scraper.scrapes == n  # stopped means stopped


async def test_unreachable_target_is_counted_not_raised(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    scraper = MetricsScraper(f"http://127.0.0.1:{port}", tmp_path / "m.jsonl", interval_s=3600.0, timeout_s=2.0)
    await scraper.start()
    try:
        assert await scraper.scrape_once() is None
    finally:
        await scraper.stop()
    assert scraper.scrapes == 0 and scraper.failures >= 1
    assert scraper.last_error and "Connect" in scraper.last_error


def test_bad_interval() -> None:
    with pytest.raises(ValueError):
        MetricsScraper("http://127.0.0.1:1", Path("x"), interval_s=0)


def test_the_report_shows_the_servers_own_latency_means_per_level(tmp_path: Path) -> None:
    """A two-level run against the reference server (its /metrics has vLLM's latency
    histograms) with ``--scrape-metrics``: each level's server means in the report are
    (sum delta) / (count delta) of its scrapes bracketing the level, and the counts are the
    level's own requests: the run scrapes once more when a level ends (without it the last
    level has no scrape after its last answer)."""
    from typer.testing import CliRunner

    from loadgen.cli import app
    from loadgen.metrics.summary import level_window_ns
    from loadgen.numfmt import fmt_ms
    from loadgen.report.rundata import load_run
    from loadgen.report.server_figures import server_latency_means
    from loadgen.server.process import ServerProcess

    out = tmp_path / "run"
    with ServerProcess(["--engine", "sim"]) as url:
        res = CliRunner().invoke(
            app,
            [
                "run", "--url", url, "--api", "completions", "--prompt-tokens", "64", "--output-tokens", "16",
                "--levels", "1,4", "--requests", "12", "--warmup", "0", "--no-calibrate",
                "--scrape-metrics", "--quiet", "--out", str(out),
            ],
        )  # fmt: skip
    assert res.exit_code == 0, res.output
    data = load_run(out)
    lines = data.server
    t = [ln["t_ns"] for ln in lines]
    assert t == sorted(t)
    found = server_latency_means(data)
    assert [label for label, _ in found] == [lv.load.label() for lv in data.levels] and len(found) == 2
    html = (out / "report.html").read_text()
    assert 'id="server-latency"' in html and "server TTFT mean" in html
    for i, (_, means) in enumerate(found):
        rows = data.level_rows(i)
        window = level_window_ns(data.frame[rows])
        assert window is not None
        before = [ln for ln in lines if ln["t_ns"] <= window[0]][-1]
        after = next(ln for ln in lines if ln["t_ns"] >= window[1])
        for name, label in (
            ("time_to_first_token", "TTFT"),
            ("inter_token_latency", "ITL"),
            ("e2e_request_latency", "E2E"),
            ("request_queue_time", "queue"),
        ):
            s = after["raw"][f"vllm:{name}_seconds_sum"] - before["raw"][f"vllm:{name}_seconds_sum"]
            n = after["raw"][f"vllm:{name}_seconds_count"] - before["raw"][f"vllm:{name}_seconds_count"]
            if name != "inter_token_latency":  # one per request: the level's own 12
                assert n == int(rows.sum()) == 12, (i, name, n)
            else:  # one per token after the first
                assert n == 12 * 15, (i, name, n)
            assert means[label] == pytest.approx(1000.0 * s / n)
            assert f"<td>{fmt_ms(means[label])}</td>" in html
