"""The CLI with sessions, tools and reasoning: a run through CliRunner against a scripted
server in its own process; bad input is one line and exit 2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.report.files import read_records
from tests.scripted_server import Script, ScriptedServerProcess

runner = CliRunner()


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServerProcess]:
    with ScriptedServerProcess(Script(ttft_s=0.005, itl_s=0.001)) as srv:
        yield srv


def test_a_sessions_workload_runs_from_the_cli(server: ScriptedServerProcess, tmp_path: Path) -> None:
    wl = tmp_path / "conv.toml"
    wl.write_text("prompt_tokens = 20\noutput_tokens = 4\n[sessions]\nturns = 3\nthink_time_ms = 5\n", encoding="utf-8")
    out = tmp_path / "run"
    res = runner.invoke(
        app,
        [
            "run",
            "--url",
            server.url,
            "--api",
            "chat",
            "--workload",
            str(wl),
            "--concurrency",
            "2",
            "--requests",
            "12",
            "--warmup",
            "0",
            "--out",
            str(out),
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "sessions 4 (4 completed); TTFT p50 by turn 1: " in res.output
    records = list(read_records(out))
    assert sorted((r.session, r.turn) for r in records)[:3] == [(0, 1), (0, 2), (0, 3)]
    # the prompts grow turn by turn: the history (the answers included) is resent
    prompt = {(r.session, r.turn): r.prompt_tokens for r in records}
    assert all(prompt[(s, 1)] < prompt[(s, 2)] < prompt[(s, 3)] for s in {r.session for r in records})
    run = json.loads((out / "run.json").read_text())
    assert run["workload"]["sessions"]["turns"] == "3"
    assert "by_turn" in json.loads((out / "summary.json").read_text())["levels"][0]


def test_tools_need_the_chat_api(server: ScriptedServerProcess, tmp_path: Path) -> None:
    wl = tmp_path / "tools.toml"
    wl.write_text(
        'prompt_tokens = 20\noutput_tokens = 4\ntool_choice = "auto"\n[[tools]]\ntype = "function"\n'
        '[tools.function]\nname = "f"\n',
        encoding="utf-8",
    )
    res = runner.invoke(
        app,
        [
            "run",
            "--url",
            server.url,
            "--api",
            "completions",
            "--workload",
            str(wl),
            "--requests",
            "1",
            "--out",
            str(tmp_path / "run"),
        ],
    )
    assert res.exit_code == 2, res.output
    assert "--api" in res.output and "tools" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output


def test_a_bad_reasoning_distribution_is_one_line() -> None:
    res = runner.invoke(app, ["serve", "--engine", "sim", "--port", "0", "--reasoning-tokens", "zipf:a=2"])
    assert res.exit_code == 2, res.output
    assert "--reasoning-tokens" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
