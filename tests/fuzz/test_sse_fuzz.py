"""Fuzz the SSE decoder: however a byte stream is split into reads, it decodes to the same
events as in one read, and nothing but the project's errors (none, here) escapes."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from loadgen.client.sse import SSEDecoder, SSEEvent
from tests.fuzz.strategies import budget

BOM = b"\xef\xbb\xbf"
ENDINGS = st.sampled_from([b"\n", b"\r\n", b"\r"])

FIELD_LINES = st.one_of(
    st.builds(lambda v: b"data: " + v, st.binary(max_size=30)),
    st.builds(lambda v: b"data:" + v.encode(), st.text(max_size=30)),  # U+2028 & co stay inside
    st.just(b"data"),
    st.builds(lambda v: b"event: " + v.encode(), st.sampled_from(["error", "message", "", "x y"])),
    st.builds(lambda v: b"id: " + v, st.binary(max_size=6)),
    st.builds(lambda v: b"retry: " + v.encode(), st.sampled_from(["10", "x", "", "١٢"])),
    st.builds(lambda v: b":" + v, st.binary(max_size=10)),  # comment
    st.just(b""),  # blank line: dispatch
    st.binary(max_size=20),  # anything
)


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    """A byte stream of lines with mixed endings, maybe a BOM, maybe no final ending."""
    lines = draw(st.lists(st.tuples(FIELD_LINES, ENDINGS), max_size=25))
    body = b"".join(line + end for line, end in lines)
    if draw(st.booleans()):
        body = body[: draw(st.integers(0, len(body)))]  # cut anywhere
    if draw(st.booleans()):
        body = BOM + body
    return body


@st.composite
def splits(draw: st.DrawFn, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    edges = [0, *cuts, len(data)]
    return [data[a:b] for a, b in pairwise(edges)]  # empty reads included


def _decode(chunks: list[bytes]) -> list[SSEEvent]:
    dec = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events += dec.feed(chunk)
    return events + dec.close()


@budget(200)
@given(st.data(), st.one_of(streams(), st.binary(max_size=200)))
def test_any_split_decodes_like_the_whole(data: st.DataObject, stream: bytes) -> None:
    whole = _decode([stream])
    assert _decode(data.draw(splits(stream))) == whole
    assert _decode([bytes([b]) for b in stream]) == whole  # one byte per read
    for ev in whole:
        assert isinstance(ev.data, str) and isinstance(ev.event, str) and ev.event


@budget(120)
@given(
    st.lists(
        st.tuples(st.text(max_size=20).filter(lambda t: "\r" not in t and "\n" not in t), ENDINGS),
        min_size=1,
        max_size=6,
    ),
    ENDINGS,
    st.booleans(),
)
def test_data_lines_join_with_lf_whatever_the_line_ending(
    lines: list[tuple[str, bytes]], blank: bytes, bom: bool
) -> None:
    stream = (BOM if bom else b"") + b"".join(b"data: " + t.encode() + e for t, e in lines) + blank
    # a CR then the blank line's LF would be one CRLF: the event is only complete without that
    if lines[-1][1] == b"\r" and blank == b"\n":
        stream += b"\n"
    events = _decode([stream])
    assert [ev.data for ev in events] == ["\n".join(t for t, _ in lines)]
