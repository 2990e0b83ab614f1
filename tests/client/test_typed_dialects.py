"""The ``responses`` and ``messages`` dialects against the scripted server streaming the
real OpenAI Responses and Anthropic Messages event formats (``event:`` lines included,
tests/api_formats.py), through every transport: TTFT and ITL as scripted, reasoning apart,
error events as failed records with their message, the bodies and key headers each API
takes; and a real short ``loadgen run`` of each on loopback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.stream import StreamState
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.load.runner import LevelPlan, Runner
from loadgen.records import ErrorKind, RequestRecord, RequestSpec, TokenSource
from loadgen.report.readers import read_records
from tests.api_formats import FORMATS
from tests.client.written import assert_timed_as_written
from tests.scripted_server import Script, ScriptedServer, ScriptedServerProcess

TRANSPORTS = ["aiohttp", "httpx", "fast"]
APIS = ["responses", "messages"]
PATHS = {"responses": "/v1/responses", "messages": "/v1/messages"}


def _transport(url: str, api: str, kind: str = "aiohttp", headers: dict[str, str] | None = None, **opts: Any) -> Any:
    extra = opts.pop("script", None)
    cfg = TransportConfig(
        base_url=url,
        dialect=get_dialect(api),
        options=DialectOptions(model="scripted-model", extra_body={"script": extra} if extra else None, **opts),
        headers=headers or {},
        read_timeout_s=5.0,
    )
    return make_transport(kind, cfg)


async def _run(url: str, api: str, n: int, max_tokens: int, kind: str = "aiohttp", **kw: Any) -> list[RequestRecord]:
    tr = _transport(url, api, kind, **kw)
    plan = LevelPlan(0, "concurrency", 1, requests=n, warmup_requests=1)
    specs = (RequestSpec(index=i, prompt=f"hello {i}", prompt_tokens=2, max_tokens=max_tokens) for i in range(n + 1))
    try:
        res = await Runner(tr).run_level(plan, specs)
    finally:
        await tr.aclose()
    return [r for r in res.records if not r.warmup]


def _sse(api: str, script: list[tuple[str, str]]) -> list[bytes]:
    """One read per step of ``script`` (kind, text) in the API's real format, its start and end included."""
    w = FORMATS[PATHS[api]].writer(5)
    events = [w.start()] + [w.delta(text, kind) for kind, text in script] + [w.end(len(script), True, 0)]
    return [b"".join(f"event: {n}\ndata: {json.dumps(o)}\n\n".encode() for n, o in group) for group in events]


@pytest.mark.parametrize("api", APIS)
def test_each_output_event_is_timed_by_its_read_exactly(api: str) -> None:
    """Stamped reads (no clock): the first delta's read is the first token, every delta's read its event."""
    reads = _sse(api, [("reasoning", " a"), ("reasoning", " b"), ("text", " c"), ("tool", '{"x"'), ("text", " d")])
    rec = RequestRecord(index=0, sent_ns=500)
    state = StreamState(rec, get_dialect(api), defer=False)
    for k, read in enumerate(reads):
        state.feed(read, 1000 + 100 * k)
    state.close(9000)
    assert [t for t, _ in rec.events] == [1100, 1200, 1300, 1400, 1500]  # TTFT 600 ns, ITL 100 ns each
    assert [n for _, n in rec.events] == [1] * 5 and rec.completion_tokens == 5 and rec.prompt_tokens == 5
    assert rec.reasoning_tokens == 2 and rec.first_answer_ns == 1300
    assert rec.done_ns == 1600 and state.ended  # the last event (response.completed / message_stop), no marker


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("kind", TRANSPORTS)
@pytest.mark.parametrize("tokens_per_event", [1, 4])
async def test_timing_matches_script_at_concurrency_1(api: str, kind: str, tokens_per_event: int) -> None:
    """As tests/client/test_transport.py's test of the same name for chat: no event is seen
    before the server's schedule sent it (event k at TTFT 30 ms + k * 10 ms, exact: the server
    cannot write earlier), nor before the write that carried it (its delta event, after any
    item or block start); and the same stated tolerance against the server's own times."""
    async with ScriptedServer(Script(ttft_s=0.030, itl_s=0.010, tokens_per_event=tokens_per_event)) as srv:
        recs = await _run(srv.url, api, 5, 16, kind=kind)
    assert all(r.status is ErrorKind.OK for r in recs), [r.error for r in recs]
    for r in recs:
        assert len(r.events) == 16 // tokens_per_event and all(n == tokens_per_event for _, n in r.events)
        assert r.output_tokens == r.completion_tokens == 16 and r.token_source is TokenSource.EVENTS_CORRECTED
        assert r.prompt_tokens == 2  # "hello N": the API's input tokens
        assert all(t - r.sent_ns >= 30_000_000 + k * 10_000_000 for k, (t, _) in enumerate(r.events))
    assert_timed_as_written(recs, srv.served, ttft_ms=5.0, gap_ms=2.0)


