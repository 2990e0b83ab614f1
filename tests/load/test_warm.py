"""Warm connections and --ramp-up, against real servers on loopback: a level's connections
are opened before its clock starts (none of its measured requests waits for a connect),
a server that closes every connection shows every request as new, and ramp-up spreads
the users' first sends and leaves them out of the measurement."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.load.runner import LevelPlan, Runner
from loadgen.metrics.summary import summarize_level
from loadgen.records import RequestRecord, RequestSpec
from tests.client.closing_server import ClosingServer

TRANSPORTS = ["aiohttp", "httpx", "fast"]
USERS = 8


def _transport(url: str, kind: str) -> Any:
    cfg = TransportConfig(
        base_url=url,
        dialect=get_dialect("completions"),
        options=DialectOptions(model="closing-model"),
        read_timeout_s=5,
    )
    return make_transport(kind, cfg)


def _specs() -> Any:
    return (RequestSpec(index=i, prompt=f"hello {i}", prompt_tokens=2, max_tokens=4) for i in itertools.count())


async def _level(mode: str, kind: str, warm: bool, requests: int = 32) -> tuple[list[RequestRecord], ClosingServer]:
    server = ClosingServer(mode)
    await server.start()
    transport = _transport(server.url, kind)
    plan = LevelPlan(index=0, mode="concurrency", value=USERS, requests=requests, warm_connections=warm)
    try:
        res = await Runner(transport).run_level(plan, _specs())
    finally:
        await transport.aclose()
        await server.stop()
    return sorted(res.records, key=lambda r: r.sent_ns), server


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_warm_connections_leave_no_connect_inside_the_level(kind: str) -> None:
    records, server = await _level("never", kind, warm=True)
    assert len(records) == 32 and all(r.ok for r in records)
    assert [r.new_connection for r in records] == [False] * 32
    assert all(r.connect_ms is None for r in records)
    assert server.connections == USERS  # one per user, opened before the start
    assert server.handled == 32  # the warm-up requests are no records and no completions
    summary = summarize_level(records, load={"mode": "concurrency", "value": USERS})
    assert summary.connect is not None and (summary.connect.new, summary.connect.known) == (0, 32)
    assert summary.to_json()["connect"]["new"] == 0


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_without_warming_the_first_wave_opens_the_connections(kind: str) -> None:
    records, server = await _level("never", kind, warm=False)
    assert all(r.ok for r in records)
    assert [r.new_connection for r in records[:USERS]] == [True] * USERS
    assert not any(r.new_connection for r in records[USERS:])
    assert all(r.connect_ms is not None and r.connect_ms > 0 for r in records[:USERS])
    summary = summarize_level(records, load={"mode": "concurrency", "value": USERS})
    assert summary.connect is not None and summary.connect.new == USERS
    assert summary.connect.connect_ms.count == USERS
    assert server.connections == USERS


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_a_server_that_closes_every_connection_shows_each_request_as_new(kind: str) -> None:
    records, server = await _level("after", kind, warm=True, requests=24)
    assert len(records) == 24 and all(r.ok for r in records), [r.error for r in records]
    # fast opens the warm connections without a request, so the server has not closed them
    # yet: the users' first requests use them; aiohttp's and httpx's warm-up GETs were closed
    warmed = USERS if kind == "fast" else 0
    assert not any(r.new_connection for r in records[:warmed])
    assert all(r.new_connection for r in records[warmed:])  # reopened, and counted
    summary = summarize_level(records, load={"mode": "concurrency", "value": USERS})
    assert summary.connect is not None and summary.connect.known == 24
    assert summary.connect.new == 24 - warmed
    assert server.handled == 24


async def test_ramp_up_spreads_the_first_sends_and_leaves_them_out() -> None:
    server = ClosingServer("never")
    await server.start()
    transport = _transport(server.url, "aiohttp")
    ramp = 0.4
    plan = LevelPlan(index=0, mode="concurrency", value=4, duration_s=0.2, ramp_up_s=ramp, warm_connections=True)
    try:
        res = await Runner(transport).run_level(plan, _specs())
    finally:
        await transport.aclose()
        await server.stop()
    first = {}
    for r in sorted(res.records, key=lambda r: r.sent_ns):
        first.setdefault(r.worker, r.sent_ns)
    starts = [first[u] - res.start_ns for u in range(4)]
    assert starts == sorted(starts)  # user u starts at u * S / users, in order
    span = (starts[-1] - starts[0]) / 1e9
    assert 0.5 < span / (ramp * 3 / 4) < 1.5  # the spread is the ramp's, as a ratio
    end_ns = res.start_ns + int(ramp * 1e9)
    assert all(r.warmup == (r.sent_ns < end_ns) for r in res.records)
    measured = [r for r in res.records if not r.warmup]
    assert measured and len(measured) < len(res.records)
    summary = summarize_level(res.records, load={"mode": "concurrency", "value": 4})
    assert summary.requests.total == len(measured)


def test_without_a_ramp_up_nothing_sent_near_the_start_is_warm_up() -> None:
    """A worker's share starts at a shared instant; the event loop may run that timer up to its
    clock resolution early, so the first request can leave a hair before ``start_ns``. Only a
    ramp-up makes requests warm-up by their send time (CI once lost one measured request so)."""
    start = 10**12
    plain = LevelPlan(index=0, mode="concurrency", value=4, requests=8)
    assert plain.warm_until_ns(start) == 0 < start - 1_000_000
    ramped = LevelPlan(index=0, mode="concurrency", value=4, requests=8, ramp_up_s=2.0)
    assert ramped.warm_until_ns(start) == start + 2_000_000_000


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_a_server_that_cannot_be_reached_fails_the_warm_up_quietly(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Warming is a courtesy: a refused connect opens nothing, is logged once, raises nothing
    (the level's own requests then meet the error and record it)."""
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    transport = _transport(f"http://127.0.0.1:{port}", kind)
    try:
        assert await transport.warm(4) == 0
        assert await transport.warm(4) == 0
    finally:
        await transport.aclose()
    assert sum("ahead of the level" in r.getMessage() for r in caplog.records) == 1
