"""Transport floor: loadgen's client CPU per streamed event next to the cheapest honest loops.

Against the same stamping server as ``client_overhead.py`` (64 tokens per request at
20 ms spacing, in its own process), closed loops at each stream count, interleaved so
they share the machine's drift:

* ``aiohttp-floor``: aiohttp on uvloop; per stream, post, read every chunk, take a
  ``perf_counter_ns()`` and count its ``data:`` lines; nothing else.
* ``protocol-floor``: an asyncio Protocol + httptools on uvloop, one keep-alive
  connection per stream: write a request, stamp each ``data_received``, feed httptools,
  count ``data:`` lines in ``on_body``, send the next request on message complete.
* ``loadgen-fast`` / ``loadgen-aiohttp``: loadgen's real client (``Runner`` + transport,
  driven as ``client_overhead.py`` drives it).

CPU per event is the process CPU time over the whole run divided by every token event
received in it (warm-up requests included on both sides, ``[DONE]`` not counted).

    python benchmarks/transport_floor.py [--levels 64,256] [--seconds 4] [--reps 2] [--out FILE]

Every run is bounded in requests and time; traffic stays on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

import aiohttp
import httptools
from _bench import raise_fd_limit, server_process, use_uvloop
from client_overhead import SPACING_S, TOKENS, routes

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.load.runner import LevelPlan, Runner
from loadgen.records import RequestSpec

REQUEST_S = TOKENS * SPACING_S
SLACK_S = 30.0  # a run that has not ended this long after its window is cut


@dataclass(slots=True)
class Run:
    """What one closed-loop run measured."""

    events: int
    wall_s: float
    cpu_s: float


def _max_requests(streams: int, seconds: float) -> int:
    return max(streams, int(streams * seconds / REQUEST_S)) + streams


async def _aiohttp_floor(url: str, streams: int, seconds: float) -> int:
    body = b'{"prompt":"floor","max_tokens":64}'
    headers = {"Content-Type": "application/json"}
    budget = [_max_requests(streams, seconds)]
    deadline = time.perf_counter() + seconds
    events = [0]
    connector = aiohttp.TCPConnector(limit=streams + 8)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def user() -> None:
            while budget[0] > 0 and time.perf_counter() < deadline:
                budget[0] -= 1
                n = 0
                async with session.post(url + "/v1/completions", data=body, headers=headers) as resp:
                    async for chunk in resp.content.iter_any():
                        _t = time.perf_counter_ns()
                        n += chunk.count(b"data:")
                events[0] += n - 1  # the [DONE] line is not a token

        await asyncio.gather(*(user() for _ in range(streams)))
    return events[0]


class _FloorProtocol(asyncio.Protocol):
    def __init__(self, request: bytes, budget: list[int], deadline: float, done: asyncio.Future[None]) -> None:
        self.request = request
        self.budget = budget
        self.deadline = deadline
        self.done = done
        self.events = 0
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.last_ns = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._send()

    def _send(self) -> None:
        assert self.transport is not None
        if self.budget[0] > 0 and time.perf_counter() < self.deadline:
            self.budget[0] -= 1
            self.transport.write(self.request)
        else:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        self.last_ns = time.perf_counter_ns()
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        self.events += body.count(b"data:")

    def on_message_complete(self) -> None:
        self.events -= 1  # its [DONE] line is not a token
        self._send()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def _protocol_floor(url: str, streams: int, seconds: float) -> int:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    body = b'{"prompt":"floor","max_tokens":64}'
    request = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    loop = asyncio.get_running_loop()
    budget = [_max_requests(streams, seconds)]
    deadline = time.perf_counter() + seconds
    protocols: list[_FloorProtocol] = []
    for _ in range(streams):
        done: asyncio.Future[None] = loop.create_future()
        _tr, proto = await loop.create_connection(
            lambda d=done: _FloorProtocol(request, budget, deadline, d), host, port
        )
        protocols.append(proto)
    await asyncio.gather(*(p.done for p in protocols))
    return sum(p.events for p in protocols)


def _loadgen(kind: str) -> Callable[[str, int, float], Awaitable[int]]:
    async def level(url: str, streams: int, seconds: float) -> int:
        cfg = TransportConfig(
            url, get_dialect("completions"), DialectOptions(model="m", strict=True), max_connections=streams + 8
        )
        transport = make_transport(kind, cfg)
        n = _max_requests(streams, seconds) - streams
        specs = iter([RequestSpec(i, f"floor-{i % streams}", 1, TOKENS) for i in range(n + streams)])
        try:
            res = await Runner(transport).run_level(
                LevelPlan(0, "concurrency", streams, requests=n, warmup_requests=streams), specs
            )
        finally:
            await transport.aclose()
        return sum(len(r.events) for r in res.records if r.ok)

    return level


LOOPS: dict[str, Callable[[str, int, float], Awaitable[int]]] = {
    "aiohttp-floor": _aiohttp_floor,
    "protocol-floor": _protocol_floor,
    "loadgen-fast": _loadgen("fast"),
    "loadgen-aiohttp": _loadgen("aiohttp"),
}


def _measure(name: str, url: str, streams: int, seconds: float) -> Run:
    async def timed() -> Run:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        events = await asyncio.wait_for(LOOPS[name](url, streams, seconds), seconds + REQUEST_S + SLACK_S)
        return Run(events, time.perf_counter() - wall0, time.process_time() - cpu0)

    return asyncio.run(timed())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="64,256")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "transport-floor.txt")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    raise_fd_limit()
    lines: list[str] = []

    def emit(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    with server_process(routes) as url:
        use_uvloop()
        emit(
            f"CPU cores: {os.cpu_count()} (client and server share them); {TOKENS} tokens every "
            f"{SPACING_S * 1e3:.0f} ms; {args.seconds:g} s per run; runs interleaved, {args.reps} repetitions"
        )
        emit(f"{'rep':>3} {'loop':<16} {'streams':>7} {'events/s':>9} {'µs/event':>8} {'÷ protocol-floor':>16}")
        for rep in range(1, args.reps + 1):
            for streams in levels:
                floor = float("nan")
                for name in LOOPS:
                    r = _measure(name, url, streams, args.seconds)
                    us = 1e6 * r.cpu_s / max(r.events, 1)
                    if name == "protocol-floor":
                        floor = us
                    ratio = f"{us / floor:>16.2f}" if name.startswith("loadgen") else f"{'':>16}"
                    emit(f"{rep:>3} {name:<16} {streams:>7} {r.events / r.wall_s:>9.0f} {us:>8.1f} {ratio}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
