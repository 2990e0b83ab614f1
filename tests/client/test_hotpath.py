"""The hot path's shortcuts give what the plain path gives: the SSE decoder's split of a
chunk without CR against the general loop (the same stream with CRLF or CR line ends),
and the dialects' orjson ``decode`` against ``json.loads``, compared on whole
records, answers and errors for random event sequences (hostile numbers included)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from loadgen.client.dialects import DIALECTS, Dialect
from loadgen.client.dialects.messages import Messages
from loadgen.client.dialects.openai import Chat, Completions
from loadgen.client.dialects.responses import Responses
from loadgen.client.sse import SSEDecoder
from loadgen.client.stream import StreamState
from loadgen.errors import TransportError
from loadgen.records import RequestRecord
from tests.fuzz.strategies import DIGITS, budget, dumps
from tests.fuzz.test_dialects_fuzz import EVENTS, TYPED


def _plain(data: str) -> Any:
    return json.loads(data)


class _JsonChat(Chat):
    decode = staticmethod(_plain)


class _JsonCompletions(Completions):
    decode = staticmethod(_plain)


class _JsonResponses(Responses):
    decode = staticmethod(_plain)


class _JsonMessages(Messages):
    decode = staticmethod(_plain)


PLAIN: dict[str, Dialect] = {
    "chat": _JsonChat(),
    "completions": _JsonCompletions(),
    "responses": _JsonResponses(),
    "messages": _JsonMessages(),
}


def _run(dialect: Dialect, stream: bytes | list[bytes], step: int = 0) -> tuple[Any, ...]:
    """The record (and answer, and error) of ``stream`` fed in reads of ``step`` bytes (or
    the reads it lists)."""
    record = RequestRecord(index=0)
    answer: list[str] = []
    state = StreamState(record, dialect, defer=False, answer=answer)
    error = None
    reads = stream if isinstance(stream, list) else [stream[i : i + step] for i in range(0, len(stream), step)]
    try:
        for t, read in enumerate(reads):
            state.feed(read, 10 + t)
        state.close(10_000)
    except TransportError as exc:
        error = (type(exc), str(exc))
    return (
        error,
        record.events,
        record.first_answer_ns,
        record.done_ns,
        record.prompt_tokens,
        record.completion_tokens,
        record.token_source,
        record.reasoning_tokens,
        repr(record.server),
        answer,
    )


BIG_INTS = st.builds(lambda neg, n: (-1 if neg else 1) * (10**n - 1), st.booleans(), st.sampled_from([19, 20, 40, 309]))
RAW = st.one_of(
    st.sampled_from(
        ["[DONE]", "{", "[1]", "null", "NaN", "", '{"a":"\\ud800"}', '{"usage":{"completion_tokens":1e400}}']
    ),
    DIGITS.map(lambda d: '{"choices":[{"text":"x","finish_reason":"stop"}],"usage":{"completion_tokens":' + d + "}}"),
    DIGITS.map(lambda d: '{"choices":[{"text":"x","finish_reason":"stop"}],"loadgen":{"n":' + d + "}}"),
    DIGITS.map(lambda d: '{"error":{"code":' + d + "}}"),
    BIG_INTS.map(lambda n: dumps({"choices": [{"delta": {"content": "a"}, "token_ids": [n]}], "created": n})),
    # the typed APIs' usage, finish and error events with huge numbers, and a delta with one
    DIGITS.map(lambda d: '{"type":"response.completed","response":{"usage":{"output_tokens":' + d + "}}}"),
    DIGITS.map(lambda d: '{"type":"message_delta","delta":{"stop_reason":"x"},"usage":{"output_tokens":' + d + "}}"),
    DIGITS.map(lambda d: '{"type":"error","error":{"message":' + d + "}}"),
    BIG_INTS.map(lambda n: dumps({"type": "response.output_text.delta", "delta": "a", "sequence_number": n})),
)


@budget(200)
@given(
    st.sampled_from(sorted(PLAIN)),  # the streamed dialects with a fast decode
    st.lists(st.one_of(EVENTS.map(dumps), TYPED.map(dumps), RAW), max_size=8),
    st.booleans(),
    st.sampled_from([b"\r\n", b"\r"]),
    st.integers(1, 64),
)
def test_fast_decode_and_lf_split_give_the_plain_paths_record(
    api: str, events: list[str], done: bool, crlf: bytes, step: int
) -> None:
    frames = [b"data: " + e.encode(errors="surrogatepass") + b"\n\n" for e in events]
    lf = b"".join(frames) + (b"data: [DONE]\n\n" if done else b"")
    fast = _run(DIALECTS[api], lf, step)
    assert fast == _run(PLAIN[api], lf, step)
    untimed = _untimed(fast)
    assert untimed == _untimed(_run(PLAIN[api], lf.replace(b"\n", crlf), step))  # the general SSE loop
    assert untimed == _untimed(_run(DIALECTS[api], lf, len(lf) + 1))  # one read: the same as many
    per_frame = frames + ([b"data: [DONE]\n\n"] if done else [])  # one event per read: the commonest read
    assert untimed == _untimed(_run(DIALECTS[api], per_frame))


def _untimed(result: tuple[Any, ...]) -> tuple[Any, ...]:
    """A result without its times (other reads get other stamps)."""
    events = [n for _, n in result[1]]
    return (result[0], events, bool(result[2]), *result[4:])


LINES = st.lists(
    st.one_of(
        st.text(max_size=12).filter(lambda t: "\r" not in t and "\n" not in t).map(lambda t: "data: " + t),
        st.sampled_from(["", "data:x", "data", ": c", "event: error", "id: 7", "retry: 5", "\ufeffdata: b", "x: y"]),
    ),
    max_size=12,
)


@budget(300)
@given(LINES, st.sampled_from([b"\r\n", b"\r"]), st.integers(1, 16), st.booleans())
def test_lf_lines_decode_as_crlf_and_cr_lines_do(lines: list[str], other: bytes, step: int, bom: bool) -> None:
    lf = (b"\xef\xbb\xbf" if bom else b"") + b"".join(line.encode() + b"\n" for line in lines)

    def decode(stream: bytes) -> list[Any]:
        dec = SSEDecoder()
        out = [ev for i in range(0, len(stream), step) for ev in dec.feed(stream[i : i + step])]
        return [(e.data, e.event, e.id, e.retry) for e in out + dec.close()]

    whole = decode(lf)
    assert whole == decode(lf.replace(b"\n", other))
    dec = SSEDecoder()  # read by read, cut after each blank line (one ``data: x\n\n`` event per read, often)
    parts = lf.split(b"\n\n")
    reads = [p + b"\n\n" for p in parts[:-1]] + [parts[-1]]
    out = [ev for read in reads for ev in dec.feed(read)] + dec.close()
    assert [(e.data, e.event, e.id, e.retry) for e in out] == whole


def test_orjson_and_json_agree_where_it_matters() -> None:
    decode = DIALECTS["chat"].decode
    usage = '{"usage":{"prompt_tokens":5,"completion_tokens":100000000000000000001}}'
    assert decode(usage)["usage"]["completion_tokens"] == 10**20 + 1  # an int, as json reads it
    assert decode('{"loadgen":{"t":12345678901234567890123}}') == {"loadgen": {"t": 12345678901234567890123}}
    assert str(decode("NaN")) == "nan" and decode('"\\ud800"') == "\ud800"
    try:
        decode("{" * 10 + "}")
    except ValueError as exc:
        assert "Expecting" in str(exc)  # json's own message, as before
    else:
        raise AssertionError("malformed JSON was read")


def test_a_field_read_before_a_one_event_read_applies_to_that_event_only() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"event: error\nid: 4\n") == []
    got = dec.feed(b"data: x\n\n") + dec.feed(b"data: y\n\n") + dec.feed(b"data: z\n") + dec.feed(b"\n")
    assert [(e.data, e.event, e.id) for e in got] == [("x", "error", "4"), ("y", "message", "4"), ("z", "message", "4")]
