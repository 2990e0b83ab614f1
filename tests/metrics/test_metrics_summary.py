"""summarize_level(): exact values on a hand-built level, and the JSON contract.

The level's ``to_json()`` is what ``summary.json`` holds, so most tests read that dict;
``test_typed_attributes_are_the_json_values`` ties the attributes to it."""

from __future__ import annotations

import json

import pytest

from loadgen.errors import ConfigError
from loadgen.metrics.results import LevelSummary
from loadgen.metrics.slo import parse_slo
from loadgen.metrics.stats import describe
from loadgen.metrics.summary import summarize_level as summarize_typed
from loadgen.records import ErrorKind, TokenSource
from tests.metrics.helpers import rec

LOAD = {"mode": "concurrency", "value": 4}
SLOS = [parse_slo("ttft=200ms"), parse_slo("tpot=30ms"), parse_slo("ttft:p50=150ms")]


def summarize_level(records, **kw):
    return summarize_typed(records, **kw).to_json()


def points(dist):
    """A distribution's statistics without their intervals (what ``describe`` gives)."""
    return {k: v for k, v in dist.items() if k != "intervals"}


def level():
    return [
        rec(
            0,
            [(100, 1), (120, 1), (160, 2)],
            done=170,
            request_class="chat",
            prompt_tokens=30,
            target_prompt=32,
            target_output=4,
        ),
        rec(
            1,
            [(310, 1), (310, 1), (400, 1)],
            sent=10,
            scheduled=0,
            done=410,
            request_class="chat",
            target_prompt=40,
            target_output=3,
            token_source=TokenSource.EVENTS_CORRECTED,
        ),
        rec(2, [(70, 1)], sent=20, done=80, request_class="rag", prompt_tokens=100, target_prompt=100, target_output=8),
        rec(3, [], sent=30, done=60, request_class="rag", target_prompt=50, target_output=2),
        rec(4, [(45, 1), (46, 1)], sent=40, done=1000, request_class="chat", status=ErrorKind.TIMEOUT),
        rec(5, [], sent=50, done=55, request_class="chat", status=ErrorKind.HTTP_ERROR),
    ]


def warmup():
    return [rec(99, [(-400, 1), (1500, 3)], sent=-500, done=2000, warmup=True, request_class="warm")]


@pytest.fixture
def summary():
    return summarize_level(level() + warmup(), load=LOAD, slos=SLOS, loop_lag_ms=[1.0, 2.0, 3.0], trim=(0.1, 0.1))


def test_shape_is_the_public_contract(summary):
    assert list(summary) == [
        "load",
        "requests",
        "duration_s",
        "throughput",
        "goodput",
        "ttft_ms",
        "ttft_queued_ms",
        "itl_ms",
        "inter_chunk_ms",
        "tpot_ms",
        "e2e_ms",
        "e2e_queued_ms",
        "prompt_tokens",
        "output_tokens",
        "lengths",
        "events",
        "by_class",
        "client",
        "interrupted",
        "steady_state",
        "mlperf",
    ]
    assert set(summary["steady_state"]) == {
        "warmup_cut",
        "warmup_applied",
        "warmup_found",
        "stationary",
        "ttft",
        "e2e",
        "reasons",
    }
    assert set(summary["mlperf"][0]) == {
        "slo",
        "metric",
        "bound_ms",
        "percentile",
        "confidence",
        "passed",
        "n",
        "overlatency",
        "min_queries",
        "more_needed",
        "estimate_ms",
    }
    assert set(summary["throughput"]) == {
        "requests_per_s",
        "output_tokens_per_s",
        "total_tokens_per_s",
        "steady",
        "output_tokens_per_s_se",
        "intervals",
        "window",
        "whole",
    }
    assert set(summary["throughput"]["window"]) == {"rule", "start_s", "end_s", "note"}  # 4 users never held
    assert set(summary["throughput"]["whole"]) == {
        "window_s",
        "requests_per_s",
        "output_tokens_per_s",
        "total_tokens_per_s",
        "intervals",
    }
    assert set(summary["throughput"]["intervals"]) == {"requests_per_s", "output_tokens_per_s"}
    assert set(summary["throughput"]["steady"]) == {
        "window_s",
        "requests_per_s",
        "output_tokens_per_s",
        "total_tokens_per_s",
    }
    assert set(summary["goodput"]) == {
        "requests_per_s",
        "slo_attainment",
        "slos",
        "checks",
        "intervals",
        "whole_requests_per_s",
    }
    assert set(summary["goodput"]["intervals"]) == {"slo_attainment", "requests_per_s"}
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        assert set(summary[key]["intervals"]) == {"mean", "p50", "p90", "p95", "p99", "p99.9"}
    for key in ("ttft_queued_ms", "inter_chunk_ms", "e2e_queued_ms", "prompt_tokens", "output_tokens"):
        assert "intervals" not in summary[key]
    assert set(summary["events"]) == {"tokens_per_event", "coalesced_events", "token_source"}
    assert set(summary["client"]) == {"loop_lag_ms", "send_lateness_ms", "verdict", "reasons"}
    json.dumps(summary, allow_nan=False)


