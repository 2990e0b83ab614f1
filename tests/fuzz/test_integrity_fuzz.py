"""No answer credited to another request, on every transport: the integrity property.

A raw HTTP/1.1 server on loopback answers each request as a generated script says: 1xx
interim responses first (``100 Continue``, ``103 Early Hints``), then a final answer (a
stream of exactly the request's ``max_tokens`` tokens, an HTTP 500, a close before any
byte, a close mid-stream), then, in the same write, nothing, garbage, or a second complete
response that nobody asked for; its bytes go out whole or in small pieces. The requests
share keep-alive connections (two users), so a response taken for the wrong request
would show.

What must hold, whatever the script:

- the server received exactly the requests that have records: each record's request
  once, plus once per resend the record counts (``retries``: the stale keep-alive rule);
- an ``ok`` record holds its own answer (as many events and as many completion tokens as
  its own request asked for; a second response is always of another length);
- every request whose final answer was a complete stream is ``ok``, an HTTP 500 is
  ``http_error`` 500, a close is ``disconnected``: interim responses change nothing.
  Garbage in the read that ends an answer is the one difference between transports:
  ``fast`` and httpx keep the answer and close the connection, aiohttp's parser fails
  the whole read (``invalid_response``); none of them takes it for the next request.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TRANSPORTS, TransportConfig, make_transport
from loadgen.load.runner import LevelPlan, Runner
from loadgen.records import ErrorKind, RequestSpec
from tests.fuzz.raw_server import RawServer
from tests.fuzz.strategies import budget

INTERIM = {
    100: b"HTTP/1.1 100 Continue\r\n\r\n",
    103: b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
}
FINALS = ["ok", "ok", "ok", "error", "close_before", "close_mid"]
TRAILS = ["none", "none", "garbage", "second"]
EXTRA_TOKENS = 7  # a second, unasked-for response is this much longer than the real one


@dataclass(frozen=True)
class Script:
    interim: tuple[int, ...]
    final: str
    trail: str  # after a complete answer (ok or error), in the same write
    pieces: int  # 0: one write; else the answer goes out in pieces of this many bytes


def _event(text: str, finish: str | None = None, usage: int | None = None) -> bytes:
    obj: dict[str, object] = {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 2, "completion_tokens": usage, "total_tokens": usage + 2}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _stream(tokens: int) -> bytes:
    body = b"".join(_event(f" w{i}", "length" if i == tokens - 1 else None) for i in range(tokens))
    body += _event("", None, usage=tokens) + b"data: [DONE]\n\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)
    return head + body


def _answer(script: Script, tokens: int) -> tuple[bytes, bytes, bool]:
    """The bytes to write for one request, those that follow its end in the same write,
    and whether the connection closes after them."""
    out = b"".join(INTERIM[code] for code in script.interim)
    if script.final == "close_before":
        return out, b"", True
    if script.final == "close_mid":
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        ev = _event(" w0")
        return out + head + b"%x\r\n%s\r\n" % (len(ev), ev), b"", True
    if script.final == "error":
        err = b'{"error": {"message": "overloaded"}}'
        out += b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
        out += b"Content-Length: %d\r\n\r\n%s" % (len(err), err)
    else:
        out += _stream(tokens)
    trail = {"none": b"", "garbage": b"\x00\xffnot http at all\r\n\r\n", "second": _stream(tokens + EXTRA_TOKENS)}
    return out, trail[script.trail], False


class _Server(RawServer):
    """Raw asyncio in a thread: request ``i`` (its prompt's last word) is answered as
    ``scripts[i]`` says; ``received`` counts each request index it read."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: dict[int, Script] = {}
        self.tokens: dict[int, int] = {}
        self.received: Counter[int] = Counter()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: one request after another on the connection
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = json.loads(await reader.readexactly(length))
                index = int(body["prompt"].split()[-1])
                self.received[index] += 1
                script = self.scripts[index]
                data, trail, close = _answer(script, self.tokens[index])
                step = script.pieces or len(data) or 1
                for at in range(0, len(data), step):
                    piece = data[at : at + step]
                    writer.write(piece + trail if at + step >= len(data) else piece)  # the trail: with the end
                    await writer.drain()
                    if script.pieces:
                        await asyncio.sleep(0)
                if close:
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError, StopIteration):
            pass
        finally:
            writer.close()


@pytest.fixture(scope="module")
def server() -> Iterator[_Server]:
    with _Server() as srv:
        yield srv


scripts = st.builds(
    Script,
    interim=st.lists(st.sampled_from(sorted(INTERIM)), max_size=2).map(tuple),
    final=st.sampled_from(FINALS),
    trail=st.sampled_from(TRAILS),
    pieces=st.sampled_from([0, 0, 1, 7]),
)


async def _run(url: str, kind: str, n: int, tokens: dict[int, int]) -> list[object]:
    cfg = TransportConfig(
        base_url=url,
        dialect=get_dialect("completions"),
        options=DialectOptions(model="m"),
        read_timeout_s=10.0,
        request_timeout_s=30.0,
        end_grace_s=0.05,
    )
    transport = make_transport(kind, cfg)
    specs = [RequestSpec(index=i, prompt=f"request {i}", prompt_tokens=2, max_tokens=tokens[i]) for i in range(n)]
    try:
        result = await Runner(transport).run_level(LevelPlan(0, "concurrency", 2, requests=n), iter(specs))
    finally:
        await transport.aclose()
    return list(result.records)


def _expected(script: Script) -> ErrorKind:
    return {
        "ok": ErrorKind.OK,
        "error": ErrorKind.HTTP_ERROR,
        "close_before": ErrorKind.DISCONNECTED,
        "close_mid": ErrorKind.DISCONNECTED,
    }[script.final]


@pytest.mark.parametrize("kind", sorted(TRANSPORTS))
@budget(25)
@given(plan=st.lists(scripts, min_size=1, max_size=8))
def test_every_answer_belongs_to_its_own_request(server: _Server, kind: str, plan: list[Script]) -> None:
    server.received.clear()
    server.scripts = dict(enumerate(plan))
    server.tokens = {i: 2 + i % 5 for i in range(len(plan))}
    records = asyncio.run(_run(f"http://127.0.0.1:{server.port}", kind, len(plan), server.tokens))
    by_index = {r.index: r for r in records}  # type: ignore[attr-defined]
    assert sorted(by_index) == list(range(len(plan))), "one record per request"
    assert server.received == Counter({i: 1 + r.retries for i, r in by_index.items()})  # type: ignore[attr-defined]
    for i, rec in by_index.items():
        script, want = plan[i], server.tokens[i]
        allowed = {_expected(script)}
        if kind == "aiohttp" and script.trail == "garbage" and script.final in ("ok", "error"):
            allowed.add(ErrorKind.INVALID_RESPONSE)
        assert rec.status in allowed, (i, script, rec.status, rec.error)  # type: ignore[attr-defined]
        if rec.status == ErrorKind.OK:  # type: ignore[attr-defined]
            assert len(rec.events) == want and rec.completion_tokens == want, (i, script)  # type: ignore[attr-defined]
        if rec.status == ErrorKind.HTTP_ERROR:  # type: ignore[attr-defined]
            assert rec.http_status == 500  # type: ignore[attr-defined]
