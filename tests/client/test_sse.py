"""The SSE decoder against the WHATWG event-stream rules."""

from __future__ import annotations

import json

import pytest

from loadgen.client.sse import SSEDecoder, SSEEvent


def decode_all(chunks: list[bytes]) -> list[SSEEvent]:
    dec = SSEDecoder()
    out: list[SSEEvent] = []
    for c in chunks:
        out.extend(dec.feed(c))
    out.extend(dec.close())
    return out


STREAM_TEXT = (
    ": a comment line\n"
    "event: token\n"
    'data: {"a": 1}\n'
    "\n"
    "data: first\n"
    "data: second\n"
    "id: 7\n"
    "retry: 1500\n"
    "\n"
    "data:no-space\n"
    "\n"
    "data\n"
    "\n"
    "unknown: field\n"
    "data: [DONE]\n"
    "\n"
)
EXPECTED = [
    ("token", '{"a": 1}', None, None),
    ("message", "first\nsecond", "7", 1500),
    ("message", "no-space", "7", 1500),
    ("message", "", "7", 1500),
    ("message", "[DONE]", "7", 1500),
]


def _key(events: list[SSEEvent]) -> list[tuple[str, str, str | None, int | None]]:
    return [(e.event, e.data, e.id, e.retry) for e in events]


@pytest.mark.parametrize("eol", ["\n", "\r", "\r\n"])
def test_every_line_ending_style(eol: str) -> None:
    raw = STREAM_TEXT.replace("\n", eol).encode()
    assert _key(decode_all([raw])) == EXPECTED


@pytest.mark.parametrize("eol", ["\n", "\r", "\r\n"])
def test_split_at_every_byte_position(eol: str) -> None:
    raw = STREAM_TEXT.replace("\n", eol).encode()
    for cut in range(1, len(raw)):
        assert _key(decode_all([raw[:cut], raw[cut:]])) == EXPECTED, cut


def test_byte_by_byte_with_mixed_line_endings() -> None:
    raw = b"data: a\r\ndata: b\rdata: c\n\r\ndata: d\n\n"
    events = decode_all([raw[i : i + 1] for i in range(len(raw))])
    assert [e.data for e in events] == ["a\nb\nc", "d"]


def test_unicode_line_separators_stay_inside_data() -> None:
    text = "line\u2028sep\u2029para\u0085nel\x0bvt\x0cff\x1cfs é 漢字 🚀"
    payload = json.dumps({"t": text}, ensure_ascii=False)
    raw = f"data: {payload}\n\n".encode()
    for cut in range(1, len(raw)):  # also split inside multi-byte characters
        events = decode_all([raw[:cut], raw[cut:]])
        assert len(events) == 1
        assert json.loads(events[0].data)["t"] == text


def test_several_events_in_one_read() -> None:
    raw = b"".join(f"data: {i}\n\n".encode() for i in range(50))
    dec = SSEDecoder()
    assert [e.data for e in dec.feed(raw)] == [str(i) for i in range(50)]


def test_missing_final_blank_line_is_flushed_on_close() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"data: x\n\ndata: [DONE]\n") == [SSEEvent("x")]
    assert [e.data for e in dec.close()] == ["[DONE]"]
    dec = SSEDecoder()
    assert dec.feed(b"data: [DONE]") == []
    assert [e.data for e in dec.close()] == ["[DONE]"]


def test_comments_only_and_empty_data_lines_dispatch_nothing() -> None:
    assert decode_all([b": keep-alive\n\n: again\n\n\n\n"]) == []


def test_bom_is_skipped_even_when_split() -> None:
    raw = b"\xef\xbb\xbfdata: x\n\n"
    for cut in range(4):
        assert [e.data for e in decode_all([raw[:cut], raw[cut:]])] == ["x"]


def test_id_with_nul_is_ignored_and_bad_retry_ignored() -> None:
    events = decode_all([b"id: a\x00b\nretry: 12x\ndata: x\n\n"])
    assert events[0].id is None and events[0].retry is None
