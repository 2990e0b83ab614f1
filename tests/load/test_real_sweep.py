"""A short real sweep against a scripted server that saturates at 4 requests in flight."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from loadgen.load.profiles import Profile
from loadgen.metrics.slo import parse_slo
from loadgen.orchestrate import RunConfig, execute
from loadgen.workload.spec import workload_from_flags
from tests.scripted_server import Script, ScriptedServerProcess


def test_knee_and_capacity_land_where_the_script_puts_them(tmp_path: Path) -> None:
    # up to 4 in flight: TTFT 20 ms, 5 ms gaps. Beyond: +40 ms TTFT per extra request and
    # gaps stretched by in_flight/4, so token throughput stays flat: the knee is at 8 users.
    script = Script(ttft_s=0.020, itl_s=0.005, capacity=4, overload_ttft_s=0.040)
    with ScriptedServerProcess(script) as srv:
        cfg = RunConfig(
            url=srv.url,
            api="completions",
            workload=workload_from_flags("16", "10"),
            profile=Profile(levels=[2, 4, 8], requests=60, warmup_requests=0, trim=(0.0, 0.0)),
            out=tmp_path / "sweep",
            slos=[parse_slo("ttft=100ms")],
            live=False,
        )
        out = io.StringIO()
        outcome = execute(cfg, Console(file=out, width=150))
    s = outcome.summary.to_json()
    levels = s["levels"]
    assert [lv["load"]["value"] for lv in levels] == [2, 4, 8]
    att = [lv["goodput"]["slo_attainment"] for lv in levels]
    assert att[0] == 1.0 and att[1] == 1.0 and att[2] < 0.5
    cap = s["capacity"]
    assert cap["status"] == "ok" and cap["between"] == [4.0, 8.0]
    assert cap["value"] == pytest.approx(4 + (1.0 - 0.9) / (1.0 - att[2]) * 4)
    sat = s["saturation"]
    assert sat["found"] and sat["load"] == 8.0
    text = out.getvalue()
    assert "capacity at ttft=100ms (90% attainment)" in text and "saturation (knee) at 8 users" in text


def test_open_loop_cap_counts_late_and_dropped(tmp_path: Path) -> None:
    # every request takes ~0.3 s; 40 req/s with at most 2 in flight cannot keep up
    with ScriptedServerProcess(Script(ttft_s=0.3, itl_s=0.001)) as srv:
        cfg = RunConfig(
            url=srv.url,
            api="completions",
            workload=workload_from_flags("8", "2"),
            profile=Profile(
                mode="rate", levels=[40], requests=20, arrival="constant", max_in_flight=2, max_lateness_s=0.5
            ),
            out=tmp_path / "late",
            live=False,
        )
        outcome = execute(cfg, Console(file=io.StringIO()))
    lv = outcome.summary.to_json()["levels"][0]
    sched = lv["schedule"]
    sent = lv["requests"]["total"]
    assert sched["scheduled"] == 20 and sched["dropped"] > 0
    assert sent + sched["dropped"] == 20  # every scheduled request is either sent or counted dropped
    wait = sched["credit_wait_ms"]
    assert wait["max"] > 100  # the ones that waited for the cap visibly waited (apart from send lateness)
    assert lv["client"]["send_lateness_ms"]["max"] < wait["max"]


def test_ramp_reports_rising_load_in_time_windows(tmp_path: Path) -> None:
    # 8 users join one by one over 2 s; each request takes ~60 ms
    with ScriptedServerProcess(Script(ttft_s=0.02, itl_s=0.01)) as srv:
        cfg = RunConfig(
            url=srv.url,
            api="completions",
            workload=workload_from_flags("8", "4"),
            profile=Profile(kind="ramp", levels=[8], duration_s=2.0, requests=None, window_s=0.5),
            out=tmp_path / "ramp",
            live=False,
        )
        outcome = execute(cfg, Console(file=io.StringIO()))
    (level,) = outcome.summary.to_json()["levels"]
    wins = level["windows"]
    assert len(wins) >= 4
    in_flight = [w["in_flight_mean"] for w in wins[:4]]
    assert in_flight == sorted(in_flight) and in_flight[3] > 2 * in_flight[0]
    assert sum(w["requests"] for w in wins) == level["requests"]["total"]
