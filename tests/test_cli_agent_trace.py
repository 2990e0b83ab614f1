"""``loadgen run --trace`` of the shipped agent trace against the scripted tool-calling
server on loopback (in its own process): every recorded call is sent once — open loop,
closed loop, one worker or two — the summary has the tasks and run.json the trace. Bad
agent traces and flags that do not go with one are refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from loadgen.runinfo import run_schema
from loadgen.server.process import ServerProcess
from loadgen.workload.agent_trace import load_agent_trace
from tests.scripted_server import Script, ScriptedServerProcess

SAMPLE = Path(__file__).resolve().parents[1] / "workloads" / "samples" / "agent_trace.jsonl"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ScriptedServerProcess]:
    log = tmp_path / "server.jsonl"
    with ScriptedServerProcess(Script(tool_calls=True, ttft_s=0.005, itl_s=0.001, log_path=str(log))) as srv:
        yield srv


def loadgen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "run", *args], capture_output=True, text=True, timeout=180
    )


@pytest.mark.parametrize(
    "flags",
    [[], ["--workers", "2", "--speed", "4"], ["--concurrency", "2"], ["--concurrency", "3", "--workers", "2"]],
    ids=["open", "open-2-workers", "closed", "closed-2-workers"],
)
def test_every_recorded_call_is_sent_once(server: ScriptedServerProcess, tmp_path: Path, flags: list[str]) -> None:
    out = tmp_path / "run"
    res = loadgen("--url", server.url, "--trace", str(SAMPLE), "--out", str(out), "--no-calibrate", "--quiet", *flags)
    assert res.returncode == 0, res.stdout + res.stderr
    trace = load_agent_trace(str(SAMPLE))
    want = {
        (p, s, b): c.output_tokens
        for p, t in enumerate(trace.tasks)
        for s, calls in enumerate(t.steps, 1)
        for b, c in enumerate(calls)
    }
    line_of = {
        (p, s, b): c.line - 1
        for p, t in enumerate(trace.tasks)
        for s, calls in enumerate(t.steps, 1)
        for b, c in enumerate(calls)
    }
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    got = [(r["task"], r["step"], r["branch"]) for r in records]
    assert len(got) == len(want) == trace.calls == 20 and set(got) == set(want)  # each call once, none twice
    assert all(r["status"] == "ok" and r["target_output_tokens"] == want[k] for r, k in zip(records, got))
    assert all(r["source_row"] == line_of[k] for r, k in zip(records, got))  # each record names its trace line
    server_log = (tmp_path / "server.jsonl").read_text().splitlines()
    assert len(server_log) == 20  # the server saw each call once (no calibration requests)
    tasks = json.loads((out / "summary.json").read_text())["levels"][0]["tasks"]
    assert tasks["tasks"] == tasks["completed"] == 5 and tasks["failed"] == 0
    run = json.loads((out / "run.json").read_text())
    assert not list(jsonschema.Draft202012Validator(run_schema()).iter_errors(run))
    speed = 4.0 if "--speed" in flags else 1.0
    assert run["trace"]["format"] == "agent" and run["trace"]["tasks"] == 5 and run["trace"]["rows"] == 20
    assert run["trace"]["speed"] == speed
    workers = 2 if "--workers" in flags else 1
    assert run["config"]["workers_started"] == workers
    if "--concurrency" in flags:
        assert run["profile"]["mode"] == "concurrency" and run["profile"]["levels"] == [float(flags[1])]
    else:  # the tasks started at their recorded starts over the speed: the replay spans 1.6 s / speed
        assert run["profile"]["mode"] == "rate" and run["trace"]["replay_span_s"] == pytest.approx(1.6 / speed)
        first = {}
        for r in records:
            if r["step"] == 1:
                first[r["task"]] = r["scheduled_ns"]
        starts = [(first[p] - first[0]) / 1e9 for p in range(5)]
        assert starts == pytest.approx([(t.start_s or 0.0) / speed for t in trace.tasks], abs=1e-6)
    if not flags:  # a trace replay is not resumed: one line
        again = loadgen("--resume", str(out), "--url", server.url)
        assert again.returncode == 2 and "cannot be resumed" in again.stderr + again.stdout
        assert "Traceback" not in again.stderr


def write(tmp_path: Path, name: str, lines: list[dict[str, object]]) -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def test_bad_agent_traces_and_flags_get_one_line(tmp_path: Path) -> None:
    url = "http://127.0.0.1:9"  # nothing is sent: every case is refused before discovery
    gap = write(
        tmp_path,
        "gap.jsonl",
        [{"task": "a", "step": 1, "output_tokens": 5, "t_s": 0}, {"task": "a", "step": 3, "output_tokens": 5}],
    )
    cases = [
        (["--trace", gap], "has no step 2"),
        (["--trace", str(SAMPLE), "--rate", "5"], "give --speed"),
        (["--trace", str(SAMPLE), "--window", "0:1"], "--window"),
        (["--trace", str(SAMPLE), "--concurrency", "2", "--requests", "3"], "every recorded task once"),
        (["--trace", str(SAMPLE), "--trace-format", "agnet"], "aiperf-sessions"),
        (["--trace", str(SAMPLE), "--api", "completions"], "tool calls"),
    ]
    no_start = write(tmp_path, "no_start.jsonl", [{"task": "a", "step": 1, "output_tokens": 5}])
    cases.append((["--trace", no_start], "--concurrency N"))
    bad_field = write(tmp_path, "bad.jsonl", [{"task": "a", "step": 1, "output_tokens": 0}])
    cases.append((["--trace", bad_field, "--trace-format", "agent"], "output_tokens"))
    far = [{"task": "a", "step": 1, "output_tokens": 5, "t_s": 0}, {"task": "b", "step": 1, "output_tokens": 5}]
    huge = write(tmp_path, "huge.jsonl", [far[0], {**far[1], "t_s": 1e300}])  # once "--trace: must be > 0, got 0.0"
    cases.append((["--trace", huge], "huge.jsonl: line 2: t_s: expected seconds in [0, 2,592,000], got 1e+300"))
    slow = write(tmp_path, "slow.jsonl", [far[0], {**far[1], "t_s": 2_000_000}])  # 23 days: 46 at half speed
    cases.append((["--trace", slow, "--speed", "0.5"], "would take 4,000,000 s to replay at --speed 0.5"))
    tool = write(tmp_path, "tool.jsonl", [{**far[0], "tool_latency_ms": 1e300}, {**far[0], "step": 2, "t_s": None}])
    cases.append((["--trace", tool], "tool.jsonl: line 1: tool_latency_ms: expected milliseconds in [0, 86,400,000]"))
    for args, needle in cases:
        res = loadgen("--url", url, "--out", str(tmp_path / "r"), "--quiet", *args)
        text = (res.stdout + res.stderr).strip()
        assert res.returncode == 2, (args, text)
        assert needle in text and "Traceback" not in text and len(text.splitlines()) == 1, (args, text)
    # 23 days at speed 1 is within the bound: the level is valid (its rate of 5e-7 tasks/s once rounded to 0)
    res = loadgen("--url", url, "--out", str(tmp_path / "r"), "--quiet", "--trace", slow)
    assert res.returncode == 2 and "cannot reach" in res.stderr + res.stdout, res.stderr + res.stdout


# task a: step 1's tool runs 60 s; task b fans out at step 2, branch 0's tool running 60 s
LONG_TOOLS = [
    {"task": "a", "step": 1, "output_tokens": 4, "tool_tokens": 20, "tool_latency_ms": 60_000, "t_s": 0},
    {"task": "a", "step": 2, "output_tokens": 4},
    {"task": "b", "step": 1, "output_tokens": 4, "tool_tokens": 20, "tool_latency_ms": 10, "t_s": 0.2},
    {"task": "b", "step": 2, "branch": 0, "output_tokens": 4, "tool_tokens": 20, "tool_latency_ms": 60_000},
    {"task": "b", "step": 2, "branch": 1, "output_tokens": 4, "tool_tokens": 20, "tool_latency_ms": 5},
    {"task": "b", "step": 3, "output_tokens": 4},
]


@pytest.mark.parametrize("flags", [[], ["--concurrency", "2"]], ids=["open", "closed"])
def test_duration_cuts_a_tool_that_outlasts_the_level(tmp_path: Path, flags: list[str]) -> None:
    """Against ``loadgen serve --engine sim``: ``--duration 2`` ends the level though a tool
    runs 60 s (it once ran the level 60 s); what finished is kept, the tasks count as cut."""
    trace = write(tmp_path, "long.jsonl", LONG_TOOLS)
    sim = ["--engine", "sim", "--gpu", "h100", "--model", "llama-3.1-8b", "--tool-call-share", "1"]
    with ServerProcess(sim) as url:
        t0 = time.monotonic()
        out = tmp_path / "run"
        res = loadgen(
            "--url", url, "--trace", trace, "--duration", "2", "--out", str(out), "--no-calibrate", "--quiet", *flags
        )
        took = time.monotonic() - t0
    assert res.returncode == 0, res.stdout + res.stderr
    assert took < 30, took  # generous: only waiting for a 60 s tool reaches it
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    got = sorted((r["task"], r["step"], r["branch"]) for r in records)
    assert got == [(0, 1, 0), (1, 1, 0), (1, 2, 0), (1, 2, 1)]  # no step after a tool cut by the level's end
    assert all(r["status"] == "ok" for r in records)
    tasks = json.loads((out / "summary.json").read_text())["levels"][0]["tasks"]
    assert (tasks["tasks"], tasks["completed"], tasks["failed"], tasks["incomplete"]) == (2, 0, 0, 2)