def test_requests_window_and_throughput(summary):
    assert summary["load"] == LOAD
    assert summary["requests"] == {
        "total": 6,
        "ok": 4,
        "failed": 2,
        "by_error": {"http_error": 1, "timeout": 1},
        "retried": 0,
    }
    assert summary["duration_s"] == 1.0  # first send (0) to last completion (1000 ms)
    thr = summary["throughput"]
    assert thr["requests_per_s"] == 4.0
    assert thr["output_tokens_per_s"] == 8.0  # 4 + 3 + 1 + 0
    assert thr["total_tokens_per_s"] == 228.0  # + prompts 30 (reported) + 40 (target) + 100 + 50 (target)


def test_steady_window(summary):
    steady = summary["throughput"]["steady"]  # [100 ms, 900 ms]
    assert steady["window_s"] == pytest.approx(0.8)
    assert steady["requests_per_s"] == pytest.approx(2 / 0.8)  # the two completing inside
    assert steady["output_tokens_per_s"] == pytest.approx(7 / 0.8)  # events inside
    assert steady["total_tokens_per_s"] == pytest.approx((7 + 30 + 40) / 0.8)


def test_goodput_and_checks(summary):
    good = summary["goodput"]
    assert good["slo_attainment"] == pytest.approx(2 / 6)  # requests 0 and 2
    assert good["requests_per_s"] == 2.0
    assert good["slos"] == ["ttft=200ms", "tpot=30ms"]
    assert good["checks"] == [{"slo": "ttft:p50=150ms", "value_ms": 100.0, "pass": True}]


def test_latencies_come_from_ok_requests_only(summary):
    assert points(summary["ttft_ms"]) == describe([100, 300, 50])
    assert summary["ttft_queued_ms"] == describe([100, 310, 50])
    assert points(summary["itl_ms"]) == describe([20, 20, 20, 90])
    assert summary["inter_chunk_ms"] == describe([20, 40, 90])
    assert points(summary["tpot_ms"]) == describe([20, 45])
    assert points(summary["e2e_ms"]) == describe([170, 400, 60, 30])
    assert summary["e2e_queued_ms"] == describe([170, 410, 60, 30])
    assert summary["prompt_tokens"] == describe([30, 40, 100, 50])
    assert summary["output_tokens"] == describe([4, 3, 1, 0])


def test_lengths_events_and_classes(summary):
    assert summary["lengths"] == {
        "prompt_target_mean": 55.5,
        "prompt_achieved_mean": 65.0,
        "output_target_mean": 4.25,
        "output_achieved_mean": 2.0,
    }
    events = summary["events"]
    assert events["tokens_per_event"] == pytest.approx(describe([1, 1, 2, 1, 1, 1, 1]), rel=1e-12)
    assert events["coalesced_events"] == 1
    assert events["token_source"] == {"events": 3, "events_corrected": 1}
    by_class = summary["by_class"]
    assert list(by_class) == ["chat", "rag"]
    assert by_class["chat"] == {
        "requests": 4,
        "ttft_ms": describe([100, 300]),
        "tpot_ms": describe([20, 45]),
        "itl_ms": describe([20, 20, 20, 90]),
        "e2e_ms": describe([170, 400]),
    }
    assert by_class["rag"] == {
        "requests": 2,
        "ttft_ms": describe([50]),
        "tpot_ms": describe([]),
        "itl_ms": describe([]),
        "e2e_ms": describe([60, 30]),
    }


def test_single_class_repeats_the_level():
    s = summarize_level(level()[:2], load=LOAD)
    assert s["by_class"] == {
        "chat": {
            "requests": 2,
            "ttft_ms": points(s["ttft_ms"]),
            "tpot_ms": points(s["tpot_ms"]),
            "itl_ms": points(s["itl_ms"]),
            "e2e_ms": points(s["e2e_ms"]),
        }
    }


