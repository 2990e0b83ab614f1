"""Adding a transport is one module: a toy transport, defined and registered here only,
serves a real short run through ``execute``.

The toy speaks HTTP/1.0 on asyncio streams, one connection per request, the body read to
the connection's close: nothing the built-in transports share with it but the public
:class:`~loadgen.client.transports.StreamingTransport` base and the registry. The server is
the scripted streaming server on loopback, in its own process (``execute`` runs its own loop).
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from rich.console import Console

from loadgen.client.answer import BodyState
from loadgen.client.bounded import MAX_ERROR
from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.keepalive import Attempt
from loadgen.client.transports import (
    StreamingTransport,
    TransportConfig,
    make_transport,
    register,
    transport_names,
    unregister,
)
from loadgen.errors import ConfigError
from loadgen.load.profiles import Profile
from loadgen.orchestrate import RunConfig, execute
from loadgen.records import ErrorKind, RequestRecord, RequestSpec
from loadgen.report.readers import read_records
from loadgen.workload.spec import workload_from_flags
from tests.scripted_server import Script, ScriptedServer, ScriptedServerProcess


class Toy(StreamingTransport):
    """HTTP/1.0, a new connection per request, the body ends when the server closes."""

    exchanges = 0  # tries made by every Toy, so a test sees that the toy carried the run

    async def exchange(self, body: dict[str, Any], state: BodyState, attempt: Attempt, fresh: bool = False) -> None:
        Toy.exchanges += 1
        parts = urlsplit(self.url)
        attempt.connecting()
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        attempt.opened()
        try:
            payload = json.dumps(body).encode()
            head = [f"POST {parts.path} HTTP/1.0", f"Host: {parts.netloc}", f"Content-Length: {len(payload)}"]
            head += ["Content-Type: application/json", *(f"{k}: {v}" for k, v in self.config.headers.items())]
            if not fresh:
                state.record.sent_ns = time.perf_counter_ns()
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
            status = int((await reader.readline()).split()[1])
            while (await reader.readline()).strip():
                pass  # the toy reads no header
            self.keepalive.answered(attempt)
            if status != 200:
                raise self.status_error(status, await reader.read(MAX_ERROR), None)

            async def read() -> None:
                while chunk := await reader.read(2**16):
                    state.feed(chunk, time.perf_counter_ns())

            await self.read_to_end(state, read)
        finally:
            writer.close()


@pytest.fixture
def toy() -> Iterator[type[Toy]]:
    register("toy", Toy)
    Toy.exchanges = 0
    try:
        yield Toy
    finally:
        unregister("toy")


def test_registered_and_listed(toy: type[Toy]) -> None:
    assert transport_names() == ["aiohttp", "httpx", "fast", "toy"]
    assert register("toy", Toy) is Toy  # the same one again: no change
    with pytest.raises(ConfigError, match="registered already"):
        register("toy", lambda cfg: Toy(cfg))


async def _send(url: str, name: str, spec: RequestSpec, **opts: Any) -> RequestRecord:
    transport = make_transport(name, TransportConfig(url, get_dialect("chat"), DialectOptions(model="m", **opts)))
    rec = RequestRecord(index=spec.index)
    try:
        await transport.send(spec, rec)
    finally:
        await transport.aclose()
    return rec


async def test_the_toy_makes_the_record_a_built_in_transport_makes(toy: type[Toy]) -> None:
    async with ScriptedServer(Script(ttft_s=0.01, itl_s=0.005)) as srv:
        rec = await _send(srv.url, "toy", RequestSpec(0, "hello there", 2, 6))
        ref = await _send(srv.url, "fast", RequestSpec(0, "hello there", 2, 6))
        bad = await _send(srv.url, "toy", RequestSpec(1, "x", 1, 2), extra_body={"script": {"status": 503}})
    assert Toy.exchanges == 2
    assert rec.status is ErrorKind.OK, rec.error
    assert len(rec.events) == len(ref.events) == 6 and rec.completion_tokens == ref.completion_tokens == 6
    assert rec.token_source is ref.token_source and rec.prompt_tokens == ref.prompt_tokens
    assert rec.sent_ns < rec.events[0][0] <= rec.events[-1][0] <= rec.done_ns
    assert rec.new_connection is True and rec.connect_ms is not None
    assert bad.status is ErrorKind.HTTP_ERROR and bad.http_status == 503  # the base's error kinds


def _config(url: str, out: Path) -> RunConfig:
    return RunConfig(
        url=url,
        api="chat",
        model="m",
        transport="toy",
        workload=workload_from_flags("16", "8"),
        profile=Profile(levels=[2], requests=6, warmup_requests=0, trim=(0.0, 0.0)),
        out=out,
        live=False,
        read_timeout_s=10,
        request_timeout_s=20,
    )


def test_a_run_over_the_toy_transport(toy: type[Toy], tmp_path: Path) -> None:
    with ScriptedServerProcess(Script(ttft_s=0.01, itl_s=0.002)) as srv:
        folder = execute(_config(srv.url, tmp_path / "run"), Console(file=io.StringIO(), width=150)).folder
    recs = [r for r in read_records(folder) if r.index >= 0]
    assert len(recs) == 6 and all(r.status is ErrorKind.OK for r in recs), [r.error for r in recs]
    assert all(r.output_tokens == 8 and r.new_connection for r in recs)
    assert Toy.exchanges >= 6  # the level's requests (and calibration's) went through the toy
    assert json.loads((folder / "run.json").read_text())["config"]["transport"] == "toy"


def test_unregistered_is_gone(tmp_path: Path) -> None:
    """Run after the fixture's cleanup: the toy left nothing behind."""
    assert "toy" not in transport_names()
    with pytest.raises(ConfigError, match="unknown transport 'toy'; choose one of: aiohttp, httpx, fast"):
        _config("http://127.0.0.1:1", tmp_path)
    with pytest.raises(ConfigError, match="unknown transport 'toy'"):
        make_transport("toy", TransportConfig("http://127.0.0.1:1", get_dialect("chat"), DialectOptions()))
