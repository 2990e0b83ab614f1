"""Anthropic's Messages API (``POST /v1/messages``) over the same engines as chat.

The body (``model`` and ``max_tokens`` required, ``messages``, ``system``,
``stop_sequences``, ``tools``, ``tool_choice``, vLLM's extras; other fields ignored) becomes
the chat template of its messages, so a request costs what the same chat request costs. A
stream is Anthropic's named events (``message_start``, content blocks of deltas, ``ping``,
``message_delta`` with ``stop_reason``, usage and the ``loadgen`` timings, ``message_stop``;
an ``error`` event when aborted); not streamed, the message object. Errors have Anthropic's
shape (:func:`anthropic_error_body`).

Docs: docs/server.md ("The routes", "Responses and Messages bodies", "Tool calls").
"""

from __future__ import annotations

import json
from time import perf_counter_ns
from typing import Any

from loadgen.server.generation import Generation
from loadgen.server.prometheus import RequestTrace
from loadgen.server.protocol import ParsedRequest
from loadgen.server.rejected import RequestRejected
from loadgen.server.render import Api, event, parse_as_chat
from loadgen.server.tokenizer import Tokenizer
from loadgen.server.tools import ToolCall

__all__ = ["MESSAGES", "MessagesRenderer", "anthropic_error_body", "parse_messages"]

_PASSED = ("model", "temperature", "stream", "max_tokens", "seed", "ignore_eos", "min_tokens")
_RENAME = {"stop": "stop_sequences"}
_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
}


