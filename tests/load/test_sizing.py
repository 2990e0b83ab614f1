"""``--workers auto`` (the default): the count from the events per second the busiest level
needs and one process's measured capacity, never more than the free cores; one line says
so, and run.json keeps both what was asked and what was started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.load.profiles import Profile
from loadgen.load.sizing import (
    EVENTS_PER_STREAM_S,
    EVENTS_PER_WORKER_S,
    busy_cores,
    free_cores,
    level_need,
    size_workers,
)
from loadgen.report.files import read_run_info
from tests.scripted_server import Script, ScriptedServerProcess

runner = CliRunner()


def _closed(streams: int, free: int) -> tuple[int, str]:
    return size_workers(level_need(Profile(levels=[float(streams)]), 200.0), free)


def test_low_load_stays_in_one_process_whatever_the_cores() -> None:
    for free in (1, 2, 16, 64):
        n, why = _closed(16, free)
        assert n == 1, why
    assert why == "16 streams × ~50 events/s ≈ 800 events/s, within one worker's ~3,800"
    asked: list[int] = []

    def free() -> int:
        asked.append(64)
        return 64

    assert size_workers(level_need(Profile(levels=[16.0]), 64.0), free)[0] == 1
    assert not asked  # one worker is enough: the CPUs are not sampled (a 0.25 s wait)
    assert size_workers(level_need(Profile(levels=[1024.0]), 64.0), free)[0] == 14 and asked == [64]


def test_many_streams_spread_over_workers_up_to_the_free_cores() -> None:
    n, why = _closed(1024, 64)
    assert n == -(-1024 * EVENTS_PER_STREAM_S // EVENTS_PER_WORKER_S) == 14, why
    n, why = _closed(1024, 2)
    assert n == 2 and why.endswith("2 free cores, so 2 instead of 14"), why
    for free in range(1, 20):  # never more than the free cores
        assert _closed(100_000, free)[0] == free
    n, why = _closed(256, 2)  # the measured case: 2 workers beat 1 on 2 cores
    assert n == 2 and why.startswith("256 streams × ~50 events/s ≈ 12,800 events/s"), why


def test_open_loop_is_sized_by_rate_times_output_tokens() -> None:
    light = level_need(Profile(mode="rate", levels=[2.0, 10.0]), 200.0)
    assert light.events_per_s == 2_000 and light.basis == "10 requests/s × ~200 output tokens"
    assert size_workers(light, 8)[0] == 1
    heavy = level_need(Profile(mode="rate", levels=[100.0]), 200.0)
    assert size_workers(heavy, 8)[0] == 6 and size_workers(heavy, 3)[0] == 3
    capped = level_need(Profile(mode="rate", levels=[100.0], max_in_flight=10), 200.0)  # 10 streams at most
    assert capped.events_per_s == 10 * EVENTS_PER_STREAM_S and size_workers(capped, 8)[0] == 1
    # a capacity search without rate_high may double max_levels - 1 times; with it, that is its ceiling
    search = Profile(kind="capacity", mode="rate", rate_low=1.0, rate_high=4.0)
    assert level_need(search, 100.0).events_per_s == 400
    assert level_need(Profile(kind="capacity", mode="rate", rate_low=1.0, max_levels=4), 100.0).events_per_s == 800
    assert level_need(Profile(kind="sweep-rate", mode="rate", max_concurrency=64), 10.0).basis.startswith("64 streams")


def test_free_cores_are_the_allowed_cpus_less_the_busy_ones() -> None:
    assert free_cores(cpus=8, busy=0.2) == 8
    assert free_cores(cpus=8, busy=2.6) == 5
    assert free_cores(cpus=2, busy=7.0) == 1  # a busy machine still runs the run
    assert 0.0 <= busy_cores(0.05) <= (os.cpu_count() or 1) + 0.01
    assert 1 <= free_cores() <= len(os.sched_getaffinity(0))


def test_a_busy_core_is_seen_as_busy() -> None:
    """A process spinning on one core while the CPUs are sampled counts as (at least half)
    a busy core, whatever else the machine does (a count, no timing threshold)."""
    spin = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0.3)  # the interpreter started
        spinning = busy_cores(0.5)
    finally:
        spin.kill()
        spin.wait(10)
    assert spinning >= 0.5, spinning


SPIN = "import time\nend = time.monotonic() + 10\nwhile time.monotonic() < end:\n    pass\n"


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServerProcess]:
    with ScriptedServerProcess(Script(ttft_s=0.002, itl_s=0.001)) as srv:
        yield srv


def _run(server: ScriptedServerProcess, out: Path, *args: str) -> str:
    res = runner.invoke(
        app,
        [
            *("run", "--url", server.url, "--prompt-tokens", "8", "--output-tokens", "4", "--concurrency", "4"),
            *("--requests", "8", "--no-calibrate", "--out", str(out), *args),
        ],
        env={"COLUMNS": "300"},
    )
    assert res.exit_code == 0, res.output
    return res.output


def test_the_default_says_what_it_chose_and_run_json_keeps_it(server: ScriptedServerProcess, tmp_path: Path) -> None:
    out = _run(server, tmp_path / "auto")
    lines = [line for line in out.splitlines() if line.startswith("workers:")]
    assert len(lines) == 1, out
    assert lines[0] == "workers: 1 process (4 streams × ~50 events/s ≈ 200 events/s, within one worker's ~3,800)"
    info = read_run_info(tmp_path / "auto")
    assert (info.config.workers, info.config.workers_started) == ("auto", 1)
    raw = json.loads((tmp_path / "auto" / "run.json").read_text())["config"]
    assert (raw["workers"], raw["workers_started"]) == ("auto", 1)


def test_workers_1_is_one_process_and_says_nothing(server: ScriptedServerProcess, tmp_path: Path) -> None:
    out = _run(server, tmp_path / "one", "--workers", "1")
    assert not [line for line in out.splitlines() if line.startswith("workers:")], out
    info = read_run_info(tmp_path / "one")
    assert (info.config.workers, info.config.workers_started) == (1, 1)
