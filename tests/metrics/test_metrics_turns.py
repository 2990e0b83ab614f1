"""by_turn, sessions and reasoning entries of a level summary, from hand-made records."""

from __future__ import annotations

import pytest

from loadgen.metrics import LevelSummary, summarize_level
from loadgen.records import ErrorKind, RequestRecord

MS = 1_000_000


def _rec(
    i: int,
    session: int | None,
    turn: int,
    turns: int,
    ttft_ms: int,
    gaps_ms: list[int],
    reasoning: int = 0,
    ok: bool = True,
) -> RequestRecord:
    sent = 10**12 + i * 1000 * MS
    t = sent + ttft_ms * MS
    events = [[t, 1]]
    for g in gaps_ms:
        t += g * MS
        events.append([t, 1])
    rec = RequestRecord(
        index=i,
        sent_ns=sent,
        scheduled_ns=sent,
        done_ns=t + MS,
        events=events,
        session=session,
        turn=turn,
        turns=turns,
        completion_tokens=len(events),
        prompt_tokens=100 * max(turn, 1),
        reasoning_tokens=reasoning,
        first_answer_ns=events[reasoning][0] if reasoning < len(events) else 0,
    )
    if not ok:
        rec.fail(ErrorKind.HTTP_ERROR, "boom", t + MS, 500)
    return rec


def _summary(records: list[RequestRecord]) -> LevelSummary:
    return summarize_level(records, load={"mode": "concurrency", "value": 2})


def test_by_turn_and_sessions() -> None:
    records = [
        _rec(0, 7, 1, 3, 100, [10, 10]),
        _rec(1, 7, 2, 3, 20, [10, 10]),
        _rec(2, 7, 3, 3, 30, [10, 10]),
        _rec(3, 8, 1, 3, 120, [20, 20]),
        _rec(4, 8, 2, 3, 40, [20, 20]),
        _rec(5, 8, 3, 3, 50, [20], ok=False),
        _rec(6, 9, 1, 2, 140, [30]),  # cut short: its turn 2 never ran
    ]
    lv = _summary(records)
    assert lv.by_turn is not None and lv.sessions is not None
    assert sorted(lv.by_turn) == ["1", "2", "3"]
    assert [lv.by_turn[t].requests for t in ("1", "2", "3")] == [3, 2, 2]
    assert lv.by_turn["1"].ttft_ms.p50 == pytest.approx(120) and lv.by_turn["2"].ttft_ms.p50 == pytest.approx(30)
    assert lv.by_turn["3"].ttft_ms.count == 1 and lv.by_turn["3"].ttft_ms.p50 == pytest.approx(30)  # ok ones only
    assert lv.by_turn["1"].itl_ms.count == 5 and lv.by_turn["3"].itl_ms.count == 2
    assert lv.by_turn["2"].itl_ms.p50 == pytest.approx(15)
    assert lv.by_turn["2"].prompt_tokens.p50 == pytest.approx(200)
    assert (lv.sessions.sessions, lv.sessions.completed) == (3, 1)
    assert lv.sessions.turns_per_session.max == 3 and lv.sessions.turns_per_session.min == 1
    assert lv.reasoning is None
    back = LevelSummary.from_json(lv.to_json())
    assert back == lv and "by_turn" in lv.to_json() and "reasoning" not in lv.to_json()


def test_levels_without_sessions_or_reasoning_leave_the_keys_out() -> None:
    lv = _summary([_rec(0, None, 0, 0, 50, [5, 5]), _rec(1, None, 0, 0, 60, [5, 5])])
    assert lv.by_turn is None and lv.sessions is None and lv.reasoning is None
    assert not {"by_turn", "sessions", "reasoning"} & set(lv.to_json())


def test_reasoning_split_and_time_to_first_answer() -> None:
    lv = _summary([_rec(0, None, 0, 0, 50, [5, 5, 5, 5], reasoning=3), _rec(1, None, 0, 0, 70, [5, 5, 5, 5])])
    r = lv.reasoning
    assert r is not None and r.requests == 1
    assert r.reasoning_tokens.max == 3 and r.reasoning_tokens.min == 0
    assert r.answer_tokens.min == 2 and r.answer_tokens.max == 5
    # time to first answer: 50 + 3 gaps of 5 ms after reasoning; equal to TTFT without it
    assert sorted([r.time_to_first_answer_ms.min, r.time_to_first_answer_ms.max]) == pytest.approx([65, 70])
    assert lv.itl_ms.count == 8
