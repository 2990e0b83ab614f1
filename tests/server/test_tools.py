"""Tool calls of the reference server, each API streamed and not, against the real server on
loopback: exact event sequences, arguments valid JSON, usage equal to the argument pieces,
tool_choice, the seeded share rule, tool histories accepted, counted and prefix-cached."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from loadgen.server.tools import ToolPolicy
from tests.server.helpers import MODEL, make_engine, read_sse, serve
from tests.server.test_responses_messages import _named_events

PROMPT = "the quick brown fox jumps over the lazy dog"
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "q": {"type": "string"}}}
CHAT_TOOLS = [
    {"type": "function", "function": {"name": "search", "parameters": SCHEMA}},
    {"type": "function", "function": {"name": "open"}},
]
FLAT_TOOLS = [{"type": "function", "name": "search", "parameters": SCHEMA}, {"type": "function", "name": "open"}]
ANTHROPIC_TOOLS = [{"name": "search", "input_schema": SCHEMA}, {"name": "open", "input_schema": {}}]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def _chat(n: int, **extra: Any) -> dict[str, Any]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": n, "ignore_eos": True}
    return {"tools": CHAT_TOOLS, "tool_choice": "required", **body, **extra}


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Any:
    async with session.post(url, json=body) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def test_chat_streams_a_tool_call(session: aiohttp.ClientSession) -> None:
    body = _chat(5, stream=True, stream_options={"include_usage": True})
    async with serve(make_engine()) as url, session.post(url + "/v1/chat/completions", json=body) as resp:
        events = await read_sse(resp)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [e["choices"][0] for e in events[1:-2]]
    assert len(deltas) == 5  # one argument piece per generated token
    calls = [d["delta"]["tool_calls"][0] for d in deltas]
    assert calls[0]["id"].startswith("call_") and calls[0]["type"] == "function"
    assert calls[0]["function"]["name"] == "search" and all(set(c) == {"index", "function"} for c in calls[1:])
    assert [d["finish_reason"] for d in deltas] == [None] * 4 + ["tool_calls"]
    arguments = json.loads("".join(c["function"]["arguments"] for c in calls))
    assert list(arguments) == ["q"] and len(arguments["q"].split()) == 5  # the first string parameter
    assert events[-2]["usage"]["completion_tokens"] == 5 and events[-1] == "[DONE]"


async def test_chat_answers_a_tool_call_whole(session: aiohttp.ClientSession) -> None:
    async with serve(make_engine()) as url:
        answer = await _post(session, url + "/v1/chat/completions", _chat(4))
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "search"
    assert len(json.loads(call["function"]["arguments"])["q"].split()) == 4 == answer["usage"]["completion_tokens"]


async def test_tool_choice_none_named_and_no_tools(session: aiohttp.ClientSession) -> None:
    named = {"type": "function", "function": {"name": "open"}}
    async with serve(make_engine()) as url:
        plain = await _post(session, url + "/v1/chat/completions", _chat(3, tool_choice="none"))
        chosen = await _post(session, url + "/v1/chat/completions", _chat(3, tool_choice=named))
        untooled = await _post(session, url + "/v1/chat/completions", {**_chat(3), "tools": None, "tool_choice": None})
        async with session.post(
            url + "/v1/chat/completions", json=_chat(3, tool_choice={"type": "function", "function": {"name": "x"}})
        ) as resp:
            assert resp.status == 400 and (await resp.json())["error"]["param"] == "tool_choice"
    assert "tool_calls" not in plain["choices"][0]["message"] and plain["choices"][0]["finish_reason"] == "length"
    assert len(plain["choices"][0]["message"]["content"].split()) == 3
    function = chosen["choices"][0]["message"]["tool_calls"][0]["function"]
    assert function["name"] == "open" and list(json.loads(function["arguments"])) == ["query"]
    assert "tool_calls" not in untooled["choices"][0]["message"]


async def test_auto_share_is_seeded_per_request_and_capped(session: aiohttp.ClientSession) -> None:
    prompts = [f"{PROMPT} {i}" for i in range(40)]

    async def calls(url: str, history: list[dict[str, Any]] | None = None) -> list[bool]:
        out = []
        for p in prompts:
            messages = [{"role": "user", "content": p}, *(history or [])]
            answer = await _post(session, url + "/v1/chat/completions", _chat(1, tool_choice="auto", messages=messages))
            out.append("tool_calls" in answer["choices"][0]["message"])
        return out

    result = {"tool_calls": [{"id": "c", "type": "function", "function": {"name": "search", "arguments": "{}"}}]}
    rounds = [{"role": "assistant", "content": None, **result}, {"role": "tool", "tool_call_id": "c", "content": "x"}]
    async with serve(make_engine(), tools=ToolPolicy(share=0.5, max_results=2), seed=1) as url:
        first, again = await calls(url), await calls(url)
        capped = await calls(url, rounds * 2)
        under = await calls(url, rounds)
    async with serve(make_engine(), tools=ToolPolicy(share=0.5), seed=2) as url:
        other = await calls(url)
    async with serve(make_engine(), tools=ToolPolicy(share=0.0)) as url:
        never = await calls(url)
    async with serve(make_engine(), tools=ToolPolicy(share=1.0)) as url:
        always = await calls(url)
    assert first == again and 10 <= sum(first) <= 30 and other != first  # the same request, the same answer
    assert not any(capped) and any(under) and not any(never) and all(always)


async def test_responses_streams_a_function_call(session: aiohttp.ClientSession) -> None:
    body = {"model": MODEL, "input": PROMPT, "max_output_tokens": 3, "ignore_eos": True, "stream": True}
    body.update(tools=FLAT_TOOLS, tool_choice={"type": "function", "name": "search"})
    async with serve(make_engine()) as url, session.post(url + "/v1/responses", json=body) as resp:
        events = _named_events(await resp.read())
    kinds = [k for k, _ in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * 3,
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added = events[2][1]["item"]
    assert added["type"] == "function_call" and added["arguments"] == "" and added["name"] == "search"
    arguments = "".join(e["delta"] for k, e in events if k.endswith("arguments.delta"))
    assert events[6][1]["arguments"] == arguments and len(json.loads(arguments)["q"].split()) == 3
    done = events[-1][1]["response"]
    assert done["status"] == "completed" and done["usage"]["output_tokens"] == 3
    assert done["output"] == [events[7][1]["item"]] and done["output"][0]["call_id"] == added["call_id"]


async def test_responses_and_messages_answer_tool_calls_whole(session: aiohttp.ClientSession) -> None:
    responses = {"model": MODEL, "input": PROMPT, "max_output_tokens": 3, "ignore_eos": True}
    messages = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 3, "ignore_eos": True}
    async with serve(make_engine()) as url:
        r = await _post(session, url + "/v1/responses", {**responses, "tools": FLAT_TOOLS, "tool_choice": "required"})
        m = await _post(
            session, url + "/v1/messages", {**messages, "tools": ANTHROPIC_TOOLS, "tool_choice": {"type": "any"}}
        )
        plain = await _post(
            session, url + "/v1/messages", {**messages, "tools": ANTHROPIC_TOOLS, "tool_choice": {"type": "none"}}
        )
    (item,) = r["output"]
    assert item["type"] == "function_call" and len(json.loads(item["arguments"])["q"].split()) == 3
    (block,) = m["content"]
    assert block["type"] == "tool_use" and block["id"].startswith("toolu_") and block["name"] == "search"
    assert len(block["input"]["q"].split()) == 3 == m["usage"]["output_tokens"] and m["stop_reason"] == "tool_use"
    assert plain["content"][0]["type"] == "text" and plain["stop_reason"] == "max_tokens"


async def test_messages_streams_a_tool_use_block(session: aiohttp.ClientSession) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 4, "ignore_eos": True}
    body.update(stream=True, tools=ANTHROPIC_TOOLS, tool_choice={"type": "tool", "name": "open"})
    async with serve(make_engine()) as url, session.post(url + "/v1/messages", json=body) as resp:
        events = _named_events(await resp.read())
    assert [k for k, _ in events] == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * 4,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    block = events[1][1]["content_block"]
    assert block["type"] == "tool_use" and block["name"] == "open" and block["input"] == {}
    deltas = [e["delta"] for k, e in events if k == "content_block_delta"]
    assert all(d["type"] == "input_json_delta" for d in deltas)
    assert len(json.loads("".join(d["partial_json"] for d in deltas))["query"].split()) == 4
    final = events[-2][1]
    assert final["delta"]["stop_reason"] == "tool_use" and final["usage"]["output_tokens"] == 4


async def test_tool_histories_are_accepted_counted_and_cached(session: aiohttp.ClientSession) -> None:
    long = " ".join([PROMPT] * 6)  # 54 words: whole KV blocks to reuse
    step1 = _chat(4, messages=[{"role": "user", "content": long}])
    async with serve(make_engine()) as url:
        first = await _post(session, url + "/v1/chat/completions", step1)
        call = first["choices"][0]["message"]["tool_calls"][0]
        history = [
            *step1["messages"],
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "five words of tool result"},
        ]
        second = await _post(session, url + "/v1/chat/completions", _chat(2, messages=history))
        r_input = [
            {"role": "user", "content": long},
            {"type": "function_call", "call_id": "c1", "name": "search", "arguments": call["function"]["arguments"]},
            {"type": "function_call_output", "call_id": "c1", "output": "five words of tool result"},
        ]
        resp = await _post(
            session,
            url + "/v1/responses",
            {"model": MODEL, "input": r_input, "max_output_tokens": 2, "tools": FLAT_TOOLS},
        )
        content = [
            {"type": "tool_use", "id": "t1", "name": "search", "input": json.loads(call["function"]["arguments"])}
        ]
        result = [{"type": "tool_result", "tool_use_id": "t1", "content": "five words of tool result"}]
        m_messages = [
            {"role": "user", "content": long},
            {"role": "assistant", "content": content},
            {"role": "user", "content": result},
        ]
        msg = await _post(
            session,
            url + "/v1/messages",
            {"model": MODEL, "messages": m_messages, "max_tokens": 2, "tools": ANTHROPIC_TOOLS},
        )
    tools_words = len(json.dumps(CHAT_TOOLS, separators=(", ", ": ")).split())
    assert first["usage"]["prompt_tokens"] == (tools_words + 2) + (54 + 2)
    arguments_words = len(call["function"]["arguments"].split())
    # + the assistant's call (name + arguments) and the tool's result, each with its 2 template tokens
    assert second["usage"]["prompt_tokens"] == first["usage"]["prompt_tokens"] + (1 + arguments_words + 2) + (5 + 2)
    assert second["loadgen"]["cached_tokens"] >= first["usage"]["prompt_tokens"] // 16 * 16 > 0
    # the same history in each API's shape costs the same ("open"'s input_schema {} is 2 words more)
    assert resp["usage"]["input_tokens"] == second["usage"]["prompt_tokens"] == msg["usage"]["input_tokens"] - 2
    assert resp["usage"]["input_tokens_details"]["cached_tokens"] > 0
