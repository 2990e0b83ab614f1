"""A server that holds the connection open after the answer's last event: the record is
``ok`` and ends at that event, the usage asked for is not cut off, and the client waits
the end grace (not the read timeout) before it closes the connection. Both transports,
against a raw server on loopback (tests/client/holding_server.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.records import ErrorKind, RequestRecord, RequestSpec, TokenSource
from tests.client.holding_server import ENDINGS, HoldingServer

TRANSPORTS = ["aiohttp", "httpx", "fast"]
GRACE_S = 0.3


async def _send(url: str, kind: str, api: str = "completions", grace_s: float = GRACE_S) -> tuple[RequestRecord, int]:
    """One request (the read timeout far beyond the grace); the record and when send() returned."""
    cfg = TransportConfig(
        base_url=url,
        dialect=get_dialect(api),
        options=DialectOptions(model="m"),
        read_timeout_s=60,
        request_timeout_s=120,
        end_grace_s=grace_s,
    )
    transport: Any = make_transport(kind, cfg)
    rec = RequestRecord(index=0)
    try:
        await transport.send(RequestSpec(index=0, prompt="hi", prompt_tokens=1, max_tokens=4), rec)
        returned = time.perf_counter_ns()
    finally:
        await transport.aclose()
    return rec, returned


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_a_held_connection_after_the_last_event_is_an_ok_record_ended_at_that_event(
    kind: str, ending: str
) -> None:
    """Before: the read timed out, the record was ``timeout`` and its E2E the read timeout."""
    async with HoldingServer(ending) as srv:
        rec, returned = await _send(srv.url, kind, api="chat" if ending == "done" else "completions")
        assert await srv.wait_closed(1)  # the client let the connection go
    assert rec.status is ErrorKind.OK, rec.error
    assert (
        rec.output_tokens == rec.completion_tokens == 4 and rec.prompt_tokens == 3
    )  # the usage after the finish is kept
    assert rec.token_source is TokenSource.EVENTS_CORRECTED
    last_output = rec.events[-1][0]
    if ending == "finish":
        assert rec.done_ns == last_output  # the finish event is the stream's last event
    else:
        assert rec.done_ns > last_output  # the usage event (and [DONE]) came after it
    # the client waited the grace after the answer ended (at the finish event), and that
    # wait is not in the record
    assert returned - last_output >= 0.9 * GRACE_S * 1e9 and returned > rec.done_ns


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_a_usage_later_than_the_grace_is_not_waited_for(kind: str) -> None:
    """The usage event comes 5 graces after the finish: the record is still ok, ended at
    the finish event, its tokens counted per event (no usage seen)."""
    async with HoldingServer("late_usage", usage_delay_s=5 * 0.1) as srv:
        rec, _ = await _send(srv.url, kind, grace_s=0.1)
        assert await srv.wait_closed(1)
    assert rec.status is ErrorKind.OK, rec.error
    assert rec.completion_tokens is None and rec.token_source is TokenSource.EVENTS and rec.output_tokens == 4
    assert rec.done_ns == rec.events[-1][0]  # (had it waited for the usage, the usage would count)