def test_warmup_records_change_nothing():
    kw = {"load": LOAD, "slos": SLOS, "trim": (0.1, 0.1)}
    warm, plain = summarize_level(level() + warmup(), **kw), summarize_level(level(), **kw)
    # but the note on the throughput window: neither level held its load, and with the warm-up
    # request still in flight at the end (done at 2 s) the note names it
    notes = [lv["throughput"]["window"].pop("note") for lv in (warm, plain)]
    assert notes[0].startswith("a warm-up request ended at 2.00 s") and notes[1].startswith("no request completed")
    assert warm == plain


def test_no_slos_attainment_is_the_ok_fraction():
    good = summarize_level(level(), load=LOAD)["goodput"]
    att = good.pop("intervals")["slo_attainment"]
    assert good == {
        "requests_per_s": 4.0,
        "whole_requests_per_s": 4.0,
        "slo_attainment": pytest.approx(4 / 6),
        "slos": [],
        "checks": [],
    }
    assert 0 <= att["low"] < 4 / 6 < att["high"] <= 1 and att["n_eff"] <= 6


def test_client_verdict(summary):
    client = summary["client"]
    assert client["loop_lag_ms"] == describe([1, 2, 3])
    assert client["send_lateness_ms"] == describe([0, 10, 0, 0, 0, 0])  # p99 9.5 <= 10
    assert (client["verdict"], client["reasons"]) == ("ok", [])

    lagging = summarize_level(level(), load=LOAD, loop_lag_ms=[1.0] * 98 + [50.0, 50.0])["client"]
    assert lagging["verdict"] == "client-bound"
    assert len(lagging["reasons"]) == 1 and "loop lag p99 50 ms > 10 ms" in lagging["reasons"][0]

    late = [rec(i, [(100, 1)], sent=20, scheduled=0) for i in range(3)]
    s = summarize_level(late, load=LOAD, client_bound_ms=15.0)["client"]
    assert s["verdict"] == "client-bound" and "send lateness p99 20 ms > 15 ms" in s["reasons"][0]
    assert summarize_level(late, load=LOAD, client_bound_ms=25.0)["client"]["verdict"] == "ok"

    empty = summarize_level([], load=LOAD)["client"]
    assert (empty["verdict"], empty["reasons"]) == ("ok", [])


def test_a_silent_worker_makes_the_level_client_bound():
    """The coordinator's silences: in the worker's own health when it has one (it came
    back), at the level otherwise (it was lost); the other worker stays ok."""
    from loadgen.metrics.client import WorkerStats

    stats = [WorkerStats(worker=w, share=w, n_shares=3, loop_lag_ms=[1.0], cpu_s=0.1, wall_s=1.0) for w in (0, 1)]
    s = summarize_level(level(), load=LOAD, workers=stats, lost_workers=[2], silent_workers={1: 4.26, 2: 7.0})
    client = s["client"]
    assert client["verdict"] == "client-bound"
    by_worker = {wh["worker"]: wh for wh in client["workers"]}
    assert by_worker[0]["verdict"] == "ok" and by_worker[1]["verdict"] == "client-bound"
    assert by_worker[1]["reasons"][0].startswith("sent nothing for 4.3 s during the level")
    assert [r.split(" during")[0] for r in client["reasons"] if "sent nothing" in r] == [
        "worker 1: sent nothing for 4.3 s",
        "worker 2: sent nothing for 7.0 s",
    ]
    assert summarize_level(level(), load=LOAD, workers=stats)["client"]["verdict"] == "ok"


def _plain(obj):
    if isinstance(obj, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in obj.items())
    if isinstance(obj, list):
        return all(_plain(v) for v in obj)
    return obj is None or type(obj) in (int, float, str, bool)


def never_done():
    r = rec(0, [], status=ErrorKind.CANCELLED)
    r.done_ns = 0
    return [r]


@pytest.mark.parametrize(
    "records",
    [[], [rec(0, [(5, 1)], status=ErrorKind.CANCELLED)], warmup(), never_done()],
    ids=["empty", "all-failed", "only-warmup", "never-done"],
)
def test_degenerate_levels_are_json_ready(records):
    s = summarize_level(records, load=LOAD, slos=SLOS, trim=(0.2, 0.2))
    assert _plain(s)
    json.dumps(s, allow_nan=False)
    assert s["ttft_ms"]["count"] == 0
    assert s["goodput"]["checks"][0]["pass"] is False


def test_values_are_plain_python(summary):
    assert _plain(summary)
    assert type(summary["requests"]["total"]) is int and type(summary["duration_s"]) is float


