"""Every request sent becomes exactly one record: a real aiohttp server on 127.0.0.1
answers each request with a hypothesis-drawn script (status, bytes in reads, valid or
garbage SSE, a cut connection), and the real client path (runner, transport, stream
decoder) runs N requests through it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pytest
from aiohttp import web
from hypothesis import event, given
from hypothesis import strategies as st

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.load.runner import LevelPlan, Runner
from loadgen.records import ErrorKind, RequestSpec
from loadgen.server.app import serve_in_thread
from tests.fuzz.strategies import NUMBERS, budget, dumps

DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True)
class Script:
    status: int
    reads: tuple[bytes, ...]
    cut: bool  # close the connection instead of ending the response


SCRIPTS: dict[int, Script] = {}  # by request index; the server thread reads it


async def _answer(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    script = SCRIPTS[int(body["prompt"].split()[-1])]
    if script.status != 200:
        return web.Response(
            status=script.status, body=b"".join(script.reads), headers={"Location": "http://127.0.0.1:1/elsewhere"}
        )
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for chunk in script.reads:
        await resp.write(chunk)
    if script.cut and request.transport is not None:
        request.transport.close()
        return resp
    await resp.write_eof()
    return resp


def _app() -> web.Application:
    app = web.Application()
    app.router.add_post("/v1/completions", _answer)
    return app


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serve_in_thread(_app) as u:
        yield u


COUNT = st.one_of(st.integers(0, 40), NUMBERS, st.none(), st.text(max_size=3))


@st.composite
def event_json(draw: st.DrawFn) -> bytes:
    choice: dict[str, Any] = {"index": 0, "text": draw(st.one_of(st.text(max_size=6), st.none(), NUMBERS))}
    if draw(st.booleans()):
        choice["finish_reason"] = draw(st.sampled_from(["stop", "length", None, 1]))
    obj: dict[str, Any] = {"choices": draw(st.sampled_from([[choice], [], None, 5]))}
    if draw(st.booleans()):
        obj["usage"] = {"prompt_tokens": draw(COUNT), "completion_tokens": draw(COUNT)}
    return b"data: " + dumps(obj).encode() + b"\n\n"


PIECES = st.one_of(
    event_json(),
    event_json(),
    event_json(),
    st.just(DONE),
    st.sampled_from(
        [
            b"data: {broken\n\n",
            b'event: error\ndata: {"message": "overloaded"}\n\n',
            b'data: {"error": {"message": "engine died"}}\n\n',
            b": keep-alive\n\n",
            b"data: [1, 2]\n\n",
            b"\r\n",
            b"<html>502</html>",
            b'data: {"choices": [{"text"',
        ]
    ),
    st.binary(max_size=20),
)


@st.composite
def scripts(draw: st.DrawFn) -> Script:
    status = draw(st.sampled_from([200, 200, 200, 200, 302, 400, 429, 500, 503]))
    stream = b"".join(draw(st.lists(PIECES, max_size=8)))
    if draw(st.booleans()):
        stream += DONE
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=4)))
    edges = [0, *cuts, len(stream)]
    reads = tuple(stream[a:b] for a, b in pairwise(edges) if b > a)
    return Script(status, reads, cut=draw(st.integers(0, 5)) == 0)


async def _run(url: str, n: int, concurrency: int) -> tuple[list[Any], list[dict[str, Any]]]:
    loop_errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: loop_errors.append(ctx))
    cfg = TransportConfig(
        base_url=url,
        dialect=get_dialect("completions"),
        options=DialectOptions(model="m"),
        max_connections=8,
        read_timeout_s=10.0,
        request_timeout_s=30.0,
    )
    transport = make_transport("aiohttp", cfg)
    specs = [RequestSpec(index=i, prompt=f"request {i}", prompt_tokens=2, max_tokens=4) for i in range(n)]
    try:
        result = await Runner(transport).run_level(LevelPlan(0, "concurrency", concurrency, requests=n), iter(specs))
    finally:
        await transport.aclose()
    return result.records, loop_errors


@budget(25)  # each example runs a whole level (the runner's gc.collect() alone takes ~0.1 s here)
@given(st.lists(scripts(), min_size=1, max_size=10), st.integers(1, 4))
def test_every_request_sent_becomes_exactly_one_record(url: str, plan: list[Script], concurrency: int) -> None:
    SCRIPTS.clear()
    SCRIPTS.update(enumerate(plan))
    records, loop_errors = asyncio.run(_run(url, len(plan), concurrency))
    assert not loop_errors, loop_errors  # nothing died unseen in a callback
    assert sorted(r.index for r in records) == list(range(len(plan)))
    for rec in records:
        script = plan[rec.index]
        assert isinstance(rec.status, ErrorKind) and rec.status is not ErrorKind.CANCELLED
        assert rec.sent_ns > 0 and rec.done_ns >= rec.sent_ns
        assert all(type(k) is int and k >= 1 for _, k in rec.events)
        for count in (rec.prompt_tokens, rec.completion_tokens):
            assert count is None or (type(count) is int and count >= 0)
        if script.status != 200:
            assert rec.status is ErrorKind.HTTP_ERROR and rec.http_status == script.status
        assert (rec.error is None) if rec.ok else bool(rec.error)
        event(rec.status.value)
