"""Worker processes: one seeded plan whatever the number of workers, records that reach
the run folder in batches, a worker that dies, Ctrl-C. Real processes, a real scripted
server on loopback."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
from pathlib import Path

import pytest
from rich.console import Console

from loadgen.load.profiles import Profile
from loadgen.load.workers import WorkerPool, auto_workers
from loadgen.orchestrate import RunConfig, execute
from loadgen.records import ErrorKind
from loadgen.workload.spec import workload_from_flags
from tests.load.level_hooks import beside_first_level
from tests.scripted_server import Script, ScriptedServerProcess


@pytest.fixture(scope="module")
def server() -> ScriptedServerProcess:
    with ScriptedServerProcess(Script(ttft_s=0.01, itl_s=0.003)) as srv:
        yield srv


def _run(
    server: ScriptedServerProcess, out: Path, mode: str, workers: int, **prof: object
) -> tuple[list[dict], object]:
    levels = [6] if mode == "concurrency" else [60.0]
    cfg = RunConfig(
        url=server.url,
        api="completions",
        workload=workload_from_flags("uniform:min=8,max=32", "uniform:min=2,max=6"),
        profile=Profile(mode=mode, levels=levels, requests=30, warmup_requests=3, **prof),  # type: ignore[arg-type]
        out=out,
        live=False,
        workers=workers,
        seed=11,
    )
    outcome = execute(cfg, Console(file=io.StringIO()))
    recs = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return recs, outcome


@pytest.mark.parametrize("mode", ["concurrency", "rate"])
def test_same_seed_same_requests_and_schedule_with_1_2_4_workers(
    server: ScriptedServerProcess, tmp_path: Path, mode: str
) -> None:
    seen = []
    for n in (1, 2, 4):
        recs, outcome = _run(server, tmp_path / f"w{n}", mode, n)
        assert len(recs) == 33 and all(r["status"] == "ok" for r in recs)
        requests = sorted((r["index"], r["warmup"], r["target_prompt_tokens"], r["target_output_tokens"]) for r in recs)
        t0 = min(r["scheduled_ns"] for r in recs)
        offsets = sorted(r["scheduled_ns"] - t0 for r in recs) if mode == "rate" else None
        seen.append((requests, offsets))
        level = outcome.summary.levels[0]  # type: ignore[attr-defined]
        assert level.requests.total == 30
        if n > 1:
            assert [w.worker for w in level.client.workers] == list(range(n))
            assert all(w.cpu_percent is not None and w.cpu_percent > 0 for w in level.client.workers)
            assert sum(w.send_lateness_ms.count for w in level.client.workers) == level.client.send_lateness_ms.count
        else:  # one process: its own health, as one worker
            assert [w.worker for w in level.client.workers] == [0]
            assert level.client.workers[0].send_lateness_ms == level.client.send_lateness_ms
    assert seen[0] == seen[1] == seen[2]
    assert sum(r[1] for r in seen[0][0]) == 3  # three warm-up requests, the same three


def test_the_report_draws_one_lag_line_per_worker(server: ScriptedServerProcess, tmp_path: Path) -> None:
    from loadgen.report.html import render_run_report
    from tests.report.conftest import figures, trace

    _, outcome = _run(server, tmp_path / "rep", "concurrency", 2)
    level = outcome.summary.levels[0]  # type: ignore[attr-defined]
    fig = figures(render_run_report(tmp_path / "rep").read_text(encoding="utf-8"))["fig-lateness"]
    for wh in level.client.workers:
        line = trace(fig, f"client.workers.{wh.worker}.loop_lag.0")
        assert line["x"] == wh.loop_lag_over_time.t_s and line["y"] == wh.loop_lag_over_time.max_ms
        assert line["x"]  # a lag sample per 10 ms: at least one bin


def test_the_cap_is_global_over_the_workers(tmp_path: Path) -> None:
    """--max-in-flight 3 over 4 workers: never more than 3 requests at the server at once
    (its own count), the waits for a credit reported apart from send lateness."""
    with ScriptedServerProcess(Script(ttft_s=0.1, itl_s=0.02)) as srv:
        cfg = RunConfig(
            url=srv.url,
            api="completions",
            workload=workload_from_flags("16", "5"),
            profile=Profile(
                mode="rate", levels=[100.0], requests=40, arrival="constant", max_in_flight=3, max_lateness_s=30.0
            ),
            out=tmp_path / "cap",
            live=False,
            workers=4,
            seed=2,
        )
        outcome = execute(cfg, Console(file=io.StringIO()))
    recs = [json.loads(x) for x in (tmp_path / "cap" / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 40 and all(r["status"] == "ok" for r in recs)
    spans = sorted([(r["sent_ns"], 1) for r in recs] + [(r["done_ns"], -1) for r in recs], key=lambda x: (x[0], x[1]))
    peak = cur = 0
    for _, d in spans:
        cur += d
        peak = max(peak, cur)
    assert peak == 3  # the cap held across 4 processes, and was used
    level = outcome.summary.levels[0]  # type: ignore[attr-defined]
    wait = level.schedule.credit_wait_ms
    assert wait is not None and wait.count == 40 and wait.max > 500  # 40 requests at 3 at a time
    assert level.client.send_lateness_ms.p50 < wait.p50  # waiting for a credit is not lateness


def test_a_worker_that_dies_loses_only_its_unflushed_records(tmp_path: Path) -> None:
    """Kill one of two workers mid-level: the level ends, says which worker died and is
    client-bound; its in-flight requests are worker_lost records; the other worker's
    requests are all there; the run folder is whole."""
    killed: list[int] = []

    async def kill_worker_1(pool: WorkerPool) -> None:
        await asyncio.sleep(1.5)
        killed.append(pool.pids[1])
        os.kill(pool.pids[1], signal.SIGKILL)

    with ScriptedServerProcess(Script(ttft_s=0.05, itl_s=0.05)) as srv, beside_first_level(WorkerPool, kill_worker_1):
        cfg = RunConfig(
            url=srv.url,
            api="completions",
            workload=workload_from_flags("16", "40"),
            profile=Profile(mode="concurrency", levels=[4], requests=24),
            out=tmp_path / "dies",
            live=False,
            workers=2,
            seed=1,
        )
        outcome = execute(cfg, Console(file=io.StringIO()))
    assert killed
    level = outcome.summary.levels[0]
    assert level.client.lost_workers == [1] and level.client.verdict == "client-bound"
    assert any("died" in r for r in level.client.reasons)
    recs = [json.loads(x) for x in (tmp_path / "dies" / "records.jsonl").read_text().splitlines()]
    by_user = {u: [r for r in recs if r["worker"] == u] for u in range(4)}
    # users 0 and 2 (worker 0) finished their 6 requests each; worker 1's users lost some
    assert len(by_user[0]) == len(by_user[2]) == 6
    assert len(by_user[1]) + len(by_user[3]) < 12
    # killed 1.5 s into 2 s requests: each of its users had one in flight at its last batch
    lost = [r for r in recs if r["status"] == ErrorKind.WORKER_LOST.value]
    assert sorted(r["worker"] for r in lost) == [1, 3] and all("worker 1 was lost" in r["error"] for r in lost)
    assert level.requests.by_error == {"worker_lost": 2}
    assert json.loads((tmp_path / "dies" / "summary.json").read_text())["levels"][0]["client"]["lost_workers"] == [1]


def test_interrupt_cancels_every_workers_requests_and_keeps_them(tmp_path: Path) -> None:
    async def interrupt(pool: WorkerPool) -> None:
        await asyncio.sleep(1.0)
        pool.interrupt()

    with ScriptedServerProcess(Script(ttft_s=0.02, itl_s=0.2)) as srv, beside_first_level(WorkerPool, interrupt):
        cfg = RunConfig(
            url=srv.url,
            api="completions",
            workload=workload_from_flags("16", "50"),
            profile=Profile(mode="concurrency", levels=[6], requests=60),
            out=tmp_path / "int",
            live=False,
            workers=2,
            seed=1,
        )
        outcome = execute(cfg, Console(file=io.StringIO()))
    assert outcome.interrupted
    recs = [json.loads(x) for x in (tmp_path / "int" / "records.jsonl").read_text().splitlines()]
    cancelled = [r for r in recs if r["status"] == ErrorKind.CANCELLED.value]
    assert len(cancelled) == 6 and all(r["events"] for r in cancelled)  # each user's request in flight
    assert outcome.summary.levels[0].requests.total == len(recs)


def test_auto_workers_says_why() -> None:
    assert auto_workers(64, cpus=8) == (1, "64 concurrent streams at up to 128 per worker")
    n, why = auto_workers(1024, cpus=4)
    assert n == 4 and "capped at the 4 CPUs" in why
