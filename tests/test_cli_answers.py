"""``loadgen run --api embeddings|rerank|score`` end to end against a scripted server in its
own process: the run folder's records carry their inputs, the summary its inputs/s, the
console and the report no TTFT or output tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.workload.distributions import parse_distribution
from tests.scripted_server import Script, ScriptedServerProcess

runner = CliRunner()


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServerProcess]:
    with ScriptedServerProcess(Script(ttft_s=0.01)) as srv:
        yield srv


@pytest.mark.parametrize(
    ("api", "flag", "dist", "noun"),
    [
        ("embeddings", "--batch-size", "uniform:min=1,max=8", "inputs"),
        ("rerank", "--documents", "6", "documents"),
        ("score", "--documents", "3", "documents"),
    ],
)
def test_a_non_streamed_run(
    server: ScriptedServerProcess, tmp_path: Path, api: str, flag: str, dist: str, noun: str
) -> None:
    out = tmp_path / api
    args = ["run", "--url", server.url, "--api", api, flag, dist, "--prompt-tokens", "64"]
    args += [
        "--concurrency",
        "2",
        "--requests",
        "16",
        "--slo",
        "e2e=2s",
        "--workers",
        "1",
        "--out",
        str(out),
        "--quiet",
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert f"{noun}/s" in res.output and "input tok/s" in res.output and "E2E" in res.output
    assert "TTFT p50" not in res.output and "│ TTFT" not in res.output and "│ ITL" not in res.output
    assert "out tok/s" not in res.output and "output tokens counted" not in res.output
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 16 and all(r["status"] == "ok" for r in records)
    inputs = [r["inputs"] for r in records]
    if api == "embeddings":
        assert min(inputs) >= 1 and max(inputs) <= 8 and len(set(inputs)) > 1  # drawn per request
    else:
        assert set(inputs) == {int(dist)}
    assert all(r["prompt_tokens"] > 0 for r in records)
    level = json.loads((out / "summary.json").read_text())["levels"][0]
    ns = level["non_streamed"]
    win, first = level["throughput"]["window"], min(r["sent_ns"] for r in records)  # the headline's window
    lo, hi = first + round(win["start_s"] * 1e9), first + round(win["end_s"] * 1e9)
    inside = [r for r in records if lo < r["done_ns"] <= hi] if win["rule"] != "whole" else records
    window_s = win["end_s"] - win["start_s"]
    assert ns["inputs_per_s"] == pytest.approx(sum(r["inputs"] for r in inside) / window_s, rel=1e-6)
    assert ns["input_tokens_per_s"] == pytest.approx(sum(r["prompt_tokens"] for r in inside) / window_s, rel=1e-6)
    assert level["ttft_ms"]["p50"] is None and level["throughput"]["output_tokens_per_s"] is None
    assert level["goodput"]["slo_attainment"] == 1.0
    run = json.loads((out / "run.json").read_text())
    assert parse_distribution(run["config"]["inputs"]).describe() == parse_distribution(dist).describe()
    html = (out / "report.html").read_text()
    assert f"{noun}/s" in html and "ITL over time" not in html
    assert f'"{noun}/s"' in html  # the throughput figure's legend names the API's inputs
    if noun == "documents":
        assert '"inputs/s"' not in html and "Inputs/s" not in html


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--api", "chat", "--batch-size", "4"], "--batch-size is for --api embeddings"),
        (["--api", "embeddings", "--documents", "4"], "--documents is for --api rerank or score"),
        (["--api", "embeddings", "--batch-size", "0"], "--batch-size"),
    ],
)
def test_inputs_flags_are_checked(server: ScriptedServerProcess, args: list[str], needle: str) -> None:
    res = runner.invoke(app, ["run", "--url", server.url, "--requests", "1", *args])
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output
