"""Reasoning and tool-call deltas, through the real transport against a scripted server on
loopback: reasoning counts as output (TTFT, ITL) and apart (its own token count, the time
to the first answer token); tool-call argument deltas are answer output; the answer text
is kept only when asked for."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.stream import StreamState
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.records import RequestRecord, RequestSpec, TokenSource
from tests.scripted_server import ScriptedServer


def _transport(url: str, script: dict[str, Any], **opts: Any) -> Any:
    cfg = TransportConfig(
        base_url=url,
        dialect=get_dialect("chat"),
        options=DialectOptions(model="scripted-model", extra_body={"script": script}, **opts),
    )
    return make_transport("aiohttp", cfg)


async def _send(
    url: str, script: dict[str, Any], max_tokens: int, answer: list[str] | None = None, **opts: Any
) -> RequestRecord:
    tr = _transport(url, script, **opts)
    rec = RequestRecord(index=0)
    try:
        await tr.send(RequestSpec(index=0, prompt="hi", prompt_tokens=1, max_tokens=max_tokens, answer=answer), rec)
    finally:
        await tr.aclose()
    return rec


@pytest.mark.parametrize("usage", [False, True])
async def test_reasoning_deltas_are_output_and_counted_apart(scripted: ScriptedServer, usage: bool) -> None:
    answer: list[str] = []
    rec = await _send(
        scripted.url, {"reasoning": 6, "ttft_s": 0.005, "itl_s": 0.004}, 10, answer, continuous_usage=usage
    )
    assert rec.ok, rec.error
    assert rec.output_tokens == 10 and rec.reasoning_tokens == 6
    assert rec.token_source is (TokenSource.USAGE_DELTA if usage else TokenSource.EVENTS_CORRECTED)
    # TTFT is the first token of any kind; the first answer token is the 7th event's
    assert rec.first_answer_ns == rec.events[6][0] > rec.events[0][0] > rec.sent_ns
    assert "".join(answer) == " tok" * 4  # the answer text only, not the reasoning


async def test_tool_call_deltas_count_as_answer_output(scripted: ScriptedServer) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    rec = await _send(scripted.url, {"tool_calls": True, "tokens_per_event": 2}, 8, tools=tools, tool_choice="auto")
    assert rec.ok, rec.error
    assert rec.output_tokens == 8 and len(rec.events) == 4 and rec.reasoning_tokens == 0
    assert rec.first_answer_ns == rec.events[0][0]
    body = scripted.requests[-1]
    assert body["tools"] == tools and body["tool_choice"] == "auto"


async def test_no_text_is_kept_without_an_answer_list(scripted: ScriptedServer) -> None:
    rec = await _send(scripted.url, {}, 4)
    assert rec.ok and rec.output_tokens == 4 and rec.reasoning_tokens == 0
    assert rec.first_answer_ns == rec.events[0][0]


def test_both_vllm_reasoning_field_names_mark_reasoning() -> None:
    chat = get_dialect("chat")
    rec = RequestRecord(index=0)
    state = StreamState(rec, chat, defer=False)
    events = [
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"a"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"reasoning":"b"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"content":"c"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"content":"d"},"finish_reason":"length"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    for t, chunk in enumerate(events, 1):
        state.feed(chunk, 1000 * t)
    state.close(9000)
    assert [n for _, n in rec.events] == [1, 1, 1, 1]
    assert rec.reasoning_tokens == 2 and rec.first_answer_ns == 4000
