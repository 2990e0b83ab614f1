"""The header timeout (loadgen.server.connection) and the SIGTERM drain, on a real server on
127.0.0.1; where the header clock runs, from the bytes; and the private aiohttp parts the
header timeout relies on."""

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
from loadgen.server.connection import GuardedRequestHandler, GuardedServer, HeadClock
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
        assert isinstance(server._kwargs, dict) and server._loop is asyncio.get_running_loop()
        handler: Any = server()
        assert isinstance(handler, GuardedRequestHandler) and isinstance(handler, RequestHandler)
        assert callable(handler.force_close)
    finally:
        await runner.cleanup()


# -- where a head begins and ends, from the bytes ------------------------------------------


def _pipelined() -> tuple[bytes, list[tuple[int, int]]]:
    """Three pipelined requests (a Content-Length body, a chunked body, no body) and the
    byte ranges of their heads."""
    parts = [
        (HEAD + b"Content-Length: 30\r\n\r\n", b'{"a": "\r\n\r\nPOST / HTTP/1.1\r\n"}'[:30]),
        (HEAD + b"Transfer-Encoding: chunked\r\n\r\n", b"5\r\n\r\n\r\nx\r\n3;e=1\r\nGET\r\n0\r\n\r\n"),
        (b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", b""),
    ]
    data, heads = b"", []
    for head, body in parts:
        heads.append((len(data), len(data) + len(head)))
        data += head + body
    return data, heads


async def test_the_head_clock_runs_exactly_while_a_head_is_arriving() -> None:
    # bodies that look like heads (CRLFCRLF, a request line) must not restart the clock
    data, heads = _pipelined()
    late: list[int] = []
    for step in (1, 2, 7, 64, len(data)):  # the same bytes in reads of every size
        clock = HeadClock(1e6, lambda: late.append(1))
        seen = []
        for at in range(0, len(data), step):
            clock.feed(data[at : at + step])
            seen.append((min(at + step, len(data)), clock.running))
        for end, running in seen:
            # running after `end` bytes iff a head has begun and is not complete
            assert running == any(start < end < stop for start, stop in heads), (step, end)
        clock.close()
        assert not late and not clock.running


async def test_empty_lines_between_requests_start_the_clock() -> None:
    # llhttp skips CRLFs before a request line: a trickle of them must not hold a socket untimed
    clock = HeadClock(1e6, lambda: None)
    clock.feed(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    assert not clock.running
    clock.feed(b"\r\n")
    assert clock.running
    clock.feed(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    assert not clock.running
    clock.close()


async def test_a_head_the_parser_rejects_keeps_its_clock_and_a_late_one_fires() -> None:
    fired = asyncio.Event()
    clock = HeadClock(0.05, fired.set)
    clock.feed(b"POST /v1/completions HTTP/1.1\r\nBad Header\r\n")  # begun, then unparseable
    assert clock.running
    clock.feed(b"X: y\r\n\r\n")  # no longer watched: the clock still runs
    async with asyncio.timeout(BOUND_S):
        await fired.wait()
    assert clock.late and not clock.running


# -- big bodies in many reads, queued requests, long streams: never cut -------------------


async def _read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One response on a kept-alive connection: ``(status line, body)`` (chunked or not)."""
    status = await reader.readline()
    length, chunked = 0, False
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
        elif name.lower() == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
    if not chunked:
        return status, await reader.readexactly(length)
    body = b""
    while True:
        line = await reader.readline()
        assert line, f"connection closed mid-stream after {len(body)} bytes"
        if not (size := int(line.split(b";")[0], 16)):
            break
        body += (await reader.readexactly(size + 2))[:-2]
    await reader.readline()
    return status, body


def _big_request(max_tokens: int) -> bytes:
    # ~200 KB of JSON but only 200 tokens (one per 1000-letter word): a big body, a short prefill
    body = json.dumps(
        {
            "model": "llama-3.1-8b",
            "prompt": " ".join(["w" * 1000] * 200),
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()
    return HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body


async def _big_requests_in_pieces(url: str, requests: int, max_tokens: int) -> list[list[Any]]:
    """Send ``requests`` big requests one after another on one connection, each in 8 KB
    writes; return each answer's events."""
    reader, writer = await _open(url)
    answers = []
    try:
        for _ in range(requests):
            writer.write(_big_request(max_tokens))  # more than a socket buffer: many reads
            await writer.drain()
            async with asyncio.timeout(BOUND_S * 3):
                status, body = await _read_response(reader)
            assert status.startswith(b"HTTP/1.1 200"), status  # b"": closed before a response
            answers.append(_events(body))
    finally:
        writer.close()
    return answers


async def test_big_bodies_in_many_reads_and_long_streams_outlive_the_header_timeout() -> None:
    # The real server (uvloop, as users run it) with a 0.5 s header timeout. Six connections
    # each send two ~200 KB requests (about 25 writes each) on one kept-alive connection while
    # the others stream; with --max-num-seqs 4 some wait in the engine's queue. Every stream
    # is 250 tokens (~6 ms a step): several times the header timeout, so a timer wrongly
    # armed by body bytes cuts it (before the fix: 7 of 8 such connections closed at 0.5 s,
    # before a response).
    max_tokens = 250
    server = ServerProcess(["--model", "llama-3.1-8b", "--header-timeout", "0.5", "--max-num-seqs", "4"])
    with server as url:
        answers = await asyncio.gather(*(_big_requests_in_pieces(url, 2, max_tokens) for _ in range(6)))
        # and a pipelined pair: the second head arrives (in two reads) while the first streams
        reader, writer = await _open(url)
        writer.write(_big_request(max_tokens) + HEAD[:20])
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(_big_request(max_tokens)[20:])
        async with asyncio.timeout(BOUND_S * 3):
            pipelined = [await _read_response(reader) for _ in range(2)]
        writer.close()
    events = [e for conn in answers for e in conn] + [_events(body) for status, body in pipelined]
    assert all(status.startswith(b"HTTP/1.1 200") for status, _ in pipelined)
    assert len(events) == 14
    for ev in events:
        assert ev[-1] == "[DONE]"
        texts = [e for e in ev[:-1] if e["choices"]]
        assert len(texts) == max_tokens and texts[-1]["choices"][0]["finish_reason"] == "length"


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
