"""SIGTERM (``timeout``, ``docker stop``, Kubernetes, CI cancellation) and SIGHUP (the
terminal or SSH session running loadgen closed) stop a run as Ctrl-C does: in-flight
requests recorded as cancelled, summary and report written, exit 143 or 129.

Real ``loadgen run`` subprocesses against a scripted server; each in its own session so a
signal can go to its whole process group (workers included), as ``timeout`` sends it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadgen.report.files import LOCK_FILE
from tests.scripted_server import Script, ScriptedServerProcess


def _start(out: Path, url: str, *args: str, terminal: int | None = None) -> subprocess.Popen[str]:
    """``loadgen run`` in a session of its own, its output piped (or written to the
    ``terminal``, a pseudo-terminal's side)."""
    output = subprocess.PIPE if terminal is None else terminal
    return subprocess.Popen(
        [sys.executable, "-m", "loadgen.cli", "run", "--url", url, "--prompt-tokens", "8", "--out", str(out), *args],
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=subprocess.STDOUT if terminal is None else terminal,
        text=True,
        start_new_session=True,
    )


def _wait_for_records(
    proc: subprocess.Popen[str], out: Path, n: int, timeout_s: float = 30, drain: int | None = None
) -> None:
    """Until ``out`` holds ``n`` records; ``drain``: a pseudo-terminal read meanwhile, so
    the run never waits for its terminal."""
    deadline = time.monotonic() + timeout_s
    f = out / "records.jsonl"
    while time.monotonic() < deadline and proc.poll() is None:
        if f.exists() and len(f.read_text().splitlines()) >= n:
            return
        while drain is not None and select.select([drain], [], [], 0)[0] and os.read(drain, 1 << 16):
            pass
        time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
    output, _ = proc.communicate(timeout=30)
    raise AssertionError(f"fewer than {n} records within {timeout_s:g} s (exit code {proc.returncode}): {output}")


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_like_timeout_keeps_records_and_summarises(tmp_path: Path, workers: int) -> None:
    """As ``timeout`` does: SIGTERM to the process, then to its whole group (workers too)."""
    out = tmp_path / "terminated"
    with ScriptedServerProcess(Script(ttft_s=0.01, itl_s=0.05)) as srv:
        proc = _start(
            out, srv.url, "--concurrency", "4", "--requests", "1000", "--output-tokens", "40", "--workers", str(workers)
        )
        _wait_for_records(proc, out, 4)
        os.kill(proc.pid, signal.SIGTERM)
        os.killpg(proc.pid, signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, output
    assert "Traceback" not in output and "interrupted" in output
    records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    statuses = [r["status"] for r in records]
    assert statuses.count("cancelled") == 4 and statuses.count("ok") >= 4, statuses
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert summary["levels"][0]["requests"]["total"] == len(records)
    assert (out / "report.html").stat().st_size > 0


def test_sigterm_to_the_group_while_workers_start_kills_none(tmp_path: Path) -> None:
    """Worker processes are born with SIGINT and SIGTERM blocked, the first one too (whose
    start also starts multiprocessing's resource tracker, which unblocks them on its way)."""
    out = tmp_path / "starting"
    with ScriptedServerProcess(Script(ttft_s=0.01, itl_s=0.05)) as srv:
        proc = _start(
            out,
            srv.url,
            "--concurrency",
            "4",
            "--requests",
            "100",
            "--output-tokens",
            "40",
            "--workers",
            "2",
            "--quiet",
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None and not (out / "run.json").exists():
            time.sleep(0.01)  # run.json is written just before the workers start
        time.sleep(0.3)  # while they import (a worker takes about a second to be ready)
        os.killpg(proc.pid, signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, output
    assert "Traceback" not in output and "died" not in output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert summary["levels"][0]["requests"]["total"] == len((out / "records.jsonl").read_text().splitlines())


@pytest.mark.parametrize("workers", [1, 2])
def test_sighup_when_the_terminal_closes_keeps_records_summary_and_report(tmp_path: Path, workers: int) -> None:
    """The terminal running loadgen (live display on) closes, as an SSH session ends: every
    later write to it fails with EIO, and SIGHUP reaches the terminal's whole group. The
    run stops as SIGTERM stops it, with exit 129; before, SIGHUP ended it where it stood
    (no summary, no report, the lock left)."""
    out = tmp_path / "hungup"
    master, slave = os.openpty()
    with ScriptedServerProcess(Script(ttft_s=0.01, itl_s=0.05)) as srv:
        try:
            args = ("--concurrency", "4", "--requests", "1000", "--output-tokens", "40", "--workers", str(workers))
            proc = _start(out, srv.url, *args, terminal=slave)
        finally:
            os.close(slave)  # the child holds its own copy
        try:
            _wait_for_records(proc, out, 4, drain=master)
        finally:
            os.close(master)  # the terminal goes: the process's writes to it fail from now on
        os.killpg(proc.pid, signal.SIGHUP)
        proc.wait(timeout=60)
    assert proc.returncode == 129  # not 1 (a traceback) nor 120 (a failed flush at exit)
    records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    statuses = [r["status"] for r in records]
    assert statuses.count("cancelled") == 4 and statuses.count("ok") >= 4, statuses
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["levels"][0]["requests"]["total"] == len(records)
    assert (out / "report.html").stat().st_size > 0
    assert not (out / LOCK_FILE).exists()


@pytest.mark.slow
def test_sigterm_stops_ray_actors_and_keeps_their_records(tmp_path: Path) -> None:
    """The coordinator takes SIGTERM and stops its actors (a cluster of its own on loopback:
    ``--ray auto`` would join any other Ray instance running on the machine)."""
    pytest.importorskip("ray", reason="--ray needs Ray (pip install 'loadgen[distributed]')")
    from ray.cluster_utils import Cluster

    out = tmp_path / "ray"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})  # on loopback: see tests/conftest.py
    try:
        with ScriptedServerProcess(Script(ttft_s=0.01, itl_s=0.05)) as srv:
            proc = _start(
                out,
                srv.url,
                "--concurrency",
                "4",
                "--requests",
                "1000",
                "--output-tokens",
                "40",
                "--ray",
                cluster.address,
                "--workers",
                "2",
                "--quiet",
            )
            _wait_for_records(proc, out, 4, timeout_s=120)
            proc.send_signal(signal.SIGTERM)
            output, _ = proc.communicate(timeout=120)
    finally:
        cluster.shutdown()
    assert proc.returncode == 143, output
    statuses = [json.loads(x)["status"] for x in (out / "records.jsonl").read_text().splitlines()]
    assert statuses.count("cancelled") == 4 and statuses.count("ok") >= 4, statuses
    assert json.loads((out / "summary.json").read_text())["interrupted"] is True


def test_sigterm_between_levels_marks_the_sweep_interrupted(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    with ScriptedServerProcess(Script(ttft_s=0.01, itl_s=0.02)) as srv:
        proc = _start(out, srv.url, "--levels", "1,2,4", "--requests", "30", "--output-tokens", "10", "--quiet")
        _wait_for_records(proc, out, 31)  # into the second level
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert len(summary["levels"]) == 2 and summary["levels"][0]["requests"]["total"] == 30


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_during_calibration_is_one_line(tmp_path: Path, sig: int, code: int) -> None:
    """Before the run's own handler: the cleanup runs, one line, exit 143 (129 for SIGHUP)."""
    log = tmp_path / "served.jsonl"
    with ScriptedServerProcess(Script(ttft_s=60, log_path=str(log))) as srv:
        proc = _start(tmp_path / "run", srv.url, "--requests", "2")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (log.exists() and log.read_text()):  # calibration sent
            time.sleep(0.05)
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == code, output
    assert output.strip() == "terminated", output


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_stops_a_matrix_and_its_servers(tmp_path: Path, sig: int, code: int) -> None:
    """The matrix's servers run in their own process groups: SIGTERM (or SIGHUP) to loadgen
    must still stop them."""
    matrix = tmp_path / "m.toml"
    matrix.write_text("""
name = "two"
baseline = "flag=a"
[server]
command = "loadgen serve --engine sim --time-scale 2 --port {port} {flag}"
[grid]
flag = { a = "--chunked-prefill", b = "--no-chunked-prefill" }
[run]
api = "completions"
prompt_tokens = "64"
output_tokens = "64"
[run.profile]
mode = "concurrency"
levels = [2]
requests = 200
warmup_requests = 0
""")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen.cli", "matrix", str(matrix), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while (
        time.monotonic() < deadline
        and proc.poll() is None
        and not any(f.read_text() for f in out.glob("*/run/records.jsonl"))
    ):
        time.sleep(0.05)
    proc.send_signal(sig)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == code, output
    doc = json.loads((out / "matrix.json").read_text())
    first = doc["configs"][0]
    assert first["status"] == "interrupted" and first["server_exit_code"] is not None, first
    assert json.loads((out / first["folder"] / "run" / "summary.json").read_text())["interrupted"] is True


def test_under_nohup_a_hang_up_is_survived(tmp_path: Path) -> None:
    """Started with SIGHUP ignored (``nohup``), loadgen keeps ignoring it: the run goes on
    to its end (exit 0, every request ok), the terminal's close notwithstanding."""
    out = tmp_path / "nohup"
    with ScriptedServerProcess(Script(ttft_s=0.01, itl_s=0.01)) as srv:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "loadgen.cli", "run", "--url", srv.url, "--prompt-tokens", "8"),
                *("--out", str(out), "--concurrency", "2", "--requests", "12", "--output-tokens", "20"),
                *("--workers", "2", "--quiet"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),  # what nohup does
        )
        _wait_for_records(proc, out, 2)
        os.killpg(proc.pid, signal.SIGHUP)
        output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, output
    records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 12 and all(r["status"] == "ok" for r in records)
