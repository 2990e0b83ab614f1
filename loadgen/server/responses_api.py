"""OpenAI's Responses API (``POST /v1/responses``) over the same engines as chat.

The body (``input`` as a string or message items, ``instructions``, ``max_output_tokens``,
``tools``, ``tool_choice``, vLLM's extras; other fields ignored, ``previous_response_id``
refused) becomes the chat template of its messages, so a request costs what the same chat
request costs. A stream is named events with a ``sequence_number``: ``response.created``,
output items of deltas (reasoning, then the message or a ``function_call``) and last
``response.completed`` with the usage and the ``loadgen`` timings; an answer cut by
``max_output_tokens`` completes ``incomplete``, one aborted ends with ``response.failed``.
Not streamed: the response object. Errors are OpenAI's.

Docs: docs/server.md ("The routes", "Responses and Messages bodies", "Tool calls").
"""

from __future__ import annotations

import time
import uuid
from time import perf_counter_ns
from typing import Any

from loadgen.server.generation import Generation
from loadgen.server.prometheus import RequestTrace
from loadgen.server.protocol import ParsedRequest
from loadgen.server.rejected import RequestRejected
from loadgen.server.render import Api, event, parse_as_chat
from loadgen.server.tokenizer import Tokenizer
from loadgen.server.tools import ToolCall

__all__ = ["RESPONSES", "ResponsesRenderer", "parse_responses"]

_ROLES = ("user", "assistant", "system", "developer")
_PARTS = ("input_text", "output_text")
_PASSED = ("model", "temperature", "seed", "stream", "ignore_eos", "min_tokens")
_RENAME = {"messages": "input", "max_tokens": "max_output_tokens"}


def _str(item: dict[str, Any], key: str, i: int) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise RequestRejected(f"input[{i}].{key} must be a string", param="input")
    return value


def _history_item(item: dict[str, Any], i: int) -> dict[str, Any] | None:
    """A resent ``function_call``, ``function_call_output`` or ``reasoning`` item as a chat message."""
    kind = item.get("type")
    if kind == "function_call":
        function = {"name": _str(item, "name", i), "arguments": _str(item, "arguments", i)}
        call = {"id": _str(item, "call_id", i), "type": "function", "function": function}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    if kind == "function_call_output":
        _str(item, "call_id", i)
        output = item.get("output")
        return {"role": "tool", "content": output if isinstance(output, str) else _content(output, i)}
    if kind == "reasoning":
        texts = []
        for key in ("summary", "content"):
            parts = item.get(key) or []
            if not isinstance(parts, list):
                raise RequestRejected(f"input[{i}].{key} must be a list", param="input")
            for part in parts:
                if not (isinstance(part, dict) and isinstance(part.get("text"), str)):
                    raise RequestRejected(f"input[{i}].{key}: parts need a string 'text'", param="input")
                texts.append(part["text"])
        return {"role": "assistant", "content": " ".join(texts)}
    return None


def _tools(body: dict[str, Any]) -> dict[str, Any]:
    """``tools`` and ``tool_choice`` restated in chat's shape (function tools only)."""
    chat: dict[str, Any] = {}
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise RequestRejected("'tools' must be a list of tools", param="tools")
        chat["tools"] = [
            {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}
            if isinstance(tool, dict) and tool.get("type") == "function"
            else tool
            for tool in tools
        ]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function":
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    if choice is not None:
        chat["tool_choice"] = choice
    return chat


