"""/v1/responses (OpenAI Responses) and /v1/messages (Anthropic Messages) against the real
reference server on loopback: event sequences, usage equal to the engine's counts,
reasoning first, error shapes, x-api-key."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import numpy as np
import pytest

from loadgen.server.config import HttpLimits
from tests.server.helpers import MODEL, make_engine, serve

PROMPT = "the quick brown fox jumps over the lazy dog"  # 9 words: 9 + 2 template tokens
KEY = "sk-test-key"


class Fixed:
    """A count sampler that always draws ``n``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def sample(self, rng: np.random.Generator, n: int) -> Any:
        return [self.n] * n


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def _named_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    text = raw.decode()
    assert text.endswith("\n\n")
    events = []
    for block in text.split("\n\n")[:-1]:
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: "), block
        obj = json.loads(data[len("data: ") :])
        assert obj["type"] == name[len("event: ") :]
        events.append((obj["type"], obj))
    return events


async def _recent(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(url + "/loadgen/requests") as resp:
        rows: list[dict[str, Any]] = (await resp.json())["data"]
    return rows[-1]


def _squash(kinds: list[str]) -> list[str]:
    """Runs of the same delta event as one (their count is checked apart)."""
    out: list[str] = []
    for kind in kinds:
        if not (out and out[-1] == kind and kind.endswith("delta")):
            out.append(kind)
    return out


RESPONSE_ITEM = [
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]


@pytest.mark.parametrize("reasoning", [0, 3])
async def test_responses_stream_events_usage_and_reasoning_first(
    session: aiohttp.ClientSession, reasoning: int
) -> None:
    async with serve(make_engine(), reasoning_tokens=Fixed(reasoning) if reasoning else None) as url:
        body = {"model": MODEL, "input": PROMPT, "max_output_tokens": 10, "stream": True, "ignore_eos": True}
        async with session.post(url + "/v1/responses", json=body) as resp:
            assert resp.status == 200 and resp.content_type == "text/event-stream"
            events = _named_events(await resp.read())
        trace = await _recent(session, url)
    kinds = [k for k, _ in events]
    reasoning_item = [
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    expected = ["response.created", "response.in_progress", *(reasoning_item if reasoning else []), *RESPONSE_ITEM]
    assert _squash(kinds) == [*expected, "response.completed"]
    assert [obj["sequence_number"] for _, obj in events] == list(range(len(events)))
    assert kinds.count("response.reasoning_text.delta") == reasoning
    assert kinds.count("response.output_text.delta") == 10 - reasoning  # one per token step
    done = events[-1][1]
    usage = done["response"]["usage"]
    assert usage["input_tokens"] == trace["prompt_tokens"] == 11
    assert usage["output_tokens"] == trace["output_tokens"] == 10
    assert usage["output_tokens_details"] == {"reasoning_tokens": reasoning}
    assert usage["total_tokens"] == 21
    assert done["response"]["status"] == "incomplete"  # max_output_tokens reached, as vLLM says it
    assert done["loadgen"]["decode_steps"] == 9 and done["loadgen"]["e2e_s"] > 0
    text = "".join(obj["delta"] for k, obj in events if k == "response.output_text.delta")
    message = done["response"]["output"][-1]
    assert message["type"] == "message" and message["content"][0]["text"] == text
    assert len(done["response"]["output"]) == (2 if reasoning else 1)


async def test_responses_not_streamed_with_items_and_instructions(session: aiohttp.ClientSession) -> None:
    async with serve(make_engine()) as url:
        body = {
            "model": MODEL,
            "instructions": "be brief",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": PROMPT}]}],
            "max_output_tokens": 6,
            "ignore_eos": True,
            "tools": [],  # ignored, as vLLM ignores what it does not use
        }
        async with session.post(url + "/v1/responses", json=body) as resp:
            assert resp.status == 200
            answer = await resp.json()
    assert answer["object"] == "response" and answer["id"].startswith("resp_")
    # 2 + 9 words of content, plus 2 template tokens per message
    assert answer["usage"]["input_tokens"] == 2 + 9 + 2 * 2
    assert answer["usage"]["output_tokens"] == 6
    [message] = answer["output"]
    assert len(message["content"][0]["text"].split()) == 6
    assert answer["loadgen"]["decode_steps"] == 5


@pytest.mark.parametrize("reasoning", [0, 2])
async def test_messages_stream_events_usage_and_thinking_first(session: aiohttp.ClientSession, reasoning: int) -> None:
    async with serve(make_engine(), reasoning_tokens=Fixed(reasoning) if reasoning else None) as url:
        body = {
            "model": MODEL,
            "max_tokens": 8,
            "system": [{"type": "text", "text": "be brief"}],
            "messages": [{"role": "user", "content": PROMPT}],
            "stream": True,
            "ignore_eos": True,
            "metadata": {"user_id": "u"},
        }
        async with session.post(url + "/v1/messages", json=body) as resp:
            assert resp.status == 200
            events = _named_events(await resp.read())
        trace = await _recent(session, url)
    kinds = [k for k, _ in events]
    text_block = ["content_block_start", "content_block_delta", "content_block_stop"]
    if reasoning:
        expected = ["message_start", "content_block_start", "ping", "content_block_delta", "content_block_stop"]
        expected += text_block
    else:
        expected = ["message_start", "content_block_start", "ping", "content_block_delta", "content_block_stop"]
    assert _squash(kinds) == [*expected, "message_delta", "message_stop"]
    deltas = [obj["delta"] for k, obj in events if k == "content_block_delta"]
    assert [d["type"] for d in deltas] == ["thinking_delta"] * reasoning + ["text_delta"] * (8 - reasoning)
    start = events[0][1]["message"]
    assert start["usage"] == {"input_tokens": trace["prompt_tokens"], "output_tokens": 1}
    assert start["usage"]["input_tokens"] == 2 + 9 + 2 * 2
    final = events[-2][1]
    assert final["delta"]["stop_reason"] == "max_tokens"
    assert final["usage"]["output_tokens"] == trace["output_tokens"] == 8
    assert final["loadgen"]["decode_steps"] == 7
    blocks = [obj["content_block"]["type"] for k, obj in events if k == "content_block_start"]
    assert blocks == (["thinking", "text"] if reasoning else ["text"])


async def test_messages_not_streamed_and_stop_sequences(session: aiohttp.ClientSession) -> None:
    async with serve(make_engine(), reasoning_tokens=Fixed(2)) as url:
        body = {
            "model": MODEL,
            "max_tokens": 8,
            "messages": [{"role": "user", "content": PROMPT}],
            "ignore_eos": True,
            "seed": 7,
        }
        async with session.post(url + "/v1/messages", json=body) as resp:
            answer = await resp.json()
        words = answer["content"][1]["text"].split()
        stop = " ".join(words[2:4])
        assert words.index(words[2]) == 2  # no earlier occurrence (fixed by the seed)
        async with session.post(url + "/v1/messages", json={**body, "max_tokens": 400, "stop_sequences": [stop]}) as r:
            stopped = await r.json()
    assert answer["type"] == "message" and answer["id"].startswith("msg_")
    assert [c["type"] for c in answer["content"]] == ["thinking", "text"]
    assert answer["stop_reason"] == "max_tokens" and answer["usage"] == {"input_tokens": 11, "output_tokens": 8}
    assert len(words) == 6 and len(answer["content"][0]["thinking"].split()) == 2
    assert (stopped["stop_reason"], stopped["stop_sequence"]) == ("stop_sequence", stop)
    assert stopped["content"][1]["text"].split() == words[:2]
    assert stopped["usage"]["output_tokens"] == 2 + 4  # thinking, answer and the stop words


@pytest.mark.parametrize(
    "body",
    [
        [1, 2],
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},  # no max_tokens
        {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},  # no model
        {"model": MODEL, "max_tokens": 4, "messages": []},
        {"model": MODEL, "max_tokens": 4, "messages": [{"role": "system", "content": "hi"}]},
        {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image"}]}]},
        {"model": MODEL, "max_tokens": "4", "messages": [{"role": "user", "content": "hi"}]},
        {"model": "other", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
        {"model": MODEL, "max_tokens": 5000, "messages": [{"role": "user", "content": "hi"}]},
    ],
)
async def test_messages_errors_have_anthropics_shape(session: aiohttp.ClientSession, body: Any) -> None:
    async with serve(make_engine()) as url, session.post(url + "/v1/messages", json=body) as resp:
        assert resp.status == 400
        answer = await resp.json()
    assert answer["type"] == "error" and set(answer) == {"type", "error"}
    assert answer["error"]["type"] == "invalid_request_error" and answer["error"]["message"]


async def test_messages_malformed_json_and_wrong_method_are_anthropic_errors(session: aiohttp.ClientSession) -> None:
    async with serve(make_engine()) as url:
        async with session.post(url + "/v1/messages", data=b"{not json") as resp:
            assert resp.status == 400 and (await resp.json())["error"]["type"] == "invalid_request_error"
        async with session.get(url + "/v1/messages") as resp:
            assert resp.status == 405 and (await resp.json())["type"] == "error"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": MODEL}, "input"),
        ({"input": []}, "input"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input"),
        ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input"),
        ({"input": "hi", "instructions": 3}, "instructions"),
        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "hi", "max_output_tokens": 5000}, "input"),
        ({"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": "hi", "stream": "yes"}, "stream"),
    ],
)
async def test_responses_errors_have_openais_shape(session: aiohttp.ClientSession, body: Any, param: str) -> None:
    async with serve(make_engine()) as url, session.post(url + "/v1/responses", json=body) as resp:
        assert resp.status == 400
        err = (await resp.json())["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["param"] == param


async def test_x_api_key_is_accepted_on_messages_only(session: aiohttp.ClientSession) -> None:
    messages = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    async with serve(make_engine(), http=HttpLimits(api_key=KEY)) as url:
        for headers, status in [
            ({"x-api-key": KEY}, 200),
            ({"Authorization": f"Bearer {KEY}"}, 200),
            ({"x-api-key": "wrong", "Authorization": f"Bearer {KEY}"}, 200),
            ({"x-api-key": "wrong"}, 401),
            ({}, 401),
        ]:
            async with session.post(url + "/v1/messages", json=messages, headers=headers) as resp:
                assert resp.status == status, headers
                if status == 401:
                    answer = await resp.json()
                    assert answer["error"]["type"] == "authentication_error" and KEY not in json.dumps(answer)
        for path, body in [("/v1/responses", {"input": "hi"}), ("/v1/chat/completions", messages)]:
            async with session.post(url + path, json=body, headers={"x-api-key": KEY}) as resp:
                assert resp.status == 401 and (await resp.json())["error"]["code"] == "invalid_api_key"
        async with session.post(
            url + "/v1/responses",
            json={"input": "hi", "max_output_tokens": 2},
            headers={"Authorization": f"Bearer {KEY}"},
        ) as resp:
            assert resp.status == 200
