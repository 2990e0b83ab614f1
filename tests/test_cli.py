"""The CLI end to end: typer's CliRunner and real subprocesses against a scripted server."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from tests.scripted_server import Script, ScriptedServerProcess

runner = CliRunner()


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServerProcess]:
    with ScriptedServerProcess(Script(ttft_s=0.01, itl_s=0.002)) as srv:
        yield srv


def test_run_writes_the_run_folder(server: ScriptedServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "smoke"
    res = runner.invoke(
        app,
        [
            "run",
            "--url",
            server.url,
            "--api",
            "completions",
            "--concurrency",
            "4",
            "--requests",
            "20",
            "--prompt-tokens",
            "64",
            "--output-tokens",
            "normal:mean=16,std=4,min=4,max=32",
            "--slo",
            "ttft=500ms",
            "--slo",
            "tpot=50ms",
            "--out",
            str(out),
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "TTFT" in res.output and "attainment 100%" in res.output
    assert {p.name for p in out.iterdir()} == {"run.json", "records.jsonl", "events.bin", "summary.json", "report.html"}
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 20 and all(r["status"] == "ok" for r in records)
    summary = json.loads((out / "summary.json").read_text())
    level = summary["levels"][0]
    assert level["load"] == {"mode": "concurrency", "value": 4}
    assert level["requests"] == {"total": 20, "ok": 20, "failed": 0, "by_error": {}, "retried": 0}
    for key in (
        "ttft_ms",
        "ttft_queued_ms",
        "itl_ms",
        "inter_chunk_ms",
        "tpot_ms",
        "e2e_ms",
        "prompt_tokens",
        "output_tokens",
    ):
        assert set(level[key]) >= {"mean", "std", "min", "p50", "p90", "p95", "p99", "p99.9", "max"}
    assert set(level["throughput"]) >= {"requests_per_s", "output_tokens_per_s", "total_tokens_per_s"}
    assert level["goodput"]["slo_attainment"] == 1.0
    assert level["client"]["verdict"] in ("ok", "client-bound")
    # the scripted server counts one token per word: calibration makes the prompts exact
    assert level["prompt_tokens"]["mean"] == 64.0
    assert sum(r["completion_tokens"] for r in records) == sum(r["target_output_tokens"] for r in records)
    run = json.loads((out / "run.json").read_text())
    assert run["target"]["model"] == "scripted-model" and run["calibration"]["calibrated"]


def test_open_loop_rate(server: ScriptedServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "rate"
    res = runner.invoke(
        app,
        [
            "run",
            "--url",
            server.url,
            "--rate",
            "50",
            "--requests",
            "25",
            "--arrival",
            "constant",
            "--prompt-tokens",
            "16",
            "--output-tokens",
            "4",
            "--out",
            str(out),
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    level = json.loads((out / "summary.json").read_text())["levels"][0]
    assert level["load"] == {"mode": "rate", "value": 50.0}
    assert level["schedule"]["scheduled"] == 25 and level["schedule"]["dropped"] == 0
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    sched = sorted(r["scheduled_ns"] for r in recs)
    gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(sched)]
    assert all(abs(g - 20.0) < 1e-3 for g in gaps)  # the precomputed schedule, exactly


def test_unreachable_server_is_one_line_and_exit_2(tmp_path: Path) -> None:
    res = runner.invoke(app, ["run", "--url", "http://127.0.0.1:9", "--requests", "1", "--out", str(tmp_path / "x")])
    assert res.exit_code == 2
    assert "cannot reach http://127.0.0.1:9/v1/models" in res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "x").exists()


def test_bad_workload_file_names_file_and_key(server: ScriptedServerProcess, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\nprompt_tokens = "normal:mean=10,sd=3"\noutput_tokens = 5\n')
    res = runner.invoke(app, ["run", "--url", server.url, "--workload", str(bad), "--requests", "1"])
    assert res.exit_code == 2
    assert "bad.toml" in res.output and "prompt_tokens" in res.output and "std" in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--slo", "ttft=fast"], "--slo"),
        (["--api", "grpc"], "--api"),
        (["--prompt-tokens", "zipf:a=2"], "lognormal"),
        (["--concurrency", "2", "--rate", "3"], "not both"),
        (["--warmup", "-3"], "--warmup: must be >= 0, got -3"),
        (["--duration", "-1"], "--duration: must be a number of seconds > 0, got -1"),
        (["--read-timeout", "-1"], "--read-timeout: must be a number of seconds > 0, got -1"),
        (["--timeout", "0"], "--timeout: must be a number of seconds > 0, got 0"),
        (["--ramp-up", "-1"], "--ramp-up: must be a number of seconds in [0, 2592000], got -1"),
        (["--rate", "5", "--ramp-up", "2"], "--ramp-up: spreads closed-loop users"),
        (["--rate", "5", "--max-in-flight", "0"], "--max-in-flight: must be >= 1"),
        (["--prompt-tokens", "10000000"], "lengths must be at most 1,000,000 tokens"),
        (["--prompt-tokens", "normal:mean=1e308,std=1e308"], "lengths must be at most 1,000,000 tokens"),
        (["--url", "http://127.0.0.1:99999"], "--url: not a valid URL"),
        (["--url", "http://[::1"], "--url: not a valid URL"),
        (["--rate", "1e9", "--duration", "1"], "--rate: request rate must be > 0 and at most 1,000,000/s"),
        (
            ["--rate", "1e5", "--duration", "1e5", "--requests", "1000000000"],
            "--rate: 1,000,000,000 arrivals in one level",
        ),
    ],
)
def test_bad_flags_are_one_line(server: ScriptedServerProcess, args: list[str], needle: str) -> None:
    res = runner.invoke(app, ["run", "--url", server.url, "--requests", "1", *args])
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output


@pytest.mark.parametrize(
    "args, line",
    [
        (["run", "--trace", "{t}", "--window", "9000:9001"], "--window: no row of {t} lies in 9000:9001 s"),
        (["run", "--trace", "{t}", "--speed", "2", "--rate", "3"], "--speed: give either --speed or --rate"),
        (["run", "--trace", "{t}", "--trace-format", "nope"], "--trace-format: unknown trace format 'nope'"),
        (["run", "--tokenizer", "{d}/none.json"], "--tokenizer: no such file: '{d}/none.json'"),
        (["run", "--output-tokens", "zipf:a=2"], "command line: --output-tokens: unknown distribution kind"),
        (["run", "--fail-on", "nope"], "--fail-on: unknown gate 'nope'"),
        (["run", "--out", "{t}"], "--out: {t} is a file, not a folder"),
        (["export", "{d}", "--format", "xyz"], "--format: unknown format 'xyz'"),
        (["compare", "{d}", "{d}", "--label", "a"], "--label: 1 labels for 2 runs"),
        (["workload", "fit", "{t}", "--bins", "1", "--out", "{d}/w.toml"], "--bins: must be between 2 and 256"),
    ],
)
def test_errors_below_the_cli_name_the_users_flag(tmp_path: Path, args: list[str], line: str) -> None:
    """The code below the command line names a field (``window``, ``out``); the CLI shows
    the flag the user gave it, on one line, before anything is sent."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 2}\n' * 2)
    given = [a.format(t=trace, d=tmp_path) for a in args]
    if given[0] == "run":
        given += ["--url", "http://127.0.0.1:9", "--requests", "1"] + (
            [] if "--out" in given else ["--out", str(tmp_path / "o")]
        )
    res = runner.invoke(app, given)
    assert res.exit_code == 2, res.output
    assert f"error: {line.format(t=trace, d=tmp_path)}" in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output, res.output


