"""CI gates through the CLI: --fail-on, --max-error-rate, --abort-on-fail against the reference server."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.metrics.gates import EXIT_CODES, Gates, exit_code, level_failures, parse_fail_on, run_failures
from loadgen.metrics.results import RunSummary
from loadgen.server.process import ServerProcess

GOLDEN = Path(__file__).parent / "metrics" / "golden" / "summary_concurrency.json"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with ServerProcess(["--engine", "sim", "--time-scale", "0.2"]) as url:
        yield url


@pytest.fixture(scope="module")
def failing_server() -> Iterator[str]:
    with ServerProcess(["--engine", "sim", "--time-scale", "0.2", "--fail-rate", "0.5", "--seed", "3"]) as url:
        yield url


def run(url: str, tmp_path: Path, *args: str) -> tuple[int, str, Path]:
    out = tmp_path / "run"
    res = CliRunner().invoke(
        app,
        [
            "run",
            "--url",
            url,
            "--api",
            "completions",
            "--prompt-tokens",
            "64",
            "--output-tokens",
            "4",
            "--requests",
            "8",
            "--quiet",
            "--out",
            str(out),
            *args,
        ],
    )
    return res.exit_code, res.output, out


def test_slo_gate_fails_with_its_code_and_passes_when_met(server: str, tmp_path: Path) -> None:
    # a 64-token prefill of an 8B model takes milliseconds: a 1 µs TTFT limit cannot be met
    code, output, _ = run(server, tmp_path / "a", "--concurrency", "2", "--slo", "ttft=1us", "--fail-on", "slo")
    assert code == EXIT_CODES["slo"] == 4, output
    assert "gate failed (slo)" in output and "SLO attainment 0.0%" in output
    code, output, _ = run(server, tmp_path / "b", "--concurrency", "2", "--slo", "ttft=60s", "--fail-on", "slo,errors")
    assert code == 0, output


def test_error_gate_and_its_threshold(failing_server: str, tmp_path: Path) -> None:
    # (no calibration: its two requests would meet the server's failures too)
    code, output, out = run(
        failing_server, tmp_path / "a", "--concurrency", "2", "--no-calibrate", "--fail-on", "errors"
    )
    summary = json.loads((out / "summary.json").read_text())
    rate = summary["levels"][0]["requests"]["failed"] / summary["levels"][0]["requests"]["total"]
    assert 0 < rate < 1
    assert code == EXIT_CODES["errors"] == 3, output
    assert "gate failed (errors)" in output
    code, output, _ = run(
        failing_server, tmp_path / "b", "--concurrency", "2", "--no-calibrate", "--max-error-rate", "0.99"
    )
    assert code == 0, output  # the same failures, under the bound
    code, _, _ = run(failing_server, tmp_path / "c", "--concurrency", "2", "--no-calibrate", "--max-error-rate", "0")
    assert code == 3  # --max-error-rate alone turns the gate on


def test_abort_on_fail_stops_the_sweep_at_the_first_failing_level(server: str, tmp_path: Path) -> None:
    code, output, out = run(server, tmp_path, "--levels", "1,2,4", "--slo", "ttft=1us", "--abort-on-fail")
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["levels"]) == 1
    assert summary["stopped"].startswith("--abort-on-fail: level 1")
    assert code == 4, output


@pytest.mark.parametrize(
    ("args", "flag"), [(["--fail-on", "slo,latency"], "--fail-on"), (["--max-error-rate", "1.5"], "--max-error-rate")]
)
def test_bad_gate_flags_are_one_line(server: str, tmp_path: Path, args: list[str], flag: str) -> None:
    code, output, out = run(server, tmp_path, "--concurrency", "1", *args)
    assert code == 2 and flag in output and "Traceback" not in output
    assert not out.exists()  # refused before anything was sent


def test_client_bound_gate_and_lowest_code_wins() -> None:
    summary = RunSummary.from_json(json.loads(GOLDEN.read_text()))
    level = summary.levels[0]
    bound = dataclasses.replace(
        level,
        client=dataclasses.replace(level.client, verdict="client-bound", reasons=["event-loop lag p99 40 ms > 10 ms"]),
    )
    gates = Gates(parse_fail_on(["client-bound", "errors"]), max_error_rate=0.0)
    (failure,) = [f for f in level_failures(bound, 0, gates) if f.reason == "client-bound"]
    assert failure.exit_code == 5 and "event-loop lag" in failure.message
    fine = dataclasses.replace(level, client=dataclasses.replace(level.client, verdict="ok", reasons=[]))
    assert not [f for f in level_failures(fine, 0, gates) if f.reason == "client-bound"]
    failures = run_failures([bound, bound], Gates(frozenset({"client-bound"})))
    assert [f.level for f in failures] == [0, 1] and exit_code(failures) == 5
    assert exit_code([*failures, dataclasses.replace(failures[0], reason="errors")]) == 3
    assert exit_code([]) == 0


def test_non_stationary_gate_names_the_trend() -> None:
    summary = RunSummary.from_json(json.loads(GOLDEN.read_text()))
    level = summary.levels[0]
    assert level.steady_state is not None and level.stationary
    gates = Gates(parse_fail_on("non-stationary"))
    assert not level_failures(level, 0, gates)
    rising = dataclasses.replace(
        level,
        steady_state=dataclasses.replace(
            level.steady_state,
            stationary=False,
            reasons=["ttft_ms: batch medians rise by 80% across the level (t = 9.0)"],
        ),
    )
    (failure,) = level_failures(rising, 0, gates)
    assert failure.exit_code == 6 and "rise by 80%" in failure.message
    assert not [f for f in level_failures(rising, 0, Gates(parse_fail_on("errors,slo"))) if f.exit_code == 6]
