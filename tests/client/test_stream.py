"""StreamState: bytes of one response -> events, tokens and status on its record."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from loadgen.client.dialects import get_dialect
from loadgen.client.stream import StreamState, distribute
from loadgen.errors import Disconnected, ErrorEvent, InvalidResponse
from loadgen.records import RequestRecord, TokenSource

DONE = b"data: [DONE]\n\n"


def sse(obj: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(obj)}\n\n".encode()


def chat(
    content: str | None = None, usage: dict[str, int] | None = None, finish: str | None = None, **delta: Any
) -> bytes:
    if content is not None:
        delta["content"] = content
    obj: dict[str, Any] = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = usage
    return sse(obj)


def text(t: str, usage: dict[str, int] | None = None, finish: str | None = None, **choice: Any) -> bytes:
    obj: dict[str, Any] = {"choices": [{"index": 0, "text": t, "finish_reason": finish, **choice}]}
    if usage is not None:
        obj["usage"] = usage
    return sse(obj)


def usage_only(completion: int, prompt: int = 7) -> bytes:
    return sse({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})


def run(reads: list[tuple[bytes, int]], api: str = "chat", end_ns: int | None = None) -> RequestRecord:
    """Feed the reads (each stamped), close the stream, return the record."""
    state = StreamState(RequestRecord(index=0), get_dialect(api), defer=False)
    for chunk, t in reads:
        state.feed(chunk, t)
    state.close(end_ns if end_ns is not None else reads[-1][1] + 1)
    return state.record


def test_the_first_token_is_the_first_event_with_output() -> None:
    """Role-only, empty and usage-only events do not count; content, reasoning and tool calls do."""
    rec = run(
        [
            (chat(role="assistant", content=""), 100),
            (chat(""), 110),
            (chat(None), 115),
            (usage_only(0), 120),
            (chat(reasoning_content="hmm"), 130),
            (chat("Hi"), 140),
            (chat(tool_calls=[{"index": 0, "function": {"arguments": "{"}}]), 150),
            (chat(None, finish="stop"), 160),
            (DONE, 170),
        ]
    )
    assert [t for t, _ in rec.events] == [130, 140, 150]
    assert rec.done_ns == 170 and rec.ok


def test_completions_count_text_and_token_ids_only() -> None:
    rec = run(
        [(text(""), 10), (text("", token_ids=[5]), 20), (text("a"), 30), (text("", finish="length"), 40), (DONE, 50)],
        api="completions",
    )
    assert [t for t, _ in rec.events] == [20, 30]


def test_events_take_the_time_of_the_read_that_completed_them() -> None:
    first, second = chat("a"), chat("b")
    rec = run([(first + second[:9], 100), (second[9:] + chat("c") + DONE, 200)])
    assert rec.events == [[100, 1], [200, 1], [200, 1]]


def test_usage_on_every_event_gives_each_event_its_tokens() -> None:
    rec = run(
        [
            (chat("a", usage={"prompt_tokens": 7, "completion_tokens": 3}), 10),
            (usage_only(3), 15),  # no output: not an event, the running count unchanged
            (chat("b", usage={"prompt_tokens": 7, "completion_tokens": 4}), 20),
            (chat("c", usage={"prompt_tokens": 7, "completion_tokens": 9}, finish="length"), 30),
            (usage_only(9) + DONE, 40),
        ]
    )
    assert rec.token_source is TokenSource.USAGE_DELTA
    assert rec.events == [[10, 3], [20, 1], [30, 5]]
    assert rec.output_tokens == rec.completion_tokens == 9 and rec.prompt_tokens == 7


@pytest.mark.parametrize(
    ("cumulative", "final", "source", "counts"),
    [
        ([2, None, 6], 6, TokenSource.EVENTS_CORRECTED, [2, 2, 2]),  # one event without usage
        ([2, 2, 6], 6, TokenSource.EVENTS_CORRECTED, [2, 2, 2]),  # an event that added nothing
        ([None, None, None, None], 10, TokenSource.EVENTS_CORRECTED, [2, 3, 2, 3]),
        ([None, None, None], 2, TokenSource.EVENTS, [1, 1, 1]),  # fewer tokens than events: 1 each
        ([None, None, None], None, TokenSource.EVENTS, [1, 1, 1]),  # no usage at all
    ],
)
def test_without_usage_on_every_event_tokens_are_spread_over_the_events(
    cumulative: list[int | None], final: int | None, source: TokenSource, counts: list[int]
) -> None:
    reads = []
    for k, cum in enumerate(cumulative):
        usage = None if cum is None else {"prompt_tokens": 7, "completion_tokens": cum}
        reads.append((chat("x", usage=usage), 10 * (k + 1)))
    tail = (usage_only(final) if final is not None else b"") + DONE
    rec = run([*reads, (tail, 100)])
    assert rec.token_source is source and [n for _, n in rec.events] == counts
    assert rec.completion_tokens == final


def test_distribute_is_even_and_exact() -> None:
    rng = random.Random(5)
    for _ in range(500):
        total, n = rng.randrange(0, 1000), rng.randrange(1, 50)
        parts = distribute(total, n)
        assert len(parts) == n and sum(parts) == total and max(parts) - min(parts) <= 1


def test_a_finish_reason_without_done_completes_and_nothing_counts_after_done() -> None:
    """The record ends at its last event (not when the server got round to closing)."""
    rec = run([(chat("a"), 10), (chat("b", finish="stop"), 20)], end_ns=25)
    assert rec.ok and rec.done_ns == 20 and len(rec.events) == 2
    rec = run([(chat("a") + DONE + chat("late"), 10), (chat("later"), 20)], end_ns=30)
    assert rec.done_ns == 10 and len(rec.events) == 1


def test_vendor_timings_are_kept() -> None:
    obj = {"choices": [{"delta": {"content": "a"}, "finish_reason": "stop"}], "loadgen": {"queue_ms": 1.5}}
    assert run([(sse(obj) + DONE, 10)]).server == {"queue_ms": 1.5}


@pytest.mark.parametrize(
    ("body", "error", "match"),
    [
        (chat("a"), Disconnected, "before \\[DONE\\] or a finish_reason"),
        (b"<html>502 Bad Gateway</html>", InvalidResponse, "not an event stream"),
        (b"data: {not json\n\n", InvalidResponse, "malformed JSON"),
        (b"data: [1, 2]\n\n", InvalidResponse, "not a JSON object"),
        (chat("a") + sse({"message": "overloaded"}, event="error"), ErrorEvent, "error event: .*overloaded"),
        (
            chat("a") + sse({"error": {"message": "engine died", "code": 500}}) + DONE,
            ErrorEvent,
            "error in stream: engine died",
        ),
        (chat("a") + sse({"error": "plain text"}) + DONE, ErrorEvent, "error in stream: plain text"),
        (sse({"choices": None}) + DONE, InvalidResponse, "no output"),
        (DONE, InvalidResponse, "no output"),
    ],
)
def test_bad_streams_raise_their_error(body: bytes, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match) as info:
        run([(body, 10)])
    assert not str(info.value).startswith("HTTP")


def test_an_error_is_raised_again_by_every_later_feed() -> None:
    state = StreamState(RequestRecord(index=0), get_dialect("chat"), defer=False)
    with pytest.raises(ErrorEvent):
        state.feed(chat("a") + sse({"error": "gone"}), 10)
    with pytest.raises(ErrorEvent):
        state.feed(chat("b"), 20)
    with pytest.raises(ErrorEvent):
        state.close(30)
    assert state.record.events == [[10, 1]]


async def test_in_a_loop_parsing_waits_until_the_reads_are_stamped() -> None:
    """Several streams' reads in one loop turn are all stamped before any is parsed."""
    states = [StreamState(RequestRecord(index=i), get_dialect("chat")) for i in range(3)]
    for i, s in enumerate(states):
        s.feed(chat("a") + chat("b"), 100 + i)
    assert all(s.record.events == [] for s in states)  # nothing parsed yet
    await asyncio.sleep(0)
    assert [s.record.events for s in states] == [[[100 + i, 1], [100 + i, 1]] for i in range(3)]
    states[0].feed(DONE, 200)
    states[0].close(210)
    assert states[0].record.done_ns == 200


