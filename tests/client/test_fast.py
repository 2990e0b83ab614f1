"""The ``fast`` transport's own connection handling, against real servers on loopback:
pool reuse and its limit, body framings (Content-Length, chunked, gzip), ``Connection:
close``, a server that closes mid-stream, and a response that is not HTTP. What every
transport must do is in the parametrised suites (test_transport, test_keepalive, ...)."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import FastTransport, TransportConfig, make_transport
from loadgen.errors import ConfigError
from loadgen.records import ErrorKind, RequestRecord, RequestSpec

N_TOKENS = 4


def _sse() -> bytes:
    out = b""
    for i in range(N_TOKENS):
        fin = '"length"' if i == N_TOKENS - 1 else "null"
        out += f'data: {{"choices":[{{"index":0,"text":" w{i}","finish_reason":{fin}}}]}}\n\n'.encode()
    return out + b"data: [DONE]\n\n"


class _Peers:
    """An aiohttp app that counts the client connections (by peer address) it served."""

    def __init__(self) -> None:
        self.peers: set[Any] = set()
        self.active = 0
        self.most_active = 0

    def seen(self, request: web.Request) -> None:
        assert request.transport is not None
        self.peers.add(request.transport.get_extra_info("peername"))


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def _server(handler: Handler) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _transport(url: str, **kw: Any) -> Any:
    kw.setdefault("read_timeout_s", 5.0)
    cfg = TransportConfig(url, get_dialect("completions"), DialectOptions(model="m"), **kw)
    return make_transport("fast", cfg)


async def _send(transport: Any, i: int) -> RequestRecord:
    rec = RequestRecord(index=i)
    await transport.send(RequestSpec(index=i, prompt=f"p{i}", prompt_tokens=1, max_tokens=N_TOKENS), rec)
    return rec


async def _sequential(url: str, n: int, **kw: Any) -> tuple[list[RequestRecord], Any]:
    transport = _transport(url, **kw)
    try:
        recs = [await _send(transport, i) for i in range(n)]
        stats = transport.pool.stats()
    finally:
        await transport.aclose()
    return recs, stats


def _all_ok(recs: list[RequestRecord]) -> bool:
    return all(r.status is ErrorKind.OK and len(r.events) == N_TOKENS and r.retries == 0 for r in recs)


@pytest.mark.parametrize("framing", ["content-length", "chunked", "gzip"])
async def test_sequential_requests_share_one_kept_alive_connection(framing: str) -> None:
    peers = _Peers()

    async def handle(request: web.Request) -> web.StreamResponse:
        peers.seen(request)
        await request.read()
        if framing == "content-length":
            return web.Response(body=_sse(), content_type="text/event-stream")
        if framing == "gzip":
            return web.Response(
                body=gzip.compress(_sse()), headers={"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for line in _sse().split(b"\n\n")[:-1]:
            await resp.write(line + b"\n\n")
        await resp.write_eof()
        return resp

    async with _server(handle) as url:
        recs, stats = await _sequential(url, 6)
    assert _all_ok(recs), [(r.status, r.error) for r in recs]
    assert [t for _, t in recs[0].events] == [1] * N_TOKENS
    assert len(peers.peers) == 1 and stats == {"open": 1, "idle": 1, "connects": 1}


async def test_a_connection_close_answer_is_not_reused() -> None:
    peers = _Peers()

    async def handle(request: web.Request) -> web.StreamResponse:
        peers.seen(request)
        return web.Response(body=_sse(), content_type="text/event-stream", headers={"Connection": "close"})

    async with _server(handle) as url:
        recs, stats = await _sequential(url, 3)
    assert _all_ok(recs)
    assert len(peers.peers) == 3 and stats == {"open": 0, "idle": 0, "connects": 3}


async def test_concurrent_requests_keep_to_max_connections() -> None:
    peers = _Peers()

    async def handle(request: web.Request) -> web.StreamResponse:
        peers.seen(request)
        peers.active += 1
        peers.most_active = max(peers.most_active, peers.active)
        try:
            await asyncio.sleep(0.02)
            return web.Response(body=_sse(), content_type="text/event-stream")
        finally:
            peers.active -= 1

    async with _server(handle) as url:
        transport = _transport(url, max_connections=2)
        try:
            recs = await asyncio.gather(*(_send(transport, i) for i in range(8)))
            stats = transport.pool.stats()
        finally:
            await transport.aclose()
    assert _all_ok(list(recs))
    assert peers.most_active == 2 and len(peers.peers) == 2 and stats["connects"] == 2


async def test_a_server_that_closes_mid_stream_is_disconnected_and_keeps_the_events() -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for line in _sse().split(b"\n\n")[:2]:
            await resp.write(line + b"\n\n")
        await asyncio.sleep(0.01)
        assert request.transport is not None
        request.transport.close()
        return resp

    async with _server(handle) as url:
        recs, stats = await _sequential(url, 2)
    for r in recs:
        assert r.status is ErrorKind.DISCONNECTED and r.retries == 0, (r.status, r.error)
        assert (r.error or "").startswith("connection closed mid-stream") and len(r.events) == 2
    assert stats["connects"] == 2 and stats["open"] == 0


async def test_the_read_timeout_outlives_a_request_on_a_kept_alive_connection() -> None:
    """The silence timer is kept across requests on one connection: an idle spell longer
    than the read timeout between two requests fails neither, and the third request's
    silent server still trips the read timeout."""
    peers = _Peers()
    served = [0]

    async def handle(request: web.Request) -> web.StreamResponse:
        peers.seen(request)
        served[0] += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        lines = _sse().split(b"\n\n")[:-1]
        if served[0] == 3:  # one event, then silence (bounded) until the client gives up
            await resp.write(lines[0] + b"\n\n")
            await asyncio.sleep(5)
            return resp
        for line in lines:
            await resp.write(line + b"\n\n")
        await resp.write_eof()
        return resp

    async with _server(handle) as url:
        transport = _transport(url, read_timeout_s=0.2)
        try:
            first = await _send(transport, 0)
            await asyncio.sleep(0.5)  # idle past the read timeout: the timer lapses, nothing fails
            second = await _send(transport, 1)
            third = await _send(transport, 2)
            stats = transport.pool.stats()
        finally:
            await transport.aclose()
    assert _all_ok([first, second]), [(r.status, r.error) for r in (first, second)]
    assert len(peers.peers) == 1 and stats["connects"] == 1
    assert third.status is ErrorKind.TIMEOUT and "read timeout" in (third.error or ""), (third.status, third.error)
    assert len(third.events) == 1


@pytest.mark.parametrize("garbage", [b"HELLO THERE\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"])
async def test_a_response_that_is_not_http_is_an_invalid_response(garbage: bytes) -> None:
    closed: list[int] = []
    both = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(garbage)
        await writer.drain()
        await reader.read()  # until the client, done with it, closes
        writer.close()
        closed.append(1)
        if len(closed) == 2:
            both.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        recs, stats = await _sequential(f"http://127.0.0.1:{port}", 2)
        await asyncio.wait_for(both.wait(), 10)  # the client closed both connections
    finally:
        server.close()
        await server.wait_closed()
    for r in recs:
        assert r.status is ErrorKind.INVALID_RESPONSE and r.retries == 0, (r.status, r.error)
        assert (r.error or "").startswith("bad HTTP response: HttpParser")
    assert stats["connects"] == 2 and stats["idle"] == 0


def test_a_header_with_a_line_break_is_refused_without_its_value() -> None:
    cfg = TransportConfig(
        "http://127.0.0.1:9", get_dialect("completions"), DialectOptions(), headers={"X-Key": "sk-secret\r\nEvil: 1"}
    )
    with pytest.raises(ConfigError) as info:
        FastTransport(cfg)
    assert "X-Key" in str(info.value) and "sk-secret" not in str(info.value)


def test_on_uvloop_as_loadgen_runs_it() -> None:
    """loadgen's processes run uvloop (loadgen.aio): the same reuse there."""
    from loadgen.aio import new_event_loop

    async def main() -> tuple[list[RequestRecord], Any]:
        async def handle(request: web.Request) -> web.StreamResponse:
            return web.Response(body=_sse(), content_type="text/event-stream")

        async with _server(handle) as url:
            return await _sequential(url, 3)

    loop = new_event_loop()
    try:
        recs, stats = loop.run_until_complete(main())
    finally:
        loop.close()
    assert _all_ok(recs) and stats["connects"] == 1


