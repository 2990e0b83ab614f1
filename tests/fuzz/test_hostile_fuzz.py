"""Hostile server shapes against the real transports on loopback: SSE lines near and over
the 1 MiB cap, gzip bodies (inflation bombs among them), bytes trickled one at a time,
Content-Length or chunked framing, and endings that close, cut mid-event or hold the
connection open. Every request becomes exactly one record with the status the shape
calls for, and the client's memory stays bounded (tracemalloc peak) whatever the body
inflates to."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from loadgen.client.bounded import MAX_LINE
from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.load.runner import LevelPlan, Runner
from loadgen.records import ErrorKind, RequestSpec
from tests.fuzz.raw_server import RawServer
from tests.fuzz.strategies import budget

MIB = 1 << 20
# a line's length in bytes: near the cap on both sides, and far over it (bombs: gzip only)
LINE_SIZES = [MAX_LINE - 1000, MAX_LINE - 1, MAX_LINE, MAX_LINE + 1, MAX_LINE + 1000, 3 * MIB]
BOMB_SIZES = [32 * MIB, 96 * MIB]
ENDINGS = ["done", "finish", "hold", "cut", "none"]
MEMORY_CAP = 24 * MIB  # the client's traced peak (a body inflates to 96 MiB)


@dataclass(frozen=True)
class Shape:
    tokens: int  # small output events after the long line
    line: int | None  # bytes of one long output event's line (None: none)
    gzip: bool
    chunked: bool
    ending: str
    trickle: int  # first bytes sent one at a time

    @property
    def over_cap(self) -> bool:
        return self.line is not None and self.line > MAX_LINE


def _event(text: str, finish: str | None = None) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "text": text, "finish_reason": finish}]}).encode() + b"\n\n"


def _long_line(size: int) -> Iterator[bytes]:
    """One valid output event whose ``data:`` line is ``size`` bytes, in pieces of 1 MiB at most."""
    head, tail = b'data: {"choices": [{"index": 0, "finish_reason": null, "text": "', b'"}]}'
    fill = size - len(head) - len(tail)
    yield head
    while fill > 0:
        yield b"a" * min(fill, MIB)
        fill -= MIB
    yield tail + b"\n\n"


def _ending(ending: str) -> bytes:
    if ending in ("done", "hold"):
        return _event(" end", "length") + b"data: [DONE]\n\n" if ending == "done" else _event(" end", "length")
    if ending == "finish":
        return _event(" end", "stop")
    if ending == "cut":
        return b'data: {"choices": [{"index": 0, "te'  # the connection closes mid-event
    return _event(" more")  # "none": the body ends, the answer never did


@lru_cache(maxsize=8)
def _gzip_line(size: int) -> tuple[bytes, Any]:
    """A gzip stream begun with the long line: its bytes so far and its compressor (a bomb
    is compressed once, never whole in memory; each shape goes on from a copy)."""
    z = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return b"".join(z.compress(p) for p in _long_line(size)), z


@lru_cache(maxsize=16)
def wire(shape: Shape) -> tuple[bytes, bytes, bool]:
    """The response's head, its body as sent, and whether to hold the connection open
    after it (else close). The long line comes first, then the small events, then the ending."""
    rest = b"".join(_event(f" w{i}") for i in range(shape.tokens)) + _ending(shape.ending)
    open_end = shape.ending in ("hold", "cut")
    if shape.gzip:
        if shape.line is None:
            start, z = b"", zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        else:
            start, z = _gzip_line(shape.line)
            z = z.copy()
        data = start + z.compress(rest) + z.flush(zlib.Z_SYNC_FLUSH if open_end else zlib.Z_FINISH)
    else:
        data = (b"".join(_long_line(shape.line)) if shape.line is not None else b"") + rest
    if shape.chunked:
        body = b"%x\r\n%s\r\n" % (len(data), data) + (b"" if open_end else b"0\r\n\r\n")
        framing = "Transfer-Encoding: chunked"
    else:
        body = data
        framing = f"Content-Length: {len(data) + (100 if open_end else 0)}"  # an open end: more was promised
    encoding = "Content-Encoding: gzip\r\n" if shape.gzip else ""
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n{encoding}{framing}\r\n\r\n".encode()
    return head, body, shape.ending == "hold"


class _Server(RawServer):
    """Raw asyncio in a thread of its own: answers request ``i`` (its prompt's last word)
    with ``shapes[i]``; ``handled`` counts the requests read."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: dict[int, Shape] = {}
        self.handled = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            body = json.loads(await reader.readexactly(length))
            self.handled += 1
            shape = self.shapes[int(body["prompt"].split()[-1])]
            head_bytes, data, hold = wire(shape)
            writer.write(head_bytes)
            for i in range(min(shape.trickle, len(data))):
                writer.write(data[i : i + 1])
                await writer.drain()
                await asyncio.sleep(0.001)
            writer.write(memoryview(data)[shape.trickle :])
            await writer.drain()
            if hold:
                await reader.read(1)  # until the client closes
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


@pytest.fixture(scope="module")
def server() -> Iterator[_Server]:
    with _Server() as srv:
        yield srv


@st.composite
def shapes(draw: st.DrawFn) -> Shape:
    gzip = draw(st.booleans())
    kind = draw(st.sampled_from(["none", "near", "bomb"] if gzip else ["none", "near"]))
    line = None if kind == "none" else draw(st.sampled_from(LINE_SIZES if kind == "near" else BOMB_SIZES))
    return Shape(
        tokens=draw(st.integers(0, 6)),
        line=line,
        gzip=gzip,
        chunked=draw(st.booleans()),
        ending=draw(st.sampled_from(ENDINGS)),
        trickle=draw(st.sampled_from([0, 0, 1, 40])),
    )


def expected(shape: Shape) -> set[ErrorKind]:
    if shape.over_cap:
        # a cut body's end may be read before the long line is parsed
        return {ErrorKind.INVALID_RESPONSE} | ({ErrorKind.DISCONNECTED} if shape.ending == "cut" else set())
    if shape.ending in ("done", "finish", "hold"):
        return {ErrorKind.OK}
    return {ErrorKind.DISCONNECTED}


async def _run(url: str, kind: str, n: int) -> tuple[list[Any], int]:
    cfg = TransportConfig(
        base_url=url,
        dialect=get_dialect("completions"),
        options=DialectOptions(model="m"),
        read_timeout_s=10.0,
        request_timeout_s=30.0,
        end_grace_s=0.05,
    )
    transport = make_transport(kind, cfg)
    specs = [RequestSpec(index=i, prompt=f"request {i}", prompt_tokens=2, max_tokens=4) for i in range(n)]
    tracemalloc.start()
    try:
        result = await Runner(transport).run_level(LevelPlan(0, "concurrency", 2, requests=n), iter(specs))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await transport.aclose()
    return result.records, peak


@pytest.mark.parametrize("kind", ["aiohttp", "httpx"])
@budget(20)  # each example: one level of 1-3 requests, a bomb inflating up to 96 MiB among them
@given(st.lists(shapes(), min_size=1, max_size=3))
def test_every_hostile_shape_is_one_record_with_its_status_in_bounded_memory(
    server: _Server, kind: str, plan: list[Shape]
) -> None:
    for shape in plan:
        wire(shape)  # built before the traced run (the server's copy is not the client's memory)
    server.shapes = dict(enumerate(plan))
    handled = server.handled
    records, peak = asyncio.run(_run(f"http://127.0.0.1:{server.port}", kind, len(plan)))
    assert sorted(r.index for r in records) == list(range(len(plan)))
    assert server.handled - handled == len(plan)  # each request reached the server once
    for rec in records:
        shape = plan[rec.index]
        assert rec.status in expected(shape), (shape, rec.status, rec.error)
        assert rec.done_ns >= rec.sent_ns > 0
        if rec.ok:
            long_event = 1 if shape.line is not None else 0
            assert rec.output_tokens == len(rec.events) == shape.tokens + long_event + 1, shape
            assert rec.done_ns >= rec.events[-1][0]
        event(f"{kind} {rec.status.value}")
        event(f"line: {'none' if shape.line is None else 'bomb' if shape.line > 4 * MIB else 'near the cap'}")
        event(f"ending: {shape.ending}{', trickled' if shape.trickle else ''}{', gzip' if shape.gzip else ''}")
    assert peak < MEMORY_CAP, (peak, plan)
