"""What ``loadgen run`` prints at the end agrees with summary.json: a trace replay's late
sends, the client-bound reason, units in the level table (a real scripted server on loopback)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.numfmt import fmt_latency
from tests.scripted_server import Script, ScriptedServerProcess

runner = CliRunner()
SAMPLES = Path(__file__).resolve().parent.parent / "workloads" / "samples"


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServerProcess]:
    with ScriptedServerProcess(Script(ttft_s=0.005, itl_s=0.001)) as srv:
        yield srv


def test_a_trace_replays_late_sends_are_on_the_console(server: ScriptedServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "trace"
    res = runner.invoke(
        app,
        [
            "run",
            "--url",
            server.url,
            "--api",
            "completions",
            "--trace",
            str(SAMPLES / "mooncake.jsonl"),
            "--speed",
            "20",
            "--requests",
            "40",
            "--warmup",
            "3",
            "--out",
            str(out),
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    level = json.loads((out / "summary.json").read_text())["levels"][0]
    sch = level["schedule"]
    assert sch["scheduled"] == 43
    line = f"sends: {sch['late']} of {sch['scheduled']} late (over {fmt_latency(sch['late_threshold_ms'])}), {sch['dropped']} dropped"
    assert line in res.output.splitlines()
    assert f"{sch['late']} of {sch['scheduled']} sends late, {sch['dropped']} dropped" in res.output  # the level line
    client = level["client"]
    if client["verdict"] == "client-bound":  # the summary's own reasons, whatever they are on this machine
        assert "client-bound: " + "; ".join(client["reasons"]) in res.output
    else:
        assert "client: ok (event-loop lag p99 " in res.output


def test_a_sweeps_table_has_units_and_the_summarys_reasons(server: ScriptedServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    res = runner.invoke(
        app,
        [
            "run",
            "--url",
            server.url,
            "--api",
            "completions",
            "--levels",
            "1,3",
            "--concurrency",
            "1",
            "--requests",
            "8",
            "--prompt-tokens",
            "16",
            "--output-tokens",
            "4",
            "--out",
            str(out),
            "--quiet",
        ],
        terminal_width=150,
    )
    assert res.exit_code == 0, res.output
    head = res.output.split("┡")[0].split("Results per load level")[1]
    assert re.findall(r"TTFT p50|TTFT p99|ITL p50|ITL p99|TPOT p50", head) == [
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "ITL p99",
        "TPOT p50",
    ]
    assert len(re.findall(r"┃ +(?:ms|s) (?=┃)", head)) == 5 and "req/s" in head and "%" in head
    for lv in json.loads((out / "summary.json").read_text())["levels"]:
        users = lv["load"]["value"]
        label = f"{users} user{'s' if users != 1 else ''}"
        if lv["client"]["verdict"] == "client-bound":
            assert f"{label}: client-bound: {'; '.join(lv['client']['reasons'])}" in res.output
        else:
            assert f"{label}: client-bound" not in res.output