async def _head_server(head: bytes | None, endless: bool) -> tuple[asyncio.Server, int, list[int]]:
    """Answers every request with ``head`` (then a short valid stream), or, ``endless``,
    with a header line that never ends (64 KiB a write until the client goes);
    ``sent`` counts the bytes written."""
    sent = [0]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            if endless:
                writer.write(b"HTTP/1.1 200 OK\r\nX-Endless: ")
                while sent[0] < 256 << 20:  # a bound for the test; the client must stop long before
                    writer.write(b"a" * (64 << 10))
                    sent[0] += 64 << 10
                    await writer.drain()
            else:
                assert head is not None
                writer.write(head + _sse())
                await writer.drain()
                await reader.read()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], sent


@pytest.mark.parametrize("kind", ["fast", "aiohttp", "httpx"])
async def test_a_header_line_that_never_ends_fails_at_once(kind: str) -> None:
    """A head line that never ends is cut at the head's bound (8190 bytes a line, as
    aiohttp's client), not at the request's timeout; the server has written little more."""
    server, port, sent = await _head_server(None, endless=True)
    cfg = TransportConfig(
        f"http://127.0.0.1:{port}", get_dialect("completions"), DialectOptions(model="m"), read_timeout_s=60.0
    )
    transport = make_transport(kind, cfg)
    try:
        rec = await asyncio.wait_for(_send(transport, 0), 60)
    finally:
        await transport.aclose()
        server.close()
    assert rec.status in (ErrorKind.INVALID_RESPONSE, ErrorKind.DISCONNECTED), (rec.status, rec.error)
    assert sent[0] < 64 << 20, f"the server wrote {sent[0] >> 20} MiB of one header line before the client stopped"


