"""After a crash: ``loadgen report`` rebuilds summary.json, ``loadgen run --resume`` finishes
the sweep. Real ``loadgen run`` subprocesses against the reference sim server, killed with
SIGKILL mid-sweep."""

from __future__ import annotations

import json
import os
import shutil
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
from loadgen.orchestrate.recover import REBUILT_NOTE
from loadgen.server.process import ServerProcess

runner = CliRunner()
SWEEP = ["--levels", "1,2,4", "--requests", "12", "--prompt-tokens", "64", "--output-tokens", "16", "--quiet"]


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with ServerProcess(["--engine", "sim", "--time-scale", "0.5"]) as url:
        yield url


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen.cli", *args], capture_output=True, text=True, timeout=120, check=False
    )


def _levels_of(folder: Path) -> list[int]:
    return [json.loads(line)["level"] for line in (folder / "records.jsonl").read_bytes().splitlines()]


@pytest.fixture(scope="module")
def killed(sim: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep killed with SIGKILL once the second level has written a record."""
    out = tmp_path_factory.mktemp("killed") / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen.cli", "run", "--url", sim, "--out", str(out), *SWEEP],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            f = out / "records.jsonl"
            if f.exists() and b'"level":1' in f.read_bytes():
                break
            time.sleep(0.005)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    assert 1 in _levels_of(out), "the second level never started"
    assert not json.loads((out / "summary.json").read_text()).get("interrupted")  # levels so far, no end
    return out


def _without_client(level: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in level.items() if k != "client"}


def test_report_rebuilds_a_deleted_summary_with_the_same_numbers(sim: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _run("run", "--url", sim, "--out", str(out), *SWEEP)
    assert res.returncode == 0, res.stdout + res.stderr
    original = json.loads((out / "summary.json").read_text())
    (out / "summary.json").unlink()
    (out / "report.html").unlink()
    res = runner.invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    assert "summary.json rebuilt" in res.output and "interrupted" not in res.output
    rebuilt = json.loads((out / "summary.json").read_text())
    assert len(rebuilt["levels"]) == 3
    for a, b in zip(original["levels"], rebuilt["levels"]):
        assert _without_client(a) == _without_client(b)  # every number the records make, the same
        assert b["client"]["send_lateness_ms"] == a["client"]["send_lateness_ms"]
        assert REBUILT_NOTE in b["client"]["notes"]  # the loop lag was never in the records
    for key in ("capacity", "saturation", "stopped", "interrupted", "schema_version"):
        assert rebuilt[key] == original[key], key
    assert (out / "report.html").stat().st_size > 0


def test_report_after_kill_9_rebuilds_an_interrupted_summary(killed: Path, tmp_path: Path) -> None:
    folder = tmp_path / "copy"
    shutil.copytree(killed, folder)
    partial = _levels_of(folder).count(1)
    with open(folder / "records.jsonl", "ab") as fh:  # a line cut off mid-write
        fh.write(b'{"index":99,"level":1,"wor')
    res = runner.invoke(app, ["report", str(folder)])
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output and "cut off mid-write" in res.output and "interrupted" in res.output
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert [(lv["requests"]["total"], lv["interrupted"]) for lv in summary["levels"]] == [(12, False), (partial, True)]
    assert (folder / "report.html").stat().st_size > 0


def test_resume_after_sigkill_keeps_finished_levels_byte_for_byte(sim: str, killed: Path, tmp_path: Path) -> None:
    folder = tmp_path / "resumed"
    shutil.copytree(killed, folder)
    lines = (folder / "records.jsonl").read_bytes().splitlines(keepends=True)
    first = b"".join(line for line in lines if json.loads(line)["level"] == 0)
    assert (folder / "records.jsonl").read_bytes().startswith(first) and len(first) < len(b"".join(lines))
    events_before = (folder / "events.bin").read_bytes()
    salt = json.loads((folder / "run.json").read_text())["config"]["prompt_salt"]
    res = _run("run", "--resume", str(folder), "--url", sim, "--quiet")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "resuming" in res.stdout and "at level 2" in res.stdout
    assert f"prompts salted per run (salt {salt};" in res.stdout  # the run's own prompt text goes on
    after = (folder / "records.jsonl").read_bytes()
    assert after.startswith(first)
    level0_events = sum(json.loads(line)["events"]["bytes"] for line in first.splitlines())
    assert (folder / "events.bin").read_bytes()[: 18 + level0_events] == events_before[: 18 + level0_events]
    assert _levels_of(folder) == [0] * 12 + [1] * 12 + [2] * 12  # the partial level ran again, whole
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["interrupted"] is False
    assert [lv["load"]["value"] for lv in summary["levels"]] == [1, 2, 4]
    assert [lv["requests"]["ok"] for lv in summary["levels"]] == [12, 12, 12]
    run = json.loads((folder / "run.json").read_text())
    assert run["finished"] == {"interrupted": False, "levels": 3, "stopped": None} and run["resumed"][0]["level"] == 1
    # finished now: a second resume is refused
    res = runner.invoke(app, ["run", "--resume", str(folder)])
    assert res.exit_code == 2 and "finished already" in res.output


def test_resume_refuses_what_it_cannot_continue(killed: Path, tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("hello")
    for args, says in (
        (["--resume", str(tmp_path / "notes")], "not a loadgen run folder"),
        (["--resume", str(tmp_path / "absent")], "not a folder"),
        (["--resume", str(killed), "--concurrency", "3"], "--concurrency cannot change"),
        (["--resume", str(killed), "--requests", "5", "--seed", "2"], "--requests, --seed cannot change"),
    ):
        res = runner.invoke(app, ["run", *args])
        assert res.exit_code == 2, (args, res.output)
        assert says in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert (tmp_path / "notes" / "mine.txt").read_text() == "hello"