async def test_salvage_keeps_what_arrived_before_a_failure() -> None:
    state = StreamState(RequestRecord(index=0), get_dialect("chat"))
    state.feed(chat("a") + chat("b") + b"data: {broken", 50)
    state.salvage()  # the transport failed (a reset, Ctrl-C) before the loop parsed the read
    assert state.record.events == [[50, 1], [50, 1]]


@pytest.mark.parametrize(
    "claim",
    [1_000_000_000, 1_000_000, -5, True, 2.5, "9"],
)
def test_a_usage_that_is_not_a_plausible_count_is_rejected_not_trusted(claim: Any) -> None:
    """Five streamed events cannot hold a billion tokens; negative, bool and non-int
    counts are no counts: each event counts one token, and the record says why."""
    usage: Any = {"prompt_tokens": 7, "completion_tokens": claim}
    reads = [(chat("x"), 10 * (k + 1)) for k in range(5)]
    rec = run([*reads, (sse({"choices": [], "usage": usage}) + DONE, 100)])
    assert rec.ok and rec.token_source is TokenSource.USAGE_REJECTED
    assert [n for _, n in rec.events] == [1] * 5
    assert rec.completion_tokens == (claim if type(claim) is int and claim >= 0 else None)


def test_a_per_event_usage_jump_beyond_the_event_is_rejected() -> None:
    rec = run(
        [
            (chat("a", usage={"prompt_tokens": 7, "completion_tokens": 1}), 10),
            (chat("b", usage={"prompt_tokens": 7, "completion_tokens": 10**9}), 20),
            (DONE, 30),
        ]
    )
    assert rec.token_source is TokenSource.USAGE_REJECTED and rec.output_tokens == 2