def _content(content: Any, i: int) -> str | list[dict[str, Any]]:
    """An input item's content for chat's parser: its text, or (when it holds images) chat's
    parts, ``input_image`` restated as ``image_url`` (:mod:`loadgen.server.vision` reads them)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[dict[str, Any]] = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "input_image":
                parts.append({"type": "image_url", "image_url": {"url": part.get("image_url")}})
                continue
            if not (isinstance(part, dict) and part.get("type") in _PARTS and isinstance(part.get("text"), str)):
                raise RequestRejected(
                    f"input[{i}].content: only parts of type 'input_text', 'output_text' or 'input_image' "
                    "are supported (text parts with a string 'text')",
                    param="input",
                )
            parts.append({"type": "text", "text": part["text"]})
        if any(p["type"] == "image_url" for p in parts):
            return parts
        return " ".join(p["text"] for p in parts)
    raise RequestRejected(f"input[{i}].content must be a string or a list of input_text parts", param="input")


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise RequestRejected("'instructions' must be a string", param="instructions")
        messages.append({"role": "system", "content": instructions})
    given = body.get("input")
    if given is None:
        raise RequestRejected("'input' is required", param="input")
    if isinstance(given, str):
        return [*messages, {"role": "user", "content": given}]
    if not isinstance(given, list) or not given:
        raise RequestRejected("'input' must be a string or a non-empty list of message items", param="input")
    for i, item in enumerate(given):
        if not isinstance(item, dict):
            raise RequestRejected(f"input[{i}] must be an object", param="input")
        if item.get("type", "message") != "message":
            restated = _history_item(item, i)
            if restated is None:
                raise RequestRejected(
                    f"input[{i}]: only items of type 'message', 'reasoning', 'function_call' or "
                    "'function_call_output' are supported",
                    param="input",
                )
            messages.append(restated)
            continue
        role = item.get("role")
        if role not in _ROLES:
            raise RequestRejected(f"input[{i}].role must be one of {', '.join(_ROLES)}", param="input")
        messages.append({"role": role, "content": _content(item.get("content"), i)})
    return messages


def parse_responses(body: Any, *, model_name: str, tokenizer: Tokenizer, max_model_len: int) -> ParsedRequest:
    """Validate a Responses body into chat's :class:`ParsedRequest`; raise :class:`RequestRejected`."""
    if not isinstance(body, dict):
        raise RequestRejected("the request body must be a JSON object")
    if body.get("previous_response_id") is not None:
        raise RequestRejected(
            "'previous_response_id' is not supported: this server stores no responses", param="previous_response_id"
        )
    chat: dict[str, Any] = {key: body[key] for key in _PASSED if key in body}
    chat["messages"] = _messages(body)
    chat["max_tokens"] = body.get("max_output_tokens")
    chat.update(_tools(body))
    return parse_as_chat(chat, _RENAME, model_name=model_name, tokenizer=tokenizer, max_model_len=max_model_len)


