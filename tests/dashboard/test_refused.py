"""Requests the dashboard refuses, sent over raw sockets on loopback: each one counted, none
printed (no aiohttp traceback on stderr, none in the console of the process that serves it);
and where a wildcard bind listens and what URL it prints."""

from __future__ import annotations

import asyncio
import signal
import socket
from pathlib import Path

import aiohttp
import pytest

from loadgen.dashboard.server import Dashboard
from tests.dashboard.conftest import Loadgen, RecordFeed
from tests.dashboard.test_server import events


def _exchange(port: int, raw: bytes, family: socket.AddressFamily = socket.AF_INET) -> bytes:
    """Send ``raw``, read the answer until the server closes the connection (a guard of 30 s)."""
    host = "127.0.0.1" if family == socket.AF_INET else "::1"
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(raw)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
        return got


def _malformed(port: int) -> list[bytes]:
    host = f"Host: 127.0.0.1:{port}\r\n".encode()
    return [
        b"GET / HTTP/1.1\r\n" + host + b"Host: evil.example\r\n\r\n",  # two Host headers
        b"GARBAGE\r\n\r\n",  # not a request line
        b"GET / HTTP/1.1 extra\r\n" + host + b"\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32) + b"\r\n\r\n",  # TLS on the HTTP port
        b"GET / HTTP/1.1\r\n" + host + b"X-Long: " + b"a" * 20_000 + b"\r\n\r\n",  # a header line over 8 KiB
        b"GET / HTTP/1.1\r\n" + host + b"".join(b"X-%d: y\r\n" % i for i in range(200)) + b"\r\n",  # 200 headers
        b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n" + host + b"\r\n",  # a request line over 8 KiB
        b"GET / HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",  # the guard's: not this host
    ]


async def test_malformed_requests_are_counted_never_logged(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    async with Dashboard(RecordFeed(), port=0, interval_s=0.05) as dash:
        bad = _malformed(dash.port)
        answers = [await asyncio.to_thread(_exchange, dash.port, raw) for raw in bad * 5]
        assert all(a.startswith((b"HTTP/1.0 400", b"HTTP/1.1 400", b"HTTP/1.1 403")) for a in answers), answers
        assert dash.refused == 5 * len(bad)
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{dash.port}/events") as resp:
            assert resp.status == 200  # and it still serves
            async for kind, snap in events(resp):
                assert kind == "snapshot" and snap["run"]["refused"] == 5 * len(bad)  # the page is told
                break
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert not caplog.records


def test_watch_prints_no_traceback_for_200_requests_with_two_hosts(tmp_path: Path) -> None:
    watch = Loadgen(["watch", str(tmp_path / "nothing-yet"), "--port", "0"])
    try:
        port = int(watch.url("watching ").split(":")[2].split("/")[0])
        raw = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nHost: evil.example\r\n\r\n".encode()
        for _ in range(200):
            assert _exchange(port, raw).startswith(b"HTTP/1.0 400")
        watch.proc.send_signal(signal.SIGINT)
        code = watch.wait()
    finally:
        watch.close()
    assert code == 0
    assert watch.lines[1:] == [
        "dashboard: refused 200 requests (malformed, or failing its Host, Origin or token checks)",
        "stopped watching",
    ], watch.text()[-3000:]


async def test_a_wildcard_bind_prints_a_loopback_url() -> None:
    async with Dashboard(RecordFeed(), host="0.0.0.0", port=0) as dash, aiohttp.ClientSession() as http:
        assert dash.everywhere and dash.url.startswith(f"http://127.0.0.1:{dash.port}/?token=")
        async with http.get(dash.url) as resp:  # the printed URL opens as it is
            assert resp.status == 200


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return socket.has_dualstack_ipv6()


@pytest.mark.skipif(not _ipv6_loopback(), reason="needs IPv6 loopback and dual-stack sockets")
async def test_the_ipv6_wildcard_listens_on_both_families() -> None:
    async with Dashboard(RecordFeed(), host="::", port=0) as dash:
        assert dash.url.startswith(f"http://127.0.0.1:{dash.port}/?token=")
        token = dash.url.split("?token=")[1]
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "[::1]")):
            raw = f"GET /?token={token} HTTP/1.1\r\nHost: {host}:{dash.port}\r\nConnection: close\r\n\r\n"
            answer = await asyncio.to_thread(_exchange, dash.port, raw.encode(), family)
            assert answer.startswith(b"HTTP/1.1 200"), (host, answer[:200])
        assert dash.refused == 0
