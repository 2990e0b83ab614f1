"""Tool calls of agentic workloads: collected from a stream, rendered into the history.

Each dialect's ``collect_calls(obj, calls)`` gathers an agent request's streamed tool calls
as ``[key, id, name, arguments]`` lists; the runner keeps the agent's history in chat's
shape (an assistant turn with ``tool_calls``, then ``tool`` results), which chat sends as
it is and the other dialects render in theirs. Which events each dialect reads and the
shapes it renders: docs/client.md, "Tool calls of agentic workloads".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = [
    "ToolCall",
    "chat_calls",
    "messages_calls",
    "messages_history",
    "responses_calls",
    "responses_items",
]

ToolCall = tuple[str, str, str]  # (id, name, arguments)


def _call(calls: list[list[Any]], key: Any) -> list[Any]:
    for c in calls:  # an answer has a few calls at most
        if c[0] == key:
            return c
    c = [key, None, None, ""]
    calls.append(c)
    return c


def _str(v: Any) -> str | None:
    return v if type(v) is str else None


def chat_calls(obj: dict[str, Any], calls: list[list[Any]]) -> None:
    """Collect the tool-call deltas of one chat chunk."""
    choices = obj.get("choices")
    if type(choices) is not list:
        return
    for ch in choices:
        delta = ch.get("delta") if type(ch) is dict else None
        deltas = delta.get("tool_calls") if type(delta) is dict else None
        if type(deltas) is not list:
            continue
        for d in deltas:
            if type(d) is not dict:
                continue
            c = _call(calls, d.get("index", 0))
            if _str(d.get("id")):
                c[1] = d["id"]
            fn = d.get("function")
            if type(fn) is dict:
                if _str(fn.get("name")):
                    c[2] = (c[2] or "") + fn["name"]
                if _str(fn.get("arguments")):
                    c[3] += fn["arguments"]


def responses_calls(obj: dict[str, Any], calls: list[list[Any]]) -> None:
    """Collect a Responses stream's function calls."""
    kind = obj.get("type")
    if kind == "response.function_call_arguments.delta":
        if _str(obj.get("delta")):
            _call(calls, obj.get("output_index"))[3] += obj["delta"]
    elif kind == "response.output_item.added":
        item = obj.get("item")
        if type(item) is dict and item.get("type") == "function_call":
            c = _call(calls, obj.get("output_index"))
            c[1], c[2] = _str(item.get("call_id")), _str(item.get("name"))
            c[3] += _str(item.get("arguments")) or ""


def messages_calls(obj: dict[str, Any], calls: list[list[Any]]) -> None:
    """Collect a Messages stream's ``tool_use`` blocks."""
    kind = obj.get("type")
    if kind == "content_block_delta":
        delta = obj.get("delta")
        if type(delta) is dict and delta.get("type") == "input_json_delta" and _str(delta.get("partial_json")):
            _call(calls, obj.get("index"))[3] += delta["partial_json"]
    elif kind == "content_block_start":
        block = obj.get("content_block")
        if type(block) is dict and block.get("type") == "tool_use":
            c = _call(calls, obj.get("index"))
            c[1], c[2] = _str(block.get("id")), _str(block.get("name"))


def _calls_of(m: dict[str, Any]) -> list[ToolCall]:
    out = []
    for c in m.get("tool_calls") or ():
        fn = c.get("function") or {}
        out.append((c.get("id", ""), fn.get("name", ""), fn.get("arguments", "")))
    return out


def responses_items(m: dict[str, Any]) -> list[dict[str, Any]]:
    """The Responses input items of one chat-shaped history message with tool calls or a
    tool result (any other message: none)."""
    if m.get("role") == "tool":
        return [{"type": "function_call_output", "call_id": m.get("tool_call_id"), "output": m.get("content", "")}]
    text = m.get("content") or ""
    items: list[dict[str, Any]] = [{"role": "assistant", "content": text}] if text else []
    return items + [{"type": "function_call", "call_id": i, "name": n, "arguments": a} for i, n, a in _calls_of(m)]


def _input(arguments: str) -> Any:
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"arguments": arguments}


def messages_history(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages API ``messages`` of a chat-shaped history (system messages left out): an
    assistant message with tool calls as ``text`` and ``tool_use`` blocks, each run of
    ``tool`` messages as one user message of ``tool_result`` blocks."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role", "user")
        if role == "system":
            continue
        if role == "tool":
            block = {"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": m.get("content", "")}
            prev = out[-1] if out else None
            if prev is not None and prev["role"] == "user" and prev.get("_results"):
                prev["content"].append(block)
            else:
                out.append({"role": "user", "content": [block], "_results": True})
        elif m.get("tool_calls"):
            text = m.get("content") or ""
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            blocks += [{"type": "tool_use", "id": i, "name": n, "input": _input(a)} for i, n, a in _calls_of(m)]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": role, "content": m.get("content", "")})
    for m in out:
        m.pop("_results", None)
    return out
