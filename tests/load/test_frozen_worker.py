"""A worker process frozen with SIGSTOP: the level's client health names it and how long it
was silent; a SIGTERM to the run waits for it at most ``STOP_WAIT_S``, then kills it and
keeps its in-flight requests as ``worker_lost`` records. Real worker processes, a real
scripted server on loopback, a real ``loadgen run`` subprocess for the signal."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from loadgen.load.profiles import Profile
from loadgen.load.workers import SILENT_S, STOP_WAIT_S, WorkerPool
from loadgen.orchestrate import RunConfig, execute
from loadgen.records import ErrorKind
from loadgen.workload.spec import workload_from_flags
from tests.load.level_hooks import beside_first_level
from tests.scripted_server import Script, ScriptedServerProcess

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc for the worker processes")

_SILENT = re.compile(r"worker (\d+): sent nothing for ([0-9.]+) s")


def _silences(reasons: list[str]) -> dict[int, float]:
    return {int(m[1]): float(m[2]) for r in reasons if (m := _SILENT.match(r))}


def test_a_stopped_worker_is_named_in_the_levels_health(tmp_path: Path) -> None:
    """Worker 1 stopped for twice ``SILENT_S`` mid-level, then continued: the level ends
    whole, client-bound, naming worker 1 and a silence at least as long as the stop; the
    other worker is not named."""
    freeze_s = 2 * SILENT_S
    frozen: list[float] = []

    async def freeze_worker_1(pool: WorkerPool) -> None:
        for _ in range(600):  # until both workers have reported their users' requests in flight
            if pool.in_flight == 4:
                break
            await asyncio.sleep(0.05)
        pid = pool.pids[1]
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            await asyncio.sleep(freeze_s)
        finally:
            os.kill(pid, signal.SIGCONT)
            frozen.append(time.monotonic() - t0)

    with ScriptedServerProcess(Script(ttft_s=0.05, itl_s=0.05)) as srv, beside_first_level(WorkerPool, freeze_worker_1):
        cfg = RunConfig(
            url=srv.url,
            api="completions",
            workload=workload_from_flags("16", "30"),
            profile=Profile(mode="concurrency", levels=[4], requests=8),
            out=tmp_path / "frozen",
            live=False,
            workers=2,
            seed=1,
        )
        outcome = execute(cfg, Console(file=io.StringIO()))
    assert frozen, "the level ended before the worker was stopped"
    level = outcome.summary.levels[0]
    assert level.requests.total == 8 and level.requests.ok == 8  # it continued: nothing lost
    assert level.client.verdict == "client-bound" and not level.client.lost_workers
    silent = _silences(level.client.reasons)
    assert list(silent) == [1], level.client.reasons
    assert silent[1] / frozen[0] >= 0.95  # no report can leave a stopped process
    by_worker = {wh.worker: wh for wh in level.client.workers or []}
    assert any(r.startswith("sent nothing for") for r in by_worker[1].reasons)
    assert not any(r.startswith("sent nothing for") for r in by_worker[0].reasons)
    written = json.loads((tmp_path / "frozen" / "summary.json").read_text())["levels"][0]["client"]["reasons"]
    assert _silences(written) == silent


def _children(pid: int) -> list[int]:
    """The worker processes (multiprocessing spawn children) of process ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"spawn_main" in cmdline:
            found.append(int(entry))
    return sorted(found)