@pytest.mark.parametrize("api", APIS)
async def test_reasoning_then_answer(api: str, scripted: ScriptedServer) -> None:
    answer: list[str] = []
    tr = _transport(scripted.url, api, script={"reasoning": 6, "ttft_s": 0.005, "itl_s": 0.004})
    rec = RequestRecord(index=0)
    try:
        await tr.send(RequestSpec(index=0, prompt="hi", prompt_tokens=1, max_tokens=10, answer=answer), rec)
    finally:
        await tr.aclose()
    assert rec.ok, rec.error
    assert rec.output_tokens == 10 and rec.reasoning_tokens == 6
    assert rec.first_answer_ns == rec.events[6][0] > rec.events[0][0] > rec.sent_ns  # TTFT is reasoning's
    assert "".join(answer) == " tok" * 4


@pytest.mark.parametrize("api", APIS)
async def test_tool_call_deltas_are_answer_output(api: str, scripted: ScriptedServer) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "description": "d", "parameters": {"type": "object"}}}]
    choice = {"type": "function", "function": {"name": "lookup"}}
    tr = _transport(scripted.url, api, script={"tool_calls": True}, tools=tools, tool_choice=choice)
    rec = RequestRecord(index=0)
    try:
        await tr.send(RequestSpec(index=0, prompt="hi", prompt_tokens=1, max_tokens=6), rec)
    finally:
        await tr.aclose()
    assert rec.ok and rec.output_tokens == 6 and rec.reasoning_tokens == 0 and rec.first_answer_ns == rec.events[0][0]
    body = scripted.requests[-1]
    if api == "responses":
        assert body["tools"] == [
            {"type": "function", "name": "lookup", "description": "d", "parameters": {"type": "object"}}
        ]
        assert body["tool_choice"] == {"type": "function", "name": "lookup"}
    else:
        assert body["tools"] == [{"name": "lookup", "description": "d", "input_schema": {"type": "object"}}]
        assert body["tool_choice"] == {"type": "tool", "name": "lookup"}


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("kind", TRANSPORTS)
@pytest.mark.parametrize("form", ["event", "object"])
async def test_error_events_fail_the_record_with_their_message(api: str, kind: str, form: str) -> None:
    """``event: error`` (both APIs), ``response.failed`` and a Messages error without its event line."""
    async with ScriptedServer(Script(ttft_s=0.001, itl_s=0.001, error_after=3, error_form=form)) as srv:
        recs = await _run(srv.url, api, 2, 8, kind=kind)
    for r in recs:
        assert r.status is ErrorKind.ERROR_EVENT, (r.status, r.error)
        assert r.error is not None and "scripted engine failure" in r.error and r.http_status is None
        assert len(r.events) == 3


@pytest.mark.parametrize("api", APIS)
async def test_a_stream_cut_before_its_end_event_is_a_disconnect(api: str) -> None:
    async with ScriptedServer(Script(ttft_s=0.001, itl_s=0.001, disconnect_after=3)) as srv:
        recs = await _run(srv.url, api, 1, 8)
    assert recs[0].status is ErrorKind.DISCONNECTED and len(recs[0].events) == 3


async def test_response_incomplete_is_a_finish_not_a_failure(scripted: ScriptedServer) -> None:
    """Cut at max_output_tokens, the Responses API ends with response.incomplete: the answer a benchmark asked for."""
    recs = await _run(scripted.url, "responses", 2, 8, script={"responses_end": "response.incomplete"})
    assert all(r.ok and r.output_tokens == r.completion_tokens == 8 and r.prompt_tokens == 2 for r in recs)


