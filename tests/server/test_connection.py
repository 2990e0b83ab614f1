"""The header timeout (loadgen.server.connection) and the SIGTERM drain, on a real server on
127.0.0.1, and the private aiohttp parts the header timeout relies on."""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

import aiohttp
from aiohttp.web_protocol import RequestHandler

from loadgen.server.api import create_app
from loadgen.server.app import make_runner
from loadgen.server.config import HttpLimits
from loadgen.server.connection import GuardedRequestHandler, GuardedServer
from loadgen.server.process import ServerProcess
from tests.server.helpers import MODEL, make_engine, serve

BOUND_S = 20.0  # a safety net only: a connection the server keeps fails the test, never hangs it
HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


async def _open(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").split(":")
    return await asyncio.open_connection(host, int(port))


async def _trickle_until_closed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gap_s: float) -> int:
    """Send one header line every ``gap_s`` until the server closes; return lines sent."""
    sent = 0
    async with asyncio.timeout(BOUND_S):
        while True:
            try:
                writer.write(b"X-Slow: %d\r\n" % sent)
                await writer.drain()
            except ConnectionError:
                return sent
            sent += 1
            try:
                if await asyncio.wait_for(reader.read(1), gap_s) == b"":
                    return sent
            except TimeoutError:
                pass
            except ConnectionError:
                return sent


async def test_slow_headers_are_cut_after_the_header_timeout() -> None:
    timeout_s = 0.5
    async with serve(make_engine(), http=HttpLimits(header_timeout_s=timeout_s)) as url:
        conns = [await _open(url) for _ in range(20)]
        for _, writer in conns:
            writer.write(HEAD)
        sent = await asyncio.gather(*(_trickle_until_closed(r, w, timeout_s / 5) for r, w in conns))
        silent_reader, silent_writer = await _open(url)  # connects, sends nothing
        async with asyncio.timeout(BOUND_S):
            assert await silent_reader.read() == b""
        for _, writer in [*conns, (silent_reader, silent_writer)]:
            writer.close()
        # each was closed after some header lines, by the timer and not by a header limit
        assert all(1 <= n < 128 for n in sent), sent
        async with aiohttp.ClientSession() as s:  # the server still serves
            async with s.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 2}) as resp:
                assert resp.status == 200


async def test_a_slow_body_and_kept_alive_requests_are_not_cut_by_the_header_timeout() -> None:
    timeout_s = 0.3
    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 2}).encode()
    async with serve(make_engine(), http=HttpLimits(header_timeout_s=timeout_s)) as url:
        reader, writer = await _open(url)
        for _ in range(2):  # two requests on one kept-alive connection
            writer.write(HEAD + b"Content-Length: %d\r\n\r\n" % len(body))
            for i in range(0, len(body), 10):  # the body over more than the header timeout
                writer.write(body[i : i + 10])
                await writer.drain()
                await asyncio.sleep(timeout_s / 3)
            async with asyncio.timeout(BOUND_S):
                status = await reader.readline()
                assert status.startswith(b"HTTP/1.1 200"), status
                length = 0
                while (line := await reader.readline()) != b"\r\n":
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
            await asyncio.sleep(timeout_s * 2)  # idle between requests: not a header wait
        # the next request's headers trickle: the timer applies again
        writer.write(HEAD)
        assert await _trickle_until_closed(reader, writer, timeout_s / 5) >= 1
        writer.close()


async def test_the_private_aiohttp_parts_the_header_timeout_uses_are_there() -> None:
    # if aiohttp renames or drops one of these, this fails first (see loadgen.server.connection)
    assert callable(getattr(aiohttp.web.AppRunner, "_make_server", None))
    app = create_app(make_engine(), model_name=MODEL, http=HttpLimits(header_timeout_s=7.0))
    runner = make_runner(app)
    await runner.setup()
    try:
        server = runner.server
        assert isinstance(server, GuardedServer) and server.header_timeout_s == 7.0
        handler: Any = server()
        assert isinstance(handler, GuardedRequestHandler) and isinstance(handler, RequestHandler)
        for name in ("_request_count", "_request_in_progress", "_messages", "_loop", "_force_close"):
            assert hasattr(handler, name), name
        assert handler._request_count == 0 and handler._request_in_progress is False
    finally:
        await runner.cleanup()


# -- SIGTERM drains ------------------------------------------------------------------------


def _events(raw: bytes) -> list[Any]:
    out: list[Any] = []
    for block in raw.decode().split("\n\n"):
        if block.startswith("data: "):
            data = block[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


async def _stream(session: aiohttp.ClientSession, url: str, max_tokens: int, started: asyncio.Event) -> list[Any]:
    body = {
        "model": "llama-3.1-8b",
        "prompt": "hi",
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    raw = b""
    async with session.post(url + "/v1/completions", json=body) as resp:
        assert resp.status == 200
        async with asyncio.timeout(BOUND_S):
            async for chunk in resp.content.iter_any():
                raw += chunk
                started.set()
    return _events(raw)


async def test_sigterm_drains_streams_answers_503_then_exits() -> None:
    # time-scale 1: a decode step is ~6 ms, so 4000 tokens stream for ~25 s, 50 for ~0.3 s:
    # within a 3 s drain the short one finishes, the long one gets a last event
    server = ServerProcess(["--model", "llama-3.1-8b", "--drain-timeout", "3"])
    with server as url:
        assert server.proc is not None
        async with aiohttp.ClientSession() as session:
            long_started, short_started = asyncio.Event(), asyncio.Event()
            long = asyncio.create_task(_stream(session, url, 4000, long_started))
            short = asyncio.create_task(_stream(session, url, 50, short_started))
            async with asyncio.timeout(BOUND_S):
                await long_started.wait()
                await short_started.wait()
            server.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.1)
            async with aiohttp.ClientSession() as fresh:  # a new connection, mid-drain
                async with fresh.post(
                    url + "/v1/completions", json={"model": "llama-3.1-8b", "prompt": "hi", "max_tokens": 2}
                ) as resp:
                    assert resp.status == 503
                    assert (await resp.json())["error"]["code"] == "shutting_down"
            for task, reason in ((short, "length"), (long, "abort")):
                events = await task
                assert events[-1] == "[DONE]"
                finals = [e for e in events[:-1] if e["choices"]]
                assert finals[-1]["choices"][0]["finish_reason"] == reason
                assert events[-2]["usage"]["completion_tokens"] >= 1
        rc = await asyncio.to_thread(server.proc.wait, BOUND_S)
    assert rc == 0


async def test_a_second_signal_ends_the_drain_at_once() -> None:
    # a 600 s drain: only the second signal can end the stream within the bound
    server = ServerProcess(["--model", "llama-3.1-8b", "--drain-timeout", "600"])
    with server as url:
        assert server.proc is not None
        async with aiohttp.ClientSession() as session:
            started = asyncio.Event()
            long = asyncio.create_task(_stream(session, url, 4000, started))
            async with asyncio.timeout(BOUND_S):
                await started.wait()
            server.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.3)
            assert not long.done()  # draining: the stream goes on
            server.proc.send_signal(signal.SIGINT)
            events = await long
        assert events[-1] == "[DONE]"
        finals = [e for e in events[:-1] if e["choices"]]
        assert finals[-1]["choices"][0]["finish_reason"] == "abort"
        rc = await asyncio.to_thread(server.proc.wait, BOUND_S)
    assert rc == 0
