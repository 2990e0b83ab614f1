"""The dashboard server against real aiohttp clients on 127.0.0.1: the stream, the controls
and their guards, the token off loopback, slow clients, and closing."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from loadgen.dashboard.server import CONTROL_HEADER, MAX_CLIENTS, QUEUE_SIZE, TOKEN_HEADER, Controls, Dashboard
from tests.dashboard.conftest import RecordFeed


async def events(resp: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, Any]]:
    """(event, parsed data) of each SSE event; comments skipped."""
    name, data = "message", list[str]()
    while True:
        raw = await resp.content.readline()
        if not raw:
            return
        line = raw.decode().rstrip("\r\n")
        if line == "":
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", list[str]()
        elif line.startswith(":"):
            continue
        elif line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])


def control_of(page: str) -> str:
    m = re.search(r'<script type="application/json" id="lg-config">(.*?)</script>', page, re.S)
    assert m is not None
    return str(json.loads(m.group(1))["control"])


def base(dash: Dashboard) -> str:
    return f"http://127.0.0.1:{dash.port}"


async def test_stream_gives_a_snapshot_then_every_point() -> None:
    feed = RecordFeed(points=5)
    async with Dashboard(feed, port=0, interval_s=0.02, controls=Controls(stop=lambda: None)) as dash:
        assert dash.url == f"http://127.0.0.1:{dash.port}/"
        async with aiohttp.ClientSession() as http, http.get(base(dash) + "/events") as resp:
            assert resp.status == 200 and resp.headers["Content-Type"] == "text/event-stream"
            got: list[tuple[str, Any]] = []
            async for ev in events(resp):
                got.append(ev)
                if len(got) == 6:
                    break
    kind, snap = got[0]
    assert kind == "snapshot"
    assert snap["run"]["controls"] == {"stop": True, "skip": False}
    n0 = len(snap["series"]["t"])
    assert n0 >= 5 and len(snap["series"]["ttft_p99"]) == n0
    points = [m for k, m in got[1:]]
    assert [k for k, _ in got[1:]] == ["point"] * 5
    # no point lost or repeated between the snapshot and the stream
    assert [p["point"]["t"] for p in points] == [float(n0 + i) for i in range(5)]
    assert all(p["run"]["controls"]["stop"] for p in points)
    # the ticker tells the feed its own lateness before each tick
    assert feed.lags and all(isinstance(v, float) and v >= 0 for v in feed.lags)


async def test_controls_need_the_page_header() -> None:
    stops: list[int] = []
    skips = iter([False, True])
    controls = Controls(stop=lambda: stops.append(1), skip=lambda: next(skips))
    async with Dashboard(RecordFeed(), port=0, controls=controls) as dash, aiohttp.ClientSession() as http:
        async with http.get(base(dash) + "/") as resp:
            assert resp.status == 200
            assert "default-src 'none'" in resp.headers["Content-Security-Policy"]
            control = control_of(await resp.text())
        for path in ("/stop", "/skip"):
            for headers in ({}, {CONTROL_HEADER: "guess"}, {CONTROL_HEADER: control[:-1]}):
                async with http.post(base(dash) + path, headers=headers) as resp:
                    assert resp.status == 403
        assert stops == []
        h = {CONTROL_HEADER: control}
        async with http.post(base(dash) + "/stop", headers=h) as resp:
            assert resp.status == 200 and (await resp.json())["ok"] is True
        assert stops == [1]
        async with http.post(base(dash) + "/skip", headers=h) as resp:
            assert await resp.json() == {"ok": False, "why": "no level to skip"}
        async with http.post(base(dash) + "/skip", headers=h) as resp:
            assert (await resp.json())["ok"] is True
        # a cross-origin page, even one that had the header, is refused
        async with http.post(base(dash) + "/stop", headers={**h, "Origin": "http://evil.example"}) as resp:
            assert resp.status == 403
        assert stops == [1]


async def test_no_controls_no_routes() -> None:
    async with Dashboard(RecordFeed(), port=0) as dash, aiohttp.ClientSession() as http:
        async with http.get(base(dash) + "/") as resp:
            control = control_of(await resp.text())
        for path in ("/stop", "/skip"):
            async with http.post(base(dash) + path, headers={CONTROL_HEADER: control}) as resp:
                assert resp.status == 404 and (await resp.json())["ok"] is False


async def test_host_must_name_this_server() -> None:
    async with Dashboard(RecordFeed(), port=0) as dash, aiohttp.ClientSession() as http:
        for host, status in (
            ("evil.example", 403),
            (f"evil.example:{dash.port}", 403),
            (f"127.0.0.1:{dash.port + 1}", 403),
            (f"localhost:{dash.port}", 200),
            (f"127.0.0.1:{dash.port}", 200),
        ):
            async with http.get(base(dash) + "/events", headers={"Host": host}) as resp:
                assert resp.status == status, host


async def test_off_loopback_every_route_needs_the_token(tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    report.write_text("<html>the report</html>")
    async with Dashboard(RecordFeed(), host="0.0.0.0", port=0, report=lambda: report) as dash:
        token = dash.url.split("?token=")[1]
        assert dash.url.startswith(f"http://127.0.0.1:{dash.port}/?token=") and len(token) >= 20  # one that opens here
        async with aiohttp.ClientSession() as http:
            for path in ("/", "/events", "/report"):
                async with http.get(base(dash) + path) as resp:
                    assert resp.status == 403, path
                async with http.get(base(dash) + path, params={"token": token[:-1] + "x"}) as resp:
                    assert resp.status == 403, path
            async with http.get(base(dash) + "/", params={"token": token}) as resp:
                assert resp.status == 200
                control = control_of(await resp.text())
            async with http.get(base(dash) + "/report", headers={TOKEN_HEADER: token}) as resp:
                assert resp.status == 200 and await resp.text() == "<html>the report</html>"
            async with http.post(base(dash) + "/stop", headers={CONTROL_HEADER: control}) as resp:
                assert resp.status == 403  # the control header alone is not enough off loopback
            async with http.get(base(dash) + "/events", params={"token": token}) as resp:
                assert resp.status == 200
                async for kind, _ in events(resp):
                    assert kind == "snapshot"
                    break


async def test_report_route() -> None:
    found: list[Path | None] = [None]
    async with Dashboard(RecordFeed(), port=0, report=lambda: found[0]) as dash, aiohttp.ClientSession() as http:
        async with http.get(base(dash) + "/report") as resp:
            assert resp.status == 404
        found[0] = Path("/nonexistent/report.html")
        async with http.get(base(dash) + "/report") as resp:
            assert resp.status == 404


async def test_a_client_that_never_reads_is_cut_off_and_blocks_nothing() -> None:
    feed = RecordFeed(points=3600)  # a full-size snapshot: the socket fills at once
    async with Dashboard(feed, port=0, interval_s=0.002) as dash, aiohttp.ClientSession() as http:
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", dash.port))
        slow.sendall(f"GET /events HTTP/1.1\r\nHost: 127.0.0.1:{dash.port}\r\n\r\n".encode())
        try:
            async with http.get(base(dash) + "/events") as resp:
                seen: list[float] = []
                n0 = -1
                async for kind, msg in events(resp):
                    if kind == "snapshot":
                        n0 = len(msg["series"]["t"])
                    else:
                        seen.append(msg["point"]["t"])
                    # bounded: the slow client must be cut within the ticks its queue can hold
                    # plus what the sockets buffer, far below this
                    if dash.dropped or feed.ticks > 20_000:
                        break
                assert dash.dropped == 1, feed.ticks
                assert dash.clients == 1  # only the reader is left; nothing queued for the other
                at_drop = feed.ticks
                async for _kind, msg in events(resp):
                    seen.append(msg["point"]["t"])
                    if feed.ticks >= at_drop + 20:
                        break
                # the reader got every point the ticker made, in order, while the other stalled
                assert seen == [float(n0 + i) for i in range(len(seen))]
                assert len(seen) >= QUEUE_SIZE
        finally:
            slow.close()


async def test_at_most_max_clients() -> None:
    async with Dashboard(RecordFeed(), port=0) as dash, aiohttp.ClientSession() as http:
        open_ = [await http.get(base(dash) + "/events") for _ in range(MAX_CLIENTS)]
        try:
            assert all(r.status == 200 for r in open_)
            async with http.get(base(dash) + "/events") as resp:
                assert resp.status == 503
        finally:
            for r in open_:
                r.close()


async def test_aclose_ends_streams_and_returns_with_a_stalled_client() -> None:
    feed = RecordFeed(points=3600)
    dash = Dashboard(feed, port=0, interval_s=0.05)
    await dash.start()
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(("127.0.0.1", dash.port))
    stalled.sendall(f"GET /events HTTP/1.1\r\nHost: 127.0.0.1:{dash.port}\r\n\r\n".encode())
    try:
        async with aiohttp.ClientSession() as http, http.get(base(dash) + "/events") as resp:
            kinds = []
            async for kind, _ in events(resp):
                kinds.append(kind)
                if len(kinds) == 2:
                    break
            ticks = feed.ticks
            # a guard against a hang, not a timing: aclose bounds itself at 2 s
            await asyncio.wait_for(dash.aclose(), 30)
            async for kind, _ in events(resp):
                kinds.append(kind)
            assert kinds[0] == "snapshot" and kinds[-1] == "end"
            assert feed.ticks == ticks + 1  # the final point, pushed before "end"
            assert kinds[-2] == "point"
        with pytest.raises(aiohttp.ClientConnectionError):
            async with aiohttp.ClientSession() as http, http.get(base(dash) + "/") as resp:
                pass
    finally:
        stalled.close()


async def test_a_reload_rebuilds_nothing() -> None:
    """The page is sent as the bytes built (and gzipped) once; pages that connect within one
    tick share one snapshot (its points are the same)."""
    feed = RecordFeed(points=100)
    async with Dashboard(feed, port=0, interval_s=3600.0) as dash:  # no tick while the pages load
        async with aiohttp.ClientSession(auto_decompress=False) as http:
            bodies = []
            for encoding in ("gzip, deflate", "gzip", "identity", "gzip;q=0"):
                async with http.get(base(dash) + "/", headers={"Accept-Encoding": encoding}) as resp:
                    assert resp.status == 200 and resp.headers["Vary"] == "Accept-Encoding"
                    assert resp.headers.get("Content-Encoding") == (
                        "gzip" if encoding.startswith("gzip,") or encoding == "gzip" else None
                    )
                    bodies.append(await resp.read())
        assert bodies[0] == bodies[1] and bodies[2] == bodies[3] and gzip.decompress(bodies[0]) == bodies[2]
        assert len(bodies[0]) < len(bodies[2]) / 2
        async with aiohttp.ClientSession() as http:
            snaps = []
            for _ in range(5):
                async with http.get(base(dash) + "/events") as resp:
                    async for kind, snap in events(resp):
                        assert kind == "snapshot"
                        snaps.append(snap)
                        break
        assert feed.snapshots == 1 and all(s == snaps[0] for s in snaps)
        assert len(snaps[0]["series"]["t"]) == 100


async def test_level_cost_names_page_loads_and_starts_again_each_level() -> None:
    """A level during which pages were loaded gets a reason naming the dashboard (its page
    loads and its own loop time); the next level, with nothing loaded and no tick, none."""
    feed = RecordFeed(points=50)
    async with Dashboard(feed, port=0, interval_s=3600.0) as dash:
        assert dash.level_cost() is None  # nothing served yet
        async with aiohttp.ClientSession() as http:
            for _ in range(3):
                async with http.get(base(dash) + "/") as resp:
                    assert resp.status == 200
                    await resp.read()
            async with http.get(base(dash) + "/events") as resp:
                async for kind, _ in events(resp):
                    assert kind == "snapshot"
                    break
        why = dash.level_cost()
        assert why is not None and "3 page loads" in why and "live dashboard" in why, why
        assert dash.level_cost() is None  # counted again from zero


def test_a_client_bound_level_names_the_causes_and_a_level_that_kept_up_does_not() -> None:
    from loadgen.metrics.summary import summarize_level
    from loadgen.orchestrate.sweep_driver import with_causes
    from loadgen.records import RequestRecord

    recs = [RequestRecord(index=i, sent_ns=1_000_000 * i, done_ns=1_000_000 * i + 500_000) for i in range(20)]
    for r in recs:
        r.events = [[r.sent_ns + 100_000, 1], [r.sent_ns + 200_000, 1]]
    asked: list[int] = []

    def cause() -> str:
        asked.append(1)
        return "the live dashboard shares this process"

    bound = summarize_level(recs, load={"mode": "concurrency", "value": 1}, loop_lag_ms=[50.0] * 100)
    fine = summarize_level(recs, load={"mode": "concurrency", "value": 1}, loop_lag_ms=[0.1] * 100)
    assert bound.client.client_bound and not fine.client.client_bound
    named = with_causes(bound, [cause])
    assert named.client.reasons == [*bound.client.reasons, "the live dashboard shares this process"]
    assert with_causes(fine, [cause]) == fine
    assert len(asked) == 2  # asked once per level, whatever its verdict: its count starts again
