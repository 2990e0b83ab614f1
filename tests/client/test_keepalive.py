"""Servers that close kept-alive connections (llama.cpp's way): the stale race is sent
again once on a new connection, counted, and never twice; a server that closes after
every stream gets a new connection per request. Against a raw server on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.keepalive import FRESH_AFTER
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.metrics.summary import summarize_level
from loadgen.records import ErrorKind, RequestRecord, RequestSpec
from tests.client.closing_server import ClosingServer

TRANSPORTS = ["aiohttp", "httpx", "fast"]


def _transport(url: str, kind: str, api: str = "completions") -> Any:
    cfg = TransportConfig(
        base_url=url, dialect=get_dialect(api), options=DialectOptions(model="closing-model"), read_timeout_s=5.0
    )
    return make_transport(kind, cfg)


async def _one_by_one(transport: Any, n: int) -> list[RequestRecord]:
    """A closed loop of one user: each request leaves as soon as the last one ended."""
    out = []
    for i in range(n):
        rec = RequestRecord(index=i)
        await transport.send(RequestSpec(index=i, prompt=f"hello {i}", prompt_tokens=2, max_tokens=4), rec)
        out.append(rec)
    return out


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_stale_connections_are_sent_again_once_and_counted(kind: str) -> None:
    server = ClosingServer("next")
    await server.start()
    transport = _transport(server.url, kind)
    try:
        records = await _one_by_one(transport, 8)
    finally:
        await transport.aclose()
        await server.stop()
    assert [r.status for r in records] == [ErrorKind.OK] * 8, [r.error for r in records]
    assert all(r.output_tokens == 4 and r.completion_tokens == 4 for r in records)
    # every reuse met a closed connection: request 1 opened one, 2 reused it (stale,
    # sent again on a new one), 3 opened one, 4 reused it (stale): two stale closes and
    # no successful reuse, so from request 5 on each request gets its own connection
    assert [r.retries for r in records] == [0, 1, 0, 1, 0, 0, 0, 0]
    assert transport.keepalive.stale == FRESH_AFTER and transport.keepalive.fresh
    assert server.handled == 8  # the server took each request exactly once
    summary = summarize_level(records, load={"mode": "concurrency", "value": 1})
    assert summary.requests.retried == 2 and summary.requests.ok == 8
    assert summary.client.notes and "sent again on a new connection" in summary.client.notes[-1]
    assert summary.to_json()["requests"]["retried"] == 2


# not httpx: httpcore reports a status line cut short as "Server disconnected without
# sending a response", like no byte at all (docs/client.md says so)
@pytest.mark.parametrize("kind", ["aiohttp", "fast"])
async def test_a_request_the_server_began_to_answer_is_never_sent_twice(kind: str) -> None:
    server = ClosingServer("partial")
    await server.start()
    transport = _transport(server.url, kind)
    try:
        records = await _one_by_one(transport, 2)
    finally:
        await transport.aclose()
        await server.stop()
    assert records[0].status is ErrorKind.OK and records[0].retries == 0
    # a status line came back before the close: the server took it, so it is not resent
    assert records[1].status is ErrorKind.DISCONNECTED and records[1].retries == 0
    assert server.handled == 2


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_a_closed_new_connection_is_not_sent_again(kind: str) -> None:
    # the server closes a brand-new connection when the request arrives: not the stale race
    server = ClosingServer("next")
    await server.start()
    transport = _transport(server.url, kind)
    transport.keepalive.fresh = True  # every request on a new connection
    try:
        records = await _one_by_one(transport, 3)
    finally:
        await transport.aclose()
        await server.stop()
    assert all(r.status is ErrorKind.OK and r.retries == 0 for r in records)
    assert server.connections == 3 and server.handled == 3


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_an_honest_keepalive_server_keeps_its_connection(kind: str) -> None:
    server = ClosingServer("never")
    await server.start()
    transport = _transport(server.url, kind, api="chat")
    try:
        records = await _one_by_one(transport, 6)
    finally:
        await transport.aclose()
        await server.stop()
    assert all(r.status is ErrorKind.OK and r.retries == 0 for r in records)
    assert server.connections == 1 and not transport.keepalive.fresh
    assert transport.keepalive.reuses == 5


@pytest.mark.parametrize("mode", ["after", "next"])
def test_loadgen_run_against_a_server_that_closes_after_every_stream(mode: str, tmp_path: Path) -> None:
    """llama.cpp's behaviour end to end (``after``; ``next`` makes every reuse fail):
    discovery, calibration and every request succeed, and the console says what was resent."""
    server = ClosingServer(mode)
    server.start_in_thread()
    try:
        out = tmp_path / "run"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "loadgen.cli",
                "run",
                "--url",
                server.url,
                "--concurrency",
                "2",
                "--requests",
                "16",
                "--output-tokens",
                "4",
                "--out",
                str(out),
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.stop_thread()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines() if line.strip()]
    assert len(lines) == 16 and all(r["status"] == "ok" for r in lines)
    summary = json.loads((out / "summary.json").read_text())
    level = summary["levels"][0]
    assert level["requests"]["ok"] == 16 and level["requests"]["failed"] == 0
    retried = level["requests"]["retried"]
    assert retried == sum(1 for r in lines if r["retries"])
    if mode == "next":
        assert retried >= 1
    if retried:
        assert f"{retried} sent again on a new connection" in proc.stdout, proc.stdout