def test_secrets_never_reach_files(server: ScriptedServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "secret"
    env = {"MY_KEY": "sk-very-secret-123"}
    res = runner.invoke(
        app,
        [
            "run",
            "--url",
            server.url.replace("http://", "http://bob:pa55word@") + "/v1?key=qk-secret",
            "--requests",
            "3",
            "--prompt-tokens",
            "8",
            "--output-tokens",
            "2",
            "--api-key-env",
            "MY_KEY",
            "--header",
            "X-Token: hunter2-secret",
            "--out",
            str(out),
            "--quiet",
        ],
        env=env,
    )
    assert res.exit_code == 0, res.output
    for f in out.iterdir():
        text = f.read_text(errors="replace")  # events.bin is binary
        for secret in ("sk-very-secret-123", "hunter2-secret", "pa55word", "qk-secret"):
            assert secret not in text, (secret, f.name)
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["header_names"] == ["Authorization", "X-Token"]


def test_an_endpoint_given_as_url_is_cut_to_the_base_url(server: ScriptedServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "endpoint"
    args = ["--api", "chat", "--requests", "3", "--prompt-tokens", "8", "--output-tokens", "2", "--out", str(out)]
    res = runner.invoke(app, ["run", "--url", server.url + "/v1/chat/completions", *args])
    assert res.exit_code == 0, res.output
    assert f"--url: /v1/chat/completions taken off; --url takes the server's base URL ({server.url})" in res.output
    assert json.loads((out / "summary.json").read_text())["levels"][0]["requests"]["ok"] == 3


def test_ctrl_c_keeps_records_and_summarises(tmp_path: Path) -> None:
    out = tmp_path / "interrupted"
    with ScriptedServerProcess(Script(ttft_s=0.01, itl_s=0.05)) as srv:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loadgen.cli",
                "run",
                "--url",
                srv.url,
                "--concurrency",
                "4",
                "--requests",
                "1000",
                "--prompt-tokens",
                "8",
                "--output-tokens",
                "40",
                "--out",
                str(out),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait for a few finished requests
            f = out / "records.jsonl"
            if f.exists() and len(f.read_text().splitlines()) >= 4:
                break
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, output
    assert "Traceback" not in output and "interrupted" in output
    records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    statuses = [r["status"] for r in records]
    assert statuses.count("cancelled") == 4 and statuses.count("ok") >= 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert summary["levels"][0]["requests"]["total"] == len(records)


def test_ctrl_c_during_calibration_is_one_line(tmp_path: Path) -> None:
    """Interrupted before the run's own handler: the cleanup runs, no 'Exception ignored' noise."""
    log = tmp_path / "served.jsonl"
    with ScriptedServerProcess(Script(ttft_s=60, log_path=str(log))) as srv:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loadgen.cli",
                "run",
                "--url",
                srv.url,
                "--requests",
                "2",
                "--out",
                str(tmp_path / "run"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (log.exists() and log.read_text()):  # calibration sent
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, output
    assert output.strip() == "interrupted", output


def test_report_and_compare_commands(server: ScriptedServerProcess, tmp_path: Path) -> None:
    def run(name: str, output_tokens: str) -> Path:
        out = tmp_path / name
        res = runner.invoke(
            app,
            [
                "run",
                "--url",
                server.url,
                "--concurrency",
                "2",
                "--requests",
                "8",
                "--prompt-tokens",
                "16",
                "--output-tokens",
                output_tokens,
                "--out",
                str(out),
                "--label",
                name,
                "--quiet",
            ],
        )
        assert res.exit_code == 0, res.output
        return out

    a, b, c = run("a", "8"), run("b", "8"), run("c", "12")
    (a / "report.html").unlink()
    res = runner.invoke(app, ["report", str(a)])
    assert res.exit_code == 0 and (a / "report.html").stat().st_size > 100_000
    res = runner.invoke(app, ["compare", str(a), str(b), "-o", str(tmp_path / "ab.html")])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "ab.html").read_text()
    assert "no significant change" in html
    res = runner.invoke(app, ["compare", str(a), str(c), "-o", str(tmp_path / "ac.html")])
    assert res.exit_code == 2 and "--force" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["compare", str(a), str(c), "-o", str(tmp_path / "ac.html"), "--force"])
    assert res.exit_code == 0
    res = runner.invoke(app, ["report", str(tmp_path / "nothing")])
    assert res.exit_code == 2 and "run folder" in res.output


def test_a_folder_holds_one_run(server: ScriptedServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "again"
    args = [
        "run",
        "--url",
        server.url,
        "--requests",
        "5",
        "--prompt-tokens",
        "8",
        "--output-tokens",
        "2",
        "--out",
        str(out),
        "--quiet",
    ]
    assert runner.invoke(app, args).exit_code == 0
    res = runner.invoke(app, [*args[:4], "3", *args[5:]])
    assert res.exit_code == 0 and "replacing the earlier run" in res.output
    assert len((out / "records.jsonl").read_text().splitlines()) == 3


def _llama_cpp(log: Path, **kw: Any) -> Script:
    """llama.cpp's server as a client sees it: no usage in streams (stream_options ignored),
    usage in every non-streamed answer, a role-only first chunk, one token per event; its
    stand-in tokenizer counts 1.1 tokens per word plus 8 template tokens, and it logs what
    it counted for every request."""
    return Script(
        ttft_s=0.003,
        itl_s=0.001,
        include_usage=False,
        role_event=True,
        tokens_per_event=1,
        tokens_per_word=1.1,
        template_tokens=8,
        log_path=str(log),
        **kw,
    )


def _served_prompts(log: Path) -> list[int]:
    """The prompt lengths the server counted for the run's (streamed) requests."""
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    return [x["prompt_tokens"] for x in lines if x["stream"]]


def test_exact_prompts_against_a_server_that_streams_no_usage(tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    args = [
        "run",
        "--concurrency",
        "1",
        "--requests",
        "12",
        "--prompt-tokens",
        "128",
        "--output-tokens",
        "32",
        "--quiet",
    ]
    with ScriptedServerProcess(_llama_cpp(log)) as srv:
        res = runner.invoke(app, [*args, "--url", srv.url, "--out", str(tmp_path / "cal")])
        assert res.exit_code == 0, res.output
        served = _served_prompts(log)[-12:]  # after the calibration requests
        log.write_text("")
        raw = runner.invoke(app, [*args, "--url", srv.url, "--out", str(tmp_path / "raw"), "--no-calibrate"])
        assert raw.exit_code == 0, raw.output
        uncalibrated = _served_prompts(log)
    assert "warning" not in res.output and "not calibrated" not in res.output
    assert len(served) == 12 and all(abs(n - 128) <= 0.01 * 128 for n in served), served
    # without calibration the template and the tokenizer make every prompt 16% too long
    assert uncalibrated == [round(128 * 1.1) + 8] * 12
    run = json.loads((tmp_path / "cal" / "run.json").read_text())
    assert run["calibration"]["calibrated"] and run["calibration"]["method"] == "non-stream"
    assert json.loads((tmp_path / "raw" / "run.json").read_text())["calibration"]["method"] is None
    # output tokens: counted one per event, and the end of the run says so
    level = json.loads((tmp_path / "cal" / "summary.json").read_text())["levels"][0]
    assert level["events"]["token_source"] == {"events": 12} and level["output_tokens"]["mean"] == 32.0
    assert "output tokens counted one per event (the server streamed no usage" in res.output
    html = (tmp_path / "cal" / "report.html").read_text()
    assert "Output tokens counted one per event (the server streamed no usage" in html
    assert "<dt>prompt lengths</dt><dd>calibrated from non-streamed answers&#x27; usage" in html


def test_a_server_with_no_usage_at_all_is_one_warning_line(tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    with ScriptedServerProcess(_llama_cpp(log, answer_usage=False)) as srv:
        res = runner.invoke(
            app,
            [
                "run",
                "--url",
                srv.url,
                "--requests",
                "3",
                "--prompt-tokens",
                "16",
                "--output-tokens",
                "4",
                "--out",
                str(tmp_path / "x"),
                "--quiet",
            ],
        )
    assert res.exit_code == 0, res.output
    warnings = [line for line in res.output.splitlines() if "warning" in line]
    assert warnings == [
        "warning: prompt lengths not calibrated: the server streams no usage.prompt_tokens and the "
        "non-streamed answer has no usage.prompt_tokens either; prompts assume one token per word and "
        "no chat template, so compare them with the server's own prompt counts"
    ]
    calib = json.loads((tmp_path / "x" / "run.json").read_text())["calibration"]
    assert calib["calibrated"] is False and "non-streamed answer has no usage" in calib["reason"]


def test_out_refuses_a_folder_that_is_not_a_run_folder(server: ScriptedServerProcess, tmp_path: Path) -> None:
    """A user's own records.jsonl is not replaced; an empty name is not the current directory."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "records.jsonl").write_text("my data\n")
    res = runner.invoke(app, ["run", "--url", server.url, "--requests", "1", "--out", str(mine)])
    assert res.exit_code == 2, res.output
    assert "neither empty nor a loadgen run folder" in res.output and len(res.output.strip().splitlines()) == 1
    assert (mine / "records.jsonl").read_text() == "my data\n" and sorted(p.name for p in mine.iterdir()) == [
        "records.jsonl"
    ]
    res = runner.invoke(app, ["run", "--url", server.url, "--requests", "1", "--out", ""])
    assert res.exit_code == 2 and "--out: give a folder" in res.output, res.output
    empty = tmp_path / "empty"
    empty.mkdir()
    for _ in range(2):  # an empty folder, then the run folder it became
        res = runner.invoke(app, ["run", "--url", server.url, "--requests", "1", "--out", str(empty)])
        assert res.exit_code == 0, res.output


def test_a_run_in_which_every_request_failed_exits_1(tmp_path: Path) -> None:
    with ScriptedServerProcess(Script(status=500)) as srv:
        res = runner.invoke(
            app,
            [
                "run",
                "--url",
                srv.url,
                "--model",
                "m",
                "--requests",
                "3",
                "--no-calibrate",
                "--out",
                str(tmp_path / "failed"),
            ],
        )
    assert res.exit_code == 1, res.output
    assert "every request failed (3)" in res.output and "Traceback" not in res.output
    assert (tmp_path / "failed" / "summary.json").exists()


@pytest.mark.parametrize(
    ("gpu", "line"),
    [
        ("h100", "max_num_batched_tokens=8192, max_num_seqs=1024, chunked prefill on, prefix caching on"),
        ("a100", "max_num_batched_tokens=2048, max_num_seqs=256, chunked prefill on, prefix caching on"),
    ],
)
def test_serve_prints_its_effective_limits_at_start_up(gpu: str, line: str) -> None:
    from loadgen.server.process import ServerProcess

    server = ServerProcess(["--gpu", gpu])
    with server:
        pass
    assert f"loadgen serve: {line}" in server.output


def test_serve_refuses_a_budget_below_the_context_without_chunking() -> None:
    res = runner.invoke(app, ["serve", "--no-chunked-prefill", "--max-num-batched-tokens", "4096"])
    assert res.exit_code == 2
    assert "--max-num-batched-tokens: 4096 is smaller than max_model_len (131072)" in res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


def test_a_flags_only_run_is_named_by_its_workload_and_load(server: ScriptedServerProcess, tmp_path: Path) -> None:
    # issue 39, defect 6: the report of a run made of flags alone was titled "loadgen report — cli"
    lengths = ["--prompt-tokens", "16", "--output-tokens", "2", "--requests", "4", "--quiet"]
    res = runner.invoke(app, ["run", "--url", server.url, *lengths, "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert (
        "<title>loadgen report — prompt 16, output 2, 8 users</title>" in (tmp_path / "a" / "report.html").read_text()
    )
    assert json.loads((tmp_path / "a" / "run.json").read_text())["label"] == "prompt 16, output 2, 8 users"
    res = runner.invoke(app, ["run", "--url", server.url, "--rate", "50", *lengths[4:], "--out", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    assert "<title>loadgen report — chat, 50 req/s</title>" in (tmp_path / "b" / "report.html").read_text()


def test_help_says_the_default_load() -> None:
    res = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "400"}, terminal_width=400)
    assert res.exit_code == 0, res.output
    assert "(default 8 when no --rate, --levels or --profile sets the load;" in res.output
    assert "default: one level of 8 users" in res.output