def test_empty_level_values():
    s = summarize_level([], load=LOAD)
    assert s["requests"] == {"total": 0, "ok": 0, "failed": 0, "by_error": {}, "retried": 0}
    assert s["duration_s"] == 0.0 and s["throughput"]["requests_per_s"] is None
    assert s["goodput"]["slo_attainment"] is None and s["by_class"] == {}


@pytest.mark.parametrize("trim", [(-0.1, 0.0), (0.5, 0.5), (0.0, 1.2)])
def test_bad_trim(trim):
    with pytest.raises(ConfigError, match="trim"):
        summarize_level(level(), load=LOAD, trim=trim)


def test_one_token_chunks_itl_equals_inter_chunk_and_classes_stay_aligned():
    records = [
        rec(0, [(100, 1), (130, 1), (200, 1)], request_class="chat"),
        rec(1, [(50, 1), (60, 1)], request_class="rag"),
        rec(2, [(10, 1), (500, 1)], request_class="chat", status=ErrorKind.TIMEOUT),
        rec(3, [(5, 1), (400, 1)], request_class="rag"),
    ]
    s = summarize_level(records, load=LOAD)
    assert points(s["itl_ms"]) == s["inter_chunk_ms"] == describe([30, 70, 10, 395])
    assert s["by_class"]["chat"]["itl_ms"] == describe([30, 70])
    assert s["by_class"]["rag"]["itl_ms"] == describe([10, 395])
    assert s["by_class"]["chat"]["requests"] == 2


def test_typed_attributes_are_the_json_values():
    typed = summarize_typed(level() + warmup(), load=LOAD, slos=SLOS, loop_lag_ms=[1.0, 2.0, 3.0], trim=(0.1, 0.1))
    js = typed.to_json()
    assert isinstance(typed, LevelSummary)
    assert typed.ttft_ms.p50 == js["ttft_ms"]["p50"] and typed.itl_ms.p99_9 == js["itl_ms"]["p99.9"]
    assert typed.goodput.checks[0].passed is js["goodput"]["checks"][0]["pass"]
    assert typed.by_class["chat"].requests == js["by_class"]["chat"]["requests"]
    assert typed.metric("ttft_ms.p99") == js["ttft_ms"]["p99"]
    assert typed.metric("throughput.steady.output_tokens_per_s") == js["throughput"]["steady"]["output_tokens_per_s"]
    assert typed.metric("ttft_ms.p42") is None and typed.metric("nothing.here") is None
    assert LevelSummary.from_json(js) == typed


def test_clock_uncertainty_is_kept_and_over_1_ms_noted_without_a_client_bound_verdict():
    sure = summarize_level(level(), load=LOAD, clock_uncertainty_ms=0.4)["client"]
    assert sure["clock_uncertainty_ms"] == 0.4 and "notes" not in sure
    unsure = summarize_level(level(), load=LOAD, clock_uncertainty_ms=2.5)["client"]
    assert unsure["verdict"] == "ok" and len(unsure["notes"]) == 1 and "±2.5 ms" in unsure["notes"][0]


def test_lost_workers_make_the_level_partial():
    client = summarize_level(level(), load=LOAD, lost_workers=[1])["client"]
    assert client["lost_workers"] == [1] and any("partial" in r for r in client["reasons"])


def test_mlperf_counts_every_measured_request_and_failures_as_over(summary):
    """ttft=200ms: requests 0 and 2 within, 1 (300 ms) over, 3 (no token), 4 and 5 (failed)
    over; tpot=30ms: only requests 0 and 1 have a TPOT (20 and 45 ms), the rest are left
    out (failed ones count, over); the level-wide ``ttft:p50`` has no MLPerf verdict."""
    from loadgen.metrics.mlperf import early_stopping_min_queries

    ttft, tpot = summary["mlperf"]
    assert (ttft["slo"], ttft["n"], ttft["overlatency"]) == ("ttft=200ms", 6, 4)
    assert ttft["min_queries"] == early_stopping_min_queries(0.99, 0.99, 4)
    assert ttft["passed"] is False and ttft["more_needed"] == ttft["min_queries"] - 6
    assert (tpot["slo"], tpot["n"], tpot["overlatency"]) == ("tpot=30ms", 4, 3)


def test_no_per_request_slo_no_mlperf_verdict():
    out = summarize_level(level(), load=LOAD, slos=[parse_slo("ttft:p50=150ms")])
    assert "mlperf" not in out and out["steady_state"]["ttft"]["batches"] == 0