@pytest.mark.parametrize(
    ("head", "why"),
    [
        (b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(200)) + b"\r\n", "header fields"),
        (b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n", "line over 8190"),
        (b"HTTP/1.1 100 Continue\r\n\r\n" * 20 + b"HTTP/1.1 200 OK\r\n\r\n", "interim"),
    ],
)
async def test_the_fast_transport_bounds_the_head(head: bytes, why: str) -> None:
    server, port, _ = await _head_server(head, endless=False)
    try:
        recs, _ = await _sequential(f"http://127.0.0.1:{port}", 1)
    finally:
        server.close()
    assert recs[0].status is ErrorKind.INVALID_RESPONSE and why in (recs[0].error or ""), (
        recs[0].status,
        recs[0].error,
    )


async def test_interim_responses_are_skipped_and_the_answer_is_the_requests_own() -> None:
    """100 Continue and 103 Early Hints before the 200 (RFC 9110 §15.2): one POST, one ok
    record, and the next request on the kept-alive connection gets its own answer."""
    heads: list[bytes] = []

    async def handler_free_serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                heads.append(await reader.readuntil(b"\r\n\r\n"))
                length = int(heads[-1].lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                body = _sse()
                writer.write(
                    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(body), body)
                )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handler_free_serve, "127.0.0.1", 0)
    try:
        recs, stats = await _sequential(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", 4)
    finally:
        server.close()
    assert [r.status for r in recs] == [ErrorKind.OK] * 4, [(r.status, r.error) for r in recs]
    assert len(heads) == 4 and stats["connects"] == 1
    assert all(len(r.events) == N_TOKENS for r in recs)
