"""The Anthropic Messages dialect: ``messages`` (``POST /v1/messages``).

The body sends ``model``, ``messages`` (a text prompt as one user message), the prompt's
system messages joined as ``system``, ``max_tokens`` and ``stream: true``; the workload's
tools in Anthropic's shape (``name``, ``description``, ``input_schema``) and ``tool_choice``
as ``auto``/``any``/``none``/``tool``. ``ignore_eos``/``min_tokens`` (vLLM-style servers)
only without ``strict``: Anthropic's own API refuses fields it does not know. The key goes
as ``x-api-key``; every request carries ``anthropic-version: 2023-06-01`` (a ``--header`` of
that name wins).

Events name their kind in the data's ``type``: ``content_block_delta`` is output, its
``delta.type`` saying which: ``text_delta`` (answer text), ``input_json_delta`` (a tool
call's input, answer output like chat's tool-call deltas), ``thinking_delta`` (reasoning).
``message_start`` carries ``message.usage.input_tokens``; ``message_delta`` carries the
cumulative ``usage.output_tokens`` and ``delta.stop_reason``, which ends the answer (a ``loadgen`` object beside them is a server's
own timings, as on chat's final chunk); an
``error`` event fails the request with ``error.message``. ``message_stop``, ``ping`` and
the content blocks' start and stop events are ignored; there is no end marker.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from loadgen.client.dialects.base import Dialect, DialectOptions, EventInfo
from loadgen.client.dialects.toolcalls import messages_calls, messages_history
from loadgen.client.dialects.typed import add_options, message_of, typed_decode
from loadgen.records import RequestSpec

__all__ = ["ANTHROPIC_VERSION", "Messages"]

ANTHROPIC_VERSION = "2023-06-01"
_DELTA = "content_block_delta"
_CHOICES = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}


def _tool(tool: Any) -> Any:
    """A chat-shaped tool (``{"type": "function", "function": {...}}``) in Anthropic's shape."""
    if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
        fn = tool["function"]
        out = {"name": fn.get("name"), "input_schema": fn.get("parameters") or {"type": "object"}}
        if fn.get("description"):
            out["description"] = fn["description"]
        return out
    return tool


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, str) and choice in _CHOICES:
        return dict(_CHOICES[choice])
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return {"type": "tool", "name": choice["function"].get("name")}
    return choice


def _body(spec: RequestSpec, options: DialectOptions) -> dict[str, Any]:
    prompt = spec.prompt
    body: dict[str, Any] = {"model": options.model, "max_tokens": spec.max_tokens, "stream": True}
    if isinstance(prompt, str):
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        system = [str(m.get("content", "")) for m in prompt if m.get("role") == "system"]
        if system:
            body["system"] = "\n".join(system)
        body["messages"] = messages_history(prompt)
    return add_options(body, spec, options, _tool, _tool_choice)


def _event(obj: dict[str, Any]) -> EventInfo:
    kind = obj.get("type")
    if kind == _DELTA:
        delta = obj.get("delta")
        if type(delta) is not dict:
            return EventInfo(False, None, None)
        sort = delta.get("type")
        if sort == "text_delta":
            text = delta.get("text")
            return EventInfo(bool(text), None, None, None, None, False, text if type(text) is str else "")
        if sort == "thinking_delta":
            return EventInfo(bool(delta.get("thinking")), None, None, None, None, True)
        if sort == "input_json_delta":
            return EventInfo(bool(delta.get("partial_json")), None, None)
        return EventInfo(False, None, None)
    if kind == "message_delta":
        usage, delta = obj.get("usage"), obj.get("delta")
        reason = delta.get("stop_reason") if type(delta) is dict else None
        vendor = obj.get("loadgen")  # a server's own timings (the reference server's), beside the usage
        return EventInfo(
            False,
            usage if type(usage) is dict else None,
            reason if reason and type(reason) is str else None,
            None,
            vendor if type(vendor) is dict else None,
        )
    if kind == "message_start":
        message = obj.get("message")
        usage = message.get("usage") if type(message) is dict else None
        return EventInfo(False, usage if type(usage) is dict else None, None)
    if kind == "error":
        return EventInfo(False, None, None, message_of(obj.get("error"), "error event"))
    return EventInfo(False, None, None)


class Messages(Dialect):
    name = "messages"
    path = "/v1/messages"
    description = "Anthropic Messages (POST /v1/messages, system and messages, x-api-key)"
    headers = MappingProxyType({"anthropic-version": ANTHROPIC_VERSION})  # with or without a key
    tools = True

    build_body = staticmethod(_body)
    parse_event = staticmethod(_event)  # a plain function: no bound method per event
    collect_calls = staticmethod(messages_calls)
    decode = staticmethod(typed_decode([_DELTA]))

    def non_stream_body(self, spec: RequestSpec, options: DialectOptions) -> dict[str, Any]:
        body = _body(spec, options)
        body["stream"] = False
        body["max_tokens"] = 1
        if "min_tokens" in body:
            body["min_tokens"] = 1
        return body

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key}

    def usage_counts(self, usage: dict[str, Any]) -> tuple[Any, Any]:
        return usage.get("input_tokens"), usage.get("output_tokens")
