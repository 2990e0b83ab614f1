"""The headline rates are over the window in which the load was held; the whole window's
stay beside them (docs/metrics.md, "Throughput windows"). Hand-built levels in virtual
time: a closed loop whose users run out of work at different times (a drain tail), an
open loop whose last request is slow, and the levels that hold no load."""

from __future__ import annotations

import dataclasses

import pytest

from loadgen.metrics.results import LevelSummary, RunSummary
from loadgen.metrics.slo import parse_slo
from loadgen.metrics.summary import summarize_level
from loadgen.records import ErrorKind, RequestRecord
from tests.metrics.helpers import rec

TICK = 10.0  # ms between two events of a request, one token each


def _request(index: int, user: int, sent: float, done: float) -> RequestRecord:
    events = [(sent + k * TICK, 1) for k in range(1, round((done - sent) / TICK) + 1)]
    return dataclasses.replace(rec(index, events, sent=sent, done=done, target_prompt=5), worker=user)


def _closed_loop(durations: list[list[float]]) -> list[RequestRecord]:
    """Users sending back to back from 0 ms, user ``u`` requests lasting ``durations[u]`` ms."""
    out = []
    for user, ds in enumerate(durations):
        t = 0.0
        for d in ds:
            out.append(_request(len(out), user, t, t + d))
            t += d
    return out


def _inside(rate: float, interval: object) -> bool:
    low, high = getattr(interval, "low", None), getattr(interval, "high", None)
    return low is not None and high is not None and low <= rate <= high


def test_a_closed_loop_headline_is_the_held_window_and_the_whole_window_is_kept() -> None:
    # user 0: ten 100 ms requests (out of work at 1,000 ms); user 1: five, then one of 3,000 ms (the drain tail)
    recs = _closed_loop([[100.0] * 10, [100.0] * 5 + [3000.0]])
    level = summarize_level(recs, load={"mode": "concurrency", "value": 2})
    tp = level.throughput
    assert tp.window is not None and (tp.window.rule, tp.window.start_s, tp.window.end_s) == ("held", 0.0, 1.0)
    # completions in (0, 1 s]: user 0's ten and user 1's five; tokens streamed in it: 100 + 50 + 50 of the long one
    assert tp.requests_per_s == pytest.approx(15 / 1.0)
    assert tp.output_tokens_per_s == pytest.approx(200 / 1.0)
    assert tp.total_tokens_per_s == pytest.approx((200 + 15 * 5) / 1.0)
    assert tp.whole is not None and tp.whole.window_s == pytest.approx(3.5) == level.duration_s
    assert tp.whole.requests_per_s == pytest.approx(16 / 3.5)
    assert tp.whole.output_tokens_per_s == pytest.approx(450 / 3.5)
    ivs = tp.intervals or {}
    assert _inside(15.0, ivs.get("requests_per_s")) and _inside(200.0, ivs.get("output_tokens_per_s"))
    assert _inside(16 / 3.5, (tp.whole.intervals or {}).get("requests_per_s"))
    # goodput follows the same window: every request meets a generous SLO
    good = summarize_level(recs, load={"mode": "concurrency", "value": 2}, slos=[parse_slo("e2e=10s")]).goodput
    assert good.requests_per_s == pytest.approx(15.0) and good.whole_requests_per_s == pytest.approx(16 / 3.5)
    assert _inside(15.0, (good.intervals or {}).get("requests_per_s"))


def test_the_headline_does_not_depend_on_the_run_length() -> None:
    """The same server (every request 100 ms) for a short and a long run, user 1 with 2 s more
    work than user 0 (a drain tail): the whole-window rate moves with the run's length, the
    headline stays the server's 20 req/s."""
    short = _closed_loop([[100.0] * 10, [100.0] * 30])
    long = _closed_loop([[100.0] * 40, [100.0] * 60])
    rates = [summarize_level(r, load={"mode": "concurrency", "value": 2}).throughput for r in (short, long)]
    assert [t.requests_per_s for t in rates] == [pytest.approx(20.0), pytest.approx(20.0)]
    whole = [t.whole.requests_per_s if t.whole else None for t in rates]
    assert whole == [pytest.approx(40 / 3.0), pytest.approx(100 / 6.0)]


