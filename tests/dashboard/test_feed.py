"""The dashboard's Feed: loadgen's metric definitions over a sliding window, in virtual time,
and its bounds (series points, ITL samples)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from loadgen.dashboard.feed import ITL_CAP, SERIES, Feed, level_point
from loadgen.metrics.per_request import itl_samples, per_request_frame
from loadgen.records import ErrorKind, RequestRecord

MS = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _rec(i: int, ttft_ms: float, gaps_ms: list[float], tokens: list[int] | None = None, **kw: object) -> RequestRecord:
    sent = 10_000 * MS + i * 1000 * MS
    t = sent + int(ttft_ms * MS)
    events = [[t, 1]]
    for g, n in zip(gaps_ms, tokens or [1] * len(gaps_ms)):
        t += int(g * MS)
        events.append([t, n])
    return RequestRecord(index=i, sent_ns=sent, scheduled_ns=sent, done_ns=t, events=events, **kw)  # type: ignore[arg-type]


def _feed(**kw: object) -> tuple[Feed, Clock]:
    clock = Clock()
    feed = Feed(clock=clock, **kw)  # type: ignore[arg-type]
    feed.start_level(index=0, trial=0, heading="level 1 of 2", target="4 users", requests=20, warmup=2, duration_s=None)
    return feed, clock


def test_a_point_follows_loadgens_definitions() -> None:
    feed, clock = _feed()
    rng = np.random.default_rng(1)
    recs = []
    for i in range(40):
        gaps = list(rng.uniform(1, 30, size=8))
        toks = list(rng.integers(1, 4, size=8))
        recs.append(_rec(i, float(rng.uniform(5, 200)), gaps, [int(k) for k in toks]))
    # coalesced events (same t_ns), an empty event and one out of order: as per_request treats them
    r = recs[0]
    r.events.insert(2, [r.events[1][0], 2])
    r.events.append([r.events[-1][0] + 5 * MS, 0])
    r.events[3], r.events[4] = r.events[4], r.events[3]
    for rec in recs:
        feed.add(rec)
    clock.now += 1.0
    p = feed.tick()["point"]
    frame = per_request_frame(recs)
    ttft = frame["ttft_ms"].to_numpy()
    assert p["ttft_p50"] == pytest.approx(np.percentile(ttft, 50), abs=1e-3)
    assert p["ttft_p99"] == pytest.approx(np.percentile(ttft, 99), abs=1e-3)
    itl = itl_samples(recs)
    assert p["itl_p50"] == pytest.approx(np.percentile(itl, 50), abs=1e-3)
    assert p["itl_p99"] == pytest.approx(np.percentile(itl, 99), abs=1e-3)
    # rates over the time since the level started (1 s, under the 5 s window)
    assert p["out_tok_s"] == pytest.approx(frame["output_tokens"].sum() / 1.0, abs=0.01)
    assert p["req_s"] == pytest.approx(40.0)


def test_warmup_and_failed_records_stay_out_of_latencies_and_errors_count_by_kind() -> None:
    feed, clock = _feed()
    feed.add(_rec(0, 10.0, [5.0]))
    feed.add(_rec(1, 9999.0, [9999.0], warmup=True))
    bad = _rec(2, 5000.0, [5000.0])
    bad.fail(ErrorKind.TIMEOUT, "read timeout", bad.done_ns)
    feed.add(bad)
    lost = _rec(3, 1.0, [])
    lost.fail(ErrorKind.WORKER_LOST, "gone", lost.done_ns)
    feed.add(lost)
    clock.now += 1
    msg = feed.tick()
    p = msg["point"]
    assert p["ttft_p99"] == 10.0 and p["itl_p99"] == 5.0
    assert p["errors"] == {"timeout": 1, "worker_lost": 1}
    assert msg["totals"] == {"done": 3, "failed": 2, "errors": {"timeout": 1, "worker_lost": 1}}
    assert msg["level"]["warm"] == 1 and msg["level"]["done"] == 3 and msg["level"]["failed"] == 2
    assert p["req_s"] == 1.0  # the successful one
    clock.now += 1
    assert feed.tick()["point"]["errors"] == {}  # per tick
    assert feed.snapshot()["totals"]["errors"] == {"timeout": 1, "worker_lost": 1}


def test_the_window_slides_in_virtual_time() -> None:
    feed, clock = _feed(window_s=5.0)
    clock.now += 10  # the level runs for a while: the span is the window
    feed.add(_rec(0, 100.0, [10.0]))
    clock.now += 1
    first = feed.tick()["point"]
    assert first["ttft_p50"] == 100.0 and first["req_s"] == pytest.approx(1 / 5)
    feed.add(_rec(1, 20.0, [2.0]))
    clock.now += 3.9
    both = feed.tick()["point"]
    assert both["ttft_p50"] == pytest.approx(60.0) and both["req_s"] == pytest.approx(2 / 5)
    clock.now += 0.2  # the first record finished 5.1 s ago: out
    only = feed.tick()["point"]
    assert only["ttft_p50"] == 20.0 and only["itl_p99"] == 2.0
    clock.now += 5
    empty = feed.tick()["point"]
    assert empty["ttft_p50"] is None and empty["itl_p50"] is None and empty["req_s"] == 0.0


def test_the_series_stay_bounded_and_keep_every_error() -> None:
    feed, clock = _feed(max_points=64)
    for i in range(5000):
        if i % 7 == 0:
            rec = _rec(i, 1.0, [])
            rec.fail(ErrorKind.HTTP_ERROR, "503", rec.done_ns, 503)
            feed.add(rec)
        clock.now += 1
        feed.tick()
    series = feed.snapshot()["series"]
    assert set(series) == set(SERIES)
    assert {len(v) for v in series.values()} == {len(series["t"])}
    assert 32 <= len(series["t"]) <= 64
    t = series["t"]
    assert t == sorted(t) and t[-1] == pytest.approx(5000.0) and t[0] <= 64  # the whole run, coarser when older
    assert sum(e.get("http_error", 0) for e in series["errors"]) == len(range(0, 5000, 7))


def test_the_itl_sample_is_capped_and_stays_even() -> None:
    feed, clock = _feed()
    rng = np.random.default_rng(2)
    recs = []
    for i in range(600):  # 600 x 300 = 180k samples in one window
        gaps = list(rng.exponential(10.0, size=300) + (50.0 if i % 2 else 0.0))
        recs.append(_rec(i, 10.0, gaps))
        feed.add(recs[-1])
    assert feed._window.held <= ITL_CAP  # the bound itself
    assert feed._window.held >= ITL_CAP // 4
    clock.now += 1
    p = feed.tick()["point"]
    itl = itl_samples(recs)
    # a thinned, even sample: its percentiles near the full sample's (ranks within 1%)
    for q, key in ((50, "itl_p50"), (99, "itl_p99")):
        rank = float(np.mean(itl <= p[key]) * 100)
        assert abs(rank - q) < 1.0, (key, rank)


def test_at_a_high_rate_a_tick_takes_the_gaps_of_a_bounded_number_of_records() -> None:
    """1,000 records a tick: after the first tick only one in 5 gives its gaps (weighted 5),
    every one its TTFT; the percentiles stay those of all the records in the window."""
    feed, clock = _feed()
    rng = np.random.default_rng(3)
    recs = []
    for _tick in range(3):
        for _ in range(1000):
            i = len(recs)
            gaps = list(rng.exponential(10.0, size=20) + (40.0 if i % 3 == 0 else 0.0))
            recs.append(_rec(i, float(rng.uniform(5, 500)), gaps))
            feed.add(recs[-1])
        clock.now += 1
        p = feed.tick()["point"]
    assert feed._window.record_stride == 5
    with_gaps = sum(1 for it in feed._window.items if it[4].size)
    assert with_gaps == 1000 + 2 * 200  # the first tick's all, then 200 a tick
    ttfts = per_request_frame(recs)["ttft_ms"].to_numpy()
    assert p["ttft_p50"] == pytest.approx(float(np.percentile(ttfts, 50)), rel=1e-6)  # TTFT: every record
    itl = itl_samples(recs)
    for q, key in ((50, "itl_p50"), (99, "itl_p99")):
        rank = float(np.mean(itl <= p[key]) * 100)
        assert abs(rank - q) < 1.5, (key, rank)


def test_level_and_run_progress() -> None:
    feed, clock = _feed()
    feed.plan(title="t", api="chat", model="m", url="http://127.0.0.1:1", out="o", levels_planned=2, levels_exact=True)
    for i in range(5):
        feed.add(_rec(i, 1.0, [1.0]))
    clock.now += 10
    snap = feed.snapshot()
    assert snap["run"]["state"] == "running" and snap["run"]["levels_planned"] == 2
    lv = snap["level"]
    assert lv["progress"] == 0.25 and lv["elapsed_s"] == 10.0 and lv["left_s"] == 30.0
    assert snap["progress"] == 0.125
    feed.level_done({"load": {"mode": "concurrency", "value": 4}, "requests": {"ok": 20, "failed": 0}})
    assert feed.snapshot()["progress"] == 0.5 and feed.snapshot()["level"]["progress"] == 1.0
    feed.set_in_flight(lambda: 3)
    msg = feed.tick()
    assert msg["point"]["in_flight"] == 3 and msg["level"]["in_flight"] == 3
    assert [lv["label"] for lv in msg["levels"]] == ["4 users"]
    clock.now += 1
    assert feed.tick()["levels"] == []  # only the new ones
    feed.end("finished", report="o/report.html")
    assert feed.snapshot()["run"]["state"] == "finished" and feed.snapshot()["run"]["report"] == "o/report.html"
    with pytest.raises(ValueError):
        feed.end("exploded")


def test_server_values_are_the_latest_since_the_tick() -> None:
    feed, clock = _feed()
    feed.server_sample({"t_ns": 1, "running": 3.0, "waiting": 1.0, "kv_usage": 0.5, "prefix_hit_rate": None})
    feed.server_sample({"t_ns": 2, "running": 4.0, "waiting": 0.0, "kv_usage": 0.25, "gpu_util": float("nan")})
    feed.loop_lag_ms = 1.23456
    p = feed.tick()["point"]
    assert (p["running"], p["waiting"], p["kv_usage"], p["prefix_hit_rate"], p["gpu_util"]) == (
        4.0,
        0.0,
        0.25,
        None,
        None,
    )
    assert p["loop_lag_ms"] == 1.235
    clock.now += 1
    assert feed.tick()["point"]["running"] is None


def test_a_snapshot_is_strict_json() -> None:
    feed, clock = _feed()
    feed.add(_rec(0, 1.0, [1.0, 2.0]))
    feed.loop_lag_ms = float("inf")
    clock.now += 1
    feed.tick()
    snap = feed.snapshot()
    text = json.dumps(snap, allow_nan=False)
    assert json.loads(text) == snap
    assert not any(
        isinstance(v, float) and not math.isfinite(v) for v in snap["series"]["loop_lag_ms"] if v is not None
    )


def test_a_finished_level_carries_its_client_health() -> None:
    level = {
        "load": {"mode": "rate", "value": 4.0},
        "client": {"verdict": "degraded", "reasons": ["loop lag p99 12 ms", 7, "x" * 500]},
    }
    p = level_point(level, 2)
    assert (p["index"], p["label"], p["client_verdict"]) == (2, "4 req/s", "degraded")
    assert p["client_reasons"] == ["loop lag p99 12 ms", "x" * 200]  # text only, each cut at 200
    assert level_point({"load": {"mode": "concurrency", "value": 1}}, 0)["client_verdict"] is None
