"""Steady state and MLPerf verdicts on real levels: a server with a cold start gets its
warm-up cut, an open loop above the simulator's capacity is non-stationary and fails the
capacity search, and the MLPerf counts are LoadGen's."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from rich.console import Console

from loadgen.load.profiles import Profile
from loadgen.metrics.mlperf import early_stopping_min_queries
from loadgen.metrics.slo import parse_slo
from loadgen.metrics.summary import summarize_level
from loadgen.orchestrate import RunConfig, execute
from loadgen.report.files import read_records
from loadgen.report.html import render_run_report
from loadgen.server.process import ServerProcess
from loadgen.workload.spec import workload_from_flags
from tests.scripted_server import Script, ScriptedServerProcess


def test_a_cold_start_is_cut_and_mlperf_counts_are_loadgens(tmp_path: Path) -> None:
    # one user, 100 requests; the first 20 wait up to 150 ms more for their first token, and
    # every one up to 20 ms more at random (a steady state with noise of its own, not only the machine's)
    script = Script(ttft_s=0.01, itl_s=0.002, cold_requests=20, cold_ttft_s=0.15, ttft_jitter_s=0.02)
    prof = Profile(levels=[1], requests=100, auto_warmup=True, mlperf_percentile=0.9, mlperf_confidence=0.95)
    with ScriptedServerProcess(script) as srv:
        cfg = RunConfig(
            url=srv.url,
            api="completions",
            workload=workload_from_flags("8", "4"),
            profile=prof,
            out=tmp_path / "cold",
            slos=[parse_slo("ttft=40ms")],
            live=False,
        )
        out = io.StringIO()
        outcome = execute(cfg, Console(file=out, width=200))
    level = outcome.summary.levels[0]
    ss = level.steady_state
    assert ss is not None and ss.warmup_applied and ss.stationary
    assert 15 <= ss.warmup_cut <= 35  # the cold requests, in batches of 5; no more than a few steady ones
    assert level.requests.total == 100 - ss.warmup_cut
    # the same records without the cut: the cold TTFTs are what the cut removed
    records = list(read_records(tmp_path / "cold"))
    uncut = summarize_level(records, load=level.load, slos=[parse_slo("ttft=40ms")])
    assert uncut.steady_state is not None and not uncut.steady_state.warmup_applied
    assert uncut.steady_state.warmup_cut == ss.warmup_cut
    assert uncut.ttft_ms.max is not None and level.ttft_ms.max is not None
    assert level.ttft_ms.max < 0.5 * uncut.ttft_ms.max
    # MLPerf: every measured request is a query, those over 40 ms (or failed) the overlatency ones
    (m,) = level.mlperf or []
    kept = [r for r in records if not r.warmup][ss.warmup_cut :]
    over = sum(1 for r in kept if not r.ok or not r.events or (r.events[0][0] - r.sent_ns) / 1e6 > 40.0)
    assert (m.slo, m.n, m.overlatency) == ("ttft=40ms", len(kept), over)
    assert m.min_queries == early_stopping_min_queries(0.9, 0.95, over)
    assert m.passed == (len(kept) >= m.min_queries)
    # the verdict is printed where it decides (met, or failed: too many over), else one line says so
    decided = "MLPerf early stopping (95% confidence): TTFT p90 ≤ 40 ms: "
    assert m.outcome in ("met", "failed", "undecided")
    if m.outcome == "undecided":
        assert decided not in out.getvalue() and "MLPerf early stopping: undecided at its level" in out.getvalue()
    else:
        assert decided + f"{m.outcome} (" in out.getvalue()


def test_an_overloaded_open_loop_is_non_stationary_and_fails_the_capacity_search(tmp_path: Path) -> None:
    # two sequences at once: the simulated server completes about 35 requests/s at this time scale
    server = ["--engine", "sim", "--gpu", "h100", "--model", "llama-3.1-8b", "--max-num-seqs", "2"]
    prof = Profile(
        kind="capacity",
        mode="rate",
        rate_low=12.0,
        rate_high=96.0,
        max_levels=4,  # one more: an undecided 12 req/s (correlated under CPU load) is run again
        requests=60,
        arrival="constant",
    )
    with ServerProcess([*server, "--time-scale", "0.25"]) as url:
        cfg = RunConfig(
            url=url,
            api="completions",
            workload=workload_from_flags("64", "32"),
            profile=prof,
            out=tmp_path / "cap",
            slos=[parse_slo("ttft=60s")],  # every request meets it: only the trend can fail a level
            live=False,
        )
        out = io.StringIO()
        outcome = execute(cfg, Console(file=out, width=200))
    loads = [lv.load.value for lv in outcome.summary.levels]
    # 96 failed: bisect, not double (12 may be run twice: undecided, then with twice the requests)
    assert [v for k, v in enumerate(loads) if k == 0 or v != loads[k - 1]] == [12.0, 96.0, 54.0], loads
    by_load = {lv.load.value: lv for lv in outcome.summary.levels}  # a load run twice: its last run counts
    low, high = by_load[12.0], by_load[96.0]
    assert not by_load[54.0].stationary  # the bisection's level: overloaded too
    assert low.stationary and low.goodput.slo_attainment == 1.0
    assert high.goodput.slo_attainment == 1.0 and not high.stationary
    assert high.steady_state is not None and high.steady_state.ttft.metric == "ttft_queued_ms"
    drift = high.steady_state.ttft.drift
    assert drift is not None and drift > 0.2
    assert any(r.startswith("ttft_queued_ms: batch medians rise") for r in high.steady_state.reasons)
    cap = outcome.summary.capacity
    assert cap is not None and cap.status == "ok" and cap.between == [12.0, 54.0]
    # 54 req/s is shown to fail (non-stationary); 12 req/s, every request met, is shown to pass
    # unless its latencies' correlation (CPU load) keeps its attainment interval below 90%
    assert cap.interval is not None and cap.interval[1] == 54.0 and cap.interval[0] in (12.0, None)
    text = out.getvalue()
    assert "96 req/s: non-stationary: ttft_queued_ms: batch medians rise" in text
    assert "shown to fail at 54 req/s" in text
    page = render_run_report(tmp_path / "cap").read_text(encoding="utf-8")
    assert 'id="steady-verdict"' in page and f"level {loads.index(96.0) + 1} (96 req/s): non-stationary" in page
    queued = np.array([lv.ttft_queued_ms.p50 or 0.0 for lv in (low, high)])
    assert queued[1] > 10 * queued[0]  # the queue the trend test saw