def _stopped_worker(pid: int) -> bool:
    """Whether ``pid`` is still a stopped worker process (not a pid used again since)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "T" and b"spawn_main" in cmdline


@pytest.fixture
def cleanup() -> Iterator[tuple[list[subprocess.Popen[str]], list[int]]]:
    runs: list[subprocess.Popen[str]] = []
    stopped: list[int] = []
    yield runs, stopped
    for proc in runs:  # a test that failed leaves nothing running
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    for pid in stopped:
        if _stopped_worker(pid):
            os.kill(pid, signal.SIGKILL)


def test_sigterm_waits_for_a_stopped_worker_only_the_bound(
    tmp_path: Path, cleanup: tuple[list[subprocess.Popen[str]], list[int]]
) -> None:
    """A worker stopped mid-level, then SIGTERM to the run (and its group, as ``timeout``
    sends it): exit 143 after about ``STOP_WAIT_S``, not never; every request the server
    received is one record: the other worker's cancelled, the stopped one's worker_lost;
    the summary names the lost worker and its silence; the report is written."""
    out, log = tmp_path / "run", tmp_path / "server.log"
    # 40 tokens at 0.5 s: no request ends before the signal, so each user has one in flight
    with ScriptedServerProcess(Script(ttft_s=0.05, itl_s=0.5, log_path=str(log))) as srv:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loadgen.cli",
                "run",
                "--url",
                srv.url,
                "--api",
                "completions",
                "--concurrency",
                "4",
                "--requests",
                "8",
                "--prompt-tokens",
                "16",
                "--output-tokens",
                "40",
                "--workers",
                "2",
                "--no-calibrate",
                "--warmup",
                "0",
                "--out",
                str(out),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        cleanup[0].append(proc)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if log.exists() and len(log.read_text().splitlines()) >= 4:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(1.5)  # the workers' next batches list the requests in flight (every 0.5 s)
        workers = _children(proc.pid)
        assert len(workers) == 2, workers
        cleanup[1].append(workers[0])
        os.kill(workers[0], signal.SIGSTOP)
        time.sleep(0.5)
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        os.killpg(proc.pid, signal.SIGTERM)
        output, _ = proc.communicate(timeout=30 * STOP_WAIT_S)
        elapsed = time.monotonic() - t0
    assert proc.returncode == 143, output
    assert "Traceback" not in output
    # it waited for the stopped worker (the bound), and not much longer
    assert 1.0 <= elapsed / STOP_WAIT_S < 4.0, elapsed
    sent = len(log.read_text().splitlines())
    records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert sent == 4 and len(records) == sent  # every request sent is one record
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    client = summary["levels"][0]["client"]
    assert len(client["lost_workers"]) == 1
    lost = client["lost_workers"][0]
    mine = sorted(r["worker"] for r in records if r["worker"] % 2 == lost)  # its share: users lost, lost + 2
    assert mine == [lost, lost + 2]
    for r in records:
        if r["worker"] % 2 == lost:
            assert r["status"] == ErrorKind.WORKER_LOST.value
            assert f"worker {lost} was lost" in r["error"] and f"within {STOP_WAIT_S:g} s" in r["error"]
        else:
            assert r["status"] == ErrorKind.CANCELLED.value, r
    silent = _silences(client["reasons"])
    assert list(silent) == [lost] and silent[lost] >= STOP_WAIT_S
    assert summary["levels"][0]["requests"]["total"] == 4
    assert (out / "report.html").stat().st_size > 0


def test_sigterm_while_a_worker_is_stopped_starting(
    tmp_path: Path, cleanup: tuple[list[subprocess.Popen[str]], list[int]]
) -> None:
    """A worker stopped before it is ready: SIGTERM still ends the run with 143 after about
    ``STOP_WAIT_S``, with its summary; every request sent (if any) is one record."""
    out, log = tmp_path / "run", tmp_path / "server.log"
    with ScriptedServerProcess(Script(ttft_s=0.05, itl_s=0.5, log_path=str(log))) as srv:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loadgen.cli",
                "run",
                "--url",
                srv.url,
                "--api",
                "completions",
                "--concurrency",
                "4",
                "--requests",
                "8",
                "--prompt-tokens",
                "16",
                "--output-tokens",
                "40",
                "--workers",
                "2",
                "--no-calibrate",
                "--out",
                str(out),
                "--quiet",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        cleanup[0].append(proc)
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while time.monotonic() < deadline and proc.poll() is None and not workers:
            workers = _children(proc.pid)
            time.sleep(0.005)
        assert workers, proc.communicate()[0]
        cleanup[1].append(workers[0])
        os.kill(workers[0], signal.SIGSTOP)  # while it imports: it never says ready
        time.sleep(1.0)
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        output, _ = proc.communicate(timeout=30 * STOP_WAIT_S)
        elapsed = time.monotonic() - t0
    assert proc.returncode == 143, output
    assert "Traceback" not in output
    assert 1.0 <= elapsed / STOP_WAIT_S < 4.0, elapsed
    assert not _stopped_worker(workers[0])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    sent = len(log.read_text().splitlines()) if log.exists() else 0
    assert len((out / "records.jsonl").read_text().splitlines()) == sent