def test_a_closed_loop_window_opens_when_the_warm_up_is_over() -> None:
    """User 0 spends 0–300 ms on a warm-up request while user 1 is already measured: the
    window opens at 300 ms, when every request in flight is a measured one."""
    warm = dataclasses.replace(_request(99, 0, 0.0, 300.0), warmup=True)
    recs = _closed_loop([[], [100.0] * 10])
    recs += [_request(50 + k, 0, 300.0 + 100.0 * k, 400.0 + 100.0 * k) for k in range(7)]
    tp = summarize_level([warm, *recs], load={"mode": "concurrency", "value": 2}).throughput
    assert tp.window is not None and (tp.window.start_s, tp.window.end_s) == (0.3, 1.0)
    assert tp.requests_per_s == pytest.approx(14 / 0.7)  # 400 … 1,000 ms: seven per user


def test_an_open_loop_headline_is_its_arrival_window() -> None:
    """Arrivals every 100 ms from 0 to 1,900 ms (10 req/s), each answered in 250 ms but the
    last, in 3,000 ms. The arrival window starts one fill time (E2E p90: 250 ms) after the
    first arrival and ends at the last: 250–1,900 ms."""
    recs = [_request(i, 0, 100.0 * i, 100.0 * i + (3000.0 if i == 19 else 250.0)) for i in range(20)]
    level = summarize_level(recs, load={"mode": "rate", "value": 10.0}, scheduled=20)
    tp = level.throughput
    assert tp.window is not None and tp.window.rule == "arrivals"
    assert (tp.window.start_s, tp.window.end_s) == (pytest.approx(0.25), pytest.approx(1.9))
    # completions at 350 … 1,850 ms; tokens: 10 + 20 (sent at 100, 200) + 14 × 25 + 20 + 10 (sent at 1,700, 1,800)
    assert tp.requests_per_s == pytest.approx(16 / 1.65)
    assert tp.output_tokens_per_s == pytest.approx(410 / 1.65)
    assert tp.whole is not None and tp.whole.requests_per_s == pytest.approx(20 / 4.9)
    # the server's steady rates are 10 req/s and 250 tok/s: the headline is near them, the whole window is not
    assert 0.95 < tp.requests_per_s / 10.0 < 1.0 and 0.95 < (tp.output_tokens_per_s or 0) / 250.0 < 1.0
    assert tp.whole.requests_per_s is not None and tp.whole.requests_per_s / 10.0 < 0.5


@pytest.mark.parametrize(
    ("recs", "users", "why"),
    [
        (_closed_loop([[100.0, 200.0]]), 4, "2 request(s) for 4 users: the load was never held"),
        (
            [dataclasses.replace(_request(0, 0, 0.0, 100.0), status=ErrorKind.HTTP_ERROR), _request(1, 1, 0.0, 200.0)],
            2,
            "no request completed inside the held window",
        ),
        (  # user 0's warm-up outlasts user 1's measured work
            [dataclasses.replace(_request(9, 0, 0.0, 2000.0), warmup=True), *_closed_loop([[], [100.0] * 10])[:10]],
            2,
            "a warm-up request ended at 2.00 s, after the first user ran out of work: no measured load was held",
        ),
    ],
)
def test_a_level_that_held_no_load_says_so_and_keeps_the_whole_window(
    recs: list[RequestRecord], users: int, why: str
) -> None:
    tp = summarize_level(recs, load={"mode": "concurrency", "value": users}).throughput
    assert tp.window is not None and tp.window.rule == "whole" and tp.window.note is not None
    assert tp.window.note.startswith(why)
    assert tp.whole is not None and tp.requests_per_s == tp.whole.requests_per_s is not None


def test_the_window_round_trips_and_a_file_before_it_reads_as_the_whole_window() -> None:
    level = summarize_level(
        _closed_loop([[100.0] * 10, [100.0] * 5 + [3000.0]]), load={"mode": "concurrency", "value": 2}
    )
    data = RunSummary(levels=[level]).to_json()
    assert data["levels"][0]["throughput"]["window"] == {"rule": "held", "start_s": 0.0, "end_s": 1.0}
    assert RunSummary.from_json(data).levels[0] == level
    old = data["levels"][0]
    old["throughput"] = {k: v for k, v in old["throughput"].items() if k not in ("window", "whole")}
    del old["goodput"]["whole_requests_per_s"]
    back = LevelSummary.from_json(old)
    assert back.throughput.window is None
    assert back.throughput.whole_rates(back.duration_s).requests_per_s == level.throughput.requests_per_s
