"""The Responses and Messages wire formats, as the scripted server streams them.

Each API's events are what the real API sends, ``event:`` line included (the event's
``type`` again): for ``/v1/responses`` ``response.created``, ``response.output_item.added``
before each output item, ``response.output_text.delta`` /
``response.reasoning_text.delta`` / ``response.function_call_arguments.delta``, and
``response.completed`` (or ``response.incomplete``) with ``response.usage``; for
``/v1/messages`` ``message_start`` with the input tokens, ``content_block_start`` /
``content_block_stop`` around each block, ``ping``, ``content_block_delta`` (``text_delta``,
``thinking_delta``, ``input_json_delta``), ``message_delta`` with the stop reason and the
output tokens, and ``message_stop``. A writer is made per request (:meth:`Format.writer`)
and keeps which block is open.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["FORMATS", "Format"]

Event = tuple[str, dict[str, Any]]  # (the SSE event name, its data)


class _Responses:
    def __init__(self, n_prompt: int, end: str, usage: bool) -> None:
        self.n_prompt, self.end_type, self.kind, self.items = n_prompt, end, "", 0

    def start(self) -> list[Event]:
        return [
            ("response.created", {"type": "response.created", "response": {"id": "resp_x", "status": "in_progress"}})
        ]

    def delta(self, text: str, kind: str) -> list[Event]:
        out: list[Event] = []
        if kind != self.kind:
            self.kind, self.items = kind, self.items + 1
            item = {"tool": "function_call", "reasoning": "reasoning"}.get(kind, "message")
            head: dict[str, Any] = {"type": item}
            if item == "function_call":
                head.update(call_id="call_r0", name="lookup", arguments="")
            added = {"type": "response.output_item.added", "output_index": self.items - 1, "item": head}
            out.append(("response.output_item.added", added))
        name = {
            "text": "response.output_text.delta",
            "reasoning": "response.reasoning_text.delta",
            "tool": "response.function_call_arguments.delta",
        }[kind]
        out.append((name, {"type": name, "output_index": self.items - 1, "delta": text}))
        return out

    def end(self, output_tokens: int, usage: bool, reasoning: int) -> list[Event]:
        response: dict[str, Any] = {"id": "resp_x", "status": "completed", "incomplete_details": None}
        if self.end_type == "response.incomplete":
            response.update(status="incomplete", incomplete_details={"reason": "max_output_tokens"})
        if usage:
            response["usage"] = {
                "input_tokens": self.n_prompt,
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": reasoning},
                "total_tokens": self.n_prompt + output_tokens,
            }
        return [(self.end_type, {"type": self.end_type, "response": response})]

    def error(self, form: str) -> Event:
        if form == "event":
            return ("error", {"type": "error", "code": "server_error", "message": "scripted engine failure"})
        failed = {"status": "failed", "error": {"code": "server_error", "message": "scripted engine failure"}}
        return ("response.failed", {"type": "response.failed", "response": failed})


class _Messages:
    def __init__(self, n_prompt: int, end: str, usage: bool) -> None:
        self.n_prompt, self.kind, self.blocks, self.usage = n_prompt, "", 0, usage

    def start(self) -> list[Event]:
        msg: dict[str, Any] = {"id": "msg_x", "type": "message", "role": "assistant", "content": []}
        if self.usage:
            msg["usage"] = {"input_tokens": self.n_prompt, "output_tokens": 1}
        return [("message_start", {"type": "message_start", "message": msg}), ("ping", {"type": "ping"})]

    def delta(self, text: str, kind: str) -> list[Event]:
        out: list[Event] = []
        if kind != self.kind:
            if self.kind:
                out.append(("content_block_stop", {"type": "content_block_stop", "index": self.blocks - 1}))
            self.kind, self.blocks = kind, self.blocks + 1
            block = {"text": {"type": "text", "text": ""}, "reasoning": {"type": "thinking", "thinking": ""}}.get(
                kind, {"type": "tool_use", "id": "toolu_0", "name": "lookup", "input": {}}
            )
            out.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": self.blocks - 1, "content_block": block},
                )
            )
        delta = {
            "text": {"type": "text_delta", "text": text},
            "reasoning": {"type": "thinking_delta", "thinking": text},
            "tool": {"type": "input_json_delta", "partial_json": text},
        }[kind]
        out.append(("content_block_delta", {"type": "content_block_delta", "index": self.blocks - 1, "delta": delta}))
        return out

    def end(self, output_tokens: int, usage: bool, reasoning: int) -> list[Event]:
        out: list[Event] = []
        if self.kind:
            out.append(("content_block_stop", {"type": "content_block_stop", "index": self.blocks - 1}))
        last: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None}}
        if usage:
            last["usage"] = {"output_tokens": output_tokens}
        return [*out, ("message_delta", last), ("message_stop", {"type": "message_stop"})]

    def error(self, form: str) -> Event:
        err = {"type": "error", "error": {"type": "overloaded_error", "message": "scripted engine failure"}}
        return ("error" if form == "event" else "", err)


class Format:
    """One typed-event API: how its body gives the prompt and output length, its writer and answer."""

    def __init__(self, name: str, writer: Callable[[int, str, bool], Any], max_field: str) -> None:
        self.name, self._writer, self.max_field = name, writer, max_field

    def writer(self, n_prompt: int, end: str = "response.completed", usage: bool = True) -> Any:
        """The events of one streamed answer; ``usage=False``: no usage anywhere in them."""
        return self._writer(n_prompt, end, usage)

    def prompt_texts(self, body: dict[str, Any]) -> list[str]:
        """The prompt's texts, one per message (a plain text input is one)."""
        if self.name == "responses":
            given = body.get("input", "")
            return [given] if isinstance(given, str) else [str(m.get("content", "")) for m in given]
        system = [str(body["system"])] if body.get("system") else []
        return system + [str(m.get("content", "")) for m in body.get("messages", [])]

    def answer(self, n_out: int, n_prompt: int | None) -> dict[str, Any]:
        """A non-streamed answer of ``n_out`` tokens, with usage when ``n_prompt`` is given."""
        text = " tok" * n_out
        if self.name == "responses":
            obj: dict[str, Any] = {
                "object": "response",
                "status": "incomplete",
                "output": [{"type": "message", "content": [{"type": "output_text", "text": text}]}],
            }
        else:
            obj = {"type": "message", "content": [{"type": "text", "text": text}], "stop_reason": "max_tokens"}
        if n_prompt is not None:
            obj["usage"] = {"input_tokens": n_prompt, "output_tokens": n_out}
        return obj


FORMATS = {
    "/v1/responses": Format("responses", _Responses, "max_output_tokens"),
    "/v1/messages": Format("messages", _Messages, "max_tokens"),
}