def test_bodies_and_key_headers() -> None:
    spec = RequestSpec(
        index=0,
        prompt=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yes"},
            {"role": "user", "content": "more"},
        ],
        prompt_tokens=4,
        max_tokens=7,
    )
    resp, msgs = get_dialect("responses"), get_dialect("messages")
    body = resp.build_body(spec, DialectOptions(model="m", strict=True))
    assert body == {"model": "m", "input": spec.prompt, "max_output_tokens": 7, "stream": True, "temperature": 0.0}
    loose = resp.build_body(RequestSpec(index=0, prompt="hi", prompt_tokens=1, max_tokens=7), DialectOptions(model="m"))
    assert loose["input"] == "hi" and loose["ignore_eos"] is True and loose["min_tokens"] == 7
    one = resp.non_stream_body(spec, DialectOptions(model="m"))
    assert one["stream"] is False and one["max_output_tokens"] == 1 == one["min_tokens"]
    body = msgs.build_body(spec, DialectOptions(model="m", strict=True, extra_body={"top_k": 5}))
    assert body["system"] == "be brief" and [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["max_tokens"] == 7 and body["stream"] is True and body["top_k"] == 5 and "ignore_eos" not in body
    assert msgs.non_stream_body(spec, DialectOptions(model="m"))["max_tokens"] == 1
    assert resp.auth_headers("k1") == {"Authorization": "Bearer k1"}
    assert msgs.auth_headers("k1") == {"x-api-key": "k1"} and dict(msgs.headers) == {"anthropic-version": "2023-06-01"}
    assert resp.answer_usage({"usage": {"input_tokens": 3}}) == {"input_tokens": 3} and msgs.answer_usage([1]) is None
    assert msgs.usage_counts({"input_tokens": 3, "output_tokens": 9}) == (3, 9)


@pytest.mark.parametrize("api", APIS)
async def test_the_key_goes_in_the_apis_own_header(api: str, scripted: ScriptedServer) -> None:
    headers = get_dialect(api).auth_headers("sk-typed-1")
    recs = await _run(scripted.url, api, 1, 4, headers=headers)
    assert recs[0].ok
    sent = {k.lower(): v for k, v in scripted.headers[-1].items()}
    if api == "messages":
        assert sent["x-api-key"] == "sk-typed-1" and sent["anthropic-version"] == "2023-06-01"
        assert "authorization" not in sent
    else:
        assert sent["authorization"] == "Bearer sk-typed-1" and "x-api-key" not in sent


@pytest.mark.parametrize("transport", ["fast", "aiohttp", "httpx"])
async def test_messages_sends_its_version_header_without_a_key_and_a_header_flag_wins(
    transport: str, scripted: ScriptedServer
) -> None:
    recs = await _run(scripted.url, "messages", 1, 4, transport)
    assert recs[0].ok
    sent = {k.lower(): v for k, v in scripted.headers[-1].items()}
    assert sent["anthropic-version"] == "2023-06-01" and "x-api-key" not in sent
    recs = await _run(scripted.url, "messages", 1, 4, transport, headers={"Anthropic-Version": "2099-01-01"})
    sent = {k.lower(): v for k, v in scripted.headers[-1].items()}
    assert recs[0].ok and sent["anthropic-version"] == "2099-01-01"


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream_usage", [True, False])
def test_a_short_cli_run(api: str, stream_usage: bool, tmp_path: Path) -> None:
    """``loadgen run --api API`` against the scripted server: every request ok, calibration from
    the stream's usage, or, with none streamed, from the API's non-streamed answer."""
    script = Script(ttft_s=0.002, itl_s=0.001, include_usage=None if stream_usage else False)
    out = tmp_path / "run"
    with ScriptedServerProcess(script) as srv:
        args = ["run", "--url", srv.url, "--api", api, "--concurrency", "2", "--requests", "6", "--warmup", "0"]
        res = CliRunner().invoke(
            app, [*args, "--prompt-tokens", "32", "--output-tokens", "8", "--out", str(out), "--quiet"]
        )
    assert res.exit_code == 0, res.output
    recs = [r for r in read_records(out) if r.index >= 0]
    assert len(recs) == 6 and all(r.status is ErrorKind.OK for r in recs), [r.error for r in recs]
    assert all(r.output_tokens == 8 and len(r.events) == 8 for r in recs)
    run = json.loads((out / "run.json").read_text())
    calib = run["calibration"]
    assert (
        calib["calibrated"] and calib["api"] == api and calib["method"] == ("stream" if stream_usage else "non-stream")
    )
    if stream_usage:
        assert all(r.prompt_tokens == r.target_prompt_tokens for r in recs)