def anthropic_error_body(status: int, message: str) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``, the type by the HTTP status."""
    kind = _ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for block in content:
            if not (isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)):
                raise RequestRejected(
                    f"{where}: only blocks of type 'text' (a string 'text'), 'thinking', 'tool_use' "
                    "(string 'id' and 'name') or 'tool_result' (a string 'tool_use_id') are supported",
                    param="messages",
                )
            texts.append(block["text"])
        return " ".join(texts)
    raise RequestRejected(f"{where} must be a string or a list of text blocks", param="messages")


def _blocks(role: str, content: Any, where: str) -> list[dict[str, Any]]:
    """One message as chat messages: its text (``thinking`` too), its ``tool_use`` blocks as
    ``tool_calls``, each ``tool_result`` block a ``tool`` message."""
    if not isinstance(content, list):
        return [{"role": role, "content": _text(content, where)}]
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        at = f"{where}.{j}"
        if kind == "thinking" and isinstance(block.get("thinking"), str):
            texts.append(block["thinking"])
        elif kind == "tool_use" and isinstance(block.get("id"), str) and isinstance(block.get("name"), str):
            arguments = json.dumps(block.get("input", {}), separators=(", ", ": "))
            calls.append(
                {"id": block["id"], "type": "function", "function": {"name": block["name"], "arguments": arguments}}
            )
        elif kind == "tool_result" and isinstance(block.get("tool_use_id"), str):
            result = block.get("content", "")
            results.append({"role": "tool", "content": _text(result, f"{at}.content") if result else ""})
        else:
            texts.append(_text([block], where))
    messages = list(results)
    if texts or calls or not results:
        messages.append({"role": role, "content": " ".join(texts), **({"tool_calls": calls} if calls else {})})
    return messages


def _tools(body: dict[str, Any]) -> dict[str, Any]:
    """``tools`` and ``tool_choice`` restated in chat's shape."""
    chat: dict[str, Any] = {}
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise RequestRejected("tools: a list of tools is required", param="tools")
        chat["tools"] = [
            {"type": "function", "function": {"name": tool.get("name"), "parameters": tool.get("input_schema")}}
            if isinstance(tool, dict)
            else tool
            for tool in tools
        ]
    choice = body.get("tool_choice")
    if choice is not None:
        kind = choice.get("type") if isinstance(choice, dict) else None
        if kind not in ("auto", "any", "tool", "none"):
            raise RequestRejected(
                "tool_choice: {'type': 'auto' | 'any' | 'tool' | 'none'} is required", param="tool_choice"
            )
        name = choice.get("name") if isinstance(choice, dict) else None
        named = {"type": "function", "function": {"name": name}}
        chat["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}.get(kind, named)
    return chat


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if body.get("system") is not None:
        messages.append({"role": "system", "content": _text(body["system"], "system")})
    given = body.get("messages")
    if not isinstance(given, list) or not given:
        raise RequestRejected("messages: a non-empty list of messages is required", param="messages")
    for i, msg in enumerate(given):
        if not isinstance(msg, dict):
            raise RequestRejected(f"messages.{i} must be an object", param="messages")
        role = msg.get("role")
        if role not in ("user", "assistant"):
            raise RequestRejected(f"messages.{i}.role must be 'user' or 'assistant'", param="messages")
        messages += _blocks(role, msg.get("content"), f"messages.{i}.content")
    return messages


def parse_messages(body: Any, *, model_name: str, tokenizer: Tokenizer, max_model_len: int) -> ParsedRequest:
    """Validate a Messages body into chat's :class:`ParsedRequest`; raise :class:`RequestRejected`."""
    if not isinstance(body, dict):
        raise RequestRejected("the request body must be a JSON object")
    for key in ("model", "max_tokens"):
        if body.get(key) is None:
            raise RequestRejected(f"{key}: Field required", param=key)
    chat: dict[str, Any] = {key: body[key] for key in _PASSED if key in body}
    chat["messages"] = _messages(body)
    if "stop_sequences" in body:
        chat["stop"] = body["stop_sequences"]
    chat.update(_tools(body))
    return parse_as_chat(chat, _RENAME, model_name=model_name, tokenizer=tokenizer, max_model_len=max_model_len)


def _stop_reason(gen: Generation, tool: bool = False) -> str:
    if tool:
        return "tool_use"
    if gen.stop_reason is not None:
        return "stop_sequence"
    return "max_tokens" if gen.finish_reason == "length" else "end_turn"


class MessagesRenderer:
    """One message's events: a ``thinking`` block (when the server reasons), then a ``text`` block."""

    def __init__(self, model_name: str, trace: RequestTrace, parsed: ParsedRequest) -> None:
        self.model_name = model_name
        self.trace = trace
        self.started = False
        self.blocks = 0  # blocks started
        self.open: str | None = None  # the kind of the block being streamed
        self.tool = ToolCall(parsed.call, "toolu_") if parsed.call is not None else None

    def message(self, content: list[dict[str, Any]], output_tokens: int, stop: str | None) -> dict[str, Any]:
        return {
            "id": self.trace.id,
            "type": "message",
            "role": "assistant",
            "model": self.model_name,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": self.trace.prompt_tokens, "output_tokens": output_tokens},
        }

    def _begin(self, kind: str) -> bytes:
        if self.open == kind:
            return b""
        data = self._close()
        block: dict[str, Any] = (
            {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else {"type": kind, "text": ""}
        )
        if kind == "tool_use" and self.tool is not None:
            block = {"type": "tool_use", "id": self.tool.call_id, "name": self.tool.name, "input": {}}
        data += event(
            "content_block_start", {"type": "content_block_start", "index": self.blocks, "content_block": block}
        )
        if not self.blocks:
            data += event("ping", {"type": "ping"})
        self.blocks += 1
        self.open = kind
        return data

    def _close(self) -> bytes:
        if self.open is None:
            return b""
        self.open = None
        return event("content_block_stop", {"type": "content_block_stop", "index": self.blocks - 1})

    def _delta(self, kind: str, text: str, final: bool = False) -> bytes:
        delta = (
            {"type": "thinking_delta", "thinking": text} if kind == "thinking" else {"type": "text_delta", "text": text}
        )
        if kind == "tool_use" and self.tool is not None:
            delta = {"type": "input_json_delta", "partial_json": self.tool.piece(text, final)}
        data = self._begin(kind)
        return data + event(
            "content_block_delta", {"type": "content_block_delta", "index": self.blocks - 1, "delta": delta}
        )

    def _start(self) -> bytes:
        self.started = True
        return event("message_start", {"type": "message_start", "message": self.message([], 1, None)})

    @staticmethod
    def _error() -> bytes:
        return event("error", anthropic_error_body(503, "the request was aborted (the server is shutting down)"))

    def step(self, gen: Generation, text: str, finish: str | None) -> tuple[bytes, bytes]:
        lead = b"" if self.started else self._start()
        data = self._delta("thinking", gen.reasoning) if gen.reasoning else b""
        answer = "text" if self.tool is None else "tool_use"
        if text:
            data += self._delta(answer, text, finish is not None and finish != "abort")
        if finish == "abort":
            data += self._close() + self._error()
        elif finish is not None:
            if self.tool is not None and not (self.open == "tool_use" and self.tool.closed):
                data += self._delta("tool_use", "", True)  # the arguments' close (every token was thinking)
            elif not self.blocks or self.open == "thinking":  # a text block even when every token was thinking
                data += self._begin("text")
            final = {
                "type": "message_delta",
                "delta": {"stop_reason": _stop_reason(gen, self.tool is not None), "stop_sequence": gen.stop_reason},
                "usage": {"output_tokens": gen.tokens},
                "loadgen": gen.vendor(self.trace, perf_counter_ns()),
            }
            data += self._close() + event("message_delta", final) + event("message_stop", {"type": "message_stop"})
        return lead, data

    def tail(self, gen: Generation) -> bytes:
        return b""

    def abort(self, gen: Generation) -> bytes:
        return (b"" if self.started else self._start()) + self._close() + self._error()

    def body(self, gen: Generation, text: str, reasoning: str, now_ns: int) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if reasoning:
            content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
        if self.tool is not None:
            arguments = json.loads(self.tool.whole(text))
            content.append({"type": "tool_use", "id": self.tool.call_id, "name": self.tool.name, "input": arguments})
        else:
            content.append({"type": "text", "text": text})
        message = self.message(content, gen.tokens, _stop_reason(gen, self.tool is not None))
        message["stop_sequence"] = gen.stop_reason
        return {**message, "loadgen": gen.vendor(self.trace, now_ns)}


MESSAGES = Api("messages", "msg_", "messages", True, parse_messages, MessagesRenderer)
