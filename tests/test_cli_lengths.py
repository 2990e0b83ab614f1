"""Lengths: --prompt-tokens/--output-tokens laid over a --workload, the server's context
window checked before anything is sent, and the server's own error message on the console."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.paths import search_dirs
from loadgen.report.files import read_records
from loadgen.server.process import ServerProcess
from loadgen.workload.spec import load_workload
from tests.scripted_server import Script, ScriptedServerProcess

runner = CliRunner()
VLLM_MESSAGE = (
    "This model's maximum context length is 4096 tokens. However, you requested 5016 tokens "
    "(5000 in the messages, 16 in the completion). Please reduce the length of the messages or completion."
)


def flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def loadgen(*args: str) -> tuple[int, str]:
    """A real process (run.json keeps its command line: sys.argv)."""
    res = subprocess.run([sys.executable, "-m", "loadgen", "run", *args], capture_output=True, text=True, timeout=300)
    return res.returncode, res.stdout + res.stderr


def lengths(folder: Path) -> set[tuple[int, int, int | None, int | None]]:
    return {
        (r.target_prompt_tokens, r.target_output_tokens, r.prompt_tokens, r.completion_tokens)
        for r in read_records(folder)
    }


def served(url: str) -> dict[str, float]:
    """The sim server's counters of requests it ran or refused (summed over their labels)."""
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics").text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in ("loadgen:requests_rejected_total", "vllm:request_success_total", "vllm:prompt_tokens_total"):
            out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def test_flags_set_a_workloads_lengths_and_the_replay_keeps_them(tmp_path: Path) -> None:
    first, again = tmp_path / "first", tmp_path / "again"
    with ServerProcess(["--engine", "sim", "--time-scale", "0.05"]) as url:
        code, out = loadgen(
            "--url", url, "--workload", "prefix", "--prompt-tokens", "1100", "--output-tokens", "8",
            "--concurrency", "2", "--requests", "6", "--out", str(first),
        )  # fmt: skip
        assert code == 0, out
        assert "workload prefix: lengths set by --prompt-tokens 1100, --output-tokens 8" in flat(out)
        # the shared 1,024-token prefix is kept: the prompt is 1,100 tokens in all, as the server counted
        assert lengths(first) == {(1100, 8, 1100, 8)}
        run = json.loads((first / "run.json").read_text())["workload"]
        assert run["name"] == "prefix" and run["overrides"] == ["--prompt-tokens 1100", "--output-tokens 8"]
        assert (run["classes"][0]["shared_prefix_groups"], run["classes"][0]["shared_prefix_tokens"]) == (4, 1024)
        code, out = loadgen("--config", str(first / "run.json"), "--out", str(again))
        assert code == 0, out
        assert lengths(again) == {(1100, 8, 1100, 8)}


@pytest.mark.parametrize(
    "args, needle",
    [
        (
            ["--workload", "prefix", "--prompt-tokens", "512"],
            "--prompt-tokens: workload 'prefix': class 'default' puts a 1,024-token shared prefix before every "
            "prompt, and --prompt-tokens is the whole prompt: every length must be above 1,024",
        ),
        (["--workload", "prefix", "--prompt-tokens", "lognormal:median=2000,sigma=0.2"], "a lognormal cannot"),
        (["--workload", "chat", "--output-tokens", "zipf:a=2"], "--output-tokens: unknown distribution"),
    ],
)
def test_an_override_that_breaks_the_workload_is_one_line(args: list[str], needle: str) -> None:
    res = runner.invoke(app, ["run", "--url", "http://127.0.0.1:9", "--requests", "1", *args])
    assert res.exit_code == 2, res.output
    assert needle in flat(res.output) and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output


@pytest.mark.parametrize(
    "args, needle",
    [
        (
            ["--prompt-tokens", "5000", "--output-tokens", "16"],
            "error: workload 'cli', class 'default': every request asks for 5,016 tokens or more (prompt + "
            "max_tokens), over the server's max_model_len of 4,096 (from /v1/models): lower the lengths",
        ),
        (
            ["--prompt-tokens", "uniform:min=1000,max=5000", "--output-tokens", "16"],
            "of the requests (prompt + max_tokens up to 5,016 tokens) are over the server's max_model_len of "
            "4,096 (from /v1/models) and would be rejected",
        ),
    ],
)
def test_lengths_over_the_servers_context_are_refused_before_sending(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    with ServerProcess(["--engine", "sim", "--time-scale", "0.05", "--max-model-len", "4096"]) as url:
        code, out = loadgen("--url", url, *args, "--requests", "4", "--out", str(tmp_path / "run"))
        assert code == 2, out
        assert needle in out and len(out.strip().splitlines()) == 1, out
        assert not any(served(url).values()), served(url)  # not even the calibration's requests


def test_a_rare_tail_over_the_context_is_let_through() -> None:
    from loadgen.workload.lengths import over_context

    chat = load_workload("chat", search_dirs("workloads"))
    assert over_context(chat, 4096) is None  # ~0.07% of its requests: the server rejects those few
    over = over_context(chat, 1024)
    assert over is not None and not over.every and over.share > 0.05 and over.bound == 4096 + 2048


def test_the_servers_error_message_is_on_the_console(tmp_path: Path) -> None:
    # a server that does not say its max_model_len: nothing to check before sending
    with ScriptedServerProcess(Script(status=400, error_message=VLLM_MESSAGE)) as srv:
        res = runner.invoke(
            app,
            ["run", "--url", srv.url, "--prompt-tokens", "5000", "--output-tokens", "16", "--no-calibrate",
             "--concurrency", "1", "--requests", "2", "--out", str(tmp_path / "run")],
        )  # fmt: skip
    text = flat(res.output)
    assert "failures: http_error 2" in text, res.output
    assert f'first http_error: "HTTP 400: {VLLM_MESSAGE}"' in text, res.output
