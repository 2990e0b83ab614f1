"""Fuzz the dialect parsers and the stream decoder with random event JSON: usage claims
huge, negative, bool, float or text; choices of every shape. Nothing but the project's
transport errors escapes, and every count on the record is a non-negative int."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from loadgen.client.answer import AnswerState
from loadgen.client.dialects import DIALECTS, EventInfo
from loadgen.client.stream import StreamState
from loadgen.errors import TransportError
from loadgen.records import RequestRecord
from tests.fuzz.strategies import NUMBERS, SCALARS, budget, dumps, json_values

KEYS = st.sampled_from(
    [
        "choices",
        "delta",
        "text",
        "content",
        "reasoning_content",
        "reasoning",
        "tool_calls",
        "token_ids",
        "finish_reason",
        "usage",
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "error",
        "message",
        "loadgen",
        "index",
        "role",
        "x",
    ]
)
ANY = json_values(KEYS, max_leaves=10, allow_nan=True)
COUNT = st.one_of(NUMBERS, st.none(), st.text(max_size=5), st.just([1]))

USAGE = st.one_of(
    st.fixed_dictionaries({"prompt_tokens": COUNT, "completion_tokens": COUNT}, optional={"total_tokens": COUNT}),
    ANY,
)
CHOICE = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "index": SCALARS,
            "delta": st.one_of(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "content": st.one_of(st.text(max_size=8), ANY),
                        "role": SCALARS,
                        "reasoning_content": ANY,
                        "tool_calls": ANY,
                    },
                ),
                ANY,
            ),
            "text": st.one_of(st.text(max_size=8), ANY),
            "token_ids": st.one_of(st.lists(st.integers(0, 9), max_size=3), ANY),
            "finish_reason": st.one_of(st.sampled_from(["stop", "length", None, ""]), ANY),
        },
    ),
    ANY,
)
EVENTS = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "choices": st.one_of(st.lists(CHOICE, max_size=3), ANY),
            "usage": USAGE,
            "loadgen": ANY,
            "error": st.one_of(st.none(), ANY),
        },
    ),
    st.dictionaries(KEYS, ANY, max_size=5),
)


@budget(150)
@given(st.sampled_from(sorted(DIALECTS)), EVENTS)
def test_parse_event_takes_any_json_object(api: str, obj: dict[str, Any]) -> None:
    info = DIALECTS[api].parse_event(obj)
    assert isinstance(info, EventInfo) and isinstance(info.has_output, bool)
    assert info.finish_reason is None or isinstance(info.finish_reason, str)
    assert info.error is None or isinstance(info.error, str)
    assert info.usage is None or isinstance(info.usage, dict)
    assert info.vendor is None or isinstance(info.vendor, dict)


def _frame(obj: Any, raw: bool) -> bytes:
    if raw:
        return b"data: " + str(obj).encode(errors="surrogatepass") + b"\n\n"
    return b"data: " + dumps(obj).encode() + b"\n\n"


@budget(100)
@given(
    st.sampled_from(sorted(DIALECTS)),
    st.lists(
        st.one_of(
            EVENTS.map(lambda o: (o, False)),
            st.tuples(st.sampled_from(["[DONE]", "{", "[1]", "null", "NaN", ""]), st.just(True)),
        ),
        max_size=8,
    ),
    st.booleans(),
)
def test_any_event_sequence_gives_a_record_with_sane_counts(
    api: str, events: list[tuple[Any, bool]], done: bool
) -> None:
    record = RequestRecord(index=0)
    state = StreamState(record, DIALECTS[api], defer=False)
    stream = b"".join(_frame(o, raw) for o, raw in events) + (b"data: [DONE]\n\n" if done else b"")
    try:
        for t, read in enumerate(stream[i : i + 37] for i in range(0, len(stream), 37)):
            state.feed(read, 10 + t)
        state.close(1000)
    except TransportError as exc:
        assert str(exc).strip()
    for _, n in record.events:
        assert type(n) is int and n >= 1, record.events
    for count in (record.prompt_tokens, record.completion_tokens):
        assert count is None or (type(count) is int and count >= 0), count
    assert record.server is None or isinstance(record.server, dict)


# The typed-event APIs (responses, messages): events of every type they know, and others,
# with fields of any shape; the SSE ``event:`` line as the real APIs send it, or another.
TYPES = st.sampled_from(
    [
        "response.output_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
        "response.function_call_arguments.delta",
        "response.completed",
        "response.incomplete",
        "response.failed",
        "response.created",
        "error",
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
    ]
)
TYPED_USAGE = st.one_of(
    st.fixed_dictionaries({}, optional={"input_tokens": COUNT, "output_tokens": COUNT, "output_tokens_details": ANY}),
    ANY,
)
DELTA = st.one_of(
    st.text(max_size=6),
    st.fixed_dictionaries(
        {"type": st.one_of(st.sampled_from(["text_delta", "thinking_delta", "input_json_delta", "x"]), ANY)},
        optional={
            "text": st.one_of(st.text(max_size=6), ANY),
            "thinking": ANY,
            "partial_json": ANY,
            "stop_reason": st.one_of(st.sampled_from(["end_turn", "max_tokens", ""]), ANY),
        },
    ),
    ANY,
)
TYPED = st.fixed_dictionaries(
    {"type": st.one_of(TYPES, ANY)},
    optional={
        "delta": DELTA,
        "usage": TYPED_USAGE,
        "message": st.one_of(st.fixed_dictionaries({"usage": TYPED_USAGE}), ANY),
        "response": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "usage": TYPED_USAGE,
                    "status": ANY,
                    "incomplete_details": ANY,
                    "error": ANY,
                },
            ),
            ANY,
        ),
        "error": ANY,
        "message_text": ANY,
    },
)
TYPED_APIS = st.sampled_from(["messages", "responses"])


@budget(150)
@given(TYPED_APIS, TYPED)
def test_typed_parse_event_takes_any_event(api: str, obj: dict[str, Any]) -> None:
    info = DIALECTS[api].parse_event(obj)
    assert isinstance(info.has_output, bool) and isinstance(info.reasoning, bool) and isinstance(info.text, str)
    assert info.finish_reason is None or (isinstance(info.finish_reason, str) and info.finish_reason)
    assert info.error is None or isinstance(info.error, str)
    assert info.usage is None or isinstance(info.usage, dict)


@budget(100)
@given(
    TYPED_APIS,
    st.lists(
        st.tuples(st.one_of(st.none(), TYPES, st.text(max_size=4)), st.one_of(TYPED, ANY.map(lambda v: [v]))),
        max_size=8,
    ),
)
def test_any_typed_event_sequence_gives_one_record_with_sane_counts(
    api: str, events: list[tuple[str | None, Any]]
) -> None:
    record = RequestRecord(index=0)
    state = StreamState(record, DIALECTS[api], defer=False)
    frames = []
    for name, obj in events:
        head = b"" if name is None else f"event: {name}\n".encode(errors="surrogatepass")
        frames.append(head + b"data: " + dumps(obj).encode() + b"\n\n")
    stream = b"".join(frames)
    try:
        for t, read in enumerate(stream[i : i + 41] for i in range(0, len(stream), 41)):
            state.feed(read, 10 + t)
        state.close(1000)
    except TransportError as exc:
        assert str(exc).strip()
    else:  # a record that did not fail has ended: a finish was read
        assert state.ended
    for _, n in record.events:
        assert type(n) is int and n >= 1, record.events
    for count in (record.prompt_tokens, record.completion_tokens, record.reasoning_tokens):
        assert count is None or (type(count) is int and count >= 0), count
    assert record.reasoning_tokens <= sum(n for _, n in record.events)


ANSWER_KEYS = st.sampled_from(["data", "results", "usage", "prompt_tokens", "total_tokens", "error", "index", "x"])
ANSWER_ANY = json_values(ANSWER_KEYS, max_leaves=10, allow_nan=True)
ANSWERS = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "data": st.one_of(st.lists(ANSWER_ANY, max_size=4), ANSWER_ANY),
            "results": st.one_of(st.lists(ANSWER_ANY, max_size=4), ANSWER_ANY),
            "usage": st.one_of(
                st.fixed_dictionaries({}, optional={"prompt_tokens": COUNT, "total_tokens": COUNT}), ANSWER_ANY
            ),
            "error": st.one_of(st.none(), ANSWER_ANY),
            "loadgen": ANSWER_ANY,
        },
    ),
    ANSWER_ANY,
)
NON_STREAMED = sorted(name for name, d in DIALECTS.items() if not d.streams)


@budget(150)
@given(
    st.sampled_from(NON_STREAMED),
    st.one_of(ANSWERS.map(lambda o: dumps(o).encode()), st.binary(max_size=64)),
    st.integers(1, 4),
    st.integers(1, 50),
)
def test_any_answer_body_gives_one_record(api: str, body: bytes, inputs: int, step: int) -> None:
    """Any bytes as a non-streamed answer: the record is ok with a sane count and as many
    results as inputs, or the state raises one of the project's transport errors."""
    record = RequestRecord(index=0, sent_ns=5, inputs=inputs)
    state = AnswerState(record, DIALECTS[api])
    try:
        for t, i in enumerate(range(0, len(body), step)):
            state.feed(body[i : i + step], 10 + t)
        state.close(1000)
    except TransportError as exc:
        assert str(exc).strip()
    else:
        obj = json.loads(body)
        results = obj.get(DIALECTS[api].results_key)
        assert isinstance(results, list) and len(results) == inputs
    assert record.prompt_tokens is None or (type(record.prompt_tokens) is int and record.prompt_tokens >= 0)
    assert record.done_ns >= 10 or not body
    assert record.events == []
    assert record.server is None or isinstance(record.server, dict)