def test_a_negative_or_bool_prompt_count_is_not_kept() -> None:
    for bad in (-1, True):
        rec = run(
            [
                (chat("a"), 10),
                (sse({"choices": [], "usage": {"prompt_tokens": bad, "completion_tokens": 1}}) + DONE, 20),
            ]
        )
        assert rec.prompt_tokens is None and rec.token_source is TokenSource.USAGE_REJECTED


def test_an_empty_answer_that_says_why_it_stopped_is_ok() -> None:
    rec = run([(chat(role="assistant", content=""), 10), (chat("", finish="stop") + DONE, 20)])
    assert rec.ok and rec.events == [] and rec.output_tokens == 0


def test_a_stream_cut_mid_event_is_a_disconnect_not_a_bad_response() -> None:
    whole = chat("b")
    with pytest.raises(Disconnected, match="stream ended mid-event"):
        run([(chat("a") + whole[: len(whole) // 2], 10)])
    rec = run([(chat("a", finish="stop") + b"data: [DONE]", 10)])  # a last event without its blank line still counts
    assert rec.ok and len(rec.events) == 1


@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.parametrize(
    "odd",
    [
        {"choices": True},
        {"choices": 5},
        {"choices": {"text": "a"}},
        {"usage": []},
        {"usage": "9"},
        {"loadgen": [1]},
        {"choices": [{"finish_reason": ["stop"]}]},
        {"choices": [{"finish_reason": 1}]},
    ],
)
def test_events_of_the_wrong_shape_are_ignored_not_a_crash(api: str, odd: dict[str, Any]) -> None:
    """Found by tests/fuzz: a non-list ``choices`` raised TypeError out of the parser, and
    a non-object usage, vendor field or finish reason reached the record."""
    good = chat("a") if api == "chat" else text("a")
    end = chat(None, finish="stop") if api == "chat" else text("", finish="stop")
    rec = run([(good, 10), (sse(odd), 20), (end + DONE, 30)], api=api)
    assert rec.ok and rec.events == [[10, 1]] and rec.server is None
    assert rec.completion_tokens is None and rec.prompt_tokens is None
    with pytest.raises(InvalidResponse, match="no output"):  # alone, it is no answer at all
        run([(sse(odd) + DONE, 10)], api=api)


def test_each_usage_count_is_the_last_one_sent_even_from_different_events() -> None:
    """A server that sends the prompt count early and the completion count last (as
    Anthropic's message_start / message_delta do): both are kept."""
    rec = run(
        [
            (chat("a", usage={"prompt_tokens": 9}), 10),
            (chat("b"), 20),
            (chat("c"), 30),
            (sse({"choices": [], "usage": {"completion_tokens": 3}}), 40),
            (DONE, 50),
        ]
    )
    assert (rec.prompt_tokens, rec.completion_tokens) == (9, 3)
    assert rec.token_source is TokenSource.EVENTS_CORRECTED and [n for _, n in rec.events] == [1, 1, 1]


def test_a_bad_early_prompt_count_replaced_by_a_good_one_is_used() -> None:
    rec = run(
        [
            (chat("a", usage={"prompt_tokens": -1}), 10),
            (chat("b", finish="stop"), 20),
            (usage_only(2, prompt=5), 30),
            (DONE, 40),
        ]
    )
    assert (rec.prompt_tokens, rec.completion_tokens) == (5, 2) and rec.token_source is TokenSource.EVENTS_CORRECTED