class ResponsesRenderer:
    """One response's events: a ``reasoning`` item (when the server reasons), then a ``message``."""

    def __init__(self, model_name: str, trace: RequestTrace, parsed: ParsedRequest) -> None:
        self.model_name = model_name
        self.trace = trace
        self.parsed = parsed
        self.created_at = int(time.time())
        self.seq = 0
        self.started = False
        self.items: list[dict[str, Any]] = []  # finished output items
        self.open: dict[str, Any] | None = None  # the item being streamed
        self.text: list[str] = []
        self.tool = ToolCall(parsed.call) if parsed.call is not None else None
        self.call: dict[str, Any] | None = None  # the function_call item being streamed

    def _call_delta(self, text: str, final: bool) -> bytes:
        """The next argument piece of the tool call (its item added first)."""
        assert self.tool is not None
        data = b""
        if self.call is None:
            data = self._close() if self.open is not None else b""
            self.call = {
                "id": f"fc_{uuid.uuid4().hex}",
                "type": "function_call",
                "status": "in_progress",
                "arguments": "",
                "call_id": self.tool.call_id,
                "name": self.tool.name,
            }
            data += self._event("response.output_item.added", output_index=len(self.items), item=dict(self.call))
        where = {"item_id": self.call["id"], "output_index": len(self.items)}
        return data + self._event("response.function_call_arguments.delta", **where, delta=self.tool.piece(text, final))

    def _call_done(self, status: str) -> bytes:
        assert self.tool is not None and self.call is not None
        where = {"item_id": self.call["id"], "output_index": len(self.items)}
        arguments = self.tool.text
        data = self._event("response.function_call_arguments.done", **where, name=self.tool.name, arguments=arguments)
        item = {**self.call, "status": status, "arguments": arguments}
        data += self._event("response.output_item.done", output_index=where["output_index"], item=item)
        self.items.append(item)
        self.call = None
        return data

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = event(kind, {"type": kind, "sequence_number": self.seq, **fields})
        self.seq += 1
        return data

    def _part(self, kind: str, text: str) -> dict[str, Any]:
        return (
            {"type": "reasoning_text", "text": text}
            if kind == "reasoning"
            else {
                "type": "output_text",
                "text": text,
                "annotations": [],
            }
        )

    def _where(self) -> dict[str, Any]:
        assert self.open is not None
        return {"item_id": self.open["id"], "output_index": len(self.items), "content_index": 0}

    def _begin(self, kind: str) -> bytes:
        data = self._close() if self.open is not None and self.open["type"] != kind else b""
        if self.open is not None:
            return data
        item_id = f"{'rs' if kind == 'reasoning' else 'msg'}_{uuid.uuid4().hex}"
        self.open = {"id": item_id, "type": kind, "status": "in_progress"}
        if kind == "message":
            self.open["role"] = "assistant"
        else:
            self.open["summary"] = []
        self.text = []
        index = len(self.items)
        data += self._event("response.output_item.added", output_index=index, item={**self.open, "content": []})
        return data + self._event("response.content_part.added", **self._where(), part=self._part(kind, ""))

    def _close(self, status: str = "completed") -> bytes:
        assert self.open is not None
        kind, text = self.open["type"], "".join(self.text)
        where = self._where()
        part = self._part(kind, text)
        if kind == "reasoning":
            data = self._event("response.reasoning_text.done", **where, text=text)
        else:
            data = self._event("response.output_text.done", **where, text=text, logprobs=[])
        data += self._event("response.content_part.done", **where, part=part)
        item = {**self.open, "status": status, "content": [part]}
        data += self._event("response.output_item.done", output_index=where["output_index"], item=item)
        self.items.append(item)
        self.open = None
        return data

    def _delta(self, kind: str, delta: str) -> bytes:
        data = self._begin(kind)
        self.text.append(delta)
        name = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        extra: dict[str, Any] = {} if kind == "reasoning" else {"logprobs": []}
        return data + self._event(name, **self._where(), delta=delta, **extra)

    def response(self, gen: Generation, now_ns: int | None = None) -> dict[str, Any]:
        """The response object as it stands (usage once finished)."""
        finish = gen.finish_reason if now_ns is not None else None
        if self.tool is not None and finish == "length":  # the call is complete (loadgen.server.tools)
            finish = "tool_calls"
        status = {None: "in_progress", "length": "incomplete", "abort": "failed"}.get(finish, "completed")
        reasoning = min(gen.tokens, gen.reasoning_budget)
        usage = None
        if now_ns is not None:
            usage = {
                "input_tokens": self.trace.prompt_tokens,
                "input_tokens_details": {"cached_tokens": gen.cached},
                "output_tokens": gen.tokens,
                "output_tokens_details": {"reasoning_tokens": reasoning},
                "total_tokens": self.trace.prompt_tokens + gen.tokens,
            }
        return {
            "id": self.trace.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": {"code": "server_error", "message": "the request was aborted"} if status == "failed" else None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": None,
            "max_output_tokens": self.parsed.max_tokens,
            "model": self.model_name,
            "output": list(self.items),
            "temperature": self.parsed.temperature,
            "tools": [],
            "usage": usage,
        }

    def _start(self, gen: Generation) -> bytes:
        self.started = True
        now = self.response(gen)
        return self._event("response.created", response=now) + self._event("response.in_progress", response=now)

    def _end(self, gen: Generation, now_ns: int) -> bytes:
        failed = gen.finish_reason == "abort"
        if self.tool is not None and not failed:
            data = b"" if self.tool.closed else self._call_delta("", True)
            data += self._call_done("completed")
        elif self.tool is not None and self.call is not None:
            data = self._call_done("incomplete")
        elif not failed:
            data = self._begin("message")  # a message item even when every token was reasoning
            data += self._close("incomplete" if gen.finish_reason == "length" else "completed")
        else:
            data = self._close("incomplete") if self.open is not None else b""
        kind = "response.failed" if failed else "response.completed"
        return data + self._event(kind, response=self.response(gen, now_ns), loadgen=gen.vendor(self.trace, now_ns))

    def step(self, gen: Generation, text: str, finish: str | None) -> tuple[bytes, bytes]:
        lead = b"" if self.started else self._start(gen)
        data = self._delta("reasoning", gen.reasoning) if gen.reasoning else b""
        if text and self.tool is not None:
            data += self._call_delta(text, finish is not None and finish != "abort")
        elif text:
            data += self._delta("message", text)
        if finish is not None:
            data += self._end(gen, perf_counter_ns())
        return lead, data

    def tail(self, gen: Generation) -> bytes:
        return b""

    def abort(self, gen: Generation) -> bytes:
        gen.finish_reason = "abort"
        lead = b"" if self.started else self._start(gen)
        return lead + self._end(gen, self.trace.done_ns)

    def body(self, gen: Generation, text: str, reasoning: str, now_ns: int) -> dict[str, Any]:
        if reasoning:
            self._delta("reasoning", reasoning)
        if self.tool is not None:
            self._call_delta(text, True)
            self._call_done("completed")
        else:
            self._delta("message", text)
            self._close("incomplete" if gen.finish_reason == "length" else "completed")
        return {**self.response(gen, now_ns), "loadgen": gen.vendor(self.trace, now_ns)}


RESPONSES = Api("responses", "resp_", "input", True, parse_responses, ResponsesRenderer)
